// Safe degradation through the adapter (feature impl-error-fallback; beyond
// upstream): under the policy "fallback" an impl's error runs the op's own
// kernel on the call's arguments as they came in, also when the impl took
// them off the stack first; an op whose schema writes an argument still raises.

#include "suite.h"

#include <ATen/ops/addcmul.h>
#include <ATen/ops/mul.h>

#include <stdexcept>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

// Takes the call's arguments off the stack, then throws: what a boxed impl
// that fails halfway leaves behind.
ImplFn popping_then_throwing() {
  return [](const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    torch::jit::drop(*stack, op.schema().arguments().size());
    throw std::runtime_error("no driver");
  };
}

TEST_P(Conformance, UnderFallbackAnImplErrorRunsTheOpOnTheCallsArguments) {
  BEHAVIOUR("degrade.fallback-runs-the-op");
  REQUIRE_FEATURE("impl-error-fallback");
  add(mul_key(), constant_cond(true), popping_then_throwing());
  adapter().install(mul_key());
  EXPECT_THROW(call_mul(tensor({2, 3}), tensor({4, 5})), std::exception) << "the default raises";
  {
    auto fallback = adapter().impl_error_policy("fallback");
    EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
    EXPECT_TRUE(same(call_mul(tensor({3}), tensor({3})), tensor({9})));
  }
  EXPECT_THROW(call_mul(tensor({2}), tensor({4})), std::exception) << "the policy is back to raise";
}

// addcmul (three tensors and a scalar) has no typed router kernel in the
// reference, so its call is routed on a Stack: the impl's error there must put
// back the arguments it took off.
TEST_P(Conformance, UnderFallbackAnImplErrorRunsTheOpOnTheCallsArgumentsForAnyOp) {
  BEHAVIOUR("degrade.fallback-runs-the-op");
  REQUIRE_FEATURE("impl-error-fallback");
  const Key addcmul_key{"aten", "addcmul", "CPU"};
  add(addcmul_key, constant_cond(true), popping_then_throwing());
  adapter().install(addcmul_key);
  auto fallback = adapter().impl_error_policy("fallback");
  EXPECT_TRUE(same(at::addcmul(tensor({1, 2}), tensor({2, 3}), tensor({4, 5})), tensor({9, 17})));
}

TEST_P(Conformance, UnderFallbackAnImplThatReturnsGivesItsResult) {
  BEHAVIOUR("degrade.fallback-runs-the-op");
  REQUIRE_FEATURE("impl-error-fallback");
  add(mul_key(), constant_cond(true), fill_impl(7));
  adapter().install(mul_key());
  auto fallback = adapter().impl_error_policy("fallback");
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({7, 7})))
      << "an impl that returned was taken for one that failed";
}

TEST_P(Conformance, AnInPlaceOpsImplErrorStillRaisesUnderFallback) {
  BEHAVIOUR("degrade.writing-ops-still-raise");
  REQUIRE_FEATURE("impl-error-fallback");
  const Key inplace{"aten", "mul_.Tensor", "CPU"};
  add(inplace, constant_cond(true), [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {
    throw std::runtime_error("half written");
  });
  adapter().install(inplace);
  auto fallback = adapter().impl_error_policy("fallback");
  at::Tensor target = tensor({2, 3});
  EXPECT_THROW(target.mul_(tensor({4, 5})), std::exception);
}

TEST_P(Conformance, APolicyScopeInsideAnotherGivesTheOuterPolicyBack) {
  BEHAVIOUR("degrade.policy-scopes-nest");
  REQUIRE_FEATURE("impl-error-fallback");
  add(mul_key(), constant_cond(true), popping_then_throwing());
  adapter().install(mul_key());
  {
    auto fallback = adapter().impl_error_policy("fallback");
    {
      auto raise = adapter().impl_error_policy("raise");
      EXPECT_THROW(call_mul(tensor({2}), tensor({4})), std::exception);
    }
    EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})))
        << "the outer scope's fallback is in force again";
  }
  EXPECT_THROW(call_mul(tensor({2}), tensor({4})), std::exception) << "the default is back";
}

}  // namespace
}  // namespace conformance
