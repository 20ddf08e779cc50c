// native_registry._C: the reference registry for Python. Thin on purpose: the
// upstream-shaped API (names, argument forms, node objects, the compile-time
// decomposition table) lives in native_registry/registry.py; this module turns
// Python callables into boxed conds and impls, maps errors onto Python's
// exception types, and exposes the C++ predicates.
//
// GIL rules: every control-plane function and query releases the GIL before
// it enters the core (which may wait for the registry's lock, held by a
// thread that is about to need the GIL: a log handler, an ordering
// function), and takes it back only to run Python: the ordering function,
// the log sink, the conversions of its arguments and results. The core holds
// no lock while it runs any of these. The call path takes the GIL only where Python runs: once
// around a router's choice when its chain holds a Python cond or runtime check
// (the host scope, which also covers the trace shortcut), and inside a Python
// impl; chains of C++ predicates decline without it. Python references held
// by C++ objects are dropped under the GIL (PyRef), whatever thread drops them.

#include "arguments.h"

#include <native_registry/native_registry.h>
#include <native_registry/predicates.h>

#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <vector>

namespace py = pybind11;
using namespace native_registry;
using native_registry::python::ArgumentPlans;
using native_registry::python::call_with_arguments;
namespace P = native_registry::predicates;

namespace {

Registry& registry() { return Registry::global(); }

// Owns one Python reference and drops it under the GIL from any thread.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(object.release().ptr()) {}
  ~PyRef() {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_DECREF(object_);
    }
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  py::handle get() const { return object_; }

 private:
  PyObject* object_;
};

// The thread state this thread's innermost host scope (with_gil) took the
// GIL with, or null outside one. Python code run inside the scope may release
// the GIL (a torch op called from a cond does) and a router reached from there
// runs with it released, so the mark alone proves nothing: see
// in_host_scope_holding_gil.
thread_local PyThreadState* t_host_scope_state = nullptr;

C10_NOINLINE PyThreadState** host_scope_mark() { return &t_host_scope_state; }

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

// Whether this thread is inside a host scope and still holds the GIL the
// scope took, as a Python cond and the trace shortcut usually are.
bool in_host_scope_holding_gil() {
  PyThreadState* host = t_host_scope_state;
  return host != nullptr && host == gil_holding_state();
}

// Holds the GIL for a scope, through CPython's PyGILState API: it costs half
// of pybind11's gil_scoped_acquire on the call path and interoperates with it.
// Inside the router's host scope, where the GIL is held already, it only
// checks that (in_host_scope_holding_gil), which costs a tenth of the
// PyGILState calls it saves.
class GilForPython {
 public:
  GilForPython() : held_(in_host_scope_holding_gil()) {
    if (!held_) state_ = PyGILState_Ensure();
  }
  ~GilForPython() {
    if (!held_) PyGILState_Release(state_);
  }
  GilForPython(const GilForPython&) = delete;
  GilForPython& operator=(const GilForPython&) = delete;

 private:
  bool held_;
  PyGILState_STATE state_{};
};

// Works with the pybind11 of every PyTorch we build against.
std::string type_name(const py::handle& value) { return Py_TYPE(value.ptr())->tp_name; }

bool truthy(const py::object& value) {
  const int answer = PyObject_IsTrue(value.ptr());
  if (answer < 0) throw py::error_already_set();
  return answer == 1;
}

// One returned value as the IValue the schema promises. toIValue would turn
// None into an undefined tensor; an impl that returns None for a Tensor is a
// bug to report, not a result to pass on.
c10::IValue returned_value(const c10::OperatorHandle& op, const c10::Argument& ret,
                           const py::handle& value) {
  if (ret.real_type()->kind() == c10::TypeKind::TensorType && !THPVariable_Check(value.ptr())) {
    throw py::type_error("the impl of " + c10::toString(op.operator_name()) + " returned " +
                         type_name(value) + " where the schema promises a Tensor");
  }
  return torch::jit::toIValue(value, ret.real_type());
}

