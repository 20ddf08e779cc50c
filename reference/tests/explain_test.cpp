// Registry::explain beyond the conformance contract: the table, C++
// predicates, nodes the router's chain does not hold yet, the op named by a
// string, a dormant router, a fallthrough key, the coverage switch, another
// registry's `_native` op, and bad input that changes nothing.

#include "support.h"

#include <native_registry/call_hooks.h>
#include <native_registry/predicates.h>

#include <stdexcept>

namespace native_registry::testing {
namespace {

using ExplainTest = RegistryTest;
using ::testing::HasSubstr;
using namespace fixtures;
namespace P = native_registry::predicates;

Stack explain_mul_args(at::ScalarType dtype = at::kFloat) {
  return {tensor({2}).to(dtype), tensor({4}).to(dtype)};
}

std::vector<ExplainVerdict> explained_verdicts(const Explanation& e) {
  std::vector<ExplainVerdict> out;
  for (const auto& node : e.nodes) out.push_back(node.verdict);
  return out;
}

TEST_F(ExplainTest, TheTableShowsTheKeyEachNodeAndTheKernel) {
  register_override(mul_cpu(), constant_cond(false), forbidden_impl(), {}, "first_dsl");
  const NodePtr second =
      register_override(mul_cpu(), constant_cond(true), forbidden_impl(), {}, "second_dsl");
  registry().install_all();
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  const std::string table = e.to_string();
  EXPECT_THAT(table, HasSubstr("explain aten::mul.Tensor at CPU"));
  EXPECT_THAT(table, HasSubstr("node_id"));
  EXPECT_THAT(table, HasSubstr("first_dsl"));
  EXPECT_THAT(table, HasSubstr("declined"));
  EXPECT_THAT(table, HasSubstr("accepted"));
  EXPECT_THAT(table, HasSubstr("kernel:   impl of " + second->node_id));
  EXPECT_THAT(e.why_key, HasSubstr("AutogradCPU")) << "the keys visited on the way";
  EXPECT_EQ(e.router, "active");
  EXPECT_EQ(e.coverage, "none set");
}

TEST_F(ExplainTest, PredicateCondsAreAskedOnTheCallsArguments) {
  register_override(mul_cpu(), P::dtype_in({at::kHalf}), forbidden_impl());
  registry().install_all();
  EXPECT_EQ(explained_verdicts(registry().explain("aten::mul.Tensor", explain_mul_args())),
            std::vector<ExplainVerdict>({ExplainVerdict::kDeclined}));
  EXPECT_EQ(explained_verdicts(registry().explain("aten::mul.Tensor", explain_mul_args(at::kHalf))),
            std::vector<ExplainVerdict>({ExplainVerdict::kAccepted}));
}

TEST_F(ExplainTest, ANodeRegisteredAfterTheInstallIsNotPublished) {
  register_override(mul_cpu(), constant_cond(false), forbidden_impl(), {}, "installed_dsl");
  registry().install_all();
  register_override(mul_cpu(), constant_cond(true), forbidden_impl(), {}, "late_dsl");
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  EXPECT_EQ(explained_verdicts(e), std::vector<ExplainVerdict>(
                             {ExplainVerdict::kDeclined, ExplainVerdict::kNotPublished}));
  EXPECT_EQ(e.kernel, ExplainKernel::kFallback) << "the router's chain decides, not the graph";
  registry().install_all();
  EXPECT_EQ(registry().explain("aten::mul.Tensor", explain_mul_args()).kernel, ExplainKernel::kNodeImpl);
}

TEST_F(ExplainTest, AReorderNotYetInstalledIsWalkedInTheRoutersOrder) {
  const NodePtr first =
      register_override(mul_cpu(), constant_cond(true), forbidden_impl(), {}, "first_dsl");
  const NodePtr second =
      register_override(mul_cpu(), constant_cond(true), forbidden_impl(), {}, "second_dsl");
  registry().install_all();
  registry().reorder_graphs(
      [](const std::string&, const std::string&, const Graph& graph) {
        return Graph(graph.rbegin(), graph.rend());
      },
      /*reinstall=*/false);
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  ASSERT_EQ(e.nodes.size(), 2u);
  EXPECT_EQ(e.nodes[0].node_id, first->node_id) << "the router still routes first_dsl first";
  EXPECT_EQ(e.kernel_node_id, first->node_id);
  EXPECT_THAT(e.router, HasSubstr("older order"));
  registry().install_all();
  const Explanation after = registry().explain("aten::mul.Tensor", explain_mul_args());
  EXPECT_EQ(after.kernel_node_id, second->node_id);
  EXPECT_EQ(after.router, "active");
}

TEST_F(ExplainTest, ADormantRouterSendsTheCallToTheFallback) {
  register_override(mul_cpu(), constant_cond(true), forbidden_impl(), {}, "gone_dsl");
  registry().install_all();
  registry().deregister_op_overrides({{"gone_dsl"}, {}, {}});
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  EXPECT_THAT(e.router, HasSubstr("dormant"));
  EXPECT_EQ(e.kernel, ExplainKernel::kFallback);
  EXPECT_THAT(e.nodes.at(0).detail, HasSubstr("dsl name 'gone_dsl'"));
}

TEST_F(ExplainTest, AFallthroughKeySaysTheNextKeysKernelRuns) {
  const GraphKey autocast{"aten", "mul.Tensor", "AutocastCPU"};
  register_override(autocast, constant_cond(false), forbidden_impl());
  registry().install_graph(autocast);
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args(), "AutocastCPU");
  EXPECT_EQ(e.kernel, ExplainKernel::kFallthrough) << e.to_string();
}

TEST_F(ExplainTest, TheCoverageSwitchTurnsTheCheckOff) {
  registry().set_coverage_check(
      [](const GraphKey&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
        return true;
      });
  register_override(mul_cpu(), constant_cond(true), forbidden_impl());
  registry().install_all();
  EXPECT_EQ(registry().explain("aten::mul.Tensor", explain_mul_args()).kernel, ExplainKernel::kFallback);
  const bool before = coverage_checks_enabled();
  set_coverage_checks_enabled(false);
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  set_coverage_checks_enabled(before);
  EXPECT_THAT(e.coverage, HasSubstr("switched off"));
  EXPECT_EQ(e.kernel, ExplainKernel::kNodeImpl);
  registry().set_coverage_check({});
}

TEST_F(ExplainTest, AnotherRegistrysNativeOpIsRefused) {
  Registry other;
  const NodePtr node = other.register_op_override("other_dsl", "aten", "mul.Tensor", "CPU",
                                                  constant_cond(false), forbidden_impl());
  other.install_all();
  auto native = hold_native_op(node->node_id);
  ASSERT_TRUE(native);
  EXPECT_EQ(other.explain(*native, {}).kernel_node_id, node->node_id);
  try {
    registry().explain(*native, {});
    ADD_FAILURE() << "a node of another registry must be refused";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr(node->node_id));
  }
  native.reset();  // before `other`, whose teardown then undefines the op
}

TEST_F(ExplainTest, BadInputRaisesNamingTheValueAndChangesNothing) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_all();
  EXPECT_THROW(
      {
        try {
          registry().explain("aten::no_such_op_42", explain_mul_args());
        } catch (const OperatorNotFoundError& e) {
          EXPECT_THAT(e.what(), HasSubstr("aten::no_such_op_42"));
          throw;
        }
      },
      OperatorNotFoundError);
  EXPECT_THROW(registry().explain("mul.Tensor", explain_mul_args()), InvalidArgumentError);
  try {
    registry().explain("aten::mul.Tensor", {tensor({2})});
    ADD_FAILURE() << "a stack of the wrong size must be refused";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("takes 2 arguments"));
  }
  try {
    registry().explain("aten::mul.Tensor", explain_mul_args(), "CUDA");
    ADD_FAILURE() << "a key with no graph must be refused";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'CUDA'"));
    EXPECT_THAT(e.what(), HasSubstr("graphs at: CPU"));
  }
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
}

}  // namespace
}  // namespace native_registry::testing
