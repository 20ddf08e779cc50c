"""The reference's answer to issue 27, item 6, beyond what the conformance
suite can ask of every implementation: a copy of a node that an ordering
function returns gives the C++ node its callables (never refused), the node's
view and the copy both show them, and the copy becomes bound to the node."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from fixtures.python.torch_fixtures import mul
from native_registry import _C

KEY = ("aten", "mul.Tensor", "CPU")


def accept(*a, **k):
    return True


def fill(value):
    return lambda a, *rest: torch.full_like(a, value)


def copying(kept: list, **changes):
    """An ordering function returning copies of its graph's nodes with
    `changes`; the copies are appended to `kept`."""
    def copies(op_symbol, dispatch_key, graph):
        kept.extend(dataclasses.replace(n, **changes) for n in graph)
        return list(kept)
    return copies


def test_a_copys_callables_become_the_nodes_and_route(reg, caplog):
    seven, nine = fill(7.0), fill(9.0)
    reg.register_op_override("dsl_a", *KEY, accept, seven)
    reg.register_all_overrides()
    (view,) = reg.graph(*KEY)
    kept = []
    copies = copying(kept, impl_fn=nine)

    with caplog.at_level(logging.WARNING, logger="native_registry.registry"):
        reg.reorder_graphs_from_user_function(copies, reregister_overrides=True)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    (copy,) = kept
    # One record: the C++ node's; the view held before and the copy read it.
    assert _C.graph(KEY)[0].impl_fn is nine
    assert view.impl_fn is nine and copy.impl_fn is nine
    assert reg.graph(*KEY)[0] is view
    assert copy.node_id == view.node_id
    assert torch.equal(mul(), torch.full((2,), 9.0))
    _C.check_invariants()


def test_the_bound_copy_and_the_view_stay_one_node(reg):
    """A write through either object reaches the C++ node, and the other
    object reads it: neither holds a node the graph no longer has."""
    seven, eight, nine = fill(7.0), fill(8.0), fill(9.0)
    reg.register_op_override("dsl_a", *KEY, accept, seven)
    reg.register_all_overrides()
    (view,) = reg.graph(*KEY)
    kept = []
    copies = copying(kept, impl_fn=nine)

    reg.reorder_graphs_from_user_function(copies)
    (copy,) = kept
    copy.impl_fn = eight            # the copy is bound: a write reaches the graph
    assert view.impl_fn is eight
    view.impl_fn = seven            # and back through the view
    assert copy.impl_fn is seven
    reg.register_all_overrides()
    assert torch.equal(mul(), torch.full((2,), 7.0))
    _C.check_invariants()


def test_a_copy_changes_nothing_until_installed_without_reregister(reg):
    seven, nine = fill(7.0), fill(9.0)
    reg.register_op_override("dsl_a", *KEY, accept, seven)
    reg.register_all_overrides()
    reg.reorder_graphs_from_user_function(
        lambda op, key, graph: [dataclasses.replace(n, impl_fn=nine) for n in graph])
    assert reg.graph(*KEY)[0].impl_fn is nine
    assert torch.equal(mul(), torch.full((2,), 7.0)), "the router took the copy before an install"
    reg.register_all_overrides()
    assert torch.equal(mul(), torch.full((2,), 9.0))


def test_a_copy_of_a_predicate_node_keeps_its_predicate_routing(reg):
    """A copy reads a C++ predicate as a new Python object each time; taking
    it again gives the node an equal predicate, not a Python cond."""
    from native_registry import predicates as P

    nine = fill(9.0)
    reg.register_op_override("dsl_a", *KEY, P.dtype_in(torch.float16), fill(7.0))
    reg.register_all_overrides()
    reg.reorder_graphs_from_user_function(
        lambda op, key, graph: [dataclasses.replace(n, impl_fn=nine) for n in graph],
        reregister_overrides=True)
    half = torch.ones(2, dtype=torch.float16)
    assert torch.equal(half * half, torch.full((2,), 9.0, dtype=torch.float16))
    assert torch.equal(mul(), torch.tensor([8.0, 15.0]))  # float32 declines
    assert isinstance(_C.graph(KEY)[0].cond_fn, _C.predicates.Predicate)


def test_the_decomposition_table_skips_a_router_another_kernel_shadows(reg):
    """The check behind dropping redefined targets: a router is in the table
    only while it is the op's kernel at its key."""
    reg.register_op_override("dsl_a", *KEY, accept, fill(7.0))
    reg.register_all_overrides()
    op = torch.ops.aten.mul.Tensor
    assert op in reg.native_decomp_table(overrides_only=True)
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("mul.Tensor", lambda a, b: torch.full_like(a, 3.0), "CPU")
        assert torch.equal(mul(), torch.full((2,), 3.0))
        assert op not in reg.native_decomp_table(overrides_only=True)
    finally:
        lib._destroy()
    assert op in reg.native_decomp_table(overrides_only=True)


