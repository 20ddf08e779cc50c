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
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import MISSING, dataclass, fields as dataclass_fields
from typing import Any

import torch

from . import _C

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
]

log = logging.getLogger(__name__)

GraphKey = tuple[str, str, str]  # (lib_symbol, op_symbol, dispatch_key)

# Keys the router refuses: its fake kernel redispatches through them.
_DISALLOWED_DISPATCH_KEYS: frozenset[str] = frozenset(
    {"Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"}
)


def _always_true(*args: object, **kwargs: object) -> bool:
    return True


# The fields of upstream main's _OverrideNode, in its positional order, and
# their defaults (torch 2.13's lacks lib_symbol and try_initialize_runtime).
_NODE_FIELDS = ("dsl_name", "lib_symbol", "op_symbol", "dispatch_key", "cond_fn", "impl_fn",
                "node_id", "unconditional_override", "active", "try_initialize_runtime")
_TORCH_2_13_NODE_FIELDS = ("dsl_name", "op_symbol", "dispatch_key", "cond_fn", "impl_fn",
                           "node_id", "unconditional_override", "active")


def _node_fields(args: tuple, kwargs: dict) -> dict[str, Any]:
    """The fields of a node built as upstream main builds it, or as torch
    2.13 did (no lib_symbol: its registry overrode aten ops only). 2.13's
    form is told apart by its cond_fn, a callable, in the fourth place, where
    main has the dispatch key; or, built by keywords, by a missing lib_symbol."""
    torch_2_13 = (len(args) > 3 and callable(args[3])) or (
        "lib_symbol" not in kwargs and len(args) < 2)
    order = _TORCH_2_13_NODE_FIELDS if torch_2_13 else _NODE_FIELDS
    if len(args) > len(order):
        raise TypeError(f"_OverrideNode takes at most {len(order)} positional arguments "
                        f"({len(args)} given)")
    positional = dict(zip(order, args))
    fields = dict(_NODE_DEFAULTS, **({"lib_symbol": "aten"} if torch_2_13 else {}), **positional)
    for name, value in kwargs.items():
        if name not in _NODE_FIELDS:
            raise TypeError(f"_OverrideNode got an unexpected keyword argument {name!r}")
        if name in positional:
            raise TypeError(f"_OverrideNode got multiple values for argument {name!r}")
        fields[name] = value
    missing = [name for name in _NODE_FIELDS if name not in fields]
    if missing:
        raise TypeError(f"_OverrideNode missing required arguments: {', '.join(missing)}")
    return fields


class _NodeField:
    """One field of :class:`_OverrideNode`, a dataclass field as upstream's.

    A node built by hand is a plain record: the field reads and writes the
    node's own slot. A node bound to a C++ node (made by
    :func:`register_op_override`, or registered by the compatibility layer)
    reads it from the C++ node, the one record of it. There a write of a
    callable (cond_fn, impl_fn, try_initialize_runtime) gives the C++ node
    that callable, which routing takes at the graph's next install, as
    upstream's routers take a node's callables when they are built; a write
    of any other field is refused, since the node's identity (its graph, its
    `_native` op, what the filters match) was fixed at registration."""

    _CALLABLES = ("cond_fn", "impl_fn", "try_initialize_runtime")
    _MISSING = object()

    def __init__(self, default: object = _MISSING) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = "_" + name

    def __get__(self, node: _OverrideNode | None, owner: type | None = None) -> Any:
        if node is None:
            # Dataclasses read a field's default here; AttributeError: none.
            if self.default is self._MISSING:
                raise AttributeError(self.name)
            return self.default
        if node._handle is None:
            return getattr(node, self.slot)
        return _bound_field(_live_handle(node), self.name)

    def __set__(self, node: _OverrideNode, value: Any) -> None:
        if node._handle is None:
            object.__setattr__(node, self.slot, value)
        elif self.name in self._CALLABLES:
            _rebind(node, _C.replace_callable(_live_handle(node), self.name, value))
        elif self.name == "active":
            raise AttributeError(
                "active of a registered node follows the filters; use "
                "deregister_op_overrides / reenable_op_overrides")
        else:
            raise AttributeError(
                f"{self.name} of a registered node is fixed at registration (it names "
                "the node's graph, its _native op and what the filters match); "
                "register a new override, or dataclasses.replace() the node for an "
                "unregistered copy")


