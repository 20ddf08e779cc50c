"""The conformance report that explains itself: results.json, matrix.html and
the terminal's closing list of failures, all from one document.

The document holds, per behaviour, its title, statement, level and profile,
the matrix cell of each column and the results behind it (test, outcome,
source path:line, known-failure or unsupported reason, failure message); per
column the totals and the conformance score; and the list of every failing,
unexpected or stale result.
"""

from __future__ import annotations

import html
import os
import pathlib
from collections import defaultdict

from . import ROOT, matrix
# Outcomes that make a run fail: a failure, a known failure that passed
# (strict xfail: xpass, or `stale` where the expectation is out of date).
BAD = ("fail", "xpass", "stale")
LEVELS = ("required", "recommended")


def level_of(behaviour) -> str:
    return getattr(behaviour, "level", None) or "required"


def column_of(row: dict, behaviour, platform_label: str) -> str:
    if behaviour.profile == "platform":
        return platform_label
    return matrix.column_label(row["side"], row["implementation"], matrix.device_of(row))


def score(catalogue: dict, labels: list[str], table: list[list[str]]) -> dict[str, dict]:
    """Per column and level: behaviours passed of those applicable (a cell
    that is neither '-' nor unsupported); known failures count as not passed."""
    out: dict[str, dict] = {}
    for i, label in enumerate(labels):
        per_level = {}
        for level in LEVELS:
            cells = [row[2 + i] for row in table if level_of(catalogue[row[0]]) == level
                     and row[2 + i] not in ("-", "unsupported")]
            passed = sum(c == "pass" for c in cells)
            per_level[level] = {"passed": passed, "applicable": len(cells),
                                "score": round(passed / len(cells), 4) if cells else None}
        out[label] = per_level
    return out


def document(catalogue: dict, rows: list[dict], labels: list[str], table: list[list[str]], *,
             implementations: list[dict], summary: str, problems: list[str]) -> dict:
    platform_label = labels[-1]
    by_column: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        for bid in row["behaviours"]:
            by_column[(bid, column_of(row, catalogue[bid], platform_label))].append(row)
    behaviours, failures = [], []
    for table_row in table:
        bid, cells = table_row[0], table_row[2:]
        b = catalogue[bid]
        entry = {"id": bid, "title": b.title, "statement": b.statement, "level": level_of(b),
                 "level_reason": getattr(b, "level_reason", ""), "profile": b.profile,
                 "implied": b.implied, "cells": dict(zip(labels, cells)),
                 "results": {label: by_column.get((bid, label), []) for label in labels
                             if by_column.get((bid, label))}}
        behaviours.append(entry)
        for label, value in zip(labels, cells):
            if value == "missing":
                failures.append({"behaviour": bid, "column": label, "outcome": "missing",
                                 "test": "", "source": "",
                                 "message": "no test result for this behaviour (a test was not collected, "
                                            "or its suite crashed; see the suite's log)"})
            for r in by_column.get((bid, label), []):
                if r["outcome"] in BAD:
                    # A recommended behaviour's failure is a miss, reported, not fatal.
                    shown = "miss" if r["outcome"] == "fail" and level_of(b) == "recommended" else r["outcome"]
                    failures.append({"behaviour": bid, "column": label, "outcome": shown,
                                     "test": r["test"], "source": r.get("source", ""),
                                     "message": r.get("message", "")})
    return {"summary": summary, "implementations": implementations, "columns": labels,
            "totals": matrix.counts(labels, table), "score": score(catalogue, labels, table),
            "problems": problems, "behaviours": behaviours, "failures": failures, "results": rows}


def failure_list(doc: dict) -> str:
    """The terminal's closing list: every failing, unexpected or stale result."""
    if not doc["failures"] and not doc["problems"]:
        return ""
    lines = [f"Failures and unexpected results ({len(doc['failures'])}):"]
    for f in doc["failures"]:
        where = f" ({f['source']})" if f["source"] else ""
        lines.append(f"  {f['outcome'].upper():7s} {f['behaviour']}  [{f['column']}]  {f['test']}{where}")
        message = f["message"].strip().splitlines() or ["(no message)"]
        lines += [f"          {line}" for line in message[:6]]
        if len(message) > 6:
            lines.append(f"          ... ({len(message) - 6} more lines in results.json)")
    lines += [f"  PROBLEM {p}" for p in doc["problems"]]
    return "\n".join(lines)


# ---- matrix.html ------------------------------------------------------------

STYLE = """
body{font-family:system-ui,sans-serif;font-size:13px;margin:16px;color:#222}
table{border-collapse:collapse;margin-bottom:14px}
td,th{padding:3px 7px;border:1px solid #ccc;vertical-align:top;text-align:left}
th{background:#f0f0f0}
td:first-child{min-width:22em}
.pass{background:#c8f0c8}.FAIL,.missing{background:#f5b0b0}.known-fail{background:#f5e0a0}
.unsupported{background:#e4e4e4}
.title{color:#444}.stmt{max-width:42em;color:#333}
details summary{cursor:pointer}
pre{white-space:pre-wrap;max-width:32em;margin:4px 0;font-size:12px;background:#fff8f8;padding:4px}
.required{font-weight:600}.recommended{color:#555}
td.num{text-align:right}
"""


