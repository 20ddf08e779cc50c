// Hostile-but-legal use through the adapter: the control plane from inside a
// call, a `_native` op held past teardown, callbacks that use the registry.

#include "suite.h"

#include <unistd.h>

#include <fstream>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

// Names of their own: the unity builds (pip, sanitizers) put this file and
// test_routing.cpp into one translation unit.
at::Tensor mul_of_2_3_and_4_5() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
const at::Tensor kStockProduct = tensor({8, 15});

// Run in a death test's child: an implementation that undefines an op
// still held leaves the handle dangling, a crash that must fail this test,
// not the suite.
[[noreturn]] void call_native_held_past_its_scope(RegistryAdapter& registry,
                                                  const std::function<void()>& add_override,
                                                  const Key& key) {
  alarm(60);  // a hang fails this test within a minute, not the suite at meson's limit
  std::optional<c10::OperatorHandle> native;
  std::string node_id;
  {
    std::unique_ptr<Scope> inner = registry.scope();
    add_override();
    registry.install(key);
    const NodeInfo node = registry.graph(key).at(0);
    node_id = node.node_id;
    native = registry.native_op(node);
    if (!native) std::_Exit(3);
  }
  Stack stack{tensor({2}), tensor({4})};
  try {
    native->callBoxed(&stack);
    std::fputs("the _native op of a torn-down override still ran\n", stderr);
    std::_Exit(1);
  } catch (const std::exception& e) {
    const bool named = std::string(e.what()).find(node_id) != std::string::npos;
    if (!named) std::fprintf(stderr, "the error names no %s: %s\n", node_id.c_str(), e.what());
    std::_Exit(named ? 0 : 1);
  }
}

TEST_P(Conformance, ACondThatTearsDownItsOwnOpFinishesOnTheOldChain) {
  BEHAVIOUR("lifetime.teardown-inside-a-call");
  REQUIRE_FEATURE("reentrant-control-plane");
  std::unique_ptr<Scope> inner = adapter().scope();
  int conds = 0;
  add(mul_key(),
      [&](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
        ++conds;
        inner.reset();  // the teardown, from inside the call
        return true;
      },
      fill_impl(7));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), tensor({7, 7})));
  EXPECT_EQ(conds, 1);
  EXPECT_FALSE(adapter().router_installed(mul_key()));
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), kStockProduct));
}

TEST_P(Conformance, AnImplThatTearsDownOrDisablesItsOwnOpFinishes) {
  BEHAVIOUR("lifetime.teardown-inside-a-call");
  REQUIRE_FEATURE("reentrant-control-plane");
  std::unique_ptr<Scope> inner = adapter().scope();
  add(mul_key(), constant_cond(true), impl_doing([&] { inner.reset(); }, 5));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), tensor({5, 5})));
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), kStockProduct));

  add(mul_key(), constant_cond(true),
      impl_doing([&] { adapter().disable({{"test_dsl"}, {}, {}}); }, 6));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), tensor({6, 6})));
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), kStockProduct));
  adapter().enable({{"test_dsl"}, {}, {}});
}

TEST_P(Conformance, ANativeOpHeldPastTeardownRaisesNamingTheOverride) {
  BEHAVIOUR("lifetime.recorded-native-op-after-teardown");
  REQUIRE_FEATURE("native-op-meta");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(call_native_held_past_its_scope(
                  adapter(), [&] { add(mul_key(), constant_cond(true), fill_impl(3), "gone_dsl"); },
                  mul_key()),
              ::testing::ExitedWithCode(0), "");
}

