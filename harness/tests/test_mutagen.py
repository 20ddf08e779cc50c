"""Tests of --mutants auto's parts that need no build: the C++ and Python
mutant generators, the stable keys, the reproducible sample, the equivalents
file and the kill-rate arithmetic, and the killing of a hung suite."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

from harness import main
from harness.mutation import auto_mutants, mutagen, mutants

CPP = """\
#include "a.h"  // a < b
bool pick(int a, int b) {
  // if (a == b) in a comment is not code
  const char* text = "a == b && true";
  if (a == b && !done) return true;
  for (int i = 0; i < n; ++i) {
    if (skip(i)) continue;
    work(i);
  }
  std::vector<int> v;
  auto x = total + 1;
  return compute(a, b);
}
"""


def changes(found):
    return {(m.line, m.kind, m.change) for m in found}


def test_cpp_operators_apply_to_code_only():
    found = mutagen.cpp_mutants("a.cpp", CPP)
    got = changes(found)
    assert (5, "relational", "== -> !=") in got
    assert (5, "logical", "&& -> ||") in got
    assert (5, "negation", "! removed") in got
    assert (5, "boolean", "true -> false") in got
    assert (5, "condition-true", "if (...) -> if (true)") in got
    assert (6, "relational", "< -> <=") in got
    assert (7, "loop-exit", "continue; -> break;") in got
    assert (8, "statement-deletion", "statement deleted") in got
    assert (11, "off-by-one", "+ 1 -> - 1") in got
    assert (12, "return-value", "return ... -> return {}") in got
    # Comments, strings, the preprocessor and declarations are left alone.
    assert not {line for line, _, _ in got} & {1, 3, 4, 10}
    assert not any(m.line == 11 and m.kind == "statement-deletion" for m in found)


def test_a_mutant_changes_one_line_and_names_it():
    found = mutagen.cpp_mutants("a.cpp", CPP)
    flip = next(m for m in found if m.line == 5 and m.kind == "relational")
    mutated = flip.apply(CPP).split("\n")
    assert mutated[4] == "  if (a != b && !done) return true;"
    assert [l for i, l in enumerate(mutated) if i != 4] == [l for i, l in enumerate(CPP.split("\n")) if i != 4]
    assert flip.where == "a.cpp:5"
    with pytest.raises(ValueError, match="no longer"):
        flip.apply(CPP.replace("a == b &&", "a == c &&"))


def test_keys_survive_edits_elsewhere_and_tell_identical_lines_apart():
    before = {m.key: m.line for m in mutagen.cpp_mutants("a.cpp", CPP)}
    shifted = {m.key: m.line for m in mutagen.cpp_mutants("a.cpp", "// new first line\n" + CPP)}
    assert set(before) == set(shifted)
    assert all(shifted[k] == before[k] + 1 for k in before)
    twice = mutagen.cpp_mutants("a.cpp", "void f() {\n  work(1);\n  work(1);\n}\n")
    deletions = [m for m in twice if m.kind == "statement-deletion"]
    assert len(deletions) == 2 and deletions[0].key != deletions[1].key


PY = '''\
"""A docstring with == and and."""
def f(a, b):
    if a == b and not b:
        return a + 1
    x = g(a)  # a comment: < >
    while a < 3:
        break
    return x is None
'''


def test_python_operators_and_every_mutant_compiles():
    found = mutagen.python_mutants("m.py", PY)
    got = changes(found)
    for expected in [(3, "relational", "== -> !="), (3, "logical", "and -> or"), (3, "negation", "not removed"),
                     (3, "condition-true", "if ... -> True"), (4, "return-value", "return ... -> return None"),
                     (4, "off-by-one", "1 -> 2"), (5, "statement-deletion", "statement deleted"),
                     (6, "condition-false", "while ... -> False"), (7, "loop-exit", "break -> continue"),
                     (8, "relational", "is -> is not")]:
        assert expected in got, expected
    assert not any(m.line == 1 for m in found), "docstrings are not mutated"
    for m in found:
        compile(m.apply(PY), "m.py", "exec")


def test_the_sample_is_reproducible_and_independent_of_generation_order():
    candidates = mutagen.cpp_mutants("a.cpp", CPP) + mutagen.python_mutants("m.py", PY)
    first = mutagen.sample(candidates, 7, seed=3)
    assert first == mutagen.sample(list(reversed(candidates)), 7, seed=3)
    assert first != mutagen.sample(candidates, 7, seed=4)
    assert len(first) == 7 and len({m.key for m in first}) == 7
    assert first == sorted(first, key=lambda m: (m.file, m.line, m.key)), "grouped by file"
    assert len(mutagen.sample(candidates, None, seed=1)) == len(candidates)


def test_equivalents_need_a_reason(tmp_path):
    good = tmp_path / "eq.toml"
    good.write_text('[[equivalent]]\nkey = "k1"\nreason = "changes nothing observable"\n')
    assert auto_mutants.load_equivalents(good) == {"k1": "changes nothing observable"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[[equivalent]]\nkey = "k2"\nreason = " "\n')
    with pytest.raises(ValueError, match="k2"):
        auto_mutants.load_equivalents(bad)
    twice = tmp_path / "twice.toml"
    twice.write_text('[[equivalent]]\nkey = "k3"\nreason = "one"\n\n'
                     '[[equivalent]]\nkey = "k3"\nreason = "two"\n')
    with pytest.raises(ValueError, match="k3.*twice"):
        auto_mutants.load_equivalents(twice)


def test_the_shipped_equivalents_name_current_mutants_with_reasons():
    table = auto_mutants.load_equivalents()
    keys = {m.key for layer in auto_mutants.LAYERS.values() for p in ROOT.glob(layer)
            for m in mutagen.mutants_of(str(p.relative_to(ROOT)), p.read_text())}
    assert set(table) <= keys, f"stale equivalent keys: {sorted(set(table) - keys)}"


def outcome(verdict, key="k", by=""):
    return auto_mutants.Outcome(key, "f:1", "kind", "c", "a", "b", verdict=verdict, killed_by=by)


def test_kill_rates_with_and_without_equivalents():
    outcomes = ([outcome("killed", f"k{i}", "c++ conformance") for i in range(7)]
                + [outcome("survived", "eq"), outcome("survived", "real"), outcome("stillborn", "s")])
    figures = auto_mutants.figures(outcomes, {"eq": "why", "k0": "a killed mutant is never equivalent"})
    assert (figures["sampled"], figures["killed"], figures["survived"], figures["stillborn"]) == (10, 7, 2, 1)
    assert figures["equivalent"] == 1  # k0 was killed: listing it changes nothing
    assert figures["kill_rate"] == pytest.approx(7 / 9)
    assert figures["kill_rate_without_equivalents"] == pytest.approx(7 / 8)
    assert auto_mutants.figures([], {})["kill_rate"] is None


def test_a_hung_command_and_its_children_are_killed():
    start = time.monotonic()
    status, output = mutants.run_killable(
        ["bash", "-c", "echo started; sleep 60 & wait"], timeout=1)
    assert status is None and "started" in output
    assert time.monotonic() - start < 30


def test_the_command_line_takes_auto_mode_options_only_with_it():
    assert main.main(["--check-args", "--mutants", "auto", "--sample", "5", "--seed", "2",
                      "--mutate", "python"]) == 0
    assert main.main(["--check-args", "--sample", "5"]) == 2
    assert main.main(["--check-args", "--mutants", "auto", "--sample", "0"]) == 2
    assert main.main(["--check-args", "--mutants", "auto", "--impl", "reference,upstream"]) == 2
    assert main.main(["--check-args", "--mutants"]) == 0


# ---- any failure kills ------------------------------------------------------------

INJECT = '''\
import pytest

def pytest_runtest_setup(item):
    raise AssertionError("injected: a mutant that this recommended test sees")
'''


@pytest.mark.parametrize("mutant_run", [False, True])
def test_a_recommended_miss_fails_only_a_mutant_run(tmp_path, mutant_run):
    """A recommended behaviour's failure is a miss (not fatal) when an
    implementation is scored, and a failure when a mutant is judged
    (mutants.ANY_FAILURE_FAILS, which every mutant runner's suite gets)."""
    (tmp_path / "inject_failure.py").write_text(INJECT)
    (tmp_path / "none.toml").write_text("")  # no known failure: the injected one is a failure
    report = tmp_path / "report.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("NR_CONFORMANCE_ANY_FAILURE_FAILS", None)
    if mutant_run:
        env.update(mutants.ANY_FAILURE_FAILS)
    # A recommended behaviour's test, against torch's own registry (no build needed).
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/python/test_edges.py", "-q", "-p", "no:cacheprovider",
         "-p", "inject_failure", "-k", "test_blank_filter_entries_are_refused and disable-dsl_names-",
         "--impl=adapters.upstream:make", f"--expectations={tmp_path / 'none.toml'}",
         f"--conformance-report={report}"],
        cwd=ROOT, env=env, capture_output=True, text=True)
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert rows and all(r["outcome"] == "fail" for r in rows), proc.stdout[-2000:]
    assert catalogue_level(rows[0]["behaviours"]) == {"recommended"}
    if mutant_run:
        assert proc.returncode == 1 and "2 error" in proc.stdout, proc.stdout[-2000:]
        assert "recommended miss" not in proc.stdout
    else:
        assert proc.returncode == 0 and "2 recommended miss" in proc.stdout, proc.stdout[-2000:]


