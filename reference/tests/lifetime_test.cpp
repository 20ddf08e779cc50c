// The control plane called from inside a call, on the call's own op: the
// call finishes on the chain it started with (nothing it uses is freed under
// it), the next call sees the new state; and code the registry calls back
// (ordering functions, the log sink) may use the control plane, since no
// lock is held while it runs.

#include "support.h"

#include "../src/native_op_table.h"
#include "../src/retired_native_ops.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace native_registry::testing {
namespace {

class LifetimeTest : public RegistryTest,
                     public ::testing::WithParamInterface<EmptyChainPolicy> {
 protected:
  void SetUp() override {
    RegistryTest::SetUp();
    registry().set_empty_chain_policy(GetParam());
  }
};

// A snapshot taken under the mask, restored once it is lifted: the disabled
// unconditional node the mask hid routes again, as its is_enabled says. Under
// the "remove" policy the graph had no router at the snapshot (its chain was
// empty), so the restore must build one, not only republish those it had.
TEST_P(LifetimeTest, ARestoreAfterTheMaskIsLiftedRoutesTheUnconditionalNodeItHid) {
  OverrideOptions unconditional;
  unconditional.unconditional_override = true;
  register_override(mul_cpu(), CondFn{}, fill_impl(9), unconditional, "dsl_u");
  registry().install_graph(mul_cpu());
  registry().deregister_op_overrides({{"dsl_u"}, {}, {}});
  auto mask = std::make_unique<Registry::UnconditionalMask>(registry());
  ASSERT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  const Snapshot under_the_mask = registry().snapshot();
  mask.reset();
  ASSERT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({9})));
  registry().restore(under_the_mask);
  EXPECT_TRUE(registry().is_enabled(*registry().graph(mul_cpu()).at(0)));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({9})))
      << "the node is active, but the restored registry routes nothing to it";
}

TEST_P(LifetimeTest, ACondThatRestoresItsOwnOpFinishesOnTheOldChain) {
  const Snapshot empty = registry().snapshot();
  int conds = 0;
  register_override(
      mul_cpu(),
      [&](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
        ++conds;
        registry().restore(empty);
        return true;
      },
      fill_impl(7));
  registry().install_all();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_EQ(conds, 1);
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().check_invariants();
}

TEST_P(LifetimeTest, AnImplThatRestoresItsOwnOpReturnsItsResult) {
  const Snapshot empty = registry().snapshot();
  register_override(mul_cpu(), constant_cond(true),
                    impl_doing([&] { registry().restore(empty); }, 5));
  registry().install_all();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({5})));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_P(LifetimeTest, AnImplThatDisablesItsOwnDslFinishes) {
  register_override(mul_cpu(), constant_cond(true),
                    impl_doing([&] { registry().deregister_op_overrides({{"test_dsl"}, {}, {}}); }, 6));
  registry().install_all();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({6})));
  EXPECT_EQ(registry().router_state(mul_cpu()), GetParam() == EmptyChainPolicy::kRemoveRouter
                                                    ? RouterState::kAbsent
                                                    : RouterState::kDormant);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().check_invariants();
}

TEST_P(LifetimeTest, AnImplMayReinstallAndReorderItsOwnGraph) {
  register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "other");
  register_override(mul_cpu(), constant_cond(true), impl_doing([&] {
                      registry().install_graph(mul_cpu(), InstallMode::kReinstall);
                      registry().reorder_graphs(
                          [](const std::string&, const std::string&, const Graph& graph) {
                            return Graph(graph.rbegin(), graph.rend());
                          },
                          true);
                      registry().install_all();
                    }, 3));
  registry().install_all();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));
  registry().check_invariants();
}

// A `_native` op's impl that retires its own op finishes too.
TEST_P(LifetimeTest, ANativeOpsImplThatRetiresItFinishes) {
  const Snapshot empty = registry().snapshot();
  const NodePtr node = register_override(mul_cpu(), constant_cond(false),
                                         impl_doing([&] { registry().restore(empty); }, 4));
  registry().install_all();
  // Held, as whatever calls a `_native` op holds it (a torch.ops object).
  auto native = hold_native_op(node->node_id);
  ASSERT_TRUE(native);
  Stack stack{tensor({2}), tensor({4})};
  native->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({4})));
  Stack again{tensor({2}), tensor({4})};
  EXPECT_THROW(native->callBoxed(&again), c10::Error);
}

// More retired ops held outside than the store's floor (64): the store's
// bound follows what its last sweep kept, so the invariants hold with all of
// them held and after they are let go. In a death test's child: the store is
// process-wide, and one that kept 100 ops sweeps only once it doubles, which
// would keep later tests' let-go ops defined.
using RetiredStoreTest = RegistryTest;

