"""Upstream's ``torch._native.registry`` API on the C++ reference registry.

Switching is one import::

    import native_registry.registry as registry   # was: torch._native.registry

The functions below have upstream's names, signatures and semantics. All
state lives in C++ (``native_registry._C``), the one registry of the process,
which C++ code in the same process shares: graphs, filters, routers in the
dispatcher, ``_native::<node_id>`` ops. This module keeps no registry state
of its own: node objects are views of the C++ nodes (made on demand, cached
weakly so that the same node gives the same object while it is held), and
the decomposition table is derived from the installed routers each time
:func:`native_decomp_table` is called.

Beyond upstream: :func:`snapshot`, :func:`restore` and :func:`scoped` put the
registry *and* the dispatcher back exactly; :func:`allow_namespace` opts a
namespace in; :mod:`native_registry.predicates` gives conds evaluated in C++.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from . import _C, observe
from .compile_routing import (
    _resolve_overload,
    compile_backend,
    drop_cached_native_packets,
    drop_stale_compile_routers,
    native_decomp_table,
)
from .explain import explain
from .nodes import (  # noqa: F401  (_always_true: re-exported, upstream's name)
    GraphKey, UserOrderingFn, _always_true, _OverrideNode, copy_changes, follow_graphs, live_handle, node_of, rebind)

__all__ = [
    "UserOrderingFn",
    "register_op_override",
    "reorder_graphs_from_user_function",
    "reenable_op_overrides",
    "deregister_op_overrides",
    "get_dsl_operations",
    "native_decomp_table",
    "register_all_overrides",
    "snapshot",
    "restore",
    "scoped",
    "allow_namespace",
    "disallow_namespace",
    "allowed_namespaces",
    "compile_backend",
    "set_coverage_check",
    "coverage_check",
    "set_aot_enabled",
    "aot_enabled",
    "set_impl_error_policy",
    "impl_error_policy",
    "explain",
    "collect_stats",
    "stats",
    "reset_stats",
    "disabled_in_thread",
]

# The names beyond __all__ that upstream's module has and this one carries
# (code written against upstream reads them: its tests, torch's DSL helpers);
# the package's other modules may use these too. Every other private name
# stays in this module.
UPSTREAM_SURFACE = (
    "GraphKey", "_DISALLOWED_DISPATCH_KEYS", "_OverrideNode", "_always_true",
    "_register_all_overrides", "_resolve_iterable", "_resolve_overload", "_router_active",
    "_unconditional_masked", "log",
)

log = logging.getLogger(__name__)


# Keys the router refuses: its fake kernel redispatches through them.
_DISALLOWED_DISPATCH_KEYS: frozenset[str] = frozenset(
    {"Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"}
)


def _forward_log(level: str, message: str,
                 _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
    # At interpreter exit the module's globals (log) are cleared while the
    # finalizing thread may still end scopes or toggle filters (a __del__,
    # a daemon thread): nothing is logged then, logging itself being torn
    # down. The check is bound at definition; `log` is read at each call,
    # since upstream_compat rebinds it to torch._native.registry's logger.
    if _finalizing():
        return
    (log.warning if level == "warning" else log.info)(message)


_C.set_log_sink(_forward_log)
_C.install_dynamo_shortcut()


class _RouterActive:
    """Upstream's thread-local re-entrancy flag, read from the C++ guard."""

    @property
    def on(self) -> bool:
        return _C.in_diverted_call()


_router_active = _RouterActive()


