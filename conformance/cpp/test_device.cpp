// The registry at the keys of the run's device (CONFORMANCE_DEVICE: cpu, the
// default, or cuda; conformance/devices.toml): the device's tensors routed,
// declined and filtered at its backend, autograd and autocast keys, through
// autograd, meta shape inference and teardown, and calls on several threads
// (each on a stream of its own at cuda) while the control plane changes.
//
// Every test here is named Device...: a run at another device than cpu runs
// only these (--gtest_filter=*Conformance.Device*). Without the device each
// is reported "unsupported: no CUDA device".

#include "suite.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sum.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string_view>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

// The device of this run and its keys (the same table as devices.toml).
struct RunDevice {
  std::string name;
  c10::DeviceType type;
  std::string key, autograd_key, autocast_key;
};

const RunDevice& run_device() {
  static const RunDevice device = [] {
    const char* env = std::getenv("CONFORMANCE_DEVICE");
    const std::string name = env && *env ? env : "cpu";
    if (name == "cpu") return RunDevice{name, c10::kCPU, "CPU", "AutogradCPU", "AutocastCPU"};
    if (name == "cuda") return RunDevice{name, c10::kCUDA, "CUDA", "AutogradCUDA", "AutocastCUDA"};
    throw std::invalid_argument("CONFORMANCE_DEVICE=" + name + ": not a device (cpu, cuda)");
  }();
  return device;
}

// LibTorch's CUDA half registers its kernels and hooks when libtorch_cuda.so
// loads. This executable links it but calls none of it, so the linker may
// have dropped it: a run at cuda loads it here, at start-up, from beside
// libtorch_cpu.so. Start-up, because the load changes the dispatch tables
// every test fingerprints in SetUp, and because LibTorch caches its CUDA
// hooks at the first at::hasCUDA(): asked before the load, it says no for
// good (on the H200, every device test was then "no CUDA device").
[[maybe_unused]] const bool cuda_library_loaded = [] {
  const char* env = std::getenv("CONFORMANCE_DEVICE");
  if (!env || std::string_view(env) != "cuda") return false;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || !info.dli_fname) {
    return false;
  }
  const auto lib = std::filesystem::path(info.dli_fname).parent_path() / "libtorch_cuda.so";
  return dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr;
}();

bool cuda_usable() {
  return at::hasCUDA() && c10::impl::hasDeviceGuardImpl(c10::kCUDA) &&
         c10::impl::getDeviceGuardImpl(c10::kCUDA)->deviceCount() > 0;
}

// Why the run's device cannot be used here, or nothing.
std::optional<std::string> device_missing() {
  if (run_device().type == c10::kCUDA && !cuda_usable()) return "no CUDA device";
  return std::nullopt;
}

#define REQUIRE_DEVICE()                                                     \
  do {                                                                       \
    if (auto why = device_missing()) GTEST_SKIP() << "unsupported: " << *why; \
  } while (0)

Key mul_at(const std::string& dispatch_key) { return {"aten", "mul.Tensor", dispatch_key}; }
Key mul_here() { return mul_at(run_device().key); }

at::Tensor on_device(std::vector<float> values) { return tensor(std::move(values)).to(run_device().type); }
at::Tensor mul_2_3_by_4_5_on_device() { return call_mul(on_device({2, 3}), on_device({4, 5})); }

// A result computed on the device, compared on the host.
bool same_on_host(const at::Tensor& device_result, std::vector<float> expected) {
  return device_result.device().type() == run_device().type &&
         same(device_result.cpu(), tensor(std::move(expected)));
}

TEST_P(Conformance, DeviceCondTrueRoutesAtTheBackendAndAutogradKeys) {
  BEHAVIOUR("routing.cond-true-routes-to-impl");
  REQUIRE_DEVICE();
  for (const std::string& key : {run_device().key, run_device().autograd_key}) {
    auto scope = adapter().scope();
    add(mul_at(key), constant_cond(true), fill_impl(42));
    adapter().install(mul_at(key));
    EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {42, 42})) << "at " << key;
  }
}

TEST_P(Conformance, DeviceCondFalseFallsBack) {
  BEHAVIOUR("routing.cond-false-falls-back");
  REQUIRE_DEVICE();
  auto calls = std::make_shared<std::atomic<int>>(0);
  add(mul_here(), counting_cond(calls, false), forbidden_impl());
  adapter().install(mul_here());
  adapter().install(mul_here());  // replaced: the fallback is still the op's own kernel
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {8, 15}));
  EXPECT_EQ(calls->load(), 1);
}

