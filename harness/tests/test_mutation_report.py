"""Tests of the mutant runs' records in the mutation-testing-report-schema
format (harness/mutation/mutation_report.py), of the figures computed from
them alone, and of the shards and the incremental mode: no suite runs."""

from __future__ import annotations

import copy
import dataclasses
import html
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

from harness import main
from harness.mutation import auto_mutants, mutagen, mutant_figures, mutation_report
from harness.mutation.mutant_records import Outcome, figures

SOURCE = """\
def pick(a, b):
    if a == b:
        return 1
    for x in b:
        if x < 10:
            continue
    return compute(a, b)
"""
REL = "pkg/m.py"

VERDICTS = ["killed", "survived", "stillborn", "nocoverage", "killed", "survived"]


def outcomes_of_source(text: str = SOURCE, rel: str = REL) -> list[Outcome]:
    """Every generated mutant of `text`, each given a verdict in turn."""
    found = []
    for i, m in enumerate(mutagen.python_mutants(rel, text)):
        verdict = VERDICTS[i % len(VERDICTS)]
        o = Outcome(m.key, m.where, m.kind, m.change, m.original.strip(), m.mutated.strip(), verdict=verdict,
                    seconds={"total": 2.5}, commit="abc", line_digest=mutation_report.digest(m.original),
                    tests_digest="t1")
        if verdict == "killed":
            o.killed_by = "python conformance"
            o.failing = ["<timeout>"] if i % 4 == 0 else [f"conformance.python.test_a.test_{i}"]
            o.tests_completed = 3
        found.append(o)
    return found


def document(outcomes=None, equivalents=None) -> dict:
    return mutation_report.report(outcomes if outcomes is not None else outcomes_of_source(),
                                  equivalents or {}, {REL: SOURCE}, {"layer": "python"})


def test_a_run_s_records_are_a_valid_report_that_gives_back_every_outcome():
    outcomes = outcomes_of_source()
    survivor = next(o for o in outcomes if o.verdict == "survived")
    doc = document(outcomes, {survivor.key: "changes nothing a caller sees"})
    mutation_report.validate(doc)
    entry = doc["files"][REL]
    assert entry["language"] == "python" and entry["source"] == SOURCE
    assert [m["id"] for m in entry["mutants"]] == [o.key for o in sorted(outcomes, key=lambda o: (
        mutation_report.line_of(o), o.key))]
    by_id = {m["id"]: m for m in entry["mutants"]}
    statuses = {m["status"] for m in entry["mutants"]}
    assert {"Killed", "Timeout", "Survived", "Ignored", "CompileError", "NoCoverage"} <= statuses
    assert by_id[survivor.key]["status"] == "Ignored"
    assert by_id[survivor.key]["statusReason"] == "reviewed equivalent: changes nothing a caller sees"
    killed = next(o for o in outcomes if o.verdict == "killed" and o.failing != ["<timeout>"])
    assert by_id[killed.key]["killedBy"] == killed.failing and by_id[killed.key]["testsCompleted"] == 3
    assert by_id[killed.key]["duration"] == 2500.0
    assert "conformance.python.test_a" in doc["testFiles"]
    # Back: the same outcomes, and the equivalents the report reviewed.
    assert sorted(mutation_report.outcomes_of(doc), key=lambda o: o.key) == sorted(outcomes, key=lambda o: o.key)
    assert mutation_report.equivalents_of(doc) == {survivor.key: "changes nothing a caller sees"}


def test_without_jsonschema_a_report_is_refused_unless_written_unvalidated_on_purpose(tmp_path, monkeypatch,
                                                                                      capsys):
    doc = document()
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # its import now raises ModuleNotFoundError
    monkeypatch.delenv(mutation_report.UNVALIDATED, raising=False)
    with pytest.raises(ModuleNotFoundError):
        mutation_report.write(doc, tmp_path / "r.mutation.json")
    assert not (tmp_path / "r.mutation.json").exists()
    monkeypatch.setenv(mutation_report.UNVALIDATED, "1")  # the lent machine's choice: no pip there
    mutation_report.write(doc, tmp_path / "r.mutation.json")
    assert json.loads((tmp_path / "r.mutation.json").read_text()) == doc
    assert "without validation" in capsys.readouterr().out
    monkeypatch.delitem(sys.modules, "jsonschema")
    mutation_report.validate(json.loads((tmp_path / "r.mutation.json").read_text()))  # reading validates


