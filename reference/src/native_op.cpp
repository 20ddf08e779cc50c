// The `_native` ops of native_op.h: their definition (kept for the life of
// the process), the kernels an active op runs (the node's impl at its key,
// the target op at Meta), the kernel of a retired op (an error naming the
// override), and the check that a target op still has the schema it had.
//
// Owns: everything the registry puts into the `_native` namespace of the
// dispatcher. May not touch: registry state (the `_native` op table,
// native_op_table.h, decides when an op is activated, rebound or retired)
// or any router.

#include "native_op.h"

#include "names.h"
#include "quiet_override_warning.h"

#include <native_registry/backend_select.h>
#include <native_registry/errors.h>

#include <mutex>
#include <optional>
#include <vector>

#include <ATen/core/jit_type.h>
#include <c10/core/TensorOptions.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace native_registry::detail {
namespace {

// What the kernels of an active op share: the target and whether it is
// still in the dispatcher.
struct Target {
  c10::OperatorHandle op;
  std::shared_ptr<const OpWatch> watch;
  std::string gone_message;  // raised once the watch is marked

  // The handle, or the error: once the op's schema is removed the handle
  // may dangle (see op_watch.h).
  const c10::OperatorHandle& checked() const {
    TORCH_CHECK(!watch->gone.load(std::memory_order_acquire), gone_message);
    return op;
  }
};

// Shape inference: the target op on meta inputs runs the target's own Meta
// (or composite) kernel.
class CallTarget final : public c10::OperatorKernel {
 public:
  explicit CallTarget(std::shared_ptr<const Target> target) : target_(std::move(target)) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    target_->checked().callBoxed(stack);
  }

 private:
  std::shared_ptr<const Target> target_;
};

// The override's impl, as an exported or compiled program calls it. Such a
// program was traced without asking try_initialize_runtime, so the kernel
// asks at run time; when the runtime is unavailable it calls the target op
// instead (from the top: its router skips this node the same way), so the
// program computes what eager would.
class CallImpl final : public c10::OperatorKernel {
 public:
  CallImpl(std::shared_ptr<NativeOp::Binding> binding, std::shared_ptr<const Target> target)
      : binding_(std::move(binding)), target_(std::move(target)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  Stack* stack) {
    // Held for the call: the impl may retire this op, and this functor with
    // it, or a rebind may replace the node.
    const std::shared_ptr<const Target> target = target_;
    const c10::OperatorHandle& target_op = target->checked();
    const NodePtr node = binding_->current.load(std::memory_order_acquire);
    if (!node->ensure_runtime()) {
      target->checked();  // the runtime check may have run anything
      target_op.callBoxed(stack);
      return;
    }
    node->run_impl(op, keys, stack);
  }

 private:
  std::shared_ptr<NativeOp::Binding> binding_;
  std::shared_ptr<const Target> target_;
};

// A `_native` op whose target takes no tensor: the kernel of its node's key
// (or Meta, under a fake mode's meta device) by the call's options, as the
// target's own BackendSelect kernel chooses (backend_select.h). Without it an
// exported program's call of the op fails to dispatch.
class SelectBackend final : public c10::OperatorKernel {
 public:
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    const size_t count = op.schema().arguments().size();
    const c10::ArrayRef<c10::IValue> arguments(stack->data() + (stack->size() - count), count);
    op.redispatchBoxed(c10::DispatchKeySet(tensorless_backend(op.schema(), arguments)), stack);
  }
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

std::string describe(const OverrideNode& node) {
  return "override " + node.node_id + " (dsl '" + node.dsl_name + "', " +
         node.key.to_string() + ")";
}

// The op's torch::jit::Operator, which every torch.ops object of the op
// holds; null if LibTorch made none.
std::shared_ptr<torch::jit::Operator> jit_operator(const std::string& name) {
  return torch::jit::findOperatorFor(c10::OperatorName(name, ""));
}

