// Upstream main's AOT pre-check through the adapter (feature aot-coverage):
// the coverage check is asked once per call, before any cond, unconditional
// overrides included; a covered call runs the op's own kernel; an exception
// means "not covered"; the switch turns checks off. Graphs are installed
// inside the check's scope, as main resolves coverage at install.

#include "suite.h"

#include <stdexcept>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

using Log = std::shared_ptr<std::vector<std::string>>;

at::Tensor mul_2_by_4() { return call_mul(tensor({2}), tensor({4})); }

CoverageCheckFn recording_check(Log log, bool answer, std::shared_ptr<std::vector<Key>> graphs = nullptr) {
  return [log, answer, graphs](const Key& graph, const c10::OperatorHandle&, c10::DispatchKeySet,
                               const Stack& stack) {
    log->push_back("check");
    if (graphs) graphs->push_back(graph);
    EXPECT_EQ(stack.size(), 2u) << "the check sees the call's arguments";
    return answer;
  };
}

CondFn logging_cond(Log log, std::string name, bool answer) {
  return [log, name, answer](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
    log->push_back(name);
    return answer;
  };
}

TEST_P(Conformance, ACoveredCallRunsTheOpsOwnKernelAndAsksNoCond) {
  BEHAVIOUR("aot.covered-call-runs-the-op");
  REQUIRE_FEATURE("aot-coverage");
  auto log = std::make_shared<std::vector<std::string>>();
  auto graphs = std::make_shared<std::vector<Key>>();
  auto covering = adapter().coverage_check(recording_check(log, true, graphs));
  add(mul_key(), logging_cond(log, "cond", true), forbidden_impl());
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_by_4(), tensor({8})));
  EXPECT_EQ(*log, std::vector<std::string>({"check"}));
  EXPECT_EQ(*graphs, std::vector<Key>({mul_key()}));
}

TEST_P(Conformance, TheCoverageCheckIsAskedOncePerCallBeforeEveryCond) {
  BEHAVIOUR("aot.asked-once-before-the-conds");
  REQUIRE_FEATURE("aot-coverage");
  auto log = std::make_shared<std::vector<std::string>>();
  auto covering = adapter().coverage_check(recording_check(log, false));
  add(mul_key(), logging_cond(log, "first", false), forbidden_impl(), "first");
  add(mul_key(), logging_cond(log, "second", true), fill_impl(7), "second");
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_by_4(), tensor({7})));
  EXPECT_TRUE(same(mul_2_by_4(), tensor({7})));
  EXPECT_EQ(*log, std::vector<std::string>({"check", "first", "second", "check", "first", "second"}));
}

TEST_P(Conformance, ACoveredCallDeclinesAnUnconditionalOverride) {
  BEHAVIOUR("aot.unconditional-overrides-included");
  REQUIRE_FEATURE("aot-coverage");
  auto log = std::make_shared<std::vector<std::string>>();
  auto covering = adapter().coverage_check(recording_check(log, true));
  add(mul_key(), {}, forbidden_impl(), "test_dsl", {}, /*unconditional=*/true);
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_by_4(), tensor({8})));
}

TEST_P(Conformance, ACoverageCheckThatThrowsLeavesTheCallToTheConds) {
  BEHAVIOUR("aot.raising-check-means-not-covered");
  REQUIRE_FEATURE("aot-coverage");
  auto log = std::make_shared<std::vector<std::string>>();
  auto covering = adapter().coverage_check(
      [](const Key&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) -> bool {
        throw std::runtime_error("the manifest cannot read these arguments");
      });
  add(mul_key(), logging_cond(log, "cond", true), fill_impl(7));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_2_by_4(), tensor({7})));
  EXPECT_EQ(*log, std::vector<std::string>({"cond"}));
}

TEST_P(Conformance, SwitchedOffTheCoverageCheckIsNotAsked) {
  BEHAVIOUR("aot.switch-turns-checks-off");
  REQUIRE_FEATURE("aot-coverage");
  auto log = std::make_shared<std::vector<std::string>>();
  auto covering = adapter().coverage_check(recording_check(log, true));
  add(mul_key(), logging_cond(log, "cond", true), fill_impl(7));
  adapter().install(mul_key());
  {
    auto off = adapter().aot_enabled(false);
    EXPECT_TRUE(same(mul_2_by_4(), tensor({7})));
  }
  EXPECT_TRUE(same(mul_2_by_4(), tensor({8})));
  EXPECT_EQ(*log, std::vector<std::string>({"cond", "check"}));
}

}  // namespace
}  // namespace conformance
