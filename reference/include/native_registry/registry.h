#pragma once

// The override registry: graphs of (cond, impl) nodes per
// (namespace, op, dispatch key), routed through one kernel per graph in
// LibTorch's real dispatcher.
//
// Invariants (each pinned by a test in reference/tests):
//
//  * Registration only records a node; the dispatcher changes at install
//    (install_graph / install_all), at teardown (restore, the destructor) and,
//    under EmptyChainPolicy::kRemoveRouter, when a chain becomes empty.
//  * An installed router captured the kernel that was live at its key just
//    before it went in (OperatorHandle::getComputedKernelForDispatchKey) and
//    calls it directly when no node takes a call, so autograd formulas that
//    call the same op never re-enter the router.
//  * Disable, re-enable, reorder-with-reinstall and re-install of a graph
//    whose router is in place publish a new immutable chain into that router
//    with one atomic store; the dispatcher is not touched. A call reads the
//    chain once, so it sees the old chain or the new one, never a mix, and
//    takes no lock. Chains are interned per router and live as long as its
//    shared state (see "Lifetimes").
//  * Every error is raised before anything changes.
//  * restore(snapshot()) puts back the registry and every dispatch table it
//    touched: routers installed since are removed, routers replaced since are
//    rebuilt on a fresh capture of the op's own kernel, every router routes
//    through the chain it had (by the mask in force now, where that differs
//    from the snapshot's: an installed graph it left with no router gets one
//    where the mask of now lets a node in), and the active
//    `_native` ops are those active at the snapshot (ops of nodes registered
//    or first installed since are retired).
//  * Locking: one plain mutex serialises the control plane. It is never held
//    while code that is not the registry's runs: ordering functions are
//    called before it is taken, log records are emitted and nodes (which
//    own the callables and whatever host objects they hold) are freed after
//    it is released. So a cond, impl, ordering function, runtime check or
//    log handler may call the control plane, and a host runtime's lock (the
//    GIL) is never waited for while it is held.
//  * Lifetimes: a call holds its router's shared state (chains, nodes) for
//    its whole length, and a `_native` op's impl holds its node, so a call
//    during which the control plane tears down its own router finishes on
//    what it started with. A `_native` op torn down is retired (a call
//    raises, naming the override) while anything outside the registry holds
//    it (a torch.ops object, a program recorded with one, hold_native_op()),
//    and undefined once nothing does, so a scope per test leaves no op
//    behind (see Note [Retired _native ops] in src/native_op.h).
//
// Installing or removing a kernel while another thread calls that op is
// unsafe in LibTorch itself; install and teardown inherit that rule.
// Everything else may run while other threads call overridden ops.
//
// Owns: the public class and its contract (the invariants above). The state
// is Registry::Impl's (src/registry_impl.h: four tables behind one lock);
// each operation is defined once, in the src/ file of its concern.
// May not touch: any src/ type but through the forward declarations below.
//
// Who calls what: adopters use registration, filters, ordering,
// installation, teardown, namespaces, queries, settings and the mask. A few
// members are public only for the Python binding and the tests (the binding
// is another library, linked against this API, so a src/ header would not
// reach it), each marked "Not for adopters": replace_node_callables,
// replace_graph, erase_graph, router_id, check_invariants and dump_state.

#include <native_registry/errors.h>
#include <native_registry/explain.h>
#include <native_registry/types.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <set>
#include <string>
#include <vector>

namespace native_registry {

namespace detail {
class Router;
class NativeOp;
struct SnapshotState;
}  // namespace detail

// Everything restore() needs to put a registry back. Opaque; cheap to copy.
class Snapshot {
 public:
  Snapshot();
  ~Snapshot();
  Snapshot(const Snapshot&);
  Snapshot& operator=(const Snapshot&);

  // For a host runtime's cycle collector (Python's tp_traverse): calls
  // `visit` with each node that only this snapshot holds (no copy of the
  // snapshot shares its state, and nothing outside that state holds the
  // node), so that a reference cycle through the snapshot and the host
  // objects such a node owns (a cond whose closure holds the snapshot) can
  // be found and collected. A node held elsewhere too is not visited: it is
  // kept alive from there anyway. Reads the snapshot only; takes no lock.
  void visit_nodes_held_only_here(const std::function<void(const OverrideNode&)>& visit) const;

