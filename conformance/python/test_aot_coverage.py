"""Upstream main's AOT pre-check (jkzhang7/pytorch@6be35214, registry.py's
router `_dispatch`): before any cond, the router asks whether a kernel
compiled ahead of time into the op's own kernel serves the call
(`aot_manifest.covers`); a covered call runs the op's own kernel. The
adapter sets the check for a scope (`coverage_check`, called as
check(op_symbol, dispatch_key, args, kwargs)) and switches checks off
(`aot_enabled`). Graphs are installed inside the scope: main resolves a
graph's coverage when it installs it. Not in the seed file: `recommended`,
feature `aot-coverage`."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
import torch

from conftest import behaviour, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

FILLED = torch.tensor([7.0, 7.0])


def fill(*_args, **_kwargs):
    return torch.full_like(A, 7.0)


def forbidden():
    return MagicMock(side_effect=AssertionError("must not run for a covered call"))


class Recorder:
    """A coverage check that answers `answer` (or raises it) and records
    each question, in one log shared with the conds."""

    def __init__(self, answer, log):
        self.answer, self.log, self.questions = answer, log, []

    def __call__(self, op_symbol, dispatch_key, args, kwargs):
        self.questions.append((op_symbol, dispatch_key, args, kwargs))
        self.log.append("check")
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def logging_cond(log, name, answer):
    def cond(*_args, **_kwargs):
        log.append(name)
        return answer
    return cond


@behaviour("aot.covered-call-runs-the-op")
def test_a_covered_call_runs_the_op_s_own_kernel_and_asks_no_cond(impl):
    log = []
    check = Recorder(True, log)
    cond, body = MagicMock(return_value=True), forbidden()
    with impl.coverage_check(check):
        impl.register("aot_dsl", *KEY, cond, body)
        impl.install(*KEY)
        assert torch.equal(mul(), STOCK)
    cond.assert_not_called()
    body.assert_not_called()
    assert len(check.questions) == 1
    op_symbol, dispatch_key, args, kwargs = check.questions[0]
    assert (op_symbol, dispatch_key) == ("mul.Tensor", "CPU")
    assert len(args) == 2 and args[0] is A and args[1] is B and kwargs == {}


@behaviour("aot.asked-once-before-the-conds")
def test_the_check_is_asked_once_per_call_before_every_cond(impl):
    log = []
    check = Recorder(False, log)
    with impl.coverage_check(check):
        impl.register("first", *KEY, logging_cond(log, "first", False), forbidden())
        impl.register("second", *KEY, logging_cond(log, "second", False), forbidden())
        impl.register("third", *KEY, logging_cond(log, "third", True), fill)
        impl.install(*KEY)
        assert torch.equal(mul(), FILLED)
        assert log == ["check", "first", "second", "third"]
        log.clear()
        assert torch.equal(mul(), FILLED)
        assert log == ["check", "first", "second", "third"]


@behaviour("aot.unconditional-overrides-included")
def test_a_covered_call_declines_an_unconditional_override_too(impl):
    body = forbidden()
    with impl.coverage_check(Recorder(True, [])):
        impl.register("aot_dsl", *KEY, None, body, unconditional_override=True)
        impl.install(*KEY)
        assert torch.equal(mul(), STOCK)
    body.assert_not_called()


@behaviour("aot.raising-check-means-not-covered")
def test_a_check_that_raises_leaves_the_call_to_the_conds(impl):
    log = []
    check = Recorder(RuntimeError("the manifest cannot read these arguments"), log)
    with impl.coverage_check(check):
        impl.register("aot_dsl", *KEY, logging_cond(log, "cond", True), fill)
        impl.install(*KEY)
        assert torch.equal(mul(), FILLED)
    assert log == ["check", "cond"]


@behaviour("aot.interrupts-propagate")
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_raised_by_the_check_is_the_calls(impl, interrupt):
    cond, body = MagicMock(return_value=True), MagicMock(side_effect=fill)

    def check(op, key, args, kwargs):
        raise interrupt("stop 4711")

    with impl.coverage_check(check):
        impl.register("aot_dsl", *KEY, cond, body)
        impl.install(*KEY)
        with pytest.raises(interrupt, match="stop 4711"):
            mul()
    cond.assert_not_called()
    body.assert_not_called()


@behaviour("aot.nested-checks-restore-the-outer")
def test_a_check_set_inside_another_gives_way_to_it_again(impl):
    log = []
    outer, inner = Recorder(True, log), Recorder(False, log)
    with impl.coverage_check(outer):
        impl.register("aot_dsl", *KEY, logging_cond(log, "cond", True), fill)
        impl.install(*KEY)
        assert torch.equal(mul(), STOCK)
        with impl.coverage_check(inner):
            assert torch.equal(mul(), FILLED), "the inner check does not cover: the cond routes"
        assert torch.equal(mul(), STOCK), "the outer check answers again"
        assert (len(outer.questions), len(inner.questions)) == (2, 1)
    log.clear()
    assert torch.equal(mul(), FILLED), "no check left: the cond routes"
    assert log == ["cond"]


@behaviour("aot.switch-turns-checks-off")
def test_switched_off_the_check_is_not_asked_and_the_conds_route(impl):
    log = []
    check = Recorder(True, log)
    with impl.coverage_check(check):
        impl.register("aot_dsl", *KEY, logging_cond(log, "cond", True), fill)
        impl.install(*KEY)
        with impl.aot_enabled(False):
            assert torch.equal(mul(), FILLED)
            assert log == ["cond"]
        log.clear()
        assert torch.equal(mul(), STOCK), "switched on again, the check answers"
        assert log == ["check"]


@behaviour("aot.switch-turns-checks-off")
def test_switched_off_the_compile_router_does_not_ask_either(impl):
    log = []
    check = Recorder(True, log)
    with impl.coverage_check(check):
        impl.register("aot_dsl", *KEY, logging_cond(log, "cond", True), fill)
        impl.install(*KEY)
        router = impl.decomp_table(overrides_only=True)[torch.ops.aten.mul.Tensor]
        with impl.aot_enabled(False):
            assert torch.equal(router(A, B), FILLED), "switched off, a covered call still declined"
            assert log == ["cond"]
        log.clear()
        assert router(A, B) is NotImplemented, "switched on again, the check answers"
        assert log == ["check"]


@behaviour("aot.switch-turns-checks-off")
def test_torch_disable_native_aot_starts_with_checks_off(impl):
    lines = run_in_fresh_interpreter(impl, """
        from fixtures.python.torch_fixtures import MUL_CPU as KEY, mul
        asked = []
        def check(*question):
            asked.append(question)
            return True
        with impl.scope(), impl.coverage_check(check):
            impl.register("aot_dsl", *KEY, lambda *a, **k: True, lambda a, b: a + 100)
            impl.install(*KEY)
            print(mul().tolist(), len(asked))
        """, env={"TORCH_DISABLE_NATIVE_AOT": "1"})
    assert lines == ["[102.0, 103.0] 0"], lines


@behaviour("aot.covered-call-runs-the-op")
def test_the_check_gets_the_arguments_of_an_op_defined_again_with_another_schema(impl):
    """The check is asked of the op as it is at the call: after its library
    is destroyed and the op defined again with more arguments, a call hands
    the check all of them (the op's entry, which the router keeps, holds the
    new schema where the old one was)."""
    supported = "namespaces" in impl.features
    if not supported:
        pytest.skip(f"unsupported: {impl.name} lacks feature namespaces")
    lines = run_in_fresh_interpreter(impl, """
        NS = "_native_registry_aot_redef"
        impl.allow_namespace(NS)
        x = torch.ones(2)
        asked = []
        def check(op_symbol, dispatch_key, args, kwargs):
            asked.append(len(args) + len(kwargs))
            return False
        def define(schema, kernel):
            lib = torch.library.Library(NS, "DEF")
            lib.define(schema)
            lib.impl("foo", kernel, "CPU")
            return lib
        with impl.scope(), impl.coverage_check(check):
            lib = define("foo(Tensor x) -> Tensor", lambda x: x + 1)
            impl.register("first", NS, "foo", "CPU", lambda *a, **k: False, lambda *a, **k: x)
            impl.install(NS, "foo", "CPU")
            getattr(torch.ops, NS).foo(x)
            impl.disable(dsl_names=["first"])
            lib._destroy()
            lib = define("foo(Tensor x, Tensor y, Tensor z) -> Tensor", lambda x, y, z: x + y + z)
            impl.register("second", NS, "foo", "CPU", lambda *a, **k: False, lambda *a, **k: x)
            impl.install(NS, "foo", "CPU")
            print(getattr(torch.ops, NS).foo(x, x, x).tolist(), asked)
        """)
    assert lines[-1] == "[3.0, 3.0] [1, 3]", lines


@behaviour("aot.compile-router-asks-too")
def test_the_compile_router_declines_a_covered_call(impl):
    check = Recorder(True, [])
    with impl.coverage_check(check):
        impl.register("aot_dsl", *KEY, lambda *a, **k: True, fill)
        impl.install(*KEY)
        router = impl.decomp_table(overrides_only=True)[torch.ops.aten.mul.Tensor]
        assert router(A, B) is NotImplemented
        assert [q[:2] for q in check.questions] == [("mul.Tensor", "CPU")]
        (_, _, args, kwargs), = check.questions
        assert len(args) == 2 and args[0] is A and args[1] is B and kwargs == {}, \
            "the check is not given the call's arguments as the eager router gives them"
        check.answer = False
        assert torch.equal(router(A, B), FILLED), "not covered: the cond routes"
        check.answer = RuntimeError("the manifest cannot read these arguments")
        assert torch.equal(router(A, B), FILLED), "a check that raised is 'not covered' there too"


@behaviour("aot.switch-must-be-bool")
@pytest.mark.parametrize("setting", [0, "off", None], ids=["int", "str", "none"])
def test_the_aot_switch_refuses_what_is_not_a_bool_and_stays_as_it_was(impl, setting):
    log = []
    with impl.coverage_check(Recorder(True, log)):
        impl.register("aot_dsl", *KEY, logging_cond(log, "cond", True), fill)
        impl.install(*KEY)
        with pytest.raises(TypeError, match=type(setting).__name__):
            with impl.aot_enabled(setting):
                pass
        assert torch.equal(mul(), STOCK), "the refused setting switched the checks off"
        assert log == ["check"]
        log.clear()
        with impl.aot_enabled(False):
            with pytest.raises(TypeError, match=type(setting).__name__):
                with impl.aot_enabled(setting):
                    pass
            assert torch.equal(mul(), FILLED), "the refused setting switched the checks on"
            assert log == ["cond"]
