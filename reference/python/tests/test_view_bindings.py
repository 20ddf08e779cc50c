"""Node views and what they are bound to, where generated mutants of
nodes.py, upstream_compat.py and registry.py found it unpinned (session 26):
a refused graph assignment of upstream_compat's ``_graphs`` leaves the
registered nodes it named bound (views, and a copy an ordering function
bound), and the graph's nodes read the graph's callables afterwards; a restore with a view held and another node unviewed;
a reorder that gives a disabled graph new callables leaves its dormant
router dormant."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from native_registry import nodes, upstream_compat as compat

MUL = ("aten", "mul.Tensor", "CPU")
ADD = ("aten", "add.Tensor", "CPU")


def accept(*args, **kwargs) -> bool:
    return True


def fill(value):
    return lambda a, *rest, **kwargs: torch.full_like(a, value)


SEVEN, NINE, ELEVEN = fill(7.0), fill(9.0), fill(11.0)


def test_a_refused_assignment_of_registered_nodes_leaves_them_bound(reg):
    reg.register_op_override("mine", *MUL, accept, SEVEN)
    reg.register_op_override("other", *ADD, accept, NINE)
    mine, (other,) = reg.graph(*MUL)[0], reg.graph(*ADD)
    with pytest.raises(Exception):
        compat._graphs[MUL] = [mine, other]  # add's node in mul's graph: refused
    assert nodes.is_bound(mine) and nodes.is_bound(other)
    assert [n.node_id for n in reg.graph(*MUL)] == [mine.node_id]
    # Still views: the filters show in `active`, and fixed fields stay fixed.
    reg.deregister_op_overrides(disable_dsl_names="mine")
    assert mine.active is False and other.active is True
    with pytest.raises(AttributeError):
        mine.dsl_name = "renamed"


def test_a_refused_assignment_leaves_a_bound_copy_bound(reg):
    # A copy an ordering function put in its node's place is bound to that
    # node beside the node's view; naming it in a refused assignment leaves
    # it so.
    reg.register_op_override("mine", *MUL, accept, SEVEN)
    reg.register_op_override("other", *ADD, accept, NINE)
    view, other = reg.graph(*MUL)[0], reg.graph(*ADD)[0]
    copies = []

    def put_copy(op_symbol, dispatch_key, graph):
        if op_symbol != "mul.Tensor":
            return graph
        copies.append(dataclasses.replace(graph[0], impl_fn=ELEVEN))
        return list(copies)

    reg.reorder_graphs_from_user_function(put_copy)
    (copy,) = copies
    assert copy is not view and nodes.is_bound(copy)
    with pytest.raises(Exception):
        compat._graphs[MUL] = [copy, other]
    assert nodes.is_bound(copy)
    reg.deregister_op_overrides(disable_dsl_names="mine")
    assert copy.active is False and view.active is False
    copy.impl_fn = SEVEN  # a write through the copy reaches the node
    assert view.impl_fn is SEVEN and reg.graph(*MUL)[0].impl_fn is SEVEN


def test_after_a_refused_assignment_with_a_copy_the_graph_reads_its_own_callables(reg):
    reg.register_op_override("mine", *MUL, accept, SEVEN)
    reg.register_op_override("other", *ADD, accept, NINE)
    copy = dataclasses.replace(reg.graph(*MUL)[0], impl_fn=ELEVEN)  # no view of mul's node kept
    gc.collect()
    other = reg.graph(*ADD)[0]
    with pytest.raises(Exception):
        compat._graphs[MUL] = [copy, other]
    (node,) = reg.graph(*MUL)
    assert node.impl_fn is SEVEN
    assert compat._graphs[MUL][0].impl_fn is SEVEN
    reg.register_all_overrides()
    assert torch.equal(torch.ones(2) * torch.ones(2), torch.full((2,), 7.0))


def test_a_restore_with_one_view_held_and_another_node_unviewed(reg):
    reg.register_op_override("held", *MUL, accept, SEVEN)
    reg.register_op_override("unviewed", *MUL, accept, NINE)
    saved = reg.snapshot()
    held = reg.graph(*MUL)[0]  # the other node's view goes with the list
    gc.collect()
    reg.register_op_override("later", *MUL, accept, ELEVEN)
    reg.restore(saved)
    assert [n.dsl_name for n in reg.graph(*MUL)] == ["held", "unviewed"]
    assert held.impl_fn is SEVEN


def test_new_callables_for_a_disabled_graph_leave_its_dormant_router_dormant(reg):
    reg.register_op_override("off", *MUL, accept, SEVEN)
    reg.register_all_overrides()
    reg.deregister_op_overrides(disable_dsl_names="off")
    assert reg.router_state(*MUL) == "dormant"

    def new_impl(op_symbol, dispatch_key, graph):
        return [dataclasses.replace(n, impl_fn=NINE) for n in graph]

    reg.reorder_graphs_from_user_function(new_impl, reregister_overrides=True)
    assert reg.graph(*MUL)[0].impl_fn is NINE
    assert reg.router_state(*MUL) == "dormant"  # published in place, as an order change is
    reg.reenable_op_overrides(enable_dsl_names="off")
    assert torch.equal(torch.ones(2) * torch.ones(2), torch.full((2,), 9.0))


def test_a_view_follows_a_callable_written_by_the_core_api_at_the_next_graph_query(reg):
    # C++ code in the same process writes a node's callable through the core's
    # API (here its binding, _C.replace_callable), which knows nothing of the
    # Python view held meanwhile. The graph now holds a new core node under the
    # same node_id; the next query of the graph must hand back the held view,
    # bound to that node, not the view reading the replaced node's callables.
    # (Every write the Python API makes rebinds at once; this is the only
    # path where the query's rebinding is what keeps the view current.)
    reg.register_op_override("mine", *MUL, accept, SEVEN)
    view = reg.graph(*MUL)[0]
    handle = nodes.live_handle(view)
    written = reg._C.replace_callable(handle, "impl_fn", NINE)
    assert written is not handle and written.node_id == view.node_id
    assert reg.graph(*MUL)[0] is view
    assert view.impl_fn is NINE, "the held view reads the callable the core replaced"
    assert compat._graphs[MUL][0].impl_fn is NINE
    reg.register_all_overrides()
    assert torch.equal(torch.mul(torch.ones(2), torch.ones(2)), torch.full((2,), 9.0))
