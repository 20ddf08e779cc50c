#pragma once

// Conds DSL authors write again and again, in C++, composable, and usable as
// a node's cond from C++ or Python without any Python on the call path.
//
// A tensor check (dtype, device, layout, rank, size) applies to the tensor
// arguments of the call: to every one of them (tensors in lists included,
// undefined ones skipped), or to the one at a given argument index. A call
// with no tensor argument (or none at that index) fails a tensor check.
//
//   using namespace native_registry::predicates;
//   Predicate small_f32 = dtype_in({at::kFloat}) && max_numel(1 << 16) && contiguous();
//   registry.register_op_override("dsl", "aten", "mul.Tensor", "CPU",
//                                 small_f32.as_cond(), impl);
//
// Owns: the Predicate type and its factories (predicates.cpp defines them).
// May not touch: registry state; a predicate only reads the call's stack.

#include <native_registry/types.h>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace native_registry::predicates {

// A check of one tensor, with a description for messages and repr().
struct TensorCheck {
  std::function<bool(const at::Tensor&)> test;
  std::string description;
};

class Predicate {
 public:
  // Holds for a call when `check` holds for its tensor arguments (all of
  // them, or only the one at `arg_index`).
  static Predicate on_tensors(TensorCheck check, std::optional<size_t> arg_index = {});
  static Predicate constant(bool answer);

  // Evaluated on `stack` as the call's arguments, the first at index 0.
  bool operator()(const Stack& stack) const;
  // As a cond: on the op's arguments, the top schema().arguments().size()
  // values of the boxed stack, whatever a caller keeps below them.
  bool operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  const Stack& stack) const;
  CondFn as_cond() const;
  const std::string& description() const;

  Predicate operator&&(const Predicate& other) const;
  Predicate operator||(const Predicate& other) const;
  Predicate operator!() const;

  struct Node;  // the immutable expression tree

 private:
  friend Predicate not_cow();
  friend Predicate same_shape();
  friend Predicate dtype_in(std::vector<c10::ScalarType> dtypes, std::optional<size_t> arg);
  explicit Predicate(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
};

// The arguments of a boxed call of `op`: the top of `stack`, the first
// argument at index 0. A C++ cond reads its arguments here (or with
// torch::jit::peek(stack, i, n) / torch::jit::last(stack, n)), never at
// stack[i], since a caller may keep values of its own below them.
// Inline: every predicate cond calls it, and a call costs more than its work.
namespace detail {
[[noreturn]] C10_NOINLINE void fail_short_stack(const c10::OperatorHandle& op, size_t values,
                                               size_t arguments);
}  // namespace detail
inline c10::ArrayRef<c10::IValue> op_arguments(const c10::OperatorHandle& op, const Stack& stack) {
  const size_t count = op.schema().arguments().size();
  if (C10_UNLIKELY(stack.size() < count)) detail::fail_short_stack(op, stack.size(), count);
  return c10::ArrayRef<c10::IValue>(stack.data() + (stack.size() - count), count);
}

Predicate always();
Predicate never();
Predicate dtype_in(std::vector<c10::ScalarType> dtypes, std::optional<size_t> arg = {});
Predicate device_type_is(c10::DeviceType type, std::optional<size_t> arg = {});
Predicate contiguous(std::optional<size_t> arg = {});
Predicate min_rank(int64_t rank, std::optional<size_t> arg = {});
Predicate max_rank(int64_t rank, std::optional<size_t> arg = {});
Predicate min_numel(int64_t numel, std::optional<size_t> arg = {});
Predicate max_numel(int64_t numel, std::optional<size_t> arg = {});
// Size of dimension `dim` (negative counts from the end) at most `size`; a
// tensor without that dimension fails.
Predicate max_size(int64_t dim, int64_t size, std::optional<size_t> arg = {});
// No tensor argument is copy-on-write (materialising one would copy it).
Predicate not_cow();
// Every tensor argument has the same shape.
Predicate same_shape();

}  // namespace native_registry::predicates
