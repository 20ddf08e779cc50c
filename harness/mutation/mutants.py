"""The workspaces mutants are applied in (copies of the tree, each with its
incremental build in build-mutants/), their builds, and the suites a mutant
meets there: the C++ conformance suite, the Python conformance suite (a
failure of any level fails), the reference's own tests; every command in a
process group of its own, killed on a timeout or an interrupt.

Used by --mutants (seeded_faults.py), --mutants auto (auto_mutants.py) and
the GPU runner (harness/gpu/mutants-on-device).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET

from .. import staging
from .. import suite_parts
from . import hang_watchdog

from conformance.python import catalogue

from .. import ROOT
# NR_MUTANTS_WORK: another folder for the workspaces, so that two runs (the
# seeded faults of the Python layer beside those that need a build) never
# share a copy of the tree.
WORK = pathlib.Path(os.environ.get("NR_MUTANTS_WORK") or ROOT / "build-mutants")
SRC, BUILD = WORK / "src", WORK / "build"  # the first workspace's (see Workspace)
GTEST = {"conformance": "conformance/cpp/conformance_reference"}
# Only what the conformance suites run: the C++ suite and the extension.
TARGETS = ["conformance/cpp/conformance_reference", "reference/python/_C"]
# And what the reference's own tests need (--own-tests): its GoogleTest
# binaries and the adopter extension test_one_core loads.
OWN_GTESTS = ("reference/tests/reference_tests", "reference/tests/reference_warning_tests")
OWN_FIXTURE = "fixtures/cpp/libnr_cross_extension"
# glibc fills freed memory with this byte, as meson test does: a fault that
# frees what a running call still uses then crashes (killed) instead of
# reading stale but intact memory.
FREED_MEMORY_FILLED = {"MALLOC_PERTURB_": "165"}
TIMEOUT_S = 300
# How a workspace is configured, so that a fault rebuilds little: no
# benchmarks; no debug information, which halves the compile time of the one
# object a fault changes; -Og, which takes 15 to 30 % off it again (a core
# file in 3 to 4.5 s instead of 3.5 to 6.5 s, a binding file in 10 s instead
# of 13.5 s, alone on this machine); the extension file by file with its
# Python headers precompiled (a binding file in 20 s instead of the whole
# unity file in 90 s, on this 2-core machine under load). The baseline runs
# on the same build, so a fault is judged against code compiled as it is.
MESON_OPTIONS = {"benchmarks": "disabled", "debug": "false", "optimization": "g", "binding_unity": "false"}


def tree_files() -> list[str]:
    """The tracked and unignored files of the working tree."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    return [rel for rel in files if rel]


@dataclasses.dataclass(frozen=True)
class Workspace:
    """A copy of the tree (`src`) and its build (`build`) that one mutant at a
    time is applied to. `--jobs N` runs N of them side by side; the first is
    build-mutants itself, the others build-mutants/job-K."""
    root: pathlib.Path = WORK
    # The build whose extension the Python suite imports; None: this
    # workspace's own (a run whose mutants are all Python needs no build).
    extension_from: pathlib.Path | None = None
    # A schemata build (--switch of a C++ layer, schemata_build.py): the
    # folder of the switched copies (-Dmutant_schemata) and the build made
    # from them, in place of build/.
    schemata: pathlib.Path | None = None
    build_dir: pathlib.Path | None = None

    @property
    def src(self) -> pathlib.Path:
        return self.root / "src"

    @property
    def build(self) -> pathlib.Path:
        return self.build_dir or self.root / "build"


FIRST = Workspace()


def workspaces(count: int, extension_from: pathlib.Path | None = None) -> list[Workspace]:
    return [Workspace(WORK / f"job-{k}" if k else WORK, extension_from) for k in range(count)]


def meson_command() -> list[str]:
    """Meson as installed for this interpreter, else the one on PATH."""
    try:
        import mesonbuild  # noqa: F401
        return [sys.executable, "-m", "mesonbuild.mesonmain"]
    except ImportError:
        return ["meson"]


def copy_tree(ws: Workspace = FIRST) -> None:
    """The tracked and unignored files of the working tree, into the workspace's src."""
    for rel in tree_files():
        source, target = ROOT / rel, ws.src / rel
        if not source.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != source.read_bytes():
            shutil.copy2(source, target)


