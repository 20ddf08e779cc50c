"""torch 2.13's ``torch._native.registry`` surface as upstream_compat serves
it: what the mapping views and filter sets return and refuse, how they
print, what the module's functions route, and what install_as_torch_native
serves in torch._native and torch.backends.python_native."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from native_registry import _C
from native_registry import upstream_compat as compat

KEY = ("aten", "mul.Tensor", "CPU")
ADD = ("aten", "add.Tensor", "CPU")
UNKNOWN = ("aten", "sub.Tensor", "CPU")


def _always(*args, **kwargs):
    return True


def _never(*args, **kwargs):
    return False


def _ninety_nine(a, b):
    return torch.full_like(a, 99.0)


def _seven(a, b):
    return torch.full_like(a, 7.0)


def _mul():
    return torch.mul(torch.ones(2), torch.ones(2)).tolist()


def test_upstreams_module_level_names_are_served():
    """Names torch's DSL helpers and registrars import from the module."""
    assert compat._DISALLOWED_DISPATCH_KEYS >= {"Meta", "CompositeImplicitAutograd"}
    assert compat._always_true(torch.ones(1), key="x") is True
    assert compat._OpRuntimeInitFn is not None
    assert compat.UserOrderingFn is not None and compat.GraphKey is not None


def test_reading_or_deleting_a_graph_never_registered_raises_key_error(reg):
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    with pytest.raises(KeyError) as err:
        compat._graphs[UNKNOWN]
    assert err.value.args == (UNKNOWN,)
    assert compat._graphs.get(UNKNOWN, "none") == "none"
    with pytest.raises(KeyError) as err:
        del compat._graphs[UNKNOWN]
    assert err.value.args == (UNKNOWN,)
    assert compat._graphs.pop(UNKNOWN, "none") == "none"
    assert list(compat._graphs) == [KEY] and len(compat._graphs[KEY]) == 1


def test_graphs_len_and_repr(reg):
    assert len(compat._graphs) == 0
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    reg.register_op_override("dsl_b", *ADD, _never, _ninety_nine)
    assert len(compat._graphs) == 2 == len(dict(compat._graphs))
    text = repr(compat._graphs)
    assert text.startswith("_GraphsView({") and repr(KEY) in text and repr(ADD) in text


def test_a_generator_assigned_to_graphs_sets_the_graph(reg):
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    reg.register_op_override("dsl_b", *KEY, _never, _ninety_nine)
    a, b = compat._graphs[KEY]
    compat._graphs[KEY] = (n for n in (b, a))
    assert [n.dsl_name for n in reg.graph(*KEY)] == ["dsl_b", "dsl_a"]
    hand_made = compat._OverrideNode("dsl_c", *KEY, _always, _seven, "mine")
    compat._graphs[KEY] = (n for n in (hand_made, a, b))
    assert [n.dsl_name for n in reg.graph(*KEY)] == ["dsl_c", "dsl_a", "dsl_b"]


def test_a_refused_assignment_of_registered_nodes_keeps_them_the_graphs_objects(reg):
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    reg.register_op_override("dsl_c", *ADD, _never, _ninety_nine)
    compat._register_all_overrides()
    router = _C.router_id(KEY)
    (node,), (foreign,) = compat._graphs[KEY], compat._graphs[ADD]
    with pytest.raises(ValueError, match="belongs to"):
        compat._graphs[KEY] = [node, foreign]
    assert compat._graphs[KEY][0] is node and compat._graphs[ADD][0] is foreign
    assert _C.router_id(KEY) == router


