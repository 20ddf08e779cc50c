#pragma once

// Which ops have left the dispatcher since the registry took a handle to
// them.
//
// A c10::OperatorHandle is an iterator into the dispatcher's list of ops:
// once the op's last definition and last kernel are gone (a torch.library
// handle destroyed, say), the handle dangles, and an op defined again under
// the same name is a different entry, maybe of another schema. A router
// keeps its op's entry alive (its kernel is registered there) but not its
// schema; a `_native` op keeps nothing of its target alive. So both watch
// their op: the dispatcher's registration listener marks the watch the
// moment the op's schema is removed, before the entry can go, and a call
// that finds its watch marked raises an error naming the override and the
// op instead of calling through the handle.
//
// Locking: the listener runs under the dispatcher's lock and takes this
// module's lock (a leaf: nothing is called while it is held). watch_op
// takes the dispatcher's lock once (to install the listener), never while
// holding this module's lock.
//
// Owns: OpWatch and the lock of the watch table (op_watch.cpp defines them).
// May not touch: what a watcher does once its op is gone (the router's and
// the `_native` op's errors are theirs).

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

namespace native_registry::detail {

struct OpWatch {
  explicit OpWatch(std::string op_name) : name(std::move(op_name)) {}
  const std::string name;  // "ns::op" or "ns::op.overload"
  // Set, from inside the dispatcher, when the op's schema is removed. Never
  // cleared: a later definition of the same name is another op.
  std::atomic<bool> gone{false};
};

// "ns::op" or "ns::op.overload".
std::string full_name(const c10::OperatorName& name);

// Starts watching `op`, which has a schema now.
std::shared_ptr<const OpWatch> watch_op(const c10::OperatorHandle& op);

// The lock the listener takes, for the fork handlers (see fork_guard.h).
std::mutex& op_watch_mutex();

}  // namespace native_registry::detail
