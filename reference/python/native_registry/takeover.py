"""Taking over the registry torch already ran, so that one registry routes.

By the time :func:`upstream_compat.install_as_torch_native` runs, ``import
torch`` has run torch's own registrars (``torch/_native/ops/``) into the stock
``torch._native.registry`` and installed them: routers at the ops' backend
keys, ``_native::<node_id>`` ops with their kernels and fake kernels. Left
there, those routers keep routing while torch's front ends control the
reference. :func:`take_over` moves them, as one transaction:

1. **Plan** (changes nothing): read the stock graphs, filters and, for each
   router the stock registry has in the dispatcher, the chain that router
   really routes (read from the router itself: a graph reordered or grown
   since its install routes by the old chain), and where it sits against a
   reference router at the same key. From that, each reference graph's new
   order, so that every call answers as before: the stock chain before the
   reference's where the stock router was on top, after it where it was
   beneath. A stock state the reference cannot reproduce exactly (a node
   that routes although the filters disable it, one that does not although
   they leave it on, a reference graph that would start routing calls the
   stock router answered) refuses the takeover with :class:`TakeoverRefused`
   before anything changes.
2. **Register** the nodes into the reference (a refusal by the reference
   restores its snapshot: nothing else has changed yet), set the graphs'
   order and the stock filters. A stock unconditional override that the
   stock registry had disabled (torch 2.13's filters disable them) goes in
   as an ordinary override, so that it stays off.
3. **Switch** the dispatcher: the stock routers leave, each by its own
   library handle, and the affected graphs are installed on a fresh capture.
   The stock ``_native`` ops stay defined with their kernels: programs
   exported or compiled with the stock decomposition table, and calls in
   flight, call them by name, and each runs the impl it recorded.
4. **Forward** the stock module: its names name the reference's, and every
   one of its functions, including objects bound before the takeover
   (``from torch._native.registry import deregister_op_overrides``) and the
   function inside a wrapper a program made of one (``functools.wraps``), now
   runs the reference's function of that name with the stock signature; those
   without a counterpart (``_install_aten_override``, ...) refuse, naming
   themselves. Its filter-state object reads and writes the reference's
   filters.

Serialised by :data:`LOCK` (upstream_compat holds it around the whole
switch). Written for torch 2.13's registry (graphs keyed ``(op, key)``,
routers in ``_aten_override_libs``) and upstream main's (jkzhang7/pytorch @
6be35214: keyed ``(lib, op, key)``, routers in ``_override_libs``). A second
call finds the module already taken over and does nothing.
"""

from __future__ import annotations

import gc
import threading
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import _C
from . import registry as _reference

# Set on a module once taken over: the module that took it over.
TAKEN_OVER = "_native_registry_taken_over_by"
# The stock module's global through which its forwarded functions find their target.
FORWARDS = "_native_registry_forwards"
# The stock module's own libraries, kept alive under this name once its
# names are forwarded.
KEPT = "_native_registry_kept_libraries"
# One takeover at a time in the process (install_as_torch_native holds it).
LOCK = threading.RLock()


class TakeoverRefused(RuntimeError):
    """The stock registry holds a state the reference cannot take over without
    changing what a call answers; nothing was changed."""


@dataclass(frozen=True)
class StockNode:
    dsl_name: str
    lib_symbol: str
    op_symbol: str
    dispatch_key: str
    node_id: str
    cond: Callable[..., bool] | None
    impl: Callable[..., Any]
    try_initialize_runtime: Callable[[], bool] | None
    unconditional_override: bool


@dataclass(frozen=True)
class StockState:
    graphs: dict[tuple[str, str, str], list[StockNode]]
    installed: list[tuple[str, str, str]]
    filters: tuple[list[str], list[str], list[str]]
    # Per installed key, the node ids its router routes, in order (None:
    # the router's chain could not be read; its nodes' `active` stands for it).
    routed: dict[tuple[str, str, str], list[str] | None]
    # Installed keys where the stock router sits above another kernel's
    # router at the same key (the dispatcher runs it first).
    on_top: frozenset[tuple[str, str, str]]
    # Each node's `active` as the stock registry last set it (at its graph's install).
    actives: dict[str, bool]
    # Installed keys whose op, without the stock router, decomposes there.
    composite_implicit: frozenset[tuple[str, str, str]]


def _full_key(key: tuple) -> tuple[str, str, str]:
    return ("aten", *key) if len(key) == 2 else tuple(key)


def _router_libraries(stock: types.ModuleType) -> dict:
    """The stock registry's router libraries by graph key: main's
    `_override_libs`, torch 2.13's `_aten_override_libs`."""
    libs = getattr(stock, "_override_libs", None)
    if libs is None:
        libs = getattr(stock, "_aten_override_libs", {})
    return libs


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    out = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += [const, *_nested_codes(const)]
    return out


