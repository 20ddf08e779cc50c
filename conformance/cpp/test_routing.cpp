// Routing, unconditional overrides, other namespaces, teardown, meta shape
// inference and concurrent calls, through the adapter and the real dispatcher.

#include "suite.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sum.h>


namespace conformance {
namespace {

using namespace native_registry::fixtures;
using ::testing::HasSubstr;

at::Tensor mul_2_3_by_4_5() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
const at::Tensor kStock = tensor({8, 15});

TEST_P(Conformance, CondTrueRoutesToImpl) {
  BEHAVIOUR("routing.cond-true-routes-to-impl");
  add(mul_key(), constant_cond(true), fill_impl(42));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({42, 42})));
}

TEST_P(Conformance, CondFalseFallsBack) {
  BEHAVIOUR("routing.cond-false-falls-back");
  auto calls = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), counting_cond(calls, false), forbidden_impl());
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  // Installed again (the router replaced): the fallback is still the op's own
  // kernel, not the replaced router, so one call consults cond once.
  adapter().install(mul_key());
  calls->store(0);
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  EXPECT_EQ(calls->load(), 1);
}

TEST_P(Conformance, FallbackPastAFallthroughKey) {
  BEHAVIOUR("routing.fallback-past-a-fallthrough-key");
  const Key autocast{"aten", "mul.Tensor", "AutocastCPU"};
  auto declines = std::make_shared<std::atomic<int>>(0);
  add(autocast, counting_cond(declines, false), forbidden_impl(), "a");
  adapter().install(autocast);
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  EXPECT_EQ(declines->load(), 0) << "AutocastCPU is not among the keys of a call outside autocast";
  struct CpuAutocast {
    CpuAutocast() { at::autocast::set_autocast_enabled(at::kCPU, true); }
    ~CpuAutocast() { at::autocast::set_autocast_enabled(at::kCPU, false); }
  } autocast_on;
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  EXPECT_EQ(declines->load(), 1);
  add(autocast, constant_cond(true), fill_impl(7), "b");
  adapter().install(autocast);
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({7, 7})));
}

TEST_P(Conformance, FirstMatchWins) {
  BEHAVIOUR("routing.first-match-wins");
  auto first = std::make_shared<std::atomic<int>>(0);
  auto winner = std::make_shared<std::atomic<int>>(0);
  auto later = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), counting_cond(first, false), forbidden_impl(), "a");
  add(mul_key(), counting_cond(winner, true), fill_impl(1), "b");
  add(mul_key(), counting_cond(later, true), fill_impl(2), "c");
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({1, 1})));
  EXPECT_EQ(first->load(), 1);
  EXPECT_EQ(winner->load(), 1) << "each cond is consulted once per call";
  EXPECT_EQ(later->load(), 0);
}

TEST_P(Conformance, UnavailableRuntimeSkipsTheNode) {
  BEHAVIOUR("routing.runtime-unavailable-skips");
  REQUIRE_FEATURE("runtime-init");
  add(mul_key(), constant_cond(true), forbidden_impl(), "test_dsl", [] { return false; });
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
}

TEST_P(Conformance, ADecliningCondNeverInitialisesTheRuntime) {
  BEHAVIOUR("routing.runtime-after-cond");
  REQUIRE_FEATURE("runtime-init");
  auto runtime_calls = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(false), forbidden_impl(), "test_dsl",
      [runtime_calls] { return ++*runtime_calls > 0; });
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  EXPECT_EQ(runtime_calls->load(), 0) << "a declining cond initialised the runtime";
}

TEST_P(Conformance, NoRecursionThroughBmmBackward) {
  BEHAVIOUR("routing.no-recursion-through-autograd");
  const at::Tensor a = at::randn({2, 3, 4}).requires_grad_(true);
  const at::Tensor b = at::randn({2, 4, 5}).requires_grad_(true);
  const at::Tensor expected = at::bmm(a.detach(), b.detach());
  const at::Tensor ones = at::ones_like(expected);
  const at::Tensor grad_a = at::bmm(ones, b.detach().transpose(1, 2));
  const at::Tensor grad_b = at::bmm(a.detach().transpose(1, 2), ones);
  add(bmm_key(), constant_cond(false), forbidden_impl());
  adapter().install(bmm_key());
  const at::Tensor out = at::bmm(a, b);
  EXPECT_TRUE(same(out.detach(), expected));
  at::sum(out).backward();
  EXPECT_TRUE(same(a.grad(), grad_a));
  EXPECT_TRUE(same(b.grad(), grad_b));
}

TEST_P(Conformance, EmptyGraphTakesTheRouterDown) {
  BEHAVIOUR("routing.empty-graph-removes-router");
  add(mul_key(), constant_cond(true), fill_impl(99));
  adapter().install(mul_key());
  EXPECT_TRUE(adapter().router_installed(mul_key()));
  adapter().set_graph(mul_key(), {});
  adapter().install(mul_key());
  EXPECT_FALSE(adapter().router_installed(mul_key()));
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
}

