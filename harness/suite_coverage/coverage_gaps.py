"""The branches of the reference the conformance suites alone leave
untaken, grouped by behaviour area: the source file's section (its
`// ---- name ----` marker in C++, its top-level def or class in Python), so
that a reader sees which part of the registry no conformance test decides.
Written as results/coverage/uncovered-branches.txt and .html.
"""

from __future__ import annotations

import ast
import html
import pathlib
import re

from .coverage_behaviours import ROOT, shown_name

_SECTION = re.compile(r"^// ---- (.+?) -+\s*$")


def cpp_sections(path: pathlib.Path) -> list[str]:
    """Per line (0-based): the section the line lies in ("" before any)."""
    sections, current = [], ""
    for line in path.read_text(errors="replace").split("\n"):
        marker = _SECTION.match(line)
        if marker:
            current = marker.group(1)
        sections.append(current)
    return sections


def python_sections(path: pathlib.Path) -> list[str]:
    lines = path.read_text().split("\n")
    sections = [""] * (len(lines) + 1)
    for node in ast.parse("\n".join(lines)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for n in range(node.lineno - 1, node.end_lineno or node.lineno):
                sections[n] = node.name
    return sections


def lcov_branches(info: pathlib.Path) -> dict[str, dict[int, list[bool]]]:
    """file -> line -> taken per branch, from an lcov tracefile's BRDA records."""
    found: dict[str, dict[int, list[bool]]] = {}
    current = None
    for line in info.read_text().splitlines():
        if line.startswith("SF:"):
            current = found.setdefault(line[3:], {})
        elif line.startswith("BRDA:") and current is not None:
            number, _block, _branch, taken = line[5:].split(",")
            current.setdefault(int(number), []).append(taken not in ("-", "0"))
    return found


def cpp_gaps(info: pathlib.Path) -> dict[str, list[tuple[str, int, int, int]]]:
    """area -> (file, line, untaken, branches) for each line with an untaken branch."""
    areas: dict[str, list[tuple[str, int, int, int]]] = {}
    for file, lines in sorted(lcov_branches(info).items()):
        path = pathlib.Path(file)
        if not path.is_file():
            continue
        sections = cpp_sections(path)
        for number, taken in sorted(lines.items()):
            if not all(taken):
                section = sections[number - 1] if number - 1 < len(sections) else ""
                area = f"{shown_name(file)}: {section or '(before any section)'}"
                areas.setdefault(area, []).append((shown_name(file), number, taken.count(False), len(taken)))
    return areas


def python_gaps(cov, files: list[str], contexts: str = "conformance:") -> dict[str, list[tuple[str, int, int, int]]]:
    """The same for Python files, from coverage.py's data of the contexts
    whose name starts with `contexts` (the conformance suites alone)."""
    data = cov.get_data()
    data.set_query_contexts([re.escape(contexts)])
    areas: dict[str, list[tuple[str, int, int, int]]] = {}
    try:
        for file in files:
            analysis = cov._analyze(file)  # coverage.py's own analysis, the query contexts applied
            missing = analysis.missing_branch_arcs()
            if not missing:
                continue
            sections = python_sections(pathlib.Path(file))
            exits = getattr(analysis, "exit_counts", {})
            for line in sorted(missing):
                section = sections[line - 1] if line - 1 < len(sections) else ""
                area = f"{shown_name(file)}: {section or '(module level)'}"
                areas.setdefault(area, []).append((shown_name(file), line, len(missing[line]),
                                                   max(exits.get(line, 0), len(missing[line]))))
    finally:
        data.set_query_contexts(None)
    return areas


def write(out: pathlib.Path, gaps: dict[str, dict[str, list[tuple[str, int, int, int]]]]) -> list[str]:
    """uncovered-branches.txt and .html; the text's lines."""
    lines = ["# Branches the conformance suites alone leave untaken, by behaviour area", ""]
    rows = []
    for layer, areas in gaps.items():
        total = sum(u for entries in areas.values() for _, _, u, _ in entries)
        lines.append(f"## {layer}: {total} untaken branches in {len(areas)} areas")
        for area, entries in sorted(areas.items(), key=lambda kv: -sum(e[2] for e in kv[1])):
            untaken = sum(e[2] for e in entries)
            where = ", ".join(f"{line}" + (f" ({u} of {n})" if n > 1 else "") for _, line, u, n in entries)
            lines.append(f"  {untaken:4d}  {area}: lines {where}")
            rows.append((layer, area, untaken, where))
        lines.append("")
    (out / "uncovered-branches.txt").write_text("\n".join(lines) + "\n")
    table = "".join(f"<tr><td>{html.escape(layer)}</td><td>{html.escape(area)}</td><td>{untaken}</td>"
                    f"<td>{html.escape(where)}</td></tr>" for layer, area, untaken, where in rows)
    (out / "uncovered-branches.html").write_text(
        "<!doctype html><meta charset=utf-8><title>Untaken branches</title>"
        "<style>body{font-family:sans-serif}td{padding:2px 8px;vertical-align:top}</style>"
        "<h1>Branches the conformance suites alone leave untaken</h1>"
        "<p>By behaviour area: the source file's section (C++: its <code>// ---- name ----</code> marker; "
        "Python: its top-level def or class). Lines list untaken of all branches where a line has several."
        f"<table><tr><th>layer</th><th>area</th><th>untaken</th><th>lines</th></tr>{table}</table>\n")
    return lines


def reference_python_files(staged_or_source: pathlib.Path = ROOT / "reference" / "python" / "native_registry"
                           ) -> list[str]:
    return sorted(str(p) for p in staged_or_source.glob("*.py"))
