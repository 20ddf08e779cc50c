"""The registry inside a host program that misbehaves: the control plane
called from inside a call (teardown included), programs that outlive the
scope they were built in, threads that hold the GIL and log while the
registry works, and memory over many register + restore cycles."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from fixtures.python.torch_fixtures import A, B, STOCK, mul

import native_registry.registry as registry

SEVEN = torch.tensor([7.0, 7.0])


def seven(a, b):
    return torch.full_like(a, 7.0)


@pytest.fixture(params=["keep_dormant", "remove"])
def policy(request, reg):
    before = registry._C.empty_chain_policy()
    reg.set_empty_chain_policy(request.param)
    yield request.param
    reg.set_empty_chain_policy(before)


# ---- the control plane from inside a call -----------------------------------------


def test_a_cond_that_restores_its_own_op_finishes_on_the_old_chain(reg, policy):
    saved = reg.snapshot()
    calls = []

    def cond(a, b):
        calls.append("cond")
        reg.restore(saved)  # removes this very router and frees nothing under us
        return True

    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", cond, seven)
    reg.register_all_overrides()
    assert torch.equal(mul(A, B), SEVEN)  # the chain the call started with
    assert calls == ["cond"]
    assert reg.router_state("aten", "mul.Tensor", "CPU") == "absent"
    assert torch.equal(mul(A, B), STOCK)  # the next call sees the new state
    registry._C.check_invariants()


def test_an_impl_that_restores_its_own_op_returns_its_result(reg, policy):
    saved = reg.snapshot()

    def impl(a, b):
        reg.restore(saved)
        # Nested call of the same op while the router is gone: the stock kernel.
        return mul(a, b) + 1

    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True, impl)
    reg.register_all_overrides()
    assert torch.equal(mul(A, B), STOCK + 1)
    assert torch.equal(mul(A, B), STOCK)


def test_an_impl_that_disables_its_own_dsl_finishes(reg, policy):
    def impl(a, b):
        reg.deregister_op_overrides(disable_dsl_names="test_dsl")
        return seven(a, b)

    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True, impl)
    reg.register_all_overrides()
    assert torch.equal(mul(A, B), SEVEN)
    expected = "absent" if policy == "remove" else "dormant"
    assert reg.router_state("aten", "mul.Tensor", "CPU") == expected
    assert torch.equal(mul(A, B), STOCK)
    reg.reenable_op_overrides(enable_dsl_names="test_dsl")


def test_conds_may_reinstall_reorder_and_reenable_during_a_call(reg, policy):
    log = []

    def cond(a, b):
        log.append("cond")
        reg.reorder_graphs_from_user_function(lambda op, key, graph: list(reversed(graph)),
                                              reregister_overrides=True)
        reg.register_all_overrides()
        reg.deregister_op_overrides(disable_dsl_names="other")
        reg.reenable_op_overrides(enable_dsl_names="other")
        return False

    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", cond, seven)
    reg.register_op_override("other", "aten", "mul.Tensor", "CPU", lambda a, b: False, seven)
    reg.register_all_overrides()
    assert torch.equal(mul(A, B), STOCK)
    assert log == ["cond"]
    registry._C.check_invariants()


# ---- what teardown removed stays safe ----------------------------------------------


def test_a_retired_native_op_raises_naming_the_override(reg):
    with reg.scoped():
        reg.register_op_override("gone_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True, seven)
        reg.register_all_overrides()
        node = reg.graph("aten", "mul.Tensor", "CPU")[0]
        native = getattr(torch.ops._native, node.node_id).default
        assert torch.equal(native(A, B), SEVEN)
    for args in ((A, B), (A.to("meta"), B.to("meta"))):
        with pytest.raises(RuntimeError, match=f"override {node.node_id} .*gone_dsl.* is gone"):
            native(*args)


def test_an_exported_program_called_after_its_scope_raises_a_clear_error(reg):
    class Mul(torch.nn.Module):
        def forward(self, a, b):
            return a * b

    with reg.scoped():
        reg.register_op_override("gone_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True, seven)
        reg.register_all_overrides()
        program = torch.export.export(Mul(), (A, B)).run_decompositions(reg.native_decomp_table())
        assert torch.equal(program.module()(A, B), SEVEN)
    with pytest.raises(RuntimeError, match="is gone"):
        program.module()(A, B)


@pytest.mark.parametrize("kind", ["aot_eager", "inductor"])
def test_a_program_compiled_in_a_scope_raises_a_clear_error_after_it(reg, kind):
    torch._dynamo.reset()
    with reg.scoped():
        reg.register_op_override("gone_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True, seven)
        reg.register_all_overrides()
        compiled = torch.compile(lambda a, b: a * b, backend=reg.compile_backend(kind))
        assert torch.equal(compiled(A, B), SEVEN)
    with pytest.raises(Exception, match="is gone"):
        compiled(A, B)
    torch._dynamo.reset()


# ---- threads, the GIL and logging ------------------------------------------------------

# Each scenario runs in a child interpreter with a time limit: a deadlock
# there fails this test instead of hanging the suite.
def run_child(body: str, timeout: float = 120.0) -> str:
    script = "import threading, logging, time, sys\nimport torch\n" \
             "import native_registry.registry as registry\n" + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


QUERY_LOOP = """
stop = threading.Event()
def query():
    while not stop.is_set():
        registry.get_dsl_operations("d")
        registry.router_state("aten", "mul.Tensor", "CPU")
