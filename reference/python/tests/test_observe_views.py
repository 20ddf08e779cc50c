"""The Python view of routing stats and per-thread scopes that goes beyond
what an adapter reads (the conformance suites read ``stats().nodes`` and
``.graphs`` and enter scopes with ``with``): lookups by node and graph, the
printed table, the records' immutability, a scope used as a decorator, and
the reprs."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

A = torch.tensor([2.0, 3.0])
SQUARES = torch.tensor([4.0, 9.0])  # A * A by the op's own kernel
KEY = ("aten", "mul.Tensor", "CPU")
NODE_HEADER = ["node_id", "dsl", "op", "key", "taken", "declined", "runtime_unavailable", "raised"]
GRAPH_HEADER = ["graph", "key", "calls", "fallbacks", "covered", "fell_back_after_error"]


@pytest.fixture
def counted(reg):
    """Two overrides of mul at CPU, the first declining, the second taking;
    one call counted."""
    reg.register_op_override("dsl_decline", *KEY, lambda a, b: False, lambda a, b: a)
    reg.register_op_override("dsl_take", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()
    previous = reg.collect_stats(True)
    reg.reset_stats()
    A * A
    yield reg.stats(), reg.graph(*KEY)
    reg.collect_stats(previous)


def test_node_lookup_gives_that_nodes_counts_and_an_unknown_id_is_a_key_error(counted):
    stats, (declining, taking) = counted
    assert stats.node(taking.node_id).taken == 1 and stats.node(taking.node_id).dsl_name == "dsl_take"
    assert stats.node(declining.node_id).declined == 1 and stats.node(declining.node_id).taken == 0
    with pytest.raises(KeyError, match="no override of node_id 'no_such_node'"):
        stats.node("no_such_node")


def test_graph_lookup_defaults_to_aten_and_an_unserved_graph_is_a_key_error(counted):
    stats, _ = counted
    graph = stats.graph("mul.Tensor", "CPU")
    assert (graph.lib_symbol, graph.op_symbol, graph.dispatch_key, graph.calls) == ("aten", "mul.Tensor", "CPU", 1)
    assert stats.graph("mul.Tensor", "CPU", lib_symbol="aten") == graph
    with pytest.raises(KeyError, match=r"no router has served aten::never_routed\.Tensor at 'CPU'"):
        stats.graph("never_routed.Tensor", "CPU")
    with pytest.raises(KeyError, match=r"no router has served other::mul\.Tensor at 'CPU'"):
        stats.graph("mul.Tensor", "CPU", lib_symbol="other")


def test_the_records_are_immutable(counted):
    stats, _ = counted
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.nodes[0].taken = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.graphs[0].calls = 5


def test_repr_counts_nodes_and_graphs(counted):
    stats, _ = counted
    # (Graphs other tests' routers served stay listed, their counts reset.)
    assert repr(stats) == f"RoutingStats(2 nodes, {len(stats.graphs)} graphs)"
    assert any(g.op_symbol == "mul.Tensor" for g in stats.graphs)


def _columns(line: str) -> list[int]:
    """Where each cell of a table line starts (cells are separated by at least two spaces)."""
    return [m.start() for m in re.finditer(r"(?:^|(?<=  ))[^ ]", line)]


def test_printed_stats_are_two_aligned_tables(counted):
    stats, (declining, taking) = counted
    node_table, graph_table = str(stats).split("\n\n")
    for table, header, rows in (
            (node_table, NODE_HEADER,
             [[declining.node_id, "dsl_decline", "aten::mul.Tensor", "CPU", "0", "1", "0", "0"],
              [taking.node_id, "dsl_take", "aten::mul.Tensor", "CPU", "1", "0", "0", "0"]]),
            (graph_table, GRAPH_HEADER, [["aten::mul.Tensor", "CPU", "1", "0", "0", "0"]])):
        lines = table.split("\n")
        assert lines[0].split() == header
        # Other tests' routers may have served graphs too: those rows count nothing.
        printed = [line.split() for line in lines[2:]]
        assert [row for row in printed if row[:2] in [r[:2] for r in rows]] == rows
        assert all(row[2:] == ["0"] * len(row[2:]) for row in printed if row not in rows)
        rows = printed
        # The rule under the header: one run of dashes per column, as wide as its widest cell.
        widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
        assert [len(dashes) for dashes in lines[1].split("  ")] == widths
        # Every line's cells start where the header's do; no line ends in spaces.
        assert all(_columns(line) == _columns(lines[1]) for line in lines[:1] + lines[2:])
        assert all(line == line.rstrip() for line in lines)


def test_a_scope_as_a_decorator_disables_each_call_afresh(reg):
    reg.register_op_override("dsl_a", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()
    scope = reg.disabled_in_thread(dsl_names="dsl_a")

    @scope
    def multiply(depth):
        inner = multiply(depth - 1) if depth else None
        return A * A, inner

    for _ in range(2):
        (outer, (inner, _)) = multiply(1)
        assert torch.equal(outer, SQUARES) and torch.equal(inner, SQUARES)
    assert torch.equal(A * A, torch.full((2,), 7.0)), "the decorated calls left a scope open"


def test_entering_gives_the_scope_and_its_repr_names_what_was_given(reg):
    scope = reg.disabled_in_thread(dsl_names="dsl_a", dispatch_keys=["CPU", "CUDA"])
    with scope as entered:
        assert entered is scope
    assert repr(scope) == "disabled_in_thread(dsl_names=['dsl_a'], dispatch_keys=['CPU', 'CUDA'])"
    assert repr(reg.disabled_in_thread(op_symbols="mul.Tensor")) == "disabled_in_thread(op_symbols=['mul.Tensor'])"