TEST_P(Conformance, DeviceFirstMatchWins) {
  BEHAVIOUR("routing.first-match-wins");
  REQUIRE_DEVICE();
  auto first = std::make_shared<std::atomic<int>>(0);
  auto winner = std::make_shared<std::atomic<int>>(0);
  auto later = std::make_shared<std::atomic<int>>(0);
  add(mul_here(), counting_cond(first, false), forbidden_impl(), "a");
  add(mul_here(), counting_cond(winner, true), fill_impl(1), "b");
  add(mul_here(), counting_cond(later, true), fill_impl(2), "c");
  adapter().install(mul_here());
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {1, 1}));
  EXPECT_EQ(first->load(), 1);
  EXPECT_EQ(winner->load(), 1);
  EXPECT_EQ(later->load(), 0);
}

TEST_P(Conformance, DeviceFallbackPastTheAutocastKey) {
  BEHAVIOUR("routing.fallback-past-a-fallthrough-key");
  REQUIRE_DEVICE();
  const Key autocast = mul_at(run_device().autocast_key);
  auto declines = std::make_shared<std::atomic<int>>(0);
  add(autocast, counting_cond(declines, false), forbidden_impl(), "a");
  adapter().install(autocast);
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {8, 15}));
  EXPECT_EQ(declines->load(), 0) << "the autocast key is not among the keys of a call outside autocast";
  struct AutocastOn {
    c10::DeviceType type;
    explicit AutocastOn(c10::DeviceType t) : type(t) { at::autocast::set_autocast_enabled(type, true); }
    ~AutocastOn() { at::autocast::set_autocast_enabled(type, false); }
  } autocast_on(run_device().type);
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {8, 15}));
  EXPECT_EQ(declines->load(), 1);
  add(autocast, constant_cond(true), fill_impl(7), "b");
  adapter().install(autocast);
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {7, 7}));
}

TEST_P(Conformance, DeviceUnavailableRuntimeSkipsTheNode) {
  BEHAVIOUR("routing.runtime-unavailable-skips");
  REQUIRE_FEATURE("runtime-init");
  REQUIRE_DEVICE();
  add(mul_here(), constant_cond(true), forbidden_impl(), "test_dsl", [] { return false; });
  add(mul_here(), constant_cond(true), fill_impl(5), "next");
  adapter().install(mul_here());
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {5, 5}));
}

TEST_P(Conformance, DeviceNoRecursionThroughBmmBackward) {
  BEHAVIOUR("routing.no-recursion-through-autograd");
  REQUIRE_DEVICE();
  const Key bmm{"aten", "bmm", run_device().key};
  const at::Tensor a = at::randn({2, 3, 4}).to(run_device().type).requires_grad_(true);
  const at::Tensor b = at::randn({2, 4, 5}).to(run_device().type).requires_grad_(true);
  const at::Tensor expected = at::bmm(a.detach(), b.detach());
  const at::Tensor ones = at::ones_like(expected);
  const at::Tensor grad_a = at::bmm(ones, b.detach().transpose(1, 2));
  const at::Tensor grad_b = at::bmm(a.detach().transpose(1, 2), ones);
  auto calls = std::make_shared<std::atomic<int>>(0);
  add(bmm, counting_cond(calls, false), forbidden_impl());
  adapter().install(bmm);
  const at::Tensor out = at::bmm(a, b);
  // allclose: at cuda the backward's expanded gradient may take another BLAS path.
  EXPECT_TRUE(at::allclose(out.detach(), expected));
  at::sum(out).backward();
  EXPECT_TRUE(at::allclose(a.grad(), grad_a));
  EXPECT_TRUE(at::allclose(b.grad(), grad_b));
  EXPECT_EQ(calls->load(), 3) << "forward and the two backward bmm calls each consult cond once";
}

TEST_P(Conformance, DeviceUnconditionalTakesEveryCallAndSurvivesDisable) {
  BEHAVIOUR("unconditional.cond-none-always-matches", "unconditional.survives-disable");
  REQUIRE_FEATURE("unconditional-survives-disable");
  REQUIRE_DEVICE();
  add(mul_here(), {}, fill_impl(3), "test_dsl", {}, /*unconditional=*/true);
  adapter().install(mul_here());
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {3, 3}));
  adapter().disable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {3, 3}));
}

