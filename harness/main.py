"""The conformance harness: runs the suites against implementations and
reports. Called by ./harness/run once the build is up to date.

    ./harness/run [--impl reference,upstream] [--results DIR]
    ./harness/run --coverage
    ./harness/run --mutants [--only NAME,...]
    ./harness/run --upstream-tests PATH/TO/test_registry.py

Exit status: non-zero only on unexpected results (a failure of a required
behaviour not listed in the implementation's expectation file, a suite that
crashed, a catalogue or traceability problem, a fault no test kills). A
recommended behaviour's failure ("miss") and a known failure that passed
("fixed: expectation stale") are reported and not fatal.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "conformance" / "python"))
sys.path.insert(0, str(HERE))

import catalogue as catalogue_module  # noqa: E402
import check as catalogue_check  # noqa: E402
import cpp_impls  # noqa: E402
import matrix  # noqa: E402
import staging  # noqa: E402

SHIPPED = {"reference": "adapters.reference:make", "upstream": "adapters.upstream:make"}
CPP_SUITES = {"reference": "conformance/cpp/conformance_reference"}


def stream(cmd: list[str], label: str, log: pathlib.Path, env: dict | None = None,
           progress=lambda line: None) -> int:
    """Runs cmd, logging everything and echoing progress lines."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            shown = progress(line)
            if shown:
                print(f"  [{label}] {shown}", flush=True)
        return proc.wait()


def gtest_progress(line: str) -> str | None:
    if line.startswith("[       OK ]"):
        return "ok    " + line[13:].split(" (")[0].strip()
    if line.startswith("[  SKIPPED ]") and "(" in line:
        return "unsup " + line[13:].split(" (")[0].strip()
    if line.startswith("[  FAILED  ]") and "ms)" in line:
        return "FAIL  " + line[13:].split(" (")[0].strip()
    return None


def pytest_progress(line: str) -> str | None:
    for word, shown in (("PASSED", "ok   "), ("FAILED", "FAIL "), ("XFAIL", "known"),
                        ("MISS", "miss "), ("STALE", "stale"),
                        ("XPASS", "XPASS"), ("SKIPPED", "unsup"), ("ERROR", "ERROR")):
        if f" {word}" in line and "::" in line:
            return f"{shown} {line.split(' ')[0].split('::', 1)[-1]}"
    return None


def run_cpp(impl: str, build: pathlib.Path, results: pathlib.Path,
            binary: pathlib.Path | None = None) -> tuple[int, list[dict]]:
    binary = binary or build / CPP_SUITES[impl]
    xml = results / f"cpp-{impl}.xml"
    status = stream([str(binary), f"--gtest_output=xml:{xml}"], f"c++ {impl}",
                    results / f"cpp-{impl}.log", progress=gtest_progress)
    rows = matrix.gtest_rows(xml, impl) if xml.exists() else []
    return status, rows


def run_python(impl: str, spec: str, results: pathlib.Path, env: dict | None = None,
               extra: tuple[str, ...] = ()) -> tuple[int, list[dict]]:
    report = results / f"python-{impl}.jsonl"
    cmd = [sys.executable, "-m", "pytest", "conformance/python", "-v", "-p", "no:cacheprovider",
           f"--impl={spec}", f"--conformance-report={report}",
           f"--junitxml={results / f'python-{impl}.xml'}", *extra]
    status = stream(cmd, f"py {impl}", results / f"python-{impl}.log", env=env,
                    progress=pytest_progress)
    rows = matrix.python_rows(report) if report.exists() else []
    return status, rows


