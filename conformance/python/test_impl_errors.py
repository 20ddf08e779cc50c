"""Safe degradation, opt in (issue 30, item 4; beyond upstream, whose impl
errors are the call's): under the impl error policy "fallback" an impl that
raises makes the call run the op's own kernel, warning once per override;
ops whose schema writes an argument still raise, and so do KeyboardInterrupt
and SystemExit. Feature `impl-error-fallback`; level `recommended`."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from conftest import behaviour

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

INPLACE_KEY = ("aten", "mul_.Tensor", "CPU")


def failing(error):
    def impl(*_args, **_kwargs):
        raise error
    return impl


def always(*_args, **_kwargs):
    return True


@behaviour("degrade.fallback-runs-the-op")
def test_under_fallback_an_impl_error_runs_the_op_and_by_default_it_raises(impl):
    impl.register("flaky_dsl", *KEY, always, failing(ZeroDivisionError("no driver")))
    impl.install(*KEY)
    with pytest.raises(ZeroDivisionError, match="no driver"):
        mul()  # the default: upstream's behaviour
    with impl.impl_error_policy("fallback"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(mul(), STOCK)
        assert torch.equal(mul(A, A), A * A), "the op's kernel gets the call's own arguments"
    with pytest.raises(ZeroDivisionError):
        mul()  # the policy is back to "raise"


@behaviour("degrade.fallback-runs-the-op")
def test_under_fallback_an_impl_that_returns_gives_its_result_and_says_nothing(impl):
    sevens = torch.full_like(A, 7.0)
    impl.register("steady_dsl", *KEY, always, lambda *args, **kwargs: sevens)
    impl.install(*KEY)
    with impl.impl_error_policy("fallback"), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert torch.equal(mul(), sevens), "an impl that returned was taken for one that failed"
    assert not [w for w in said if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in said]


@behaviour("degrade.warns-once-per-override")
def test_the_first_fallback_of_each_override_warns_naming_it_the_op_and_the_error(impl):
    impl.register("flaky_dsl", *KEY, lambda a, b: a.numel() == 2, failing(ZeroDivisionError("no driver")))
    impl.register("other_dsl", *KEY, always, failing(ValueError("bad tile")))
    impl.install(*KEY)
    first, second = impl.graph(*KEY)
    with impl.impl_error_policy("fallback"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.equal(mul(), STOCK)
            assert torch.equal(mul(), STOCK)
            one = torch.tensor([3.0])
            assert torch.equal(mul(one, one), one * one)  # the second override's first error
        runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(runtime) == 2, [str(w.message) for w in caught]
        text = str(runtime[0].message)
        assert first.node_id in text and "mul" in text and "no driver" in text, text
        assert second.node_id in str(runtime[1].message) and "bad tile" in str(runtime[1].message)


@behaviour("degrade.warns-once-per-override")
def test_the_fallback_warning_points_at_the_line_that_made_the_call(impl):
    impl.register("flaky_dsl", *KEY, always, failing(ZeroDivisionError("no driver")))
    impl.install(*KEY)
    with impl.impl_error_policy("fallback"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        torch.mul(torch.ones(2), torch.ones(2))
    (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert (warning.filename, warning.lineno) == (__file__, line), (warning.filename, warning.lineno)


@behaviour("degrade.writing-ops-still-raise")
def test_an_in_place_op_s_impl_error_still_raises_under_fallback(impl):
    impl.register("flaky_dsl", *INPLACE_KEY, always, failing(ZeroDivisionError("half written")))
    impl.install(*INPLACE_KEY)
    target = torch.tensor([2.0, 3.0])
    with impl.impl_error_policy("fallback"), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # and no fallback is announced
        with pytest.raises(ZeroDivisionError, match="half written"):
            target.mul_(B)


@behaviour("degrade.interrupts-propagate")
@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_or_exit_from_an_impl_propagates_under_fallback(impl, error):
    impl.register("flaky_dsl", *KEY, always, failing(error()))
    impl.install(*KEY)
    with impl.impl_error_policy("fallback"), pytest.raises(error):
        mul()


@behaviour("degrade.policy-scopes-nest")
def test_a_policy_scope_inside_another_gives_the_outer_policy_back(impl):
    impl.register("flaky_dsl", *KEY, always, failing(ZeroDivisionError("no driver")))
    impl.install(*KEY)
    with impl.impl_error_policy("fallback"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with impl.impl_error_policy("raise"):
            with pytest.raises(ZeroDivisionError):
                mul()
        assert torch.equal(mul(), STOCK), "the outer scope's fallback is in force again"
    with pytest.raises(ZeroDivisionError):
        mul()