def catalogue_level(ids):
    from conformance.python import catalogue
    entries = catalogue.load()
    return {entries[i].level for i in ids}


# ---- ci/test's mutant sample ---------------------------------------------------------

def test_ci_sample_fails_on_a_regression_only():
    from harness.mutation import ci_mutants
    outcomes = [{"key": "was-killed", "verdict": "survived"}, {"key": "new", "verdict": "survived"},
                {"key": "eq", "verdict": "survived"}, {"key": "k", "verdict": "killed"}]
    regressions, unreviewed = ci_mutants.judge(outcomes, {"was-killed", "eq", "k"}, {"eq"})
    assert [o["key"] for o in regressions] == ["was-killed"]
    assert [o["key"] for o in unreviewed] == ["new"]
    import datetime
    assert ci_mutants.daily_seed(datetime.date(2026, 12, 2)) == 20261202
    from harness.mutation import mutant_records
    killed = mutant_records.read_killed()
    assert killed and all(k.startswith("reference/python/native_registry/") for k in killed), \
        "fixtures/faults/killed_mutants.txt lists the killed Python-layer mutants"
    assert all(not test or test.startswith("conformance/python/test_") and "::" in test
               for test in killed.values()), "a killing test is a node id of the Python suite"


def test_ci_sample_draws_only_todays_killed_mutants_and_the_same_each_seed():
    from harness.mutation import ci_mutants
    rel = "reference/python/native_registry/ordering_env.py"
    today = [m.key for m in mutagen.mutants_of(rel, (ROOT / rel).read_text())]
    gone = f"{rel}|constant|1 -> 0|0000000000|1"  # a line no longer there
    killed = {**{key: "" for key in today[:6]}, gone: ""}
    assert ci_mutants.todays(set(killed)) == set(today[:6])
    drawn = ci_mutants.draw(killed, 4, 20261204)
    assert len(drawn) == 4 and set(drawn) <= set(today[:6])
    assert drawn == ci_mutants.draw(killed, 4, 20261204) and ci_mutants.draw(killed, 99, 1) != []
    assert sorted(ci_mutants.draw(killed, 99, 1)) == sorted(today[:6])