TEST_P(Conformance, UserErrorsReachTheCaller) {
  BEHAVIOUR("routing.user-errors-propagate");
  CondFn throwing = [](const c10::OperatorHandle&, c10::DispatchKeySet,
                       const Stack&) -> bool {
    throw std::invalid_argument("cond exploded");
  };
  add(mul_key(), throwing, fill_impl(1));
  adapter().install(mul_key());
  for (int i = 0; i < 2; ++i) {
    try {
      mul_2_3_by_4_5();
      ADD_FAILURE() << "no exception";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), HasSubstr("cond exploded"));
    }
  }
  adapter().disable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
}

TEST_P(Conformance, UnconditionalTakesEveryCall) {
  BEHAVIOUR("unconditional.cond-none-always-matches");
  add(mul_key(), CondFn{}, fill_impl(5), "test_dsl", {}, true);
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5})));
  EXPECT_TRUE(same(call_mul(tensor({0}), tensor({0})), tensor({5})));
}

TEST_P(Conformance, UnconditionalGivenACondTakesOnlyTheCallsItAccepts) {
  BEHAVIOUR("unconditional.given-cond-chooses-calls");
  CondFn two_elements = [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
    return stack.back().toTensor().numel() == 2;
  };
  add(mul_key(), two_elements, fill_impl(5), "test_dsl", {}, true);
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5})));
  EXPECT_TRUE(same(call_mul(tensor({3}), tensor({4})), tensor({12})))
      << "a declined call runs the op's own kernel";
  add(mul_key(), constant_cond(true), fill_impl(7), "other_dsl");
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5})));
  EXPECT_TRUE(same(call_mul(tensor({3}), tensor({4})), tensor({7})))
      << "a declined call goes on to the next node";
}

TEST_P(Conformance, UnconditionalSurvivesDisable) {
  BEHAVIOUR("unconditional.survives-disable");
  REQUIRE_FEATURE("unconditional-survives-disable");
  add(mul_key(), CondFn{}, fill_impl(5), "test_dsl", {}, true);
  adapter().install(mul_key());
  adapter().disable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5})));
}

TEST_P(Conformance, HatchMasksOnlyWhileDisabledAndInScope) {
  BEHAVIOUR("unconditional.hatch-masks-while-disabled");
  REQUIRE_FEATURE("unconditional-hatch");
  add(mul_key(), CondFn{}, fill_impl(5), "test_dsl", {}, true);
  adapter().install(mul_key());
  {
    auto mask = adapter().unconditional_masked();
    EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5}))) << "the hatch alone must not mask";
    // Entering the mask need not touch a graph it masks nothing of: an
    // install builds the chain anew, under the mask.
    adapter().install(mul_key());
    EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5})))
        << "the hatch alone must not mask, also once the graph is installed again under it";
  }
  adapter().disable({{"test_dsl"}, {}, {}});
  {
    auto mask = adapter().unconditional_masked();
    EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  }
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5})));
}

// The hatch masks the disabled one of two unconditional overrides of a graph,
// and only that one: the graph it republishes goes on to the enabled one.
TEST_P(Conformance, HatchMasksOnlyTheDisabledOfTwoUnconditionalOverrides) {
  BEHAVIOUR("unconditional.hatch-masks-while-disabled");
  REQUIRE_FEATURE("unconditional-hatch");
  add(mul_key(), CondFn{}, fill_impl(6), "masked_dsl", {}, true);
  add(mul_key(), CondFn{}, fill_impl(5), "test_dsl", {}, true);
  adapter().install(mul_key());
  adapter().disable({{"masked_dsl"}, {}, {}});
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({6, 6}))) << "a disable alone must not mask";
  {
    auto mask = adapter().unconditional_masked();
    EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({5, 5})))
        << "the hatch must mask the disabled override and only it: the enabled one takes the call";
  }
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({6, 6}))) << "leaving the hatch must restore the override";
}

TEST_P(Conformance, OtherNamespaceRoutesAndFallsBack) {
  BEHAVIOUR("namespaces.non-aten-routes");
  REQUIRE_FEATURE("namespaces");
  CondFn two_elements = [](const c10::OperatorHandle&, c10::DispatchKeySet,
                           const Stack& stack) {
    return stack.back().toTensor().numel() == 2;
  };
  add(twice_key(kTestNamespace), two_elements, fill_impl(99));
  adapter().install(twice_key(kTestNamespace));
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({99, 99})));
  EXPECT_TRUE(same(ns1().twice(tensor({1})), tensor({2})));
}

