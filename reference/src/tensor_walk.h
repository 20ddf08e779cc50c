#pragma once

// The one walk over a boxed call's tensor arguments, and the copy-on-write
// test, shared by the call path (copy-on-write calls are never diverted to
// a tracer) and the C++ predicates (not_cow, tensor tests).
//
// Owns: how a call's tensors are found (a tensor argument, or the tensors of
// a tensor-list argument; undefined tensors skipped). May not touch: what a
// caller decides from them.

#include <ATen/core/ivalue.h>
#include <c10/core/impl/COW.h>
#include <c10/util/ArrayRef.h>

#include <algorithm>
#include <optional>

namespace native_registry::detail {

struct TensorWalk {
  bool any = false;      // a tensor was visited
  bool stopped = false;  // a visit returned false, and the walk ended there
};

// Calls `visit` on every defined tensor of the argument at `only`, or of all
// of them, in order; stops at the first visit that returns false.
template <typename Visit>
TensorWalk for_each_tensor(c10::ArrayRef<c10::IValue> arguments, std::optional<size_t> only,
                           Visit visit) {
  TensorWalk walk;
  const size_t begin = only ? *only : 0;
  const size_t end = only ? std::min(*only + 1, arguments.size()) : arguments.size();
  auto one = [&](const at::Tensor& tensor) {
    if (!tensor.defined()) return true;
    walk.any = true;
    walk.stopped = !visit(tensor);
    return !walk.stopped;
  };
  for (size_t i = begin; i < end; ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor()) {
      if (!one(value.toTensor())) break;
    } else if (value.isTensorList()) {  // out of line: not asked of a tensor
      bool go_on = true;
      for (const at::Tensor& tensor : value.toTensorList().vec()) {
        if (!(go_on = one(tensor))) break;
      }
      if (!go_on) break;
    }
  }
  return walk;
}

inline bool is_cow(const at::Tensor& tensor) {
  return tensor.has_storage() && c10::impl::cow::is_cow_data_ptr(tensor.storage().data_ptr());
}

}  // namespace native_registry::detail
