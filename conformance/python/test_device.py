"""The registry at the keys of the run's device (--device; conformance/devices.toml):
the device's tensors routed, declined and filtered at its backend key (CUDA),
its autograd key (AutogradCUDA) and its autocast key (AutocastCUDA), under
autograd, FakeTensorMode, the trace shortcut, copy-on-write inputs and export.

Every test takes the `device` fixture first: without the device it is
reported "unsupported: no CUDA device", before the implementation's scope is
entered. At the default device, cpu, these are the CPU keys again.
"""

from __future__ import annotations

from unittest.mock import MagicMock, patch

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conftest import behaviour

from fixtures.python.torch_fixtures import dispatcher_state

MUL = ("aten", "mul.Tensor")


def operands(device):
    """Two tensors on the device and aten's own product of them."""
    a, b = device.tensor([2.0, 3.0]), device.tensor([4.0, 5.0])
    return a, b, torch.ops.aten.mul.Tensor(a, b)


def fill(value):
    return lambda a, *rest, **kwargs: torch.full_like(a, value)


def forbidden():
    return MagicMock(side_effect=AssertionError("impl must not run"))


@behaviour("routing.cond-true-routes-to-impl")
@pytest.mark.parametrize("which", ["backend", "autograd"])
def test_cond_true_routes_at_the_device_keys(device, impl, which):
    key = (*MUL, device.key if which == "backend" else device.autograd_key)
    a, b, _ = operands(device)
    impl.register("test_dsl", *key, lambda *args, **kwargs: True, fill(42.0))
    impl.install(*key)
    out = torch.ops.aten.mul.Tensor(a, b)
    assert out.device == a.device
    assert torch.equal(out, torch.full_like(a, 42.0))


@behaviour("routing.cond-false-falls-back")
def test_cond_false_falls_back_on_the_device(device, impl):
    key = (*MUL, device.key)
    a, b, stock = operands(device)
    cond, body = MagicMock(return_value=False), forbidden()
    impl.register("test_dsl", *key, cond, body)
    impl.install(*key)
    impl.install(*key)  # replaced: the fallback is still the op's own kernel
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)
    assert cond.call_count == 1
    body.assert_not_called()


@behaviour("routing.first-match-wins")
def test_first_match_wins_on_the_device(device, impl):
    key = (*MUL, device.key)
    a, b, _ = operands(device)
    first, winner, later = (MagicMock(return_value=v) for v in (False, True, True))
    impl.register("a", *key, first, forbidden())
    impl.register("b", *key, winner, fill(1.0))
    impl.register("c", *key, later, fill(2.0))
    impl.install(*key)
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), torch.ones_like(a))
    assert first.call_count == 1 and winner.call_count == 1
    later.assert_not_called()


@behaviour("routing.fallback-past-a-fallthrough-key")
def test_fallback_past_the_device_autocast_key(device, impl):
    key = (*MUL, device.autocast_key)
    a, b, stock = operands(device)
    declines = MagicMock(return_value=False)
    impl.register("a", *key, declines, forbidden())
    impl.install(*key)
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)
    declines.assert_not_called()  # the autocast key is not among a plain call's keys
    with torch.autocast(device.name):
        assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)
        assert declines.call_count == 1
        impl.register("b", *key, lambda *args, **kwargs: True, fill(7.0))
        impl.install(*key)
        assert torch.equal(torch.ops.aten.mul.Tensor(a, b), torch.full_like(a, 7.0))


@behaviour("routing.runtime-unavailable-skips")
def test_an_unavailable_runtime_skips_the_node_on_the_device(device, impl):
    key = (*MUL, device.key)
    a, b, stock = operands(device)
    body = forbidden()
    impl.register("test_dsl", *key, lambda *args: True, body, try_initialize_runtime=lambda: False)
    impl.register("next", *key, lambda *args: True, fill(5.0))
    impl.install(*key)
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), torch.full_like(a, 5.0))
    body.assert_not_called()
    impl.disable(dsl_names="next")
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)


@behaviour("routing.no-recursion-through-autograd")
def test_no_recursion_through_bmm_backward_on_the_device(device, impl):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(2, 3, 4, generator=generator).to(device.name).requires_grad_()
    b = torch.randn(2, 4, 5, generator=generator).to(device.name).requires_grad_()
    ones = torch.ones(2, 3, 5, device=device.name)
    # Computed before the router is installed, so that cond sees only the test's calls.
    expected = a.detach() @ b.detach()
    grad_a, grad_b = ones @ b.detach().transpose(1, 2), a.detach().transpose(1, 2) @ ones
    cond = MagicMock(return_value=False)
    impl.register("test_dsl", "aten", "bmm", device.key, cond, forbidden())
    impl.install("aten", "bmm", device.key)
    out = torch.bmm(a, b)
    out.sum().backward()
    assert cond.call_count == 3, "forward and the two backward bmm calls each consult cond once"
    assert torch.allclose(out, expected)
    assert torch.allclose(a.grad, grad_a)
    assert torch.allclose(b.grad, grad_b)


@behaviour("unconditional.cond-none-always-matches", "unconditional.survives-disable")
def test_unconditional_override_takes_every_call_and_survives_disable_on_the_device(device, impl):
    key = (*MUL, device.key)
    a, b, _ = operands(device)
    impl.register("test_dsl", *key, None, fill(3.0), unconditional_override=True)
    impl.install(*key)
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), torch.full_like(a, 3.0))
    impl.disable(dsl_names="test_dsl")
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), torch.full_like(a, 3.0))


