"""upstream_compat is a view of the core: what one side writes, the other
reads, and the containers upstream keeps as caches are derived."""

from __future__ import annotations

import dataclasses

import pytest
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


def test_a_refused_graphs_assignment_registers_nothing(reg):
    """Assigning a list the core refuses (a node of another key, here after a
    hand-made one the assignment registered first) raises and leaves the
    registry as it was: the hand-made node is unregistered and unbound."""
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    other = ("aten", "add.Tensor", "CPU")
    reg.register_op_override("dsl_c", *other, _never, _ninety_nine)
    (foreign,) = compat._graphs[other]
    hand_made = compat._OverrideNode("dsl_b", *KEY, lambda *a, **k: True, _ninety_nine, "mine")
    before = [n.node_id for n in reg.graph(*KEY)]
    with pytest.raises(ValueError, match="belongs to"):
        compat._graphs[KEY] = [hand_made, foreign]
    assert [n.node_id for n in reg.graph(*KEY)] == before
    assert hand_made._handle is None and hand_made.node_id == "mine"
    assert "dsl_b" not in compat._dsl_name_to_lib_graph
    _C.check_invariants()


def test_a_refused_graphs_assignment_gives_back_a_copys_callables(reg):
    """A copy in a refused assignment had already given its node the copy's
    impl: the refusal gives the node (and its view) the impl it had."""
    import dataclasses
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    other = ("aten", "add.Tensor", "CPU")
    reg.register_op_override("dsl_c", *other, _never, _ninety_nine)
    (node,), (foreign,) = compat._graphs[KEY], compat._graphs[other]
    copy = dataclasses.replace(node, impl_fn=lambda a, b: torch.full_like(a, 7.0))
    hand_made = compat._OverrideNode("dsl_b", *KEY, lambda *a, **k: True, _ninety_nine, "mine")
    with pytest.raises(ValueError, match="belongs to"):
        compat._graphs[KEY] = [copy, hand_made, foreign]
    assert node.impl_fn is _ninety_nine and reg.graph(*KEY)[0].impl_fn is _ninety_nine
    compat._register_overrides_from_graph(*KEY, compat._graphs[KEY])
    assert torch.mul(torch.ones(2), torch.ones(2)).tolist() == [99.0, 99.0]
    _C.check_invariants()


def test_a_refused_graphs_assignment_leaves_its_registered_nodes_bound(reg):
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    other = ("aten", "add.Tensor", "CPU")
    reg.register_op_override("dsl_c", *other, _never, _ninety_nine)
    (node,), (foreign,) = compat._graphs[KEY], compat._graphs[other]
    with pytest.raises(ValueError, match="belongs to"):
        compat._graphs[KEY] = [node, foreign]
    assert node.impl_fn is _ninety_nine and node.node_id == reg.graph(*KEY)[0].node_id


def test_a_copy_assigned_to_graphs_gives_its_node_the_copys_callables(reg):
    """Upstream's tests rebuild graphs from dataclasses.replace copies and
    install them: the copy stands for its node (same id), whose impl routes."""
    import dataclasses
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    (node,) = compat._graphs[KEY]
    copy = dataclasses.replace(node, impl_fn=lambda a, b: torch.full_like(a, 7.0))
    compat._graphs[KEY] = [copy]
    compat._register_overrides_from_graph(*KEY, compat._graphs[KEY])
    assert [n.node_id for n in reg.graph(*KEY)] == [node.node_id]
    assert node.impl_fn is copy.impl_fn  # the view shows the node's new impl
    assert torch.mul(torch.ones(2), torch.ones(2)).tolist() == [7.0, 7.0]
    _C.check_invariants()


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


def test_filter_changes_publish_chains_and_leave_the_dispatcher_alone(reg):
    """Upstream reinstalls every graph a filter change names; here an
    installed router keeps its place in the dispatcher (other threads may be
    calling the op) and takes the new chain; only a graph without a router
    is installed."""
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    compat._register_all_overrides()
    router = _C.router_id(KEY)
    compat.deregister_op_overrides(disable_dsl_names="dsl_a")
    assert KEY not in compat._override_libs  # nothing routes
    assert reg.router_state(*KEY) == "dormant" and _C.router_id(KEY) == router
    assert torch.mul(torch.ones(2), torch.ones(2)).tolist() == [1.0, 1.0]
    compat.reenable_op_overrides(enable_dsl_names="dsl_a")
    assert reg.router_state(*KEY) == "active" and _C.router_id(KEY) == router
    assert torch.mul(torch.ones(2), torch.ones(2)).tolist() == [99.0, 99.0]
    # A graph never installed is installed by the re-enable that names it.
    _C.uninstall_graph(KEY)
    compat.reenable_op_overrides(enable_dsl_names="dsl_a")
    assert reg.router_state(*KEY) == "active" and _C.router_id(KEY) != router