def test_a_test_named_twice_by_a_suite_run_is_killed_by_once():
    o = Outcome("k", f"{REL}:2", "relational", "== -> !=", "if a == b:", "if a != b:", verdict="killed",
                killed_by="python conformance",
                failing=["conformance.python.test_v.test_refused", "test_refused", "other.test_b"])
    m = mutation_report.mutant_result(o, {}, "    if a == b:")
    assert m["killedBy"] == ["conformance.python.test_v.test_refused", "other.test_b"]
    assert mutation_report.killed_by(["<timeout>"]) == ["<timeout>"]


def test_a_location_is_the_changed_token_at_its_line_and_column():
    doc = document()
    lines = SOURCE.split("\n")
    for m in doc["files"][REL]["mutants"]:
        start, end = m["location"]["start"], m["location"]["end"]
        assert start["line"] == end["line"]
        line = lines[start["line"] - 1]
        mutated = line[:start["column"] - 1] + m["replacement"] + line[end["column"] - 1:]
        o = next(o for o in outcomes_of_source() if o.key == m["id"])
        assert mutated.strip() == o.mutated
    eq = next(m for m in doc["files"][REL]["mutants"] if m["description"] == "== -> !=")
    assert eq["location"]["start"] == {"line": 2, "column": 10} and eq["replacement"] == "!="
    assert eq["location"]["end"]["column"] == 12


@pytest.mark.parametrize("original,mutated,changed,replacement", [
    ("if a == b:", "if a != b:", "==", "!="),
    ("if x < 10:", "if x <= 10:", "<", "<="),
    ("return f(12)", "return f(13)", "12", "13"),
    ("return x", "return None", "x", "None"),
    ("f(a, b)", "f(b, a)", "a, b", "b, a"),
])
def test_the_span_is_whole_tokens(original, mutated, changed, replacement):
    start, end, found = mutation_report.span(original, mutated)
    assert (original[start:end], found) == (changed, replacement)
    assert original[:start] + found + original[end:] == mutated


def test_a_report_breaking_the_schema_or_repeating_an_id_is_refused_naming_the_place():
    doc = document()
    bad = copy.deepcopy(doc)
    bad["files"][REL]["mutants"][0]["status"] = "Dead"
    with pytest.raises(ValueError, match=r"files/pkg/m.py/mutants/0/status.*'Dead'"):
        mutation_report.validate(bad)
    bad = copy.deepcopy(doc)
    bad["files"][REL]["mutants"][1]["location"]["start"]["column"] = 0
    with pytest.raises(ValueError, match="column"):
        mutation_report.validate(bad)
    bad = copy.deepcopy(doc)
    twin = copy.deepcopy(bad["files"][REL]["mutants"][0])
    bad["files"]["other.py"] = {"language": "python", "source": "", "mutants": [twin]}
    with pytest.raises(ValueError, match="twice"):
        mutation_report.validate(bad)


def test_older_records_load_as_the_report_does(tmp_path):
    outcomes = outcomes_of_source()
    lines = tmp_path / "population-python.jsonl"
    lines.write_text("".join(json.dumps(dataclasses.asdict(o)) + "\n" for o in outcomes))
    # An older line has none of today's fields: they default.
    old = {k: v for k, v in dataclasses.asdict(outcomes[0]).items()
           if k not in ("covered_by", "tests_completed", "line_digest", "tests_digest", "reused")}
    older = tmp_path / "older.jsonl"
    older.write_text(json.dumps(old) + "\n")
    assert mutation_report.load(older)[0].key == outcomes[0].key
    summary = tmp_path / "auto-python.json"
    summary.write_text(json.dumps({"figures": {}, "mutants": [dataclasses.asdict(o) for o in outcomes]}))
    report = tmp_path / "auto-python.mutation.json"
    mutation_report.write(document(outcomes), report)
    key = lambda o: o.key  # noqa: E731
    assert (sorted(mutation_report.load(lines), key=key) == sorted(mutation_report.load(summary), key=key)
            == sorted(mutation_report.load(report), key=key))


