// Snapshot and restore: a snapshot copies the control state, each router's
// id and published chain, the mask depth and the active `_native` ops;
// restore puts back exactly that, removing routers installed or replaced
// since and rebuilding replaced ones on a fresh capture (see registry.h).
// Owns: what a snapshot holds and the order restore puts it back in. May not
// touch: the dispatcher but through install.cpp's and native_op.h's calls.

#include "registry_impl.h"

#include "native_op.h"
#include "retired_native_ops.h"
#include "router.h"

#include <utility>

namespace native_registry {

using detail::Router;

// ---- teardown ---------------------------------------------------------------

std::shared_ptr<const detail::SnapshotState> Registry::Impl::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto state = std::make_shared<detail::SnapshotState>();
  state->owner = serial_;
  state->control = state_;
  for (const auto& [key, router] : routers_) {
    state->routers[key] = {router->id(), router->published(), router->op_gone()};
  }
  state->unconditional_mask_depth = unconditional_mask_depth_;
  for (const auto& [id, native_op] : native_ops_) {
    state->native_nodes[id] = {native_op->node(), native_op->signature()};
  }
  return state;
}

void Registry::Impl::restore(const detail::SnapshotState* snapshot) {
  if (!snapshot) throw InvalidArgumentError("restore: the snapshot is empty");
  if (snapshot->owner != serial_) {
    throw InvalidArgumentError("restore: the snapshot was taken of another registry");
  }
  const detail::SnapshotState& saved = *snapshot;
  ControlScope scope(*this);

  // Routers installed since, or replaced since (a different router id), go
  // first, so that rebuilding a replaced one captures the op's own kernel.
  std::vector<GraphKey> stale;
  for (const auto& [key, router] : routers_) {
    auto it = saved.routers.find(key);
    if (it == saved.routers.end() || it->second.router_id != router->id() ||
        (router->op_gone() && !it->second.op_gone)) {
      stale.push_back(key);  // one whose op went since is rebuilt on the op as it is now
    }
  }
  for (const GraphKey& key : stale) remove_router(key);

  // The nodes of graphs replaced here may be held by nothing else.
  defer_release(std::make_shared<ControlState>(std::exchange(state_, saved.control)));

  std::vector<std::string> unrestorable;
  // `_native` ops: active are those active at the snapshot, no others. Ops
  // activated since (for nodes registered since, or first published since)
  // are retired; ops a restore to an earlier snapshot retired come back.
  // A retired op nothing holds is undefined here (see registry_impl.h).
  std::vector<std::string> retiring;
  for (const auto& [id, native_op] : native_ops_) {
    if (!saved.native_nodes.count(id)) retiring.push_back(id);
  }
  for (const std::string& id : retiring) retire_native_op(id);
  for (const auto& [id, record] : saved.native_nodes) {
    try {
      ensure_native_ops({record.node}, &saved.native_nodes);
    } catch (const OperatorChangedError& e) {
      unrestorable.push_back(record.node->key.to_string() + " (for _native::" + id + ": " +
                             e.what() + ")");
    } catch (const OperatorNotFoundError&) {
      unrestorable.push_back(record.node->key.to_string() + " (for _native::" + id + ")");
    }
  }
  // Each router the snapshot had comes back (dormant if need be, so the
  // dispatcher is as it was), routing through the chain it had then, which
  // may lag its graph (a registration publishes nothing). Only where the
  // unconditional mask in force differs from the snapshot's does it route
  // by the mask of now: the unconditional nodes the filters disable come
  // in or go, as their is_enabled says.
  for (const auto& [key, record] : saved.routers) {
    if (record.op_gone) {
      // Its op had gone before the snapshot: kept as it was if still there,
      // never rebuilt on the op of now (which answered itself then).
      if (!routers_.count(key)) unrestorable.push_back(key.to_string() + " (its op had gone)");
      continue;
    }
    const Graph chain = saved.unconditional_mask_depth == unconditional_mask_depth_
                            ? record.chain
                            : chain_under_current_mask(key, record.chain);
    auto it = routers_.find(key);
    if (it != routers_.end()) {
      try {
        ensure_native_ops(chain, &saved.native_nodes);
        it->second->publish(chain);
      } catch (const OperatorNotFoundError& e) {
        // Its op changed under it (OperatorChangedError): nothing routes the old nodes.
        remove_router(key);
        unrestorable.push_back(key.to_string() + " (" + e.what() + ")");
      }
      continue;
    }
    try {
      const c10::OperatorHandle op = resolve(key);
      ensure_native_ops(chain, &saved.native_nodes);
      routers_[key] = std::make_unique<Router>(
          op, key.parsed_dispatch_key, chain);
    } catch (const OperatorChangedError& e) {
      unrestorable.push_back(key.to_string() + " (" + e.what() + ")");
    } catch (const OperatorNotFoundError&) {
      unrestorable.push_back(key.to_string());  // its op is gone, and so is its table
    }
  }

  for (const std::string& where : unrestorable) {
    log(LogLevel::kWarning, "restore: the op of " + where +
                                " no longer exists; what the registry had put there was "
                                "not rebuilt");
  }
  detail::reclaim_retired();  // ops kept earlier may be free by now
}

void Snapshot::visit_nodes_held_only_here(
    const std::function<void(const OverrideNode&)>& visit) const {
  if (!state_ || state_.use_count() != 1) return;
  // How many of the node's owners are in this state; a node all of whose
  // owners are is held only here.
  std::map<const OverrideNode*, std::pair<const NodePtr*, long>> held;
  auto count = [&held](const NodePtr& node) {
    if (!node) return;
    auto& entry = held[node.get()];
    entry.first = &node;
    ++entry.second;
  };
  for (const auto& [key, graph] : state_->control.graphs) {
    for (const NodePtr& node : graph) count(node);
  }
  for (const auto& [key, record] : state_->routers) {
    for (const NodePtr& node : record.chain) count(node);
  }
  for (const auto& [id, record] : state_->native_nodes) count(record.node);
  for (const auto& [raw, entry] : held) {
    if (entry.first->use_count() == entry.second) visit(*raw);
  }
}

}  // namespace native_registry
