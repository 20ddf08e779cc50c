// The registry's control plane for Python: registering nodes and writing
// their callables, deregistering and re-enabling, reordering graphs,
// installing routers, snapshot and restore, the allowed namespaces, the
// empty-chain policy, the coverage check, the log sink and unconditional
// masks. Each entry
// converts its arguments, releases the GIL and calls the core once (the GIL
// rules are at gil.cpp's head); Python runs only in the ordering function
// and the log sink, under the GIL the core's callback takes.
//
// Owns: these module functions and the stack of masks entered from Python.
// May not touch: registry state but through the core's Registry calls (no
// logic of the core's written again here), or how Python callables become
// functors (callables.cpp).

#include "binding.h"

#include <optional>

namespace native_registry::python {

namespace {

// Masks entered from Python, innermost last.
std::vector<std::unique_ptr<Registry::UnconditionalMask>>& masks() {
  static std::vector<std::unique_ptr<Registry::UnconditionalMask>> stack;
  return stack;
}

}  // namespace

void bind_registration(py::module_& m) {
  m.def(
      "register_op_override",
      [](const std::string& dsl_name, const std::string& lib_symbol,
         const std::string& op_symbol, const std::string& dispatch_key, py::object cond,
         py::object impl, py::object try_initialize_runtime, bool unconditional_override) {
        Callables made = python_callables(cond, impl, try_initialize_runtime,
                                          unconditional_override);
        return mutable_node(without_gil([&] {
          return registry().register_op_override(dsl_name, lib_symbol, op_symbol, dispatch_key,
                                                 std::move(made.cond), std::move(made.impl),
                                                 std::move(made.options));
        }));
      },
      py::arg("dsl_name"), py::arg("lib_symbol"), py::arg("op_symbol"),
      py::arg("dispatch_key"), py::arg("cond"), py::arg("impl"),
      py::arg("try_initialize_runtime"), py::arg("unconditional_override"));

  // Gives a registered node a new cond_fn, impl_fn or try_initialize_runtime
  // (a write of that field on its Python view, see replaced_callables);
  // returns the node that now stands in its graph (see
  // Registry::replace_node_callables: routers and the `_native` op take it at
  // the graph's next install).
  m.def("replace_callable", [](const MutableNode& node, const std::string& field,
                               py::object value) {
    Callables made = replaced_callables(*node, field, value);
    return mutable_node(without_gil([&] {
      return registry().replace_node_callables(*node, std::move(made.cond), std::move(made.impl),
                                               std::move(made.options));
    }));
  });

  // install_named: install every graph named, as upstream's front end
  // re-registers them; else republish the installed routers of the graphs
  // named (Registry::FilterInstall).
  using FilterChange = void (Registry::*)(const Filter&, Registry::FilterInstall);
  auto bind_filter_change = [&m](const char* name, FilterChange change) {
    m.def(
        name,
        [change](std::vector<std::string> dsl, std::vector<std::string> ops,
                 std::vector<std::string> keys, bool install_named) {
          const Registry::FilterInstall mode = install_named ? Registry::FilterInstall::kNamed
                                                             : Registry::FilterInstall::kInstalled;
          without_gil([&] {
            (registry().*change)({std::move(dsl), std::move(ops), std::move(keys)}, mode);
          });
        },
        py::arg("dsl"), py::arg("ops"), py::arg("keys"), py::arg("install_named") = false);
  };
  bind_filter_change("deregister_op_overrides", &Registry::deregister_op_overrides);
  bind_filter_change("reenable_op_overrides", &Registry::reenable_op_overrides);
}

void bind_graph_control(py::module_& m) {
  // `fn(op_symbol, dispatch_key, [Node]) -> [Node]`; a result that is not a
  // list of nodes counts as a failed transformation. An exception from fn
  // that is an Exception is a failed transformation (a warning, the graph
  // kept); any other (KeyboardInterrupt, SystemExit) aborts the reordering,
  // which then changes nothing, and propagates. Returns the changed keys.
  // install_changed: install every changed graph, all or nothing, as
  // upstream's reregister_overrides=True does. (The core's kInstalled mode
  // has no Python caller, so the binding offers none.)
  m.def("reorder_graphs", [](py::function fn, bool install_changed) {
    const Registry::ReorderInstall mode = install_changed ? Registry::ReorderInstall::kChanged
                                                          : Registry::ReorderInstall::kNothing;
    std::optional<py::error_already_set> interrupted;
    auto call = [&fn, &interrupted](const std::string& op, const std::string& key,
                                    const Graph& graph) {
      park_if_finalizing();  // a daemon thread at exit: see binding.h
      py::gil_scoped_acquire gil;
      py::object result;
      try {
        result = fn(op, key, nodes_to_list(graph));
      } catch (py::error_already_set& error) {
        // No Python object travels through the core: an Exception becomes
        // its message (type and text), anything else the abort.
        if (error.matches(PyExc_Exception)) throw std::runtime_error(error.what());
        interrupted.emplace(std::move(error));
        throw AbortError("the ordering function was interrupted");
      }
      if (!py::isinstance<py::list>(result)) {
        throw InvalidArgumentError("the ordering function returned " + type_name(result) +
                                   ", expected a list of nodes");
      }
      Graph out;
      for (const py::handle& item : result) {
        if (!py::isinstance<OverrideNode>(item)) {
          throw InvalidArgumentError("the ordering function returned a list holding " +
                                     type_name(item) + ", expected nodes");
        }
        out.push_back(item.cast<MutableNode>());
      }
      return out;
    };
    std::vector<GraphKey> changed;
    try {
      changed = without_gil([&] { return registry().reorder_graphs(call, mode); });
    } catch (const AbortError&) {
      if (interrupted) throw std::move(*interrupted);
      throw;
    }
    return keys_to_list(changed);
  });

  m.def("replace_graph", [](const KeyTuple& key, const std::vector<MutableNode>& nodes) {
    without_gil([&] { registry().replace_graph(to_key(key), Graph(nodes.begin(), nodes.end())); });
  });
  m.def("install_graph", [](const KeyTuple& key, bool reinstall) {
    without_gil([&] {
      registry().install_graph(to_key(key),
                               reinstall ? InstallMode::kReinstall : InstallMode::kUpdate);
    });
  });
  m.def("install_all", [] { without_gil([] { registry().install_all(); }); });
  m.def("erase_graph", [](const KeyTuple& key) {
    without_gil([&] { registry().erase_graph(to_key(key)); });
  });
  m.def("uninstall_graph", [](const KeyTuple& key) {
    without_gil([&] { registry().uninstall_graph(to_key(key)); });
  });

  // A Snapshot holds nodes, and so Python callables: dropped like any PyRef.
  m.def("snapshot", [] { return without_gil([] { return registry().snapshot(); }); });
  m.def("restore", [](const Snapshot& s) { without_gil([&] { registry().restore(s); }); });

  m.def("allow_namespace",
        [](const std::string& ns) { without_gil([&] { registry().allow_namespace(ns); }); });
  m.def("disallow_namespace",
        [](const std::string& ns) { without_gil([&] { registry().disallow_namespace(ns); }); });
  m.def("allowed_namespaces",
        [] { return without_gil([] { return registry().allowed_namespaces(); }); });
}

void bind_settings(py::module_& m) {
  m.def("set_empty_chain_policy", [](const std::string& policy) {
    if (policy == "keep_dormant" || policy == "remove") {
      const EmptyChainPolicy chosen = policy == "remove" ? EmptyChainPolicy::kRemoveRouter
                                                         : EmptyChainPolicy::kKeepDormantRouter;
      without_gil([&] { registry().set_empty_chain_policy(chosen); });
    } else {
      throw py::value_error("empty chain policy must be 'keep_dormant' or 'remove', got '" +
                            policy + "'");
    }
  });
  m.def("empty_chain_policy", [] {
    const EmptyChainPolicy policy = without_gil([] { return registry().empty_chain_policy(); });
    return policy == EmptyChainPolicy::kRemoveRouter ? "remove" : "keep_dormant";
  });
  // The registry's coverage check (see PythonCoverageCheck), and the
  // process-wide switch of every registry's (upstream main's set_aot_enabled).
  m.def("set_coverage_check", [](const py::object& check) {
    CoverageCheck made = coverage_check_from(check);
    without_gil([&] { registry().set_coverage_check(std::move(made)); });
  });
  m.def("coverage_check", [] {
    const CoverageCheck check = without_gil([] { return registry().coverage_check(); });
    return coverage_check_object(check);
  });
  m.def("set_coverage_checks_enabled", [](bool enabled) {
    const bool previous = coverage_checks_enabled();
    set_coverage_checks_enabled(enabled);
    return previous;
  });
  m.def("coverage_checks_enabled", [] { return coverage_checks_enabled(); });
  m.def("set_impl_error_policy", [](const std::string& policy) {
    if (policy != "raise" && policy != "fallback") {
      throw py::value_error("impl error policy must be 'raise' or 'fallback', got '" + policy + "'");
    }
    const ImplErrorPolicy chosen =
        policy == "fallback" ? ImplErrorPolicy::kFallback : ImplErrorPolicy::kRaise;
    without_gil([&] { registry().set_impl_error_policy(chosen); });
  });
  m.def("impl_error_policy", [] {
    const ImplErrorPolicy policy = without_gil([] { return registry().impl_error_policy(); });
    return policy == ImplErrorPolicy::kFallback ? "fallback" : "raise";
  });
  // The core calls the sink with no lock held, also from a control scope's
  // destructor: the record reaches Python under_gil (at once on a thread
  // that holds the GIL, else by the calling operation's return). What the
  // sink raises is reported as unraisable, since the operation that logged
  // has already happened.
  m.def("set_log_sink", [](py::function sink) {
    auto ref = hold(std::move(sink));
    LogSink forward = [ref](LogLevel level, const std::string& message) {
      under_gil([ref, level, message] {
        try {
          ref->get()(level == LogLevel::kWarning ? "warning" : "info", message);
        } catch (py::error_already_set& error) {
          error.discard_as_unraisable("native_registry's log sink");
        }
      });
    };
    without_gil([&] { registry().set_log_sink(std::move(forward)); });
  });

  // The mask stack is Python's (only Python enters masks through here), so
  // the GIL guards it; the core work runs without the GIL.
  m.def("push_unconditional_mask", [] {
    auto mask = without_gil(
        [] { return std::make_unique<Registry::UnconditionalMask>(registry()); });
    masks().push_back(std::move(mask));
  });
  m.def("pop_unconditional_mask", [] {
    if (masks().empty()) throw py::value_error("no unconditional mask to lift");
    std::unique_ptr<Registry::UnconditionalMask> mask = std::move(masks().back());
    masks().pop_back();
    without_gil([&] { mask.reset(); });
  });
}

}  // namespace native_registry::python
