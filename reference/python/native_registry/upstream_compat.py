"""Upstream's module surface, private names included, on the reference.

Code written against ``torch._native.registry``'s internals (upstream's own
tests save and restore ``_graphs``, ``_override_libs``, the index maps and
the filter state; they build graphs from hand-made nodes and install them
with ``_register_overrides_from_graph``) runs against the reference through
this module. :func:`install_as_torch_native` puts it in place of
``torch._native.registry`` for the process.

How it stays honest: as upstream does, this module keeps the graph
structure, the index maps and the filter state in plain Python containers
that callers may read and rewrite. Everything that touches the dispatcher
goes through the C++ reference: at install, the enabled nodes of a graph
become the reference's graph for that key (nodes built by hand are registered
with it first) and the reference replaces the router on a fresh capture,
defines the ``_native`` ops and routes. ``_override_libs`` holds one handle
per installed router; ``_destroy()`` on the live handle removes that router.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _C
from . import registry as _reference

# The name upstream's tests listen on: this module stands in for that one.
log = logging.getLogger("torch._native.registry")

_ALLOWED_LIB_SYMBOLS: frozenset[str] = frozenset({"aten"})
_DISALLOWED_DISPATCH_KEYS = _reference._DISALLOWED_DISPATCH_KEYS
_router_active = _reference._router_active
_always_true = _reference._always_true


@dataclass(eq=False, init=False)
class _OverrideNode:
    """Upstream main's fields in its order; torch 2.13's form (no lib_symbol)
    is accepted too and builds an aten node (see registry._node_fields)."""

    dsl_name: str
    lib_symbol: str
    op_symbol: str
    dispatch_key: str
    cond_fn: Callable[..., Any]
    impl_fn: Callable[..., Any]
    node_id: str
    unconditional_override: bool = False
    active: bool = True
    try_initialize_runtime: Callable[[], bool] | None = None
    _handle: Any = field(default=None, repr=False)

    def __init__(self, *args: Any, _handle: Any = None, **kwargs: Any) -> None:
        for name, value in _reference._node_fields(args, kwargs).items():
            setattr(self, name, value)
        self._handle = _handle


UserOrderingFn = Callable[[str, str, list[_OverrideNode]], list[_OverrideNode]]


@dataclass
class _FilterState:
    _dsl_names: set[str] = field(default_factory=set)
    _op_symbols: set[str] = field(default_factory=set)
    _dispatch_keys: set[str] = field(default_factory=set)

    def check_enabled(self, node: _OverrideNode) -> bool:
        filtered = (node.dsl_name in self._dsl_names or node.op_symbol in self._op_symbols
                    or node.dispatch_key in self._dispatch_keys)
        if not filtered:
            return True
        # An unconditional override is the op's implementation; only the
        # private hatch, with the disable, masks it.
        return node.unconditional_override and not _masked[0]

    def update(self, dsl_names, op_symbols, dispatch_keys, remove_keys: bool = False) -> None:
        for target, entries in ((self._dsl_names, dsl_names), (self._op_symbols, op_symbols),
                                (self._dispatch_keys, dispatch_keys)):
            entries = set(_reference._resolve_iterable(entries))
            if remove_keys:
                target -= entries
            else:
                target |= entries


_filter_state = _FilterState()
_masked = [False]
_libs: dict = {}
_graphs: dict[tuple[str, str, str], list[_OverrideNode]] = {}
_dsl_name_to_lib_graph: dict[str, list] = {}
_op_symbol_to_lib_graph: dict[str, list] = {}
_dispatch_key_to_lib_graph: dict[str, list] = {}
_native_decomp_overrides: dict[object, Callable[..., Any]] = {}
_def_libs: dict = {}
_defined_native_ops: set[str] = set()
_node_id_counter = 0


class _RouterLibrary:
    """Stands for the library holding one installed router."""

    def __init__(self, key: tuple[str, str, str]) -> None:
        self.key = key

    def _destroy(self) -> None:
        if _live.get(self.key) is self:  # a replaced or destroyed handle holds nothing
            _C.replace_graph(self.key, [])
            _C.install_graph(self.key, True)
            _live.pop(self.key, None)
            _native_decomp_overrides.pop(_reference._resolve_overload(self.key), None)


_override_libs: dict[tuple[str, str, str], _RouterLibrary] = {}
_live: dict[tuple[str, str, str], _RouterLibrary] = {}  # what the dispatcher holds, whatever callers do to _override_libs


def _handle_of(node: _OverrideNode):
    """The reference's node for `node`, registering a hand-made one first."""
    if node._handle is None:
        _ensure_allowed(node.lib_symbol)
        node._handle = _C.register_op_override(
            node.dsl_name, node.lib_symbol, node.op_symbol, node.dispatch_key,
            node.cond_fn, node.impl_fn, node.try_initialize_runtime, node.unconditional_override)
    return node._handle


