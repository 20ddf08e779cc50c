// What a router costs per call, and how the control plane scales (issue 5).
//
// Call benchmarks, named  call/<op>/<variant>/n:<numel>/chain:<nodes>:
//   stock        the op with no router (chain:0)
//   decline_cpp  a router whose every node's cond, a C++ predicate, declines;
//                the call ends in the captured kernel
//   accept_cpp   the same, except the last node accepts and its C++ impl runs
//                (at::cpu::<op>, the work the stock kernel does)
//   decline_cpp_boxed
//                decline_cpp through the generic boxed router, which every
//                signature gets; the typed router is what common signatures get
//   dormant      a router whose only node was disabled (chain:0): the floor of
//                any declined call, boxing and the captured kernel
// plus call/mul/decline_cpp/n:2/chain:1/others:<k>, the same call while other
// ops carry k installed overrides.
//
// Control plane, control/overrides:<N>/ops:<M>: N overrides from N/10 dsls
// that touch 10 ops each, over M throwaway ops, plus one dsl touching 1 op
// and one touching 100; the counters are seconds (medians of the toggles)
// and heap bytes per override.
//
// Everything runs on one thread (at::set_num_threads(1)); calls are made from
// C++ through the dispatcher from the top (at::mul / at::add), as user code
// makes them. Flags of our own, before Google Benchmark's:
//   --nr_overrides=N --nr_ops=M    the control-plane scale (10000 / 1000)
//   --nr_sizes=2,1000,1000000      tensor sizes
//   --nr_chains=1,4,16             chain lengths
//   --nr_control_reps=5            repetitions of each control-plane run
//   --nr_iterations=K              a fixed number of calls per call benchmark
//                                  (for instruction counts under valgrind)

#include <native_registry/native_registry.h>
#include <native_registry/predicates.h>
#include <native_registry/router_kind.h>

#include "cpu_impl.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <torch/library.h>

// Under valgrind --tool=callgrind, each call benchmark's loop is dumped on its
// own, named after the benchmark (reference/bench/run --instructions).
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define NR_BENCH_CALLGRIND 1
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using native_registry::CondFn;
using native_registry::Filter;
using native_registry::Graph;
using native_registry::ImplFn;
using native_registry::Registry;
using native_registry::Stack;
namespace P = native_registry::predicates;

enum class Op { kMul, kAdd };
enum class Variant { kStock, kDeclineCpp, kAcceptCpp, kDeclineCppBoxed, kDormant };

const char* op_name(Op op) { return op == Op::kMul ? "mul" : "add"; }
const char* op_symbol(Op op) { return op == Op::kMul ? "mul.Tensor" : "add.Tensor"; }
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kStock: return "stock";
    case Variant::kDeclineCpp: return "decline_cpp";
    case Variant::kAcceptCpp: return "accept_cpp";
    case Variant::kDeclineCppBoxed: return "decline_cpp_boxed";
    case Variant::kDormant: return "dormant";
  }
  return "?";
}

// The conds: C++ predicates, as a DSL author (or the Python binding's
// native_registry.predicates) writes them. Float inputs: `declines` never
// holds, `accepts` always does.
CondFn declines() { return P::dtype_in({at::kHalf}).as_cond(); }
CondFn accepts() { return P::dtype_in({at::kFloat}).as_cond(); }

ImplFn cpu_impl(Op op) { return native_registry_bench::cpu_impl(op == Op::kMul); }

std::unique_ptr<Registry> install_chain(Op op, int chain, bool accept_last) {
  auto registry = std::make_unique<Registry>();
  for (int i = 0; i < chain; ++i) {
    const bool accept = accept_last && i == chain - 1;
    registry->register_op_override("bench" + std::to_string(i), "aten", op_symbol(op), "CPU",
                                   accept ? accepts() : declines(), cpu_impl(op));
  }
  registry->install_all();
  return registry;
}

