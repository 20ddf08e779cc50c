"""Seeing and steering routing beyond upstream (issue 30, items 2, 3, 5):
per-thread disables (feature `thread-disables`), per-node and per-graph
counts (feature `routing-stats`), profiler ranges and the routing log
(feature `routing-observability`). Level `recommended` throughout."""

from __future__ import annotations

import contextlib
import logging
import re
import threading

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import adapter as adapter_module
from conftest import behaviour, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

SEVENS = torch.full((2,), 7.0)
NINES = torch.full((2,), 9.0)


def always(*_args, **_kwargs):
    return True


def returning(value):
    return lambda a, b: value.clone()


def on_another_thread(work):
    result = {}

    def run():
        result["value"] = work()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the other thread's call hung"
    return result["value"]


# ---- per-thread disables ---------------------------------------------------------


@behaviour("thread.disable-on-this-thread-only")
def test_a_per_thread_disable_skips_the_override_on_this_thread_only(impl):
    impl.register("dsl_a", *KEY, always, returning(SEVENS))
    impl.register("dsl_b", *KEY, always, returning(NINES))
    impl.install(*KEY)
    assert torch.equal(mul(), SEVENS)
    with impl.disabled_in_thread(dsl_names=["dsl_a"]):
        assert torch.equal(mul(), NINES), "the next override takes the call"
        assert torch.equal(on_another_thread(mul), SEVENS), "another thread routes as before"
        with impl.disabled_in_thread(op_symbols=["mul.Tensor"]):
            assert torch.equal(mul(), STOCK), "no override left: the op's own kernel"
    assert torch.equal(mul(), SEVENS)
    with impl.disabled_in_thread(dispatch_keys=["CPU"]):
        assert torch.equal(mul(), STOCK)
    assert torch.equal(mul(), SEVENS)


@behaviour("thread.scope-closed-on-another-thread")
@pytest.mark.parametrize("closer_scoped", [False, True], ids=["closer-unscoped", "closer-scoped"])
def test_a_per_thread_scope_left_on_another_thread_raises_and_closes_none(impl, closer_scoped):
    impl.register("dsl_a", *KEY, always, returning(SEVENS))
    impl.register("dsl_b", *KEY, always, returning(NINES))
    impl.install(*KEY)
    scope = impl.disabled_in_thread(dsl_names=["dsl_a"])
    scope.__enter__()
    try:
        seen = {}

        def leave_it_there():
            # With closer_scoped, the leaving thread has a scope of its own
            # open, which the foreign token must not close either.
            own = impl.disabled_in_thread(dsl_names=["dsl_a"]) if closer_scoped else contextlib.nullcontext()
            with own:
                try:
                    scope.__exit__(None, None, None)
                except RuntimeError as error:
                    seen["error"] = str(error)
                seen["routed"] = mul()
            seen["after"] = mul()

        elsewhere = threading.Thread(target=leave_it_there)
        elsewhere.start()
        elsewhere.join()
        assert "error" in seen, "leaving another thread's scope said nothing"
        assert "thread" in seen["error"], seen["error"]
        if closer_scoped:
            assert torch.equal(seen["routed"], NINES), "the leaving thread's own scope was closed instead"
        else:
            assert torch.equal(seen["routed"], SEVENS), "the leaving thread had nothing disabled"
        assert torch.equal(seen["after"], SEVENS)
        assert torch.equal(mul(), NINES), "the opener's disables were lifted by another thread"
    finally:
        scope.__exit__(None, None, None)
    assert torch.equal(mul(), SEVENS)


@behaviour("thread.disables-nest-and-restore")
def test_per_thread_disables_nest_and_closing_the_inner_restores_the_outer(impl):
    impl.register("dsl_a", *KEY, always, returning(SEVENS))
    impl.register("dsl_b", *KEY, always, returning(NINES))
    impl.install(*KEY)
    with impl.disabled_in_thread(dsl_names=["dsl_a"]):
        assert torch.equal(mul(), NINES)
        with impl.disabled_in_thread(dsl_names=["dsl_b"]):
            assert torch.equal(mul(), STOCK), "both named: the union"
        assert torch.equal(mul(), NINES), "the outer scope's disable is still in force"
        with impl.disabled_in_thread(dsl_names=["dsl_a"]):
            pass
        assert torch.equal(mul(), NINES), "an inner scope naming the same dsl leaves it disabled"
    assert torch.equal(mul(), SEVENS), "the outer scope is gone"


