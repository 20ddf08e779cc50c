// Routing in the real dispatcher: first match wins, the captured fallback,
// runtime initialisation, unconditional overrides and the mask, empty chains,
// replacement, autograd formulas, other namespaces, errors from user code.

#include "support.h"

#include <native_registry/predicates.h>
#include <native_registry/router_kind.h>

#include <ATen/ops/add.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/threshold.h>

#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

namespace native_registry::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Return;

using RoutingTest = RegistryTest;

TEST_F(RoutingTest, CondTrueRoutesToImpl) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(42));
  registry().install_graph(mul_cpu());
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kActive);
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({42, 42})));
}

// The routing log's rate limit (call_hooks.h): at most ten decisions a second
// per router are passed on, each carrying the count of those dropped since the
// last one passed. The log is process-wide: a plain function recording here.
std::vector<uint64_t> g_logged_not_logged;
void record_decision(const RoutingDecision& decision) {
  g_logged_not_logged.push_back(decision.not_logged);
}

int64_t steady_second() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST_F(RoutingTest, TheRoutingLogPassesTenDecisionsASecondAndCountsTheRest) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(42));
  registry().install_graph(mul_cpu());
  g_logged_not_logged.clear();
  set_routing_log(&record_decision);
  struct LogOff {
    ~LogOff() { set_routing_log(nullptr); }
  } log_off;
  // A burst of 15 calls just after a second of the steady clock began: ten
  // passed, five dropped.
  const int64_t before = steady_second();
  while (steady_second() == before) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int64_t began = steady_second();
  for (int i = 0; i < 15; ++i) call_mul(tensor({2}), tensor({3}));
  ASSERT_EQ(steady_second(), began) << "15 calls took the better part of a second";
  EXPECT_EQ(g_logged_not_logged, std::vector<uint64_t>(10, 0)) << "each passed with none dropped before it";
  // The first decision of the next second carries the five dropped.
  while (steady_second() == began) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  call_mul(tensor({2}), tensor({3}));
  ASSERT_EQ(g_logged_not_logged.size(), 11u);
  EXPECT_EQ(g_logged_not_logged.back(), 5u);
}

TEST_F(RoutingTest, CondFalseFallsThroughToTheCapturedKernel) {
  register_override(mul_cpu(), constant_cond(false), forbidden_impl());
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
}

TEST_F(RoutingTest, FirstMatchingNodeWinsInGraphOrder) {
  auto declines = std::make_shared<std::atomic<int>>(0);
  auto later = std::make_shared<std::atomic<int>>(0);
  register_override(mul_cpu(), counting_cond(declines, false), forbidden_impl());
  register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  register_override(mul_cpu(), counting_cond(later, true), fill_impl(2));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
  EXPECT_EQ(declines->load(), 1);
  EXPECT_EQ(later->load(), 0) << "a node after the match was consulted";
}

TEST_F(RoutingTest, CondSeesTheBoxedArguments) {
  // A cond that takes only calls whose first argument has two elements.
  CondFn two_elements = [](const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                           const Stack& stack) {
    EXPECT_EQ(op.operator_name(), c10::OperatorName("aten::mul", "Tensor"));
    EXPECT_TRUE(keys.has(c10::DispatchKey::CPU));
    return stack.size() == 2 && stack[0].toTensor().numel() == 2;
  };
  register_override(mul_cpu(), two_elements, fill_impl(7));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({7, 7})));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(RoutingTest, UnavailableRuntimeSkipsTheNode) {
  MockImpl impl;
  EXPECT_CALL(impl, Call()).Times(0);
  OverrideOptions options;
  options.try_initialize_runtime = [] { return false; };
  register_override(mul_cpu(), constant_cond(true), impl_from(impl, 1), options);
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(RoutingTest, RuntimeIsAskedOnEveryMatchedCallAsUpstreamAsks) {
  ::testing::MockFunction<bool()> runtime;
  EXPECT_CALL(runtime, Call())
      .WillOnce(Return(false))
      .WillOnce(Return(true))
      .WillOnce(Return(true))
      .WillOnce(Return(false));
  OverrideOptions options;
  options.try_initialize_runtime = runtime.AsStdFunction();
  register_override(mul_cpu(), constant_cond(true), fill_impl(3), options);
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));  // down: skipped
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));  // comes up
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));  // asked again: up
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));  // went away: skipped
}

