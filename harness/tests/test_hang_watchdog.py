"""hang_watchdog: a test past its own limit ends the pytest run at once, with
the watchdog's mark in the output, even where it hangs holding the GIL;
tests within their limits run as without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from harness.mutation import hang_watchdog, mutants
from harness.mutation.mutants import ROOT

TESTS = """
import ctypes, time

def test_quick():
    pass

def test_hangs_holding_the_gil():
    # A C call that sleeps without releasing the GIL (PyDLL keeps it): no
    # Python thread could notice the hang; the watchdog's C thread must.
    libc = ctypes.PyDLL(None)
    libc.sleep(60)

def test_after():
    pass
"""


def run_pytest(tmp_path, limits: dict, default=None, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    (tmp_path / "test_hanging.py").write_text(TESTS)
    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"limits": limits, "default": default}))
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "harness.mutation.hang_watchdog", *args, str(tmp_path / "test_hanging.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, hang_watchdog.VARIABLE: str(path),
                               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    return proc, time.monotonic() - began


def test_a_test_past_its_limit_ends_the_run_at_once_even_holding_the_gil(tmp_path):
    proc, took = run_pytest(tmp_path, {"test_hanging.py::test_hangs_holding_the_gil": 2.0}, 30.0)
    assert took < 30, f"the run waited for the hang: {took:.0f} s"
    assert proc.returncode != 0
    assert hang_watchdog.MARK in proc.stderr + proc.stdout
    assert "test_hangs_holding_the_gil" in proc.stderr  # the stack it hung in


def test_tests_within_their_limits_pass_as_without_it(tmp_path):
    proc, _ = run_pytest(tmp_path, {"test_hanging.py::test_quick": 5.0, "test_hanging.py::test_after": 5.0},
                         None, "-k", "not hangs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout and hang_watchdog.MARK not in proc.stderr


def test_the_limits_are_three_times_the_pristine_time_and_ten_seconds():
    assert hang_watchdog.limits_from({"a": 0.0, "b": 30.0}) == {"a": 30.0, "b": 120.0}


def test_a_mutant_s_pytest_reports_a_test_past_its_limit_as_a_timeout(tmp_path):
    (tmp_path / "test_hanging.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    began = time.monotonic()
    failed, output = mutants.pytest_run([["test_hanging.py"]], tmp_path, 120.0, env, tmp_path, mutants.FIRST,
                                        test_limits={"test_hanging.py::test_hangs_holding_the_gil": 2.0,
                                                     "test_hanging.py::test_quick": 30.0})
    assert failed == ["<timeout>"], output
    assert time.monotonic() - began < 60
