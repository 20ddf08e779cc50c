#pragma once

// Everything a caller can observe of a registry, as one comparable string, and
// of the dispatcher, as a fingerprint: "nothing changed" means both are equal
// before and after.

#include "../support.h"

#include <sstream>
#include <string>

namespace native_registry::testing {

inline std::string observe(const Registry& registry) {
  std::ostringstream out;
  auto ids = [&](const Graph& graph) {
    for (const NodePtr& node : graph) out << ' ' << node->node_id;
  };
  for (const GraphKey& key : registry.graph_keys()) {
    out << key.to_string() << ':';
    ids(registry.graph(key));
    out << " | router " << static_cast<int>(registry.router_state(key)) << ':';
    ids(registry.published_chain(key));
    out << '\n';
  }
  out << "routers:";
  for (const GraphKey& key : registry.router_keys()) out << ' ' << key.to_string();
  const Filter filters = registry.filters();
  for (const auto* list : {&filters.dsl_names, &filters.op_symbols, &filters.dispatch_keys}) {
    out << "\nfilter:";
    for (const std::string& entry : *list) out << " [" << entry << ']';
  }
  out << "\nallowed:";
  for (const std::string& ns : registry.allowed_namespaces()) out << ' ' << ns;
  for (const auto& [name, keys] : registry.graphs_by_dsl_name()) {
    out << "\nby dsl [" << name << "]:";
    for (const GraphKey& key : keys) out << ' ' << key.to_string();
  }
  return out.str();
}

inline fixtures::DispatcherFingerprint dispatcher_now() {
  return fixtures::DispatcherFingerprint::capture(watched_ops());
}

// Whether `text` is printable ASCII: an error message that quotes a hostile
// name must not carry its control or non-ASCII bytes raw.
inline bool printable(const std::string& text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace native_registry::testing
