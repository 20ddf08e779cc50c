"""More of native_registry.check_overrides' behaviour (test_check_overrides.py
has the main cases): how a sample is bound to the op's schema and why one
that does not fit is left out; each check on the op kinds that exercise it
(in place, out=, views, several outputs, a non-tensor output); the reasons
a check is skipped; errors for bad arguments; the table; the command line,
run in-process."""

from __future__ import annotations

import collections
import sys
import types
import uuid
import warnings

import pytest
import torch

import native_registry
from native_registry import predicates as P
from native_registry.check import CheckReport, CheckResult, check_overrides, main

from fixtures.python import check_registrars as F

DSL = F.DSL
CHEAP = ("outputs", "inputs_unchanged", "aliasing", "fake", "gradients")
PER_CALL = ("outputs", "inputs_unchanged", "aliasing", "fake")


def accept(*args, **kwargs) -> bool:
    return True


def install(reg, op_symbol: str, impl, cond=accept, key: str = "CPU", dsl: str = DSL,
            **kwargs) -> None:
    reg.register_op_override(dsl, "aten", op_symbol, key, cond, impl, **kwargs)
    reg.register_all_overrides()


def verdicts(report, dsl: str = DSL) -> dict[str, tuple[str, str]]:
    """check -> (status, detail) of the node by `dsl`."""
    return {r.check: (r.status, r.detail) for r in report.results if r.dsl_name == dsl}


def of(report, check: str, dsl: str = DSL) -> CheckResult:
    (found,) = [r for r in report.results if r.dsl_name == dsl and r.check == check]
    return found


# Impls that compute the op without calling it (the router would serve a
# re-entrant call of the op with the impl again).

def exp_right(x):
    return torch.special.expm1(x) + 1


def topk_right(x, k, dim=-1, largest=True, sorted=True):
    values, indices = torch.sort(x, dim, descending=largest)
    return values.narrow(dim, 0, k).contiguous(), indices.narrow(dim, 0, k).contiguous()


def mul_in_place_right(a, b):
    return a.copy_(torch.mul(a, b))


def mul_out_right(a, b, *, out):
    return out.copy_(torch.mul(a, b))


def view_right(a, size):
    strides = [1] * len(size)
    for i in range(len(size) - 2, -1, -1):
        strides[i] = strides[i + 1] * size[i + 1]
    return a.as_strided(size, strides, a.storage_offset())


