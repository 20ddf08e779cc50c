// Python callables as a node's cond, impl and try_initialize_runtime: the
// functors that call them on the call path (their arguments in torch.library's
// form, arguments.cpp; their results converted to the op's return types), and
// the checks and flags a callable from Python brings at registration and at a
// write of a node's field.
//
// Owns: PythonCond, PythonImpl, PythonTryInitialize and what they return,
// a PythonCond as routers call it inside the host scope (host_cond_of),
// the coverage checks from Python,
// python_callables and replaced_callables (which decide divert_when_tracing,
// needs_host_scope and impl_in_host_scope for Python callables). May not touch: registry state
// (the caller hands what these build to the core), or the GIL but through
// GilForPython.

#include "binding.h"

#include "argument_plan.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

namespace native_registry::python {

namespace {

// Whether a tensor has dimension names: PyTorch's named tensors, which
// toIValue refuses, exist up to some release (2.11 has them, 2.13 not).
template <class T>
bool has_dimension_names(const T& tensor) {
  if constexpr (requires { tensor.has_names(); }) {
    return tensor.has_names();
  } else {
    return false;
  }
}

// One returned value as the IValue the schema promises. toIValue would turn
// None into an undefined tensor; an impl that returns None for a Tensor is a
// bug to report, not a result to pass on. A tensor goes on as it is (what
// toIValue makes of it, without its generic conversion); a named one goes
// through toIValue, to be refused as there.
c10::IValue returned_value(const ArgumentPlan& plan, const c10::Argument& ret,
                           const py::handle& value) {
  if (ret.real_type()->kind() == c10::TypeKind::TensorType) {
    if (!THPVariable_Check(value.ptr())) {
      throw py::type_error("the impl of " + c10::toString(plan.op_name) + " returned " +
                           type_name(value) + " where the schema promises a Tensor");
    }
    const at::Tensor& tensor = THPVariable_Unpack(value.ptr());
    if (!has_dimension_names(tensor)) return tensor;
  }
  return torch::jit::toIValue(value, ret.real_type());
}

// Pushes what a Python impl returned, converted to the return types of the
// schema its call started with (`plan`'s).
void push_python_result(const ArgumentPlan& plan, Stack* stack, const py::object& out) {
  const auto& returns = plan.returns;
  if (returns.empty()) return;
  if (returns.size() == 1) {
    stack->push_back(returned_value(plan, returns[0], out));
    return;
  }
  // Any sequence, as torch.library takes a Python kernel's results (and so
  // upstream's router): a tuple, a torch.return_types tuple, a list. Not a
  // str, bytes or a mapping; and of exactly the schema's length, where
  // torch.library drops extra values without a word. What the sequence's
  // len() or item access raises is the call's error, as there.
  const bool sequence = PySequence_Check(out.ptr()) && !PyUnicode_Check(out.ptr()) &&
                        !PyBytes_Check(out.ptr()) && !PyByteArray_Check(out.ptr());
  const Py_ssize_t length = sequence ? PySequence_Size(out.ptr()) : -1;
  if (sequence && length < 0) throw py::error_already_set();
  if (length != static_cast<Py_ssize_t>(returns.size())) {
    throw py::type_error(
        "the impl of " + c10::toString(plan.op_name) + " must return a tuple or list of " +
        std::to_string(returns.size()) + " values, got " + type_name(out) +
        (length >= 0 ? " of " + std::to_string(length) + " values" : std::string()));
  }
  for (size_t i = 0; i < returns.size(); ++i) {
    auto value = py::reinterpret_steal<py::object>(
        PySequence_GetItem(out.ptr(), static_cast<Py_ssize_t>(i)));
    if (!value) throw py::error_already_set();
    stack->push_back(returned_value(plan, returns[i], value));
  }
}

}  // namespace

bool PythonCond::operator()(const c10::OperatorHandle& op, c10::DispatchKeySet,
                            const Stack& stack) const {
  // In the host scope, where a router's choice runs its conds, the GIL is
  // held already: the one look GilForPython would take, and the call ends
  // in call_cond, with no guard left to drop.
  if (HostScope* scope = host_scope_holding_gil()) {
    return call_cond(*plans, fn->get(), op, stack, scope->shared);
  }
  GilForPython gil;
  return call_cond(*plans, fn->get(), op, stack, gil.shared());
}

namespace {

// A Python cond as a router calls it inside the host scope (host_cond_of):
// there with_gil holds the GIL for the choice, so without PythonCond's look
// at the GIL's holder, with the arguments of the scope this thread is in.
bool python_cond_in_host_scope(const void* context, const c10::OperatorHandle& op,
                               c10::DispatchKeySet, const Stack& stack) {
  const auto& cond = *static_cast<const PythonCond*>(context);
  return call_cond(*cond.plans, cond.fn->get(), op, stack, host_scope_here()->shared);
}

}  // namespace

HostCond host_cond_of(const CondFn& cond) {
  // The PythonCond the CondFn holds, which lives as long as it does.
  if (const auto* python = cond.target<PythonCond>()) return {&python_cond_in_host_scope, python};
  return {};
}

void PythonImpl::operator()(const c10::OperatorHandle& op, c10::DispatchKeySet,
                            Stack* stack) const {
  GilForPython gil;
  // The plan of the schema the call starts with, held for the call: the
  // impl may remove or redefine the op (see ArgumentPlan::returns).
  ArgumentPlan& plan = plans->for_schema(op.schema());
  PlanInUse in_use(plan);
  py::object out = call_with_arguments(*plans, fn->get(), op, *stack, gil.shared());
  torch::jit::drop(*stack, plan.argument_count);
  push_python_result(plan, stack, out);
}

bool PythonTryInitialize::operator()() const {
  GilForPython gil;
  return truthy(fn->get()());
}

std::shared_ptr<PyRef> hold(py::object fn) { return std::make_shared<PyRef>(std::move(fn)); }

namespace {

// (args, kwargs) of a call, as the Python kernel of its op would receive
// them: a Python callable that packs what call_with_arguments passes it.
// Made once and never freed (it may be called up to interpreter exit).
const py::handle& argument_packer() {
  static const py::handle packer = py::cpp_function([](py::args args, py::kwargs kwargs) {
                                     return py::make_tuple(std::move(args), std::move(kwargs));
                                   }).release();
  return packer;
}

}  // namespace

bool PythonCoverageCheck::operator()(const GraphKey& graph, const c10::OperatorHandle& op,
                                     c10::DispatchKeySet, const Stack& stack) const {
  GilForPython gil;
  py::object packed = call_with_arguments(*plans, argument_packer(), op, stack, nullptr);
  auto pair = py::reinterpret_borrow<py::tuple>(packed);
  return truthy(fn->get()(graph.op_symbol, graph.dispatch_key, pair[0], pair[1]));
}

CoverageCheck coverage_check_from(const py::object& value) {
  if (value.is_none()) return {};
  if (py::isinstance<P::Predicate>(value)) return PredicateCoverageCheck{value.cast<P::Predicate>()};
  if (!PyCallable_Check(value.ptr())) {
    throw py::type_error("a coverage check must be callable, a Predicate or None, got " +
                         type_name(value));
  }
  return PythonCoverageCheck{hold(value)};
}

namespace {

// A Python error the core must let through where it would absorb one.
bool python_error_must_propagate(const std::exception& error) {
  const auto* python = dynamic_cast<const py::error_already_set*>(&error);
  if (python == nullptr) return false;
  GilForPython gil;
  return python->matches(PyExc_KeyboardInterrupt) || python->matches(PyExc_SystemExit);
}

// The first fallback of a node's impl error, as a RuntimeWarning; a warnings
// filter that turns it into an error makes that the call's error.
void warn_of_fallback(const OverrideNode& node, const c10::OperatorHandle& op,
                      const std::exception& error) {
  GilForPython gil;
  const std::string message =
      "native_registry: the impl of override " + node.node_id + " (dsl '" + node.dsl_name +
      "') of " + c10::toString(op.operator_name()) + " raised " + error.what() +
      "; the call ran the op's own kernel instead (impl error policy 'fallback'); later "
      "errors of this override fall back without a warning";
  if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0) throw py::error_already_set();
}

}  // namespace