// Pushes what a Python impl returned, converted to the op's return types.
void push_python_result(const c10::OperatorHandle& op, Stack* stack, const py::object& out) {
  const auto& returns = op.schema().returns();
  if (returns.empty()) return;
  if (returns.size() == 1) {
    stack->push_back(returned_value(op, returns[0], out));
    return;
  }
  // Any sequence, as torch.library takes a Python kernel's results (and so
  // upstream's router): a tuple, a torch.return_types tuple, a list. Not a
  // str, bytes or a mapping; and of exactly the schema's length, where
  // torch.library drops extra values without a word.
  const bool sequence = PySequence_Check(out.ptr()) && !PyUnicode_Check(out.ptr()) &&
                        !PyBytes_Check(out.ptr()) && !PyByteArray_Check(out.ptr());
  const Py_ssize_t length = sequence ? PySequence_Size(out.ptr()) : -1;
  if (length < 0) PyErr_Clear();  // a sequence whose len() raised: reported below
  if (length != static_cast<Py_ssize_t>(returns.size())) {
    throw py::type_error(
        "the impl of " + c10::toString(op.operator_name()) + " must return a tuple or list of " +
        std::to_string(returns.size()) + " values, got " + type_name(out) +
        (length >= 0 ? " of " + std::to_string(length) + " values" : std::string()));
  }
  for (size_t i = 0; i < returns.size(); ++i) {
    auto value = py::reinterpret_steal<py::object>(
        PySequence_GetItem(out.ptr(), static_cast<Py_ssize_t>(i)));
    if (!value) throw py::error_already_set();
    stack->push_back(returned_value(op, returns[i], value));
  }
}

// The Python callables of a node, as named functor types, so that the
// binding can hand the very objects back (Node.cond_fn, ...) from what the
// core stores: the core is the one record of every node, and Python's node
// objects are views of it. Each also keeps the argument plans of its op's
// schema (see arguments.h).
struct PythonCond {
  std::shared_ptr<PyRef> fn;
  std::shared_ptr<ArgumentPlans> plans = std::make_shared<ArgumentPlans>();
  bool operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, const Stack& stack) const {
    GilForPython gil;
    return truthy(call_with_arguments(*plans, fn->get(), op, stack));
  }
};

struct PythonImpl {
  std::shared_ptr<PyRef> fn;
  std::shared_ptr<ArgumentPlans> plans = std::make_shared<ArgumentPlans>();
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) const {
    GilForPython gil;
    py::object out = call_with_arguments(*plans, fn->get(), op, *stack);
    torch::jit::drop(*stack, op.schema().arguments().size());
    push_python_result(op, stack, out);
  }
};

struct PythonTryInitialize {
  std::shared_ptr<PyRef> fn;
  bool operator()() const {
    GilForPython gil;
    return truthy(fn->get()());
  }
};

std::shared_ptr<PyRef> hold(py::object fn) { return std::make_shared<PyRef>(std::move(fn)); }

// The Python object behind a node's callable, or None (a C++ callable, or none).
template <class Functor, class Fn>
py::object python_object_of(const Fn& fn) {
  if (const auto* functor = fn.template target<Functor>()) {
    return py::reinterpret_borrow<py::object>(functor->fn->get());
  }
  return py::none();
}

py::object cond_object(const OverrideNode& node) {
  if (const auto* predicate = node.cond.target<P::Predicate>()) return py::cast(*predicate);
  return python_object_of<PythonCond>(node.cond);
}

using MutableNode = std::shared_ptr<OverrideNode>;

// ---- cycles through C++ ----------------------------------------------------------
// A cond whose closure holds its own node's view, or a snapshot taken after
// its registration, makes a reference cycle that runs through C++ objects
// (the node, the snapshot's state) which Python's collector cannot see into.
// The binding's Node and Snapshot types therefore take part in collection:
// their tp_traverse visits the Python callables of the nodes that only they
// hold, each callable only while one node owns it (its PyRef unshared), so
// every reference visited is one the collector may account for; anything
// held elsewhere as well (a registered node, a node two snapshots share)
// stays alive from there and is not visited. Breaking such a cycle needs no
// tp_clear here: the collector clears the Python objects in it (the
// function, its closure cells), which drops the references to the views.

int visit_callable(const std::shared_ptr<PyRef>* ref, visitproc visit, void* arg) {
  if (ref != nullptr && ref->use_count() == 1) Py_VISIT((*ref)->get().ptr());
  return 0;
}

int visit_python_callables(const OverrideNode& node, visitproc visit, void* arg) {
  const auto* cond = node.cond.target<PythonCond>();
  const auto* impl = node.impl.target<PythonImpl>();
  const auto* init = node.options.try_initialize_runtime.target<PythonTryInitialize>();
  if (int error = visit_callable(cond ? &cond->fn : nullptr, visit, arg)) return error;
  if (int error = visit_callable(impl ? &impl->fn : nullptr, visit, arg)) return error;
  return visit_callable(init ? &init->fn : nullptr, visit, arg);
}

