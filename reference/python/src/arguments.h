// How a boxed call's arguments reach a Python cond or impl: as torch.library
// hands them to a Python kernel (see call_with_arguments). What a schema's
// arguments need is worked out once per schema, into an ArgumentPlan, so that
// a call only converts and compares.
//
// Owns: ArgumentPlan(s), the conversion of a boxed call's arguments to
// Python and SharedArguments (argument_plan.cpp builds the plans,
// arguments.cpp converts by them), and a Python call boxed for an op. May not touch:
// registry state, or what an impl returns (callables.cpp converts results).

#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace native_registry::python {

struct ArgumentPlan;

// The plans of one Python callable (a node's cond or impl): one per schema it
// has been called with, in practice one, its op's. Every use holds the GIL,
// which guards them; a plan stops being valid when any op's schema is
// removed from the dispatcher (the schema it was built from may be gone, and
// a new one may take its address), and the next call builds another.
class ArgumentPlans {
 public:
  ArgumentPlans();
  ~ArgumentPlans();
  ArgumentPlans(const ArgumentPlans&) = delete;
  ArgumentPlans& operator=(const ArgumentPlans&) = delete;

  // The plan for `schema`; the GIL is held.
  ArgumentPlan& for_schema(const c10::FunctionSchema& schema);

 private:
  ArgumentPlan& rebuild(const c10::FunctionSchema& schema);

  ArgumentPlan* current_ = nullptr;
  // Every plan a call may still be using (current_ among them): a call on
  // another thread can be inside a plan that is no longer current.
  std::vector<std::unique_ptr<ArgumentPlan>> plans_;
};

// The truth of a Python value (a cond's answer, say); its exception raised.
inline bool truthy(const pybind11::object& value) {
  const int answer = PyObject_IsTrue(value.ptr());
  if (answer < 0) throw pybind11::error_already_set();
  return answer == 1;
}

// The vectorcall argument vector: slot 0 is scratch for
// PY_VECTORCALL_ARGUMENTS_OFFSET, then positional values, then keyword
// values. Owns the values it holds (the GIL held whenever it changes or
// ends); inline for up to kInline - 1 of them. The one buffer of Python
// arguments: a call's conversion fills one, and SharedArguments keeps it.
class ArgumentVector {
 public:
  ArgumentVector() = default;
  explicit ArgumentVector(size_t most) {
    if (most + 1 > kInline) {
      heap_ = std::make_unique<PyObject*[]>(most + 1);
      values_ = heap_.get();
    }
  }
  ~ArgumentVector() { clear(); }
  ArgumentVector(const ArgumentVector&) = delete;
  ArgumentVector& operator=(const ArgumentVector&) = delete;
  // Takes `other`'s values, which then holds none.
  ArgumentVector& operator=(ArgumentVector&& other) noexcept {
    clear();
    if (other.values_ == other.inline_) {
      std::copy(other.inline_, other.inline_ + other.size_, inline_);
      heap_.reset();
      values_ = inline_;
    } else {
      heap_ = std::move(other.heap_);
      values_ = heap_.get();
      other.values_ = other.inline_;
    }
    size_ = std::exchange(other.size_, 1);
    return *this;
  }
  void push(PyObject* owned) { values_[size_++] = owned; }
  // push(make(i)) for i in [0, count), the size kept in a register between
  // the calls (and written back before make throws: the vector owns what it
  // holds).
  template <class Make>
  C10_ALWAYS_INLINE void push_each(size_t count, const Make& make) {
    PyObject** const values = values_;
    size_t size = size_;
    for (size_t i = 0; i < count; ++i) {
      PyObject* value;
      try {
        value = make(i);
      } catch (...) {
        size_ = size;
        throw;
      }
      values[size++] = value;
    }
    size_ = size;
  }
  PyObject* const* arguments() const { return values_ + 1; }
  size_t size() const { return size_; }

 private:
  void clear() {
    for (size_t i = 1; i < size_; ++i) Py_DECREF(values_[i]);
    size_ = 1;
  }
  static constexpr size_t kInline = 10;
  PyObject* inline_[kInline];
  std::unique_ptr<PyObject*[]> heap_;
  PyObject** values_ = inline_;
  size_t size_ = 1;
};

// The arguments a Python cond accepted a call with, kept (owned, the GIL
// held whenever they change hands) for the node's impl and any further cond
// of the same call, so that the call converts them once: upstream's Python
// router hands the same objects to a cond and its impl too. One lives on the
// frame of each host scope (the binding's with_gil), which chooses for one
// call and runs its impl; a call made from inside that scope chooses in a
// scope of its own, or has arguments elsewhere on the stacks, which never
// match (see matches).
class SharedArguments {
 public:
  SharedArguments() = default;
  ~SharedArguments() = default;  // the GIL is held
  SharedArguments(const SharedArguments&) = delete;
  SharedArguments& operator=(const SharedArguments&) = delete;

  // Whether it holds the arguments at `args` (the top of a live stack) of
  // a call of `schema`.
  bool matches(const c10::IValue* args, const c10::FunctionSchema& schema) const {
    return values_.has_value() && args_ == args && schema_ == &schema;
  }
  bool empty() const { return !values_.has_value(); }

 private:
  friend struct SharedArgumentsAccess;
  // Set together with values_ (only then read): a scope whose conds all
  // decline makes and drops nothing but the empty optional.
  const c10::IValue* args_;
  const c10::FunctionSchema* schema_;
  size_t positional_;
  PyObject* names_;  // kwnames: interned for the life of the process
  std::optional<ArgumentVector> values_;
};

// Calls `fn` with the boxed call's arguments (the top of `stack`) in
// torch.library's form, with the GIL held; returns what it returned. The
// arguments come from `shared` when it holds this call's (null: none kept).
pybind11::object call_with_arguments(ArgumentPlans& plans, const pybind11::handle& fn,
                                     const c10::OperatorHandle& op,
                                     const std::vector<c10::IValue>& stack,
                                     const SharedArguments* shared = nullptr);

// A cond's call: as call_with_arguments, and whether the result is true.
// An accepting cond leaves its arguments in `shared` if that holds none yet.
bool call_cond(ArgumentPlans& plans, pybind11::handle fn, const c10::OperatorHandle& op,
               const std::vector<c10::IValue>& stack, SharedArguments* shared);

// The reverse, for functions that take a call from Python (evaluate_on_call,
// tensorless_backend): the op `name`.`overload` and `args`/`kwargs` boxed for
// it as its kernel would get them; a ValueError "`who`: no op ..." if the
// dispatcher has no such op.
std::pair<c10::OperatorHandle, std::vector<c10::IValue>> boxed_call(
    const char* who, const std::string& name, const std::string& overload,
    const pybind11::tuple& args, const pybind11::dict& kwargs);

}  // namespace native_registry::python