def test_shards_split_deterministically_and_their_reports_merge_to_the_whole():
    chosen = mutagen.python_mutants(REL, SOURCE)
    shards = [auto_mutants.in_shard(chosen, k, 3) for k in (1, 2, 3)]
    assert sorted(m.key for s in shards for m in s) == sorted(m.key for m in chosen)
    assert all(s for s in shards)  # a split, not everything in one
    assert auto_mutants.in_shard(list(reversed(chosen)), 2, 3) == list(reversed(shards[1]))
    outcomes = {o.key: o for o in outcomes_of_source()}
    parts = [mutation_report.report([outcomes[m.key] for m in s], {}, {REL: SOURCE}) for s in shards]
    merged = mutation_report.merge(parts)
    assert merged["files"][REL]["mutants"] == document()["files"][REL]["mutants"]
    assert mutation_report.merge([parts[0], parts[0]])["files"] == parts[0]["files"]  # a shard twice
    clash = copy.deepcopy(parts[0])
    clash["files"][REL]["mutants"][0]["status"] = "Survived" if parts[0]["files"][REL]["mutants"][0][
        "status"] != "Survived" else "Killed"
    with pytest.raises(ValueError, match="cannot merge: mutant"):
        mutation_report.merge([parts[0], clash])
    other_tree = mutation_report.report([], {}, {REL: SOURCE + "# edited\n"})
    with pytest.raises(ValueError, match="another text"):
        mutation_report.merge([parts[0], other_tree])


def test_the_incremental_mode_keeps_a_verdict_only_while_line_and_tests_are_unchanged():
    earlier = outcomes_of_source()
    chosen = mutagen.python_mutants(REL, SOURCE)
    digests = {m.key: (mutation_report.digest(m.original), "t1") for m in chosen}
    kept = auto_mutants.reusable(earlier, digests, own_tests=False)
    assert set(kept) == {o.key for o in earlier} and all(o.reused == "abc" for o in kept.values())
    # The tests' sources changed: nothing is kept but what did not compile
    # (these kills name no failing_digest).
    kept = auto_mutants.reusable(earlier, {k: (line, "t2") for k, (line, _) in digests.items()}, False)
    assert kept and {o.verdict for o in kept.values()} == {"stillborn"}
    # One line re-indented (same key: the key strips the line): that mutant runs again.
    moved = next(iter(digests))
    changed = {**digests, moved: (mutation_report.digest("    " + "x"), "t1")}
    assert moved not in auto_mutants.reusable(earlier, changed, False)
    # --own-tests: a survivor the own tests did not judge runs again.
    assert not any(o.verdict == "survived" for o in auto_mutants.reusable(earlier, digests, True).values())