// Makes a pybind11 type collectable, with `traverse` visiting what one of its
// instances holds (called once its C++ value is constructed).
template <class Traverse>
py::custom_type_setup collectable(Traverse) {
  return py::custom_type_setup([](PyHeapTypeObject* heap_type) {
    auto* type = &heap_type->ht_type;
    type->tp_flags |= Py_TPFLAGS_HAVE_GC;
    type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) -> int {
      Py_VISIT(Py_TYPE(self));  // a heap type's instances own a reference to it
      if (!py::detail::is_holder_constructed(self)) return 0;
      return Traverse{}(py::handle(self), visit, arg);
    };
  });
}

struct TraverseNode {
  int operator()(py::handle self, visitproc visit, void* arg) const {
    auto* instance = reinterpret_cast<py::detail::instance*>(self.ptr());
    const MutableNode& holder = instance->get_value_and_holder().holder<MutableNode>();
    if (!holder || holder.use_count() != 1) return 0;  // held elsewhere too
    return visit_python_callables(*holder, visit, arg);
  }
};

struct TraverseSnapshot {
  int operator()(py::handle self, visitproc visit, void* arg) const {
    int error = 0;
    py::cast<const Snapshot&>(self).visit_nodes_held_only_here([&](const OverrideNode& node) {
      if (error == 0) error = visit_python_callables(node, visit, arg);
    });
    return error;
  }
};

// Runs `work` with the GIL released: see "GIL rules" at the top.
template <class Work>
auto without_gil(Work&& work) -> decltype(work()) {
  py::gil_scoped_release released;
  return work();
}

void require_callable(const char* what, const py::object& value) {
  if (!PyCallable_Check(value.ptr())) {
    throw py::type_error(std::string(what) + " must be callable, got " + type_name(value));
  }
}

// torch.compiler.is_dynamo_compiling as torch ships it. Its body is `return
// False`: Dynamo folds it to True only in bytecode it traces, and it cannot
// trace a call made from this C++ code. Captured when the module loads, in
// the same import as the registry, before a test can patch it.
struct DynamoFlag {
  py::handle namespace_;  // torch.compiler's __dict__, where patch.object writes
  py::handle name;
  py::handle stock;
};

const DynamoFlag& dynamo_flag() {
  // Leaked on purpose: read on the call path until the interpreter exits.
  static const DynamoFlag* flag = [] {
    py::module_ compiler = py::module_::import("torch.compiler");
    // Interned, so that the dict lookup matches the key by identity.
    auto name = py::reinterpret_steal<py::str>(PyUnicode_InternFromString("is_dynamo_compiling"));
    py::object stock = compiler.attr(name);
    py::dict namespace_ = compiler.attr("__dict__");
    return new DynamoFlag{namespace_.release(), name.release(), stock.release()};
  }();
  return *flag;
}

// What torch.compiler's namespace holds as is_dynamo_compiling now
// (borrowed), or null; the GIL is held. The module's own dict, not getattr:
// the same answer for a module attribute, for a tenth of the work. Before
// Python 3.12 a dict's version tag (PEP 509) changes with every change to the
// dict, so the last lookup's answer stands while the tag does: a patch is
// seen on the very next call, as with a lookup, at a fraction of its cost
// (whose probes also vary with the hash seed). From 3.12 the tag is
// deprecated and every call looks up.
PyObject* current_dynamo_flag(const DynamoFlag& flag) {
  PyObject* namespace_ = flag.namespace_.ptr();
#if PY_VERSION_HEX < 0x030C0000
  struct Seen {
    bool valid = false;
    uint64_t version = 0;
    PyObject* value = nullptr;
  };
  static Seen seen;  // the GIL guards it
  const uint64_t version = reinterpret_cast<PyDictObject*>(namespace_)->ma_version_tag;
  if (seen.valid && seen.version == version) return seen.value;
#endif
  PyObject* current = PyDict_GetItemWithError(namespace_, flag.name.ptr());
  if (current == nullptr && PyErr_Occurred()) throw py::error_already_set();
#if PY_VERSION_HEX < 0x030C0000
  seen = {true, version, current};
#endif
  return current;
}

// The host scope (see set_host_scope): a router whose chain holds Python
// conds makes its whole choice holding the GIL once; the conds and the trace
// shortcut find it held, which costs them next to nothing.
void with_gil(void (*choose)(void*), void* context) {
  GilForPython gil;
  // One look-up of this thread's mark for the three uses (a compiler
  // recomputes a thread_local's address after every call otherwise).
  struct Mark {
    PyThreadState** mark;
    PyThreadState* outer;
    ~Mark() { *mark = outer; }
  } mark{host_scope_mark(), nullptr};
  mark.outer = *mark.mark;
  *mark.mark = PyThreadState_Get();
  choose(context);
}

