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
// by C++ objects are dropped under the GIL (PyRef), whatever thread drops them.

#include "binding.h"

#include <c10/macros/Macros.h>

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

}  // namespace

HostScope* host_scope_holding_gil() {
  HostScope* scope = &t_host_scope;
  return scope->state != nullptr && scope->state == gil_holding_state() ? scope : nullptr;
}

void install_host_scope() { set_host_scope(&with_gil); }

}  // namespace native_registry::python