def test_graphs_saved_cleared_and_restored_keep_their_nodes(reg):
    """Upstream's tests save the graphs, clear them and assign them back: the
    restored graph holds the very nodes it had, ids and impls included."""
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    reg.register_op_override("dsl_b", *KEY, _never, _seven)
    saved = {key: list(graph) for key, graph in compat._graphs.items()}
    ids = [n.node_id for n in saved[KEY]]
    compat._graphs.clear()
    assert KEY not in compat._graphs
    for key, graph in saved.items():
        compat._graphs[key] = graph
    assert [n.node_id for n in compat._graphs[KEY]] == ids
    assert [n.node_id for n in _C.graph(KEY)] == ids
    assert compat._graphs[KEY][0] is saved[KEY][0]
    compat._register_all_overrides()
    assert _mul() == [99.0, 99.0]


def test_a_hand_made_node_off_the_allowlist_is_refused_by_name(reg):
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    stray = compat._OverrideNode("dsl_b", "prims", "mul", "CPU", _always, _seven, "mine")
    with pytest.raises(ValueError, match=r"lib_symbol='prims' is not overridable; allowed: "
                                         r"\['aten', 'torch_nn'\]"):
        compat._graphs[("prims", "mul", "CPU")] = [stray]
    assert list(compat._graphs) == [KEY]
    with pytest.raises(ValueError, match="lib_symbol='prims' is not overridable"):
        compat.register_op_override("dsl_b", "prims", "mul", "CPU", _always, _seven)
    assert list(compat._graphs) == [KEY]


def test_derived_indexes_len_and_repr(reg):
    reg.register_op_override("dsl_a", *KEY, _never, _ninety_nine)
    reg.register_op_override("dsl_b", *ADD, _never, _ninety_nine)
    reg.register_op_override("dsl_b", *KEY, _never, _ninety_nine)
    assert len(compat._dsl_name_to_lib_graph) == 2
    assert len(compat._op_symbol_to_lib_graph) == 2
    assert len(compat._dispatch_key_to_lib_graph) == 1
    assert compat._dsl_name_to_lib_graph["dsl_b"] == sorted([ADD, KEY])
    text = repr(compat._dsl_name_to_lib_graph)
    assert text.startswith("_Derived({") and "'dsl_a'" in text and "'dsl_b'" in text