class Raises:
    """An impl that records how it was called, then raises: its failure's
    `sample` describes the sample as bound."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        raise RuntimeError("recorded")


# ---- the report -------------------------------------------------------------------


def test_the_table_of_a_report_shows_each_node_once_and_the_counts():
    g = ("aten", "mul.Tensor", "CPU")
    report = CheckReport([
        CheckResult(g, "n1", "dsl_a", "outputs", "pass", None, "2 samples"),
        CheckResult(g, "n1", "dsl_a", "fake", "fail", "sample 1 aten::mul.Tensor(float32[2])",
                    "output 0:\n  impl   float32[2]"),
        CheckResult(g, "n2", "dsl_b", "outputs", "skip", None, "the cond declined all 2 samples"),
    ])
    assert str(report).splitlines() == [
        "graph                 node        check    result  detail",
        "aten::mul.Tensor/CPU  n1 (dsl_a)  outputs  PASS    2 samples",
        # the detail on one line, its whitespace collapsed
        "                                  fake     FAIL    sample 1 aten::mul.Tensor(float32[2]): "
        "output 0: impl float32[2]",
        "aten::mul.Tensor/CPU  n2 (dsl_b)  outputs  SKIP    the cond declined all 2 samples",
        "3 checks: 1 passed, 1 failed, 1 skipped",
    ]
    assert [r.check for r in report.failures] == ["fake"] and not report.ok
    with pytest.raises(KeyError, match="no result for node 'n2', check 'fake'"):
        report.result("n2", "fake")


def test_nothing_installed_gives_an_empty_report_that_says_so(reg):
    report = check_overrides()
    assert report.results == [] and report.ok
    assert str(report).splitlines() == ["graph  node  check  result  detail",
                                        "(no installed override graph)",
                                        "0 checks: 0 passed, 0 failed, 0 skipped"]


# ---- samples: bound as the op's kernel gets them, or left out with why -------------------

X5 = torch.tensor([3.0, 1.0, 4.0, 1.5, 5.0])
A2, B2 = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])


class Uncomparable:
    def __eq__(self, other):
        raise TypeError("no comparison")

    __hash__ = None

    def __repr__(self):
        return "<uncomparable>"


@pytest.mark.parametrize("op, args, kwargs, described", [
    ("topk", (X5, 2), {}, "float32[5], 2"),
    ("topk", (X5, 2, -1), {}, "float32[5], 2"),                 # trailing default left out
    ("topk", (X5, 2, 0, True), {}, "float32[5], 2, 0"),
    ("topk", (X5, 2, -1, False), {}, "float32[5], 2, -1, False"),
    ("topk", (X5, 2), {"sorted": False}, "float32[5], 2, -1, True, False"),  # defaults before it
    ("topk", (X5,), {"k": 2, "largest": True}, "float32[5], 2"),  # keywords put in place
    ("add.Tensor", (A2, B2), {"alpha": 1}, "float32[2], float32[2]"),  # keyword-only at default
    ("add.Tensor", (A2, B2), {"alpha": 2}, "float32[2], float32[2], alpha=2"),
    ("add.Tensor", (A2, B2), {"alpha": torch.tensor(1)}, "float32[2], float32[2], alpha=int64[]"),
    ("add.Tensor", (A2, B2), {"alpha": True}, "float32[2], float32[2], alpha=True"),  # no int 1
    ("add.Tensor", (A2, B2), {"alpha": Uncomparable()},
     "float32[2], float32[2], alpha=<uncomparable>"),
    ("clamp.Tensor", (A2, None, B2), {}, "float32[2], None, float32[2]"),
    ("clamp.Tensor", (A2,), {"max": B2}, "float32[2], None, float32[2]"),
    ("clamp.Tensor", (A2, B2), {}, "float32[2], float32[2]"),
    ("cat", ([torch.ones(2, 3), torch.ones(3, 2).t()], 1), {},
     "[float32[2, 3], float32[2, 3] strided], 1"),
    ("cat", ((A2, B2),), {}, "[float32[2], float32[2]]"),
])
def test_a_sample_reaches_the_impl_as_the_ops_kernel_would_get_it(reg, op, args, kwargs,
                                                                 described):
    impl = Raises()
    install(reg, op, impl)
    report = check_overrides(f"aten::{op}", samples=[(args, kwargs)], checks=("outputs",))
    (failure,) = report.failures
    assert failure.sample == f"sample 0 aten::{op}({described})"
    assert failure.detail == "the impl raised RuntimeError: recorded"
    # The impl got the call as described: keywords only for keyword-only arguments.
    ((called_args, called_kwargs),) = impl.calls
    assert [f"{k}=" for k in called_kwargs] == [p[:p.index("=") + 1] for p in
                                                 described.split(", ") if "=" in p]


@pytest.mark.parametrize("op, args, kwargs, why", [
    ("mul.Tensor", (A2, B2, A2), {}, "3 positional arguments, the schema takes 2"),
    ("mul.Tensor", (A2,), {}, "argument 'other' missing"),
    ("mul.Tensor", (A2, B2), {"beta": 1}, "no argument 'beta' in the schema"),
    ("mul.Tensor", (A2, B2), {"other": B2}, "argument 'other' given twice"),
    ("mul.Tensor", (A2, 2), {}, "argument 'other' is int, the schema has Tensor"),
    ("mul.Tensor", (A2.to("meta"), B2.to("meta")), {}, "it would not reach CPU in eager"),
    ("cat", ([A2, 3],), {}, "argument 'tensors' is list, the schema has List[Tensor]"),
    ("cat", (A2,), {}, "argument 'tensors' is Tensor, the schema has List[Tensor]"),
    ("clamp.Tensor", (A2, 3), {}, "argument 'min' is int, the schema has Optional[Tensor]"),
    ("add.Tensor", (A2, B2), {"alpha": torch.ones(2)},
     "argument 'alpha' is Tensor, the schema has number"),  # Scalar
])
def test_a_sample_that_does_not_fit_is_named_in_the_skip(reg, op, args, kwargs, why):
    impl = Raises()
    install(reg, op, impl)
    report = check_overrides(f"aten::{op}", samples=[(args, kwargs)], checks=CHEAP)
    assert verdicts(report) == dict.fromkeys(CHEAP, (
        "skip", f"no sample fits the op's schema at this key (sample 0: {why}, ...)"))
    assert impl.calls == []


def test_samples_that_do_not_fit_are_left_out_and_the_rest_checked(reg):
    install(reg, "mul.Tensor", F.mul_wrong_on_integers)
    ints = (torch.tensor([1, 2]), torch.tensor([3, 4]))
    samples = [((A2,), {}), ((A2.to("meta"), B2.to("meta")), {}), (ints, {}), ((A2, B2), {})]
    report = check_overrides("aten::mul.Tensor", samples=samples, checks=("outputs", "fake"))
    # The samples keep their index: the first that fits is sample 2.
    assert of(report, "outputs").sample == "sample 2 aten::mul.Tensor(int64[2], int64[2])"
    assert of(report, "fake").detail == "2 samples"


def test_no_sample_at_all_is_a_skip_for_every_check(reg):
    install(reg, "mul.Tensor", F.mul_right)
    report = check_overrides("aten::mul.Tensor", samples=[], checks=CHEAP)
    assert verdicts(report) == dict.fromkeys(
        CHEAP, ("skip", "no sample fits the op's schema at this key"))


def test_a_scalar_argument_may_be_a_zero_dim_tensor_but_no_larger_one(reg):
    install(reg, "add.Tensor", Raises())
    report = check_overrides("aten::add.Tensor", checks=("outputs",), samples=[
        ((A2, B2), {"alpha": torch.ones(1)}), ((A2, B2), {"alpha": torch.tensor(2.0)})])
    assert of(report, "outputs").sample == "sample 1 aten::add.Tensor(float32[2], float32[2], alpha=float32[])"


# ---- conds and runtimes --------------------------------------------------------------------


def test_a_raising_cond_fails_outputs_and_the_next_node_still_gets_the_sample(reg):
    def raising(*args, **kwargs):
        raise ValueError("no cond today\nsecond line")

    install(reg, "mul.Tensor", F.mul_right, cond=raising, dsl="raising")
    install(reg, "mul.Tensor", F.mul_right)
    # (Gradients, through the routed op, would meet the raising cond too.)
    report = check_overrides("aten::mul.Tensor", samples=F.samples(), checks=PER_CALL)
    failure = of(report, "outputs", "raising")
    assert (failure.status, failure.detail) == ("fail", "cond raised ValueError: no cond today")
    assert failure.sample.startswith("sample 0 aten::mul.Tensor(float32[3, 4], float32[3, 4])")
    assert verdicts(report, "raising") == {
        "outputs": ("fail", "cond raised ValueError: no cond today"),
        **dict.fromkeys(PER_CALL[1:], ("skip", "the cond accepted no sample"))}
    assert verdicts(report)["outputs"] == ("pass", "9 samples")
    assert [r.dsl_name for r in report.failures] == ["raising"]


def test_the_runtime_is_asked_once_and_a_raising_one_is_named(reg):
    asked = []

    def ready():
        asked.append(1)
        return True

    def broken():
        raise RuntimeError("no device")

    install(reg, "mul.Tensor", F.mul_right, dsl="broken", try_initialize_runtime=broken)
    install(reg, "mul.Tensor", F.mul_right, try_initialize_runtime=ready)
    report = check_overrides("aten::mul.Tensor", samples=F.samples(), checks=PER_CALL)
    assert len(asked) == 1
    assert verdicts(report) == dict.fromkeys(PER_CALL, ("pass", "9 samples"))
    assert verdicts(report, "broken") == dict.fromkeys(
        PER_CALL, ("skip", "try_initialize_runtime() raised RuntimeError: no device"))


def test_an_unconditional_right_override_passes(reg):
    install(reg, "mul.Tensor", F.mul_right, cond=None, unconditional_override=True)
    report = check_overrides("aten::mul.Tensor", samples=F.samples(), checks=PER_CALL)
    assert verdicts(report) == dict.fromkeys(PER_CALL, ("pass", "9 samples"))


def test_a_predicate_cond_sees_keyword_arguments_as_the_router_does(reg):
    # dtype_in looks at every tensor argument, the keyword-only out= too.
    install(reg, "mul.out", mul_out_right, cond=P.dtype_in(torch.float64))
    a, b = torch.ones(2, dtype=torch.float64), torch.full((2,), 3.0, dtype=torch.float64)
    report = check_overrides("aten::mul.out", checks=("outputs",), samples=[
        ((a, b), {"out": torch.empty(2)}), ((a, b), {"out": torch.empty(2, dtype=torch.float64)})])
    assert verdicts(report)["outputs"] == ("pass", "1 sample")


# ---- each check on the op kinds that exercise it ---------------------------------------------


def test_an_out_variant_is_judged_by_what_it_writes(reg):
    install(reg, "mul.out", mul_out_right)
    sample = ((A2, B2), {"out": torch.empty(2)})
    report = check_overrides("aten::mul.out", samples=[sample], checks=CHEAP)
    assert verdicts(report) == {**dict.fromkeys(PER_CALL, ("pass", "1 sample")),
                                "gradients": ("skip", "the op writes an argument in place")}


def test_an_out_variant_writing_a_wrong_value_fails_outputs(reg):
    def fresh_result_wrong_out(a, b, *, out):
        out.fill_(7.0)
        return torch.mul(a, b)

    install(reg, "mul.out", fresh_result_wrong_out)
    report = check_overrides("aten::mul.out", samples=[((A2, B2), {"out": torch.empty(2)})],
                             checks=("outputs",))
    assert of(report, "outputs").detail.startswith("argument 'out' as written 0: ")


def test_only_the_wrongly_written_one_of_two_out_arguments_fails(reg):
    def wrong_indices(x, k, dim=-1, largest=True, sorted=True, *, values, indices):
        v, i = topk_right(x, k, dim, largest, sorted)
        values.copy_(v)
        indices.copy_(i + 1)
        return values, indices

    install(reg, "topk.values", wrong_indices)
    sample = ((X5, 2), {"values": torch.empty(2), "indices": torch.empty(2, dtype=torch.int64)})
    report = check_overrides("aten::topk.values", samples=[sample], checks=("outputs",))
    # The returns are the written tensors: output 1 differs first.
    assert of(report, "outputs").detail.startswith("output 1: ")

    def fresh_returns(x, k, dim=-1, largest=True, sorted=True, *, values, indices):
        v, i = topk_right(x, k, dim, largest, sorted)
        values.copy_(v)
        indices.copy_(i + 1)
        return v, i

    reg.deregister_op_overrides(disable_dsl_names=DSL)
    install(reg, "topk.values", fresh_returns, dsl="fresh")
    report = check_overrides("aten::topk.values", samples=[sample], checks=("outputs",))
    assert of(report, "outputs", "fresh").detail.startswith("argument 'indices' as written 0: ")


def test_an_in_place_op_is_judged_on_the_argument_it_writes(reg):
    install(reg, "mul_.Tensor", mul_in_place_right)
    report = check_overrides("aten::mul_.Tensor", samples=[((A2, B2), {})], checks=CHEAP)
    assert verdicts(report) == {**dict.fromkeys(PER_CALL, ("pass", "1 sample")),
                                "gradients": ("skip", "the op writes an argument in place")}


@pytest.mark.parametrize("impl, check, detail", [
    (lambda a, b: a.copy_(torch.mul(a, b)).clone(), "aliasing",
     "output 0 is no alias of the argument the schema ties it to (Tensor(a!))"),
    (lambda a, b: a.copy_(torch.mul(a, b))[:], "aliasing",
     "output 0 is not the argument it writes (Tensor(a!)): another tensor came back"),
    (lambda a, b: a.copy_(torch.mul(a, b.add_(0))), "inputs_unchanged",
     "argument 'other', which the schema marks immutable, was written (values unchanged, "
     "version 0 -> 1)"),
])
def test_an_in_place_op_that_returns_or_writes_the_wrong_tensor_fails(reg, impl, check, detail):
    install(reg, "mul_.Tensor", impl)
    report = check_overrides("aten::mul_.Tensor", samples=[((A2, B2), {})], checks=PER_CALL)
    assert [(r.check, r.detail) for r in report.failures] == [(check, detail)]


def test_an_in_place_op_that_leaves_its_argument_unwritten_fails_outputs(reg):
    install(reg, "mul_.Tensor", lambda a, b: torch.mul(a, b))  # right values, self as it was
    report = check_overrides("aten::mul_.Tensor", samples=[((A2, B2), {})],
                             checks=("outputs", "inputs_unchanged"))
    assert verdicts(report)["inputs_unchanged"] == ("pass", "1 sample")
    assert of(report, "outputs").detail.startswith("argument 'self' as written 0: ")


def test_a_view_must_alias_its_argument(reg):
    sample = [((torch.arange(12.0), [3, 4]), {})]
    install(reg, "view", view_right)
    assert verdicts(check_overrides("aten::view", samples=sample, checks=("outputs", "aliasing"))) \
        == dict.fromkeys(("outputs", "aliasing"), ("pass", "1 sample"))
    reg.deregister_op_overrides(disable_dsl_names=DSL)
    install(reg, "view", lambda a, size: view_right(a, size).clone(), dsl="copying")
    report = check_overrides("aten::view", samples=sample, checks=("outputs", "aliasing"))
    assert verdicts(report, "copying") == {
        "outputs": ("pass", "1 sample"),
        "aliasing": ("fail", "output 0 is no alias of the argument the schema ties it to "
                             "(Tensor(a))")}


def test_an_op_with_two_outputs_passes_every_check(reg):
    # topk's second output is int64: no gradient flows through it.
    install(reg, "topk", topk_right)
    report = check_overrides("aten::topk", samples=[((X5, 2), {}), ((X5.double(), 3), {})],
                             checks=CHEAP)
    assert verdicts(report) == dict.fromkeys(CHEAP, ("pass", "2 samples"))


def test_too_few_outputs_fail_outputs_and_fake_and_skip_aliasing(reg):
    install(reg, "topk", lambda *args: topk_right(*args)[0])
    report = check_overrides("aten::topk", samples=[((X5, 2), {})], checks=PER_CALL)
    assert verdicts(report) == {
        "outputs": ("fail", "output: 1 outputs, the op gives 2"),
        "inputs_unchanged": ("pass", "1 sample"),
        "aliasing": ("skip", "1 outputs, the schema returns 2"),
        "fake": ("fail", "1 tensors from the impl, 2 from the fake")}


def test_a_second_output_sharing_an_argument_storage_fails_aliasing(reg):
    install(reg, "topk", lambda x, k: (topk_right(x, k)[0], x.view(torch.int64)))
    report = check_overrides("aten::topk", samples=[((X5.double(), 5), {})], checks=("aliasing",))
    assert verdicts(report)["aliasing"] == (
        "fail", "output 1 shares storage with argument 'self'; the schema declares a fresh tensor")


def test_a_non_tensor_output_is_no_alias(reg):
    install(reg, "_local_scalar_dense", lambda a: a.tolist())
    report = check_overrides("aten::_local_scalar_dense", samples=[((torch.tensor(2.5),), {})],
                             checks=("outputs", "aliasing"))
    assert verdicts(report) == dict.fromkeys(("outputs", "aliasing"), ("pass", "1 sample"))


def test_empty_tensors_share_no_storage(reg):
    install(reg, "mul.Tensor", F.mul_right)
    report = check_overrides("aten::mul.Tensor", samples=[((torch.ones(0), torch.ones(0)), {})],
                             checks=("aliasing",))
    assert verdicts(report)["aliasing"] == ("pass", "1 sample")


def test_a_raising_impl_fails_outputs_with_its_first_line_and_skips_the_rest(reg):
    def raising(a, b):
        raise ValueError("bad input\nsecond line")

    install(reg, "mul.Tensor", raising)
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})], checks=PER_CALL)
    why = "the impl raised ValueError: bad input"
    assert verdicts(report) == {"outputs": ("fail", why),
                                **dict.fromkeys(PER_CALL[1:], ("skip", why))}


def test_an_exception_without_a_message_is_named_by_its_type(reg):
    def raising(a, b):
        raise RuntimeError()

    install(reg, "mul.Tensor", raising)
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})], checks=("outputs",))
    assert verdicts(report)["outputs"] == ("fail", "the impl raised RuntimeError: ")


def test_a_sample_the_op_itself_rejects_skips_outputs_and_fails_fake(reg):
    install(reg, "mul.Tensor", lambda a, b: torch.zeros(3))
    report = check_overrides("aten::mul.Tensor", samples=[((torch.ones(3), torch.ones(4)), {})],
                             checks=("outputs", "fake"))
    outputs, fake = of(report, "outputs"), of(report, "fake")
    assert outputs.status == "skip"
    assert outputs.detail.startswith("the op's own kernel raised RuntimeError: The size of tensor a")
    assert fake.status == "fail"
    assert fake.detail.startswith("the _native op under FakeTensorMode raised RuntimeError")


def test_a_wrong_dtype_names_the_impls_dtype_first(reg):
    install(reg, "mul.Tensor", lambda a, b: F.mul_right(a, b).double())
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})], checks=("outputs",))
    assert "torch.float64 != torch.float32" in of(report, "outputs").detail


def test_nan_equals_nan_in_outputs_and_inputs(reg):
    install(reg, "mul.Tensor", F.mul_right)
    nan = float("nan")
    samples = [((torch.tensor([nan, 1.0]), B2), {}),
               ((torch.tensor([complex(nan, 1), 2j]), torch.tensor([1 + 1j, 2 + 0j])), {}),
               ((torch.tensor([complex(nan, 1), 2j]).conj(), torch.tensor([1 + 1j, 2 + 0j])), {})]
    report = check_overrides("aten::mul.Tensor", samples=samples,
                             checks=("outputs", "inputs_unchanged"))
    assert verdicts(report) == dict.fromkeys(("outputs", "inputs_unchanged"), ("pass", "3 samples"))


@pytest.mark.parametrize("write, found", [
    (lambda a: a.mul_(1), "values unchanged, version 0 -> 1"),    # the counter sees it
    (lambda a: a.data.zero_(), "values changed, version 0 -> 0"),  # the values do
    (lambda a: a.resize_(2), "values changed, version 0 -> 1"),    # so does the shape
])
def test_a_write_to_an_input_is_found_by_its_values_or_its_version(reg, write, found):
    def impl(a, b):
        out = F.mul_right(a, b)
        write(a)
        return out

    install(reg, "mul.Tensor", impl)
    report = check_overrides("aten::mul.Tensor", samples=[((torch.ones(3, 4), torch.ones(4)), {})],
                             checks=("inputs_unchanged",))
    assert verdicts(report)["inputs_unchanged"] == (
        "fail", f"argument 'self', which the schema marks immutable, was written ({found})")


def test_a_comparison_that_cannot_run_is_a_failure_naming_its_error(reg):
    def cat_moving_its_input(tensors, dim=0):
        out = torch.empty(sum(t.shape[0] for t in tensors))
        at = 0
        for t in tensors:
            out.narrow(0, at, t.shape[0]).copy_(t)
            at += t.shape[0]
        tensors[0] = tensors[0].to("meta")  # the list it got now holds a meta tensor
        return out

    install(reg, "cat", cat_moving_its_input)
    report = check_overrides("aten::cat", samples=[(([A2, B2],), {})],
                             checks=("outputs", "inputs_unchanged"))
    assert verdicts(report)["outputs"] == ("pass", "1 sample")
    unchanged = of(report, "inputs_unchanged")
    assert unchanged.status == "fail"
    assert unchanged.detail.startswith("the comparison raised RuntimeError: ")


# ---- gradients -------------------------------------------------------------------------------


def test_a_wrong_forward_gives_wrong_gradients_through_the_ops_formula(reg):
    # exp's backward uses its result: twice the result, twice the gradient.
    install(reg, "exp", lambda x: exp_right(x) * 2)
    report = check_overrides("aten::exp", samples=[((torch.ones(3),), {})], checks=("gradients",))
    failure = of(report, "gradients")
    assert failure.status == "fail" and failure.detail.startswith("gradient 0: ")
    # Relative to the op's gradient (0.5 would be the op's, relative to the impl's).
    assert "Greatest relative difference: 1.0 " in failure.detail
    assert of(check_overrides("aten::exp", samples=[((torch.ones(3),), {})], checks=("outputs",)),
              "outputs").status == "fail"


def test_integer_samples_have_no_gradients_to_check(reg):
    install(reg, "mul.Tensor", F.mul_right)
    ints = torch.tensor([1, 2])
    report = check_overrides("aten::mul.Tensor", samples=[((ints, ints), {})],
                             checks=("outputs", "gradients"))
    assert verdicts(report) == {
        "outputs": ("pass", "1 sample"),
        "gradients": ("skip", "no output depends differentiably on the inputs")}
    # exp of integers is floating, but depends on no floating input either.
    install(reg, "exp", exp_right)
    report = check_overrides("aten::exp", samples=[((ints,), {})], checks=("outputs", "gradients"))
    assert verdicts(report) == {
        "outputs": ("pass", "1 sample"),
        "gradients": ("skip", "no output depends differentiably on the inputs")}


def test_an_impl_at_autograd_has_its_own_gradients(reg):
    install(reg, "mul.Tensor", F.mul_right, key="AutogradCPU")
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})],
                             checks=("outputs", "gradients"))
    assert verdicts(report) == {
        "outputs": ("pass", "1 sample"),
        "gradients": ("skip", "the impl sits at AutogradCPU, at autograd: its gradients are its own")}


def test_a_node_the_router_never_picks_skips_gradients_compile_and_export(reg):
    install(reg, "mul.Tensor", F.mul_right, dsl="first")
    install(reg, "mul.Tensor", F.mul_wrong_on_integers, dsl="second")
    report = check_overrides("aten::mul.Tensor", samples=F.samples(),
                             checks=("outputs", "gradients", "compile", "export"))
    not_picked = ("skip", "an earlier node of the chain takes every sample this cond accepts")
    assert verdicts(report, "second") == {
        "outputs": ("fail", of(report, "outputs", "second").detail),
        "gradients": not_picked, "compile": not_picked, "export": not_picked}
    assert verdicts(report, "first")["gradients"] == ("pass", "6 of 9 samples")


# ---- compile and export ------------------------------------------------------------------


@pytest.fixture
def dynamo_reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compile_and_export_pass_with_warnings_as_errors(reg, dynamo_reset):
    # The command line runs under -W error: a warning of the checks' own would fail it.
    install(reg, "mul.Tensor", F.mul_right)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = check_overrides("aten::mul.Tensor", samples=F.samples(),
                                 checks=("compile", "export"))
    assert verdicts(report) == dict.fromkeys(("compile", "export"), ("pass", "1 sample"))


def test_an_impl_that_always_raises_fails_compile_and_export(reg, dynamo_reset):
    def raising(a, b):
        raise ValueError("never")

    install(reg, "mul.Tensor", raising)
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})],
                             checks=("compile", "export"))
    compiled, exported = of(report, "compile"), of(report, "export")
    assert compiled.status == exported.status == "fail"
    assert compiled.detail.startswith("torch.compile(backend='aot_eager') raised ")
    assert exported.detail.startswith("torch.export with native_decomp_table() raised ")


def test_an_eager_call_that_raises_skips_compile(reg, dynamo_reset):
    calls = []

    def first_call_raises(a, b):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first call")
        return F.mul_right(a, b)

    install(reg, "mul.Tensor", first_call_raises)
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})], checks=("compile",))
    assert verdicts(report)["compile"] == ("skip", "the routed eager call raised ValueError: first call")


def test_a_compiled_result_differing_from_eager_is_reported_against_eager(reg, dynamo_reset):
    calls = []

    def one_then_two(a, b):  # eager runs first
        calls.append(1)
        return torch.full_like(F.mul_right(a, b), float(min(len(calls), 2)))

    install(reg, "mul.Tensor", one_then_two)
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})], checks=("compile",))
    failure = of(report, "compile")
    assert failure.detail.startswith("compiled output (against eager) 0: ")
    assert "Greatest relative difference: 1.0 " in failure.detail  # (2 - 1) / eager's 1


def test_an_exported_result_of_another_dtype_is_named_first(reg, monkeypatch):
    # (add, not mul: a decomposition of mul calling mul would decompose itself.)
    table = {torch.ops.aten.mul.Tensor: lambda a, b: torch.ops.aten.add.Tensor(a, b).double()}
    monkeypatch.setattr(native_registry.registry, "native_decomp_table", lambda: table)
    install(reg, "mul.Tensor", F.mul_right)
    report = check_overrides("aten::mul.Tensor", samples=[((A2, B2), {})], checks=("export",))
    failure = of(report, "export")
    assert failure.detail.startswith("exported output (against eager) 0: ")
    assert "torch.float64 != torch.float32" in failure.detail


def test_no_compile_sample_skips_compile_and_export(reg):
    install(reg, "mul.Tensor", F.mul_right)
    report = check_overrides("aten::mul.Tensor", samples=F.samples(),
                             checks=("outputs", "compile", "export"), compile_samples=0)
    assert verdicts(report) == {"outputs": ("pass", "9 samples"),
                                "compile": ("skip", "no sample"), "export": ("skip", "no sample")}


# ---- arguments -------------------------------------------------------------------------------


def test_checks_may_be_any_iterable_and_come_out_once_in_the_tables_order(reg):
    install(reg, "mul.Tensor", F.mul_right)
    report = check_overrides("aten::mul.Tensor", samples=F.samples(),
                             checks=(c for c in ("fake", "outputs", "fake")))
    assert [r.check for r in report.results] == ["outputs", "fake"]
    report = check_overrides("aten::mul.Tensor", samples=F.samples(), checks="fake")
    assert [r.check for r in report.results] == ["fake"]


@pytest.mark.parametrize("name", ["samples_per_dtype", "compile_samples"])
@pytest.mark.parametrize("value", [True, 1.5, "2", -1])
def test_counts_must_be_ints_at_least_zero(reg, name, value):
    install(reg, "mul.Tensor", F.mul_right)
    with pytest.raises(ValueError, match=f"{name} must be an int >= 0, got {value!r}"):
        check_overrides("aten::mul.Tensor", samples=F.samples(), **{name: value})


def test_samples_may_be_a_generator_used_for_every_graph(reg):
    install(reg, "mul.Tensor", F.mul_right)
    install(reg, "mul.Tensor", F.mul_right, key="AutogradCPU")
    report = check_overrides("mul.Tensor", samples=(s for s in F.samples()), checks=("outputs",))
    assert [(r.graph[2], r.status, r.detail) for r in report.results] == [
        ("AutogradCPU", "pass", "9 samples"), ("CPU", "pass", "9 samples")]


def test_samples_may_be_sample_inputs(reg):
    # Anything with input, args and kwargs, as op_db's SampleInputs.
    install(reg, "add.Tensor", Raises())
    sample = types.SimpleNamespace(input=A2, args=(B2,), kwargs={"alpha": 2})
    report = check_overrides("aten::add.Tensor", samples=[sample], checks=("outputs",))
    assert of(report, "outputs").sample == "sample 0 aten::add.Tensor(float32[2], float32[2], alpha=2)"


@pytest.mark.parametrize("item", [
    [(A2, B2), {}],          # a list, not a pair
    ((A2, B2), {}, {}),      # three items
    (A2, {}),                # arguments not in a tuple or list
    ((A2, B2), [("alpha", 2)]),  # keywords not in a dict
])
def test_a_sample_of_another_form_is_a_type_error(reg, item):
    install(reg, "mul.Tensor", F.mul_right)
    with pytest.raises(TypeError, match="samples must be SampleInputs or \\(args, kwargs\\) pairs "
                                        "\\(a tuple or list and a dict\\), got"):
        check_overrides("aten::mul.Tensor", samples=[item])


def test_given_samples_need_no_op_db(reg, monkeypatch):
    install(reg, "mul.Tensor", F.mul_right)
    monkeypatch.setitem(sys.modules,
                        "torch.testing._internal.common_methods_invocations", None)
    report = check_overrides("aten::mul.Tensor", samples=F.samples(), checks=("outputs",))
    assert verdicts(report)["outputs"] == ("pass", "9 samples")


@pytest.mark.parametrize("op", [
    torch.ops.aten.exp.default, torch.ops.aten.exp, "aten::exp", "exp", "aten::exp.default",
    "exp.default"])
def test_an_op_may_be_named_by_overload_packet_or_string(reg, op):
    install(reg, "exp", exp_right)
    install(reg, "mul.Tensor", F.mul_right)
    report = check_overrides(op, samples=[((A2,), {})], checks=("outputs",))
    assert [(r.graph, r.status) for r in report.results] == [(("aten", "exp", "CPU"), "pass")]


def test_an_overload_names_its_overload(reg):
    install(reg, "mul.Tensor", F.mul_right)
    install(reg, "mul.Scalar", lambda a, b: F.mul_right(a, torch.tensor(b)))
    report = check_overrides(torch.ops.aten.mul.Tensor, samples=F.samples(), checks=("outputs",))
    assert [r.graph for r in report.results] == [("aten", "mul.Tensor", "CPU")]


@pytest.mark.parametrize("op", ["aten::", "::mul", ""])
def test_a_malformed_op_name_is_a_value_error(reg, op):
    install(reg, "mul.Tensor", F.mul_right)
    with pytest.raises(ValueError, match="op must name an op like 'aten::mul.Tensor' or 'mul.Tensor'"):
        check_overrides(op)


@pytest.mark.parametrize("op", ["mul.Tensor", "aten::mul.Tensor"])
def test_a_registered_op_not_installed_is_named_with_its_keys(reg, op):
    reg.register_op_override(DSL, "aten", "mul.Tensor", "CPU", accept, F.mul_right)
    reg.register_op_override(DSL, "aten", "add.Tensor", "CPU", accept, F.mul_right)
    with pytest.raises(ValueError) as raised:
        check_overrides(op)
    assert str(raised.value) == (f"op {op!r} has no installed override graph (registered at CPU, "
                                 "not installed: register_all_overrides() first)")


def test_a_graph_whose_op_left_the_dispatcher_is_skipped(reg):
    lib = torch.library.Library("nr_check_gone", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        reg.allow_namespace("nr_check_gone")
        reg.register_op_override(DSL, "nr_check_gone", "twice", "CPU", accept, lambda x: x * 2)
        reg.register_all_overrides()
    finally:
        lib._destroy()
    report = check_overrides(checks=("outputs", "fake"))
    assert [(r.graph, r.status, r.detail) for r in report.results] == [
        (("nr_check_gone", "twice", "CPU"), "skip", "the op is not in the dispatcher")] * 2


# ---- default samples: op_db's ---------------------------------------------------------------


class DtypeRecorder:
    """A right add.Tensor impl that counts the samples it gets per dtype."""

    def __init__(self):
        self.dtypes = collections.Counter()

    def __call__(self, a, b, alpha=1):
        self.dtypes[a.dtype] += 1
        return torch.add(a, b, alpha=alpha, out=torch.empty(
            torch.broadcast_shapes(a.shape, b.shape), dtype=torch.result_type(a, b)))


def test_default_samples_are_the_first_per_dtype_of_op_db(reg):
    pytest.importorskip("expecttest", reason="unsupported: torch's op_db needs expecttest")
    record = DtypeRecorder()
    install(reg, "add.Tensor", record)
    check_overrides("add.Tensor", checks=("inputs_unchanged",))
    assert max(record.dtypes.values()) == 2 and len(record.dtypes) >= 8  # the default: 2
    record.dtypes.clear()
    check_overrides("add.Tensor", checks=("inputs_unchanged",), samples_per_dtype=1)
    assert max(record.dtypes.values()) == 1 and len(record.dtypes) >= 8
    record.dtypes.clear()
    report = check_overrides("add.Tensor", checks=("inputs_unchanged",), samples_per_dtype=0)
    assert not record.dtypes
    assert verdicts(report)["inputs_unchanged"] == (
        "skip", "no sample fits the op's schema at this key")


def test_default_samples_found_by_the_ops_aten_name(reg):
    # op_db names relu's OpInfo 'nn.functional.relu', its aten_name 'relu'.
    pytest.importorskip("expecttest", reason="unsupported: torch's op_db needs expecttest")
    install(reg, "relu", lambda x: torch.clamp_min(x, 0))
    report = check_overrides("aten::relu", checks=("outputs",), samples_per_dtype=1)
    status, detail = verdicts(report)["outputs"]
    assert status == "pass" and int(detail.split()[0]) >= 4


# ---- the command line, in-process ---------------------------------------------------------


def registrar_module(tmp_path, monkeypatch, body: str) -> str:
    """A module of a new name in tmp_path, importable; its name."""
    name = f"nr_check_registrar_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


SAMPLES = ["--samples", "fixtures.python.check_registrars:SAMPLES"]


def test_command_line_takes_a_module_that_registers_on_import(reg, tmp_path, monkeypatch, capsys):
    module = registrar_module(tmp_path, monkeypatch,
                              "from fixtures.python import check_registrars\n"
                              "check_registrars.right()\n")
    assert main([module, *SAMPLES, "--checks", "outputs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[-4:] == ["outputs", "PASS", "9", "samples"]
    assert lines[-1] == "1 checks: 1 passed, 0 failed, 0 skipped"


def test_command_line_refuses_a_registrar_that_is_not_callable(reg, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["fixtures.python.check_registrars:SAMPLES"])
    assert exited.value.code == 2
    assert "fixtures.python.check_registrars:SAMPLES is not callable" in capsys.readouterr().err


def test_command_line_compiles_one_sample_by_default(reg, capsys, dynamo_reset):
    assert main(["fixtures.python.check_registrars:right", *SAMPLES, "--checks", "compile"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-4:] == [
        "compile", "PASS", "1", "sample"]


def test_command_line_default_samples_are_two_per_dtype(reg, tmp_path, monkeypatch, capsys):
    pytest.importorskip("expecttest", reason="unsupported: torch's op_db needs expecttest")
    recorder_module = types.ModuleType("tests_more_recorder")
    recorder_module.RECORD = record = DtypeRecorder()
    monkeypatch.setitem(sys.modules, "tests_more_recorder", recorder_module)
    module = registrar_module(tmp_path, monkeypatch,
        "import native_registry.registry as registry\n"
        "from tests_more_recorder import RECORD\n"
        "def register():\n"
        f"    registry.register_op_override({DSL!r}, 'aten', 'add.Tensor', 'CPU',\n"
        "                                  lambda *a, **k: True, RECORD)\n")
    assert main([f"{module}:register", "--op", "aten::add.Tensor",
                 "--checks", "inputs_unchanged"]) == 0
    assert max(record.dtypes.values()) == 2