def test_killed_list_round_trips_with_and_without_a_killing_test(tmp_path, monkeypatch):
    from harness.mutation import mutant_records
    monkeypatch.setattr(mutant_records, "KILLED", tmp_path / "killed.txt")
    killed = {"a|k|c|1|1": "conformance/python/test_x.py::test_y[a, b]", "b|k|c|2|1": ""}
    mutant_records.write_killed(killed)
    assert mutant_records.read_killed() == killed
    text = (tmp_path / "killed.txt").read_text()
    assert text.startswith("#") and "b|k|c|2|1\n" in text and "a|k|c|1|1\tconformance/" in text
    outcome = mutant_records.Outcome("k", "w", "kind", "c", "o", "m", verdict="killed",
                                     failing=["<exit 1>", "conformance/python/test_x.py::test_y"])
    assert mutant_records.killing_test(outcome) == "conformance/python/test_x.py::test_y"


def test_resume_keeps_only_verdicts_of_this_source_and_with_the_own_tests_when_asked(tmp_path):
    import dataclasses
    from harness.mutation import mutant_records
    chosen = [mutagen.Mutant("f.py", 1, "k", "c", "a", "b", key) for key in ("k1", "k2", "k3", "k4")]
    rows = [outcome("killed", "k1"), outcome("survived", "k2"), outcome("killed", "k3"),
            outcome("survived", "k4")]
    rows = [dataclasses.replace(o, source="s1") for o in rows[:2]] + [dataclasses.replace(rows[2], source="s0"),
                                                                      dataclasses.replace(rows[3], source="s1",
                                                                                          own_tests="killed")]
    records = tmp_path / "r.jsonl"
    records.write_text("".join(json.dumps(dataclasses.asdict(o)) + "\n" for o in rows))
    assert set(mutant_records.resumed(records, chosen, "s1")) == {"k1", "k2", "k4"}
    # --own-tests: a survivor without the own tests' verdict runs again.
    assert set(mutant_records.resumed(records, chosen, "s1", own_tests=True)) == {"k1", "k4"}
    # With the own tests' own map, so does a mutant no conformance test reached.
    records.write_text("".join(json.dumps(dataclasses.asdict(o)) + "\n" for o in [
        dataclasses.replace(rows[0], verdict="nocoverage"),
        dataclasses.replace(rows[1], verdict="nocoverage", own_tests="nocoverage")]))
    assert set(mutant_records.resumed(records, chosen, "s1", own_tests=True)) == {"k1", "k2"}
    assert set(mutant_records.resumed(records, chosen, "s1", own_tests=True, uncovered_too=True)) == {"k2"}
    assert mutant_records.tree_source() == mutant_records.tree_source()