@behaviour("filters.disable-reenable-roundtrip")
def test_disable_and_reenable_on_the_device(device, impl):
    key = (*MUL, device.key)
    a, b, stock = operands(device)
    impl.register("test_dsl", *key, lambda *args: True, fill(9.0))
    impl.install(*key)
    impl.disable(dsl_names="test_dsl")
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)
    impl.enable(dsl_names="test_dsl")
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), torch.full_like(a, 9.0))


@behaviour("filters.by-op-symbol-and-dispatch-key")
def test_a_dispatch_key_filter_takes_only_that_key(device, impl):
    other = "CUDA" if device.key == "CPU" else "CPU"  # a key this device's calls never reach
    a, b, stock = operands(device)
    impl.register("test_dsl", *MUL, device.key, lambda *args: True, fill(9.0))
    impl.register("test_dsl", *MUL, other, lambda *args: True, fill(8.0))
    impl.install(*MUL, device.key)
    impl.install(*MUL, other)
    impl.disable(dispatch_keys=device.key)
    assert [n.active for n in impl.graph(*MUL, device.key)] == [False]
    assert [n.active for n in impl.graph(*MUL, other)] == [True]
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)
    impl.enable(dispatch_keys=device.key)
    impl.disable(op_symbols="mul.Tensor")
    assert [n.active for n in impl.graph(*MUL, device.key) + impl.graph(*MUL, other)] == [False, False]


@behaviour("teardown.dispatcher-restored-exactly")
def test_teardown_restores_the_device_tables_exactly(device, impl):
    a, b, stock = operands(device)
    before = dispatcher_state()
    with impl.scope():
        for key in (device.key, device.autograd_key, device.autocast_key):
            impl.register("test_dsl", *MUL, key, lambda *args: False, forbidden())
            impl.install(*MUL, key)
        impl.register("test_dsl", "aten", "bmm", device.key, lambda *args: False, forbidden())
        impl.install("aten", "bmm", device.key)
        assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)
        assert dispatcher_state() != before, "the routers must have changed the tables"
        impl.disable(dsl_names="test_dsl")
    assert dispatcher_state() == before
    assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)


@behaviour("fake.shape-inference-without-impl")
def test_fake_device_tensors_infer_shapes_without_the_impl(device, impl):
    key = (*MUL, device.key)
    body = MagicMock(side_effect=AssertionError("implementation ran"))
    impl.register("test_dsl", *key, lambda *args, **kwargs: True, body)
    impl.install(*key)
    native = impl.native_op(impl.graph(*key)[0])
    with FakeTensorMode():
        a = torch.empty(3, 4, dtype=torch.float16, device=device.name)
        b = torch.empty(3, 4, dtype=torch.float16, device=device.name)
        outs = [torch.ops.aten.mul.Tensor(a, b), native(a, b)]
    for out in outs:
        assert out.shape == torch.Size([3, 4]) and out.dtype == torch.float16
        assert out.device.type == device.name
    body.assert_not_called()


@behaviour("dynamo.shortcut-fires-for-outer-call")
def test_the_trace_shortcut_on_the_device(device, impl):
    key = (*MUL, device.key)
    a, b, stock = operands(device)
    calls = []
    impl.register("test_dsl", *key, lambda *args, **kwargs: calls.append(1) or False, forbidden())
    impl.install(*key)
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True) as flag:
        assert torch.equal(torch.ops.aten.mul.Tensor(a, b), stock)
    assert flag.called
    assert calls == [1]
    assert not impl.in_reentrant_call()


@behaviour("cow.keeps-eager-path")
def test_copy_on_write_device_inputs_keep_the_eager_path(device, impl, fresh_dynamo):
    key = (*MUL, device.key)
    a0, b0, stock = operands(device)
    a, b = torch._lazy_clone(a0), torch._lazy_clone(b0)
    if not torch._C._is_cow_tensor(a):
        pytest.skip(f"unsupported: torch {torch.__version__} makes no copy-on-write {device.name} tensor")
    seen = []
    impl.register("test_dsl", *key, lambda *args, **kwargs: seen.append(1) or False, forbidden())
    impl.install(*key)

    @torch.compile(backend="eager")
    def fn(x, y):
        return torch.mul(x, y)

    assert torch.equal(fn(a, b), stock)
    assert seen
    assert torch._C._is_cow_tensor(a) and torch._C._is_cow_tensor(b)


class MulPlusOne(torch.nn.Module):
    def forward(self, a, b):
        return torch.mul(a, b) + 1


@behaviour("export.decomp-table-routes-to-native-op")
def test_export_of_device_inputs_routes_through_the_native_op(device, impl):
    key = (*MUL, device.key)
    a, b, _ = operands(device)
    impl.register("test_dsl", *key, lambda x, y: True, lambda x, y: torch.full_like(x, 42.0))
    impl.install(*key)
    node_id = impl.graph(*key)[0].node_id
    ep = torch.export.export(MulPlusOne(), (a, b)).run_decompositions(impl.decomp_table())
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert f"_native.{node_id}.default" in targets
    assert "aten.mul.Tensor" not in targets
    assert torch.equal(ep.module()(a, b), torch.full_like(a, 43.0))