def test_a_verdict_depends_on_its_tests_own_text_their_files_helpers_and_the_suites_machinery():
    from harness.mutation import reached_map

    def digest(tests, edited=None):
        edited = edited or {}

        def read(rel):
            text = (ROOT / rel).read_text()
            return edited[rel](text) if rel in edited else text
        return reached_map.tests_digest(tests, read)

    cpp_file = "conformance/cpp/test_call_discipline.cpp"
    outside, defined = reached_map.split_tests(cpp_file, (ROOT / cpp_file).read_text())
    test, other = sorted(defined)[:2]
    cpp = [f"gtest:Reference/Conformance.{test}/reference"]
    base = digest(cpp)
    def edit_body(text):  # one statement more at the end of a test's body
        return text[:-1] + "  (void)0;\n}"
    assert digest(cpp, {cpp_file: lambda t: t.replace(defined[other], edit_body(defined[other]))}) == base
    assert digest(cpp, {cpp_file: lambda t: t.replace(defined[test], edit_body(defined[test]))}) != base
    # What the file holds besides its tests, between them included.
    assert digest(cpp, {cpp_file: lambda t: t.replace(defined[other], defined[other] + "\n// x")}) != base
    assert digest(cpp, {cpp_file: lambda t: t.replace("namespace conformance {", "namespace conformance {  // x", 1)}) != base
    assert digest(cpp, {"conformance/cpp/suite.h": lambda t: t + "// edited\n"}) != base
    assert digest(cpp, {"conformance/cpp/test_routing.cpp": lambda t: t + "// edited\n"}) == base
    assert digest(cpp, {"conformance/python/conftest.py": lambda t: t + "# edited\n"}) == base
    # A GoogleTest test no file defines: every C++ test file counts.
    unknown = ["gtest:Reference/Conformance.NoSuchTest/reference"]
    assert digest(unknown, {"conformance/cpp/test_routing.cpp": lambda t: t + "// x\n"}) != digest(unknown)

    py_file = "conformance/python/test_robustness.py"
    _, py_defined = reached_map.split_tests(py_file, (ROOT / py_file).read_text())
    py_test, py_other = sorted(py_defined)[:2]
    python = [f"{py_file}::{py_test}[a-parameter]"]
    base = digest(python)
    def edit_function(text):  # one statement more at the end of a test function
        return text + "    assert True\n"
    assert digest(python, {py_file: lambda t: t.replace(py_defined[py_other], edit_function(py_defined[py_other]))}) == base
    assert digest(python, {py_file: lambda t: t.replace(py_defined[py_test], edit_function(py_defined[py_test]))}) != base
    assert digest(python, {py_file: lambda t: t + "\nHELPER = 1\n"}) != base
    for machinery in ("conformance/python/conftest.py", "conformance/python/adapters/reference.py",
                      "fixtures/python/torch_fixtures.py"):
        assert digest(python, {machinery: lambda t: t + "# x\n"}) != base
    for not_machinery in ("conformance/python/adapters/upstream.py", "conformance/python/check.py",
                          "conformance/cpp/suite.h", "conformance/python/test_observe.py"):
        assert digest(python, {not_machinery: lambda t: t + "# x\n"}) == base


def test_a_kill_is_kept_while_the_tests_that_killed_it_are_unchanged():
    from harness.mutation import mutant_runner
    chosen = mutagen.python_mutants(REL, SOURCE)
    m = chosen[0]
    killed = Outcome(m.key, m.where, m.kind, m.change, m.original, m.mutated, verdict="killed",
                     killed_by="python conformance", failing=["conformance/python/test_observe.py::test_x"],
                     commit="abc", line_digest=mutation_report.digest(m.original), tests_digest="t1")
    killed.failing_digest = mutant_runner.killing_digest(killed)
    assert killed.failing_digest
    other_tests = {m.key: (killed.line_digest, "t2")}  # another test that reaches it changed
    assert m.key in auto_mutants.reusable([killed], other_tests, False)
    assert auto_mutants.reusable([dataclasses.replace(killed, failing_digest="stale")], other_tests, False) == {}
    assert auto_mutants.reusable([killed], {m.key: ("another line", "t1")}, False) == {}
    # A crash names no test: the kill is kept only while every test that reaches it is unchanged.
    crashed = dataclasses.replace(killed, failing=["<crashed: exit -11>"])
    assert mutant_runner.killing_digest(crashed) == ""
    assert auto_mutants.reusable([dataclasses.replace(crashed, failing_digest="")], other_tests, False) == {}
    # A mutant that did not compile is kept while its line is unchanged.
    stillborn = dataclasses.replace(killed, verdict="stillborn", failing=[], failing_digest="")
    assert m.key in auto_mutants.reusable([stillborn], other_tests, False)
    assert auto_mutants.reusable([stillborn], {m.key: ("another line", "t1")}, False) == {}
    # A survivor is kept only while every test that reaches it is unchanged.
    survived = dataclasses.replace(killed, verdict="survived", failing=[], failing_digest="")
    assert auto_mutants.reusable([survived], other_tests, False) == {}
    assert m.key in auto_mutants.reusable([survived], {m.key: (killed.line_digest, "t1")}, False)