TEST_F(RetiredStoreTest, MoreHeldOpsThanTheSweepFloorStayWithinTheStoresBound) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const Snapshot empty = registry().snapshot();
        std::vector<NodePtr> nodes;
        for (int i = 0; i < 100; ++i) {
          nodes.push_back(register_override(mul_cpu(), constant_cond(false), fill_impl(1), {},
                                            "held_" + std::to_string(i)));
        }
        registry().install_all();
        std::vector<std::shared_ptr<const c10::OperatorHandle>> held;
        for (const NodePtr& node : nodes) held.push_back(hold_native_op(node->node_id));
        if (std::count(held.begin(), held.end(), nullptr) != 0) std::_Exit(2);
        registry().restore(empty);  // retires all 100, each held: the store keeps them
        registry().check_invariants();
        // 20 more held: the store (120) waits for its doubling before a sweep,
        // within its bound of twice what the last one kept.
        for (int i = 0; i < 20; ++i) {
          const NodePtr node = register_override(mul_cpu(), constant_cond(false), fill_impl(1), {},
                                                 "more_" + std::to_string(i));
          registry().install_all();
          held.push_back(hold_native_op(node->node_id));
        }
        registry().restore(empty);
        registry().check_invariants();
        held.clear();
        registry().restore(empty);
        registry().check_invariants();
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The sweep is amortised: a store over the floor that has not doubled since
// its last sweep is not swept, so an op let go stays kept (and defined) until
// it has; then one sweep undefines it. Sweeping at every reclaim would cost
// each teardown a look-up per kept op. In a death test's child, as above.
TEST_F(RetiredStoreTest, AStoreOverTheFloorIsSweptOnlyOnceItHasDoubled) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto fail = [](const char* what) {
          std::fprintf(stderr, "%s (the store keeps %zu)\n", what, detail::retired_counts().kept);
          std::fflush(stderr);
          std::_Exit(1);
        };
        auto defined = [](const NodePtr& node) {
          return c10::Dispatcher::singleton().findSchema({"_native::" + node->node_id, ""}).has_value();
        };
        if (detail::retired_counts().kept != 0) fail("the child's store was not empty");
        const Snapshot empty = registry().snapshot();
        std::vector<std::shared_ptr<const c10::OperatorHandle>> held;
        auto retire_held = [&](int count, const std::string& prefix) {
          std::vector<NodePtr> nodes;
          for (int i = 0; i < count; ++i) {
            nodes.push_back(register_override(mul_cpu(), constant_cond(false), fill_impl(1), {},
                                              prefix + std::to_string(i)));
          }
          registry().install_all();
          for (const NodePtr& node : nodes) held.push_back(hold_native_op(node->node_id));
          registry().restore(empty);  // retires them, each held: the store keeps them
          return nodes;
        };
        const std::vector<NodePtr> first = retire_held(100, "held_");
        if (detail::retired_counts().kept != 100) fail("the sweep did not keep the 100 held ops");
        held.front().reset();  // nothing holds the first op any more
        registry().restore(empty);  // a teardown's reclaim, the store at 100 of its 200
        if (detail::retired_counts().kept != 100) fail("a store that had not doubled was swept");
        if (!defined(first.front())) fail("the op let go was undefined before the store doubled");
        // 201: past twice what the last sweep kept (by one, so that when just at
        // twice the sweep comes stays open: see equivalent_mutants.toml).
        retire_held(101, "more_");
        if (detail::retired_counts().kept != 200) fail("the doubled store's sweep kept the op let go");
        if (defined(first.front())) fail("the op let go is still defined after the sweep");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The store's bound as check_invariants checks it: a table that retires more
// held ops than the floor, without the reclaim that every teardown runs, is
// caught by its check, which names the bound (std::logic_error, as every
// invariant). In a death test's child, for the reason above.
TEST_F(RetiredStoreTest, TheCheckCatchesAStoreOverItsBound) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Graph chain;
        for (size_t i = 0; i <= detail::kRetiredSweepFloor; ++i) {
          chain.push_back(register_override(mul_cpu(), constant_cond(false), fill_impl(1), {},
                                            "over_" + std::to_string(i)));
        }
        detail::NativeOpTable table;
        detail::Released released;
        table.activate(chain, nullptr, released);
        std::vector<std::shared_ptr<const c10::OperatorHandle>> held;
        for (const NodePtr& node : chain) held.push_back(hold_native_op(node->node_id));
        for (const NodePtr& node : chain) table.retire(node->node_id, released);
        try {
          table.check();
          std::_Exit(2);  // missed
        } catch (const std::logic_error& e) {
          if (std::string(e.what()).find("over its bound of 64") == std::string::npos) std::_Exit(3);
        }
        held.clear();
        detail::reclaim_retired();  // the teardown's sweep: none held, none kept
        table.check();
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The table's check catches an op it keeps as active that is not (released
// behind its back: ops() hands out the ops themselves), naming it
// (std::logic_error, as every invariant).
using NativeOpTableTest = RegistryTest;

TEST_F(NativeOpTableTest, TheCheckCatchesAnOpKeptAsActiveThatIsNot) {
  const NodePtr node = register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  detail::NativeOpTable table;
  detail::Released released;
  table.activate({node}, nullptr, released);
  table.check();
  released.push_back(table.ops().at(node->node_id)->release());
  EXPECT_THAT([&] { table.check(); },
              ::testing::ThrowsMessage<std::logic_error>(
                  ::testing::HasSubstr("_native::" + node->node_id + " is retired but kept as active")));
}