// Predicates read `arg` indices from the op's first argument, the top
// schema().arguments().size() values, whatever a caller keeps below them.
TEST_F(RoutingTest, PredicatesReadTheArgumentsOnTopOfTheStack) {
  namespace P = native_registry::predicates;
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  const Stack stack{c10::IValue(int64_t{7}), tensor({2}), tensor({4}).to(at::kDouble)};
  const c10::DispatchKeySet keys(c10::DispatchKey::CPU);
  EXPECT_TRUE(P::dtype_in({at::kFloat}, 0)(op, keys, stack));
  EXPECT_TRUE(P::dtype_in({at::kDouble}, 1)(op, keys, stack));
  EXPECT_FALSE(P::dtype_in({at::kDouble}, 0).as_cond()(op, keys, stack));
  EXPECT_FALSE(P::dtype_in({at::kFloat})(op, keys, stack)) << "all tensors: one is double";
  const Stack short_stack{tensor({2})};
  EXPECT_THROW(P::always()(op, keys, short_stack), c10::Error);
  // Registered as a cond, on a boxed call with a caller's value below.
  register_override(mul_cpu(), P::dtype_in({at::kFloat}, 1).as_cond(), fill_impl(6));
  registry().install_graph(mul_cpu());
  Stack call{c10::IValue(std::string("caller's")), tensor({2}), tensor({4})};
  op.callBoxed(call);
  ASSERT_EQ(call.size(), 2u);
  EXPECT_EQ(call[0].toStringRef(), "caller's");
  EXPECT_TRUE(same(call[1].toTensor(), tensor({6})));
}

TEST_F(RoutingTest, UnconditionalOverrideWithoutCondTakesEveryCall) {
  MockImpl impl;
  EXPECT_CALL(impl, Call()).Times(2);
  OverrideOptions options;
  options.unconditional_override = true;
  register_override(mul_cpu(), CondFn{}, impl_from(impl, 5), options);
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({5, 5})));
  EXPECT_TRUE(same(call_mul(tensor({0}), tensor({0})), tensor({5})));
}

class UnconditionalTest : public RegistryTest {
 protected:
  void SetUp() override {
    RegistryTest::SetUp();
    OverrideOptions options;
    options.unconditional_override = true;
    node_ = register_override(mul_cpu(), CondFn{}, fill_impl(5), options);
    registry().install_graph(mul_cpu());
  }
  at::Tensor mul() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
  const at::Tensor overridden = tensor({5, 5});
  const at::Tensor stock = tensor({8, 15});
  NodePtr node_;
};

TEST_F(UnconditionalTest, SurvivesDisable) {
  registry().deregister_op_overrides({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(registry().is_enabled(*node_));
  EXPECT_TRUE(same(mul(), overridden));
}

TEST_F(UnconditionalTest, MaskHidesItOnlyWhileDisabledAndOnlyInScope) {
  {
    Registry::UnconditionalMask mask(registry());
    EXPECT_TRUE(same(mul(), overridden)) << "the mask alone must not hide it";
  }
  registry().deregister_op_overrides({{"test_dsl"}, {}, {}});
  {
    Registry::UnconditionalMask mask(registry());
    EXPECT_FALSE(registry().is_enabled(*node_));
    EXPECT_TRUE(same(mul(), stock));
    {
      Registry::UnconditionalMask nested(registry());
      EXPECT_TRUE(same(mul(), stock));
    }
    EXPECT_TRUE(same(mul(), stock)) << "leaving a nested mask lifted the outer one";
  }
  EXPECT_TRUE(same(mul(), overridden));
  registry().reenable_op_overrides({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(mul(), overridden));
}

TEST_F(RoutingTest, DisableAndReenableRoundTrip) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_graph(mul_cpu());
  const auto a = tensor({2, 3});
  const auto b = tensor({4, 5});
  EXPECT_TRUE(same(call_mul(a, b), tensor({7, 7})));

  registry().deregister_op_overrides({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(call_mul(a, b), tensor({8, 15})));
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kDormant);
  EXPECT_FALSE(registry().is_enabled(*registry().graph(mul_cpu())[0]));

  registry().reenable_op_overrides({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(call_mul(a, b), tensor({7, 7})));
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kActive);
}

TEST_F(RoutingTest, DisableByDispatchKeyAndByOpSymbol) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_graph(mul_cpu());
  registry().deregister_op_overrides({{}, {}, {"CPU"}});
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().reenable_op_overrides({{}, {}, {"CPU"}});
  registry().deregister_op_overrides({{}, {"mul.Tensor"}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().reenable_op_overrides({{}, {"mul.Tensor"}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
}

TEST_F(RoutingTest, DisablingOneDslLeavesTheOthersRouting) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "dsl_b");
  registry().install_graph(mul_cpu());
  registry().deregister_op_overrides({{"dsl_a"}, {}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({2})));
  EXPECT_EQ(registry().published_chain(mul_cpu()).size(), 1u);
}

// FilterInstall::kNamed, upstream's front end: a disable installs every graph
// the whole filter names, installed before or not, each routing through its
// graph as it is now; a re-enable the graphs its entries name.
TEST_F(RoutingTest, NamedFilterInstallInstallsTheGraphsTheFilterNames) {
  using FilterInstall = Registry::FilterInstall;
  const GraphKey twice = twice_cpu(fixtures::kTestNamespace);
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "dsl_b");
  register_override(mul_cpu(), constant_cond(false), forbidden_impl(), {}, "dsl_c");
  register_override(twice, constant_cond(true), fill_impl(9), {}, "dsl_c");
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
  // Reordered without reinstall: the router keeps its chain (a, b, c) ...
  registry().reorder_graphs([](const std::string&, const std::string&, const Graph& graph) {
    return Graph(graph.rbegin(), graph.rend());
  });
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
  // ... through a disable that names no graph of it ...
  registry().deregister_op_overrides({{"dsl_x"}, {}, {}}, FilterInstall::kNamed);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({1})));
  // ... until one does: the graph (c, b, a) less c routes, and twice's graph,
  // never installed, is installed (its chain empty: no router).
  registry().deregister_op_overrides({{"dsl_c"}, {}, {}}, FilterInstall::kNamed);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({2})));
  EXPECT_EQ(registry().router_state(twice), RouterState::kAbsent);
  registry().reenable_op_overrides({{"dsl_c"}, {}, {}}, FilterInstall::kNamed);
  EXPECT_TRUE(same(ns1().twice(tensor({1})), tensor({9})));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({2})));  // c declines
}

