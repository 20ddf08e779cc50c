"""./harness/run --coverage [--impl ...]: coverage of each implementation
under the conformance suites, and what each behaviour pins.

* Python implementations: the Python conformance suite runs under coverage.py
  with branch coverage and one dynamic context per test
  ("conformance:<label>|<test node id>", set by coverage_contexts.py). What
  is measured is the implementation's own Python: the reference's layer
  (reference/python/native_registry/*.py, measured in its staged copy and
  mapped back), upstream's torch/_native/registry.py by file path (the module
  form, --cov=torch._native.registry, cannot be imported early), a custom
  adapter's package directory.
* The reference's C++ (reference/src, include, python/src): an instrumented
  build in build-coverage/ (gcov), the C++ conformance suite and the Python
  suites importing the instrumented extension, lcov. As before, the
  reference's own tests (reference/tests, reference/python/tests) then run
  too: the report gives both figures, under the conformance suites alone and
  under every test.
* One HTML report (genhtml over the C++ and the Python lcov data together),
  Cobertura XML of the same, coverage.py's own HTML, and a per-behaviour
  table: for each catalogue behaviour, the lines of each Python
  implementation its tests execute, the lines only it reaches, and the lines
  no behaviour reaches (results/coverage/index.html, per-behaviour.json).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time

from . import coverage_gaps
from .. import staging
from .coverage_contexts import CHILD_CONTEXT
from .coverage_behaviours import BUILD, MEASURED, cpp_per_behaviour, per_behaviour, shown_name
from .coverage_pages import index_page, lcov_to_cobertura, ranges, summary_lines  # noqa: F401 (ranges: tests)

from .. import ROOT, with_root_on_path
# lcov 1.x spellings: branch coverage on; the branches gcc adds for C++
# exception edges are left out (they are not decisions in our code).
LCOV_BRANCHES = ["--rc", "lcov_branch_coverage=1", "--rc", "geninfo_no_exception_branch=1"]
# gcovr over the same counters: gcc also counts branches no source line
# writes (a call's exception edge; the destructors a closing brace runs), which
# no test can take on purpose. gcovr leaves those out (its FAQ, "Why does C++
# code have so many uncovered branches?") and counts decisions as the source
# writes them (if, loops, switch, ?:, && and ||).
GCOVR_FILTERS = ["--exclude-throw-branches", "--exclude-unreachable-branches", "--decisions"]
REFERENCE_PY = ROOT / "reference" / "python" / "native_registry"


class Progress:
    """Numbered steps with the time each took and the time so far."""

    def __init__(self, steps: int) -> None:
        self.steps, self.done, self.start = steps, 0, time.monotonic()
        self.step_start = self.start

    def step(self, what: str) -> None:
        now = time.monotonic()
        if self.done:
            print(f"   (took {now - self.step_start:.0f} s)", flush=True)
        self.done += 1
        self.step_start = now
        print(f"== coverage [{self.done}/{self.steps}, {now - self.start:.0f} s so far] {what}", flush=True)

    def finish(self) -> None:
        print(f"== coverage done in {time.monotonic() - self.start:.0f} s", flush=True)


def sh(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("  $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=kwargs.pop("cwd", ROOT), **kwargs)


def python_sources(impl, env: dict) -> list[str]:
    """The files or folders of the implementation's own Python code."""
    if impl.python == "adapters.reference:make":
        return [str(pathlib.Path(env["NR_STAGED"]) / "native_registry")]
    probe = ("import importlib, pathlib; import torch._native.registry as r; print(r.__file__)"
             if impl.python == "adapters.upstream:make" else
             "import importlib, pathlib, sys; m = importlib.import_module(sys.argv[1]); "
             "print(pathlib.Path(m.__file__).parent)")
    out = subprocess.run([sys.executable, "-c", probe, impl.python.split(":")[0].split(".")[0]],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return [out.stdout.strip()]


def write_config(out: pathlib.Path, sources: list[str], staged: pathlib.Path) -> pathlib.Path:
    """coverage.py's configuration: branches, the measured sources (folders as
    source, single files by include pattern), and the staged copy of the
    reference's package mapped back to the repository."""
    folders = [s for s in sources if pathlib.Path(s).is_dir()]
    files = [s for s in sources if not pathlib.Path(s).is_dir()]
    # A lone file is measured through its folder (third-party code under
    # site-packages is measured only inside `source`) and reported alone.
    measured = folders + sorted({str(pathlib.Path(f).parent) for f in files})
    config = out / "coveragerc"
    config.write_text("\n".join([
        # Child interpreters (the takeover, lifetime and early-activation tests
        # run their bodies in them) are measured too: coverage.py starts in
        # every Python started through subprocess, with this file's options
        # only, so their context comes from the environment (see
        # coverage_contexts.py, which sets it per test).
        "[run]", "branch = True", "parallel = True", f"data_file = {out / 'python.coverage'}",
        "patch = subprocess", f"context = ${{{CHILD_CONTEXT}}}",
        "source =", *[f"    {m}" for m in measured],
        "[paths]", "reference =", f"    {REFERENCE_PY}", f"    {staged / 'native_registry'}",
        "[report]", "include =", *[f"    {f}" for f in files], *[f"    {d}/*" for d in folders],
        f"    {REFERENCE_PY}/*", ""]))
    return config


def lcov_summary(info: pathlib.Path) -> dict:
    text = subprocess.run(["lcov", "--summary", str(info), *LCOV_BRANCHES], capture_output=True,
                          text=True)
    found = {}
    for kind in ("lines", "branches"):
        m = re.search(rf"{kind}\.*: ([\d.]+)% \((\d+) of (\d+)", text.stdout + text.stderr)
        if m:
            found[kind] = {"percent": float(m.group(1)), "covered": int(m.group(2)), "total": int(m.group(3))}
    return found


def run(args) -> int:
    out = args.results / "coverage"
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)  # the reports name files relative to the repository
    for old in out.glob("python.coverage*"):
        old.unlink()
    cpp = any(impl.cpp for impl in args.implementations)
    progress = Progress(5 if cpp else 2)
    failures = 0

    if cpp:
        progress.step(f"instrumented build in {BUILD} (the first one takes several minutes)")
        if not (BUILD / "build.ninja").exists():
            sh(["meson", "setup", str(BUILD), "-Db_coverage=true", "-Dbuildtype=debug",
                "-Dbenchmarks=disabled"], check=True)
        sh(["meson", "compile", "-C", str(BUILD)], check=True)
        sh(["lcov", "--zerocounters", "--directory", str(BUILD)], check=True, stdout=subprocess.DEVNULL)
        staged = staging.stage_package(BUILD, out / "_package")
        env = staging.environment_for(staged)
    else:
        staged = out / "_package"
        env = staging.environment_for(staging.stage_package(args.build, staged))
    env["NR_STAGED"] = str(staged)
    env["NR_BUILD_DIR"] = str(BUILD if cpp else args.build)  # the one-core test loads a fixture library from it
    env = with_root_on_path(env)  # the context plugin

    progress.step("the conformance suites, measured")
    sources = [s for impl in args.implementations for s in python_sources(impl, env)]
    config = write_config(out, sources, staged)
    reports: dict[str, pathlib.Path] = {}
    for impl in args.implementations:
        if impl.cpp:
            failures += sh([str(BUILD / impl.cpp), "--gtest_brief=1",
                            f"--gtest_output=xml:{out / f'cpp-{impl.file_stem}.xml'}"]).returncode != 0
        reports[impl.label] = out / f"python-{impl.file_stem}.jsonl"
        failures += measured_pytest(config, f"conformance:{impl.label}", env,
                                    ["conformance/python", f"--impl={impl.python}",
                                     f"--conformance-report={reports[impl.label]}"]) != 0

    cpp_figures, gcovr_figures = {}, {}
    if cpp:
        conformance_info = capture(out, "conformance")
        gcovr_figures["the conformance suites"] = gcovr_summary(out, "conformance")  # before the own tests add theirs
        progress.step("the reference's own tests (reference/tests, reference/python/tests), measured")
        failures += sh([str(BUILD / "reference/tests/reference_tests"), "--gtest_brief=1"]).returncode != 0
        failures += measured_pytest(config, "own-tests:reference", env, ["reference/python/tests"]) != 0
        all_info = capture(out, "all")
        cpp_figures = {"the conformance suites": lcov_summary(conformance_info),
                       "every test": lcov_summary(all_info)}
        gcovr_figures["every test"] = gcovr_summary(out, "all")

    cpp_pins: dict[str, dict] = {}
    cpp_files: dict[str, dict] = {}
    for impl in (i for i in args.implementations if i.cpp):
        progress.step(f"per-test gcov counters of the C++ conformance suite against {impl.label} "
                      "(each test run alone)")
        cpp_pins[f"{impl.label} (C++)"] = cpp_per_behaviour(
            out, BUILD / impl.cpp, out / f"cpp-{impl.file_stem}.xml", cpp_files, impl.label)

    progress.step("reports: HTML, Cobertura XML, per behaviour")
    sh([sys.executable, "-m", "coverage", "combine", f"--rcfile={config}", "-q"], env=env)
    import coverage

    cov = coverage.Coverage(config_file=str(config))
    cov.load()
    cov.lcov_report(outfile=str(out / "python.info"))
    cov.html_report(directory=str(out / "python-html"), title="Python implementations")
    py_files = python_figures(cov, out, "conformance:", own_tests=cpp)
    # What the conformance suites alone leave untaken, by area (the data of
    # every test is loaded: the conformance contexts are queried alone).
    gaps = {}
    if cpp:
        gaps["C++ reference (src, include, python/src)"] = coverage_gaps.cpp_gaps(conformance_info)
    if any(i.python == "adapters.reference:make" for i in args.implementations):
        gaps["Python layer (reference/python/native_registry)"] = coverage_gaps.python_gaps(
            cov, coverage_gaps.reference_python_files(), "conformance:")
    coverage_gaps.write(out, gaps)
    infos = [str(out / "python.info")] + ([str(out / "reference-cpp.info")] if cpp else [])
    sh(["genhtml", *infos, "--output-directory", str(out / "html"), "--branch-coverage",
        "--title", "conformance coverage", "--quiet", *LCOV_BRANCHES], check=True)
    (out / "cobertura.xml").write_text(lcov_to_cobertura([pathlib.Path(i) for i in infos]))
    behaviours = per_behaviour(cov, reports)
    behaviours["implementations"].update(cpp_pins)
    behaviours["files"].update(cpp_files)
    (out / "per-behaviour.json").write_text(json.dumps(behaviours, indent=1))
    summary = {"cpp": cpp_figures, "cpp_gcovr": gcovr_figures, "python": py_files}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = summary_lines(summary, behaviours)
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    (out / "index.html").write_text(index_page(summary, behaviours))
    progress.finish()
    print("\n".join(lines))
    print(f"report: {out / 'index.html'} (genhtml: {out / 'html' / 'index.html'}; "
          f"Cobertura: {out / 'cobertura.xml'}; the branches the conformance suites leave untaken, by area: "
          f"{out / 'uncovered-branches.txt'} and .html)")
    return 1 if failures or (cpp and not all(cpp_figures.values())) else 0