def test_own_tests_after_keeps_kills_and_owes_the_own_tests_only_what_lived_on_an_unchanged_line(tmp_path):
    """--own-tests-after: an earlier record's verdicts at its own tree. A
    kill is kept; a survivor (and, with the own map, a mutant no conformance
    test reached) meets only the own tests; a mutant whose line changed, or
    whose record has no line digest, or that the record lacks, runs in full.
    Then a later call resumes the carried verdicts by their own tests' tree."""
    import dataclasses
    from harness.mutation import auto_mutants, mutant_records
    at = lambda o, **kw: dataclasses.replace(o, source="old", commit="c0", line_digest="L", **kw)  # noqa: E731
    earlier = [at(outcome("killed", "dead")), at(outcome("survived", "alive")),
               at(outcome("nocoverage", "unreached")), at(outcome("survived", "edited")),
               dataclasses.replace(outcome("survived", "undigested"), source="old"),
               at(outcome("survived", "judged"), own_tests="killed"), at(outcome("killed", "not-chosen"))]
    digests = {key: ("L", "T") for key in ("dead", "alive", "unreached", "undigested", "judged", "fresh")}
    digests["edited"] = ("L2", "T")
    kept, owed = auto_mutants.carried_over(earlier, digests, uncovered_too=False)
    assert set(kept) == {"dead", "unreached", "judged"} and set(owed) == {"alive"}
    assert kept["dead"].reused == "c0" and kept["dead"].source == "old"
    kept, owed = auto_mutants.carried_over(earlier, digests, uncovered_too=True)
    assert set(kept) == {"dead", "judged"} and set(owed) == {"alive", "unreached"}
    # The own tests ran now, at source "new": the verdict keeps its conformance
    # tree and names the own tests' tree, and a resume at "new" keeps it.
    judged = dataclasses.replace(owed["alive"], own_tests="survived", own_commit="c1", own_source="new")
    records = tmp_path / "r.jsonl"
    records.write_text(json.dumps(dataclasses.asdict(judged)) + "\n"
                       + json.dumps(dataclasses.asdict(owed["unreached"])) + "\n")
    chosen = [mutagen.Mutant("f.py", 1, "k", "c", "a", "b", key) for key in ("alive", "unreached")]
    assert set(mutant_records.resumed(records, chosen, "new", own_tests=True)) == {"alive"}
    assert set(mutant_records.resumed(records, chosen, "other", own_tests=True)) == set()