def _link(source: str, results_dir: pathlib.Path) -> str:
    if not source:
        return ""
    path, _, line = source.rpartition(":")
    target = pathlib.Path(path) if pathlib.Path(path).is_absolute() else ROOT / path
    href = os.path.relpath(target, results_dir) + (f"#L{line}" if line else "")
    return f'<a href="{html.escape(href)}"><code>{html.escape(source)}</code></a>'


def _cell(value: str, results: list[dict], results_dir: pathlib.Path) -> str:
    shown = [r for r in results if r["outcome"] != "pass"] if value != "pass" else []
    if not shown:
        return f'<td class="{html.escape(value)}">{html.escape(value)}</td>'
    parts = []
    for r in shown:
        text = r.get("message") or r.get("reason") or ""
        parts.append(f"<div>{html.escape(r['outcome'])}: <code>{html.escape(r['test'])}</code> "
                     f"{_link(r.get('source', ''), results_dir)}<pre>{html.escape(text)}</pre></div>")
    return (f'<td class="{html.escape(value)}"><details class=cell><summary>{html.escape(value)}</summary>'
            f'{"".join(parts)}</details></td>')


def _score_text(s: dict) -> str:
    if not s["applicable"]:
        return "–"
    percent = f" ({s['score'] * 100:.0f} %)" if s["score"] is not None else ""
    return f"{s['passed']}/{s['applicable']}{percent}"


def page(doc: dict, results_dir: pathlib.Path) -> str:
    labels = doc["columns"]
    out = ["<!doctype html><meta charset=utf-8><title>Conformance matrix</title>",
           f"<style>{STYLE}</style><h1>Conformance matrix</h1>", f"<p>{html.escape(doc['summary'])}</p>"]
    out.append("<table><tr><th>implementation</th><th>suites</th><th>what is under test</th></tr>")
    for impl in doc["implementations"]:
        spec = f" <code>{html.escape(impl['spec'])}</code>" if impl["spec"] != impl["label"] else ""
        out.append(f"<tr><td><b>{html.escape(impl['label'])}</b>{spec}</td>"
                   f"<td>{', '.join(impl['suites'])}</td><td>{html.escape(impl['description'])}</td></tr>")
    out.append("</table>")
    if doc["problems"]:
        out.append("<h2>Problems</h2><ul>" + "".join(f"<li>{html.escape(p)}</li>" for p in doc["problems"]) + "</ul>")
    # Totals and scores per column.
    kinds = sorted(matrix.ORDER, key=matrix.ORDER.get)
    out.append("<table><tr><th>column</th>" + "".join(f"<th>{k}</th>" for k in kinds)
               + "".join(f"<th>score: {lv}</th>" for lv in LEVELS) + "</tr>")
    for label in labels:
        tally, sc = doc["totals"].get(label, {}), doc["score"][label]
        scores = "".join(f'<td class="num">{_score_text(sc[lv])}</td>' for lv in LEVELS)
        out.append(f"<tr><td>{html.escape(label)}</td>"
                   + "".join(f'<td class="num">{tally.get(k, 0)}</td>' for k in kinds) + scores + "</tr>")
    out.append("</table>")
    # The matrix.
    out.append("<table><tr><th>behaviour</th><th>level</th><th>profile</th>"
               + "".join(f"<th>{html.escape(label)}</th>" for label in labels) + "</tr>")
    for b in doc["behaviours"]:
        level_note = f' title="{html.escape(b["level_reason"])}"' if b["level_reason"] else ""
        out.append(
            f"<tr><td><code>{html.escape(b['id'])}</code><div class=title>{html.escape(b['title'])}</div>"
            f"<details><summary>statement</summary><div class=stmt>{html.escape(b['statement'])}</div></details></td>"
            f'<td class="{b["level"]}"{level_note}>{b["level"]}</td><td>{b["profile"]}'
            f'{" (implied)" if b["implied"] else ""}</td>'
            + "".join(_cell(b["cells"][label], b["results"].get(label, []), results_dir) for label in labels)
            + "</tr>")
    out.append("</table>")
    out.append(f"<h2>Failures and unexpected results ({len(doc['failures'])})</h2>")
    if doc["failures"]:
        out.append("<table><tr><th>outcome</th><th>behaviour</th><th>column</th><th>test</th><th>message</th></tr>")
        for f in doc["failures"]:
            out.append(f"<tr><td>{f['outcome']}</td><td><code>{html.escape(f['behaviour'])}</code></td>"
                       f"<td>{html.escape(f['column'])}</td><td><code>{html.escape(f['test'])}</code><br>"
                       f"{_link(f['source'], results_dir)}</td><td><details><summary>"
                       f"{html.escape((f['message'].strip().splitlines() or [''])[0][:120])}</summary>"
                       f"<pre>{html.escape(f['message'])}</pre></details></td></tr>")
        out.append("</table>")
    else:
        out.append("<p>None.</p>")
    out.append("<p>Cells: pass / FAIL / known-fail (an expectation entry with its reason) / unsupported "
               "(a feature the implementation lacks) / - (not expressible on that side). Click a cell "
               "for its tests, messages and reasons; a test's link opens its source. matrix.html#open "
               "shows them all.</p>")
    out.append('<script>if (location.hash === "#open") '
               'document.querySelectorAll("details.cell").forEach(d => d.open = true);</script>')
    return "\n".join(out) + "\n"
