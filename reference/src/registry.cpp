#include <native_registry/registry.h>

#include "fork_guard.h"
#include "names.h"
#include "native_op.h"
#include "router.h"

#include <algorithm>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace native_registry {

using detail::NativeOp;
using detail::quoted;
using detail::Router;

// ---- snapshot ---------------------------------------------------------------

struct Snapshot::State {
  uint64_t owner = 0;  // the registry's serial, not its address, which a later one may reuse
  Registry::ControlState control;
  struct RouterRecord {
    uint64_t router_id;
    Graph chain;  // what it routed through, which may lag its graph
  };
  std::map<GraphKey, RouterRecord> routers;
  int unconditional_mask_depth = 0;  // in force when the snapshot was taken
  std::map<std::string, NodePtr> native_nodes;  // nodes whose `_native` op was active
};

Snapshot::Snapshot() = default;
Snapshot::~Snapshot() = default;
Snapshot::Snapshot(const Snapshot&) = default;
Snapshot& Snapshot::operator=(const Snapshot&) = default;

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
  for (const auto& [id, node] : state_->native_nodes) count(node);
  for (const auto& [raw, entry] : held) {
    if (entry.first->use_count() == entry.second) visit(*raw);
  }
}

// ---- helpers ----------------------------------------------------------------

namespace {

std::atomic<uint64_t> g_next_node_serial{0};

// A `_native` op name no op in the dispatcher has: the serial makes it unique
// among ours, the lookup keeps it clear of names minted elsewhere.
std::string mint_node_id(const std::string& dsl_name, const std::string& op_symbol) {
  for (;;) {
    const uint64_t serial = g_next_node_serial.fetch_add(1);
    std::string id = "nr" + std::to_string(serial) + "_" +
                     detail::identifier_fragment(op_symbol, 64) + "_" +
                     detail::identifier_fragment(dsl_name, 64);
    if (!c10::Dispatcher::singleton().findOp({"_native::" + id, ""})) return id;
  }
}

void append_once(std::vector<GraphKey>& keys, const GraphKey& key) {
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
}

void check_filter_entries(const char* what, const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) detail::check_not_blank(what, entry);
}

std::vector<std::string> sorted(const std::set<std::string>& values) {
  return {values.begin(), values.end()};
}

// Why `candidate` cannot replace `original` as the graph of `key`, or "".
std::string why_not_a_reordering(const GraphKey& key, const Graph& original,
                                 const Graph& candidate) {
  std::set<const OverrideNode*> seen;
  for (const NodePtr& node : candidate) {
    if (!node) return "it holds a null node";
    if (!(node->key == key)) {
      return "node " + node->node_id + " belongs to the graph of " +
             node->key.to_string();
    }
    if (std::none_of(original.begin(), original.end(),
                     [&](const NodePtr& n) { return n.get() == node.get(); })) {
      return "node " + node->node_id + " is not in this graph";
    }
    if (!seen.insert(node.get()).second) {
      return "node " + node->node_id + " appears twice";
    }
  }
  return "";
}

}  // namespace

// ---- the control scope -------------------------------------------------------

struct Registry::Pending {
  std::vector<std::pair<LogLevel, std::string>> logs;
  std::vector<std::shared_ptr<const void>> released;
};

class Registry::ControlScope {
 public:
  explicit ControlScope(const Registry& registry) : registry_(registry), lock_(registry.mutex_) {
    registry_.pending_ = &pending_;
  }
  // Releases the lock, then emits the queued log records through the sink
  // that was set when they were queued, then frees what was retired.
  ~ControlScope() {
    registry_.pending_ = nullptr;
    LogSink sink = registry_.log_sink_;
    lock_.unlock();
    for (const auto& [level, message] : pending_.logs) {
      try {
        emit(sink, level, message);
      } catch (...) {
        // A log handler's failure must not turn a done operation into an error.
      }
    }
    pending_.released.clear();
  }
  ControlScope(const ControlScope&) = delete;
  ControlScope& operator=(const ControlScope&) = delete;

  static void emit(const LogSink& sink, LogLevel level, const std::string& message) {
    if (sink) {
      sink(level, message);
    } else if (level == LogLevel::kWarning) {
      std::cerr << "[native_registry] warning: " << message << "\n";
    }
  }

