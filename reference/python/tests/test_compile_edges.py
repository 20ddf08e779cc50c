"""The compile router's edges on the reference's side: the backend a call
without tensors selects, op look-ups once an op left the dispatcher, the
decomposition table around a router with nothing to route, and teardown in
a process that never looked a `_native` op up."""

from __future__ import annotations

import re

import pytest
import torch

from native_registry import _C
from native_registry import compile_routing


def accept(*args, **kwargs):
    return True


def first(a, b, **kwargs):
    return a


# ---- tensorless_backend: what aten's BackendSelect kernels compute -------------------

@pytest.mark.parametrize("kwargs, expected", [
    ({}, "CPU"),  # no device named: the dispatcher's default
    ({"device": torch.device("meta")}, "Meta"),
    ({"device": torch.device("cpu"), "dtype": torch.float64}, "CPU"),
    ({"dtype": torch.quint8}, "QuantizedCPU"),
    ({"layout": torch.sparse_coo}, "SparseCPU"),
    ({"device": torch.device("meta"), "layout": torch.sparse_coo}, "SparseMeta"),
])
def test_a_factory_call_selects_the_backend_of_its_options(kwargs, expected):
    assert _C.tensorless_backend("aten::empty", "memory_format", ([2],), kwargs) == expected


def test_an_op_that_takes_a_tensor_selects_nothing_by_its_options():
    assert _C.tensorless_backend("aten::mul", "Tensor", (torch.ones(1), torch.ones(1)), {}) is None
    # Tensor? and Tensor[] arguments count as tensors too.
    assert _C.tensorless_backend("aten::cat", "", ([torch.ones(1)],), {}) is None
    assert _C.tensorless_backend("aten::index", "Tensor", (torch.ones(1), [None]), {}) is None


def test_an_unknown_op_is_named():
    with pytest.raises(ValueError, match=re.escape("no op 'aten::no_such_op.default' in the dispatcher")):
        _C.tensorless_backend("aten::no_such_op", "default", (), {})


def test_a_factory_call_reaches_only_the_key_its_device_selects(reg):
    ones = torch.ops.aten.ones.default
    assert compile_routing._reaches_key(ones, "CPU", ([2],), {})
    assert not compile_routing._reaches_key(ones, "CPU", ([2],), {"device": torch.device("meta")})
    assert compile_routing._reaches_key(ones, "Meta", ([2],), {"device": torch.device("meta")})
    # A tensor argument decides by its own keys, whatever the options say.
    like = torch.ops.aten.ones_like.default
    assert compile_routing._reaches_key(like, "CPU", (torch.ones(1),), {"device": torch.device("meta")})


def test_the_table_router_of_a_factory_routes_a_cpu_call_and_declines_a_meta_one(reg):
    reg.register_op_override("edge_dsl", "aten", "ones", "CPU", accept,
                             lambda *a, **k: torch.full((2,), 7.0))
    reg.register_all_overrides()
    router = reg.native_decomp_table(overrides_only=True)[torch.ops.aten.ones.default]
    assert torch.equal(router([2]), torch.full((2,), 7.0))
    assert router([2], device=torch.device("meta")) is NotImplemented


# ---- _resolve_overload once the op left the dispatcher ------------------------------

def test_an_op_no_longer_in_the_dispatcher_resolves_to_none_though_torch_ops_holds_it():
    lib = torch.library.Library("nr_edges_gone", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    namespace = torch.ops.nr_edges_gone
    try:
        found = compile_routing._resolve_overload("nr_edges_gone", "twice")
        assert found is namespace.twice.default
        packet = namespace.twice
    finally:
        lib._destroy()
    # Python's Library drops torch.ops' cached packet; a C++ library's
    # destruction does not: the stale packet is put back as it would stay.
    setattr(namespace, "twice", packet)
    try:
        assert compile_routing._resolve_overload("nr_edges_gone", "twice") is None
    finally:
        delattr(namespace, "twice")


# ---- the decomposition table around a router with nothing to route -----------------

def test_a_router_with_an_empty_chain_leaves_the_others_in_the_table(reg):
    reg.register_op_override("edge_a", "aten", "add.Tensor", "CPU", accept, first)
    reg.register_op_override("edge_b", "aten", "mul.Tensor", "CPU", accept, first)
    reg.register_all_overrides()
    add, mul = torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor
    # Each router in turn is left in place with an empty chain; the other stays routed.
    for off, on, on_op, off_op in (("edge_a", "edge_b", mul, add), ("edge_b", "edge_a", add, mul)):
        reg.reenable_op_overrides(enable_dsl_names=[on])
        reg.deregister_op_overrides(disable_dsl_names=[off])
        table = reg.native_decomp_table(overrides_only=True)
        assert on_op in table and off_op not in table, (off, sorted(map(str, table)))


# ---- teardown before any `_native` op was looked up ---------------------------------

def test_a_restore_works_in_a_process_that_never_looked_up_a_native_op(reg, monkeypatch):
    # torch before 2.13 defines no `_native` op at import, so torch.ops has no
    # such namespace until something looks one up.
    monkeypatch.delitem(torch.ops.__dict__, "_native", raising=False)
    saved = reg.snapshot()
    reg.restore(saved)
    assert "_native" not in torch.ops.__dict__
