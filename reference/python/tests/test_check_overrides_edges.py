"""native_registry.check_overrides where generated mutants of check.py found
it unpinned (session 26): what the module exports, the default samples
(only those that fit, experimental-dtype warnings kept out), gradients of an
input the op's formula leaves without one, a node without a `_native` op,
checks not asked costing no kernel call, the op's own gradients failing,
compile's whole-graph and static-shape tracing, an in-place op's export,
and the command line's loader."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import native_registry.check as check
from native_registry import _C
from native_registry.check import check_overrides

ROOT = pathlib.Path(__file__).resolve().parents[3]
DSL = "edges"
NS = "nr_check_edges"


def accept(*args, **kwargs) -> bool:
    return True


def verdicts(report, dsl: str = DSL) -> dict[str, tuple[str, str]]:
    return {r.check: (r.status, r.detail) for r in report.results if r.dsl_name == dsl}


# ---- the module -------------------------------------------------------------------------


def test_the_module_exports_its_documented_names():
    assert check.__all__ == ["CHECKS", "CheckReport", "CheckResult", "check_overrides", "main"]
    star: dict = {}
    exec("from native_registry.check import *", star)  # noqa: S102
    assert sorted(n for n in star if n != "__builtins__") == sorted(check.__all__)


# ---- default samples ----------------------------------------------------------------------


def test_default_samples_are_only_those_that_fit_the_overloads_schema():
    # op_db's div samples include rounding_mode=, which div.Tensor's schema
    # does not take: left out, not counted among the samples per dtype.
    overload = torch.ops.aten.div.Tensor
    samples = check._op_db_samples(overload, torch.device("cpu"), 4)
    assert len(samples) >= 8
    assert [s for s in samples if isinstance(check._bind(overload._schema, *s), str)] == []


def test_default_samples_keep_experimental_dtype_warnings_out():
    # ComplexHalf samples warn (once per process) that the dtype is
    # experimental; making them is check_overrides' business, not the
    # caller's, so a fresh process sees no such warning.
    script = textwrap.dedent('''
        import warnings, torch
        import native_registry.registry as registry
        from native_registry.check import check_overrides
        with registry.scoped():
            registry.register_op_override("edges", "aten", "abs", "CPU", lambda *a, **k: True,
                                          lambda x: torch.where(x.real < 0, -x, x) if not x.is_complex() else x.abs().to(x.dtype))
            registry.register_all_overrides()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                check_overrides("aten::abs", checks=("inputs_unchanged",), samples_per_dtype=1)
        print([str(w.message)[:40] for w in seen if "experimental" in str(w.message)])
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


# ---- aliasing -------------------------------------------------------------------------------


def topk_values(x, k):
    values, _ = torch.sort(x, -1, descending=True)
    return values.narrow(-1, 0, k).contiguous()


def test_outputs_after_a_non_tensor_one_are_judged_for_aliasing(reg):
    # A non-tensor output is no alias; the tensor output after it still is
    # one, of `self`, where the schema declares a fresh tensor.
    reg.register_op_override(DSL, "aten", "topk", "CPU", accept,
                             lambda x, k: (topk_values(x, k).tolist(), x.view(torch.int64)))
    reg.register_all_overrides()
    report = check_overrides("aten::topk", samples=[((torch.arange(5.0).double(), 5), {})],
                             checks=("aliasing",))
    assert verdicts(report)["aliasing"] == (
        "fail", "output 1 shares storage with argument 'self'; the schema declares a fresh tensor")


# ---- an op of the test's own ------------------------------------------------------------

CALLS = {"kernel": 0, "fake": 0}


@pytest.fixture
def op(reg):
    """NS::scaled(Tensor x, Tensor y) -> Tensor: 2 * x (y only its partner in
    the schema: its gradient is None); NS::broken(Tensor x) -> Tensor, whose
    own kernel raises. Both counted; the registry's changes undone before the
    library goes."""
    with torch.library._scoped_library(NS, "DEF") as lib:
        lib.define("scaled(Tensor x, Tensor y) -> Tensor")
        lib.define("broken(Tensor x) -> Tensor")

        def scaled(x, y):
            CALLS["kernel"] += 1
            return x * 2

        def scaled_fake(x, y):
            CALLS["fake"] += 1
            return torch.empty_like(x)

        def broken(x):
            raise RuntimeError("the op's own kernel is broken")

        lib.impl("scaled", scaled, "CPU")
        lib.impl("broken", broken, "CPU")
        torch.library.register_fake(f"{NS}::scaled", scaled_fake, lib=lib)
        torch.library.register_fake(f"{NS}::broken", lambda x: torch.empty_like(x), lib=lib)
        torch.library.register_autograd(
            f"{NS}::scaled", lambda ctx, grad: (grad * 2, None), lib=lib)
        torch.library.register_autograd(
            f"{NS}::broken", lambda ctx, grad: grad * 3, lib=lib)
        reg.allow_namespace(NS)
        with reg.scoped():
            CALLS.update(kernel=0, fake=0)
            yield getattr(torch.ops, NS)


SCALED_SAMPLE = [((torch.ones(3), torch.full((3,), 5.0)), {})]


def test_an_input_without_a_gradient_gets_zeros_on_both_sides(reg, op):
    reg.register_op_override(DSL, NS, "scaled", "CPU", accept, lambda x, y: x * 2)
    reg.register_all_overrides()
    report = check_overrides(f"{NS}::scaled", samples=SCALED_SAMPLE, checks=("gradients",))
    assert verdicts(report) == {"gradients": ("pass", "1 sample")}


def test_checks_not_asked_cost_no_kernel_or_fake_call(reg, op):
    reg.register_op_override(DSL, NS, "scaled", "CPU", accept, lambda x, y: x * 2)
    reg.register_all_overrides()
    report = check_overrides(f"{NS}::scaled", samples=SCALED_SAMPLE,
                             checks=("outputs", "inputs_unchanged", "aliasing"))
    assert report.ok
    # The op's own kernel once (the expected outputs), no backward pass,
    # and no fake kernel, as neither gradients nor fake was asked.
    assert CALLS == {"kernel": 1, "fake": 0}


def test_the_ops_own_gradients_failing_skips_gradients_with_why(reg, op):
    reg.register_op_override(DSL, NS, "broken", "CPU", accept, lambda x: x * 3)
    reg.register_all_overrides()
    report = check_overrides(f"{NS}::broken", samples=[((torch.ones(3),), {})],
                             checks=("outputs", "gradients"))
    assert verdicts(report) == {
        "outputs": ("skip", "the op's own kernel raised RuntimeError: the op's own kernel is broken"),
        "gradients": ("skip", "the op's own gradients raised RuntimeError: the op's own kernel is "
                              "broken")}


def test_an_op_gone_from_the_dispatcher_is_skipped_and_the_graphs_after_it_checked(reg, op):
    """A routed op whose library was destroyed since: its checks are skipped
    saying so, the graphs after it in key order are still checked, and the
    registry's filters and routing are as they were. (It raised from the
    unconditional mask, which republished that op's router, until 2026-12-07.)"""
    gone_ns = "nr_check_aa_gone"  # before NS in key order
    lib = torch.library.Library(gone_ns, "DEF")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x + 1, "CPU")
    reg.allow_namespace(gone_ns)
    reg.register_op_override(DSL, gone_ns, "f", "CPU", accept, lambda x: x + 1)
    reg.register_op_override(DSL, NS, "scaled", "CPU", accept, lambda x, y: x * 2)
    reg.register_all_overrides()
    lib._destroy()
    getattr(torch.ops, gone_ns).__dict__.pop("f", None)
    report = check_overrides(samples=SCALED_SAMPLE, checks=("outputs",))
    by_op = {(r.graph[0], r.check): (r.status, r.detail) for r in report.results}
    assert by_op == {(gone_ns, "outputs"): ("skip", "the op is not in the dispatcher"),
                     (NS, "outputs"): ("pass", "1 sample")}
    assert _C.filters() == ([], [], [])
    assert len(_C.published_chain((NS, "scaled", "CPU"))) == 1