 private:
  const Registry& registry_;
  Pending pending_;  // destroyed after lock_ is released: declared first
  std::unique_lock<std::mutex> lock_;
};

bool Registry::FilterState::matches(const OverrideNode& node) const {
  return dsl_names.count(node.dsl_name) || op_symbols.count(node.key.op_symbol) ||
         dispatch_keys.count(node.key.dispatch_key);
}

// ---- lifetime ---------------------------------------------------------------

namespace {
std::atomic<uint64_t> g_next_registry_serial{1};
}  // namespace

Registry::Registry() : serial_(g_next_registry_serial.fetch_add(1)) {
  detail::register_fork_lock(mutex_);
}

Registry::~Registry() {
  detail::unregister_fork_lock(mutex_);  // first: not under our own lock (see fork_guard.h)
  ControlScope scope(*this);
  // Routers first: they may route to the `_native` ops' impls.
  for (auto& entry : routers_) defer_release(entry.second->keep_alive());
  routers_.clear();
  for (auto& entry : native_ops_) retire_native_op(*entry.second);
  native_ops_.clear();
  defer_release(std::make_shared<std::map<GraphKey, Graph>>(std::move(state_.graphs)));
}

Registry& Registry::global() {
  static Registry* registry = new Registry();
  return *registry;
}

void Registry::defer_release(std::shared_ptr<const void> object) const {
  TORCH_INTERNAL_ASSERT(pending_ != nullptr, "defer_release outside a ControlScope");
  pending_->released.push_back(std::move(object));
}

void Registry::log(LogLevel level, const std::string& message) const {
  TORCH_INTERNAL_ASSERT(pending_ != nullptr, "log outside a ControlScope");
  pending_->logs.emplace_back(level, message);
}

void Registry::log_unlocked(LogLevel level, const std::string& message) const {
  LogSink sink;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sink = log_sink_;
  }
  ControlScope::emit(sink, level, message);
}

// ---- registration -----------------------------------------------------------

namespace {

// Checks a node's callables as registration takes them, and gives an
// unconditional node without a cond its always-true one.
void check_callables(CondFn& cond, const ImplFn& impl, const OverrideOptions& options) {
  if (!impl) throw InvalidArgumentError("impl must be provided");
  if (options.unconditional_override) {
    if (options.try_initialize_runtime) {
      throw InvalidArgumentError(
          "try_initialize_runtime cannot be provided with "
          "unconditional_override=True: an unconditional override has no "
          "fallback to take when its runtime is unavailable");
    }
    if (!cond) {
      cond = [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
        return true;
      };
    }
  } else if (!cond) {
    throw InvalidArgumentError("cond must be provided unless unconditional_override=True");
  }
}

}  // namespace

NodePtr Registry::register_op_override(const std::string& dsl_name,
                                       const std::string& lib_symbol,
                                       const std::string& op_symbol,
                                       const std::string& dispatch_key, CondFn cond,
                                       ImplFn impl, OverrideOptions options) {
  detail::check_not_blank("dsl_name", dsl_name);
  detail::check_lib_symbol(lib_symbol);
  detail::check_op_symbol(op_symbol);
  const c10::DispatchKey key = detail::parse_override_dispatch_key(dispatch_key);
  check_callables(cond, impl, options);

  auto node = std::make_shared<OverrideNode>();
  node->dsl_name = dsl_name;
  node->key = {lib_symbol, op_symbol, c10::toString(key)};
  node->cond = std::move(cond);
  node->impl = std::move(impl);
  node->options = std::move(options);
  node->registry_serial = serial_;

  ControlScope scope(*this);
  try {
    // Under the lock: it reads the dispatcher, and the fork handlers keep a
    // fork from catching the registry there only while it holds its lock
    // (a reader caught inside LibTorch's lookup table would block every
    // later definition in the child; see fork_guard.h).
    detail::check_keeps_autograd({lib_symbol, op_symbol, dispatch_key}, key);
  } catch (...) {
    defer_release(std::move(node));  // freed after the lock, as below
    throw;
  }
  if (!state_.allowlist.count(lib_symbol)) {
    std::string names;
    for (const auto& ns : state_.allowlist) names += (names.empty() ? "" : ", ") + ns;
    // The node (and the callables it took) is freed after the lock.
    defer_release(std::move(node));
    throw InvalidArgumentError("lib_symbol=" + quoted(lib_symbol) +
                               " is not overridable; allow it first (allowed: " + names + ")");
  }
  node->node_id = mint_node_id(dsl_name, op_symbol);

  const GraphKey& graph_key = node->key;
  state_.graphs[graph_key].push_back(node);
  append_once(state_.by_dsl_name[dsl_name], graph_key);
  append_once(state_.by_op_symbol[op_symbol], graph_key);
  append_once(state_.by_dispatch_key[graph_key.dispatch_key], graph_key);
  return node;
}