def _closure_values(fn: Any, depth: int = 3) -> list[Any]:
    """What a function's closure cells hold, and theirs, a few levels down."""
    values = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        values.append(value)
        if depth > 1 and isinstance(value, types.FunctionType):
            values += _closure_values(value, depth - 1)
    return values


def _routed_chains(stock: types.ModuleType, owner: dict[str, tuple]) -> dict[tuple, list]:
    """The chain each live stock router routes, by graph key, read from the
    router functions themselves: a closure holding a list of (cond, node id)
    pairs, built at install. Keys with two candidate routers map to None. A
    chain keeps the ids of nodes since dropped from their graph (a reorder
    without reinstalling), so that plan() refuses it."""
    install = getattr(stock, "_register_overrides_from_graph", None)
    codes = set(_nested_codes(install.__code__)) if isinstance(install, types.FunctionType) else set()
    chains: dict[tuple, list | None] = {}
    for obj in gc.get_objects():
        if not (type(obj) is types.FunctionType and obj.__code__ in codes
                and obj.__code__.co_name == "eager_router"):
            continue
        for value in _closure_values(obj):
            if not (isinstance(value, list) and all(
                    isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], str) for p in value)):
                continue
            ids = [p[1] for p in value]
            keys = {owner[i] for i in ids if i in owner}
            if len(keys) == 1:
                key = keys.pop()
                chains[key] = ids if key not in chains else None
            break
    return chains


def read(stock: types.ModuleType) -> StockState:
    """What the stock registry holds, in the reference's terms."""
    always_true = getattr(stock, "_always_true", None)
    graphs: dict[tuple[str, str, str], list[StockNode]] = {}
    actives: dict[str, bool] = {}
    for key, nodes in stock._graphs.items():
        full = _full_key(key)
        graphs[full] = []
        for node in nodes:
            graphs[full].append(StockNode(
                dsl_name=node.dsl_name,
                lib_symbol=getattr(node, "lib_symbol", full[0]),
                op_symbol=node.op_symbol,
                dispatch_key=node.dispatch_key,
                node_id=str(node.node_id),
                # register_op_override put _always_true in place of a None cond
                # of an unconditional override; give it back as None.
                cond=None if node.unconditional_override and node.cond_fn is always_true
                else node.cond_fn,
                impl=node.impl_fn,
                try_initialize_runtime=getattr(node, "try_initialize_runtime", None),
                unconditional_override=bool(node.unconditional_override),
            ))
            actives[str(node.node_id)] = bool(node.active)
    installed = [_full_key(key) for key in _router_libraries(stock)]
    owner = {n.node_id: key for key, nodes in graphs.items() for n in nodes}
    chains = _routed_chains(stock, owner)
    routed: dict[tuple, list[str] | None] = {}
    for key in installed:
        chain = chains.get(key)
        routed[key] = chain if chain is not None else [
            n.node_id for n in graphs.get(key, ()) if actives[n.node_id]]
    state = stock._filter_state
    filters = (sorted(state._dsl_names), sorted(state._op_symbols), sorted(state._dispatch_keys))
    sources = {key: _kernel_sources(key) for key in installed}  # one dump per key
    on_top = frozenset(key for key in installed if _stock_on_top(stock, sources[key]))
    composite = frozenset(key for key in installed
                          if _left_composite_implicit(stock, key, sources[key]))
    return StockState(graphs, installed, filters, routed, on_top, actives, composite)


def _filtered(node: StockNode, filters: tuple) -> bool:
    dsl, ops, keys = (set(f) for f in filters)
    return node.dsl_name in dsl or node.op_symbol in ops or node.dispatch_key in keys


def _kernel_sources(key: tuple) -> list[str]:
    """The dispatcher's kernels at `key` of the op, top first, as the lines
    _dispatch_dump gives (each names the file that registered it)."""
    lib, op, dispatch_key = key
    return [line for line in torch._C._dispatch_dump(f"{lib}::{op}").splitlines()
            if line.startswith(f"{dispatch_key}:") or line.startswith(f"{dispatch_key} (inactive):")]


def _left_composite_implicit(stock: types.ModuleType, key: tuple, sources: list[str]) -> bool:
    """Whether the op's kernel at `key`, once the stock router is out, is its
    CompositeImplicitAutograd one, where the reference refuses to install
    (see validation.composite-implicit-refused-at-install): the stock router
    is the only kernel at the key, and the op decomposes."""
    name = f"{key[0]}::{key[1]}"
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    source = getattr(stock, "__file__", None) or "\0"
    return (has(name, "CompositeImplicitAutograd") and not has(name, "CompositeExplicitAutograd")
            and all(source in line for line in sources))


