"""Routing, filters, unconditional overrides, namespaces and teardown,
through the real dispatcher."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
import torch

from conftest import NS, NS2, behaviour

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY


def fill(value):
    return lambda a, *rest: torch.full_like(a, value)


def forbidden():
    return MagicMock(side_effect=AssertionError("impl must not run"))


@behaviour("routing.cond-true-routes-to-impl")
def test_cond_true_routes_to_impl(impl):
    impl.register("test_dsl", *KEY, lambda *a, **k: True, fill(42.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([42.0, 42.0]))


@behaviour("routing.cond-false-falls-back")
def test_cond_false_falls_back(impl):
    body = forbidden()
    cond = MagicMock(return_value=False)
    impl.register("test_dsl", *KEY, cond, body)
    impl.install(*KEY)
    assert torch.equal(mul(), STOCK)
    # Installed again (the router replaced): the fallback is still the op's
    # own kernel, not the replaced router, so one call consults cond once.
    impl.install(*KEY)
    cond.reset_mock()
    assert torch.equal(mul(), STOCK)
    assert cond.call_count == 1
    body.assert_not_called()


@behaviour("routing.first-match-wins")
def test_first_match_wins(impl):
    first, winner, later = (MagicMock(return_value=v) for v in (False, True, True))
    impl.register("a", *KEY, first, forbidden())
    impl.register("b", *KEY, winner, fill(1.0))
    impl.register("c", *KEY, later, fill(2.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([1.0, 1.0]))
    assert first.call_count == 1 and winner.call_count == 1, "each cond is consulted once per call"
    later.assert_not_called()


@behaviour("routing.fallback-past-a-fallthrough-key")
def test_fallback_past_a_fallthrough_key(impl):
    autocast_key = (KEY[0], KEY[1], "AutocastCPU")
    declines = MagicMock(return_value=False)
    impl.register("a", *autocast_key, declines, forbidden())
    impl.install(*autocast_key)
    assert torch.equal(mul(), STOCK)
    declines.assert_not_called()  # AutocastCPU is not among a plain call's keys
    with torch.autocast("cpu"):
        assert torch.equal(mul(), STOCK)
        assert declines.call_count == 1
        impl.register("b", *autocast_key, lambda *a, **k: True, fill(7.0))
        impl.install(*autocast_key)
        assert torch.equal(mul(), torch.tensor([7.0, 7.0]))


@behaviour("routing.runtime-unavailable-skips")
def test_runtime_unavailable_skips_the_node(impl):
    body = forbidden()
    impl.register("test_dsl", *KEY, lambda a, b: True, body, try_initialize_runtime=lambda: False)
    impl.install(*KEY)
    assert mul(torch.tensor([2.0]), torch.tensor([4.0])).item() == 8.0
    body.assert_not_called()


@behaviour("routing.no-recursion-through-autograd")
def test_no_recursion_through_bmm_backward(impl):
    impl.register("test_dsl", "aten", "bmm", "CPU", lambda *a, **k: False, forbidden())
    impl.install("aten", "bmm", "CPU")
    a = torch.randn(2, 3, 4, requires_grad=True)
    b = torch.randn(2, 4, 5, requires_grad=True)
    out = torch.bmm(a, b)
    assert torch.allclose(out, a.detach() @ b.detach())
    out.sum().backward()
    ones = torch.ones(2, 3, 5)
    assert torch.allclose(a.grad, ones @ b.detach().transpose(1, 2))
    assert torch.allclose(b.grad, a.detach().transpose(1, 2) @ ones)


@behaviour("routing.empty-graph-removes-router")
def test_empty_graph_takes_the_router_down(impl):
    impl.register("test_dsl", *KEY, lambda *a: True, fill(99.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([99.0, 99.0]))
    assert impl.router_installed(*KEY)
    impl.set_graph(*KEY, [])
    impl.install(*KEY)
    assert not impl.router_installed(*KEY)
    assert torch.equal(mul(), STOCK)


@behaviour("routing.user-errors-propagate")
@pytest.mark.parametrize("where", ["cond", "impl"])
def test_user_errors_reach_the_caller(impl, where):
    def boom(*a, **k):
        raise KeyError(f"{where} exploded")

    cond = boom if where == "cond" else (lambda *a: True)
    body = boom if where == "impl" else fill(1.0)
    impl.register("test_dsl", *KEY, cond, body)
    impl.install(*KEY)
    for _ in range(2):
        with pytest.raises(KeyError, match=f"{where} exploded"):
            mul()
    impl.disable(dsl_names="test_dsl")
    assert torch.equal(mul(), STOCK)


# ---- filters --------------------------------------------------------------------


@behaviour("filters.disable-marks-inactive")
def test_disable_marks_nodes_inactive(impl):
    impl.register("test_backend", *KEY, lambda *a: True, fill(1.0))
    node = impl.graph(*KEY)[0]
    assert node.active
    impl.disable(dsl_names="test_backend")
    assert not impl.graph(*KEY)[0].active
    impl.enable(dsl_names="test_backend")
    assert impl.graph(*KEY)[0].active


@behaviour("filters.disable-reenable-roundtrip")
def test_disable_reenable_roundtrip(impl):
    impl.register("test_dsl", *KEY, lambda *a, **k: True, fill(7.0))
    impl.install(*KEY)
    seven = torch.tensor([7.0, 7.0])
    assert torch.equal(mul(), seven)
    impl.disable(dsl_names="test_dsl")
    assert torch.equal(mul(), STOCK)
    impl.enable(dsl_names="test_dsl")
    assert torch.equal(mul(), seven)


@behaviour("filters.by-op-symbol-and-dispatch-key")
@pytest.mark.parametrize("by", ["op_symbols", "dispatch_keys"])
def test_disable_by_op_symbol_or_dispatch_key(impl, by):
    impl.register("test_dsl", *KEY, lambda *a: True, fill(7.0))
    impl.install(*KEY)
    name = {"op_symbols": "mul.Tensor", "dispatch_keys": "CPU"}[by]
    impl.disable(**{by: [name]})
    assert torch.equal(mul(), STOCK)
    impl.enable(**{by: [name]})
    assert torch.equal(mul(), torch.tensor([7.0, 7.0]))


@behaviour("filters.lists-name-each")
def test_a_filter_list_names_each_of_its_entries(impl):
    for dsl, value in (("dsl_a", 1.0), ("dsl_b", 2.0), ("dsl_c", 3.0)):
        impl.register(dsl, *KEY, lambda *a, **k: True, fill(value))
    impl.install(*KEY)

    def routed(value):
        return torch.equal(mul(), torch.tensor([value, value]))

    assert routed(1.0)
    impl.disable(dsl_names=["dsl_a", "dsl_b"])
    assert routed(3.0), "both dsl names of the list are disabled"
    impl.disable(dsl_names=["dsl_c"])
    assert torch.equal(mul(), STOCK)
    impl.enable(dsl_names=["dsl_c", "dsl_b"])
    assert routed(2.0), "both dsl names of the list are enabled, dsl_a not"
    impl.enable(dsl_names=["dsl_a"])
    assert routed(1.0)

    # Op symbols and dispatch keys: one list names two graphs.
    add_key = ("aten", "add.Tensor", "CPU")
    impl.register("dsl_a", *add_key, lambda *a, **k: True, fill(9.0))
    impl.install(*add_key)

    def plus():
        return torch.ops.aten.add.Tensor(A, B)

    assert torch.equal(plus(), torch.tensor([9.0, 9.0]))
    for by, names in (("op_symbols", ["add.Tensor", "mul.Tensor"]),
                      ("dispatch_keys", ["AutocastCPU", "CPU"])):
        impl.disable(**{by: names})
        assert torch.equal(mul(), STOCK) and torch.equal(plus(), A + B), by
        impl.enable(**{by: names})
        assert routed(1.0) and torch.equal(plus(), torch.tensor([9.0, 9.0])), by


@behaviour("filters.op-symbol-namespace-blind", "namespaces.same-symbol-independent")
def test_op_symbol_filters_are_namespace_blind(impl, namespaces):
    op, op2 = namespaces
    impl.register("test_dsl", NS, "twice", "CPU", lambda *a: True, fill(99.0))
    impl.register("test_dsl", NS2, "twice", "CPU", lambda *a: True, fill(7.0))
    impl.install(NS, "twice", "CPU")
    impl.install(NS2, "twice", "CPU")
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(op(x), torch.full_like(x, 99.0))
    assert torch.equal(op2(x), torch.full_like(x, 7.0))
    impl.disable(op_symbols=[f"{NS}::twice"])
    assert torch.equal(op(x), torch.full_like(x, 99.0))
    assert torch.equal(op2(x), torch.full_like(x, 7.0))
    impl.disable(op_symbols=["twice"])
    assert torch.equal(op(x), x * 2) and torch.equal(op2(x), x * 3)
    impl.enable(op_symbols=["twice"])
    assert torch.equal(op(x), torch.full_like(x, 99.0))
    assert torch.equal(op2(x), torch.full_like(x, 7.0))


# ---- unconditional overrides ----------------------------------------------------


def register_unconditional(impl):
    calls = []

    def body(a, b):
        calls.append(1)
        return torch.full_like(a, 5.0)

    impl.register("test_dsl", *KEY, None, body, unconditional_override=True)
    impl.install(*KEY)
    return calls


@behaviour("unconditional.cond-none-always-matches")
def test_unconditional_takes_every_call(impl):
    calls = register_unconditional(impl)
    assert torch.equal(mul(), torch.tensor([5.0, 5.0]))
    assert torch.equal(mul(torch.tensor([0.0]), torch.tensor([0.0])), torch.tensor([5.0]))
    assert len(calls) == 2


@behaviour("unconditional.given-cond-chooses-calls")
def test_unconditional_override_given_a_cond_takes_only_what_it_accepts(impl):
    def two_elements(a, *rest, **kwargs):
        return a.numel() == 2

    impl.register("test_dsl", *KEY, two_elements, fill(5.0), unconditional_override=True)
    assert impl.graph(*KEY)[0].cond_fn is two_elements, "the node keeps the cond given"
    impl.install(*KEY)
    one, four = torch.tensor([3.0]), torch.tensor([4.0])
    assert torch.equal(mul(), torch.tensor([5.0, 5.0]))
    assert torch.equal(mul(one, four), torch.tensor([12.0])), "a declined call runs the op's own kernel"
    impl.register("other_dsl", *KEY, lambda *a, **k: True, fill(7.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([5.0, 5.0]))
    assert torch.equal(mul(one, four), torch.tensor([7.0])), "a declined call goes on to the next node"


@behaviour("unconditional.survives-disable")
def test_unconditional_survives_disable(impl):
    register_unconditional(impl)
    impl.disable(dsl_names="test_dsl")
    assert torch.equal(mul(), torch.tensor([5.0, 5.0]))


@behaviour("unconditional.hatch-masks-while-disabled")
def test_hatch_masks_only_while_disabled_and_in_scope(impl):
    register_unconditional(impl)
    five = torch.tensor([5.0, 5.0])
    with impl.unconditional_masked():
        assert torch.equal(mul(), five), "the hatch alone must not mask"
        # Entering the mask need not touch a graph it masks nothing of: an
        # install builds the chain anew, under the mask.
        impl.install(*KEY)
        assert torch.equal(mul(), five), "the hatch alone must not mask, also once the graph is installed again"
    impl.disable(dsl_names="test_dsl")
    with impl.unconditional_masked():
        assert torch.equal(mul(), STOCK)
    assert torch.equal(mul(), five)


@behaviour("unconditional.hatch-masks-while-disabled")
def test_hatch_masks_only_the_disabled_of_two_unconditional_overrides(impl):
    """The graph the hatch republishes goes on to the enabled override."""
    impl.register("masked_dsl", *KEY, None, fill(6.0), unconditional_override=True)
    impl.register("test_dsl", *KEY, None, fill(5.0), unconditional_override=True)
    impl.install(*KEY)
    impl.disable(dsl_names="masked_dsl")
    six, five = torch.tensor([6.0, 6.0]), torch.tensor([5.0, 5.0])
    assert torch.equal(mul(), six), "a disable alone must not mask"
    with impl.unconditional_masked():
        assert torch.equal(mul(), five), "the hatch must mask the disabled override and only it"
    assert torch.equal(mul(), six), "leaving the hatch must restore the override"


# ---- namespaces -----------------------------------------------------------------


@behaviour("namespaces.non-aten-routes")
def test_non_aten_namespace_routes_and_falls_back(impl, namespaces):
    op, _ = namespaces
    impl.register("test_dsl", NS, "twice", "CPU", lambda x: x.numel() == 2, fill(99.0))
    impl.install(NS, "twice", "CPU")
    assert torch.equal(op(torch.tensor([1.0, 2.0])), torch.tensor([99.0, 99.0]))
    assert torch.equal(op(torch.tensor([1.0])), torch.tensor([2.0]))


# ---- teardown -------------------------------------------------------------------


@behaviour("teardown.replaced-override-rebuilt-on-own-kernel")
def test_replaced_override_rebuilt_on_the_ops_own_kernel(impl):
    one = (torch.tensor([2.0]), torch.tensor([4.0]))
    impl.register("test_dsl", *KEY, lambda *a, **k: False, fill(11.0))  # live before "the test"
    impl.install(*KEY)
    assert torch.equal(mul(*one), torch.tensor([8.0]))
    with impl.scope():
        impl.register("test_dsl", *KEY, lambda *a, **k: True, fill(99.0))
        impl.set_graph(*KEY, impl.graph(*KEY)[-1:])
        impl.install(*KEY)
        assert torch.equal(mul(*one), torch.tensor([99.0]))
    assert torch.equal(mul(*one), torch.tensor([8.0]))


@behaviour("teardown.replaced-override-rebuilt-on-own-kernel")
def test_a_replacement_over_a_kernel_since_gone_is_rebuilt_on_the_ops_own_kernel(impl):
    """As above, the replacement installed while a kernel of the test's own
    sat over the op's (so it may have captured that one), which is gone by
    the teardown: the restored override still falls back to the op's own."""
    one = (torch.tensor([2.0]), torch.tensor([4.0]))
    impl.register("test_dsl", *KEY, lambda *a, **k: False, fill(11.0))  # live before "the test"
    impl.install(*KEY)
    with impl.scope():
        mine = torch.library.Library("aten", "IMPL")
        try:
            mine.impl("mul.Tensor", lambda a, b: torch.full_like(a, 42.0), "CPU")
            impl.install(*KEY)
            assert torch.equal(mul(*one), torch.tensor([42.0]))
        finally:
            mine._destroy()
    assert torch.equal(mul(*one), torch.tensor([8.0]))


