"""A pytest plugin for mutant runs: each test gets a time limit derived from
its pristine time, and a test that passes it ends the whole pytest at once
(faulthandler's watchdog thread dumps every thread's stack and exits), so a
mutant that hangs one test is killed in seconds rather than after the whole
run's limit. The watchdog is a C thread: it fires even where the hang holds
the GIL (a deadlock in the extension).

$NR_TEST_LIMITS names a JSON file {"limits": {node id: seconds}, "default":
seconds or null}; a test it does not name gets the default (null: no limit
of its own). Unset, the plugin does nothing. mutants.pytest_run loads it and
writes the file from a coverage map's durations (limits_from)."""

from __future__ import annotations

import faulthandler
import json
import os
import sys

import pytest

VARIABLE = "NR_TEST_LIMITS"
# What the watchdog writes first: mutants.pytest_run reads a run that ends so
# as a timeout.
MARK = "Timeout ("


def limits_from(durations: dict[str, float]) -> dict[str, float]:
    """Each test's limit: three times its pristine time and ten seconds
    (so at least 30 s: a machine under load, a slow first import)."""
    return {test: 3 * (seconds + 10) for test, seconds in durations.items()}


_limits: dict[str, float] = {}
_default: float | None = None
# The process's own stderr, taken when `-p` imports this plugin, before
# pytest captures file descriptor 2: the dump must reach the run's output.
_stderr = os.fdopen(os.dup(2), "w") if os.environ.get(VARIABLE) else sys.stderr


def pytest_configure(config) -> None:
    global _limits, _default
    path = os.environ.get(VARIABLE)
    if not path:
        return
    found = json.loads(open(path).read())
    _limits, _default = found["limits"], found.get("default")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    limit = _limits.get(item.nodeid, _default)
    if limit is None:
        yield
        return
    faulthandler.dump_traceback_later(limit, exit=True, file=_stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