def _stock_on_top(stock: types.ModuleType, sources: list[str]) -> bool:
    """Whether the kernel the dispatcher runs at a key (whose kernel
    `sources` are given, top first) is the stock router (registered from the
    stock module's file) rather than one beneath it."""
    source = getattr(stock, "__file__", None)
    return bool(source and sources) and source in sources[0]


@dataclass(frozen=True)
class Plan:
    """What the takeover will do; computed before anything changes."""
    nodes: list[tuple[StockNode, bool]]          # (node, registered as an ordinary override)
    orders: dict[tuple, list[str]]               # key -> node ids in the reference graph's order
    install: list[tuple]                         # keys to install once the stock routers are out
    filters: tuple[list[str], list[str], list[str]]


def plan(state: StockState, compat: types.ModuleType) -> Plan:
    """The takeover of `state`, or TakeoverRefused naming what cannot be
    taken over without changing a call's answer."""
    filters = tuple(compat._naming(entries) for entries in state.filters)
    for key in state.installed:
        if compat._resolve_overload(key[0], key[1]) is None:
            raise TakeoverRefused(f"cannot take over the router at {key}: {key[0]}::{key[1]} "
                                  "does not resolve")
        if key in state.composite_implicit:
            raise TakeoverRefused(
                f"cannot take over the router at {key}: without it {key[0]}::{key[1]} runs its "
                f"CompositeImplicitAutograd kernel at {key[2]}, where the reference installs no "
                "router (it would take the op out of autograd)")
    # The stock filters become the reference's: one that disables a node the
    # reference routes now would change that op's answers (the reference
    # exempts unconditional nodes from filters, as upstream main does).
    for key in _C.router_keys():
        for node in _C.published_chain(key):
            if _filtered(node, filters) and not node.unconditional_override:
                raise TakeoverRefused(
                    f"the stock registry's filters disable {node.node_id} ({node.dsl_name}), which "
                    f"the reference routes at {key}: taking them over would change that op's "
                    "answers; re-enable it in the stock registry, or disable it in the "
                    "reference, first")
    converted: set[str] = set()
    orders: dict[tuple, list[str]] = {}
    install: list[tuple] = []
    for key, nodes in state.graphs.items():
        routed = state.routed.get(key)
        ref_ids = [h.node_id for h in _C.graph(key)]
        ref_router = _C.router_state(key) != "absent"
        if routed is None:
            # No stock router: its nodes route nowhere now, and must not start to
            # where the reference already routes this key.
            if ref_router and any(not _filtered(n, filters) or n.unconditional_override
                                  for n in nodes):
                raise TakeoverRefused(
                    f"the stock registry's graph {key} was never installed while the reference "
                    "routes that key: taking it over would route calls to it; install it in the "
                    "stock registry or leave it empty first")
            # Registration appends its nodes after the reference's: no order to set.
            converted.update(n.node_id for n in nodes  # disabled there: stays so, as below
                             if n.unconditional_override and not state.actives[n.node_id]
                             and _filtered(n, filters))
            continue
        by_id = {n.node_id: n for n in nodes}
        unknown = [i for i in routed if i not in by_id]
        if unknown:
            raise TakeoverRefused(f"the stock router at {key} routes nodes no longer in its graph "
                                  f"({unknown}); reinstall the graph first")
        for node in nodes:
            on = node.node_id in routed
            off_by_filters = _filtered(node, filters)
            if on and off_by_filters:
                raise TakeoverRefused(
                    f"the stock router at {key} routes {node.node_id} ({node.dsl_name}) although "
                    "the filters disable it; reinstall the graph in the stock registry first")
            if not on and not off_by_filters:
                raise TakeoverRefused(
                    f"the stock router at {key} does not route {node.node_id} ({node.dsl_name}) "
                    "although the filters leave it on (registered or reordered since the graph "
                    "was installed); reinstall the graph in the stock registry first")
            if not on and node.unconditional_override:
                converted.add(node.node_id)  # disabled there; stays so as an ordinary node
        # The graph's own order where it agrees with the router's; else the router's.
        graph_order = [n.node_id for n in nodes if n.node_id in routed]
        stock_ids = ([n.node_id for n in nodes] if graph_order == routed else
                     routed + [n.node_id for n in nodes if n.node_id not in routed])
        if ref_router and ref_ids:
            orders[key] = stock_ids + ref_ids if key in state.on_top else ref_ids + stock_ids
        else:
            if ref_ids and not ref_router:
                raise TakeoverRefused(
                    f"the reference holds a graph at {key} it never installed, while the stock "
                    "registry routes that key: taking over would route calls to it")
            orders[key] = stock_ids
        install.append(key)
    nodes = [(n, n.node_id in converted) for ns in state.graphs.values() for n in ns]
    return Plan(nodes, orders, install, filters)


