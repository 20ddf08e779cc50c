"""Tests of the tests chosen by coverage (harness/mutation/coverage_map.py,
coverage_contexts.py, and the runner's use of them) on a toy package and a
toy suite: which tests execute each line, child interpreters included, in
what order a mutant meets them, and NoCoverage without a run."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

from harness.mutation import coverage_map, mutagen, mutant_runner, mutants

MODULE = """\
TOP = 1


def used(x):
    if x > 0:
        return (x +
                1)
    return 0


def by_child():
    return 2


def unused():
    return 3
"""

TESTS = """\
import os
import subprocess
import sys
import time

import toy


def test_positive():
    assert toy.used(1) == 2


def test_slow_negative():
    time.sleep(0.3)
    assert toy.used(-1) == 0


def test_in_a_child():
    subprocess.run([sys.executable, "-c", "import toy; toy.by_child()"], check=True, env=os.environ)


def test_fails_before_any_mutant():
    assert toy.used(5) == 0
"""


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if needle in line)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tree = tmp_path_factory.mktemp("toy")
    (tree / "pkg").mkdir()
    (tree / "pkg" / "toy.py").write_text(MODULE)
    (tree / "tests").mkdir()
    (tree / "tests" / "test_toy.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": str(tree / "pkg")}
    found = coverage_map.measure({"pkg/toy.py": tree / "pkg" / "toy.py"}, ["tests"], tree / "out", env,
                                 tree, timeout=240, source="s1")
    return tree, found


def test_each_line_maps_to_the_tests_executing_it_cheapest_first(measured):
    _, found = measured
    at = lambda needle: found.tests_for("pkg/toy.py", line_of(MODULE, needle), MODULE)  # noqa: E731
    # The failing test kills nothing, so it is never chosen.
    assert at("if x > 0") == ["tests/test_toy.py::test_positive", "tests/test_toy.py::test_slow_negative"]
    assert at("return (x +") == ["tests/test_toy.py::test_positive"]
    assert at("1)") == ["tests/test_toy.py::test_positive"]  # a statement's second line: its first line's tests
    assert at("return 0") == ["tests/test_toy.py::test_slow_negative"]
    assert found.durations["tests/test_toy.py::test_slow_negative"] >= 0.3
    assert found.failing == ["tests/test_toy.py::test_fails_before_any_mutant"]
    assert found.failing_names == ["tests.test_toy.test_fails_before_any_mutant"]


def test_the_coverage_run_stands_for_the_baseline(measured):
    from harness.mutation import auto_mutants
    _, found = measured
    baseline = auto_mutants.baseline_of(found)
    assert baseline["python conformance"] == found.failing_names and baseline["deselect"] == found.failing
    assert baseline["timeouts"]["python"] >= max(60.0, 3 * found.seconds)
    assert "tests/test_toy.py::test_positive" in baseline["tests"]


def test_a_child_interpreter_s_lines_count_for_the_test_that_started_it(measured):
    _, found = measured
    assert found.tests_for("pkg/toy.py", line_of(MODULE, "return 2"), MODULE) == [
        "tests/test_toy.py::test_in_a_child"]


def test_top_level_lines_meet_the_whole_suite_and_unexecuted_lines_none(measured):
    _, found = measured
    assert found.tests_for("pkg/toy.py", line_of(MODULE, "TOP = 1"), MODULE) is None
    assert found.tests_for("pkg/toy.py", line_of(MODULE, "def unused"), MODULE) is None
    assert found.tests_for("pkg/toy.py", line_of(MODULE, "return 3"), MODULE) == []
    assert found.tests_for("pkg/other.py", 1, MODULE) is None  # a file not measured


def test_the_map_keeps(measured, tmp_path):
    _, found = measured
    found.save(tmp_path / "map.json")
    assert coverage_map.CoverageMap.load(tmp_path / "map.json") == found


def test_a_crashing_suite_is_reported_not_mapped(tmp_path):
    (tmp_path / "pkg.py").write_text("X = 1\n")
    (tmp_path / "conftest.py").write_text("import os\nos._exit(3)\n")
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    with pytest.raises(RuntimeError, match="crashed"):
        coverage_map.measure({"pkg.py": tmp_path / "pkg.py"}, ["test_a.py"], tmp_path / "out",
                             dict(os.environ), tmp_path, timeout=120)


def test_a_mutant_meets_only_its_covering_tests_in_order_and_an_uncovered_one_none(measured, monkeypatch):
    tree, found = measured
    ran = []
    monkeypatch.setattr(mutants, "python_tests",
                        lambda out, timeout, impl, env, where, ws, nodeids, test_limits=None: ran.append(nodeids) or (
                            [mutant_runner.junit_name(nodeids[0])], "failed"))
    whole = []
    monkeypatch.setattr(mutants, "python_suite", lambda *a, **k: whole.append(1) or ([], "passed"))
    target = mutant_runner.Target("python", ["pkg/toy.py"], {"pkg/toy.py": tree / "pkg" / "toy.py"},
                                  env={}, needs_build=False, suites_from=tree, coverage=found,
                                  pristine={"pkg/toy.py": MODULE})
    candidates = {m.line: m for m in mutagen.python_mutants("pkg/toy.py", MODULE)}
    timeouts = {"python": 600.0, "build": 1.0}
    covered = candidates[line_of(MODULE, "if x > 0")]
    outcome = mutant_runner.evaluate(covered, target, mutants.FIRST, tree / "out", timeouts, {})
    assert ran == [["tests/test_toy.py::test_positive", "tests/test_toy.py::test_slow_negative"]]
    assert outcome.verdict == "killed" and outcome.covered_by == ran[0] and not whole
    assert outcome.failing == ["tests/test_toy.py::test_positive"]  # by its node id, as coverage names it
    uncovered = candidates[line_of(MODULE, "return 3")]
    outcome = mutant_runner.evaluate(uncovered, target, mutants.FIRST, tree / "out", timeouts, {})
    assert outcome.verdict == "nocoverage" and len(ran) == 1 and not whole
    top = candidates[line_of(MODULE, "TOP = 1")]
    outcome = mutant_runner.evaluate(top, target, mutants.FIRST, tree / "out", timeouts, {})
    assert outcome.verdict == "survived" and whole == [1]  # the whole suite, which passed


def test_a_top_level_line_meets_the_tests_that_used_what_it_defines(measured):
    _, found = measured
    texts = {"pkg/toy.py": MODULE}
    observers = lambda needle: found.observers(  # noqa: E731
        mutagen.Mutant("pkg/toy.py", line_of(MODULE, needle), "k", "c", "", ""), texts)
    # A def's line: the tests that ran its body, cheapest first, the failing one never.
    assert observers("def used") == ["tests/test_toy.py::test_positive", "tests/test_toy.py::test_slow_negative"]
    assert observers("def by_child") == ["tests/test_toy.py::test_in_a_child"]
    # Bound but used by no measured line, or run by no test: the whole suite.
    assert observers("TOP = 1") is None and observers("def unused") is None


def test_a_top_level_binding_is_observed_where_any_measured_file_names_it():
    a = "import os\nLIMIT = 3\n\n\nclass Box:\n    size = LIMIT\n\n    def grow(self):\n        return self.size + 1\n\n\nprint(os.sep)\n"
    b = "import a\n\n\ndef f():\n    return (a.LIMIT +\n            1)\n"
    found = coverage_map.CoverageMap(
        tests={"a.py": {"9": ["t.py::test_grow"]}, "b.py": {"5": ["t.py::test_f", "t.py::test_broken"]}},
        outside={"a.py": [1, 2, 5, 6, 8, 12]}, durations={"t.py::test_f": 2.0, "t.py::test_grow": 1.0},
        failing=["t.py::test_broken"])
    texts = {"a.py": a, "b.py": b}
    at = lambda line: found.observers(mutagen.Mutant("a.py", line, "k", "c", "", ""), texts)  # noqa: E731
    assert at(2) == ["t.py::test_f"]  # LIMIT, read by b.py's statement at line 5 (named on its line 5)
    assert at(6) == ["t.py::test_grow"]  # in class Box: the tests that ran its methods
    assert at(1) is None  # os: named only at the top level, which no test runs
    assert at(12) is None  # binds nothing: the whole suite
    assert coverage_map.bound_names(__import__("ast").parse("x, (y, z) = 1, (2, 3)").body[0]) == {"x", "y", "z"}


def test_a_top_level_binding_is_observed_by_the_tests_that_name_it(tmp_path):
    # `_alias = f` is used only as `a._alias()` or getattr(a, "_names") in a
    # test: no line of a measured file names it, the test functions do.
    a = "def f():\n    return 1\n\n\n_alias = f\n_names = ['g']\nHELPED = 2\nUNUSED = 3\n"
    (tmp_path / "t.py").write_text(
        "import a\n\n\ndef helper():\n    return a.HELPED\n\n\n"
        "def test_alias():\n    assert a._alias() == 1\n\n\n"
        "class TestNames:\n    def test_names(self):\n        assert getattr(a, '_names') == ['g']\n")
    durations = {"t.py::test_alias": 1.0, "t.py::TestNames::test_names": 2.0, "t.py::test_other[x]": 0.5}
    found = coverage_map.CoverageMap(tests={"a.py": {"2": ["t.py::test_alias"]}},
                                     outside={"a.py": [1, 5, 6, 7, 8]}, durations=durations,
                                     root=str(tmp_path))
    at = lambda line: found.observers(mutagen.Mutant("a.py", line, "k", "c", "", ""), {"a.py": a})  # noqa: E731
    assert at(5) == ["t.py::test_alias"]
    assert at(6) == ["t.py::TestNames::test_names"]
    assert at(7) is None  # named by a helper any test may call: the whole suite
    assert at(8) is None  # named nowhere: the whole suite
    assert at(1) == ["t.py::test_alias"]  # a def: the test that ran its body (a helper naming it adds none)
    # A map measured before it knew its root finds none of these.
    assert dataclasses.replace(found, root="").observers(
        mutagen.Mutant("a.py", 5, "k", "c", "", ""), {"a.py": a}) is None


def test_a_mutant_of_a_def_line_meets_its_observers_in_a_fresh_pytest(measured, monkeypatch):
    tree, found = measured
    ran = []
    monkeypatch.setattr(mutants, "python_tests",
                        lambda out, timeout, impl, env, where, ws, nodeids, test_limits=None: ran.append(nodeids) or (
                            [], "passed"))
    monkeypatch.setattr(mutant_runner, "warm_tests", lambda *a, **k: pytest.fail("a warm suite judged it"))
    whole = []
    monkeypatch.setattr(mutants, "python_suite", lambda *a, **k: whole.append(1) or ([], "passed"))
    target = mutant_runner.Target("python", ["pkg/toy.py"], {"pkg/toy.py": tree / "pkg" / "toy.py"},
                                  env={}, needs_build=False, suites_from=tree, coverage=found,
                                  pristine={"pkg/toy.py": MODULE}, warm_suite=True)
    mutant = mutagen.Mutant("pkg/toy.py", line_of(MODULE, "def by_child"), "default", "none -> a default",
                            "def by_child():", "def by_child(unused=None):", key="toy-def")
    outcome = mutant_runner.evaluate(mutant, target, mutants.FIRST, tree / "out", {"python": 600.0, "build": 1.0}, {})
    assert ran == [["tests/test_toy.py::test_in_a_child"]] and not whole
    assert outcome.verdict == "survived" and outcome.covered_by == ran[0]


def test_the_own_tests_judge_by_their_own_map_what_the_conformance_suites_did_not_kill(measured, monkeypatch):
    """--own-tests with tests by coverage: a mutant no conformance test
    reaches meets the own tests that execute its line, cheapest first, and
    is "nocoverage" for them too where none does; a conformance survivor
    that no own test can be chosen for meets the whole own suite, less its
    pristine failures."""
    tree, own_map = measured
    runs = []

    def pytest_run(parts, out, timeout, env, where, ws, fail_fast=True, **k):
        runs.append(parts[0])
        return (["tests/test_toy.py::test_positive"] if parts[0][0].startswith("tests/") else []), "output"

    monkeypatch.setattr(mutants, "pytest_run", pytest_run)
    monkeypatch.setattr(mutants, "python_suite", lambda *a, **k: ([], "passed"))
    reaches_nothing = coverage_map.CoverageMap({"pkg/toy.py": {}}, {}, {})
    target = mutant_runner.Target("python", ["pkg/toy.py"], {"pkg/toy.py": tree / "pkg" / "toy.py"},
                                  env={"X": "1"}, needs_build=False, suites_from=tree, coverage=reaches_nothing,
                                  pristine={"pkg/toy.py": MODULE}, own_coverage=own_map)
    candidates = {m.line: m for m in mutagen.python_mutants("pkg/toy.py", MODULE)}
    timeouts = {"python": 600.0, "build": 1.0, "own": 600.0}
    judge = lambda needle: mutant_runner.evaluate(  # noqa: E731
        candidates[line_of(MODULE, needle)], target, mutants.FIRST, tree / "out", timeouts, {}, own_tests=True)
    outcome = judge("if x > 0")
    assert runs == [["tests/test_toy.py::test_positive", "tests/test_toy.py::test_slow_negative"]]
    assert (outcome.verdict, outcome.own_tests, outcome.own_failing) == (
        "nocoverage", "killed", ["tests/test_toy.py::test_positive"])
    outcome = judge("return 3")
    assert (outcome.verdict, outcome.own_tests) == ("nocoverage", "nocoverage") and len(runs) == 1
    # Without --own-tests the own map is not asked.
    outcome = mutant_runner.evaluate(candidates[line_of(MODULE, "if x > 0")], target, mutants.FIRST,
                                     tree / "out", timeouts, {})
    assert (outcome.verdict, outcome.own_tests) == ("nocoverage", "") and len(runs) == 1
    target.coverage = own_map  # the conformance suites reach TOP outside any test: their whole suite passes
    outcome = judge("TOP = 1")
    assert runs[-1] == ["reference/python/tests", "--deselect=tests/test_toy.py::test_fails_before_any_mutant"]
    assert (outcome.verdict, outcome.own_tests) == ("survived", "survived")
    # A verdict of this tree that lacks only the own tests' (a --resume with
    # --own-tests): the conformance suites do not run again.
    monkeypatch.setattr(mutants, "python_suite", lambda *a, **k: pytest.fail("the conformance suite ran again"))
    earlier = dataclasses.replace(outcome, own_tests="", seconds={"python": 5.0, "total": 5.0})
    outcome = mutant_runner.evaluate(candidates[line_of(MODULE, "if x > 0")], target, mutants.FIRST, tree / "out",
                                     timeouts, {}, own_tests=True, earlier=earlier)
    assert (outcome.verdict, outcome.own_tests, outcome.where) == ("survived", "killed", earlier.where)
    assert outcome.seconds["total"] >= 5.0 and runs[-1][0] == "tests/test_toy.py::test_positive"


def test_statement_lines_map_continuations_to_their_first_line():
    text = textwrap.dedent("""\
        def f(a,
              b):
            x = g(a,
                  b)
            return x
        """)
    lines = coverage_map.statement_lines(text)
    assert lines[3] == lines[4] == 3 and lines[5] == 5 and lines[2] == 1


def test_tests_by_coverage_goes_with_the_python_layer():
    from harness import main
    assert main.main(["--check-args", "--mutants", "auto", "--mutate", "python", "--tests-by-coverage"]) == 0
    assert main.main(["--check-args", "--mutants", "auto", "--tests-by-coverage"]) == 2
    assert main.main(["--check-args", "--tests-by-coverage"]) == 2


def test_the_staged_package_wins_over_any_editable_install(monkeypatch, tmp_path):
    """A worktree's harness must skip an editable install of another checkout
    too (its build is not this ROOT/build), else the suites import that
    package and every mutant survives unseen."""
    from harness import staging

    class MesonpyMetaFinder:  # meson-python's finder, as the .pth installs it
        _build_path = "/elsewhere/build"

        def find_spec(self, *args):
            return None

    monkeypatch.setattr(sys, "meta_path", [MesonpyMetaFinder(), *sys.meta_path])
    env = staging.environment_for(tmp_path)
    assert "/elsewhere/build" in env["MESONPY_EDITABLE_SKIP"].split(os.pathsep)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