def test_a_reviewed_equivalent_is_recorded_as_one_without_running_it():
    chosen = mutagen.python_mutants(REL, SOURCE)
    reviewed = chosen[0]
    equivalents = {reviewed.key: "changes nothing anyone sees"}
    unrun = auto_mutants.reviewed_unrun(chosen, equivalents, ("abc", "src"))
    assert set(unrun) == {reviewed.key}  # the others run
    o = unrun[reviewed.key]
    assert (o.verdict, o.tests_completed, o.commit, o.source) == ("survived", 0, "abc", "src")
    assert "not run" in o.output_tail and "changes nothing anyone sees" in o.output_tail
    # Counted as an equivalent, shown as Ignored with its reason.
    assert figures([o], equivalents)["equivalent"] == 1
    assert mutation_report.status_of(o, equivalents) == ("Ignored", "reviewed equivalent: changes nothing anyone sees")
    # An edit of its line changes its key: the review no longer covers it, and it runs.
    assert reviewed.where == f"{REL}:2"
    edited = mutagen.python_mutants(REL, SOURCE.replace("if a == b:", "if a == b or a is None:"))
    assert auto_mutants.reviewed_unrun(edited, equivalents, ("abc", "src")) == {}


def test_files_needing_torch_native_are_left_out_only_where_torch_lacks_it(monkeypatch):
    real_host_lacks = auto_mutants.host_lacks
    monkeypatch.setattr(auto_mutants, "host_lacks", lambda module: module == "torch._native")
    lacking = auto_mutants.left_out_on_this_host()
    assert set(lacking) == set(auto_mutants.NEEDS_TORCH_NATIVE) == {"reference/python/native_registry/takeover.py"}
    why = lacking["reference/python/native_registry/takeover.py"]
    assert "no torch._native" in why and "--only reference/python/native_registry/takeover.py" in why
    monkeypatch.setattr(auto_mutants, "host_lacks", lambda module: False)
    assert auto_mutants.left_out_on_this_host() == {}
    # The real question, asked of this host's torch: a missing parent package is "lacks" too.
    assert real_host_lacks("no_such_package_here.sub") is True
    assert real_host_lacks("json") is False


def test_only_takes_keys_places_and_whole_files(tmp_path):
    chosen = mutagen.python_mutants(REL, SOURCE)
    listed = tmp_path / "keys.txt"
    listed.write_text(f"{chosen[0].key}\n{REL}:5\n")
    only = auto_mutants.chosen_only(f"@{listed}")
    assert only == {chosen[0].key, f"{REL}:5"}
    assert auto_mutants.chosen_only(f"{REL},{chosen[1].key}") == {REL, chosen[1].key}
    # A file names every mutant of it; a place, those of its line; a name matching none is told.
    assert auto_mutants.named_by(chosen, {REL}) == (chosen, set())
    on_line_5 = [m for m in chosen if m.where == f"{REL}:5"]
    assert on_line_5 and auto_mutants.named_by(chosen, {f"{REL}:5", "pkg/other.py"}) == (on_line_5, {"pkg/other.py"})


