"""Tests of the harness itself: the command line (bad --impl forms, help
without a build, labels, paths), the errors-first check, and the contents of
the reports (terminal failure list, matrix.html, results.json, Cobertura)."""

from __future__ import annotations

import html
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness"))
sys.path.insert(0, str(ROOT / "conformance" / "python"))

import catalogue  # noqa: E402
import coverage_report  # noqa: E402
import main  # noqa: E402
import matrix  # noqa: E402
import preflight  # noqa: E402
import progress  # noqa: E402
import report_html  # noqa: E402

BUILD = pathlib.Path(os.environ.get("BUILD_DIR", "build"))
BUILD = BUILD if BUILD.is_absolute() else ROOT / BUILD


# ---- --impl forms -------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("nonexistent", "not of the form module:factory (no colon)"),
    ("mypkg.adapter:", "'' is not a Python name"),
    (":make", "'' is not a Python module path"),
    ("my pkg:make", "'my pkg' is not a Python module path"),
    ("mypkg..adapter:make", "is not a Python module path"),
    ("reference,adapters.reference:make", "names one implementation twice"),
    (",", "names no implementation"),
])
def test_bad_impl_forms_are_refused_with_the_reason(text, expected):
    with pytest.raises(main.UsageError) as info:
        main.parse_impls(text)
    assert expected in str(info.value)


def test_shipped_names_and_their_full_specs_are_the_same_implementation():
    (by_name,) = main.parse_impls("reference")
    (by_spec,) = main.parse_impls("adapters.reference:make")
    assert (by_name.python, by_name.cpp) == (by_spec.python, by_spec.cpp) == (
        "adapters.reference:make", "conformance/cpp/conformance_reference")


def test_no_name_runs_another_implementations_cpp_suite():
    # Labels used to come from the module's last segment: these ran the reference's C++ suite.
    impls = main.parse_impls("adapters.reference:nope,mypkg.reference:make,upstream")
    assert [i.cpp for i in impls] == [None, None, None]


def test_a_bad_impl_fails_in_a_second_before_setup_or_build(tmp_path):
    start = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "harness" / "run"), "--impl", "nonexistent"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--impl 'nonexistent'" in proc.stderr and "module:factory" in proc.stderr
    assert "ci/setup" not in proc.stdout + proc.stderr and "meson" not in proc.stdout
    assert time.monotonic() - start < 5


# ---- labels ---------------------------------------------------------------------


def test_labels_are_the_adapters_own_names():
    impls = main.parse_impls("reference,mypkg.adapter:make")
    main.assign_labels(impls, {"adapters.reference:make": "reference", "mypkg.adapter:make": "mine"})
    assert [i.label for i in impls] == ["reference", "mine"]


def test_adapters_sharing_a_name_are_labelled_by_their_full_path():
    impls = main.parse_impls("a.adapter:make,b.adapter:make,upstream")
    main.assign_labels(impls, {"a.adapter:make": "adapter", "b.adapter:make": "adapter",
                               "adapters.upstream:make": "upstream"})
    assert [i.label for i in impls] == ["a.adapter:make", "b.adapter:make", "upstream"]
    # ... and their logs and reports do not overwrite each other.
    assert len({i.file_stem for i in impls}) == 3