// Not inlined, so that a profiler can count its instructions alone
// (valgrind --tool=callgrind --toggle-collect='*run_calls*').
[[gnu::noinline]] void run_calls(benchmark::State& state, Op op, const at::Tensor& a,
                                 const at::Tensor& b, [[maybe_unused]] const std::string& name) {
#ifdef NR_BENCH_CALLGRIND
  CALLGRIND_ZERO_STATS;
#endif
  if (op == Op::kMul) {
    for (auto _ : state) {
      at::Tensor out = at::mul(a, b);
      benchmark::DoNotOptimize(out);
    }
  } else {
    for (auto _ : state) {
      at::Tensor out = at::add(a, b);
      benchmark::DoNotOptimize(out);
    }
  }
#ifdef NR_BENCH_CALLGRIND
  CALLGRIND_DUMP_STATS_AT(name.c_str());
#endif
}

std::string case_name(Op op, Variant variant, int64_t numel, int chain) {
  return std::string("call/") + op_name(op) + "/" + variant_name(variant) + "/n:" +
         std::to_string(numel) + "/chain:" + std::to_string(chain);
}

void bm_call(benchmark::State& state, Op op, Variant variant, int64_t numel, int chain) {
  at::set_num_threads(1);
  const at::Tensor a = at::rand({numel});
  const at::Tensor b = at::rand({numel});
  native_registry::set_typed_routers_enabled(variant != Variant::kDeclineCppBoxed);
  std::unique_ptr<Registry> registry;
  if (variant == Variant::kDormant) {
    registry = install_chain(op, 1, false);
    registry->deregister_op_overrides(Filter{{"bench0"}, {}, {}});  // the router stays, empty
  } else if (variant != Variant::kStock) {
    registry = install_chain(op, chain, variant == Variant::kAcceptCpp);
  }
  native_registry::set_typed_routers_enabled(true);
  run_calls(state, op, a, b, case_name(op, variant, numel, chain));
  registry.reset();
}

// ---- the control plane ------------------------------------------------------

// Namespaces of throwaway ops: one for the control-plane benchmark, one for
// the overrides that other ops carry while a call is timed.
constexpr const char* kControlNamespace = "_nr_bench_control";
constexpr const char* kOthersNamespace = "_nr_bench_others";

// M throwaway ops `<ns>::op<i>(Tensor self) -> Tensor`, each with a CPU
// kernel, for as long as the object lives.
class BenchOps {
 public:
  BenchOps(const char* ns, int count) : count_(count) {
    library_ = std::make_unique<torch::Library>(torch::Library::DEF, ns, std::nullopt,
                                                __FILE__, __LINE__);
    for (int i = 0; i < count; ++i) {
      const std::string name = "op" + std::to_string(i);
      library_->def((name + "(Tensor self) -> Tensor").c_str());
      library_->impl(name.c_str(), torch::dispatch(c10::DispatchKey::CPU,
                                                   [](const at::Tensor& x) { return x.clone(); }));
    }
  }
  int count() const { return count_; }

 private:
  int count_;
  std::unique_ptr<torch::Library> library_;
};

