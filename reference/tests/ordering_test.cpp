// Reordering graphs with a user ordering function, and what happens when the
// function fails or returns something that is not a reordering.

#include "support.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace native_registry::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class OrderingTest : public RegistryTest {
 protected:
  void SetUp() override {
    RegistryTest::SetUp();
    c_ = register_override(mul_cpu(), constant_cond(true), fill_impl(3), {}, "dsl_c");
    a_ = register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
    b_ = register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "dsl_b");
  }
  static Graph alphabetical(const std::string&, const std::string&, const Graph& graph) {
    Graph sorted = graph;
    std::sort(sorted.begin(), sorted.end(),
              [](const NodePtr& x, const NodePtr& y) { return x->dsl_name < y->dsl_name; });
    return sorted;
  }
  // Applies `fn` and checks the graph was kept with a warning.
  void expect_rejected(const OrderingFn& fn, const std::string& reason) {
    registry().reorder_graphs(fn);
    EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(c_, a_, b_));
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0], HasSubstr("Graph transformation failed"));
    EXPECT_THAT(warnings[0], HasSubstr(reason));
    warnings.clear();
  }
  NodePtr a_, b_, c_;
};

// An empty std::function is a bad argument (not an abort of the reorder, which
// a function throws on purpose), refused before any graph is looked at.
TEST_F(OrderingTest, AnEmptyOrderingFunctionIsABadArgumentAndChangesNothing) {
  try {
    registry().reorder_graphs(OrderingFn{});
    FAIL() << "an empty ordering function was accepted";
  } catch (const InvalidArgumentError& error) {
    EXPECT_THAT(error.what(), HasSubstr("the ordering function must be callable"));
  }
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(c_, a_, b_));
  EXPECT_TRUE(warnings.empty());
}

TEST_F(OrderingTest, OrderingFunctionReordersEveryGraph) {
  auto bmm_b = register_override(bmm_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_b");
  auto bmm_a = register_override(bmm_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  registry().reorder_graphs(alphabetical);
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(a_, b_, c_));
  EXPECT_THAT(registry().graph(bmm_cpu()), ElementsAre(bmm_a, bmm_b));
  EXPECT_TRUE(warnings.empty());
}

TEST_F(OrderingTest, OrderingFunctionSeesOpSymbolAndDispatchKey) {
  std::vector<std::string> seen;
  registry().reorder_graphs([&](const std::string& op, const std::string& key, const Graph& g) {
    seen.push_back(op + "/" + key);
    return g;
  });
  EXPECT_THAT(seen, ElementsAre("mul.Tensor/CPU"));
}

TEST_F(OrderingTest, ThrowingFunctionKeepsTheGraphAndWarns) {
  expect_rejected(
      [](const std::string&, const std::string&, const Graph&) -> Graph {
        throw std::runtime_error("Test exception");
      },
      "Test exception");
  expect_rejected([](const std::string&, const std::string&, const Graph&) -> Graph { throw 42; },
                  "unknown exception");
}

// A registry with no log sink writes its warnings to stderr, prefixed, and
// nothing else (its info lines go nowhere).
TEST(RegistryWithoutALogSinkTest, WarnsOnStderr) {
  Registry plain;
  plain.register_op_override("dsl_x", "aten", "mul.Tensor", "CPU", constant_cond(true), fill_impl(1));
  ::testing::internal::CaptureStderr();
  plain.deregister_op_overrides({{"dsl_x"}, {}, {}});  // logs an info line: not on stderr
  plain.reorder_graphs([](const std::string&, const std::string&, const Graph&) -> Graph {
    throw std::runtime_error("ordering failed 77");
  });
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(said, ::testing::StartsWith("[native_registry] warning: "));
  EXPECT_THAT(said, HasSubstr("Graph transformation failed"));
  EXPECT_THAT(said, HasSubstr("ordering failed 77"));
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
}

TEST_F(OrderingTest, JunkResultsKeepTheGraphAndWarn) {
  expect_rejected([&](auto&&...) { return Graph{a_, a_}; }, "appears twice");
  expect_rejected([&](auto&&...) { return Graph{a_, nullptr}; }, "null node");
  auto foreign = register_override(bmm_cpu(), constant_cond(true), fill_impl(1));
  registry().reorder_graphs([&](const std::string& op, const std::string&, const Graph& g) {
    return op == "mul.Tensor" ? Graph{a_, foreign} : g;
  });
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(c_, a_, b_));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("belongs to the graph of aten::bmm/CPU"));
  warnings.clear();
  // A node of the same key that is no longer (or never was) in the graph.
  Registry other;
  auto stranger = other.register_op_override("x", "aten", "mul.Tensor", "CPU",
                                             constant_cond(true), fill_impl(1));
  expect_rejected(
      [&](const std::string& op, const std::string&, const Graph& g) {
        return op == "mul.Tensor" ? Graph{stranger} : g;
      },
      "is not in this graph");
}

