#include <native_registry/types.h>

#include <algorithm>

namespace native_registry {

std::string GraphKey::to_string() const {
  return lib_symbol + "::" + op_symbol + "/" + dispatch_key;
}

bool OverrideNode::ensure_runtime() const {
  const TryInitializeRuntimeFn& try_initialize_runtime = options.try_initialize_runtime;
  if (!try_initialize_runtime || runtime_ready_.load(std::memory_order_acquire)) {
    return true;
  }
  if (!try_initialize_runtime()) return false;
  runtime_ready_.store(true, std::memory_order_release);
  return true;
}

void OverrideNode::run_impl(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            Stack* stack) const {
  const size_t below = stack->size() - op.schema().arguments().size();
  impl(op, keys, stack);
  TORCH_CHECK(stack->size() == below + op.schema().returns().size(), "the impl of override ",
              node_id, " left ", stack->size() - std::min(below, stack->size()),
              " values on the stack for ", op.operator_name(), ", which returns ",
              op.schema().returns().size());
}

}  // namespace native_registry
