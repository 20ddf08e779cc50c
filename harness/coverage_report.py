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

import html
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict

import staging
from progress import duration as progress_duration, remaining as progress_remaining

ROOT = pathlib.Path(__file__).resolve().parents[1]
HERE = pathlib.Path(__file__).resolve().parent
# lcov 1.x spellings: branch coverage on; the branches gcc adds for C++
# exception edges are left out (they are not decisions in our code).
LCOV_BRANCHES = ["--rc", "lcov_branch_coverage=1", "--rc", "geninfo_no_exception_branch=1"]
# The registry itself and its binding; not the tests.
MEASURED = ["reference/src/*", "reference/include/*", "reference/python/src/*"]
REFERENCE_PY = ROOT / "reference" / "python" / "native_registry"
BUILD = ROOT / "build-coverage"


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
        "[run]", "branch = True", "parallel = True", f"data_file = {out / 'python.coverage'}",
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
    env["PYTHONPATH"] = f"{HERE}:{env['PYTHONPATH']}"  # the context plugin

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

    cpp_figures = {}
    if cpp:
        conformance_info = capture(out, "conformance")
        progress.step("the reference's own tests (reference/tests, reference/python/tests), measured")
        failures += sh([str(BUILD / "reference/tests/reference_tests"), "--gtest_brief=1"]).returncode != 0
        failures += measured_pytest(config, "own-tests:reference", env, ["reference/python/tests"]) != 0
        all_info = capture(out, "all")
        cpp_figures = {"the conformance suites": lcov_summary(conformance_info),
                       "every test": lcov_summary(all_info)}

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
    infos = [str(out / "python.info")] + ([str(out / "reference-cpp.info")] if cpp else [])
    sh(["genhtml", *infos, "--output-directory", str(out / "html"), "--branch-coverage",
        "--title", "conformance coverage", "--quiet", *LCOV_BRANCHES], check=True)
    (out / "cobertura.xml").write_text(lcov_to_cobertura([pathlib.Path(i) for i in infos]))
    behaviours = per_behaviour(cov, reports)
    behaviours["implementations"].update(cpp_pins)
    behaviours["files"].update(cpp_files)
    (out / "per-behaviour.json").write_text(json.dumps(behaviours, indent=1))
    summary = {"cpp": cpp_figures, "python": py_files}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = summary_lines(summary, behaviours)
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    (out / "index.html").write_text(index_page(summary, behaviours))
    progress.finish()
    print("\n".join(lines))
    print(f"report: {out / 'index.html'} (genhtml: {out / 'html' / 'index.html'}; "
          f"Cobertura: {out / 'cobertura.xml'})")
    return 1 if failures or (cpp and not all(cpp_figures.values())) else 0


