"""registry.explain from Python, beyond the catalogue's explain.*: the
object and its table, where it is exported, the op forms it takes, the
`_native` op by its torch.ops name, what a Python cond is handed, errors that
must propagate, and refused input that changes nothing."""

from __future__ import annotations

import pytest
import torch

import native_registry
from native_registry.explain import Kernel
from native_registry.explain import explain as explain_function

KEY = ("aten", "mul.Tensor", "CPU")
A, B = torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])
MUL = torch.ops.aten.mul.Tensor


def seven(a, *rest, **kwargs):
    return torch.full_like(a, 7.0)


def test_explain_is_exported_where_the_registry_functions_are(reg):
    assert reg.explain is native_registry.explain is explain_function
    assert "explain" in reg.__all__


def test_the_result_has_fields_and_prints_as_a_table(reg):
    reg.register_op_override("first_dsl", *KEY, lambda a, b: False, seven)
    reg.register_op_override("second_dsl", *KEY, lambda a, b: True, seven)
    reg.register_all_overrides()
    explained = reg.explain(MUL, A, B)
    assert isinstance(explained, native_registry.Explanation)
    assert explained.op == "aten::mul.Tensor"
    assert explained.dispatch_key == "CPU"
    assert explained.router == "active"
    assert explained.coverage == "none set"
    first, second = explained.nodes
    assert (first.dsl_name, first.verdict) == ("first_dsl", "declined")
    assert (second.dsl_name, second.verdict) == ("second_dsl", "accepted")
    assert explained.kernel == Kernel(
        "impl", second.node_id, "second_dsl", "the node's impl runs")
    lines = str(explained).splitlines()
    assert lines[0] == "explain aten::mul.Tensor at CPU"
    header = next(line for line in lines if "node_id" in line)
    assert header.split() == ["#", "node_id", "dsl", "verdict", "detail"]
    row = next(line for line in lines if first.node_id in line)
    # Columns line up: each row's verdict starts where the header's does.
    assert row.index("declined") == header.index("verdict")
    assert lines[-1].startswith(f"  kernel:   impl of {second.node_id} (dsl second_dsl)")
    # The repr shows the fields, not the table printed beside them.
    assert repr(explained).startswith("Explanation(op='aten::mul.Tensor', dispatch_key='CPU'")
    assert "explain aten::mul.Tensor at CPU" not in repr(explained)


def test_ops_are_taken_as_overloads_or_names(reg):
    reg.register_op_override("bmm_dsl", "aten", "bmm", "CPU", lambda a, b: True, seven)
    x = torch.ones(1, 2, 2)
    for op in (torch.ops.aten.bmm.default, "aten::bmm", "aten::bmm.default"):
        explained = reg.explain(op, x, x)
        assert [n.dsl_name for n in explained.nodes] == ["bmm_dsl"], op
        assert explained.kernel.kind == "no router"


def test_a_python_cond_is_handed_the_call_as_the_router_hands_it(reg):
    seen = []

    def cond(*args, **kwargs):
        seen.append((args, kwargs))
        return False

    reg.register_op_override("seeing", *KEY, cond, seven)
    reg.register_all_overrides()
    reg.explain(MUL, A, other=B)
    with torch.inference_mode(False):
        torch.mul(A, B)
    assert len(seen) == 2
    (explained_args, explained_kwargs), (called_args, called_kwargs) = seen
    assert len(explained_args) == len(called_args) and explained_kwargs == called_kwargs
    assert all(a is b for a, b in zip(explained_args, called_args))


def test_the_native_op_by_its_torch_ops_name(reg):
    reg.register_op_override("native_dsl", *KEY, lambda a, b: False, seven)
    reg.register_all_overrides()
    node = reg.graph(*KEY)[0]
    native = getattr(torch.ops._native, node.node_id).default
    explained = reg.explain(native)
    assert [(n.node_id, n.verdict) for n in explained.nodes] == [(node.node_id, "native op")]
    assert explained.kernel.node_id == node.node_id
    assert "directly" in explained.nodes[0].detail


def test_a_keyboard_interrupt_in_a_cond_propagates(reg):
    def cond(a, b):
        raise KeyboardInterrupt

    reg.register_op_override("interrupted", *KEY, cond, seven)
    reg.register_all_overrides()
    with pytest.raises(KeyboardInterrupt):
        reg.explain(MUL, A, B)


def test_a_runtime_check_is_never_asked(reg):
    asked = []
    reg.register_op_override("jit", *KEY, lambda a, b: True, seven,
                             try_initialize_runtime=lambda: asked.append(1) or True)
    reg.register_all_overrides()
    explained = reg.explain(MUL, A, B)
    assert explained.nodes[0].verdict == "runtime check"
    assert "not asked" in explained.nodes[0].detail
    assert "op's own kernel" in explained.kernel.detail
    assert asked == []


@pytest.mark.parametrize("call, error, match", [
    (lambda r: r.explain(torch.ops.aten.mul, A, B), TypeError, "overload"),
    (lambda r: r.explain(42, A, B), TypeError, "42"),
    (lambda r: r.explain("mul.Tensor", A, B), ValueError, "mul.Tensor"),
    (lambda r: r.explain("aten::no_such_op_42", A, B), AttributeError, "no_such_op_42"),
    (lambda r: r.explain(MUL, A, B, dispatch_key=3), TypeError, "dispatch_key"),
    (lambda r: r.explain(MUL, A, B, dispatch_key=""), ValueError, "dispatch_key"),
    (lambda r: r.explain(MUL, A, B, dispatch_key="CUDA"), ValueError, "CUDA"),
    (lambda r: r.explain(MUL, A), RuntimeError, "other"),
    (lambda r: r.explain("_native::not_a_node_42"), AttributeError, "not_a_node_42"),
])
def test_refused_input_names_the_value_and_changes_nothing(reg, call, error, match):
    reg.register_op_override("kept", *KEY, lambda a, b: True, seven)
    reg.register_all_overrides()
    before = reg.graph(*KEY)
    with pytest.raises(error, match=match):
        call(reg)
    assert reg.graph(*KEY) == before
    assert torch.equal(torch.mul(A, B), torch.full_like(A, 7.0))
