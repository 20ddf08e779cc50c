"""The Python conformance suite's machinery.

* ``--impl module:factory`` (or NATIVE_REGISTRY_IMPL) picks the implementation.
* ``@behaviour("id", ...)`` names the catalogue entries a test checks; an
  unknown id is a collection error.
* A behaviour whose ``requires`` names a feature the adapter lacks is
  reported "unsupported" (skipped with that reason), test262-style.
* ``conformance/expectations/<adapter name>.toml`` lists known failures with
  reasons; they run as strict xfails, so an unexpected pass fails the run.
* Platform-profile tests check the host PyTorch and need no adapter.
* Every registry test runs inside the adapter's scope() and must leave the
  dispatch tables of the ops it may touch exactly as they were.
* ``--conformance-report PATH`` writes one JSON record per test (behaviours,
  outcome, source; the failure message or known-failure reason) for the
  harness's matrix.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tomllib

import pytest
import torch

import adapter as adapter_module
import catalogue as catalogue_module

sys.path.insert(0, str(catalogue_module.CONFORMANCE.parent / "fixtures" / "python"))
from torch_fixtures import (  # noqa: E402,F401
    MISSING_NS, NS, NS2, assert_shared_tensors_intact, dispatcher_state, twice_namespaces)

CATALOGUE = catalogue_module.load()
EXPECTATIONS = catalogue_module.CONFORMANCE / "expectations"


def behaviour(*ids: str):
    """Names the catalogue behaviours a test checks."""
    return pytest.mark.behaviour(*ids)


def pytest_addoption(parser):
    parser.addoption("--impl", default=None,
                     help=f"implementation under test, module:factory (env {adapter_module.ENV_VAR}; "
                          f"default {adapter_module.DEFAULT})")
    parser.addoption("--conformance-report", default=None,
                     help="write per-test behaviour results as JSON lines to this file")


def pytest_configure(config):
    config.addinivalue_line("markers", "behaviour(*ids): catalogue behaviours the test checks")
    config._adapter = adapter_module.load(config.getoption("--impl"))
    config._expected = load_expectations(f"{config._adapter.name}.toml")
    config._expected_platform = load_expectations(platform_expectations_name())
    config._report_rows = []


def platform_expectations_name() -> str:
    major, minor = torch.__version__.split(".")[:2]
    return f"platform-torch-{major}.{minor}.toml"


def load_expectations(name: str) -> dict[str, str]:
    """Known failures: test (path-less node id) -> reason."""
    path = EXPECTATIONS / name
    if not path.exists():
        return {}
    with path.open("rb") as f:
        return {e["test"]: e["reason"] for e in tomllib.load(f).get("fail", [])}


def is_platform(ids: list[str]) -> bool:
    return all(CATALOGUE[bid].profile == "platform" for bid in ids)


def pytest_report_header(config):
    a = config._adapter
    return [f"implementation: {a.name} ({a.description})",
            f"features: {', '.join(sorted(a.features)) or 'none'}"]


def behaviours_of(item) -> list[str]:
    return [bid for mark in item.iter_markers("behaviour") for bid in mark.args]


def pytest_collection_modifyitems(config, items):
    adapter = config._adapter
    names = {item.nodeid.split("::", 1)[1] for item in items}
    for expected, file in ((config._expected, f"{adapter.name}.toml"),
                           (config._expected_platform, platform_expectations_name())):
        stale = sorted(set(expected) - names)
        if stale and len(items) > 1:  # a filtered run sees only part of the suite
            raise pytest.UsageError(f"expectations/{file} names unknown tests: {stale}")
    for item in items:
        ids = behaviours_of(item)
        if not ids:
            raise pytest.UsageError(f"{item.nodeid} names no behaviour")
        for bid in ids:
            if bid not in CATALOGUE:
                raise pytest.UsageError(f"{item.nodeid} names unknown behaviour {bid!r}")
        missing = sorted({f for bid in ids for f in CATALOGUE[bid].requires} - adapter.features)
        if missing:
            item.add_marker(pytest.mark.skip(
                reason=f"unsupported: {adapter.name} lacks feature {', '.join(missing)}"))
            continue
        expected = config._expected_platform if is_platform(ids) else config._expected
        reason = expected.get(item.nodeid.split("::", 1)[1])
        if reason:
            item.add_marker(pytest.mark.xfail(reason=f"known failure: {reason}", strict=True))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            result = "xpass" if report.passed else "xfail"
        elif report.skipped:
            result = "unsupported"
        else:
            result = "pass" if report.passed else "fail"
        row = {"test": item.nodeid.split("::", 1)[1], "behaviours": behaviours_of(item),
               "outcome": result, "side": "python", "implementation": item.config._adapter.name,
               "source": f"{item.location[0]}:{item.location[1] + 1}"}
        if hasattr(report, "wasxfail"):
            row["reason"] = report.wasxfail.removeprefix("known failure: ")
        elif report.skipped and isinstance(report.longrepr, tuple):
            row["reason"] = report.longrepr[2].removeprefix("Skipped: ")
        if report.failed:  # the exception and its message, not the whole traceback
            row["message"] = (call.excinfo.exconly() if call.excinfo else report.longreprtext)[:4000]
        item.config._report_rows.append(row)


def pytest_sessionfinish(session):
    path = session.config.getoption("--conformance-report")
    if path:
        with open(path, "w") as f:
            for row in session.config._report_rows:
                f.write(json.dumps(row) + "\n")


# ---- fixtures -----------------------------------------------------------------


@pytest.fixture
def impl(request):
    """The implementation under test, in a scope undone after the test; the
    dispatch tables of the watched ops must come back unchanged."""
    adapter = request.config._adapter
    before = dispatcher_state()
    with adapter.scope():
        yield adapter
    assert dispatcher_state() == before, "teardown left the dispatcher changed"
    assert_shared_tensors_intact()


@pytest.fixture
def namespaces(impl):
    """Two throwaway namespaces defining `twice` (composite only): x*2 in NS and
    x*3 in NS2; both, and a missing one, allowlisted. Yields the two ops."""
    with twice_namespaces() as ops:
        # Routers on these ops must go before the namespaces do: an inner scope.
        with impl.scope():
            for ns in (NS, NS2, MISSING_NS):
                impl.allow_namespace(ns)
            yield ops


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