def test_a_filter_change_publishes_a_graph_reordered_without_reregister(reg):
    """Upstream re-registers every graph the filter state names, so a graph
    reordered without reregister_overrides routes in its new order once a
    filter change names it (here through a dsl disabled before, on a change
    of another dsl): the router in place takes the reordered chain. Found by
    the lifecycle model (issue 27, seed 2026120301)."""
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    reg.register_op_override("dsl_b", *KEY, _never, _ninety_nine)
    compat._register_all_overrides()
    compat.deregister_op_overrides(disable_dsl_names="dsl_b")
    router = _C.router_id(KEY)
    reg.reorder_graphs_from_user_function(
        lambda op, key, g: [dataclasses.replace(n, cond_fn=_never) for n in g])
    assert torch.mul(torch.ones(2), torch.ones(2)).tolist() == [99.0, 99.0]  # not yet
    compat.deregister_op_overrides(disable_dsl_names="dsl_unrelated")
    assert torch.mul(torch.ones(2), torch.ones(2)).tolist() == [1.0, 1.0]
    assert _C.router_id(KEY) == router


def test_a_filter_change_refuses_an_install_mode_that_is_no_bool_and_changes_nothing(reg):
    """The core call upstream's front end makes (one call: the filter and the
    graphs it names) refuses a mode that is not a bool and leaves the filter
    alone; install_named=True installs every graph the filter names."""
    reg.register_op_override("dsl_a", *KEY, lambda *a, **k: True, _ninety_nine)
    for change in (_C.deregister_op_overrides, _C.reenable_op_overrides):
        with pytest.raises(TypeError):
            change(["dsl_a"], [], [], install_named="everything")
    assert _C.filters() == ([], [], [])
    _C.deregister_op_overrides(["dsl_a"], [], [], install_named=True)
    assert _C.router_state(KEY) == "absent"  # installed, its chain empty: no router
    _C.reenable_op_overrides(["dsl_a"], [], [], install_named=True)
    assert _C.router_state(KEY) == "active"  # the graph never installed before routes
    assert torch.mul(torch.ones(2), torch.ones(2)).tolist() == [99.0, 99.0]


def test_install_as_torch_native_on_a_torch_without_it():
    """On a PyTorch without torch._native and torch.backends.python_native
    (2.11), install_as_torch_native serves the registry and the variants in
    a bare torch._native package and raises nothing; the front end stays
    absent."""
    import subprocess
    import sys

    from fixtures.python.torch_fixtures import WITHOUT_TORCH_NATIVE

    script = WITHOUT_TORCH_NATIVE + """
from native_registry import upstream_compat, variants
print(sorted(upstream_compat.host_torch_surfaces()))
package = upstream_compat.install_as_torch_native()
import torch._native.registry as reg
from torch._native import variants as served
print(reg is upstream_compat, served is variants, package is torch._native)
reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True,
                         lambda a, b: torch.full_like(a, 7.0))
reg._register_all_overrides()
print(torch.mul(torch.ones(2), torch.ones(2)).tolist())
try:
    import torch.backends.python_native
except ImportError:
    print("no front end")
upstream_compat.install_as_torch_native()  # again: nothing changes
print(len(reg._graphs[("aten", "mul.Tensor", "CPU")]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "True True True", "[7.0, 7.0]", "no front end", "1"]


def test_a_stock_module_put_back_after_its_takeover_is_not_taken_over_again():
    """A program that saved torch's stock registry and puts it back into
    sys.modules, then asks for the takeover again: the stock module is
    marked taken over, so its overrides are not registered a second time
    and its (emptied) state is not read again."""
    import subprocess
    import sys

    script = """
import sys, torch
import torch._native.registry as stock
from native_registry import upstream_compat
stock.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True,
                           lambda a, b: torch.full_like(a, 7.0))
stock._register_all_overrides()
upstream_compat.install_as_torch_native()
sys.modules["torch._native.registry"] = stock  # put back by the program
upstream_compat.install_as_torch_native()
print(len(upstream_compat._graphs[("aten", "mul.Tensor", "CPU")]),
      torch.mul(torch.ones(2), torch.ones(2)).tolist())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "1 [7.0, 7.0]"


def test_the_takeover_reads_a_routers_chain_only_from_a_list_of_cond_and_node_id_pairs():
    """takeover._routed_chains reads each live stock router's chain from its
    closure: the first list of (cond, node id) pairs, not a list of other
    things that looks alike (two-letter strings, triples), a few levels down
    only (a closure that holds itself ends the walk), and only a chain whose
    ids all belong to one graph of the stock registry."""
    import types

    from native_registry import takeover

    def _register_overrides_from_graph(chain):
        a_strings, b_triples = ["ab", "cd"], [(None, "n1", 0)]

        def c_recursive():
            return c_recursive

        def eager_router(*args):
            return a_strings, b_triples, c_recursive, chain
        return eager_router

    stock = types.ModuleType("synthetic_stock")
    stock._register_overrides_from_graph = _register_overrides_from_graph
    mul, add = ("aten", "mul.Tensor", "CPU"), ("aten", "add.Tensor", "CPU")
    owner = {"n1": mul, "n2": mul, "n3": add}
    routers = [_register_overrides_from_graph([(None, "n1"), (None, "n2")]),
               _register_overrides_from_graph([(None, "n2"), (None, "n3")]),  # two graphs' ids
               _register_overrides_from_graph([(None, "unknown")])]
    assert takeover._routed_chains(stock, owner) == {mul: ["n1", "n2"]}
    # A stock registry whose installer is not a plain function (or has none):
    # no router is read, nothing raises.
    for installer in (None, len):
        stock._register_overrides_from_graph = installer
        assert takeover._routed_chains(stock, owner) == {}
    del stock._register_overrides_from_graph
    assert takeover._routed_chains(stock, owner) == {}
    del routers
