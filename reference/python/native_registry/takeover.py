"""Taking over the registry torch already ran, so that one registry routes.

By the time :func:`upstream_compat.install_as_torch_native` runs, ``import
torch`` has run torch's own registrars (``torch/_native/ops/``) into the stock
``torch._native.registry`` and installed them: routers at the ops' backend
keys, ``_native::<node_id>`` ops with their kernels and fake kernels. Left
there, those routers keep routing while torch's front ends control the
reference. :func:`take_over` moves them:

1. reads the stock graphs (nodes in order, with dsl name, namespace, cond,
   impl, try_initialize_runtime, unconditional flag), its filters and which
   graphs it has a router installed for, and registers the nodes into the
   reference in the same order (if the reference refuses one, it is put
   back as it was and nothing else has changed);
2. takes everything it put in the dispatcher out, each library by its own
   handle: the routers, the ``_native`` kernels, the fake kernels and the
   ``_native`` definitions (in that order, so nothing is ever left dangling).
   Every op it touched is then as if the stock registry had never installed;
3. applies the stock filters in the reference (which gives each node the same ``active``), and
   installs the graphs the stock registry had installed;
4. points the stock module's names at the reference's module, so code that
   kept the old module object reaches the one registry; its private helpers
   the reference has no counterpart for (``_install_aten_override``,
   ``_register_node_impl``, ...) refuse, naming themselves, rather than
   install a second registry's kernels.

Written for torch 2.13's registry (graphs keyed ``(op, key)``, routers in
``_aten_override_libs``) and upstream main's (jkzhang7/pytorch @ 6be35214:
keyed ``(lib, op, key)``, routers in ``_override_libs``). A second call finds
the module already taken over and does nothing.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

# Set on a module once taken over: the module that took it over.
TAKEN_OVER = "_native_registry_taken_over_by"


@dataclass(frozen=True)
class StockNode:
    dsl_name: str
    lib_symbol: str
    op_symbol: str
    dispatch_key: str
    cond: Callable[..., bool] | None
    impl: Callable[..., Any]
    try_initialize_runtime: Callable[[], bool] | None
    unconditional_override: bool


@dataclass(frozen=True)
class StockState:
    graphs: dict[tuple[str, str, str], list[StockNode]]
    installed: list[tuple[str, str, str]]
    filters: tuple[list[str], list[str], list[str]]


def _full_key(key: tuple) -> tuple[str, str, str]:
    return ("aten", *key) if len(key) == 2 else tuple(key)


def _router_libraries(stock: types.ModuleType) -> dict:
    """The stock registry's router libraries by graph key: main's
    `_override_libs`, torch 2.13's `_aten_override_libs`."""
    libs = getattr(stock, "_override_libs", None)
    if libs is None:
        libs = getattr(stock, "_aten_override_libs", {})
    return libs


def read(stock: types.ModuleType) -> StockState:
    """What the stock registry holds, in the reference's terms."""
    always_true = getattr(stock, "_always_true", None)
    graphs: dict[tuple[str, str, str], list[StockNode]] = {}
    for key, nodes in stock._graphs.items():
        full = _full_key(key)
        graphs[full] = [
            StockNode(
                dsl_name=node.dsl_name,
                lib_symbol=getattr(node, "lib_symbol", full[0]),
                op_symbol=node.op_symbol,
                dispatch_key=node.dispatch_key,
                # register_op_override put _always_true in place of a None cond
                # of an unconditional override; give it back as None.
                cond=None if node.unconditional_override and node.cond_fn is always_true
                else node.cond_fn,
                impl=node.impl_fn,
                try_initialize_runtime=getattr(node, "try_initialize_runtime", None),
                unconditional_override=bool(node.unconditional_override),
            )
            for node in nodes
        ]
    installed = [_full_key(key) for key in _router_libraries(stock)]
    state = stock._filter_state
    filters = (sorted(state._dsl_names), sorted(state._op_symbols), sorted(state._dispatch_keys))
    return StockState(graphs, installed, filters)


def _native_names(stock: types.ModuleType) -> set[str]:
    """The `_native::<id>` ops the stock registry defined."""
    return {f"_native::{name}" for name in getattr(stock, "_defined_native_ops", ())}


def _fake_kernel_libraries(qualnames: set[str]) -> list:
    """The libraries torch.library.register_fake made (kept in its module-level
    keep-alive list) for those ops: each holds one op's Meta kernel."""
    keep_alive = getattr(torch.library, "_keep_alive", [])
    return [lib for lib in keep_alive
            if getattr(lib, "ns", None) == "_native"
            # torch.library records an impl as "ns/op/dispatch_key"
            and any("::".join(impl.split("/")[:2]) in qualnames
                    for impl in getattr(lib, "_op_impls", ()))]