// As upstream's front end, kNamed installs the graphs one by one: one whose
// op is gone raises there, the filter change kept.
TEST_F(RoutingTest, NamedFilterInstallRaisesAtAGraphWhoseOpIsGoneKeepingTheChange) {
  const GraphKey missing{fixtures::kMissingNamespace, "twice", "CPU"};
  register_override(missing, constant_cond(true), fill_impl(1), {}, "dsl_a");
  register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "dsl_b");
  registry().deregister_op_overrides({{"dsl_b"}, {}, {}});
  EXPECT_THROW(registry().reenable_op_overrides({{"dsl_b"}, {}, {"CPU"}},
                                                Registry::FilterInstall::kNamed),
               OperatorNotFoundError);
  EXPECT_TRUE(registry().filters().dsl_names.empty());
  EXPECT_EQ(registry().router_state(missing), RouterState::kAbsent);
}

// A filter change that names a graph whose router's op has gone (its chain
// not emptied by the change, so it needs a new router) raises before it
// changes anything: a graph it names earlier in key order keeps the chain
// the filters, restored, say it routes through. Before the check covered
// such a router, that graph was republished and left routing as if the
// change had been made.
TEST_F(RoutingTest, FilterChangeRaisingAtAGoneOpLeavesEveryRouterAsItWas) {
  const std::string gone_ns = "_native_registry_test_zgone";  // after ns1 in key order
  auto library = std::make_unique<fixtures::ScopedTwiceNamespace>(gone_ns, 5.0);
  registry().allow_namespace(gone_ns);
  register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true), fill_impl(7), {},
                    "dsl_a");
  register_override(twice_cpu(gone_ns), constant_cond(true), fill_impl(8), {}, "dsl_a");
  register_override(twice_cpu(gone_ns), constant_cond(true), fill_impl(9), {}, "dsl_b");
  registry().install_all();
  library.reset();
  EXPECT_THROW(registry().deregister_op_overrides({{"dsl_a"}, {}, {}}), OperatorNotFoundError);
  EXPECT_TRUE(registry().filters().dsl_names.empty());
  EXPECT_EQ(registry().published_chain(twice_cpu(fixtures::kTestNamespace)).size(), 1u);
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({7, 7})));
  EXPECT_EQ(registry().published_chain(twice_cpu(gone_ns)).size(), 2u);
}

// The unconditional mask republishes only the graphs whose chain it
// changes: a router whose op has gone, holding no unconditional node the
// filters name, neither stops the mask nor is touched by it.
TEST_F(RoutingTest, UnconditionalMaskIgnoresRoutersItDoesNotChange) {
  const std::string gone_ns = "_native_registry_test_zgone";
  auto library = std::make_unique<fixtures::ScopedTwiceNamespace>(gone_ns, 5.0);
  registry().allow_namespace(gone_ns);
  OverrideOptions unconditional;
  unconditional.unconditional_override = true;
  register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true), fill_impl(7),
                    unconditional, "dsl_a");
  register_override(twice_cpu(gone_ns), constant_cond(true), fill_impl(9), {}, "dsl_b");
  registry().install_all();
  library.reset();
  registry().deregister_op_overrides({{"dsl_a"}, {}, {}});
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({7, 7})));  // exempt from filters
  {
    const Registry::UnconditionalMask mask(registry());
    EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({2, 4})));
    EXPECT_EQ(registry().published_chain(twice_cpu(gone_ns)).size(), 1u);
  }
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({7, 7})));
}

