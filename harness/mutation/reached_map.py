"""Tests chosen by coverage for the C++ layers' mutants (--tests-by-coverage
with --switch of cpp or binding): the schemata build marks, in a trace file
named by $NR_MUTANT_TRACE, each mutant whose switch a run evaluates, that is
each mutant that could change what the run does (cpp_schemata.HEADER). One
pristine run of both suites, each test's reach kept apart, gives the tests
that can kill each switched mutant: each GoogleTest test alone in a process
of its own (several side by side), the Python suite's files in as many
parts as there are cores, each with the reached_contexts plugin, child processes included (they mark the same
file). A mutant then meets only those tests, cheapest first within each
suite, stopping at the first failure; one no test reaches is "no coverage",
not run. A mutant reached outside any Python test (at import, collection,
or the interpreter's exit) meets the whole suites, as does one that is not
switched (rebuilt instead: no trace names it).

The run stands for the baseline (it ran every test, pristine): its failures
kill nothing, its times give the timeouts. It is kept
(reached-<layer>.json beside the run's records) with the tree's digest and
the mutants' ids, and measured again when either changes.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import pathlib
import re
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from . import mutants, mutation_report
from .mutants import ROOT, Workspace

PLUGIN = "harness.mutation.reached_contexts"
GTEST_PREFIX = "gtest:"  # a C++ conformance test, as the map names it
GTEST_LIMIT_S = 300.0   # one C++ test alone, pristine (the slowest takes seconds)


@dataclass
class ReachedMap:
    reached: dict[str, list[int]]     # test -> the ids it reaches (the smaller way round to keep)
    outside: list[int]                # ids reached outside any Python test: the whole suites
    durations: dict[str, float]       # test -> seconds in the pristine run
    ids: dict[str, int]               # mutant key -> the id the map was measured with
    failing: list[str] = field(default_factory=list)        # tests failing pristine: they kill nothing
    failing_names: dict[str, list[str]] = field(default_factory=dict)  # suite -> the same, as a run names them
    source: str = ""
    seconds: float = 0.0              # what measuring it took
    suite_seconds: dict[str, float] = field(default_factory=dict)  # suite -> its wall time pristine

    def save(self, path: pathlib.Path) -> None:
        path.write_text(json.dumps(asdict(self), sort_keys=True))

    @classmethod
    def load(cls, path: pathlib.Path) -> ReachedMap:
        return cls(**json.loads(path.read_text()))

    @functools.cached_property
    def tests(self) -> dict[int, list[str]]:
        """Mutant id -> the tests reaching it."""
        by_id: dict[int, list[str]] = {}
        for test, ids in sorted(self.reached.items()):
            for i in ids:
                by_id.setdefault(i, []).append(test)
        return by_id

    def covering(self, mutant, text: str) -> list[str] | None:
        """The tests that reach `mutant`, cheapest first (GoogleTest's named
        GTEST_PREFIX + Suite.Name); None where the whole suites must run
        (not switched, or reached outside any test); [] where none does."""
        mutant_id = self.ids.get(mutant.key)
        if mutant_id is None or mutant_id in self.outside:
            return None
        found = [t for t in self.tests.get(mutant_id, []) if t not in self.failing]
        return sorted(found, key=lambda t: (self.durations.get(t, 0.0), t))

    def observers(self, mutant, texts: dict[str, str]) -> list[str] | None:
        """A switch reached outside any test (at load or exit) is observed by
        whatever runs after it: the whole suites (None), unlike a Python
        line's (coverage_map.CoverageMap.observers)."""
        return None

    def seconds_of(self, tests: list[str]) -> float:
        return sum(self.durations.get(t, 0.0) for t in tests)


def split(tests: list[str]) -> tuple[list[str], list[str]]:
    """(GoogleTest names for --gtest_filter, pytest node ids), order kept."""
    return ([t[len(GTEST_PREFIX):] for t in tests if t.startswith(GTEST_PREFIX)],
            [t for t in tests if not t.startswith(GTEST_PREFIX)])


# What a test's verdict depends on: its own definition, what its file holds
# besides the file's tests (helpers, fixtures, constants), and the suite's
# machinery (every file of the suite's folder not named test_*: conftest,
# adapters, suite.h and suite.cpp, the build file) and the fixtures it uses.
# The other tests of its file are not: each test runs on its own (a scope
# per test, restored after it). The catalogue and the expectations are left
# out too: in a mutant run any failure kills, whatever a behaviour's level,
# and the reference has no known failures, so neither changes a verdict.
SUITE_FOLDERS = {"python": ("conformance/python/", "fixtures/python/"),
                 "cpp": ("conformance/cpp/", "fixtures/cpp/")}
