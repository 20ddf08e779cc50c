// How a boxed call's arguments reach a Python cond or impl: as torch.library
// hands them to a Python kernel (see call_with_arguments). What a schema's
// arguments need is worked out once per schema, into an ArgumentPlan, so that
// a call only converts and compares.
//
// Owns: ArgumentPlan(s) and the conversion of a boxed call's arguments to
// Python (arguments.cpp defines them). May not touch: registry state, or what
// a callable returns (callables.cpp converts results).

#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
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

// Calls `fn` with the boxed call's arguments (the top of `stack`) in
// torch.library's form, with the GIL held; returns what it returned.
pybind11::object call_with_arguments(ArgumentPlans& plans, const pybind11::handle& fn,
                                     const c10::OperatorHandle& op,
                                     const std::vector<c10::IValue>& stack);

// Starts counting the dispatcher's schema removals, which retire every plan
// (see ArgumentPlans). Called once, when the module loads.
void watch_schema_removals();

}  // namespace native_registry::python
