"""``registry.explain(op, *args, dispatch_key=None, **kwargs)``: what the
registry would do with a call, node by node, without making it.

    >>> print(registry.explain(torch.ops.aten.mul.Tensor, x, y))

The answer is computed by the C++ core (``Registry::explain``) with the code
the call path uses: the filters' enable rule, each node's cond, the coverage
check. No impl runs and no runtime is initialised; a node whose cond accepts
and that has ``try_initialize_runtime`` says the check would be asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from . import _C


@dataclass(frozen=True)
class ExplainedNode:
    """One node of the graph: what decided it for this call.

    ``verdict`` is one of "disabled", "masked", "not published", "accepted",
    "declined", "raised", "runtime check", "not reached", "native op"."""

    node_id: str
    dsl_name: str
    verdict: str
    detail: str


@dataclass(frozen=True)
class Kernel:
    """Which kernel the call would run. ``kind``: "impl" (of ``node_id``),
    "fallback" (the op's own kernel the router captured), "fallthrough"
    (the next key's kernel), "no kernel" (NotImplementedError), "no router"
    (the op's own kernel: the graph has no router), "raises" (a cond raises)."""

    kind: str
    node_id: str | None
    dsl_name: str | None
    detail: str


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found; ``str()`` is a readable table."""

    op: str
    dispatch_key: str
    why_key: str
    router: str
    coverage: str
    nodes: list[ExplainedNode]
    kernel: Kernel
    _table: str = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self._table


def _op_name(op: Any) -> tuple[str, str]:
    """("ns::name", "overload") of an OpOverload or of "ns::name[.overload]"."""
    if isinstance(op, torch._ops.OpOverload):
        return op._schema.name, op._schema.overload_name
    if isinstance(op, torch._ops.OpOverloadPacket):
        raise TypeError(f"explain needs one overload of {op._qualified_op_name}, got the packet "
                        f"{op!r}: pick one (e.g. {op!r}.default or .Tensor)")
    if isinstance(op, str):
        namespace, sep, rest = op.partition("::")
        if not sep or not namespace or not rest:
            raise ValueError(f"explain: op {op!r} is not of the form 'ns::name' or "
                             "'ns::name.overload'")
        name, _, overload = rest.partition(".")
        # "default" is Python's name for the unnamed overload.
        return f"{namespace}::{name}", "" if overload == "default" else overload
    raise TypeError(f"explain takes an op overload (torch.ops.ns.name.overload) or its name "
                    f"'ns::name.overload', got {type(op).__name__}: {op!r}")


def explain(op: Any, *args: Any, dispatch_key: str | None = None, **kwargs: Any) -> Explanation:
    """Explain a call of ``op`` with ``args``/``kwargs``: for the graph the
    call would reach (with ``dispatch_key=None``: the highest-priority key of
    the call's dispatch key set, computed from the arguments as the
    dispatcher does, that has a graph of the op here), each node in routing
    order with what decided it, and which kernel would run. The coverage
    check and the conds are asked; no impl runs, no runtime is initialised.
    For a ``_native`` op (``torch.ops._native.<node_id>.default``): its node,
    whose impl a call of it runs directly (its arguments are not needed).

    Raises:
        ValueError: no graph of the op at ``dispatch_key`` (or at any key of
            the call), an op name not of the form 'ns::name.overload', an
            unknown ``_native`` node_id.
        AttributeError: an op the dispatcher does not have.
        TypeError: ``op`` is not an op overload or a name; ``dispatch_key``
            is not a str.
        RuntimeError: the arguments do not fit the op's schema.
    """
    name, overload = _op_name(op)
    if dispatch_key is not None and not isinstance(dispatch_key, str):
        raise TypeError(f"dispatch_key must be a str or None, got {type(dispatch_key).__name__}: "
                        f"{dispatch_key!r}")
    if dispatch_key == "":
        raise ValueError("dispatch_key must be a dispatch key name or None, got ''")
    found = _C.explain(name, overload, args, kwargs, dispatch_key or "")
    kind, node_id, dsl_name, detail = found["kernel"]
    return Explanation(
        op=found["op"],
        dispatch_key=found["graph"][2],
        why_key=found["why_key"],
        router=found["router"],
        coverage=found["coverage"],
        nodes=[ExplainedNode(*row) for row in found["nodes"]],
        kernel=Kernel(kind, node_id, dsl_name, detail),
        _table=found["table"],
    )