def remove_from_dispatcher(stock: types.ModuleType) -> None:
    """Destroy every library the stock registry put into the dispatcher, by
    its own handle, kernels before the definitions they belong to."""
    qualnames = _native_names(stock)
    routers = _router_libraries(stock)
    for lib in list(routers.values()):
        lib._destroy()
    routers.clear()
    for lib in list(getattr(stock, "_libs", {}).values()):
        lib._destroy()
    getattr(stock, "_libs", {}).clear()
    for lib in _fake_kernel_libraries(qualnames):
        lib._destroy()
        torch.library._keep_alive.remove(lib)
    for lib in list(getattr(stock, "_def_libs", {}).values()):
        lib._destroy()
    getattr(stock, "_def_libs", {}).clear()
    # torch.library's Python-side records of those ops (their fake-kernel
    # holders), which would otherwise outlive the ops.
    registry_data = getattr(torch._library.simple_registry.singleton, "_data", {})
    for name in qualnames:
        registry_data.pop(name, None)
    getattr(stock, "_defined_native_ops", set()).clear()
    getattr(stock, "_native_decomp_overrides", {}).clear()


def take_over(stock: types.ModuleType, compat: types.ModuleType) -> bool:
    """Move the stock registry's overrides into the reference (see the
    module's docstring). False when there was nothing to take over (the
    module is the reference's, or was taken over before)."""
    if stock is compat or getattr(stock, TAKEN_OVER, None) is not None:
        return False
    state = read(stock)
    # Validate before changing anything: every namespace must be one the
    # reference takes, every op must resolve for the graphs to be installed.
    for key in state.installed:
        if compat._resolve_overload(key[0], key[1]) is None:
            raise RuntimeError(f"cannot take over the router at {key}: {key[0]}::{key[1]} "
                               "does not resolve")
    # Register first: the reference may refuse an override (a key it does
    # not take for that op), and then nothing may have changed, the stock
    # registry least of all. Registering installs nothing.
    saved = compat._reference.snapshot()
    try:
        for key, nodes in state.graphs.items():
            for node in nodes:
                compat.register_op_override(
                    node.dsl_name, node.lib_symbol, node.op_symbol, node.dispatch_key, node.cond,
                    node.impl, try_initialize_runtime=node.try_initialize_runtime,
                    unconditional_override=node.unconditional_override)
    except BaseException:
        compat._reference.restore(saved)
        raise
    remove_from_dispatcher(stock)
    # The filters go to the core directly: upstream's deregister would also
    # (re)install every graph they name, where only those installed before
    # get a router below. Blank entries name nothing (see compat._naming).
    dsl, ops, keys = (compat._naming(entries) for entries in state.filters)
    if dsl or ops or keys:
        compat._reference.deregister_op_overrides(
            disable_dsl_names=dsl, disable_op_symbols=ops, disable_dispatch_keys=keys)
    for key in state.installed:
        compat._install_graph(key)
    forward(stock, compat)
    return True


# The stock registry's own helpers that read no registry state and write
# nothing (name resolution, argument forms): left as they are after the
# takeover. Every other function of its that the reference's module lacks
# refuses (see _refusal).
STATELESS = frozenset({"_resolve_aten_overload", "_aten_schema_tail", "_resolve_iterable"})


def _refusal(module_name: str, name: str) -> Callable[..., Any]:
    """What a taken-over module's helper becomes when the reference has no
    counterpart (torch 2.13's _install_aten_override, _register_node_impl,
    ...): left live it would install kernels of the old registry beside the
    reference's, a second registry in all but name."""
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{module_name}.{name} belongs to the registry that native_registry took over "
            "(install_as_torch_native): its overrides and routers now live in the reference, "
            f"which has no {name}; register with register_op_override and install with "
            "_register_overrides_from_graph or _register_all_overrides")

    refused.__name__ = refused.__qualname__ = name
    return refused


def forward(stock: types.ModuleType, compat: types.ModuleType) -> None:
    """Every name of the stock module that the reference's module also has
    now names the reference's object: functions, the graph and filter views,
    the node class. Its other functions refuse with a RuntimeError naming
    them, except the STATELESS ones."""
    for name, value in list(vars(stock).items()):
        if name.startswith("__") or name == TAKEN_OVER:
            continue
        if hasattr(compat, name):
            setattr(stock, name, getattr(compat, name))
        elif (isinstance(value, types.FunctionType) and value.__module__ == stock.__name__
              and name not in STATELESS):
            setattr(stock, name, _refusal(stock.__name__, name))
    setattr(stock, TAKEN_OVER, compat)
