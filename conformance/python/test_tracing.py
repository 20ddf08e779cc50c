"""The registry under PyTorch's tracers: FakeTensorMode, the Dynamo shortcut
and its re-entrancy flag, copy-on-write inputs, torch.export, and the
kernel-override notice."""

from __future__ import annotations

from unittest.mock import MagicMock, patch

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conftest import behaviour, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY


def install_declining(impl, cond, key=KEY):
    impl.register("test_dsl", *key, cond, MagicMock(side_effect=AssertionError("impl ran")))
    impl.install(*key)


def declining_cond_noting_the_guard(impl, guard_states: list):
    """A cond that declines and appends, at each call, whether the
    re-entrancy guard is held."""
    def cond(*args, **kwargs):
        guard_states.append(impl.in_reentrant_call())
        return False
    return cond


@behaviour("fake.shape-inference-without-impl")
def test_fake_tensor_shape_inference(impl):
    body = MagicMock(side_effect=AssertionError("implementation ran"))
    runtime = MagicMock(side_effect=AssertionError("runtime initialization ran"))
    extra = {"try_initialize_runtime": runtime} if "runtime-init" in impl.features else {}
    impl.register("test_dsl", *KEY, lambda *a, **k: True, body, **extra)
    impl.install(*KEY)
    native = impl.native_op(impl.graph(*KEY)[0])
    with FakeTensorMode():
        a = torch.empty(3, 4, dtype=torch.float32)
        b = torch.empty(3, 4, dtype=torch.float32)
        outs = [torch.ops.aten.mul.Tensor(a, b), native(a, b)]
    for out in outs:
        assert out.shape == torch.Size([3, 4]) and out.dtype == torch.float32
    body.assert_not_called()
    runtime.assert_not_called()


@behaviour("dynamo.compile-session-no-recursion")
def test_compile_session_flag_falls_through(impl):
    if not hasattr(torch.compiler, "_compile_session_context"):  # added after torch 2.11
        pytest.skip(f"unsupported: torch {torch.__version__} has no torch.compiler._compile_session_context")
    install_declining(impl, lambda *a, **k: False)
    with torch.compiler._compile_session_context():
        assert torch.equal(mul(), STOCK)


@behaviour("dynamo.folded-flag-reenters-once")
def test_folded_flag_reenters_once_under_the_guard(impl):
    guard_states = []
    install_declining(impl, declining_cond_noting_the_guard(impl, guard_states))
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(mul(), STOCK)
    assert guard_states == [True]


@behaviour("dynamo.shortcut-fires-for-outer-call")
def test_shortcut_fires_for_the_outer_call(impl):
    calls = []
    install_declining(impl, lambda *a, **k: calls.append(1) or False)
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True) as flag:
        assert torch.equal(mul(), STOCK)
    assert flag.called
    assert calls == [1]
    assert not impl.in_reentrant_call()


@behaviour("cow.keeps-eager-path")
def test_cow_inputs_keep_the_eager_fallback(impl, fresh_dynamo):
    seen = []
    install_declining(impl, lambda *a, **k: seen.append(1) or False)

    @torch.compile(backend="eager")
    def fn(a, b):
        with torch.device("cpu"):
            return torch.mul(a, b)

    a = torch._lazy_clone(torch.tensor([2.0, 3.0]))
    b = torch._lazy_clone(torch.tensor([4.0, 5.0]))
    assert torch.equal(fn(a, b), STOCK)
    assert seen
    assert torch._C._is_cow_tensor(a) and torch._C._is_cow_tensor(b)


@behaviour("cow.never-diverted")
def test_cow_inputs_are_never_diverted(impl):
    guard_states = []
    install_declining(impl, declining_cond_noting_the_guard(impl, guard_states))
    a = torch._lazy_clone(torch.tensor([2.0, 3.0]))
    b = torch._lazy_clone(torch.tensor([4.0, 5.0]))
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(torch.mul(a, b), STOCK)
    assert guard_states == [False], "a call on copy-on-write inputs was diverted"
    assert torch._C._is_cow_tensor(a) and torch._C._is_cow_tensor(b)