def test_a_node_without_a_native_op_skips_fake_saying_so(reg, op, monkeypatch):
    reg.register_op_override(DSL, NS, "scaled", "CPU", accept, lambda x, y: x * 2)
    reg.register_all_overrides()
    (node,) = reg.graph(NS, "scaled", "CPU")
    monkeypatch.setattr(torch.ops._native, node.node_id, None, raising=False)
    report = check_overrides(f"{NS}::scaled", samples=SCALED_SAMPLE, checks=("fake",))
    assert verdicts(report) == {
        "fake": ("skip", f"no _native op {node.node_id} (the node is not installed)")}


# ---- compile: one whole graph, static shapes -------------------------------------------------


@pytest.fixture
def dynamo_reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_an_op_dynamo_cannot_put_in_one_graph_fails_compile(reg, dynamo_reset):
    # An op with no fake kernel: Dynamo cannot trace it and breaks the graph
    # there. Run eagerly the op would check nothing; compile says so.
    with torch.library._scoped_library(NS + "_opaque", "DEF") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        reg.allow_namespace(NS + "_opaque")
        with reg.scoped():
            reg.register_op_override(DSL, NS + "_opaque", "twice", "CPU", accept, lambda x: x + x)
            reg.register_all_overrides()
            report = check_overrides(f"{NS}_opaque::twice", samples=[((torch.ones(5),), {})],
                                     checks=("outputs", "compile"))
    found = verdicts(report)
    assert found["outputs"] == ("pass", "1 sample")
    assert found["compile"][0] == "fail"
    assert found["compile"][1].startswith("torch.compile(backend='aot_eager') raised ")


