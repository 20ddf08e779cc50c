// A call's arguments converted for a Python cond or impl by its schema's
// ArgumentPlan (argument_plan.h): positional arguments up to the last that
// differs from its default, keyword-only ones unless at their default, each
// IValue as the Python object torch.library would hand a kernel.
//
// Owns: the conversion itself and SharedArguments (a call's converted
// arguments kept for its impl once a cond accepted; call_cond reads the
// cond's answer for that, and only that). May not touch: registry state, how
// plans are built, the GIL (every call here already holds it) or what an
// impl returns.

#include "arguments.h"

#include "argument_plan.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <algorithm>
#include <optional>

namespace py = pybind11;

namespace native_registry::python {

namespace {

// One argument as a torch.library Python kernel receives it (and so as
// upstream's router hands it to a cond), as a new reference: dtype, layout
// and memory_format as torch objects; a tensor straight to its Python object,
// without the IValue copy toPyObject makes; a wrapped number (the 2 of
// `t * 2`) as a Python number; anything else (devices, generators, lists,
// scalars) as toPyObject makes it.
// The rest of to_python: a wrapped number, an enum code, anything else.
C10_NOINLINE PyObject* non_tensor_to_python(const ArgumentPlan::Slot& slot,
                                            const c10::IValue& value) {
  if (value.isInt() && slot.form != ArgumentPlan::Form::kValue) {
    const auto code = value.toInt();
    switch (slot.form) {
      case ArgumentPlan::Form::kDtype:
        return Py_NewRef(torch::getTHPDtype(static_cast<c10::ScalarType>(code)));
      case ArgumentPlan::Form::kLayout:
        return Py_NewRef(torch::getTHPLayout(static_cast<c10::Layout>(code)));
      case ArgumentPlan::Form::kMemoryFormat:
        return Py_NewRef(torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(code)));
      case ArgumentPlan::Form::kValue: break;
    }
  }
  return torch::jit::toPyObject(value).release().ptr();
}

// Inlined into the conversion loop for the common case, a tensor.
C10_ALWAYS_INLINE PyObject* to_python(const ArgumentPlan::Slot& slot, const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined() || !tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
      PyObject* object = THPVariable_Wrap(tensor);
      if (object == nullptr) throw py::error_already_set();
      return object;
    }
  }
  return non_tensor_to_python(slot, value);
}

// Pushes the keyword-only arguments a call passes, for a plan with too many
// of them to index their kwnames tuples; returns the tuple of their names
// (null if none is passed).
PyObject* keyword_arguments_by_name(const ArgumentPlan& plan, const c10::IValue* args,
                                    ArgumentVector& argv) {
  c10::SmallVector<PyObject*, 8> names;
  for (size_t i = plan.keyword_start; i < plan.slots.size(); ++i) {
    if (holds_default(plan.slots[i], args[i])) continue;
    names.push_back(plan.keyword_names[i - plan.keyword_start]);
    argv.push(to_python(plan.slots[i], args[i]));
  }
  return names.empty() ? nullptr : keyword_names_tuple(names);
}

}  // namespace

// Fills a SharedArguments (its members are private to everything else).
struct SharedArgumentsAccess {
  static void keep(SharedArguments& shared, ArgumentVector& argv, const c10::IValue* args,
                   const c10::FunctionSchema& schema, size_t positional, PyObject* names) {
    shared.values_.emplace() = std::move(argv);
    shared.args_ = args;
    shared.schema_ = &schema;
    shared.positional_ = positional;
    shared.names_ = names;
  }
  static PyObject* call(const SharedArguments& shared, const py::handle& fn) {
    return PyObject_Vectorcall(fn.ptr(), shared.values_->arguments(),
                               shared.positional_ | PY_VECTORCALL_ARGUMENTS_OFFSET, shared.names_);
  }
};

