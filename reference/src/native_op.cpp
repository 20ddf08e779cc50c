#include "native_op.h"

#include "quiet_override_warning.h"
#include "router.h"

#include <mutex>
#include <vector>

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
  CallImpl(std::shared_ptr<NativeOp::Binding> binding, c10::OperatorHandle target)
      : binding_(std::move(binding)), target_(std::move(target)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  Stack* stack) {
    // Held for the call: the impl may retire this op, and this functor with
    // it; the binding keeps every node it ever held.
    const std::shared_ptr<NativeOp::Binding> pinned = binding_;
    const OverrideNode* node = pinned->current.load(std::memory_order_acquire);
    if (!node->ensure_runtime()) {
      target_.callBoxed(stack);
      return;
    }
    node->run_impl(op, keys, stack);
  }

 private:
  std::shared_ptr<NativeOp::Binding> binding_;
  c10::OperatorHandle target_;
};

// Every call of a retired op, at any key (CompositeImplicitAutograd fills
// the whole table of an op with no other kernel, Meta and Autograd included).
class RaiseRetired final : public c10::OperatorKernel {
 public:
  explicit RaiseRetired(std::string message) : message_(std::move(message)) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {
    TORCH_CHECK(false, message_);
  }

 private:
  std::string message_;
};

// Definitions of retired ops, kept for the life of the process (see the
// header). Reachable from a global, so leak checkers do not count them.
void keep_definition(std::unique_ptr<torch::Library> definition) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::unique_ptr<torch::Library>>();
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(definition));
}

std::string describe(const OverrideNode& node) {
  return "override " + node.node_id + " (dsl '" + node.dsl_name + "', " +
         node.key.to_string() + ")";
}

}  // namespace

c10::OperatorName NativeOp::name_for(const OverrideNode& node) {
  return {std::string(kNativeNamespace) + "::" + node.node_id, ""};
}

NativeOp::NativeOp(const NodePtr& node, const c10::OperatorHandle& target,
                   c10::DispatchKey dispatch_key)
    : name_(name_for(*node).name), description_(describe(*node)) {
  definition_ = std::make_unique<torch::Library>(
      torch::Library::FRAGMENT, kNativeNamespace, std::nullopt, __FILE__, __LINE__);
  QuietOverrideWarning quiet;
  definition_->def(target.schema().cloneWithName(name_, ""));
  activate(node, target, dispatch_key);
}

NativeOp::~NativeOp() { keep_definition(std::move(definition_)); }

void NativeOp::activate(const NodePtr& node, const c10::OperatorHandle& target,
                        c10::DispatchKey dispatch_key) {
  if (active()) return;
  QuietOverrideWarning quiet;
  retired_.reset();
  binding_ = std::make_shared<Binding>();
  binding_->kept.push_back(node);
  binding_->current.store(node.get(), std::memory_order_release);
  kernels_ = std::make_unique<torch::Library>(
      torch::Library::IMPL, kNativeNamespace, std::nullopt, __FILE__, __LINE__);
  kernels_->impl(name_.c_str(),
                 torch::dispatch(c10::DispatchKey::Meta,
                                 torch::CppFunction::makeFromBoxedFunctor(
                                     std::make_unique<CallTarget>(target))));
  kernels_->impl(name_.c_str(),
                 torch::dispatch(dispatch_key, torch::CppFunction::makeFromBoxedFunctor(
                                                   std::make_unique<CallImpl>(binding_, target))));
  node_ = node;
}

void NativeOp::rebind(const NodePtr& node) {
  TORCH_INTERNAL_ASSERT(active() && node && node->node_id == node_->node_id);
  if (node == node_) return;
  binding_->kept.push_back(node);
  binding_->current.store(node.get(), std::memory_order_release);
  node_ = node;
}

std::shared_ptr<const void> NativeOp::retire() {
  if (!active()) return nullptr;
  QuietOverrideWarning quiet;
  kernels_.reset();
  retired_ = std::make_unique<torch::Library>(
      torch::Library::IMPL, kNativeNamespace, std::nullopt, __FILE__, __LINE__);
  retired_->impl(
      name_.c_str(),
      torch::dispatch(c10::DispatchKey::CompositeImplicitAutograd,
                      torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RaiseRetired>(
                          name_ + ": " + description_ +
                          " is gone: the registry's teardown (restore, or the registry's "
                          "destruction) removed it after this op was recorded, e.g. by "
                          "torch.export or torch.compile; rebuild the program with the "
                          "override installed, or without it"))));
  node_.reset();
  return std::move(binding_);
}

}  // namespace native_registry::detail