def test_the_html_view_shows_each_mutant_at_its_line(tmp_path):
    doc = document()
    pages = mutation_report.write_html(doc, tmp_path / "html")
    page = (tmp_path / "html" / mutation_report.page_name(REL)).read_text()
    assert pages[0].name == "index.html" and mutation_report.page_name(REL) in pages[0].read_text()
    rows = page.split("<tr ")[1:]
    assert len(rows) == len(SOURCE.split("\n"))
    for m in doc["files"][REL]["mutants"]:
        row = rows[m["location"]["start"]["line"] - 1]
        assert f"id='{html.escape(m['id'])}'" in row and f"<b>{m['status']}</b>" in row


def test_figures_come_from_the_records_alone(tmp_path, capsys):
    outcomes = outcomes_of_source()
    report = tmp_path / "r.mutation.json"
    mutation_report.write(document(outcomes), report)
    assert mutant_figures.report_figures([report]) == 0
    table = capsys.readouterr().out.splitlines()
    header, total = table[0].split(" | "), dict(zip(table[0].split(" | "), table[-1].split(" | ")))
    assert "no coverage" in header
    verdicts = [o.verdict for o in outcomes]
    assert int(total["killed"]) == verdicts.count("killed")
    assert int(total["no coverage"]) == verdicts.count("nocoverage")
    # Not covered counts as not killed.
    real = verdicts.count("killed") + verdicts.count("survived") + verdicts.count("nocoverage")
    assert total["conformance"] == f"{100 * verdicts.count('killed') / real:.1f} %"


def test_the_own_tests_figure_counts_their_kills_of_mutants_no_conformance_test_reached(tmp_path, capsys):
    outcomes = [o for o in outcomes_of_source() if o.verdict in ("killed", "nocoverage", "survived")][:6]
    kinds = [o.verdict for o in outcomes]
    uncovered = [o for o in outcomes if o.verdict == "nocoverage"]
    survivors = [o for o in outcomes if o.verdict == "survived"]
    assert uncovered and survivors
    uncovered[0].own_tests, uncovered[0].own_failing = "killed", ["reference/python/tests/test_a.py::test_b"]
    survivors[0].own_tests = "killed"
    report = tmp_path / "r.mutation.json"
    mutation_report.write(document(outcomes), report)
    assert mutant_figures.report_figures([report]) == 0
    table = capsys.readouterr().out.splitlines()
    total = dict(zip(table[0].split(" | "), table[-1].split(" | ")))
    real = len(outcomes)
    assert total["killed by own tests"] == "2" and total["no coverage"] == str(kinds.count("nocoverage"))
    assert total["conformance"] == f"{100 * kinds.count('killed') / real:.1f} %"
    assert total["with own tests"] == f"{100 * (kinds.count('killed') + 2) / real:.1f} %"
    assert total["survived"] == str(kinds.count("survived") - 1)


def test_mutants_beyond_the_contract_count_in_the_own_tests_figure_only(tmp_path, capsys):
    """A mutant of a file or part no conformance test can reach by design
    (Outcome.beyond_contract, mutated for --own-tests) is left out of the
    conformance columns and counted, killed or not, in "with own tests"."""
    outcomes = [o for o in outcomes_of_source() if o.verdict in ("killed", "survived")][:4]
    beyond = [dataclasses.replace(o, key=o.key + "-b", verdict="nocoverage", beyond_contract="beyond upstream",
                                  own_tests=own)
              for o, own in zip(outcomes_of_source()[:3], ("killed", "killed", "survived"))]
    report = tmp_path / "r.mutation.json"
    mutation_report.write(document(outcomes + beyond), report)
    assert mutant_figures.report_figures([report]) == 0
    table = capsys.readouterr().out.splitlines()
    total = dict(zip(table[0].split(" | "), table[-1].split(" | ")))
    kills = sum(o.verdict == "killed" for o in outcomes)
    assert total["beyond the contract"] == "3"
    assert total["conformance"] == f"{100 * kills / len(outcomes):.1f} %"
    assert total["with own tests"] == f"{100 * (kills + 2) / (len(outcomes) + 3):.1f} %"
    assert total["killed by own tests"] == "2"


