// The trace shortcut for Python: routers ask torch.compiler.is_dynamo_compiling
// whether Dynamo is tracing, so that a tracer sees the plain op (see
// set_trace_shortcut in call_hooks.h), and Python turns the shortcut on.
//
// Owns: the captured is_dynamo_compiling, the per-call look-up of what
// torch.compiler holds now, and the module's install_dynamo_shortcut and
// in_diverted_call. May not touch: registry state, or the host scope
// (gil.cpp), inside which this usually runs.

#include "binding.h"

#include <cstdint>

namespace native_registry::python {

namespace {

// torch.compiler.is_dynamo_compiling as torch ships it. Its body is `return
// False`: Dynamo folds it to True only in bytecode it traces, and it cannot
// trace a call made from this C++ code. Captured when the module loads, in
// the same import as the registry, before a test can patch it.
struct DynamoFlag {
  py::handle namespace_;  // torch.compiler's __dict__, where patch.object writes
  py::handle name;
  py::handle stock;
};

const DynamoFlag& dynamo_flag() {
  // Leaked on purpose: read on the call path until the interpreter exits.
  static const DynamoFlag* flag = [] {
    py::module_ compiler = py::module_::import("torch.compiler");
    // Interned, so that the dict lookup matches the key by identity.
    auto name = py::reinterpret_steal<py::str>(PyUnicode_InternFromString("is_dynamo_compiling"));
    py::object stock = compiler.attr(name);
    py::dict namespace_ = compiler.attr("__dict__");
    return new DynamoFlag{namespace_.release(), name.release(), stock.release()};
  }();
  return *flag;
}

// dynamo_flag() as captured at the module's import (capture_dynamo_flag,
// before the shortcut can be installed): read without the guard of a
// function-local static.
const DynamoFlag* g_dynamo_flag = nullptr;

// What torch.compiler's namespace holds as is_dynamo_compiling now
// (borrowed), or null; the GIL is held. The module's own dict, not getattr:
// the same answer for a module attribute, for a tenth of the work. Before
// Python 3.12 a dict's version tag (PEP 509) changes with every change to the
// dict, so the last lookup's answer stands while the tag does: a patch is
// seen on the very next call, as with a lookup, at a fraction of its cost
// (whose probes also vary with the hash seed). From 3.12 the tag is
// deprecated and every call looks up.
#if PY_VERSION_HEX < 0x030C0000
// The last lookup's answer and the dict version it was made at.
struct Seen {
  bool valid = false;
  uint64_t version = 0;
  PyObject* value = nullptr;
};
Seen g_seen;  // the GIL guards it
#endif

PyObject* current_dynamo_flag(const DynamoFlag& flag) {
  PyObject* namespace_ = flag.namespace_.ptr();
#if PY_VERSION_HEX < 0x030C0000
  Seen& seen = g_seen;
  const uint64_t version = reinterpret_cast<PyDictObject*>(namespace_)->ma_version_tag;
  if (seen.valid && seen.version == version) return seen.value;
#endif
  PyObject* current = PyDict_GetItemWithError(namespace_, flag.name.ptr());
  if (current == nullptr && PyErr_Occurred()) throw py::error_already_set();
#if PY_VERSION_HEX < 0x030C0000
  seen = {true, version, current};
#endif
  return current;
}

// Whether Dynamo is tracing, as torch.compiler.is_dynamo_compiling() says.
// Looked up on every call so that patching it works as in upstream; the
// shipped function is known to say False without calling it, which saves a
// Python frame on every routed call. What it raises reaches the op's caller,
// as from upstream's Python router (the core releases its guard on the way).
C10_NOINLINE bool dynamo_flag_looked_up(const DynamoFlag& flag) {  // the GIL is held
  PyObject* current = current_dynamo_flag(flag);
  if (current == nullptr) {
    throw py::attribute_error("module 'torch.compiler' has no attribute 'is_dynamo_compiling'");
  }
  if (current == flag.stock.ptr()) return false;
  return truthy(py::reinterpret_borrow<py::object>(current)());
}

// dynamo_flag_looked_up, with its common answer inlined: the stock
// function still in place, by the version of the namespace that said so.
C10_ALWAYS_INLINE bool dynamo_flag_says_tracing(const DynamoFlag& flag) {  // the GIL is held
#if PY_VERSION_HEX < 0x030C0000
  const uint64_t version = reinterpret_cast<PyDictObject*>(flag.namespace_.ptr())->ma_version_tag;
  if (g_seen.valid && g_seen.version == version && g_seen.value == flag.stock.ptr()) return false;
#endif
  return dynamo_flag_looked_up(flag);
}

C10_NOINLINE bool dynamo_is_tracing_taking_gil(const DynamoFlag& flag) {
  GilForPython gil;
  return dynamo_flag_says_tracing(flag);
}

bool dynamo_is_tracing(bool in_host_scope) {
  const DynamoFlag* captured = g_dynamo_flag;
  const DynamoFlag& flag = C10_LIKELY(captured != nullptr) ? *captured : dynamo_flag();
  // Asked inside the host scope (with_gil), as a router whose chain holds
  // Python asks, the GIL is held: nothing to look at, no guard to keep.
  if (in_host_scope) return dynamo_flag_says_tracing(flag);
  return dynamo_is_tracing_taking_gil(flag);
}

}  // namespace

void capture_dynamo_flag() { g_dynamo_flag = &dynamo_flag(); }

void bind_trace_shortcut(py::module_& m) {
  m.def("install_dynamo_shortcut", [] { set_trace_shortcut(&dynamo_is_tracing); });
  m.def("in_diverted_call", &in_diverted_call);
}

}  // namespace native_registry::python
