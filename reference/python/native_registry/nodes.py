"""Node views: the override nodes users see, each a view of one C++ node.

A node made by hand is a plain record with upstream main's fields (a
dataclass, as upstream's); a node the core holds is read from the core on
every access, so this module keeps no state of the registry: ``_views`` only
caches one view object per C++ node while anything holds it. A copy of a
node (``dataclasses.replace``) stands for the node of its node_id, and
``copy_changes`` says which callables it brings.

Owns: the node class and its fields, views of core nodes, copies. May not
touch: the dispatcher, filters, installation (registry.py's API does).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields as dataclass_fields
from typing import Any

from . import _C

# What the package's other modules may use. _OverrideNode and _always_true
# keep upstream's private names: code written against upstream imports them.
__all__ = [
    "GraphKey", "UserOrderingFn", "_OverrideNode", "_always_true",
    "adopt", "bindings", "bound_field", "copy_changes", "follow_graphs", "is_bound", "live_handle", "node_of",
    "rebind", "restore_bindings", "unbind",
]

GraphKey = tuple[str, str, str]  # (lib_symbol, op_symbol, dispatch_key)


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
    2.13 did (no lib_symbol: its registry overrode aten ops only). With four
    or more positionals, 2.13's form has its cond_fn, a callable, in the
    fourth place, where main has the dispatch key. With n < 4, main's form
    needs its field n (lib_symbol for none) by keyword, which 2.13's form,
    one field behind, gave by position or does not have."""
    if len(args) > 3:
        torch_2_13 = callable(args[3])
    else:
        torch_2_13 = _NODE_FIELDS[max(len(args), 1)] not in kwargs
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
        return bound_field(live_handle(node), self.name)

    def __set__(self, node: _OverrideNode, value: Any) -> None:
        if node._handle is None:
            object.__setattr__(node, self.slot, value)
        elif self.name in self._CALLABLES:
            rebind(node, _C.replace_callable(live_handle(node), self.name, value))
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


def bound_field(handle: _C.Node, name: str) -> Any:
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


def live_handle(node: _OverrideNode) -> _C.Node:
    """The C++ node a bound object stands for now. Two objects may be bound to
    one node (its view, and a copy an ordering function put in its place);
    the cached view follows every callable write, so read through it."""
    handle = node._handle
    view = _views.get(handle.node_id)
    return handle if view is None or view._handle is None else view._handle


def rebind(node: _OverrideNode, handle: _C.Node) -> None:
    """Bind `node` to `handle`, the node now in the graph of that node_id
    (new callables); the cached view follows, or `node` becomes it."""
    node._handle = handle
    view = _views.get(handle.node_id)
    if view is None:
        _views[handle.node_id] = node
    else:
        view._handle = handle


def is_bound(node: _OverrideNode) -> bool:
    """Whether `node` stands for a node the core holds (else: made by hand)."""
    return node._handle is not None


def adopt(node: _OverrideNode, handle: _C.Node) -> None:
    """Bind a node made by hand to `handle`, the core node just registered for
    it: it is that node's view, and reads its node_id (the core's) from it
    from now on; the node_id it was made with stays in its slot for `unbind`."""
    node._handle = handle
    _views[handle.node_id] = node


def unbind(node: _OverrideNode, node_id: Any) -> None:
    """Undo `adopt`: `node` is made by hand again, with the node_id it had."""
    node._handle = None
    node.node_id = node_id


def bindings() -> dict[str, _C.Node]:
    """Each cached view's core node now, for `restore_bindings` to undo a
    change that failed half-way."""
    return {node_id: view._handle for node_id, view in list(_views.items())}


def restore_bindings(saved: dict[str, _C.Node]) -> None:
    """Give each view still cached the core node it had in `saved`."""
    for node_id, handle in saved.items():
        view = _views.get(node_id)
        if view is not None:
            view._handle = handle


def follow_graphs() -> None:
    """Bind each cached view to the node its graph holds now under its id:
    after a restore, which may undo a callable written since the snapshot, a
    view held across it must not read the undone callable. A view whose node
    left the graphs keeps the node it had."""
    if _views:
        restore_bindings({handle.node_id: handle for key in _C.graph_keys() for handle in _C.graph(key)})


def node_of(handle: _C.Node) -> _OverrideNode:
    """The node object users see for a C++ node, registered from Python or C++.
    Its fields are read from the C++ node whenever they are read."""
    node = _views.get(handle.node_id)
    if node is None:
        node = _OverrideNode.__new__(_OverrideNode)
        node._handle = handle
        _views[handle.node_id] = node
    else:
        # The graph's node of this id. Python's writes and restores rebind
        # the view themselves; a write through the core's API (C++ code in
        # this process) replaced the node without it.
        node._handle = handle
    return node


# What a copy of a registered node (dataclasses.replace, as upstream's nodes
# are dataclasses) may change: its callables. The rest names the node's graph,
# its `_native` op and what the filters match; `active` follows the filters.
_COPY_FIXED_FIELDS = ("dsl_name", "lib_symbol", "op_symbol", "dispatch_key",
                      "unconditional_override")


def copy_changes(item: _OverrideNode, handle: _C.Node, where: str) -> dict[str, Any]:
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
        if value is bound_field(handle, name):
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