TEST_P(Conformance, ReplacedOverrideIsRebuiltOnTheOpsOwnKernel) {
  BEHAVIOUR("teardown.replaced-override-rebuilt-on-own-kernel");
  auto declines = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), counting_cond(declines, false), fill_impl(11));  // live before "the test"
  adapter().install(mul_key());
  {
    auto test_scope = adapter().scope();
    add(mul_key(), constant_cond(true), fill_impl(99));
    adapter().set_graph(mul_key(), {adapter().graph(mul_key()).back().node_id});
    adapter().install(mul_key());
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({99})));
  }
  declines->store(0);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(declines->load(), 1);
}

// A kernel of the test's own for aten::mul at CPU (full of 42s).
at::Tensor mul_of_fortytwos(const at::Tensor& a, const at::Tensor&) { return at::full_like(a, 42); }

// As above, the replacement installed while a kernel of the test's own sat
// over the op's (so it may have captured that one), which is gone by the
// teardown: the restored override still falls back to the op's own kernel.
TEST_P(Conformance, AReplacementOverAKernelSinceGoneIsRebuiltOnTheOpsOwnKernel) {
  BEHAVIOUR("teardown.replaced-override-rebuilt-on-own-kernel");
  auto declines = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), counting_cond(declines, false), fill_impl(11));  // live before "the test"
  adapter().install(mul_key());
  {
    auto test_scope = adapter().scope();
    {
      torch::Library mine(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
      mine.impl("mul.Tensor", TORCH_FN(mul_of_fortytwos));
      adapter().install(mul_key());
      EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({42})));
    }
  }
  declines->store(0);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(declines->load(), 1);
}

TEST_P(Conformance, TeardownRestoresEveryTable) {
  BEHAVIOUR("teardown.dispatcher-restored-exactly");
  const auto before = fingerprint();
  {
    auto test_scope = adapter().scope();
    add(mul_key(), constant_cond(true), fill_impl(1), "d");
    add(bmm_key(), constant_cond(false), fill_impl(1), "d");
    adapter().install_all();
    EXPECT_NE(fingerprint().difference(before), "") << "installing changed no table";
    adapter().disable({{"d"}, {}, {}});
  }
  EXPECT_EQ(fingerprint().difference(before), "");
}

TEST_P(Conformance, MetaShapeInferenceRunsNeitherImplNorRuntime) {
  BEHAVIOUR("fake.shape-inference-without-impl");
  REQUIRE_FEATURE("native-op-meta");
  auto runtime_calls = std::make_shared<std::atomic<int>>(0);
  TryInitializeRuntimeFn runtime;
  if (adapter().supports("runtime-init")) {
    runtime = [runtime_calls] { return ++*runtime_calls > 0; };
  }
  add(mul_key(), constant_cond(true), forbidden_impl(), "test_dsl", runtime);
  adapter().install(mul_key());
  const auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kFloat);
  const at::Tensor direct = call_mul(at::empty({3, 4}, meta), at::empty({3, 4}, meta));
  EXPECT_EQ(direct.sizes(), at::IntArrayRef({3, 4}));
  auto native = adapter().native_op(adapter().graph(mul_key())[0]);
  ASSERT_TRUE(native.has_value()) << "no _native op for the node";
  Stack stack{at::empty({3, 4}, meta), at::empty({3, 4}, meta)};
  native->callBoxed(&stack);
  EXPECT_TRUE(stack.at(0).toTensor().is_meta());
  EXPECT_EQ(stack.at(0).toTensor().sizes(), at::IntArrayRef({3, 4}));
  EXPECT_EQ(runtime_calls->load(), 0);
}

TEST_P(Conformance, CallsSeeWholeChainsWhileTheControlPlaneChanges) {
  BEHAVIOUR("concurrency.calls-see-whole-chains");
  REQUIRE_FEATURE("concurrent-control-plane");
  add(mul_key(), constant_cond(true), fill_impl(1), "dsl_a");
  add(mul_key(), constant_cond(true), fill_impl(2), "dsl_b");
  adapter().install(mul_key());
  const Race race = race_calls_against_toggles(
      [] { return call_mul(tensor({2}), tensor({4})).item<float>(); }, {1.f, 2.f, 8.f});
  EXPECT_EQ(race.bad, 0);
  EXPECT_GT(race.calls, 0);
}

// ---- what installs a router and what may not: filter changes and the
// unconditional mask leave graphs that were never installed alone; a full
// re-install keeps the filters; the `_native` op asks the runtime when a
// program calls it.

