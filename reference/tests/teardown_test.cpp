// Snapshot and restore: the registry and every dispatch table it touched go
// back exactly, including after an override replaced one that was live.

#include "support.h"

namespace native_registry::testing {
namespace {

using ::testing::ElementsAre;

class TeardownTest : public RegistryTest {
 protected:
  fixtures::DispatcherFingerprint fingerprint() {
    return fixtures::DispatcherFingerprint::capture(watched_ops());
  }
};

thread_local bool t_in_release_sink = false;

// A release sink that frees what it gets, marking the time it does.
void free_in_sink(std::vector<std::shared_ptr<const void>>&& retired) {
  t_in_release_sink = true;
  retired.clear();
  t_in_release_sink = false;
}

// Records in `freed`, when destroyed, whether a release sink was freeing it.
struct FreedWhere {
  explicit FreedWhere(std::shared_ptr<std::vector<bool>> log) : freed(std::move(log)) {}
  FreedWhere(const FreedWhere&) = delete;
  ~FreedWhere() { freed->push_back(t_in_release_sink); }
  std::shared_ptr<std::vector<bool>> freed;
};

// fill_impl(value), holding a FreedWhere that reports to `freed`.
ImplFn fill_impl_reporting(double value, std::shared_ptr<std::vector<bool>> freed) {
  auto probe = std::make_shared<FreedWhere>(std::move(freed));
  return [probe, fill = fill_impl(value)](const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                          Stack* stack) { fill(op, keys, stack); };
}

// A default-made Snapshot holds no state: restoring it is a bad argument
// (the type a caller checks for), and leaves the registry as it was.
TEST_F(TeardownTest, RestoringAnEmptySnapshotIsABadArgumentAndChangesNothing) {
  const NodePtr node = register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  registry().install_graph(mul_cpu());
  const auto before = fingerprint();
  try {
    registry().restore(Snapshot{});
    FAIL() << "an empty snapshot was restored";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "restore: the snapshot is empty");
  }
  EXPECT_EQ(fingerprint().difference(before), "");
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(node));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
}

// A router whose graph was erased (erase_graph keeps the router) comes back
// from a snapshot taken under another unconditional mask with the chain the
// mask of now allows of its graph: none, the graph being gone.
TEST_F(TeardownTest, RestoreUnderAnotherMaskOfARouterWithoutItsGraphRoutesNothing) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  registry().install_graph(mul_cpu());
  registry().erase_graph(mul_cpu());
  const Snapshot erased = registry().snapshot();
  Registry::UnconditionalMask mask(registry());
  registry().restore(erased);
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kDormant);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().check_invariants();
}

TEST_F(TeardownTest, RestoreRemovesRoutersAndNativeOpsInstalledSince) {
  const auto before = fingerprint();
  const Snapshot snapshot = registry().snapshot();
  register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  register_override(bmm_cpu(), constant_cond(false), fill_impl(1));
  register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true), fill_impl(1));
  registry().install_all();
  ASSERT_NE(fingerprint().difference(before), "");
  registry().restore(snapshot);
  EXPECT_EQ(fingerprint().difference(before), "");
  EXPECT_TRUE(registry().graph_keys().empty());
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(TeardownTest, RestoreRebuildsAReplacedOverrideOnTheOpsOwnKernel) {
  // Stands in for an override that was live before the test. It declines
  // every call, so what the op returns is entirely its fallback.
  auto declines = std::make_shared<std::atomic<int>>(0);
  register_override(mul_cpu(), counting_cond(declines, false), fill_impl(11));
  registry().install_graph(mul_cpu());
  const Snapshot snapshot = registry().snapshot();
  const auto live = fingerprint();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));

  // The test's own override replaces it at the same key.
  register_override(mul_cpu(), constant_cond(true), fill_impl(99));
  registry().install_graph(mul_cpu(), InstallMode::kReinstall);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({99})));

  registry().restore(snapshot);
  declines->store(0);
  // Had the rebuild captured the replacement as its fallback, this would be 99.
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(declines->load(), 1);
  EXPECT_EQ(registry().graph(mul_cpu()).size(), 1u);
  // The table holds one router again, as before, not a stack of two.
  const std::string label = "aten::mul.Tensor";
  EXPECT_EQ(fingerprint().tables.at(label).size(), live.tables.at(label).size());
}

