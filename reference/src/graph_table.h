#pragma once

// GraphTable: the registry's graphs, by (namespace, op symbol, dispatch key);
// the three indexes that name them by dsl name, op symbol and dispatch key;
// and the allowlist of namespaces an override may target.
//
// Invariants (check() throws std::logic_error naming the first one broken):
//  * every key it holds was admitted (detail::admitted_key: its dispatch key
//    parsed once, at the boundary);
//  * every node of the graph of `key` has node->key == key, the registry's
//    serial, a cond and an impl, and appears once in that graph;
//  * every non-empty graph is indexed under its op symbol and dispatch key,
//    and every index entry names a graph that exists (each key once per
//    name, in registration order);
//  * `_native` is never on the allowlist.
//
// Owns: the graphs, the indexes, the allowlist. May not touch: the
// dispatcher, routers, `_native` ops, filters. The registry's lock guards it;
// what it drops it hands back, for the caller to free once the lock is gone.

#include <native_registry/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace native_registry::detail {

using Index = std::map<std::string, std::vector<GraphKey>>;

class GraphTable {
 public:
  const std::map<GraphKey, Graph>& graphs() const { return graphs_; }
  // The graph of `key`; null when the table has none.
  const Graph* find(const GraphKey& key) const;
  // Appends `node` (registered: its key admitted, its id minted) to the
  // graph of its key and indexes it.
  void append(const NodePtr& node);
  // Sets the graph of `key` (admitted) to `nodes`, which are of that key,
  // and indexes them; returns the graph replaced (empty if none).
  Graph replace(const GraphKey& key, Graph nodes);
  // Drops the graph of `key` and its index entries; returns it (empty if none).
  Graph erase(const GraphKey& key);
  // The keys of the graphs the entries of `filter` name, through the indexes.
  std::set<GraphKey> keys_named_by(const Filter& filter) const;
  const Index& by_dsl_name() const { return by_dsl_name_; }
  const Index& by_op_symbol() const { return by_op_symbol_; }
  const Index& by_dispatch_key() const { return by_dispatch_key_; }

  bool allows(const std::string& lib_symbol) const { return allowlist_.count(lib_symbol) > 0; }
  // The caller has refused `_native` (InvalidArgumentError naming it).
  void allow(const std::string& lib_symbol) { allowlist_.insert(lib_symbol); }
  void disallow(const std::string& lib_symbol) { allowlist_.erase(lib_symbol); }
  const std::set<std::string>& allowlist() const { return allowlist_; }

  void check(uint64_t registry_serial) const;

 private:
  std::map<GraphKey, Graph> graphs_;
  Index by_dsl_name_, by_op_symbol_, by_dispatch_key_;
  std::set<std::string> allowlist_{"aten"};
};

}  // namespace native_registry::detail