size_t heap_in_use() { return mallinfo2().uordblks + mallinfo2().hblkhd; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string dsl(int index) { return "dsl" + std::to_string(index); }

// N overrides: dsl d registers ops (10 d + k) mod M, k < 10, so every op gets
// N / M overrides; then "narrow" touches op 0 and "wide" ops 0..99. Every cond
// declines; installs nothing.
std::unique_ptr<Registry> register_overrides(const char* ns, int overrides, int ops) {
  auto registry = std::make_unique<Registry>();
  registry->allow_namespace(ns);
  const ImplFn impl = [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {};
  const CondFn cond = declines();
  auto add = [&](const std::string& name, int op) {
    registry->register_op_override(name, ns, "op" + std::to_string(op % ops), "CPU",
                                   cond, impl);
  };
  for (int d = 0; d < overrides / 10; ++d) {
    for (int k = 0; k < 10; ++k) add(dsl(d), 10 * d + k);
  }
  add("narrow", 0);
  for (int k = 0; k < std::min(100, ops); ++k) add("wide", k);
  return registry;
}

// Median seconds of `rounds` disable + re-enable pairs of one dsl. Not
// inlined, and dumped on its own under callgrind like run_calls (with
// --toggle-collect='*toggle*').
[[gnu::noinline]] std::pair<double, double> toggle(Registry& registry, const std::string& name,
                                                   [[maybe_unused]] int touched, int rounds,
                                                   [[maybe_unused]] int overrides) {
#ifdef NR_BENCH_CALLGRIND
  CALLGRIND_ZERO_STATS;
#endif
  std::vector<double> off, on;
  for (int i = 0; i < rounds; ++i) {
    auto start = std::chrono::steady_clock::now();
    registry.deregister_op_overrides(Filter{{name}, {}, {}});
    off.push_back(seconds_since(start));
    start = std::chrono::steady_clock::now();
    registry.reenable_op_overrides(Filter{{name}, {}, {}});
    on.push_back(seconds_since(start));
  }
#ifdef NR_BENCH_CALLGRIND
  const std::string label = "toggle/ops:" + std::to_string(touched) +
                            "/overrides:" + std::to_string(overrides) +
                            "/rounds:" + std::to_string(rounds);
  CALLGRIND_DUMP_STATS_AT(label.c_str());
#endif
  return {median(off), median(on)};
}

void bm_control(benchmark::State& state, int overrides, int ops) {
  BenchOps bench_ops(kControlNamespace, ops);
  for (auto _ : state) {
    const size_t heap0 = heap_in_use();
    auto start = std::chrono::steady_clock::now();
    std::unique_ptr<Registry> registry = register_overrides(kControlNamespace, overrides, ops);
    const double register_s = seconds_since(start);
    const size_t heap1 = heap_in_use();
    start = std::chrono::steady_clock::now();
    registry->install_all();
    const double install_s = seconds_since(start);
    const size_t heap2 = heap_in_use();
    const double total = overrides + 1 + std::min(100, ops);

    const auto [off1, on1] = toggle(*registry, "narrow", 1, 21, overrides);
    const auto [off10, on10] = toggle(*registry, dsl(0), 10, 21, overrides);
    const auto [off100, on100] = toggle(*registry, "wide", std::min(100, ops), 21, overrides);

    start = std::chrono::steady_clock::now();
    registry->reorder_graphs(
        [](const std::string&, const std::string&, const Graph& graph) {
          return Graph(graph.rbegin(), graph.rend());
        },
        /*reinstall=*/true);
    const double reorder_s = seconds_since(start);

    start = std::chrono::steady_clock::now();
    registry.reset();
    const double teardown_s = seconds_since(start);

    state.SetIterationTime(register_s + install_s);
    state.counters["register_s"] = register_s;
    state.counters["install_all_s"] = install_s;
    state.counters["disable_1op_s"] = off1;
    state.counters["reenable_1op_s"] = on1;
    state.counters["disable_10ops_s"] = off10;
    state.counters["reenable_10ops_s"] = on10;
    state.counters["disable_100ops_s"] = off100;
    state.counters["reenable_100ops_s"] = on100;
    state.counters["reorder_all_s"] = reorder_s;
    state.counters["teardown_s"] = teardown_s;
    state.counters["bytes_per_override_registered"] =
        static_cast<double>(heap1 - heap0) / total;
    state.counters["bytes_per_override_installed"] = static_cast<double>(heap2 - heap0) / total;
  }
}

// ---- a call while other ops carry many overrides ---------------------------------

struct Background {
  std::unique_ptr<BenchOps> ops;
  std::unique_ptr<Registry> registry;
  int overrides = 0;
};

Background& background() {
  static Background* instance = new Background();
  return *instance;
}

void set_background(int overrides, int ops) {
  Background& bg = background();
  if (bg.overrides == overrides && (overrides == 0 || bg.registry)) return;
  bg.registry.reset();
  bg.ops.reset();
  bg.overrides = overrides;
  if (overrides == 0) return;
  bg.ops = std::make_unique<BenchOps>(kOthersNamespace, ops);
  bg.registry = register_overrides(kOthersNamespace, overrides, ops);
  bg.registry->install_all();
}

void bm_call_with_others(benchmark::State& state, int others, int ops) {
  at::set_num_threads(1);
  set_background(others, ops);
  const at::Tensor a = at::rand({2});
  const at::Tensor b = at::rand({2});
  std::unique_ptr<Registry> registry = install_chain(Op::kMul, 1, false);
  run_calls(state, Op::kMul, a, b,
            case_name(Op::kMul, Variant::kDeclineCpp, 2, 1) + "/others:" + std::to_string(others));
  registry.reset();
}

// ---- main ---------------------------------------------------------------------

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(std::stoll(item));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  int overrides = 10000, ops = 1000, control_reps = 5;
  int64_t iterations = 0;
  std::vector<int64_t> sizes{2, 1000, 1000000}, chains{1, 4, 16};
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string prefix = std::string(flag) + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("--nr_overrides")) overrides = std::atoi(v);
    else if (const char* v = value("--nr_ops")) ops = std::atoi(v);
    else if (const char* v = value("--nr_sizes")) sizes = parse_list(v);
    else if (const char* v = value("--nr_chains")) chains = parse_list(v);
    else if (const char* v = value("--nr_control_reps")) control_reps = std::atoi(v);
    else if (const char* v = value("--nr_iterations")) iterations = std::atoll(v);
    else rest.push_back(argv[i]);
  }
  at::set_num_threads(1);

  for (Op op : {Op::kMul, Op::kAdd}) {
    for (int64_t n : sizes) {
      auto* stock = benchmark::RegisterBenchmark(
          case_name(op, Variant::kStock, n, 0).c_str(),
          [=](benchmark::State& s) { bm_call(s, op, Variant::kStock, n, 0); });
      if (iterations > 0) stock->Iterations(iterations);
      auto* dormant = benchmark::RegisterBenchmark(
          case_name(op, Variant::kDormant, n, 0).c_str(),
          [=](benchmark::State& s) { bm_call(s, op, Variant::kDormant, n, 0); });
      if (iterations > 0) dormant->Iterations(iterations);
      for (Variant v : {Variant::kDeclineCpp, Variant::kAcceptCpp, Variant::kDeclineCppBoxed}) {
        for (int64_t c : chains) {
          auto* routed = benchmark::RegisterBenchmark(
              case_name(op, v, n, static_cast<int>(c)).c_str(),
              [=](benchmark::State& s) { bm_call(s, op, v, n, static_cast<int>(c)); });
          if (iterations > 0) routed->Iterations(iterations);
        }
      }
    }
  }
  for (int others : {0, overrides}) {
    auto* call = benchmark::RegisterBenchmark(
        (case_name(Op::kMul, Variant::kDeclineCpp, 2, 1) + "/others:" + std::to_string(others))
            .c_str(),
        [=](benchmark::State& s) { bm_call_with_others(s, others, ops); });
    if (iterations > 0) call->Iterations(iterations);
  }
  for (auto [n, m] : {std::pair{overrides / 10, std::max(ops / 10, 10)}, std::pair{overrides, ops}}) {
    benchmark::RegisterBenchmark(
        ("control/overrides:" + std::to_string(n) + "/ops:" + std::to_string(m)).c_str(),
        [=](benchmark::State& s) { bm_control(s, n, m); })
        ->Iterations(1)
        ->Repetitions(control_reps)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }

  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Routers go before LibTorch's statics do.
  background().registry.reset();
  background().ops.reset();
  return 0;
}