@behaviour("thread.scope-object-reentered")
def test_one_scope_object_entered_again_opens_a_scope_per_entry(impl):
    impl.register("dsl_a", *KEY, always, returning(SEVENS))
    impl.install(*KEY)
    scope = impl.disabled_in_thread(dsl_names=["dsl_a"])
    for round_ in ("first", "again"):
        with scope:
            with scope:
                assert torch.equal(mul(), STOCK)
            assert torch.equal(mul(), STOCK), f"{round_}: the outer entry still disables it"
        assert torch.equal(mul(), SEVENS), f"{round_}: after the outermost exit the override routes again"


@behaviour("thread.scope-object-reentered")
def test_a_decorated_recursive_function_routes_as_before_after_its_outermost_call(impl):
    impl.register("dsl_a", *KEY, always, returning(SEVENS))
    impl.install(*KEY)
    seen = []

    @impl.disabled_in_thread(dsl_names=["dsl_a"])
    def descend(depth):
        seen.append(torch.equal(mul(), STOCK))
        if depth:
            descend(depth - 1)
        seen.append(torch.equal(mul(), STOCK))

    descend(3)
    assert seen == [True] * 8, "disabled at every depth, on the way down and back up"
    assert torch.equal(mul(), SEVENS)


@behaviour("thread.disable-leaves-the-registry-alone")
def test_a_per_thread_disable_leaves_filters_graphs_and_dispatcher_alone(impl):
    from fixtures.python.torch_fixtures import dispatcher_state

    impl.register("dsl_a", *KEY, always, returning(SEVENS))
    impl.register("hatch", *KEY, None, returning(NINES), unconditional_override=True)
    impl.install(*KEY)
    before = dispatcher_state()
    graph_before = [node.node_id for node in impl.graph(*KEY)]
    with impl.disabled_in_thread(dsl_names=["dsl_a", "hatch"]):
        assert dispatcher_state() == before
        assert [node.node_id for node in impl.graph(*KEY)] == graph_before
        assert torch.equal(mul(), NINES), "the unconditional override stays enabled"
        assert torch.equal(on_another_thread(mul), SEVENS)
    assert dispatcher_state() == before
    assert torch.equal(mul(), SEVENS)


@behaviour("thread.disable-seen-when-tracing")
def test_a_program_traced_inside_a_per_thread_disable_leaves_the_override_out(impl):
    calls = []

    def impl_fn(a, b):
        calls.append(1)
        return SEVENS.clone()

    impl.register("dsl_a", *KEY, always, impl_fn)
    impl.install(*KEY)

    def compiled():
        torch._dynamo.reset()
        backend = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                               decompositions=impl.decomp_table())
        return torch.compile(lambda a, b: a * b, backend=backend, fullgraph=True)

    with impl.disabled_in_thread(dsl_names=["dsl_a"]):
        assert torch.equal(compiled()(A, B), STOCK)
    assert calls == [], "traced and run inside the scope, the program does not call the override"
    # With an override after it, that one takes the traced call instead.
    impl.register("dsl_b", *KEY, always, returning(NINES))
    impl.install(*KEY)
    with impl.disabled_in_thread(dsl_names=["dsl_a"]):
        program = compiled()
        assert torch.equal(program(A, B), NINES), "the next override did not take the traced call"
    # Decided at trace time: run outside the scope, the program still calls that one.
    assert torch.equal(program(A, B), NINES), "the traced program leaves the choice to run time"
    assert calls == []
    assert torch.equal(compiled()(A, B), SEVENS)
    assert calls, "traced outside any scope, it does"
    torch._dynamo.reset()


# ---- stats -------------------------------------------------------------------------