TEST_F(TeardownTest, RestoreKeepsAnUnreplacedRouterAndRepublishesItsChain) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_graph(mul_cpu());
  const Snapshot snapshot = registry().snapshot();
  const auto live = fingerprint();
  registry().deregister_op_overrides({{"test_dsl"}, {}, {}});
  registry().allow_namespace(fixtures::kTestNamespace);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().restore(snapshot);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_TRUE(registry().filters().dsl_names.empty());
  EXPECT_FALSE(registry().is_namespace_allowed(fixtures::kTestNamespace));
  EXPECT_EQ(fingerprint().difference(live), "");
}

// A registration publishes nothing, so a router's chain may lag its graph at
// the snapshot; restore brings back the chain, not the graph's enabled one
// (and no `_native` op for the unpublished node). Found by the model test.
TEST_F(TeardownTest, RestoreBringsBackAChainThatLaggedItsGraph) {
  register_override(mul_cpu(), constant_cond(false), fill_impl(7), {}, "dsl_a");
  registry().install_graph(mul_cpu());
  auto late = register_override(mul_cpu(), constant_cond(true), fill_impl(9), {}, "dsl_b");
  const Snapshot snapshot = registry().snapshot();
  const auto at_snapshot = fingerprint();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().install_graph(mul_cpu());  // catches up
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({9})));
  registry().restore(snapshot);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(registry().published_chain(mul_cpu()).size(), 1u);
  EXPECT_EQ(fingerprint().difference(at_snapshot), "");
  EXPECT_EQ(registry().graph(mul_cpu()).back(), late);
}

TEST_F(TeardownTest, RestoreBringsBackGraphsIndexesAndFilters) {
  auto a = register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  registry().deregister_op_overrides({{"dsl_x"}, {"op_x"}, {"CUDA"}});
  const Snapshot snapshot = registry().snapshot();
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_b");
  register_override(bmm_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_b");
  registry().reenable_op_overrides({{"dsl_x"}, {"op_x"}, {"CUDA"}});
  registry().restore(snapshot);
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(a));
  EXPECT_THAT(registry().graph_keys(), ElementsAre(mul_cpu()));
  EXPECT_EQ(registry().graphs_by_dsl_name().count("dsl_b"), 0u);
  EXPECT_THAT(registry().filters().dsl_names, ElementsAre("dsl_x"));
  EXPECT_THAT(registry().filters().op_symbols, ElementsAre("op_x"));
  EXPECT_THAT(registry().filters().dispatch_keys, ElementsAre("CUDA"));
}

// A custom-op library unloaded between snapshot and restore: restore brings
// back the registry's records, warns about each router and `_native` op it
// cannot rebuild, and leaves nothing half-built.
TEST_F(TeardownTest, RestoreWarnsAboutOpsThatNoLongerExist) {
  const std::string ns = "_native_registry_test_unloaded";
  const GraphKey key = twice_cpu(ns);
  const Snapshot empty = registry().snapshot();
  auto library = std::make_unique<fixtures::ScopedTwiceNamespace>(ns, 5.0);
  registry().allow_namespace(ns);
  const NodePtr node = register_override(key, constant_cond(true), fill_impl(9));
  registry().install_graph(key);
  EXPECT_TRUE(same(library->twice(tensor({1})), tensor({9})));
  const Snapshot with_router = registry().snapshot();
  auto held = hold_native_op(node->node_id);  // as a program recorded with it would
  registry().restore(empty);
  library.reset();  // the op is gone
  registry().restore(with_router);
  EXPECT_THAT(registry().graph(key), ElementsAre(node));
  EXPECT_EQ(registry().router_state(key), RouterState::kAbsent);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], ::testing::HasSubstr(key.to_string() + " (for _native::" +
                                                node->node_id + ")"));
  EXPECT_THAT(warnings[1], ::testing::HasSubstr("restore: the op of " + key.to_string() +
                                                " no longer exists"));
  // Its `_native` op stays retired while held: defined, raising on every
  // call; undefined at the next teardown once nothing holds it.
  ASSERT_TRUE(c10::Dispatcher::singleton().findSchema({"_native::" + node->node_id, ""}));
  Stack stack{tensor({1})};
  EXPECT_THROW(held->callBoxed(&stack), c10::Error);
  held.reset();
  registry().restore(empty);
  EXPECT_FALSE(c10::Dispatcher::singleton().findSchema({"_native::" + node->node_id, ""}));
  warnings.clear();
}