worker = threading.Thread(target=query, daemon=True)
worker.start()
"""


def test_a_raising_ordering_function_beside_a_querying_thread_does_not_deadlock():
    out = run_child(QUERY_LOOP + """
registry.register_op_override("d", "aten", "mul.Tensor", "CPU", lambda a, b: False,
                              lambda a, b: a)
def raising(op, key, graph):
    raise ValueError("no")
for _ in range(500):  # each failure logs a warning through Python's logging
    registry.reorder_graphs_from_user_function(raising)
stop.set(); worker.join(30)
print("done", worker.is_alive())
""")
    assert out.strip().endswith("done False")


def test_toggling_with_info_logging_beside_a_querying_thread_does_not_deadlock():
    out = run_child("""
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
""" + QUERY_LOOP + """
registry.register_op_override("d", "aten", "mul.Tensor", "CPU", lambda a, b: False,
                              lambda a, b: a)
registry.register_all_overrides()
a = torch.ones(2)
for _ in range(300):
    registry.deregister_op_overrides(disable_dsl_names="d")
    registry.reenable_op_overrides(enable_dsl_names="d")
    torch.mul(a, a)
stop.set(); worker.join(30)
print("done", worker.is_alive())
""")
    assert out.strip().endswith("done False")


def test_an_ordering_function_that_sleeps_prints_and_queries_finishes():
    out = run_child(QUERY_LOOP + """
registry.register_op_override("d", "aten", "mul.Tensor", "CPU", lambda a, b: False,
                              lambda a, b: a)
def slow(op, key, graph):
    time.sleep(0.001)
    print("ordering", op, registry.get_dsl_operations("d"))
    return list(reversed(graph))
for _ in range(50):
    registry.reorder_graphs_from_user_function(slow, reregister_overrides=True)
stop.set(); worker.join(30)
print("done", worker.is_alive())
""")
    assert "ordering mul.Tensor ['mul.Tensor']" in out
    assert out.strip().endswith("done False")


# ---- memory -----------------------------------------------------------------------------


def test_register_and_restore_leave_no_residue():
    """RSS after 100k register + restore cycles stays within 1 MB of the RSS
    after a warm-up (allocator pools and caches filled)."""
    out = run_child("""
import resource
def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024
def cycles(n):
    for _ in range(n):
        saved = registry.snapshot()
        registry.register_op_override("d", "aten", "mul.Tensor", "CPU", lambda a, b: False,
                                      lambda a, b: a)
        registry.restore(saved)
cycles(20_000)
start = rss_kb()
cycles(100_000)
print("grew_kb", rss_kb() - start)
""", timeout=300)
    grew = int(out.split()[-1])
    assert grew < 1024, f"RSS grew by {grew} kB over 100k cycles"


def test_a_decomposition_table_read_in_a_scope_holds_no_native_op_after_it(reg):
    """The decomposition table's routers are cached while their chain is
    published; once a scope's restore retires the chain, the cached router
    goes too, so a retired `_native` op that nothing else holds is undefined
    by the next restore (no op left behind by a table read and dropped)."""
    import gc

    with reg.scoped():
        reg.register_op_override("gone_dsl", "aten", "mul.Tensor", "CPU", lambda a, b: True, seven)
        reg.register_all_overrides()
        node_id = reg.graph("aten", "mul.Tensor", "CPU")[0].node_id
        assert len(reg.native_decomp_table(overrides_only=True)) == 1  # read, then dropped
    gc.collect()
    with reg.scoped():
        pass
    with pytest.raises(RuntimeError):
        torch._C._dispatch_find_schema_or_throw(f"_native::{node_id}", "")
