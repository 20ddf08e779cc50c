"""native_registry.check_overrides: each wrong override is found by the check
that exists for its fault and the right one passes; the report's failures,
its table and the command line; conds decide before runtimes; the registry
and the dispatcher are as they were afterwards, whatever the check found."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import subprocess
import sys
from unittest.mock import MagicMock

import pytest
import torch

import native_registry
from native_registry import predicates as P
from native_registry.check import CHECKS, check_overrides

from fixtures.python import check_registrars as F

OP = "aten::mul.Tensor"
# Every check but compile and export (a compilation each): they have tests of their own.
CHEAP = ("outputs", "inputs_unchanged", "aliasing", "fake", "gradients")
ROOT = pathlib.Path(__file__).resolve().parents[3]  # fixtures.python, importable from here


def registry_state(reg) -> tuple:
    """What the registry holds (graphs, each node's id and whether it is
    enabled, routers, published chains, filters) and the dispatch tables of
    the ops the tests override. (Not _C.dump_state(): it crashed in the GPU
    machine's build against torch 2.11.)"""
    C = reg._C
    graphs = {key: ([(h.node_id, id(h.impl_fn), C.is_enabled(h)) for h in C.graph(key)],
                    C.router_state(key), C.router_id(key) if key in C.router_keys() else None,
                    [h.node_id for h in C.published_chain(key)])
              for key in C.graph_keys()}
    tables = [torch._C._dispatch_dump(op) + torch._C._dispatch_dump_table(op)
              for op in (OP, "aten::add.Tensor")]
    return graphs, sorted(C.router_keys()), C.filters(), tables


def run(reg, registrar, checks=CHEAP, **kwargs):
    registrar()
    reg.register_all_overrides()
    before = registry_state(reg)
    report = check_overrides(OP, samples=F.samples(), checks=checks, **kwargs)
    assert registry_state(reg) == before, "check_overrides left the registry or dispatcher changed"
    return report


def statuses(report) -> dict[str, str]:
    return {r.check: r.status for r in report.results}


def test_right_impl_passes_every_check(reg):
    report = run(reg, F.right)
    assert report.failures == [] and report.ok
    assert statuses(report) == dict.fromkeys(CHEAP, "pass")
    assert report.result(reg.graph("aten", "mul.Tensor", "CPU")[0].node_id,
                         "outputs").detail == "9 samples"


def test_wrong_on_some_dtypes_found_by_outputs(reg):
    report = run(reg, F.wrong_on_integers)
    assert [r.check for r in report.failures] == ["outputs"]
    failure = report.failures[0]
    # The first differing sample: the first int64 one (floating samples come first).
    assert failure.sample.startswith("sample 6 aten::mul.Tensor(int64[3, 4], int64[3, 4])")
    assert "not equal" in failure.detail


def test_mutating_impl_found_by_inputs_unchanged(reg):
    report = run(reg, F.mutating_input)
    assert [r.check for r in report.failures] == ["inputs_unchanged"]
    assert "argument 'self'" in report.failures[0].detail
    assert report.failures[0].sample.startswith("sample 0 ")


def test_fake_shape_differs_found_by_fake(reg):
    report = run(reg, F.flattening)
    fake = report.result(report.results[0].node_id, "fake")
    assert fake.status == "fail"
    assert "impl float32[12], fake float32[3, 4]" in fake.detail
    assert statuses(report)["inputs_unchanged"] == "pass"


def test_aliasing_shortcut_found_by_aliasing(reg):
    report = run(reg, F.aliasing_shortcut)
    assert [r.check for r in report.failures] == ["aliasing"]
    # The sample whose other factor is ones.
    assert report.failures[0].sample.startswith("sample 1 aten::mul.Tensor(float32[3, 4], float32[4])")
    assert "shares storage with argument 'self'" in report.failures[0].detail


def test_compile_and_export_give_the_eager_result(reg):
    torch._dynamo.reset()
    report = run(reg, F.right, checks=("compile", "export"))
    torch._dynamo.reset()
    assert statuses(report) == {"compile": "pass", "export": "pass"}
    assert report.results[0].detail == "1 sample"


def test_export_differing_from_eager_is_a_failure(reg, monkeypatch):
    # A decomposition table that turns mul into add: the exported program
    # then differs from the eager call, which the check must report.
    table = {torch.ops.aten.mul.Tensor: lambda a, b: torch.ops.aten.add.Tensor(a, b)}
    monkeypatch.setattr(native_registry.registry, "native_decomp_table", lambda: table)
    report = run(reg, F.right, checks=("export",))
    assert [r.check for r in report.failures] == ["export"]
    assert "exported output (against eager)" in report.failures[0].detail


def test_stateful_impl_differs_under_compile(reg):
    calls = []

    def drifting(a, b):  # each call adds how often it ran before
        calls.append(1)
        return F.mul_right(a, b) + (len(calls) - 1)

    torch._dynamo.reset()
    report = run(reg, lambda: F._register(drifting), checks=("compile",))
    torch._dynamo.reset()
    assert [r.check for r in report.failures] == ["compile"]
    assert "compiled output (against eager)" in report.failures[0].detail


def test_report_failures_and_table(reg):
    report = run(reg, F.mutating_input, checks=("outputs", "inputs_unchanged"))
    node_id = reg.graph("aten", "mul.Tensor", "CPU")[0].node_id
    (failure,) = report.failures
    assert (failure.graph, failure.node_id, failure.dsl_name, failure.check, failure.status) == (
        ("aten", "mul.Tensor", "CPU"), node_id, F.DSL, "inputs_unchanged", "fail")
    table = str(report).splitlines()
    assert table[0].split() == ["graph", "node", "check", "result", "detail"]
    assert table[1].split()[:5] == ["aten::mul.Tensor/CPU", node_id, f"({F.DSL})", "outputs",
                                    "PASS"]
    assert table[2].split()[:2] == ["inputs_unchanged", "FAIL"]  # graph and node shown once
    assert failure.sample in table[2]
    assert table[-1] == "2 checks: 1 passed, 1 failed, 0 skipped"
    # A result is a value: it cannot be changed under the report, and it
    # hashes (a set of failures, a dict keyed by them).
    with pytest.raises(dataclasses.FrozenInstanceError):
        failure.status = "pass"
    assert {failure: 1}[dataclasses.replace(failure)] == 1


def test_cond_decides_before_the_runtime(reg):
    declined_runtime = MagicMock(return_value=True)
    unavailable = MagicMock(return_value=False)
    never_impl = MagicMock(side_effect=AssertionError("impl of a node without a runtime ran"))
    reg.register_op_override("declines", "aten", "mul.Tensor", "CPU", lambda *a, **k: False,
                              never_impl, try_initialize_runtime=declined_runtime)
    reg.register_op_override("no_runtime", "aten", "mul.Tensor", "CPU", lambda *a, **k: True,
                             never_impl, try_initialize_runtime=unavailable)
    report = run(reg, F.right)
    declined_runtime.assert_not_called()
    assert unavailable.called  # (the router asks it too, on each routed call)
    never_impl.assert_not_called()
    by_dsl = {}
    for r in report.results:
        by_dsl.setdefault(r.dsl_name, set()).add((r.status, r.detail))
    assert by_dsl["declines"] == {("skip", "the cond declined all 9 samples")}
    assert by_dsl["no_runtime"] == {
        ("skip", "try_initialize_runtime() says the runtime is unavailable")}
    assert {r.status for r in report.results if r.dsl_name == F.DSL} == {"pass"}


def test_each_node_checked_on_what_its_cond_accepts(reg):
    # A C++ predicate taking float64 first, then the fixture for the rest:
    # outputs are checked per node on every sample its cond accepts,
    # gradients only where the router picks the node.
    reg.register_op_override("f64", "aten", "mul.Tensor", "CPU", P.dtype_in(torch.float64),
                             F.mul_wrong_on_integers)
    report = run(reg, F.right)
    f64 = {r.check: r for r in report.results if r.dsl_name == "f64"}
    rest = {r.check: r for r in report.results if r.dsl_name == F.DSL}
    assert f64["outputs"].detail == "3 samples" and f64["gradients"].detail == "3 samples"
    assert rest["outputs"].detail == "9 samples"
    assert rest["gradients"].detail == "3 of 6 samples"  # float32 ones; int64 not differentiable
    assert report.ok


def test_disabled_node_is_reported_skipped(reg):
    reg.register_op_override("off", "aten", "mul.Tensor", "CPU", lambda *a, **k: True,
                             F.mul_wrong_on_integers)
    reg.deregister_op_overrides(disable_dsl_names="off")
    report = run(reg, F.right, checks=("outputs",))
    off = [r for r in report.results if r.dsl_name == "off"]
    assert [(r.status, r.detail.split(" (")[0]) for r in off] == [
        ("skip", "not in the router's chain")]
    assert report.ok


def test_unconditional_override_checked_against_the_ops_kernel(reg):
    reg.register_op_override(F.DSL, "aten", "mul.Tensor", "CPU", None, F.mul_wrong_on_integers,
                             unconditional_override=True)
    reg.register_all_overrides()
    before = registry_state(reg)
    report = check_overrides(OP, samples=F.samples(), checks=("outputs",))
    assert registry_state(reg) == before
    assert [r.check for r in report.failures] == ["outputs"]


def register_add(reg):
    reg.register_op_override(F.DSL, "aten", "add.Tensor", "CPU", lambda *a, **k: True,
                             lambda a, b, alpha=1: torch.add(a.clone(), b, alpha=alpha, out=torch.empty(
                                 torch.broadcast_shapes(a.shape, b.shape),
                                 dtype=torch.result_type(a, b))))
    reg.register_all_overrides()


def test_default_samples_come_from_op_db(reg):
    if importlib.util.find_spec("expecttest") is None:
        pytest.skip("unsupported: torch's op_db needs expecttest, which is not installed")
    register_add(reg)
    report = check_overrides("add.Tensor", samples_per_dtype=1,
                             checks=("outputs", "inputs_unchanged", "aliasing"))
    outputs = report.result(report.results[0].node_id, "outputs")
    assert outputs.status == "pass"
    assert int(outputs.detail.split()[0]) >= 8  # one per dtype op_db has for add


def test_default_samples_unavailable_is_a_clear_error(reg, monkeypatch):
    register_add(reg)
    before = registry_state(reg)
    # None in sys.modules makes the import fail, as a missing expecttest does.
    monkeypatch.setitem(sys.modules, "torch.testing._internal.common_methods_invocations", None)
    with pytest.raises(RuntimeError, match="op_db, which could not be imported.*pass samples="):
        check_overrides("add.Tensor")
    assert registry_state(reg) == before


@pytest.mark.parametrize("kwargs, error, match", [
    ({"checks": ("outputs", "speed")}, ValueError, "unknown check 'speed'"),
    ({"checks": "outptus"}, ValueError, "unknown check 'outptus'"),
    ({"samples": [torch.ones(2)]}, TypeError, "SampleInputs or \\(args, kwargs\\) pairs"),
    ({"samples": 3}, TypeError, "samples must be an iterable"),
    ({"samples_per_dtype": -1}, ValueError, "samples_per_dtype must be an int >= 0, got -1"),
    ({"device": "nodevice"}, ValueError, "device 'nodevice'"),
])
def test_bad_arguments_raise_and_change_nothing(reg, kwargs, error, match):
    F.right()
    reg.register_all_overrides()
    before = registry_state(reg)
    with pytest.raises(error, match=match):
        check_overrides(OP, **kwargs)
    assert registry_state(reg) == before


@pytest.mark.parametrize("op, error, match", [
    ("aten::bmm", ValueError, "op 'aten::bmm' has no installed override graph"),
    ("a::b::c", ValueError, "'a::b::c'"),
    (3, TypeError, "op must be an OpOverload or a str"),
])
def test_bad_op_raises(reg, op, error, match):
    F.right()
    reg.register_all_overrides()
    with pytest.raises(error, match=match):
        check_overrides(op)


def test_registered_but_not_installed_op_is_named(reg):
    F.right()
    with pytest.raises(ValueError, match="registered at CPU, not installed"):
        check_overrides(OP)


def test_checks_are_the_documented_ones():
    assert CHECKS == ("outputs", "inputs_unchanged", "aliasing", "fake", "gradients", "compile",
                      "export")


def command(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-W", "error", "-m", "native_registry.check", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_command_line_prints_the_report_and_fails_on_a_failure():
    common = ["--samples", "fixtures.python.check_registrars:samples", "--checks", "outputs,inputs_unchanged"]
    wrong = command("fixtures.python.check_registrars:mutating_input", *common)
    assert wrong.returncode == 1, wrong.stderr
    assert wrong.stderr == ""
    lines = wrong.stdout.splitlines()
    assert lines[0].split() == ["graph", "node", "check", "result", "detail"]
    assert any(line.split()[:2] == ["inputs_unchanged", "FAIL"] for line in lines)
    assert lines[-1] == "2 checks: 1 passed, 1 failed, 0 skipped"
    right = command("fixtures.python.check_registrars:right", *common)
    assert right.returncode == 0, right.stderr
    assert right.stdout.splitlines()[-1] == "2 checks: 2 passed, 0 failed, 0 skipped"


def test_command_line_names_what_it_cannot_load():
    missing = command("fixtures.python.check_registrars:no_such_registrar")
    assert missing.returncode == 2
    assert "no_such_registrar" in missing.stderr


def test_triton_fixture_passes_every_check_on_cuda(reg):
    if not torch.cuda.is_available():
        pytest.skip("unsupported: no CUDA device")
    from fixtures.python import triton_mul

    if triton_mul.triton is None:
        pytest.skip("unsupported: Triton is not installed")
    F.triton_mul()
    reg.register_all_overrides()
    before = registry_state(reg)
    torch._dynamo.reset()
    report = check_overrides(OP, samples=F.cuda_samples(), device="cuda")
    torch._dynamo.reset()
    assert registry_state(reg) == before
    assert report.failures == []
    # The cond takes the three float16 same-shape samples and declines the rest.
    assert {(r.check, r.status, r.detail) for r in report.results} == {
        *((c, "pass", "3 samples") for c in CHEAP), ("compile", "pass", "1 sample"),
        ("export", "pass", "1 sample")}
