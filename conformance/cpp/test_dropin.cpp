// What code moved from upstream's registry must find unchanged, on the C++
// side: the boxed stack a cond or impl sees, when try_initialize_runtime
// runs, which dispatch keys are refused, composite ops, and the mask
// against snapshots.

#include "suite.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/stack.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace conformance {
namespace {

using namespace native_registry::fixtures;
using ::testing::HasSubstr;

at::Tensor dropin_mul_2_3_by_4_5() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
const at::Tensor kDropinStock = tensor({8, 15});

// A boxed call of `op` by a caller that keeps a value of its own below the
// arguments; returns the stack as the call leaves it. Below autograd, so
// that the dispatcher hands the router the caller's own stack (an autograd
// kernel would unbox the call and box it again into a fresh one).
Stack boxed_call_below_a_caller_value(const char* name, const char* overload,
                                      std::vector<c10::IValue> arguments) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  Stack stack{c10::IValue(std::string("caller's"))};
  for (auto& argument : arguments) stack.push_back(std::move(argument));
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  op.callBoxed(stack);
  return stack;
}

void expect_caller_value_then(const Stack& stack, const at::Tensor& result) {
  ASSERT_EQ(stack.size(), 2u) << "the call left the caller's stack with the wrong depth";
  ASSERT_TRUE(stack[0].isString()) << "the caller's value below the arguments is gone";
  EXPECT_EQ(stack[0].toStringRef(), "caller's");
  ASSERT_TRUE(stack[1].isTensor());
  EXPECT_TRUE(same(stack[1].toTensor(), result));
}

// A cond that notes the first element of the op's first tensor argument
// (a tensor, or the first of a list), found `arity` values from the top.
CondFn noting_first_argument(std::shared_ptr<std::vector<float>> seen, bool answer) {
  return [seen, answer](const c10::OperatorHandle& op, c10::DispatchKeySet, const Stack& s) {
    const size_t arity = op.schema().arguments().size();
    const c10::IValue& first = torch::jit::peek(s, 0, arity);
    const at::Tensor tensor = first.isTensor() ? first.toTensor() : first.toTensorList().get(0);
    seen->push_back(tensor[0].item<float>());
    EXPECT_EQ(torch::jit::last(s, arity).size(), arity);
    return answer;
  };
}

// Pops the op's arguments and pushes a tensor of two `value`s.
ImplFn pushing_two(float value) {
  return [value](const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    torch::jit::drop(*stack, op.schema().arguments().size());
    stack->emplace_back(tensor({value, value}));
  };
}

TEST_P(Conformance, ConditionsSeeTheArgumentsOnTopOfTheStack) {
  BEHAVIOUR("calls.cpp-arguments-top-of-stack");
  auto seen = std::make_shared<std::vector<float>>();
  const Key cat{"aten", "cat", "CPU"};
  auto mul_call = [] {
    return boxed_call_below_a_caller_value("aten::mul", "Tensor", {tensor({2, 3}), tensor({4, 5})});
  };
  auto cat_call = [] {
    return boxed_call_below_a_caller_value(
        "aten::cat", "", {c10::List<at::Tensor>({tensor({2}), tensor({4})}), int64_t{0}});
  };
  for (const Key& key : {mul_key(), cat}) {
    add(key, noting_first_argument(seen, false), forbidden_impl(), "declines");
    adapter().install(key);
  }
  expect_caller_value_then(mul_call(), kDropinStock);
  expect_caller_value_then(cat_call(), tensor({2, 4}));
  EXPECT_EQ(*seen, (std::vector<float>{2, 2}));
  for (const Key& key : {mul_key(), cat}) {
    add(key, noting_first_argument(seen, true), pushing_two(6), "accepts");
    adapter().install(key);
  }
  seen->clear();
  expect_caller_value_then(mul_call(), tensor({6, 6}));
  expect_caller_value_then(cat_call(), tensor({6, 6}));
  EXPECT_EQ(*seen, (std::vector<float>{2, 2, 2, 2}));
}

// Boxed impls that break the boxed convention, one after the other, then
// one that keeps it: none pushed, the arguments left, two results for one.
enum class Leaves { kNothing, kItsArguments, kTwoResults, kOneResult };