// Lifting the mask puts back every graph it changed that can be: one whose
// op left the dispatcher while the mask was up is left as it is (no call
// reaches it), and keeps no other graph's unconditional node masked.
TEST_F(RoutingTest, LiftingTheMaskRestoresTheOthersWhenAnOpLeftMeanwhile) {
  const std::string gone_ns = "_native_registry_test_zgone";
  auto library = std::make_unique<fixtures::ScopedTwiceNamespace>(gone_ns, 5.0);
  registry().allow_namespace(gone_ns);
  OverrideOptions unconditional;
  unconditional.unconditional_override = true;
  register_override(twice_cpu(fixtures::kTestNamespace), CondFn{}, fill_impl(7), unconditional,
                    "dsl_a");
  register_override(twice_cpu(gone_ns), CondFn{}, fill_impl(8), unconditional, "dsl_a");
  register_override(twice_cpu(gone_ns), constant_cond(true), fill_impl(9), {}, "dsl_b");
  registry().install_all();
  registry().deregister_op_overrides({{"dsl_a"}, {}, {}});
  {
    const Registry::UnconditionalMask mask(registry());
    EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({2, 4})));
    library.reset();
  }
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({7, 7})));
}

TEST_F(RoutingTest, BadFilterEntriesAreRefusedAndChangeNothing) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_graph(mul_cpu());
  EXPECT_THROW(registry().deregister_op_overrides({{"test_dsl", ""}, {}, {}}),
               InvalidArgumentError);
  EXPECT_THROW(registry().reenable_op_overrides({{}, {" "}, {}}), InvalidArgumentError);
  EXPECT_TRUE(registry().filters().dsl_names.empty());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
}

TEST_F(RoutingTest, EmptyChainLeavesNoRouter) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  registry().deregister_op_overrides({{"test_dsl"}, {}, {}});
  registry().install_graph(mul_cpu());
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(RoutingTest, EmptiedGraphWithRemovePolicyTearsTheRouterDown) {
  registry().set_empty_chain_policy(EmptyChainPolicy::kRemoveRouter);
  register_override(mul_cpu(), constant_cond(true), fill_impl(99));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({99})));
  // A filter-out-everything transformation, then an install.
  registry().reorder_graphs([](const std::string&, const std::string&, const Graph&) {
    return Graph{};
  });
  registry().install_graph(mul_cpu());
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(RoutingTest, RemovePolicyRemovesOnDisableAndReinstallsOnReenable) {
  registry().set_empty_chain_policy(EmptyChainPolicy::kRemoveRouter);
  register_override(mul_cpu(), constant_cond(true), fill_impl(7));
  registry().install_graph(mul_cpu());
  registry().deregister_op_overrides({{"test_dsl"}, {}, {}});
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  registry().reenable_op_overrides({{"test_dsl"}, {}, {}});
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kActive);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
}

TEST_F(RoutingTest, UpdateKeepsTheRouterReinstallReplacesItOnTheOpsOwnKernel) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  register_override(mul_cpu(), counting_cond(calls, false), forbidden_impl());
  registry().install_graph(mul_cpu());
  const auto first_chain = registry().published_chain(mul_cpu());
  registry().install_graph(mul_cpu(), InstallMode::kReinstall);
  registry().install_graph(mul_cpu(), InstallMode::kReinstall);
  // Had a replacement captured the router it replaced as its fallback, one
  // call would pass through several routers and consult cond several times.
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(calls->load(), 1);
  EXPECT_EQ(registry().published_chain(mul_cpu()), first_chain);
}

TEST_F(RoutingTest, NewNodesGoLiveAtInstallNotAtRegistration) {
  register_override(mul_cpu(), constant_cond(false), fill_impl(11));
  registry().install_graph(mul_cpu());
  register_override(mul_cpu(), constant_cond(true), fill_impl(99));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({99})));
}

TEST_F(RoutingTest, NoRecursionThroughAnAutogradFormula) {
  const at::Tensor a = at::randn({2, 3, 4}).requires_grad_(true);
  const at::Tensor b = at::randn({2, 4, 5}).requires_grad_(true);
  // Expected values from the stock kernels, before any router exists.
  const at::Tensor expected_out = at::bmm(a.detach(), b.detach());
  const at::Tensor grad_out = at::ones_like(expected_out);
  const at::Tensor expected_grad_a = at::bmm(grad_out, b.detach().transpose(1, 2));
  const at::Tensor expected_grad_b = at::bmm(a.detach().transpose(1, 2), grad_out);

  auto calls = std::make_shared<std::atomic<int>>(0);
  register_override(bmm_cpu(), counting_cond(calls, false), forbidden_impl());
  registry().install_graph(bmm_cpu());

  const at::Tensor out = at::bmm(a, b);
  EXPECT_TRUE(same(out.detach(), expected_out));
  at::sum(out).backward();
  EXPECT_TRUE(same(a.grad(), expected_grad_a));
  EXPECT_TRUE(same(b.grad(), expected_grad_b));
  // The forward and the two bmm calls of the backward formula each reached
  // the router once; none re-entered it.
  EXPECT_EQ(calls->load(), 3);
}

