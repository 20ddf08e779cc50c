// Installation: the only code that changes the dispatcher for ops outside
// `_native`. A router goes in (capturing the kernel live at its key) or out,
// a chain is published into a router in place, and the `_native` ops of a
// chain are defined or re-activated before any router routes to them.

#include "registry_impl.h"

#include "names.h"
#include "native_op.h"
#include "retired_native_ops.h"
#include "router.h"

#include <algorithm>
#include <optional>

namespace native_registry {

using detail::NativeOp;
using detail::quoted;
using detail::Router;

// ---- installation -----------------------------------------------------------

c10::OperatorHandle Registry::Impl::resolve(const GraphKey& key) const {
  const c10::OperatorName name = detail::operator_name(key);
  auto op = c10::Dispatcher::singleton().findSchema(name);
  if (!op) {
    throw OperatorNotFoundError(
        "op " + quoted(key.lib_symbol + "::" + key.op_symbol) +
        " not found; is the namespace " + quoted(key.lib_symbol) +
        " loaded (its library defined or imported) and the op symbol spelled "
        "with its overload?");
  }
  return *op;
}

c10::OperatorHandle Registry::Impl::resolve_for_router(const GraphKey& key) const {
  c10::OperatorHandle op = resolve(key);
  // Registration judged the op only if it was defined then; one defined
  // since (a CompositeImplicitAutograd op of a library loaded late) is
  // judged here, before anything changes.
  detail::check_keeps_autograd(key, key.parsed_dispatch_key);
  return op;
}

void Registry::Impl::check_native_ops(const Graph& chain,
                                      const detail::NativeRecords* recorded) const {
  for (const NodePtr& node : chain) {
    auto it = native_ops_.find(node->node_id);
    if (it != native_ops_.end()) {
      if (it->second->target_gone()) it->second->check_target(resolve(node->key));
      continue;
    }
    // Retired: kept in the store, or undefined (and redefined on the op as
    // it is now, unless a snapshot recorded what it was defined for).
    std::optional<std::string> signature = detail::retired_signature(node->node_id);
    if (!signature && recorded != nullptr) {
      auto record = recorded->find(node->node_id);
      if (record != recorded->end()) signature = record->second.signature;
    }
    if (signature) detail::check_signature(*node, *signature, resolve(node->key));
  }
}

void Registry::Impl::ensure_native_ops(const Graph& chain, const detail::NativeRecords* recorded) {
  check_native_ops(chain, recorded);  // all or nothing: no op of the chain changes if one cannot
  for (const NodePtr& node : chain) {
    auto it = native_ops_.find(node->node_id);
    if (it != native_ops_.end() && !it->second->target_gone()) {
      // The common case, unless the node was given new callables since.
      if (it->second->node() != node) defer_release(it->second->rebind(node));
      continue;
    }
    const c10::DispatchKey key = node->key.parsed_dispatch_key;
    if (it != native_ops_.end()) {
      it->second->activate(node, resolve(node->key), key);
      continue;
    }
    std::unique_ptr<NativeOp> op = detail::take_retired(node->node_id);
    if (!op) {
      native_ops_[node->node_id] = std::make_unique<NativeOp>(node, resolve(node->key), key);
      continue;
    }
    try {
      op->activate(node, resolve(node->key), key);
    } catch (...) {
      detail::keep_retired(std::move(op));  // as it was
      throw;
    }
    native_ops_[node->node_id] = std::move(op);
  }
}

Graph Registry::Impl::chain_under_current_mask(const GraphKey& key, const Graph& published) const {
  Graph chain;
  auto graph = state_.graphs.find(key);  // erase_graph may have forgotten it
  if (graph == state_.graphs.end()) return chain;
  for (const NodePtr& node : graph->second) {
    const bool was_routed =
        std::find(published.begin(), published.end(), node) != published.end();
    const bool masked_then = node->options.unconditional_override && state_.filters.matches(*node);
    if ((was_routed || masked_then) && is_enabled_locked(*node)) chain.push_back(node);
  }
  return chain;
}

void Registry::Impl::retire_native_op(const std::string& node_id) {
  auto it = native_ops_.find(node_id);
  if (it == native_ops_.end()) return;
  std::unique_ptr<NativeOp> op = std::move(it->second);
  native_ops_.erase(it);
  if (op->held_outside()) {
    defer_release(op->retire());
    detail::keep_retired(std::move(op));
  } else {
    defer_release(op->release());  // and the op leaves the dispatcher here
  }
}

void Registry::Impl::remove_router(const GraphKey& key) {
  auto it = routers_.find(key);
  if (it == routers_.end()) return;
  // The router's chains and nodes outlive it until the lock is released
  // (and until the last call inside it returns).
  defer_release(it->second->keep_alive());
  routers_.erase(it);
}

void Registry::Impl::publish(const GraphKey& key, const Graph& chain, InstallMode mode) {
  auto it = routers_.find(key);
  // A router whose op left the dispatcher since (see Router::op_gone) is
  // rebuilt on the op as it is now, or removed if the chain is empty.
  const bool stale = it != routers_.end() && it->second->op_gone();
  if (chain.empty()) {
    if (it == routers_.end()) return;
    if (stale || mode == InstallMode::kReinstall ||
        empty_chain_policy_ == EmptyChainPolicy::kRemoveRouter) {
      remove_router(key);
    } else {
      it->second->publish(chain);
    }
    return;
  }
  const bool new_router = it == routers_.end() || stale || mode == InstallMode::kReinstall;
  // Both throw before any change.
  const c10::OperatorHandle op = new_router ? resolve_for_router(key) : resolve(key);
  ensure_native_ops(chain);
  if (!new_router) {
    it->second->publish(chain);
    return;
  }
  // Remove the old router before capturing, so the new one falls back to
  // the op's own kernel rather than to the router it replaces.
  if (it != routers_.end()) remove_router(key);
  routers_[key] = std::make_unique<Router>(op, key.parsed_dispatch_key, chain);
}

void Registry::Impl::install_graph(const GraphKey& named, InstallMode mode) {
  // A key no registration could have made is refused, not recorded.
  const GraphKey key = detail::admitted_key(named);
  ControlScope scope(*this);
  install_graph_locked(key, mode);
}

void Registry::Impl::install_graph_locked(const GraphKey& key, InstallMode mode) {
  publish(key, enabled_chain(key), mode);
  state_.installed.insert(key);
}

void Registry::Impl::install_graphs_locked(const std::vector<GraphKey>& keys) {
  // Every op that needs a router must resolve before any is installed.
  for (const GraphKey& key : keys) {
    if (!enabled_chain(key).empty()) resolve_for_router(key);
  }
  for (const GraphKey& key : keys) install_graph_locked(key, InstallMode::kUpdate);
}

void Registry::Impl::install_all() {
  ControlScope scope(*this);
  std::vector<GraphKey> keys;
  for (const auto& entry : state_.graphs) keys.push_back(entry.first);
  install_graphs_locked(keys);
}

// ---- graph surgery ----------------------------------------------------------
// Beyond upstream's API: a router taken out while its graph stays, for
// upstream_compat's view of upstream's router libraries (and C++ users).

void Registry::Impl::uninstall_graph(const GraphKey& key) {
  ControlScope scope(*this);
  remove_router(key);
  state_.installed.erase(key);
}

}  // namespace native_registry