@behaviour("cow.never-diverted")
def test_a_cow_tensor_inside_a_list_is_never_diverted(impl):
    guard_states = []
    install_declining(impl, declining_cond_noting_the_guard(impl, guard_states), key=("aten", "cat", "CPU"))
    cow = torch._lazy_clone(torch.tensor([4.0, 5.0]))
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(torch.cat([torch.tensor([2.0, 3.0]), cow]), torch.tensor([2.0, 3.0, 4.0, 5.0]))
    assert guard_states == [False], "a list holding a copy-on-write tensor was diverted"
    assert torch._C._is_cow_tensor(cow)


class MulPlusOne(torch.nn.Module):
    def forward(self, a, b):
        return torch.mul(a, b) + 1


def call_targets(ep):
    return {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}


@behaviour("export.decomp-table-routes-to-native-op")
def test_export_routes_through_the_native_op(impl):
    impl.register("test_dsl", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 42.0))
    impl.install(*KEY)
    node_id = impl.graph(*KEY)[0].node_id
    ep = torch.export.export(MulPlusOne(), (A, B)).run_decompositions(impl.decomp_table())
    assert f"_native.{node_id}.default" in call_targets(ep)
    assert "aten.mul.Tensor" not in call_targets(ep)
    assert torch.equal(ep.module()(A, B), torch.tensor([43.0, 43.0]))


@behaviour("export.decomp-table-routes-to-native-op")
def test_export_counts_cond_exceptions_as_no_match(impl):
    def cond(a, b):
        raise RuntimeError("undefined while tracing")

    impl.register("test_dsl", *KEY, cond, lambda a, b: a)
    impl.install(*KEY)
    ep = torch.export.export(MulPlusOne(), (A, B)).run_decompositions(impl.decomp_table())
    assert "aten.mul.Tensor" in call_targets(ep)


@behaviour("export.decomp-table-routes-to-native-op")
def test_export_tries_the_next_node_after_a_cond_exception(impl):
    def cond(a, b):
        raise RuntimeError("undefined while tracing")

    impl.register("first", *KEY, cond, lambda a, b: a)
    impl.register("second", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 42.0))
    impl.install(*KEY)
    second = impl.graph(*KEY)[1].node_id
    ep = torch.export.export(MulPlusOne(), (A, B)).run_decompositions(impl.decomp_table())
    assert f"_native.{second}.default" in call_targets(ep), "a cond's exception ended the chain"


@behaviour("warnings.override-notice-filtered")
def test_install_prints_no_override_notice(impl):
    # LibTorch prints the notice once per process, so each check gets a fresh
    # one, which must load this very implementation (checked by identity).
    # A notice LibTorch prints itself (no Python warning) goes to stderr.
    printed: list[str] = []
    verdict = run_in_fresh_interpreter(impl, stderr=printed, body="""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with impl.scope():
                impl.register("d", "aten", "mul.Tensor", "CPU", lambda *a: False, lambda a, b: a)
                impl.install("aten", "mul.Tensor", "CPU")
                torch.ops.aten.mul.Tensor(torch.ones(1), torch.ones(1))
                warnings.warn("an unrelated warning")
        texts = [str(w.message) for w in caught]
        print(any("Overriding a previously registered kernel" in t for t in texts),
              any("an unrelated warning" in t for t in texts))
    """)[-1]
    notice_seen, other_seen = verdict.split()
    assert other_seen == "True", "the probe must see ordinary warnings"
    assert notice_seen == "False", "the kernel-override notice reached the user"
    assert "Overriding a previously registered kernel" not in printed[0], \
        "LibTorch printed the kernel-override notice to stderr"


@behaviour("cow.never-diverted")
def test_a_cow_keyword_argument_is_never_diverted(impl):
    guard_states = []
    install_declining(impl, declining_cond_noting_the_guard(impl, guard_states))
    cow = torch._lazy_clone(torch.tensor([4.0, 5.0]))
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(torch.ops.aten.mul.Tensor(A, other=cow), STOCK)
    assert guard_states == [False], "a copy-on-write keyword argument was diverted"
    assert torch._C._is_cow_tensor(cow)


SILU = ("aten", "silu", "CPU")  # an op torch.export.default_decompositions() decomposes


