"""./harness/run --mutants: the suite's power against seeded faults.

Each fault of fixtures/faults/faults.toml is applied to a copy of the tree
(build-mutants/src), built incrementally in build-mutants/build, and run
against the C++ conformance suite and the Python conformance suite (importing that build's extension). A fault is
killed when any test fails, or a suite crashes or hangs. Every fault must be
killed; a fault whose `find` text is gone from the source is an error too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
import xml.etree.ElementTree as ET

import staging
from progress import duration, remaining

ROOT = pathlib.Path(__file__).resolve().parents[1]
FAULTS = ROOT / "fixtures" / "faults" / "faults.toml"
WORK = ROOT / "build-mutants"
SRC, BUILD = WORK / "src", WORK / "build"  # the first workspace's (see Workspace)
GTEST = {"conformance": "conformance/cpp/conformance_reference"}
# Only what the conformance suites run: the C++ suite and the extension.
TARGETS = ["conformance/cpp/conformance_reference", "reference/python/_C"]
# glibc fills freed memory with this byte, as meson test does: a fault that
# frees what a running call still uses then crashes (killed) instead of
# reading stale but intact memory.
FREED_MEMORY_FILLED = {"MALLOC_PERTURB_": "165"}
TIMEOUT_S = 300


def load_faults() -> list[dict]:
    with FAULTS.open("rb") as f:
        return tomllib.load(f)["fault"]


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

    @property
    def src(self) -> pathlib.Path:
        return self.root / "src"

    @property
    def build(self) -> pathlib.Path:
        return self.root / "build"


FIRST = Workspace()


def workspaces(count: int) -> list[Workspace]:
    return [FIRST] + [Workspace(WORK / f"job-{k}") for k in range(1, count)]


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


def build(timeout: float | None = None, ws: Workspace = FIRST, jobs: int | None = None) -> bool:
    """Builds what the conformance suites run, incrementally; False when it
    does not compile (or takes longer than `timeout`). The extension is built
    for this interpreter (the one that runs the suites); NR_MUTANTS_MESON_ARGS
    adds options to the first configure (e.g. -Dwerror=false for another
    compiler)."""
    if not (ws.build / "build.ninja").exists():
        native = ws.root / "native.ini"
        native.parent.mkdir(parents=True, exist_ok=True)
        native.write_text(f"[binaries]\npython = '{sys.executable}'\n")
        subprocess.run([*meson_command(), "setup", str(ws.build), str(ws.src), "-Dbenchmarks=disabled",
                        f"--native-file={native}", *shlex.split(os.environ.get("NR_MUTANTS_MESON_ARGS", ""))],
                       check=True, stdout=subprocess.DEVNULL)
    targets = subprocess.run(["ninja", "-C", str(ws.build), "-t", "targets", "all"], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    wanted = [line.split(":")[0] for line in targets
              if any(line.startswith(t) and line.split(":")[0].endswith((".so", t.rsplit("/", 1)[-1]))
                     for t in TARGETS)]
    status, _ = run_killable(["ninja", "-C", str(ws.build), *([f"-j{jobs}"] if jobs else []), *wanted],
                             timeout)
    return status == 0


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


def failing_gtests(xml: pathlib.Path) -> list[str]:
    if not xml.exists():
        return []
    return [f"{c.get('classname')}.{c.get('name')}" for c in ET.parse(xml).getroot().iter("testcase")
            if c.find("failure") is not None]


def cpp_suite(out: pathlib.Path, timeout: float = TIMEOUT_S, fail_fast: bool = False,
              ws: Workspace = FIRST) -> tuple[list[str], str]:
    """The C++ conformance suite of the build: (failing tests, output);
    '<crashed: ...>' or '<timeout>' when it died."""
    xml = out / "conformance.xml"
    xml.unlink(missing_ok=True)
    status, output = run_killable([str(ws.build / GTEST["conformance"]), f"--gtest_output=xml:{xml}",
                                   *(["--gtest_fail_fast"] if fail_fast else [])],
                                  timeout, env={**os.environ, **FREED_MEMORY_FILLED})
    if status is None:
        return ["<timeout>"], output
    failed = failing_gtests(xml)
    if status != 0 and not failed:
        failed = [f"<crashed: exit {status}>"]
    return failed, output


# Set for every suite a mutant run starts: a failure of any level fails
# (conformance/python/conftest.py), so a mutant only a recommended test sees
# is killed, and -x stops at it.
ANY_FAILURE_FAILS = {"NR_CONFORMANCE_ANY_FAILURE_FAILS": "1"}


def python_suite(out: pathlib.Path, timeout: float = TIMEOUT_S, impl: str = "adapters.reference:make",
                 env: dict | None = None, tree: pathlib.Path | None = None, ws: Workspace = FIRST,
                 deselect: list[str] = (), fail_fast: bool = True) -> tuple[list[str], str]:
    """The Python conformance suite of `tree` (the workspace's copy by
    default), stopping at the first failure of any level, against `impl`,
    the reference importing the workspace build's package by default:
    (failing tests, output). `deselect`: node ids not run (the baseline's
    failures, which would otherwise stop the suite at once)."""
    tree = ws.src if tree is None else tree
    if env is None:
        env = staging.environment_for(staging.stage_package(
            ws.build, out / "_package", sources=ws.src / "reference" / "python" / "native_registry"))
    xml, report = out / "python.xml", out / "python.jsonl"
    xml.unlink(missing_ok=True)
    report.unlink(missing_ok=True)
    status, output = run_killable(
        [sys.executable, "-m", "pytest", "conformance/python", "-q", *(["-x"] if fail_fast else []),
         "-p", "no:cacheprovider", f"--impl={impl}", f"--junitxml={xml}", f"--conformance-report={report}",
         *(f"--deselect={nodeid}" for nodeid in deselect)],
        timeout, cwd=tree, env={**env, **FREED_MEMORY_FILLED, **ANY_FAILURE_FAILS})
    if status is None:
        return ["<timeout>"], output
    # The report's rows say "fail" for a failure of any level (another
    # implementation's adapter may run its own conftest): both count.
    missed = [r["test"] for r in failing_rows(report)]
    failed = (sorted(set(failing_gtests(xml)) | set(missed))
              or ([f"<exit {status}>"] if status else []))
    return failed, output


def failing_rows(report: pathlib.Path) -> list[dict]:
    """The rows of a --conformance-report whose outcome is fail."""
    if not report.exists():
        return []
    return [r for r in map(json.loads, report.read_text().splitlines()) if r["outcome"] == "fail"]


def baseline_deselect(out: pathlib.Path) -> list[str]:
    """The node ids the last python_suite in `out` saw fail: a baseline's
    failures, deselected from the mutants' runs."""
    return [r["nodeid"] for r in failing_rows(out / "python.jsonl") if "nodeid" in r]


