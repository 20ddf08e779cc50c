#pragma once

// Registry::Impl: the registry's state and every operation on it. The public
// class (include/native_registry/registry.h) only forwards here, so adopters'
// code sees no member, lock or router type. Each concern lives in a file of
// its own, all working on this one struct:
//
//   registry.cpp       the public face: forwarders, the lifetime, the mask
//   control_scope.cpp  the lock, deferred log records and releases, settings
//   graphs.cpp         registration, the graph model, graph surgery, queries,
//                      namespaces
//   filters.cpp        disable / re-enable and what a node's enabled state is
//   ordering.cpp       reorder_graphs and its checks of an ordering's result
//   install.cpp        routers and `_native` ops into the dispatcher
//   snapshot.cpp       snapshot() and restore()
//   self_check.cpp     check_invariants() and dump_state()
//
// Invariants of the state (check_invariants() tests each one):
//  * every node of graphs[key] has node->key == key, this registry's serial,
//    a cond and an impl, and appears once in that graph;
//  * every non-empty graph is indexed under its op symbol and dispatch key,
//    and every index entry names a graph that exists;
//  * a router exists only for a key in `installed`; it routes only through
//    that key's nodes of this registry, each with its `_native` op active;
//  * `_native` is never on the allowlist; the mask depth is never negative;
//  * native_ops_ holds active ops only, none of them in the retired store.
//    A `_native` op a teardown retires is undefined at once unless something
//    outside holds it, and then kept in the process-wide retired store
//    (retired_native_ops.h) until nothing does: the `_native` ops defined in
//    the process are the active ones plus the store's, which holds at most
//    max(kRetiredSweepFloor, 2 x the ops held at its last sweep). So a
//    scope per test leaves no op behind, and memory and time per scope stay
//    flat.

#include <native_registry/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace native_registry {

namespace detail {

// The disabled entries. A node they name is disabled (see is_enabled_locked
// for the unconditional exemption).
struct FilterState {
  std::set<std::string> dsl_names, op_symbols, dispatch_keys;
  bool matches(const OverrideNode& node) const;
  Filter as_filter() const;  // sorted, as Registry::filters() gives it
};

using Index = std::map<std::string, std::vector<GraphKey>>;

// Everything a snapshot captures and restore puts back, besides routers and
// `_native` ops (which live in the dispatcher): copied whole.
struct ControlState {
  std::map<GraphKey, Graph> graphs;
  Index by_dsl_name, by_op_symbol, by_dispatch_key;  // graph keys, in registration order
  FilterState filters;                                // the disabled entries
  std::set<std::string> allowlist{"aten"};
  std::set<GraphKey> installed;  // graphs install_graph has taken charge of
};

// What a Snapshot holds: immutable once taken, shared by its copies.
struct SnapshotState {
  uint64_t owner = 0;  // the registry's serial, not its address, which a later one may reuse
  ControlState control;
  struct RouterRecord {
    uint64_t router_id;
    Graph chain;  // what it routed through, which may lag its graph
    // Its op had left the dispatcher already (defined again since its
    // install): the op's kernels of now answered, not this router.
    bool op_gone = false;
  };
  std::map<GraphKey, RouterRecord> routers;
  int unconditional_mask_depth = 0;  // in force when the snapshot was taken
  // Nodes whose `_native` op was active, by node_id, each with the
  // signature its op was defined with: a restore that must define the op
  // again (undefined since) refuses a target of another schema, as the op
  // itself would.
  struct NativeRecord {
    NodePtr node;
    std::string signature;
  };
  std::map<std::string, NativeRecord> native_nodes;
};

using NativeRecords = std::map<std::string, SnapshotState::NativeRecord>;

}  // namespace detail

struct Registry::Impl {
  using ControlState = detail::ControlState;
  using FilterState = detail::FilterState;
  using Index = detail::Index;
  using FilterInstall = Registry::FilterInstall;

  Impl();
  // Tears down everything this registry put into the dispatcher.
  ~Impl();

  // Holds mutex_ for a control-plane operation and runs what must not run
  // under it once it is released: log records, then the release of
  // whatever the operation retired (see "Locking" in registry.h).
  class ControlScope;
  struct Pending;

