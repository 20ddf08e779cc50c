// The settings a registry gives all its routers. The coverage check
// (upstream main's AOT pre-check): asked once per call before any cond,
// unconditional nodes included; a covered call runs the captured kernel; an
// exception means "not covered"; the process-wide switch; set or unset at
// once on installed routers and on those installed later. The impl error
// policy: "fallback" runs the captured kernel on an impl's error, with the
// notice once per node and the errors a host marks as propagating let
// through, never for an op that writes its arguments. And the invariant that
// every router follows its registry's settings.

#include "support.h"

#include <native_registry/call_hooks.h>
#include <native_registry/router_kind.h>

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace native_registry::testing {
namespace {

using CoverageCheckTest = RegistryTest;

// Answers `answer`, appending "check" to `log` and the graph it was told to `graphs`.
CoverageCheck recording_check(std::shared_ptr<std::vector<std::string>> log, bool answer,
                              std::shared_ptr<std::vector<std::string>> graphs = nullptr) {
  return [log, answer, graphs](const GraphKey& graph, const c10::OperatorHandle& op,
                               c10::DispatchKeySet, const Stack& stack) {
    log->push_back("check");
    if (graphs) graphs->push_back(graph.to_string());
    EXPECT_EQ(op.operator_name(), c10::OperatorName("aten::mul", "Tensor"));
    EXPECT_EQ(stack.size(), 2u) << "the check sees the call's arguments";
    return answer;
  };
}

CondFn logging_cond(std::shared_ptr<std::vector<std::string>> log, std::string name,
                    bool answer) {
  return [log, name, answer](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
    log->push_back(name);
    return answer;
  };
}

using CoverageSwitch = SettingSwitched<coverage_checks_enabled, set_coverage_checks_enabled>;

TEST_F(CoverageCheckTest, ACoveredCallRunsTheCapturedKernelAndAsksNoCond) {
  auto log = std::make_shared<std::vector<std::string>>();
  auto graphs = std::make_shared<std::vector<std::string>>();
  registry().set_coverage_check(recording_check(log, true, graphs));
  register_override(mul_cpu(), logging_cond(log, "cond", true), forbidden_impl());
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
  EXPECT_EQ(*log, std::vector<std::string>({"check"}));
  EXPECT_EQ(*graphs, std::vector<std::string>({mul_cpu().to_string()}));
  registry().check_invariants();
}

TEST_F(CoverageCheckTest, AskedOncePerCallBeforeEveryCond) {
  auto log = std::make_shared<std::vector<std::string>>();
  registry().set_coverage_check(recording_check(log, false));
  register_override(mul_cpu(), logging_cond(log, "first", false), forbidden_impl());
  register_override(mul_cpu(), logging_cond(log, "second", true), fill_impl(7));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_EQ(*log, std::vector<std::string>({"check", "first", "second", "check", "first", "second"}));
}

TEST_F(CoverageCheckTest, ACoveredCallDeclinesAnUnconditionalOverride) {
  auto log = std::make_shared<std::vector<std::string>>();
  OverrideOptions unconditional;
  unconditional.unconditional_override = true;
  register_override(mul_cpu(), nullptr, forbidden_impl(), unconditional);
  registry().set_coverage_check(recording_check(log, true));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({3}), tensor({5})), tensor({15})));
}

TEST_F(CoverageCheckTest, AnExceptionMeansNotCovered) {
  auto log = std::make_shared<std::vector<std::string>>();
  registry().set_coverage_check([](const GraphKey&, const c10::OperatorHandle&,
                                   c10::DispatchKeySet, const Stack&) -> bool {
    throw std::runtime_error("the manifest cannot read these arguments");
  });
  register_override(mul_cpu(), logging_cond(log, "cond", true), fill_impl(7));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_EQ(*log, std::vector<std::string>({"cond"}));
}

TEST_F(CoverageCheckTest, SwitchedOffTheCheckIsNotAsked) {
  auto log = std::make_shared<std::vector<std::string>>();
  registry().set_coverage_check(recording_check(log, true));
  register_override(mul_cpu(), logging_cond(log, "cond", true), fill_impl(7));
  registry().install_graph(mul_cpu());
  {
    CoverageSwitch off(false);
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  }
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(*log, std::vector<std::string>({"cond", "check"}));
}

