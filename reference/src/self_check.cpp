// Self-checks for tests: check_invariants() throws naming the first broken
// invariant (each table's, then the one across tables); dump_state() prints
// the whole state for a failure message. Read-only: nothing here changes
// the registry.

#include "registry_impl.h"

#include "retired_native_ops.h"

#include <sstream>
#include <stdexcept>

namespace native_registry {

// ---- self-checks ------------------------------------------------------------

void Registry::check_invariants() const {
  const Impl& r = *impl_;
  std::lock_guard<std::mutex> lock(r.mutex_);
  r.graphs_.check(r.serial_);
  r.filters_.check();
  r.routers_.check(r.serial_);
  r.native_ops_.check();
  // Across the tables: every node a router routes through has its `_native`
  // op active, for that very node.
  for (const auto& [key, router] : r.routers_.routers()) {
    for (const NodePtr& node : router->published()) {
      auto op = r.native_ops_.ops().find(node->node_id);
      if (op == r.native_ops_.ops().end() || op->second->node() != node) {
        throw std::logic_error("invariant: node " + node->node_id +
                               " is routed but its _native op is not active");
      }
    }
  }
}

std::string Registry::dump_state() const {
  const Impl& r = *impl_;
  std::lock_guard<std::mutex> lock(r.mutex_);
  std::ostringstream out;
  for (const auto& [key, graph] : r.graphs_.graphs()) {
    out << key.to_string() << (r.routers_.is_installed(key) ? " installed" : "");
    if (const detail::Router* router = r.routers_.find(key)) {
      out << " router#" << router->id() << " chain=[";
      for (const NodePtr& node : router->published()) out << node->node_id << " ";
      out << "]";
    }
    out << "\n";
    for (const NodePtr& node : graph) {
      out << "  " << node->node_id << " dsl=" << node->dsl_name
          << (r.filters_.is_enabled(*node) ? "" : " disabled")
          << (node->options.unconditional_override ? " unconditional" : "") << "\n";
    }
  }
  auto join = [](const std::set<std::string>& names) {
    std::string joined;
    for (const std::string& name : names) joined += (joined.empty() ? "" : ",") + name;
    return joined;
  };
  const detail::FilterEntries& disabled = r.filters_.entries();
  out << "disabled: dsl=[" << join(disabled.dsl_names) << "] op=[" << join(disabled.op_symbols)
      << "] key=[" << join(disabled.dispatch_keys) << "] mask=" << r.filters_.mask_depth()
      << " allow=[" << join(r.graphs_.allowlist()) << "] native_ops=" << r.native_ops_.ops().size()
      << " retired_kept=" << detail::retired_counts().kept << "\n";
  return out.str();
}

}  // namespace native_registry