ImplFn leaving(std::shared_ptr<Leaves> what) {
  return [what](const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    if (*what == Leaves::kItsArguments) return;
    torch::jit::drop(*stack, op.schema().arguments().size());
    if (*what == Leaves::kNothing) return;
    stack->emplace_back(tensor({6, 6}));
    if (*what == Leaves::kTwoResults) stack->emplace_back(tensor({6, 6}));
  };
}

// Called boxed, below a value of the caller's (boxed_call_below_a_caller_value):
// a typed call of an implementation that does not check would read its
// result off a stack of the wrong depth (c10 checks that in debug builds
// only), which is undefined.
TEST_P(Conformance, AnImplLeavingTheWrongNumberOfResultsMakesTheCallRaiseARuntimeError) {
  BEHAVIOUR("calls.cpp-impl-result-count-checked");
  const Key cat{"aten", "cat", "CPU"};
  const std::vector<std::pair<Key, std::function<Stack()>>> calls{
      {mul_key(),
       [] {
         return boxed_call_below_a_caller_value("aten::mul", "Tensor",
                                                {tensor({2, 3}), tensor({4, 5})});
       }},
      {cat,
       [] {
         return boxed_call_below_a_caller_value(
             "aten::cat", "", {c10::List<at::Tensor>({tensor({2}), tensor({4})}), int64_t{0}});
       }}};
  auto what = std::make_shared<Leaves>(Leaves::kOneResult);
  for (const auto& [key, call] : calls) {
    add(key, constant_cond(true), leaving(what), "miscounts");
    adapter().install(key);
  }
  const std::vector<std::pair<Leaves, const char*>> wrong{
      {Leaves::kNothing, "nothing"},
      {Leaves::kItsArguments, "its arguments"},
      {Leaves::kTwoResults, "two results"}};
  for (const auto& [key, call] : calls) {
    const std::string node_id = adapter().graph(key).at(0).node_id;
    for (const auto& [leaves, label] : wrong) {
      *what = leaves;
      try {
        const Stack stack = call();
        ADD_FAILURE() << key.op_symbol << " whose impl left " << label << " returned a stack of "
                      << stack.size() << " values";
      } catch (const std::exception& e) {
        const std::string message = raised(e);
        const std::string first_line = message.substr(0, message.find('\n'));  // not c10's backtrace
        EXPECT_TRUE(message.starts_with("raised RuntimeError: "))
            << key.op_symbol << " whose impl left " << label << " " << first_line
            << "; the dispatcher's own check of a boxed kernel's results raises a RuntimeError";
        EXPECT_NE(message.find(node_id), std::string::npos)
            << key.op_symbol << " whose impl left " << label << " " << first_line
            << "; the error names the override, " << node_id;
      }
    }
    *what = Leaves::kOneResult;
    expect_caller_value_then(call(), tensor({6, 6}));
  }
}

TEST_P(Conformance, TheRuntimeIsAskedOnEveryMatchedCallRightBeforeTheImpl) {
  BEHAVIOUR("routing.runtime-asked-each-matched-call");
  REQUIRE_FEATURE("runtime-init");
  auto events = std::make_shared<std::vector<std::string>>();
  auto note = [events](std::string what, bool answer) {
    return [events, what, answer](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
      events->push_back(what);
      return answer;
    };
  };
  auto runtime = [events](std::string what, bool answer) {
    return [events, what, answer] {
      events->push_back(what);
      return answer;
    };
  };
  add(mul_key(), note("a.cond", true), forbidden_impl(), "a", runtime("a.runtime", false));
  add(mul_key(), note("b.cond", true), impl_doing([events] { events->push_back("b.impl"); }, 5),
      "b", runtime("b.runtime", true));
  adapter().install(mul_key());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), tensor({5, 5})));
  std::vector<std::string> once{"a.cond", "a.runtime", "b.cond", "b.runtime", "b.impl"};
  std::vector<std::string> expected;
  for (int i = 0; i < 3; ++i) expected.insert(expected.end(), once.begin(), once.end());
  EXPECT_EQ(*events, expected) << "asked once per matched call, after the cond, before the impl";
}

