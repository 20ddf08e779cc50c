"""Routing through the real dispatcher from Python: conds and impls as Python
callables, the captured fallback, unconditional overrides, teardown, other
namespaces, and errors raised by user code."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
import torch

import native_registry
import native_registry.registry as registry
from conftest import MISSING_NS, NS, NS2, mul

from fixtures.python.torch_fixtures import A, B, STOCK


def install(reg):
    reg.register_all_overrides()


def test_cond_true_routes_to_impl(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a, **k: True,
                             lambda a, b: torch.full_like(a, 42.0))
    install(reg)
    assert torch.equal(mul(A, B), torch.tensor([42.0, 42.0]))
    assert torch.equal(A * B, torch.tensor([42.0, 42.0]))  # the everyday spelling too


def test_cond_false_falls_through_to_native(reg):
    impl = MagicMock(side_effect=AssertionError("impl ran"))
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a, **k: False, impl)
    install(reg)
    assert torch.equal(mul(A, B), STOCK)
    impl.assert_not_called()


def test_cond_sees_the_call_arguments(reg):
    seen = []

    def cond(*args, **kwargs):
        seen.append((args, kwargs))
        return False

    reg.register_op_override("test_dsl", "aten", "add.Tensor", "CPU", cond, lambda *a: a[0])
    install(reg)
    torch.ops.aten.add.Tensor(A, B, alpha=2)
    torch.ops.aten.add.Tensor(A, B)
    torch.ops.aten.add.Tensor(A, B, alpha=1.0)
    (args, kwargs), (args2, kwargs2), (_, kwargs3) = seen
    assert args[0] is not None and torch.equal(args[0], A) and torch.equal(args[1], B)
    assert kwargs == {"alpha": 2}
    assert kwargs2 == {}, "a keyword argument at its default is not passed"
    # As torch.library passes it: by IValue equality 1.0 is not the default 1.
    assert kwargs3 == {"alpha": 1.0}


def test_cond_sees_a_wrapped_number_as_a_python_number(reg):
    seen = []
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU",
                             lambda a, b: seen.append(b) or False, lambda *a: a[0])
    install(reg)
    assert torch.equal(A * 2, torch.ops.aten.mul.Tensor(A, torch.tensor(2.0)))
    assert seen[0] == 2 and not isinstance(seen[0], torch.Tensor), seen
    assert isinstance(seen[1], torch.Tensor)


def test_unavailable_runtime_falls_through(reg):
    impl = MagicMock(side_effect=AssertionError("implementation was called"))
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True, impl,
                             try_initialize_runtime=lambda: False)
    install(reg)
    assert mul(torch.tensor([2.0]), torch.tensor([4.0])).item() == 8.0
    impl.assert_not_called()


def test_unconditional_override_with_cond_none(reg):
    calls = []

    def impl(a, b):
        calls.append(1)
        return torch.full_like(a, 5.0)

    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", None, impl,
                             unconditional_override=True)
    install(reg)
    assert torch.equal(mul(A, B), torch.tensor([5.0, 5.0]))
    assert torch.equal(mul(torch.tensor([0.0]), torch.tensor([0.0])), torch.tensor([5.0]))
    assert len(calls) == 2


def test_unconditional_survives_disable_and_the_hatch_masks_it(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", None,
                             lambda a, b: torch.full_like(a, 5.0), unconditional_override=True)
    install(reg)
    five = torch.tensor([5.0, 5.0])
    with native_registry._unconditional_masked():
        assert torch.equal(mul(A, B), five), "the hatch alone must not mask it"
    reg.deregister_op_overrides(disable_dsl_names="test_dsl")
    assert torch.equal(mul(A, B), five)
    with native_registry._unconditional_masked():
        assert torch.equal(mul(A, B), STOCK)
    assert torch.equal(mul(A, B), five)
    reg.reenable_op_overrides(enable_dsl_names="test_dsl")


def test_first_match_wins(reg):
    reg.register_op_override("a", "aten", "mul.Tensor", "CPU", lambda *a: False,
                             MagicMock(side_effect=AssertionError))
    reg.register_op_override("b", "aten", "mul.Tensor", "CPU", lambda *a: True,
                             lambda a, b: torch.full_like(a, 1.0))
    later = MagicMock(return_value=True)
    reg.register_op_override("c", "aten", "mul.Tensor", "CPU", later,
                             lambda a, b: torch.full_like(a, 2.0))
    install(reg)
    assert torch.equal(mul(A, B), torch.tensor([1.0, 1.0]))
    later.assert_not_called()


def test_no_recursion_in_aten_backward_formula(reg):
    impl = MagicMock(side_effect=AssertionError("impl should not be called when cond=False"))
    reg.register_op_override("test_dsl", "aten", "bmm", "CPU", lambda *a, **k: False, impl)
    install(reg)
    a = torch.randn(2, 3, 4, requires_grad=True)
    b = torch.randn(2, 4, 5, requires_grad=True)
    expected = a.detach() @ b.detach()
    out = torch.bmm(a, b)
    assert torch.allclose(out, expected)
    out.sum().backward()
    ones = torch.ones(2, 3, 5)
    assert torch.allclose(a.grad, ones @ b.detach().transpose(1, 2))
    assert torch.allclose(b.grad, a.detach().transpose(1, 2) @ ones)


def test_deregister_reenable_roundtrip(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a, **k: True,
                             lambda a, b: torch.full_like(a, 7.0))
    install(reg)
    seven = torch.tensor([7.0, 7.0])
    assert torch.equal(mul(A, B), seven)
    assert registry.native_decomp_table(overrides_only=True)
    reg.deregister_op_overrides(disable_dsl_names="test_dsl")
    assert torch.equal(mul(A, B), STOCK)
    assert reg.router_state("aten", "mul.Tensor", "CPU") == "dormant"
    assert not registry.native_decomp_table(overrides_only=True)
    reg.reenable_op_overrides(enable_dsl_names="test_dsl")
    assert torch.equal(mul(A, B), seven)
    assert reg.router_state("aten", "mul.Tensor", "CPU") == "active"


def test_remove_policy_takes_the_router_out_like_upstream(reg):
    reg.set_empty_chain_policy("remove")
    try:
        reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a: True,
                                 lambda a, b: torch.full_like(a, 7.0))
        install(reg)
        reg.deregister_op_overrides(disable_dsl_names="test_dsl")
        assert reg.router_state("aten", "mul.Tensor", "CPU") == "absent"
        reg.reenable_op_overrides(enable_dsl_names="test_dsl")
        assert reg.router_state("aten", "mul.Tensor", "CPU") == "active"
    finally:
        reg.set_empty_chain_policy("keep_dormant")
    with pytest.raises(ValueError, match="'keep_dormant' or 'remove'"):
        reg.set_empty_chain_policy("sometimes")


def test_emptied_graph_with_reregister_tears_the_router_down(reg):
    reg.set_empty_chain_policy("remove")
    try:
        reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a: True,
                                 lambda a, b: torch.full_like(a, 99.0))
        install(reg)
        reg.reorder_graphs_from_user_function(lambda op, key, graph: [],
                                              reregister_overrides=True)
        assert reg.router_state("aten", "mul.Tensor", "CPU") == "absent"
        assert torch.equal(mul(A, B), STOCK)
    finally:
        reg.set_empty_chain_policy("keep_dormant")


def test_teardown_restores_the_fallback_of_a_replaced_override(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a, **k: False,
                             lambda a, b: torch.full_like(a, 11.0))
    install(reg)
    live = reg.snapshot()  # an override that was live before "the test"
    one = (torch.tensor([2.0]), torch.tensor([4.0]))
    assert torch.equal(mul(*one), torch.tensor([8.0]))
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a, **k: True,
                             lambda a, b: torch.full_like(a, 99.0))
    registry._C.install_graph(("aten", "mul.Tensor", "CPU"), True)  # replace the router
    assert torch.equal(mul(*one), torch.tensor([99.0]))
    reg.restore(live)
    assert torch.equal(mul(*one), torch.tensor([8.0]))


def test_errors_from_user_code_reach_the_caller_and_change_nothing(reg):
    def bad_cond(a, b):
        raise KeyError("cond exploded")

    reg.register_op_override("c", "aten", "mul.Tensor", "CPU", bad_cond, lambda a, b: a)
    install(reg)
    with pytest.raises(KeyError, match="cond exploded"):
        mul(A, B)
    assert not registry._router_active.on
    assert len(registry._C.published_chain(("aten", "mul.Tensor", "CPU"))) == 1
    reg.deregister_op_overrides(disable_dsl_names="c")

    def bad_impl(a, b):
        raise NotImplementedError("impl exploded")

    reg.register_op_override("i", "aten", "mul.Tensor", "CPU", lambda *a: True, bad_impl)
    reg.register_all_overrides()
    with pytest.raises(NotImplementedError, match="impl exploded"):
        mul(A, B)
    reg.deregister_op_overrides(disable_dsl_names="i")

    reg.register_op_override("r", "aten", "mul.Tensor", "CPU", lambda *a: True,
                             lambda a, b: a, try_initialize_runtime=lambda: 1 / 0)
    reg.register_all_overrides()
    with pytest.raises(ZeroDivisionError):
        mul(A, B)
    chain = registry._C.published_chain(("aten", "mul.Tensor", "CPU"))
    assert [n.dsl_name for n in chain] == ["r"]
    reg.deregister_op_overrides(disable_dsl_names="r")
    assert torch.equal(mul(A, B), STOCK)


@pytest.mark.parametrize("result, message", [(None, "Tensor"), ("text", "Tensor"), (3, "Tensor")])
def test_impl_returning_the_wrong_type_is_an_error(reg, result, message):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a: True,
                             lambda a, b: result)
    install(reg)
    with pytest.raises((RuntimeError, TypeError), match=message):
        mul(A, B)


# ---- other namespaces -----------------------------------------------------------


def test_non_aten_namespace_routes_and_falls_back(reg, namespaces):
    op, _ = namespaces
    reg.register_op_override("test_dsl", NS, "twice", "CPU", lambda x: x.numel() == 2,
                             lambda x: torch.full_like(x, 99.0))
    install(reg)
    assert torch.equal(op(torch.tensor([1.0, 2.0])), torch.tensor([99.0, 99.0]))
    assert torch.equal(op(torch.tensor([1.0])), torch.tensor([2.0]))
    assert reg.graph(NS, "twice", "CPU")[0].lib_symbol == NS


def test_same_op_symbol_in_two_namespaces_and_blind_filters(reg, namespaces):
    op, op2 = namespaces
    reg.register_op_override("test_dsl", NS, "twice", "CPU", lambda *a: True,
                             lambda x: torch.full_like(x, 99.0))
    reg.register_op_override("test_dsl", NS2, "twice", "CPU", lambda *a: True,
                             lambda x: torch.full_like(x, 7.0))
    install(reg)
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(op(x), torch.full_like(x, 99.0))
    assert torch.equal(op2(x), torch.full_like(x, 7.0))
    assert set(registry._C.graphs_by_op_symbol()["twice"]) == {(NS, "twice", "CPU"),
                                                               (NS2, "twice", "CPU")}
    reg.deregister_op_overrides(disable_op_symbols=[f"{NS}::twice"])
    assert torch.equal(op(x), torch.full_like(x, 99.0))
    reg.deregister_op_overrides(disable_op_symbols=["twice"])
    assert torch.equal(op(x), x * 2) and torch.equal(op2(x), x * 3)
    reg.reenable_op_overrides(enable_op_symbols=["twice"])
    assert torch.equal(op(x), torch.full_like(x, 99.0))
    assert torch.equal(op2(x), torch.full_like(x, 7.0))


def test_get_dsl_operations_reports_one_namespace(reg, namespaces):
    reg.register_op_override("test_dsl", NS, "twice", "CPU", lambda *a: True, lambda x: x)
    assert reg.get_dsl_operations("test_dsl", lib_symbol=NS) == ["twice"]
    assert "twice" not in reg.get_dsl_operations("test_dsl")


def test_undefined_op_raises_on_install_and_changes_nothing(reg, namespaces):
    reg.register_op_override("test_dsl", MISSING_NS, "twice", "CPU", lambda *a: True, lambda x: x)
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a: True,
                             lambda a, b: a)
    with pytest.raises(AttributeError, match="not found; is the namespace"):
        reg.register_all_overrides()
    assert reg.router_state("aten", "mul.Tensor", "CPU") == "absent"


def test_teardown_leaves_no_decomposition_router(reg, namespaces):
    op, _ = namespaces
    before = set(registry.native_decomp_table(overrides_only=True))
    saved = reg.snapshot()
    reg.register_op_override("test_dsl", NS, "twice", "CPU", lambda *a: True,
                             lambda x: torch.full_like(x, 99.0))
    install(reg)
    assert op in registry.native_decomp_table(overrides_only=True)
    reg.restore(saved)
    assert set(registry.native_decomp_table(overrides_only=True)) == before
    assert op not in registry.native_decomp_table(overrides_only=True)
