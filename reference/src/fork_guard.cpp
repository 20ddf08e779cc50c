// The fork handlers fork_guard.h describes: the list of registered locks, the
// pthread_atfork handlers that take and release them in order, and the lock of
// the kept `_native` definitions.
//
// Owns: which locks are held across fork() and in what order. May not touch:
// what those locks guard (registry state, routers, the dispatcher); the
// handlers take and release locks and allocate nothing.

#include "fork_guard.h"

#include "op_watch.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace native_registry::detail {
namespace {

// Never destroyed: a fork may happen during static destruction.
std::mutex& registration_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

std::vector<std::mutex*>& registered() {
  static auto* locks = new std::vector<std::mutex*>();
  return *locks;
}

void prepare() {
  registration_mutex().lock();
  for (std::mutex* lock : registered()) lock->lock();
  op_watch_mutex().lock();
  kept_definitions_mutex().lock();
}

// In the parent, and in the child, where the forking thread (the only one
// copied) is the one that took them.
void release() {
  kept_definitions_mutex().unlock();
  op_watch_mutex().unlock();
  for (auto it = registered().rbegin(); it != registered().rend(); ++it) (*it)->unlock();
  registration_mutex().unlock();
}

void install_handlers() {
  static const bool installed = [] {
    // Made before the handlers can run, so prepare allocates nothing.
    (void)op_watch_mutex();
    (void)kept_definitions_mutex();
    if (pthread_atfork(prepare, release, release) != 0) {
      std::fputs("[native_registry] pthread_atfork failed: a fork while another thread is "
                 "inside the registry may hang the child\n", stderr);
    }
    return true;
  }();
  (void)installed;
}

}  // namespace

void register_fork_lock(std::mutex& lock) {
  install_handlers();
  std::lock_guard<std::mutex> guard(registration_mutex());
  registered().push_back(&lock);
}

void unregister_fork_lock(std::mutex& lock) {
  std::lock_guard<std::mutex> guard(registration_mutex());
  auto& locks = registered();
  locks.erase(std::remove(locks.begin(), locks.end(), &lock), locks.end());
}

std::mutex& kept_definitions_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

}  // namespace native_registry::detail
