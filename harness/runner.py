"""Runs the GoogleTest executables against the reference, showing progress,
and writes JUnit XML, Markdown and HTML reports into one results folder.

Called by ./harness/run after the build; see that script.
"""
from __future__ import annotations

import argparse
import html
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from junit_summary import collect, markdown  # noqa: E402

# (label, executable relative to the build folder)
SUITES = [
    ("reference", "reference/tests/reference_tests"),
    ("reference_warnings", "reference/tests/reference_warning_tests"),
]


def run_suite(label: str, binary: pathlib.Path, results: pathlib.Path) -> int:
    """Runs one GoogleTest binary, echoing one line per finished test."""
    xml = results / f"{label}.xml"
    proc = subprocess.Popen(
        [str(binary), f"--gtest_output=xml:{xml}", "--gtest_brief=0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = 0
    log = (results / f"{label}.log").open("w")
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        if line.startswith("[       OK ]") or (line.startswith("[  FAILED  ]") and "ms)" in line):
            done += 1
            mark = "ok  " if line.startswith("[       OK ]") else "FAIL"
            print(f"  [{label} {done:4d}] {mark} {line[13:].strip()}", flush=True)
    log.close()
    return proc.wait()


def write_html(md_text: str, path: pathlib.Path, title: str) -> None:
    rows = []
    for line in md_text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [html.escape(c.strip().strip("*")) for c in line.strip("|").split("|")]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    path.write_text(
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<h1>{html.escape(title)}</h1><table border=1 cellpadding=4>"
        + "".join(rows) + "</table>\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=pathlib.Path, default=pathlib.Path("build"))
    parser.add_argument("--results", type=pathlib.Path, default=pathlib.Path("results"))
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    for old in args.results.glob("*.xml"):
        old.unlink()

    start = time.monotonic()
    statuses = {}
    for label, rel in SUITES:
        print(f"== {label}", flush=True)
        statuses[label] = run_suite(label, args.build / rel, args.results)

    title = "Reference registry: test results"
    suites = collect(args.results)
    md_text = markdown(suites, title)
    md_text += f"\nImplementation: reference (C++). Wall time: {time.monotonic() - start:.1f} s.\n"
    (args.results / "report.md").write_text(md_text)
    write_html(md_text, args.results / "report.html", title)
    print()
    print(md_text)
    passed = sum(c["passed"] for c in suites.values())
    failed = sum(c["failed"] for c in suites.values())
    print(f"{passed} passed, {failed} failed")
    print(f"reports: {args.results}/report.md, report.html, *.xml")
    return 0 if failed == 0 and all(s == 0 for s in statuses.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