void install_error_hooks() {
  set_must_propagate(&python_error_must_propagate);
  set_fallback_notice(&warn_of_fallback);
}

py::object coverage_check_object(const CoverageCheck& check) {
  if (const auto* predicate = check.target<PredicateCoverageCheck>()) {
    return py::cast(predicate->predicate);
  }
  return python_object_of<PythonCoverageCheck>(check);
}

py::object cond_object(const OverrideNode& node) {
  if (const auto* predicate = node.cond.target<P::Predicate>()) return py::cast(*predicate);
  return python_object_of<PythonCond>(node.cond);
}

void require_callable(const char* what, const py::object& value) {
  if (!PyCallable_Check(value.ptr())) {
    throw py::type_error(std::string(what) + " must be callable, got " + type_name(value));
  }
}

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
  // A Python impl chosen inside that scope runs there, under the same GIL.
  out.options.impl_in_host_scope = true;
  out.impl = PythonImpl{hold(impl)};
  return out;
}

// The node's other callables are kept as they are, C++ ones included. A
// Python callable makes the node consult the trace shortcut and the host
// scope, as at registration; the flags are never lowered (a node that
// diverts without needing to is only slower while Dynamo traces).
Callables replaced_callables(const OverrideNode& node, const std::string& field,
                             const py::object& value) {
  Callables out{node.cond, node.impl, node.options};
  bool python = false;
  if (field == "cond_fn") {
    if (py::isinstance<P::Predicate>(value)) {
      out.cond = value.cast<P::Predicate>();
    } else {
      require_callable("cond_fn", value);
      out.cond = PythonCond{hold(value)};
      python = true;
    }
  } else if (field == "impl_fn") {
    require_callable("impl_fn", value);
    out.impl = PythonImpl{hold(value)};
    out.options.impl_in_host_scope = true;
  } else if (field == "try_initialize_runtime") {
    if (value.is_none()) {
      out.options.try_initialize_runtime = nullptr;
    } else {
      require_callable("try_initialize_runtime", value);
      out.options.try_initialize_runtime = PythonTryInitialize{hold(value)};
      python = true;
    }
  } else {
    throw py::value_error("replace_callable: no callable field '" + field + "'");
  }
  out.options.divert_when_tracing |= python;
  out.options.needs_host_scope |= python;
  return out;
}

}  // namespace native_registry::python