TEST_P(Conformance, DeviceFiltersByDslOpSymbolAndDispatchKey) {
  BEHAVIOUR("filters.disable-reenable-roundtrip", "filters.by-op-symbol-and-dispatch-key");
  REQUIRE_DEVICE();
  // Another backend's key, which this device's calls never reach.
  const std::string other = run_device().key == "CPU" ? "CUDA" : "CPU";
  add(mul_here(), constant_cond(true), fill_impl(9));
  add(mul_at(other), constant_cond(true), fill_impl(8));
  adapter().install_all();
  adapter().disable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {8, 15}));
  adapter().enable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {9, 9}));
  adapter().disable({{}, {}, {run_device().key}});
  EXPECT_FALSE(adapter().graph(mul_here())[0].active);
  EXPECT_TRUE(adapter().graph(mul_at(other))[0].active) << "a key filter took another key";
  adapter().enable({{}, {}, {run_device().key}});
  adapter().disable({{}, {"mul.Tensor"}, {}});
  EXPECT_FALSE(adapter().graph(mul_here())[0].active);
  EXPECT_FALSE(adapter().graph(mul_at(other))[0].active);
}

TEST_P(Conformance, DeviceTeardownRestoresEveryTable) {
  BEHAVIOUR("teardown.dispatcher-restored-exactly");
  REQUIRE_DEVICE();
  const auto before = fingerprint();
  {
    auto test_scope = adapter().scope();
    for (const std::string& key : {run_device().key, run_device().autograd_key, run_device().autocast_key}) {
      add(mul_at(key), constant_cond(false), forbidden_impl(), "d");
    }
    add({"aten", "bmm", run_device().key}, constant_cond(false), forbidden_impl(), "d");
    adapter().install_all();
    EXPECT_TRUE(same_on_host(mul_2_3_by_4_5_on_device(), {8, 15}));
    EXPECT_NE(fingerprint().difference(before), "") << "installing changed no table";
    adapter().disable({{"d"}, {}, {}});
  }
  EXPECT_EQ(fingerprint().difference(before), "");
}

TEST_P(Conformance, DeviceMetaShapeInferenceRunsNoImpl) {
  BEHAVIOUR("fake.shape-inference-without-impl");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_DEVICE();
  add(mul_here(), constant_cond(true), forbidden_impl());
  adapter().install(mul_here());
  auto native = adapter().native_op(adapter().graph(mul_here())[0]);
  ASSERT_TRUE(native.has_value()) << "no _native op for the node";
  const auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kHalf);
  Stack stack{at::empty({3, 4}, meta), at::empty({3, 4}, meta)};
  native->callBoxed(&stack);
  EXPECT_TRUE(stack.at(0).toTensor().is_meta());
  EXPECT_EQ(stack.at(0).toTensor().sizes(), at::IntArrayRef({3, 4}));
  EXPECT_EQ(stack.at(0).toTensor().scalar_type(), at::kHalf);
}

TEST_P(Conformance, DeviceCallsOnSeveralThreadsSeeWholeChains) {
  BEHAVIOUR("concurrency.calls-see-whole-chains");
  REQUIRE_FEATURE("concurrent-control-plane");
  REQUIRE_DEVICE();
  add(mul_here(), constant_cond(true), fill_impl(1), "dsl_a");
  add(mul_here(), constant_cond(true), fill_impl(2), "dsl_b");
  adapter().install(mul_here());
  // At cuda each caller works on a stream of its own (a new one from the
  // pool, current on that thread only), as callers on streams do; item()
  // waits for that stream.
  const auto own_stream = []() -> std::shared_ptr<void> {
    if (run_device().type != c10::kCUDA) return nullptr;
    return std::make_shared<c10::StreamGuard>(c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStreamFromGlobalPool(
        c10::Device(c10::kCUDA, 0)));
  };
  const at::Tensor a = on_device({2}), b = on_device({4});
  const Race race = race_calls_against_toggles([&] { return call_mul(a, b).item<float>(); },
                                               {1.f, 2.f, 8.f}, own_stream);
  EXPECT_EQ(race.bad, 0);
  EXPECT_GT(race.calls, 0);
}

}  // namespace
}  // namespace conformance
