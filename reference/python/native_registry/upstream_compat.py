"""Upstream's module surface, private names included, on the reference.

Code written against ``torch._native.registry``'s internals (upstream's own
tests save and restore ``_graphs``, ``_override_libs``, the index maps and
the filter state; they build graphs from hand-made nodes and install them
with ``_register_overrides_from_graph``) runs against the reference through
this module. :func:`install_as_torch_native` puts it in place of
``torch._native.registry`` for the process.

A view, not a second model: every container here reads the C++ core, which
keeps the only copy of the registry's state.

* ``_graphs`` reads and writes the core's graphs: assigning a list of nodes
  sets that graph (a hand-made node is registered with the core first),
  deleting or clearing empties graphs. Values are fresh lists of node
  objects (the same object for the same node while anything holds it), so
  appending to one changes nothing: assign instead.
* ``_filter_state``'s three sets read the core's filters; adding and removing
  entries disables and re-enables through the core.
* The index maps, ``_override_libs`` and ``_native_decomp_overrides`` are
  derived from the core each time they are read. Upstream keeps them as
  caches of the graphs and the dispatcher, and its tests save, clear and
  restore them beside the graphs; here writes to them are accepted and
  change nothing, because what they would cache is read from the core.
* ``_libs``, ``_def_libs`` and ``_defined_native_ops`` hold upstream's
  ``torch.library`` handles, which the reference does not use: plain, empty
  containers for code that saves and restores them.
"""

from __future__ import annotations

import logging
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, MutableMapping, MutableSet
from typing import Any

import torch

from . import _C
from . import compile_routing as _routing
from . import nodes as _nodes
from . import registry as _reference

# The name upstream's tests listen on: this module stands in for that one.
log = logging.getLogger("torch._native.registry")

# Upstream main's allowlist (jkzhang7/pytorch @ 6be35214): aten, and torch_nn,
# whose ops exist once torch.nn.modules.linear_cross_entropy has run.
_ALLOWED_LIB_SYMBOLS: frozenset[str] = frozenset({"aten", "torch_nn"})
_DISALLOWED_DISPATCH_KEYS = _reference._DISALLOWED_DISPATCH_KEYS
_router_active = _reference._router_active
_always_true = _nodes._always_true
_OverrideNode = _nodes._OverrideNode
# Upstream's type aliases, which torch's DSL helpers and registrars import.
_OpCondFn = Callable[..., bool]
_OpImplFn = Callable[..., Any]
_OpRuntimeInitFn = Callable[[], bool]
_resolve_overload = _routing._resolve_overload
UserOrderingFn = _nodes.UserOrderingFn
GraphKey = _nodes.GraphKey


# ---- nodes ------------------------------------------------------------------------


def _copied_node(node: _OverrideNode) -> _C.Node | None:
    """The core node `node` is a copy of (``dataclasses.replace`` of a node of
    its graph: same node_id), given the copy's callables as an ordering
    function's copy gives them; None for a node of no such id."""
    key = (node.lib_symbol, node.op_symbol, node.dispatch_key)
    if not isinstance(node.node_id, str) or key not in _C.graph_keys():
        return None
    handle = next((h for h in _C.graph(key) if h.node_id == node.node_id), None)
    if handle is None:
        return None
    for name, value in _nodes.copy_changes(node, handle, "/".join(key)).items():
        handle = _C.replace_callable(handle, name, value)
    _nodes.rebind(node, handle)
    return handle


def _handle_of(node: _OverrideNode) -> _C.Node:
    """The core's node for `node`: the node it is bound to (read through its
    view, which follows callable writes), the node it is a copy of, or a
    hand-made one registered first (into the graph of its key; callers set
    the graph's order next)."""
    if _nodes.is_bound(node):
        return _nodes.live_handle(node)
    if _copied_node(node) is None:
        _ensure_allowed(node.lib_symbol)
        handle = _C.register_op_override(
            node.dsl_name, node.lib_symbol, node.op_symbol, node.dispatch_key,
            node.cond_fn, node.impl_fn, node.try_initialize_runtime, node.unconditional_override)
        # The core names the node (and its `_native` op); later reads of
        # this core node give back this very object.
        _nodes.adopt(node, handle)
    return _nodes.live_handle(node)


def _ensure_allowed(lib_symbol: str) -> None:
    if lib_symbol not in _ALLOWED_LIB_SYMBOLS:
        raise ValueError(f"lib_symbol={lib_symbol!r} is not overridable; allowed: "
                         f"{sorted(_ALLOWED_LIB_SYMBOLS)}")
    if lib_symbol not in _C.allowed_namespaces():
        _C.allow_namespace(lib_symbol)


