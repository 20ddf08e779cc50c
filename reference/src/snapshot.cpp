// Snapshot and restore: a snapshot copies the graph table, the disabled
// entries, the installed keys, each router's id and published chain, the
// mask depth and the active `_native` ops; restore puts back exactly that,
// removing routers installed or replaced since and rebuilding replaced ones
// on a fresh capture (see registry.h).
// Owns: what a snapshot holds and the order restore puts it back in. May not
// touch: the dispatcher but through the router and `_native` op tables.

#include "registry_impl.h"

#include "names.h"
#include "retired_native_ops.h"

#include <utility>

namespace native_registry {

// ---- teardown ---------------------------------------------------------------

Snapshot Registry::snapshot() const {
  const Impl& r = *impl_;
  std::lock_guard<std::mutex> lock(r.mutex_);
  auto state = std::make_shared<detail::SnapshotState>();
  state->owner = r.serial_;
  state->graphs = r.graphs_;
  state->filters = r.filters_.entries();
  state->installed = r.routers_.installed();
  for (const auto& [key, router] : r.routers_.routers()) {
    state->routers[key] = {router->id(), router->published(), router->op_gone()};
  }
  state->unconditional_mask_depth = r.filters_.mask_depth();
  state->native_nodes = r.native_ops_.records();
  Snapshot snapshot;
  snapshot.state_ = std::move(state);
  return snapshot;
}

void Registry::restore(const Snapshot& snapshot) {
  const detail::SnapshotState* saved_state = snapshot.state_.get();
  Impl& r = *impl_;
  if (!saved_state) throw InvalidArgumentError("restore: the snapshot is empty");
  if (saved_state->owner != r.serial_) {
    throw InvalidArgumentError("restore: the snapshot was taken of another registry");
  }
  const detail::SnapshotState& saved = *saved_state;
  Impl::ControlScope scope(r);

  // Routers installed since, or replaced since (a different router id), go
  // first, so that rebuilding a replaced one captures the op's own kernel.
  std::vector<GraphKey> stale;
  for (const auto& [key, router] : r.routers_.routers()) {
    auto it = saved.routers.find(key);
    if (it == saved.routers.end() || it->second.router_id != router->id() ||
        (router->op_gone() && !it->second.op_gone)) {
      stale.push_back(key);  // one whose op went since is rebuilt on the op as it is now
    }
  }
  for (const GraphKey& key : stale) r.routers_.remove(key, r.released());

  // The nodes of graphs replaced here may be held by nothing else.
  r.defer_release(std::make_shared<detail::GraphTable>(std::exchange(r.graphs_, saved.graphs)));
  r.filters_.set_entries(saved.filters);
  r.routers_.set_installed(saved.installed);

  std::vector<std::string> unrestorable;
  // `_native` ops: active are those active at the snapshot, no others. Ops
  // activated since (for nodes registered since, or first published since)
  // are retired; ops a restore to an earlier snapshot retired come back.
  // A retired op nothing holds is undefined here (see native_op_table.h).
  std::vector<std::string> retiring;
  for (const auto& [id, native_op] : r.native_ops_.ops()) {
    if (!saved.native_nodes.count(id)) retiring.push_back(id);
  }
  for (const std::string& id : retiring) r.native_ops_.retire(id, r.released());
  for (const auto& [id, record] : saved.native_nodes) {
    try {
      r.native_ops_.activate({record.node}, &saved.native_nodes, r.released());
    } catch (const OperatorChangedError& e) {
      unrestorable.push_back(record.node->key.to_string() + " (for _native::" + id + ": " +
                             e.what() + ")");
    } catch (const OperatorNotFoundError&) {
      unrestorable.push_back(record.node->key.to_string() + " (for _native::" + id + ")");
    }
  }
  const bool mask_changed = saved.unconditional_mask_depth != r.filters_.mask_depth();
  auto install_router = [&](const GraphKey& key, const Graph& chain) {
    try {
      const c10::OperatorHandle op = detail::resolve_op(key);
      r.native_ops_.activate(chain, &saved.native_nodes, r.released());
      r.routers_.install(key, op, chain, r.released());
    } catch (const OperatorChangedError& e) {
      unrestorable.push_back(key.to_string() + " (" + e.what() + ")");
    } catch (const OperatorNotFoundError&) {
      unrestorable.push_back(key.to_string());  // its op is gone, and so is its table
    }
  };
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
      if (r.routers_.find(key) == nullptr) {
        unrestorable.push_back(key.to_string() + " (its op had gone)");
      }
      continue;
    }
    const Graph chain = mask_changed ? r.chain_under_current_mask(key, record.chain) : record.chain;
    if (r.routers_.find(key) != nullptr) {
      try {
        r.native_ops_.activate(chain, &saved.native_nodes, r.released());
        r.routers_.publish_in_place(key, chain);
      } catch (const OperatorNotFoundError& e) {
        // A node of the chain (one the mask of now lets in, say) has a `_native`
        // op made for the op's old schema (OperatorChangedError): the chain cannot
        // be routed, and a router left routing what it had would skip that node.
        // None, as for a router that cannot be rebuilt.
        r.routers_.remove(key, r.released());
        unrestorable.push_back(key.to_string() + " (" + e.what() + ")");
      }
      continue;
    }
    install_router(key, chain);
  }
  // A graph installed with no router at the snapshot (its chain was empty:
  // under the "remove" policy, say, with the mask hiding its unconditional
  // nodes) gets one where the mask of now lets a node in: else those nodes,
  // enabled, would route nothing.
  if (mask_changed) {
    for (const GraphKey& key : saved.installed) {
      if (saved.routers.count(key) || r.routers_.find(key) != nullptr) continue;
      const Graph chain = r.chain_under_current_mask(key, {});
      if (!chain.empty()) install_router(key, chain);
    }
  }

  for (const std::string& where : unrestorable) {
    r.log(LogLevel::kWarning, "restore: the op of " + where +
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
  for (const auto& [key, graph] : state_->graphs.graphs()) {
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