// TorchScript keeps copies of an operator's Operation (a std::function that,
// for a dispatcher op, holds a bare OperatorHandle), not the operator: a
// function compiled over the op would hold nothing held_outside() counts,
// and call a freed entry once the op was undefined. So the op's operator is
// swapped for one whose Operation wraps LibTorch's and also holds `token`:
// every copy anyone keeps counts as a holder. Done right after the
// definition, before anything can have looked the op up. Returns false,
// changing nothing, when LibTorch made no operator for the op.
bool give_operation_a_token(const std::string& name, const c10::OperatorHandle& handle,
                            const std::shared_ptr<const NativeOpToken>& token) {
  const std::shared_ptr<torch::jit::Operator> made = jit_operator(name);
  if (!made || !made->isC10Op()) return false;
  torch::jit::Operation inner = made->getOperation();
  torch::jit::deregisterOperator(handle.schema());
  torch::jit::registerOperator(torch::jit::Operator(
      handle, [token, inner = std::move(inner)](torch::jit::Stack& stack) mutable {
        // The op stays defined while this copy lives (held_outside()); the
        // check is for a copy that outlived that promise.
        TORCH_CHECK(token->defined.load(std::memory_order_acquire), token->gone_message);
        inner(stack);
      }));
  return true;
}

// Throws OperatorChangedError, changing nothing, unless `target`'s schema
// is the one of `signature`: the `_native` op `name` of `description` was
// defined for that schema.
void check_unchanged(const c10::OperatorHandle& target, const std::string& signature,
                     const std::string& description, const std::string& name) {
  const std::string now = NativeOp::signature_of(target.schema());
  if (now == signature) return;
  throw OperatorChangedError(
      "op " + full_name(target.operator_name()) + " changed since " + description +
      " was first installed: its schema was " + signature + ", it is now " + now +
      " (its library destroyed and the op defined again); " + name +
      " was defined for the old schema, so register the override again for the op as it is now");
}

}  // namespace

// In the schema language's notation, less the name and the default values
// (a default is shown as "=..."): "(Tensor x, *, int n=...) -> Tensor". Built
// field by field: printing a whole schema with its default values crashed on
// torch 2.11 for ops such as add.Tensor, sort and topk.
std::string NativeOp::signature_of(const c10::FunctionSchema& schema) {
  std::string out = "(";
  bool keywords = false;
  for (const c10::Argument& argument : schema.arguments()) {
    if (out.size() > 1) out.append(", ");
    if (argument.kwarg_only() && !keywords) {
      out.append("*, ");
      keywords = true;
    }
    out.append(argument.type()->str()).append(" ").append(argument.name());
    if (argument.default_value()) out.append("=...");
  }
  out.append(") -> ");
  const std::vector<c10::Argument>& results = schema.returns();
  const bool bare = results.size() == 1 && results[0].name().empty();
  if (!bare) out.append("(");
  out.append(comma_separated(results, [](const c10::Argument& result) {
    return result.name().empty() ? result.type()->str() : result.type()->str() + " " + result.name();
  }));
  if (!bare) out.append(")");
  return out;
}

void check_signature(const OverrideNode& node, const std::string& signature,
                     const c10::OperatorHandle& target) {
  check_unchanged(target, signature, describe(node), NativeOp::name_for(node).name);
}

c10::OperatorName NativeOp::name_for(const OverrideNode& node) {
  return native_op_name(node.node_id);
}

NativeOp::NativeOp(const NodePtr& node, const c10::OperatorHandle& target,
                   c10::DispatchKey dispatch_key)
    : node_id_(node->node_id),
      name_(name_for(*node).name),
      description_(describe(*node)),
      signature_(signature_of(target.schema())) {
  definition_ = std::make_unique<torch::Library>(
      torch::Library::FRAGMENT, kNativeNamespace, std::nullopt, __FILE__, __LINE__);
  QuietOverrideWarning quiet;
  definition_->def(target.schema().cloneWithName(name_, ""));
  token_ = std::make_shared<NativeOpToken>();
  token_->gone_message = name_ + ": " + description_ +
                         " is gone: its op was undefined while a compiled program (TorchScript) "
                         "still held it; rebuild the program";
  const auto handle = c10::Dispatcher::singleton().findSchema(c10::OperatorName(name_, ""));
  TORCH_INTERNAL_ASSERT(handle.has_value(), name_, " is not in the dispatcher after its definition");
  if (!give_operation_a_token(name_, *handle, token_)) token_.reset();
  // Nothing outside can hold the op yet: what holds its operator and its
  // token now is LibTorch's own bookkeeping and this object.
  if (auto op = jit_operator(name_)) jit_holders_baseline_ = op.use_count() - 1;
  if (token_) token_holders_baseline_ = token_.use_count();
  // If this throws, the members undo what it did: kernels_ is declared after
  // definition_, so the op's kernels leave the dispatcher before its definition.
  activate(node, target, dispatch_key);
}

