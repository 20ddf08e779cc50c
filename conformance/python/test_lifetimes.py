"""Hostile-but-legal use: the control plane from inside a call, programs that
outlive the scope they were built in, callbacks and threads that use the
registry while it works. A crash, hang or misroute here is the worst bug a
registry can ship; none of this is in the seed file, so the behaviours are
`recommended`."""

from __future__ import annotations

import textwrap
import threading

import pytest
import torch

from conftest import behaviour, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

SEVEN = torch.tensor([7.0, 7.0])


def seven(a, *rest):
    return torch.full_like(a, 7.0)


@behaviour("lifetime.teardown-inside-a-call")
def test_a_cond_that_tears_down_its_own_op_finishes_on_the_old_chain(impl):
    inner = impl.scope()
    inner.__enter__()
    torn_down = []

    def cond(*args):
        if not torn_down:
            torn_down.append(True)
            inner.__exit__(None, None, None)
        return True

    impl.register("test_dsl", *KEY, cond, seven)
    impl.install(*KEY)
    assert torch.equal(mul(A, B), SEVEN)
    assert torn_down == [True]
    assert not impl.router_installed(*KEY)
    assert torch.equal(mul(A, B), STOCK)


@behaviour("lifetime.teardown-inside-a-call")
def test_an_impl_that_tears_down_its_own_op_returns_its_result(impl):
    inner = impl.scope()
    inner.__enter__()

    def body(a, b):
        inner.__exit__(None, None, None)
        return mul(a, b) + 1  # the op is stock again inside the impl

    impl.register("test_dsl", *KEY, lambda *a: True, body)
    impl.install(*KEY)
    assert torch.equal(mul(A, B), STOCK + 1)
    assert torch.equal(mul(A, B), STOCK)


@behaviour("lifetime.teardown-inside-a-call")
def test_an_impl_that_disables_its_own_dsl_finishes(impl):
    def body(a, b):
        impl.disable(dsl_names=["test_dsl"])
        return seven(a)

    impl.register("test_dsl", *KEY, lambda *a: True, body)
    impl.install(*KEY)
    assert torch.equal(mul(A, B), SEVEN)
    assert torch.equal(mul(A, B), STOCK)
    impl.enable(dsl_names=["test_dsl"])


@behaviour("lifetime.recorded-native-op-after-teardown")
def test_a_native_op_recorded_in_a_scope_raises_after_it(impl):
    with impl.scope():
        impl.register("gone_dsl", *KEY, lambda *a: True, seven)
        impl.install(*KEY)
        node = impl.graph(*KEY)[0]
        native = impl.native_op(node)
        assert torch.equal(native(A, B), SEVEN)
    with pytest.raises(RuntimeError, match=node.node_id):
        native(A, B)


@behaviour("lifetime.recorded-native-op-after-teardown")
def test_an_exported_program_called_after_its_scope_raises(impl):
    class Mul(torch.nn.Module):
        def forward(self, a, b):
            return a * b

    with impl.scope():
        impl.register("gone_dsl", *KEY, lambda *a: True, seven)
        impl.install(*KEY)
        node = impl.graph(*KEY)[0]
        program = torch.export.export(Mul(), (A, B)).run_decompositions(impl.decomp_table())
        assert torch.equal(program.module()(A, B), SEVEN)
    with pytest.raises(RuntimeError, match=node.node_id):
        program.module()(A, B)


ORDERING_AND_LOG_HANDLER = """
import logging, os, threading

KEY = ("aten", "mul.Tensor", "CPU")
seen = []

class Querying(logging.Handler):
    def emit(self, record):
        seen.append(("log", impl.dsl_operations("test_dsl")))

def ordering(op_symbol, dispatch_key, graph):
    seen.append(("order", impl.dsl_operations("test_dsl")))
    raise ValueError("no")  # a failed transformation: logged

def body():
    logger = logging.getLogger(impl.log_name)
    handler = Querying(level=logging.WARNING)
    logger.addHandler(handler)
    try:
        with impl.scope():
            impl.register("test_dsl", *KEY, lambda *a: False, lambda a, *rest: torch.full_like(a, 7.0))
            impl.reorder(ordering)
    finally:
        logger.removeHandler(handler)

# The body takes milliseconds; one that has not ended in 20 s is deadlocked
# (torch's import, before it, is outside this limit).
worker = threading.Thread(target=body, daemon=True)
worker.start()
worker.join(20)
if worker.is_alive():
    print("deadlocked", flush=True)
    os._exit(0)
print(("order", ["mul.Tensor"]) in seen, ("log", ["mul.Tensor"]) in seen)
"""


@behaviour("locking.callbacks-may-use-the-control-plane")
def test_an_ordering_function_and_a_log_handler_may_use_the_control_plane(impl):
    # In a child, under a watchdog: a registry that runs either callback
    # under its own lock deadlocks there, which fails this test, not the run.
    lines = run_in_fresh_interpreter(impl, ORDERING_AND_LOG_HANDLER, timeout=120)
    assert lines == ["True True"], lines