TEST_F(RoutingTest, ErrorsFromCondAndImplReachTheCallerAndChangeNothing) {
  CondFn throwing_cond = [](const c10::OperatorHandle&, c10::DispatchKeySet,
                            const Stack&) -> bool {
    throw std::invalid_argument("cond exploded");
  };
  register_override(mul_cpu(), throwing_cond, fill_impl(1), {}, "dsl_cond");
  registry().install_graph(mul_cpu());
  try {
    call_mul(tensor({2}), tensor({4}));
    FAIL() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("cond exploded"));
  }
  registry().deregister_op_overrides({{"dsl_cond"}, {}, {}});
  ImplFn throwing_impl = [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {
    TORCH_CHECK_VALUE(false, "impl exploded");
  };
  register_override(mul_cpu(), constant_cond(true), throwing_impl, {}, "dsl_impl");
  registry().install_graph(mul_cpu());
  EXPECT_THROW(
      {
        try {
          call_mul(tensor({2}), tensor({4}));
        } catch (const c10::ValueError& e) {
          EXPECT_THAT(e.what(), HasSubstr("impl exploded"));
          throw;
        }
      },
      c10::ValueError);
  EXPECT_EQ(registry().published_chain(mul_cpu()).size(), 1u);
  registry().deregister_op_overrides({{"dsl_impl"}, {}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(RoutingTest, UndefinedOpFailsLoudlyAtInstallAndChangesNothing) {
  const GraphKey missing{fixtures::kMissingNamespace, "twice", "CPU"};
  register_override(missing, constant_cond(true), fill_impl(1));
  try {
    registry().install_graph(missing);
    FAIL() << "installed an override of an op that does not exist";
  } catch (const OperatorNotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not found; is the namespace"));
  }
  EXPECT_EQ(registry().router_state(missing), RouterState::kAbsent);
  // install_all checks every op before installing any.
  register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  EXPECT_THROW(registry().install_all(), OperatorNotFoundError);
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
}

TEST_F(RoutingTest, UnknownOverloadFailsAtInstall) {
  register_override({"aten", "mul.NoSuchOverload", "CPU"}, constant_cond(true), fill_impl(1));
  EXPECT_THROW(registry().install_all(), OperatorNotFoundError);
}

TEST_F(RoutingTest, InstallAllInstallsEveryGraph) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(3));
  register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true), fill_impl(9));
  registry().install_all();
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({3})));
  EXPECT_TRUE(same(ns1().twice(tensor({1})), tensor({9})));
}

// ---- other namespaces ---------------------------------------------------------

TEST_F(RoutingTest, OtherNamespaceRoutesToImpl) {
  register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true), fill_impl(99));
  registry().install_graph(twice_cpu(fixtures::kTestNamespace));
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({99, 99})));
}

TEST_F(RoutingTest, OtherNamespaceFallsBackToItsCompositeKernel) {
  register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(false), forbidden_impl());
  registry().install_graph(twice_cpu(fixtures::kTestNamespace));
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({2, 4})));
}

// A key where the op had no kernel at all (aten::mul at XLA without
// torch_xla): an accepted call runs the impl, a declined one fails as the
// dispatcher would have, naming the op and the key.
TEST_F(RoutingTest, DeclinedCallsWhereTheOpHadNoKernelFailNamingOpAndKey) {
  const GraphKey xla{"aten", "mul.Tensor", "XLA"};
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  ASSERT_FALSE(op.hasComputedKernelForDispatchKey(c10::DispatchKey::XLA));
  auto decides = std::make_shared<bool>(false);
  register_override(
      xla, [decides](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return *decides; },
      fill_impl(7));
  registry().install_graph(xla);
  const auto call_at_xla = [&] {
    Stack stack{tensor({2, 3}), tensor({4, 5})};
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::XLA), &stack);
    return stack.at(0).toTensor();
  };
  EXPECT_THAT(call_at_xla, ::testing::ThrowsMessage<c10::NotImplementedError>(
                               ::testing::AllOf(HasSubstr("aten::mul.Tensor"), HasSubstr("XLA"))));
  *decides = true;
  EXPECT_TRUE(same(call_at_xla(), tensor({7, 7})));
}

class TwoNamespacesTest : public RegistryTest {
 protected:
  void SetUp() override {
    RegistryTest::SetUp();
    register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true), fill_impl(99));
    register_override(twice_cpu(fixtures::kSecondTestNamespace), constant_cond(true),
                      fill_impl(7));
    registry().install_all();
  }
  const at::Tensor x = tensor({1, 2});
};

