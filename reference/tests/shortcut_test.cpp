// The trace shortcut and its thread-local re-entrancy guard: an outer call is
// diverted to the op's top, the re-entered call routes normally (cond once,
// no recursion), copy-on-write inputs never divert, chains that did not opt
// in never consult the shortcut, and the guard is released on every exit.
// Then the host scope: one per call around the choice, never around an impl.

#include "support.h"

#include <native_registry/call_hooks.h>

#include <ATen/ops/_lazy_clone.h>
#include <ATen/ops/cat.h>
#include <c10/core/impl/COW.h>

namespace native_registry::testing {
namespace {

using ::testing::HasSubstr;

std::atomic<int> g_shortcut_calls{0};
bool tracing(bool) {
  ++g_shortcut_calls;
  return true;
}
bool not_tracing(bool) {
  ++g_shortcut_calls;
  return false;
}

bool is_cow(const at::Tensor& t) {
  return c10::impl::cow::is_cow_data_ptr(t.storage().data_ptr());
}

class ShortcutTest : public RegistryTest {
 protected:
  void SetUp() override {
    RegistryTest::SetUp();
    g_shortcut_calls = 0;
  }
  void TearDown() override {
    set_trace_shortcut(nullptr);
    RegistryTest::TearDown();
  }
  // Registers a declining node whose cond records whether the guard was held.
  void register_observing_node(bool divert_when_tracing, const GraphKey& key = mul_cpu()) {
    OverrideOptions options;
    options.divert_when_tracing = divert_when_tracing;
    CondFn cond = [this](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
      ++cond_calls;
      guard_held_in_cond = in_diverted_call();
      return false;
    };
    register_override(key, cond, forbidden_impl(), options);
    registry().install_graph(key);
  }
  int cond_calls = 0;
  bool guard_held_in_cond = false;
};

TEST_F(ShortcutTest, OuterCallIsDivertedAndTheReenteredCallRoutesOnce) {
  register_observing_node(/*divert_when_tracing=*/true);
  set_trace_shortcut(&tracing);
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
  EXPECT_EQ(g_shortcut_calls.load(), 1) << "the shortcut must fire for the outer call";
  EXPECT_EQ(cond_calls, 1) << "cond consulted once: no runaway re-entry";
  EXPECT_TRUE(guard_held_in_cond) << "cond was reached without the diversion";
  EXPECT_FALSE(in_diverted_call()) << "the guard outlived the call";
}

TEST_F(ShortcutTest, NoTracerMeansTheOrdinaryPath) {
  register_observing_node(true);
  set_trace_shortcut(&not_tracing);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(cond_calls, 1);
  EXPECT_FALSE(guard_held_in_cond);
}

TEST_F(ShortcutTest, AskedOutsideAHostScopeTheShortcutIsToldSo) {
  // No host scope is set and the chain needs none: the router asks from
  // outside it, and a shortcut of the host's own must then enter the runtime.
  register_observing_node(/*divert_when_tracing=*/true);
  static std::vector<bool> told;
  told.clear();
  set_trace_shortcut(+[](bool in_host_scope) {
    told.push_back(in_host_scope);
    return false;
  });
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(told, std::vector<bool>{false}) << "the shortcut was told it was asked inside the host scope";
}

TEST_F(ShortcutTest, ChainsThatDidNotOptInNeverConsultTheShortcut) {
  register_observing_node(false);
  set_trace_shortcut(&tracing);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(g_shortcut_calls.load(), 0);
  EXPECT_EQ(cond_calls, 1);
  EXPECT_FALSE(guard_held_in_cond);
}

TEST_F(ShortcutTest, CopyOnWriteInputsKeepTheOrdinaryPath) {
  register_observing_node(true);
  set_trace_shortcut(&tracing);
  const at::Tensor a = at::_lazy_clone(tensor({2, 3}));
  const at::Tensor b = at::_lazy_clone(tensor({4, 5}));
  ASSERT_TRUE(is_cow(a));
  EXPECT_TRUE(same(call_mul(a, b), tensor({8, 15})));
  EXPECT_EQ(cond_calls, 1);
  EXPECT_FALSE(guard_held_in_cond) << "a copy-on-write call was diverted";
  EXPECT_TRUE(is_cow(a));
  EXPECT_TRUE(is_cow(b));
}

TEST_F(ShortcutTest, ACopyOnWriteTensorInAListKeepsTheOrdinaryPath) {
  register_observing_node(true, {"aten", "cat", "CPU"});
  set_trace_shortcut(&tracing);
  const at::Tensor cow = at::_lazy_clone(tensor({4, 5}));
  EXPECT_TRUE(same(at::cat({tensor({2, 3}), cow}), tensor({2, 3, 4, 5})));
  // The tracer is asked first, as upstream's router asks Dynamo before it
  // looks for copy-on-write inputs; it says "tracing", and still no diversion.
  EXPECT_EQ(g_shortcut_calls, 1);
  EXPECT_FALSE(guard_held_in_cond) << "a list holding a copy-on-write tensor was diverted";
  EXPECT_TRUE(is_cow(cow));
  // The same list without it is diverted: the cond runs under the guard.
  EXPECT_TRUE(same(at::cat({tensor({2, 3}), tensor({4, 5})}), tensor({2, 3, 4, 5})));
  EXPECT_EQ(g_shortcut_calls, 2);
  EXPECT_TRUE(guard_held_in_cond);
  EXPECT_EQ(cond_calls, 2);
}

TEST_F(ShortcutTest, GuardIsReleasedWhenTheDivertedCallThrows) {
  OverrideOptions options;
  options.divert_when_tracing = true;
  CondFn throwing = [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) -> bool {
    EXPECT_TRUE(in_diverted_call());
    throw std::runtime_error("cond failed inside a diverted call");
  };
  register_override(mul_cpu(), throwing, forbidden_impl(), options, "thrower");
  registry().install_graph(mul_cpu());
  set_trace_shortcut(&tracing);
  try {
    call_mul(tensor({2}), tensor({4}));
    FAIL() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("cond failed inside a diverted call"));
  }
  EXPECT_FALSE(in_diverted_call());
  // And the next call is diverted again, as an outer call.
  registry().deregister_op_overrides({{"thrower"}, {}, {}});
  register_observing_node(true);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_TRUE(guard_held_in_cond);
}

TEST_F(ShortcutTest, GuardIsPerThread) {
  register_observing_node(true);
  set_trace_shortcut(&tracing);
  bool other_thread_saw_guard = true;
  CondFn spy = [&](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
    std::thread([&] { other_thread_saw_guard = in_diverted_call(); }).join();
    return false;
  };
  register_override(mul_cpu(), spy, forbidden_impl());
  registry().install_graph(mul_cpu());
  call_mul(tensor({2}), tensor({4}));
  EXPECT_FALSE(other_thread_saw_guard);
}

// ---- the host scope ----------------------------------------------------------

thread_local bool t_in_host_scope = false;
std::atomic<int> g_scopes_entered{0};
std::atomic<int> g_scopes_entered_inside_a_scope{0};

void counting_scope(void (*choose)(void*), void* context) {
  ++g_scopes_entered;
  if (t_in_host_scope) ++g_scopes_entered_inside_a_scope;
  const bool outer = t_in_host_scope;
  t_in_host_scope = true;
  struct Leave {
    bool restore;
    ~Leave() { t_in_host_scope = restore; }
  } leave{outer};
  choose(context);
}

class HostScopeTest : public ShortcutTest {
 protected:
  void SetUp() override {
    ShortcutTest::SetUp();
    g_scopes_entered = 0;
    g_scopes_entered_inside_a_scope = 0;
    set_host_scope(&counting_scope);
  }
  void TearDown() override {
    set_host_scope(nullptr);
    ShortcutTest::TearDown();
  }
  // A node whose cond records whether it ran inside the scope.
  CondFn scoped_cond(bool answer) {
    return [this, answer](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
      conds_in_scope.push_back(t_in_host_scope);
      return answer;
    };
  }
  static OverrideOptions needing_scope() {
    OverrideOptions options;
    options.needs_host_scope = true;
    return options;
  }
  std::vector<bool> conds_in_scope;
};

TEST_F(HostScopeTest, EveryCondOfACallRunsInsideOneScope) {
  register_override(mul_cpu(), scoped_cond(false), forbidden_impl(), needing_scope(), "a");
  register_override(mul_cpu(), scoped_cond(false), forbidden_impl(), {}, "b");
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(g_scopes_entered.load(), 1) << "one scope per call, not one per cond";
  EXPECT_EQ(conds_in_scope, (std::vector<bool>{true, true}));
}

TEST_F(HostScopeTest, TheChosenImplRunsAfterTheScopeIsLeft) {
  bool impl_in_scope = true;
  ImplFn impl = [&impl_in_scope](const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                 Stack* stack) {
    impl_in_scope = t_in_host_scope;
    fill_impl(7.0)(op, keys, stack);
  };
  register_override(mul_cpu(), scoped_cond(true), impl, needing_scope());
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_EQ(g_scopes_entered.load(), 1);
  EXPECT_FALSE(impl_in_scope) << "an impl must not run holding the host's lock";
}

TEST_F(HostScopeTest, AnImplOfTheHostRunsInsideTheScope) {
  std::vector<bool> impls_in_scope;
  ImplFn impl = [&impls_in_scope](const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                  Stack* stack) {
    impls_in_scope.push_back(t_in_host_scope);
    fill_impl(7.0)(op, keys, stack);
  };
  OverrideOptions options = needing_scope();
  options.impl_in_host_scope = true;
  register_override(mul_cpu(), scoped_cond(true), impl, options);
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_EQ(g_scopes_entered.load(), 1) << "one scope for the cond and the impl together";
  EXPECT_EQ(impls_in_scope, (std::vector<bool>{true}));
  EXPECT_EQ(conds_in_scope, (std::vector<bool>{true}));
}

TEST_F(HostScopeTest, AThrowingImplOfTheHostLeavesTheScope) {
  ImplFn throwing = [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {
    throw std::runtime_error("impl failed inside the scope");
  };
  OverrideOptions options = needing_scope();
  options.impl_in_host_scope = true;
  register_override(mul_cpu(), scoped_cond(true), throwing, options);
  registry().install_graph(mul_cpu());
  EXPECT_THAT([] { call_mul(tensor({2}), tensor({4})); },
              ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("inside the scope")));
  EXPECT_FALSE(t_in_host_scope);
  EXPECT_EQ(g_scopes_entered.load(), 1);
}

TEST_F(HostScopeTest, ChainsOfPlainCondsNeverEnterTheScope) {
  register_override(mul_cpu(), scoped_cond(false), forbidden_impl());
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(g_scopes_entered.load(), 0);
  EXPECT_EQ(conds_in_scope, (std::vector<bool>{false}));
}

TEST_F(HostScopeTest, TheShortcutIsAskedInsideTheScopeAndTheDiversionRunsOutside) {
  OverrideOptions options = needing_scope();
  options.divert_when_tracing = true;
  register_override(mul_cpu(), scoped_cond(false), forbidden_impl(), options);
  registry().install_graph(mul_cpu());
  set_trace_shortcut(+[](bool in_host_scope) {
    ++g_shortcut_calls;
    EXPECT_EQ(in_host_scope, t_in_host_scope) << "the router says where it asks from";
    return t_in_host_scope;  // diverts only when asked inside the scope
  });
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(g_shortcut_calls.load(), 1);
  // The diverted call re-enters the router, which chooses in a scope of its
  // own, entered after the first one was left.
  EXPECT_EQ(g_scopes_entered.load(), 2);
  EXPECT_EQ(g_scopes_entered_inside_a_scope.load(), 0) << "the diversion ran inside the scope";
  EXPECT_EQ(conds_in_scope, (std::vector<bool>{true}));
}

// A cond of the host's own, and the form set_host_cond_resolver resolves it
// to (the same answer): each records which form ran, and where.
std::vector<std::string> g_cond_forms;
struct HostOwnCond {
  bool operator()(const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) const {
    g_cond_forms.push_back(t_in_host_scope ? "cond in scope" : "cond outside");
    return false;
  }
};
bool host_own_cond_resolved(const void*, const c10::OperatorHandle&, c10::DispatchKeySet,
                            const Stack&) {
  g_cond_forms.push_back(t_in_host_scope ? "resolved in scope" : "resolved outside");
  return false;
}
HostCond resolve_host_own_conds(const CondFn& cond) {
  if (cond.target<HostOwnCond>() != nullptr) return {&host_own_cond_resolved, nullptr};
  return {};
}

class HostCondTest : public HostScopeTest {
 protected:
  void SetUp() override {
    HostScopeTest::SetUp();
    set_host_cond_resolver(&resolve_host_own_conds);
    g_cond_forms.clear();
  }
  void TearDown() override {
    set_host_cond_resolver(nullptr);
    HostScopeTest::TearDown();
  }
};

TEST_F(HostCondTest, InsideTheScopeAHostsOwnCondRunsInItsResolvedForm) {
  register_override(mul_cpu(), HostOwnCond{}, forbidden_impl(), needing_scope());
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(g_cond_forms, std::vector<std::string>{"resolved in scope"});
}

TEST_F(HostCondTest, OutsideTheScopeAHostsOwnCondRunsAsItsCondFn) {
  // The chain needs no scope: the router asks outside it, so the CondFn itself.
  register_override(mul_cpu(), HostOwnCond{}, forbidden_impl());
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(g_cond_forms, std::vector<std::string>{"cond outside"});
}

TEST_F(HostScopeTest, ACondThatThrowsLeavesTheScopeAndReachesTheCaller) {
  CondFn throwing = [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) -> bool {
    throw std::runtime_error("cond failed inside the scope");
  };
  register_override(mul_cpu(), throwing, forbidden_impl(), needing_scope());
  registry().install_graph(mul_cpu());
  EXPECT_THAT([] { call_mul(tensor({2}), tensor({4})); },
              ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("inside the scope")));
  EXPECT_FALSE(t_in_host_scope);
  EXPECT_EQ(g_scopes_entered.load(), 1);
}

}  // namespace
}  // namespace native_registry::testing