TEST_F(CoverageCheckTest, SetAndUnsetTakeEffectOnInstalledRoutersAtOnce) {
  auto log = std::make_shared<std::vector<std::string>>();
  register_override(mul_cpu(), logging_cond(log, "cond", true), fill_impl(7));
  registry().install_graph(mul_cpu());
  EXPECT_FALSE(registry().has_coverage_check());
  registry().set_coverage_check(recording_check(log, true));
  EXPECT_TRUE(registry().has_coverage_check());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().check_invariants();
  registry().set_coverage_check(nullptr);
  EXPECT_FALSE(registry().has_coverage_check());
  EXPECT_FALSE(static_cast<bool>(registry().coverage_check()));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_EQ(*log, std::vector<std::string>({"check", "cond"}));
  registry().check_invariants();
}

TEST_F(CoverageCheckTest, ARouterInstalledAfterwardsAsksTheCheckAndARestoreKeepsIt) {
  auto log = std::make_shared<std::vector<std::string>>();
  const Snapshot before = registry().snapshot();
  registry().set_coverage_check(recording_check(log, true));
  register_override(mul_cpu(), logging_cond(log, "cond", true), forbidden_impl());
  registry().install_graph(mul_cpu(), InstallMode::kReinstall);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().restore(before);  // a setting, not state: the check stays
  EXPECT_TRUE(registry().has_coverage_check());
  registry().check_invariants();
}

// Bytes the process has allocated, heap and mmapped chunks both.
size_t allocated_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

TEST_F(CoverageCheckTest, ApplyingTheSettingsAgainKeepsNothingMoreOfTheCheck) {
  // Each settings change re-applies the check to every router, which keeps
  // each check it was given once: 100,000 changes hold no more memory.
  register_override(mul_cpu(), constant_cond(false), forbidden_impl());
  registry().install_graph(mul_cpu());
  registry().set_coverage_check(
      [](const GraphKey&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
        return false;
      });
  for (int i = 0; i < 1000; ++i) registry().set_collect_stats(i % 2 == 0);
  const size_t before = allocated_bytes();
  for (int i = 0; i < 100000; ++i) registry().set_collect_stats(i % 2 == 0);
  const size_t after = allocated_bytes();
  EXPECT_LT(after, before + 256 * 1024) << "the routers grew by " << (after - before)
                                         << " bytes over 100,000 settings changes";
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().check_invariants();
}

// ---- the impl error policy --------------------------------------------------------

using ImplErrorPolicyTest = RegistryTest;

ImplFn throwing_impl(std::shared_ptr<std::atomic<int>> calls) {
  return [calls](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {
    ++*calls;
    throw std::runtime_error("no driver");
  };
}

// Counts the notices the hook receives, and which node each names.
std::vector<std::string>& notices() {
  static std::vector<std::string> seen;
  return seen;
}

TEST_F(ImplErrorPolicyTest, TheDefaultRaisesAndFallbackRunsTheCapturedKernel) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  EXPECT_EQ(registry().impl_error_policy(), ImplErrorPolicy::kRaise);
  register_override(mul_cpu(), constant_cond(true), throwing_impl(calls));
  registry().install_graph(mul_cpu());
  EXPECT_THROW(call_mul(tensor({2}), tensor({4})), std::runtime_error);
  registry().set_impl_error_policy(ImplErrorPolicy::kFallback);
  registry().check_invariants();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(calls->load(), 2);
  registry().set_impl_error_policy(ImplErrorPolicy::kRaise);
  EXPECT_THROW(call_mul(tensor({2}), tensor({4})), std::runtime_error);
}

