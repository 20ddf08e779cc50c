// NativeOpTable (native_op_table.h): a registry's active `_native` ops.

#include "native_op_table.h"

#include "names.h"
#include "retired_native_ops.h"

#include <optional>
#include <stdexcept>
#include <utility>

namespace native_registry::detail {

void NativeOpTable::check_activation(const Graph& chain, const NativeRecords* recorded) const {
  for (const NodePtr& node : chain) {
    auto it = ops_.find(node->node_id);
    if (it != ops_.end()) {
      if (it->second->target_gone()) it->second->check_target(resolve_op(node->key));
      continue;
    }
    // Retired: kept in the store, or undefined (and redefined on the op as
    // it is now, unless a snapshot recorded what it was defined for).
    std::optional<std::string> signature = retired_signature(node->node_id);
    if (!signature && recorded != nullptr) {
      auto record = recorded->find(node->node_id);
      if (record != recorded->end()) signature = record->second.signature;
    }
    if (signature) check_signature(*node, *signature, resolve_op(node->key));
  }
}

void NativeOpTable::activate(const Graph& chain, const NativeRecords* recorded,
                             Released& released) {
  check_activation(chain, recorded);  // all or nothing: no op of the chain changes if one cannot
  for (const NodePtr& node : chain) {
    auto it = ops_.find(node->node_id);
    if (it != ops_.end() && !it->second->target_gone()) {
      // The common case, unless the node was given new callables since.
      if (it->second->node() != node) released.push_back(it->second->rebind(node));
      continue;
    }
    const c10::DispatchKey key = node->key.parsed_dispatch_key;
    if (it != ops_.end()) {
      it->second->activate(node, resolve_op(node->key), key);
      continue;
    }
    std::unique_ptr<NativeOp> op = take_retired(node->node_id);
    if (!op) {
      ops_[node->node_id] = std::make_unique<NativeOp>(node, resolve_op(node->key), key);
      continue;
    }
    try {
      op->activate(node, resolve_op(node->key), key);
    } catch (...) {
      keep_retired(std::move(op));  // as it was
      throw;
    }
    ops_[node->node_id] = std::move(op);
  }
}

void NativeOpTable::retire(const std::string& node_id, Released& released) {
  auto it = ops_.find(node_id);
  if (it == ops_.end()) return;
  std::unique_ptr<NativeOp> op = std::move(it->second);
  ops_.erase(it);
  if (op->held_outside()) {
    released.push_back(op->retire());
    keep_retired(std::move(op));
  } else {
    released.push_back(op->release());  // and the op leaves the dispatcher here
  }
}

void NativeOpTable::retire_all(Released& released) {
  std::vector<std::string> ids;
  for (const auto& entry : ops_) ids.push_back(entry.first);
  for (const std::string& id : ids) retire(id, released);  // undefined, or kept while held
}

NativeRecords NativeOpTable::records() const {
  NativeRecords records;
  for (const auto& [id, op] : ops_) records[id] = {op->node(), op->signature()};
  return records;
}

// ---- invariants -------------------------------------------------------------

void NativeOpTable::check() const {
  auto fail = [](const std::string& what) { throw std::logic_error("invariant: " + what); };
  for (const auto& [id, op] : ops_) {
    if (!op->active()) fail("_native::" + id + " is retired but kept as active");
    if (retired_signature(id)) fail("_native::" + id + " is both active and retired");
  }
  // The store is the process's, its bound what a reclaim leaves: another
  // registry's restore or destruction on another thread, between retiring
  // held ops and its reclaim, can show it over the bound here (a known false
  // alarm of this debugging aid; one thread, or registries used one at a
  // time, never see it: every retire is followed by a reclaim).
  const RetiredCounts retired = retired_counts();
  if (retired.kept > retired.bound) {
    fail("the retired store holds " + std::to_string(retired.kept) + " _native ops, over its bound of " +
         std::to_string(retired.bound));
  }
}

}  // namespace native_registry::detail
