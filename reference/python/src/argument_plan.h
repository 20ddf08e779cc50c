// What a schema's arguments need for a Python callable, worked out once per
// schema (an ArgumentPlan), and the interned keyword names and kwnames
// tuples plans share. Private to the binding: arguments.cpp converts a
// call's arguments by a plan; argument_plan.cpp builds plans and retires
// them when the dispatcher removes a schema.
//
// Owns: the plan's layout and holds_default, the comparison a call makes
// for each argument. May not touch: registry state, or a call's values.

#pragma once

#include "arguments.h"

#include <c10/util/SmallVector.h>
#include <native_registry/call_hooks.h>

#include <cstdint>
#include <vector>

namespace native_registry::python {

// The kwnames tuple vectorcall takes for these keyword names (interned
// names), made once per sequence of names; the GIL is held.
PyObject* keyword_names_tuple(const c10::SmallVector<PyObject*, 8>& names);

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
  uint64_t removals = 0;           // schema_removal_epoch() when it was built: a plan
                                   // built before a removal may describe a schema gone
  // Copies of what an impl's results are converted by: code the impl runs
  // may destroy the op's library (`schema` gone) or define the op again, and
  // the call keeps the schema it started with (the router then raises).
  c10::OperatorName op_name;
  size_t argument_count = 0;
  std::vector<c10::Argument> returns;
  std::vector<Slot> slots;         // one per argument, in schema order
  size_t keyword_start = 0;        // the first keyword-only argument
  size_t always_passed = 0;        // positional arguments before this one have no default
  bool all_passed = false;         // no default and no keyword-only argument: every
                                   // argument is passed, positionally, in order
  std::vector<PyObject*> keyword_names;  // interned, of the keyword-only arguments
  std::vector<PyObject*> names_by_passed;  // kwnames tuples, filled as calls need them
  int calls_inside = 0;            // calls using this plan now (GIL-guarded)

  // Works the plan out from the schema (argument_plan.cpp).
  explicit ArgumentPlan(const c10::FunctionSchema& from);

  // Whether a call may use this plan for `call_schema`.
  bool valid_for(const c10::FunctionSchema& call_schema) const {
    return schema == &call_schema &&
           removals == schema_removal_epoch();
  }

  // The kwnames tuple for the keyword-only arguments in `passed` (a bit
  // each), when the plan indexes them (names_by_passed is not empty).
  PyObject* names_for(uint64_t passed);
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

// Whether an argument holds its schema default, by the IValue equality
// torch.library uses (so alpha=1.0 is not the default 1). The tags defaults
// have most (None, ints, floats, bools) are compared here as IValue::equals
// compares them, without the IValue it returns.
inline bool holds_default(const ArgumentPlan::Slot& slot, const c10::IValue& value) {
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

}  // namespace native_registry::python
