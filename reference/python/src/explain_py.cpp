// registry.explain for Python: the call's arguments made into the boxed
// stack a router would receive (keywords in their schema places, defaults
// filled in), the core's Registry::explain on it, and its answer as plain
// Python values, which native_registry/explain.py makes into an object.
//
// Owns: that conversion. May not touch: registry state (explain changes
// nothing); the verdicts are the core's.

#include "binding.h"

#include <torch/csrc/jit/python/pybind_utils.h>

namespace native_registry::python {

namespace {

py::object or_none(const std::string& text) {
  return text.empty() ? py::object(py::none()) : py::object(py::str(text));
}

py::dict to_python(const Explanation& e) {
  py::list nodes;
  for (const ExplainedNode& node : e.nodes) {
    nodes.append(py::make_tuple(node.node_id, node.dsl_name, to_string(node.verdict), node.detail));
  }
  py::dict out;
  out["op"] = e.op_name;
  out["graph"] = from_key(e.graph);
  out["why_key"] = e.why_key;
  out["router"] = e.router;
  out["coverage"] = e.coverage;
  out["nodes"] = nodes;
  out["kernel"] = py::make_tuple(to_string(e.kernel), or_none(e.kernel_node_id),
                                 or_none(e.kernel_dsl_name), e.kernel_detail);
  out["table"] = e.to_string();
  return out;
}

}  // namespace

void bind_explain(py::module_& m) {
  // explain("ns::name", "overload", args, kwargs, dispatch_key or ""): a
  // `_native` op is explained without its arguments (it has one node).
  m.def("explain", [](const std::string& name, const std::string& overload, const py::tuple& args,
                      const py::dict& kwargs, const std::string& dispatch_key) {
    auto op = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!op) {
      throw OperatorNotFoundError(
          "explain: no op '" + c10::toString(c10::OperatorName(name, overload)) +
          "' in the dispatcher (is its library loaded, the overload spelled out?)");
    }
    Stack stack;
    if (name.rfind("_native::", 0) != 0) {
      stack = torch::jit::createStackForSchema(
          op->schema(), args, py::reinterpret_borrow<py::kwargs>(kwargs), std::nullopt);
    }
    const Explanation explained =
        without_gil([&] { return registry().explain(*op, stack, dispatch_key); });
    return to_python(explained);
  });
}

}  // namespace native_registry::python