def _ensure_allowed(lib_symbol: str) -> None:
    if lib_symbol not in _ALLOWED_LIB_SYMBOLS:
        raise ValueError(f"lib_symbol={lib_symbol!r} is not overridable; allowed: "
                         f"{sorted(_ALLOWED_LIB_SYMBOLS)}")
    if lib_symbol not in _C.allowed_namespaces():
        _C.allow_namespace(lib_symbol)


def register_op_override(backend: str, lib_symbol: str, op_symbol: str, dispatch_key: str,
                         cond, impl, *, try_initialize_runtime=None,
                         allow_multiple_override: bool = False,
                         unconditional_override: bool = False) -> None:
    global _node_id_counter
    _ensure_allowed(lib_symbol)
    handle = _C.register_op_override(backend, lib_symbol, op_symbol, dispatch_key, cond, impl,
                                     try_initialize_runtime, bool(unconditional_override))
    _node_id_counter += 1
    node = _OverrideNode(backend, lib_symbol, op_symbol, handle.dispatch_key,
                         cond if cond is not None else _always_true, impl, handle.node_id,
                         unconditional_override=bool(unconditional_override),
                         try_initialize_runtime=try_initialize_runtime, _handle=handle)
    key = (lib_symbol, op_symbol, handle.dispatch_key)
    _graphs.setdefault(key, []).append(node)
    for index, name in ((_dsl_name_to_lib_graph, backend), (_op_symbol_to_lib_graph, op_symbol),
                        (_dispatch_key_to_lib_graph, handle.dispatch_key)):
        index.setdefault(name, []).append(key)


def _register_overrides_from_graph(lib_symbol: str, op_symbol: str, dispatch_key: str,
                                   graph: list[_OverrideNode], *, filter_state=None) -> None:
    """Install one graph: its enabled nodes become the reference's chain and
    the router is replaced on a fresh capture; no enabled node, no router."""
    key = (lib_symbol, op_symbol, dispatch_key)
    chain = []
    for node in graph:
        node.active = (filter_state or _filter_state).check_enabled(node)
        if node.active:
            chain.append(node)
    handles = [_handle_of(node) for node in chain]
    _C.replace_graph(key, handles)
    _C.install_graph(key, True)
    _live.pop(key, None)
    _override_libs.pop(key, None)
    overload = _reference._resolve_overload(key)
    if not chain:
        _native_decomp_overrides.pop(overload, None)
        return
    _live[key] = _override_libs[key] = _RouterLibrary(key)
    if overload is not None:
        _native_decomp_overrides[overload] = _reference._make_compile_router(
            [_reference._node_of(h) for h in handles])


_cleanup_and_reregister_graph = _register_overrides_from_graph


def _register_all_overrides() -> None:
    for key, graph in list(_graphs.items()):
        _register_overrides_from_graph(*key, graph)


register_all_overrides = _register_all_overrides


def _keys_named(dsl_names, op_symbols, dispatch_keys) -> set:
    keys: set = set()
    for index, names in ((_dsl_name_to_lib_graph, dsl_names), (_op_symbol_to_lib_graph, op_symbols),
                         (_dispatch_key_to_lib_graph, dispatch_keys)):
        for name in _reference._resolve_iterable(names):
            keys.update(index.get(name, ()))
    return keys


def deregister_op_overrides(*, disable_dsl_names=None, disable_op_symbols=None,
                            disable_dispatch_keys=None) -> None:
    _filter_state.update(disable_dsl_names, disable_op_symbols, disable_dispatch_keys)
    for key in _keys_named(_filter_state._dsl_names, _filter_state._op_symbols,
                           _filter_state._dispatch_keys):
        if key in _graphs:
            _register_overrides_from_graph(*key, _graphs[key])


