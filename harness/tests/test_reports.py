"""Tests of what a run reports: the terminal failure list, results.json,
matrix.html, gtest and pytest rows with their messages and sources, Cobertura
from lcov, and the coverage of a Python implementation."""

from __future__ import annotations

import html
import json
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[2]

from conformance.python import catalogue
from harness import matrix, progress, report_html, with_root_on_path
from harness.mutation import mutants
from harness.suite_coverage import coverage_report

BUILD = pathlib.Path(os.environ.get("BUILD_DIR", "build"))
BUILD = BUILD if BUILD.is_absolute() else ROOT / BUILD



def rows_for(cat):
    routing = next(b for b in cat.values() if b.profile == "registry" and "python" in b.sides)
    other = next(b for b in cat.values() if b.profile == "registry" and "python" in b.sides
                 and b.id != routing.id)
    return routing, other, [
        {"test": "test_a", "behaviours": [routing.id], "outcome": "fail", "side": "python",
         "implementation": "mine", "source": "conformance/python/test_routing.py:12",
         "message": "AssertionError: the impl ran although the cond declined\nassert 3 == 2"},
        {"test": "test_b", "behaviours": [other.id], "outcome": "xfail", "side": "python",
         "implementation": "mine", "source": "conformance/python/test_routing.py:40",
         "reason": "mine keys graphs without a namespace"},
    ]


def make_document(cat, rows):
    labels, table = matrix.build(cat, rows, "platform: torch x")
    return report_html.document(cat, rows, labels, table,
                                implementations=[{"label": "mine", "spec": "m.a:make",
                                                  "description": "mine 1.0", "suites": ["python"]}],
                                summary="summary line", problems=[])


def test_the_terminal_lists_each_failure_with_behaviour_implementation_and_message():
    cat = catalogue.load()
    failing, _, rows = rows_for(cat)
    listing = report_html.failure_list(make_document(cat, rows))
    line = next(entry for entry in listing.splitlines() if failing.id in entry)
    assert "FAIL" in line and "python: mine" in line and "test_a" in line
    assert "conformance/python/test_routing.py:12" in line
    assert "AssertionError: the impl ran although the cond declined" in listing
    assert "assert 3 == 2" in listing


def test_results_json_carries_titles_levels_reasons_and_scores():
    cat = catalogue.load()
    failing, known, rows = rows_for(cat)
    doc = json.loads(json.dumps(make_document(cat, rows)))
    entry = next(b for b in doc["behaviours"] if b["id"] == failing.id)
    assert (entry["title"], entry["statement"]) == (failing.title, failing.statement)
    assert entry["level"] in ("required", "recommended")
    assert entry["cells"]["python: mine"] == "FAIL"
    assert entry["results"]["python: mine"][0]["message"].startswith("AssertionError")
    known_entry = next(b for b in doc["behaviours"] if b["id"] == known.id)
    assert known_entry["results"]["python: mine"][0]["reason"] == "mine keys graphs without a namespace"
    assert doc["totals"]["python: mine"]["FAIL"] == 1
    score = doc["score"]["python: mine"]["required"]
    assert score["passed"] == 0 and score["applicable"] >= 2
    assert any(f["behaviour"] == failing.id and f["outcome"] == "fail" for f in doc["failures"])


def test_matrix_html_explains_each_cell(tmp_path):
    cat = catalogue.load()
    failing, known, rows = rows_for(cat)
    page = report_html.page(make_document(cat, rows), ROOT / "results")
    assert html.escape(failing.title) in page and html.escape(known.title) in page
    assert html.escape(failing.statement) in page
    assert "statement</summary>" in page and "<details>" in page
    assert "the impl ran although the cond declined" in page
    assert "mine keys graphs without a namespace" in page
    assert 'href="../conformance/python/test_routing.py#L12"' in page
    assert "score: required" in page and "0/" in page