def conformance(args) -> int:
    results: pathlib.Path = args.results
    results.mkdir(parents=True, exist_ok=True)
    for old in list(results.glob("*.xml")) + list(results.glob("*.jsonl")):
        old.unlink()
    start = time.monotonic()

    print("== catalogue and traceability")
    problems = catalogue_check.run(args.spec if args.spec and args.spec.exists() else None)
    for p in problems:
        print(f"  PROBLEM: {p}")
    catalogue = catalogue_module.load()

    rows: list[dict] = []
    unexpected = bool(problems)
    # The Python suite imports the package built in args.build, like the C++ suite.
    env = staging.environment_for(staging.stage_package(args.build, results / "_package"))
    for impl in args.impl:
        name = impl if impl in SHIPPED else impl.split(":")[0].rsplit(".", 1)[-1]
        if name in CPP_SUITES:
            print(f"== C++ suite against {name}")
            status, got = run_cpp(name, args.build, results)
            rows += got
            unexpected |= matrix.suite_failed(status, got, catalogue)
        print(f"== Python suite against {name}")
        status, got = run_python(name, SHIPPED.get(impl, impl), results, env=env,
                                 extra=tuple(f"--expectations={p}" for p in args.expectations))
        rows += got
        unexpected |= matrix.suite_failed(status, got, catalogue) or status != 0
    for name, binary in args.cpp_impl:
        print(f"== C++ suite against {name} ({binary})")
        status, got = run_cpp(name, args.build, results, binary=binary)
        rows += got
        unexpected |= matrix.suite_failed(status, got, catalogue)

    import torch

    platform_label = f"platform: torch {torch.__version__}"
    labels, table = matrix.build(catalogue, rows, platform_label)
    missing = [row[0] for row in table if "missing" in row]
    unexpected |= bool(missing)
    header = (f"# Conformance matrix\n\nImplementations: {', '.join(args.impl)}. "
              f"PyTorch {torch.__version__}, Python {platform.python_version()}, "
              f"{platform.machine()}. {len(catalogue)} behaviours, {len(rows)} test results, "
              f"{time.monotonic() - start:.0f} s.")
    score = matrix.scores(catalogue, labels, table)
    md = matrix.markdown(labels, table, header)
    md += "\nScore (passed / applicable; unsupported behaviours are not applicable):\n\n" + "".join(
        f"- {label}: {matrix.score_line(s)}\n" for label, s in score.items())
    (results / "matrix.md").write_text(md)
    notes = [header.splitlines()[-1], "pass / FAIL / known-fail (expectation entry with a reason) / "
             "unsupported (feature the implementation lacks) / - (not expressible on that side)"]
    (results / "matrix.html").write_text(matrix.html_page(labels, table, "Conformance matrix", notes))
    (results / "results.json").write_text(json.dumps(rows, indent=1))
    print()
    print(matrix.terminal(labels, table))
    print()
    for label, tally in matrix.counts(labels, table).items():
        print(f"  {label}: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
              + f"; score: {matrix.score_line(score[label])}")
    for r in rows:
        if r["outcome"] == "stale":
            print(f"  fixed: expectation stale: {r['implementation']} {r['side']} {r['test']}")
        elif r["outcome"] == "fail" and not matrix.is_fatal(r, catalogue):
            print(f"  miss (recommended): {r['implementation']} {r['side']} {r['test']}")
    passed = sum(not matrix.is_fatal(r, catalogue) for r in rows)
    failed = len(rows) - passed + len(problems) + len(missing)
    print(f"\nreports: {results}/matrix.md, matrix.html, results.json, cpp-*.xml, python-*.xml")
    print(f"{passed} passed, {failed} failed")
    return 1 if unexpected else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    parser.add_argument("--results", type=pathlib.Path, default=ROOT / "results")
    parser.add_argument("--impl", default="reference",
                        help="comma-separated: reference, upstream, or module:factory")
    parser.add_argument("--spec", type=pathlib.Path, default=ROOT.parent / "shared" / "spec" / "test_registry.py",
                        help="upstream test file to check the seed list against, if present")
    parser.add_argument("--expectations", action="append", default=[], metavar="PATH",
                        help="known failures of a --impl implementation (TOML); replaces its "
                             "expectations/<name>.toml; may be repeated")
    parser.add_argument("--cpp-impl", action="append", default=[], metavar="NAME=PATH",
                        help="also run a C++ conformance binary (the suite linked with another "
                             "implementation's adapter) as column NAME; may be repeated")
    parser.add_argument("--coverage", action="store_true", help="instrumented build, lcov report")
    parser.add_argument("--mutants", action="store_true", help="seeded faults, kill table")
    parser.add_argument("--only", default="", help="with --mutants: comma-separated fault names")
    parser.add_argument("--upstream-tests", type=pathlib.Path, metavar="PATH",
                        help="run an upstream test file against the installed PyTorch and the reference")
    args = parser.parse_args()
    args.impl = [i for i in args.impl.split(",") if i]
    try:
        args.cpp_impl = cpp_impls.parse(args.cpp_impl)
    except ValueError as error:
        parser.error(str(error))
    # Absolute from here on: the suites run in subprocesses with other working
    # directories (pytest resolves --junitxml against its own cwd).
    args.build, args.results = args.build.resolve(), args.results.resolve()
    if args.coverage:
        import coverage_report

        return coverage_report.run(args)
    if args.mutants:
        import mutants

        return mutants.run(args)
    if args.upstream_tests:
        import upstream_tests

        return upstream_tests.run(args)
    return conformance(args)


if __name__ == "__main__":
    sys.exit(main())
