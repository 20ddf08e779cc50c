// Registration-time check for CompositeImplicitAutograd ops (see names.h).
// Apart from names.cpp because it reads the dispatcher (the op's kernels).
//
// Owns: check_keeps_autograd. May not touch: registry state or the
// dispatcher's tables: it only reads which kernel the op has at which key.

#include "names.h"

#include <native_registry/errors.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>

namespace native_registry::detail {

void check_keeps_autograd(const GraphKey& graph_key, c10::DispatchKey key) {
  // The dispatcher fills an Autograd<Backend> slot with the op's
  // CompositeImplicitAutograd kernel only while the op has no kernel at the
  // backend key itself (nor a CompositeExplicitAutograd one). A router at a
  // backend key is such a kernel: the op would stop decomposing under
  // autograd, even when every cond declines.
  if (!c10::isIncludedInAlias(key, c10::DispatchKey::CompositeExplicitAutograd)) return;
  const auto op = c10::Dispatcher::singleton().findOp(operator_name(graph_key));
  if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
      op->hasKernelForDispatchKey(key) ||
      op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
    return;
  }
  const std::string name = c10::toString(op->operator_name());
  const std::string autograd_key =
      c10::toString(c10::getAutogradKeyFromBackend(c10::toBackendComponent(key)));
  throw InvalidArgumentError(
      "dispatch_key=" + quoted(graph_key.dispatch_key) + " cannot take an override of " + name +
      ": its kernel there is its CompositeImplicitAutograd kernel, and a kernel at " +
      graph_key.dispatch_key + " would take " + name +
      " out of autograd (its backward would fail even when every cond declines). Register at " +
      autograd_key + " to replace " + name +
      " under autograd too, or override the ops its CompositeImplicitAutograd kernel calls at " +
      graph_key.dispatch_key);
}

}  // namespace native_registry::detail