def reenable_op_overrides(*, enable_dsl_names=None, enable_op_symbols=None,
                          enable_dispatch_keys=None) -> None:
    _filter_state.update(enable_dsl_names, enable_op_symbols, enable_dispatch_keys,
                         remove_keys=True)
    for key in _keys_named(enable_dsl_names, enable_op_symbols, enable_dispatch_keys):
        if key in _graphs:
            _register_overrides_from_graph(*key, _graphs[key])


def reorder_graphs_from_user_function(fn: UserOrderingFn, *,
                                      reregister_overrides: bool = False) -> None:
    for key in list(_graphs):
        lib_symbol, op_symbol, dispatch_key = key
        original = list(_graphs[key])
        try:
            reordered = fn(op_symbol, dispatch_key, original)
            if not isinstance(reordered, list):
                raise TypeError(f"expected a list, got {type(reordered).__name__}")
        except Exception:
            log.warning("Graph transformation failed for %s::%s/%s. Preserving original graph.",
                        lib_symbol, op_symbol, dispatch_key, exc_info=True)
            continue
        _graphs[key] = reordered
        if reregister_overrides and reordered != original:
            _register_overrides_from_graph(*key, reordered)


def get_dsl_operations(dsl_name: str, lib_symbol: str = "aten") -> list[str]:
    return sorted({op for (lib, op, _), nodes in _graphs.items()
                   if lib == lib_symbol and any(n.dsl_name == dsl_name for n in nodes)})


def native_decomp_table(overrides_only: bool = False) -> dict[object, Callable[..., Any]]:
    table: dict[object, Callable[..., Any]] = {}
    if not overrides_only:
        from torch.export import default_decompositions

        table.update(default_decompositions())
    table.update(_native_decomp_overrides)
    return table


@contextlib.contextmanager
def _unconditional_masked() -> Iterator[None]:
    """While open, disabled unconditional overrides are masked too."""
    affected = [k for k, g in _graphs.items()
                if k in _live and any(n.unconditional_override for n in g)]
    previous, _masked[0] = _masked[0], True
    try:
        for key in affected:
            _register_overrides_from_graph(*key, _graphs[key])
        yield
    finally:
        _masked[0] = previous
        for key in affected:
            if key in _graphs:
                _register_overrides_from_graph(*key, _graphs[key])


def install_as_torch_native() -> types.ModuleType:
    """Make ``torch._native.registry`` this module for the rest of the
    process, inside torch's own ``torch._native`` package (whose DSL helpers
    and dsl_registry ``torch.backends.python_native`` needs), which also gets
    ``get_user_ordering_fn`` and ``_unconditional_masked``. Names torch's
    helper modules bound from the replaced registry at import are re-pointed
    here, so that ``torch.backends.python_native`` controls this registry."""
    import native_registry

    this = sys.modules[__name__]
    try:
        import torch._native as package
    except ImportError:  # a PyTorch without torch._native: a bare package
        package = types.ModuleType("torch._native")
        package.__path__ = []  # a package, so `import torch._native.registry` resolves
    replaced = sys.modules.get("torch._native.registry")
    package.registry = this
    package.get_user_ordering_fn = native_registry.get_user_ordering_fn
    package._unconditional_masked = _unconditional_masked
    sys.modules["torch._native"] = package
    sys.modules["torch._native.registry"] = this
    torch._native = package
    if replaced is not None and replaced is not this:
        _repoint_bound_names(replaced.__name__, replaced)
    return package


def _repoint_bound_names(module_name: str, replaced: types.ModuleType) -> None:
    """torch's DSL helpers (triton_utils, cutedsl_utils) bound the replaced
    registry's functions under names of their own at import (``from
    .registry import deregister_op_overrides as _deregister_op_overrides_impl``),
    so a DSL's ``disable()`` would still reach the replaced registry. Every
    such binding in a ``torch._native`` module now names this module's
    function of the same name."""
    this = sys.modules[__name__]
    for name, module in list(sys.modules.items()):
        if not name.startswith("torch._native.") or module is None or module is this:
            continue
        for attr, value in list(vars(module).items()):
            fn_name = getattr(value, "__name__", None)
            if (callable(value) and getattr(value, "__module__", None) == module_name
                    and isinstance(fn_name, str) and getattr(replaced, fn_name, None) is value
                    and callable(getattr(this, fn_name, None))):
                setattr(module, attr, getattr(this, fn_name))