def _bound_field(handle: _C.Node, name: str) -> Any:
    """A field of a node as the C++ node `handle` holds it."""
    if name == "active":
        return _C.is_enabled(handle)
    value = getattr(handle, name)
    if name == "cond_fn" and value is None:
        return _always_true  # an unconditional node's always-true cond (C++)
    return value


@dataclass(init=False, repr=False)
class _OverrideNode:
    """One override, with upstream main's fields, positional order and
    defaults (a dataclass, as upstream's: ``dataclasses.fields``, ``asdict``
    and ``replace`` work; ``replace`` gives an unregistered copy); torch
    2.13's form (no lib_symbol) builds an aten node.

    Nodes made by :func:`register_op_override` are views of the C++ node
    they describe (see :class:`_NodeField`): ``active`` then reports whether
    the filters leave it enabled, and writing ``cond_fn``, ``impl_fn`` or
    ``try_initialize_runtime`` gives the C++ node the new callable, which
    routing takes at the graph's next install. A node built by hand (as
    upstream's tests do) is a plain record.
    """

    dsl_name: str = _NodeField()
    lib_symbol: str = _NodeField()
    op_symbol: str = _NodeField()
    dispatch_key: str = _NodeField()
    cond_fn: Callable[..., bool] = _NodeField()
    impl_fn: Callable[..., Any] = _NodeField()
    node_id: str = _NodeField()
    unconditional_override: bool = _NodeField(False)
    active: bool = _NodeField(True)
    try_initialize_runtime: Callable[[], bool] | None = _NodeField(None)

    __slots__ = tuple("_" + f for f in _NODE_FIELDS) + ("_handle", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._handle: _C.Node | None = None
        for name, value in _node_fields(args, kwargs).items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return (
            f"_OverrideNode(dsl_name={self.dsl_name!r}, lib_symbol={self.lib_symbol!r}, "
            f"op_symbol={self.op_symbol!r}, dispatch_key={self.dispatch_key!r}, "
            f"node_id={self.node_id!r}, unconditional_override={self.unconditional_override}, "
            f"active={self.active})"
        )


# What a node built by hand without them gets: the fields' own defaults, so the
# class declaration above is their one record.
_NODE_DEFAULTS = {f.name: f.default for f in dataclass_fields(_OverrideNode)
                  if f.default is not MISSING}

UserOrderingFn = Callable[[str, str, list[_OverrideNode]], list[_OverrideNode]]

# node_id -> the view of that C++ node while anything holds it. A cache of
# views, not a record: every field comes from the C++ node.
_views: weakref.WeakValueDictionary[str, _OverrideNode] = weakref.WeakValueDictionary()


def _live_handle(node: _OverrideNode) -> _C.Node:
    """The C++ node a bound object stands for now. Two objects may be bound to
    one node (its view, and a copy an ordering function put in its place);
    the cached view follows every callable write, so read through it."""
    handle = node._handle
    view = _views.get(handle.node_id)
    return handle if view is None or view._handle is None else view._handle


def _rebind(node: _OverrideNode, handle: _C.Node) -> None:
    """Bind `node` to `handle`, the node now in the graph of that node_id
    (new callables); the cached view follows, or `node` becomes it."""
    node._handle = handle
    view = _views.get(handle.node_id)
    if view is None:
        _views[handle.node_id] = node
    else:
        view._handle = handle


def _node_of(handle: _C.Node) -> _OverrideNode:
    """The node object users see for a C++ node, registered from Python or C++.
    Its fields are read from the C++ node whenever they are read."""
    node = _views.get(handle.node_id)
    if node is None:
        node = _OverrideNode.__new__(_OverrideNode)
        node._handle = handle
        _views[handle.node_id] = node
    else:
        # The graph's node of this id: a write of a callable replaced it (or
        # a restore brought back the one before).
        node._handle = handle
    return node


def _forward_log(level: str, message: str) -> None:
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
        if not isinstance(entry, str):
            raise TypeError(f"filter entries must be str, got {type(entry).__name__}: {entry!r}")
        _check_name("filter entries", entry)
    return resolved


def _resolve_overload(lib_symbol: str, op_symbol: str) -> torch._ops.OpOverload | None:
    """The OpOverload ``lib_symbol::op_symbol`` names ("bmm" is bmm.default,
    "add.Tensor" that overload), in any namespace, or None while the op is
    not in the dispatcher (an op Python defines resolves once its defining
    module ran). Upstream main's signature (jkzhang7/pytorch @ 6be35214).

    None for anything else too: a non-string, a name that is some other
    attribute of torch.ops (a class, a method of a namespace or a packet),
    a packet without that overload; never an exception."""
    if not isinstance(lib_symbol, str) or not isinstance(op_symbol, str):
        return None
    name, _, overload = op_symbol.partition(".")
    try:
        found = getattr(getattr(getattr(torch.ops, lib_symbol), name), overload or "default")
        if not isinstance(found, torch._ops.OpOverload):
            return None
        # torch.ops caches what it handed out; the dispatcher says whether the
        # op is still defined (an op a C++ library defined can go uncached).
        schema = found._schema
        torch._C._dispatch_find_schema_or_throw(schema.name, schema.overload_name)
    except Exception:  # a name torch.ops cannot take (a lone surrogate, ...) as well
        return None
    return found


def _reaches_key(dispatch_key: str, args: tuple, kwargs: dict) -> bool:
    """Whether a call would reach `dispatch_key` in eager: some tensor argument
    carries it (a CPU call never reaches a CUDA router). The decomposition
    table is keyed by op only, so its router must check this itself. A call
    without tensors, or a key torch does not name, is not judged here."""
    key = getattr(torch._C.DispatchKey, dispatch_key, None)
    tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    return key is None or not tensors or any(torch._C._dispatch_keys(t).has(key) for t in tensors)


def _compile_cond(handle: _C.Node, overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """The cond of a published node as the compile router calls it. A C++
    predicate is evaluated on the boxed stack the call makes, keywords and
    defaults in their schema places, as the eager router evaluates it; a
    Python cond gets the call's own arguments, as in eager."""
    cond = _bound_field(handle, "cond_fn")
    if not isinstance(cond, _C.predicates.Predicate):
        return cond
    name, overload_name = overload._schema.name, overload._schema.overload_name

    def predicate_cond(*args: Any, **kwargs: Any) -> bool:
        return cond.evaluate_on_call(name, overload_name, args, kwargs)

    return predicate_cond


def _make_compile_router(chain: list[_C.Node], overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """First match wins, as in eager; a cond that raises counts as no match
    (some predicates are undefined on fake tensors); no match, or a call that
    would not reach the graph's dispatch key, returns NotImplemented so the
    default decomposition or lowering applies. The runtime is not initialised
    here (this runs while tracing): the `_native` op asks it at run time.
    Built from the chain the eager router routes through now, so both take
    the same callables (a node given a new one since takes it at its next
    install in both)."""
    entries = [(_compile_cond(handle, overload), getattr(torch.ops._native, handle.node_id).default)
               for handle in chain]
    dispatch_key = chain[0].dispatch_key

    def compile_router(*args: Any, **kwargs: Any) -> Any:
        if not _reaches_key(dispatch_key, args, kwargs):
            return NotImplemented
        for cond, native_op in entries:
            try:
                matched = cond(*args, **kwargs)
            except Exception:
                continue
            if matched:
                return native_op(*args, **kwargs)
        return NotImplemented

    return compile_router


# key -> ((router id, node ids of its published chain), compile router): the
# router made for the chain the core publishes now. A cache of the core's
# state, never a record: an entry is used only while the core still
# publishes that very chain through that very router, so reading the table
# twice gives the same router objects (upstream's dict does) and any change
# in the core gives a fresh one.
_compile_routers: dict[GraphKey, tuple[tuple, Callable[..., Any]]] = {}


def _chain_signature(key: GraphKey, handles: list) -> tuple:
    """What tells a published chain from the one before: the router id, and
    each node's id and callables (a node given new callables keeps its
    node_id; the cached router holds those callables, so their ids cannot be
    reused meanwhile)."""
    return (_C.router_id(key), tuple((h.node_id, id(h.cond_fn), id(h.impl_fn),
                                      id(h.try_initialize_runtime)) for h in handles))


# Where a router kernel says it was registered (torch::Library's debug text:
# its __FILE__ and __LINE__ in the core's router.cpp).
_ROUTER_DEBUG_FILE = "router.cpp:"


def _router_is_the_kernel(key: GraphKey, overload: torch._ops.OpOverload) -> bool:
    """Whether the router of `key` is what the op runs at its key. It is not
    once the op was undefined and defined again with a kernel of its own
    there (that kernel shadows the old router, which stays registered): the
    table then must not turn the new op into the old op's overrides."""
    dispatch_key = getattr(torch._C.DispatchKey, key[2], None)
    if dispatch_key is None:
        return True  # a key torch does not name: nothing to compare with
    schema = overload._schema
    name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    try:
        kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key(name, dispatch_key)
    except RuntimeError:
        return False
    return _ROUTER_DEBUG_FILE in repr(kernel)


def _decomp_overrides() -> dict[object, Callable[..., Any]]:
    """One router per installed router that routes through a non-empty chain,
    derived from the C++ registry now."""
    table: dict[object, Callable[..., Any]] = {}
    live: set[GraphKey] = set()
    for key in _C.router_keys():
        handles = _C.published_chain(key)
        overload = _resolve_overload(key[0], key[1])
        if not handles or overload is None or not _router_is_the_kernel(key, overload):
            continue
        signature = _chain_signature(key, handles)
        cached = _compile_routers.get(key)
        if cached is None or cached[0] != signature:
            cached = _compile_routers[key] = (
                signature, _make_compile_router(list(handles), overload))
        table[overload] = cached[1]
        live.add(key)
    for key in set(_compile_routers) - live:
        del _compile_routers[key]
    return table


def _drop_stale_compile_routers() -> None:
    """After a teardown: a cached compile router of a chain no longer
    published holds the `_native` ops of its nodes, which would keep retired
    ones defined (see restore)."""
    live = set(_C.router_keys())
    for key, (signature, _) in list(_compile_routers.items()):
        if key not in live or _chain_signature(key, list(_C.published_chain(key))) != signature:
            del _compile_routers[key]


def _drop_cached_native_packets() -> None:
    """torch.ops caches every op object it hands out, and each holds its op,
    so a `_native` op looked up once (by a compile router, an export) would
    count as held for the life of the process. Dropping the cache is safe:
    whoever holds an object keeps it, and with it the op (still defined,
    raising once retired); the next look-up makes a fresh object."""
    namespace = torch.ops.__dict__.get("_native")
    if namespace is None:
        return
    for name in namespace._dir:
        namespace.__dict__.pop(name, None)
    namespace._dir.clear()


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


# What a copy of a registered node (dataclasses.replace, as upstream's nodes
# are dataclasses) may change: its callables. The rest names the node's graph,
# its `_native` op and what the filters match; `active` follows the filters.
_COPY_FIXED_FIELDS = ("dsl_name", "lib_symbol", "op_symbol", "dispatch_key",
                      "unconditional_override")


class _ReorderRefused(BaseException):
    """Raised from within an ordering callback to end the reordering with no
    change (the binding aborts on anything not an Exception); carries the
    error to raise."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _copy_changes(item: _OverrideNode, handle: _C.Node, where: str) -> dict[str, Any]:
    """The callables a copy of the node `handle` carries that the node does not
    (by identity), checked as a write of them would be, so that applying them
    cannot fail half-way. TypeError / ValueError naming the field otherwise."""
    for name in _COPY_FIXED_FIELDS:
        mine, theirs = getattr(item, name), getattr(handle, name)
        if mine != theirs:
            raise ValueError(f"ordering function returned a copy of node {handle.node_id} of "
                             f"{where} with {name}={mine!r} (the node has {theirs!r}); a copy "
                             "may change only cond_fn, impl_fn and try_initialize_runtime")
    changes = {}
    for name in _NodeField._CALLABLES:
        value = getattr(item, name)
        if value is _bound_field(handle, name):
            continue
        if name == "try_initialize_runtime" and value is not None and handle.unconditional_override:
            raise ValueError(f"ordering function returned a copy of node {handle.node_id} of "
                             f"{where} with a try_initialize_runtime, which an unconditional "
                             "override cannot have")
        if not (callable(value) or (name == "try_initialize_runtime" and value is None)):
            raise TypeError(f"ordering function returned a copy of node {handle.node_id} of "
                            f"{where} whose {name} is not callable: {value!r}")
        changes[name] = value
    return changes


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

    # key -> (the handles returned, [(copy, its node's handle, new callables)]).
    copies: dict[GraphKey, tuple[list, list]] = {}

    # An Exception from fn is a failed transformation (a warning, the graph
    # kept); KeyboardInterrupt, SystemExit and the like end the reordering,
    # which then changes nothing, and propagate (the binding sees to both).
    def on_handles(op_symbol: str, dispatch_key: str, handles: list) -> list:
        result = fn(op_symbol, dispatch_key, [_node_of(h) for h in handles])
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
                out.append(_live_handle(item))  # the C++ side checks it is this graph's
                continue
            node_id = item.node_id
            handle = by_id.get(node_id) if isinstance(node_id, str) else None
            if handle is None:
                raise TypeError(f"ordering function returned {item!r}, which is neither a "
                                f"registered node nor a copy of a node of {where}")
            changes = _copy_changes(item, handle, where)
            if changes:
                changed.append((item, handle, changes))
            out.append(handle)
        if changed:
            if len({id(h) for h in out}) != len(out):
                raise TypeError(f"ordering function returned a node of {where} twice")
            key = handles[0].key
            if reregister_overrides and _resolve_overload(key[0], key[1]) is None:
                # The core installs reordered graphs all or nothing; so must
                # the graphs given new callables here: end it before any change.
                raise _ReorderRefused(AttributeError(
                    f"op '{key[0]}::{key[1]}' not found; is the namespace '{key[0]}' loaded "
                    "(its library defined or imported) and the op symbol spelled with its "
                    "overload?"))
            copies[key] = (out, changed)
        return out

    try:
        _C.reorder_graphs(on_handles, "changed" if reregister_overrides else "nothing")
    except _ReorderRefused as refused:
        raise refused.error from None
    applied = []
    for key, (out, changed) in copies.items():
        current = _C.graph(key)
        if len(current) != len(out) or any(a is not b for a, b in zip(current, out)):
            # Refused; the core warned where the order changed, not where only
            # the callables did.
            if [h.node_id for h in current] == [h.node_id for h in out]:
                log.warning("Graph transformation failed for %s::%s/%s: the graph changed while "
                            "the ordering function ran. Preserving the current graph.", *key)
            continue
        for item, handle, changes in changed:
            for name, value in changes.items():
                handle = _C.replace_callable(handle, name, value)
            _rebind(item, handle)
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


def native_decomp_table(overrides_only: bool = False) -> dict[object, Callable[..., Any]]:
    """A decomposition table for ``ExportedProgram.run_decompositions`` or a
    ``torch.compile`` decomposition set: ``torch.export.default_decompositions()``
    with one router per installed override graph layered on top (or only the
    routers, with ``overrides_only``). A matching override becomes a call of
    its ``_native.<node_id>`` op."""
    if overrides_only:
        table: dict[object, Callable[..., Any]] = {}
    else:
        from torch.export import default_decompositions

        table = dict(default_decompositions())
    table.update(_decomp_overrides())
    return table


def compile_backend(kind: str = "inductor") -> Callable[..., Any]:
    """A ``torch.compile`` backend that applies the installed overrides:
    ``native_decomp_table()`` (read when each graph is compiled) threaded
    into Inductor ("inductor") or AOTAutograd without codegen ("aot_eager").

    Inductor's FX graph cache does not key on a custom decomposition table,
    so it is switched off for these compilations; otherwise a graph compiled
    before an override was installed would be served again unchanged.
    """
    if kind == "inductor":
        from torch._inductor.compile_fx import compile_fx

        def inductor_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
            return compile_fx(gm, example_inputs, decompositions=native_decomp_table(),
                              config_patches={"fx_graph_cache": False})

        return inductor_backend
    if kind == "aot_eager":
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def aot_eager_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
            def boxed(graph: torch.fx.GraphModule, _inputs: list) -> Any:
                return make_boxed_func(graph.forward)

            return aot_autograd(fw_compiler=boxed, decompositions=native_decomp_table())(
                gm, example_inputs)

        return aot_eager_backend
    raise ValueError(f"compile_backend kind must be 'inductor' or 'aot_eager', got {kind!r}")


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
    _drop_cached_native_packets()
    _C.restore(saved._native)
    _drop_stale_compile_routers()


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
    return [_node_of(h) for h in _C.graph((lib_symbol, op_symbol, dispatch_key))]


def set_empty_chain_policy(policy: str) -> None:
    """'keep_dormant' (default: a router whose chain empties stays, declining
    every call, so disabling is safe while other threads call the op) or
    'remove' (upstream's behaviour: the router is taken out)."""
    _C.set_empty_chain_policy(policy)