def _check_name(what: str, value: object) -> None:
    """A name must be a str the C++ side can hold: UTF-8 encodable (a lone
    surrogate is not), so that the error names the argument."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be encodable as UTF-8, got {value!r}") from None


def _resolve_iterable(entries: str | Iterable[str] | None) -> list[str]:
    if entries is None:
        return []
    if isinstance(entries, str):
        entries = [entries]
    resolved = list(entries)
    for entry in resolved:
        _check_name("filter entries", entry)  # a str, UTF-8 encodable
    return resolved


def register_op_override(
    backend: str,
    lib_symbol: str,
    op_symbol: str,
    dispatch_key: str,
    cond: Callable[..., bool] | None,
    impl: Callable[..., Any],
    *,
    try_initialize_runtime: Callable[[], bool] | None = None,
    allow_multiple_override: bool = False,
    unconditional_override: bool = False,
) -> None:
    """Append an override by the DSL ``backend`` (upstream's name for the
    node's ``dsl_name``) to the graph of (lib_symbol, op_symbol, dispatch_key).

    ``allow_multiple_override`` is accepted for upstream's signature and
    changes nothing: a graph always takes several overrides.

    Installs nothing: :func:`register_all_overrides` (or a re-enable touching
    the graph) does. ``cond`` is a Python callable taking the op's arguments,
    or a :mod:`native_registry.predicates` predicate evaluated in C++.

    Raises:
        ValueError: a refused dispatch key (Meta, Composite*), a namespace off
            the allowlist, ``cond=None`` without ``unconditional_override``,
            ``try_initialize_runtime`` with it, or a malformed name.
        TypeError: ``cond``, ``impl`` or ``try_initialize_runtime`` is not callable.
    """
    for name, value in (("backend (the node's dsl_name)", backend), ("lib_symbol", lib_symbol),
                        ("op_symbol", op_symbol), ("dispatch_key", dispatch_key)):
        _check_name(name, value)
    _C.register_op_override(
        backend, lib_symbol, op_symbol, dispatch_key, cond, impl,
        try_initialize_runtime, bool(unconditional_override),
    )


def deregister_op_overrides(
    *,
    disable_dsl_names: str | list[str] | None = None,
    disable_op_symbols: str | list[str] | None = None,
    disable_dispatch_keys: str | list[str] | None = None,
) -> None:
    """Disable overrides by dsl name, op symbol (bare, any namespace; "ns::op"
    matches nothing) or dispatch key. Installed routers of the graphs named
    follow at once; a graph never installed stays uninstalled. Unconditional
    overrides stay enabled."""
    dsl, ops, keys = (_resolve_iterable(disable_dsl_names), _resolve_iterable(disable_op_symbols),
                      _resolve_iterable(disable_dispatch_keys))
    _C.deregister_op_overrides(dsl, ops, keys)


def reenable_op_overrides(
    *,
    enable_dsl_names: str | list[str] | None = None,
    enable_op_symbols: str | list[str] | None = None,
    enable_dispatch_keys: str | list[str] | None = None,
) -> None:
    """Undo :func:`deregister_op_overrides` for the named entries; installed
    routers of the graphs they name follow."""
    dsl, ops, keys = (_resolve_iterable(enable_dsl_names), _resolve_iterable(enable_op_symbols),
                      _resolve_iterable(enable_dispatch_keys))
    _C.reenable_op_overrides(dsl, ops, keys)


class _ReorderRefused(BaseException):
    """Raised from within an ordering callback to end the reordering with no
    change (the binding aborts on anything not an Exception); carries the
    error to raise."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def reorder_graphs_from_user_function(
    fn: UserOrderingFn, *, reregister_overrides: bool = False
) -> None:
    """Replace every graph by ``fn(op_symbol, dispatch_key, graph)``.

    ``fn`` may return the graph's nodes or copies of them
    (``dataclasses.replace(node, impl_fn=...)``, as upstream's nodes are
    dataclasses): a copy stands for the node of its node_id, and its
    callables become that node's (routing takes them at the graph's next
    install, as after a write of them; the node's view shows them, and the
    copy becomes bound to the node). A copy that changes anything but its
    callables is refused.

    If ``fn`` raises or returns something other than a list of this graph's
    nodes (or copies), a warning containing "Graph transformation failed" is
    logged and the graph is kept, callables included. With
    ``reregister_overrides``, changed graphs (order or callables) are
    installed again.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")

    # key -> (the handles returned, [(copy, its node's handle, new callables)],
    # whether they are in the order fn was given: the core then has nothing to
    # reorder, and says nothing if the graph changed meanwhile).
    copies: dict[GraphKey, tuple[list, list, bool]] = {}

    # An Exception from fn is a failed transformation (a warning, the graph
    # kept); KeyboardInterrupt, SystemExit and the like end the reordering,
    # which then changes nothing, and propagate (the binding sees to both).
    def on_handles(op_symbol: str, dispatch_key: str, handles: list) -> list:
        result = fn(op_symbol, dispatch_key, [node_of(h) for h in handles])
        if not isinstance(result, list):
            return result  # the C++ side reports the wrong type
        by_id = {h.node_id: h for h in handles}
        where = f"{handles[0].lib_symbol}::{op_symbol}/{dispatch_key}" if handles else op_symbol
        out, changed = [], []
        for item in result:
            if not isinstance(item, _OverrideNode):
                raise TypeError(f"ordering function returned {type(item).__name__} {item!r}, "
                                "not a registered node or a copy of one")
            if item._handle is not None:
                out.append(live_handle(item))  # the C++ side checks it is this graph's
                continue
            node_id = item.node_id
            handle = by_id.get(node_id) if isinstance(node_id, str) else None
            if handle is None:
                raise TypeError(f"ordering function returned {item!r}, which is neither a "
                                f"registered node nor a copy of a node of {where}")
            changes = copy_changes(item, handle, where)
            if changes:
                changed.append((item, handle, changes))
            out.append(handle)
        if changed:  # (a node returned twice: the core refuses the result, naming it)
            key = handles[0].key
            if (reregister_overrides and any(_C.is_enabled(h) for h in out)
                    and _resolve_overload(key[0], key[1]) is None):
                # The core installs reordered graphs all or nothing; so must
                # the graphs given new callables here: end it before any change.
                # A graph whose filters disable every node needs no router,
                # hence no op (the core's rule: install resolves the op only
                # for a non-empty enabled chain).
                raise _ReorderRefused(AttributeError(
                    f"op '{key[0]}::{key[1]}' not found; is the namespace '{key[0]}' loaded "
                    "(its library defined or imported) and the op symbol spelled with its "
                    "overload?"))
            copies[key] = (out, changed, [h.node_id for h in out] == [h.node_id for h in handles])
        return out

    try:
        _C.reorder_graphs(on_handles, bool(reregister_overrides))
    except _ReorderRefused as refused:
        raise refused.error from None
    applied = []
    for key, (out, changed, order_kept) in copies.items():
        current = _C.graph(key)
        if len(current) != len(out) or any(a is not b for a, b in zip(current, out)):
            # Refused; the core warned where fn changed the order, not where
            # it changed only callables.
            if order_kept:
                log.warning("Graph transformation failed for %s::%s/%s: the graph changed while "
                            "the ordering function ran. Preserving the current graph.", *key)
            continue
        for item, handle, changes in changed:
            for name, value in changes.items():
                handle = _C.replace_callable(handle, name, value)
            rebind(item, handle)
        applied.append(key)
    if reregister_overrides:
        for key in applied:
            _C.install_graph(key, False)


def get_dsl_operations(dsl_name: str, lib_symbol: str = "aten") -> list[str]:
    """Sorted op symbols ``dsl_name`` overrides in ``lib_symbol``."""
    _check_name("dsl_name", dsl_name)
    _check_name("lib_symbol", lib_symbol)
    return _C.get_dsl_operations(dsl_name, lib_symbol)


def register_all_overrides() -> None:
    """Install every graph: routers go into the dispatcher. Checks that every
    op resolves before installing any (AttributeError "... not found; is the
    namespace ..." otherwise)."""
    _C.install_all()


# Upstream's private name for the same operation.
_register_all_overrides = register_all_overrides


@contextlib.contextmanager
def _unconditional_masked() -> Iterator[None]:
    """Mask unconditional overrides that the filters disable, for the scope.

    An unconditional override is the op's implementation, so a plain disable
    leaves it in place; this hatch (for computing a reference result) lifts
    that exemption while it is open, and only for disabled overrides."""
    _C.push_unconditional_mask()
    try:
        yield
    finally:
        _C.pop_unconditional_mask()


# ---- beyond upstream ------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """What :func:`restore` needs to put the registry and the dispatcher back."""

    _native: _C.Snapshot


def snapshot() -> Snapshot:
    """Capture the registry (graphs, filters, allowlist, installed routers)."""
    return Snapshot(_C.snapshot())


def restore(saved: Snapshot) -> None:
    """Put back what :func:`snapshot` captured: routers installed since are
    removed, routers replaced since are rebuilt on the op's own kernel, and
    ``_native`` ops of nodes registered since are retired: a program exported
    or compiled with one raises an error naming the override when called.
    A retired op that nothing holds any more is undefined (at this restore,
    or once the program holding it is gone, at a later one), so a scope per
    test leaves no op behind."""
    if not isinstance(saved, Snapshot):
        raise TypeError(f"restore takes a Snapshot, got {type(saved).__name__}")
    drop_cached_native_packets()
    _C.restore(saved._native)
    follow_graphs()
    drop_stale_compile_routers()


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """Everything registered, installed or disabled inside is undone on exit."""
    saved = snapshot()
    try:
        yield
    finally:
        restore(saved)


def allow_namespace(lib_symbol: str) -> None:
    """Make ops of ``lib_symbol`` overridable (``aten`` is; ``_native`` never)."""
    _check_name("lib_symbol", lib_symbol)
    _C.allow_namespace(lib_symbol)


def disallow_namespace(lib_symbol: str) -> None:
    _check_name("lib_symbol", lib_symbol)
    _C.disallow_namespace(lib_symbol)


def allowed_namespaces() -> frozenset[str]:
    return frozenset(_C.allowed_namespaces())


def router_state(lib_symbol: str, op_symbol: str, dispatch_key: str) -> str:
    """'absent', 'dormant' (installed, empty chain) or 'active'."""
    return _C.router_state((lib_symbol, op_symbol, dispatch_key))


def graph(lib_symbol: str, op_symbol: str, dispatch_key: str) -> list[_OverrideNode]:
    """The nodes of one graph, in routing order."""
    return [node_of(h) for h in _C.graph((lib_symbol, op_symbol, dispatch_key))]


def set_empty_chain_policy(policy: str) -> None:
    """'keep_dormant' (default: a router whose chain empties stays, declining
    every call, so disabling is safe while other threads call the op) or
    'remove' (upstream's behaviour: the router is taken out)."""
    _C.set_empty_chain_policy(policy)


def set_coverage_check(check: Callable[..., bool] | None) -> None:
    """Ask ``check(op_symbol, dispatch_key, args, kwargs)`` once per routed
    call, before any cond (upstream main's ``aot_manifest.covers``): a call it
    covers (a kernel compiled ahead of time into the op's own serves it)
    declines every override, unconditional ones too, and runs the op's own
    kernel. An exception it raises counts as not covered. A
    ``predicates.Predicate`` works too, evaluated in C++ on the call. The
    eager routers ask it from now on; the compile routers when they trace.
    ``None`` unsets it; unset, a call pays nothing for it."""
    _C.set_coverage_check(check)


def coverage_check() -> Callable[..., bool] | None:
    """The check :func:`set_coverage_check` set, or None."""
    return _C.coverage_check()


def set_aot_enabled(enabled: bool) -> bool:
    """Switch coverage checks on or off for every registry of the process
    (upstream main's switch; ``TORCH_DISABLE_NATIVE_AOT=1`` starts it off).
    Off, a call routes through the conds as if no check were set. Returns
    the previous setting, for the caller to restore."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_aot_enabled takes a bool, got {type(enabled).__name__}")
    return _C.set_coverage_checks_enabled(enabled)


def aot_enabled() -> bool:
    """Whether coverage checks are asked (see :func:`set_aot_enabled`)."""
    return _C.coverage_checks_enabled()


def set_impl_error_policy(policy: str) -> None:
    """What a router does when the impl it chose raises: ``"raise"`` (the
    default, upstream's behaviour: the error is the call's) or
    ``"fallback"``: the call runs the op's own kernel with its arguments as
    they came in, and the first such error of each override is reported as a
    ``RuntimeWarning`` naming the override, the op and the error. Only for
    ops whose schema writes no argument: an in-place or out= impl that failed
    halfway may have written part of its output, which no fallback can undo,
    so those still raise; ``KeyboardInterrupt`` and ``SystemExit`` always
    propagate. Eager calls only: a compiled or exported program calls the
    override's ``_native`` op, which raises as the impl does."""
    _C.set_impl_error_policy(policy)


def impl_error_policy() -> str:
    """``"raise"`` or ``"fallback"`` (see :func:`set_impl_error_policy`)."""
    return _C.impl_error_policy()


def collect_stats(collect: bool) -> bool:
    """Count routed calls from now on (True) or stop (False; the default):
    per override, calls taken, declined, skipped for an unavailable runtime
    and raised; per graph, calls and fallbacks (see :func:`stats`). Exact
    under any number of threads; off, a call pays one atomic load for it.
    Returns the previous setting, for the caller to restore."""
    if not isinstance(collect, bool):
        raise TypeError(f"collect_stats takes a bool, got {type(collect).__name__}: {collect!r}")
    return _C.set_collect_stats(collect)


def stats() -> observe.RoutingStats:
    """The counts since collection began or :func:`reset_stats`: ``.nodes``,
    ``.graphs``, ``.node(node_id)``, ``.graph(op_symbol, dispatch_key)``;
    printed, a table."""
    return observe.stats()


def reset_stats() -> None:
    """Zero every count; collection stays on or off as it was."""
    _C.reset_stats()


def disabled_in_thread(
    *,
    dsl_names: str | list[str] | None = None,
    op_symbols: str | list[str] | None = None,
    dispatch_keys: str | list[str] | None = None,
) -> observe.DisabledInThread:
    """A context manager (or decorator): while entered, this thread's calls
    see the overrides named (by dsl name, bare op symbol or dispatch key, as
    :func:`deregister_op_overrides` names them) as disabled; other threads
    are unaffected, nothing is republished and the dispatcher is not touched.
    Unconditional overrides stay enabled. Scopes nest and restore; a
    compiled or exported program sees the thread's scopes when it traces."""
    return observe.DisabledInThread(_resolve_iterable(dsl_names), _resolve_iterable(op_symbols),
                                    _resolve_iterable(dispatch_keys))
