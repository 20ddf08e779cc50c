// Edges of the control plane that generated mutants of the reference found
// unpinned: an ordering function that fails or repeats a node for one graph
// among several, a reorder that must install nothing, a registration made
// from inside an ordering function, `_native` ops of nodes added to or
// installed again after a scope, and installing a graph whose chain is empty.

#include "suite.h"

#include <ATen/ops/add.h>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

namespace control_plane_edges {

Key add_key() { return {"aten", "add.Tensor", "CPU"}; }
at::Tensor mul_2_3_by_4_5() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
at::Tensor add_2_3_to_4_5() { return at::add(tensor({2, 3}), tensor({4, 5})); }

std::vector<std::string> dsl_names(RegistryAdapter& adapter, const Key& key) {
  std::vector<std::string> names;
  for (const NodeInfo& node : adapter.graph(key)) names.push_back(node.dsl_name);
  return names;
}

std::vector<std::string> reversed_ids(const std::vector<NodeInfo>& graph) {
  std::vector<std::string> ids;
  for (auto it = graph.rbegin(); it != graph.rend(); ++it) ids.push_back(it->node_id);
  return ids;
}

}  // namespace control_plane_edges

namespace cpe = control_plane_edges;

TEST_P(Conformance, AnOrderingFunctionFailingOnOneGraphStillReordersTheOthers) {
  BEHAVIOUR("ordering.failure-spares-other-graphs");
  for (const std::string failing_op : {"mul.Tensor", "add.Tensor"}) {
    SCOPED_TRACE("failing on " + failing_op);
    std::unique_ptr<Scope> inner = adapter().scope();
    for (const Key& key : {mul_key(), cpe::add_key()}) {
      add(key, constant_cond(true), fill_impl(1), "dsl_a");
      add(key, constant_cond(true), fill_impl(1), "dsl_b");
    }
    const size_t warned = adapter().warnings().size();
    adapter().reorder([&](const std::string& op, const std::string&, const std::vector<NodeInfo>& graph) {
      if (op == failing_op) throw std::runtime_error("no order for this one");
      return cpe::reversed_ids(graph);
    });
    EXPECT_EQ(adapter().warnings().size(), warned + 1);
    for (const Key& key : {mul_key(), cpe::add_key()}) {
      const std::vector<std::string> expected =
          key.op_symbol == failing_op ? std::vector<std::string>{"dsl_a", "dsl_b"}
                                      : std::vector<std::string>{"dsl_b", "dsl_a"};
      EXPECT_EQ(cpe::dsl_names(adapter(), key), expected) << key.op_symbol;
    }
  }
}

TEST_P(Conformance, AnOrderingResultRepeatingANodeKeepsThatGraphOnly) {
  BEHAVIOUR("ordering.invalid-result-keeps-graph");
  for (const std::string bad_op : {"mul.Tensor", "add.Tensor"}) {
    SCOPED_TRACE("repeating a node of " + bad_op);
    std::unique_ptr<Scope> inner = adapter().scope();
    for (const Key& key : {mul_key(), cpe::add_key()}) {
      add(key, constant_cond(true), fill_impl(1), "dsl_a");
      add(key, constant_cond(true), fill_impl(1), "dsl_b");
    }
    const size_t warned = adapter().warnings().size();
    std::string repeated;
    adapter().reorder([&](const std::string& op, const std::string&, const std::vector<NodeInfo>& graph) {
      if (op != bad_op) return cpe::reversed_ids(graph);
      repeated = graph.at(0).node_id;
      return std::vector<std::string>{repeated, repeated, graph.at(1).node_id};
    });
    const std::vector<std::string> warnings = adapter().warnings();
    ASSERT_EQ(warnings.size(), warned + 1);
    EXPECT_THAT(warnings.back(), ::testing::HasSubstr(repeated)) << "the warning names the node";
    for (const Key& key : {mul_key(), cpe::add_key()}) {
      const std::vector<std::string> expected =
          key.op_symbol == bad_op ? std::vector<std::string>{"dsl_a", "dsl_b"}
                                  : std::vector<std::string>{"dsl_b", "dsl_a"};
      EXPECT_EQ(cpe::dsl_names(adapter(), key), expected) << key.op_symbol;
    }
  }
}

TEST_P(Conformance, AReorderLeavesTheDispatcherAlone) {
  BEHAVIOUR("ordering.reorder-installs-nothing");
  for (const Key& key : {mul_key(), cpe::add_key()}) {
    add(key, constant_cond(true), fill_impl(7), "dsl_a");
    add(key, constant_cond(true), fill_impl(8), "dsl_b");
  }
  adapter().install(mul_key());
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({7, 7})));
  adapter().reorder([](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
    return cpe::reversed_ids(graph);
  });
  EXPECT_EQ(cpe::dsl_names(adapter(), mul_key()), (std::vector<std::string>{"dsl_b", "dsl_a"}));
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({7, 7}))) << "the installed router took the new order";
  EXPECT_FALSE(adapter().router_installed(cpe::add_key())) << "a reorder installed a graph";
  EXPECT_TRUE(same(cpe::add_2_3_to_4_5(), tensor({6, 8})));
  adapter().install(mul_key());
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({8, 8})));
}

TEST_P(Conformance, ARegistrationMadeByTheOrderingFunctionIsKept) {
  BEHAVIOUR("ordering.registration-during-ordering-kept");
  REQUIRE_FEATURE("reentrant-control-plane");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  add(mul_key(), constant_cond(true), fill_impl(8), "dsl_b");
  bool registered = false;
  adapter().reorder([&](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
    if (!registered) {
      registered = true;
      add(mul_key(), constant_cond(true), fill_impl(9), "dsl_late");
    }
    return cpe::reversed_ids(graph);
  });
  EXPECT_THAT(cpe::dsl_names(adapter(), mul_key()), ::testing::Contains("dsl_late"))
      << "the ordering function's registration was lost";
}