NodePtr Registry::replace_node_callables(const OverrideNode& node, CondFn cond, ImplFn impl,
                                         OverrideOptions options) {
  if (options.unconditional_override != node.options.unconditional_override) {
    throw InvalidArgumentError("replace_node_callables: node " + node.node_id +
                               " cannot change unconditional_override");
  }
  check_callables(cond, impl, options);
  auto replacement = std::make_shared<OverrideNode>(node);
  replacement->cond = std::move(cond);
  replacement->impl = std::move(impl);
  replacement->options = std::move(options);

  ControlScope scope(*this);
  auto graph = state_.graphs.find(node.key);
  auto found = graph == state_.graphs.end()
                   ? Graph::iterator{}
                   : std::find_if(graph->second.begin(), graph->second.end(),
                                  [&](const NodePtr& n) { return n->node_id == node.node_id; });
  if (graph == state_.graphs.end() || found == graph->second.end() ||
      (*found)->registry_serial != serial_) {
    defer_release(std::move(replacement));  // it holds the new callables
    throw InvalidArgumentError("node " + node.node_id + " is not in the graph of " +
                               node.key.to_string() + " (reordered out or erased): there is "
                               "no registered node whose callables could change");
  }
  // The node replaced may be held by nothing else once it leaves the graph.
  defer_release(std::exchange(*found, replacement));
  return replacement;
}

// ---- filters ----------------------------------------------------------------

std::set<GraphKey> Registry::keys_named_by(const Filter& filter) const {
  std::set<GraphKey> keys;
  auto collect = [&](const Index& index, const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      auto it = index.find(name);
      if (it != index.end()) keys.insert(it->second.begin(), it->second.end());
    }
  };
  collect(state_.by_dsl_name, filter.dsl_names);
  collect(state_.by_op_symbol, filter.op_symbols);
  collect(state_.by_dispatch_key, filter.dispatch_keys);
  return keys;
}

void Registry::deregister_op_overrides(const Filter& disable) {
  check_filter_entries("disable_dsl_names entry", disable.dsl_names);
  check_filter_entries("disable_op_symbols entry", disable.op_symbols);
  check_filter_entries("disable_dispatch_keys entry", disable.dispatch_keys);
  ControlScope scope(*this);
  log(LogLevel::kInfo, "disabling overrides");
  const FilterState saved = state_.filters;
  state_.filters.dsl_names.insert(disable.dsl_names.begin(), disable.dsl_names.end());
  state_.filters.op_symbols.insert(disable.op_symbols.begin(), disable.op_symbols.end());
  state_.filters.dispatch_keys.insert(disable.dispatch_keys.begin(),
                                disable.dispatch_keys.end());
  try {
    republish_installed(keys_named_by(disable));
  } catch (...) {
    state_.filters = saved;  // republish_installed published nothing
    throw;
  }
}

void Registry::reenable_op_overrides(const Filter& enable) {
  check_filter_entries("enable_dsl_names entry", enable.dsl_names);
  check_filter_entries("enable_op_symbols entry", enable.op_symbols);
  check_filter_entries("enable_dispatch_keys entry", enable.dispatch_keys);
  ControlScope scope(*this);
  log(LogLevel::kInfo, "re-enabling overrides");
  const FilterState saved = state_.filters;
  for (const auto& name : enable.dsl_names) state_.filters.dsl_names.erase(name);
  for (const auto& name : enable.op_symbols) state_.filters.op_symbols.erase(name);
  for (const auto& name : enable.dispatch_keys) state_.filters.dispatch_keys.erase(name);
  try {
    republish_installed(keys_named_by(enable));
  } catch (...) {
    state_.filters = saved;  // republish_installed published nothing
    throw;
  }
}

bool Registry::is_enabled(const OverrideNode& node) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return is_enabled_locked(node);
}

