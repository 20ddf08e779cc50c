// The GIL: where the binding holds it and where it lets it go, and the host
// scope through which a router whose chain holds Python makes its choice.
//
// Owns: the host-scope mark of each thread, with_gil (the host scope, and the
// SharedArguments of its call) and host_scope_holding_gil (which GilForPython,
// in binding.h, asks). May not
// touch: registry state, or the GIL anywhere but here and in the helpers
// binding.h declares beside these.
//
// GIL rules: every control-plane function and query releases the GIL before
// it enters the core (which may wait for the registry's lock, held by a
// thread that is about to need the GIL: a log handler, an ordering
// function), and takes it back only to run Python: the ordering function,
// the log sink, the conversions of its arguments and results. The core holds
// no lock while it runs any of these. The call path takes the GIL only where Python runs: once
// around a router's choice when its chain holds a Python cond or runtime check
// (the host scope, which also covers the trace shortcut and the Python impl it
// chooses), and inside a Python impl chosen without one; chains of C++
// predicates decline without it. Python references held
// by C++ objects are dropped under the GIL (PyRef), at once by a thread that
// holds it, else deferred (drop_reference): a destructor never takes the GIL.

#include "binding.h"

#include <c10/macros/Macros.h>

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace native_registry::python {

namespace {

// This thread's innermost host scope (with_gil), or a null state outside
// one. Python code run inside the scope may release the GIL (a torch op
// called from a cond does) and a router reached from there runs with it
// released, so the mark alone proves nothing: see host_scope_holding_gil.
thread_local HostScope t_host_scope;

C10_NOINLINE HostScope* host_scope_mark() { return &t_host_scope; }

// The thread state that holds the GIL, or this thread's while it holds the
// GIL (CPython versions differ: a global, or a thread-local, possibly null):
// in both, this thread holds the GIL with `state` when this returns `state`.
// Cheaper than the PyGILState calls, which read thread-specific storage.
PyThreadState* gil_holding_state() {
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_GetUnchecked();
#else
  return _PyThreadState_UncheckedGet();
#endif
}

// The host scope (see set_host_scope): a router whose chain holds Python
// conds makes its whole choice holding the GIL once, and runs a Python impl
// it chooses there too (impl_in_host_scope); the conds, the impl and the trace
// shortcut find the GIL held, which costs them next to nothing, and the impl
// finds the arguments its accepting cond was called with.
void with_gil(void (*choose)(void*), void* context) {
  GilForPython gil;
  // Dropped before the GIL is released: it owns the arguments it keeps.
  SharedArguments shared;
  // One look-up of this thread's mark for the three uses (a compiler
  // recomputes a thread_local's address after every call otherwise).
  struct Mark {
    HostScope* mark;
    HostScope outer;
    ~Mark() { *mark = outer; }
  } mark{host_scope_mark(), {}};
  mark.outer = *mark.mark;
  *mark.mark = {PyThreadState_Get(), &shared};
  choose(context);
}

// The references drop_reference could not drop at once (see binding.h).
// Invariant: `scheduled` is true while a pending call to drain them is
// queued with the interpreter and has not yet taken the batch.
struct DeferredReferences {
  std::mutex mutex;
  std::vector<PyObject*> objects;
  bool scheduled = false;
  std::atomic<bool> any{false};  // objects is non-empty; read without the lock
};

DeferredReferences& deferred() {
  static auto* references = new DeferredReferences;  // never destroyed: used at exit
  return *references;
}

int drain_deferred_references(void*) {
  {
    DeferredReferences& references = deferred();
    std::lock_guard<std::mutex> lock(references.mutex);
    references.scheduled = false;
  }
  drop_deferred_references();
  return 0;
}

bool this_thread_holds_gil() {
  PyThreadState* const mine = PyGILState_GetThisThreadState();
  return mine != nullptr && gil_holding_state() == mine;
}

}  // namespace

void drop_reference(PyObject* object) noexcept {
  if (!Py_IsInitialized()) return;  // after shutdown: left to the process's end
  if (this_thread_holds_gil()) {
    Py_DECREF(object);
    return;
  }
  DeferredReferences& references = deferred();
  try {
    std::lock_guard<std::mutex> lock(references.mutex);
    references.objects.push_back(object);
    references.any.store(true, std::memory_order_release);
    // Py_AddPendingCall needs no GIL and no thread state. When the
    // interpreter's queue is full the next control-plane call's return
    // drains these instead, and the next deferral tries again.
    if (!references.scheduled) {
      references.scheduled = Py_AddPendingCall(&drain_deferred_references, nullptr) == 0;
    }
  } catch (const std::exception&) {
    // Out of memory or a failed lock: the reference leaks, the process lives.
  }
}

void drop_deferred_references() {
  DeferredReferences& references = deferred();
  if (!references.any.load(std::memory_order_acquire)) return;
  std::vector<PyObject*> batch;
  {
    std::lock_guard<std::mutex> lock(references.mutex);
    batch.swap(references.objects);
    references.any.store(false, std::memory_order_release);
  }
  // A deallocation may run Python that defers more: they go to a new batch.
  for (PyObject* object : batch) Py_DECREF(object);
}

HostScope* host_scope_holding_gil() {
  HostScope* scope = &t_host_scope;
  return scope->state != nullptr && scope->state == gil_holding_state() ? scope : nullptr;
}

void install_host_scope() { set_host_scope(&with_gil); }

}  // namespace native_registry::python