# ---- loading adapters: the real exception and the fix -----------------------------


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    pkg = tmp_path / "fakeimpl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "adapter.py").write_text(
        "class A:\n    name = 'fake'\n    description = 'a fake'\n    features = frozenset()\n"
        "def make():\n    return A()\n"
        "def broken():\n    raise RuntimeError('no device found')\n"
        "def nameless():\n    return object()\n")
    (pkg / "needs_dep.py").write_text("import dependency_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.startswith("fakeimpl")]:
        del sys.modules[name]


def test_a_package_not_on_the_path_names_the_module_and_the_fix():
    found = preflight.check_adapter("mypkg_not_there.adapter:make")
    assert not found["ok"]
    assert found["error"] == "ModuleNotFoundError: No module named 'mypkg_not_there'"
    assert "import mypkg_not_there.adapter" in found["tried"]
    assert "PYTHONPATH" in found["fix"]


def test_a_missing_dependency_of_the_adapter_is_told_apart(fake_package):
    found = preflight.check_adapter("fakeimpl.needs_dep:make")
    assert "dependency_that_is_not_installed" in found["error"]
    assert "install it" in found["fix"] and "PYTHONPATH" not in found["fix"]


def test_a_missing_factory_lists_what_the_module_has(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:nope")
    assert not found["ok"] and "has no callable 'nope'" in found["error"]
    assert "make" in found["fix"] and "broken" in found["fix"]


def test_a_raising_factory_reports_its_exception(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:broken")
    assert found["error"] == "RuntimeError: no device found"
    assert "adapter.py" in found["where"]


def test_an_adapter_without_a_name_is_refused(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:nameless")
    assert not found["ok"] and "no `name`" in found["error"]


def test_a_good_adapter_gives_its_name(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:make")
    assert found["ok"] and found["name"] == "fake"


def test_nothing_runs_when_an_implementation_cannot_load(tmp_path):
    assert (BUILD / "build.ninja").exists(), f"this test runs the harness on the build in {BUILD}"
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, str(ROOT / "harness" / "main.py"), "--build", str(BUILD),
                           "--results", str(results), "--impl", "reference,mypkg.adapter:make"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "cannot load implementation 'mypkg.adapter:make'" in proc.stderr
    assert "ModuleNotFoundError: No module named 'mypkg'" in proc.stderr
    assert "fix: put your package on PYTHONPATH" in proc.stderr
    assert "nothing was run" in proc.stderr
    assert not list(results.glob("*.log")) and not list(results.glob("*.xml"))


# ---- --help -------------------------------------------------------------------------


def test_help_answers_at_once_on_a_fresh_clone(tmp_path):
    """A copy of the tracked files: no build, no install; --help must not make either."""
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z", "harness", "conformance", "ci"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, clone / rel)
    env = dict(os.environ, PYTHON=sys.executable)
    start = time.monotonic()
    proc = subprocess.run(["bash", str(clone / "harness" / "run"), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert took < 1.0, f"--help took {took:.2f} s"
    assert not (clone / "build").exists()
    text = proc.stdout
    assert text.startswith("usage: harness/run")
    for option in ("--impl", "--build", "--results", "--spec", "--coverage", "--mutants", "--only",
                   "--upstream-tests"):
        assert f"  {option}" in text, option
    assert "--check-args" not in text
    assert "examples:" in text
    for mode in ("--impl reference,upstream", "--impl mypkg.adapter:make", "--coverage", "--mutants",
                 "--upstream-tests"):
        assert f"./harness/run {mode}" in text or f"run {mode}" in text, mode


def test_every_option_has_help():
    for action in main.parser()._actions:
        assert action.help, action.option_strings


# ---- paths ----------------------------------------------------------------------------


def test_paths_are_taken_from_the_callers_directory(tmp_path, monkeypatch):
    (tmp_path / "test_registry.py").write_text("")
    monkeypatch.chdir(tmp_path)
    args = main.parser().parse_args(["--upstream-tests", "test_registry.py", "--results", "out",
                                     "--build", "../b"])
    main.resolve_paths(args)
    assert args.upstream_tests == tmp_path / "test_registry.py"
    assert args.results == tmp_path / "out"
    assert args.build == tmp_path.parent / "b"


def test_a_missing_file_is_named_with_the_directory_it_was_looked_in(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "harness" / "run"), "--upstream-tests", "nothere.py"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert str(tmp_path / "nothere.py") in proc.stderr


def test_upstream_tests_need_numpy_and_say_so():
    args = main.parser().parse_args(["--upstream-tests", __file__])
    modules = main.suite_modules(args)
    assert "numpy" in modules["torch.testing._internal.common_utils"]


# ---- reports ----------------------------------------------------------------------------


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
    env = dict(os.environ, PYTEST_ADDOPTS="-k test_routing")
    proc = subprocess.run([sys.executable, str(ROOT / "harness" / "main.py"), "--build", str(BUILD),
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
    import coverage_gaps
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
    import coverage_gaps
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