# Loaded by no run of the reference: other implementations' adapters, the
# catalogue's checker.
NOT_MACHINERY = ("conformance/python/check.py", "conformance/python/adapters/upstream",
                 "fixtures/cpp/minimal_registry/")
_GTEST_DEFINITION = re.compile(r"^TEST(?:_P|_F)?\(\s*\w+\s*,\s*(\w+)\s*\)", re.M)


def _read(rel: str) -> str:
    """A file of the tree ("" where there is none)."""
    return (ROOT / rel).read_text() if (ROOT / rel).is_file() else ""


def _suite_files(side: str, read=_read) -> tuple[list[str], dict[str, str]]:
    """A suite's machinery (its files not named test_*), and its test files
    by name: a pytest file by its path, a GoogleTest test by its name."""
    machinery, tests = [], {}
    for rel in mutants.tree_files():
        if not rel.startswith(SUITE_FOLDERS[side]) or rel.startswith(NOT_MACHINERY):
            continue
        name = rel.rsplit("/", 1)[-1]
        if not (rel.startswith("conformance/") and name.startswith("test_")):
            machinery.append(rel)
        elif side == "cpp" and name.endswith(".cpp"):
            for test in _GTEST_DEFINITION.findall(read(rel)):
                tests[test] = rel
    return machinery, tests


def gtest_file(name: str, defined: dict[str, str]) -> str | None:
    """The file that defines a GoogleTest test (as --gtest_filter names it:
    Instance/Fixture.Test/param), None when no file does."""
    return defined.get(gtest_test(name))


def gtest_test(name: str) -> str:
    """Instance/Fixture.Test/param -> Test."""
    return name.split(".", 1)[-1].split("/", 1)[0]


def _closing_brace(text: str, at: int) -> int:
    """The index of the brace closing the one at `at`, past string and
    character literals (raw ones included) and comments; len(text) if none."""
    depth, i = 0, at
    while i < len(text):
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
        elif text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = len(text) if i < 0 else i + 1
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delimiter = text[i + 2:text.find("(", i)]
            i = text.find(")" + delimiter + '"', i)
            i = len(text) if i < 0 else i + len(delimiter) + 1
        elif c in "\"'":
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


@functools.lru_cache(maxsize=256)  # a run digests thousands of mutants' tests over the same files
def split_tests(rel: str, text: str) -> tuple[str, dict[str, str]]:
    """A test file as (what it holds besides its tests, test name -> its
    definition): a GoogleTest test from TEST_P to its body's closing brace,
    a pytest function with its decorators. ("", {}) where it does not parse:
    the caller then takes the whole file."""
    tests: dict[str, str] = {}
    outside: list[str] = []
    if rel.endswith(".cpp"):
        pos = 0
        for m in _GTEST_DEFINITION.finditer(text):
            if m.start() < pos:
                continue
            end = _closing_brace(text, text.find("{", m.end())) + 1
            outside.append(text[pos:m.start()])
            tests[m.group(1)] = text[m.start():end]
            pos = end
        outside.append(text[pos:])
        return "".join(outside), tests
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "", {}
    lines = text.splitlines(keepends=True)
    taken: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            tests[node.name] = "".join(lines[first - 1:node.end_lineno])
            taken.update(range(first - 1, node.end_lineno))
    return "".join(line for i, line in enumerate(lines) if i not in taken), tests


def tests_digest(tests: list[str], read=_read) -> str:
    """A digest of what a verdict from these tests depends on (see
    SUITE_FOLDERS): each test's definition, what its file holds besides its
    tests, and its suite's machinery. A test no file defines (or one of a
    file that does not parse) counts as its whole suite, or its whole file."""
    gtests, nodeids = split(tests)
    whole: set[str] = set()
    parts: dict[str, set[str]] = {}  # test file -> the tests of it named
    if nodeids:
        whole.update(_suite_files("python", read)[0])
        for t in nodeids:
            rel, _, rest = t.partition("::")
            if "::" in rest:  # a class's test: its whole file
                whole.add(rel)
            else:
                parts.setdefault(rel, set()).add(rest.split("[", 1)[0])
    if gtests:
        machinery, defined = _suite_files("cpp", read)
        whole.update(machinery)
        for t in gtests:
            rel = gtest_file(t, defined)
            if rel is None:
                whole.update(defined.values())
            else:
                parts.setdefault(rel, set()).add(gtest_test(t))
    pieces = [f"{rel}\0{read(rel)}" for rel in sorted(whole)]
    for rel in sorted(set(parts) - whole):
        text = read(rel)
        outside, defined_here = split_tests(rel, text)
        if not defined_here:
            pieces.append(f"{rel}\0{text}")
            continue
        pieces.append(f"{rel}\0{outside}")
        pieces += [f"{rel}::{name}\0{defined_here.get(name, '')}" for name in sorted(parts[rel])]
    return mutation_report.digest(*pieces)