@behaviour("teardown.dispatcher-restored-exactly")
def test_teardown_restores_every_table(impl):
    from conftest import dispatcher_state

    before = dispatcher_state()
    with impl.scope():
        impl.register("d", *KEY, lambda *a: True, fill(1.0))
        impl.register("d", "aten", "bmm", "CPU", lambda *a: False, fill(1.0))
        impl.install_all()
        assert dispatcher_state() != before, "installing changed no table"
        impl.disable(dsl_names="d")
    assert dispatcher_state() == before


@behaviour("teardown.no-decomposition-router-left")
def test_teardown_leaves_no_decomposition_router(impl, namespaces):
    op, _ = namespaces
    before = dict(impl.decomp_table(overrides_only=True))
    with impl.scope():
        impl.register("test_dsl", NS, "twice", "CPU", lambda *a: True, fill(99.0))
        impl.install(NS, "twice", "CPU")
        assert op in impl.decomp_table(overrides_only=True)
    after = impl.decomp_table(overrides_only=True)
    assert op not in after and after == before


# ---- graphs that were never installed ------------------------------------------


@behaviour("filters.change-installs-no-router")
@pytest.mark.parametrize("by", ["dsl_names", "op_symbols", "dispatch_keys"])
def test_a_filter_change_installs_no_router_for_a_graph_never_installed(impl, by):
    impl.register("test_dsl", *KEY, lambda *a: True, fill(7.0))
    name = {"dsl_names": "test_dsl", "op_symbols": "mul.Tensor", "dispatch_keys": "CPU"}[by]
    impl.disable(**{by: [name]})
    assert not impl.router_installed(*KEY), "disabling installed a router"
    impl.enable(**{by: [name]})
    assert not impl.router_installed(*KEY), "re-enabling installed a router"
    assert torch.equal(mul(), STOCK)