def test_copies_of_a_graph_whose_op_is_gone_refuse_a_reinstalling_reorder_unchanged(reg):
    """With reregister_overrides, copies with new callables of a graph whose
    op no longer resolves (its library destroyed since registration) end the
    reordering before any change: AttributeError naming the op, the nodes
    keep their callables."""
    lib = torch.library.Library("nr_copies_gone", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    reg.allow_namespace("nr_copies_gone")
    seven, nine = fill(7.0), fill(9.0)
    reg.register_op_override("dsl_a", "nr_copies_gone", "twice", "CPU", accept, seven)
    lib._destroy()
    with pytest.raises(AttributeError, match="op 'nr_copies_gone::twice' not found"):
        reg.reorder_graphs_from_user_function(copying([], impl_fn=nine), reregister_overrides=True)
    assert _C.graph(("nr_copies_gone", "twice", "CPU"))[0].impl_fn is seven


def test_copies_of_a_gone_ops_graph_its_filters_disable_reinstall_without_the_op(reg):
    """As above, but a filter disables every node of the graph: installing it
    needs no router, so no op, and the reordering succeeds (the core's rule
    for an empty enabled chain); the nodes take the copies' callables.
    Found by the lifecycle run of 2026-12-07 (a reorder through the
    taken-over module)."""
    lib = torch.library.Library("nr_copies_off", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    reg.allow_namespace("nr_copies_off")
    seven, nine = fill(7.0), fill(9.0)
    reg.register_op_override("dsl_a", "nr_copies_off", "twice", "CPU", accept, seven)
    reg.deregister_op_overrides(disable_dsl_names="dsl_a")
    lib._destroy()
    reg.reorder_graphs_from_user_function(copying([], impl_fn=nine), reregister_overrides=True)
    assert _C.graph(("nr_copies_off", "twice", "CPU"))[0].impl_fn is nine


def test_an_emptied_graph_meets_the_ordering_function_without_a_failure(reg, caplog):
    """A graph emptied through the core (_C.replace_graph with no nodes) is
    still handed to the ordering function; returning it as it is fails
    nothing."""
    reg.register_op_override("dsl_a", *KEY, accept, fill(7.0))
    _C.replace_graph(KEY, [])
    seen = []
    with caplog.at_level(logging.WARNING, logger="native_registry.registry"):
        reg.reorder_graphs_from_user_function(lambda op, key, graph: seen.append(len(graph)) or graph)
    assert seen == [0] and not caplog.records, [r.getMessage() for r in caplog.records]


def test_a_result_holding_a_copy_and_its_node_again_is_refused_unchanged(reg, caplog):
    """An ordering function's result with a copy (new callables) and the
    same node once more is refused as a whole, by the core's check that
    names the node: the graph keeps its order and its node its callables."""
    seven, nine = fill(7.0), fill(9.0)
    reg.register_op_override("dsl_a", *KEY, accept, seven)
    reg.register_all_overrides()

    def copy_and_again(op_symbol, dispatch_key, graph):
        return [dataclasses.replace(graph[0], impl_fn=nine), graph[0]]

    with caplog.at_level(logging.WARNING, logger="native_registry.registry"):
        reg.reorder_graphs_from_user_function(copy_and_again, reregister_overrides=True)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "Graph transformation failed" in message and "appears twice" in message
    assert _C.graph(KEY)[0].impl_fn is seven and len(_C.graph(KEY)) == 1
    assert torch.equal(mul(), torch.full((2,), 7.0))
