"""The registry under PyTorch's tracers: the Dynamo shortcut and its
re-entrancy guard, copy-on-write inputs, FakeTensorMode, torch.compile with
the eager and inductor backends, and torch.export with native_decomp_table()."""

from __future__ import annotations

from unittest.mock import MagicMock, patch

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import native_registry.registry as registry
from native_registry import predicates as P
from conftest import mul

from fixtures.python.torch_fixtures import A, B, STOCK


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def install_declining(reg, cond):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", cond,
                             MagicMock(side_effect=AssertionError("impl ran")))
    reg.register_all_overrides()


def test_compile_session_flag_falls_through_without_recursion(reg):
    if not hasattr(torch.compiler, "_compile_session_context"):  # added after torch 2.11
        pytest.skip(f"unsupported: torch {torch.__version__} has no torch.compiler._compile_session_context")
    install_declining(reg, lambda *a, **k: False)
    with torch.compiler._compile_session_context():
        out = mul(A, B)
    assert torch.equal(out, STOCK)


def test_folded_dynamo_flag_on_real_tensors_does_not_recurse(reg):
    calls = []

    def cond(*a, **k):
        # Reached only through the re-entrant call the shortcut makes, so the
        # guard must be held here.
        calls.append(registry._router_active.on)
        return False

    install_declining(reg, cond)
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        out = mul(A, B)
    assert torch.equal(out, STOCK)
    assert calls == [True], "cond must be consulted exactly once, under the guard"


def test_dynamo_shortcut_still_fires_for_outer_call(reg):
    calls = []
    install_declining(reg, lambda *a, **k: calls.append(1) or False)
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True) as flag:
        out = mul(A, B)
    assert torch.equal(out, STOCK)
    assert flag.call_count == 1, "the outer call consults the shortcut, the re-entered one does not"
    assert calls == [1]
    assert not registry._router_active.on


def test_dynamo_shortcut_preserves_cow_fallback(reg):
    seen = []
    install_declining(reg, lambda *a, **k: seen.append(1) or False)

    @torch.compile(backend="eager")
    def fn(a, b):
        with torch.device("cpu"):
            return torch.mul(a, b)

    a = torch._lazy_clone(torch.tensor([2.0, 3.0]))
    b = torch._lazy_clone(torch.tensor([4.0, 5.0]))
    assert torch._C._is_cow_tensor(a) and torch._C._is_cow_tensor(b)
    assert torch.equal(fn(a, b), STOCK)
    assert seen
    assert torch._C._is_cow_tensor(a) and torch._C._is_cow_tensor(b)


def test_cow_inputs_are_never_diverted(reg):
    calls = []
    install_declining(reg, lambda *a, **k: calls.append(registry._router_active.on) or False)
    a = torch._lazy_clone(A.clone())  # lazy cloning makes its source copy-on-write too
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(mul(a, B), STOCK)
    assert calls == [False]


def test_a_raising_dynamo_flag_reaches_the_caller_and_changes_nothing(reg):
    calls = []
    install_declining(reg, lambda *a, **k: calls.append(1) or False)
    flag = MagicMock(side_effect=RuntimeError("flag broke"))
    with patch.object(torch.compiler, "is_dynamo_compiling", flag):
        with pytest.raises(RuntimeError, match="flag broke"):
            mul(A, B)
    assert calls == [], "no cond runs once the flag has raised"
    assert not registry._router_active.on
    assert torch.equal(mul(A, B), STOCK) and calls == [1]


def test_a_patched_dynamo_flag_is_seen_from_the_next_call_on(reg):
    # The binding keeps its last lookup of the flag while torch.compiler's
    # namespace is unchanged (before Python 3.12): any change there, the
    # patch, an unrelated name, the unpatch, must be seen by the next call.
    calls = []
    install_declining(reg, lambda *a, **k: calls.append(registry._router_active.on) or False)
    mul(A, B)
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True) as flag:
        mul(A, B)
        with patch.object(torch.compiler, "nr_unrelated_name", 1, create=True):
            mul(A, B)
        mul(A, B)
    mul(A, B)
    assert flag.call_count == 3
    assert calls == [False, True, True, True, False], "diverted calls consult the cond under the guard"


def test_chains_of_cpp_predicates_never_consult_the_shortcut(reg):
    install_declining(reg, P.never())
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True) as flag:
        assert torch.equal(mul(A, B), STOCK)
    assert flag.call_count == 0


def test_fake_tensor_shape_inference(reg):
    impl = MagicMock(side_effect=AssertionError("implementation ran"))
    runtime = MagicMock(side_effect=AssertionError("runtime initialization ran"))
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a, **k: True, impl,
                             try_initialize_runtime=runtime)
    reg.register_all_overrides()
    node = reg.graph("aten", "mul.Tensor", "CPU")[0]
    with FakeTensorMode():
        a = torch.empty(3, 4, dtype=torch.float32)
        b = torch.empty(3, 4, dtype=torch.float32)
        out = torch.ops.aten.mul.Tensor(a, b)
        # The opaque op itself shape-infers through its meta kernel.
        native_out = getattr(torch.ops._native, node.node_id).default(a, b)
    for result in (out, native_out):
        assert result.shape == torch.Size([3, 4]) and result.dtype == torch.float32
    impl.assert_not_called()
    runtime.assert_not_called()