def test_compile_traces_the_samples_static_shapes(reg, op, dynamo_reset):
    # An op whose fake kernel knows static shapes only: compile traces the
    # sample as it is (dynamic=False), so the check judges the override.
    def static_only(x):
        if not isinstance(x.shape[0], int):
            raise NotImplementedError("static shapes only")
        return torch.empty_like(x)

    with torch.library._scoped_library(NS + "_static", "DEF") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        torch.library.register_fake(f"{NS}_static::twice", static_only, lib=lib)
        reg.allow_namespace(NS + "_static")
        with reg.scoped():
            reg.register_op_override(DSL, NS + "_static", "twice", "CPU", accept, lambda x: x + x)
            reg.register_all_overrides()
            report = check_overrides(f"{NS}_static::twice", samples=[((torch.ones(5),), {})],
                                     checks=("compile",))
    assert verdicts(report) == {"compile": ("pass", "1 sample")}


# ---- export ---------------------------------------------------------------------------------


def test_an_in_place_op_exports_with_the_samples_tensors_as_its_inputs(reg):
    # The exported program takes the sample's tensors as inputs: were they
    # constants of the module, the write to `self` would be one to a
    # constant, which export refuses.
    reg.register_op_override(DSL, "aten", "mul_.Tensor", "CPU", accept,
                             lambda a, b: a.copy_(torch.mul(a, b)))
    reg.register_all_overrides()
    report = check_overrides("aten::mul_.Tensor",
                             samples=[((torch.ones(3), torch.full((3,), 2.0)), {})],
                             checks=("export",))
    assert verdicts(report) == {"export": ("pass", "1 sample")}


# ---- the command line's loader --------------------------------------------------------------


def test_the_loader_gives_a_module_named_without_a_function():
    import fixtures.python.check_registrars as registrars
    assert check._load("fixtures.python.check_registrars") is registrars
    assert check._load("fixtures.python.check_registrars:right") is registrars.right


def test_a_registrar_with_an_empty_function_name_is_the_module_alone(reg, capsys):
    # "MODULE:" names no function: the module is imported and nothing called,
    # as for "MODULE"; nothing registered, nothing to check.
    assert check.main(["fixtures.python.check_registrars:", "--checks", "outputs"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 checks: 0 passed, 0 failed, 0 skipped"