# ---- views of the core's state ----------------------------------------------------------


class _GraphsView(MutableMapping):
    """The core's graphs, by (lib_symbol, op_symbol, dispatch_key); a graph
    set to [] stays, empty, as in upstream's dict."""

    def __getitem__(self, key: GraphKey) -> list[_OverrideNode]:
        if key not in self:
            raise KeyError(key)
        return [_nodes.node_of(h) for h in _C.graph(tuple(key))]

    def __setitem__(self, key: GraphKey, nodes: Iterable[_OverrideNode]) -> None:
        nodes = list(nodes)
        fresh = [(node, node.node_id) for node in nodes
                 if isinstance(node, _OverrideNode) and not _nodes.is_bound(node)]
        if not fresh:
            _C.replace_graph(tuple(key), [_handle_of(node) for node in nodes])
            return
        # All or nothing: hand-made nodes registered here are unregistered
        # again, copies' callables given back, and both unbound, if the
        # assignment is refused.
        saved, bound = _reference.snapshot(), _nodes.bindings()
        try:
            _C.replace_graph(tuple(key), [_handle_of(node) for node in nodes])
        except BaseException:
            _reference.restore(saved)
            for node, node_id in fresh:
                _nodes.unbind(node, node_id)
            _nodes.restore_bindings(bound)
            raise

    def __delitem__(self, key: GraphKey) -> None:
        if key not in self:
            raise KeyError(key)
        _C.erase_graph(tuple(key))

    def __iter__(self) -> Iterator[GraphKey]:
        return iter(_C.graph_keys())

    def __len__(self) -> int:
        return len(_C.graph_keys())

    def __contains__(self, key: object) -> bool:
        return key in _C.graph_keys()

    def __repr__(self) -> str:
        return f"_GraphsView({dict(self)!r})"


class _Derived(MutableMapping):
    """A mapping computed from the core on every read. Writes are accepted
    and change nothing (see the module's docstring)."""

    def __init__(self, compute: Callable[[], dict]) -> None:
        self._compute = compute

    def __getitem__(self, key: Any) -> Any:
        return self._compute()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._compute())

    def __len__(self) -> int:
        return len(self._compute())

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __delitem__(self, key: Any) -> None:
        pass

    def clear(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._compute()!r})"


def _index(core_index: Callable[[], dict]) -> Callable[[], dict[str, list[GraphKey]]]:
    """Graph keys by dsl name, op symbol or dispatch key, as the core indexes
    them, each list in key order."""
    def compute() -> dict[str, list[GraphKey]]:
        return {name: sorted(keys) for name, keys in core_index().items()}
    return compute


class _RouterLibrary:
    """Stands for the library holding one installed router: destroying it
    takes that router (and no later one at the key) out of the dispatcher."""

    def __init__(self, key: GraphKey, router_id: int) -> None:
        self.key = key
        self.router_id = router_id

    def _destroy(self) -> None:
        if _C.router_id(self.key) == self.router_id:
            _C.uninstall_graph(self.key)

    def __repr__(self) -> str:
        return f"_RouterLibrary({self.key!r}, router {self.router_id})"


# (key, router id) -> its handle while anything holds it, so that reading
# _override_libs twice gives the same object for the same router.
_router_handles: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _installed_routers() -> dict[GraphKey, _RouterLibrary]:
    """A handle per router that routes through a non-empty chain (upstream
    keeps no router for an empty one)."""
    out: dict[GraphKey, _RouterLibrary] = {}
    for key in _C.router_keys():
        if _C.router_state(key) != "active":
            continue
        router_id = _C.router_id(key)
        handle = _router_handles.get((key, router_id))
        if handle is None:
            handle = _router_handles[(key, router_id)] = _RouterLibrary(key, router_id)
        out[key] = handle
    return out


class _FilterSet(MutableSet):
    """One of the core's three filter lists: adding an entry disables it,
    discarding one re-enables it (installed routers follow, as upstream's
    deregister and re-enable make them)."""

    def __init__(self, field: int) -> None:
        self._field = field

    def _entries(self) -> list[str]:
        return list(_C.filters()[self._field])

    def __contains__(self, entry: object) -> bool:
        return entry in self._entries()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def _named(self, entry: str) -> list[list[str]]:
        lists: list[list[str]] = [[], [], []]
        lists[self._field] = [entry]
        return lists

    def add(self, entry: str) -> None:
        _C.deregister_op_overrides(*self._named(entry))

    def discard(self, entry: str) -> None:
        _C.reenable_op_overrides(*self._named(entry))

    def update(self, entries: Iterable[str]) -> None:
        for entry in entries:
            self.add(entry)

    def __repr__(self) -> str:
        return f"{set(self)!r}"


