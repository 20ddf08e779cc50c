#pragma once

// Per-thread disables (Registry::DisabledInThread): the entries this thread's
// open scopes name, which its calls read on every node they consider.
//
// Invariants: a thread's scopes form a stack whose published view
// (t_thread_disables) is immutable and replaced whole at each entry and
// exit, so a call that read it keeps a valid view until it reads it again;
// the call path reads it afresh for each node (a cond may open or close a
// scope). Null while the thread has no open scope: then a call pays one
// thread-local load per node and nothing else. A scope names only nodes of
// the registry that opened it, and never an unconditional node (the rule of
// FilterSet::enabled_under with no mask up).
//
// Owns: this thread's scopes. May not touch: any registry's state; another
// thread's scopes.

#include "filter_set.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace native_registry::detail {

struct ThreadDisables {
  struct Scope {
    uint64_t token;            // the scope's own, unique for the process
    uint64_t registry_serial;  // the registry whose nodes it names
    FilterEntries entries;
  };
  std::vector<Scope> scopes;  // outermost first
};

// This thread's view, or null. A trivial thread_local: no guard on the call path.
// constinit: a caller in another file reads it without the check for a
// dynamic initialiser that an extern thread_local costs otherwise.
extern thread_local constinit const ThreadDisables* t_thread_disables;

// Whether this thread's open scopes disable `node`.
bool disabled_by_thread(const ThreadDisables& disables, const OverrideNode& node);

inline bool disabled_in_this_thread(const OverrideNode& node) {
  const ThreadDisables* disables = t_thread_disables;
  return C10_UNLIKELY(disables != nullptr) && disabled_by_thread(*disables, node);
}

// Opens a scope on this thread; returns its token.
uint64_t open_thread_scope(uint64_t registry_serial, FilterEntries entries);
// Closes this thread's scope of `token`, wherever it is in the stack (a
// host's scopes may end out of order); false if this thread has none such.
bool close_thread_scope(uint64_t token);

}  // namespace native_registry::detail
