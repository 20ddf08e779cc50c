// Installation: the only code that changes the dispatcher for ops outside
// `_native`. A router goes in (capturing the kernel live at its key) or out,
// a chain is published into a router in place, and the `_native` ops of a
// chain are activated before any router routes to them; the router queries.
// Over the router table (router_table.h) and the `_native` op table
// (native_op_table.h).
// Owns: the order of those steps, so that each operation throws before it
// changes anything. May not touch: graphs or filters but through their reads.

#include "registry_impl.h"

#include "names.h"

namespace native_registry {

using detail::RouterTable;

// ---- installation -----------------------------------------------------------

void Registry::Impl::publish(const GraphKey& key, const Graph& chain, InstallMode mode) {
  switch (routers_.step_for(key, chain.empty(), mode)) {
    case RouterTable::Step::kNothing:
      return;
    case RouterTable::Step::kRemove:
      routers_.remove(key, released());
      return;
    case RouterTable::Step::kPublishInPlace:
      // The router's op is there: one whose op left is rebuilt (step_for).
      // Activation throws before any change.
      native_ops_.activate(chain, nullptr, released());
      routers_.publish_in_place(key, chain);
      return;
    case RouterTable::Step::kNewRouter: {
      // Both throw before any change.
      const c10::OperatorHandle op = detail::resolve_op_for_router(key);
      native_ops_.activate(chain, nullptr, released());
      routers_.install(key, op, chain, released());
      return;
    }
  }
}

void Registry::Impl::check_publish(const GraphKey& key, const Graph& chain,
                                   InstallMode mode) const {
  switch (routers_.step_for(key, chain.empty(), mode)) {
    case RouterTable::Step::kNothing:
    case RouterTable::Step::kRemove:
      return;
    case RouterTable::Step::kPublishInPlace:
      break;  // into a router whose op is there (see publish)
    case RouterTable::Step::kNewRouter:
      detail::resolve_op_for_router(key);
      break;
  }
  native_ops_.check_activation(chain, nullptr);
}

void Registry::install_graph(const GraphKey& named, InstallMode mode) {
  // A key no registration could have made is refused, not recorded.
  const GraphKey key = detail::admitted_key(named);
  Impl::ControlScope scope(*impl_);
  impl_->install_graph_locked(key, mode);
}

void Registry::Impl::install_graph_locked(const GraphKey& key, InstallMode mode) {
  publish(key, enabled_chain(key), mode);
  routers_.mark_installed(key);
}

void Registry::Impl::install_graphs_locked(const std::vector<GraphKey>& keys) {
  for (const GraphKey& key : keys) check_publish(key, enabled_chain(key), InstallMode::kUpdate);
  for (const GraphKey& key : keys) install_graph_locked(key, InstallMode::kUpdate);
}

void Registry::install_all() {
  Impl::ControlScope scope(*impl_);
  std::vector<GraphKey> keys;
  for (const auto& entry : impl_->graphs_.graphs()) keys.push_back(entry.first);
  impl_->install_graphs_locked(keys);
}

// ---- graph surgery ----------------------------------------------------------
// Beyond upstream's API: a router taken out while its graph stays, for
// upstream_compat's view of upstream's router libraries (and C++ users).

void Registry::uninstall_graph(const GraphKey& key) {
  Impl::ControlScope scope(*impl_);
  impl_->routers_.remove(key, impl_->released());
  impl_->routers_.forget_installed(key);
}

// ---- queries and the setting ----------------------------------------------------

RouterState Registry::router_state(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->routers_.state(key);
}

std::vector<GraphKey> Registry::router_keys() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  std::vector<GraphKey> keys;
  for (const auto& entry : impl_->routers_.routers()) keys.push_back(entry.first);
  return keys;
}

Graph Registry::published_chain(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  const detail::Router* router = impl_->routers_.find(key);
  return router == nullptr ? Graph{} : router->published();
}

uint64_t Registry::router_id(const GraphKey& key) const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  const detail::Router* router = impl_->routers_.find(key);
  return router == nullptr ? 0 : router->id();
}

void Registry::set_empty_chain_policy(EmptyChainPolicy policy) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->routers_.set_empty_chain_policy(policy);
}

void Registry::set_coverage_check(CoverageCheck check) {
  Impl::ControlScope scope(*impl_);
  impl_->routers_.set_coverage(
      check ? std::make_shared<const CoverageCheck>(std::move(check)) : nullptr,
      impl_->released());
}

bool Registry::has_coverage_check() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->routers_.settings().coverage != nullptr;
}

CoverageCheck Registry::coverage_check() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  const auto& coverage = impl_->routers_.settings().coverage;
  return coverage ? *coverage : CoverageCheck{};
}

void Registry::set_impl_error_policy(ImplErrorPolicy policy) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->routers_.set_impl_error_policy(policy);
}

ImplErrorPolicy Registry::impl_error_policy() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->routers_.settings().impl_errors;
}

EmptyChainPolicy Registry::empty_chain_policy() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->routers_.empty_chain_policy();
}

}  // namespace native_registry
