// Building ArgumentPlans (argument_plan.h): which arguments of a schema go
// positionally and which by keyword, which hold a default, which are enum
// codes; the interned names and kwnames tuples; the count of the
// dispatcher's schema removals that retires every plan.
//
// Owns: those plans and names, for the life of a plan or of the process.
// May not touch: registry state, a call's arguments, or the GIL (every
// caller holds it).

#include "argument_plan.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

namespace py = pybind11;

namespace native_registry::python {

namespace {

// Whether a schema type is `kind` or Optional[`kind`].
bool is_kind(const c10::TypePtr& type, c10::TypeKind kind) {
  if (type->kind() == kind) return true;
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == kind;
}

// A keyword argument's name as an interned Python str, made once per name
// (the GIL guards the table; the strings live as long as the process).
PyObject* keyword_name(const std::string& name) {
  static auto* names = new std::unordered_map<std::string, PyObject*>();
  auto it = names->find(name);
  if (it == names->end()) {
    PyObject* interned = PyUnicode_InternFromString(name.c_str());
    if (interned == nullptr) throw py::error_already_set();
    it = names->emplace(name, interned).first;
  }
  return it->second;
}

}  // namespace

// For the life of the process, as the names (the table is never destroyed).
PyObject* keyword_names_tuple(const c10::SmallVector<PyObject*, 8>& names) {
  static auto* tuples = new std::map<std::vector<PyObject*>, py::object>();
  std::vector<PyObject*> key(names.begin(), names.end());
  auto it = tuples->find(key);
  if (it == tuples->end()) {
    auto tuple =
        py::reinterpret_steal<py::object>(PyTuple_New(static_cast<Py_ssize_t>(names.size())));
    if (!tuple) throw py::error_already_set();
    for (size_t i = 0; i < names.size(); ++i) {
      PyTuple_SET_ITEM(tuple.ptr(), static_cast<Py_ssize_t>(i), Py_NewRef(names[i]));
    }
    // PyTuple_New may collect, and so let another thread in to make it too:
    // the first one stored stays, and this one goes with `tuple`.
    it = tuples->try_emplace(std::move(key), std::move(tuple)).first;
  }
  return it->second.ptr();
}

ArgumentPlan::ArgumentPlan(const c10::FunctionSchema& from)
    : schema(&from),
      removals(schema_removal_epoch()),
      op_name(from.operator_name()),
      argument_count(from.arguments().size()),
      returns(from.returns()) {
  const auto& arguments = from.arguments();
  keyword_start = arguments.size();
  while (keyword_start > 0 && arguments[keyword_start - 1].kwarg_only()) --keyword_start;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    Slot slot;
    const c10::TypePtr& type = argument.real_type();
    if (is_kind(type, c10::TypeKind::ScalarTypeType)) {
      slot.form = Form::kDtype;
    } else if (is_kind(type, c10::TypeKind::LayoutType)) {
      slot.form = Form::kLayout;
    } else if (is_kind(type, c10::TypeKind::MemoryFormatType)) {
      slot.form = Form::kMemoryFormat;
    }
    if (const auto& fallback = argument.default_value()) {
      slot.fallback = *fallback;
      slot.default_tag = fallback->isNone()     ? Default::kNone
                         : fallback->isInt()    ? Default::kInt
                         : fallback->isDouble() ? Default::kDouble
                         : fallback->isBool()   ? Default::kBool
                                                : Default::kOther;
    } else if (i < keyword_start) {
      always_passed = i + 1;
    }
    if (i >= keyword_start) keyword_names.push_back(keyword_name(argument.name()));
    slots.push_back(std::move(slot));
  }
  all_passed = keyword_start == arguments.size() && always_passed == keyword_start;
  if (keyword_names.size() <= kIndexedKeywords) {
    names_by_passed.assign(size_t{1} << keyword_names.size(), nullptr);
  }
}

PyObject* ArgumentPlan::names_for(uint64_t passed) {
  PyObject*& tuple = names_by_passed[passed];
  if (tuple == nullptr) {
    c10::SmallVector<PyObject*, 8> names;
    for (size_t k = 0; k < keyword_names.size(); ++k) {
      if (passed & (uint64_t{1} << k)) names.push_back(keyword_names[k]);
    }
    tuple = keyword_names_tuple(names);
  }
  return tuple;
}

ArgumentPlans::ArgumentPlans() = default;
ArgumentPlans::~ArgumentPlans() = default;

ArgumentPlan& ArgumentPlans::for_schema(const c10::FunctionSchema& schema) {
  if (current_ != nullptr && current_->valid_for(schema)) [[likely]] return *current_;
  return rebuild(schema);
}

// Building a plan allocates Python objects, which may run arbitrary Python
// (a collection, a finaliser) and so let another thread in, which may build
// one too: the plan is published only after it is complete, and the plans no
// call is inside are dropped then.
ArgumentPlan& ArgumentPlans::rebuild(const c10::FunctionSchema& schema) {
  auto plan = std::make_unique<ArgumentPlan>(schema);
  if (current_ != nullptr && current_->valid_for(schema)) return *current_;  // built meanwhile
  std::erase_if(plans_, [](const auto& old) { return old->calls_inside == 0; });
  current_ = plans_.emplace_back(std::move(plan)).get();
  return *current_;
}

}  // namespace native_registry::python
