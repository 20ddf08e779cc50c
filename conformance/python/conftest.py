"""The Python conformance suite's machinery.

* ``--impl module:factory`` (or NATIVE_REGISTRY_IMPL) picks the implementation.
* ``@behaviour("id", ...)`` names the catalogue entries a test checks; an
  unknown id is a collection error.
* A behaviour whose ``requires`` names a feature the adapter lacks is
  reported "unsupported" (skipped with that reason), test262-style.
* Known failures are data: ``conformance/expectations/<adapter>.toml`` (or the
  files given with ``--expectations PATH``, array-api-tests' --xfails-file),
  each entry a test, a reason and optionally the adapter ``revision`` it
  describes; entries for another revision do not apply. A known failure runs
  as a non-strict xfail: when it passes it is reported "fixed: expectation
  stale", which is visible and not fatal.
* A test whose behaviours are all ``recommended`` and that fails is reported
  "MISS (recommended)" and does not fail the run, except in a mutant run
  (NR_CONFORMANCE_ANY_FAILURE_FAILS=1, set by the harness's mutant runners):
  there any failure is one, whatever its level, so a mutant that a
  recommended test sees is killed (the level scores implementations, not
  mutants).
* Platform-profile tests check the host PyTorch and need no adapter.
* Every registry test runs inside the adapter's scope() and must leave the
  dispatch tables of the ops it may touch exactly as they were.
* ``--device NAME`` (conformance/devices.toml; default cpu) is the device the
  tests taking the ``device`` fixture run at: its tensors, its dispatch keys.
  Those tests carry the marker ``device`` (the harness runs ``-m device`` at a
  device other than cpu). Where the device is absent they are reported
  "unsupported: no CUDA device" (never passed).
* A test that needs a new Python (run_in_fresh_interpreter) starts one,
  unless NR_CONFORMANCE_FORK_SERVER=1: then it is forked from a Python that
  has imported torch (fresh_interpreters.py), which saves each one Python's
  start and torch's import.
* ``--conformance-report PATH`` writes one JSON record per test for the
  harness's matrix: test, behaviours, outcome (pass, fail, xfail, stale,
  unsupported), side, implementation, source (path:line), and reason / message
  where there is one.
"""

from __future__ import annotations

import json
import os
import pathlib
import textwrap
import tomllib
import warnings

import pytest
import torch

import adapter as adapter_module
import catalogue as catalogue_module
import fresh_interpreters

from fixtures.python.torch_fixtures import (  # noqa: F401
    MISSING_NS, NS, NS2, assert_shared_tensors_intact, dispatcher_state, twice_namespaces)

CATALOGUE = catalogue_module.load()
DEVICES = catalogue_module.load_devices()
EXPECTATIONS = catalogue_module.CONFORMANCE / "expectations"


def run_in_fresh_interpreter(impl, body: str, timeout: float = 300, stderr: list | None = None,
                             prelude: str = "", env: dict | None = None,
                             extra_path: tuple[pathlib.Path, ...] = ()) -> list[str]:
    """Runs `body` in a new Python that loads the implementation under test
    again (as `impl`, after `import torch, adapter`) and returns what it
    printed, line by line (and appends what it wrote to stderr, where
    LibTorch's own warnings go, to `stderr` when given). Skips the test as
    unsupported when that cannot be the same implementation (not loaded by
    spec, or the child loads another: one a pytest plugin swapped in, say); a
    failing child fails the test."""
    child_env = adapter_module.subprocess_environment(impl)
    if child_env is None:
        pytest.skip(f"unsupported: {impl.name} was not loaded by a module:factory spec, "
                    "so a subprocess cannot load it again")
    # `prelude` runs before `import torch` (import hooks a test needs in place
    # while torch imports); `env`, if given, adds to the child's environment;
    # `extra_path` goes first on the child's PYTHONPATH (which is this
    # process's sys.path: this folder, the root's packages).
    script = ("import torch, adapter\nimpl = adapter.load()\nprint(adapter.identity(impl))\n"
              + textwrap.dedent(body))
    child_env.update(env or {})
    child_env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), child_env["PYTHONPATH"]])
    # A new `python -c`, or its fork server's child (fresh_interpreters.py).
    out = fresh_interpreters.run(script, child_env, timeout, prelude=textwrap.dedent(prelude) + "\n")
    assert out.returncode == 0, out.stderr
    if stderr is not None:
        stderr.append(out.stderr)
    lines = out.stdout.strip().splitlines()
    if not lines or lines[0] != adapter_module.identity(impl):
        pytest.skip(f"unsupported: a subprocess loads {lines[0] if lines else None!r}, not the "
                    f"implementation under test ({adapter_module.identity(impl)!r}), e.g. one a "
                    "pytest plugin swapped in")
    return lines[1:]


class _Recorded(Exception):
    """Ends a call once the oracle's kernel has recorded what it was given."""


