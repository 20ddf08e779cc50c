#pragma once

// The backend of a call of an op that takes no tensor (a factory such as
// aten::ones). The dispatcher has no tensor to read it from, so aten gives
// its factories a BackendSelect kernel that reads the call's dtype, layout
// and device. The registry's `_native` ops of such targets choose their
// kernel the same way, and so does a host's compile router deciding whether
// a call would reach an override's dispatch key (the Python binding's).
//
// Owns: the declarations (native_op.cpp defines them, beside the kernel that
// uses them). May not touch: any registry; these only read a schema and a call.

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DispatchKey.h>
#include <c10/util/ArrayRef.h>

namespace native_registry {

// Whether the dispatcher reads a backend from some argument of `schema`: a
// Tensor, Tensor?, Tensor[] or Tensor?[].
bool takes_a_tensor(const c10::FunctionSchema& schema);

// The dispatch key that a call of an op with `schema`, which takes no tensor,
// selects from its `dtype`, `layout` and `device` arguments (c10's
// computeDispatchKey, as aten's BackendSelect kernels); a device the call
// does not name is the dispatcher's default, CPU. `arguments` are the call's,
// the first at index 0, one per argument of the schema.
c10::DispatchKey tensorless_backend(const c10::FunctionSchema& schema,
                                    c10::ArrayRef<c10::IValue> arguments);

}  // namespace native_registry