bool Registry::is_enabled_locked(const OverrideNode& node) const {
  if (!state_.filters.matches(node)) return true;
  // An unconditional override is the op's implementation: a disable leaves
  // it in place unless the mask is also up.
  return node.options.unconditional_override && unconditional_mask_depth_ == 0;
}

Graph Registry::enabled_chain(const GraphKey& key) const {
  Graph chain;
  auto it = state_.graphs.find(key);
  if (it == state_.graphs.end()) return chain;
  for (const NodePtr& node : it->second) {
    if (is_enabled_locked(*node)) chain.push_back(node);
  }
  return chain;
}

void Registry::republish_installed(const std::set<GraphKey>& keys) {
  // A graph installed while its chain was empty has no router; if it now has
  // a chain it needs one, and its op must resolve. Checked for every key
  // before anything is published, so that an error changes nothing.
  for (const GraphKey& key : keys) {
    if (state_.installed.count(key) && !routers_.count(key) && !enabled_chain(key).empty()) {
      resolve_for_router(key);
    }
  }
  for (const GraphKey& key : keys) {
    if (state_.installed.count(key)) publish(key, enabled_chain(key), InstallMode::kUpdate);
  }
}

void Registry::republish_all_installed() { republish_installed(state_.installed); }

// ---- ordering ---------------------------------------------------------------

std::vector<GraphKey> Registry::reorder_graphs(const OrderingFn& fn, bool reinstall) {
  return reorder_graphs(fn, reinstall ? ReorderInstall::kInstalled : ReorderInstall::kNothing);
}

std::vector<GraphKey> Registry::reorder_graphs(const OrderingFn& fn, ReorderInstall install) {
  if (!fn) throw InvalidArgumentError("the ordering function must be callable");
  // The ordering function runs without the lock, on a copy of the graphs:
  // it may call the control plane itself, or log.
  std::map<GraphKey, Graph> originals;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    originals = state_.graphs;
  }
  std::map<GraphKey, Graph> results;
  for (const auto& [key, original] : originals) {
    const std::string where = key.to_string();
    Graph reordered;
    try {
      reordered = fn(key.op_symbol, key.dispatch_key, original);
    } catch (const AbortError&) {
      throw;  // nothing has changed
    } catch (const std::exception& e) {
      log_unlocked(LogLevel::kWarning, "Graph transformation failed for " + where + ": " +
                                           e.what() + ". Preserving original graph.");
      continue;
    } catch (...) {
      log_unlocked(LogLevel::kWarning, "Graph transformation failed for " + where +
                                           ": unknown exception. Preserving original graph.");
      continue;
    }
    const std::string problem = why_not_a_reordering(key, original, reordered);
    if (!problem.empty()) {
      log_unlocked(LogLevel::kWarning, "Graph transformation failed for " + where +
                                           ": the returned graph is invalid (" + problem +
                                           "). Preserving original graph.");
      continue;
    }
    if (reordered != original) results.emplace(key, std::move(reordered));
  }

  ControlScope scope(*this);
  std::map<GraphKey, Graph> replaced;  // the originals of graphs that changed
  for (auto& [key, reordered] : results) {
    auto it = state_.graphs.find(key);
    if (it == state_.graphs.end() || it->second != originals.at(key)) {
      log(LogLevel::kWarning, "Graph transformation failed for " + key.to_string() +
                                  ": the graph changed while the ordering function ran. "
                                  "Preserving the current graph.");
      continue;
    }
    replaced.emplace(key, std::exchange(it->second, std::move(reordered)));
  }
  std::vector<GraphKey> changed;
  for (const auto& entry : replaced) changed.push_back(entry.first);
  try {
    if (install == ReorderInstall::kInstalled) {
      republish_installed({changed.begin(), changed.end()});  // all or nothing: see there
    } else if (install == ReorderInstall::kChanged) {
      install_graphs_locked(changed);
    }
  } catch (...) {
    for (auto& [key, original] : replaced) state_.graphs[key] = std::move(original);
    throw;
  }
  // Nodes an ordering function dropped are freed with `originals`, which
  // holds every node `replaced` does and outlives the lock (declared first).
  return changed;
}

// ---- graph surgery ----------------------------------------------------------
// Beyond upstream's API: whole graphs replaced, erased or uninstalled, for
// upstream_compat's view of upstream's `_graphs` dict (and C++ users).

