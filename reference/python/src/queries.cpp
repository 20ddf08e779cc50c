// What the registry holds, for Python: graphs and their keys, published
// chains, routers and their state, filters, the indexes by name, and the
// self-checks the tests call (check_invariants, dump_state, router_id), and
// the backend a tensorless call selects (tensorless_backend). Each
// releases the GIL while the core answers (the GIL rules are at gil.cpp's head).
//
// Owns: these read-only module functions. May not touch: registry state (a
// query changes nothing), or how keys and nodes convert (node_views.cpp).

#include "binding.h"

#include "arguments.h"

#include <native_registry/backend_select.h>

namespace native_registry::python {

void bind_queries(py::module_& m) {
  m.def("get_dsl_operations", [](const std::string& dsl, const std::string& ns) {
    return without_gil([&] { return registry().get_dsl_operations(dsl, ns); });
  });
  m.def("graph_keys",
        [] { return keys_to_list(without_gil([] { return registry().graph_keys(); })); });
  m.def("router_keys",
        [] { return keys_to_list(without_gil([] { return registry().router_keys(); })); });
  m.def("graph", [](const KeyTuple& key) {
    return nodes_to_list(without_gil([&] { return registry().graph(to_key(key)); }));
  });
  m.def("published_chain", [](const KeyTuple& key) {
    return nodes_to_list(without_gil([&] { return registry().published_chain(to_key(key)); }));
  });
  m.def("is_enabled", [](const OverrideNode& node) {
    return without_gil([&] { return registry().is_enabled(node); });
  });
  // The dispatch key a call of the op `name.overload` selects when the op
  // takes no tensor (backend_select.h), or None when it takes one: whether a
  // factory's call reaches an override's key, for the compile router.
  m.def("tensorless_backend", [](const std::string& name, const std::string& overload,
                                 const py::tuple& args, const py::dict& kwargs) -> py::object {
    const auto [op, stack] = boxed_call("tensorless_backend", name, overload, args, kwargs);
    if (takes_a_tensor(op.schema())) return py::none();
    return py::str(c10::toString(tensorless_backend(op.schema(), stack)));
  });
  m.def("check_invariants", [] { without_gil([] { registry().check_invariants(); }); });
  m.def("dump_state", [] { return without_gil([] { return registry().dump_state(); }); });
  m.def("router_id", [](const KeyTuple& key) {
    return without_gil([&] { return registry().router_id(to_key(key)); });
  });
  m.def("router_state", [](const KeyTuple& key) {
    switch (without_gil([&] { return registry().router_state(to_key(key)); })) {
      case RouterState::kAbsent: return "absent";
      case RouterState::kDormant: return "dormant";
      case RouterState::kActive: return "active";
    }
    return "absent";
  });
  m.def("filters", [] {
    const Filter f = without_gil([] { return registry().filters(); });
    return py::make_tuple(f.dsl_names, f.op_symbols, f.dispatch_keys);
  });
  m.def("graphs_by_dsl_name", [] {
    return index_to_dict(without_gil([] { return registry().graphs_by_dsl_name(); }));
  });
  m.def("graphs_by_op_symbol", [] {
    return index_to_dict(without_gil([] { return registry().graphs_by_op_symbol(); }));
  });
  m.def("graphs_by_dispatch_key", [] {
    return index_to_dict(without_gil([] { return registry().graphs_by_dispatch_key(); }));
  });
}

}  // namespace native_registry::python
