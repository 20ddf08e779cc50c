#pragma once

// The retired `_native` ops that something outside a registry may still
// hold, kept process-wide until nothing does, then undefined. See Note
// [Retired _native ops] (native_op.h) for why and for what can hold one. Process-wide because a held op may outlive the registry
// that retired it, and any registry's teardown may find it free.
//
// A registry undefines an op it retires at once when nothing holds it
// (the common case: a scope per test), so only held ops come here.
// reclaim_retired() sweeps the store whenever it has grown to twice what
// its last sweep left, or is small: each retirement costs amortised O(1),
// and the store holds at most max(kRetiredSweepFloor, 2 x the ops held at
// its last sweep) ops (retired_counts() says how many now).
//
// Locking: the store's lock is taken under a registry's lock, never the
// other way round; sweeping undefines ops under it (the dispatcher's lock,
// then LibTorch's JIT registry's and the op watches' lock, are taken
// inside), so fork_guard takes it after the registries' locks and before
// the op watches' lock.
//
// Owns: the store. May not touch: active ops (a registry's own).

#include "native_op.h"

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace native_registry::detail {

// The store is swept whole at every reclaim while it holds no more than this.
constexpr std::size_t kRetiredSweepFloor = 64;

// Keeps `op`, retired and held outside, until nothing holds it.
void keep_retired(std::unique_ptr<NativeOp> op);
// Takes the kept op of `node_id` out of the store (to activate it again),
// or null if none is kept (never retired, or undefined since).
std::unique_ptr<NativeOp> take_retired(const std::string& node_id);
// The signature (NativeOp::signature_of) the kept op of `node_id` was
// defined with, if one is kept.
std::optional<std::string> retired_signature(const std::string& node_id);
// Undefines the kept ops nothing holds any more, when the store is due a
// sweep (see above).
void reclaim_retired();

struct RetiredCounts {
  std::size_t kept = 0;   // ops in the store
  std::size_t bound = 0;  // what the store may hold after a reclaim
};
RetiredCounts retired_counts();

// The store's lock, for the fork handlers (fork_guard.h).
std::mutex& retired_native_ops_mutex();

}  // namespace native_registry::detail