@behaviour("stats.counts-each-outcome")
def test_stats_count_each_nodes_outcomes_and_each_graphs_fallbacks(impl):
    state = {"ready": False}
    impl.register("choosy", *KEY, lambda a, b: a.numel() == 2, returning(SEVENS))
    impl.register("needs_runtime", *KEY, lambda a, b: a.numel() == 3, returning(NINES),
                  try_initialize_runtime=lambda: state["ready"])
    impl.register("raising", *KEY, lambda a, b: a.numel() == 4 or 1 / 0, returning(NINES))
    impl.install(*KEY)
    choosy, runtime, raising = impl.graph(*KEY)
    three, four = torch.ones(3), torch.ones(4)
    with impl.collect_stats(True):
        impl.reset_stats()
        mul()                      # choosy takes it
        for _ in range(2):         # choosy declines; the runtime says no; raising's cond raises
            with pytest.raises(ZeroDivisionError):
                mul(three, three)
        assert torch.equal(mul(four, four), NINES)  # choosy and needs_runtime decline; raising takes it
        # The implementation's own invariants hold while counting is on too
        # (the fixture's checks run once this scope closed).
        adapter_module.self_check(impl)
    assert impl.node_stats(choosy) == {"taken": 1, "declined": 3, "runtime_unavailable": 0, "raised": 0}
    assert impl.node_stats(runtime) == {"taken": 0, "declined": 1, "runtime_unavailable": 2, "raised": 0}
    assert impl.node_stats(raising) == {"taken": 1, "declined": 0, "runtime_unavailable": 0, "raised": 2}
    assert impl.graph_stats(*KEY) == {"calls": 2, "fallbacks": 0}, "a call whose cond raised routed nothing"


@behaviour("stats.counts-each-outcome")
def test_a_fallback_is_counted_per_graph_and_reset_zeroes_everything(impl):
    impl.register("choosy", *KEY, lambda a, b: a.numel() == 2, returning(SEVENS))
    impl.install(*KEY)
    (choosy,) = impl.graph(*KEY)
    one = torch.ones(1)
    with impl.collect_stats(True):
        impl.reset_stats()
        mul(); mul(one, one); mul(one, one)
        assert impl.graph_stats(*KEY) == {"calls": 3, "fallbacks": 2}
        assert impl.node_stats(choosy) == {"taken": 1, "declined": 2, "runtime_unavailable": 0,
                                           "raised": 0}
        impl.reset_stats()
        assert impl.graph_stats(*KEY) == {"calls": 0, "fallbacks": 0}
        assert impl.node_stats(choosy) == {"taken": 0, "declined": 0, "runtime_unavailable": 0,
                                           "raised": 0}


def install_failing_impl(impl):
    """One accepting node whose impl raises ValueError("impl failed"), installed; the node."""
    def failing(a, b):
        raise ValueError("impl failed")
    impl.register("failing", *KEY, lambda a, b: True, failing)
    impl.install(*KEY)
    (node,) = impl.graph(*KEY)
    return node


@behaviour("stats.counts-each-outcome")
def test_a_call_whose_impl_raised_is_still_one_its_graph_decided(impl):
    node = install_failing_impl(impl)
    with impl.collect_stats(True):
        impl.reset_stats()
        for _ in range(3):
            with pytest.raises(ValueError, match="impl failed"):
                mul()
    assert impl.node_stats(node) == {"taken": 3, "declined": 0, "runtime_unavailable": 0, "raised": 3}
    assert impl.graph_stats(*KEY) == {"calls": 3, "fallbacks": 0}, (
        "the router chose the override for each call; its impl's error does not unmake the choice")


@behaviour("stats.impl-error-fallback-counted")
def test_an_impl_error_that_fell_back_counts_as_raised_and_as_a_fallback(impl):
    if "impl-error-fallback" not in impl.features:
        pytest.skip(f"{impl.name} lacks feature impl-error-fallback")
    node = install_failing_impl(impl)
    with impl.impl_error_policy("fallback"), impl.collect_stats(True):
        impl.reset_stats()
        for _ in range(2):
            assert torch.equal(mul(), torch.tensor([8.0, 15.0]))  # A * B, the op's own result
    assert impl.node_stats(node) == {"taken": 2, "declined": 0, "runtime_unavailable": 0, "raised": 2}, (
        "taken by the override, whose impl raised each time")
    assert impl.graph_stats(*KEY) == {"calls": 2, "fallbacks": 2}, "each call ran the op's own kernel"


@behaviour("stats.unrouted-graph-counts-zero")
def test_a_graph_no_router_served_counts_zero(impl):
    impl.register("choosy", *KEY, always, returning(SEVENS))  # registered, never installed
    add = ("aten", "add.Tensor", "CPU")
    zero = {"calls": 0, "fallbacks": 0}
    with impl.collect_stats(True):
        impl.reset_stats()
        assert impl.graph_stats(*KEY) == zero, "overrides registered, no router"
        assert impl.graph_stats(*add) == zero, "no graph at all"
        assert torch.equal(torch.add(A, B), A + B)
        assert impl.graph_stats(*add) == zero, "a call no router saw"
        assert impl.graph_stats(*KEY) == zero, "asking counted nothing"


