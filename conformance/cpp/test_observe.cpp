// Per-thread disables (feature thread-disables) and routing stats (feature
// routing-stats) through the adapter; both beyond upstream.

#include "suite.h"

#include "warning_recorder.h"

#include <atomic>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

// Calls mul on a new thread and returns the first value of the result.
float first_value_on_another_thread() {
  float value = 0;
  std::thread([&value] { value = call_mul(tensor({2, 3}), tensor({4, 5}))[0].item<float>(); }).join();
  return value;
}

// Runs `work` on `count` threads at once and waits for them: calls only, no
// control-plane change (which feature concurrent-control-plane is about).
void on_threads(int count, const std::function<void()>& work) {
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) threads.emplace_back(work);
  for (auto& thread : threads) thread.join();
}

float first_value() { return call_mul(tensor({2, 3}), tensor({4, 5}))[0].item<float>(); }

// An impl that raises whatever it is given.
ImplFn failing_impl() {
  return [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {
    throw std::runtime_error("impl failed");
  };
}

// A cond that takes two-element calls only.
CondFn takes_pairs() {
  return [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
    return stack[stack.size() - 2].toTensor().numel() == 2;
  };
}

TEST_P(Conformance, APerThreadDisableSkipsTheOverrideOnThisThreadOnly) {
  BEHAVIOUR("thread.disable-on-this-thread-only");
  REQUIRE_FEATURE("thread-disables");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  add(mul_key(), constant_cond(true), fill_impl(9), "dsl_b");
  adapter().install(mul_key());
  EXPECT_EQ(first_value(), 7);
  {
    auto scope = adapter().disabled_in_thread({{"dsl_a"}, {}, {}});
    EXPECT_EQ(first_value(), 9) << "the next override takes the call";
    EXPECT_EQ(first_value_on_another_thread(), 7) << "another thread routes as before";
    auto inner = adapter().disabled_in_thread({{}, {"mul.Tensor"}, {}});
    EXPECT_EQ(first_value(), 8) << "no override left: the op's own kernel";
  }
  EXPECT_EQ(first_value(), 7);
  {
    auto scope = adapter().disabled_in_thread({{}, {}, {"CPU"}});
    EXPECT_EQ(first_value(), 8);
  }
  EXPECT_EQ(first_value(), 7);
}

TEST_P(Conformance, ExplainOnThisThreadReportsAPerThreadDisable) {
  BEHAVIOUR("thread.disable-on-this-thread-only");
  REQUIRE_FEATURE("thread-disables");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  add(mul_key(), constant_cond(true), fill_impl(9), "dsl_b");
  adapter().install(mul_key());
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  auto scope = adapter().disabled_in_thread({{"dsl_a"}, {}, {}});
  const ExplainInfo e = adapter().explain(op, {tensor({2}), tensor({4})}, "");
  ASSERT_EQ(e.nodes.size(), 2u) << e.table;
  EXPECT_EQ(e.nodes[0].verdict, "disabled") << e.table;
  EXPECT_THAT(e.nodes[0].detail, ::testing::HasSubstr("thread")) << "what disabled it: this thread's scope\n"
                                                                  << e.table;
  EXPECT_EQ(e.nodes[1].verdict, "accepted") << e.table;
}

TEST_P(Conformance, PerThreadDisablesNestAndClosingTheInnerRestoresTheOuter) {
  BEHAVIOUR("thread.disables-nest-and-restore");
  REQUIRE_FEATURE("thread-disables");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  add(mul_key(), constant_cond(true), fill_impl(9), "dsl_b");
  adapter().install(mul_key());
  {
    auto outer = adapter().disabled_in_thread({{"dsl_a"}, {}, {}});
    EXPECT_EQ(first_value(), 9);
    {
      auto inner = adapter().disabled_in_thread({{"dsl_b"}, {}, {}});
      EXPECT_EQ(first_value(), 8) << "both named: the union";
    }
    EXPECT_EQ(first_value(), 9) << "the outer scope's disable is still in force";
    { auto same = adapter().disabled_in_thread({{"dsl_a"}, {}, {}}); }
    EXPECT_EQ(first_value(), 9) << "an inner scope naming the same dsl leaves it disabled";
  }
  EXPECT_EQ(first_value(), 7) << "the outer scope is gone";
}

TEST_P(Conformance, APerThreadDisableLeavesFiltersGraphsAndTheDispatcherAlone) {
  BEHAVIOUR("thread.disable-leaves-the-registry-alone");
  REQUIRE_FEATURE("thread-disables");
  REQUIRE_FEATURE("unconditional-survives-disable");
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  add(mul_key(), {}, fill_impl(9), "hatch", {}, /*unconditional=*/true);
  adapter().install(mul_key());
  const auto before = fingerprint();
  const size_t graph_size = adapter().graph(mul_key()).size();
  {
    auto scope = adapter().disabled_in_thread({{"dsl_a", "hatch"}, {}, {}});
    EXPECT_EQ(fingerprint().difference(before), "");
    EXPECT_EQ(adapter().graph(mul_key()).size(), graph_size);
    EXPECT_EQ(first_value(), 9) << "the unconditional override stays enabled";
    EXPECT_EQ(first_value_on_another_thread(), 7);
  }
  EXPECT_EQ(fingerprint().difference(before), "");
  EXPECT_EQ(first_value(), 7);
}

TEST_P(Conformance, APerThreadScopeClosedOnAnotherThreadSaysSoAndClosesNone) {
  BEHAVIOUR("thread.scope-closed-on-another-thread");
  REQUIRE_FEATURE("thread-disables");
  REQUIRE_FEATURE("concurrent-control-plane");  // the scope is opened on a thread of its own
  add(mul_key(), constant_cond(true), fill_impl(7), "dsl_a");
  add(mul_key(), constant_cond(true), fill_impl(9), "dsl_b");
  adapter().install(mul_key());
  // closer_scoped: the closing thread has a scope of its own open, which the
  // foreign token must not close either.
  for (bool closer_scoped : {false, true}) {
    SCOPED_TRACE(closer_scoped ? "the closer has a scope of its own" : "the closer has none");
    // The opener is a thread of its own: the disables it is left with end with it.
    std::unique_ptr<Scope> scope;
    std::promise<void> opened, closed_elsewhere;
    float opener_before = 0, opener_after = 0;
    std::thread opener([&] {
      scope = adapter().disabled_in_thread({{"dsl_a"}, {}, {}});
      opener_before = first_value();
      opened.set_value();
      closed_elsewhere.get_future().wait();
      opener_after = first_value();
    });
    opened.get_future().wait();
    WarningRecorder warned;
    float closer_inside = 0, closer_after = 0;
    std::thread([&] {
      c10::WarningUtils::WarningHandlerGuard guard(&warned);
      {
        std::unique_ptr<Scope> own;
        if (closer_scoped) own = adapter().disabled_in_thread({{"dsl_a"}, {}, {}});
        scope.reset();  // destroyed on a thread that did not open it
        closer_inside = first_value();
      }
      closer_after = first_value();
    }).join();
    closed_elsewhere.set_value();
    opener.join();
    EXPECT_EQ(opener_before, 9);
    ASSERT_EQ(warned.messages.size(), 1u) << "closing another thread's scope said nothing";
    EXPECT_NE(warned.messages[0].find("thread"), std::string::npos) << warned.messages[0];
    if (closer_scoped) {
      EXPECT_EQ(closer_inside, 9) << "the closing thread's own scope was closed instead";
    } else {
      EXPECT_EQ(closer_inside, 7) << "the closing thread had nothing disabled";
    }
    EXPECT_EQ(closer_after, 7);
    EXPECT_EQ(opener_after, 9) << "the opener's disables were lifted by another thread";
    EXPECT_EQ(first_value(), 7);
  }
}

TEST_P(Conformance, StatsCountEachNodesOutcomesAndEachGraphsFallbacks) {
  BEHAVIOUR("stats.counts-each-outcome");
  REQUIRE_FEATURE("routing-stats");
  REQUIRE_FEATURE("runtime-init");
  add(mul_key(), takes_pairs(), fill_impl(7), "choosy");
  add(mul_key(), constant_cond(true), fill_impl(9), "needs_runtime", [] { return false; });
  add(mul_key(), [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) -> bool {
        if (stack[stack.size() - 2].toTensor().numel() == 3) throw std::runtime_error("bad cond");
        return false;
      }, fill_impl(5), "raising");
  adapter().install(mul_key());
  const std::vector<NodeInfo> graph = adapter().graph(mul_key());
  ASSERT_EQ(graph.size(), 3u);
  auto counting = adapter().collect_stats(true);
  adapter().reset_stats();
  call_mul(tensor({1, 2}), tensor({1, 2}));                                       // choosy takes it
  EXPECT_THROW(call_mul(tensor({1, 2, 3}), tensor({1, 2, 3})), std::exception);  // raising raises
  call_mul(tensor({1}), tensor({1}));                                             // all decline
  using Node = RegistryAdapter::NodeCounts;
  using GraphC = RegistryAdapter::GraphCounts;
  EXPECT_EQ(adapter().node_counts(graph[0]), (Node{1, 2, 0, 0}));
  EXPECT_EQ(adapter().node_counts(graph[1]), (Node{0, 0, 2, 0}));
  EXPECT_EQ(adapter().node_counts(graph[2]), (Node{0, 1, 0, 1}));
  EXPECT_EQ(adapter().graph_counts(mul_key()), (GraphC{2, 1})) << "a call whose cond raised is decided by none";
  adapter().reset_stats();
  EXPECT_EQ(adapter().node_counts(graph[0]), Node{});
  EXPECT_EQ(adapter().graph_counts(mul_key()), GraphC{});
  // The implementation's own invariants hold while counting is on too (the
  // suite's checks after the test run once the counting scope closed).
  adapter().self_check();
}

TEST_P(Conformance, ACallWhoseImplRaisedIsStillOneItsGraphDecided) {
  BEHAVIOUR("stats.counts-each-outcome");
  REQUIRE_FEATURE("routing-stats");
  REQUIRE_FEATURE("runtime-init");
  add(mul_key(), constant_cond(true), failing_impl(), "failing");
  adapter().install(mul_key());
  const NodeInfo node = adapter().graph(mul_key()).at(0);
  auto counting = adapter().collect_stats(true);
  adapter().reset_stats();
  for (int i = 0; i < 3; ++i) EXPECT_THROW(call_mul(tensor({1, 2}), tensor({1, 2})), std::exception);
  EXPECT_EQ(adapter().node_counts(node), (RegistryAdapter::NodeCounts{3, 0, 0, 3}));
  EXPECT_EQ(adapter().graph_counts(mul_key()), (RegistryAdapter::GraphCounts{3, 0}))
      << "the router chose the override each time; its impl's error does not unmake the choice";
}

// A graph's counts are the graph's, not its router's: installing the graph
// again builds a new router and keeps them.
TEST_P(Conformance, AGraphsCountsAreKeptWhenItIsInstalledAgain) {
  BEHAVIOUR("stats.graph-counts-kept-across-reinstall");
  REQUIRE_FEATURE("routing-stats");
  add(mul_key(), takes_pairs(), fill_impl(7), "choosy");
  adapter().install(mul_key());
  auto counting = adapter().collect_stats(true);
  adapter().reset_stats();
  call_mul(tensor({1, 2}), tensor({1, 2}));  // taken
  call_mul(tensor({1}), tensor({1}));        // the op's own kernel
  using GraphC = RegistryAdapter::GraphCounts;
  ASSERT_EQ(adapter().graph_counts(mul_key()), (GraphC{2, 1}));
  adapter().install(mul_key());
  EXPECT_EQ(adapter().graph_counts(mul_key()), (GraphC{2, 1})) << "installing again zeroed them";
  call_mul(tensor({1}), tensor({1}));
  EXPECT_EQ(adapter().graph_counts(mul_key()), (GraphC{3, 2}));
}

TEST_P(Conformance, AnImplErrorThatFellBackCountsAsRaisedAndAsAFallback) {
  BEHAVIOUR("stats.impl-error-fallback-counted");
  REQUIRE_FEATURE("routing-stats");
  REQUIRE_FEATURE("impl-error-fallback");
  add(mul_key(), constant_cond(true), failing_impl(), "failing");
  adapter().install(mul_key());
  const NodeInfo node = adapter().graph(mul_key()).at(0);
  auto fallback = adapter().impl_error_policy("fallback");
  auto counting = adapter().collect_stats(true);
  adapter().reset_stats();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
  EXPECT_EQ(adapter().node_counts(node), (RegistryAdapter::NodeCounts{2, 0, 0, 2}))
      << "taken by the override, whose impl raised each time";
  EXPECT_EQ(adapter().graph_counts(mul_key()), (RegistryAdapter::GraphCounts{2, 2}))
      << "each call ran the op's own kernel";
}

TEST_P(Conformance, WithStatsOffNothingIsCounted) {
  BEHAVIOUR("stats.off-counts-nothing");
  REQUIRE_FEATURE("routing-stats");
  add(mul_key(), takes_pairs(), fill_impl(7), "choosy");
  adapter().install(mul_key());
  const NodeInfo node = adapter().graph(mul_key()).at(0);
  adapter().reset_stats();
  call_mul(tensor({1, 2}), tensor({1, 2}));
  call_mul(tensor({1}), tensor({1}));
  EXPECT_EQ(adapter().node_counts(node), RegistryAdapter::NodeCounts{}) << "off by default";
  { auto counting = adapter().collect_stats(true); call_mul(tensor({1, 2}), tensor({1, 2})); }
  call_mul(tensor({1, 2}), tensor({1, 2}));
  EXPECT_EQ(adapter().node_counts(node).taken, 1u) << "switched off, the counts stay as they were";
  EXPECT_EQ(adapter().graph_counts(mul_key()), (RegistryAdapter::GraphCounts{1, 0}));
}

TEST_P(Conformance, AGraphNoRouterServedCountsZero) {
  BEHAVIOUR("stats.unrouted-graph-counts-zero");
  REQUIRE_FEATURE("routing-stats");
  add(mul_key(), constant_cond(true), fill_impl(7), "choosy");  // registered, never installed
  const Key add_key{"aten", "add.Tensor", "CPU"};
  auto counting = adapter().collect_stats(true);
  adapter().reset_stats();
  EXPECT_EQ(adapter().graph_counts(mul_key()), RegistryAdapter::GraphCounts{}) << "no router";
  EXPECT_EQ(adapter().graph_counts(add_key), RegistryAdapter::GraphCounts{}) << "no graph at all";
  EXPECT_EQ(call_mul(tensor({2, 3}), tensor({4, 5}))[0].item<float>(), 8) << "the op's own kernel";
  EXPECT_EQ(adapter().graph_counts(mul_key()), RegistryAdapter::GraphCounts{}) << "a call no router saw";
}

TEST_P(Conformance, StatsAreExactUnderManyThreads) {
  BEHAVIOUR("stats.exact-under-threads");
  REQUIRE_FEATURE("routing-stats");
  add(mul_key(), takes_pairs(), fill_impl(7), "choosy");
  adapter().install(mul_key());
  const NodeInfo node = adapter().graph(mul_key()).at(0);
  auto counting = adapter().collect_stats(true);
  adapter().reset_stats();
  constexpr int kThreads = 8, kCalls = 500;
  on_threads(kThreads, [] {
    for (int i = 0; i < kCalls; ++i) {
      call_mul(tensor({1, 2}), tensor({1, 2}));
      call_mul(tensor({1}), tensor({1}));
    }
  });
  const uint64_t total = kThreads * kCalls;
  EXPECT_EQ(adapter().node_counts(node), (RegistryAdapter::NodeCounts{total, total, 0, 0}));
  EXPECT_EQ(adapter().graph_counts(mul_key()), (RegistryAdapter::GraphCounts{2 * total, total}));
}

}  // namespace
}  // namespace conformance
