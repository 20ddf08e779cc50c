// The public face of the registry: Registry forwards every operation to its
// Impl (registry_impl.h), which owns the state; this file also holds the
// registry's lifetime (serial, teardown, the process-wide instance) and the
// unconditional mask's scope. No registry logic lives here.

#include "registry_impl.h"

#include "fork_guard.h"
#include "native_op.h"
#include "retired_native_ops.h"
#include "router.h"

#include <atomic>
#include <utility>
#include <vector>

namespace native_registry {

// ---- lifetime ---------------------------------------------------------------

namespace {
std::atomic<uint64_t> g_next_registry_serial{1};
}  // namespace

Registry::Impl::Impl() : serial_(g_next_registry_serial.fetch_add(1)) {
  detail::register_fork_lock(mutex_);
}

Registry::Impl::~Impl() {
  detail::unregister_fork_lock(mutex_);  // first: not under our own lock (see fork_guard.h)
  ControlScope scope(*this);
  // Routers first: they may route to the `_native` ops' impls.
  for (auto& entry : routers_) defer_release(entry.second->keep_alive());
  routers_.clear();
  std::vector<std::string> ids;
  for (const auto& entry : native_ops_) ids.push_back(entry.first);
  for (const std::string& id : ids) retire_native_op(id);  // undefined, or kept while held
  detail::reclaim_retired();
  defer_release(std::make_shared<std::map<GraphKey, Graph>>(std::move(state_.graphs)));
}

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

Registry& Registry::global() {
  static Registry* registry = new Registry();
  return *registry;
}

Snapshot::Snapshot() = default;
Snapshot::~Snapshot() = default;
Snapshot::Snapshot(const Snapshot&) = default;
Snapshot& Snapshot::operator=(const Snapshot&) = default;

Registry::UnconditionalMask::UnconditionalMask(Registry& registry) : registry_(registry) {
  registry_.impl_->push_unconditional_mask();
}

Registry::UnconditionalMask::~UnconditionalMask() { registry_.impl_->pop_unconditional_mask(); }

// ---- forwarders, in registry.h's order ---------------------------------------

NodePtr Registry::register_op_override(const std::string& dsl_name,
                                       const std::string& lib_symbol,
                                       const std::string& op_symbol,
                                       const std::string& dispatch_key, CondFn cond,
                                       ImplFn impl, OverrideOptions options) {
  return impl_->register_op_override(dsl_name, lib_symbol, op_symbol, dispatch_key,
                                     std::move(cond), std::move(impl), std::move(options));
}

NodePtr Registry::replace_node_callables(const OverrideNode& node, CondFn cond, ImplFn impl,
                                         OverrideOptions options) {
  return impl_->replace_node_callables(node, std::move(cond), std::move(impl), std::move(options));
}

void Registry::deregister_op_overrides(const Filter& disable, FilterInstall install) {
  impl_->deregister_op_overrides(disable, install);
}
void Registry::reenable_op_overrides(const Filter& enable, FilterInstall install) {
  impl_->reenable_op_overrides(enable, install);
}

std::vector<GraphKey> Registry::reorder_graphs(const OrderingFn& fn, bool reinstall) {
  return reorder_graphs(fn, reinstall ? ReorderInstall::kInstalled : ReorderInstall::kNothing);
}
std::vector<GraphKey> Registry::reorder_graphs(const OrderingFn& fn, ReorderInstall install) {
  return impl_->reorder_graphs(fn, install);
}
void Registry::replace_graph(const GraphKey& key, const Graph& nodes) {
  impl_->replace_graph(key, nodes);
}
void Registry::erase_graph(const GraphKey& key) { impl_->erase_graph(key); }

void Registry::install_graph(const GraphKey& key, InstallMode mode) {
  impl_->install_graph(key, mode);
}
void Registry::install_all() { impl_->install_all(); }
void Registry::uninstall_graph(const GraphKey& key) { impl_->uninstall_graph(key); }

Snapshot Registry::snapshot() const {
  Snapshot snapshot;
  snapshot.state_ = impl_->snapshot();
  return snapshot;
}
void Registry::restore(const Snapshot& snapshot) { impl_->restore(snapshot.state_.get()); }

void Registry::allow_namespace(const std::string& lib_symbol) {
  impl_->allow_namespace(lib_symbol);
}
void Registry::disallow_namespace(const std::string& lib_symbol) {
  impl_->disallow_namespace(lib_symbol);
}
bool Registry::is_namespace_allowed(const std::string& lib_symbol) const {
  return impl_->is_namespace_allowed(lib_symbol);
}
std::set<std::string> Registry::allowed_namespaces() const { return impl_->allowed_namespaces(); }

std::vector<std::string> Registry::get_dsl_operations(const std::string& dsl_name,
                                                      const std::string& lib_symbol) const {
  return impl_->get_dsl_operations(dsl_name, lib_symbol);
}
std::vector<GraphKey> Registry::graph_keys() const { return impl_->graph_keys(); }
Graph Registry::graph(const GraphKey& key) const { return impl_->graph(key); }
bool Registry::is_enabled(const OverrideNode& node) const { return impl_->is_enabled(node); }
RouterState Registry::router_state(const GraphKey& key) const { return impl_->router_state(key); }
std::vector<GraphKey> Registry::router_keys() const { return impl_->router_keys(); }
uint64_t Registry::router_id(const GraphKey& key) const { return impl_->router_id(key); }
Graph Registry::published_chain(const GraphKey& key) const { return impl_->published_chain(key); }
Filter Registry::filters() const { return impl_->filters(); }
std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_dsl_name() const {
  return impl_->graphs_by_dsl_name();
}
std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_op_symbol() const {
  return impl_->graphs_by_op_symbol();
}
std::map<std::string, std::vector<GraphKey>> Registry::graphs_by_dispatch_key() const {
  return impl_->graphs_by_dispatch_key();
}

void Registry::set_empty_chain_policy(EmptyChainPolicy policy) {
  impl_->set_empty_chain_policy(policy);
}
EmptyChainPolicy Registry::empty_chain_policy() const { return impl_->empty_chain_policy(); }
void Registry::set_log_sink(LogSink sink) { impl_->set_log_sink(std::move(sink)); }
void Registry::set_release_sink(ReleaseSink sink) { impl_->set_release_sink(std::move(sink)); }

void Registry::check_invariants() const { impl_->check_invariants(); }
std::string Registry::dump_state() const { return impl_->dump_state(); }

}  // namespace native_registry
