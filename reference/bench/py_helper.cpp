// A C extension-free helper for the Python benchmark (bench.py), loaded with
// ctypes: installs a chain of C++ overrides (the same predicate conds and
// at::cpu impls as bench.cpp) on aten::mul.Tensor or aten::add.Tensor at CPU,
// in a Registry of its own, and tears it down. Pure C++ nodes: nothing on
// their call path touches Python.

#include <native_registry/native_registry.h>
#include <native_registry/predicates.h>

#include "cpu_impl.h"

#include <exception>
#include <iostream>
#include <memory>
#include <string>

namespace {

using native_registry::ImplFn;
using native_registry::Registry;
using native_registry::Stack;
namespace P = native_registry::predicates;

using native_registry_bench::cpu_impl;

}  // namespace

extern "C" {

// op_symbol: "mul.Tensor" or "add.Tensor". Every node declines on float
// inputs except, with accept_last, the last. Returns a handle, or null (and
// prints why) on error.
void* nr_bench_install(const char* op_symbol, int chain, int accept_last) {
  try {
    const std::string op = op_symbol;
    auto registry = std::make_unique<Registry>();
    for (int i = 0; i < chain; ++i) {
      const bool accept = accept_last && i == chain - 1;
      registry->register_op_override(
          "bench" + std::to_string(i), "aten", op, "CPU",
          (accept ? P::dtype_in({at::kFloat}) : P::dtype_in({at::kHalf})).as_cond(),
          cpu_impl(op == "mul.Tensor"));
    }
    registry->install_all();
    return registry.release();
  } catch (const std::exception& e) {
    std::cerr << "nr_bench_install: " << e.what() << "\n";
    return nullptr;
  }
}

// Removes everything nr_bench_install put into the dispatcher.
void nr_bench_remove(void* handle) { delete static_cast<Registry*>(handle); }

}  // extern "C"