NativeOp::~NativeOp() {
  if (token_) token_->defined.store(false, std::memory_order_release);
  // Kernels first, then the definition: the op leaves the dispatcher whole
  // (LibTorch's listener takes its operator, ours included, out of the JIT's
  // registry with it).
  retired_.reset();
  kernels_.reset();
  definition_.reset();
}

bool NativeOp::held_outside() const {
  // Copies of the Operation (TorchScript's) hold the token beyond this
  // object and the operator that made them.
  if (token_ && token_.use_count() > token_holders_baseline_) return true;
  if (jit_holders_baseline_ < 0) return false;
  const std::shared_ptr<torch::jit::Operator> op = jit_operator(name_);
  return op && op.use_count() - 1 > jit_holders_baseline_;
}

void NativeOp::check_target(const c10::OperatorHandle& target) const {
  check_unchanged(target, signature_, description_, name_);
}

void NativeOp::activate(const NodePtr& node, const c10::OperatorHandle& target,
                        c10::DispatchKey dispatch_key) {
  check_target(target);  // before any change
  QuietOverrideWarning quiet;
  std::shared_ptr<const OpWatch> watch = watch_op(target);
  auto shared = std::make_shared<const Target>(Target{
      target, watch,
      name_ + ": " + description_ + " cannot run: its target op " + watch->name +
          " has left the dispatcher since the override was installed (its library destroyed, "
          "the op perhaps defined again); install the override again for the op as it is now, "
          "and rebuild any program that recorded " + name_});
  retired_.reset();
  binding_ = std::make_shared<Binding>();
  binding_->current.store(node, std::memory_order_release);
  kernels_ = std::make_unique<torch::Library>(
      torch::Library::IMPL, kNativeNamespace, std::nullopt, __FILE__, __LINE__);
  kernels_->impl(name_.c_str(),
                 torch::dispatch(c10::DispatchKey::Meta,
                                 torch::CppFunction::makeFromBoxedFunctor(
                                     std::make_unique<CallTarget>(shared))));
  kernels_->impl(name_.c_str(),
                 torch::dispatch(dispatch_key, torch::CppFunction::makeFromBoxedFunctor(
                                                   std::make_unique<CallImpl>(binding_, shared))));
  if (!takes_a_tensor(target.schema())) {
    kernels_->impl(name_.c_str(),
                   torch::dispatch(c10::DispatchKey::BackendSelect,
                                   torch::CppFunction::makeFromBoxedFunctor(
                                       std::make_unique<SelectBackend>())));
  }
  target_watch_ = std::move(watch);
  node_ = node;
}

NodePtr NativeOp::rebind(const NodePtr& node) {
  TORCH_INTERNAL_ASSERT(active() && node && node->node_id == node_->node_id);
  node_ = node;
  return binding_->current.exchange(node, std::memory_order_acq_rel);
}

std::shared_ptr<const void> NativeOp::release() {
  if (!active()) return nullptr;
  node_.reset();
  return std::move(binding_);
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
  return release();
}

}  // namespace native_registry::detail

namespace native_registry {

bool takes_a_tensor(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    const c10::TypePtr& type = argument.type();
    if (type->isSubtypeOf(*c10::TensorType::get()) ||
        type->isSubtypeOf(*c10::OptionalType::ofTensor()) ||
        type->isSubtypeOf(*c10::ListType::ofTensors()) ||
        type->isSubtypeOf(*c10::ListType::ofOptionalTensors())) {
      return true;
    }
  }
  return false;
}

c10::DispatchKey tensorless_backend(const c10::FunctionSchema& schema,
                                    c10::ArrayRef<c10::IValue> arguments) {
  TORCH_CHECK(arguments.size() == schema.arguments().size(), "tensorless_backend: ",
              arguments.size(), " arguments for the ", schema.arguments().size(), " of ",
              schema.name());
  auto given = [&](const char* name) -> const c10::IValue* {
    const std::optional<int> index = schema.argumentIndexWithName(name);
    return index && !arguments[*index].isNone() ? &arguments[*index] : nullptr;
  };
  std::optional<c10::ScalarType> dtype;
  std::optional<c10::Layout> layout;
  std::optional<c10::Device> device;
  if (const c10::IValue* value = given("dtype")) dtype = value->toScalarType();
  if (const c10::IValue* value = given("layout")) layout = value->toLayout();
  if (const c10::IValue* value = given("device")) device = value->toDevice();
  return c10::computeDispatchKey(dtype, layout, device);
}

}  // namespace native_registry