def measured_pytest(config: pathlib.Path, context: str, env: dict, suite: list[str]) -> int:
    env = {**env, CHILD_CONTEXT: context}
    return sh([sys.executable, "-m", "coverage", "run", f"--rcfile={config}", f"--context={context}",
               "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "harness.suite_coverage.coverage_contexts", *suite],
              env=env).returncode


def capture(out: pathlib.Path, name: str) -> pathlib.Path:
    """The gcov counters so far, of the reference's own sources."""
    raw, info = out / f"{name}-raw.info", out / f"{name}.info"
    sh(["lcov", "--capture", "--directory", str(BUILD), "--output-file", str(raw),
        *LCOV_BRANCHES, "--quiet"], check=True)
    sh(["lcov", "--extract", str(raw), *[str(ROOT / m) for m in MEASURED],
        "--output-file", str(info), *LCOV_BRANCHES, "--quiet"], check=True)
    if name == "all":
        (out / "reference-cpp.info").write_bytes(info.read_bytes())
    return info


def gcovr_summary(out: pathlib.Path, name: str) -> dict:
    """gcovr's figures of the gcov counters so far (GCOVR_FILTERS), kept as
    <name>-gcovr.json; read while the counters are those of capture(name)."""
    report = out / f"{name}-gcovr.json"
    sh(["gcovr", "--root", str(ROOT), "--object-directory", str(BUILD),
        *[arg for m in MEASURED for arg in ("--filter", m.rstrip("*"))], *GCOVR_FILTERS,
        "--json-summary", str(report), "-j", str(os.cpu_count() or 1)], check=True)
    data = json.loads(report.read_text())
    return {plural: {"covered": data[f"{kind}_covered"], "total": data[f"{kind}_total"],
                     "percent": data[f"{kind}_percent"]}
            for kind, plural in (("line", "lines"), ("branch", "branches"), ("decision", "decisions"))}


def python_figures(cov, out: pathlib.Path, conformance_prefix: str, own_tests: bool) -> dict:
    """Per measured file: lines and branches, under every test and under the
    conformance suites alone (contexts are "static context|test")."""
    figures = {}
    scopes = [("the conformance suites", [f"^{re.escape(conformance_prefix)}"])]
    if own_tests:
        scopes.append(("every test", None))
    for scope, contexts in scopes:
        cov.set_option("report:contexts", contexts)
        report = out / "python-figures.json"
        cov.json_report(outfile=str(report))
        for filename, entry in json.loads(report.read_text())["files"].items():
            n = entry["summary"]
            figures.setdefault(shown_name(filename), {})[scope] = {
                "lines": {"covered": n["covered_lines"], "total": n["num_statements"],
                          "percent": percent(n["covered_lines"], n["num_statements"])},
                "branches": {"covered": n["covered_branches"], "total": n["num_branches"],
                             "percent": percent(n["covered_branches"], n["num_branches"])}}
    cov.set_option("report:contexts", None)
    return figures


def percent(part: int, whole: int) -> float:
    return round(100 * part / whole, 1) if whole else 100.0


