// Registry::explain: what a call would do, told node by node, without doing
// it. The registry's lock is held only to copy what the call would read (the
// graph, the filter verdicts, the router's chain and fallback, the coverage
// check); the conds and the coverage check run after it is released, as on
// the call path. The verdicts come from the code the call path uses:
// FilterSet::is_enabled and FilterEntries::naming for the filters, the
// node's own cond, ask_coverage_check (call_path.cpp) for the coverage check.
// Owns: the walk that reports; and Explanation's table. May not touch: any
// state (explain changes nothing), a runtime check, an impl.

#include "names.h"
#include "registry_impl.h"
#include "router_shared.h"
#include "thread_disables.h"

#include <native_registry/explain.h>

#include <ATen/core/dispatch/DispatchKeyExtractor.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace native_registry {

const char* to_string(ExplainVerdict verdict) {
  switch (verdict) {
    case ExplainVerdict::kDisabled: return "disabled";
    case ExplainVerdict::kMasked: return "masked";
    case ExplainVerdict::kNotPublished: return "not published";
    case ExplainVerdict::kAccepted: return "accepted";
    case ExplainVerdict::kDeclined: return "declined";
    case ExplainVerdict::kRaised: return "raised";
    case ExplainVerdict::kRuntimeCheck: return "runtime check";
    case ExplainVerdict::kNotReached: return "not reached";
    case ExplainVerdict::kNativeOp: return "native op";
  }
  return "?";
}

const char* to_string(ExplainKernel kernel) {
  switch (kernel) {
    case ExplainKernel::kNodeImpl: return "impl";
    case ExplainKernel::kFallback: return "fallback";
    case ExplainKernel::kFallthrough: return "fallthrough";
    case ExplainKernel::kNoKernel: return "no kernel";
    case ExplainKernel::kNoRouter: return "no router";
    case ExplainKernel::kRaises: return "raises";
  }
  return "?";
}

namespace {

// Writes `text` as lines none of which ends in a blank, also where a cell
// does or holds lines of its own (a cond's message, a Python traceback).
void put_lines(std::ostringstream& out, const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

}  // namespace

std::string Explanation::to_string() const {
  std::ostringstream out;
  put_lines(out, "explain " + op_name + " at " + graph.dispatch_key);
  put_lines(out, "  key:      " + why_key);
  put_lines(out, "  router:   " + router);
  put_lines(out, "  coverage: " + coverage);
  const std::vector<std::string> head{"#", "node_id", "dsl", "verdict", "detail"};
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ExplainedNode& n = nodes[i];
    rows.push_back({std::to_string(i + 1), n.node_id, n.dsl_name,
                    native_registry::to_string(n.verdict), n.detail});
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text = "  ";
    for (size_t c = 0; c < cells.size(); ++c) {
      text += cells[c];
      if (c + 1 < cells.size()) text += std::string(width[c] - cells[c].size() + 2, ' ');
    }
    put_lines(out, text);
  };
  if (rows.empty()) {
    out << "  (no nodes)\n";
  } else {
    line(head);
    for (const auto& row : rows) line(row);
  }
  std::string kernel_line = "  kernel:   " + std::string(native_registry::to_string(kernel));
  if (kernel == ExplainKernel::kNodeImpl) {
    kernel_line += " of " + kernel_node_id + " (dsl " + kernel_dsl_name + ")";
  }
  put_lines(out, kernel_line + ": " + kernel_detail);
  return out.str();
}

namespace {

// What the call would read, copied under the registry's lock.
struct Reading {
  GraphKey key;
  Graph graph;                          // graph order
  std::vector<ExplainedNode> filtered;  // per graph node: its filter verdict, if any
  std::vector<bool> enabled;            // per graph node
  Graph chain;                          // what the call walks
  bool has_router = false, installed = false, fallback = false, fallthrough = false,
       op_gone = false;
  std::shared_ptr<const CoverageCheck> coverage;
};

std::string key_list(const std::vector<GraphKey>& keys) {
  const std::string out = detail::comma_separated(keys, [](const GraphKey& key) { return key.dispatch_key; });
  return out.empty() ? "none" : out;
}

// "AutogradCPU, ADInplaceOrView, CPU": the keys a call with `keys` visits,
// highest first, as the dispatcher redispatches below each (the router's own
// redispatch of a fallthrough masks likewise).
std::vector<c10::DispatchKey> keys_visited(c10::DispatchKeySet keys) {
  std::vector<c10::DispatchKey> out;
  while (!keys.empty()) {
    const c10::DispatchKey key = keys.highestPriorityTypeId();
    if (key == c10::DispatchKey::Undefined) break;  // backend bits alone are left
    out.push_back(key);
    keys = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, key);
  }
  return out;
}

