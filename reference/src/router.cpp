#include "router.h"

#include "quiet_override_warning.h"

#include <native_registry/registry.h>

#include <c10/core/impl/COW.h>

#include <atomic>
#include <optional>

namespace native_registry {
namespace {

std::atomic<TraceShortcutFn> g_trace_shortcut{nullptr};
thread_local bool t_in_diverted_call = false;

// Sets the re-entrancy flag for one diverted call; clears it on every exit,
// exceptions included.
class DivertedCallScope {
 public:
  DivertedCallScope() { t_in_diverted_call = true; }
  ~DivertedCallScope() { t_in_diverted_call = false; }
  DivertedCallScope(const DivertedCallScope&) = delete;
  DivertedCallScope& operator=(const DivertedCallScope&) = delete;
};

bool is_cow(const c10::IValue& value) {
  if (!value.isTensor()) return false;
  const at::Tensor& tensor = value.toTensor();
  return tensor.defined() && tensor.has_storage() &&
         c10::impl::cow::is_cow_data_ptr(tensor.storage().data_ptr());
}

// Copy-on-write inputs always take the ordinary path: a diverted call would
// hand them to a tracer that cannot see their copy-on-write state.
bool has_cow_argument(const Stack& stack) {
  for (const c10::IValue& value : stack) {
    if (is_cow(value)) return true;
    if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorVector()) {
        if (is_cow(c10::IValue(tensor))) return true;
      }
    }
  }
  return false;
}

std::atomic<uint64_t> g_next_router_id{1};

}  // namespace

void set_trace_shortcut(TraceShortcutFn fn) {
  g_trace_shortcut.store(fn, std::memory_order_release);
}

TraceShortcutFn trace_shortcut() {
  return g_trace_shortcut.load(std::memory_order_acquire);
}

bool in_diverted_call() { return t_in_diverted_call; }

namespace detail {

struct Router::Shared {
  Shared(const c10::OperatorHandle& op, c10::DispatchKey key)
      : dispatch_key(key) {
    if (op.hasComputedKernelForDispatchKey(key)) {
      fallback.emplace(op.getComputedKernelForDispatchKey(key));
    }
  }

  c10::DispatchKey dispatch_key;
  // The kernel that was live before the router; absent if there was none.
  std::optional<c10::SafeKernelFunction> fallback;
  std::atomic<const Chain*> chain{nullptr};
};

namespace {

// The kernel the dispatcher holds. It only reads `shared`; the Router that
// owns the registration may publish new chains into it meanwhile.
class RouterKernel final : public c10::OperatorKernel {
 public:
  explicit RouterKernel(std::shared_ptr<const Router::Shared> shared)
      : shared_(std::move(shared)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  Stack* stack) {
    const Chain* chain = shared_->chain.load(std::memory_order_acquire);
    if (chain->divert_when_tracing && !t_in_diverted_call) {
      TraceShortcutFn shortcut = g_trace_shortcut.load(std::memory_order_acquire);
      if (shortcut != nullptr && !has_cow_argument(*stack) && shortcut()) {
        DivertedCallScope diverted;
        op.callBoxed(stack);
        return;
      }
    }
    for (const NodePtr& node : chain->nodes) {
      if (!node->ensure_runtime()) continue;
      if (node->cond(op, keys, *stack)) {
        node->impl(op, keys, stack);
        return;
      }
    }
    if (!shared_->fallback) {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "no override took this call of ",
                                  op.operator_name(), " and the op had no kernel at ",
                                  shared_->dispatch_key, " before the router");
    }
    // Straight to the captured kernel, not through the dispatcher's entry:
    // this is what keeps autograd formulas that call this op from coming
    // back into the router.
    shared_->fallback->callBoxed(op, keys, stack);
  }

 private:
  std::shared_ptr<const Router::Shared> shared_;
};

}  // namespace

Router::Router(const c10::OperatorHandle& op, c10::DispatchKey dispatch_key,
               const Graph& chain)
    : shared_(std::make_shared<Shared>(op, dispatch_key)),
      id_(g_next_router_id.fetch_add(1)) {
  publish(chain);
  const c10::OperatorName& name = op.operator_name();
  const auto separator = name.name.find("::");
  library_ = std::make_unique<torch::Library>(
      torch::Library::IMPL, name.name.substr(0, separator), dispatch_key,
      __FILE__, __LINE__);
  std::string symbol = name.name.substr(separator + 2);
  if (!name.overload_name.empty()) symbol += "." + name.overload_name;
  QuietOverrideWarning quiet;
  library_->impl(symbol.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                     std::make_unique<RouterKernel>(shared_)));
}

Router::~Router() = default;

void Router::publish(const Graph& nodes) {
  std::vector<const OverrideNode*> identity;
  identity.reserve(nodes.size());
  for (const NodePtr& node : nodes) identity.push_back(node.get());
  auto& slot = interned_[identity];
  if (!slot) {
    auto chain = std::make_unique<Chain>();
    chain->nodes = nodes;
    for (const NodePtr& node : nodes) {
      chain->divert_when_tracing |= node->divert_when_tracing;
    }
    slot = std::move(chain);
  }
  shared_->chain.store(slot.get(), std::memory_order_release);
}

Graph Router::published() const {
  return shared_->chain.load(std::memory_order_acquire)->nodes;
}

}  // namespace detail
}  // namespace native_registry
