// The process-wide store of retired `_native` ops still held outside a
// registry (retired_native_ops.h), and hold_native_op(), the C++ way to
// hold one (registry.h).

#include "retired_native_ops.h"

#include "names.h"

#include <native_registry/registry.h>

#include <algorithm>
#include <map>

#include <torch/csrc/jit/runtime/operator.h>

namespace native_registry {
namespace detail {
namespace {

struct Store {
  std::map<std::string, std::unique_ptr<NativeOp>> kept;  // by node_id
  std::size_t kept_after_sweep = 0;  // what the last sweep left
};

// Never destroyed: ops may be retired during static destruction.
Store& store() {
  static auto* s = new Store();
  return *s;
}

}  // namespace

std::mutex& retired_native_ops_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

void keep_retired(std::unique_ptr<NativeOp> op) {
  std::lock_guard<std::mutex> lock(retired_native_ops_mutex());
  const std::string id = op->node_id();
  store().kept[id] = std::move(op);
}

std::unique_ptr<NativeOp> take_retired(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(retired_native_ops_mutex());
  auto it = store().kept.find(node_id);
  if (it == store().kept.end()) return nullptr;
  std::unique_ptr<NativeOp> op = std::move(it->second);
  store().kept.erase(it);
  return op;
}

std::optional<std::string> retired_signature(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(retired_native_ops_mutex());
  auto it = store().kept.find(node_id);
  if (it == store().kept.end()) return std::nullopt;
  return it->second->signature();
}

void reclaim_retired() {
  std::lock_guard<std::mutex> lock(retired_native_ops_mutex());
  Store& s = store();
  // Amortised: a sweep costs one look-up per kept op, and runs once the
  // store has doubled since the last one left it (or is small).
  if (s.kept.size() > kRetiredSweepFloor && s.kept.size() < 2 * s.kept_after_sweep) return;
  std::erase_if(s.kept, [](const auto& entry) { return !entry.second->held_outside(); });
  s.kept_after_sweep = s.kept.size();
}

// ---- invariants -------------------------------------------------------------

// For NativeOpTable::check: what reclaim_retired() leaves the store, at most.
RetiredCounts retired_counts() {
  std::lock_guard<std::mutex> lock(retired_native_ops_mutex());
  const Store& s = store();
  return {s.kept.size(), std::max(kRetiredSweepFloor, 2 * s.kept_after_sweep)};
}

}  // namespace detail

// ---- holding a `_native` op from C++ -------------------------------------------

std::shared_ptr<const c10::OperatorHandle> hold_native_op(const std::string& node_id) {
  const c10::OperatorName name = detail::native_op_name(node_id);
  auto op = c10::Dispatcher::singleton().findSchema(name);
  if (!op) return nullptr;
  // What a torch.ops object holds: while it lives, held_outside() is true.
  struct Held {
    std::shared_ptr<torch::jit::Operator> jit_operator;
    c10::OperatorHandle handle;
  };
  auto held = std::make_shared<Held>(Held{torch::jit::findOperatorFor(name), *op});
  TORCH_CHECK(held->jit_operator, "hold_native_op: LibTorch made no operator for _native::",
              node_id, ", so the op cannot be held");
  return std::shared_ptr<const c10::OperatorHandle>(held, &held->handle);
}

}  // namespace native_registry