TEST_P(Conformance, FunctionalityKeysAreRefusedNamingUsableKeys) {
  BEHAVIOUR("validation.keys-where-no-kernel-runs");
  const std::vector<std::pair<std::string, std::string>> cases{
      {"Dense", "CPU"}, {"Sparse", "SparseCPU"}, {"AutogradFunctionality", "AutogradCPU"}};
  for (const auto& [key, suggestion] : cases) {
    try {
      add({"aten", "mul.Tensor", key}, constant_cond(true), forbidden_impl());
      ADD_FAILURE() << key << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(key));
      EXPECT_THAT(e.what(), HasSubstr(suggestion));
      // The suggestions are a list: a separator at the start, after a space or
      // an opening bracket, or before a closing one, stands for an empty entry.
      EXPECT_FALSE(std::regex_search(std::string(e.what()),
                                     std::regex(R"((^|[\s(\[{:])[,;]|[,;]\s*($|[)\]};,]))")))
          << e.what();
    }
    EXPECT_TRUE(adapter().graph({"aten", "mul.Tensor", key}).empty());
  }
}

// Registers (with `add_declining`) and installs a declining override of
// mul.Tensor at each key; a CPU call still gives the stock result. The
// fixture compares the dispatcher with its state before the test.
void expect_declining_overrides_work_at(RegistryAdapter& adapter,
                                        const std::function<void(const Key&)>& add_declining,
                                        std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    const Key graph_key{"aten", "mul.Tensor", key};
    add_declining(graph_key);
    adapter.install(graph_key);
    EXPECT_TRUE(adapter.router_installed(graph_key)) << key;
    EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), kDropinStock)) << key;
  }
}

TEST_P(Conformance, EveryKeyThatWorksInstallsAndTearsDown) {
  BEHAVIOUR("validation.working-keys-keep-working");
  expect_declining_overrides_work_at(
      adapter(), [this](const Key& key) { add(key, constant_cond(false), forbidden_impl()); },
      {"CPU", "CUDA", "AutogradCPU", "AutocastCPU", "Python", "FuncTorchBatched", "Functionalize"});
}

// Every call passes these keys (always included), and mul's entry there is a
// fallthrough: a declined call must go past it.
TEST_P(Conformance, KeysWhereMulFallsThroughInstallAndTearDown) {
  BEHAVIOUR("routing.fallback-past-a-fallthrough-key");
  expect_declining_overrides_work_at(
      adapter(), [this](const Key& key) { add(key, constant_cond(false), forbidden_impl()); },
      {"BackendSelect", "ADInplaceOrView"});
}

TEST_P(Conformance, ACompositeImplicitOpIsRefusedAtABackendKey) {
  BEHAVIOUR("validation.composite-implicit-refused-at-backend-key");
  const Key matmul{"aten", "matmul", "CPU"};
  try {
    add(matmul, constant_cond(false), forbidden_impl());
    ADD_FAILURE() << "an override of aten::matmul at CPU was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("aten::matmul"));
    EXPECT_THAT(e.what(), HasSubstr("CompositeImplicitAutograd"));
    EXPECT_THAT(e.what(), HasSubstr("AutogradCPU"));
  }
  EXPECT_TRUE(adapter().graph(matmul).empty());
}

TEST_P(Conformance, ASnapshotTakenInsideTheMaskRestoresRoutingThatMatchesActive) {
  BEHAVIOUR("unconditional.restore-follows-current-mask");
  REQUIRE_FEATURE("unconditional-hatch");
  REQUIRE_FEATURE("unconditional-survives-disable");
  add(mul_key(), {}, fill_impl(9), "test_dsl", {}, /*unconditional=*/true);
  adapter().install(mul_key());
  adapter().disable({{"test_dsl"}, {}, {}});
  const at::Tensor unconditional = tensor({9, 9});
  EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), unconditional));
  auto mask = adapter().unconditional_masked();
  EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), kDropinStock));
  auto inner = adapter().scope();  // a snapshot taken while the mask is on
  mask.reset();
  EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), unconditional));
  inner.reset();  // restored with the mask lifted
  const auto graph = adapter().graph(mul_key());
  ASSERT_EQ(graph.size(), 1u);
  EXPECT_TRUE(graph[0].active);
  EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), unconditional)) << "the node says active, so it must route";
}