std::string names_of(const std::vector<c10::DispatchKey>& keys) {
  const std::string out =
      detail::comma_separated(keys, [](c10::DispatchKey key) { return std::string(c10::toString(key)); });
  return out.empty() ? "none" : out;
}

// Which filter entries name the node, in words; with why it is still enabled
// (an unconditional node while no mask is up) or masked.
std::string filter_detail(const detail::FilterEntries::Naming& naming, const OverrideNode& node) {
  std::string out;
  auto add = [&](bool named, const char* kind, const std::string& value) {
    if (named) out += (out.empty() ? "" : ", ") + std::string(kind) + " '" + value + "'";
  };
  add(naming.dsl_name, "dsl name", node.dsl_name);
  add(naming.op_symbol, "op symbol", node.key.op_symbol);
  add(naming.dispatch_key, "dispatch key", node.key.dispatch_key);
  return "by filter entry " + out;
}

}  // namespace

// ---- explain by name --------------------------------------------------------
Explanation Registry::explain(const std::string& op_name, const Stack& stack,
                              const std::string& dispatch_key) const {
  const auto separator = op_name.find("::");
  if (separator == std::string::npos || separator == 0) {
    throw InvalidArgumentError("explain: op " + detail::quoted(op_name) +
                               " is not of the form 'ns::name' or 'ns::name.overload'");
  }
  const auto dot = op_name.find('.', separator + 2);
  std::string overload = dot == std::string::npos ? "" : op_name.substr(dot + 1);
  if (overload == "default") overload.clear();  // Python's name for the unnamed overload
  const c10::OperatorName name{op_name.substr(0, dot), overload};
  auto op = c10::Dispatcher::singleton().findSchema(name);
  if (!op) {
    throw OperatorNotFoundError("explain: no op " + detail::quoted(op_name) +
                                " in the dispatcher (is its library loaded, the overload spelled out?)");
  }
  return explain(*op, stack, dispatch_key);
}