@behaviour("export.decomp-table-contents")
def test_decomp_table_is_the_defaults_with_the_overrides_winning(impl):
    defaults = torch.export.default_decompositions()
    silu, mul_op = torch.ops.aten.silu.default, torch.ops.aten.mul.Tensor
    assert silu in defaults, "the test needs an op the default table decomposes"
    # Routers the implementation installed before the test (torch's own
    # overrides, in upstream's case) stay; the test's come on top.
    already = dict(impl.decomp_table(overrides_only=True))
    impl.register("test_dsl", *SILU, lambda *a, **k: True, lambda x: torch.full_like(x, 9.0))
    impl.register("test_dsl", *KEY, lambda *a, **k: True, lambda a, b: torch.full_like(a, 42.0))
    impl.install(*SILU)
    impl.install(*KEY)
    overrides = impl.decomp_table(overrides_only=True)
    table = impl.decomp_table()
    assert set(overrides) == set(already) | {silu, mul_op}
    assert set(table) == set(defaults) | set(overrides)
    # The entries of the overridden ops are the overrides' routers: they take
    # the calls the conds accept (a default entry would decompose instead).
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(table[mul_op](A, B), torch.full_like(A, 42.0)), "a default entry won over an override"
    assert torch.equal(table[silu](x), torch.full_like(x, 9.0)), "a default entry won over an override"
    assert table[silu] is not defaults[silu]
    impl.disable(dsl_names="test_dsl")
    assert set(impl.decomp_table(overrides_only=True)) == set(already)
    assert set(impl.decomp_table()) == set(defaults) | set(already)
    impl.enable(dsl_names="test_dsl")
    assert set(impl.decomp_table(overrides_only=True)) == set(already) | {silu, mul_op}


@behaviour("export.router-honours-dispatch-key")
def test_a_cpu_export_is_not_routed_into_a_cuda_override(impl):
    impl.register("test_dsl", "aten", "mul.Tensor", "CUDA", lambda *a, **k: True,
                  lambda a, b: torch.full_like(a, 42.0))
    impl.install("aten", "mul.Tensor", "CUDA")
    ep = torch.export.export(MulPlusOne(), (A, B)).run_decompositions(impl.decomp_table())
    assert "aten.mul.Tensor" in call_targets(ep), "a CPU program was routed to a CUDA override"
    assert torch.equal(ep.module()(A, B), STOCK + 1)


ONES_CPU = ("aten", "ones", "CPU")


class PlusOnes(torch.nn.Module):
    def forward(self, x):
        return x + torch.ones(2)


class MetaOnes(torch.nn.Module):
    def forward(self, x):
        return torch.ones(2, device="meta")


def install_sevens(impl):
    """An override of a factory (aten::ones takes no tensor) at CPU."""
    impl.register("test_dsl", *ONES_CPU, lambda *a, **k: True, lambda *a, **k: torch.full((2,), 7.0))
    impl.install(*ONES_CPU)


@behaviour("export.factory-op-runs")
def test_an_exported_program_runs_the_override_of_a_factory_op(impl):
    install_sevens(impl)
    x = torch.zeros(2)
    assert torch.equal(PlusOnes()(x), torch.full((2,), 7.0))  # eager routes it
    ep = torch.export.export(PlusOnes(), (x,)).run_decompositions(impl.decomp_table())
    assert "aten.ones.default" not in call_targets(ep), "the factory call was not routed"
    assert torch.equal(ep.module()(x), torch.full((2,), 7.0)), (
        "the exported program's _native op of a factory did not run the impl")


@behaviour("export.factory-router-honours-device")
def test_a_factory_call_on_another_device_is_not_routed_into_a_cpu_override(impl):
    install_sevens(impl)
    x = torch.zeros(2)
    assert MetaOnes()(x).device.type == "meta"  # eager: the Meta kernel, not the CPU router
    ep = torch.export.export(MetaOnes(), (x,)).run_decompositions(impl.decomp_table())
    assert "aten.ones.default" in call_targets(ep), "a meta factory call was routed to a CPU override"
    out = ep.module()(x)
    assert out.device.type == "meta" and out.shape == (2,)


@behaviour("export.runtime-asked-at-run-time")
def test_an_exported_program_asks_the_runtime_when_it_runs(impl):
    available = [True]
    impl.register("test_dsl", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 42.0),
                  try_initialize_runtime=lambda: available[0])
    impl.install(*KEY)
    available[0] = False  # e.g. the program runs where the driver is missing
    ep = torch.export.export(MulPlusOne(), (A, B)).run_decompositions(impl.decomp_table())
    eager = MulPlusOne()(A, B)
    assert torch.equal(eager, STOCK + 1)
    assert torch.equal(ep.module()(A, B), eager), "the exported program ran an impl whose runtime is unavailable"
