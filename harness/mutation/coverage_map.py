"""Tests chosen by coverage, for the Python layer's mutants: one run of the
pristine suite under coverage.py records which tests execute each line of
the mutated files (per test, child interpreters included: the
coverage_contexts plugin), and each test's time. A mutant then meets only
the tests that execute its line, cheapest first, stopping at the first
failure; a line no test executes gives "no coverage" without a run.

A line run outside any test (a module's top level, at import or collection)
is run by every test that imports the module, but what it makes is seen
only where it is used: a mutant there meets its top-level statement's
observers (observers()), the tests that, in the pristine run, executed the
body of the function or class the statement defines or a line that names
what it binds, in any of the measured files, and the tests whose own
function names it (`module._alias()` in a test runs no measured line that
names `_alias`); in a fresh interpreter, as the line runs at import. A
statement that binds nothing, that a test file's helper or fixture names,
or whose observers no test was seen to be, meets the whole suite, as
without coverage. The
observers can only miss a test that would have killed (one that sees the
statement's effect without running any of those lines): a figure from them
is a lower bound of the whole suite's. A line of a statement that spans
several lines counts as the statement's first line (the one coverage.py
records).

The map is kept (coverage-python.json beside the run's records) with the
digest of the tree it was measured at (mutant_records.tree_source) and is
measured again only when that changes.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import pathlib
import sys
import time
from dataclasses import asdict, dataclass, field

from . import mutants
from .mutants import ROOT

PLUGIN = "harness.mutation.coverage_contexts"


@dataclass
class CoverageMap:
    tests: dict[str, dict[str, list[str]]]    # file -> line (str: JSON) -> the tests executing it
    outside: dict[str, list[int]]             # file -> lines run outside any test (top level)
    durations: dict[str, float]               # test -> seconds in the pristine run
    source: str = ""                          # the tree it was measured at (tree_source)
    seconds: float = 0.0                      # what measuring it took
    failing: list[str] = field(default_factory=list)  # tests failing in the pristine run: they kill nothing
    failing_names: list[str] = field(default_factory=list)  # the same as a suite run names them (JUnit's)
    root: str = ""                            # where the tests' node ids are relative to (measure's cwd)

    def save(self, path: pathlib.Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=0, sort_keys=True))

    @classmethod
    def load(cls, path: pathlib.Path) -> CoverageMap:
        return cls(**json.loads(path.read_text()))

    def tests_for(self, rel: str, line: int, text: str) -> list[str] | None:
        """The tests that execute `line` of `rel` (its text `text`), cheapest
        first; None where the whole suite must run (the line runs outside any
        test, or the file was not measured); [] where no test executes it."""
        if rel not in self.tests:
            return None
        first = statement_lines(text).get(line)
        if first is None or first in self.outside.get(rel, []):
            return None
        found = [t for t in self.tests[rel].get(str(first), []) if t not in self.failing]
        return sorted(found, key=lambda t: (self.durations.get(t, 0.0), t))

    def covering(self, mutant, text: str) -> list[str] | None:
        """tests_for of the mutant's line (the interface mutant_runner uses,
        as reached_map.ReachedMap's)."""
        return self.tests_for(mutant.file, mutant.line, text)

    def observers(self, mutant, texts: dict[str, str]) -> list[str] | None:
        """For a mutant of a line run outside any test: the tests that executed
        the body of what its top-level statement defines, or a line of a
        measured file (`texts`: file -> its pristine text) that names what
        the statement binds, cheapest first; None where the whole suite must
        run (a file not measured, a statement that binds nothing, or none
        seen to observe it)."""
        if mutant.file not in self.tests or mutant.file not in texts:
            return None
        top = next((s for s in ast.parse(texts[mutant.file]).body
                    if s.lineno <= mutant.line <= s.end_lineno), None)
        names = bound_names(top) if top is not None else set()
        if not names:
            return None
        seen: set[str] = set()
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for line in range(top.body[0].lineno, top.end_lineno + 1):
                seen.update(self.tests[mutant.file].get(str(line), []))
        for rel, text in texts.items():
            if rel not in self.tests:
                continue
            first = statement_lines(text)
            for node in ast.walk(ast.parse(text)):
                named = (node.id if isinstance(node, ast.Name) else
                         node.attr if isinstance(node, ast.Attribute) else None)
                if named not in names or (rel == mutant.file and top.lineno <= node.lineno <= top.end_lineno):
                    continue
                seen.update(self.tests[rel].get(str(first.get(node.lineno, node.lineno)), []))
        naming = self.tests_naming(names, has_body=isinstance(
            top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
        if naming is None:
            return None
        found = [t for t in seen | naming if t not in self.failing]
        return sorted(found, key=lambda t: (self.durations.get(t, 0.0), t)) or None

    def tests_naming(self, names: set[str], has_body: bool) -> set[str] | None:
        """The tests whose own function, in the test files of the map's
        tests, names one of `names` (a name, an attribute, or a string, as in
        getattr(module, "name")): they see a top-level binding however they
        reach it (`module._alias()` in a test runs no line of the module
        that names the alias). None (the whole suite) where a line of those
        files outside any test function (a fixture, a helper) names one,
        unless the statement has a body (a def, a class), whose runners
        observe it already."""
        if not self.root:
            return set()
        by_file: dict[str, list[str]] = {}
        for test in self.durations:
            by_file.setdefault(test.split("::", 1)[0], []).append(test)
        found: set[str] = set()
        for rel, tests in by_file.items():
            for owner, named in _names_by_owner(str(pathlib.Path(self.root) / rel)):
                if not named & names:
                    continue
                if owner is None:
                    if has_body:
                        continue
                    return None
                found.update(t for t in tests if t.split("[", 1)[0] == f"{rel}::{owner}")
        return found

    def seconds_of(self, tests: list[str]) -> float:
        return sum(self.durations.get(t, 0.0) for t in tests)


@functools.lru_cache(maxsize=None)
def _names_by_owner(path: str) -> list[tuple[str | None, frozenset[str]]]:
    """A test file's top-level statements (a test class's methods each on
    its own) as (the test they are, `Class::test_x` or `test_x`, or None;
    the names, attributes and strings they contain)."""
    try:
        tree = ast.parse(pathlib.Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return []

    def named(node: ast.AST) -> frozenset[str]:
        return frozenset(n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                         else n.value for n in ast.walk(node)
                         if isinstance(n, (ast.Name, ast.Attribute))
                         or (isinstance(n, ast.Constant) and isinstance(n.value, str)))

    def is_test(node: ast.AST) -> bool:
        return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")

    out: list[tuple[str | None, frozenset[str]]] = []
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef) and statement.name.startswith("Test"):
            for member in statement.body:
                owner = f"{statement.name}::{member.name}" if is_test(member) else None
                out.append((owner, named(member)))
            out.append((None, frozenset().union(*(named(d) for d in statement.decorator_list))))
        else:
            out.append((statement.name if is_test(statement) else None, named(statement)))
    return out


def bound_names(statement: ast.stmt) -> set[str]:
    """The names a top-level statement binds in its module: a def's or
    class's name, an assignment's or import's targets."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in statement.names if alias.name != "*"}
    targets = (statement.targets if isinstance(statement, ast.Assign) else
               [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else [])
    return {node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)}


def statement_lines(text: str) -> dict[int, int]:
    """Each line of a Python source -> the first line of the innermost
    statement spanning it (lines of no statement: absent)."""
    spans = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt):
            spans.append((node.end_lineno - node.lineno, node.lineno, node.end_lineno))
    first: dict[int, int] = {}
    for _, start, end in sorted(spans, reverse=True):  # widest first: inner statements overwrite
        for line in range(start, end + 1):
            first[line] = start
    return first


def measure(files: dict[str, pathlib.Path], pytest_args: list[str], out: pathlib.Path, env: dict,
            cwd: pathlib.Path, timeout: float, source: str = "") -> CoverageMap:
    """Runs the suite (`pytest_args`, in `cwd`) once under coverage.py with
    per-test contexts, measuring `files` (reported name -> the module the
    suite imports), and maps their lines to tests. Raises RuntimeError when
    the run crashes or measures none of the files."""
    import coverage

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(".coverage*"):
        old.unlink()
    rc, durations = out / "coveragerc", out / "durations.json"
    rc.write_text("[run]\n"
                  f"data_file = {out / '.coverage'}\n"
                  "parallel = true\n"
                  "patch = subprocess\n"
                  "include =\n" + "".join(f"    {p}\n" for p in files.values()))
    durations.unlink(missing_ok=True)
    xml = out / "coverage-run.xml"
    cmd = [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", *pytest_args,
           "-q", "-p", "no:cacheprovider", "-p", PLUGIN, f"--junitxml={xml}"]
    root_first = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    began = time.monotonic()
    status, output = mutants.run_killable(
        cmd, timeout, cwd=cwd, env={**env, **mutants.MUTANT_RUN_SUITES, "PYTHONPATH": root_first,
                                     "NR_TEST_DURATIONS": str(durations)})
    took = time.monotonic() - began
    if status is None or not durations.exists():
        raise RuntimeError(f"the coverage run of the pristine suite "
                           f"{'ran past its time limit' if status is None else f'crashed (exit {status})'}:\n"
                           + "\n".join(output.splitlines()[-30:]))
    cov = coverage.Coverage(config_file=str(rc))
    cov.combine(strict=False)
    data = cov.get_data()
    by_path = {str(p.resolve()): rel for rel, p in files.items()}
    tests: dict[str, dict[str, list[str]]] = {}
    outside: dict[str, list[int]] = {}
    for measured in data.measured_files():
        rel = by_path.get(str(pathlib.Path(measured).resolve()))
        if rel is None:
            continue
        lines = tests.setdefault(rel, {})
        for line, contexts in data.contexts_by_lineno(measured).items():
            named = sorted({c for c in contexts if c})
            if named:
                lines[str(line)] = named
            if "" in contexts:
                outside.setdefault(rel, []).append(line)
    if not tests:
        raise RuntimeError(f"the coverage run measured none of {', '.join(files)}:\n"
                           + "\n".join(output.splitlines()[-30:]))
    for rel in files:  # a file no test imported: every line uncovered, none outside
        tests.setdefault(rel, {})
    return CoverageMap(tests, {rel: sorted(lines) for rel, lines in outside.items()},
                       json.loads(durations.read_text()), source, round(took, 1),
                       failing_nodeids(xml, cwd), mutants.failing_gtests(xml), str(cwd))


def failing_nodeids(xml: pathlib.Path, cwd: pathlib.Path) -> list[str]:
    """The node ids of the tests a pytest JUnit report says failed (its
    classname and name turned back into a node id)."""
    import xml.etree.ElementTree as ET

    found = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            parts = case.get("classname", "").split(".")
            # classname is the module's dotted path, then any classes.
            for cut in range(len(parts), 0, -1):
                path = "/".join(parts[:cut]) + ".py"
                if (cwd / path).is_file() or cut == 1:
                    found.append("::".join([path, *parts[cut:], case.get("name", "")]))
                    break
    return found