def test_a_seeded_fault_meets_the_tests_of_the_behaviour_it_breaks_first(tmp_path):
    """suites_for: the behaviour's Python tests before the whole Python suite,
    after the C++ suite only where the behaviour is expressed in C++ too; a
    generated mutant (no behaviour) meets the whole suites. The order is
    what is checked; no suite runs."""
    from harness.mutation import mutant_runner
    from harness.mutation import seeded_faults
    target = mutant_runner.Target("faults", [], {})
    ws = mutants.Workspace(tmp_path)
    timeouts = {"python": 1.0, "c++": 1.0}

    def order(mutant):
        return [spent for _, spent, _ in mutant_runner.suites_for(mutant, target, ws, tmp_path, timeouts, {})]

    def fault(file, breaks):
        return seeded_faults.SeededFault(file, "f", breaks, "x", "y")

    assert "cpp" in mutants.behaviour_sides("routing.first-match-wins")
    assert order(fault("reference/src/call_path.cpp", "routing.first-match-wins")) == ["c++", "python-first", "python"]
    python_only = next(b for b, files in mutants._python_references().items()
                       if files and mutants.behaviour_sides(b) == ("python",))
    assert order(fault("reference/src/call_path.cpp", python_only)) == ["python-first", "c++", "python"]
    assert order(fault("reference/python/native_registry/registry.py", python_only)) == ["python-first", "python"]
    generated = mutagen.mutants_of("reference/src/x.cpp", CPP)[0]
    assert order(generated) == ["c++", "python"]


def test_where_the_baseline_named_a_behaviours_tests_a_fault_meets_its_cpp_tests_then_its_python_ones(tmp_path):
    """A baseline's reports name each behaviour's tests (a switched run's):
    a fault of the core meets its behaviour's C++ tests first (then its
    Python tests, then the rest of the C++ suite, then the whole Python
    suite); the Python tests run are the named ones, cheapest first."""
    from harness.mutation import mutant_runner
    from harness.mutation import seeded_faults
    target = mutant_runner.Target("faults", [], {})
    ws = mutants.Workspace(tmp_path)
    baseline = {"behaviour_tests": {"routing.first-match-wins": [("conformance/python/test_routing.py::test_a", 0.1),
                                                                  ("conformance/python/test_routing.py::test_b", 2.0)]},
                "cpp_behaviour_tests": {"routing.first-match-wins": ["Reference/Conformance.FirstMatchWins/reference"]}}
    fault = seeded_faults.SeededFault("reference/src/call_path.cpp", "f", "routing.first-match-wins", "x", "y")
    suites = mutant_runner.suites_for(fault, target, ws, tmp_path, {"python": 1.0, "c++": 1.0}, baseline)
    assert [spent for _, spent, _ in suites] == ["c++-first", "python-first", "c++", "python"]
    ran = []
    original = mutants.python_tests
    mutants.python_tests = lambda out, limit, impl, env, tree, ws, nodeids, test_limits=None: (
        ran.append(nodeids) or ([], ""))
    try:
        suites[1][2]()  # no warm suite for a target that chose no mutant: a fresh pytest of the named tests
    finally:
        mutants.python_tests = original
    assert ran == [["conformance/python/test_routing.py::test_a", "conformance/python/test_routing.py::test_b"]]


@pytest.mark.parametrize("find, replace, line, original, mutated", [
    ("  b = 2;\n", "  b = 3;  // FAULT\n", 3, "  b = 2;", "  b = 3;  // FAULT"),
    # several lines for fewer
    ("  b = 2;\n  c = 3;\n", "  c = 4;\n", 3, "  b = 2;\n  c = 3;", "  c = 4;"),
    # an insertion takes the line before in
    ("  b = 2;\n", "  b = 2;\n  x();\n", 3, "  b = 2;", "  b = 2;\n  x();"),
    # a deletion too
    ("  c = 3;\n", "", 3, "  b = 2;\n  c = 3;", "  b = 2;"),
])
def test_a_seeded_fault_is_a_mutant_of_the_lines_it_changes(find, replace, line, original, mutated):
    from harness.mutation import seeded_faults
    text = "void f() {\n  a = 1;\n  b = 2;\n  c = 3;\n}\n"
    fault = seeded_faults.SeededFault("f.cpp", "name", "some.behaviour", find, replace)
    m = fault.as_mutant(text)
    assert (m.line, m.original, m.mutated, m.key, m.behaviour) == (line, original, mutated, "name", "some.behaviour")
    assert m.apply(text) == fault.apply(text)


