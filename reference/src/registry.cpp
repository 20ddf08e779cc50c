// The registry's lifetime: its serial, its teardown (everything it put into
// the dispatcher taken out), the process-wide instance, and Snapshot's
// special members. The operations live in the files of their concerns
// (registry_impl.h lists them).

#include "registry_impl.h"

#include "fork_guard.h"
#include "retired_native_ops.h"

#include <atomic>
#include <utility>

namespace native_registry {

namespace {
std::atomic<uint64_t> g_next_registry_serial{1};
}  // namespace

Registry::Impl::Impl() : serial_(g_next_registry_serial.fetch_add(1)) {
  detail::register_fork_lock(mutex_);
}

Registry::Registry() : impl_(std::make_unique<Impl>()) {}

Registry::~Registry() {
  Impl& r = *impl_;
  detail::unregister_fork_lock(r.mutex_);  // first: not under our own lock (see fork_guard.h)
  Impl::ControlScope scope(r);
  // Routers first: they may route to the `_native` ops' impls.
  r.routers_.remove_all(r.released());
  r.native_ops_.retire_all(r.released());  // undefined, or kept while held
  detail::reclaim_retired();
  r.defer_release(std::make_shared<detail::GraphTable>(std::move(r.graphs_)));
}

Registry& Registry::global() {
  static Registry* registry = new Registry();
  return *registry;
}

Snapshot::Snapshot() = default;
Snapshot::~Snapshot() = default;
Snapshot::Snapshot(const Snapshot&) = default;
Snapshot& Snapshot::operator=(const Snapshot&) = default;

}  // namespace native_registry
