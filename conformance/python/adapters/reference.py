"""The reference registry (native_registry) under the conformance suite."""

from __future__ import annotations

import contextlib

import torch

import native_registry
import native_registry.registry as registry

from . import UpstreamShapedAdapter, setting_for_the_scope


class ReferenceAdapter(UpstreamShapedAdapter):
    module = registry
    name = "reference"
    log_name = "native_registry.registry"
    # What the reference has whatever PyTorch it runs on; __init__ adds what
    # needs the host PyTorch's own surface.
    BASE_FEATURES = frozenset({
        "namespaces", "runtime-init", "unconditional-survives-disable", "unconditional-hatch",
        "dynamo-shortcut", "native-op-meta", "concurrent-control-plane", "reentrant-control-plane",
        "variants", "resolve-overload", "declared-overrides", "native-predicates",
        "aot-coverage", "explain", "impl-error-fallback", "thread-disables", "routing-stats",
        "routing-observability",
    })

    def __init__(self) -> None:
        from native_registry import upstream_compat

        self.description = f"native_registry (reference, C++) on torch {torch.__version__}"
        # torch's front ends exist only in a PyTorch that ships
        # torch.backends.python_native, and there is a registry to take over
        # only where it ships torch._native (2.13 both, 2.11 neither).
        surfaces = upstream_compat.host_torch_surfaces()
        features = set(self.BASE_FEATURES)
        if "python_native" in surfaces:
            features.add("torch-front-ends")
            if "stock_registry" in surfaces:
                features.add("takes-over-torch-native")
        self.features = frozenset(features)

    def scope(self):
        return registry.scoped()

    def self_check(self):
        # The C++ core's invariants, each table's and those across tables.
        registry._C.check_invariants()

    def register(self, dsl_name, lib_symbol, op_symbol, dispatch_key, cond, impl, *,
                 try_initialize_runtime=None, unconditional_override=False,
                 allow_multiple_override=None):
        extra = {} if allow_multiple_override is None else {"allow_multiple_override": allow_multiple_override}
        registry.register_op_override(dsl_name, lib_symbol, op_symbol, dispatch_key, cond, impl,
                                      try_initialize_runtime=try_initialize_runtime,
                                      unconditional_override=unconditional_override, **extra)

    def graph(self, lib_symbol, op_symbol, dispatch_key):
        return registry.graph(lib_symbol, op_symbol, dispatch_key)

    def set_graph(self, lib_symbol, op_symbol, dispatch_key, nodes):
        def only_this(op, key, graph):
            mine = (op, key) == (op_symbol, dispatch_key) and graph and graph[0].lib_symbol == lib_symbol
            return list(nodes) if mine else graph

        registry.reorder_graphs_from_user_function(only_this)

    def install(self, lib_symbol, op_symbol, dispatch_key):
        # Upstream's install always replaces the router; so does this one.
        registry._C.install_graph((lib_symbol, op_symbol, dispatch_key), True)

    def install_all(self):
        registry.register_all_overrides()

    def router_installed(self, lib_symbol, op_symbol, dispatch_key):
        return registry.router_state(lib_symbol, op_symbol, dispatch_key) != "absent"

    def allow_namespace(self, lib_symbol):
        registry.allow_namespace(lib_symbol)

    def allowed_namespaces(self):
        return registry.allowed_namespaces()

    def coverage_check(self, check):
        return setting_for_the_scope(registry.coverage_check, registry.set_coverage_check, check)

    def impl_error_policy(self, policy):
        return setting_for_the_scope(registry.impl_error_policy, registry.set_impl_error_policy,
                                     policy)

    def aot_enabled(self, enabled):
        return setting_for_the_scope(registry.aot_enabled, registry.set_aot_enabled, enabled)

    def explain(self, op, *args, dispatch_key=None, **kwargs):
        return registry.explain(op, *args, dispatch_key=dispatch_key, **kwargs)

    def disabled_in_thread(self, *, dsl_names=(), op_symbols=(), dispatch_keys=()):
        return registry.disabled_in_thread(dsl_names=list(dsl_names), op_symbols=list(op_symbols),
                                           dispatch_keys=list(dispatch_keys))

    @contextlib.contextmanager
    def collect_stats(self, collect):
        previous = registry.collect_stats(collect)
        try:
            yield
        finally:
            registry.collect_stats(previous)

    def node_stats(self, node):
        entry = registry.stats().node(node.node_id)
        return {"taken": entry.taken, "declined": entry.declined,
                "runtime_unavailable": entry.runtime_unavailable, "raised": entry.raised}

    def graph_stats(self, lib_symbol, op_symbol, dispatch_key):
        try:
            entry = registry.stats().graph(op_symbol, dispatch_key, lib_symbol)
        except KeyError:
            return {"calls": 0, "fallbacks": 0}
        return {"calls": entry.calls, "fallbacks": entry.fallbacks}

    def reset_stats(self):
        registry.reset_stats()

    def unconditional_masked(self):
        return native_registry._unconditional_masked()

    def in_reentrant_call(self):
        return registry._router_active.on

    def user_ordering_fn(self):
        return native_registry.get_user_ordering_fn

    def serve_torch_front_ends(self):
        # For the rest of the process: torch._native.registry becomes the
        # reference's upstream-shaped module (one registry, the C++ core).
        from native_registry import upstream_compat

        upstream_compat.install_as_torch_native()


    def variants_module(self):
        from native_registry import variants

        return variants

    def declared_overrides(self):
        from native_registry import declared

        return declared

    def predicates_module(self):
        from native_registry import predicates

        return predicates


def make() -> ReferenceAdapter:
    return ReferenceAdapter()
