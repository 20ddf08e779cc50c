"""The coverage report's pages: the summary (text), the index page (HTML), the
figures' formatting, and the Cobertura XML a CI's coverage view reads.
"""

from __future__ import annotations

import html
import pathlib
import time
from collections import defaultdict

from .coverage_behaviours import ROOT, fewest, shown_name


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


def _figure(f: dict) -> str:
    return f"{f['percent']}% ({f['covered']}/{f['total']})"


CPP_CODE = "C++ reference/ (src, include, python/src)"
# The same counters through gcovr, without the branches the compiler makes on
# its own (see coverage_report.GCOVR_FILTERS).
CPP_SOURCE_BRANCHES = CPP_CODE + ", gcovr without compiler-made branches"


def _summary_rows(summary: dict):
    """(language, code, scope, figures) of each summary row: the C++ code, then
    each Python module, under each scope that has figures."""
    for scope, figures in summary["cpp"].items():
        if figures:
            yield "C++", CPP_CODE, scope, figures
    for scope, figures in summary.get("cpp_gcovr", {}).items():
        yield "C++", CPP_SOURCE_BRANCHES, scope, figures
    for name, by_scope in summary["python"].items():
        for scope, figures in by_scope.items():
            yield "Python", name, scope, figures


def summary_lines(summary: dict, behaviours: dict) -> list[str]:
    lines = []
    for language, code, scope, f in _summary_rows(summary):
        label = code if language == "C++" else f"Python {code}"
        decisions = f", decisions {_figure(f['decisions'])}" if "decisions" in f else ""
        lines.append(f"{label} under {scope}: lines {_figure(f['lines'])}, "
                     f"branches {_figure(f['branches'])}{decisions}")
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