def test_router_library_repr_names_its_key_and_router(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    compat._register_all_overrides()
    handle = compat._override_libs[KEY]
    assert repr(handle) == f"_RouterLibrary({KEY!r}, router {_C.router_id(KEY)})"
    assert compat._aten_override_libs[KEY] is handle  # torch 2.13's name


@pytest.mark.parametrize("disabled", ["dsl_mul", "dsl_add"])
def test_override_libs_lists_every_active_router_past_a_dormant_one(reg, disabled):
    reg.register_op_override("dsl_mul", *KEY, _always, _ninety_nine)
    reg.register_op_override("dsl_add", *ADD, _always, _ninety_nine)
    compat._register_all_overrides()
    compat.deregister_op_overrides(disable_dsl_names=disabled)
    active = {"dsl_mul": ADD, "dsl_add": KEY}[disabled]
    assert list(compat._override_libs) == [active]
    assert len(compat._override_libs) == 1


def test_filter_sets_name_their_own_filter_list(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    fs = compat._filter_state
    fs._op_symbols.add("mul.Tensor")
    assert _C.filters() == ([], ["mul.Tensor"], [])
    assert "mul.Tensor" in fs._op_symbols and "mul.Tensor" not in fs._dsl_names
    assert "mul.Tensor" not in fs._dispatch_keys
    fs._op_symbols.discard("mul.Tensor")
    fs._dispatch_keys.add("CUDA")
    assert _C.filters() == ([], [], ["CUDA"])
    assert "CUDA" in fs._dispatch_keys and "CUDA" not in fs._op_symbols
    fs._dispatch_keys.discard("CUDA")
    reg.deregister_op_overrides(disable_dsl_names="dsl_x", disable_op_symbols="add.Tensor",
                                disable_dispatch_keys="XPU")
    assert list(fs._dsl_names) == ["dsl_x"]
    assert list(fs._op_symbols) == ["add.Tensor"]
    assert list(fs._dispatch_keys) == ["XPU"]


def test_filter_set_update_len_and_repr(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    names = compat._filter_state._dsl_names
    assert len(names) == 0 and repr(names) == "set()"
    names.update(["dsl_a", "dsl_b"])
    assert _C.filters()[0] == ["dsl_a", "dsl_b"]
    assert len(names) == 2
    assert repr(names) in ("{'dsl_a', 'dsl_b'}", "{'dsl_b', 'dsl_a'}")
    names.clear()
    assert len(names) == 0


def test_check_enabled_reports_the_nodes_state(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    (node,) = compat._graphs[KEY]
    assert compat._filter_state.check_enabled(node) is True
    compat.deregister_op_overrides(disable_dsl_names="dsl_a")
    assert compat._filter_state.check_enabled(node) is False


def test_register_op_override_counts_node_ids(reg):
    before = compat._node_id_counter
    compat.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    compat.register_op_override("dsl_b", *KEY, _always, _ninety_nine)
    assert compat._node_id_counter == before + 2
    assert [n.dsl_name for n in compat._graphs[KEY]] == ["dsl_a", "dsl_b"]


def test_register_overrides_from_graph_takes_only_the_registrys_filter_state(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    with pytest.raises(NotImplementedError, match="filter_state"):
        compat._register_overrides_from_graph(*KEY, compat._graphs[KEY],
                                              filter_state=object())
    assert reg.router_state(*KEY) == "absent"
    compat._register_overrides_from_graph(*KEY, compat._graphs[KEY],
                                          filter_state=compat._filter_state)
    assert _mul() == [99.0, 99.0]


def test_register_overrides_from_graph_sets_the_graph_it_is_given(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    reg.register_op_override("dsl_b", *KEY, _always, _seven)
    a, b = compat._graphs[KEY]
    compat._register_overrides_from_graph(*KEY, iter([b, a]))
    assert [n.dsl_name for n in reg.graph(*KEY)] == ["dsl_b", "dsl_a"]
    assert _mul() == [7.0, 7.0]


def test_destroy_aten_override_takes_the_router_out_and_keeps_the_graph(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    compat.register_all_overrides()
    assert _mul() == [99.0, 99.0]
    compat._destroy_aten_override("mul.Tensor", "CPU")
    assert reg.router_state(*KEY) == "absent" and _mul() == [1.0, 1.0]
    assert len(compat._graphs[KEY]) == 1
    compat._destroy_aten_override("mul.Tensor", "CPU")  # none left: nothing happens
    compat._destroy_aten_override("add.Tensor", "CPU")
    assert reg.router_state(*KEY) == "absent"


def test_native_decomp_table_defaults_to_the_whole_table(reg):
    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    compat.register_all_overrides()
    whole, only = compat.native_decomp_table(), compat.native_decomp_table(overrides_only=True)
    assert isinstance(whole, dict) and set(only) == {torch.ops.aten.mul.Tensor}
    assert set(whole) > set(only)


def test_unconditional_masked_routes_to_stock_only_while_open(reg):
    reg.register_op_override("dsl_u", *KEY, None, _seven, unconditional_override=True)
    compat._register_all_overrides()
    compat.deregister_op_overrides(disable_dsl_names="dsl_u")
    assert _mul() == [7.0, 7.0]  # unconditional: a disable leaves it
    with compat._unconditional_masked():
        assert _mul() == [1.0, 1.0]
    assert _mul() == [7.0, 7.0]
    compat.reenable_op_overrides(enable_dsl_names="dsl_u")
    assert _mul() == [7.0, 7.0]


def test_unconditional_masked_publishes_a_graph_reordered_without_reregister(reg):
    """Entering and leaving the hatch rebuilds the routers of unconditional
    overrides, as upstream re-registers them: a graph reordered since its
    install routes in its new order from then on, through the same router."""
    import dataclasses

    def cond_of(cond):
        return lambda op, key, graph: [
            dataclasses.replace(n, cond_fn=cond) if n.dsl_name == "dsl_a" else n for n in graph]

    reg.register_op_override("dsl_a", *KEY, _always, _ninety_nine)
    reg.register_op_override("dsl_u", *KEY, None, _seven, unconditional_override=True)
    compat._register_all_overrides()
    compat.deregister_op_overrides(disable_dsl_names="dsl_u")
    router = _C.router_id(KEY)
    reg.reorder_graphs_from_user_function(cond_of(_never))
    assert _mul() == [99.0, 99.0]  # not yet published
    with compat._unconditional_masked():
        assert _mul() == [1.0, 1.0]  # dsl_a declines, dsl_u masked
        assert _C.router_id(KEY) == router
        reg.reorder_graphs_from_user_function(cond_of(_always))
    assert _mul() == [99.0, 99.0]
    assert _C.router_id(KEY) == router
    compat.reenable_op_overrides(enable_dsl_names="dsl_u")


def test_host_torch_surfaces(monkeypatch):
    assert compat.host_torch_surfaces() == frozenset({"python_native", "stock_registry"})
    bare = types.ModuleType("torch._native")  # what install_as_torch_native serves on 2.11
    monkeypatch.setattr(torch, "_native", bare, raising=False)
    monkeypatch.setitem(sys.modules, "torch._native", bare)
    assert compat.host_torch_surfaces() == frozenset({"python_native"})


_STOCK = """
import sys, types, torch
import torch.backends.python_native as pn
from native_registry import upstream_compat, variants
from native_registry.ordering_env import get_user_ordering_fn
print(upstream_compat._node_id_counter)
stock = types.ModuleType("torch._native.variants")  # a torch with its own store
stock._active = {"aten::mul": "fast", "aten::add": "slow"}
variants._selected["aten::add"] = "mine"
sys.modules["torch._native.variants"] = stock
package = upstream_compat.install_as_torch_native()
print(sorted(variants._selected.items()))
print(all(getattr(stock, n) is getattr(variants, n)
          for n in ("PASSTHROUGH", "get_variant", "set_variant", "variant", "_parse_env")),
      stock._active is variants._selected)
stock.set_variant("aten::sub", "x")
print(variants.get_variant("aten::sub", "default"))
print(sys.modules["torch._native.variants"] is variants, package.variants is variants,
      package is torch._native, package.registry is upstream_compat)
print(package.get_user_ordering_fn is get_user_ordering_fn,
      package._unconditional_masked is upstream_compat._unconditional_masked)
print(pn.set_override_variant is variants.set_variant, pn.override_variant is variants.variant)
"""


def test_install_as_torch_native_serves_the_variants_store():
    out = subprocess.run([sys.executable, "-c", _STOCK], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "0",
        "[('aten::add', 'mine'), ('aten::mul', 'fast')]",
        "True True",
        "x",
        "True True True True",
        "True True",
        "True True",
    ]


def test_install_as_torch_native_on_a_torch_without_it_serves_a_package():
    """On a torch without torch._native (2.11) the served torch._native is a
    package without a file: a submodule it lacks is simply not found, and
    the host still reports neither surface."""
    from fixtures.python.torch_fixtures import WITHOUT_TORCH_NATIVE

    script = WITHOUT_TORCH_NATIVE + """
from native_registry import upstream_compat
upstream_compat.install_as_torch_native()
print(sorted(upstream_compat.host_torch_surfaces()))
try:
    import torch._native.ops
except ModuleNotFoundError as err:
    print(err)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "No module named 'torch._native.ops'"]


_OWN_FRONT_END = """
import torch
import torch.backends.python_native as pn
from native_registry import upstream_compat
def mine(op, name):
    return "mine"
pn.set_override_variant = mine
pn.override_variant = mine
upstream_compat.install_as_torch_native()
print(pn.set_override_variant is mine, pn.override_variant is mine)
"""


def test_install_as_torch_native_keeps_a_front_ends_own_variant_setters():
    out = subprocess.run([sys.executable, "-c", _OWN_FRONT_END], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "True True"
