// The argument plans of arguments.h: per schema, which arguments go
// positionally and which by keyword (as torch.library passes them), which
// hold their defaults and may be left out, and how each IValue becomes a
// Python object; the count of schema removals that retires every plan.
//
// Owns: those plans, the conversion itself, and SharedArguments (a call's
// converted arguments kept for its impl once a cond accepted; call_cond reads
// the cond's answer for that, and only that). May not touch: registry state,
// the GIL (every call here already holds it) or what an impl returns.

#include "arguments.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <unordered_map>

namespace py = pybind11;

namespace native_registry::python {

namespace {

// How many schemas the dispatcher has removed: a plan built before the last
// removal may describe a schema that is gone (see ArgumentPlans).
std::atomic<uint64_t> g_schema_removals{0};

class SchemaRemovalCounter final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle&) override {
    g_schema_removals.fetch_add(1, std::memory_order_relaxed);
  }
};

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

// The kwnames tuple vectorcall takes for these keyword names, made once per
// sequence of names (GIL-guarded, for the life of the process, as the names).
PyObject* keyword_names_tuple(const c10::SmallVector<PyObject*, 8>& names) {
  static auto* tuples = new std::map<std::vector<PyObject*>, PyObject*>();
  std::vector<PyObject*> key(names.begin(), names.end());
  auto it = tuples->find(key);
  if (it == tuples->end()) {
    PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(names.size()));
    if (tuple == nullptr) throw py::error_already_set();
    for (size_t i = 0; i < names.size(); ++i) {
      PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), Py_NewRef(names[i]));
    }
    // PyTuple_New may collect, and so let another thread in to make it too.
    auto [made, inserted] = tuples->emplace(std::move(key), tuple);
    if (!inserted) Py_DECREF(tuple);
    it = made;
  }
  return it->second;
}

}  // namespace

// What a call needs to know of each argument of one schema.
struct ArgumentPlan {
  // What an integer argument stands for: the boxed stack holds dtype, layout
  // and memory_format as integer codes, a Python kernel gets torch objects.
  enum class Form : uint8_t { kValue, kDtype, kLayout, kMemoryFormat };
  // The schema default's tag, for the comparisons holds_default makes.
  enum class Default : uint8_t { kAbsent, kNone, kInt, kDouble, kBool, kOther };
  struct Slot {
    Form form = Form::kValue;
    Default default_tag = Default::kAbsent;
    c10::IValue fallback;  // the schema default, when default_tag says there is one
  };
  // A plan indexes kwnames tuples by the set of keyword-only arguments a
  // call passes (bit k: the k-th) for up to this many of them; with more
  // (rare: aten has at most 10) a call looks its tuple up by the names.
  static constexpr size_t kIndexedKeywords = 8;

  const c10::FunctionSchema* schema = nullptr;
  uint64_t removals = 0;           // g_schema_removals when it was built
  std::vector<Slot> slots;         // one per argument, in schema order
  size_t keyword_start = 0;        // the first keyword-only argument
  size_t always_passed = 0;        // positional arguments before this one have no default
  std::vector<PyObject*> keyword_names;  // interned, of the keyword-only arguments
  std::vector<PyObject*> names_by_passed;  // kwnames tuples, filled as calls need them
  int calls_inside = 0;            // calls using this plan now (GIL-guarded)

  explicit ArgumentPlan(const c10::FunctionSchema& from)
      : schema(&from), removals(g_schema_removals.load(std::memory_order_acquire)) {
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
    if (keyword_names.size() <= kIndexedKeywords) {
      names_by_passed.assign(size_t{1} << keyword_names.size(), nullptr);
    }
  }

  // Whether a call may use this plan for `call_schema`.
  bool valid_for(const c10::FunctionSchema& call_schema) const {
    return schema == &call_schema &&
           removals == g_schema_removals.load(std::memory_order_acquire);
  }

