#include <native_registry/types.h>

namespace native_registry {

std::string GraphKey::to_string() const {
  return lib_symbol + "::" + op_symbol + "/" + dispatch_key;
}

bool OverrideNode::ensure_runtime() const {
  return !try_initialize_runtime || try_initialize_runtime();
}

}  // namespace native_registry
