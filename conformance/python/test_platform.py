"""Platform profile: properties of the host PyTorch build that the seed file
checks (Dynamo's guards and graph breaks on copy-on-write state, export's
refusal of COW checks). They need no registry and are reported per PyTorch
version."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.trace_rules as trace_rules
from torch._subclasses.fake_tensor import FakeTensorMode

from conftest import behaviour


class CowWrapper(torch.Tensor):
    """A wrapper subclass whose dispatch must never be reached."""

    @staticmethod
    def __new__(cls, elem):
        out = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=elem.requires_grad, strides=elem.stride(),
            storage_offset=elem.storage_offset())
        out.elem = elem
        return out

    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return CowWrapper(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise AssertionError("unexpected dispatch")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def lazy(values=(2.0, 3.0)):
    return torch._lazy_clone(torch.tensor(list(values)))


@behaviour("platform.dynamo-guards-on-cow-state")
def test_dynamo_guards_on_cow_state():
    fn = torch.compile(lambda a: torch._C._is_cow_tensor(a), backend="eager")
    assert not fn(torch.tensor([2.0, 3.0]))
    assert fn(lazy())


@behaviour("platform.graph-break-sourceless-cow")
def test_graph_break_on_sourceless_cow_state():
    fn = torch.compile(lambda a: torch._C._is_cow_tensor(a.view_as(a)), backend="eager")
    assert not fn(torch.tensor([2.0, 3.0]))
    assert fn(lazy())


@behaviour("platform.graph-break-mutated-cow")
def test_graph_break_on_mutated_cow_state():
    @torch.compile(backend="eager")
    def fn(a):
        a.add_(1)
        return torch._C._is_cow_tensor(a)

    assert not fn(lazy())


@behaviour("platform.graph-break-after-lazy-clone")
def test_graph_break_after_lazy_clone():
    @torch.compile(backend="inductor")
    def fn(a):
        clone = a._lazy_clone()
        return torch._C._is_cow_tensor(a), torch._C._is_cow_tensor(clone)

    assert fn(torch.tensor([2.0, 3.0])) == (True, True)


@behaviour("platform.graph-break-after-lazy-clone-function")
def test_graph_break_after_lazy_clone_function_in_graph():
    fn_id = id(torch._lazy_clone)
    sets = (trace_rules._allowed_callable_ids, trace_rules._disallowed_callable_ids,
            trace_rules._nonstrict_trace_callable_ids)
    prior = [fn_id in s for s in sets]
    if fn_id in trace_rules._disallowed_callable_ids:
        trace_rules._disallowed_callable_ids.remove(fn_id)
    trace_rules._allowed_callable_ids.add(fn_id)
    try:
        torch._dynamo.reset()

        @torch.compile(backend="eager")
        def fn(a):
            clone = torch._lazy_clone(a)
            return torch._C._is_cow_tensor(a), torch._C._is_cow_tensor(clone)

        assert fn(torch.tensor([2.0, 3.0])) == (True, True)
    finally:
        for s, was in zip(sets, prior):
            if fn_id in s:
                s.remove(fn_id)
            if was:
                s.add(fn_id)


@behaviour("platform.graph-break-after-lazy-clone-view")
def test_graph_break_after_lazy_clone_of_a_view():
    @torch.compile(backend="eager")
    def fn(a):
        view = a.view(-1)
        clone = view._lazy_clone()
        return (torch._C._is_cow_tensor(a), torch._C._is_cow_tensor(view),
                torch._C._is_cow_tensor(clone))

    assert fn(torch.tensor([2.0, 3.0])) == (True, True, True)


@behaviour("platform.cow-guard-misses-on-fake")
def test_cow_guard_misses_on_fake_tensor():
    from torch._dynamo.guards import _cow_tensor_matches

    with FakeTensorMode():
        fake = torch.empty(2)
    assert not _cow_tensor_matches(fake, False)
    assert not _cow_tensor_matches(fake, True)


@behaviour("platform.is-cow-rejects-subclasses")
def test_is_cow_tensor_rejects_subclasses():
    with pytest.raises(RuntimeError, match="_is_cow_tensor is not defined for Python tensor subclasses"):
        torch._C._is_cow_tensor(CowWrapper(torch.tensor([2.0, 3.0])))


@behaviour("platform.graph-break-subclass-cow")
def test_fullgraph_refuses_cow_check_on_subclass():
    fn = torch.compile(lambda a: torch._C._is_cow_tensor(a), backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="COW tensor check on Python tensor subclass"):
        fn(CowWrapper(torch.tensor([2.0, 3.0])))


@behaviour("platform.allows-previously-mutated-cow")
def test_previously_mutated_tensor_compiles_fullgraph():
    fn = torch.compile(lambda a: torch._C._is_cow_tensor(a), backend="eager", fullgraph=True)
    x = torch.tensor([2.0, 3.0])
    x.add_(1)
    assert not fn(x)


class BranchOnCow(torch.nn.Module):
    def forward(self, a):
        if torch._C._is_cow_tensor(a):
            return a + 1
        return a + 2


@behaviour("platform.strict-export-rejects-cow")
def test_strict_export_rejects_cow_check():
    with pytest.raises(Exception, match="COW tensor check during export"):
        torch.export.export(BranchOnCow(), (lazy(),), strict=True)


@behaviour("platform.non-strict-export-rejects-cow")
def test_non_strict_export_rejects_cow_check():
    with pytest.raises(Exception, match="_is_cow_tensor is not defined for Python tensor subclasses"):
        torch.export.export(BranchOnCow(), (lazy(),), strict=False)