def test_gtest_rows_carry_the_failure_message_and_the_source(tmp_path):
    xml = tmp_path / "cpp.xml"
    xml.write_text(
        '<testsuites><testsuite name="R"><testcase name="Routes/reference" classname="Reference/C" '
        'file="../conformance/cpp/test_routing.cpp" line="42" status="run" result="completed">'
        '<properties><property name="behaviour" value="routing.first-match-wins"/></properties>'
        '<failure message="Expected equality of these values:&#x0A;  3&#x0A;  2" type=""/></testcase>'
        '<testcase name="Skip/reference" classname="Reference/C" file="/x/y.cpp" line="7" '
        'status="run" result="skipped"><skipped message="unsupported: lacks feature namespaces"/>'
        '</testcase></testsuite></testsuites>')
    failed, skipped = matrix.gtest_rows(xml, "reference")
    assert failed["outcome"] == "fail" and failed["message"].startswith("Expected equality")
    assert failed["source"] == "conformance/cpp/test_routing.cpp:42"
    assert skipped["outcome"] == "unsupported"
    assert skipped["reason"] == "unsupported: lacks feature namespaces"


def test_cobertura_from_lcov(tmp_path):
    info = tmp_path / "a.info"
    info.write_text("TN:\nSF:reference/src/a.cpp\nDA:1,5\nDA:2,0\nDA:3,1\nBRDA:3,0,0,1\nBRDA:3,0,1,-\n"
                    "end_of_record\n")
    root = ET.fromstring(coverage_report.lcov_to_cobertura([info]))
    assert (root.get("lines-covered"), root.get("lines-valid")) == ("2", "3")
    assert (root.get("branches-covered"), root.get("branches-valid")) == ("1", "2")
    line = root.find(".//line[@number='3']")
    assert line.get("condition-coverage") == "50% (1/2)"