def kernel_receives(op_symbol: str, call, record) -> None:
    """Runs `call` with a torch.library Python kernel at CPU for aten's
    `op_symbol` that hands what it receives to `record(*args, **kwargs)`, then
    ends the call: what a Python kernel is given, asked of torch itself."""
    def kernel(*args, **kwargs):
        record(*args, **kwargs)
        raise _Recorded

    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the kernel-override notice
            lib.impl(op_symbol, kernel, "CPU")
        with pytest.raises(_Recorded):
            call()
    finally:
        lib._destroy()


def behaviour(*ids: str):
    """Names the catalogue behaviours a test checks."""
    return pytest.mark.behaviour(*ids)


def pytest_addoption(parser):
    parser.addoption("--impl", default=None,
                     help=f"implementation under test, module:factory (env {adapter_module.ENV_VAR}; "
                          f"default {adapter_module.DEFAULT})")
    parser.addoption("--conformance-report", default=None,
                     help="write per-test behaviour results as JSON lines to this file")
    parser.addoption("--device", default="cpu", choices=sorted(DEVICES),
                     help="the device the device tests run at (conformance/devices.toml)")
    parser.addoption("--behaviours", default="", metavar="IDS",
                     help="run only the tests naming one of these comma-separated behaviours (the "
                          "seeded-fault runner runs a fault's own behaviour first)")
    parser.addoption("--expectations", action="append", default=None, metavar="PATH",
                     help="known failures of the implementation under test (TOML, [[fail]] test/reason/"
                          "revision); replaces expectations/<adapter>.toml; may be repeated")


def pytest_configure(config):
    config.addinivalue_line("markers", "behaviour(*ids): catalogue behaviours the test checks")
    config.addinivalue_line("markers", "device: the test takes the device fixture (runs at --device)")
    config._adapter = adapter_module.load(config.getoption("--impl"))
    revision = adapter_module.revision_of(config._adapter)
    given = config.getoption("--expectations")
    files = ([pathlib.Path(p) for p in given] if given
             else [EXPECTATIONS / f"{adapter_module.expectations_name(config._adapter)}.toml"])
    config._expected = {}
    config._expected_files = []
    for path in files:
        if given and not path.exists():
            raise pytest.UsageError(f"--expectations {path}: no such file")
        config._expected.update(load_expectations(path, revision))
        config._expected_files.append(path)
    platform_file = EXPECTATIONS / platform_expectations_name()
    config._expected_platform = load_expectations(platform_file, None)
    config._report_rows = []


def platform_expectations_name() -> str:
    major, minor = torch.__version__.split(".")[:2]
    return f"platform-torch-{major}.{minor}.toml"


def load_expectations(path: pathlib.Path, revision: str | None) -> dict[str, str]:
    """Known failures that apply to `revision`: test (path-less node id) ->
    reason. An entry without `revision` applies to every revision; one with
    a `revision` (a string or a list) only to those."""
    if not path.exists():
        return {}
    with path.open("rb") as f:
        entries = tomllib.load(f).get("fail", [])
    known = {}
    for e in entries:
        if "test" not in e or not e.get("reason"):
            raise pytest.UsageError(f"{path}: every [[fail]] entry needs a test and a reason: {e}")
        wanted = e.get("revision")
        wanted = [wanted] if isinstance(wanted, str) else wanted
        if wanted is None or revision in wanted:
            known[e["test"]] = e["reason"]
    return known


def is_platform(ids: list[str]) -> bool:
    return all(CATALOGUE[bid].profile == "platform" for bid in ids)


def pytest_report_header(config):
    a = config._adapter
    return [f"implementation: {a.name} ({a.description})",
            f"revision: {adapter_module.revision_of(a) or 'not reported'}",
            f"features: {', '.join(sorted(a.features)) or 'none'}",
            f"device: {config.getoption('--device')}",
            "expectations: " + (", ".join(str(p) for p in config._expected_files) or "none")]


def is_recommended(ids: list[str]) -> bool:
    """A test whose behaviours are all recommended cannot fail the run."""
    return all(CATALOGUE[bid].level == "recommended" for bid in ids)


# Set by the mutant runners (harness/mutation/mutants.py): every failure fails.
ANY_FAILURE_FAILS = os.environ.get("NR_CONFORMANCE_ANY_FAILURE_FAILS") == "1"


def whole_suite_collected(items) -> bool:
    """Whether every test file of the suite was collected (a -k or -m
    selection is applied after this point, so it does not count)."""
    files = {item.path.name for item in items}
    here = pathlib.Path(__file__).parent
    return files >= {p.name for p in here.glob("test_*.py")}