// Whether Dynamo is tracing, as torch.compiler.is_dynamo_compiling() says.
// Looked up on every call so that patching it works as in upstream; the
// shipped function is known to say False without calling it, which saves a
// Python frame on every routed call. What it raises reaches the op's caller,
// as from upstream's Python router (the core releases its guard on the way).
bool dynamo_is_tracing() {
  const DynamoFlag& flag = dynamo_flag();
  GilForPython gil;
  PyObject* current = current_dynamo_flag(flag);
  if (current == nullptr) {
    throw py::attribute_error("module 'torch.compiler' has no attribute 'is_dynamo_compiling'");
  }
  if (current == flag.stock.ptr()) return false;
  return truthy(py::reinterpret_borrow<py::object>(current)());
}

GraphKey to_key(const std::tuple<std::string, std::string, std::string>& key) {
  return {std::get<0>(key), std::get<1>(key), std::get<2>(key)};
}

py::tuple from_key(const GraphKey& key) {
  return py::make_tuple(key.lib_symbol, key.op_symbol, key.dispatch_key);
}

MutableNode mutable_node(const NodePtr& node) { return std::const_pointer_cast<OverrideNode>(node); }

py::list nodes_to_list(const Graph& graph) {
  py::list out;
  for (const NodePtr& node : graph) out.append(mutable_node(node));
  return out;
}

py::list keys_to_list(const std::vector<GraphKey>& keys) {
  py::list out;
  for (const GraphKey& key : keys) out.append(from_key(key));
  return out;
}

py::dict index_to_dict(const std::map<std::string, std::vector<GraphKey>>& index) {
  py::dict out;
  for (const auto& [name, keys] : index) out[py::str(name)] = keys_to_list(keys);
  return out;
}

// Masks entered from Python, innermost last.
std::vector<std::unique_ptr<Registry::UnconditionalMask>>& masks() {
  static std::vector<std::unique_ptr<Registry::UnconditionalMask>> stack;
  return stack;
}

// A node's callables from Python, as registration and a write of cond_fn,
// impl_fn or try_initialize_runtime take them.
struct Callables {
  CondFn cond;
  ImplFn impl;
  OverrideOptions options;
};

Callables python_callables(const py::object& cond, const py::object& impl,
                           const py::object& try_initialize_runtime, bool unconditional_override) {
  Callables out;
  out.options.unconditional_override = unconditional_override;
  if (py::isinstance<P::Predicate>(cond)) {
    out.cond = cond.cast<P::Predicate>();
  } else if (!cond.is_none()) {
    require_callable("cond", cond);
    out.cond = PythonCond{hold(cond)};
  }
  require_callable("impl", impl);
  if (!try_initialize_runtime.is_none()) {
    require_callable("try_initialize_runtime", try_initialize_runtime);
    out.options.try_initialize_runtime = PythonTryInitialize{hold(try_initialize_runtime)};
  }
  // A Python cond or runtime check runs on every call the router sees,
  // so a tracer must be able to divert those calls first. Chains whose
  // conds are all C++ predicates decline without touching Python.
  out.options.divert_when_tracing =
      static_cast<bool>(out.cond) && !py::isinstance<P::Predicate>(cond);
  out.options.divert_when_tracing |= !try_initialize_runtime.is_none();
  out.options.divert_when_tracing |= cond.is_none();  // unconditional: the impl runs
  // The same nodes need the GIL to choose (a Python cond or runtime
  // check, or the shortcut): the router takes it once for all of them.
  out.options.needs_host_scope = out.options.divert_when_tracing;
  out.impl = PythonImpl{hold(impl)};
  return out;
}

// ---- predicates from Python ---------------------------------------------------

// An integer argument of a predicate factory, named `what` in its errors as
// every other bad value is: an int (or an object with __index__; not a
// bool) that fits in int64, else TypeError or OverflowError.
int64_t int_argument(const char* what, const py::handle& value) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    throw py::type_error(std::string(what) + " must be an int, got " + type_name(value));
  }
  auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long out = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {
    PyErr_SetString(PyExc_OverflowError,
                    (std::string(what) + " must fit in a signed 64-bit integer, got " +
                     py::repr(index).cast<std::string>()).c_str());
    throw py::error_already_set();
  }
  if (out == -1 && PyErr_Occurred()) throw py::error_already_set();
  return out;
}

std::optional<size_t> arg_index(const py::object& arg) {
  if (arg.is_none()) return std::nullopt;
  const int64_t index = int_argument("arg", arg);
  if (index < 0) throw py::value_error("arg must be a non-negative index, got " + std::to_string(index));
  return static_cast<size_t>(index);
}

