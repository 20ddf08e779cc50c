#pragma once

// fork() while another thread holds one of the registry's locks leaves that
// lock held forever in the child (only the forking thread is copied), so
// the child's first control-plane call would hang. Data loaders fork with
// other threads running, so every lock the control plane and the call path
// take is held across fork() by pthread_atfork handlers:
//   prepare  takes this module's lock, then every registered lock in
//            registration order, then the leaf locks (op watches, kept
//            `_native` definitions);
//   parent   and child release them all, in reverse.
// So a fork waits until no thread is inside a critical section of the
// registry, and the child starts with every lock free and every structure
// consistent. No control-plane lock is held while user code (a cond, an
// impl, an ordering function) runs, so the forking thread never waits for
// one of its own callers. The order is deadlock-free: a registry's lock is
// never taken under another's or under a leaf lock, and this module's lock
// is taken only by registration (outside any registry lock) and here.
//
// Locks LibTorch takes inside its own dispatcher are LibTorch's: the
// registry enters the dispatcher only under its own lock, so a fork never
// catches the registry there, but another thread defining ops directly may.
//
// Owns: the list of locks held across fork and their order. May not touch:
// what the locks guard; a new lock of the registry is registered here, never
// held across fork by handlers of its own.

#include <mutex>

namespace native_registry::detail {

// Holds `lock` across every fork from now on, until unregistered; the
// handlers are installed on the first call.
void register_fork_lock(std::mutex& lock);
void unregister_fork_lock(std::mutex& lock);

// The lock of the kept `_native` definitions (native_op.cpp), a leaf.
std::mutex& kept_definitions_mutex();

}  // namespace native_registry::detail