@behaviour("unconditional.mask-installs-no-router")
def test_the_unconditional_mask_installs_no_router_for_a_graph_never_installed(impl):
    impl.register("test_dsl", *KEY, None, fill(5.0), unconditional_override=True)
    impl.disable(dsl_names="test_dsl")
    with impl.unconditional_masked():
        assert not impl.router_installed(*KEY), "entering the mask installed a router"
    assert not impl.router_installed(*KEY), "leaving the mask installed a router"
    assert torch.equal(mul(), STOCK)


# ---- upstream main's signature ------------------------------------------------


@behaviour("registration.allow-multiple-override-accepted")
@pytest.mark.parametrize("allow", [False, True])
def test_allow_multiple_override_is_accepted(impl, allow):
    impl.register("a", *KEY, lambda *a: False, forbidden(), allow_multiple_override=allow)
    impl.register("b", *KEY, lambda *a: True, fill(3.0), allow_multiple_override=allow)
    assert [n.dsl_name for n in impl.graph(*KEY)] == ["a", "b"]
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([3.0, 3.0]))


@behaviour("routing.runtime-after-cond")
def test_a_declining_cond_never_initialises_the_runtime(impl):
    runtime = MagicMock(return_value=True)
    impl.register("test_dsl", *KEY, lambda *a: False, forbidden(), try_initialize_runtime=runtime)
    impl.install(*KEY)
    assert torch.equal(mul(), STOCK)
    runtime.assert_not_called()
