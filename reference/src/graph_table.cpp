// GraphTable (graph_table.h): the graphs, their indexes and the allowlist.

#include "graph_table.h"

#include "names.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace native_registry::detail {

namespace {

void append_once(std::vector<GraphKey>& keys, const GraphKey& key) {
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
}

}  // namespace

const Graph* GraphTable::find(const GraphKey& key) const {
  auto it = graphs_.find(key);
  return it == graphs_.end() ? nullptr : &it->second;
}

void GraphTable::append(const NodePtr& node) {
  const GraphKey& key = node->key;
  graphs_[key].push_back(node);
  append_once(by_dsl_name_[node->dsl_name], key);
  append_once(by_op_symbol_[key.op_symbol], key);
  append_once(by_dispatch_key_[key.dispatch_key], key);
}

Graph GraphTable::replace(const GraphKey& key, Graph nodes) {
  // Registration indexed these nodes, but an erase may have dropped them since.
  for (const NodePtr& node : nodes) append_once(by_dsl_name_[node->dsl_name], key);
  if (!nodes.empty()) {
    append_once(by_op_symbol_[key.op_symbol], key);
    append_once(by_dispatch_key_[key.dispatch_key], key);
  }
  return std::exchange(graphs_[key], std::move(nodes));
}

Graph GraphTable::erase(const GraphKey& key) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) return {};
  Graph erased = std::move(it->second);
  graphs_.erase(it);
  for (Index* index : {&by_dsl_name_, &by_op_symbol_, &by_dispatch_key_}) {
    for (auto entry = index->begin(); entry != index->end();) {
      std::vector<GraphKey>& keys = entry->second;
      keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
      entry = keys.empty() ? index->erase(entry) : std::next(entry);
    }
  }
  return erased;
}

std::set<GraphKey> GraphTable::keys_named_by(const Filter& filter) const {
  std::set<GraphKey> keys;
  auto collect = [&](const Index& index, const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      auto it = index.find(name);
      if (it != index.end()) keys.insert(it->second.begin(), it->second.end());
    }
  };
  collect(by_dsl_name_, filter.dsl_names);
  collect(by_op_symbol_, filter.op_symbols);
  collect(by_dispatch_key_, filter.dispatch_keys);
  return keys;
}

// ---- invariants -------------------------------------------------------------
void GraphTable::check(uint64_t registry_serial) const {
  auto fail = [](const std::string& what) { throw std::logic_error("invariant: " + what); };
  for (const auto& [key, graph] : graphs_) {
    if (key.parsed_dispatch_key == c10::DispatchKey::Undefined) {
      fail("key " + key.to_string() + " is held unparsed");
    }
    std::set<const OverrideNode*> seen;
    for (const NodePtr& node : graph) {
      if (!node) fail("graph " + key.to_string() + " holds a null node");
      if (node->key.parsed_dispatch_key == c10::DispatchKey::Undefined) {
        fail("node " + node->node_id + " holds its key unparsed");
      }
      if (!(node->key == key)) fail("node " + node->node_id + " is in the graph of " + key.to_string());
      if (node->registry_serial != registry_serial) fail("node " + node->node_id + " is another registry's");
      if (!seen.insert(node.get()).second) fail("node " + node->node_id + " is twice in its graph");
      if (!node->cond || !node->impl) fail("node " + node->node_id + " lacks a cond or an impl");
    }
    if (!graph.empty()) {
      for (const auto& [index, name] : {std::pair{&by_dispatch_key_, key.dispatch_key},
                                         std::pair{&by_op_symbol_, key.op_symbol}}) {
        auto it = index->find(name);
        if (it == index->end() || std::find(it->second.begin(), it->second.end(), key) ==
                                      it->second.end()) {
          fail("graph " + key.to_string() + " is missing from an index");
        }
      }
    }
  }
  for (const Index* index : {&by_dsl_name_, &by_op_symbol_, &by_dispatch_key_}) {
    for (const auto& [name, keys] : *index) {
      for (const GraphKey& key : keys) {
        if (!graphs_.count(key)) fail("index entry " + name + " names no graph: " + key.to_string());
      }
    }
  }
  if (allowlist_.count(kNativeNamespace)) fail("_native is on the allowlist");
}

}  // namespace native_registry::detail
