#include "native_op.h"

#include "quiet_override_warning.h"
#include "router.h"

namespace native_registry::detail {
namespace {

constexpr const char* kNativeNamespace = "_native";

// Shape inference: the target op on meta inputs runs the target's own Meta
// (or composite) kernel.
class CallTarget final : public c10::OperatorKernel {
 public:
  explicit CallTarget(c10::OperatorHandle target) : target_(std::move(target)) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    target_.callBoxed(stack);
  }

 private:
  c10::OperatorHandle target_;
};

// The override's impl, as an exported or compiled program calls it. Such a
// program was traced without asking try_initialize_runtime, so the kernel
// asks at run time; when the runtime is unavailable it calls the target op
// instead (from the top: its router skips this node the same way), so the
// program computes what eager would.
class CallImpl final : public c10::OperatorKernel {
 public:
  CallImpl(NodePtr node, c10::OperatorHandle target)
      : node_(std::move(node)), target_(std::move(target)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  Stack* stack) {
    if (!node_->ensure_runtime()) {
      target_.callBoxed(stack);
      return;
    }
    run_impl(*node_, op, keys, stack);
  }

 private:
  NodePtr node_;
  c10::OperatorHandle target_;
};

}  // namespace

c10::OperatorName NativeOp::name_for(const OverrideNode& node) {
  return {std::string(kNativeNamespace) + "::" + node.node_id, ""};
}

NativeOp::NativeOp(const NodePtr& node, const c10::OperatorHandle& target,
                   c10::DispatchKey dispatch_key)
    : node_(node) {
  library_ = std::make_unique<torch::Library>(
      torch::Library::FRAGMENT, kNativeNamespace, std::nullopt, __FILE__, __LINE__);
  const std::string name = name_for(*node).name;
  QuietOverrideWarning quiet;
  library_->def(target.schema().cloneWithName(name, ""));
  library_->impl(name.c_str(),
                 torch::dispatch(c10::DispatchKey::Meta,
                                 torch::CppFunction::makeFromBoxedFunctor(
                                     std::make_unique<CallTarget>(target))));
  library_->impl(name.c_str(),
                 torch::dispatch(dispatch_key, torch::CppFunction::makeFromBoxedFunctor(
                                                   std::make_unique<CallImpl>(node, target))));
}

NativeOp::~NativeOp() = default;

}  // namespace native_registry::detail