// As above, the op defined again with another schema: the restore warns
// once for the router it cannot rebuild and once for the `_native` op, each
// saying what changed.
TEST_F(TeardownTest, RestoreWarnsAboutARouterAndANativeOpWhoseOpChangedItsSchema) {
  const std::string ns = "_native_registry_test_changed";
  const GraphKey key = twice_cpu(ns);
  const Snapshot empty = registry().snapshot();
  auto library = std::make_unique<fixtures::ScopedTwiceNamespace>(ns, 5.0);
  const NodePtr node = register_override(key, constant_cond(true), fill_impl(9));
  registry().install_graph(key);
  const Snapshot with_router = registry().snapshot();
  registry().restore(empty);
  library.reset();
  torch::Library changed(torch::Library::DEF, ns, std::nullopt, __FILE__, __LINE__);
  changed.def("twice(Tensor x, Tensor y) -> Tensor");
  registry().restore(with_router);
  EXPECT_EQ(registry().router_state(key), RouterState::kAbsent);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], ::testing::HasSubstr(key.to_string() + " (for _native::" +
                                                node->node_id + ": op " + ns + "::twice changed"));
  EXPECT_THAT(warnings[1], ::testing::HasSubstr("restore: the op of " + key.to_string() + " (op " +
                                                ns + "::twice changed"));
  registry().restore(empty);
  warnings.clear();
}

// A snapshot's nodes held only by it are visited for the host's collector;
// while a copy shares its state, none is (the host would count its holds twice).
TEST_F(TeardownTest, ASnapshotVisitsTheNodesOnlyItHoldsUnlessACopySharesThem) {
  const Snapshot empty = registry().snapshot();
  register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  const Snapshot with_node = registry().snapshot();
  registry().restore(empty);  // the node is the snapshot's alone
  int visited = 0;
  auto count = [&visited](const OverrideNode&) { ++visited; };
  with_node.visit_nodes_held_only_here(count);
  EXPECT_EQ(visited, 1);
  {
    const Snapshot copy = with_node;
    visited = 0;
    with_node.visit_nodes_held_only_here(count);
    EXPECT_EQ(visited, 0) << "visited while a copy shares the state";
  }
  visited = 0;
  with_node.visit_nodes_held_only_here(count);
  EXPECT_EQ(visited, 1);
  visited = 0;
  Snapshot().visit_nodes_held_only_here(count);
  EXPECT_EQ(visited, 0);
}

// What a teardown retires reaches the release sink, which frees it (a host's
// callables under its own lock, the GIL): none of it is freed elsewhere.
TEST_F(TeardownTest, WhatARestoreRetiresIsFreedByTheReleaseSink) {
  registry().set_release_sink(free_in_sink);
  const Snapshot empty = registry().snapshot();
  auto freed = std::make_shared<std::vector<bool>>();
  register_override(mul_cpu(), constant_cond(true), fill_impl_reporting(7, freed));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  registry().restore(empty);
  EXPECT_THAT(*freed, ElementsAre(true));
}

