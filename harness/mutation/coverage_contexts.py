"""A pytest plugin for the per-test coverage of a mutant run's pristine
suite (test_coverage.py loads it with -p): each test's lines are recorded
under its node id, in this process (a dynamic context) and in the child
interpreters it starts (their static context, passed through coverage.py's
subprocess support), and each test's time is written to $NR_TEST_DURATIONS.

Imports nothing of the harness: it runs inside the suite's pytest.
"""

from __future__ import annotations

import copy
import json
import os
import time

import pytest

_durations: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import coverage

    cov = coverage.Coverage.current()
    started = os.environ.get("COVERAGE_PROCESS_CONFIG")
    if cov is not None:
        cov.switch_context(item.nodeid)
        if started is not None:
            # A child interpreter starts coverage from this serialized
            # configuration: its static context names the test.
            config = copy.copy(cov.config)
            config.context = item.nodeid
            os.environ["COVERAGE_PROCESS_CONFIG"] = config.serialize()
    began = time.perf_counter()
    try:
        yield
    finally:
        _durations[item.nodeid] = _durations.get(item.nodeid, 0.0) + time.perf_counter() - began
        if cov is not None:
            cov.switch_context("")
            if started is not None:
                os.environ["COVERAGE_PROCESS_CONFIG"] = started


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("NR_TEST_DURATIONS")
    if path:
        with open(path, "w") as f:
            json.dump(_durations, f, indent=0, sort_keys=True)
