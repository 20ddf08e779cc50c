// The few behaviours of the vocabulary types (native_registry/types.h): a
// graph key's printed form, and a node's runtime check and impl run with the
// check of what the impl left on the stack.
//
// Owns: those member functions. May not touch: registry state, routers or
// the dispatcher; a node runs its own callables and nothing else.

#include <native_registry/types.h>

#include <algorithm>

namespace native_registry {

std::string GraphKey::to_string() const {
  return lib_symbol + "::" + op_symbol + "/" + dispatch_key;
}

bool OverrideNode::ensure_runtime() const {
  return !options.try_initialize_runtime || options.try_initialize_runtime();
}

void OverrideNode::run_impl(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            Stack* stack) const {
  // Read before the impl runs: the impl may destroy the op's library (the
  // schema gone) or define the op again; the call keeps the schema it
  // started with, and its caller raises if the op changed.
  const c10::FunctionSchema& schema = op.schema();
  const size_t below = stack->size() - schema.arguments().size();
  const size_t returns = schema.returns().size();
  impl(op, keys, stack);
  TORCH_CHECK(stack->size() == below + returns, "the impl of override ", node_id, " left ",
              stack->size() - std::min(below, stack->size()), " values on the stack for ",
              op.operator_name(), ", which returns ", returns);
}

}  // namespace native_registry