TEST_F(OrderingTest, SubsetsAreAccepted) {
  registry().reorder_graphs([&](auto&&...) { return Graph{b_}; });
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(b_));
  EXPECT_TRUE(warnings.empty());
}

TEST_F(OrderingTest, ReorderWithoutReinstallLeavesTheInstalledChain) {
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));
  registry().reorder_graphs(alphabetical);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
}

TEST_F(OrderingTest, ReorderWithReinstallRepublishesChangedGraphs) {
  registry().install_graph(mul_cpu());
  registry().reorder_graphs(alphabetical, /*reinstall=*/true);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
  EXPECT_THAT(registry().published_chain(mul_cpu()), ElementsAre(a_, b_, c_));
}

// reorder_graphs answers with the graphs it changed, and only those: a graph
// the function handed back in its own order, or refused, is not among them.
TEST_F(OrderingTest, ReorderAnswersWithTheKeysOfTheGraphsItChanged) {
  const NodePtr bmm = register_override(bmm_cpu(), constant_cond(true), fill_impl(1));
  EXPECT_THAT(registry().reorder_graphs(alphabetical), ElementsAre(mul_cpu()));
  EXPECT_THAT(registry().reorder_graphs(alphabetical), ElementsAre()) << "already in order";
  EXPECT_THAT(registry().reorder_graphs([&](const std::string& op, const std::string&, const Graph& g) {
                return op == "mul.Tensor" ? Graph{a_, a_} : g;  // refused, with the warning
              }),
              ElementsAre());
  EXPECT_THAT(registry().graph(bmm_cpu()), ElementsAre(bmm));
}

TEST_F(OrderingTest, RegisterThenReorderIntegration) {
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(c_, a_, b_));
  registry().reorder_graphs(alphabetical);
  std::vector<std::string> names;
  for (const auto& node : registry().graph(mul_cpu())) names.push_back(node->dsl_name);
  EXPECT_THAT(names, ElementsAre("dsl_a", "dsl_b", "dsl_c"));
}

// replace_graph: the primitive under layers that keep the graph themselves
// (the upstream compatibility module assigns whole node lists).
TEST_F(OrderingTest, ReplaceGraphSetsTheOrderAndInstallsNothing) {
  registry().replace_graph(mul_cpu(), {b_, a_});
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(b_, a_));
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({2})));
  // A node taken out earlier may come back; an empty list empties the graph.
  registry().replace_graph(mul_cpu(), {c_});
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(c_));
  registry().replace_graph(mul_cpu(), {});
  EXPECT_THAT(registry().graph(mul_cpu()), ::testing::IsEmpty());
}

// erase_graph forgets the graph and its index entries, not the router;
// uninstall_graph takes the router out and keeps the graph; router_id tells
// one router from the next at the same key.
// Erasing a graph the registry does not have changes nothing; erasing one
// leaves the index entries of the other graphs of its dsl, op and key.
TEST_F(OrderingTest, EraseGraphOfAnUnknownKeyChangesNothingAndKeepsOtherIndexEntries) {
  registry().erase_graph(bmm_cpu());
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(c_, a_, b_));
  EXPECT_THAT(registry().get_dsl_operations("dsl_a"), ElementsAre("mul.Tensor"));
  const NodePtr bmm = register_override(bmm_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  EXPECT_THAT(registry().graphs_by_op_symbol().at("mul.Tensor"), ElementsAre(mul_cpu()))
      << "a graph is indexed once, however many nodes it holds";
  registry().erase_graph(mul_cpu());
  EXPECT_THAT(registry().get_dsl_operations("dsl_a"), ElementsAre("bmm"));
  EXPECT_THAT(registry().get_dsl_operations("dsl_b"), ::testing::IsEmpty());
  // An emptied graph put back is not indexed by its op.
  registry().replace_graph(mul_cpu(), {});
  EXPECT_EQ(registry().graphs_by_op_symbol().count("mul.Tensor"), 0u);
  registry().check_invariants();
}