void Registry::replace_graph(const GraphKey& key, const Graph& nodes) {
  ControlScope scope(*this);
  std::set<const OverrideNode*> seen;
  for (const NodePtr& node : nodes) {
    if (!node) throw InvalidArgumentError("replace_graph: a node is null");
    if (!(node->key == key)) {
      throw InvalidArgumentError("replace_graph: node " + node->node_id + " belongs to " +
                                 node->key.to_string() + ", not " + key.to_string());
    }
    if (node->registry_serial != serial_) {
      throw InvalidArgumentError("replace_graph: node " + node->node_id +
                                 " was not registered with this registry");
    }
    if (!seen.insert(node.get()).second) {
      throw InvalidArgumentError("replace_graph: node " + node->node_id + " appears twice");
    }
  }
  defer_release(std::make_shared<Graph>(std::exchange(state_.graphs[key], nodes)));
  // Registration indexed these nodes, but an erase_graph may have dropped them since.
  for (const NodePtr& node : nodes) append_once(state_.by_dsl_name[node->dsl_name], key);
  if (!nodes.empty()) {
    append_once(state_.by_op_symbol[key.op_symbol], key);
    append_once(state_.by_dispatch_key[key.dispatch_key], key);
  }
}

void Registry::erase_graph(const GraphKey& key) {
  ControlScope scope(*this);
  auto it = state_.graphs.find(key);
  if (it == state_.graphs.end()) return;
  defer_release(std::make_shared<Graph>(std::move(it->second)));
  state_.graphs.erase(it);
  for (Index* index : {&state_.by_dsl_name, &state_.by_op_symbol, &state_.by_dispatch_key}) {
    for (auto entry = index->begin(); entry != index->end();) {
      std::vector<GraphKey>& keys = entry->second;
      keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
      entry = keys.empty() ? index->erase(entry) : std::next(entry);
    }
  }
}

void Registry::uninstall_graph(const GraphKey& key) {
  ControlScope scope(*this);
  remove_router(key);
  state_.installed.erase(key);
}

// ---- installation -----------------------------------------------------------