TEST_F(TwoNamespacesTest, SameOpSymbolRoutesIndependently) {
  EXPECT_TRUE(same(ns1().twice(x), tensor({99, 99})));
  EXPECT_TRUE(same(ns2().twice(x), tensor({7, 7})));
  const auto bucket = registry().graphs_by_op_symbol().at("twice");
  EXPECT_THAT(bucket, ::testing::UnorderedElementsAre(twice_cpu(fixtures::kTestNamespace),
                                                      twice_cpu(fixtures::kSecondTestNamespace)));
}

TEST_F(TwoNamespacesTest, OpSymbolFiltersAreNamespaceBlind) {
  registry().deregister_op_overrides({{}, {std::string(fixtures::kTestNamespace) + "::twice"}, {}});
  EXPECT_TRUE(same(ns1().twice(x), tensor({99, 99})));
  EXPECT_TRUE(same(ns2().twice(x), tensor({7, 7})));

  registry().deregister_op_overrides({{}, {"twice"}, {}});
  EXPECT_TRUE(same(ns1().twice(x), tensor({2, 4})));
  EXPECT_TRUE(same(ns2().twice(x), tensor({3, 6})));

  registry().reenable_op_overrides({{}, {"twice"}, {}});
  EXPECT_TRUE(same(ns1().twice(x), tensor({99, 99})));
  EXPECT_TRUE(same(ns2().twice(x), tensor({7, 7})));
}

// ---- the typed kernel's Stacks ----------------------------------------------
// A C++ call of an op whose kernel has one of the common signatures reaches
// the typed router (router.h), which boxes the caller's tensors without
// references of its own into a Stack the thread keeps per nesting depth and
// reuses: the call allocates nothing of its own (a boxed call would: the
// dispatcher boxes it into a new Stack, copying every tensor). Once the
// thread's thread_locals are being destroyed, it boxes into a Stack of its
// own. A cond sees the Stack, so the tests tell these apart by what it holds:
// its values' use counts, its capacity, its address.

// Typed routers switched on or off for the routers installed while it lives.
using TypedRoutersSwitched = SettingSwitched<typed_routers_enabled, set_typed_routers_enabled>;

// Declines, recording the use count of the call's first tensor (the call has
// `arguments` values on the stack).
CondFn recording_use_count(std::shared_ptr<std::vector<size_t>> use_counts, size_t arguments) {
  return [use_counts, arguments](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
    use_counts->push_back(stack.at(stack.size() - arguments).toTensor().use_count());
    return false;
  };
}

// One op of each signature that gets a typed router, and a call of it from C++.
struct TypedCall {
  const char* op_symbol;
  size_t arguments;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> call;
};

std::vector<TypedCall> a_typed_call_of_each_signature() {
  return {
      {"neg", 1, [](const at::Tensor& x, const at::Tensor&) { return at::neg(x); }},
      {"mul.Tensor", 2, [](const at::Tensor& x, const at::Tensor& y) { return at::mul(x, y); }},
      {"add.Tensor", 3, [](const at::Tensor& x, const at::Tensor& y) { return at::add(x, y, 2); }},
      {"leaky_relu", 2, [](const at::Tensor& x, const at::Tensor&) { return at::leaky_relu(x, 0.5); }},
      {"threshold", 3, [](const at::Tensor& x, const at::Tensor&) { return at::threshold(x, 0.1, 9); }},
  };
}

TEST_F(RoutingTest, ATypedCallBoxesTheCallersTensorsWithoutReferencesOfItsOwn) {
  const TypedRoutersSwitched typed_routers(true);
  const at::Tensor x = at::randn({4}), y = at::randn({4});
  for (const TypedCall& typed : a_typed_call_of_each_signature()) {
    SCOPED_TRACE(typed.op_symbol);
    const at::Tensor expected = typed.call(x, y);  // before the router: the op's own kernel
    const GraphKey key{"aten", typed.op_symbol, "CPU"};
    auto use_counts = std::make_shared<std::vector<size_t>>();
    register_override(key, recording_use_count(use_counts, typed.arguments), forbidden_impl());
    registry().install_graph(key);
    const size_t before = x.use_count();
    EXPECT_TRUE(same(typed.call(x, y), expected)) << "the declined call";
    ASSERT_EQ(use_counts->size(), 1u) << "the cond was not asked once";
    EXPECT_EQ(use_counts->front(), before)
        << "the router held a reference of its own to the caller's tensor (a boxed call, not a typed one)";
  }
}