 private:
  friend class Registry;
  std::shared_ptr<const detail::SnapshotState> state_;
};

// How install_graph treats a router that is already in place.
enum class InstallMode {
  // Publish the graph's current chain into the router in place.
  kUpdate,
  // Remove the router first, then capture and install afresh: the new
  // fallback is whatever kernel is live once the old router is gone.
  kReinstall,
};

class Registry {
 public:
  Registry();
  // Tears down everything this registry put into the dispatcher.
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry the Python binding uses. Never destroyed (its
  // routers would otherwise be removed after LibTorch's own statics).
  static Registry& global();

  // ---- registration ------------------------------------------------------

  // Appends an override to the graph of (lib_symbol, op_symbol, dispatch_key)
  // and returns its node. Installs nothing. Throws InvalidArgumentError for an
  // empty or malformed name, an unknown or refused dispatch key (Meta,
  // CompositeImplicitAutograd, CompositeExplicitAutograd, alias keys), a
  // namespace off the allowlist, an empty impl, an empty cond without
  // unconditional_override, or try_initialize_runtime with it.
  NodePtr register_op_override(const std::string& dsl_name,
                               const std::string& lib_symbol,
                               const std::string& op_symbol,
                               const std::string& dispatch_key, CondFn cond,
                               ImplFn impl, OverrideOptions options = {});

  // Gives a registered node new callables, as writing cond_fn, impl_fn or
  // try_initialize_runtime on upstream's node does, and returns the node that
  // now stands in its graph: a copy of it (same node_id, dsl, key) holding
  // `cond`, `impl` and `options`. Nodes stay immutable, so a running call, a
  // published chain and a snapshot keep the node they hold (restore() brings
  // the old callables back). As upstream's routers take a node's callables
  // when they are built, an installed router and the node's `_native` op
  // switch to the new ones at the graph's next install or republish (a
  // filter change naming it, a reorder with reinstall), with one atomic
  // store each. Checked as register_op_override checks them; the
  // unconditional_override flag cannot change. Throws InvalidArgumentError,
  // changing nothing, if no node of that node_id is in `node`'s graph.
  // Not for adopters: the binding's write of a node's field.
  NodePtr replace_node_callables(const OverrideNode& node, CondFn cond, ImplFn impl,
                                 OverrideOptions options);

  // ---- filters -----------------------------------------------------------

  // What a filter change installs once the filter has changed.
  enum class FilterInstall {
    kInstalled,  // republish the installed routers of the graphs the change names
    kNamed,      // that, then install every graph named, installed before or
                 // not (for a disable: named by the whole filter; for a
                 // re-enable: by the entries), one by one in key order, as
                 // upstream's front end re-registers them
  };
  // Adds the named entries to the filter and installs as `install` says.
  // Unconditional nodes stay enabled unless an UnconditionalMask is alive.
  // If an installed graph that needs a new router (it has none, or its
  // router's op has left the dispatcher, and nodes stay enabled) names an op
  // that does not resolve, nothing changes and OperatorNotFoundError is
  // thrown; under
  // kNamed, a graph of the second step that fails so raises there, the filter
  // change and the graphs installed before it kept (upstream's behaviour).
  void deregister_op_overrides(const Filter& disable,
                               FilterInstall install = FilterInstall::kInstalled);
  // Removes the named entries from the filter and installs likewise.
  void reenable_op_overrides(const Filter& enable,
                             FilterInstall install = FilterInstall::kInstalled);

  // ---- ordering ----------------------------------------------------------

  // Replaces every graph by fn(op_symbol, dispatch_key, graph). If fn throws,
  // or returns nodes that are not from that graph, null nodes or duplicates,
  // the graph is kept and a warning containing "Graph transformation failed"
  // is logged. With reinstall, installed routers of changed graphs are
  // republished. fn runs without the registry's lock, on the graphs as they
  // were when the call began; a graph that changed meanwhile (fn itself
  // registered into it, say) is kept, with the same warning. If fn throws
  // AbortError, nothing changes and the error propagates. Returns the keys
  // of the graphs that changed.
  std::vector<GraphKey> reorder_graphs(const OrderingFn& fn, bool reinstall = false);
  // What reorder_graphs installs once the graphs are replaced.
  enum class ReorderInstall {
    kNothing,
    kInstalled,  // republish the installed routers of changed graphs (reinstall=true)
    kChanged,    // install every changed graph, installed before or not, as
                 // upstream's reregister_overrides=True does
  };
  // The same; all or nothing: if a graph to install names an op that does
  // not resolve, no graph changes and OperatorNotFoundError is thrown.
  std::vector<GraphKey> reorder_graphs(const OrderingFn& fn, ReorderInstall install);

  // Sets the graph of `key` to `nodes`: nodes of that key registered with
  // this registry, in any order, each at most once (an empty list empties
  // it). For layers that keep graph structure themselves (the upstream
  // compatibility module). Installs nothing. Throws InvalidArgumentError,
  // changing nothing, for a null, foreign, unknown or repeated node.
  // Not for adopters: upstream_compat.py's graph dict.
  void replace_graph(const GraphKey& key, const Graph& nodes);
  // Forgets the graph of `key` (its index entries too), as deleting a graph
  // from upstream's dict does; a router already installed stays, and so do
  // its `_native` ops. For the same layers; replace_graph brings it back.
  // Not for adopters: upstream_compat.py's graph dict.
  void erase_graph(const GraphKey& key);

  // ---- installation ------------------------------------------------------

  // Brings the router of `key` in line with its graph: installs one if the
  // enabled chain is non-empty and none is there, publishes the chain into
  // the one in place, or, for an empty chain, leaves none (an existing one
  // follows the EmptyChainPolicy, except in kReinstall mode, where it is gone).
  // Throws InvalidArgumentError for a key no registration could have made,
  // or whose router would take a CompositeImplicitAutograd op out of
  // autograd (the refusal registration gives, for an op defined since), and
  // OperatorNotFoundError if the op is not in the dispatcher, or
  // OperatorChangedError if it was defined again with another schema since a
  // node of the graph was first installed. Each changes nothing.
  void install_graph(const GraphKey& key, InstallMode mode = InstallMode::kUpdate);
  // install_graph for every graph, in key order. Nothing is installed unless
  // every op that needs a new router resolves.
  void install_all();
  // Takes the router of `key` out of the dispatcher, if one is there, and
  // leaves the graph (which keeps its nodes) uninstalled: what destroying an
  // installed router's library does upstream. Its `_native` ops stay active.
  void uninstall_graph(const GraphKey& key);

  // ---- teardown ----------------------------------------------------------

  Snapshot snapshot() const;
  void restore(const Snapshot& snapshot);

  // ---- namespaces --------------------------------------------------------

  // The allowlist starts as {"aten"}. `_native` can never be on it.
  void allow_namespace(const std::string& lib_symbol);
  void disallow_namespace(const std::string& lib_symbol);
  bool is_namespace_allowed(const std::string& lib_symbol) const;
  std::set<std::string> allowed_namespaces() const;

  // ---- queries -----------------------------------------------------------

  // Sorted op symbols `dsl_name` overrides in `lib_symbol`.
  std::vector<std::string> get_dsl_operations(
      const std::string& dsl_name, const std::string& lib_symbol = "aten") const;
  std::vector<GraphKey> graph_keys() const;
  Graph graph(const GraphKey& key) const;  // empty if there is none
  // Whether the filters (and the unconditional mask) leave the node enabled.
  bool is_enabled(const OverrideNode& node) const;
  RouterState router_state(const GraphKey& key) const;
  // Keys whose router is in the dispatcher (active or dormant).
  std::vector<GraphKey> router_keys() const;
  // Tells the router of `key` from any other before or after it at that key
  // (Router ids are unique for the life of the process); 0 if there is none.
  // Not for adopters: the tests, and the binding's view of router identity.
  uint64_t router_id(const GraphKey& key) const;
  // The chain the router of `key` routes through now (empty if none).
  Graph published_chain(const GraphKey& key) const;
  Filter filters() const;  // the disabled entries, each sorted
  // Graph keys by dsl name / op symbol / dispatch key, in registration order.
  std::map<std::string, std::vector<GraphKey>> graphs_by_dsl_name() const;
  std::map<std::string, std::vector<GraphKey>> graphs_by_op_symbol() const;
  std::map<std::string, std::vector<GraphKey>> graphs_by_dispatch_key() const;

  // ---- explaining a call --------------------------------------------------

  // What this registry would do with a call of `op` on `stack` (its boxed
  // arguments, as a router receives them): the graph the call reaches, each
  // node in routing order with what decided it, and the kernel that would
  // run (see Explanation). `dispatch_key` empty: the highest-priority key of
  // the call's dispatch key set (computed from the arguments as the
  // dispatcher does, this thread's included and excluded keys applied) at
  // which the op has a graph here. Asks the coverage check and the conds
  // the call would ask, with the same code; runs no impl and asks no
  // runtime check. A `_native::<node_id>` op: its node, whose impl a call
  // runs directly. Throws InvalidArgumentError, changing nothing, when no
  // graph of the op is at `dispatch_key` (or at any key of the call), or
  // when no node of this registry has the `_native` op's node_id; a cond's
  // error that must propagate (set_must_propagate) propagates.
  Explanation explain(const c10::OperatorHandle& op, const Stack& stack,
                      const std::string& dispatch_key = "") const;
  // The same for the op named "ns::name" or "ns::name.overload";
  // OperatorNotFoundError, naming it, when the dispatcher has no such op.
  Explanation explain(const std::string& op_name, const Stack& stack,
                      const std::string& dispatch_key = "") const;

  // ---- settings ----------------------------------------------------------

  void set_empty_chain_policy(EmptyChainPolicy policy);
  EmptyChainPolicy empty_chain_policy() const;
  // The coverage check every router of this registry asks first (see
  // CoverageCheck); an empty function unsets it, and a router without one
  // pays one atomic load per call. Takes effect at once for the routers in
  // the dispatcher and for every router installed later; not part of a
  // snapshot (a setting, like the policy). Process-wide, set_coverage_checks_enabled
  // (call_hooks.h) turns every registry's check off.
  void set_coverage_check(CoverageCheck check);
  bool has_coverage_check() const;
  CoverageCheck coverage_check() const;  // empty if none is set
  // What this registry's routers do when a chosen impl throws (see
  // ImplErrorPolicy); at once for the routers in place and for those
  // installed later; a setting, not part of a snapshot.
  void set_impl_error_policy(ImplErrorPolicy policy);
  ImplErrorPolicy impl_error_policy() const;
  // Where warnings (a failed ordering function) and info lines go. The
  // default writes warnings to stderr.
  void set_log_sink(LogSink sink);
  // Who frees what operations retire (see ReleaseSink). The default frees
  // it at once, on the thread of the operation, after the lock.
  void set_release_sink(ReleaseSink sink);

  // ---- per-thread disables -----------------------------------------------

  // While alive, this thread's calls see the nodes of this registry that
  // `filter` names as disabled (an unconditional node stays enabled, as under
  // deregister_op_overrides with no mask up); other threads are unaffected,
  // and so is the registry's state: nothing is republished, the dispatcher is
  // not touched. Scopes nest. Must be destroyed on the thread that made it.
  // Throws InvalidArgumentError for a blank entry. A call pays one
  // thread-local load per node it considers for this feature.
  class DisabledInThread {
   public:
    DisabledInThread(const Registry& registry, const Filter& filter);
    ~DisabledInThread();
    DisabledInThread(const DisabledInThread&) = delete;
    DisabledInThread& operator=(const DisabledInThread&) = delete;

   private:
    uint64_t token_;
  };
  // The same as a token: opens a scope on this thread, closed by
  // close_disabled_in_thread(token) on this thread (false, closing nothing,
  // if this thread has no such scope); scopes may close in any order.
  // Not for adopters: the binding's scopes, which a host may end out of order.
  uint64_t open_disabled_in_thread(const Filter& filter) const;
  static bool close_disabled_in_thread(uint64_t token);
  // Whether this thread's open scopes disable `node` (a compile router asks
  // it when it traces).
  static bool is_disabled_in_this_thread(const OverrideNode& node);

  // ---- stats ---------------------------------------------------------------

  // Off by default. On, every router of this registry counts each call into
  // its nodes' counters and its graph's (see RoutingStats); off, a call pays
  // one relaxed atomic load for it. Counts are exact under any number of
  // threads. Takes effect at once; a setting, not part of a snapshot.
  void set_collect_stats(bool collect);
  bool collect_stats() const;
  RoutingStats stats() const;
  void reset_stats();  // zeroes every count; collection stays as it was

  // ---- self-checks -------------------------------------------------------

  // Throws std::logic_error naming the first broken invariant of the
  // registry's state (graphs, indexes, filters, routers, `_native` ops), as
  // PyTorch's OperatorEntry::checkInvariants does. For tests: the stress,
  // fuzz and model tests call it after every step.
  void check_invariants() const;
  // The whole state in a readable form, for failure messages.
  // Not for adopters (both self-checks): the tests.
  std::string dump_state() const;

  // While alive, unconditional nodes that the filters disable are masked too
  // (upstream's `_unconditional_masked()`): the reference computation a test
  // compares an unconditional override against. Nests. Republishes, on
  // entry and on exit, the installed routers of the graphs holding such a
  // node, except a router whose op has left the dispatcher (no call reaches
  // it). Entry is all or nothing (OperatorNotFoundError, nothing changed);
  // exit puts back each graph it can, and logs a warning for one it cannot.
  class UnconditionalMask {
   public:
    explicit UnconditionalMask(Registry& registry);
    ~UnconditionalMask();
    UnconditionalMask(const UnconditionalMask&) = delete;
    UnconditionalMask& operator=(const UnconditionalMask&) = delete;

   private:
    Registry& registry_;
  };

 private:
  // The state: reference/src/registry_impl.h.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The `_native::<node_id>` op of an override, held: while the returned
// handle lives, the op stays defined even once its override is torn down
// (it then raises when called, naming the override), as for a program
// recorded with it. Null if no such op is defined now. A bare handle from
// c10::Dispatcher::findSchema is valid only while the override is
// installed: the teardown that retires an op nothing holds undefines it.
std::shared_ptr<const c10::OperatorHandle> hold_native_op(const std::string& node_id);

}  // namespace native_registry