@behaviour("stats.graph-counts-kept-across-reinstall")
def test_a_graphs_counts_are_kept_when_it_is_installed_again(impl):
    impl.register("choosy", *KEY, lambda a, b: a.numel() == 2, returning(SEVENS))
    impl.install(*KEY)
    with impl.collect_stats(True):
        impl.reset_stats()
        mul(); mul(torch.ones(1), torch.ones(1))
        assert impl.graph_stats(*KEY) == {"calls": 2, "fallbacks": 1}
        impl.install(*KEY)  # a new router; the graph's counts stay
        assert impl.graph_stats(*KEY) == {"calls": 2, "fallbacks": 1}, "installing again zeroed them"
        mul(torch.ones(1), torch.ones(1))
        assert impl.graph_stats(*KEY) == {"calls": 3, "fallbacks": 2}


@behaviour("stats.off-counts-nothing")
def test_with_stats_off_nothing_is_counted_and_switching_off_keeps_the_counts(impl):
    impl.register("choosy", *KEY, lambda a, b: a.numel() == 2, returning(SEVENS))
    impl.install(*KEY)
    (choosy,) = impl.graph(*KEY)
    impl.reset_stats()
    mul(); mul(torch.ones(1), torch.ones(1))
    assert impl.node_stats(choosy) == {"taken": 0, "declined": 0, "runtime_unavailable": 0, "raised": 0}
    assert impl.graph_stats(*KEY)["calls"] == 0
    with impl.collect_stats(True):
        mul()
    mul(); mul()
    assert impl.node_stats(choosy)["taken"] == 1
    assert impl.graph_stats(*KEY) == {"calls": 1, "fallbacks": 0}


@behaviour("stats.off-counts-nothing")
def test_an_impl_error_while_stats_are_off_counts_nothing(impl):
    node = install_failing_impl(impl)
    impl.reset_stats()
    with pytest.raises(ValueError, match="impl failed"):
        mul()
    assert impl.node_stats(node) == {"taken": 0, "declined": 0, "runtime_unavailable": 0, "raised": 0}
    assert impl.graph_stats(*KEY) == {"calls": 0, "fallbacks": 0}


@behaviour("stats.exact-under-threads")
def test_stats_are_exact_under_many_threads(impl):
    impl.register("choosy", *KEY, lambda a, b: a.numel() == 2, returning(SEVENS))
    impl.install(*KEY)
    (choosy,) = impl.graph(*KEY)
    threads, calls = 8, 200
    one = torch.ones(1)

    def work():
        for _ in range(calls):
            mul()
            mul(one, one)

    with impl.collect_stats(True):
        impl.reset_stats()
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        assert not any(worker.is_alive() for worker in workers)
    total = threads * calls
    assert impl.node_stats(choosy) == {"taken": total, "declined": total, "runtime_unavailable": 0,
                                       "raised": 0}
    assert impl.graph_stats(*KEY) == {"calls": 2 * total, "fallbacks": total}


# ---- profiler ranges and the routing log ------------------------------------------


@behaviour("observe.profiler-ranges")
def test_under_the_profiler_a_routed_call_is_a_range_named_for_its_override(impl):
    impl.register("range_dsl", *KEY, lambda a, b: a.numel() == 2, returning(SEVENS))
    impl.install(*KEY)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        mul()
        mul(torch.ones(1), torch.ones(1))
    names = [event.name for event in prof.events()]
    assert names.count("native_registry::range_dsl::mul.Tensor") == 1, names
    assert names.count("native_registry::fallback::mul.Tensor") == 1, names
    mul()  # no profiler: nothing recorded, nothing breaks


def _declined_under_the_profiler(impl, key, call):
    """The profiler's event names of `call` once a graph at `key` whose one
    node declines is installed."""
    impl.register("declining_dsl", *key, lambda *args, **kwargs: False,
                  lambda *args, **kwargs: pytest.fail("the impl of a declining node ran"))
    impl.install(*key)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        result = call()
    return [event.name for event in prof.events()], result