def marked(path: pathlib.Path) -> set[int]:
    """The ids a trace file holds marked."""
    return {i for i, b in enumerate(path.read_bytes()) if b}


def gtest_names(binary: pathlib.Path) -> list[str]:
    """A GoogleTest binary's tests as --gtest_filter names them."""
    status, output = mutants.run_killable([str(binary), "--gtest_list_tests"], 120)
    if status != 0:
        raise RuntimeError(f"{binary} --gtest_list_tests failed:\n{output[-2000:]}")
    names, suite = [], ""
    for line in output.splitlines():
        if not line.strip() or line.startswith(("Running main", "[")):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return names


def measure_gtests(binary: pathlib.Path, size: int, out: pathlib.Path, jobs: int, timeout: float
                   ) -> tuple[dict[str, set[int]], dict[str, float], list[str]]:
    """Each test of `binary` alone, `jobs` side by side, with a trace file
    of its own: (test -> ids it reached, test -> seconds, failing tests)."""
    names = gtest_names(binary)
    out.mkdir(parents=True, exist_ok=True)
    reached: dict[str, set[int]] = {}
    seconds: dict[str, float] = {}
    failing: list[str] = []
    pending = list(enumerate(names))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not pending:
                    return
                i, name = pending.pop(0)
            trace = out / f"gtest-{i}.bin"
            trace.write_bytes(bytes(size))
            began = time.monotonic()
            status, _ = mutants.run_killable(
                [str(binary), f"--gtest_filter={name}"], timeout,
                env={**os.environ, **mutants.FREED_MEMORY_FILLED, "NR_MUTANT_TRACE": str(trace)})
            took = time.monotonic() - began
            ids = marked(trace)
            trace.unlink()
            with lock:
                reached[name], seconds[name] = ids, took
                if status != 0:
                    failing.append(name)

    threads = [threading.Thread(target=work) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return reached, seconds, sorted(failing)


def python_parts(count: int) -> list[list[str]]:
    """The Python conformance suite's files in up to `count` parts of about
    equal size (largest first onto the smallest part), each a pytest process
    with its own trace file: the reach run uses every core."""
    files = sorted((ROOT / "conformance" / "python").glob("test_*.py"), key=lambda f: -f.stat().st_size)
    parts: list[tuple[int, list[str]]] = [(0, []) for _ in range(max(1, min(count, len(files))))]
    for f in files:
        size, names = min(parts, key=lambda part: part[0])
        parts.remove((size, names))
        parts.append((size + f.stat().st_size, [*names, f"conformance/python/{f.name}"]))
    return [names for _, names in parts if names]


def measure(ws: Workspace, ids: dict[str, int], layer: str, impl: str, env: dict, tree: pathlib.Path,
            out: pathlib.Path, jobs: int, timeout: float, source: str = "") -> ReachedMap:
    """Both suites (the C++ one where `layer` is cpp: the binding's mutants
    cannot reach it) on the schemata build of `ws`, pristine, each test's
    reach recorded. Raises RuntimeError when a suite crashes or times out."""
    began = time.monotonic()
    size = max(ids.values(), default=-1) + 1
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tests: dict[str, set[int]] = {}
    durations: dict[str, float] = {}
    failing: list[str] = []
    names: dict[str, list[str]] = {}
    suite_seconds: dict[str, float] = {}
    if layer == "cpp":
        cpp_began = time.monotonic()
        reached, seconds, failed = measure_gtests(ws.build / mutants.GTEST["conformance"], size, out / "gtest",
                                                  jobs, min(timeout, GTEST_LIMIT_S))
        suite_seconds["c++ conformance"] = time.monotonic() - cpp_began
        for name, found in reached.items():
            tests[GTEST_PREFIX + name] = found
            durations[GTEST_PREFIX + name] = seconds[name]
        failing += [GTEST_PREFIX + n for n in failed]
        names["c++ conformance"] = failed
        print(f"  C++ conformance: {len(reached)} tests one by one, {jobs} at a time, "
              f"{suite_seconds['c++ conformance']:.0f} s", flush=True)
    python_out = out / "python"
    (python_out / "traces").mkdir(parents=True)
    python_env = {**env, "NR_REACHED_DIR": str(python_out / "traces"), "NR_REACHED_SIZE": str(size),
                  "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
                  "PYTEST_ADDOPTS": f"-p {PLUGIN} " + env.get("PYTEST_ADDOPTS", "")}
    python_began = time.monotonic()
    parts = [[*files, f"--impl={impl}"] for files in python_parts(jobs)]
    failed, output = mutants.pytest_run(parts, python_out, timeout, python_env, tree, ws, fail_fast=False,
                                        conformance_report=True)
    suite_seconds["python conformance"] = time.monotonic() - python_began
    if any(t.startswith("<") for t in failed):
        raise RuntimeError(f"the pristine Python suite on the schemata build failed as a whole: {failed}\n"
                           + "\n".join(output.splitlines()[-30:]))
    outside: set[int] = set()
    parts = sorted((python_out / "traces").glob("*.json"))
    if not parts:
        raise RuntimeError("the pristine Python suite recorded no reach (was the plugin loaded?):\n"
                           + "\n".join(output.splitlines()[-30:]))
    for part in parts:
        found = json.loads(part.read_text())
        for nodeid, reached_ids in found["tests"].items():
            tests.setdefault(nodeid, set()).update(reached_ids)
        durations.update(found["durations"])
        outside.update(found["outside"])
        outside.update(marked(part.with_suffix(".bin")))  # what its exit reached
    failing += mutants.baseline_deselect(python_out)
    names["python conformance"] = failed
    return ReachedMap({test: sorted(found) for test, found in tests.items()}, sorted(outside), durations, dict(ids),
                      sorted(set(failing)), names, source, round(time.monotonic() - began, 1),
                      {k: round(v, 1) for k, v in suite_seconds.items()})


def baseline_of(reached: ReachedMap) -> dict:
    """The baseline the reach run gives (it ran both suites pristine, every
    test): its failures kill nothing and are deselected; each whole suite's
    limit derives from its time as measure_baseline's does (the C++ suite's
    from its tests' times one after the other)."""
    deselect = [t for t in reached.failing if not t.startswith(GTEST_PREFIX)]
    # The reach run measured the Python suite in parts side by side; a
    # mutant's whole suite is one process, so its limit derives from the
    # tests' times one after the other (as mutants.serial_seconds does for a
    # baseline). From the parts' wall time it was shorter than the suite
    # itself on the lent machine (276 s against 440 s): every whole suite
    # that failed nothing ended as a timeout, and counted as a kill.
    python_serial = sum(s for t, s in reached.durations.items() if not t.startswith(GTEST_PREFIX))
    python = max(python_serial, reached.suite_seconds.get("python conformance", 0))
    timeouts = {"build": 900.0, "python": max(60.0, 3 * python + 30)}
    cpp = [s for t, s in reached.durations.items() if t.startswith(GTEST_PREFIX)]
    if cpp:
        timeouts["c++"] = max(60.0, 3 * sum(cpp) + 30)
    return {**reached.failing_names, "deselect": deselect, "timeouts": timeouts,
            "tests": sorted(t[len(GTEST_PREFIX):] if t.startswith(GTEST_PREFIX) else t for t in reached.durations)}


def main(argv: list[str] | None = None) -> int:
    """python -m harness.mutation.reached_map MAP [KEY ...]: the tests a kept map gives."""
    path = pathlib.Path((argv or sys.argv[1:])[0])
    found = ReachedMap.load(path)
    reached = sum(1 for i in found.ids.values() if i in found.tests)
    print(f"{path}: {len(found.ids)} mutants, {reached} reached by a test, {len(found.outside)} outside any "
          f"test, {len(found.durations)} tests, measured in {found.seconds:.0f} s")
    for key in (argv or sys.argv[1:])[1:]:
        mutant_id = found.ids.get(key)
        print(f"  {key}: id {mutant_id}: {found.tests.get(mutant_id, [])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
