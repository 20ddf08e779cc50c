// Issue 27, items 4 and 5, on the C++ side: an op that leaves or changes
// while one of its calls runs (user code the call runs, the coverage check
// included, destroys its library, or defines it again with other arguments or
// returns) gives the router's
// named error or the impl's result, never a crash; and a thread ended by a
// forced unwind (pthread_exit, what CPython does to a daemon thread at exit)
// inside a callback the registry runs ends quietly, the process and the
// registry intact. Each case runs in a death test's child under alarm(), so
// a crash or hang fails its test, not the suite.

#include "suite.h"

#include <ATen/ATen.h>

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

constexpr const char* kMidcallNs = "_native_registry_midcall_cpp";

enum class Where { kCond, kRuntimeCheck, kImpl, kCoverageCheck };
enum class How { kRemoved, kRedefinedArguments, kRedefinedReturns };

// Boxed kernels, as in test_robustness.cpp (the typed router would make
// LibTorch refuse a redefinition with another signature).
template <int Arguments, int Returns>
void midcall_kernel(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
  at::Tensor x = (*stack)[stack->size() - Arguments].toTensor();
  torch::jit::drop(*stack, Arguments);
  for (int i = 0; i < Returns; ++i) stack->emplace_back(x + 1);
}

std::unique_ptr<torch::Library> define_midcall_foo(const char* schema, torch::CppFunction kernel) {
  auto lib = std::make_unique<torch::Library>(torch::Library::DEF, kMidcallNs, std::nullopt,
                                              __FILE__, __LINE__);
  lib->def(schema);
  lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU, std::move(kernel)));
  return lib;
}

std::unique_ptr<torch::Library> define_changed(How how) {
  if (how == How::kRedefinedArguments) {
    return define_midcall_foo("foo(Tensor x, Tensor y, Tensor z) -> Tensor",
                              torch::CppFunction::makeFromBoxedFunction<&midcall_kernel<3, 1>>());
  }
  return define_midcall_foo("foo(Tensor x) -> ()",
                            torch::CppFunction::makeFromBoxedFunction<&midcall_kernel<1, 0>>());
}

// Runs in a death test's child: one call of the op, during which `where`
// changes it as `how` says. Exits 0 if the call raised the router's error, a
// RuntimeError (a c10::Error of none of c10's typed kinds) naming the op and
// that it left the dispatcher (or, unless `must_raise`, returned the impl's
// 7s), else 1 with what happened.
[[noreturn]] void call_while_the_op_changes(RegistryAdapter& registry, Where where, How how,
                                            bool must_raise) {
  alarm(60);
  auto lib = std::make_shared<std::unique_ptr<torch::Library>>(define_midcall_foo(
      "foo(Tensor x) -> Tensor", torch::CppFunction::makeFromBoxedFunction<&midcall_kernel<1, 1>>()));
  auto change = [lib, how] {
    lib->reset();
    if (how != How::kRemoved) *lib = define_changed(how);
  };
  registry.allow_namespace(kMidcallNs);
  Override o{"midcall_dsl", kMidcallNs, "foo", "CPU", {}, {}, {}, false};
  o.cond = [change, where](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
    if (where == Where::kCond) change();
    return true;
  };
  if (where == Where::kRuntimeCheck) {
    o.try_initialize_runtime = [change] {
      change();
      return true;
    };
  }
  // The impl knows its op's schema as registered: one Tensor in, one out.
  o.impl = [change, where](const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    if (where == Where::kImpl) change();
    at::Tensor x = stack->back().toTensor();
    stack->pop_back();
    stack->emplace_back(at::full_like(x, 7));
  };
  // The coverage check is user code too: it covers the call after changing the op.
  std::unique_ptr<Scope> covering;
  if (where == Where::kCoverageCheck) {
    covering = registry.coverage_check(
        [change](const Key&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
          change();
          return true;
        });
  }
  registry.register_override(o);
  registry.install({kMidcallNs, "foo", "CPU"});
  const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow((std::string(kMidcallNs) + "::foo").c_str(), "");
  Stack stack{tensor({1, 1})};
  std::string what;
  bool good = false;
  try {
    op.callBoxed(&stack);
    good = !must_raise && stack.size() == 1 && stack[0].isTensor() &&
           same(stack[0].toTensor(), tensor({7, 7}));
    what = "returned " + std::to_string(stack.size()) + " values";
  } catch (const std::exception& e) {
    what = raised(e);
    good = what.rfind("raised RuntimeError: ", 0) == 0 &&
           what.find(std::string(kMidcallNs) + "::foo") != std::string::npos &&
           what.find("dispatcher") != std::string::npos &&
           what.find("INTERNAL ASSERT") == std::string::npos;
  }
  if (!good) std::fprintf(stderr, "the call: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(good ? 0 : 1);
}

TEST_P(Conformance, AnOpChangedDuringItsCallGivesANamedErrorOrTheResult) {
  BEHAVIOUR("robustness.op-changed-during-call");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const Where where :
       {Where::kCond, Where::kRuntimeCheck, Where::kImpl, Where::kCoverageCheck}) {
    if (where == Where::kRuntimeCheck && !adapter().supports("runtime-init")) continue;
    if (where == Where::kCoverageCheck && !adapter().supports("aot-coverage")) continue;
    for (const How how : {How::kRemoved, How::kRedefinedArguments, How::kRedefinedReturns}) {
      SCOPED_TRACE("where " + std::to_string(static_cast<int>(where)) + ", how " +
                   std::to_string(static_cast<int>(how)));
      EXPECT_EXIT(call_while_the_op_changes(adapter(), where, how, false),
                  ::testing::ExitedWithCode(0), "");
    }
  }
}