def test_line_ranges():
    assert coverage_report.ranges([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"


def test_estimates_of_what_remains():
    assert progress.remaining(0, 4, 0.0) == "estimating"
    assert progress.remaining(1, 4, 30.0) == "about 1 min 30 s left"
    assert progress.remaining(4, 4, 120.0) == "none left"


def test_the_python_suite_reports_the_message_and_source_of_a_failure(tmp_path):
    """A real run of one conformance test against an adapter that gets node
    fields wrong: its report row carries the assertion and the test's line."""
    (tmp_path / "wrong_nodes.py").write_text(
        "from adapters.reference import ReferenceAdapter\n"
        "class WrongNodes(ReferenceAdapter):\n"
        "    name = 'wrong-nodes'\n"
        "    def make_node(self, *fields):\n"
        "        node = super().make_node(*fields)\n"
        "        node.node_id = 'renamed'\n"
        "        return node\n"
        "def make():\n    return WrongNodes()\n")
    report = tmp_path / "rows.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    # One test by node id: a filtered run (-k) would see the expectation files name absent tests.
    subprocess.run([sys.executable, "-m", "pytest",
                    "conformance/python/test_registration.py::test_node_fields_and_defaults", "-q",
                    "-p", "no:cacheprovider",
                    "--impl=wrong_nodes:make", f"--conformance-report={report}"],
                   cwd=ROOT, env=env, capture_output=True, text=True)
    (row,) = [json.loads(line) for line in report.read_text().splitlines()]
    assert row["outcome"] == "fail" and row["implementation"] == "wrong-nodes"
    assert row["message"].startswith("AssertionError")
    assert "renamed" in row["message"]
    source, line = row["source"].rsplit(":", 1)
    assert source == "conformance/python/test_registration.py"
    # The line where the test starts: its first decorator.
    lines = (ROOT / source).read_text().splitlines()[int(line) - 1:int(line) + 1]
    assert lines == ['@behaviour("nodes.fields-and-defaults")', "def test_node_fields_and_defaults(impl):"]


def test_coverage_of_a_python_implementation(tmp_path):
    """--coverage --impl upstream: coverage.py with branches over upstream's
    registry.py by path, one report, Cobertura XML, and what each behaviour pins."""
    assert (BUILD / "build.ninja").exists(), f"this test runs the harness on the build in {BUILD}"
    results = tmp_path / "results"
    # The routing tests alone (pytest reads PYTEST_ADDOPTS): the machinery is
    # what is tested here, and the whole suite under coverage costs minutes.
    env = dict(with_root_on_path(os.environ), PYTEST_ADDOPTS="-k test_routing")
    proc = subprocess.run([sys.executable, "-m", "harness", "--build", str(BUILD),
                           "--results", str(results), "--coverage", "--impl", "upstream"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = results / "coverage"
    summary = json.loads((out / "summary.json").read_text())
    figures = summary["python"]["torch/_native/registry.py"]["the conformance suites"]
    assert 0 < figures["lines"]["covered"] < figures["lines"]["total"]
    assert 0 < figures["branches"]["covered"] < figures["branches"]["total"]
    assert summary["cpp"] == {}  # no C++ implementation was asked for
    pins = json.loads((out / "per-behaviour.json").read_text())
    upstream = pins["implementations"]["upstream"]
    assert "routing.first-match-wins" in upstream
    entry = upstream["routing.first-match-wins"]
    assert entry["lines"] == sum(len(v) for v in entry["by file"].values()) > 0
    unreached = pins["files"]["torch/_native/registry.py"]["reached by no behaviour"]
    assert unreached and not set(unreached) & set(entry["by file"]["torch/_native/registry.py"])
    cobertura = ET.parse(out / "cobertura.xml").getroot()
    assert cobertura.find(".//class[@filename='torch/_native/registry.py']") is not None
    assert (out / "html" / "index.html").exists() and (out / "index.html").exists()
    assert "coverage [2/2" in proc.stdout  # progress steps


def test_untaken_branches_are_grouped_by_section(tmp_path):
    from harness.suite_coverage import coverage_gaps
    source = tmp_path / "a.cpp"
    source.write_text("// ---- graphs ----\nint f(int a) {\n  if (a) return 1;\n  return 0;\n}\n"
                      "// ---- filters ----\nint g(int b) {\n  return b ? 1 : 2;\n}\n")
    info = tmp_path / "c.info"
    info.write_text(f"SF:{source}\nBRDA:3,0,0,1\nBRDA:3,0,1,0\nBRDA:8,0,0,-\nBRDA:8,0,1,-\nend_of_record\n")
    gaps = coverage_gaps.cpp_gaps(info)
    (graphs,) = [k for k in gaps if k.endswith(": graphs")]
    (filters,) = [k for k in gaps if k.endswith(": filters")]
    assert [(line, untaken, total) for _, line, untaken, total in gaps[graphs]] == [(3, 1, 2)]
    assert [(line, untaken, total) for _, line, untaken, total in gaps[filters]] == [(8, 2, 2)]
    lines = coverage_gaps.write(tmp_path, {"C++": gaps})
    assert any("3 untaken branches in 2 areas" in line for line in lines)
    assert "filters" in (tmp_path / "uncovered-branches.html").read_text()


def test_untaken_python_branches_count_the_conformance_contexts_only(tmp_path, monkeypatch):
    import coverage
    from harness.suite_coverage import coverage_gaps
    module = tmp_path / "layer.py"
    module.write_text("def pick(a):\n    if a:\n        return 1\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cov = coverage.Coverage(data_file=str(tmp_path / ".cov"), branch=True, include=[str(module)])
    cov.start()
    import layer
    cov.switch_context("conformance:reference|test_a")
    layer.pick(True)
    cov.switch_context("own-tests:reference")
    layer.pick(False)  # the own tests take the other branch: the conformance suites do not
    cov.stop()
    cov.save()
    gaps = coverage_gaps.python_gaps(cov, [str(module)], "conformance:")
    (area,) = gaps
    assert area.endswith(": pick")
    assert [(line, untaken) for _, line, untaken, _ in gaps[area]] == [(2, 1)]
    assert coverage_gaps.python_gaps(cov, [str(module)], "own-tests:") != {}


def test_the_python_suite_parts_cover_every_file_once_and_join_into_one_report(tmp_path, monkeypatch):
    from harness import suite_parts

    monkeypatch.setattr(suite_parts.os, "cpu_count", lambda: 2)
    parts = suite_parts.python_shards("cpu")
    files = sorted(p for part in parts for p in part)
    expected = sorted(f"conformance/python/{p.name}" for p in (ROOT / "conformance/python").glob("test_*.py"))
    assert len(parts) == 2 and files == expected
    monkeypatch.setattr(suite_parts.os, "cpu_count", lambda: 1)
    assert suite_parts.python_shards("cpu") == [["conformance/python"]]
    assert suite_parts.python_shards("cuda") == [["conformance/python"]]

    whole = (tmp_path / "python.jsonl", tmp_path / "python.xml")
    assert suite_parts.part_files(whole, 1) == [whole]
    each = suite_parts.part_files(whole, 2)
    assert [p.name for part in each for p in part] == ["python.part0.jsonl", "python.part0.xml",
                                                       "python.part1.jsonl", "python.part1.xml"]
    for i, names in enumerate((["a", "b"], ["c"])):
        cases = "".join(f'<testcase classname="m{i}" name="{n}" time="1"/>' for n in names)
        each[i][1].write_text(f'<testsuites><testsuite name="pytest" tests="{len(names)}" time="{len(names)}.5">'
                              f"{cases}</testsuite></testsuites>")
        each[i][0].write_text("".join(f'{{"test": "{n}"}}\n' for n in names))
    suite_parts.join_parts(each, whole)
    root = ET.parse(whole[1]).getroot()
    assert [c.get("name") for c in root.iter("testcase")] == ["a", "b", "c"]
    assert whole[0].read_text().splitlines() == ['{"test": "a"}', '{"test": "b"}', '{"test": "c"}']
    assert not any(p.exists() for part in each for p in part)
    # A mutant's whole run is one process: its time limit derives from the
    # parts' times one after the other, not from the run's wall time.
    assert mutants.serial_seconds(whole[1]) == 2.5 + 1.5


def test_a_run_of_parts_fails_when_one_does_and_times_out_when_one_does():
    from harness import suite_parts

    assert suite_parts.joined_status([0, 0]) == 0
    assert suite_parts.joined_status([0, 1]) == 1
    assert suite_parts.joined_status([5, 0]) == 0, "a part a selection emptied is no failure"
    assert suite_parts.joined_status([5]) == 5, "a whole run that collected nothing is"
    assert suite_parts.joined_status([None, 1]) is None


def test_gcovr_summary_leaves_out_compiler_made_branches(tmp_path, monkeypatch):
    """gcovr_summary() reads the gcov counters of an instrumented build: a
    function whose `if` took one way of two has one decision outcome of two
    covered, and the branches the compiler adds for a call that may throw
    (a std::string built) are not among those counted."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "prog.cpp").write_text(
        "#include <string>\n"
        "int pick(int x) {\n"
        "  std::string s = \"a\" + std::to_string(x);\n"
        "  if (x > 0) return static_cast<int>(s.size());\n"
        "  return 0;\n"
        "}\n"
        "int main() { return pick(1) == 2 ? 0 : 1; }\n")
    build = tmp_path / "build"
    build.mkdir()
    subprocess.run(["g++", "--coverage", "-O0", "-o", str(build / "prog"), str(src / "prog.cpp")],
                   cwd=build, check=True)
    subprocess.run([str(build / "prog")], cwd=build, check=True)
    monkeypatch.setattr(coverage_report, "ROOT", tmp_path)
    monkeypatch.setattr(coverage_report, "BUILD", build)
    monkeypatch.setattr(coverage_report, "MEASURED", ["src/*"])
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    figures = coverage_report.gcovr_summary(out, "conformance")
    assert figures["decisions"]["covered"] == 1, figures
    assert figures["decisions"]["total"] == 2, figures
    # Left to gcov alone, the line building the string carries exception edges.
    raw = subprocess.run(["gcovr", "--root", str(tmp_path), "--object-directory", str(build),
                          "--filter", "src/", "--json-summary", "-"], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert json.loads(raw.stdout)["branch_total"] > figures["branches"]["total"]
    assert (out / "conformance-gcovr.json").exists()
