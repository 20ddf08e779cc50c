// Filters: deregister_op_overrides / reenable_op_overrides add to and take
// from the disabled entries, and republish the installed routers of the
// graphs they name; what makes a node enabled (the unconditional exemption
// and its mask) is decided here and nowhere else. Installs no new router
// except where an installed graph's chain turns non-empty.

#include "registry_impl.h"

#include "names.h"
#include "router.h"

namespace native_registry {

namespace {

void check_filter_entries(const char* what, const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) detail::check_not_blank(what, entry);
}

// What a filter change names, for its one log record.
std::string describe(const Filter& filter) {
  auto list = [](const std::vector<std::string>& names) {
    std::string out = "[";
    for (const std::string& name : names) out += (out.size() > 1 ? ", " : "") + name;
    return out + "]";
  };
  return "dsl=" + list(filter.dsl_names) + " op_symbol=" + list(filter.op_symbols) +
         " dispatch_key=" + list(filter.dispatch_keys);
}

}  // namespace

Filter detail::FilterState::as_filter() const {
  return {{dsl_names.begin(), dsl_names.end()},
          {op_symbols.begin(), op_symbols.end()},
          {dispatch_keys.begin(), dispatch_keys.end()}};
}

bool detail::FilterState::matches(const OverrideNode& node) const {
  return dsl_names.count(node.dsl_name) || op_symbols.count(node.key.op_symbol) ||
         dispatch_keys.count(node.key.dispatch_key);
}

// ---- filters ----------------------------------------------------------------

std::set<GraphKey> Registry::Impl::keys_named_by(const Filter& filter) const {
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

void Registry::Impl::follow_filter_change(const Filter& change, const Filter& named,
                                          FilterInstall install) {
  if (install == FilterInstall::kInstalled) {
    republish_installed(keys_named_by(change));  // all or nothing: see there
    return;
  }
  const std::set<GraphKey> keys = keys_named_by(named);
  install_graphs_locked({keys.begin(), keys.end()});  // all or nothing: see there
}

void Registry::Impl::deregister_op_overrides(const Filter& disable, FilterInstall install) {
  check_filter_entries("disable_dsl_names entry", disable.dsl_names);
  check_filter_entries("disable_op_symbols entry", disable.op_symbols);
  check_filter_entries("disable_dispatch_keys entry", disable.dispatch_keys);
  ControlScope scope(*this);
  log(LogLevel::kInfo, "Disabling overrides: " + describe(disable));
  const FilterState saved = state_.filters;
  state_.filters.dsl_names.insert(disable.dsl_names.begin(), disable.dsl_names.end());
  state_.filters.op_symbols.insert(disable.op_symbols.begin(), disable.op_symbols.end());
  state_.filters.dispatch_keys.insert(disable.dispatch_keys.begin(),
                                disable.dispatch_keys.end());
  try {
    // Upstream's front end re-registers every graph the whole filter names.
    follow_filter_change(disable, state_.filters.as_filter(), install);
  } catch (...) {
    state_.filters = saved;  // republish_installed published nothing
    throw;
  }
}

void Registry::Impl::reenable_op_overrides(const Filter& enable) {
  check_filter_entries("enable_dsl_names entry", enable.dsl_names);
  check_filter_entries("enable_op_symbols entry", enable.op_symbols);
  check_filter_entries("enable_dispatch_keys entry", enable.dispatch_keys);
  ControlScope scope(*this);
  log(LogLevel::kInfo, "Re-enabling overrides: " + describe(enable));
  const FilterState saved = state_.filters;
  for (const auto& name : enable.dsl_names) state_.filters.dsl_names.erase(name);
  for (const auto& name : enable.op_symbols) state_.filters.op_symbols.erase(name);
  for (const auto& name : enable.dispatch_keys) state_.filters.dispatch_keys.erase(name);
  try {
    follow_filter_change(enable, enable, install);  // upstream's: the graphs the entries name
  } catch (...) {
    state_.filters = saved;  // republish_installed published nothing
    throw;
  }
}

bool Registry::Impl::is_enabled(const OverrideNode& node) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return is_enabled_locked(node);
}

bool Registry::Impl::is_enabled_locked(const OverrideNode& node) const {
  if (!state_.filters.matches(node)) return true;
  // An unconditional override is the op's implementation: a disable leaves
  // it in place unless the mask is also up.
  return node.options.unconditional_override && unconditional_mask_depth_ == 0;
}

Graph Registry::Impl::enabled_chain(const GraphKey& key) const {
  Graph chain;
  auto it = state_.graphs.find(key);
  if (it == state_.graphs.end()) return chain;
  for (const NodePtr& node : it->second) {
    if (is_enabled_locked(*node)) chain.push_back(node);
  }
  return chain;
}

void Registry::Impl::republish_installed(const std::set<GraphKey>& keys) {
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

void Registry::Impl::republish_all_installed() { republish_installed(state_.installed); }

// ---- the unconditional mask ---------------------------------------------------

void Registry::Impl::push_unconditional_mask() {
  ControlScope scope(*this);
  ++unconditional_mask_depth_;
  try {
    republish_all_installed();
  } catch (...) {
    --unconditional_mask_depth_;
    throw;
  }
}

void Registry::Impl::pop_unconditional_mask() {
  ControlScope scope(*this);
  --unconditional_mask_depth_;
  try {
    republish_all_installed();
  } catch (const std::exception& e) {
    log(LogLevel::kWarning, std::string("lifting the unconditional mask failed: ") + e.what());
  }
}

}  // namespace native_registry