def measured_pytest(config: pathlib.Path, context: str, env: dict, suite: list[str]) -> int:
    return sh([sys.executable, "-m", "coverage", "run", f"--rcfile={config}", f"--context={context}",
               "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "coverage_contexts", *suite],
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


def shown_name(filename: str) -> str:
    path = pathlib.Path(filename)
    if path.is_relative_to(ROOT):
        return str(path.relative_to(ROOT))
    parts = path.parts
    return str(pathlib.Path(*parts[parts.index("torch"):])) if "torch" in parts else filename


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


def per_behaviour(cov, reports: dict[str, pathlib.Path]) -> dict:
    """For each implementation: each behaviour's lines (file -> line numbers)
    executed by its tests, the lines only it reaches, and per file the
    statements no behaviour reaches."""
    import catalogue

    behaviours_of = {}
    for label, path in reports.items():
        for line in (path.read_text().splitlines() if path.exists() else []):
            row = json.loads(line)
            behaviours_of[(label, row["test"])] = row["behaviours"]
    data = cov.get_data()
    reached: dict[str, dict[str, dict[str, set[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    files: dict[str, dict] = {}
    for filename in sorted(data.measured_files()):
        name = shown_name(filename)
        statements = set(cov.analysis2(filename)[1])
        by_test: set[int] = set()
        owner = None
        for lineno, contexts in data.contexts_by_lineno(filename).items():
            for context in contexts:
                static, _, test = context.partition("|")
                kind, _, label = static.partition(":")
                if kind != "conformance" or not test:
                    continue
                owner = label
                by_test.add(lineno)
                for bid in behaviours_of.get((label, test.split("::", 1)[-1]), []):
                    reached[label][bid][name].add(lineno)
        if owner is not None:
            files[name] = {"implementation": owner, "statements": len(statements),
                           "reached by no behaviour": sorted(statements - by_test)}
    cat = catalogue.load()
    return {"files": files, "implementations": {label: rank(cat, per) for label, per in reached.items()}}


def cpp_per_behaviour(out: pathlib.Path, binary: pathlib.Path, xml: pathlib.Path, files: dict,
                      label: str) -> dict:
    """Each C++ test alone, its gcov counters written under a folder of its
    own (GCOV_PREFIX; the build's own counters stay as they are), read with
    gcov's JSON output: the reference's lines each behaviour's tests execute.
    Adds the C++ files' unreached lines to `files`."""
    import matrix

    rows = [r for r in matrix.gtest_rows(xml, label) if r["outcome"] == "pass"] if xml.exists() else []
    work = out / "per-test-gcov"
    if work.exists():
        shutil.rmtree(work)
    gcno = {p.relative_to(BUILD): p for p in BUILD.rglob("*.gcno")}
    wanted = tuple(str(ROOT / m.rstrip("*")) for m in MEASURED)
    reached: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    executable: dict[str, set[int]] = defaultdict(set)
    hit_any: dict[str, set[int]] = defaultdict(set)
    start = time.monotonic()
    for index, row in enumerate(rows, 1):
        prefix = work / str(index)
        env = dict(os.environ, GCOV_PREFIX=str(prefix), GCOV_PREFIX_STRIP="0")
        subprocess.run([str(binary), f"--gtest_filter={row['test']}", "--gtest_brief=1"], cwd=ROOT,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        mirror = prefix / BUILD.relative_to("/")
        gcdas = sorted(mirror.rglob("*.gcda"))
        for gcda in gcdas:  # gcov reads the notes file beside the counters
            source = gcno.get(gcda.relative_to(mirror).with_suffix(".gcno"))
            if source and not gcda.with_suffix(".gcno").exists():
                gcda.with_suffix(".gcno").symlink_to(source)
        lines = gcov_lines(gcdas, wanted)
        for name, (counted, hit) in lines.items():
            executable[name] |= counted
            hit_any[name] |= hit
            for bid in row["behaviours"]:
                reached[bid][name] |= hit
        shutil.rmtree(prefix)
        if index % 10 == 0 or index == len(rows):
            elapsed = time.monotonic() - start
            print(f"  [{index}/{len(rows)}] C++ tests measured one by one "
                  f"(elapsed {progress_duration(elapsed)}, {progress_remaining(index, len(rows), elapsed)})",
                  flush=True)
    import catalogue

    cat = catalogue.load()
    for name in sorted(executable):
        files[name] = {"implementation": f"{label} (C++)", "statements": len(executable[name]),
                       "reached by no behaviour": sorted(executable[name] - hit_any[name])}
    return rank(cat, reached)


def gcov_lines(gcdas: list[pathlib.Path], wanted: tuple[str, ...]) -> dict[str, tuple[set[int], set[int]]]:
    """gcov's JSON for these counter files: per source file of ours, the lines
    with code and the lines executed."""
    found: dict[str, tuple[set[int], set[int]]] = {}
    if not gcdas:
        return found
    proc = subprocess.run(["gcov", "--json-format", "--stdout", *map(str, gcdas)], cwd=gcdas[0].parent,
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        for entry in json.loads(line).get("files", []):
            path = entry["file"]
            if not path.startswith("/"):
                path = str((BUILD / path).resolve())
            if not path.startswith(wanted):
                continue
            name = str(pathlib.Path(path).relative_to(ROOT))
            counted, hit = found.setdefault(name, (set(), set()))
            for ln in entry["lines"]:
                counted.add(ln["line_number"])
                if ln["count"]:
                    hit.add(ln["line_number"])
    return found


def rank(cat: dict, reached: dict[str, dict[str, set[int]]]) -> dict:
    """Per behaviour: the lines its tests execute and those only it reaches,
    fewest lines first."""
    entries = {}
    for bid, by_file in reached.items():
        mine = {(f, n) for f, ns in by_file.items() for n in ns}
        others = set()
        for other, their in reached.items():
            if other != bid:
                others |= {(f, n) for f, ns in their.items() for n in ns}
        entries[bid] = {"title": cat[bid].title, "profile": cat[bid].profile,
                        "level": getattr(cat[bid], "level", None) or "required",
                        "lines": len(mine), "only this behaviour": len(mine - others),
                        "by file": {f: sorted(ns) for f, ns in by_file.items()}}
    return dict(sorted(entries.items(), key=lambda kv: kv[1]["lines"]))


def ranges(numbers: list[int]) -> str:
    parts, start, prev = [], None, None
    for n in numbers:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = n
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(parts)


def fewest(behaviours: dict, label: str, count: int = 5) -> list[tuple[str, int]]:
    """The registry-profile behaviours whose tests execute the fewest lines."""
    entries = behaviours["implementations"].get(label, {})
    return [(bid, e["lines"]) for bid, e in entries.items() if e["profile"] == "registry"][:count]


def _figure(f: dict) -> str:
    return f"{f['percent']}% ({f['covered']}/{f['total']})"


CPP_CODE = "C++ reference/ (src, include, python/src)"


def _summary_rows(summary: dict):
    """(language, code, scope, figures) of each summary row: the C++ code, then
    each Python module, under each scope that has figures."""
    for scope, figures in summary["cpp"].items():
        if figures:
            yield "C++", CPP_CODE, scope, figures
    for name, by_scope in summary["python"].items():
        for scope, figures in by_scope.items():
            yield "Python", name, scope, figures


def summary_lines(summary: dict, behaviours: dict) -> list[str]:
    lines = []
    for language, code, scope, f in _summary_rows(summary):
        label = code if language == "C++" else f"Python {code}"
        lines.append(f"{label} under {scope}: lines {_figure(f['lines'])}, "
                     f"branches {_figure(f['branches'])}")
    for label in behaviours["implementations"]:
        lines.append(f"fewest lines pinned ({label}): "
                     + ", ".join(f"{bid} {n}" for bid, n in fewest(behaviours, label)))
    return lines


def index_page(summary: dict, behaviours: dict) -> str:
    e = html.escape
    out = ["<!doctype html><meta charset=utf-8><title>Conformance coverage</title>",
           "<style>body{font-family:system-ui,sans-serif;font-size:13px;margin:16px}"
           "td,th{padding:3px 7px;border:1px solid #ccc;vertical-align:top;text-align:left}"
           "table{border-collapse:collapse;margin-bottom:14px}td.num{text-align:right}</style>",
           "<h1>Conformance coverage</h1>",
           '<p>Line-by-line: <a href="html/index.html">the C++ and Python sources together (genhtml)</a>, '
           '<a href="python-html/index.html">the Python sources with branch arrows (coverage.py)</a>; '
           'for CI: <a href="cobertura.xml">cobertura.xml</a>.</p>',
           "<table><tr><th>code</th><th>under</th><th>lines</th><th>branches</th></tr>"]
    for language, code, scope, f in _summary_rows(summary):
        cell = e(code) if language == "C++" else f"<code>{e(code)}</code>"
        out.append(f"<tr><td>{cell}</td><td>{e(scope)}</td>"
                   f"<td class=num>{_figure(f['lines'])}</td><td class=num>{_figure(f['branches'])}</td></tr>")
    out.append("</table><h2>What each behaviour pins (the conformance suites)</h2>"
               "<p>Lines of the implementation that the behaviour's tests execute (Python: "
               "coverage.py contexts; C++: the gcov counters of each test run alone), and those no "
               "other behaviour's tests reach. Sorted by lines, fewest first.</p>")
    for label, entries in behaviours["implementations"].items():
        out.append(f"<h3>{e(label)}</h3><table><tr><th>behaviour</th><th>level</th><th>lines</th>"
                   "<th>only this behaviour</th><th>which lines</th></tr>")
        for bid, entry in entries.items():
            where = "; ".join(f"{e(f)}: {ranges(ns)}" for f, ns in entry["by file"].items())
            out.append(f"<tr><td><code>{e(bid)}</code><br>{e(entry['title'])}</td><td>{entry['level']}</td>"
                       f"<td class=num>{entry['lines']}</td><td class=num>{entry['only this behaviour']}</td>"
                       f"<td><details><summary>{len(entry['by file'])} file(s)</summary>{where}</details></td></tr>")
        out.append("</table>")
    out.append("<h2>Lines no behaviour reaches</h2><table><tr><th>file</th><th>implementation</th>"
               "<th>statements</th><th>reached by no behaviour</th></tr>")
    for name, f in behaviours["files"].items():
        out.append(f"<tr><td><code>{e(name)}</code></td><td>{e(f['implementation'])}</td>"
                   f"<td class=num>{f['statements']}</td><td>{len(f['reached by no behaviour'])}: "
                   f"{ranges(f['reached by no behaviour'])}</td></tr>")
    out.append("</table><p>Lines run only at import (definitions) count as reached by no behaviour.</p>")
    return "\n".join(out) + "\n"


def source_roots(files) -> list[str]:
    """The folders the report's file names are relative to."""
    roots = {str(ROOT)}
    for name in files:
        shown = shown_name(name)
        if pathlib.Path(name).is_absolute() and name.endswith(shown) and name != shown:
            roots.add(name[:-len(shown)].rstrip("/"))
    return sorted(roots)


def lcov_to_cobertura(infos: list[pathlib.Path]) -> str:
    """One Cobertura XML (the format CI systems read) from lcov tracefiles."""
    files: dict[str, dict] = {}
    current = None
    for info in infos:
        for line in info.read_text().splitlines():
            tag, _, value = line.partition(":")
            if tag == "SF":
                current = files.setdefault(value, {"lines": defaultdict(int), "branches": defaultdict(list)})
            elif tag == "DA" and current is not None:
                number, hits = value.split(",")[:2]
                current["lines"][int(number)] += int(hits)
            elif tag == "BRDA" and current is not None:
                number, _, _, taken = value.split(",")
                current["branches"][int(number)].append(taken not in ("-", "0"))
    total_lines = sum(len(f["lines"]) for f in files.values())
    hit_lines = sum(sum(h > 0 for h in f["lines"].values()) for f in files.values())
    total_br = sum(len(b) for f in files.values() for b in f["branches"].values())
    hit_br = sum(sum(b) for f in files.values() for b in f["branches"].values())

    def rate(hit: int, total: int) -> str:
        return f"{hit / total:.4f}" if total else "1"

    out = ['<?xml version="1.0" ?>',
           f'<coverage line-rate="{rate(hit_lines, total_lines)}" branch-rate="{rate(hit_br, total_br)}" '
           f'lines-covered="{hit_lines}" lines-valid="{total_lines}" branches-covered="{hit_br}" '
           f'branches-valid="{total_br}" complexity="0" version="native_registry" timestamp="{int(time.time())}">',
           "<sources>" + "".join(f"<source>{html.escape(s)}</source>" for s in source_roots(files))
           + "</sources><packages>"]
    by_package: dict[str, list[str]] = defaultdict(list)
    for name in sorted(files):
        by_package[str(pathlib.Path(shown_name(name)).parent)].append(name)
    for package, names in by_package.items():
        out.append(f'<package name="{html.escape(package)}"><classes>')
        for name in names:
            f = files[name]
            f_hit = sum(h > 0 for h in f["lines"].values())
            f_br = [t for b in f["branches"].values() for t in b]
            out.append(f'<class name="{html.escape(pathlib.Path(name).name)}" '
                       f'filename="{html.escape(shown_name(name))}" '
                       f'line-rate="{rate(f_hit, len(f["lines"]))}" '
                       f'branch-rate="{rate(sum(f_br), len(f_br))}" complexity="0"><methods/><lines>')
            for number in sorted(f["lines"]):
                taken = f["branches"].get(number)
                extra = (f' branch="true" condition-coverage="{100 * sum(taken) // len(taken)}% '
                         f'({sum(taken)}/{len(taken)})"') if taken else ' branch="false"'
                out.append(f'<line number="{number}" hits="{f["lines"][number]}"{extra}/>')
            out.append("</lines></class>")
        out.append("</classes></package>")
    out.append("</packages></coverage>")
    return "\n".join(out) + "\n"
