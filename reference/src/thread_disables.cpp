// Per-thread disables (thread_disables.h) and Registry::DisabledInThread.

#include "thread_disables.h"

#include "registry_impl.h"

#include <algorithm>
#include <atomic>

namespace native_registry {
namespace detail {

thread_local constinit const ThreadDisables* t_thread_disables = nullptr;

namespace {

std::atomic<uint64_t> g_next_token{1};

// Owns this thread's view; clears the raw pointer when the thread's
// thread_locals are destroyed, so a call made from a later destructor sees
// no scope instead of a freed one.
struct ViewOwner {
  std::shared_ptr<const ThreadDisables> view;
  ~ViewOwner() { t_thread_disables = nullptr; }
};

ViewOwner& owner() {
  thread_local ViewOwner the_owner;
  return the_owner;
}

void publish(std::shared_ptr<const ThreadDisables> view) {
  ViewOwner& mine = owner();
  // The old view goes only after the pointer moved off it.
  std::shared_ptr<const ThreadDisables> old = std::move(mine.view);
  mine.view = std::move(view);
  t_thread_disables = mine.view.get();
}

}  // namespace

bool disabled_by_thread(const ThreadDisables& disables, const OverrideNode& node) {
  for (const ThreadDisables::Scope& scope : disables.scopes) {
    if (scope.registry_serial == node.registry_serial &&
        !FilterSet::enabled_under(scope.entries, 0, node)) {
      return true;
    }
  }
  return false;
}

uint64_t open_thread_scope(uint64_t registry_serial, FilterEntries entries) {
  const uint64_t token = g_next_token.fetch_add(1, std::memory_order_relaxed);
  auto view = std::make_shared<ThreadDisables>();
  if (t_thread_disables != nullptr) view->scopes = t_thread_disables->scopes;
  view->scopes.push_back({token, registry_serial, std::move(entries)});
  publish(std::move(view));
  return token;
}

bool close_thread_scope(uint64_t token) {
  if (t_thread_disables == nullptr) return false;
  std::vector<ThreadDisables::Scope> scopes = t_thread_disables->scopes;
  auto it = std::find_if(scopes.begin(), scopes.end(),
                         [token](const ThreadDisables::Scope& scope) { return scope.token == token; });
  if (it == scopes.end()) return false;
  scopes.erase(it);
  if (scopes.empty()) {
    publish(nullptr);
  } else {
    auto view = std::make_shared<ThreadDisables>();
    view->scopes = std::move(scopes);
    publish(std::move(view));
  }
  return true;
}

}  // namespace detail

uint64_t Registry::open_disabled_in_thread(const Filter& filter) const {
  detail::check_filter_entries(filter, {"disabled_in_thread entry", "disabled_in_thread entry",
                                        "disabled_in_thread entry"});
  detail::FilterEntries entries;
  entries.add(filter);
  return detail::open_thread_scope(impl_->serial_, std::move(entries));
}

bool Registry::close_disabled_in_thread(uint64_t token) { return detail::close_thread_scope(token); }

bool Registry::is_disabled_in_this_thread(const OverrideNode& node) {
  return detail::disabled_in_this_thread(node);
}

Registry::DisabledInThread::DisabledInThread(const Registry& registry, const Filter& filter)
    : token_(registry.open_disabled_in_thread(filter)) {}

Registry::DisabledInThread::~DisabledInThread() {
  // Destroyed on another thread it finds no scope of this thread's to close,
  // and the opener's stays open: a broken precondition, said out loud.
  if (!detail::close_thread_scope(token_)) {
    TORCH_WARN("native_registry: a Registry::DisabledInThread was destroyed on a thread other "
               "than the one that made it; its disables stay in force on that thread");
  }
}

}  // namespace native_registry