// Positional arguments as a stack a predicate can read: tensors and lists of
// tensors as such, anything else as None (predicates look at tensors only).
Stack predicate_stack(const py::args& args) {
  Stack stack;
  for (const py::handle& value : args) {
    if (THPVariable_Check(value.ptr())) {
      stack.emplace_back(THPVariable_Unpack(value.ptr()));
    } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      std::vector<at::Tensor> tensors;
      bool all_tensors = py::len(value) > 0;
      for (const py::handle& item : value) {
        if (!THPVariable_Check(item.ptr())) {
          all_tensors = false;
          break;
        }
        tensors.push_back(THPVariable_Unpack(item.ptr()));
      }
      stack.emplace_back(all_tensors ? c10::IValue(tensors) : c10::IValue());
    } else {
      stack.emplace_back();
    }
  }
  return stack;
}

void bind_predicates(py::module_& m) {
  auto p = m.def_submodule("predicates", "Composable conds evaluated in C++");
  py::class_<P::Predicate>(p, "Predicate")
      .def("__call__",
           [](const P::Predicate& self, const py::args& args, const py::kwargs&) {
             return self(predicate_stack(args));
           })
      // As a cond of `lib::op.overload` called with (args, kwargs): on the
      // boxed stack that call makes (keywords in their schema places,
      // defaults filled in), which is what the eager router evaluates it
      // on, so the compile/export router asks the very same question.
      .def("evaluate_on_call",
           [](const P::Predicate& self, const std::string& name, const std::string& overload,
              const py::tuple& args, const py::dict& kwargs) {
             auto op = c10::Dispatcher::singleton().findSchema({name, overload});
             if (!op) throw py::value_error("evaluate_on_call: no op " + name + "." + overload);
             const Stack stack = torch::jit::createStackForSchema(
                 op->schema(), args, py::reinterpret_borrow<py::kwargs>(kwargs), std::nullopt);
             return self(*op, c10::DispatchKeySet(), stack);
           })
      // Immutable: a copy may share the expression (dataclasses.asdict of a
      // node deep-copies its cond).
      .def("__copy__", [](const P::Predicate& self) { return self; })
      .def("__deepcopy__", [](const P::Predicate& self, const py::object&) { return self; })
      .def("__and__", [](const P::Predicate& a, const P::Predicate& b) { return a && b; })
      .def("__or__", [](const P::Predicate& a, const P::Predicate& b) { return a || b; })
      .def("__invert__", [](const P::Predicate& a) { return !a; })
      .def("__repr__", [](const P::Predicate& self) { return "<predicate " + self.description() + ">"; })
      .def_property_readonly("description", &P::Predicate::description);

  p.def("always", &P::always);
  p.def("never", &P::never);
  p.def(
      "dtype_in",
      [](const py::args& dtypes, const py::object& arg) {
        std::vector<c10::ScalarType> types;
        for (const py::handle& dtype : dtypes) {
          if (!THPDtype_Check(dtype.ptr())) {
            throw py::type_error("dtype_in takes torch.dtype values, got " + type_name(dtype));
          }
          types.push_back(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
        }
        if (types.empty()) throw py::value_error("dtype_in needs at least one dtype");
        return P::dtype_in(types, arg_index(arg));
      },
      py::kw_only(), py::arg("arg") = py::none());
  p.def(
      "device_type",
      [](const py::object& type, const py::object& arg) {
        if (!py::isinstance<py::str>(type)) {
          throw py::type_error("device_type takes a device type name (str), got " +
                               type_name(type));
        }
        const auto name = type.cast<std::string>();
        c10::DeviceType parsed;
        try {
          parsed = c10::Device(name).type();
        } catch (const c10::Error&) {
          throw py::value_error("device_type: '" + name + "' is not a device type");
        }
        return P::device_type_is(parsed, arg_index(arg));
      },
      py::arg("type"), py::kw_only(), py::arg("arg") = py::none());
  p.def("contiguous", [](const py::object& arg) { return P::contiguous(arg_index(arg)); },
        py::kw_only(), py::arg("arg") = py::none());
  auto bound = [&p](const char* name, P::Predicate (*make)(int64_t, std::optional<size_t>)) {
    p.def(
        name,
        [make](const py::object& limit, const py::object& arg) {
          return make(int_argument("limit", limit), arg_index(arg));
        },
        py::arg("limit"), py::kw_only(), py::arg("arg") = py::none());
  };
  bound("min_rank", &P::min_rank);
  bound("max_rank", &P::max_rank);
  bound("min_numel", &P::min_numel);
  bound("max_numel", &P::max_numel);
  p.def(
      "max_size",
      [](const py::object& dim, const py::object& size, const py::object& arg) {
        return P::max_size(int_argument("dim", dim), int_argument("size", size), arg_index(arg));
      },
      py::arg("dim"), py::arg("size"), py::kw_only(), py::arg("arg") = py::none());
  p.def("not_cow", &P::not_cow);
  p.def("same_shape", &P::same_shape);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "The reference op-override registry (C++), for native_registry.registry";

  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const InvalidArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const OperatorNotFoundError& e) {
      PyErr_SetString(PyExc_AttributeError, e.what());
    }
  });

  py::class_<OverrideNode, MutableNode>(m, "Node", collectable(TraverseNode{}))
      .def_readonly("dsl_name", &OverrideNode::dsl_name)
      .def_property_readonly("lib_symbol", [](const OverrideNode& n) { return n.key.lib_symbol; })
      .def_property_readonly("op_symbol", [](const OverrideNode& n) { return n.key.op_symbol; })
      .def_property_readonly("dispatch_key",
                             [](const OverrideNode& n) { return n.key.dispatch_key; })
      .def_readonly("node_id", &OverrideNode::node_id)
      .def_property_readonly("unconditional_override",
                             [](const OverrideNode& n) { return n.options.unconditional_override; })
      .def_property_readonly("divert_when_tracing",
                             [](const OverrideNode& n) { return n.options.divert_when_tracing; })
      .def_property_readonly("cond_fn", &cond_object)
      .def_property_readonly(
          "impl_fn", [](const OverrideNode& n) { return python_object_of<PythonImpl>(n.impl); })
      .def_property_readonly("try_initialize_runtime",
                             [](const OverrideNode& n) {
                               return python_object_of<PythonTryInitialize>(
                                   n.options.try_initialize_runtime);
                             })
      .def_property_readonly("key", [](const OverrideNode& n) { return from_key(n.key); });

  py::class_<Snapshot>(m, "Snapshot", collectable(TraverseSnapshot{}));

  m.def(
      "register_op_override",
      [](const std::string& dsl_name, const std::string& lib_symbol,
         const std::string& op_symbol, const std::string& dispatch_key, py::object cond,
         py::object impl, py::object try_initialize_runtime, bool unconditional_override) {
        Callables made = python_callables(cond, impl, try_initialize_runtime,
                                          unconditional_override);
        return mutable_node(without_gil([&] {
          return registry().register_op_override(dsl_name, lib_symbol, op_symbol, dispatch_key,
                                                 std::move(made.cond), std::move(made.impl),
                                                 std::move(made.options));
        }));
      },
      py::arg("dsl_name"), py::arg("lib_symbol"), py::arg("op_symbol"),
      py::arg("dispatch_key"), py::arg("cond"), py::arg("impl"),
      py::arg("try_initialize_runtime"), py::arg("unconditional_override"));

  // Gives a registered node a new cond_fn, impl_fn or try_initialize_runtime
  // (a write of that field on its Python view); returns the node that now
  // stands in its graph (see Registry::replace_node_callables: routers and
  // the `_native` op take it at the graph's next install). The node's other
  // callables are kept as they are, C++ ones included. A Python callable
  // makes the node consult the trace shortcut and the host scope, as at
  // registration; the flags are never lowered (a node that diverts without
  // needing to is only slower while Dynamo traces).
  m.def("replace_callable", [](const MutableNode& node, const std::string& field,
                               py::object value) {
    CondFn cond = node->cond;
    ImplFn impl = node->impl;
    OverrideOptions options = node->options;
    bool python = false;
    if (field == "cond_fn") {
      if (py::isinstance<P::Predicate>(value)) {
        cond = value.cast<P::Predicate>();
      } else {
        require_callable("cond_fn", value);
        cond = PythonCond{hold(value)};
        python = true;
      }
    } else if (field == "impl_fn") {
      require_callable("impl_fn", value);
      impl = PythonImpl{hold(value)};
    } else if (field == "try_initialize_runtime") {
      if (value.is_none()) {
        options.try_initialize_runtime = nullptr;
      } else {
        require_callable("try_initialize_runtime", value);
        options.try_initialize_runtime = PythonTryInitialize{hold(value)};
        python = true;
      }
    } else {
      throw py::value_error("replace_callable: no callable field '" + field + "'");
    }
    options.divert_when_tracing |= python;
    options.needs_host_scope |= python;
    return mutable_node(without_gil([&] {
      return registry().replace_node_callables(*node, std::move(cond), std::move(impl),
                                               std::move(options));
    }));
  });

  m.def("deregister_op_overrides",
        [](std::vector<std::string> dsl, std::vector<std::string> ops,
           std::vector<std::string> keys) {
          without_gil([&] {
            registry().deregister_op_overrides({std::move(dsl), std::move(ops), std::move(keys)});
          });
        });
  m.def("reenable_op_overrides",
        [](std::vector<std::string> dsl, std::vector<std::string> ops,
           std::vector<std::string> keys) {
          without_gil([&] {
            registry().reenable_op_overrides({std::move(dsl), std::move(ops), std::move(keys)});
          });
        });

  // `fn(op_symbol, dispatch_key, [Node]) -> [Node]`; a result that is not a
  // list of nodes counts as a failed transformation. An exception from fn
  // that is an Exception is a failed transformation (a warning, the graph
  // kept); any other (KeyboardInterrupt, SystemExit) aborts the reordering,
  // which then changes nothing, and propagates. Returns the changed keys.
  // install: "nothing", "installed" (republish installed routers of changed
  // graphs) or "changed" (install every changed graph), all or nothing.
  m.def("reorder_graphs", [](py::function fn, const std::string& install) {
    Registry::ReorderInstall mode = Registry::ReorderInstall::kNothing;
    if (install == "installed") {
      mode = Registry::ReorderInstall::kInstalled;
    } else if (install == "changed") {
      mode = Registry::ReorderInstall::kChanged;
    } else if (install != "nothing") {
      throw py::value_error("install must be 'nothing', 'installed' or 'changed', got '" +
                            install + "'");
    }
    std::optional<py::error_already_set> interrupted;
    auto call = [&fn, &interrupted](const std::string& op, const std::string& key,
                                    const Graph& graph) {
      py::gil_scoped_acquire gil;
      py::object result;
      try {
        result = fn(op, key, nodes_to_list(graph));
      } catch (py::error_already_set& error) {
        // No Python object travels through the core: an Exception becomes
        // its message (type and text), anything else the abort.
        if (error.matches(PyExc_Exception)) throw std::runtime_error(error.what());
        interrupted.emplace(std::move(error));
        throw AbortError("the ordering function was interrupted");
      }
      if (!py::isinstance<py::list>(result)) {
        throw InvalidArgumentError("the ordering function returned " + type_name(result) +
                                   ", expected a list of nodes");
      }
      Graph out;
      for (const py::handle& item : result) {
        if (!py::isinstance<OverrideNode>(item)) {
          throw InvalidArgumentError("the ordering function returned a list holding " +
                                     type_name(item) + ", expected nodes");
        }
        out.push_back(item.cast<MutableNode>());
      }
      return out;
    };
    std::vector<GraphKey> changed;
    try {
      changed = without_gil([&] { return registry().reorder_graphs(call, mode); });
    } catch (const AbortError&) {
      if (interrupted) throw std::move(*interrupted);
      throw;
    }
    return keys_to_list(changed);
  });

  m.def("replace_graph", [](const std::tuple<std::string, std::string, std::string>& key,
                            const std::vector<MutableNode>& nodes) {
    without_gil([&] { registry().replace_graph(to_key(key), Graph(nodes.begin(), nodes.end())); });
  });
  m.def("install_graph", [](const std::tuple<std::string, std::string, std::string>& key,
                            bool reinstall) {
    without_gil([&] {
      registry().install_graph(to_key(key),
                               reinstall ? InstallMode::kReinstall : InstallMode::kUpdate);
    });
  });
  m.def("install_all", [] { without_gil([] { registry().install_all(); }); });

  // A Snapshot holds nodes, and so Python callables: dropped like any PyRef.
  m.def("snapshot", [] { return without_gil([] { return registry().snapshot(); }); });
  m.def("restore", [](const Snapshot& s) { without_gil([&] { registry().restore(s); }); });

  m.def("allow_namespace",
        [](const std::string& ns) { without_gil([&] { registry().allow_namespace(ns); }); });
  m.def("disallow_namespace",
        [](const std::string& ns) { without_gil([&] { registry().disallow_namespace(ns); }); });
  m.def("allowed_namespaces",
        [] { return without_gil([] { return registry().allowed_namespaces(); }); });

  m.def("get_dsl_operations", [](const std::string& dsl, const std::string& ns) {
    return without_gil([&] { return registry().get_dsl_operations(dsl, ns); });
  });
  m.def("graph_keys",
        [] { return keys_to_list(without_gil([] { return registry().graph_keys(); })); });
  m.def("router_keys",
        [] { return keys_to_list(without_gil([] { return registry().router_keys(); })); });
  m.def("graph", [](const std::tuple<std::string, std::string, std::string>& key) {
    return nodes_to_list(without_gil([&] { return registry().graph(to_key(key)); }));
  });
  m.def("published_chain", [](const std::tuple<std::string, std::string, std::string>& key) {
    return nodes_to_list(without_gil([&] { return registry().published_chain(to_key(key)); }));
  });
  m.def("is_enabled", [](const OverrideNode& node) {
    return without_gil([&] { return registry().is_enabled(node); });
  });
  m.def("check_invariants", [] { without_gil([] { registry().check_invariants(); }); });
  m.def("dump_state", [] { return without_gil([] { return registry().dump_state(); }); });
  m.def("erase_graph", [](const std::tuple<std::string, std::string, std::string>& key) {
    without_gil([&] { registry().erase_graph(to_key(key)); });
  });
  m.def("uninstall_graph", [](const std::tuple<std::string, std::string, std::string>& key) {
    without_gil([&] { registry().uninstall_graph(to_key(key)); });
  });
  m.def("router_id", [](const std::tuple<std::string, std::string, std::string>& key) {
    return without_gil([&] { return registry().router_id(to_key(key)); });
  });
  m.def("router_state", [](const std::tuple<std::string, std::string, std::string>& key) {
    switch (without_gil([&] { return registry().router_state(to_key(key)); })) {
      case RouterState::kAbsent: return "absent";
      case RouterState::kDormant: return "dormant";
      case RouterState::kActive: return "active";
    }
    return "absent";
  });
  m.def("filters", [] {
    const Filter f = without_gil([] { return registry().filters(); });
    return py::make_tuple(f.dsl_names, f.op_symbols, f.dispatch_keys);
  });
  m.def("graphs_by_dsl_name", [] {
    return index_to_dict(without_gil([] { return registry().graphs_by_dsl_name(); }));
  });
  m.def("graphs_by_op_symbol", [] {
    return index_to_dict(without_gil([] { return registry().graphs_by_op_symbol(); }));
  });
  m.def("graphs_by_dispatch_key", [] {
    return index_to_dict(without_gil([] { return registry().graphs_by_dispatch_key(); }));
  });

  m.def("set_empty_chain_policy", [](const std::string& policy) {
    if (policy == "keep_dormant" || policy == "remove") {
      const EmptyChainPolicy chosen = policy == "remove" ? EmptyChainPolicy::kRemoveRouter
                                                         : EmptyChainPolicy::kKeepDormantRouter;
      without_gil([&] { registry().set_empty_chain_policy(chosen); });
    } else {
      throw py::value_error("empty chain policy must be 'keep_dormant' or 'remove', got '" +
                            policy + "'");
    }
  });
  m.def("empty_chain_policy", [] {
    const EmptyChainPolicy policy = without_gil([] { return registry().empty_chain_policy(); });
    return policy == EmptyChainPolicy::kRemoveRouter ? "remove" : "keep_dormant";
  });
  // The core calls the sink with no lock held; what it raises is reported as
  // unraisable, since the operation that logged has already happened.
  m.def("set_log_sink", [](py::function sink) {
    auto ref = hold(std::move(sink));
    LogSink forward = [ref](LogLevel level, const std::string& message) {
      py::gil_scoped_acquire gil;
      try {
        ref->get()(level == LogLevel::kWarning ? "warning" : "info", message);
      } catch (py::error_already_set& error) {
        error.discard_as_unraisable("native_registry's log sink");
      }
    };
    without_gil([&] { registry().set_log_sink(std::move(forward)); });
  });

  // The mask stack is Python's (only Python enters masks through here), so
  // the GIL guards it; the core work runs without the GIL.
  m.def("push_unconditional_mask", [] {
    auto mask = without_gil(
        [] { return std::make_unique<Registry::UnconditionalMask>(registry()); });
    masks().push_back(std::move(mask));
  });
  m.def("pop_unconditional_mask", [] {
    if (masks().empty()) throw py::value_error("no unconditional mask to lift");
    std::unique_ptr<Registry::UnconditionalMask> mask = std::move(masks().back());
    masks().pop_back();
    without_gil([&] { mask.reset(); });
  });

  dynamo_flag();
  native_registry::python::watch_schema_removals();
  set_host_scope(&with_gil);
  m.def("install_dynamo_shortcut", [] { set_trace_shortcut(&dynamo_is_tracing); });
  m.def("remove_trace_shortcut", [] { set_trace_shortcut(nullptr); });
  m.def("in_diverted_call", &in_diverted_call);

  bind_predicates(m);
}
