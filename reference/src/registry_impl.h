#pragma once

// Registry::Impl: the registry's state, as four tables behind one lock, and
// what the operations share over them. Each table owns its invariants and
// checks them (check()); check_invariants() composes those checks with the
// one invariant across tables (a router routes only through nodes whose
// `_native` op is active):
//
//   graph_table.h      graphs, their three indexes, the namespace allowlist
//   filter_set.h       the disabled entries, the unconditional mask: whether
//                      a node is enabled
//   router_table.h     routers in the dispatcher, installed keys, the
//                      empty-chain policy
//   native_op_table.h  active `_native` ops, their hand-off to the retired
//                      store (see Note [Retired _native ops] in native_op.h)
//
// Each public operation (include/native_registry/registry.h) is defined
// once, in the file of its concern, over these tables:
//
//   registry.cpp       the lifetime: serial, teardown, the process-wide instance
//   control_scope.cpp  the lock's scope, deferred log records and releases; settings
//   graphs.cpp         registration, graph surgery, namespaces, graph queries
//   filters.cpp        disable / re-enable, the unconditional mask, enabled chains
//   ordering.cpp       reorder_graphs and its checks of an ordering's result
//   install.cpp        routers and `_native` ops into the dispatcher; router queries
//   snapshot.cpp       snapshot() and restore()
//   self_check.cpp     check_invariants() and dump_state()
//   explain.cpp        explain(): what a call would do, read under the lock, asked after it
//
// Locking: mutex_ serialises the control plane and is never held while user
// code runs: a ControlScope holds it and runs log handlers and frees what
// the operation dropped (a node's callables may be host objects) once it is
// released (see "Locking" in registry.h).

#include "filter_set.h"
#include "graph_table.h"
#include "native_op_table.h"
#include "router_table.h"

#include <native_registry/registry.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace native_registry {

namespace detail {

// What a Snapshot holds: immutable once taken, shared by its copies. The
// tables' state as it was (routers and `_native` ops as records: they live
// in the dispatcher), and the mask in force then.
struct SnapshotState {
  uint64_t owner = 0;  // the registry's serial, not its address, which a later one may reuse
  GraphTable graphs;
  FilterEntries filters;
  std::set<GraphKey> installed;
  struct RouterRecord {
    uint64_t router_id;
    Graph chain;  // what it routed through, which may lag its graph
    // Its op had left the dispatcher already (defined again since its
    // install): the op's kernels of now answered, not this router.
    bool op_gone = false;
  };
  std::map<GraphKey, RouterRecord> routers;
  int unconditional_mask_depth = 0;
  NativeRecords native_nodes;  // the active `_native` ops, by node_id
};

}  // namespace detail

struct Registry::Impl {
  using FilterInstall = Registry::FilterInstall;

  Impl();

  // Holds mutex_ for a control-plane operation and runs what must not run
  // under it once it is released: log records, then the release of
  // whatever the operation dropped.
  class ControlScope;
  struct Pending;

  // ---- across the tables; everything below expects mutex_ held (a ControlScope alive)
  // The nodes of the graph of `key` that are enabled, in graph order.
  Graph enabled_chain(const GraphKey& key) const;
  // What a router restored from a snapshot taken under another unconditional
  // mask routes through: the nodes of `published` still enabled, plus the
  // graph's unconditional nodes the filters disable, where they are enabled
  // now; in graph order.
  Graph chain_under_current_mask(const GraphKey& key, const Graph& published) const;
  // Installs each graph `named` names, in key order (FilterInstall::kNamed).
  void install_named(const Filter& named);
  // Republishes the installed routers of `keys`; all or nothing: each key
  // passes check_publish before any is published.
  void republish_installed(const std::set<GraphKey>& keys);
  // The installed keys whose enabled chain an UnconditionalMask changes: the
  // graphs holding an unconditional node the filters name.
  std::set<GraphKey> keys_the_mask_changes() const;
  void install_graph_locked(const GraphKey& key, InstallMode mode);
  // install_graph for each key, all or nothing likewise.
  void install_graphs_locked(const std::vector<GraphKey>& keys);
  // Puts `chain` at `key` as the router table says (RouterTable::step_for),
  // its `_native` ops activated first; throws before any change.
  void publish(const GraphKey& key, const Graph& chain, InstallMode mode);
  // Throws what publish(key, chain, mode) would throw, changing nothing: so
  // that an operation publishing several keys checks them all first (a
  // stale router's key needs its op again, like a key with no router).
  void check_publish(const GraphKey& key, const Graph& chain, InstallMode mode) const;
  // Queued while mutex_ is held, emitted once it is released.
  void log(LogLevel level, const std::string& message) const;
  // Freed once mutex_ is released.
  void defer_release(std::shared_ptr<const void> object) const;
  detail::Released& released() const;
  // Emits at once; the caller does not hold mutex_.
  void log_unlocked(LogLevel level, const std::string& message) const;

  // ---- the state
  // Unique for the life of the process: tells this registry's snapshots from
  // those of a registry gone before it at the same address, and its nodes
  // from another's (OverrideNode::registry_serial).
  const uint64_t serial_;
  mutable std::mutex mutex_;  // serialises the control plane; never held while user code runs
  mutable Pending* pending_ = nullptr;  // the live ControlScope's, under mutex_
  detail::GraphTable graphs_;
  detail::FilterSet filters_;
  detail::RouterTable routers_;
  detail::NativeOpTable native_ops_;
  LogSink log_sink_;
  ReleaseSink release_sink_;
};

struct Registry::Impl::Pending {
  std::vector<std::pair<LogLevel, std::string>> logs;
  detail::Released released;
};

class Registry::Impl::ControlScope {
 public:
  explicit ControlScope(const Impl& registry) : registry_(registry), lock_(registry.mutex_) {
    registry_.pending_ = &pending_;
  }
  // Releases the lock, then emits the queued log records through the sink
  // that was set when they were queued, then frees what was dropped.
  ~ControlScope() noexcept(false);  // see control_scope.cpp
  ControlScope(const ControlScope&) = delete;
  ControlScope& operator=(const ControlScope&) = delete;

  static void emit(const LogSink& sink, LogLevel level, const std::string& message);

 private:
  const Impl& registry_;
  Pending pending_;  // destroyed after lock_ is released: declared first
  std::unique_lock<std::mutex> lock_;
};

}  // namespace native_registry