def build(timeout: float | None = None, ws: Workspace = FIRST, jobs: int | None = None,
          targets: list[str] = TARGETS) -> bool:
    """Builds what the conformance suites run, incrementally; False when it
    does not compile (or takes longer than `timeout`). The extension is built
    for this interpreter (the one that runs the suites); NR_MUTANTS_MESON_ARGS
    adds options to the first configure (e.g. -Dwerror=false for another
    compiler)."""
    configure(ws)
    known = subprocess.run(["ninja", "-C", str(ws.build), "-t", "targets", "all"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    wanted = [line.split(":")[0] for line in known
              if any(line.startswith(t) and line.split(":")[0].endswith((".so", t.rsplit("/", 1)[-1]))
                     for t in targets)]
    status, _ = run_killable(["ninja", "-C", str(ws.build), *([f"-j{jobs}"] if jobs else []), *wanted],
                             timeout)
    return status == 0


def options_of(ws: Workspace) -> dict[str, str]:
    """The Meson options of a workspace's build: MESON_OPTIONS, and in a
    schemata build its folder of copies (warnings there are the switches',
    never an error)."""
    if ws.schemata is None:
        return dict(MESON_OPTIONS)
    return {**MESON_OPTIONS, "mutant_schemata": str(ws.schemata.resolve()), "werror": "false"}


def configure(ws: Workspace, again: bool = False) -> None:
    """Sets the workspace's build up (`again`: once more, so that Meson sees
    which schemata copies exist now)."""
    options = options_of(ws)
    if not (ws.build / "build.ninja").exists():
        native = ws.root / "native.ini"
        native.parent.mkdir(parents=True, exist_ok=True)
        native.write_text(f"[binaries]\npython = '{sys.executable}'\n")
        subprocess.run([*meson_command(), "setup", str(ws.build), str(ws.src),
                        *(f"-D{name}={value}" for name, value in options.items()),
                        f"--native-file={native}", *shlex.split(os.environ.get("NR_MUTANTS_MESON_ARGS", ""))],
                       check=True, stdout=subprocess.DEVNULL)
        return
    # A workspace set up before MESON_OPTIONS said what it says now.
    now = configured(ws.build)
    differing = [f"-D{name}={value}" for name, value in options.items()
                 if str(now.get(name, value)).lower() != value.lower()]
    if differing or again:
        subprocess.run([*meson_command(), "setup", "--reconfigure", str(ws.build), str(ws.src), *differing],
                       check=True, stdout=subprocess.DEVNULL)


def configured(build: pathlib.Path) -> dict:
    """The options a Meson build folder is configured with, by name."""
    info = build / "meson-info" / "intro-buildoptions.json"
    return {o["name"]: o["value"] for o in json.loads(info.read_text())} if info.exists() else {}


def run_killable(cmd: list[str], timeout: float | None, **kwargs) -> tuple[int | None, str]:
    """(exit status, output) of cmd; status None when it ran past `timeout`.
    It runs in a process group of its own, and the whole group is killed on a
    timeout or an interrupt, so a hung suite leaves no helper behind."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, **kwargs)
    with _LIVE_LOCK:
        _LIVE.add(proc.pid)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output.decode(errors="replace")
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc.pid)


# The process groups run_killable has running, so that an interrupt seen by
# the main thread can stop the suites other threads are waiting on.
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


def kill_live() -> None:
    with _LIVE_LOCK:
        for pid in _LIVE:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def tests_in(xml: pathlib.Path) -> int:
    """How many tests a JUnit XML report (GoogleTest's or pytest's) holds; 0
    when there is none (a suite that crashed before writing it)."""
    try:
        return sum(1 for _ in ET.parse(xml).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return 0


def test_ids(xml: pathlib.Path) -> list[str]:
    """The tests of a JUnit XML report, named as failing_gtests names them."""
    try:
        return [f"{c.get('classname')}.{c.get('name')}" for c in ET.parse(xml).getroot().iter("testcase")]
    except (OSError, ET.ParseError):
        return []


def failing_gtests(xml: pathlib.Path) -> list[str]:
    if not xml.exists():
        return []
    return [f"{c.get('classname')}.{c.get('name')}" for c in ET.parse(xml).getroot().iter("testcase")
            if c.find("failure") is not None]


def gtest(binary: pathlib.Path, xml: pathlib.Path, timeout: float, fail_fast: bool = False,
          env: dict | None = None, only: list[str] | None = None) -> tuple[list[str], str]:
    """A GoogleTest binary: (failing tests, output); '<crashed: ...>' or
    '<timeout>' when it died. `env`: variables added (NR_MUTANT_ID);
    `only`: these tests (--gtest_filter names), not all."""
    xml.unlink(missing_ok=True)
    status, output = run_killable([str(binary), f"--gtest_output=xml:{xml}",
                                   *(["--gtest_fail_fast"] if fail_fast else []),
                                   *([f"--gtest_filter={':'.join(only)}"] if only else [])],
                                  timeout, env={**os.environ, **FREED_MEMORY_FILLED, **(env or {})})
    if status is None:
        return ["<timeout>"], output
    failed = failing_gtests(xml)
    if status != 0 and not failed:
        failed = [f"<crashed: exit {status}>"]
    return failed, output


def cpp_suite(out: pathlib.Path, timeout: float = TIMEOUT_S, fail_fast: bool = False,
              ws: Workspace = FIRST, env: dict | None = None, only: list[str] | None = None
              ) -> tuple[list[str], str]:
    """The C++ conformance suite of the workspace's build (`only`: these of its tests)."""
    return gtest(ws.build / GTEST["conformance"], out / "conformance.xml", timeout, fail_fast, env, only)


# Set for every suite a mutant run starts: a failure of any level fails
# (conformance/python/conftest.py), so a mutant only a recommended test sees
# is killed, and -x stops at it.
ANY_FAILURE_FAILS = {"NR_CONFORMANCE_ANY_FAILURE_FAILS": "1"}
# What every suite a mutant run starts is given: any failure fails, and a
# test's new Python is forked from one that has imported torch
# (conformance/python/fresh_interpreters.py), a third less of a survivor's
# Python time. The server kills what starting each Python anew kills (the
# seeded faults, run alone: doc/measurements.md, Session 31).
MUTANT_RUN_SUITES = {**ANY_FAILURE_FAILS, "NR_CONFORMANCE_FORK_SERVER": "1"}


def package_env(ws: Workspace, out: pathlib.Path) -> dict:
    """The environment importing the workspace build's package."""
    return staging.environment_for(staging.stage_package(
        ws.extension_from or ws.build, out / "_package",
        sources=ws.src / "reference" / "python" / "native_registry"))


def pytest_run(parts: list[list[str]], out: pathlib.Path, timeout: float, env: dict | None,
               tree: pathlib.Path | None, ws: Workspace, fail_fast: bool = True,
               conformance_report: bool = False, test_limits: dict[str, float] | None = None
               ) -> tuple[list[str], str]:
    """pytest in `tree` (the workspace's copy by default), importing the
    workspace build's package unless `env` is given: (failing tests, output).
    Each of `parts` is one pytest process's arguments; several run side by
    side (suite_parts), their reports joined into out/python.xml (and, with
    `conformance_report`, the conformance report out/python.jsonl). A
    failure of any level fails (ANY_FAILURE_FAILS). `test_limits` (node id
    -> seconds, hang_watchdog.limits_from): a test past its limit ends the
    run at once, a timeout (a test it does not name gets the longest)."""
    tree = ws.src if tree is None else tree
    env = package_env(ws, out) if env is None else env
    files = (out / "python.xml", out / "python.jsonl")
    for f in files:
        f.unlink(missing_ok=True)
    watchdog: list[str] = []
    if test_limits:
        limits = out / "test-limits.json"
        limits.write_text(json.dumps({"limits": test_limits, "default": max(test_limits.values())}))
        env = {**env, hang_watchdog.VARIABLE: str(limits)}
        watchdog = ["-p", "harness.mutation.hang_watchdog"]
    each = suite_parts.part_files(files, len(parts))
    ran: list[tuple[int | None, str]] = [(None, "")] * len(parts)

    def run(i: int) -> None:
        xml, report = each[i]
        cmd = [sys.executable, "-m", "pytest", *parts[i], "-q", *(["-x"] if fail_fast else []),
               "-p", "no:cacheprovider", *watchdog, f"--junitxml={xml}",
               *([f"--conformance-report={report}"] if conformance_report else [])]
        with suite_parts.own_basetemp(len(parts), i) as basetemp:
            ran[i] = run_killable([*cmd, *basetemp], timeout, cwd=tree,
                                  env={**env, **FREED_MEMORY_FILLED, **MUTANT_RUN_SUITES})

    suite_parts.side_by_side(len(parts), run, on_interrupt=kill_live)
    suite_parts.join_parts(each, files)
    status, output = suite_parts.joined_status([s for s, _ in ran]), "\n".join(o for _, o in ran)
    if status is None or (watchdog and status and hang_watchdog.MARK in output):
        return ["<timeout>"], output
    # The conformance report's rows say "fail" for a failure of any level
    # (another implementation's adapter may run its own conftest): both count.
    missed = [r["test"] for r in failing_rows(files[1])]
    failed = (sorted(set(failing_gtests(files[0])) | set(missed))
              or ([f"<exit {status}>"] if status else []))
    return failed, output


def python_suite(out: pathlib.Path, timeout: float = TIMEOUT_S, impl: str = "adapters.reference:make",
                 env: dict | None = None, tree: pathlib.Path | None = None, ws: Workspace = FIRST,
                 deselect: list[str] = (), fail_fast: bool = True, behaviour: str | None = None,
                 test_limits: dict[str, float] | None = None) -> tuple[list[str], str]:
    """The Python conformance suite against `impl` (the reference importing
    the workspace build's package by default), stopping at the first
    failure of any level unless not `fail_fast`. `deselect`: node ids not
    run (the baseline's failures, which would otherwise stop it at once).
    `behaviour`: only the tests naming it, collected from the files that do
    (behaviour_files: there must be one). A whole run that stops at nothing
    (a baseline) runs as the conformance run's parts, side by side."""
    parts = [["conformance/python"]]
    if behaviour is not None:
        parts = [[*(f"conformance/python/{name}" for name in behaviour_files(behaviour)),
                  f"--behaviours={behaviour}"]]
    elif not fail_fast:
        parts = suite_parts.python_shards("cpu")
    options = [f"--impl={impl}", *(f"--deselect={nodeid}" for nodeid in deselect)]
    return pytest_run([[*part, *options] for part in parts], out, timeout, env, tree, ws, fail_fast,
                      conformance_report=True, test_limits=test_limits)


def python_tests(out: pathlib.Path, timeout: float, impl: str, env: dict | None, tree: pathlib.Path | None,
                 ws: Workspace, nodeids: list[str], test_limits: dict[str, float] | None = None
                 ) -> tuple[list[str], str]:
    """These tests of the Python conformance suite (node ids), in this order,
    stopping at the first failure of any level."""
    return pytest_run([[*nodeids, f"--impl={impl}"]], out, timeout, env, tree, ws, fail_fast=True,
                      conformance_report=True, test_limits=test_limits)


@functools.cache
def _python_references() -> dict[str, list[str]]:
    return catalogue.python_references(catalogue.CONFORMANCE / "python")


def behaviour_files(behaviour: str) -> list[str]:
    """The Python conformance test files that name `behaviour` ([] for a
    behaviour the Python side does not express)."""
    return sorted(set(_python_references().get(behaviour, [])))


def behaviour_sides(behaviour: str) -> tuple[str, ...]:
    """Where the catalogue says `behaviour` is expressible: cpp, python."""
    entry = catalogue.load().get(behaviour)
    return entry.sides if entry is not None else ()


def failing_rows(report: pathlib.Path) -> list[dict]:
    """The rows of a --conformance-report whose outcome is fail."""
    if not report.exists():
        return []
    return [r for r in map(json.loads, report.read_text().splitlines()) if r["outcome"] == "fail"]


def behaviour_tests(out: pathlib.Path) -> dict[str, list[tuple[str, float]]]:
    """Per behaviour, the tests naming it in the last python_suite in `out`
    (its report's rows), each with its time (its JUnit time): (node id,
    seconds), cheapest first."""
    xml, report = out / "python.xml", out / "python.jsonl"
    if not xml.exists() or not report.exists():
        return {}
    took = {(c.get("classname", "").rsplit(".", 1)[-1], c.get("name")): float(c.get("time") or 0)
            for c in ET.parse(xml).getroot().iter("testcase")}
    found: dict[str, list[tuple[str, float]]] = {}
    for row in map(json.loads, report.read_text().splitlines()):
        nodeid = row.get("nodeid", "")
        path, _, name = nodeid.partition("::")
        for behaviour in row.get("behaviours", []):
            found.setdefault(behaviour, []).append((nodeid, took.get((pathlib.Path(path).stem, name), 0.0)))
    return {b: sorted(tests, key=lambda t: t[1]) for b, tests in found.items()}


def behaviour_seconds(out: pathlib.Path) -> dict[str, float]:
    """Per behaviour, how long its tests took in the last python_suite in
    `out`: what a run of one behaviour's tests is given (mutant_runner.suites_for)."""
    return {b: sum(seconds for _, seconds in tests) for b, tests in behaviour_tests(out).items()}


def cpp_behaviour_tests(xml: pathlib.Path) -> dict[str, list[str]]:
    """Per behaviour, the C++ conformance tests naming it (their JUnit
    property `behaviour`) in a run's report, named as --gtest_filter takes them."""
    found: dict[str, list[str]] = {}
    if not xml.exists():
        return found
    for case in ET.parse(xml).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "behaviour":
                for behaviour in filter(None, (prop.get("value") or "").split(",")):
                    found.setdefault(behaviour, []).append(f"{case.get('classname')}.{case.get('name')}")
    return found


def serial_seconds(xml: pathlib.Path) -> float:
    """What a JUnit file's test suites took one after the other: a suite run
    as parts side by side took less wall time than a mutant's run of it in
    one process will."""
    if not xml.exists():
        return 0.0
    return sum(float(s.get("time") or 0) for s in ET.parse(xml).getroot().iter("testsuite"))


def baseline_deselect(out: pathlib.Path) -> list[str]:
    """The node ids the last python_suite in `out` saw fail: a baseline's
    failures, deselected from the mutants' runs."""
    return [r["nodeid"] for r in failing_rows(out / "python.jsonl") if "nodeid" in r]
