"""Hostile-but-legal uses of per-thread disables, stats and the routing log
(issue 30): scopes that outlive their thread, end on the wrong thread or open
and close inside a cond; counting switched and reset while calls run; routed
calls with DEBUG logging on while the interpreter exits."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

A = torch.tensor([2.0, 3.0])
SEVENS = torch.full((2,), 7.0)
KEY = ("aten", "mul.Tensor", "CPU")


def install_sevens(reg, cond=lambda a, b: True, dsl="dsl_a"):
    reg.register_op_override(dsl, *KEY, cond, lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()


def test_a_scope_left_open_by_a_finished_thread_affects_no_other_thread(reg):
    install_sevens(reg)
    held = []

    def open_and_leave():
        scope = reg.disabled_in_thread(dsl_names="dsl_a")
        scope.__enter__()
        held.append(scope)
        assert torch.equal(A * A, A * A.clone())  # disabled here: the op's own kernel

    thread = threading.Thread(target=open_and_leave)
    thread.start()
    thread.join(timeout=60)
    assert torch.equal(A * A, SEVENS), "the main thread never saw the scope"
    with pytest.raises(RuntimeError, match="did not enter it"):
        held[0].__exit__(None, None, None)  # on the wrong thread: refused
    held.clear()
    gc.collect()  # the abandoned scope's object goes on this thread: nothing breaks
    assert torch.equal(A * A, SEVENS)


def test_exiting_on_another_thread_is_refused_and_the_scope_stays_closable(reg):
    install_sevens(reg)
    scope = reg.disabled_in_thread(dsl_names="dsl_a")
    scope.__enter__()
    errors = []

    def exit_here():
        try:
            scope.__exit__(None, None, None)
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=exit_here)
    thread.start()
    thread.join(timeout=60)
    assert errors and "did not enter it" in str(errors[0])
    assert not torch.equal(A * A, SEVENS), "still disabled on the opening thread"
    scope.__exit__(None, None, None)
    assert torch.equal(A * A, SEVENS)


def test_a_cond_that_opens_and_closes_scopes_mid_call_routes_as_it_said(reg):
    opened = []

    def scheming_cond(a, b):
        # Opens a scope naming the next node, closes one it opened earlier.
        scope = reg.disabled_in_thread(dsl_names="dsl_b")
        scope.__enter__()
        opened.append(scope)
        if len(opened) > 1:
            opened.pop(0).__exit__(None, None, None)
        return False

    reg.register_op_override("dsl_a", *KEY, scheming_cond, lambda a, b: torch.zeros_like(a))
    install_sevens(reg, dsl="dsl_b")
    for _ in range(5):
        result = A * A
        assert torch.equal(result, A * A.clone()) or torch.equal(result, SEVENS)
    while opened:
        opened.pop().__exit__(None, None, None)
    reg.deregister_op_overrides(disable_dsl_names="dsl_a")
    assert torch.equal(A * A, SEVENS), "every scope closed: dsl_b takes the call again"


def test_scopes_that_end_out_of_order_leave_exactly_the_open_ones(reg):
    install_sevens(reg)
    outer = reg.disabled_in_thread(op_symbols="mul.Tensor")
    inner = reg.disabled_in_thread(dsl_names="dsl_a")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # out of order
    assert not torch.equal(A * A, SEVENS), "the inner scope is still open"
    inner.__exit__(None, None, None)
    assert torch.equal(A * A, SEVENS)


def test_bad_entries_are_refused_naming_them_and_open_nothing(reg):
    install_sevens(reg)
    with pytest.raises(TypeError, match="3"):
        reg.disabled_in_thread(dsl_names=["ok", 3])
    with pytest.raises(ValueError):
        with reg.disabled_in_thread(dsl_names=["  "]):
            pass
    assert torch.equal(A * A, SEVENS)


def test_switching_and_resetting_stats_while_threads_call_breaks_nothing(reg):
    install_sevens(reg, cond=lambda a, b: a.numel() == 2)
    stop = threading.Event()

    def call():
        while not stop.is_set():
            A * A

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for i in range(200):
        reg.collect_stats(i % 2 == 0)
        if i % 7 == 0:
            reg.reset_stats()
        reg.stats()
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    reg.collect_stats(False)
    node = reg.stats().nodes[0]
    assert node.declined == 0 and node.raised == 0 and node.taken >= 0


def test_stats_of_a_node_given_new_callables_stay_one_record(reg):
    reg.register_op_override("dsl_a", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()
    previous = reg.collect_stats(True)
    try:
        reg.reset_stats()
        A * A
        (node,) = reg.graph(*KEY)
        node.impl_fn = lambda a, b: torch.full_like(a, 9.0)
        reg.register_all_overrides()
        A * A
        assert reg.stats().node(node.node_id).taken == 2
    finally:
        reg.collect_stats(previous)


def test_routed_calls_with_debug_logging_while_the_interpreter_exits_end_cleanly():
    # The daemon threads park in a Python wait, not in a torch call: a daemon
    # thread inside any torch op at exit aborts the process with or without
    # this package (PyTorch's own GIL re-acquisition in a noexcept frame), so
    # what is tested here is the registry's own state at exit: open per-thread
    # scopes, counters on, routing decisions still queued for the logger.
    program = textwrap.dedent("""
        import logging, threading, torch
        import native_registry.registry as reg
        logging.basicConfig(level=logging.DEBUG)
        reg.register_op_override("dsl_a", "aten", "mul.Tensor", "CPU",
                                 lambda a, b: a.numel() % 2 == 0, lambda a, b: torch.full_like(a, 7.0))
        reg.register_all_overrides()
        reg.collect_stats(True)
        never, finished = threading.Event(), threading.Semaphore(0)
        def spin():
            x = torch.ones(2)
            with reg.disabled_in_thread(dsl_names="other"):
                for _ in range(300):
                    x * x
                finished.release()
                never.wait()
        for _ in range(4):
            threading.Thread(target=spin, daemon=True).start()
        for _ in range(200):
            torch.ones(3) * torch.ones(3)
        for _ in range(4):
            finished.acquire()
        print("main done", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "main done" in done.stdout
    assert "native_registry.routing" in done.stderr, "decisions were logged"
