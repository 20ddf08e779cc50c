"""./harness/run --coverage: an instrumented build (gcov), the whole suite
(the reference's own C++ and Python tests and both conformance suites, the
Python ones importing the instrumented extension), then an lcov/genhtml
report of reference/ and a one-line line and branch summary."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import staging

ROOT = pathlib.Path(__file__).resolve().parents[1]
# lcov 1.x spellings: branch coverage on; the branches gcc adds for C++
# exception edges are left out (they are not decisions in our code).
LCOV_BRANCHES = ["--rc", "lcov_branch_coverage=1", "--rc", "geninfo_no_exception_branch=1"]
# The registry itself and its binding; not the tests.
MEASURED = ["reference/src/*", "reference/include/*", "reference/python/src/*"]


def sh(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("  $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, **kwargs)


def run(args) -> int:
    build = ROOT / "build-coverage"
    out = args.results / "coverage"
    out.mkdir(parents=True, exist_ok=True)
    if not (build / "build.ninja").exists():
        sh(["meson", "setup", str(build), "-Db_coverage=true", "-Dbuildtype=debug",
            "-Dbenchmarks=disabled"], check=True)
    sh(["meson", "compile", "-C", str(build)], check=True)
    sh(["lcov", "--zerocounters", "--directory", str(build)], check=True,
       stdout=subprocess.DEVNULL)

    print("== the whole suite against the instrumented build")
    failures = 0
    for binary in ("reference/tests/reference_tests", "conformance/cpp/conformance_reference"):
        failures += sh([str(build / binary), "--gtest_brief=1"]).returncode != 0
    env = staging.environment_for(staging.stage_package(build, out / "_package"))
    env["NR_BUILD_DIR"] = str(build)  # the one-core test loads a fixture library from it
    for suite in (["reference/python/tests"], ["conformance/python", "--impl=adapters.reference:make"]):
        failures += sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *suite],
                       env=env).returncode != 0

    info = out / "reference.info"
    sh(["lcov", "--capture", "--directory", str(build), "--output-file", str(out / "all.info"),
        *LCOV_BRANCHES, "--quiet"], check=True)
    sh(["lcov", "--extract", str(out / "all.info"), *[str(ROOT / m) for m in MEASURED],
        "--output-file", str(info), *LCOV_BRANCHES, "--quiet"], check=True)
    sh(["genhtml", str(info), "--output-directory", str(out / "html"), "--branch-coverage",
        "--title", "native_registry reference", "--quiet"], check=True)
    summary = sh(["lcov", "--summary", str(info), *LCOV_BRANCHES],
                 capture_output=True, text=True).stdout + ""
    lines = re.search(r"lines\.*: ([\d.]+)% \((\d+) of (\d+)", summary)
    branches = re.search(r"branches\.*: ([\d.]+)% \((\d+) of (\d+)", summary)
    line = (f"coverage of reference/ (src, include, python/src): lines {lines.group(1)}% ({lines.group(2)}/{lines.group(3)}), "
            f"branches {branches.group(1)}% ({branches.group(2)}/{branches.group(3)})"
            if lines and branches else f"coverage summary unreadable:\n{summary}")
    (out / "summary.txt").write_text(line + "\n")
    print(line)
    print(f"report: {out / 'html' / 'index.html'}")
    return 1 if failures or not (lines and branches) else 0