@behaviour("observe.profiler-ranges")
@pytest.mark.parametrize("op_symbol, call, stock", [
    ("neg", lambda: torch.ops.aten.neg.default(A), -A),                       # (Tensor)
    ("add.Tensor", lambda: torch.ops.aten.add.Tensor(A, B, alpha=2), A + 2 * B),  # (Tensor, Tensor, Scalar)
    ("mul.Scalar", lambda: torch.ops.aten.mul.Scalar(A, 3), A * 3),            # (Tensor, Scalar)
    ("add.Scalar", lambda: torch.ops.aten.add.Scalar(A, 3, 2), A + 6),         # (Tensor, Scalar, Scalar)
    ("clamp", lambda: torch.ops.aten.clamp.default(A, 2.5, None), torch.clamp(A, 2.5)),  # optionals
    ("max.dim", lambda: torch.ops.aten.max.dim(A, 0)[0], A.max()),             # two results
])
def test_a_declined_call_of_an_op_of_any_signature_is_a_fallback_range(impl, op_symbol, call, stock):
    names, result = _declined_under_the_profiler(impl, ("aten", op_symbol, "CPU"), call)
    assert names.count(f"native_registry::fallback::{op_symbol}") == 1, names
    assert not any(name.startswith("native_registry::declining_dsl") for name in names), names
    torch.testing.assert_close(result, stock)


@behaviour("observe.profiler-ranges")
def test_a_declined_call_at_a_fallthrough_key_is_a_fallback_range(impl):
    # mul.Tensor has no kernel of its own at AutocastCPU (a fallthrough): the call goes on
    # to the next key's kernel, inside the fallback's range.
    def call():
        with torch.autocast("cpu"):
            return mul()
    names, result = _declined_under_the_profiler(impl, ("aten", "mul.Tensor", "AutocastCPU"), call)
    assert names.count("native_registry::fallback::mul.Tensor") == 1, names
    torch.testing.assert_close(result, STOCK)


def _routing_records(caplog):
    return [r for r in caplog.records if r.name == "native_registry.routing"]


@behaviour("observe.routing-log")
def test_the_routing_logger_at_debug_logs_each_decision_and_nothing_otherwise(impl, caplog):
    impl.register("log_dsl", *KEY, lambda a, b: a.numel() == 2, returning(SEVENS))
    impl.install(*KEY)
    (node,) = impl.graph(*KEY)
    with caplog.at_level(logging.INFO, logger="native_registry.routing"):
        mul()
        _flush_log()
    assert _routing_records(caplog) == []
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="native_registry.routing"):
        mul()
        mul(torch.ones(1), torch.ones(1))
        _flush_log()
    messages = [r.getMessage() for r in _routing_records(caplog)]
    assert len(messages) == 2, messages
    assert {r.levelno for r in _routing_records(caplog)} == {logging.DEBUG}
    assert node.node_id in messages[0] and "mul.Tensor" in messages[0], messages
    assert node.node_id not in messages[1] and "own kernel" in messages[1], messages
    assert "coverage" not in messages[1], messages  # declined by the cond, not covered
    caplog.clear()
    mul()
    _flush_log()
    assert _routing_records(caplog) == [], "the level is back: nothing logged"


@behaviour("observe.routing-log")
def test_a_call_taken_by_an_override_with_a_native_predicate_cond_is_logged(impl, caplog):
    # A cond evaluated outside Python (feature native-predicates) decides the call
    # without the interpreter: the decision is logged all the same.
    if "native-predicates" not in impl.features:
        pytest.skip(f"{impl.name} lacks feature native-predicates")
    predicates = impl.predicates_module()
    impl.register("native_cond_dsl", *KEY, predicates.always(), returning(SEVENS))
    impl.install(*KEY)
    (node,) = impl.graph(*KEY)
    with caplog.at_level(logging.DEBUG, logger="native_registry.routing"):
        assert torch.equal(mul(), SEVENS)
        _flush_log()
    messages = [r.getMessage() for r in _routing_records(caplog)]
    assert len(messages) == 1 and node.node_id in messages[0], messages
    assert "own kernel" not in messages[0], messages


@behaviour("observe.routing-log")
def test_a_call_the_coverage_check_covered_is_logged_as_covered(impl, caplog):
    if "aot-coverage" not in impl.features:
        pytest.skip(f"{impl.name} lacks feature aot-coverage")
    with impl.coverage_check(lambda op, key, args, kwargs: True):
        impl.register("covered_log_dsl", *KEY, always, returning(SEVENS))
        impl.install(*KEY)
        with caplog.at_level(logging.DEBUG, logger="native_registry.routing"):
            mul()
            _flush_log()
    messages = [r.getMessage() for r in _routing_records(caplog)]
    assert len(messages) == 1 and "own kernel" in messages[0] and "coverage" in messages[0], messages