def test_with_own_tests_the_parts_left_out_are_mutated_and_marked(tmp_path, monkeypatch):
    """generate(): a part NOT_MUTATED_PARTS leaves out is dropped from the
    conformance population; with beyond_too (--own-tests) its mutants are kept
    and marked with why, as is every mutant of a file in beyond_files."""
    from harness.mutation.mutant_runner import Target
    (tmp_path / "m.py").write_text(SOURCE + "\n\ndef extra(a):\n    return a + 1\n")
    (tmp_path / "n.py").write_text("def g(x):\n    return x - 1\n")
    monkeypatch.setitem(auto_mutants.NOT_MUTATED_PARTS, "pkg/m.py", {"extra": "beyond upstream"})
    place = {"pkg/m.py": tmp_path / "m.py", "pkg/n.py": tmp_path / "n.py"}
    plain, left_out = auto_mutants.generate(Target("python", list(place), place))
    assert left_out["pkg/m.py: extra"][0] > 0 and all(m.line < 9 for m in plain if m.file == "pkg/m.py")
    target = Target("python", list(place), place, beyond_files={"pkg/n.py": "a file beyond"})
    every, _ = auto_mutants.generate(target, beyond_too=True)
    marked = {m.key: m for m in every if m.key in target.beyond_contract}
    assert len(every) == len(plain) + left_out["pkg/m.py: extra"][0]
    assert {m.file for m in marked.values()} == {"pkg/m.py", "pkg/n.py"}
    assert all(target.beyond_contract[k].startswith("extra: ") for k, m in marked.items() if m.file == "pkg/m.py")
    assert not any(k in target.beyond_contract for k in {m.key for m in plain if m.file == "pkg/m.py"})
    # Every worker's target (a copy of the same files) marks the same mutants.
    workers = [Target("python", list(place), place, beyond_files={"pkg/n.py": "a file beyond"}) for _ in range(3)]
    auto_mutants.generate_for(workers, beyond_too=True)
    assert all(w.beyond_contract == target.beyond_contract for w in workers)


def test_the_command_line_converts_merges_and_validates(tmp_path):
    outcomes = [dataclasses.replace(o, where=o.where.replace(REL, "harness/mutation/mutagen_core.py"))
                for o in outcomes_of_source()[:3]]
    lines = tmp_path / "old.jsonl"
    lines.write_text("".join(json.dumps(dataclasses.asdict(o)) + "\n" for o in outcomes))
    run = lambda *a: subprocess.run([sys.executable, "-m", "harness.mutation.mutation_report", *map(str, a)],  # noqa: E731
                                    cwd=ROOT, capture_output=True, text=True)
    done = run("convert", lines, "-o", tmp_path / "new.json", "--html", tmp_path / "html")
    assert done.returncode == 0, done.stderr
    assert run("validate", tmp_path / "new.json").returncode == 0
    assert (tmp_path / "html" / "harness__mutation__mutagen_core.py.html").exists()
    assert run("merge", tmp_path / "new.json", tmp_path / "new.json", "-o", tmp_path / "m.json").returncode == 0
    refused = run("merge", lines, "-o", tmp_path / "x.json")
    assert refused.returncode == 2 and "not a mutation-testing report" in refused.stderr
    broken = json.loads((tmp_path / "new.json").read_text())
    broken["thresholds"]["high"] = 101
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    refused = run("validate", tmp_path / "broken.json")
    assert refused.returncode == 2 and "thresholds/high" in refused.stderr


def test_shard_and_incremental_go_with_auto_mode_and_a_well_formed_shard(tmp_path):
    assert main.main(["--check-args", "--mutants", "auto", "--mutate", "python", "--shard", "2/4"]) == 0
    for bad in ("0/4", "5/4", "2", "a/b"):
        assert main.main(["--check-args", "--mutants", "auto", "--shard", bad]) == 2
    assert main.main(["--check-args", "--shard", "1/2"]) == 2
    assert main.main(["--check-args", "--mutants", "auto", "--incremental", str(tmp_path / "none.json")]) == 2


