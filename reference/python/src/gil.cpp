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
// holds it, else deferred (under_gil): a destructor never takes the GIL.

#include "binding.h"

#include <c10/macros/Macros.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace native_registry::python {

namespace {

// This thread's innermost host scope (with_gil), or a null state outside
// one. Python code run inside the scope may release the GIL (a torch op
// called from a cond does) and a router reached from there runs with it
// released, so the mark alone proves nothing: see host_scope_holding_gil.
thread_local HostScope t_host_scope;

}  // namespace

// Not inlined: a compiler recomputes a thread_local's address after every
// call otherwise; its callers look it up once.
C10_NOINLINE HostScope* host_scope_mark() { return &t_host_scope; }
HostScope* host_scope_here() { return &t_host_scope; }

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

namespace {

// The host scope (see set_host_scope): a router whose chain holds Python
// conds makes its whole choice holding the GIL once, and runs a Python impl
// it chooses there too (impl_in_host_scope); the conds, the impl and the trace
// shortcut find the GIL held, which costs them next to nothing, and the impl
// finds the arguments its accepting cond was called with.
void with_gil(void (*choose)(void*), void* context) {
  // One look-up of this thread's mark for its three uses.
  HostScope* const mark = host_scope_mark();
  GilForPython gil(mark, GilForPython::TakeInlined{});
  // Dropped before the GIL is released: it owns the arguments it keeps.
  SharedArguments shared;
  struct Restore {
    HostScope* mark;
    HostScope outer;
    ~Restore() { *mark = outer; }
  } restore{mark, *mark};
  *mark = {gil.held_with(), &shared};
  choose(context);
}

// The work under_gil could not run at once (see binding.h).
// Invariant: `scheduled` is true while a pending call to run it is queued
// with the interpreter and has not yet started.
struct DeferredWork {
  std::mutex mutex;
  std::vector<std::function<void()>> queue;
  bool scheduled = false;
  std::atomic<bool> any{false};  // queue is non-empty; read without the lock
};

DeferredWork& deferred();

// fork() copies only the forking thread: the queue's lock is held across it,
// as the core's fork_guard holds its own (this lock is never taken while one
// of the core's is held, so it is taken first).
void lock_deferred_for_fork() { deferred().mutex.lock(); }
void unlock_deferred_after_fork() { deferred().mutex.unlock(); }

DeferredWork& deferred() {
  static DeferredWork* const work = [] {
    auto* created = new DeferredWork;  // never destroyed: used at exit
    pthread_atfork(&lock_deferred_for_fork, &unlock_deferred_after_fork,
                   &unlock_deferred_after_fork);
    return created;
  }();
  return *work;
}

int run_deferred_work_pending_call(void*) {
  {
    DeferredWork& work = deferred();
    std::lock_guard<std::mutex> lock(work.mutex);
    work.scheduled = false;
  }
  run_deferred_work();
  return 0;
}

bool this_thread_holds_gil() {
  PyThreadState* const mine = PyGILState_GetThisThreadState();
  return mine != nullptr && gil_holding_state() == mine;
}

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Python's main thread, where the interpreter finalizes (Py_FinalizeEx runs
// there); 0 until the module's import records it.
std::atomic<unsigned long> g_main_thread{0};

}  // namespace

void remember_main_thread() {
  const py::object main = py::module_::import("threading").attr("main_thread")();
  g_main_thread.store(main.attr("ident").cast<unsigned long>(), std::memory_order_relaxed);
}

namespace {

// park_if_finalizing once the interpreter is finalizing.
C10_NOINLINE void park_while_finalizing() {
  // The finalizing thread may take the GIL (CPython lets it): a __del__ or a
  // weakref callback run by the finalization calls a routed op or the
  // control plane there, and parking it would hang the process's exit.
  if (PyThread_get_thread_ident() == g_main_thread.load(std::memory_order_relaxed)) return;
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// Inlined where a routed call's GIL take (GilForPython::take) restores a
// thread state, as it does on every call.
C10_ALWAYS_INLINE void park_if_finalizing_inline() {
  if (C10_UNLIKELY(interpreter_finalizing())) park_while_finalizing();
}

// restore_thread, inlined into a routed call's GIL take (GilForPython::take).
C10_ALWAYS_INLINE void restore_thread_inline(PyThreadState* state) {
  park_if_finalizing_inline();
#if defined(__GLIBCXX__)
  try {
    PyEval_RestoreThread(state);
  } catch (abi::__forced_unwind&) {
    park_if_finalizing_inline();
    throw;
  }
#else
  PyEval_RestoreThread(state);
#endif
}

}  // namespace

void park_if_finalizing() { park_if_finalizing_inline(); }

void restore_thread(PyThreadState* state) { restore_thread_inline(state); }

void under_gil(std::function<void()> work) noexcept {
  if (!Py_IsInitialized()) return;  // after shutdown: left to the process's end
  if (this_thread_holds_gil()) {
    try {
      work();
    } catch (const std::exception&) {
      // Python's failures were reported by the work itself; nothing else throws.
    }
    return;
  }
  DeferredWork& deferred_work = deferred();
  try {
    std::lock_guard<std::mutex> lock(deferred_work.mutex);
    deferred_work.queue.push_back(std::move(work));
    deferred_work.any.store(true, std::memory_order_release);
    // Py_AddPendingCall needs no GIL and no thread state. When the
    // interpreter's queue is full the next control-plane call's return
    // runs the work instead, and the next deferral tries again.
    if (!deferred_work.scheduled) {
      deferred_work.scheduled =
          Py_AddPendingCall(&run_deferred_work_pending_call, nullptr) == 0;
    }
  } catch (const std::exception&) {
    // Out of memory or a failed lock: the work is dropped, the process lives.
  }
}

void run_deferred_work() {
  DeferredWork& deferred_work = deferred();
  if (!deferred_work.any.load(std::memory_order_acquire)) return;
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(deferred_work.mutex);
    batch.swap(deferred_work.queue);
    deferred_work.any.store(false, std::memory_order_release);
  }
  // Work that defers more (a deallocation running Python) goes to a new batch.
  for (auto& work : batch) {
    try {
      work();
    } catch (const std::exception&) {
      // as in under_gil
    }
  }
}

void GilForPython::take(PyThreadState* holding) { take_inlined(holding); }

C10_ALWAYS_INLINE void GilForPython::take_inlined(PyThreadState* holding) {
  PyThreadState* const mine = PyGILState_GetThisThreadState();
  if (mine != nullptr && holding != mine) {
    restore_thread_inline(mine);
    restored_ = mine;
    return;
  }
  state_ = PyGILState_Ensure();
}

HostScope* host_scope_holding_gil() {
  HostScope* scope = &t_host_scope;
  return scope->state != nullptr && scope->state == gil_holding_state() ? scope : nullptr;
}

void install_host_scope() {
  set_host_cond_resolver(&host_cond_of);
  set_host_scope(&with_gil);
}

void install_release_sink() {
  deferred();  // its fork handlers registered now, before any fork
  registry().set_release_sink([](std::vector<std::shared_ptr<const void>>&& retired) {
    under_gil([retired = std::move(retired)]() mutable { retired.clear(); });
  });
}

}  // namespace native_registry::python