TEST_F(OrderingTest, EraseGraphForgetsTheGraphAndKeepsTheRouter) {
  registry().install_graph(mul_cpu());
  const uint64_t first = registry().router_id(mul_cpu());
  EXPECT_NE(first, 0u);
  registry().erase_graph(mul_cpu());
  EXPECT_TRUE(registry().graph_keys().empty());
  EXPECT_TRUE(registry().get_dsl_operations("dsl_a").empty());
  EXPECT_TRUE(registry().graphs_by_op_symbol().empty());
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kActive);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));
  registry().check_invariants();
  // replace_graph brings it back, indexed again.
  registry().replace_graph(mul_cpu(), {a_, b_});
  EXPECT_THAT(registry().get_dsl_operations("dsl_a"), ElementsAre("mul.Tensor"));
  EXPECT_TRUE(registry().get_dsl_operations("dsl_c").empty());
  registry().check_invariants();
  registry().install_graph(mul_cpu(), InstallMode::kReinstall);
  const uint64_t second = registry().router_id(mul_cpu());
  EXPECT_NE(second, first);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
  registry().uninstall_graph(mul_cpu());
  EXPECT_EQ(registry().router_id(mul_cpu()), 0u);
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(a_, b_));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  // Uninstalled, a filter change installs nothing.
  registry().deregister_op_overrides({{"dsl_a"}, {}, {}});
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  registry().check_invariants();
}

// router_id's 0 means "no router" (the binding's router handles take it so),
// so no router has it, from a process's first router on: router ids are
// process-wide, and a threadsafe death test's child runs only this test, so
// its routers are the process's first.
TEST_F(OrderingTest, NoRouterHasTheIdOfNoneFromAProcesssFirstRouterOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::set<uint64_t> ids;
        for (int i = 0; i < 3; ++i) {
          registry().install_graph(mul_cpu(), InstallMode::kReinstall);
          const uint64_t id = registry().router_id(mul_cpu());
          if (id == 0) {
            std::fprintf(stderr, "router %d of the process has id 0, which means none\n", i + 1);
            std::_Exit(2);
          }
          if (!ids.insert(id).second) {
            std::fprintf(stderr, "router %d of the process has the id of an earlier one\n", i + 1);
            std::_Exit(3);
          }
        }
        registry().uninstall_graph(mul_cpu());
        std::_Exit(registry().router_id(mul_cpu()) == 0 ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(OrderingTest, ReplaceGraphRefusesJunkAndChangesNothing) {
  auto foreign = register_override(bmm_cpu(), constant_cond(true), fill_impl(1));
  Registry other;
  auto stranger = other.register_op_override("x", "aten", "mul.Tensor", "CPU",
                                              constant_cond(true), fill_impl(1));
  const std::vector<std::pair<Graph, std::string>> junk = {
      {{a_, nullptr}, "a node is null"},
      {{a_, foreign}, "belongs to aten::bmm/CPU, not aten::mul.Tensor/CPU"},
      {{stranger}, "was not registered with this registry"},
      {{a_, b_, a_}, "node " + a_->node_id + " appears twice"},
  };
  for (const auto& [nodes, reason] : junk) {
    EXPECT_THAT([&] { registry().replace_graph(mul_cpu(), nodes); },
                ::testing::ThrowsMessage<InvalidArgumentError>(HasSubstr(reason)));
    EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(c_, a_, b_)) << reason;
  }
}

}  // namespace
}  // namespace native_registry::testing
