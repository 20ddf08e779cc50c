// What the files of the _C extension share (private to the binding): the
// registry they bind, Python references the core may hold, the GIL helpers,
// the functor types that carry Python callables into the core, and the
// conversions between the core's keys and nodes and their Python forms. Each
// bind_* function adds one concern's Python API to the module; module.cpp
// calls them in order.
//
// Owns: these declarations only; every definition lives in the file named at
// its group. May not touch: registry state (that is the core's, reached
// through registry()); nothing here is visible outside the extension.
//
// The extension compiles as one unity file (meson.build), so a helper private
// to one file sits in an anonymous namespace there and must not share its name
// with another file's.

#pragma once

#include "arguments.h"

#include <native_registry/native_registry.h>
#include <native_registry/predicates.h>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

namespace native_registry::python {

namespace py = pybind11;
namespace P = native_registry::predicates;

inline Registry& registry() { return Registry::global(); }

// Runs `work` under the GIL: at once when this thread holds the GIL, else
// later, in order, by whichever comes first of the next control-plane call's
// return (without_gil) and a pending call the interpreter runs. It never
// takes the GIL. CPython ends a daemon thread that takes the GIL during
// shutdown with pthread_exit, whose forced unwind aborts the process at the
// first noexcept frame it meets; what this runs is reached from such frames
// (a PyRef dropped by a control scope's releases or a node's last owner, the
// log sink the core calls from a control scope's destructor). Work still
// queued when the interpreter has gone is dropped unrun. Defined in gil.cpp.
void under_gil(std::function<void()> work) noexcept;

// Runs the work under_gil deferred; the GIL is held. Cheap when there is none.
void run_deferred_work();

// For a Python thread about to take the GIL back (the control plane, a routed
// call's GilForPython): once the interpreter is finalizing, a thread other
// than the main one, which finalizes, is parked for good instead (a daemon
// thread, which nothing joins, and the process is ending); the main thread
// goes on (a __del__ run by the finalization may call us). Taking the GIL
// would end a daemon thread with pthread_exit, whose forced unwind runs
// pybind11's frames' destructors without the GIL (an abort in a build with
// pybind11's GIL checks, a race in any). CPython 3.14 itself parks such
// threads. Defined in gil.cpp.
void park_if_finalizing();
void remember_main_thread();  // at import: the thread park_if_finalizing never parks

// PyEval_RestoreThread(state) for a Python thread in the control plane, parked
// instead once the interpreter is finalizing (park_if_finalizing), also when
// it began finalizing between that look and taking the GIL.
void restore_thread(PyThreadState* state);

// Owns one Python reference, dropped under the GIL (under_gil) from any thread.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(object.release().ptr()) {}
  ~PyRef() {
    under_gil([object = object_] { Py_DECREF(object); });
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  py::handle get() const { return object_; }

 private:
  PyObject* object_;
};

// ---- the GIL (gil.cpp; the rules are at its head) ----------------------------

// This thread's innermost host scope (gil.cpp's with_gil): the thread state
// it took the GIL with, and the arguments an accepting Python cond of its
// call kept for the impl (see SharedArguments).
struct HostScope {
  PyThreadState* state = nullptr;
  SharedArguments* shared = nullptr;
};

// The host scope this thread is inside and still holds the GIL of, as a
// Python cond, a Python impl chosen there and the trace shortcut usually
// are; else null.
HostScope* host_scope_holding_gil();

// This thread's host-scope mark (gil.cpp; host_scope_mark is the same,
// never inlined, for a caller that uses it more than once), and the thread
// state that holds the GIL, or this thread's while it holds it (see
// gil.cpp): what GilForPython compares to tell whether it runs inside a
// host scope.
HostScope* host_scope_here();
HostScope* host_scope_mark();
PyThreadState* gil_holding_state();

// Holds the GIL for a scope. Inside the router's host scope, where the GIL
// is held already, it only checks that (host_scope_holding_gil). Elsewhere a
// thread with a thread state that does not hold the GIL (a Python thread
// whose torch call let it go: the common case) takes it back with that
// state, as the call's own return will (restore_thread, which also parks a
// daemon thread at the interpreter's end); any other thread (one Python
// never saw, or one that holds the GIL already) goes through
// PyGILState_Ensure, whose bookkeeping only the first kind would pay for
// nothing. Both interoperate with pybind11's gil_scoped_acquire.
class GilForPython {
 public:
  GilForPython() : GilForPython(host_scope_here()) {}
  // With this thread's mark looked up already (with_gil, which writes it next).
  explicit GilForPython(HostScope* mark) {
    // One look at the holder serves both the scope's check and take().
    PyThreadState* const holding = gil_holding_state();
    if (mark->state != nullptr && mark->state == holding) {
      scope_ = mark;
      return;
    }
    take(holding);
  }
  // As above, with take() inlined: with_gil's (gil.cpp only), which every
  // routed call that chooses in the host scope makes.
  struct TakeInlined {};
  C10_ALWAYS_INLINE GilForPython(HostScope* mark, TakeInlined) {
    PyThreadState* const holding = gil_holding_state();
    if (mark->state != nullptr && mark->state == holding) {
      scope_ = mark;
      return;
    }
    take_inlined(holding);
  }
  ~GilForPython() {
    if (scope_ != nullptr) return;
    if (restored_ != nullptr) {
      PyEval_SaveThread();
    } else {
      PyGILState_Release(state_);
    }
  }
  GilForPython(const GilForPython&) = delete;
  GilForPython& operator=(const GilForPython&) = delete;

