// Holds up where users actually go (issue 23): a target op redefined under a
// live `_native` op, or gone from the dispatcher. The crash-prone cases run
// in a death test's child, so a regression fails the test instead of the
// suite. (Fork during control-plane work is tested from Python.)

#include "suite.h"

#include <ATen/ATen.h>


namespace conformance {
namespace {

using namespace native_registry::fixtures;

constexpr const char* kRedefNs = "_native_registry_redef_cpp";

// Boxed kernels: an op with an unboxed kernel would get the typed router,
// whose inferred schema makes LibTorch refuse the redefinition outright.
template <int Arguments, bool Meta>
void foo_kernel(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
  at::Tensor x = (*stack)[stack->size() - Arguments].toTensor();
  at::Tensor result = Meta ? at::empty_like(x) : x + Arguments;
  torch::jit::drop(*stack, Arguments);
  stack->emplace_back(std::move(result));
}

std::unique_ptr<torch::Library> define_foo(bool three_arguments) {
  auto lib = std::make_unique<torch::Library>(torch::Library::DEF, kRedefNs, std::nullopt,
                                              __FILE__, __LINE__);
  if (three_arguments) {
    lib->def("foo(Tensor x, Tensor y, Tensor z) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<3, false>>()));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<3, true>>()));
  } else {
    lib->def("foo(Tensor x) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<1, false>>()));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<1, true>>()));
  }
  return lib;
}

// "raised <message>" or "returned".
std::string outcome(const c10::OperatorHandle& op, const at::Tensor& x) {
  Stack stack{x};
  try {
    op.callBoxed(&stack);
    return "returned";
  } catch (const std::exception& e) {
    return std::string("raised ") + e.what();
  }
}

// Runs in a death-test child: exits 0 if the `_native` op's eager and meta
// calls both raise naming the override, else 1 with what happened.
[[noreturn]] void call_native_after_redefinition(RegistryAdapter& registry, bool remove_first,
                                                 const std::function<void(const Key&)>& add) {
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = define_foo(false);
  add(key);
  registry.install(key);
  const NodeInfo node = registry.graph(key).at(0);
  std::optional<c10::OperatorHandle> native = registry.native_op(node);
  if (!native) std::_Exit(3);
  if (remove_first) registry.disable({{"redef_dsl"}, {}, {}});
  lib.reset();
  lib = define_foo(true);
  int bad = 0;
  for (const at::Tensor& x : {tensor({1, 1}), at::ones({2}, at::device(at::kMeta))}) {
    const std::string what = outcome(*native, x);
    if (what.rfind("raised", 0) != 0 || what.find(node.node_id) == std::string::npos) {
      std::fprintf(stderr, "the _native op's call on %s: %s\n", x.device().str().c_str(),
                   what.c_str());
      ++bad;
    }
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

TEST_P(Conformance, ANativeOpWhoseTargetWasRedefinedRaisesNamingTheOverride) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto add_override = [&](const Key& key) {
    add(key, constant_cond(true), fill_impl(7), "redef_dsl");
  };
  EXPECT_EXIT(call_native_after_redefinition(adapter(), false, add_override),
              ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, ANativeOpWhoseTargetLeftTheDispatcherRaises) {
  BEHAVIOUR("robustness.native-op-target-removed");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto add_override = [&](const Key& key) {
    add(key, constant_cond(true), fill_impl(7), "redef_dsl");
  };
  EXPECT_EXIT(call_native_after_redefinition(adapter(), true, add_override),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace conformance