class _FilterState:
    """The core's filters with upstream's attribute names."""

    def __init__(self) -> None:
        self._dsl_names = _FilterSet(0)
        self._op_symbols = _FilterSet(1)
        self._dispatch_keys = _FilterSet(2)

    def check_enabled(self, node: _OverrideNode) -> bool:
        return _C.is_enabled(_handle_of(node))


_graphs = _GraphsView()
_filter_state = _FilterState()
_dsl_name_to_lib_graph = _Derived(_index(_C.graphs_by_dsl_name))
_op_symbol_to_lib_graph = _Derived(_index(_C.graphs_by_op_symbol))
_dispatch_key_to_lib_graph = _Derived(_index(_C.graphs_by_dispatch_key))
_override_libs = _Derived(_installed_routers)
_aten_override_libs = _override_libs  # torch 2.13's name (its routers were all aten's)
_native_decomp_overrides = _Derived(_routing.decomp_overrides)
_libs: dict = {}
_def_libs: dict = {}
_defined_native_ops: set[str] = set()
_node_id_counter = 0


# ---- upstream's functions ---------------------------------------------------------------


def register_op_override(backend: str, lib_symbol: str, op_symbol: str, dispatch_key: str,
                         cond, impl, *, try_initialize_runtime=None,
                         allow_multiple_override: bool = False,
                         unconditional_override: bool = False) -> None:
    global _node_id_counter
    _ensure_allowed(lib_symbol)
    _reference.register_op_override(backend, lib_symbol, op_symbol, dispatch_key, cond, impl,
                                    try_initialize_runtime=try_initialize_runtime,
                                    allow_multiple_override=allow_multiple_override,
                                    unconditional_override=unconditional_override)
    _node_id_counter += 1


def _register_overrides_from_graph(lib_symbol: str, op_symbol: str, dispatch_key: str,
                                   graph: list[_OverrideNode], *, filter_state=None) -> None:
    """Install one graph as upstream does: the graph becomes `graph`, and its
    router is replaced on a fresh capture of the op's kernel (none if no node
    is enabled)."""
    if filter_state is not None and filter_state is not _filter_state:
        raise NotImplementedError(
            "filter_state: the reference installs by the registry's own filters only")
    key = (lib_symbol, op_symbol, dispatch_key)
    _graphs[key] = list(graph)
    _install_graph(key)


def _install_graph(key: GraphKey) -> None:
    """(Re)install one graph on a fresh capture of the op's kernel, as
    upstream's _register_overrides_from_graph does."""
    _C.install_graph(tuple(key), True)


_cleanup_and_reregister_graph = _register_overrides_from_graph


def _destroy_aten_override(op_symbol: str, dispatch_key: str) -> None:
    """torch 2.13's teardown of the router at (op_symbol, dispatch_key), if
    any: the graph stays, as there."""
    key = ("aten", op_symbol, dispatch_key)
    if _C.router_state(key) != "absent":
        _C.uninstall_graph(key)


def _register_all_overrides() -> None:
    for key, graph in list(_graphs.items()):
        _register_overrides_from_graph(*key, graph)


register_all_overrides = _register_all_overrides


def _naming(entries) -> list[str]:
    """Filter entries as upstream's front end takes them: an empty (or blank)
    name names no override, so it is dropped here, a no-op, as
    torch.backends.python_native's callers expect (pytorch/pytorch
    test/python_native/test_torch_backends.py @ 3cee5ea4, test_error_handling).
    The reference's own API keeps refusing it."""
    return [entry for entry in _reference._resolve_iterable(entries) if entry.strip()]


def deregister_op_overrides(*, disable_dsl_names=None, disable_op_symbols=None,
                            disable_dispatch_keys=None) -> None:
    # One core call (one log record): the filter changes and, as upstream's
    # front end re-registers them, every graph the whole filter names is
    # installed (a routed one has its chain published in place).
    _C.deregister_op_overrides(_naming(disable_dsl_names), _naming(disable_op_symbols),
                               _naming(disable_dispatch_keys), install_named=True)


def reenable_op_overrides(*, enable_dsl_names=None, enable_op_symbols=None,
                          enable_dispatch_keys=None) -> None:
    # One core call, as above: the graphs the entries name are installed.
    _C.reenable_op_overrides(_naming(enable_dsl_names), _naming(enable_op_symbols),
                             _naming(enable_dispatch_keys), install_named=True)