// ---- explain ----------------------------------------------------------------
Explanation Registry::explain(const c10::OperatorHandle& op, const Stack& stack,
                              const std::string& dispatch_key) const {
  const c10::OperatorName& name = op.operator_name();
  const std::string full_name =
      name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
  Explanation out;
  out.op_name = full_name;

  // A `_native` op runs its node's impl and nothing else.
  if (name.name.rfind(std::string(detail::kNativeNamespace) + "::", 0) == 0) {
    const std::string node_id = name.name.substr(sizeof(detail::kNativeNamespace) + 1);
    NodePtr node;
    bool enabled = false;
    {
      std::lock_guard<std::mutex> lock(impl_->mutex_);
      for (const auto& [key, graph] : impl_->graphs_.graphs()) {
        for (const NodePtr& candidate : graph) {
          if (candidate->node_id == node_id) {
            node = candidate;
            enabled = impl_->filters_.is_enabled(*candidate);
          }
        }
      }
    }
    if (!node) {
      throw InvalidArgumentError("explain: " + detail::quoted(full_name) +
                                 " is the op of no override of this registry (node_id " +
                                 detail::quoted(node_id) + " unknown)");
    }
    out.graph = node->key;
    out.why_key = "a _native op: it carries override " + node_id + " of " +
                  node->key.to_string() + " (what compiled and exported programs call)";
    out.router = "none: a _native op has no router; filters and conds are not asked";
    out.coverage = "not asked (a _native op)";
    out.nodes.push_back({node->node_id, node->dsl_name, ExplainVerdict::kNativeOp,
                         std::string("calling it runs this impl directly; its routers see it ") +
                             (enabled ? "enabled" : "disabled")});
    out.kernel = ExplainKernel::kNodeImpl;
    out.kernel_node_id = node->node_id;
    out.kernel_dsl_name = node->dsl_name;
    out.kernel_detail = "the _native op's kernel calls this impl, whatever the filters say";
    return out;
  }

  // The call's dispatch keys, as the dispatcher computes them from the
  // arguments (thread-local included and excluded keys applied).
  const size_t expected = op.schema().arguments().size();
  if (stack.size() != expected) {
    throw InvalidArgumentError("explain: " + full_name + " takes " + std::to_string(expected) +
                               " arguments (its schema: " + c10::toString(op.schema()) +
                               "), the stack holds " + std::to_string(stack.size()));
  }
  const c10::DispatchKeySet call_keys =
      c10::DispatchKeyExtractor::make(op.schema()).getDispatchKeySetBoxed(&stack);
  const std::vector<c10::DispatchKey> visited = keys_visited(call_keys);

  Reading r;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex_);
    std::vector<GraphKey> candidates;
    for (const auto& [key, graph] : impl_->graphs_.graphs()) {
      if (!graph.empty() && detail::operator_name(key) == name) candidates.push_back(key);
    }
    const GraphKey* chosen = nullptr;
    if (!dispatch_key.empty()) {
      for (const GraphKey& key : candidates) {
        if (key.dispatch_key == dispatch_key) chosen = &key;
      }
      if (chosen == nullptr) {
        throw InvalidArgumentError("explain: no graph of " + full_name + " at dispatch key " +
                                   detail::quoted(dispatch_key) + " in this registry (graphs at: " +
                                   key_list(candidates) + ")");
      }
      const bool reached = std::find(visited.begin(), visited.end(),
                                     chosen->parsed_dispatch_key) != visited.end();
      out.why_key = dispatch_key + ": given by the caller; the call's keys are " +
                    names_of(visited) +
                    (reached ? "" : " (a call with these arguments does not reach it)");
    } else {
      std::vector<c10::DispatchKey> path;
      for (c10::DispatchKey key : visited) {
        path.push_back(key);
        for (const GraphKey& candidate : candidates) {
          if (candidate.parsed_dispatch_key == key) chosen = &candidate;
        }
        if (chosen != nullptr) break;
      }
      if (chosen == nullptr) {
        throw InvalidArgumentError("explain: no graph of " + full_name +
                                   " at any dispatch key of this call (" + names_of(visited) +
                                   "); this registry has graphs of it at: " + key_list(candidates));
      }
      out.why_key = chosen->dispatch_key + ": the highest-priority key of the call with a graph " +
                    "here (keys visited: " + names_of(path) + ")";
    }
    r.key = *chosen;
    r.graph = *impl_->graphs_.find(r.key);
    for (const NodePtr& node : r.graph) {
      const bool enabled = impl_->filters_.is_enabled(*node);
      r.enabled.push_back(enabled);
      ExplainedNode entry{node->node_id, node->dsl_name, ExplainVerdict::kNotReached, ""};
      const detail::FilterEntries::Naming naming = impl_->filters_.entries().naming(*node);
      if (!enabled) {
        // The filter set disables an unconditional node only under a mask.
        entry.verdict = node->options.unconditional_override ? ExplainVerdict::kMasked
                                                             : ExplainVerdict::kDisabled;
        entry.detail = filter_detail(naming, *node) +
                       (node->options.unconditional_override ? " while an UnconditionalMask is up"
                                                             : "");
      } else if (naming.any()) {
        entry.detail = "unconditional: stays enabled though named " + filter_detail(naming, *node);
      }
      r.filtered.push_back(std::move(entry));
    }
    const detail::Router* router = impl_->routers_.find(r.key);
    r.installed = impl_->routers_.is_installed(r.key);
    if (router != nullptr) {
      r.has_router = true;
      r.chain = router->published();
      r.fallback = router->has_fallback();
      r.fallthrough = router->falls_through();
      r.op_gone = router->op_gone();
    } else {
      r.chain = impl_->enabled_chain(r.key);  // what an install would publish
    }
    r.coverage = impl_->routers_.settings().coverage;
  }
  out.graph = r.key;

  // What a call no node takes runs.
  ExplainKernel declined = ExplainKernel::kNoRouter;
  std::string declined_detail;
  const std::string at = r.key.dispatch_key;
  if (!r.has_router) {
    out.router = r.installed ? "absent: installed, but its chain was empty under the "
                               "EmptyChainPolicy 'remove'"
                             : "absent: the graph is not installed (register_all_overrides / "
                               "install_graph puts its router in); the rows say what it would decide";
    declined_detail = "the op's own kernel runs";
  } else {
    out.router = r.chain.empty() ? "dormant (installed, its chain empty)" : "active";
    if (r.fallback) {
      declined = ExplainKernel::kFallback;
      declined_detail = "the op's own kernel at " + at + ", captured when the router went in";
    } else if (r.fallthrough) {
      declined = ExplainKernel::kFallthrough;
      declined_detail = at + " was a fallthrough before the router: the next key's kernel runs";
    } else {
      declined = ExplainKernel::kNoKernel;
      declined_detail = "the op had no kernel at " + at +
                        " before the router: the call raises NotImplementedError";
    }
  }

  // The keys a kernel at the graph's key receives: the call's, without those
  // above it, which redispatching to it masked out.
  const c10::DispatchKeySet keys =
      call_keys & (c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, r.key.parsed_dispatch_key) |
                   c10::DispatchKeySet(r.key.parsed_dispatch_key));

  // The walk, over the chain the call reads, as choose() walks it.
  std::string stop;  // why the nodes after the deciding one are not reached
  bool decided = false;
  std::vector<ExplainedNode> walked;
  std::vector<const OverrideNode*> runtime_nodes;  // accepted, behind a runtime check
  if (r.op_gone) {
    decided = true;
    stop = "the router's op left the dispatcher";
    out.kernel = ExplainKernel::kRaises;
    out.kernel_detail = "the router was installed for an op that has since left the "
                        "dispatcher: the call raises; install the graph again";
  }
  if (decided) {
    out.coverage = "not asked";
  } else if (r.coverage == nullptr) {
    out.coverage = "none set";
  } else if (!coverage_checks_enabled()) {
    out.coverage = "set, but coverage checks are switched off (set_aot_enabled / "
                   "TORCH_DISABLE_NATIVE_AOT): not asked";
  } else {
    std::string error;
    if (detail::ask_coverage_check(*r.coverage, r.key, op, keys, stack, &error)) {
      out.coverage = "covered: the call declines every node";
      decided = true;
      stop = "the coverage check covered the call";
      out.kernel = declined;
      out.kernel_detail = declined_detail;
    } else if (!error.empty()) {
      out.coverage = "raised (counts as not covered): " + error;
    } else {
      out.coverage = "not covered";
    }
  }
  for (const NodePtr& node : r.chain) {
    ExplainedNode entry{node->node_id, node->dsl_name, ExplainVerdict::kNotReached, ""};
    if (decided) {
      entry.detail = stop;
      walked.push_back(std::move(entry));
      continue;
    }
    if (detail::disabled_in_this_thread(*node)) {  // as choose() skips it
      entry.verdict = ExplainVerdict::kDisabled;
      entry.detail = "disabled on this thread (a disabled_in_thread scope names it)";
      walked.push_back(std::move(entry));
      continue;
    }
    bool accepted = false;
    try {
      accepted = node->cond(op, keys, stack);
    } catch (const std::exception& e) {
      if (detail::must_propagate(e)) throw;
      entry.verdict = ExplainVerdict::kRaised;
      entry.detail = std::string("the cond raised: ") + e.what();
      decided = true;
      stop = "the cond of " + node->node_id + " raised";
      out.kernel = ExplainKernel::kRaises;
      out.kernel_detail = std::string("the cond of ") + node->node_id +
                          " raises, and so does the call: " + e.what();
      walked.push_back(std::move(entry));
      continue;
    }
    if (!accepted) {
      entry.verdict = ExplainVerdict::kDeclined;
      entry.detail = "the cond said false";
    } else if (node->options.try_initialize_runtime) {
      // Not asked: explain initialises no runtime. Unavailable, the call
      // goes on to the next nodes, so they are explained still.
      entry.verdict = ExplainVerdict::kRuntimeCheck;
      entry.detail = "the cond said true; its runtime check would be asked (not asked here): "
                     "ready, it takes the call, else the next nodes decide";
      runtime_nodes.push_back(node.get());
    } else {
      entry.verdict = ExplainVerdict::kAccepted;
      entry.detail = "the cond said true: it takes the call";
      decided = true;
      stop = runtime_nodes.empty() ? node->node_id + " took the call"
                                   : node->node_id + " (or a node before it) took the call";
      out.kernel = ExplainKernel::kNodeImpl;
      out.kernel_node_id = node->node_id;
      out.kernel_dsl_name = node->dsl_name;
      out.kernel_detail = "the node's impl runs";
    }
    walked.push_back(std::move(entry));
  }
  if (!decided) {
    out.kernel = declined;
    out.kernel_detail = declined_detail +
                        (r.chain.empty() || !r.has_router || !runtime_nodes.empty()
                             ? ""
                             : " (no node took the call)");
  }
  if (!runtime_nodes.empty()) {
    // The first node behind a runtime check takes the call if its runtime is
    // ready; each unavailable one passes it on (to a cond that may raise).
    std::string otherwise;
    if (out.kernel == ExplainKernel::kNodeImpl) {
      otherwise = "the impl of " + out.kernel_node_id + " (" + out.kernel_detail + ")";
    } else {
      otherwise = out.kernel_detail;
    }
    std::string detail = "if its runtime check says ready";
    for (size_t i = 1; i < runtime_nodes.size(); ++i) {
      detail += "; else the impl of " + runtime_nodes[i]->node_id + " if its runtime check says ready";
    }
    out.kernel = ExplainKernel::kNodeImpl;
    out.kernel_node_id = runtime_nodes.front()->node_id;
    out.kernel_dsl_name = runtime_nodes.front()->dsl_name;
    out.kernel_detail = detail + "; else " + otherwise;
  }
  if (!r.has_router) {
    // No router: whatever the rows say, the op's own kernel answers now;
    // they say what the router would do once installed.
    std::string once;
    if (out.kernel == ExplainKernel::kNodeImpl) {
      once = "; once installed, the impl of " + out.kernel_node_id + " (dsl " +
             out.kernel_dsl_name + "): " + out.kernel_detail;
    } else if (out.kernel == ExplainKernel::kRaises) {
      once = "; once installed, the call would raise: " + out.kernel_detail;
    }
    out.kernel = ExplainKernel::kNoRouter;
    out.kernel_node_id.clear();
    out.kernel_dsl_name.clear();
    out.kernel_detail = "no router at " + at + ": the op's own kernel runs" + once;
  }

  // The rows: in graph order, a chain node where its graph node stands (a
  // node given new callables since the install is walked with the old ones,
  // which the router still calls); in chain order instead if the router's
  // chain is in an older order or holds a node the graph no longer has (its
  // ids are then not the graph's in order: same_order is false). Then the
  // graph's nodes the chain does not hold.
  auto in_chain = [&](const OverrideNode& node) -> const ExplainedNode* {
    for (size_t i = 0; i < r.chain.size(); ++i) {
      if (r.chain[i]->node_id == node.node_id) return &walked[i];
    }
    return nullptr;
  };
  std::vector<std::string> chain_order_in_graph;
  for (const NodePtr& node : r.graph) {
    if (in_chain(*node) != nullptr) chain_order_in_graph.push_back(node->node_id);
  }
  std::vector<std::string> chain_order;
  for (const NodePtr& node : r.chain) chain_order.push_back(node->node_id);
  const bool same_order = chain_order_in_graph.size() == chain_order.size() &&
                          chain_order_in_graph == chain_order;
  if (!same_order) {
    out.router += "; its chain is in an older order than the graph (install again to route "
                  "in the graph's)";
    for (const ExplainedNode& entry : walked) out.nodes.push_back(entry);
  }
  for (size_t i = 0; i < r.graph.size(); ++i) {
    const OverrideNode& node = *r.graph[i];
    const ExplainedNode* routed = in_chain(node);
    if (routed != nullptr) {
      if (!same_order) continue;
      ExplainedNode entry = *routed;
      const bool replaced = std::none_of(r.chain.begin(), r.chain.end(),
                                         [&](const NodePtr& n) { return n.get() == &node; });
      if (replaced) entry.detail += " (with its callables of the last install: install again)";
      if (!r.filtered[i].detail.empty()) entry.detail += "; " + r.filtered[i].detail;
      out.nodes.push_back(std::move(entry));
    } else if (!r.enabled[i]) {
      out.nodes.push_back(r.filtered[i]);
    } else {
      out.nodes.push_back({node.node_id, node.dsl_name, ExplainVerdict::kNotPublished,
                           "enabled, not in the router's chain: registered or re-enabled since its "
                           "last install (install again)"});
    }
  }
  return out;
}

}  // namespace native_registry