c10::OperatorHandle Registry::resolve(const GraphKey& key) const {
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

c10::OperatorHandle Registry::resolve_for_router(const GraphKey& key) const {
  c10::OperatorHandle op = resolve(key);
  // Registration judged the op only if it was defined then; one defined
  // since (a CompositeImplicitAutograd op of a library loaded late) is
  // judged here, before anything changes.
  detail::check_keeps_autograd(key, detail::parse_override_dispatch_key(key.dispatch_key));
  return op;
}

void Registry::check_native_ops(const Graph& chain) const {
  for (const NodePtr& node : chain) {
    auto it = native_ops_.find(node->node_id);
    if (it == native_ops_.end() || (it->second->active() && !it->second->target_gone())) continue;
    it->second->check_target(resolve(node->key));
  }
}

void Registry::ensure_native_ops(const Graph& chain) {
  check_native_ops(chain);  // all or nothing: no op of the chain changes if one cannot
  for (const NodePtr& node : chain) {
    auto it = native_ops_.find(node->node_id);
    if (it != native_ops_.end() && it->second->active() && !it->second->target_gone()) {
      // The common case, unless the node was given new callables since.
      if (it->second->node() != node) it->second->rebind(node);
      continue;
    }
    const c10::DispatchKey key = detail::parse_override_dispatch_key(node->key.dispatch_key);
    if (it != native_ops_.end()) {
      it->second->activate(node, resolve(node->key), key);
    } else {
      native_ops_[node->node_id] = std::make_unique<NativeOp>(node, resolve(node->key), key);
    }
  }
}

Graph Registry::chain_under_current_mask(const GraphKey& key, const Graph& published) const {
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

void Registry::retire_native_op(NativeOp& op) { defer_release(op.retire()); }

void Registry::remove_router(const GraphKey& key) {
  auto it = routers_.find(key);
  if (it == routers_.end()) return;
  // The router's chains and nodes outlive it until the lock is released
  // (and until the last call inside it returns).
  defer_release(it->second->keep_alive());
  routers_.erase(it);
}

void Registry::publish(const GraphKey& key, const Graph& chain, InstallMode mode) {
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
  routers_[key] = std::make_unique<Router>(
      op, detail::parse_override_dispatch_key(key.dispatch_key), chain);
}

void Registry::install_graph(const GraphKey& key, InstallMode mode) {
  // A key no registration could have made is refused, not recorded.
  detail::check_lib_symbol(key.lib_symbol);
  detail::check_op_symbol(key.op_symbol);
  detail::parse_override_dispatch_key(key.dispatch_key);
  ControlScope scope(*this);
  install_graph_locked(key, mode);
}

void Registry::install_graph_locked(const GraphKey& key, InstallMode mode) {
  publish(key, enabled_chain(key), mode);
  state_.installed.insert(key);
}

void Registry::install_graphs_locked(const std::vector<GraphKey>& keys) {
  // Every op that needs a router must resolve before any is installed.
  for (const GraphKey& key : keys) {
    if (!enabled_chain(key).empty()) resolve_for_router(key);
  }
  for (const GraphKey& key : keys) install_graph_locked(key, InstallMode::kUpdate);
}

void Registry::install_all() {
  ControlScope scope(*this);
  std::vector<GraphKey> keys;
  for (const auto& entry : state_.graphs) keys.push_back(entry.first);
  install_graphs_locked(keys);
}

// ---- teardown ---------------------------------------------------------------

Snapshot Registry::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto state = std::make_shared<Snapshot::State>();
  state->owner = serial_;
  state->control = state_;
  for (const auto& [key, router] : routers_) {
    state->routers[key] = {router->id(), router->published()};
  }
  state->unconditional_mask_depth = unconditional_mask_depth_;
  for (const auto& [id, native_op] : native_ops_) {
    if (native_op->active()) state->native_nodes[id] = native_op->node();
  }
  Snapshot snapshot;
  snapshot.state_ = std::move(state);
  return snapshot;
}

void Registry::restore(const Snapshot& snapshot) {
  if (!snapshot.state_) throw InvalidArgumentError("restore: the snapshot is empty");
  if (snapshot.state_->owner != serial_) {
    throw InvalidArgumentError("restore: the snapshot was taken of another registry");
  }
  const Snapshot::State& saved = *snapshot.state_;
  ControlScope scope(*this);

  // Routers installed since, or replaced since (a different router id), go
  // first, so that rebuilding a replaced one captures the op's own kernel.
  std::vector<GraphKey> stale;
  for (const auto& [key, router] : routers_) {
    auto it = saved.routers.find(key);
    if (it == saved.routers.end() || it->second.router_id != router->id() ||
        router->op_gone()) {
      stale.push_back(key);  // an op_gone one is rebuilt on the op as it is now
    }
  }
  for (const GraphKey& key : stale) remove_router(key);

  // The nodes of graphs replaced here may be held by nothing else.
  defer_release(std::make_shared<ControlState>(std::exchange(state_, saved.control)));

  std::vector<std::string> unrestorable;
  // `_native` ops: active are those active at the snapshot, no others. Ops
  // activated since (for nodes registered since, or first published since)
  // are retired; ops a restore to an earlier snapshot retired come back.
  for (auto& [id, native_op] : native_ops_) {
    if (!saved.native_nodes.count(id)) retire_native_op(*native_op);
  }
  for (const auto& [id, node] : saved.native_nodes) {
    try {
      ensure_native_ops({node});
    } catch (const OperatorChangedError& e) {
      unrestorable.push_back(node->key.to_string() + " (for _native::" + id + ": " + e.what() + ")");
    } catch (const OperatorNotFoundError&) {
      unrestorable.push_back(node->key.to_string() + " (for _native::" + id + ")");
    }
  }
  // Each router the snapshot had comes back (dormant if need be, so the
  // dispatcher is as it was), routing through the chain it had then, which
  // may lag its graph (a registration publishes nothing). Only where the
  // unconditional mask in force differs from the snapshot's does it route
  // by the mask of now: the unconditional nodes the filters disable come
  // in or go, as their is_enabled says.
  for (const auto& [key, record] : saved.routers) {
    const Graph chain = saved.unconditional_mask_depth == unconditional_mask_depth_
                            ? record.chain
                            : chain_under_current_mask(key, record.chain);
    auto it = routers_.find(key);
    if (it != routers_.end()) {
      try {
        ensure_native_ops(chain);
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
      ensure_native_ops(chain);
      routers_[key] = std::make_unique<Router>(
          op, detail::parse_override_dispatch_key(key.dispatch_key), chain);
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
}

// ---- namespaces -------------------------------------------------------------

void Registry::allow_namespace(const std::string& lib_symbol) {
  detail::check_lib_symbol(lib_symbol);
  if (lib_symbol == "_native") {
    throw InvalidArgumentError(
        "lib_symbol='_native' can never be overridable: it holds the ops that "
        "carry the overrides");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  state_.allowlist.insert(lib_symbol);
}

void Registry::disallow_namespace(const std::string& lib_symbol) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.allowlist.erase(lib_symbol);
}

bool Registry::is_namespace_allowed(const std::string& lib_symbol) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.allowlist.count(lib_symbol) > 0;
}

std::set<std::string> Registry::allowed_namespaces() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.allowlist;
}

// ---- queries ----------------------------------------------------------------

std::vector<std::string> Registry::get_dsl_operations(
    const std::string& dsl_name, const std::string& lib_symbol) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<std::string> operations;
  for (const auto& [key, graph] : state_.graphs) {
    if (key.lib_symbol != lib_symbol) continue;
    for (const NodePtr& node : graph) {
      if (node->dsl_name == dsl_name) operations.insert(key.op_symbol);
    }
  }
  return sorted(operations);
}

std::vector<GraphKey> Registry::graph_keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GraphKey> keys;
  for (const auto& entry : state_.graphs) keys.push_back(entry.first);
  return keys;
}