  // The arguments kept in the host scope this runs in; null outside one.
  SharedArguments* shared() const { return scope_ != nullptr ? scope_->shared : nullptr; }

  // The thread state this thread holds the GIL with now.
  PyThreadState* held_with() const {
    if (restored_ != nullptr) return restored_;
    return scope_ != nullptr ? scope_->state : PyThreadState_Get();
  }

 private:
  void take(PyThreadState* holding);  // gil.cpp; `holding`: gil_holding_state() now
  void take_inlined(PyThreadState* holding);  // the same, inlined into with_gil (gil.cpp)

  HostScope* scope_ = nullptr;
  PyThreadState* restored_ = nullptr;  // set: taken back with this state
  PyGILState_STATE state_{};
};

// Runs `work` with the GIL released: see the GIL rules at gil.cpp's head.
// The GIL is taken back in this frame, not in a destructor (as
// py::gil_scoped_release does), and not at all once the interpreter is
// finalizing (park_if_finalizing); a daemon thread that still meets
// CPython's end (finalizing began between the two) is ended by a forced
// unwind, which must pass through here, not meet a noexcept frame.
template <class Work>
auto without_gil(Work&& work) -> decltype(work()) {
  using Result = decltype(work());
  PyThreadState* const state = PyEval_SaveThread();
  std::exception_ptr failed;
  std::optional<std::conditional_t<std::is_void_v<Result>, bool, Result>> result;
  try {
    if constexpr (std::is_void_v<Result>) {
      work();
    } else {
      result.emplace(work());
    }
#if defined(__GLIBCXX__)
  } catch (abi::__forced_unwind&) {
    // CPython ends this daemon thread (torch code in `work` took the GIL
    // while the interpreter finalizes): parked, not unwound through
    // pybind11's frames (see park_if_finalizing).
    park_if_finalizing();
    throw;  // ended some other way: it must not take the GIL again
#endif
  } catch (...) {
    failed = std::current_exception();
  }
  restore_thread(state);
  run_deferred_work();
  if (failed) std::rethrow_exception(failed);
  if constexpr (!std::is_void_v<Result>) return std::move(*result);
}

// Tells the core's routers which Python errors they must never absorb
// (KeyboardInterrupt, SystemExit) and makes an impl error's fallback a
// RuntimeWarning (callables.cpp).
void install_error_hooks();

// Makes the core's routers make their choice inside the host scope (with_gil).
void install_host_scope();

// Makes the registry free what operations retire under_gil: their Python
// callables, and torch's Python kernels the routers captured, whose
// destructors take the GIL themselves.
void install_release_sink();

// Works with the pybind11 of every PyTorch we build against.
inline std::string type_name(const py::handle& value) { return Py_TYPE(value.ptr())->tp_name; }

// ---- Python callables in the core (callables.cpp) -------------------------------

// The Python callables of a node, as named functor types, so that the
// binding can hand the very objects back (Node.cond_fn, ...) from what the
// core stores: the core is the one record of every node, and Python's node
// objects are views of it. Each also keeps the argument plans of its op's
// schema (see arguments.h).
struct PythonCond {
  std::shared_ptr<PyRef> fn;
  std::shared_ptr<ArgumentPlans> plans = std::make_shared<ArgumentPlans>();
  bool operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, const Stack& stack) const;
};

