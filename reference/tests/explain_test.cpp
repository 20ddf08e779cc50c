// Registry::explain beyond the conformance contract: the table, C++
// predicates, nodes the router's chain does not hold yet, the op named by a
// string, a dormant router, a fallthrough key, the coverage switch, another
// registry's `_native` op, and bad input that changes nothing.

#include "support.h"

#include <native_registry/call_hooks.h>
#include <native_registry/predicates.h>

#include <stdexcept>
#include <string>
#include <utility>

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

// The table's exact text, written out by hand: two blanks between columns,
// each column as wide as its widest cell (header included), the last
// column unpadded, no blank at a line's end, and the kernel line naming a
// node only for an impl.
Explanation of_mul_at_cpu(std::string why_key, std::string router, std::string coverage) {
  Explanation e;
  e.graph = GraphKey{"aten", "mul.Tensor", "CPU"};
  e.op_name = "aten::mul.Tensor";
  e.why_key = std::move(why_key);
  e.router = std::move(router);
  e.coverage = std::move(coverage);
  return e;
}

TEST(ExplainTable, ColumnsAreAlignedTwoBlanksApartWithNoTrailingBlanks) {
  Explanation e = of_mul_at_cpu("CPU: chosen", "active", "none set");
  e.nodes = {{"n_1", "a", ExplainVerdict::kDeclined, "the cond said false"},
             {"node_long_22", "dsl_b", ExplainVerdict::kAccepted, ""},
             {"n3", "c", ExplainVerdict::kNotReached, "x"}};
  e.kernel = ExplainKernel::kNodeImpl;
  e.kernel_node_id = "node_long_22";
  e.kernel_dsl_name = "dsl_b";
  e.kernel_detail = "the node's impl runs";
  EXPECT_EQ(e.to_string(),
            "explain aten::mul.Tensor at CPU\n"
            "  key:      CPU: chosen\n"
            "  router:   active\n"
            "  coverage: none set\n"
            "  #  node_id       dsl    verdict      detail\n"
            "  1  n_1           a      declined     the cond said false\n"
            "  2  node_long_22  dsl_b  accepted\n"
            "  3  n3            c      not reached  x\n"
            "  kernel:   impl of node_long_22 (dsl dsl_b): the node's impl runs\n");
}

TEST(ExplainTable, AKernelOtherThanAnImplNamesNoNodeAndNoNodesSaySo) {
  Explanation e = of_mul_at_cpu("k", "r", "c");
  e.kernel = ExplainKernel::kFallback;
  e.kernel_node_id = "stale";  // read only for an impl
  e.kernel_dsl_name = "stale";
  e.kernel_detail = "the op's own kernel";
  EXPECT_EQ(e.to_string(),
            "explain aten::mul.Tensor at CPU\n"
            "  key:      k\n"
            "  router:   r\n"
            "  coverage: c\n"
            "  (no nodes)\n"
            "  kernel:   fallback: the op's own kernel\n");
}

// The texts an explanation gives, written out by hand from what each part of
// the walk knows: the reader of a table relies on them to tell why a key was
// chosen, what the router is doing and what would run once it is installed.
TEST_F(ExplainTest, TheTextsSayWhyTheKeyWhatTheRouterDoesAndWhatRunsOnceInstalled) {
  register_override(mul_cpu(), constant_cond(false), forbidden_impl(), {}, "cpu_dsl");
  register_override(GraphKey{"aten", "mul.Tensor", "AutogradCPU"}, constant_cond(false),
                    forbidden_impl(), {}, "autograd_dsl");
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  EXPECT_EQ(e.why_key,
            "AutogradCPU: the highest-priority key of the call with a graph here (keys visited: "
            "AutogradCPU)");
  EXPECT_EQ(e.router,
            "absent: the graph is not installed (register_all_overrides / install_graph puts its "
            "router in); the rows say what it would decide");
  EXPECT_EQ(e.coverage, "none set");
  EXPECT_EQ(e.kernel_detail, "no router at AutogradCPU: the op's own kernel runs");
  const Explanation at_cpu = registry().explain("aten::mul.Tensor", explain_mul_args(), "CPU");
  const std::string given = "CPU: given by the caller; the call's keys are AutogradCPU, ";
  EXPECT_EQ(at_cpu.why_key.substr(0, given.size()), given) << at_cpu.why_key;
  EXPECT_TRUE(at_cpu.why_key.ends_with(", CPU")) << at_cpu.why_key;
  try {
    registry().explain("aten::mul.Tensor", explain_mul_args(), "AutocastCPU");
    ADD_FAILURE() << "a key with no graph must be refused";
  } catch (const InvalidArgumentError& error) {
    EXPECT_THAT(error.what(), HasSubstr("(graphs at: AutogradCPU, CPU)"));
  }
}