def test_each_workspace_keeps_to_the_files_of_its_mutants(tmp_path):
    """Runner.take: a workspace takes the mutants of the file its last one
    changed (one compile each), else the first of a file no other workspace
    is at; a file's last mutants go to whichever workspace is free."""
    from harness.mutation import mutant_runner
    from harness.mutation import seeded_faults
    chosen = [seeded_faults.SeededFault(file, f"{file}{n}", "b", "x", "y")
              for file, n in ("a1", "a2", "a3", "b1", "b2", "c1", "d1")]
    runner = mutant_runner.Runner(chosen, {}, tmp_path / "r.jsonl", {}, {}, {})
    one, two = mutants.Workspace(tmp_path / "one"), mutants.Workspace(tmp_path / "two")
    taken = [(ws, runner.take(ws)[1].key) for ws in (one, two, one, two, one, two, two)]
    assert [key for _, key in taken] == ["a1", "b1", "a2", "b2", "a3", "c1", "d1"]
    assert runner.take(one) is None
    # Nothing of its own file or a free one left: it shares another's file.
    runner = mutant_runner.Runner(chosen[:3], {}, tmp_path / "r.jsonl", {}, {}, {})
    assert [runner.take(ws)[1].key for ws in (one, two, two)] == ["a1", "a2", "a3"]
    # Switched mutants cost no compile: taken in the order given (a --shuffle's).
    runner = mutant_runner.Runner(chosen, {}, tmp_path / "r.jsonl", {}, {}, {})
    runner.switched_keys = {m.key for m in chosen}
    assert [runner.take(ws)[1].key for ws in (one, two, one, two, one, two, two)] == [
        "a1", "a2", "a3", "b1", "b2", "c1", "d1"]
    # A rewritten mutant at the head: a worker keeps to its file among the
    # rewritten ones only; the switched ones behind keep their order.
    mixed = [chosen[k] for k in (0, 3, 5, 1, 6, 2, 4)]  # a1 b1 c1 a2 d1 a3 b2
    runner = mutant_runner.Runner(mixed, {}, tmp_path / "r.jsonl", {}, {}, {})
    runner.switched_keys = {"a1", "c1", "a2", "d1", "a3"}  # b1 and b2 rewritten
    assert [runner.take(ws)[1].key for ws in (one, one, one, one, one, one, one)] == [
        "a1", "b1", "c1", "a2", "d1", "a3", "b2"]
    # A layer that is not built (the Python layer) saves nothing by keeping to
    # a file: every mutant in the order given.
    runner = mutant_runner.Runner(chosen, {}, tmp_path / "r.jsonl", {}, {}, {})
    runner.keep_to_files = False
    assert [runner.take(ws)[1].key for ws in (one, two, one, two, one, two, two)] == [
        "a1", "a2", "a3", "b1", "b2", "c1", "d1"]


def test_the_tests_ci_mutants_names_run_first_in_its_order_and_the_rest_as_collected():
    def collected(first: str) -> list[str]:
        proc = subprocess.run([sys.executable, "-m", "pytest", "conformance/python/test_binding_edges.py",
                               "conformance/python/test_routing.py", "--collect-only", "-q", "-p", "no:cacheprovider"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "NR_CONFORMANCE_RUN_FIRST": first})
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return [line for line in proc.stdout.splitlines() if "::" in line]

    as_collected = collected("")
    late = [t for t in as_collected if "test_routing.py" in t][-2:]
    first = [late[1], late[0]]
    reordered = collected("\n".join([*first, "conformance/python/test_none.py::test_unknown"]))
    assert reordered[:2] == first
    assert reordered[2:] == [t for t in as_collected if t not in first]


