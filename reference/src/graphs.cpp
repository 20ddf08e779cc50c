// Registration and the graph model: nodes appended to the graph of their
// (namespace, op, dispatch key), the three indexes by dsl name, op symbol and
// dispatch key, graph surgery for layers that keep graph structure
// themselves, the namespace allowlist, and the read-only queries.
// Touches no router and no `_native` op: installing is install.cpp's.

#include "registry_impl.h"

#include "names.h"
#include "router.h"

#include <algorithm>
#include <atomic>
#include <utility>

namespace native_registry {

using detail::quoted;

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
    if (!c10::Dispatcher::singleton().findOp(detail::native_op_name(id))) return id;
  }
}

void append_once(std::vector<GraphKey>& keys, const GraphKey& key) {
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
}

std::vector<std::string> sorted(const std::set<std::string>& values) {
  return {values.begin(), values.end()};
}

}  // namespace

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

NodePtr Registry::Impl::register_op_override(const std::string& dsl_name,
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
  node->key = {lib_symbol, op_symbol, c10::toString(key), key};
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

NodePtr Registry::Impl::replace_node_callables(const OverrideNode& node, CondFn cond, ImplFn impl,
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

// ---- graph surgery ----------------------------------------------------------
// Beyond upstream's API: whole graphs replaced, erased or uninstalled, for
// upstream_compat's view of upstream's `_graphs` dict (and C++ users).

void Registry::Impl::replace_graph(const GraphKey& named, const Graph& nodes) {
  const GraphKey key = detail::admitted_key(named);  // the graph may be new
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

void Registry::Impl::erase_graph(const GraphKey& key) {
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

// ---- namespaces -------------------------------------------------------------

void Registry::Impl::allow_namespace(const std::string& lib_symbol) {
  detail::check_lib_symbol(lib_symbol);
  if (lib_symbol == detail::kNativeNamespace) {
    throw InvalidArgumentError(
        "lib_symbol='_native' can never be overridable: it holds the ops that "
        "carry the overrides");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  state_.allowlist.insert(lib_symbol);
}

void Registry::Impl::disallow_namespace(const std::string& lib_symbol) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.allowlist.erase(lib_symbol);
}

bool Registry::Impl::is_namespace_allowed(const std::string& lib_symbol) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.allowlist.count(lib_symbol) > 0;
}

std::set<std::string> Registry::Impl::allowed_namespaces() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.allowlist;
}

// ---- queries ----------------------------------------------------------------

std::vector<std::string> Registry::Impl::get_dsl_operations(
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

std::vector<GraphKey> Registry::Impl::graph_keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GraphKey> keys;
  for (const auto& entry : state_.graphs) keys.push_back(entry.first);
  return keys;
}

Graph Registry::Impl::graph(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = state_.graphs.find(key);
  return it == state_.graphs.end() ? Graph{} : it->second;
}

RouterState Registry::Impl::router_state(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routers_.find(key);
  if (it == routers_.end()) return RouterState::kAbsent;
  return it->second->published().empty() ? RouterState::kDormant : RouterState::kActive;
}

std::vector<GraphKey> Registry::Impl::router_keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GraphKey> keys;
  for (const auto& entry : routers_) keys.push_back(entry.first);
  return keys;
}

Graph Registry::Impl::published_chain(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routers_.find(key);
  return it == routers_.end() ? Graph{} : it->second->published();
}

uint64_t Registry::Impl::router_id(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routers_.find(key);
  return it == routers_.end() ? 0 : it->second->id();
}

Filter Registry::Impl::filters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.filters.as_filter();
}

std::map<std::string, std::vector<GraphKey>> Registry::Impl::graphs_by_dsl_name() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.by_dsl_name;
}

std::map<std::string, std::vector<GraphKey>> Registry::Impl::graphs_by_op_symbol() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.by_op_symbol;
}

std::map<std::string, std::vector<GraphKey>> Registry::Impl::graphs_by_dispatch_key() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.by_dispatch_key;
}

}  // namespace native_registry