TEST_F(ExplainTest, ANodeBehindARuntimeCheckWithNoRouterSaysWhatRunsOnceInstalled) {
  OverrideOptions with_runtime_check;
  with_runtime_check.try_initialize_runtime = [] { return true; };
  const NodePtr jit = register_override(mul_cpu(), constant_cond(true), forbidden_impl(),
                                        with_runtime_check, "jit_dsl");
  register_override(mul_cpu(), constant_cond(false), forbidden_impl(), {}, "declining_dsl");
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args(), "CPU");
  EXPECT_EQ(e.kernel, ExplainKernel::kNoRouter);
  EXPECT_EQ(e.kernel_detail, "no router at CPU: the op's own kernel runs; once installed, the impl of " +
                                 jit->node_id +
                                 " (dsl jit_dsl): if its runtime check says ready; else the op's own "
                                 "kernel runs");
}

TEST_F(ExplainTest, TheDetailsNameTheFilterEntriesAndThisThreadsScope) {
  register_override(mul_cpu(), constant_cond(false), forbidden_impl(), {}, "named_dsl");
  register_override(mul_cpu(), constant_cond(true), forbidden_impl(), {}, "thread_dsl");
  registry().install_all();
  {
    Registry::DisabledInThread scope(registry(), {{"thread_dsl"}, {}, {}});
    const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
    ASSERT_EQ(e.nodes.size(), 2u) << e.to_string();
    EXPECT_EQ(e.nodes[1].verdict, ExplainVerdict::kDisabled) << e.to_string();
    EXPECT_EQ(e.nodes[1].detail, "disabled on this thread (a disabled_in_thread scope names it)");
  }
  registry().deregister_op_overrides({{"named_dsl"}, {"mul.Tensor"}, {}});
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  ASSERT_EQ(e.nodes.size(), 2u) << e.to_string();
  EXPECT_EQ(e.nodes[0].detail, "by filter entry dsl name 'named_dsl', op symbol 'mul.Tensor'");
}

TEST_F(ExplainTest, UnderTheRemovePolicyAnEmptiedRouterIsAbsentAndSaysWhy) {
  registry().set_empty_chain_policy(EmptyChainPolicy::kRemoveRouter);
  register_override(mul_cpu(), constant_cond(true), forbidden_impl(), {}, "removed_dsl");
  registry().install_all();
  registry().deregister_op_overrides({{"removed_dsl"}, {}, {}});
  const Explanation e = registry().explain("aten::mul.Tensor", explain_mul_args());
  EXPECT_EQ(e.router, "absent: installed, but its chain was empty under the EmptyChainPolicy 'remove'");
  registry().set_empty_chain_policy(EmptyChainPolicy::kKeepDormantRouter);
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
  // Its chain is empty: no node was there to decline the call.
  EXPECT_THAT(e.kernel_detail, Not(HasSubstr("no node took the call"))) << e.to_string();
  // Re-enabled, its node declines: the detail says no node took the call.
  registry().reenable_op_overrides({{"gone_dsl"}, {}, {}});
  registry().replace_node_callables(*registry().graph(mul_cpu()).at(0), constant_cond(false),
                                    forbidden_impl(), {});
  registry().install_all();
  const Explanation declined = registry().explain("aten::mul.Tensor", explain_mul_args());
  EXPECT_EQ(declined.kernel, ExplainKernel::kFallback) << declined.to_string();
  EXPECT_THAT(declined.kernel_detail, HasSubstr("(no node took the call)")) << declined.to_string();
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
  const Explanation e = [&] {
    const SettingSwitched<coverage_checks_enabled, set_coverage_checks_enabled> off(false);
    return registry().explain("aten::mul.Tensor", explain_mul_args());
  }();
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
