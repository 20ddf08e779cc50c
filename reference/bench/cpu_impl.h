// The C++ impl both benchmarks accept with (bench.cpp, and py_helper.cpp for
// the Python benchmark): the work the stock CPU kernel does, without
// dispatching, so that an accepted call costs the routing and no more.
#pragma once

#include <native_registry/native_registry.h>

#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/mul_cpu_dispatch.h>

namespace native_registry_bench {

// mul.Tensor when `mul`, else add.Tensor.
inline native_registry::ImplFn cpu_impl(bool mul) {
  using native_registry::Stack;
  if (mul) {
    return [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
      const size_t n = stack->size();
      at::Tensor out = at::cpu::mul((*stack)[n - 2].toTensor(), (*stack)[n - 1].toTensor());
      torch::jit::drop(*stack, 2);
      stack->emplace_back(std::move(out));
    };
  }
  return [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    const size_t n = stack->size();
    at::Tensor out = at::cpu::add((*stack)[n - 3].toTensor(), (*stack)[n - 2].toTensor(),
                                  (*stack)[n - 1].toScalar());
    torch::jit::drop(*stack, 3);
    stack->emplace_back(std::move(out));
  };
}

}  // namespace native_registry_bench