def test_ci_s_sample_is_judged_from_the_report_and_runs_switched(tmp_path, monkeypatch, capsys):
    from harness.mutation import ci_mutants
    outcomes = outcomes_of_source()
    survivor = next(o for o in outcomes if o.verdict == "survived")
    killer = "conformance/python/test_routing.py::test_x"
    started = []

    class Run:  # the harness run ci_mutants starts: it writes the report
        def __init__(self, cmd, **kwargs):
            started.append((cmd, kwargs["env"]))
            results = pathlib.Path(cmd[cmd.index("--results") + 1])
            mutation_report.write(mutation_report.report(outcomes, {}, {REL: SOURCE}, {"chosen": 9}),
                                  results / "mutants" / "auto-python.mutation.json")

        def wait(self, timeout=None):
            return 1

    monkeypatch.setattr(ci_mutants.subprocess, "Popen", Run)
    monkeypatch.setattr(ci_mutants, "todays", lambda keys: keys)  # the outcomes' keys stand for today's
    # A sample from the killed keys: those run (--only), their killing tests first.
    monkeypatch.setattr(ci_mutants.mutant_records, "read_killed", lambda: {"other-key": killer})
    assert ci_mutants.main(["--build", str(tmp_path), "--results", str(tmp_path / "r")]) == 0
    cmd, env = started[0]
    assert "--switch" in cmd and cmd[cmd.index("--only") + 1] == f"@{tmp_path / 'r' / 'sample-keys.txt'}"
    assert (tmp_path / "r" / "sample-keys.txt").read_text() == "other-key\n"
    assert env[ci_mutants.RUN_FIRST] == killer
    said = capsys.readouterr().out
    verdicts = [o.verdict for o in outcomes]
    assert (f"{len(outcomes)} of 9 run: {verdicts.count('killed')} killed, {verdicts.count('survived')} survived"
            in said and "unreviewed survivor" in said)
    monkeypatch.setattr(ci_mutants.mutant_records, "read_killed", lambda: {survivor.key: ""})
    assert ci_mutants.main(["--build", str(tmp_path), "--results", str(tmp_path / "r")]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    # Nothing listed is among today's mutants: nothing runs, nothing fails.
    monkeypatch.setattr(ci_mutants, "todays", lambda keys: set())
    assert ci_mutants.main(["--build", str(tmp_path), "--results", str(tmp_path / "r")]) == 0
    assert len(started) == 2 and "nothing to judge" in capsys.readouterr().out


def test_standing_says_which_verdicts_an_incremental_run_would_keep(tmp_path, capsys):
    from harness.mutation import mutant_runner, reached_map
    rel = "reference/src/stats.cpp"
    chosen = mutagen.mutants_of(rel, (ROOT / rel).read_text())[:2]
    gtest = "gtest:Reference/Conformance.TheCoverageCheckIsAskedOncePerCallBeforeEveryCond/reference"
    reach = reached_map.ReachedMap(reached={gtest: [0, 1]}, outside=[], durations={gtest: 0.1},
                                   ids={m.key: i for i, m in enumerate(chosen)})
    reach.save(tmp_path / "reached.json")
    kept_kill, stale_kill = (Outcome(m.key, m.where, m.kind, m.change, m.original, m.mutated, verdict="killed",
                                     killed_by="c++ conformance", failing=[gtest], commit="abc",
                                     line_digest=mutation_report.digest(m.original), tests_digest="old")
                             for m in chosen)
    kept_kill.failing_digest = mutant_runner.killing_digest(kept_kill)
    stale_kill.failing_digest = "another test file"
    record = tmp_path / "record.jsonl"
    record.write_text("".join(json.dumps(dataclasses.asdict(o)) + "\n" for o in (kept_kill, stale_kill)))
    assert mutant_figures.standing(record, tmp_path / "reached.json") == 0
    out = capsys.readouterr().out
    assert "1 of the 2 verdicts" in out and f"{rel}: 1" in out
