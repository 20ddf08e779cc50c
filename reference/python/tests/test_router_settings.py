"""The settings a registry gives its routers, from Python: what the binding
adds to the core's. The coverage check (upstream main's AOT pre-check; the
catalogue's aot.*): handed back as given, a Predicate as a check in eager and
in the compile router, refused input changing nothing, the check's own errors
and the arguments it is handed. The impl error policy (degrade.*): refused
values, a warnings filter that turns the notice into the call's error, and
the policy's reset."""

from __future__ import annotations

import pytest
import torch

from native_registry import predicates as P

KEY = ("aten", "mul.Tensor", "CPU")
A, B = torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])
STOCK = A * B
SEVEN = torch.full((2,), 7.0)


def seven(a, *rest, **kwargs):
    return torch.full_like(a, 7.0)


@pytest.fixture
def covering(reg):
    """Unsets the check and switches checks on again after the test."""
    yield reg
    reg.set_coverage_check(None)
    reg.set_aot_enabled(True)
    reg.set_impl_error_policy("raise")


def test_the_check_is_handed_back_as_given_and_none_unsets_it(covering):
    reg = covering
    assert reg.coverage_check() is None

    def check(*question):
        return False

    reg.set_coverage_check(check)
    assert reg.coverage_check() is check
    predicate = P.dtype_in(torch.float16)
    reg.set_coverage_check(predicate)
    assert reg.coverage_check().description == predicate.description
    reg.set_coverage_check(None)
    assert reg.coverage_check() is None


@pytest.mark.parametrize("bad", [3, "covers", object()])
def test_a_check_that_is_not_callable_is_refused_naming_it_and_changes_nothing(covering, bad):
    reg = covering

    def check(*question):
        return True

    reg.set_coverage_check(check)
    with pytest.raises(TypeError, match=type(bad).__name__):
        reg.set_coverage_check(bad)
    assert reg.coverage_check() is check


def test_the_switch_takes_only_a_bool_and_hands_back_the_previous_setting(covering):
    reg = covering
    with pytest.raises(TypeError, match="int"):
        reg.set_aot_enabled(0)
    assert reg.aot_enabled() is True
    assert reg.set_aot_enabled(False) is True
    assert reg.aot_enabled() is False
    assert reg.set_aot_enabled(True) is False


def test_a_predicate_as_the_check_decides_in_eager_and_in_the_compile_router(covering):
    reg = covering
    reg.register_op_override("cov", *KEY, lambda *a, **k: True, seven)
    reg.register_all_overrides()
    reg.set_coverage_check(P.dtype_in(torch.float32))
    assert torch.equal(torch.ops.aten.mul.Tensor(A, B), STOCK)  # float32: covered
    assert torch.equal(torch.ops.aten.mul.Tensor(A.double(), B.double()), SEVEN.double())
    router = reg.native_decomp_table(overrides_only=True)[torch.ops.aten.mul.Tensor]
    assert router(A, B) is NotImplemented
    assert torch.equal(router(A.double(), B.double()), SEVEN.double())


def test_the_check_gets_the_arguments_as_the_op_s_python_kernel_does(covering):
    reg = covering
    seen = []

    def check(op_symbol, dispatch_key, args, kwargs):
        seen.append((op_symbol, dispatch_key, args, kwargs))
        return False

    reg.register_op_override("cov", "aten", "add.Tensor", "CPU", lambda *a, **k: False, seven)
    reg.register_all_overrides()
    reg.set_coverage_check(check)
    torch.ops.aten.add.Tensor(A, B)             # alpha at its default: not passed
    torch.ops.aten.add.Tensor(A, B, alpha=2)
    assert [s[:2] for s in seen] == [("add.Tensor", "CPU")] * 2
    assert seen[0][2] == (A, B) and seen[0][3] == {}
    assert seen[1][3] == {"alpha": 2}


def test_a_check_that_raises_is_not_covered_and_the_error_goes_nowhere(covering):
    reg = covering

    def check(*question):
        raise ZeroDivisionError("a probe failed")

    reg.register_op_override("cov", *KEY, lambda *a, **k: True, seven)
    reg.register_all_overrides()
    reg.set_coverage_check(check)
    for _ in range(3):
        assert torch.equal(torch.ops.aten.mul.Tensor(A, B), SEVEN)
    assert torch.equal(torch.ones(2) + 1, torch.full((2,), 2.0)), "no error is left pending"


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_or_exit_raised_by_the_check_propagates(covering, error):
    reg = covering

    def check(*question):
        raise error()

    reg.register_op_override("cov", *KEY, lambda *a, **k: True, seven)
    reg.register_all_overrides()
    reg.set_coverage_check(check)
    with pytest.raises(error):
        torch.ops.aten.mul.Tensor(A, B)


def test_a_check_set_while_other_threads_call_is_safe(covering):
    import threading
    reg = covering
    reg.register_op_override("cov", *KEY, lambda *a, **k: True, seven)
    reg.register_all_overrides()
    bad, stop = [], threading.Event()

    def caller():
        while not stop.is_set():
            out = torch.ops.aten.mul.Tensor(A, B)
            if not (torch.equal(out, STOCK) or torch.equal(out, SEVEN)):
                bad.append(out)

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(200):
        reg.set_coverage_check((lambda *q: True) if i % 2 else None)
    stop.set()
    for t in threads:
        t.join()
    assert bad == []


# ---- the impl error policy ------------------------------------------------------------


def broken(*_args, **_kwargs):
    raise ZeroDivisionError("no driver")


@pytest.mark.parametrize("bad", ["Fallback", "", "ignore"])
def test_an_unknown_policy_is_refused_naming_it_and_changes_nothing(covering, bad):
    reg = covering
    reg.set_impl_error_policy("fallback")
    with pytest.raises(ValueError, match=repr(bad).strip('"')):
        reg.set_impl_error_policy(bad)
    assert reg.impl_error_policy() == "fallback"


def test_a_warnings_filter_that_raises_makes_the_notice_the_call_s_error(covering):
    import warnings
    reg = covering
    reg.register_op_override("flaky", *KEY, lambda *a, **k: True, broken)
    reg.register_all_overrides()
    reg.set_impl_error_policy("fallback")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning, match="no driver"):
            torch.ops.aten.mul.Tensor(A, B)
    # Announced once: the next fallback is silent and returns the op's result.
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert torch.equal(torch.ops.aten.mul.Tensor(A, B), STOCK)


def test_a_fallback_from_a_predicate_chosen_python_impl_runs_the_op(covering):
    reg = covering
    reg.register_op_override("flaky", *KEY, P.dtype_in(torch.float32), broken)
    reg.register_all_overrides()
    reg.set_impl_error_policy("fallback")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(torch.ops.aten.mul.Tensor(A, B), STOCK)
