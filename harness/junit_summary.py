"""Summarise GoogleTest/pytest JUnit XML files: per-suite counts, and the
closing line "N passed, M failed" that CI reads.

    python3 -m harness.junit_summary RESULTS_DIR [--markdown OUT.md] [--title T]

Exits 1 if any test failed or errored, or if no test ran at all.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def collect(results_dir: pathlib.Path) -> dict[str, dict[str, int]]:
    """Counts per test suite: passed, failed, skipped."""
    suites: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    for path in sorted(results_dir.glob("*.xml")):
        for case in ET.parse(path).getroot().iter("testcase"):
            suite = case.get("classname") or path.stem
            if case.find("failure") is not None or case.find("error") is not None:
                suites[suite]["failed"] += 1
            elif case.find("skipped") is not None or case.get("result") == "skipped":
                suites[suite]["skipped"] += 1
            else:
                suites[suite]["passed"] += 1
    return suites


def markdown(suites: dict[str, dict[str, int]], title: str) -> str:
    lines = [f"# {title}", "", "| suite | passed | failed | skipped |", "|---|---:|---:|---:|"]
    for name, c in sorted(suites.items()):
        lines.append(f"| {name} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    total = {k: sum(c[k] for c in suites.values()) for k in ("passed", "failed", "skipped")}
    lines.append(f"| **total** | {total['passed']} | {total['failed']} | {total['skipped']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=pathlib.Path)
    parser.add_argument("--markdown", type=pathlib.Path)
    parser.add_argument("--title", default="Test results")
    args = parser.parse_args()
    suites = collect(args.results_dir)
    if args.markdown:
        args.markdown.write_text(markdown(suites, args.title))
    passed = sum(c["passed"] for c in suites.values())
    failed = sum(c["failed"] for c in suites.values())
    skipped = sum(c["skipped"] for c in suites.values())
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
