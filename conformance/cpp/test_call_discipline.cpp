// The call discipline that the whole population of generated mutants found
// unpinned (issue 20): arguments given back after a call, many arguments
// intact, a shallower call after a deep nest, an ordering function that
// changes nothing, and the unconditional mask nesting.

#include "suite.h"

#include <ATen/ops/addcmul.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros_like.h>

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <sstream>
#include <thread>

namespace conformance {
namespace call_discipline {

using namespace native_registry::fixtures;

// Runs `f` on a new thread and joins it. No control-plane change runs while
// it does, so a test using it needs no concurrent-control-plane.
void on_a_thread_joined(const std::function<void()>& f) { std::thread(f).join(); }

// ---- call arguments are released -------------------------------------------------

TEST_P(Conformance, CallArgumentsAreReleasedAfterTheCall) {
  BEHAVIOUR("routing.call-arguments-released");
  auto takes = std::make_shared<bool>(false);
  add(mul_key(), [takes](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return *takes; },
      fill_impl(7));
  adapter().install(mul_key());
  for (const bool accepted : {false, true, false, true}) {  // each path twice, in turn
    *takes = accepted;
    const at::Tensor a = tensor({2, 3});
    const at::Tensor b = tensor({4, 5});
    const auto a_before = a.use_count(), b_before = b.use_count();
    EXPECT_TRUE(same(call_mul(a, b), accepted ? tensor({7, 7}) : tensor({8, 15})));
    EXPECT_EQ(a.use_count(), a_before) << (accepted ? "accepted" : "declined") << ": the call kept a";
    EXPECT_EQ(b.use_count(), b_before) << (accepted ? "accepted" : "declined") << ": the call kept b";
  }
}

// ---- every argument of a many-argument op reaches cond and impl intact ----------

// What a boxed call of aten::convolution (nine arguments, none defaulted)
// holds on top of `stack`, against what was passed; "" when intact.
std::string convolution_arguments_differ(const Stack& stack, const at::Tensor& x, const at::Tensor& w,
                                         const at::Tensor& bias) {
  if (stack.size() < 9) return "the stack holds " + std::to_string(stack.size()) + " values";
  const c10::IValue* args = stack.data() + stack.size() - 9;
  std::ostringstream problems;
  const auto tensor_is = [&](int i, const at::Tensor& t) {
    if (!args[i].isTensor() || !args[i].toTensor().is_same(t)) problems << "argument " << i << " differs; ";
  };
  const auto ints_are = [&](int i, std::vector<int64_t> expected) {
    if (!args[i].isIntList() || args[i].toIntVector() != expected) problems << "argument " << i << " is " << args[i] << "; ";
  };
  tensor_is(0, x);
  tensor_is(1, w);
  tensor_is(2, bias);
  ints_are(3, {2, 1});
  ints_are(4, {1, 0});
  ints_are(5, {1, 2});
  if (!args[6].isBool() || args[6].toBool()) problems << "argument 6 is " << args[6] << "; ";
  ints_are(7, {0, 0});
  if (!args[8].isInt() || args[8].toInt() != 1) problems << "argument 8 is " << args[8] << "; ";
  return problems.str();
}

TEST_P(Conformance, EveryArgumentOfAManyArgumentOpReachesCondAndImplIntact) {
  BEHAVIOUR("routing.many-arguments-intact");
  const Key key{"aten", "convolution", "CPU"};
  const at::Tensor x = at::randn({1, 2, 6, 5}), w = at::randn({3, 2, 3, 2}), bias = at::randn({3});
  const auto convolve = [&] { return at::convolution(x, w, bias, {2, 1}, {1, 0}, {1, 2}, false, {0, 0}, 1); };
  const at::Tensor stock = convolve();
  const at::Tensor sentinel = at::full_like(stock, 7);
  for (const bool takes : {false, true}) {
    SCOPED_TRACE(takes ? "taken" : "declined");
    auto problems = std::make_shared<std::vector<std::string>>();
    std::unique_ptr<Scope> inner = adapter().scope();
    add(key,
        [&, problems, takes](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
          const std::string differ = convolution_arguments_differ(stack, x, w, bias);
          if (!differ.empty()) problems->push_back("cond: " + differ);
          return takes;
        },
        [&, problems](const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
          const std::string differ = convolution_arguments_differ(*stack, x, w, bias);
          if (!differ.empty()) problems->push_back("impl: " + differ);
          torch::jit::drop(*stack, 9);
          torch::jit::push(*stack, sentinel.clone());
        });
    adapter().install(key);
    EXPECT_TRUE(same(convolve(), takes ? sentinel : stock));
    EXPECT_THAT(*problems, ::testing::IsEmpty());
  }
}

// ---- a shallower call after a deep nest ------------------------------------------

// Two nodes on mul. The first's cond, at every level above the deepest,
// calls mul for the level below (which nests down to the deepest), then, once
// that nest has returned, calls mul once more (a leaf: its value is too large
// to recurse), and declines. The second node's cond checks that it sees the
// very tensors the first one saw at its level, and takes the call: its impl
// multiplies without mul. Every level's arguments are distinct, so a level
// whose call shared a stack another level still held would see another's
// arguments, or none.
struct Nest {
  float depth;
  std::vector<std::pair<at::Tensor, at::Tensor>> opened;  // first cond ran, second not yet
  std::vector<std::string> problems;