// What the environment switch of the boxed suite run relies on
// (NATIVE_REGISTRY_BOXED_ROUTERS=1: router_kind.h).
TEST_F(RoutingTest, WithTypedRoutersSwitchedOffACallOfACommonSignatureIsBoxed) {
  const TypedRoutersSwitched typed_routers(false);
  const at::Tensor x = at::randn({4}), y = at::randn({4});
  const at::Tensor expected = call_mul(x, y);  // before the router: the op's own kernel
  auto use_counts = std::make_shared<std::vector<size_t>>();
  register_override(mul_cpu(), recording_use_count(use_counts, 2), forbidden_impl());
  registry().install_graph(mul_cpu());
  const size_t before = x.use_count();
  EXPECT_TRUE(same(call_mul(x, y), expected)) << "the declined call";
  ASSERT_EQ(use_counts->size(), 1u) << "the cond was not asked once";
  EXPECT_GT(use_counts->front(), before)
      << "the call's Stack borrowed the caller's tensor: a typed router, though switched off";
}

TEST_F(RoutingTest, ATypedCallBoxesIntoTheStackItsThreadKeptFromAnEarlierCall) {
  const TypedRoutersSwitched typed_routers(true);
  constexpr size_t kRoom = 64;
  auto capacities = std::make_shared<std::vector<size_t>>();
  auto takes = std::make_shared<bool>(true);
  const ImplFn seven = fill_impl(7);
  register_override(
      mul_cpu(),
      [capacities, takes](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
        capacities->push_back(stack.capacity());
        return *takes;
      },
      [seven](const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
        stack->reserve(kRoom);
        seven(op, keys, stack);
      });
  registry().install_graph(mul_cpu());
  std::thread([&] {  // a new thread: these are its first typed calls
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));  // the impl makes room
    *takes = false;
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  }).join();
  ASSERT_EQ(capacities->size(), 2u);
  EXPECT_GE(capacities->back(), kRoom)
      << "the second call boxed into a new Stack, not the one the first left on the thread "
         "(a typed call that allocates per call)";
}

// The Stacks a cond saw, in call order.
using SeenStacks = std::vector<const Stack*>;

// Records the Stack it sees; declines.
CondFn recording_cond(std::shared_ptr<SeenStacks> seen) {
  return [seen](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
    seen->push_back(&stack);
    return false;
  };
}

// Makes a typed call of mul when destroyed, recording the Stack its cond saw.
struct CallsMulWhenDestroyed {
  std::shared_ptr<SeenStacks> seen;
  ~CallsMulWhenDestroyed() {
    seen->clear();
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
    if (!seen->empty()) stack_at_exit = seen->front();
  }
  static inline const Stack* stack_at_exit = nullptr;
};

TEST_F(RoutingTest, ATypedCallAfterTheThreadsStacksAreGoneBoxesIntoOneOfItsOwn) {
  if (!typed_routers_enabled()) GTEST_SKIP() << "only a typed router boxes into the thread's Stacks";
  auto seen = std::make_shared<SeenStacks>();
  register_override(mul_cpu(), recording_cond(seen), forbidden_impl());
  registry().install_graph(mul_cpu());
  const Stack* thread_stack = nullptr;
  CallsMulWhenDestroyed::stack_at_exit = nullptr;
  std::thread([&] {
    // Made before the thread's Stacks, so destroyed after them.
    thread_local CallsMulWhenDestroyed at_exit{seen};
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
    thread_stack = seen->front();
  }).join();
  ASSERT_NE(CallsMulWhenDestroyed::stack_at_exit, nullptr) << "the call at thread exit was not routed";
  EXPECT_NE(CallsMulWhenDestroyed::stack_at_exit, thread_stack)
      << "the call at thread exit boxed into the thread's Stack, already destroyed";
}

// ---- an op defined again under its router -----------------------------------
// A custom op whose kernel is an unboxed C++ function, routed, whose library is
// destroyed and the op defined again with another schema (an extension loaded
// again, a fixture that defines its op per test). The router stays registered
// on the op's name until the registry rebuilds or removes it, so LibTorch
// checks the new definition against whatever the router's registration
// recorded: a kernel schema inferred from the typed router's C++ signature
// refused it.

constexpr const char* kRedefinedNamespace = "_native_registry_test_redefined";

// The op defined anew: plus(x, y) = x + y, a boxed kernel. (An unboxed one of
// another C++ signature is refused whatever the router: the op's name keeps
// the C++ signature of the first definition's kernel while any registration
// on it stands, and the router's does.)
void plus_kernel(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
  at::Tensor sum = at::add(torch::jit::peek(*stack, 0, 2).toTensor(), torch::jit::peek(*stack, 1, 2).toTensor());
  torch::jit::drop(*stack, 2);
  stack->emplace_back(std::move(sum));
}

// Whether the kernel at CPU of `op` is a router with an unboxed (typed) entry,
// as its dumpState line reads: "CPU: registered at .../router.cpp:N :: ... [ boxed unboxed ]".
bool routed_by_a_typed_router(const c10::OperatorHandle& op) {
  std::istringstream lines(op.dumpState());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("CPU: ", 0) == 0 && line.find("router.cpp:") != std::string::npos) {
      return line.find("unboxed") != std::string::npos;
    }
  }
  return false;
}

