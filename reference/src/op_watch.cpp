// The watches of op_watch.h: the table of live watches by op name and the
// registration listener that marks them when an op's schema is removed and
// counts the removals (schema_removal_epoch, call_hooks.h).
//
// Owns: that table, the count and the listener (installed once, kept for
// the life of the process). May not touch: registry state, routers or `_native` ops;
// they read the flag a watch carries and decide what to do.

#include "op_watch.h"

#include <native_registry/call_hooks.h>

#include <unordered_map>
#include <vector>

namespace native_registry::detail {

// schema_removal_epoch's count (call_hooks.h reads it inline).
std::atomic<uint64_t> g_schema_removals{0};

namespace {

// Every live watch, by op name. Expired entries are pruned when a watch of
// the same name is added, so the table holds about one entry per watched op.
std::unordered_map<std::string, std::vector<std::weak_ptr<OpWatch>>>& watches() {
  static auto* table = new std::unordered_map<std::string, std::vector<std::weak_ptr<OpWatch>>>();
  return *table;
}

class SchemaRemovalWatcher final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  // Called before the schema goes, while the handle is still valid.
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    g_schema_removals.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard<std::mutex> lock(op_watch_mutex());
    auto it = watches().find(full_name(op.operator_name()));
    if (it == watches().end()) return;
    for (const auto& weak : it->second) {
      if (auto watch = weak.lock()) watch->gone.store(true, std::memory_order_release);
    }
    watches().erase(it);
  }
};

void install_listener() {
  // Kept for the life of the process: the dispatcher outlives the registry.
  static auto* handle = new c10::RegistrationHandleRAII(
      c10::Dispatcher::singleton().addRegistrationListener(
          std::make_unique<SchemaRemovalWatcher>()));
  (void)handle;
}

}  // namespace

std::mutex& op_watch_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

std::shared_ptr<const OpWatch> watch_op(const c10::OperatorHandle& op) {
  install_listener();  // takes the dispatcher's lock: before ours
  auto watch = std::make_shared<OpWatch>(full_name(op.operator_name()));
  {
    std::lock_guard<std::mutex> lock(op_watch_mutex());
    auto& list = watches()[watch->name];
    std::erase_if(list, [](const std::weak_ptr<OpWatch>& weak) { return weak.expired(); });
    list.push_back(watch);
  }
  // Removed before the watch was in the table: LibTorch forbids changing an
  // op while another thread installs on it, but a gone schema is cheap to see.
  if (!op.hasSchema()) watch->gone.store(true, std::memory_order_release);
  return watch;
}

}  // namespace native_registry::detail

namespace native_registry {

void watch_schema_removals() { detail::install_listener(); }

}  // namespace native_registry
