#include <native_registry/types.h>

namespace native_registry {

std::string GraphKey::to_string() const {
  return lib_symbol + "::" + op_symbol + "/" + dispatch_key;
}

bool OverrideNode::ensure_runtime() const {
  if (!try_initialize_runtime || runtime_ready_.load(std::memory_order_acquire)) {
    return true;
  }
  if (!try_initialize_runtime()) return false;
  runtime_ready_.store(true, std::memory_order_release);
  return true;
}

}  // namespace native_registry