@behaviour("locking.callbacks-may-use-the-control-plane")
def test_a_querying_thread_beside_failing_reorders_does_not_deadlock(impl):
    """A thread that holds the GIL and queries the registry while the control
    plane runs Python (an ordering function, a log record) that releases it.
    Both run on daemon threads, so a deadlock fails the test, not the run."""
    impl.register("test_dsl", *KEY, lambda *a: False, seven)
    stop = threading.Event()

    def query():
        while not stop.is_set():
            impl.dsl_operations("test_dsl")

    def raising(op_symbol, dispatch_key, graph):
        raise ValueError("no")

    def reorders():
        for _ in range(300):
            impl.reorder(raising)

    querier = threading.Thread(target=query, daemon=True)
    worker = threading.Thread(target=reorders, daemon=True)
    querier.start()
    worker.start()
    worker.join(60)
    stop.set()
    querier.join(10)
    assert not worker.is_alive() and not querier.is_alive(), "the registry deadlocked"


@behaviour("memory.register-restore-no-residue")
def test_register_and_teardown_cycles_leave_no_residue(impl):
    """RSS over 50,000 register + teardown cycles, after 10,000 to warm up,
    in a fresh interpreter that loads the implementation under test."""
    grew = run_in_fresh_interpreter(impl, """
        import resource
        def rss_kb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * resource.getpagesize() // 1024
        def cycles(n):
            for _ in range(n):
                with impl.scope():
                    impl.register("d", "aten", "mul.Tensor", "CPU", lambda *a: False, lambda a, b: a)
        cycles(10_000)
        start = rss_kb()
        cycles(50_000)
        print(rss_kb() - start)
    """, timeout=600)[-1]
    assert int(grew) < 1024, f"RSS grew by {grew} kB over 50,000 register + teardown cycles"


# ---- a scope per test (issue 23) ---------------------------------------------------

COUNT_NATIVE_OPS = """
    import resource
    def native_ops_defined():
        return sum(n.startswith("_native::") for n in torch._C._dispatch_get_all_op_names())
    def rss_kib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() // 1024
"""


def with_counters(body: str) -> str:
    """`body` after the counters above, each dedented on its own."""
    return textwrap.dedent(COUNT_NATIVE_OPS) + textwrap.dedent(body)


@behaviour("lifetime.scope-cycles-stay-flat")
def test_scope_cycles_leave_no_native_op_behind(impl):
    """300 scopes, each registering and installing one override and calling
    the op, after 50 to warm up, in a fresh interpreter (a clean RSS)."""
    ops_left, grew = run_in_fresh_interpreter(impl, with_counters("""
        import gc
        a, b = torch.ones(2), torch.ones(2)
        def cycle():
            with impl.scope():
                impl.register("cycle_dsl", "aten", "mul.Tensor", "CPU", lambda *args: True,
                              lambda x, y: torch.full_like(x, 7.0))
                impl.install("aten", "mul.Tensor", "CPU")
                assert torch.mul(a, b).tolist() == [7.0, 7.0]
        for _ in range(50):
            cycle()
        gc.collect()
        before, start = native_ops_defined(), rss_kib()
        for _ in range(300):
            cycle()
        gc.collect()
        print(native_ops_defined() - before)
        print(rss_kib() - start)
    """), timeout=300)[-2:]
    assert int(ops_left) <= 0, f"300 scope cycles left {ops_left} _native ops defined"
    assert int(grew) <= 2 * 300, f"RSS grew {grew} KiB over 300 scope cycles (at most 2 KiB each)"


@behaviour("lifetime.scope-cycles-stay-flat")
def test_a_native_op_held_past_its_scope_goes_once_let_go(impl):
    """Held (a torch.ops object, as a recorded program holds it): defined and
    raising after its scope; let go, undefined by the next teardown. In a
    child: an op undefined while held leaves a dangling handle."""
    lines = run_in_fresh_interpreter(impl, with_counters("""
        import gc
        with impl.scope():
            impl.register("held_dsl", "aten", "mul.Tensor", "CPU", lambda *args: True,
                          lambda x, y: torch.full_like(x, 7.0))
            impl.install("aten", "mul.Tensor", "CPU")
            node = impl.graph("aten", "mul.Tensor", "CPU")[0]
            native = impl.native_op(node)
        name = "_native::" + node.node_id
        print("id: " + node.node_id)
        print("defined while held: " + str(name in torch._C._dispatch_get_all_op_names()))
        try:
            native(torch.ones(2), torch.ones(2))
            print("call: returned")
        except Exception as e:
            print("call: raised " + " ".join(str(e).split()))
        del native
        gc.collect()
        with impl.scope():
            pass
        print("defined once let go: " + str(name in torch._C._dispatch_get_all_op_names()))
    """), timeout=300)
    results = dict(line.split(": ", 1) for line in lines if ": " in line)
    assert results["defined while held"] == "True"
    assert results["call"].startswith("raised") and results["id"] in results["call"], results["call"]
    assert results["defined once let go"] == "False", "a released _native op outlived the next teardown"


@behaviour("teardown.native-ops-from-before-a-scope-stay")
def test_a_scope_leaves_the_native_op_of_a_disabled_override_running(impl):
    impl.register("d", *KEY, lambda *a: True, lambda a, b: torch.full_like(a, 5.0))
    impl.install(*KEY)
    native = impl.native_op(impl.graph(*KEY)[0])
    impl.disable(dsl_names=["d"])
    with impl.scope():
        pass
    assert torch.equal(native(A, B), torch.full_like(A, 5.0)), \
        "leaving a scope retired the _native op of an override registered before it"
