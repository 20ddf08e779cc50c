// native_registry._C: the reference registry for Python. Thin on purpose: the
// upstream-shaped API (names, argument forms, node objects, the compile-time
// decomposition table) lives in native_registry/registry.py; this module turns
// Python callables into boxed conds and impls, maps errors onto Python's
// exception types, and exposes the C++ predicates.
//
// Owns: the module's definition (what each file adds, in order) and the
// mapping of the core's exceptions onto Python's. May not touch: anything
// else; each concern lives in its own file (binding.h lists them).

#include "binding.h"

namespace py = pybind11;
namespace nrp = native_registry::python;

PYBIND11_MODULE(_C, m) {
  m.doc() = "The reference op-override registry (C++), for native_registry.registry";

  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const native_registry::InvalidArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const native_registry::OperatorNotFoundError& e) {
      PyErr_SetString(PyExc_AttributeError, e.what());
    }
  });

  nrp::bind_node_views(m);
  nrp::bind_registration(m);
  nrp::bind_graph_control(m);
  nrp::bind_queries(m);
  nrp::bind_settings(m);
  nrp::bind_observation(m);

  nrp::capture_dynamo_flag();
  native_registry::watch_schema_removals();  // retires the argument plans (argument_plan.h)
  nrp::remember_main_thread();
  nrp::install_host_scope();
  nrp::install_release_sink();
  nrp::install_error_hooks();
  nrp::bind_trace_shortcut(m);

  nrp::bind_predicates(m);
  nrp::bind_explain(m);
}
