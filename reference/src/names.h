#pragma once

// Checking and turning the names a caller passes into what the dispatcher
// understands. Every check throws InvalidArgumentError naming the bad value;
// a lookup of an op the dispatcher lacks, OperatorNotFoundError naming it.
//
// Owns: the declarations (names.cpp and composite.cpp define them). May not
// touch: registry state; nothing declared here changes anything.

#include <native_registry/types.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>

#include <string>

namespace native_registry::detail {

// 'value' with control and non-ASCII bytes escaped, for error messages.
std::string quoted(const std::string& value);

// Throws unless `value` holds something other than whitespace.
void check_not_blank(const char* what, const std::string& value);

// Throws unless `op_symbol` is `name` or `name.overload` made of identifier
// characters (so "ns::op", "mul.", ".Tensor" and "a b" are refused).
void check_op_symbol(const std::string& op_symbol);

// Throws unless `lib_symbol` is an identifier (no "::", no dots).
void check_lib_symbol(const std::string& lib_symbol);

// Parses a dispatch key name an override may be installed at and returns it.
// Refuses unknown names, Meta, the Composite* keys, other alias keys and
// keys at which no kernel runs (check_kernel_runs_at).
c10::DispatchKey parse_override_dispatch_key(const std::string& name);

// Throws, naming `name` and the nearest usable keys, when no kernel
// registered at `key` would ever be called (the per-backend functionality
// keys Dense, Sparse, Quantized, NestedTensor, AutogradFunctionality, ...).
void check_kernel_runs_at(const std::string& name, c10::DispatchKey key);

// The namespace of the ops that carry the overrides (`_native::<node_id>`),
// never one an override may target.
inline constexpr char kNativeNamespace[] = "_native";

// "_native::<node_id>", the name the dispatcher knows a node's op by.
c10::OperatorName native_op_name(const std::string& node_id);

// `key` as the registry admits a key given by name: its symbols checked and
// its dispatch key parsed (parse_override_dispatch_key) into
// parsed_dispatch_key. Throws InvalidArgumentError for a key no registration
// could have made.
GraphKey admitted_key(const GraphKey& key);

// Throws when a kernel at `key` would take the op of `graph_key` out of
// autograd: the op's kernel there is its CompositeImplicitAutograd one and
// `key` is a backend key, so a router there would make the dispatcher stop
// decomposing the op under autograd (its backward would then fail). The
// message names the op's CompositeImplicitAutograd kernel and says where to
// register instead. Ops the dispatcher does not know yet are not judged.
void check_keeps_autograd(const GraphKey& graph_key, c10::DispatchKey key);

// "mul.Tensor" in "aten" -> {"aten::mul", "Tensor"}; "bmm" -> {"aten::bmm", ""}.
c10::OperatorName operator_name(const GraphKey& key);

// The op of `key` as the dispatcher has it now; OperatorNotFoundError,
// naming it, when it has none.
c10::OperatorHandle resolve_op(const GraphKey& key);

// resolve_op() for a key about to get a new router: also refuses, as
// registration does, a key whose router would take a
// CompositeImplicitAutograd op out of autograd (check_keeps_autograd), for
// an op defined since registration.
c10::OperatorHandle resolve_op_for_router(const GraphKey& key);

// The items, each spelled by `spell` (or as they are), separated by ", ":
// how the registry's messages and log records list names.
template <class Range, class Spell>
std::string comma_separated(const Range& items, Spell spell) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += ", ";
    first = false;
    out += spell(item);
  }
  return out;
}
template <class Range>
std::string comma_separated(const Range& items) {
  return comma_separated(items, [](const auto& item) -> const auto& { return item; });
}

// Letters, digits and '_' kept, anything else turned into '_', capped in
// length, for minting `_native` op names.
std::string identifier_fragment(const std::string& text, size_t max_length);

}  // namespace native_registry::detail