def test_the_behaviours_option_runs_only_the_tests_naming_them():
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance/python/test_routing.py", "--collect-only",
                           "-q", "-p", "no:cacheprovider", "--behaviours=routing.first-match-wins"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert collected and all("first_match" in line for line in collected), collected
    bad = subprocess.run([sys.executable, "-m", "pytest", "conformance/python/test_routing.py", "--collect-only",
                          "-q", "-p", "no:cacheprovider", "--behaviours=no.such-behaviour"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "no.such-behaviour" in bad.stdout + bad.stderr


def test_the_baseline_s_reports_name_each_behaviour_s_tests(tmp_path):
    (tmp_path / "conformance.xml").write_text(
        '<testsuites><testsuite name="R/C"><testcase name="A/reference" classname="R/C"><properties>'
        '<property name="behaviour" value="x.one,x.two"/></properties></testcase>'
        '<testcase name="B/reference" classname="R/C"/></testsuite></testsuites>')
    assert mutants.cpp_behaviour_tests(tmp_path / "conformance.xml") == {"x.one": ["R/C.A/reference"],
                                                                         "x.two": ["R/C.A/reference"]}
    (tmp_path / "python.xml").write_text(
        '<testsuites><testsuite><testcase classname="conformance.python.test_a" name="test_slow" time="2.5"/>'
        '<testcase classname="conformance.python.test_a" name="test_quick" time="0.5"/></testsuite></testsuites>')
    (tmp_path / "python.jsonl").write_text(
        '{"nodeid": "conformance/python/test_a.py::test_slow", "behaviours": ["x.one"]}\n'
        '{"nodeid": "conformance/python/test_a.py::test_quick", "behaviours": ["x.one", "x.two"]}\n')
    assert mutants.behaviour_tests(tmp_path) == {
        "x.one": [("conformance/python/test_a.py::test_quick", 0.5), ("conformance/python/test_a.py::test_slow", 2.5)],
        "x.two": [("conformance/python/test_a.py::test_quick", 0.5)]}
    assert mutants.behaviour_seconds(tmp_path) == {"x.one": 3.0, "x.two": 0.5}


def test_with_a_baseline_of_another_source_a_python_kill_stands_only_if_its_test_passes_pristine(tmp_path,
                                                                                                monkeypatch):
    """seeded_faults.confirm_kills: the Python tests that killed faults run
    once on the pristine implementation; one that fails there too kills
    nothing (it joins the baseline's failures) and the faults it killed
    run again; a fault killed by a crash has its behaviour's tests run."""
    from harness.mutation import mutant_runner, seeded_faults
    from harness.mutation.mutant_records import Outcome
    a, b, c = (f"conformance/python/test_x.py::test_{n}" for n in "abc")
    baseline = {"behaviour_tests": {"x.one": [(a, 0.1)], "x.two": [(b, 0.1), (c, 0.2)]},
                "timeouts": {"python": 60.0}}
    faults = [seeded_faults.SeededFault("f.py", key, behaviour, "x", "y")
              for key, behaviour in (("by-a", "x.one"), ("by-b", "x.two"), ("crash", "x.two"), ("cpp", "x.one"))]

    def killed(key, failing, by="python conformance"):
        return Outcome(key, "f.py", "seeded", "", "", "", verdict="killed", killed_by=by, failing=failing)
    outcomes = [killed("by-a", [mutant_runner.junit_name(a), "test_a"]), killed("by-b", [mutant_runner.junit_name(b)]),
                killed("crash", ["<exit -6>"]), killed("cpp", ["Reference/Conformance.T/reference"], "c++ conformance")]
    ran, rerun = [], []
    monkeypatch.setattr(mutants, "pytest_run", lambda parts, out, *rest, **kw: (
        ran.append(sorted(parts[0][:-1])) or ([mutant_runner.junit_name(b)], "")))
    monkeypatch.setattr(mutant_runner, "pristine_env", lambda target, ws, out: {})
    monkeypatch.setattr(mutant_runner, "run_all", lambda chosen, equivalents, records, base, *rest, **kw: (
        rerun.append((sorted(f.key for f in chosen), base["python conformance"], base["deselect"]))
        or [Outcome(f.key, "f.py", "seeded", "", "", "", verdict="survived") for f in chosen]))
    target = mutant_runner.Target("faults", [], {})
    found, confirmed = seeded_faults.confirm_kills(faults, outcomes, baseline, target, mutants.Workspace(tmp_path),
                                                   tmp_path, [], ("", ""))
    assert ran == [[a, b, c]]  # a and b named; the crash's behaviour's tests b and c; no C++ kill
    assert rerun == [(["by-b", "crash"], [mutant_runner.junit_name(b)], [b])]
    assert [o.verdict for o in found] == ["killed", "survived", "survived", "killed"]
    assert confirmed == {a, c}
    # A later run of the same source runs only what no run confirmed yet.
    ran.clear()
    seeded_faults.confirm_kills(faults, outcomes[:1], baseline, target, mutants.Workspace(tmp_path), tmp_path,
                                [], ("", ""), already={a})
    assert ran == []


def test_a_run_ends_when_the_editable_installs_change_under_it(tmp_path, monkeypatch):
    """A new editable install (ci/setup run meanwhile) would make the suites'
    fresh interpreters import it instead of the mutated package: the runner
    stops rather than record verdicts that saw no mutant."""
    from harness import staging
    from harness.mutation import mutant_runner
    builds = [["/a/build"]]
    monkeypatch.setattr(staging, "editable_builds_of_new_interpreters", lambda: list(builds[-1]))
    runner = mutant_runner.Runner([], {}, tmp_path / "r.jsonl", {}, {}, {})
    runner.editable_checked -= 60
    runner.check_editable_installs()  # unchanged: nothing
    builds.append(["/b/build"])
    runner.check_editable_installs()  # looked at less than 20 s ago: not yet
    runner.editable_checked -= 60
    with pytest.raises(RuntimeError, match="editable installs changed during the run"):
        runner.check_editable_installs()


def test_new_interpreters_editable_installs_are_read_from_a_new_interpreter():
    from harness import staging
    # This checkout's own editable install (ci/setup's), as a new interpreter loads it.
    assert staging.editable_builds_of_new_interpreters() == sorted(staging.editable_builds())


def test_a_python_part_is_named_by_its_qualified_name():
    """part_lines: `Class.method` names one method (decorators included), a
    top-level name the whole def or class; other methods stay mutated."""
    text = ("class Stats:\n"              # 1
            "    def __init__(self):\n"   # 2
            "        self.n = 1\n"        # 3
            "\n"                          # 4
            "    @property\n"             # 5
            "    def shown(self):\n"      # 6
            "        return str(self.n)\n"  # 7
            "\n"                          # 8
            "def helper():\n"             # 9
            "    return 2\n")             # 10
    found = mutagen.part_lines("pkg/m.py", text, {"Stats.shown", "helper", "Stats.missing"})
    assert found == {"Stats.shown": {5, 6, 7}, "helper": {9, 10}, "Stats.missing": set()}
    assert mutagen.part_lines("pkg/m.py", text, {"Stats"}) == {"Stats": set(range(1, 8))}


def test_verdicts_carried_into_a_run_take_its_marks_beyond_the_contract():
    """A file named beyond the contract after its verdicts were recorded:
    carried in, they keep their verdict and take this run's mark; a mark
    the run no longer gives is dropped."""
    from harness.mutation.mutant_records import Outcome, marked_anew
    kept = Outcome("k1", "pkg/check.py:3", "constant", "1 -> 0", "x = 1", "x = 0", verdict="killed")
    dropped = Outcome("k2", "pkg/m.py:4", "constant", "1 -> 0", "y = 1", "y = 0", verdict="survived",
                      beyond_contract="old: no longer beyond")
    out = marked_anew({"k1": kept, "k2": dropped}, {"k1": "a tool, not a registry behaviour"})
    assert (out["k1"].verdict, out["k1"].beyond_contract) == ("killed", "a tool, not a registry behaviour")
    assert (out["k2"].verdict, out["k2"].beyond_contract) == ("survived", "")


def test_declarations_of_every_form_are_not_deleted():
    """`Type a, b;`, `Type* const p = ...;` and `unsigned long n;` declare
    as `Type a;` does: deleting one never compiles, so it is no candidate
    (and a region over it runs to its block's end)."""
    text = ("void f() {\n  py::list nodes, graphs;\n  std::vector<int> a{1}, b;\n"
            "  PyThreadState* const mine = current();\n  unsigned long n = 0;\n  g(nodes, graphs, mine, n);\n}\n")
    deleted = {m.line for m in mutagen.cpp_mutants("d.cpp", text) if m.kind == "statement-deletion"}
    assert deleted == {6}