def take_over(stock: types.ModuleType, compat: types.ModuleType) -> None:
    """Move the stock registry's overrides into the reference (see the
    module's docstring); nothing where the module was taken over before. The
    caller holds LOCK (install_as_torch_native does), so that a second caller
    finds the module taken over, and never passes the reference's module."""
    if getattr(stock, TAKEN_OVER, None) is not None:
        return
    state = read(stock)
    the_plan = plan(state, compat)
    _register(the_plan, compat)
    remove_routers(stock)
    for key in the_plan.install:
        compat._install_graph(key)
    forward(stock, compat)


def _register(the_plan: Plan, compat: types.ModuleType) -> None:
    """Register, order and filter in the reference; all or nothing."""
    saved = _reference.snapshot()
    try:
        ids: dict[str, Any] = {}
        for node, ordinary in the_plan.nodes:
            compat.register_op_override(
                node.dsl_name, node.lib_symbol, node.op_symbol, node.dispatch_key,
                compat._always_true if ordinary and node.cond is None else node.cond,
                node.impl, try_initialize_runtime=node.try_initialize_runtime,
                unconditional_override=node.unconditional_override and not ordinary)
            # Registration appends: the graph's last node is the one just made.
            ids[node.node_id] = _C.graph(
                (node.lib_symbol, node.op_symbol, node.dispatch_key))[-1]
        for key, order in the_plan.orders.items():
            current = {h.node_id: h for h in _C.graph(key)}
            handles = [ids[i] if i in ids else current[i] for i in order]
            _C.replace_graph(key, handles)
        dsl, ops, keys = the_plan.filters
        if dsl or ops or keys:
            # To the core directly: upstream's deregister would also (re)install
            # every graph they name.
            _reference.deregister_op_overrides(
                disable_dsl_names=dsl, disable_op_symbols=ops, disable_dispatch_keys=keys)
    except BaseException:
        _reference.restore(saved)
        raise


def remove_routers(stock: types.ModuleType) -> None:
    """Destroy every router the stock registry put into the dispatcher, by its
    own library handle. Its `_native` ops stay (see the module's docstring)."""
    routers = _router_libraries(stock)
    for lib in list(routers.values()):
        lib._destroy()
    routers.clear()
    getattr(stock, "_native_decomp_overrides", {}).clear()


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


def _redirect(fn: types.FunctionType, target: Callable[..., Any]) -> None:
    """Make the function object `fn` call `target`: code that bound `fn`
    before the takeover reaches `target` too, with `fn`'s name. A closure's
    code cannot change: a wrapper a program made of a stock function
    (functools.wraps) reaches `target` through the function it wraps."""
    while fn.__closure__ is not None:
        inner = getattr(fn, "__wrapped__", None)
        if not isinstance(inner, types.FunctionType) or inner.__module__ != fn.__module__:
            return
        fn = inner
    stock_globals = fn.__globals__
    forwards = stock_globals.setdefault(FORWARDS, {})
    forwards[fn.__name__] = target
    source = (f"def {fn.__name__}(*args, **kwargs):\n"
              f"    return {FORWARDS}[{fn.__name__!r}](*args, **kwargs)\n")
    scratch: dict[str, Any] = {}
    exec(compile(source, fn.__code__.co_filename, "exec"), scratch)  # noqa: S102
    fn.__code__ = scratch[fn.__name__].__code__
    fn.__defaults__ = fn.__kwdefaults__ = None


def forward(stock: types.ModuleType, compat: types.ModuleType) -> None:
    """Every name of the stock module that the reference's module also has
    now names the reference's object: functions, the graph and filter views,
    the node class; every stock function object (also one bound elsewhere)
    runs the reference's function of its name, or refuses with a RuntimeError
    naming itself, except the STATELESS ones. The stock filter-state object
    (which read() found with its three sets) reads and writes the reference's
    filters."""
    old_filters = stock._filter_state
    # The libraries that define the stock `_native` ops and hold their
    # kernels: a torch.library.Library undoes its registrations when
    # collected, so they are kept with the module they came from.
    setattr(stock, KEPT, {name: getattr(stock, name) for name in ("_libs", "_def_libs")
                          if hasattr(stock, name)})
    for name, value in list(vars(stock).items()):
        if name.startswith("__") or name in (TAKEN_OVER, FORWARDS, KEPT):
            continue
        own_function = (isinstance(value, types.FunctionType)
                        and value.__module__ == stock.__name__)
        if hasattr(compat, name):
            if own_function and callable(getattr(compat, name)):
                _redirect(value, getattr(compat, name))
            setattr(stock, name, getattr(compat, name))
        elif own_function and name not in STATELESS:
            refusal = _refusal(stock.__name__, name)
            _redirect(value, refusal)
            setattr(stock, name, refusal)
    for field in ("_dsl_names", "_op_symbols", "_dispatch_keys"):
        object.__setattr__(old_filters, field, getattr(compat._filter_state, field))
    setattr(stock, TAKEN_OVER, compat)