GraphKey plus_cpu() { return {kRedefinedNamespace, "plus", "CPU"}; }

c10::OperatorHandle plus_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow((std::string(kRedefinedNamespace) + "::plus").c_str(), "");
}

// plus(x) = x + 1, with an unboxed kernel, overridden (7s) and the override
// installed by a router of the kind `typed` says; then plus's library
// destroyed and plus defined again as plus(x, y) by `library`. The definition
// succeeds and the new op computes its own result.
void define_again_under_a_router(Registry& registry, bool typed, std::unique_ptr<torch::Library>& library) {
  const TypedRoutersSwitched kind(typed);
  library = std::make_unique<torch::Library>(torch::Library::DEF, kRedefinedNamespace, std::nullopt, __FILE__,
                                             __LINE__);
  library->def("plus(Tensor x) -> Tensor");
  library->impl("plus", torch::dispatch(c10::DispatchKey::CPU, [](const at::Tensor& x) { return at::add(x, 1); }));
  registry.allow_namespace(kRedefinedNamespace);
  registry.register_op_override("test_dsl", kRedefinedNamespace, "plus", "CPU", constant_cond(true), fill_impl(7));
  registry.install_graph(plus_cpu());
  ASSERT_EQ(routed_by_a_typed_router(plus_op()), typed) << "the router installed is not of the kind under test";
  Stack routed{tensor({1, 1})};
  plus_op().callBoxed(&routed);
  ASSERT_TRUE(same(routed.at(0).toTensor(), tensor({7, 7}))) << "the override did not take plus's call";
  library.reset();
  library = std::make_unique<torch::Library>(torch::Library::DEF, kRedefinedNamespace, std::nullopt, __FILE__,
                                             __LINE__);
  try {
    library->def("plus(Tensor x, Tensor y) -> Tensor");
    library->impl("plus", torch::dispatch(c10::DispatchKey::CPU,
                                          torch::CppFunction::makeFromBoxedFunction<&plus_kernel>()));
  } catch (const c10::Error& e) {
    FAIL() << "LibTorch refused plus defined again under the router: " << e.what_without_backtrace();
  }
  Stack own{tensor({1, 1}), tensor({2, 3})};
  plus_op().callBoxed(&own);
  EXPECT_TRUE(same(own.at(0).toTensor(), tensor({3, 4}))) << "the new plus did not compute its own result";
}

TEST_F(RoutingTest, AnOpWithAnUnboxedKernelCanBeDefinedAgainWithAnotherSchemaUnderATypedRouter) {
  std::unique_ptr<torch::Library> library;
  define_again_under_a_router(registry(), true, library);
}

// The same under a boxed router, which records nothing of its own on the op.
TEST_F(RoutingTest, AnOpWithAnUnboxedKernelCanBeDefinedAgainWithAnotherSchemaUnderABoxedRouter) {
  std::unique_ptr<torch::Library> library;
  define_again_under_a_router(registry(), false, library);
}

// A router built on the op defined again takes the new op's arguments. The
// op's name still has the first definition's C++ signature (LibTorch keeps
// it while any registration stands there, and the old router's did), whose
// typed kernel would take one argument off a call of two: such an op gets
// the boxed kernel.
TEST_F(RoutingTest, ARouterBuiltOnAnOpDefinedAgainWithAnotherSchemaTakesTheNewOpsArguments) {
  const Snapshot empty = registry().snapshot();
  std::unique_ptr<torch::Library> library;
  ASSERT_NO_FATAL_FAILURE(define_again_under_a_router(registry(), true, library));
  registry().restore(empty);  // the old router goes; the old signature stays
  ASSERT_NO_THROW(plus_op().typed<at::Tensor(const at::Tensor&)>())
      << "the op's name no longer has the old C++ signature: the scenario did not come about";
  const TypedRoutersSwitched typed(true);
  const at::Tensor x = tensor({1, 1}), y = tensor({2, 3});
  auto saw_both = std::make_shared<bool>(false);
  register_override(plus_cpu(),
                    [saw_both, x, y](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
                      *saw_both = stack.size() == 2 && same(stack[0].toTensor(), x) && same(stack[1].toTensor(), y);
                      return *saw_both;
                    },
                    fill_impl(7));
  registry().install_graph(plus_cpu());
  ASSERT_FALSE(routed_by_a_typed_router(plus_op()))
      << "a typed router of the old op's signature on the new op (it reads one argument of two)";
  Stack call{x, y};
  plus_op().callBoxed(&call);
  EXPECT_TRUE(*saw_both) << "the cond did not see the call's two arguments";
  EXPECT_TRUE(same(call.at(0).toTensor(), tensor({7, 7})));
}

}  // namespace
}  // namespace native_registry::testing