def test_compile_eager_backend_routes_through_the_override(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: a.numel() == 2,
                             lambda a, b: torch.full_like(a, 42.0))
    reg.register_all_overrides()
    fn = torch.compile(lambda a, b: torch.mul(a, b) + 1, backend="eager")
    assert torch.equal(fn(A, B), torch.tensor([43.0, 43.0]))
    assert torch.equal(fn(torch.tensor([2.0]), torch.tensor([4.0])), torch.tensor([9.0]))


def test_compile_inductor_uses_overrides_only_through_the_table(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True,
                             lambda a, b: torch.full_like(a, 42.0))
    reg.register_all_overrides()

    def fn(a, b):
        return torch.mul(a, b) + 1

    with torch._inductor.config.patch(fx_graph_cache=False):
        plain = torch.compile(fn, backend="inductor")(A, B)
    torch._dynamo.reset()
    routed = torch.compile(fn, backend=reg.compile_backend("inductor"))(A, B)
    torch._dynamo.reset()
    aot = torch.compile(fn, backend=reg.compile_backend("aot_eager"))(A, B)
    assert torch.equal(plain, STOCK + 1), "inductor lowers mul itself unless given the table"
    assert torch.equal(routed, torch.tensor([43.0, 43.0]))
    assert torch.equal(aot, torch.tensor([43.0, 43.0]))
    with pytest.raises(ValueError, match="'inductor' or 'aot_eager'"):
        reg.compile_backend("tvm")


class MulPlusOne(torch.nn.Module):
    def forward(self, a, b):
        return torch.mul(a, b) + 1


def test_export_run_decompositions_turns_the_op_into_its_native_op(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True,
                             lambda a, b: torch.full_like(a, 42.0))
    reg.register_all_overrides()
    node = reg.graph("aten", "mul.Tensor", "CPU")[0]
    ep = torch.export.export(MulPlusOne(), (A, B)).run_decompositions(reg.native_decomp_table())
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert f"_native.{node.node_id}.default" in targets
    assert "aten.mul.Tensor" not in targets
    assert torch.equal(ep.module()(A, B), torch.tensor([43.0, 43.0]))


def test_export_cond_exceptions_count_as_no_match(reg):
    def cond(a, b):
        raise RuntimeError("undefined on fake tensors")

    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", cond, lambda a, b: a)
    reg.register_all_overrides()
    ep = torch.export.export(MulPlusOne(), (A, B)).run_decompositions(reg.native_decomp_table())
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten.mul.Tensor" in targets
    assert not any(t.startswith("_native.") for t in targets)


def test_native_decomp_table_contents(reg):
    assert reg.native_decomp_table(overrides_only=True) == {}
    defaults = torch.export.default_decompositions()
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda *a: True,
                             lambda a, b: a)
    reg.register_all_overrides()
    only = reg.native_decomp_table(overrides_only=True)
    assert list(only) == [torch.ops.aten.mul.Tensor]
    full = reg.native_decomp_table()
    # Both route a matching call to the override's impl (it returns `a`).
    a, b = torch.tensor([2.0]), torch.tensor([3.0])
    for table in (only, full):
        assert torch.equal(table[torch.ops.aten.mul.Tensor](a, b), a)
    assert len(full) >= len(defaults)


# ---- callables written on a registered node ---------------------------------------
# A node registered with C++ predicates only is never diverted (its choice needs no
# Python). A Python cond or runtime check written on it later must make it so, as if
# registered with it: else Dynamo's folded flag would meet a Python cond outside the
# re-entrancy guard.

def predicate_node(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", P.dtype_in(torch.float32),
                             MagicMock(side_effect=AssertionError("impl ran")))
    reg.register_all_overrides()
    return reg.graph("aten", "mul.Tensor", "CPU")[0]


def test_a_python_cond_written_over_a_predicate_is_diverted_while_tracing(reg):
    guarded = []
    node = predicate_node(reg)
    node.cond_fn = lambda *a, **k: guarded.append(registry._router_active.on) or False
    reg.register_all_overrides()
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(mul(A, B), STOCK)
    assert guarded == [True], "the written Python cond ran outside the diverted call"


def test_a_python_runtime_check_written_over_predicates_is_diverted_while_tracing(reg):
    guarded = []
    node = predicate_node(reg)
    node.try_initialize_runtime = lambda: guarded.append(registry._router_active.on) or False
    reg.register_all_overrides()
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(mul(A, B), STOCK)
    assert guarded == [True], "the written runtime check ran outside the diverted call"


def test_a_predicate_written_over_a_predicate_leaves_the_node_undiverted(reg):
    node = predicate_node(reg)
    node.cond_fn = P.dtype_in(torch.float16)
    reg.register_all_overrides()
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True) as flag:
        assert torch.equal(mul(A, B), STOCK)
    assert flag.call_count == 0, "a node of C++ predicates only asked the tracer"
