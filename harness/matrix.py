"""The behaviour x implementation matrix, from the suites' result files.

Inputs: GoogleTest XML of the C++ suite (each test records its behaviours as
JUnit properties) and the JSON lines the Python suite writes with
--conformance-report. A cell aggregates every test naming the behaviour:

  pass         all passed
  FAIL         some test failed unexpectedly, or a known failure passed (xpass)
  known-fail   only known failures (expectation entries), otherwise passing
  unsupported  the implementation lacks a feature the behaviour needs
  -            not expressible on that side
"""

from __future__ import annotations

import html
import json
import pathlib
import xml.etree.ElementTree as ET
from collections import defaultdict

ORDER = {"FAIL": 0, "known-fail": 1, "unsupported": 2, "pass": 3}


def repository_path(compiled: str) -> str:
    """A source path as the compiler saw it (relative to a build folder in
    the repository, or absolute) as a path relative to the repository."""
    root = pathlib.Path(__file__).resolve().parents[1]
    path = pathlib.Path(compiled)
    if path.is_absolute():
        return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    parts = path.parts
    while parts and parts[0] == "..":
        parts = parts[1:]
    return str(pathlib.Path(*parts))


def gtest_rows(path: pathlib.Path, implementation: str) -> list[dict]:
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        ids = [bid for p in case.iter("property") if p.get("name") == "behaviour"
               for bid in p.get("value", "").split(",") if bid]
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        row = {"test": f"{case.get('classname')}.{case.get('name')}", "behaviours": ids,
               "side": "cpp", "implementation": implementation}
        if problem is not None:
            row["outcome"] = "fail"
            row["message"] = problem.get("message") or (problem.text or "").strip()
        elif case.get("result") == "skipped" or skipped is not None:
            row["outcome"] = "unsupported"
            if skipped is not None and skipped.get("message"):
                row["reason"] = skipped.get("message").strip()
        else:
            row["outcome"] = "pass"
        if case.get("file"):
            row["source"] = f"{repository_path(case.get('file'))}:{case.get('line', '1')}"
        rows.append(row)
    return rows


def python_rows(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cell(outcomes: list[str]) -> str:
    if not outcomes:
        return "missing"
    if any(o in ("fail", "xpass") for o in outcomes):
        return "FAIL"
    if all(o == "unsupported" for o in outcomes):
        return "unsupported"
    if any(o == "xfail" for o in outcomes):
        return "known-fail"
    return "pass"


def build(catalogue: dict, rows: list[dict], platform_label: str) -> tuple[list[str], list[list[str]]]:
    """Column labels and one row per behaviour: [id, profile, cells...]."""
    columns = sorted({(r["side"], r["implementation"]) for r in rows},
                     key=lambda c: (c[0] != "cpp", c[1] != "reference", c[1]))
    by_cell: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    platform: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        for bid in r["behaviours"]:
            if catalogue[bid].profile == "platform":
                platform[bid].append(r["outcome"])
            else:
                by_cell[(bid, r["side"], r["implementation"])].append(r["outcome"])
    labels = [f"{side}: {impl}" for side, impl in columns] + [platform_label]
    table = []
    for bid, b in catalogue.items():
        cells = []
        for side, impl in columns:
            if b.profile == "platform" or side not in b.sides:
                cells.append("-")
            else:
                cells.append(cell(by_cell[(bid, side, impl)]))
        cells.append(cell(platform[bid]) if b.profile == "platform" else "-")
        table.append([bid, b.profile] + cells)
    return labels, table


def counts(labels: list[str], table: list[list[str]]) -> dict[str, dict[str, int]]:
    out = {}
    for i, label in enumerate(labels):
        tally: dict[str, int] = defaultdict(int)
        for row in table:
            if row[2 + i] != "-":
                tally[row[2 + i]] += 1
        out[label] = dict(tally)
    return out


def markdown(labels: list[str], table: list[list[str]], header: str) -> str:
    lines = [header, "", "| behaviour | profile | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for row in table:
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "| column | " + " | ".join(sorted(ORDER, key=ORDER.get)) + " |",
              "|---|" + "---:|" * len(ORDER)]
    for label, tally in counts(labels, table).items():
        lines.append(f"| {label} | " + " | ".join(str(tally.get(k, 0)) for k in sorted(ORDER, key=ORDER.get)) + " |")
    return "\n".join(lines) + "\n"


COLOURS = {"pass": "#c8f0c8", "FAIL": "#f5b0b0", "known-fail": "#f5e0a0", "unsupported": "#dddddd",
           "missing": "#f5b0b0", "-": "#ffffff"}


def html_page(labels: list[str], table: list[list[str]], title: str, notes: list[str]) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for label in ["behaviour", "profile"] + labels)
    body = []
    for row in table:
        cells = [f"<td><code>{html.escape(row[0])}</code></td><td>{row[1]}</td>"]
        cells += [f'<td style="background:{COLOURS.get(v, "#fff")}">{html.escape(v)}</td>' for v in row[2:]]
        body.append("<tr>" + "".join(cells) + "</tr>")
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>body{{font-family:sans-serif}}td,th{{padding:3px 8px;border:1px solid #ccc}}"
            f"table{{border-collapse:collapse}}</style><h1>{html.escape(title)}</h1><ul>{items}</ul>"
            f"<table><tr>{head}</tr>{''.join(body)}</table>\n")


def terminal(labels: list[str], table: list[list[str]]) -> str:
    width = max(len(r[0]) for r in table)
    short = [label.replace("python: ", "py:").replace("cpp: ", "c++:") for label in labels]
    cols = [max(len(s), 11) for s in short]
    out = [" " * (width + 2) + "  ".join(s.ljust(w) for s, w in zip(short, cols))]
    for row in table:
        out.append(row[0].ljust(width + 2) + "  ".join(v.ljust(w) for v, w in zip(row[2:], cols)))
    return "\n".join(out)
