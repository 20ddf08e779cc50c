"""Compile and export routing: the decomposition table.

Each installed router that routes through a non-empty chain yields a
decomposition-style router (a cond that raises counts as no match; no match
returns NotImplemented), derived from the chain the core publishes now;
``native_decomp_table()`` merges them over torch.export's default
decompositions, and ``compile_backend()`` threads the table into
``torch.compile``. A cache of routers per published chain keeps the table's
objects stable between reads; it is never a record (the core is).

Owns: the table, its routers and their cache, the OpOverload an op name
resolves to. May not touch: the core's state (it only reads it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import _C
from .nodes import GraphKey, bound_field

# What the package's other modules may use (_resolve_overload keeps upstream's name).
__all__ = ["_reaches_key", "_resolve_overload", "compile_backend", "decomp_overrides",
           "drop_cached_native_packets", "drop_stale_compile_routers", "native_decomp_table"]

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


def _reaches_key(overload: torch._ops.OpOverload, dispatch_key: str, args: tuple, kwargs: dict) -> bool:
    """Whether a call of `overload` would reach `dispatch_key` in eager: some
    tensor argument carries it (a CPU call never reaches a CUDA router), or,
    for an op that takes no tensor (a factory such as aten::ones), the key its
    dtype, layout and device select, as the op's BackendSelect kernel does
    (a meta or CUDA factory call never reaches a CPU router). The
    decomposition table is keyed by op only, so its router must check this
    itself (the registry admits only keys torch names). A call that passes
    none of the tensors its op takes is not judged here."""
    key = getattr(torch._C.DispatchKey, dispatch_key)
    tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    if tensors:
        return any(torch._C._dispatch_keys(t).has(key) for t in tensors)
    schema = overload._schema
    selected = _C.tensorless_backend(schema.name, schema.overload_name, tuple(args), dict(kwargs))
    return selected is None or selected == dispatch_key


def _compile_cond(handle: _C.Node, overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """The cond of a published node as the compile router calls it. A C++
    predicate is evaluated on the boxed stack the call makes, keywords and
    defaults in their schema places, as the eager router evaluates it; a
    Python cond gets the call's own arguments, as in eager."""
    cond = bound_field(handle, "cond_fn")
    if not isinstance(cond, _C.predicates.Predicate):
        return cond
    name, overload_name = overload._schema.name, overload._schema.overload_name

    def predicate_cond(*args: Any, **kwargs: Any) -> bool:
        return cond.evaluate_on_call(name, overload_name, args, kwargs)

    return predicate_cond


def _covered(op_symbol: str, dispatch_key: str, overload: torch._ops.OpOverload,
             args: tuple, kwargs: dict) -> bool:
    """Whether the registry's coverage check (read now, at trace time) says a
    kernel compiled into the op's own serves this call, as the eager router
    asks it: once, before any cond; an exception counts as not covered."""
    check = _C.coverage_check()
    if check is None or not _C.coverage_checks_enabled():
        return False
    try:
        if isinstance(check, _C.predicates.Predicate):
            schema = overload._schema
            return bool(check.evaluate_on_call(schema.name, schema.overload_name, args, kwargs))
        return bool(check(op_symbol, dispatch_key, args, kwargs))
    except Exception:
        return False


def _make_compile_router(chain: list[_C.Node], overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """First match wins, as in eager, after the coverage check; a cond that raises counts as no match
    (some predicates are undefined on fake tensors); no match, or a call that
    would not reach the graph's dispatch key, returns NotImplemented so the
    default decomposition or lowering applies. The runtime is not initialised
    here (this runs while tracing): the `_native` op asks it at run time.
    Built from the chain the eager router routes through now, so both take
    the same callables (a node given a new one since takes it at its next
    install in both)."""
    entries = [(handle, _compile_cond(handle, overload),
                getattr(torch.ops._native, handle.node_id).default) for handle in chain]
    op_symbol, dispatch_key = chain[0].op_symbol, chain[0].dispatch_key

    def compile_router(*args: Any, **kwargs: Any) -> Any:
        if not _reaches_key(overload, dispatch_key, args, kwargs):
            return NotImplemented
        if _covered(op_symbol, dispatch_key, overload, args, kwargs):
            return NotImplemented
        for handle, cond, native_op in entries:
            if _C.is_disabled_in_this_thread(handle):  # as the eager router, at trace time
                continue
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


def decomp_overrides() -> dict[object, Callable[..., Any]]:
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


def drop_stale_compile_routers() -> None:
    """After a teardown: a cached compile router of a chain no longer
    published holds the `_native` ops of its nodes, which would keep retired
    ones defined (see restore)."""
    live = set(_C.router_keys())
    for key, (signature, _) in list(_compile_routers.items()):
        if key not in live or _chain_signature(key, list(_C.published_chain(key))) != signature:
            del _compile_routers[key]


def drop_cached_native_packets() -> None:
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
    table.update(decomp_overrides())
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
