// Registration: nodes checked and appended to the graph of their (namespace,
// op, dispatch key); graph surgery for layers that keep graph structure
// themselves; the namespace allowlist; the graph queries. Over the graph
// table (graph_table.h), which keeps the indexes.
// Owns: what a registration checks and mints. May not touch: routers or
// `_native` ops (installing is install.cpp's), filters.

#include "registry_impl.h"

#include "names.h"

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
  node->key = {lib_symbol, op_symbol, c10::toString(key), key};
  node->cond = std::move(cond);
  node->impl = std::move(impl);
  node->options = std::move(options);
  Impl& r = *impl_;
  node->registry_serial = r.serial_;
  node->counters = std::make_shared<NodeCounters>();

  Impl::ControlScope scope(r);
  try {
    // Under the lock: it reads the dispatcher, and the fork handlers keep a
    // fork from catching the registry there only while it holds its lock
    // (a reader caught inside LibTorch's lookup table would block every
    // later definition in the child; see fork_guard.h).
    detail::check_keeps_autograd({lib_symbol, op_symbol, dispatch_key}, key);
  } catch (...) {
    r.defer_release(std::move(node));  // freed after the lock, as below
    throw;
  }
  if (!r.graphs_.allows(lib_symbol)) {
    const std::string names = detail::comma_separated(r.graphs_.allowlist());
    // The node (and the callables it took) is freed after the lock.
    r.defer_release(std::move(node));
    throw InvalidArgumentError("lib_symbol=" + quoted(lib_symbol) +
                               " is not overridable; allow it first (allowed: " + names + ")");
  }
  node->node_id = mint_node_id(dsl_name, op_symbol);
  r.graphs_.append(node);
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

  Impl& r = *impl_;
  Impl::ControlScope scope(r);
  const Graph* graph = r.graphs_.find(node.key);
  auto found = graph == nullptr
                   ? Graph::const_iterator{}
                   : std::find_if(graph->begin(), graph->end(),
                                  [&](const NodePtr& n) { return n->node_id == node.node_id; });
  // Node ids are unique in the process (minted from one serial), so a node
  // of another registry, or one reordered out or erased, is not found.
  if (graph == nullptr || found == graph->end()) {
    r.defer_release(std::move(replacement));  // it holds the new callables
    throw InvalidArgumentError("node " + node.node_id + " is not in the graph of " +
                               node.key.to_string() + " (reordered out or erased): there is "
                               "no registered node whose callables could change");
  }
  // The node replaced may be held by nothing else once it leaves the graph.
  Graph nodes = *graph;
  nodes[found - graph->begin()] = replacement;
  r.defer_release(std::make_shared<Graph>(r.graphs_.replace(node.key, std::move(nodes))));
  return replacement;
}

// ---- graph surgery ----------------------------------------------------------
// Beyond upstream's API: whole graphs replaced, erased or uninstalled, for
// upstream_compat's view of upstream's `_graphs` dict (and C++ users).

void Registry::replace_graph(const GraphKey& named, const Graph& nodes) {
  const GraphKey key = detail::admitted_key(named);  // the graph may be new
  Impl& r = *impl_;
  Impl::ControlScope scope(r);
  std::set<const OverrideNode*> seen;
  for (const NodePtr& node : nodes) {
    if (!node) throw InvalidArgumentError("replace_graph: a node is null");
    if (!(node->key == key)) {
      throw InvalidArgumentError("replace_graph: node " + node->node_id + " belongs to " +
                                 node->key.to_string() + ", not " + key.to_string());
    }
    if (node->registry_serial != r.serial_) {
      throw InvalidArgumentError("replace_graph: node " + node->node_id +
                                 " was not registered with this registry");
    }
    if (!seen.insert(node.get()).second) {
      throw InvalidArgumentError("replace_graph: node " + node->node_id + " appears twice");
    }
  }
  r.defer_release(std::make_shared<Graph>(r.graphs_.replace(key, nodes)));
}

void Registry::erase_graph(const GraphKey& key) {
  Impl::ControlScope scope(*impl_);
  impl_->defer_release(std::make_shared<Graph>(impl_->graphs_.erase(key)));
}

// ---- namespaces -------------------------------------------------------------

void Registry::allow_namespace(const std::string& lib_symbol) {
  detail::check_lib_symbol(lib_symbol);
  if (lib_symbol == detail::kNativeNamespace) {
    throw InvalidArgumentError(
        "lib_symbol='_native' can never be overridable: it holds the ops that "
        "carry the overrides");
  }
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->graphs_.allow(lib_symbol);
}

void Registry::disallow_namespace(const std::string& lib_symbol) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->graphs_.disallow(lib_symbol);
}

bool Registry::is_namespace_allowed(const std::string& lib_symbol) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->graphs_.allows(lib_symbol);
}

std::set<std::string> Registry::allowed_namespaces() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->graphs_.allowlist();
}

// ---- queries ----------------------------------------------------------------

std::vector<std::string> Registry::get_dsl_operations(const std::string& dsl_name,
                                                      const std::string& lib_symbol) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  std::set<std::string> operations;
  for (const auto& [key, graph] : impl_->graphs_.graphs()) {
    if (key.lib_symbol != lib_symbol) continue;
    for (const NodePtr& node : graph) {
      if (node->dsl_name == dsl_name) operations.insert(key.op_symbol);
    }
  }
  return {operations.begin(), operations.end()};
}

std::vector<GraphKey> Registry::graph_keys() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  std::vector<GraphKey> keys;
  for (const auto& entry : impl_->graphs_.graphs()) keys.push_back(entry.first);
  return keys;
}

Graph Registry::graph(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  const Graph* graph = impl_->graphs_.find(key);
  return graph == nullptr ? Graph{} : *graph;
}

std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_dsl_name() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->graphs_.by_dsl_name();
}

std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_op_symbol() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->graphs_.by_op_symbol();
}

std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_dispatch_key() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->graphs_.by_dispatch_key();
}

}  // namespace native_registry
