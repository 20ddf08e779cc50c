// Self-checks for tests: check_invariants() throws naming the first broken
// invariant of registry_impl.h; dump_state() prints the whole state for a
// failure message. Read-only: nothing here changes the registry.

#include "registry_impl.h"

#include "names.h"
#include "native_op.h"
#include "retired_native_ops.h"
#include "router.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace native_registry {

// ---- self-checks ------------------------------------------------------------

void Registry::Impl::check_invariants() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto fail = [](const std::string& what) { throw std::logic_error("invariant: " + what); };
  // Every key the registry holds was admitted: its dispatch key parsed once.
  auto admitted = [&fail](const GraphKey& key) {
    if (key.parsed_dispatch_key == c10::DispatchKey::Undefined) {
      fail("key " + key.to_string() + " is held unparsed");
    }
  };
  for (const GraphKey& key : state_.installed) admitted(key);
  for (const auto& [key, router] : routers_) admitted(key);
  for (const auto& [key, graph] : state_.graphs) {
    admitted(key);
    std::set<const OverrideNode*> seen;
    for (const NodePtr& node : graph) {
      if (!node) fail("graph " + key.to_string() + " holds a null node");
      admitted(node->key);
      if (!(node->key == key)) fail("node " + node->node_id + " is in the graph of " + key.to_string());
      if (node->registry_serial != serial_) fail("node " + node->node_id + " is another registry's");
      if (!seen.insert(node.get()).second) fail("node " + node->node_id + " is twice in its graph");
      if (!node->cond || !node->impl) fail("node " + node->node_id + " lacks a cond or an impl");
    }
    if (!graph.empty()) {
      for (const auto& [index, name] : {std::pair{&state_.by_dispatch_key, key.dispatch_key},
                                         std::pair{&state_.by_op_symbol, key.op_symbol}}) {
        auto it = index->find(name);
        if (it == index->end() || std::find(it->second.begin(), it->second.end(), key) ==
                                      it->second.end()) {
          fail("graph " + key.to_string() + " is missing from an index");
        }
      }
    }
  }
  for (const Index* index : {&state_.by_dsl_name, &state_.by_op_symbol, &state_.by_dispatch_key}) {
    for (const auto& [name, keys] : *index) {
      for (const GraphKey& key : keys) {
        if (!state_.graphs.count(key)) fail("index entry " + name + " names no graph: " + key.to_string());
      }
    }
  }
  if (unconditional_mask_depth_ < 0) fail("negative unconditional mask depth");
  if (state_.allowlist.count(detail::kNativeNamespace)) fail("_native is on the allowlist");
  for (const auto& [key, router] : routers_) {
    if (!state_.installed.count(key)) fail("router of " + key.to_string() + " for a graph never installed");
    // The published chain may lag the graph (registration and a reorder
    // without reinstall publish nothing), but it holds only this key's nodes
    // of this registry, each with its `_native` op active.
    for (const NodePtr& node : router->published()) {
      if (!(node->key == key) || node->registry_serial != serial_) {
        fail("router of " + key.to_string() + " routes through foreign node " + node->node_id);
      }
      auto op = native_ops_.find(node->node_id);
      if (op == native_ops_.end() || op->second->node() != node) {
        fail("node " + node->node_id + " is routed but its _native op is not active");
      }
    }
  }
  // `_native` ops: the active ones here, the retired ones held outside in
  // the store, within its bound; no other is defined (registry_impl.h).
  for (const auto& [id, native_op] : native_ops_) {
    if (!native_op->active()) fail("_native::" + id + " is retired but kept as active");
    if (detail::retired_signature(id)) fail("_native::" + id + " is both active and retired");
  }
  const detail::RetiredCounts retired = detail::retired_counts();
  if (retired.kept > retired.bound) {
    fail("the retired store holds " + std::to_string(retired.kept) + " _native ops, over its bound of " +
         std::to_string(retired.bound));
  }
}

std::string Registry::Impl::dump_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  for (const auto& [key, graph] : state_.graphs) {
    out << key.to_string() << (state_.installed.count(key) ? " installed" : "");
    auto router = routers_.find(key);
    if (router != routers_.end()) {
      out << " router#" << router->second->id() << " chain=[";
      for (const NodePtr& node : router->second->published()) out << node->node_id << " ";
      out << "]";
    }
    out << "\n";
    for (const NodePtr& node : graph) {
      out << "  " << node->node_id << " dsl=" << node->dsl_name
          << (is_enabled_locked(*node) ? "" : " disabled")
          << (node->options.unconditional_override ? " unconditional" : "") << "\n";
    }
  }
  auto join = [](const std::set<std::string>& names) {
    std::string joined;
    for (const std::string& name : names) joined += (joined.empty() ? "" : ",") + name;
    return joined;
  };
  out << "disabled: dsl=[" << join(state_.filters.dsl_names) << "] op=[" << join(state_.filters.op_symbols)
      << "] key=[" << join(state_.filters.dispatch_keys) << "] mask=" << unconditional_mask_depth_
      << " allow=[" << join(state_.allowlist) << "] native_ops=" << native_ops_.size()
      << " retired_kept=" << detail::retired_counts().kept << "\n";
  return out.str();
}

}  // namespace native_registry
