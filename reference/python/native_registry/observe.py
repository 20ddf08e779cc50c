"""What a program can see of its routed calls: per-node and per-graph counts
(``stats``), a DEBUG log of routing decisions (logger
``native_registry.routing``), and per-thread disables. The counts and the
thread's scopes live in the C++ core; this module gives them Python's shape.
Reached through :mod:`native_registry.registry` (``collect_stats``,
``stats``, ``reset_stats``, ``disabled_in_thread``)."""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

from . import _C

# ---- stats -------------------------------------------------------------------


@dataclass(frozen=True)
class NodeStats:
    """One override's counts: calls its impl took (ran, or raised), calls
    its cond declined, calls whose runtime check said no after its cond said
    yes, and calls in which its cond or its impl raised."""

    node_id: str
    dsl_name: str
    lib_symbol: str
    op_symbol: str
    dispatch_key: str
    taken: int
    declined: int
    runtime_unavailable: int
    raised: int


@dataclass(frozen=True)
class GraphStats:
    """One graph's router: calls it routed (a call a tracer diverted counts
    once, when it comes back in), and of those the calls that ran the op's own
    kernel, with how many of them the coverage check covered and how many an
    impl's error fell back (impl error policy "fallback")."""

    lib_symbol: str
    op_symbol: str
    dispatch_key: str
    calls: int
    fallbacks: int
    covered: int
    fell_back_after_error: int


class RoutingStats:
    """What :func:`stats` returns: ``nodes`` (each graph's nodes in order, the
    graphs in key order) and ``graphs`` (those a router has served). ``str()``
    is a table."""

    def __init__(self, nodes: list[dict[str, Any]], graphs: list[dict[str, Any]]) -> None:
        self.nodes = tuple(NodeStats(**_flatten(entry)) for entry in nodes)
        self.graphs = tuple(GraphStats(**_flatten(entry)) for entry in graphs)

    def node(self, node_id: str) -> NodeStats:
        for entry in self.nodes:
            if entry.node_id == node_id:
                return entry
        raise KeyError(f"no override of node_id {node_id!r} in the registry's graphs")

    def graph(self, op_symbol: str, dispatch_key: str, lib_symbol: str = "aten") -> GraphStats:
        for entry in self.graphs:
            if (entry.lib_symbol, entry.op_symbol, entry.dispatch_key) == (lib_symbol, op_symbol,
                                                                           dispatch_key):
                return entry
        raise KeyError(f"no router has served {lib_symbol}::{op_symbol} at {dispatch_key!r}")

    def __repr__(self) -> str:
        return f"RoutingStats({len(self.nodes)} nodes, {len(self.graphs)} graphs)"

    def __str__(self) -> str:
        return "\n\n".join([
            _table(["node_id", "dsl", "op", "key", "taken", "declined", "runtime_unavailable",
                    "raised"],
                   [[n.node_id, n.dsl_name, f"{n.lib_symbol}::{n.op_symbol}", n.dispatch_key,
                     n.taken, n.declined, n.runtime_unavailable, n.raised] for n in self.nodes]),
            _table(["graph", "key", "calls", "fallbacks", "covered", "fell_back_after_error"],
                   [[f"{g.lib_symbol}::{g.op_symbol}", g.dispatch_key, g.calls, g.fallbacks,
                     g.covered, g.fell_back_after_error] for g in self.graphs]),
        ])


def _flatten(entry: dict[str, Any]) -> dict[str, Any]:
    lib_symbol, op_symbol, dispatch_key = entry.pop("key")
    return {**entry, "lib_symbol": lib_symbol, "op_symbol": op_symbol, "dispatch_key": dispatch_key}


def _table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def stats() -> RoutingStats:
    return RoutingStats(*_C.stats())


# ---- per-thread disables -------------------------------------------------------


class DisabledInThread(contextlib.ContextDecorator):
    """While entered, this thread's calls see the named overrides as
    disabled; other threads, the registry's filters and the dispatcher are
    untouched. Scopes nest (and may end in any order); each entry of the same
    object is its own scope, so it also works as a decorator of a recursive
    function. It must be exited on the thread that entered it."""

    def __init__(self, dsl_names: list[str], op_symbols: list[str],
                 dispatch_keys: list[str]) -> None:
        self._entries = (list(dsl_names), list(op_symbols), list(dispatch_keys))
        self._open: list[tuple[int, int]] = []  # (thread ident, token), innermost last
        self._lock = threading.Lock()

    def _recreate_cm(self) -> "DisabledInThread":
        return DisabledInThread(*self._entries)

    def __enter__(self) -> "DisabledInThread":
        token = _C.open_disabled_in_thread(*self._entries)
        with self._lock:
            self._open.append((threading.get_ident(), token))
        return self

    def __exit__(self, *exc_info: object) -> None:
        me = threading.get_ident()
        with self._lock:
            mine = [entry for entry in self._open if entry[0] == me]
            if not mine:
                raise RuntimeError(
                    "disabled_in_thread: exited on a thread that did not enter it (thread "
                    f"{me}; entered on {sorted({t for t, _ in self._open}) or 'none'})")
            self._open.remove(mine[-1])
        _C.close_disabled_in_thread(mine[-1][1])

    def __repr__(self) -> str:
        names = ("dsl_names", "op_symbols", "dispatch_keys")
        given = ", ".join(f"{n}={v!r}" for n, v in zip(names, self._entries) if v)
        return f"disabled_in_thread({given})"


# ---- the routing log -------------------------------------------------------------

routing_log = logging.getLogger("native_registry.routing")

_DECISIONS = {
    "taken": "override {node} (dsl {dsl}) takes the call",
    "fallback": "no override took the call: the op's own kernel runs",
    "covered": "the coverage check covered the call: the op's own kernel runs",
    "fell_back": "override {node} (dsl {dsl}) raised: the op's own kernel runs instead",
}


def _log_decision(kind: str, key: tuple[str, str, str], node_id: str, dsl_name: str,
                  not_logged: int) -> None:
    lib_symbol, op_symbol, dispatch_key = key
    message = f"{lib_symbol}::{op_symbol} at {dispatch_key}: " + _DECISIONS[kind].format(
        node=node_id, dsl=dsl_name)
    if not_logged:
        message += f" ({not_logged} earlier decisions at this router not logged: rate limit)"
    routing_log.debug(message, extra={"routing_decision": kind, "graph": key, "node_id": node_id})


def _follow_routing_log_level() -> None:
    """Routers pass decisions on only while the logger is enabled for DEBUG."""
    _C.set_routing_log(_log_decision if routing_log.isEnabledFor(logging.DEBUG) else None)


def _watch_logging_levels() -> None:
    # logging clears its per-logger level cache on every setLevel (of any
    # logger, the root included) and on logging.disable(): the moments the
    # routing logger's effective level can change.
    manager = logging.Logger.manager
    original = manager._clear_cache

    def clear_cache_and_follow() -> None:
        original()
        _follow_routing_log_level()

    manager._clear_cache = clear_cache_and_follow


_watch_logging_levels()
_follow_routing_log_level()

__all__ = ["NodeStats", "GraphStats", "RoutingStats", "DisabledInThread", "routing_log"]