reorder_graphs_from_user_function = _reference.reorder_graphs_from_user_function
get_dsl_operations = _reference.get_dsl_operations


def native_decomp_table(overrides_only: bool = False) -> dict[object, Callable[..., Any]]:
    return _reference.native_decomp_table(overrides_only=overrides_only)


# While open, disabled unconditional overrides are masked too. The core
# publishes every installed router's chain again on entry and exit (a graph
# reordered without reregistering included), as upstream rebuilds them.
_unconditional_masked = _reference._unconditional_masked


def install_as_torch_native() -> types.ModuleType:
    """Make ``torch._native.registry`` this module for the rest of the
    process, inside torch's own ``torch._native`` package (whose DSL helpers
    and dsl_registry ``torch.backends.python_native`` needs), which also gets
    ``get_user_ordering_fn``, ``_unconditional_masked`` and ``variants``
    (:mod:`native_registry.variants`, upstream main's selection store).

    The registry it replaces has already run torch's registrars: its
    overrides move into the reference, its routers and ``_native`` ops leave
    the dispatcher, and its module's names then name this module's (see
    :mod:`native_registry.takeover`); names torch's helper modules bound from
    it at import are re-pointed here, so that ``torch.backends.python_native``
    controls this registry. Safe to call again: the second call finds this
    module in place and moves nothing. The reference's log records go to this
    module's logger from then on, the one code written for
    ``torch._native.registry`` listens on."""
    # Submodules only: this runs while `native_registry` itself may still be
    # importing (early activation with native_registry imported before torch).
    from . import takeover, variants
    from .ordering_env import get_user_ordering_fn

    this = sys.modules[__name__]
    with takeover.LOCK:  # one takeover at a time; a second caller finds it done
        try:
            import torch._native as package
        except ImportError:  # a PyTorch without torch._native: a bare package
            package = types.ModuleType("torch._native")
            package.__path__ = []  # a package, so `import torch._native.registry` resolves
        replaced = sys.modules.get("torch._native.registry")
        if replaced is not None and replaced is not this:
            # Plans, and refuses, before anything changes: a refusal leaves
            # torch's module, its helpers and the dispatcher as they were.
            # Its function objects then run this module's functions, also where
            # torch's DSL helpers bound them at import (see takeover.forward).
            takeover.take_over(replaced, this)
        package.registry = this
        package.get_user_ordering_fn = get_user_ordering_fn
        package._unconditional_masked = _unconditional_masked
        sys.modules["torch._native"] = package
        sys.modules["torch._native.registry"] = this
        torch._native = package
        _reference.log = log
        _serve_variants(package, variants)
    return package


def host_torch_surfaces() -> frozenset[str]:
    """What the host PyTorch ships of the surface this module serves:
    ``"python_native"`` when it has the front end torch.backends.python_native,
    ``"stock_registry"`` when it has a torch._native package of its own (whose
    registry :func:`install_as_torch_native` takes over). torch 2.13 has both,
    2.11 neither; there :func:`install_as_torch_native` still serves
    torch._native.registry and torch._native.variants, in a bare package."""
    surfaces = set()
    try:
        import torch.backends.python_native  # noqa: F401
    except ImportError:
        pass
    else:
        surfaces.add("python_native")
    try:
        import torch._native as package
    except ImportError:
        pass
    else:
        # install_as_torch_native's bare package has no file; torch's has.
        if getattr(package, "__file__", None) is not None:
            surfaces.add("stock_registry")
    return frozenset(surfaces)


def _serve_variants(package: types.ModuleType, variants: types.ModuleType) -> None:
    """`torch._native.variants` becomes the reference's store (a torch that
    has its own hands its selections over and forwards to it), and
    torch.backends.python_native gets main's front end to it where torch's
    lacks one: set_override_variant(op, name) and override_variant(op, name)."""
    stock = sys.modules.get("torch._native.variants")
    if stock is not None and stock is not variants:
        for op, name in dict(getattr(stock, "_active", {})).items():
            variants._selected.setdefault(op, name)
        for name in ("PASSTHROUGH", "get_variant", "set_variant", "variant", "_parse_env"):
            setattr(stock, name, getattr(variants, name))
        stock._active = variants._selected
    sys.modules["torch._native.variants"] = variants
    package.variants = variants
    try:
        import torch.backends.python_native as pn
    except ImportError:  # a PyTorch without the front end (2.11): nothing to extend
        return
    if not hasattr(pn, "set_override_variant"):
        pn.set_override_variant = variants.set_variant
        pn.override_variant = variants.variant