// As above for many overrides at once (more than an implementation might
// keep retired ops for without sweeping): each held op raises naming its
// own override, and the implementation's own invariants hold meanwhile.
[[noreturn]] void call_many_natives_held_past_their_scope(RegistryAdapter& registry,
                                                          const std::function<void(int)>& add_override,
                                                          const Key& key, int count) {
  alarm(60);
  std::vector<std::pair<c10::OperatorHandle, std::string>> held;
  {
    std::unique_ptr<Scope> inner = registry.scope();
    for (int i = 0; i < count; ++i) add_override(i);
    registry.install(key);
    for (const NodeInfo& node : registry.graph(key)) {
      std::optional<c10::OperatorHandle> native = registry.native_op(node);
      if (!native) std::_Exit(3);
      held.emplace_back(*native, node.node_id);
    }
  }
  if (static_cast<int>(held.size()) != count) std::_Exit(4);
  for (const auto& [native, node_id] : held) {
    Stack stack{tensor({2}), tensor({4})};
    try {
      native.callBoxed(&stack);
      std::fputs("the _native op of a torn-down override still ran\n", stderr);
      std::_Exit(1);
    } catch (const std::exception& e) {
      if (std::string(e.what()).find(node_id) == std::string::npos) {
        std::fprintf(stderr, "the error names no %s: %s\n", node_id.c_str(), e.what());
        std::_Exit(1);
      }
    }
  }
  try {
    registry.self_check();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "self_check: %s\n", e.what());
    std::_Exit(1);
  }
  std::_Exit(0);
}

TEST_P(Conformance, ManyNativeOpsHeldPastTeardownEachRaiseNamingTheirOverride) {
  BEHAVIOUR("lifetime.recorded-native-op-after-teardown");
  REQUIRE_FEATURE("native-op-meta");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(call_many_natives_held_past_their_scope(
                  adapter(),
                  [&](int i) { add(mul_key(), constant_cond(false), fill_impl(3), "held_" + std::to_string(i)); },
                  mul_key(), 100),
              ::testing::ExitedWithCode(0), "");
}

// A scope's teardown retires only the `_native` ops it activated: that of a
// node disabled before it (no router routes to it) still runs its impl.
TEST_P(Conformance, AScopeLeavesTheNativeOpOfADisabledOverrideRunning) {
  BEHAVIOUR("teardown.native-ops-from-before-a-scope-stay");
  REQUIRE_FEATURE("native-op-meta");
  add(mul_key(), constant_cond(true), fill_impl(5), "d");
  adapter().install(mul_key());
  auto native = adapter().native_op(adapter().graph(mul_key()).at(0));
  ASSERT_TRUE(native.has_value()) << "no _native op for the node";
  adapter().disable({{"d"}, {}, {}});
  const auto before = fingerprint();
  adapter().scope().reset();
  EXPECT_EQ(fingerprint().difference(before), "") << "an empty scope changed the dispatcher";
  Stack stack{tensor({2, 3}), tensor({4, 5})};
  try {
    native->callBoxed(&stack);
    EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({5, 5})));
  } catch (const c10::Error& e) {
    ADD_FAILURE() << "the _native op raised: " << e.what_without_backtrace();
  }
}

TEST_P(Conformance, AnOrderingFunctionMayUseTheControlPlane) {
  BEHAVIOUR("locking.callbacks-may-use-the-control-plane");
  REQUIRE_FEATURE("reentrant-control-plane");
  add(mul_key(), constant_cond(false), fill_impl(1), "a");
  add(mul_key(), constant_cond(true), fill_impl(2), "b");
  adapter().install(mul_key());
  std::vector<std::string> seen;
  adapter().reorder([&](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
    seen = adapter().dsl_operations("a", "aten");
    std::vector<std::string> ids;
    for (auto it = graph.rbegin(); it != graph.rend(); ++it) ids.push_back(it->node_id);
    return ids;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"mul.Tensor"}));
  EXPECT_EQ(adapter().graph(mul_key()).at(0).dsl_name, "b");
}