INSTANTIATE_TEST_SUITE_P(Policies, LifetimeTest,
                         ::testing::Values(EmptyChainPolicy::kKeepDormantRouter,
                                           EmptyChainPolicy::kRemoveRouter),
                         [](const auto& info) {
                           return info.param == EmptyChainPolicy::kRemoveRouter
                                      ? std::string("Remove")
                                      : std::string("KeepDormant");
                         });

// What erase_graph lets go of, and what a registry's destruction does (its
// graphs: the nodes and the callables they hold), goes to the release sink,
// not freed on the spot: the Python binding's sink frees it under the GIL.
TEST(ReleaseSinkTest, ErasedGraphsAndTheGraphsOfADestroyedRegistryGoToTheSink) {
  auto sunk = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  auto registry = std::make_unique<Registry>();
  registry->set_release_sink([sunk](std::vector<std::shared_ptr<const void>>&& released) {
    for (auto& object : released) sunk->push_back(std::move(object));
  });
  // A cond holding a witness: alive for as long as its node is.
  auto held_by = [](std::weak_ptr<int>& witness) {
    auto held = std::make_shared<int>(0);
    witness = held;
    return [held](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return false; };
  };
  std::weak_ptr<int> erased, destroyed;
  registry->register_op_override("d", "aten", "mul.Tensor", "CPU", held_by(erased), fill_impl(1));
  registry->register_op_override("d", "aten", "bmm", "CPU", held_by(destroyed), fill_impl(1));
  registry->erase_graph(mul_cpu());
  EXPECT_FALSE(erased.expired()) << "erase_graph freed the graph itself";
  sunk->clear();
  EXPECT_TRUE(erased.expired());
  registry.reset();
  EXPECT_FALSE(destroyed.expired()) << "the registry's destruction freed its graphs itself";
  sunk->clear();
  EXPECT_TRUE(destroyed.expired());
}

// With the registry's lock held while these run, each would deadlock (the
// lock is a plain mutex): the test would hang and meson's timeout fail it.
using CallbackTest = RegistryTest;

TEST_F(CallbackTest, AnOrderingFunctionMayCallTheControlPlane) {
  register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "a");
  register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "b");
  registry().install_all();
  registry().reorder_graphs(
      [&](const std::string&, const std::string&, const Graph& graph) {
        EXPECT_EQ(registry().graph(mul_cpu()).size(), 2u);
        registry().deregister_op_overrides({{"nobody"}, {}, {}});
        return Graph(graph.rbegin(), graph.rend());
      },
      true);
  EXPECT_EQ(registry().graph(mul_cpu()).at(0)->dsl_name, "b");
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({2})));
}

TEST_F(CallbackTest, AGraphChangedByItsOrderingFunctionIsKeptWithAWarning) {
  register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "a");
  registry().reorder_graphs([&](const std::string&, const std::string&, const Graph& graph) {
    register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "late");
    return graph;  // unchanged, so nothing to apply
  });
  EXPECT_EQ(registry().graph(mul_cpu()).size(), 2u);
  warnings.clear();
  registry().reorder_graphs([&](const std::string&, const std::string&, const Graph& graph) {
    register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "later");
    return Graph(graph.rbegin(), graph.rend());
  });
  EXPECT_EQ(registry().graph(mul_cpu()).size(), 3u);
  EXPECT_EQ(registry().graph(mul_cpu()).back()->dsl_name, "later");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], ::testing::HasSubstr("changed while the ordering function ran"));
  warnings.clear();
}

TEST_F(CallbackTest, TheLogSinkMayCallTheControlPlane) {
  std::vector<size_t> keys_seen;
  registry().set_log_sink([&](LogLevel, const std::string&) {
    keys_seen.push_back(registry().graph_keys().size());
  });
  register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  registry().deregister_op_overrides({{"test_dsl"}, {}, {}});
  registry().reenable_op_overrides({{"test_dsl"}, {}, {}});
  EXPECT_EQ(keys_seen, (std::vector<size_t>{1, 1}));
}

TEST_F(CallbackTest, AnAbortErrorFromTheOrderingFunctionChangesNothing) {
  register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "a");
  register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "b");
  register_override(bmm_cpu(), constant_cond(false), fill_impl(1), {}, "a");
  const Graph before = registry().graph(mul_cpu());
  EXPECT_THROW(registry().reorder_graphs([](const std::string& op, const std::string&,
                                            const Graph& graph) -> Graph {
    if (op == "mul.Tensor") throw AbortError("stop");
    return Graph(graph.rbegin(), graph.rend());
  }),
               AbortError);
  EXPECT_EQ(registry().graph(mul_cpu()), before);
  EXPECT_TRUE(warnings.empty());
}

}  // namespace
}  // namespace native_registry::testing