Graph Registry::graph(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = state_.graphs.find(key);
  return it == state_.graphs.end() ? Graph{} : it->second;
}

RouterState Registry::router_state(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routers_.find(key);
  if (it == routers_.end()) return RouterState::kAbsent;
  return it->second->published().empty() ? RouterState::kDormant : RouterState::kActive;
}

std::vector<GraphKey> Registry::router_keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GraphKey> keys;
  for (const auto& entry : routers_) keys.push_back(entry.first);
  return keys;
}

Graph Registry::published_chain(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routers_.find(key);
  return it == routers_.end() ? Graph{} : it->second->published();
}

uint64_t Registry::router_id(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routers_.find(key);
  return it == routers_.end() ? 0 : it->second->id();
}

Filter Registry::filters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {sorted(state_.filters.dsl_names), sorted(state_.filters.op_symbols),
          sorted(state_.filters.dispatch_keys)};
}

std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_dsl_name() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.by_dsl_name;
}

std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_op_symbol() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.by_op_symbol;
}

std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_dispatch_key() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.by_dispatch_key;
}

// ---- settings ---------------------------------------------------------------

void Registry::set_empty_chain_policy(EmptyChainPolicy policy) {
  std::lock_guard<std::mutex> lock(mutex_);
  empty_chain_policy_ = policy;
}

EmptyChainPolicy Registry::empty_chain_policy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return empty_chain_policy_;
}

void Registry::set_log_sink(LogSink sink) {
  ControlScope scope(*this);
  // The sink it replaces may own host objects: freed after the lock.
  defer_release(std::make_shared<LogSink>(std::exchange(log_sink_, std::move(sink))));
}

Registry::UnconditionalMask::UnconditionalMask(Registry& registry)
    : registry_(registry) {
  ControlScope scope(registry_);
  ++registry_.unconditional_mask_depth_;
  try {
    registry_.republish_all_installed();
  } catch (...) {
    --registry_.unconditional_mask_depth_;
    throw;
  }
}

Registry::UnconditionalMask::~UnconditionalMask() {
  ControlScope scope(registry_);
  --registry_.unconditional_mask_depth_;
  try {
    registry_.republish_all_installed();
  } catch (const std::exception& e) {
    registry_.log(LogLevel::kWarning,
                  std::string("lifting the unconditional mask failed: ") + e.what());
  }
}

// ---- self-checks ------------------------------------------------------------

void Registry::check_invariants() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto fail = [](const std::string& what) { throw std::logic_error("invariant: " + what); };
  for (const auto& [key, graph] : state_.graphs) {
    std::set<const OverrideNode*> seen;
    for (const NodePtr& node : graph) {
      if (!node) fail("graph " + key.to_string() + " holds a null node");
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
  if (state_.allowlist.count("_native")) fail("_native is on the allowlist");
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
}

std::string Registry::dump_state() const {
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
      << " allow=[" << join(state_.allowlist) << "] native_ops=" << native_ops_.size() << "\n";
  return out.str();
}

}  // namespace native_registry
