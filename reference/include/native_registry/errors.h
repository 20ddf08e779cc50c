#pragma once

// The exceptions the registry raises. Every one is thrown *before* the
// registry or the dispatcher is changed, so catching it leaves both exactly
// as they were. The Python binding maps them onto upstream's exception types.
//
// Owns: the exception types. May not touch: anything else; every other
// header throws these.

#include <stdexcept>
#include <string>

namespace native_registry {

// Base of everything the registry throws on purpose.
class RegistryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad argument: an empty or malformed name, a refused dispatch key, a
// namespace off the allowlist, a missing cond or impl. (Python: ValueError.)
class InvalidArgumentError : public RegistryError {
 public:
  using RegistryError::RegistryError;
};

// An override names an operator the dispatcher does not know, found when the
// graph is installed. (Python: AttributeError.)
class OperatorNotFoundError : public RegistryError {
 public:
  using RegistryError::RegistryError;
};

// Thrown by an ordering function to stop a whole reorder_graphs call, which
// then changes nothing and rethrows it (the Python binding uses it for
// KeyboardInterrupt and other exceptions that must not be swallowed as a
// failed transformation).
// The op an override was first installed for has been replaced by another of
// the same name and a different schema (its library destroyed and the op
// defined again): the override's `_native` op, which has the old schema,
// cannot carry it. A kind of OperatorNotFoundError: the op as the override
// knew it is gone.
class OperatorChangedError : public OperatorNotFoundError {
 public:
  using OperatorNotFoundError::OperatorNotFoundError;
};

class AbortError : public RegistryError {
 public:
  using RegistryError::RegistryError;
};

}  // namespace native_registry