def run_suites(out: pathlib.Path, deselect: list[str] | None = None) -> dict[str, list[str]]:
    """Suite -> failing tests ('<crashed>'/'<timeout>' when a suite died).
    deselect None: the baseline (the whole Python suite, not stopping at a
    failure); else the baseline's Python failures, not run."""
    killed: dict[str, list[str]] = {}
    failed, _ = cpp_suite(out)
    if failed:
        killed["c++ conformance"] = failed
    failed, _ = python_suite(out, deselect=deselect or (), fail_fast=deselect is not None)
    if failed:
        killed["python conformance"] = failed
    return killed


def run(args) -> int:
    out = args.results / "mutants"
    out.mkdir(parents=True, exist_ok=True)
    faults = load_faults()
    only = {n for n in args.only.split(",") if n}
    if only:
        faults = [f for f in faults if f["name"] in only]
    print(f"== {len(faults)} seeded faults; baseline build in {BUILD} (the first one takes minutes)",
          flush=True)
    begin = time.monotonic()
    copy_tree()  # once: the faults apply to this snapshot of the tree
    if not build():
        print("baseline build failed")
        return 1
    print(f"  baseline built in {duration(time.monotonic() - begin)}; running the suites on it", flush=True)
    baseline = run_suites(out)
    deselect = baseline_deselect(out)
    if any(t.startswith("<") for tests in baseline.values() for t in tests):
        print(f"baseline crashed: {baseline}")
        return 1
    if baseline:  # e.g. a recommended behaviour the reference misses: such tests kill nothing
        print(f"  note: failing before any fault, so not counted as kills: {baseline}")
    print(f"  baseline green after {duration(time.monotonic() - begin)}; now each fault: "
          f"rebuild, then the C++ and Python conformance suites", flush=True)
    faults_start = time.monotonic()

    rows, errors = [], 0
    for index, fault in enumerate(faults, 1):
        start = time.monotonic()
        path = SRC / fault["file"]
        pristine = path.read_text()  # the copy, which the working tree's edits do not reach
        if pristine.count(fault["find"]) != 1:
            rows.append((fault, "STALE", f"`find` occurs {pristine.count(fault['find'])} times in {fault['file']}"))
            errors += 1
            print(f"  {fault['name']:40s} STALE", flush=True)
            continue
        path.write_text(pristine.replace(fault["find"], fault["replace"]))
        try:
            if not build():
                verdict, detail = "BROKEN", "the faulty variant does not compile"
            else:
                killed = {suite: [t for t in tests if t not in baseline.get(suite, [])]
                          for suite, tests in run_suites(out, deselect).items()}
                killed = {suite: tests for suite, tests in killed.items() if tests}
                verdict = "killed" if killed else "SURVIVED"
                detail = "; ".join(f"{suite}: {len(tests)} ({', '.join(tests[:3])}{', ...' if len(tests) > 3 else ''})"
                                   for suite, tests in killed.items()) or "no test failed"
        finally:
            path.write_text(pristine)
        errors += verdict != "killed"
        rows.append((fault, verdict, detail))
        elapsed = time.monotonic() - faults_start
        print(f"  [{index}/{len(faults)}] {fault['name']:36s} {verdict:8s} {time.monotonic() - start:4.0f} s "
              f"(elapsed {duration(elapsed)}, {remaining(index, len(faults), elapsed)})  {detail[:90]}",
              flush=True)
    build()  # leave the copy pristine

    lines = ["# Seeded faults", "", f"{sum(r[1] == 'killed' for r in rows)} of {len(rows)} killed.", "",
             "| fault | breaks | verdict | failing tests |", "|---|---|---|---|"]
    lines += [f"| {f['name']} | {f['breaks']} | {v} | {d} |" for f, v, d in rows]
    (out / "mutants.md").write_text("\n".join(lines) + "\n")
    print(f"\n{sum(r[1] == 'killed' for r in rows)} of {len(rows)} faults killed; table: {out / 'mutants.md'}")
    return 1 if errors else 0