struct PythonImpl {
  std::shared_ptr<PyRef> fn;
  std::shared_ptr<ArgumentPlans> plans = std::make_shared<ArgumentPlans>();
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) const;
};

struct PythonTryInitialize {
  std::shared_ptr<PyRef> fn;
  bool operator()() const;
};

std::shared_ptr<PyRef> hold(py::object fn);

// A Python cond as a router calls it inside the host scope, where with_gil
// holds the GIL (set_host_cond_resolver; install_host_scope sets it); an
// empty HostCond for any other cond.
HostCond host_cond_of(const CondFn& cond);

// A registry's coverage check from Python (see CoverageCheck): a Python
// callable, called as fn(op_symbol, dispatch_key, args, kwargs) with the
// call's arguments as a torch.library kernel receives them (upstream main's
// aot_manifest.covers), or a C++ predicate, evaluated on the call's stack.
struct PythonCoverageCheck {
  std::shared_ptr<PyRef> fn;
  std::shared_ptr<ArgumentPlans> plans = std::make_shared<ArgumentPlans>();
  bool operator()(const GraphKey& graph, const c10::OperatorHandle& op, c10::DispatchKeySet,
                  const Stack& stack) const;
};
struct PredicateCoverageCheck {
  P::Predicate predicate;
  bool operator()(const GraphKey&, const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  const Stack& stack) const {
    return predicate(op, keys, stack);
  }
};
// None unsets; a Predicate or a callable sets; anything else is a TypeError.
CoverageCheck coverage_check_from(const py::object& value);
// The object a check was made from, or None.
py::object coverage_check_object(const CoverageCheck& check);

// The Python object behind a node's callable, or None (a C++ callable, or none).
template <class Functor, class Fn>
py::object python_object_of(const Fn& fn) {
  if (const auto* functor = fn.template target<Functor>()) {
    return py::reinterpret_borrow<py::object>(functor->fn->get());
  }
  return py::none();
}

// A node's cond as Python sees it: the Predicate, the Python callable, or None.
py::object cond_object(const OverrideNode& node);

void require_callable(const char* what, const py::object& value);

// A node's callables from Python, as registration and a write of cond_fn,
// impl_fn or try_initialize_runtime take them.
struct Callables {
  CondFn cond;
  ImplFn impl;
  OverrideOptions options;
};

Callables python_callables(const py::object& cond, const py::object& impl,
                           const py::object& try_initialize_runtime, bool unconditional_override);

// `node`'s callables with `field` (cond_fn, impl_fn or try_initialize_runtime)
// replaced by `value`, as a write of that field on its Python view asks.
Callables replaced_callables(const OverrideNode& node, const std::string& field,
                             const py::object& value);

// ---- keys and nodes in Python (node_views.cpp) -----------------------------------

using MutableNode = std::shared_ptr<OverrideNode>;
// A graph key as Python passes it: (lib_symbol, op_symbol, dispatch_key).
using KeyTuple = std::tuple<std::string, std::string, std::string>;

GraphKey to_key(const KeyTuple& key);
py::tuple from_key(const GraphKey& key);
MutableNode mutable_node(const NodePtr& node);
py::list nodes_to_list(const Graph& graph);
py::list keys_to_list(const std::vector<GraphKey>& keys);
py::dict index_to_dict(const std::map<std::string, std::vector<GraphKey>>& index);

// ---- what each file adds to the module -------------------------------------------

void bind_node_views(py::module_& m);         // node_views.cpp: Node, Snapshot
void bind_registration(py::module_& m);       // registry_api.cpp: nodes in and out
void bind_graph_control(py::module_& m);      // registry_api.cpp: graphs, installs, state
void bind_queries(py::module_& m);            // queries.cpp: what the registry holds
void bind_settings(py::module_& m);           // registry_api.cpp: policy, log sink, masks
void capture_dynamo_flag();                   // trace_shortcut.cpp
void bind_trace_shortcut(py::module_& m);     // trace_shortcut.cpp
void bind_predicates(py::module_& m);         // predicates_py.cpp
void bind_explain(py::module_& m);            // explain_py.cpp: registry.explain
void bind_observation(py::module_& m);        // observe_py.cpp: stats, routing log, thread disables

}  // namespace native_registry::python
