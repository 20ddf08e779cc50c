"""A real DSL kernel as the override: a Triton elementwise mul on float16,
registered at CUDA, routed and declined, under autograd, torch.compile
(eager, inductor, the implementation's compile backend) and export with the
decomposition table, then torn down exactly.

The tests run at device cuda (`--device cuda`); elsewhere, or without
Triton, each is reported unsupported with the reason.
"""

from __future__ import annotations

import pytest
import torch

from conftest import behaviour

from fixtures.python.torch_fixtures import dispatcher_state

from fixtures.python.triton_mul import TritonMul, fp16_same_shape, triton

KEY = ("aten", "mul.Tensor", "CUDA")
N = 1000  # not a multiple of the block: the mask is exercised


def require_triton(device) -> None:
    """Skips as unsupported unless the run is at cuda and Triton is installed."""
    if device.name != "cuda":
        pytest.skip(f"unsupported: Triton kernels run at device cuda (this run's device is {device.name})")
    if triton is None:
        pytest.skip("unsupported: Triton is not installed")


@pytest.fixture
def triton_mul(device, impl):
    """The Triton mul installed at CUDA, in the test's scope."""
    require_triton(device)
    body = TritonMul()
    impl.register("triton", *KEY, fp16_same_shape, body)
    impl.install(*KEY)
    return body


def fp16_pair(device):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(N, generator=generator).to(device.name, torch.float16)
    b = torch.randn(N, generator=generator).to(device.name, torch.float16)
    return a, b


@behaviour("triton.routes-fp16-elementwise")
def test_the_triton_kernel_takes_fp16_and_declines_fp32(device, impl, triton_mul):
    a, b = fp16_pair(device)
    out = torch.mul(a, b)
    assert triton_mul.launches == 1
    assert out.dtype == torch.float16 and out.is_cuda
    # The kernel's product is aten's (one rounding of an exact product), computed off the router.
    assert torch.equal(out, (a.float() * b.float()).half())
    af, bf = a.float(), b.float()
    assert torch.equal(torch.mul(af, bf), (af.double() * bf.double()).float())
    assert triton_mul.launches == 1, "a float32 call launched the float16 kernel"
    torch.cuda.synchronize()


@behaviour("triton.backward-through-router")
def test_backward_through_the_triton_router(device, impl, triton_mul):
    a, b = fp16_pair(device)
    a.requires_grad_()
    b.requires_grad_()
    out = torch.mul(a, b)
    grad = torch.ones_like(out)
    out.backward(grad)
    assert triton_mul.launches == 3, "forward and both gradients (grad * other) route to the kernel"
    assert torch.equal(a.grad, b.detach())
    assert torch.equal(b.grad, a.detach())


@behaviour("triton.compile-eager-and-inductor")
@pytest.mark.parametrize("backend", ["eager", "inductor", "compile_backend"])
def test_compiled_calls_through_the_triton_router(device, impl, triton_mul, fresh_dynamo, backend):
    a, b = fp16_pair(device)
    expected = (a.float() * b.float()).half()
    if backend == "compile_backend":
        make = getattr(getattr(impl, "module", None), "compile_backend", None)
        if make is None:
            pytest.skip(f"unsupported: {impl.name} has no compile_backend")
        compiled_with = make("inductor")
    else:
        compiled_with = backend

    @torch.compile(backend=compiled_with, fullgraph=True)
    def fn(x, y):
        return torch.mul(x, y)

    out = fn(a, b)
    torch.cuda.synchronize()
    assert torch.equal(out, expected)
    if backend != "inductor":
        # eager runs the graph's aten calls through the router; the compile
        # backend decomposes mul into the override's `_native` op. Plain
        # inductor lowers mul into a kernel of its own (nothing to route).
        assert triton_mul.launches >= 1, f"backend {backend}: the Triton kernel never ran"


class MulPlusOne(torch.nn.Module):
    def forward(self, a, b):
        return torch.mul(a, b) + 1


@behaviour("triton.export-with-decomp-table")
def test_export_with_the_decomp_table_calls_the_triton_override(device, impl, triton_mul):
    a, b = fp16_pair(device)
    node_id = impl.graph(*KEY)[0].node_id
    ep = torch.export.export(MulPlusOne(), (a, b)).run_decompositions(impl.decomp_table())
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert f"_native.{node_id}.default" in targets
    assert "aten.mul.Tensor" not in targets
    launches = triton_mul.launches
    out = ep.module()(a, b)
    assert triton_mul.launches == launches + 1
    assert torch.equal(out, (a.float() * b.float()).half() + 1)


@behaviour("triton.teardown-exact")
def test_teardown_after_triton_routing_is_exact(device, impl):
    require_triton(device)
    a, b = fp16_pair(device)
    stock = torch.mul(a, b)
    before = dispatcher_state()
    overrides_before = set(impl.decomp_table(overrides_only=True))
    body = TritonMul()
    with impl.scope():
        impl.register("triton", *KEY, fp16_same_shape, body)
        impl.install(*KEY)
        torch.mul(a, b)
        torch.compile(lambda x, y: torch.mul(x, y), backend="eager")(a, b)
        torch.export.export(MulPlusOne(), (a, b)).run_decompositions(impl.decomp_table())
        assert body.launches >= 2
        assert set(impl.decomp_table(overrides_only=True)) != overrides_before
    torch._dynamo.reset()
    assert dispatcher_state() == before
    assert set(impl.decomp_table(overrides_only=True)) == overrides_before
    launches = body.launches
    assert torch.equal(torch.mul(a, b), stock)
    assert body.launches == launches, "the kernel ran after teardown"