// A log handler that queries the registry, for the warnings of a failed
// ordering function (logged outside any operation) and of an ordering whose
// graph changed while it ran (logged inside the operation, emitted once it
// ends). In a death test's child under alarm(): a registry that calls the
// handler under its own lock deadlocks there, which fails this test.
[[noreturn]] void log_handler_uses_the_registry(RegistryAdapter& registry,
                                                const std::function<void(const std::string&)>& add) {
  alarm(20);  // the test takes milliseconds
  std::vector<size_t> seen;
  registry.set_warning_handler(
      [&](const std::string&) { seen.push_back(registry.dsl_operations("a", "aten").size()); });
  add("a");
  add("a");
  registry.reorder([](const std::string&, const std::string&, const std::vector<NodeInfo>&)
                       -> std::vector<std::string> { throw std::runtime_error("no"); });
  registry.reorder([&](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
    add("b");  // the graph changes while the ordering runs: kept, and logged
    std::vector<std::string> ids;
    for (auto it = graph.rbegin(); it != graph.rend(); ++it) ids.push_back(it->node_id);
    return ids;
  });
  registry.set_warning_handler(nullptr);
  std::_Exit(seen == std::vector<size_t>{1, 1} ? 0 : 4);
}

TEST_P(Conformance, ALogHandlerMayUseTheControlPlane) {
  BEHAVIOUR("locking.callbacks-may-use-the-control-plane");
  REQUIRE_FEATURE("reentrant-control-plane");
  EXPECT_EXIT(log_handler_uses_the_registry(
                  adapter(), [&](const std::string& dsl) {
                    add(mul_key(), constant_cond(false), fill_impl(1), dsl);
                  }),
              ::testing::ExitedWithCode(0), "");
}

long resident_kb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

TEST_P(Conformance, RegisterAndTeardownCyclesLeaveNoResidue) {
  BEHAVIOUR("memory.register-restore-no-residue");
#if defined(__SANITIZE_ADDRESS__)
  // Not measurable there: AddressSanitizer keeps freed memory in its
  // quarantine, so RSS grows whatever the registry does. The plain build runs it.
  GTEST_SKIP() << "RSS is not measurable under AddressSanitizer (its quarantine keeps freed memory)";
#endif
  auto cycles = [&](int n) {
    for (int i = 0; i < n; ++i) {
      std::unique_ptr<Scope> scope = adapter().scope();
      add(mul_key(), constant_cond(false), fill_impl(1));
    }
  };
  cycles(10000);
  const long start = resident_kb();
  cycles(100000);
  EXPECT_LT(resident_kb() - start, 1024) << "RSS grew over 100,000 register + teardown cycles";
}

// ---- a scope per test (issue 23) -----------------------------------------------

size_t native_ops_defined() {
  size_t count = 0;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    count += name.name.rfind("_native::", 0) == 0;
  }
  return count;
}

TEST_P(Conformance, ScopeCyclesLeaveNoNativeOpBehind) {
  BEHAVIOUR("lifetime.scope-cycles-stay-flat");
  REQUIRE_FEATURE("native-op-meta");
  auto cycle = [&] {
    std::unique_ptr<Scope> scope = adapter().scope();
    add(mul_key(), constant_cond(true), fill_impl(7), "cycle_dsl");
    adapter().install(mul_key());
    return same(mul_of_2_3_and_4_5(), tensor({7, 7}));
  };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(cycle());  // warm-up: first calls, caches
  const size_t ops_before = native_ops_defined();
  const long rss_before = resident_kb();
  constexpr int kCycles = 300;
  for (int i = 0; i < kCycles; ++i) ASSERT_TRUE(cycle());
  EXPECT_LE(native_ops_defined(), ops_before)
      << kCycles << " scope cycles left _native ops defined";
#if !defined(__SANITIZE_ADDRESS__)  // its quarantine keeps freed memory (see above)
  const long grown = resident_kb() - rss_before;
  EXPECT_LE(grown, 2 * kCycles) << "RSS grew " << grown << " KiB over " << kCycles
                                << " scope cycles (at most 2 KiB per scope)";
#else
  (void)rss_before;
#endif
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), kStockProduct));
}

}  // namespace
}  // namespace conformance