def behaviours_of(item) -> list[str]:
    return [bid for mark in item.iter_markers("behaviour") for bid in mark.args]


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect: sees every collected test
def pytest_collection_modifyitems(config, items):
    adapter = config._adapter
    names = {item.nodeid.split("::", 1)[1] for item in items}
    # A typo in an expectation file is an error, but only a run of the whole
    # suite can tell: a run of one file does not collect the others' tests.
    if whole_suite_collected(items):
        for expected, file in ((config._expected, ", ".join(map(str, config._expected_files))),
                               (config._expected_platform, platform_expectations_name())):
            unknown = sorted(set(expected) - names)
            if unknown:
                raise pytest.UsageError(f"expectations {file} name unknown tests: {unknown}")
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)
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
            # Not strict: a known failure that passes is "stale", reported, not fatal.
            item.add_marker(pytest.mark.xfail(reason=f"known failure: {reason}", strict=False))
    wanted = {bid for bid in config.getoption("--behaviours").split(",") if bid}
    if wanted:
        unknown = sorted(wanted - set(CATALOGUE))
        if unknown:
            raise pytest.UsageError(f"--behaviours names unknown behaviours: {unknown}")
        deselected = [item for item in items if not wanted & set(behaviours_of(item))]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if wanted & set(behaviours_of(item))]
    # Set by ci_mutants (harness/mutation/ci_mutants.py), one node id a line:
    # these run first, in this order, the rest as collected, so that a run
    # stopping at its first failure meets the tests a record says killed its
    # mutants early.
    first = [nodeid for nodeid in os.environ.get("NR_CONFORMANCE_RUN_FIRST", "").splitlines() if nodeid]
    if first:
        rank = {nodeid: i for i, nodeid in enumerate(first)}
        items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))  # stable: the rest keep their order


def failure_message(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else str(report.longrepr)[-2000:]


def skip_reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()  # the xfail plugin has already marked it
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    ids = behaviours_of(item)
    row = {"test": item.nodeid.split("::", 1)[1], "nodeid": item.nodeid, "behaviours": ids, "side": "python",
           "implementation": item.config._adapter.name, "device": item.config.getoption("--device"),
           "source": f"{item.location[0]}:{item.location[1] + 1}"}
    if hasattr(report, "wasxfail"):
        reason = report.wasxfail.removeprefix("known failure: ")
        row.update(outcome="stale" if report.passed else "xfail", reason=reason)
        report.conformance = "stale" if report.passed else "xfail"
    elif report.skipped:
        row.update(outcome="unsupported", reason=skip_reason(report).removeprefix("Skipped: "))
    elif report.passed:
        row.update(outcome="pass")
    else:
        row.update(outcome="fail", message=failure_message(report))
        if ids and is_recommended(ids) and not is_platform(ids) and not ANY_FAILURE_FAILS:
            # Reported as a miss and counted like an xfail (also in JUnit XML),
            # so the run's exit status ignores it.
            report.outcome, report.wasxfail = "skipped", "recommended behaviour missed"
            report.conformance = "miss"
    item.config._report_rows.append(row)


def pytest_report_teststatus(report, config):
    kind = getattr(report, "conformance", None)
    if kind == "stale":
        return "stale", "S", "STALE (fixed: expectation stale)"
    if kind == "miss":
        return "recommended miss", "m", "MISS (recommended)"
    return None


def pytest_terminal_summary(terminalreporter, config):
    rows = config._report_rows
    stale = [r for r in rows if r["outcome"] == "stale"]
    misses = [r for r in rows if r["outcome"] == "fail"
              and r["behaviours"] and is_recommended(r["behaviours"])]
    if stale:
        terminalreporter.section("fixed: expectation stale")
        for r in stale:
            terminalreporter.line(f"{r['test']}: passes; its expectation entry ({r['reason']}) can go")
    if misses:
        terminalreporter.section("recommended behaviours missed (not fatal)")
        for r in misses:
            terminalreporter.line(f"{r['test']} [{', '.join(r['behaviours'])}]: "
                                  f"{r['message'].splitlines()[0] if r['message'] else ''}")


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
        # The implementation's own invariants (if it checks any) must hold
        # after whatever the test did, and again once the scope undid it.
        adapter_module.self_check(adapter)
    adapter_module.self_check(adapter)
    assert dispatcher_state() == before, "teardown left the dispatcher changed"
    assert_shared_tensors_intact()


class Device:
    """The device of this run (--device) as a test sees it: its dispatch
    keys, and tensors made on it."""

    def __init__(self, spec: catalogue_module.Device):
        self.name = spec.name
        self.key, self.autograd_key, self.autocast_key = (
            spec.backend_key, spec.autograd_key, spec.autocast_key)

    def tensor(self, values, **kwargs) -> torch.Tensor:
        return torch.tensor(values, device=self.name, **kwargs)

    def __repr__(self) -> str:
        return f"Device({self.name})"


def device_missing(name: str) -> str | None:
    """Why the run's device cannot be used here, or None."""
    if name == "cpu":
        return None
    module = getattr(torch, name, None)
    if module is None or not module.is_available():
        return f"no {name.upper()} device"
    return None


@pytest.fixture
def device(request):
    """The device of this run; every device test is unsupported without it.
    Request it before `impl`, so that nothing is set up for a skipped test."""
    name = request.config.getoption("--device")
    missing = device_missing(name)
    if missing:
        pytest.skip(f"unsupported: {missing}")
    return Device(DEVICES[name])


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
