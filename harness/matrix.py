"""The behaviour x implementation matrix, from the suites' result files.

Inputs: GoogleTest XML of the C++ suite (each test records its behaviours as
JUnit properties) and the JSON lines the Python suite writes with
--conformance-report. Both give rows of one schema: test, behaviours,
outcome (pass, fail, xfail, stale, unsupported), side, implementation,
device (the run's device, conformance/devices.toml; cpu when absent), and
optionally reason (of a known failure or an unsupported test) and message
(a failure's text). A cell aggregates every test naming the behaviour:

  pass         all passed
  FAIL         some test of a required behaviour failed unexpectedly (fatal)
  miss (recommended)  some test of a recommended behaviour failed (not fatal)
  known-fail   only known failures (expectation entries), otherwise passing
  stale        passing, but an expectation entry still calls it a known failure
               ("fixed: expectation stale"; not fatal)
  unsupported  the implementation lacks a feature the behaviour needs
  -            not expressible on that side
"""

from __future__ import annotations

import html
import json
import pathlib
import xml.etree.ElementTree as ET
from collections import defaultdict

MISS = "miss (recommended)"
ORDER = {"FAIL": 0, MISS: 1, "known-fail": 2, "unsupported": 3, "stale": 4, "pass": 5}
PASSING = ("pass", "stale")


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


def device_of(row: dict) -> str:
    return row.get("device", "cpu")


def column_label(side: str, implementation: str, device: str = "cpu") -> str:
    """A column per side, implementation and device run: "python: reference",
    "cpp: reference @cuda"."""
    return f"{side}: {implementation}" + ("" if device == "cpu" else f" @{device}")


def gtest_rows(path: pathlib.Path, implementation: str, device: str = "cpu") -> list[dict]:
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        ids = [bid for p in case.iter("property") if p.get("name") == "behaviour"
               for bid in p.get("value", "").split(",") if bid]
        row = {"test": f"{case.get('classname')}.{case.get('name')}", "behaviours": ids,
               "side": "cpp", "implementation": implementation, "device": device}
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            row.update(outcome="fail", message=(failure.get("message") or failure.text or "").strip())
        elif case.get("result") == "skipped" or skipped is not None:
            text = skipped.get("message", "") if skipped is not None else ""
            row.update(outcome="unsupported", reason=text.split("\n")[-1].strip() or text)
        else:
            row.update(outcome="pass")
        if case.get("file"):
            row["source"] = f"{repository_path(case.get('file'))}:{case.get('line', '1')}"
        rows.append(row)
    return rows


def python_rows(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cell(outcomes: list[str], level: str = "required") -> str:
    if not outcomes:
        return "missing"
    if any(o == "fail" for o in outcomes):
        return MISS if level == "recommended" else "FAIL"
    if all(o == "unsupported" for o in outcomes):
        return "unsupported"
    if any(o == "xfail" for o in outcomes):
        return "known-fail"
    if any(o == "stale" for o in outcomes):
        return "stale"
    return "pass"


def is_fatal(row: dict, catalogue: dict) -> bool:
    """A failure fails the run unless every behaviour it names is recommended."""
    return row["outcome"] == "fail" and (
        not row["behaviours"] or any(catalogue[b].level == "required" for b in row["behaviours"]))


def suite_failed(status: int, rows: list[dict], catalogue: dict) -> bool:
    """Whether a suite's run is an unexpected result: it wrote no rows, a
    required behaviour failed, or it exited non-zero without a failing row
    to explain it (a crash). Recommended misses alone are not."""
    if not rows or any(is_fatal(r, catalogue) for r in rows):
        return True
    return status != 0 and not any(r["outcome"] == "fail" for r in rows)


def scores(catalogue: dict, labels: list[str], table: list[list[str]]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per column: (passed, applicable) for required and for recommended
    behaviours. Applicable: expressible on the side and not unsupported;
    a known failure counts as applicable and not passed, a stale one as passed."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for i, label in enumerate(labels):
        tally = {"required": [0, 0], "recommended": [0, 0]}
        for row in table:
            value = row[2 + i]
            if value in ("-", "unsupported"):
                continue
            t = tally[catalogue[row[0]].level]
            t[1] += 1
            t[0] += value in PASSING
        out[label] = {level: (p, n) for level, (p, n) in tally.items()}
    return out


def score_line(score: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{level} {p}/{n}" for level, (p, n) in score.items() if n)


def build(catalogue: dict, rows: list[dict], platform_label: str,
          devices: dict | None = None) -> tuple[list[str], list[list[str]]]:
    """Column labels and one row per behaviour: [id, profile, cells...].
    A column per (side, implementation, device); at a device other than cpu
    only the behaviours `devices` (conformance/devices.toml) lists for it
    apply, the others are "-"."""
    columns = sorted({(r["side"], r["implementation"], device_of(r)) for r in rows},
                     key=lambda c: (c[2] != "cpu", c[2], c[0] != "cpp", c[1] != "reference", c[1]))
    by_cell: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    platform: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        for bid in r["behaviours"]:
            if catalogue[bid].profile == "platform":
                platform[bid].append(r["outcome"])
            else:
                by_cell[(bid, r["side"], r["implementation"], device_of(r))].append(r["outcome"])
    labels = [column_label(*column) for column in columns] + [platform_label]
    ran_at_cpu = any(device == "cpu" for _, _, device in columns)
    table = []
    for bid, b in catalogue.items():
        cells = []
        for side, impl, device in columns:
            listed = device == "cpu" or bid in (devices[device].behaviours if devices else ())
            if b.profile == "platform" or side not in b.sides or not listed:
                cells.append("-")
            else:
                cells.append(cell(by_cell[(bid, side, impl, device)], b.level))
        # Platform tests run at cpu only: a run at other devices alone has none.
        cells.append(cell(platform[bid], b.level) if b.profile == "platform" and ran_at_cpu else "-")
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
           MISS: "#f5d0b0", "stale": "#d8f0a0",
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