TEST_F(ImplErrorPolicyTest, TheNoticeComesOncePerNodeAndMustPropagateErrorsAreNeverAbsorbed) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  const NodePtr node = register_override(mul_cpu(), constant_cond(true), throwing_impl(calls));
  registry().set_impl_error_policy(ImplErrorPolicy::kFallback);
  registry().install_graph(mul_cpu());
  notices().clear();
  set_fallback_notice([](const OverrideNode& n, const c10::OperatorHandle&, const std::exception& e) {
    notices().push_back(n.node_id + ": " + e.what());
  });
  set_must_propagate([](const std::exception& e) { return std::string(e.what()) == "interrupt"; });
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(notices(), std::vector<std::string>({node->node_id + ": no driver"}));
  OverrideOptions none;
  register_override(mul_cpu(), constant_cond(true),
                    [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {
                      throw std::runtime_error("interrupt");
                    }, none, "interrupting_dsl");
  registry().reorder_graphs([](const std::string&, const std::string&, const Graph& graph) {
    return Graph(graph.rbegin(), graph.rend());
  }, /*reregister=*/true);
  EXPECT_THROW(call_mul(tensor({2}), tensor({4})), std::runtime_error);
  set_fallback_notice(nullptr);
  set_must_propagate(nullptr);
}

TEST_F(ImplErrorPolicyTest, AnOpThatWritesItsArgumentsStillRaises) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  const GraphKey inplace{"aten", "mul_.Tensor", "CPU"};
  register_override(inplace, constant_cond(true), throwing_impl(calls));
  registry().set_impl_error_policy(ImplErrorPolicy::kFallback);
  registry().install_graph(inplace);
  at::Tensor target = tensor({2});
  EXPECT_THROW(target.mul_(tensor({4})), std::runtime_error);
}

// The invariant holds whichever policy was set, before the router's install
// or after it: each router follows the registry's policy.
TEST_F(ImplErrorPolicyTest, EveryRouterFollowsThePolicySetBeforeOrAfterItsInstall) {
  registry().set_impl_error_policy(ImplErrorPolicy::kFallback);
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_graph(mul_cpu());
  registry().check_invariants();
  registry().set_impl_error_policy(ImplErrorPolicy::kRaise);
  registry().check_invariants();
  registry().set_impl_error_policy(ImplErrorPolicy::kFallback);
  registry().check_invariants();
}

// ---- routing stats --------------------------------------------------------------

using StatsSettingTest = RegistryTest;

// The invariant holds whichever way counting was set, before the router's
// install or after it: each router follows the registry's setting.
TEST_F(StatsSettingTest, EveryRouterFollowsTheStatsSettingSetBeforeOrAfterItsInstall) {
  registry().set_collect_stats(true);
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_graph(mul_cpu());
  registry().check_invariants();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  ASSERT_EQ(registry().stats().graphs.size(), 1u);
  EXPECT_EQ(registry().stats().graphs[0].calls, 1u);
  registry().set_collect_stats(false);
  registry().check_invariants();
  registry().set_collect_stats(true);
  registry().check_invariants();
}

// The process-wide choice of router kernel (typed for common signatures, or
// boxed for every op) reads back as it was last set: the benchmarks switch it
// and name their rows by it.
TEST(RouterKindTest, TheTypedRoutersSwitchReadsBackWhatWasSet) {
  const bool before = typed_routers_enabled();
  set_typed_routers_enabled(false);
  EXPECT_FALSE(typed_routers_enabled());
  set_typed_routers_enabled(true);
  EXPECT_TRUE(typed_routers_enabled());
  set_typed_routers_enabled(before);
}

// Typed is the default (router_kind.h); NATIVE_REGISTRY_BOXED_ROUTERS=1 is
// how a suite is run over the boxed kernel instead (meson test
// conformance_cpp_reference_boxed). Every test that switches it puts it back.
TEST(RouterKindTest, TypedRoutersAreTheDefaultUnlessTheEnvironmentAsksForBoxedOnes) {
  const char* boxed = std::getenv("NATIVE_REGISTRY_BOXED_ROUTERS");
  const bool asked_for_boxed = boxed != nullptr && std::string_view(boxed) == "1";
  EXPECT_EQ(typed_routers_enabled(), !asked_for_boxed);
}

}  // namespace
}  // namespace native_registry::testing
