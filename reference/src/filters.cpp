// Filters: deregister_op_overrides / reenable_op_overrides change the
// disabled entries and install what their FilterInstall says (by default:
// republish the installed routers of the graphs they name); the
// unconditional mask's scope; the enabled chain of a graph, which the filter
// set (filter_set.h) decides node by node. Installs no new router except
// where an installed graph's chain turns non-empty, or kNamed asks.
// Owns: the filter operations and the order of their steps. May not touch:
// the dispatcher but through install.cpp's Impl::publish.

#include "registry_impl.h"

#include "names.h"

#include <algorithm>
#include <utility>

namespace native_registry {

namespace {

// What a filter change names, for its one log record.
std::string describe(const Filter& filter) {
  auto list = [](const std::vector<std::string>& names) {
    std::string out = "[";
    out += detail::comma_separated(names);
    return out + "]";
  };
  return "dsl=" + list(filter.dsl_names) + " op_symbol=" + list(filter.op_symbols) +
         " dispatch_key=" + list(filter.dispatch_keys);
}

}  // namespace

// ---- filters ----------------------------------------------------------------

void Registry::Impl::install_named(const Filter& named) {
  // One by one, in key order, as upstream's front end re-registers them: a
  // graph whose op does not resolve raises there, the filter change and the
  // graphs before it kept.
  for (const GraphKey& key : graphs_.keys_named_by(named)) {
    install_graph_locked(key, InstallMode::kUpdate);
  }
}

void Registry::deregister_op_overrides(const Filter& disable, FilterInstall install) {
  detail::check_filter_entries(disable, {"disable_dsl_names entry", "disable_op_symbols entry",
                                         "disable_dispatch_keys entry"});
  Impl& r = *impl_;
  Impl::ControlScope scope(r);
  r.log(LogLevel::kInfo, "Disabling overrides: " + describe(disable));
  const detail::FilterEntries saved = r.filters_.entries();
  r.filters_.disable(disable);
  try {
    r.republish_installed(r.graphs_.keys_named_by(disable));  // all or nothing: see there
  } catch (...) {
    r.filters_.set_entries(saved);  // republish_installed published nothing
    throw;
  }
  // Upstream's front end re-registers every graph the whole filter names.
  if (install == FilterInstall::kNamed) r.install_named(r.filters_.entries().as_filter());
}

void Registry::reenable_op_overrides(const Filter& enable, FilterInstall install) {
  detail::check_filter_entries(enable, {"enable_dsl_names entry", "enable_op_symbols entry",
                                        "enable_dispatch_keys entry"});
  Impl& r = *impl_;
  Impl::ControlScope scope(r);
  r.log(LogLevel::kInfo, "Re-enabling overrides: " + describe(enable));
  const detail::FilterEntries saved = r.filters_.entries();
  r.filters_.enable(enable);
  try {
    r.republish_installed(r.graphs_.keys_named_by(enable));  // all or nothing: see there
  } catch (...) {
    r.filters_.set_entries(saved);  // republish_installed published nothing
    throw;
  }
  // Upstream's front end re-registers the graphs the entries name.
  if (install == FilterInstall::kNamed) r.install_named(enable);
}

bool Registry::is_enabled(const OverrideNode& node) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->filters_.is_enabled(node);
}

Filter Registry::filters() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->filters_.entries().as_filter();
}

Graph Registry::Impl::enabled_chain(const GraphKey& key) const {
  Graph chain;
  const Graph* graph = graphs_.find(key);
  if (graph == nullptr) return chain;
  for (const NodePtr& node : *graph) {
    if (filters_.is_enabled(*node)) chain.push_back(node);
  }
  return chain;
}

Graph Registry::Impl::chain_under_current_mask(const GraphKey& key, const Graph& published) const {
  Graph chain;
  const Graph* graph = graphs_.find(key);  // erase_graph may have forgotten it
  if (graph == nullptr) return chain;
  for (const NodePtr& node : *graph) {
    const bool was_routed =
        std::find(published.begin(), published.end(), node) != published.end();
    const bool masked_then = node->options.unconditional_override && filters_.names(*node);
    if ((was_routed || masked_then) && filters_.is_enabled(*node)) chain.push_back(node);
  }
  return chain;
}

void Registry::Impl::republish_installed(const std::set<GraphKey>& keys) {
  // Checked for every key before anything is published, so that an error
  // changes nothing: a graph installed while its chain was empty, or whose
  // router's op has left the dispatcher, needs a new router, and its op must
  // resolve. (Published one by one, a later key's error would leave the
  // earlier ones routing under a filter state the caller then restores.)
  for (const GraphKey& key : keys) {
    if (routers_.is_installed(key)) check_publish(key, enabled_chain(key), InstallMode::kUpdate);
  }
  for (const GraphKey& key : keys) {
    if (routers_.is_installed(key)) publish(key, enabled_chain(key), InstallMode::kUpdate);
  }
}

std::set<GraphKey> Registry::Impl::keys_the_mask_changes() const {
  // Only these chains differ with and without the mask; the others are left
  // as published. A router whose op has left the dispatcher is left too: no
  // call reaches it, and it could not be rebuilt.
  std::set<GraphKey> keys;
  for (const GraphKey& key : routers_.installed()) {
    const detail::Router* router = routers_.find(key);
    if (router != nullptr && router->op_gone()) continue;
    const Graph* graph = graphs_.find(key);
    if (graph == nullptr) continue;
    for (const NodePtr& node : *graph) {
      if (node->options.unconditional_override && filters_.names(*node)) {
        keys.insert(key);
        break;
      }
    }
  }
  return keys;
}

// ---- the unconditional mask ---------------------------------------------------

Registry::UnconditionalMask::UnconditionalMask(Registry& registry) : registry_(registry) {
  Impl& r = *registry_.impl_;
  Impl::ControlScope scope(r);
  const std::set<GraphKey> keys = r.keys_the_mask_changes();
  r.filters_.push_mask();
  try {
    r.republish_installed(keys);
  } catch (...) {
    r.filters_.pop_mask();
    throw;
  }
}

Registry::UnconditionalMask::~UnconditionalMask() {
  Impl& r = *registry_.impl_;
  Impl::ControlScope scope(r);
  r.filters_.pop_mask();
  // A destructor cannot throw: each graph is put back on its own, so that
  // one that cannot be (its op gone since the mask went up, with no router
  // left to it) keeps the others masked no longer.
  for (const GraphKey& key : r.keys_the_mask_changes()) {
    try {
      r.publish(key, r.enabled_chain(key), InstallMode::kUpdate);  // throws before any change
    } catch (const std::exception& e) {
      r.log(LogLevel::kWarning, "lifting the unconditional mask failed at " + key.to_string() +
                                    ": " + e.what());
    }
  }
}

}  // namespace native_registry