  static constexpr float kLeaf = 1000;

  void call(float value) {
    const at::Tensor a = tensor({value, value + 0.25f}), b = tensor({value + 0.5f, value + 0.75f});
    const at::Tensor out = call_mul(a, b);
    if (!same(out, tensor({value * (value + 0.5f), (value + 0.25f) * (value + 0.75f)}))) {
      problems.push_back("mul at " + std::to_string(value) + " returned a wrong product");
    }
  }
};

TEST_P(Conformance, AShallowerCallAfterADeepNestSeesItsOwnArguments) {
  BEHAVIOUR("routing.shallower-call-after-deep-nest");
  for (const float depth : {12.0f, 20.0f}) {
    SCOPED_TRACE(depth);
    auto nest = std::make_shared<Nest>();
    nest->depth = depth;
    std::unique_ptr<Scope> inner = adapter().scope();
    add(mul_key(),
        [nest](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
          if (stack.size() < 2) {
            nest->problems.push_back("the first cond saw a stack of " + std::to_string(stack.size()));
            return false;
          }
          const at::Tensor a = stack[stack.size() - 2].toTensor(), b = stack.back().toTensor();
          nest->opened.emplace_back(a, b);
          const float level = a[0].item<float>();
          if (level < nest->depth) {
            nest->call(level + 1);
            nest->call(Nest::kLeaf + level);
          }
          return false;
        },
        forbidden_impl(), "dsl_a");
    add(mul_key(),
        [nest](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
          if (nest->opened.empty()) {
            nest->problems.push_back("the second cond ran for a call the first never saw");
            return true;
          }
          const auto [a, b] = nest->opened.back();
          nest->opened.pop_back();
          if (stack.size() < 2 || !stack[stack.size() - 2].isTensor() || !stack.back().isTensor() ||
              !stack[stack.size() - 2].toTensor().is_same(a) || !stack.back().toTensor().is_same(b)) {
            nest->problems.push_back("the second cond at level " + std::to_string(a[0].item<float>()) +
                                     " saw other arguments than the first");
          }
          return true;
        },
        [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
          const at::Tensor a = stack->at(stack->size() - 2).toTensor(), b = stack->back().toTensor();
          at::Tensor product = at::addcmul(at::zeros_like(a), a, b);
          torch::jit::drop(*stack, 2);
          torch::jit::push(*stack, std::move(product));
        },
        "dsl_b");
    adapter().install(mul_key());
    for (int round = 0; round < 2; ++round) nest->call(1);  // the second finds what the first left
    EXPECT_THAT(nest->problems, ::testing::IsEmpty());
    EXPECT_TRUE(nest->opened.empty());
  }
}

// ---- a routed call as its thread exits --------------------------------------------

// Made on a thread before its first routed call, so destroyed after whatever
// the implementation keeps per thread for that call; its destructor calls
// the op once more and keeps what came back.
struct CallsMulAtThreadExit {
  std::vector<at::Tensor>* answers = nullptr;
  ~CallsMulAtThreadExit() {
    if (answers == nullptr) return;
    answers->push_back(call_mul(tensor({2}), tensor({4})));        // taken
    answers->push_back(call_mul(tensor({2, 3}), tensor({4, 5})));  // declined
  }
};

// The room the impl makes on its call's stack: 64 MiB of values, past glibc's
// largest mmap threshold (32 MiB), so the storage is mapped for it and
// unmapped when freed. A stack an implementation keeps per thread and uses
// after the thread destroyed it then faults on the first value boxed into it,
// every time; freed heap storage would be written unnoticed, or caught by the
// allocator's checks only sometimes.
constexpr size_t kRoomForValues = size_t{1} << 22;

// Runs in a death test's child (a crash fails the test, not the suite): a
// taken and a declined call on a thread, then the same two from a
// thread_local's destructor as the thread exits. Exits 0 if all four
// returned what they should, else 1 with what came back.
[[noreturn]] void call_as_a_thread_exits() {
  alarm(60);
  std::vector<at::Tensor> during, at_exit;
  on_a_thread_joined([&] {
    thread_local CallsMulAtThreadExit caller;
    caller.answers = &at_exit;
    during.push_back(call_mul(tensor({2}), tensor({4})));
    during.push_back(call_mul(tensor({2, 3}), tensor({4, 5})));
  });
  std::ostringstream problems;
  const auto expect = [&](const std::vector<at::Tensor>& answers, const char* when) {
    if (answers.size() != 2) {
      problems << when << ": " << answers.size() << " calls returned, expected 2\n";
      return;
    }
    if (!same(answers[0], tensor({7}))) problems << when << ": the taken call returned " << answers[0] << "\n";
    if (!same(answers[1], tensor({8, 15}))) problems << when << ": the declined call returned " << answers[1] << "\n";
  };
  expect(during, "during the thread");
  expect(at_exit, "at thread exit");
  const std::string found = problems.str();
  if (!found.empty()) std::fputs(found.c_str(), stderr);
  std::fflush(stderr);
  std::_Exit(found.empty() ? 0 : 1);
}

TEST_P(Conformance, ARoutedCallAsItsThreadExitsRoutesAsAnyOther) {
  BEHAVIOUR("routing.call-at-thread-exit");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ImplFn seven = fill_impl(7);
  add(mul_key(),
      [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
        return stack.size() >= 2 && stack.back().isTensor() && stack.back().toTensor().numel() == 1;
      },
      [seven](const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
        stack->reserve(stack->size() + kRoomForValues);  // an impl may leave its stack roomier
        seven(op, keys, stack);
      });
  adapter().install(mul_key());
  EXPECT_EXIT(call_as_a_thread_exits(), ::testing::ExitedWithCode(0), "");
}

// ---- an ordering function returning its graph unchanged --------------------------------

TEST_P(Conformance, AnOrderingFunctionReturningItsGraphUnchangedLogsNothing) {
  BEHAVIOUR("ordering.unchanged-graph-no-warning");
  for (const int nodes : {1, 3}) {
    SCOPED_TRACE(nodes);
    std::unique_ptr<Scope> inner = adapter().scope();
    for (int i = 0; i < nodes; ++i) add(mul_key(), constant_cond(true), fill_impl(7 + i), "dsl_" + std::to_string(i));
    adapter().install(mul_key());
    std::vector<std::string> before;
    for (const NodeInfo& node : adapter().graph(mul_key())) before.push_back(node.node_id);
    const size_t warned = adapter().warnings().size();
    int calls = 0;
    adapter().reorder([&](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
      ++calls;
      std::vector<std::string> ids;
      for (const NodeInfo& node : graph) ids.push_back(node.node_id);
      return ids;
    });
    EXPECT_EQ(calls, 1);
    const std::vector<std::string> warnings = adapter().warnings();
    EXPECT_THAT(std::vector<std::string>(warnings.begin() + static_cast<std::ptrdiff_t>(warned), warnings.end()),
                ::testing::IsEmpty());
    std::vector<std::string> after;
    for (const NodeInfo& node : adapter().graph(mul_key())) after.push_back(node.node_id);
    EXPECT_EQ(after, before);
    EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({7, 7})));
  }
}

// ---- the unconditional mask nests ---------------------------------------------------

TEST_P(Conformance, TheUnconditionalMaskNests) {
  BEHAVIOUR("unconditional.mask-nests");
  REQUIRE_FEATURE("unconditional-hatch");
  const auto call = [] { return call_mul(tensor({2, 3}), tensor({4, 5})); };
  const at::Tensor five = tensor({5, 5}), stock = tensor({8, 15});
  add(mul_key(), CondFn{}, fill_impl(5), "test_dsl", {}, true);
  adapter().install(mul_key());
  adapter().disable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(call(), five));
  for (int round = 0; round < 2; ++round) {  // a second round finds what the first left
    std::unique_ptr<Scope> outer = adapter().unconditional_masked();
    EXPECT_TRUE(same(call(), stock));
    std::unique_ptr<Scope> inner = adapter().unconditional_masked();
    EXPECT_TRUE(same(call(), stock));
    inner.reset();
    EXPECT_TRUE(same(call(), stock)) << "leaving the inner mask lifted the outer one";
    outer.reset();
    EXPECT_TRUE(same(call(), five)) << "leaving the outer mask left it in force";
  }
}

}  // namespace call_discipline
}  // namespace conformance