@behaviour("observe.routing-log")
def test_a_burst_of_calls_logs_fewer_records_than_calls_and_says_how_many_it_dropped(impl, caplog):
    impl.register("log_dsl", *KEY, always, returning(SEVENS))
    impl.install(*KEY)
    with caplog.at_level(logging.DEBUG, logger="native_registry.routing"):
        for _ in range(300):
            mul()
        _flush_log()
        import time
        time.sleep(1.1)
        mul()
        _flush_log()
    messages = [r.getMessage() for r in _routing_records(caplog)]
    assert 1 <= len(messages) < 300, len(messages)
    assert "not logged" in messages[-1], messages[-1]
    # Every decision is logged or counted once: the last one, a second later, carries the rest.
    counted = [int(found.group(1)) for m in messages if (found := re.search(r"(\d+)\D*not logged", m))]
    assert len(messages) + sum(counted) == 301, (len(messages), counted)


@behaviour("observe.routing-log")
def test_calls_made_while_the_logger_is_off_count_nothing_against_the_rate_limit(impl, caplog):
    impl.register("log_dsl", *KEY, always, returning(SEVENS))
    impl.install(*KEY)
    with caplog.at_level(logging.INFO, logger="native_registry.routing"):
        for _ in range(300):
            mul()
        _flush_log()
    with caplog.at_level(logging.DEBUG, logger="native_registry.routing"):
        mul()
        _flush_log()
    messages = [r.getMessage() for r in _routing_records(caplog)]
    assert len(messages) == 1, "the first decision logged once DEBUG is on: " + repr(messages)
    assert "not logged" not in messages[0], "decisions made while the log was off were counted"


def _flush_log():
    """Records of calls made without the GIL reach Python as soon as the
    interpreter runs its pending calls: a few bytecodes."""
    for _ in range(1000):
        pass


@behaviour("thread.disable-on-this-thread-only")
def test_explain_on_this_thread_reports_a_per_thread_disable(impl):
    if "explain" not in impl.features:
        pytest.skip(f"{impl.name} lacks feature explain")
    impl.register("dsl_a", *KEY, always, returning(SEVENS))
    impl.register("dsl_b", *KEY, always, returning(NINES))
    impl.install(*KEY)
    with impl.disabled_in_thread(dsl_names=["dsl_a"]):
        report = impl.explain(torch.ops.aten.mul.Tensor, A, B)
    assert [entry.verdict for entry in report.nodes] == ["disabled", "accepted"], str(report)
    assert "thread" in report.nodes[0].detail, str(report)  # what disabled it: this thread's scope


@behaviour("stats.setting-must-be-bool")
@pytest.mark.parametrize("setting", [1, "yes", None], ids=["int", "str", "none"])
def test_collect_stats_refuses_what_is_not_a_bool_and_keeps_counting_as_it_was(impl, setting):
    impl.register("counted", *KEY, always, returning(SEVENS))
    impl.install(*KEY)
    (counted,) = impl.graph(*KEY)
    impl.reset_stats()
    with pytest.raises(TypeError, match=type(setting).__name__):
        with impl.collect_stats(setting):
            pass
    mul()
    assert impl.node_stats(counted)["taken"] == 0, "the refused setting turned counting on"
    with impl.collect_stats(True):
        with pytest.raises(TypeError, match=type(setting).__name__):
            with impl.collect_stats(setting):
                pass
        mul()
    assert impl.node_stats(counted)["taken"] == 1, "the refused setting turned counting off"


@behaviour("observe.routing-log-configured-before-import")
def test_a_routing_logger_at_debug_before_the_import_logs_the_first_call(impl):
    if "routing-observability" not in impl.features:
        pytest.skip(f"{impl.name} lacks feature routing-observability")
    lines = run_in_fresh_interpreter(impl, """
        from fixtures.python.torch_fixtures import MUL_CPU as KEY, mul
        impl.register("early_log_dsl", *KEY, lambda a, b: True, lambda a, b: a + b)
        impl.install(*KEY)
        mul()
        for _ in range(1000):
            pass  # records of calls made without the GIL arrive within a few bytecodes
        print("done")
    """, prelude="""
        import logging, sys
        routing = logging.getLogger("native_registry.routing")
        routing.setLevel(logging.DEBUG)
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("record: %(message)s"))
        routing.addHandler(handler)
    """)
    records = [line for line in lines if line.startswith("record: ")]
    assert len(records) == 1 and "early_log_dsl" in records[0], lines
    assert lines[-1] == "done"