TEST_F(TeardownTest, ACoverageCheckReplacedIsFreedByTheReleaseSink) {
  registry().set_release_sink(free_in_sink);
  auto freed = std::make_shared<std::vector<bool>>();
  auto probe = std::make_shared<FreedWhere>(freed);
  registry().set_coverage_check(
      [probe](const GraphKey&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
        return false;
      });
  probe.reset();
  registry().set_coverage_check({});
  EXPECT_THAT(*freed, ElementsAre(true));
}

// A registry's destruction takes its routers out of the dispatcher before
// its release sink runs, and hands the sink all they held.
TEST_F(TeardownTest, DestroyingARegistryTakesItsRoutersOutBeforeItsReleaseSinkRuns) {
  auto freed = std::make_shared<std::vector<bool>>();
  std::vector<at::Tensor> seen_by_sink;
  {
    Registry scoped;
    scoped.register_op_override("d", "aten", "mul.Tensor", "CPU", constant_cond(true),
                                fill_impl_reporting(4, freed));
    scoped.install_all();
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({4})));
    scoped.set_release_sink([&seen_by_sink](std::vector<std::shared_ptr<const void>>&& retired) {
      seen_by_sink.push_back(call_mul(tensor({2}), tensor({4})));
      free_in_sink(std::move(retired));
    });
  }
  ASSERT_FALSE(seen_by_sink.empty());
  EXPECT_TRUE(same(seen_by_sink.back(), tensor({8}))) << "the router still routed while the sink ran";
  EXPECT_THAT(*freed, ElementsAre(true));
}

TEST_F(TeardownTest, SnapshotsOfAnotherRegistryAndEmptySnapshotsAreRefused) {
  Registry other;
  EXPECT_THROW(registry().restore(other.snapshot()), InvalidArgumentError);
  EXPECT_THROW(registry().restore(Snapshot()), InvalidArgumentError);
}

TEST_F(TeardownTest, RestoreAcrossSnapshotsTakenInSequence) {
  const Snapshot empty = registry().snapshot();
  register_override(mul_cpu(), constant_cond(true), fill_impl(5));
  registry().install_graph(mul_cpu());
  const Snapshot with_override = registry().snapshot();
  registry().restore(empty);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  // Forward again: the router and its `_native` op come back.
  registry().restore(with_override);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({5})));
  const auto node = registry().graph(mul_cpu()).at(0);
  EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({"_native::" + node->node_id, ""}));
}

TEST_F(TeardownTest, DestroyingARegistryTearsDownItsRouters) {
  const auto before = fingerprint();
  {
    Registry scoped;
    scoped.register_op_override("d", "aten", "mul.Tensor", "CPU", constant_cond(true),
                                fill_impl(4));
    scoped.install_all();
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({4})));
  }
  EXPECT_EQ(fingerprint().difference(before), "");
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(TeardownTest, GlobalRegistryRestoresLikeAnyOther) {
  Registry& global = Registry::global();
  EXPECT_EQ(&global, &Registry::global());
  const auto before = fingerprint();
  const Snapshot snapshot = global.snapshot();
  global.register_op_override("d", "aten", "mul.Tensor", "CPU", constant_cond(true),
                              fill_impl(4));
  global.install_all();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({4})));
  global.restore(snapshot);
  EXPECT_EQ(fingerprint().difference(before), "");
}

// schema_removal_epoch() is a count of the schemas removed since the watch
// began, from zero: a fresh process (a threadsafe death test's child runs
// only this test) reads 0, then 1 once a schema it defined is gone.
TEST(SchemaRemovalEpochTest, CountsTheSchemasRemovedSinceTheWatchBeganFromZero) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watch_schema_removals();
        if (schema_removal_epoch() != 0) std::_Exit(2);
        {
          torch::Library defined(torch::Library::DEF, "_native_registry_test_epoch", std::nullopt,
                                 __FILE__, __LINE__);
          defined.def("gone(Tensor x) -> Tensor");
          if (schema_removal_epoch() != 0) std::_Exit(3);
        }
        std::_Exit(schema_removal_epoch() == 1 ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace native_registry::testing
