// What Python sees of the call path: the stats (Registry::stats), the routing
// log (set_routing_log, forwarded to the `native_registry.routing` logger by
// native_registry/observe.py) and per-thread disables (tokens: a Python scope
// may end out of order, or on another thread, which the core tolerates).

#include "binding.h"

#include <native_registry/call_hooks.h>

namespace native_registry::python {
namespace {

// The Python function a decision goes to; never freed (a routing decision may
// be made after the module is gone, during interpreter shutdown).
py::object* g_routing_log_target = nullptr;

const char* decision_name(RoutingDecision::Kind kind) {
  switch (kind) {
    case RoutingDecision::Kind::kTaken: return "taken";
    case RoutingDecision::Kind::kFallback: return "fallback";
    case RoutingDecision::Kind::kCovered: return "covered";
    case RoutingDecision::Kind::kFellBack: return "fell_back";
  }
  return "unknown";
}

// A decision reaches Python under_gil: at once on a thread that holds the GIL,
// else soon after, in order; it never waits for the GIL on the call path.
void forward_decision(const RoutingDecision& decision) {
  const std::string kind = decision_name(decision.kind);
  GraphKey key = decision.graph;
  std::string node_id = decision.node ? decision.node->node_id : std::string();
  std::string dsl_name = decision.node ? decision.node->dsl_name : std::string();
  const uint64_t not_logged = decision.not_logged;
  under_gil([kind, key, node_id, dsl_name, not_logged] {
    if (g_routing_log_target == nullptr || g_routing_log_target->is_none()) return;
    try {
      (*g_routing_log_target)(kind, from_key(key), node_id, dsl_name, not_logged);
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable("native_registry routing log");
    }
  });
}

py::dict node_stats_dict(const NodeStats& stats) {
  py::dict out;
  out["node_id"] = stats.node_id;
  out["dsl_name"] = stats.dsl_name;
  out["key"] = from_key(stats.key);
  out["taken"] = stats.taken;
  out["declined"] = stats.declined;
  out["runtime_unavailable"] = stats.runtime_unavailable;
  out["raised"] = stats.raised;
  return out;
}

py::dict graph_stats_dict(const GraphStats& stats) {
  py::dict out;
  out["key"] = from_key(stats.key);
  out["calls"] = stats.calls;
  out["fallbacks"] = stats.fallbacks;
  out["covered"] = stats.covered;
  out["fell_back_after_error"] = stats.fell_back_after_error;
  return out;
}

}  // namespace

void bind_observation(py::module_& m) {
  m.def("set_collect_stats", [](bool collect) {
    return without_gil([collect] {
      const bool previous = registry().collect_stats();
      registry().set_collect_stats(collect);
      return previous;
    });
  });
  m.def("collect_stats", [] { return without_gil([] { return registry().collect_stats(); }); });
  m.def("stats", [] {
    const RoutingStats stats = without_gil([] { return registry().stats(); });
    py::list nodes, graphs;
    for (const NodeStats& node : stats.nodes) nodes.append(node_stats_dict(node));
    for (const GraphStats& graph : stats.graphs) graphs.append(graph_stats_dict(graph));
    return py::make_tuple(nodes, graphs);
  });
  m.def("reset_stats", [] { without_gil([] { registry().reset_stats(); }); });

  // target(kind, key, node_id, dsl_name, not_logged), or None to stop.
  m.def("set_routing_log", [](py::object target) {
    if (g_routing_log_target == nullptr) g_routing_log_target = new py::object();
    const bool on = !target.is_none();
    *g_routing_log_target = std::move(target);
    set_routing_log(on ? &forward_decision : nullptr);
  });

  m.def("open_disabled_in_thread",
        [](const std::vector<std::string>& dsl_names, const std::vector<std::string>& op_symbols,
           const std::vector<std::string>& dispatch_keys) {
          return registry().open_disabled_in_thread({dsl_names, op_symbols, dispatch_keys});
        });
  m.def("close_disabled_in_thread",
        [](uint64_t token) { return Registry::close_disabled_in_thread(token); });
  m.def("is_disabled_in_this_thread",
        [](const OverrideNode& node) { return Registry::is_disabled_in_this_thread(node); });
}

}  // namespace native_registry::python