TEST_P(Conformance, FilterChangesInstallNoRouterForAGraphNeverInstalled) {
  BEHAVIOUR("filters.change-installs-no-router");
  add(mul_key(), constant_cond(true), fill_impl(7));
  const std::vector<Filter> filters = {{{"test_dsl"}, {}, {}}, {{}, {"mul.Tensor"}, {}},
                                       {{}, {}, {"CPU"}}};
  for (const Filter& filter : filters) {
    adapter().disable(filter);
    EXPECT_FALSE(adapter().router_installed(mul_key())) << "disabling installed a router";
    adapter().enable(filter);
    EXPECT_FALSE(adapter().router_installed(mul_key())) << "re-enabling installed a router";
  }
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
}

TEST_P(Conformance, TheUnconditionalMaskInstallsNoRouterForAGraphNeverInstalled) {
  BEHAVIOUR("unconditional.mask-installs-no-router");
  REQUIRE_FEATURE("unconditional-hatch");
  add(mul_key(), CondFn{}, fill_impl(5), "test_dsl", {}, true);
  adapter().disable({{"test_dsl"}, {}, {}});
  {
    auto mask = adapter().unconditional_masked();
    EXPECT_FALSE(adapter().router_installed(mul_key())) << "entering the mask installed a router";
  }
  EXPECT_FALSE(adapter().router_installed(mul_key())) << "leaving the mask installed a router";
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
}

TEST_P(Conformance, InstallAllKeepsDisabledNodesDisabled) {
  BEHAVIOUR("ordering.reregister-keeps-filters");
  add(mul_key(), constant_cond(true), fill_impl(7), "d");
  add(mul_key(), constant_cond(false), fill_impl(8), "e");
  adapter().install(mul_key());
  adapter().disable({{"d"}, {}, {}});
  adapter().install_all();
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock)) << "a full re-install brought a disabled override back";
  for (const NodeInfo& node : adapter().graph(mul_key())) {
    EXPECT_EQ(node.active, node.dsl_name != "d") << node.dsl_name;
  }
  adapter().enable({{"d"}, {}, {}});
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({7, 7})));
}

TEST_P(Conformance, TheNativeOpAsksTheRuntimeWhenCalled) {
  BEHAVIOUR("export.runtime-asked-at-run-time");
  REQUIRE_FEATURE("runtime-init");
  REQUIRE_FEATURE("native-op-meta");
  auto available = std::make_shared<std::atomic<bool>>(false);
  add(mul_key(), constant_cond(true), fill_impl(42), "test_dsl", [available] { return available->load(); });
  adapter().install(mul_key());
  auto native = adapter().native_op(adapter().graph(mul_key())[0]);
  ASSERT_TRUE(native.has_value()) << "no _native op for the node";
  // What an exported program does: it calls the _native op directly.
  auto call_native = [&] {
    Stack stack{tensor({2, 3}), tensor({4, 5})};
    native->callBoxed(&stack);
    return stack.at(0).toTensor();
  };
  EXPECT_TRUE(same(call_native(), kStock)) << "the _native op ran an impl whose runtime is unavailable";
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  available->store(true);
  EXPECT_TRUE(same(call_native(), tensor({42, 42})));
}

// The boxed convention: a kernel owns the top of the stack only (TorchScript's
// interpreter and C++ callers keep values beneath). For an op that takes no
// tensor the `_native` op chooses its kernel from the call's own dtype,
// layout and device, so it must read them there.
TEST_P(Conformance, AFactoryNativeOpTakesItsArgumentsFromTheTopOfTheStack) {
  BEHAVIOUR("export.factory-native-op-boxed-call");
  REQUIRE_FEATURE("native-op-meta");
  const Key ones{"aten", "ones", "CPU"};
  add(ones, constant_cond(true), [](const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    torch::jit::drop(*stack, op.schema().arguments().size());
    stack->emplace_back(at::full({2}, 9.0));
  });
  adapter().install(ones);
  auto native = adapter().native_op(adapter().graph(ones)[0]);
  ASSERT_TRUE(native.has_value()) << "no _native op for the node";
  for (const std::optional<c10::Device> device : {std::optional<c10::Device>(), std::optional(c10::Device(at::kMeta))}) {
    SCOPED_TRACE(device ? "on meta" : "on the default device");
    Stack stack{c10::IValue("beneath"), c10::IValue(std::vector<int64_t>{2}), c10::IValue(),
                c10::IValue(), c10::IValue(device), c10::IValue()};
    try {
      native->callBoxed(&stack);
    } catch (const c10::Error& e) {
      FAIL() << "the call raised: " << e.what_without_backtrace();
    }
    ASSERT_EQ(stack.size(), 2u) << "the call took or left other than its own arguments";
    EXPECT_EQ(stack[0].toStringRef(), "beneath");
    const at::Tensor out = stack[1].toTensor();
    EXPECT_EQ(out.sizes(), at::IntArrayRef({2}));
    if (device) {
      EXPECT_TRUE(out.is_meta());
    } else {
      EXPECT_TRUE(same(out, tensor({9, 9})));
    }
  }
}

}  // namespace
}  // namespace conformance
