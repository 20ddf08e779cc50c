// The checks and conversions names.h declares (check_keeps_autograd is
// composite.cpp's): what a caller's names must look like, which dispatch
// keys an override may use, a graph key's operator name and its lookup, and
// the fragment `_native` op names are made from.
//
// Owns: the spelling rules of every name the registry takes. May not touch:
// registry state; of the dispatcher it only reads (resolve_op).

#include "names.h"

#include <native_registry/errors.h>

#include <c10/util/Exception.h>

#include <cctype>
#include <cstdio>

namespace native_registry::detail {
namespace {

bool is_identifier(const std::string& text) {
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text[0]))) {
    return false;
  }
  for (unsigned char c : text) {
    if (!(std::isalnum(c) || c == '_')) return false;
  }
  return true;
}

}  // namespace

std::string quoted(const std::string& value) {
  std::string out = "'";
  for (unsigned char c : value) {
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

void check_not_blank(const char* what, const std::string& value) {
  for (unsigned char c : value) {
    if (!std::isspace(c)) return;
  }
  throw InvalidArgumentError(std::string(what) + " must be a non-empty name, got " +
                             quoted(value));
}

void check_op_symbol(const std::string& op_symbol) {
  check_not_blank("op_symbol", op_symbol);
  const auto dot = op_symbol.find('.');
  const std::string name = op_symbol.substr(0, dot);
  const bool ok = is_identifier(name) &&
                  (dot == std::string::npos || is_identifier(op_symbol.substr(dot + 1)));
  if (!ok) {
    throw InvalidArgumentError(
        "op_symbol=" + quoted(op_symbol) +
        " is not an op symbol: expected 'name' or 'name.overload' without a "
        "namespace (the namespace goes in lib_symbol)");
  }
}

void check_lib_symbol(const std::string& lib_symbol) {
  check_not_blank("lib_symbol", lib_symbol);
  if (!is_identifier(lib_symbol)) {
    throw InvalidArgumentError("lib_symbol=" + quoted(lib_symbol) +
                               " is not a namespace name");
  }
}

namespace {

// The runtime keys of a per-backend functionality for the backends people
// name first, e.g. Sparse -> SparseCPU, SparseCUDA.
std::string runtime_keys_of(c10::DispatchKey functionality) {
  const c10::BackendComponent backends[] = {c10::BackendComponent::CPUBit,
                                            c10::BackendComponent::CUDABit};
  return comma_separated(backends, [functionality](c10::BackendComponent backend) {
    return std::string(c10::toString(c10::toRuntimePerBackendFunctionalityKey(functionality, backend)));
  });
}

}  // namespace

void check_kernel_runs_at(const std::string& name, c10::DispatchKey key) {
  // A per-backend functionality key (Dense, Sparse, AutogradFunctionality,
  // ...) names a column of keys, not one: the dispatcher computes no call
  // with it, so a router there would never run while reporting itself active.
  if (c10::isPerBackendFunctionalityKey(key)) {
    throw InvalidArgumentError("dispatch_key=" + quoted(name) +
                               " is a functionality key at which no kernel is ever called; "
                               "name one of its runtime keys, e.g. " +
                               runtime_keys_of(key));
  }
}

c10::DispatchKey parse_override_dispatch_key(const std::string& name) {
  check_not_blank("dispatch_key", name);
  c10::DispatchKey key;
  try {
    key = c10::parseDispatchKey(name);
  } catch (const c10::Error&) {
    throw InvalidArgumentError("unknown dispatch_key=" + quoted(name));
  }
  // The `_native` op's meta kernel calls the target op again; at these keys
  // that call would come straight back into the router.
  if (key == c10::DispatchKey::Meta ||
      key == c10::DispatchKey::CompositeImplicitAutograd ||
      key == c10::DispatchKey::CompositeExplicitAutograd) {
    throw InvalidArgumentError(
        "dispatch_key=" + quoted(name) +
        " is not supported: overrides are installed at a backend key (CPU, "
        "CUDA, ...), since the fake kernel redispatches through this key and "
        "would recurse");
  }
  check_kernel_runs_at(name, key);
  if (c10::isAliasDispatchKey(key) || key == c10::DispatchKey::Undefined) {
    throw InvalidArgumentError("dispatch_key=" + quoted(name) +
                               " is not a runtime dispatch key; use a backend "
                               "key such as CPU or CUDA");
  }
  return key;
}

c10::OperatorName native_op_name(const std::string& node_id) {
  return {std::string(kNativeNamespace) + "::" + node_id, ""};
}

GraphKey admitted_key(const GraphKey& key) {
  check_lib_symbol(key.lib_symbol);
  check_op_symbol(key.op_symbol);
  GraphKey admitted = key;
  admitted.parsed_dispatch_key = parse_override_dispatch_key(key.dispatch_key);
  return admitted;
}

c10::OperatorName operator_name(const GraphKey& key) {
  const auto dot = key.op_symbol.find('.');
  if (dot == std::string::npos) {
    return {key.lib_symbol + "::" + key.op_symbol, ""};
  }
  return {key.lib_symbol + "::" + key.op_symbol.substr(0, dot),
          key.op_symbol.substr(dot + 1)};
}

c10::OperatorHandle resolve_op(const GraphKey& key) {
  auto op = c10::Dispatcher::singleton().findSchema(operator_name(key));
  if (!op) {
    throw OperatorNotFoundError(
        "op " + quoted(key.lib_symbol + "::" + key.op_symbol) +
        " not found; is the namespace " + quoted(key.lib_symbol) +
        " loaded (its library defined or imported) and the op symbol spelled "
        "with its overload?");
  }
  return *op;
}

c10::OperatorHandle resolve_op_for_router(const GraphKey& key) {
  c10::OperatorHandle op = resolve_op(key);
  // Registration judged the op only if it was defined then; one defined
  // since (a CompositeImplicitAutograd op of a library loaded late) is
  // judged here, before anything changes.
  check_keeps_autograd(key, key.parsed_dispatch_key);
  return op;
}

std::string identifier_fragment(const std::string& text, size_t max_length) {
  std::string out;
  for (unsigned char c : text) {
    if (out.size() == max_length) break;
    out += (std::isalnum(c) && c < 0x80) ? static_cast<char>(c) : '_';
  }
  return out;
}

}  // namespace native_registry::detail
