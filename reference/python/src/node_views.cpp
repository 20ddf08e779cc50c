// Python's views of the core's nodes and snapshots: the Node and Snapshot
// types (read-only; Python's node objects in registry.py wrap them), their
// part in Python's cycle collection, and the conversions of graph keys, node
// lists and indexes to Python.
//
// Owns: the Node and Snapshot types, their tp_traverse, and the key and list
// converters binding.h declares. May not touch: registry state (a view reads
// a node; changing one is registry_api.cpp's, through the core), or the
// callables a node holds (callables.cpp makes them; here they are only visited).

#include "binding.h"

namespace native_registry::python {

namespace {

// ---- cycles through C++ ----------------------------------------------------------
// A cond whose closure holds its own node's view, or a snapshot taken after
// its registration, makes a reference cycle that runs through C++ objects
// (the node, the snapshot's state) which Python's collector cannot see into.
// The binding's Node and Snapshot types therefore take part in collection:
// their tp_traverse visits the Python callables of the nodes that only they
// hold, each callable only while one node owns it (its PyRef unshared), so
// every reference visited is one the collector may account for; anything
// held elsewhere as well (a registered node, a node two snapshots share)
// stays alive from there and is not visited. Breaking such a cycle needs no
// tp_clear here: the collector clears the Python objects in it (the
// function, its closure cells), which drops the references to the views.

int visit_callable(const std::shared_ptr<PyRef>* ref, visitproc visit, void* arg) {
  if (ref != nullptr && ref->use_count() == 1) Py_VISIT((*ref)->get().ptr());
  return 0;
}

int visit_python_callables(const OverrideNode& node, visitproc visit, void* arg) {
  const auto* cond = node.cond.target<PythonCond>();
  const auto* impl = node.impl.target<PythonImpl>();
  const auto* init = node.options.try_initialize_runtime.target<PythonTryInitialize>();
  if (int error = visit_callable(cond ? &cond->fn : nullptr, visit, arg)) return error;
  if (int error = visit_callable(impl ? &impl->fn : nullptr, visit, arg)) return error;
  return visit_callable(init ? &init->fn : nullptr, visit, arg);
}

// Makes a pybind11 type collectable, with `traverse` visiting what one of its
// instances holds (called once its C++ value is constructed).
template <class Traverse>
py::custom_type_setup collectable(Traverse) {
  return py::custom_type_setup([](PyHeapTypeObject* heap_type) {
    auto* type = &heap_type->ht_type;
    type->tp_flags |= Py_TPFLAGS_HAVE_GC;
    type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) -> int {
      Py_VISIT(Py_TYPE(self));  // a heap type's instances own a reference to it
      if (!py::detail::is_holder_constructed(self)) return 0;
      return Traverse{}(py::handle(self), visit, arg);
    };
  });
}

struct TraverseNode {
  int operator()(py::handle self, visitproc visit, void* arg) const {
    auto* instance = reinterpret_cast<py::detail::instance*>(self.ptr());
    const MutableNode& holder = instance->get_value_and_holder().holder<MutableNode>();
    if (!holder || holder.use_count() != 1) return 0;  // held elsewhere too
    return visit_python_callables(*holder, visit, arg);
  }
};

struct TraverseSnapshot {
  int operator()(py::handle self, visitproc visit, void* arg) const {
    int error = 0;
    py::cast<const Snapshot&>(self).visit_nodes_held_only_here([&](const OverrideNode& node) {
      if (error == 0) error = visit_python_callables(node, visit, arg);
    });
    return error;
  }
};

}  // namespace

// ---- keys, nodes and indexes in Python ----------------------------------------------

GraphKey to_key(const KeyTuple& key) {
  return {std::get<0>(key), std::get<1>(key), std::get<2>(key)};
}

py::tuple from_key(const GraphKey& key) {
  return py::make_tuple(key.lib_symbol, key.op_symbol, key.dispatch_key);
}

MutableNode mutable_node(const NodePtr& node) { return std::const_pointer_cast<OverrideNode>(node); }

py::list nodes_to_list(const Graph& graph) {
  py::list out;
  for (const NodePtr& node : graph) out.append(mutable_node(node));
  return out;
}

py::list keys_to_list(const std::vector<GraphKey>& keys) {
  py::list out;
  for (const GraphKey& key : keys) out.append(from_key(key));
  return out;
}

py::dict index_to_dict(const std::map<std::string, std::vector<GraphKey>>& index) {
  py::dict out;
  for (const auto& [name, keys] : index) out[py::str(name)] = keys_to_list(keys);
  return out;
}

// ---- the types ----------------------------------------------------------------------

void bind_node_views(py::module_& m) {
  py::class_<OverrideNode, MutableNode>(m, "Node", collectable(TraverseNode{}))
      .def_readonly("dsl_name", &OverrideNode::dsl_name)
      .def_property_readonly("lib_symbol", [](const OverrideNode& n) { return n.key.lib_symbol; })
      .def_property_readonly("op_symbol", [](const OverrideNode& n) { return n.key.op_symbol; })
      .def_property_readonly("dispatch_key",
                             [](const OverrideNode& n) { return n.key.dispatch_key; })
      .def_readonly("node_id", &OverrideNode::node_id)
      .def_property_readonly("unconditional_override",
                             [](const OverrideNode& n) { return n.options.unconditional_override; })
      .def_property_readonly("divert_when_tracing",
                             [](const OverrideNode& n) { return n.options.divert_when_tracing; })
      .def_property_readonly("cond_fn", &cond_object)
      .def_property_readonly(
          "impl_fn", [](const OverrideNode& n) { return python_object_of<PythonImpl>(n.impl); })
      .def_property_readonly("try_initialize_runtime",
                             [](const OverrideNode& n) {
                               return python_object_of<PythonTryInitialize>(
                                   n.options.try_initialize_runtime);
                             })
      .def_property_readonly("key", [](const OverrideNode& n) { return from_key(n.key); });

  py::class_<Snapshot>(m, "Snapshot", collectable(TraverseSnapshot{}));
}

}  // namespace native_registry::python
