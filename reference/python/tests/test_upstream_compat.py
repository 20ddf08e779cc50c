"""upstream_compat is a view of the core: what one side writes, the other
reads, and the containers upstream keeps as caches are derived."""

from __future__ import annotations

import torch

from native_registry import _C
from native_registry import upstream_compat as compat

KEY = ("aten", "mul.Tensor", "CPU")


def _never(*args, **kwargs):
    return False


def _ninety_nine(a, b):
    return torch.full_like(a, 99.0)


def test_graphs_read_and_write_the_core(reg):
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    (node,) = compat._graphs[KEY]
    assert node is reg.graph(*KEY)[0]  # one object per core node
    assert compat._dsl_name_to_lib_graph["dsl_a"] == [KEY]
    assert compat.get_dsl_operations("dsl_a") == ["mul.Tensor"]

    hand_made = compat._OverrideNode("dsl_b", *KEY, lambda *a, **k: True, _ninety_nine, "mine")
    compat._graphs[KEY] = [hand_made, node]
    assert [n.dsl_name for n in reg.graph(*KEY)] == ["dsl_b", "dsl_a"]
    assert compat._graphs[KEY][0] is hand_made
    assert hand_made.node_id == _C.graph(KEY)[0].node_id  # the core names its op

    compat._graphs[KEY] = []  # stays, empty, as in upstream's dict
    assert KEY in compat._graphs and compat._graphs[KEY] == []
    del compat._graphs[KEY]
    assert KEY not in compat._graphs and KEY not in _C.graph_keys()
    assert "dsl_a" not in compat._dsl_name_to_lib_graph
    _C.check_invariants()


def test_filter_sets_are_the_core_filters(reg):
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    reg.register_all_overrides()
    a, b = torch.tensor([2.0]), torch.tensor([3.0])
    assert torch.equal(torch.mul(a, b), torch.tensor([99.0]))

    compat._filter_state._dsl_names.add("dsl_a")
    assert _C.filters()[0] == ["dsl_a"] and not reg.graph(*KEY)[0].active
    assert torch.equal(torch.mul(a, b), torch.tensor([6.0]))
    reg.deregister_op_overrides(disable_op_symbols="mul.Tensor")
    assert "mul.Tensor" in compat._filter_state._op_symbols
    compat._filter_state._op_symbols.clear()
    compat._filter_state._dsl_names.clear()
    assert _C.filters() == ([], [], [])
    assert torch.equal(torch.mul(a, b), torch.tensor([99.0]))


def test_override_libs_and_decomp_overrides_are_derived(reg):
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    assert KEY not in compat._override_libs
    compat._register_overrides_from_graph(*KEY, compat._graphs[KEY])
    handle = compat._override_libs[KEY]
    assert compat._override_libs[KEY] is handle  # the same router, the same handle
    assert torch.ops.aten.mul.Tensor in compat._native_decomp_overrides

    # Writes to derived containers change nothing: they are read from the core.
    compat._override_libs.clear()
    compat._native_decomp_overrides.clear()
    assert compat._override_libs[KEY] is handle
    assert torch.ops.aten.mul.Tensor in compat._native_decomp_overrides

    # Reinstalling replaces the router: the old handle then destroys nothing.
    compat._register_overrides_from_graph(*KEY, compat._graphs[KEY])
    replacement = compat._override_libs[KEY]
    assert replacement is not handle
    handle._destroy()
    assert reg.router_state(*KEY) == "active"
    replacement._destroy()
    assert reg.router_state(*KEY) == "absent" and KEY not in compat._override_libs
    assert len(compat._graphs[KEY]) == 1  # destroying a router keeps the graph
    assert torch.ops.aten.mul.Tensor not in compat._native_decomp_overrides


def test_deregister_removes_an_emptied_router_as_upstream_does(reg):
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    compat._register_all_overrides()
    compat.deregister_op_overrides(disable_dsl_names="dsl_a")
    assert reg.router_state(*KEY) == "absent" and KEY not in compat._override_libs
    compat.reenable_op_overrides(enable_dsl_names="dsl_a")
    assert reg.router_state(*KEY) == "active"
