// The C++ predicates (native_registry/predicates.h) for Python: the
// native_registry._C.predicates submodule, whose Predicate objects are conds
// the core evaluates without the GIL, composable with &, | and ~, and the
// factories that build them from Python values, each naming a bad value in
// its error.
//
// Owns: the predicates submodule and the conversion of a factory's arguments
// and of a direct call's positional arguments. May not touch: registry state,
// or what a predicate decides (that is predicates.cpp's, in the core).

#include "binding.h"

#include "arguments.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <optional>

namespace native_registry::python {

namespace {

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

}  // namespace

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
             const auto [op, stack] = boxed_call("evaluate_on_call", name, overload, args, kwargs);
             return self(op, c10::DispatchKeySet(), stack);
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

}  // namespace native_registry::python