namespace {

// The arguments of one call, converted for a Python callable.
struct Converted {
  ArgumentVector argv;
  size_t positional = 0;
  PyObject* names = nullptr;  // null: no keyword argument is passed
  explicit Converted(size_t most) : argv(most) {}
};

// Converts the call's arguments (`args`, `plan`'s schema) into `out`. Inlined
// into both callers: it is most of a declining Python cond's own cost.
C10_ALWAYS_INLINE void convert(ArgumentPlan& plan, const c10::IValue* args, Converted& out) {
  const ArgumentPlan::Slot* slots = plan.slots.data();
  const size_t count = plan.argument_count;  // one slot each
  if (plan.all_passed) {  // (Tensor self, Tensor other), say: nothing to compare
    out.argv.push_each(count, [&](size_t i) { return to_python(slots[i], args[i]); });
    out.positional = count;
    return;
  }
  size_t positional = plan.keyword_start;
  while (positional > plan.always_passed &&
         holds_default(slots[positional - 1], args[positional - 1])) {
    --positional;
  }
  ArgumentVector& argv = out.argv;
  argv.push_each(positional, [&](size_t i) { return to_python(slots[i], args[i]); });
  PyObject* names = nullptr;
  if (plan.names_by_passed.empty()) {
    names = keyword_arguments_by_name(plan, args, argv);
  } else {
    uint64_t passed = 0;  // bit k: the k-th keyword-only argument is passed
    for (size_t i = plan.keyword_start; i < count; ++i) {
      if (holds_default(slots[i], args[i])) continue;
      passed |= uint64_t{1} << (i - plan.keyword_start);
      argv.push(to_python(slots[i], args[i]));
    }
    if (passed != 0) names = plan.names_for(passed);
  }
  out.positional = positional;
  out.names = names;
}

// What a vectorcall returned, owned; its exception raised.
py::object returned_by_call(PyObject* out) {
  if (out == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(out);
}

// The truth of what a cond's vectorcall returned: True and False, what
// conds return, without asking PyObject_IsTrue (and let go with a plain
// Py_DECREF: neither can be the last reference).
C10_ALWAYS_INLINE bool cond_answer(PyObject* out) {
  if (out == Py_True || out == Py_False) {
    Py_DECREF(out);
    return out == Py_True;
  }
  return truthy(returned_by_call(out));
}

// Where the call's arguments lie: the top of its stack.
const c10::IValue* arguments_of(const c10::FunctionSchema& schema,
                                const std::vector<c10::IValue>& stack) {
  return stack.data() + (stack.size() - schema.arguments().size());
}

}  // namespace

// torch.library splits the arguments for a Python kernel this way:
// positional arguments in order up to the last one that differs from its
// default (trailing defaults are not passed), keyword-only arguments as
// keywords unless they hold their default. Through vectorcall, so that no
// argument tuple or keyword dict is built: this and the plan's lookup are
// the whole per-call cost of a Python cond besides the GIL.
py::object call_with_arguments(ArgumentPlans& plans, const py::handle& fn,
                               const c10::OperatorHandle& op,
                               const std::vector<c10::IValue>& stack,
                               const SharedArguments* shared) {
  const c10::FunctionSchema& schema = op.schema();
  const c10::IValue* args = arguments_of(schema, stack);
  if (shared != nullptr && shared->matches(args, schema)) {
    return returned_by_call(SharedArgumentsAccess::call(*shared, fn));
  }
  ArgumentPlan& plan = plans.for_schema(schema);
  PlanInUse in_use(plan);
  Converted converted(plan.argument_count);
  convert(plan, args, converted);
  return returned_by_call(PyObject_Vectorcall(fn.ptr(), converted.argv.arguments(),
                                   converted.positional | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   converted.names));
}

bool call_cond(ArgumentPlans& plans, py::handle fn, const c10::OperatorHandle& op,
               const std::vector<c10::IValue>& stack, SharedArguments* shared) {
  const c10::FunctionSchema& schema = op.schema();
  // The plan first: its argument count (the schema's) finds the arguments
  // without dividing by the size of a c10::Argument.
  ArgumentPlan& plan = plans.for_schema(schema);
  const c10::IValue* args = stack.data() + (stack.size() - plan.argument_count);
  if (shared != nullptr && shared->matches(args, schema)) {
    return cond_answer(SharedArgumentsAccess::call(*shared, fn));
  }
  PlanInUse in_use(plan);
  Converted converted(plan.argument_count);
  convert(plan, args, converted);
  const bool accepted = cond_answer(PyObject_Vectorcall(
      fn.ptr(), converted.argv.arguments(), converted.positional | PY_VECTORCALL_ARGUMENTS_OFFSET,
      converted.names));
  if (accepted && shared != nullptr && shared->empty()) {
    SharedArgumentsAccess::keep(*shared, converted.argv, args, schema, converted.positional,
                                converted.names);
  }
  return accepted;
}

std::pair<c10::OperatorHandle, std::vector<c10::IValue>> boxed_call(
    const char* who, const std::string& name, const std::string& overload,
    const py::tuple& args, const py::dict& kwargs) {
  const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findSchema({name, overload});
  if (!op) {
    throw py::value_error(std::string(who) + ": no op '" +
                          c10::toString(c10::OperatorName(name, overload)) + "' in the dispatcher");
  }
  return {*op, torch::jit::createStackForSchema(op->schema(), args,
                                                py::reinterpret_borrow<py::kwargs>(kwargs),
                                                std::nullopt)};
}

}  // namespace native_registry::python