TEST_P(Conformance, ANodeAddedToAnInstalledGraphGetsItsNativeOp) {
  BEHAVIOUR("installation.native-ops-follow-reinstalls");
  REQUIRE_FEATURE("native-op-meta");
  add(mul_key(), constant_cond(false), fill_impl(7), "dsl_a");
  adapter().install(mul_key());
  add(mul_key(), constant_cond(true), fill_impl(8), "dsl_b");
  adapter().install(mul_key());
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({8, 8})));
  const std::vector<NodeInfo> graph = adapter().graph(mul_key());
  ASSERT_EQ(graph.size(), 2u);
  for (size_t i = 0; i < graph.size(); ++i) {
    auto native = adapter().native_op(graph[i]);
    ASSERT_TRUE(native.has_value()) << "no _native op for " << graph[i].node_id;
    Stack stack{tensor({2, 3}), tensor({4, 5})};
    native->callBoxed(&stack);
    const float value = i == 0 ? 7.f : 8.f;
    EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({value, value}))) << graph[i].node_id;
  }
}

TEST_P(Conformance, ANodeInstalledAgainAfterAScopeKeepsItsNativeOp) {
  BEHAVIOUR("installation.native-ops-follow-reinstalls");
  REQUIRE_FEATURE("native-op-meta");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  {
    // (A scope may start empty: what it installs is not asserted.)
    std::unique_ptr<Scope> inner = adapter().scope();
    adapter().install(mul_key());
  }
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({8, 15})));
  adapter().install(mul_key());
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({7, 7})));
  auto native = adapter().native_op(adapter().graph(mul_key()).at(0));
  ASSERT_TRUE(native.has_value());
  Stack stack{tensor({2, 3}), tensor({4, 5})};
  native->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({7, 7})));
}

TEST_P(Conformance, ANodeRegisteredDisabledIntoAnInstalledGraphGetsItsNativeOpOnceEnabled) {
  BEHAVIOUR("installation.native-ops-follow-reinstalls");
  REQUIRE_FEATURE("native-op-meta");
  add(mul_key(), constant_cond(false), fill_impl(7), "dsl_a");
  adapter().install(mul_key());
  adapter().disable({{"dsl_b"}, {}, {}});  // before dsl_b exists
  add(mul_key(), constant_cond(true), fill_impl(8), "dsl_b");
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({8, 15})));
  adapter().enable({{"dsl_b"}, {}, {}});  // goes into the chain of the router already in
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({8, 8})));
  auto native = adapter().native_op(adapter().graph(mul_key()).at(1));
  ASSERT_TRUE(native.has_value()) << "no _native op for the enabled node";
  Stack stack{tensor({2, 3}), tensor({4, 5})};
  native->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({8, 8})));
}

// A disabled override's `_native` op still runs its impl (programs recorded
// with it call it by name), and leaving a scope entered meanwhile keeps it:
// the scope's entry had it, though no router routes to it.
TEST_P(Conformance, TheNativeOpOfADisabledOverrideOutlivesAScopeEnteredWhileDisabled) {
  BEHAVIOUR("teardown.native-op-of-a-disabled-override-kept");
  REQUIRE_FEATURE("native-op-meta");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  adapter().install(mul_key());
  adapter().disable({{"dsl_a"}, {}, {}});
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({8, 15})));
  { std::unique_ptr<Scope> inner = adapter().scope(); }
  auto native = adapter().native_op(adapter().graph(mul_key()).at(0));
  ASSERT_TRUE(native.has_value()) << "no _native op for the disabled override after the scope";
  Stack stack{tensor({2, 3}), tensor({4, 5})};
  native->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({7, 7})));
}

TEST_P(Conformance, InstallingAllSkipsAnUnresolvableOpWhoseOverridesAreAllDisabled) {
  BEHAVIOUR("validation.empty-chain-needs-no-op");
  REQUIRE_FEATURE("namespaces");
  add(twice_key(kMissingNamespace), constant_cond(true), fill_impl(1), "dsl_gone");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_here");
  adapter().disable({{"dsl_gone"}, {}, {}});
  EXPECT_NO_THROW(adapter().install_all()) << "no router is needed where no override is enabled";
  EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({7, 7})));
}

TEST_P(Conformance, DisablingNamesNoGraphHasChangesNothing) {
  BEHAVIOUR("filters.unknown-names-change-nothing");
  // Several graphs, so that every index holds more than one entry.
  for (const Key& key : {mul_key(), cpe::add_key(), Key{"aten", "mul.Tensor", "AutocastCPU"}}) {
    add(key, constant_cond(true), fill_impl(7), "dsl_a");
  }
  add(mul_key(), constant_cond(true), fill_impl(8), "dsl_b");
  adapter().install(mul_key());
  const std::vector<Filter> filters{{{"never_registered_name"}, {}, {}},
                                    {{}, {"never_registered_name"}, {}},
                                    {{}, {}, {"never_registered_name"}}};
  for (const Filter& filter : filters) {
    adapter().disable(filter);
    for (const Key& key : {mul_key(), cpe::add_key()}) {
      for (const NodeInfo& node : adapter().graph(key)) EXPECT_TRUE(node.active) << node.node_id;
    }
    EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({7, 7})));
    adapter().enable(filter);
    EXPECT_TRUE(same(cpe::mul_2_3_by_4_5(), tensor({7, 7})));
  }
}

}  // namespace
}  // namespace conformance