TEST_P(Conformance, AnImplThatRedefinesItsOpWithOtherReturnsGetsANamedError) {
  BEHAVIOUR("robustness.impl-changed-returns-named-error");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(call_while_the_op_changes(adapter(), Where::kImpl, How::kRedefinedReturns, true),
              ::testing::ExitedWithCode(0), "");
}

// ---- the kernel a router captured, deregistered ------------------------------------

constexpr const char* kCapturedNs = "_native_registry_captured_cpp";

// An unboxed kernel with a C++ signature, as most ops' kernels are.
at::Tensor plus_one(const at::Tensor& x) { return x + 1; }

// "returned [..]", or what the call raised as raised() tells it.
std::string captured_outcome(const c10::OperatorHandle& op) {
  Stack stack{tensor({1, 1})};
  try {
    op.callBoxed(&stack);
    if (stack.size() == 1 && stack[0].isTensor() && same(stack[0].toTensor(), tensor({7, 7}))) {
      return "returned 7s";
    }
    if (stack.size() == 1 && stack[0].isTensor() && same(stack[0].toTensor(), tensor({2, 2}))) {
      return "returned x + 1";
    }
    return "returned something else";
  } catch (const std::exception& e) {
    return raised(e);
  }
}

// Runs in a death test's child: foo's CPU kernel comes from a library of its
// own, which is destroyed after an override of foo is installed (foo stays
// defined). Exits 0 if a declined call then raises a RuntimeError, and an
// accepted one still returns the impl's 7s; else 1 with what happened.
[[noreturn]] void call_after_the_captured_kernel_is_deregistered(RegistryAdapter& registry) {
  alarm(60);
  torch::Library def(torch::Library::DEF, kCapturedNs, std::nullopt, __FILE__, __LINE__);
  def.def("foo(Tensor x) -> Tensor");
  auto kernel = std::make_unique<torch::Library>(torch::Library::IMPL, kCapturedNs,
                                                 c10::DispatchKey::CPU, __FILE__, __LINE__);
  kernel->impl("foo", TORCH_FN(plus_one));
  registry.allow_namespace(kCapturedNs);
  auto accept = std::make_shared<bool>(false);
  registry.register_override(
      {"captured_dsl", kCapturedNs, "foo", "CPU",
       [accept](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return *accept; },
       fill_impl(7), {}, false});
  registry.install({kCapturedNs, "foo", "CPU"});
  const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow((std::string(kCapturedNs) + "::foo").c_str(), "");
  const std::string before = captured_outcome(op);
  kernel.reset();
  const std::string declined = captured_outcome(op);
  *accept = true;
  const std::string accepted = captured_outcome(op);
  const bool good = before == "returned x + 1" && declined.rfind("raised RuntimeError: ", 0) == 0 &&
                    declined.find("INTERNAL ASSERT") == std::string::npos &&
                    accepted == "returned 7s";
  if (!good) {
    std::fprintf(stderr, "before: %s\ndeclined: %s\naccepted: %s\n", before.c_str(),
                 declined.c_str(), accepted.c_str());
  }
  std::fflush(stderr);
  std::_Exit(good ? 0 : 1);
}

TEST_P(Conformance, ADeclinedCallAfterTheCapturedKernelIsDeregisteredRaisesRuntimeError) {
  BEHAVIOUR("robustness.captured-kernel-deregistered");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(call_after_the_captured_kernel_is_deregistered(adapter()),
              ::testing::ExitedWithCode(0), "");
}

// ---- a thread ended by a forced unwind inside a callback ---------------------------

void* reorder_and_end_the_thread(void* raw) {
  auto& registry = *static_cast<RegistryAdapter*>(raw);
  registry.reorder([](const std::string&, const std::string&,
                      const std::vector<NodeInfo>&) -> std::vector<std::string> {
    pthread_exit(nullptr);  // as CPython ends a daemon thread taking the GIL at exit
  });
  return nullptr;  // not reached
}

// Runs in a death test's child: an ordering function ends its thread with
// pthread_exit. Exits 0 if the thread ended, the process did not abort, and
// the registry still toggles and routes from this thread.
[[noreturn]] void end_a_thread_inside_the_ordering_function(RegistryAdapter& registry,
                                                            const std::function<void()>& add) {
  alarm(60);
  add();
  registry.install({"aten", "mul.Tensor", "CPU"});
  pthread_t thread;
  if (pthread_create(&thread, nullptr, &reorder_and_end_the_thread, &registry) != 0) std::_Exit(3);
  pthread_join(thread, nullptr);
  registry.disable({{"exit_dsl"}, {}, {}});
  registry.enable({{"exit_dsl"}, {}, {}});
  const bool routed = same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({9, 9}));
  if (!routed) std::fputs("after the thread ended, the call was not routed\n", stderr);
  std::fflush(stderr);
  std::_Exit(routed ? 0 : 1);
}

TEST_P(Conformance, AThreadEndedByAForcedUnwindInACallbackLeavesTheProcessAndRegistryIntact) {
  BEHAVIOUR("robustness.interpreter-exit-with-daemon-threads");
#if defined(__SANITIZE_ADDRESS__)
  // UBSan's null check (on in the sanitizer build beside ASan) reports the
  // `catch (abi::__forced_unwind&)` that rethrows glibc's forced unwind as a
  // reference bound to null: that exception carries no C++ object. A tool's
  // false positive; the plain builds run this test.
  GTEST_SKIP() << "unsupported under the sanitizer build: UBSan flags glibc's forced unwind";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Key key = mul_key();
  EXPECT_EXIT(end_a_thread_inside_the_ordering_function(
                  adapter(), [&] { add(key, constant_cond(true), fill_impl(9), "exit_dsl"); }),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace conformance