  // ---- the operations the public class forwards to (registry.h says what each does)
  NodePtr register_op_override(const std::string& dsl_name, const std::string& lib_symbol,
                               const std::string& op_symbol, const std::string& dispatch_key,
                               CondFn cond, ImplFn impl, OverrideOptions options);
  NodePtr replace_node_callables(const OverrideNode& node, CondFn cond, ImplFn impl,
                                 OverrideOptions options);
  void deregister_op_overrides(const Filter& disable, FilterInstall install);
  void reenable_op_overrides(const Filter& enable, FilterInstall install);
  std::vector<GraphKey> reorder_graphs(const OrderingFn& fn, ReorderInstall install);
  void replace_graph(const GraphKey& key, const Graph& nodes);
  void erase_graph(const GraphKey& key);
  void install_graph(const GraphKey& key, InstallMode mode);
  void install_all();
  void uninstall_graph(const GraphKey& key);
  std::shared_ptr<const detail::SnapshotState> snapshot() const;
  void restore(const detail::SnapshotState* snapshot);
  void allow_namespace(const std::string& lib_symbol);
  void disallow_namespace(const std::string& lib_symbol);
  bool is_namespace_allowed(const std::string& lib_symbol) const;
  std::set<std::string> allowed_namespaces() const;
  std::vector<std::string> get_dsl_operations(const std::string& dsl_name,
                                              const std::string& lib_symbol) const;
  std::vector<GraphKey> graph_keys() const;
  Graph graph(const GraphKey& key) const;
  bool is_enabled(const OverrideNode& node) const;
  RouterState router_state(const GraphKey& key) const;
  std::vector<GraphKey> router_keys() const;
  uint64_t router_id(const GraphKey& key) const;
  Graph published_chain(const GraphKey& key) const;
  Filter filters() const;
  Index graphs_by_dsl_name() const;
  Index graphs_by_op_symbol() const;
  Index graphs_by_dispatch_key() const;
  void set_empty_chain_policy(EmptyChainPolicy policy);
  EmptyChainPolicy empty_chain_policy() const;
  void set_log_sink(LogSink sink);
  void set_release_sink(ReleaseSink sink);
  void check_invariants() const;
  std::string dump_state() const;
  // The unconditional mask (Registry::UnconditionalMask): one level more or less.
  void push_unconditional_mask();
  void pop_unconditional_mask();

  // ---- everything below expects mutex_ held (a ControlScope alive)
  bool is_enabled_locked(const OverrideNode& node) const;
  Graph enabled_chain(const GraphKey& key) const;
  // What a router restored from a snapshot taken under another unconditional
  // mask routes through: the nodes of `published` still enabled, plus the
  // graph's unconditional nodes the filters disable, where they are enabled
  // now; in graph order.
  Graph chain_under_current_mask(const GraphKey& key, const Graph& published) const;
  std::set<GraphKey> keys_named_by(const Filter& filter) const;
  // After a filter change: installs as `install` says (Registry::FilterInstall);
  // under kNamed, the graphs `named` names.
  void follow_filter_change(const Filter& change, const Filter& named, FilterInstall install);
  void republish_installed(const std::set<GraphKey>& keys);
  void republish_all_installed();
  void install_graph_locked(const GraphKey& key, InstallMode mode);
  // install_graph for each key, all or nothing: every op that needs a new
  // router resolves before any is installed.
  void install_graphs_locked(const std::vector<GraphKey>& keys);
  c10::OperatorHandle resolve(const GraphKey& key) const;
  // resolve() for a key about to get a new router: also refuses, as
  // registration does, a key whose router would take a
  // CompositeImplicitAutograd op out of autograd (InvalidArgumentError), for
  // an op defined since registration.
  c10::OperatorHandle resolve_for_router(const GraphKey& key) const;
  // Throws what ensure_native_ops would for `chain`, changing nothing.
  void check_native_ops(const Graph& chain, const detail::NativeRecords* recorded) const;
  void publish(const GraphKey& key, const Graph& chain, InstallMode mode);
  void remove_router(const GraphKey& key);
  // Activates the `_native` op of every node of `chain` (defines it if it is
  // not defined, takes it back from the retired store if kept there); all or
  // nothing: throws OperatorChangedError, changing nothing, if the op of one
  // was defined for a schema its target no longer has (an op undefined
  // since: the signature `recorded` for it, when a snapshot recorded one).
  void ensure_native_ops(const Graph& chain, const detail::NativeRecords* recorded = nullptr);
  // Retires the active op of `node_id`: undefined at once when nothing
  // outside holds it, else kept in the retired store.
  void retire_native_op(const std::string& node_id);
  // Queued while mutex_ is held, emitted once it is released.
  void log(LogLevel level, const std::string& message) const;
  // Freed once mutex_ is released.
  void defer_release(std::shared_ptr<const void> object) const;
  // Emits at once; the caller does not hold mutex_.
  void log_unlocked(LogLevel level, const std::string& message) const;

  // ---- the state
  // Unique for the life of the process: tells this registry's snapshots from
  // those of a registry gone before it at the same address, and its nodes
  // from another's (OverrideNode::registry_serial).
  const uint64_t serial_;
  mutable std::mutex mutex_;  // serialises the control plane; never held while user code runs
  mutable Pending* pending_ = nullptr;  // the live ControlScope's, under mutex_
  ControlState state_;
  int unconditional_mask_depth_ = 0;
  EmptyChainPolicy empty_chain_policy_ = EmptyChainPolicy::kKeepDormantRouter;
  LogSink log_sink_;
  ReleaseSink release_sink_;
  std::map<GraphKey, std::unique_ptr<detail::Router>> routers_;
  // By node_id: the active `_native` ops of this registry's nodes (retired
  // ones are undefined or in the retired store).
  std::map<std::string, std::unique_ptr<detail::NativeOp>> native_ops_;
};

struct Registry::Impl::Pending {
  std::vector<std::pair<LogLevel, std::string>> logs;
  std::vector<std::shared_ptr<const void>> released;
};

class Registry::Impl::ControlScope {
 public:
  explicit ControlScope(const Impl& registry) : registry_(registry), lock_(registry.mutex_) {
    registry_.pending_ = &pending_;
  }
  // Releases the lock, then emits the queued log records through the sink
  // that was set when they were queued, then frees what was retired.
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
