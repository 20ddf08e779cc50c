// RouterTable (router_table.h): a registry's routers in the dispatcher, the
// installed keys and the empty-chain policy.

#include "router_table.h"

#include <stdexcept>
#include <string>

namespace native_registry::detail {

const Router* RouterTable::find(const GraphKey& key) const {
  auto it = routers_.find(key);
  return it == routers_.end() ? nullptr : it->second.get();
}

RouterState RouterTable::state(const GraphKey& key) const {
  const Router* router = find(key);
  if (router == nullptr) return RouterState::kAbsent;
  return router->published().empty() ? RouterState::kDormant : RouterState::kActive;
}

RouterTable::Step RouterTable::step_for(const GraphKey& key, bool empty_chain,
                                        InstallMode mode) const {
  const Router* router = find(key);
  const bool stale = router != nullptr && router->op_gone();
  if (empty_chain) {
    if (router == nullptr) return Step::kNothing;
    if (stale || mode == InstallMode::kReinstall ||
        policy_ == EmptyChainPolicy::kRemoveRouter) {
      return Step::kRemove;
    }
    return Step::kPublishInPlace;
  }
  const bool new_router = router == nullptr || stale || mode == InstallMode::kReinstall;
  return new_router ? Step::kNewRouter : Step::kPublishInPlace;
}

void RouterTable::publish_in_place(const GraphKey& key, const Graph& chain) {
  routers_.at(key)->publish(chain);
}

void RouterTable::install(const GraphKey& key, const c10::OperatorHandle& op, const Graph& chain,
                          Released& released) {
  remove(key, released);
  std::shared_ptr<GraphCounters>& counters = counters_[key];
  if (!counters) counters = std::make_shared<GraphCounters>();
  routers_[key] = std::make_unique<Router>(key, op, chain, settings_, counters);
}

void RouterTable::set_coverage(std::shared_ptr<const CoverageCheck> coverage,
                               Released& released) {
  // The routers hold the old check for calls still inside them; the table's
  // own hold goes with what the operation retired.
  if (settings_.coverage) released.push_back(std::move(settings_.coverage));
  settings_.coverage = std::move(coverage);
  for (auto& entry : routers_) entry.second->apply(settings_);
}

void RouterTable::set_impl_error_policy(ImplErrorPolicy policy) {
  settings_.impl_errors = policy;
  for (auto& entry : routers_) entry.second->apply(settings_);
}

void RouterTable::set_collect_stats(bool collect) {
  settings_.collect_stats = collect;
  for (auto& entry : routers_) entry.second->apply(settings_);
}

void RouterTable::reset_counters() {
  for (auto& entry : counters_) entry.second->reset();
}

void RouterTable::remove(const GraphKey& key, Released& released) {
  auto it = routers_.find(key);
  if (it == routers_.end()) return;
  released.push_back(it->second->keep_alive());
  routers_.erase(it);
}

void RouterTable::remove_all(Released& released) {
  for (auto& entry : routers_) released.push_back(entry.second->keep_alive());
  routers_.clear();
}

// ---- invariants -------------------------------------------------------------
void RouterTable::check(uint64_t registry_serial) const {
  auto fail = [](const std::string& what) { throw std::logic_error("invariant: " + what); };
  auto admitted = [&fail](const GraphKey& key) {
    if (key.parsed_dispatch_key == c10::DispatchKey::Undefined) {
      fail("key " + key.to_string() + " is held unparsed");
    }
  };
  for (const GraphKey& key : installed_) admitted(key);
  for (const auto& [key, router] : routers_) {
    admitted(key);
    if (!installed_.count(key)) fail("router of " + key.to_string() + " for a graph never installed");
    if (router->coverage() != settings_.coverage.get() ||
        router->impl_error_policy() != settings_.impl_errors ||
        router->collects_stats() != settings_.collect_stats) {
      fail("router of " + key.to_string() + " follows settings other than the registry's");
    }
    const auto counted = counters_.find(key);
    if (counted == counters_.end() || router->counters() != counted->second.get()) {
      fail("router of " + key.to_string() + " counts elsewhere than its key's counters");
    }
    // The published chain may lag the graph (registration and a reorder
    // without reinstall publish nothing), but it holds only this key's nodes
    // of this registry.
    for (const NodePtr& node : router->published()) {
      if (!(node->key == key) || node->registry_serial != registry_serial) {
        fail("router of " + key.to_string() + " routes through foreign node " + node->node_id);
      }
    }
  }
}

}  // namespace native_registry::detail