// The node the mask kept out of the snapshot's chain is published by the
// restore: its `_native` op must be active too, as for any published node.
TEST_P(Conformance, ARestoreUnderALiftedMaskActivatesTheNativeOpOfTheNodeItPublishes) {
  BEHAVIOUR("unconditional.restore-activates-native-ops-the-mask-let-in");
  REQUIRE_FEATURE("unconditional-hatch");
  REQUIRE_FEATURE("unconditional-survives-disable");
  REQUIRE_FEATURE("native-op-meta");
  add(mul_key(), constant_cond(false), fill_impl(7), "declining_dsl");
  add(mul_key(), {}, fill_impl(9), "test_dsl", {}, /*unconditional=*/true);
  adapter().disable({{"test_dsl"}, {}, {}});
  auto mask = adapter().unconditional_masked();
  adapter().install(mul_key());  // routes through the declining override only
  EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), kDropinStock));
  auto inner = adapter().scope();
  mask.reset();
  inner.reset();  // restored with the mask lifted: the unconditional override routes
  const at::Tensor unconditional = tensor({9, 9});
  EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), unconditional));
  auto native = adapter().native_op(adapter().graph(mul_key()).at(1));
  ASSERT_TRUE(native.has_value()) << "no _native op for the override the restored router routes to";
  Stack stack{tensor({2, 3}), tensor({4, 5})};
  native->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), unconditional));
}

// A graph installed inside the mask with an empty chain has no router at the
// snapshot; restored under the lifted mask it gets one, even behind a graph
// (bmm sorts before mul.Tensor) whose router the restore kept.
TEST_P(Conformance, ARestoreUnderALiftedMaskRoutesAGraphInstalledWithNoRouterInsideIt) {
  BEHAVIOUR("unconditional.restore-routes-graphs-installed-empty-in-the-mask");
  REQUIRE_FEATURE("unconditional-hatch");
  REQUIRE_FEATURE("unconditional-survives-disable");
  add(bmm_key(), constant_cond(false), fill_impl(7), "declining_dsl");
  adapter().install(bmm_key());
  add(mul_key(), {}, fill_impl(9), "test_dsl", {}, /*unconditional=*/true);
  adapter().disable({{"test_dsl"}, {}, {}});
  auto mask = adapter().unconditional_masked();
  adapter().install(mul_key());  // its chain is empty under the mask
  ASSERT_FALSE(adapter().router_installed(mul_key()));
  auto inner = adapter().scope();
  mask.reset();
  inner.reset();  // restored with the mask lifted
  EXPECT_TRUE(adapter().router_installed(bmm_key()));
  const auto graph = adapter().graph(mul_key());
  ASSERT_EQ(graph.size(), 1u);
  EXPECT_TRUE(graph[0].active);
  EXPECT_TRUE(same(dropin_mul_2_3_by_4_5(), tensor({9, 9}))) << "the node says active, so it must route";
}

// A snapshot taken before the mask and restored inside it masks the disabled
// unconditional override it had routing; and a graph the mask does not
// change comes back with the chain it had, not with an override registered
// since its install.
TEST_P(Conformance, ASnapshotTakenBeforeTheMaskAndRestoredInsideItMasks) {
  BEHAVIOUR("unconditional.restore-inside-the-mask");
  REQUIRE_FEATURE("unconditional-hatch");
  REQUIRE_FEATURE("unconditional-survives-disable");
  REQUIRE_FEATURE("namespaces");
  // Two ops apart from mul.Tensor, which both compute with.
  const Key masked = twice_key(ns2().ns()), unmasked = twice_key(ns1().ns());
  const at::Tensor x = tensor({1, 2});
  add(masked, {}, fill_impl(9), "u", {}, /*unconditional=*/true);
  adapter().install(masked);
  adapter().disable({{"u"}, {}, {}});
  add(unmasked, constant_cond(false), fill_impl(7), "d");
  adapter().install(unmasked);
  add(unmasked, constant_cond(true), fill_impl(8), "late");  // no call reaches it until an install
  auto outer = adapter().scope();  // a snapshot taken before the mask
  auto mask = adapter().unconditional_masked();
  adapter().disable({{"d"}, {}, {}});  // a change for the restore to undo
  outer.reset();  // restored with the mask on
  EXPECT_TRUE(same(ns2().twice(x), tensor({3, 6}))) << "the restore brought a masked override back";
  EXPECT_TRUE(same(ns1().twice(x), tensor({2, 4}))) << "the restore published the late override";
  mask.reset();
  EXPECT_TRUE(same(ns2().twice(x), tensor({9, 9})));
  EXPECT_TRUE(same(ns1().twice(x), tensor({2, 4})));
}

}  // namespace
}  // namespace conformance
