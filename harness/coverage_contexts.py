"""pytest plugin for ./harness/run --coverage: each test's lines are recorded
under its own coverage.py dynamic context (the test's node id), so the
report can say which lines each behaviour's tests execute. Loaded with
`-p coverage_contexts` under `coverage run --context=<suite>:<label>`."""

import coverage
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(item.nodeid)
    yield
    if cov is not None:
        cov.switch_context("")
