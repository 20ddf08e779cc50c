"""pytest plugin for ./harness/run --coverage: each test's lines are recorded
under its own coverage.py dynamic context (the test's node id), so the
report can say which lines each behaviour's tests execute. Loaded with
`-p harness.suite_coverage.coverage_contexts` under `coverage run --context=<suite>:<label>`.

A child interpreter a test starts is measured by coverage.py's subprocess
patch with the configuration file's options only: its context is the
configuration's `context = ${NR_COVERAGE_CHILD_CONTEXT}`, which this plugin
sets to "<suite>:<label>|<test node id>" while the test runs, the same string
the parent records for the test's own lines."""

import os

import coverage
import pytest

CHILD_CONTEXT = "NR_COVERAGE_CHILD_CONTEXT"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cov = coverage.Coverage.current()
    static = os.environ.get(CHILD_CONTEXT, "")
    if cov is not None:
        cov.switch_context(item.nodeid)
        os.environ[CHILD_CONTEXT] = f"{static}|{item.nodeid}"
    yield
    if cov is not None:
        cov.switch_context("")
        os.environ[CHILD_CONTEXT] = static