  // The kwnames tuple for the keyword-only arguments in `passed` (a bit
  // each), when the plan indexes them (names_by_passed is not empty).
  PyObject* names_for(uint64_t passed) {
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
};

namespace {

// Whether an argument holds its schema default, by the IValue equality
// torch.library uses (so alpha=1.0 is not the default 1). The tags defaults
// have most (None, ints, floats, bools) are compared here as IValue::equals
// compares them, without the IValue it returns.
bool holds_default(const ArgumentPlan::Slot& slot, const c10::IValue& value) {
  const c10::IValue& d = slot.fallback;
  switch (slot.default_tag) {
    case ArgumentPlan::Default::kAbsent: return false;
    case ArgumentPlan::Default::kNone: return value.isNone();
    case ArgumentPlan::Default::kInt: return value.isInt() && d.toInt() == value.toInt();
    case ArgumentPlan::Default::kDouble:
      return value.isDouble() && d.toDouble() == value.toDouble();
    case ArgumentPlan::Default::kBool: return value.isBool() && d.toBool() == value.toBool();
    case ArgumentPlan::Default::kOther: break;
  }
  return d == value;
}

// One argument as a torch.library Python kernel receives it (and so as
// upstream's router hands it to a cond), as a new reference: dtype, layout
// and memory_format as torch objects; a tensor straight to its Python object,
// without the IValue copy toPyObject makes; a wrapped number (the 2 of
// `t * 2`) as a Python number; anything else (devices, generators, lists,
// scalars) as toPyObject makes it.
PyObject* to_python(const ArgumentPlan::Slot& slot, const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined() || !tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
      PyObject* object = THPVariable_Wrap(tensor);
      if (object == nullptr) throw py::error_already_set();
      return object;
    }
  } else if (value.isInt() && slot.form != ArgumentPlan::Form::kValue) {
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

// The vectorcall argument vector: slot 0 is scratch for
// PY_VECTORCALL_ARGUMENTS_OFFSET, then positional values, then keyword values.
// Owns the values it holds; on the stack for up to kInline of them.
class ArgumentVector {
 public:
  explicit ArgumentVector(size_t most) {
    if (most + 1 > kInline) {
      heap_ = std::make_unique<PyObject*[]>(most + 1);
      values_ = heap_.get();
    }
  }
  ~ArgumentVector() {
    for (size_t i = 1; i < size_; ++i) Py_DECREF(values_[i]);
  }
  ArgumentVector(const ArgumentVector&) = delete;
  ArgumentVector& operator=(const ArgumentVector&) = delete;
  void push(PyObject* owned) { values_[size_++] = owned; }
  PyObject* const* arguments() const { return values_ + 1; }
  size_t size() const { return size_; }
  // Hands the values over (the scratch slot first) to `out`, which has room
  // for size(); owns none from then on.
  void release_into(PyObject** out) {
    std::copy(values_, values_ + size_, out);
    size_ = 1;
  }

 private:
  static constexpr size_t kInline = 9;
  PyObject* inline_[kInline];
  std::unique_ptr<PyObject*[]> heap_;
  PyObject** values_ = inline_;
  size_t size_ = 1;
};

// Marks a plan in use for one call: a plan is freed only when no call is inside.
class PlanInUse {
 public:
  explicit PlanInUse(ArgumentPlan& plan) : plan_(plan) { ++plan_.calls_inside; }
  ~PlanInUse() { --plan_.calls_inside; }
  PlanInUse(const PlanInUse&) = delete;
  PlanInUse& operator=(const PlanInUse&) = delete;

 private:
  ArgumentPlan& plan_;
};

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

SharedArguments::~SharedArguments() {
  for (PyObject** value = values_ + 1; value < values_ + size_; ++value) Py_DECREF(*value);
}

// Fills a SharedArguments (its members are private to everything else).
struct SharedArgumentsAccess {
  static void keep(SharedArguments& shared, ArgumentVector& argv, const c10::IValue* args,
                   const c10::FunctionSchema& schema, size_t positional, PyObject* names) {
    shared.size_ = argv.size();
    if (shared.size_ > SharedArguments::kInline) {
      shared.heap_ = std::make_unique<PyObject*[]>(shared.size_);
      shared.values_ = shared.heap_.get();
    }
    argv.release_into(shared.values_);
    shared.filled_ = true;
    shared.args_ = args;
    shared.schema_ = &schema;
    shared.positional_ = positional;
    shared.names_ = names;
  }
  static PyObject* call(const SharedArguments& shared, const py::handle& fn) {
    return PyObject_Vectorcall(fn.ptr(), shared.values_ + 1,
                               shared.positional_ | PY_VECTORCALL_ARGUMENTS_OFFSET, shared.names_);
  }
};

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
  const size_t count = plan.slots.size();
  size_t positional = plan.keyword_start;
  while (positional > plan.always_passed &&
         holds_default(slots[positional - 1], args[positional - 1])) {
    --positional;
  }
  ArgumentVector& argv = out.argv;
  for (size_t i = 0; i < positional; ++i) argv.push(to_python(slots[i], args[i]));
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

// A cond's answer: the truth of what it returned.
bool cond_answer(const py::object& value) {
  const int answer = PyObject_IsTrue(value.ptr());
  if (answer < 0) throw py::error_already_set();
  return answer == 1;
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
  Converted converted(plan.slots.size());
  convert(plan, args, converted);
  return returned_by_call(PyObject_Vectorcall(fn.ptr(), converted.argv.arguments(),
                                   converted.positional | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   converted.names));
}

bool call_cond(ArgumentPlans& plans, const py::handle& fn, const c10::OperatorHandle& op,
               const std::vector<c10::IValue>& stack, SharedArguments* shared) {
  const c10::FunctionSchema& schema = op.schema();
  const c10::IValue* args = arguments_of(schema, stack);
  if (shared != nullptr && shared->matches(args, schema)) {
    return cond_answer(returned_by_call(SharedArgumentsAccess::call(*shared, fn)));
  }
  ArgumentPlan& plan = plans.for_schema(schema);
  PlanInUse in_use(plan);
  Converted converted(plan.slots.size());
  convert(plan, args, converted);
  const bool accepted = cond_answer(returned_by_call(PyObject_Vectorcall(
      fn.ptr(), converted.argv.arguments(), converted.positional | PY_VECTORCALL_ARGUMENTS_OFFSET,
      converted.names)));
  if (accepted && shared != nullptr && shared->empty()) {
    SharedArgumentsAccess::keep(*shared, converted.argv, args, schema, converted.positional,
                                converted.names);
  }
  return accepted;
}

void watch_schema_removals() {
  // Kept for the life of the process: the dispatcher outlives this module.
  static auto* watch = new c10::RegistrationHandleRAII(
      c10::Dispatcher::singleton().addRegistrationListener(
          std::make_unique<SchemaRemovalCounter>()));
  (void)watch;
}

}  // namespace native_registry::python
