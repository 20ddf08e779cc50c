"""Generated sections of the docs: the text between `<!-- NAME:begin ... -->`
(anything may follow the name up to `-->`, e.g. which command writes it) and
`<!-- NAME:end -->`, written only by the command that generates it.

The one reader and writer of those markers, for harness/docgen.py,
reference/bench/report.py (bench-table) and harness/gpu/report.py (gpu-run).
A section is replaced only where each of its markers appears exactly once,
begin before end; anything else is an error naming the file and the
section, and nothing is written: a missing marker is never made up (a
section put back by hand somewhere would be written twice).
"""

from __future__ import annotations

import pathlib
import re


class MarkerError(ValueError):
    """A section's markers are missing, repeated or out of order."""


def begin_pattern(name: str) -> re.Pattern:
    # The begin marker with the line break after it: the body starts on the next line.
    return re.compile(rf"<!-- {re.escape(name)}:begin\b[^>]*-->\n?")


def end_marker(name: str) -> str:
    return f"<!-- {name}:end -->"


def span(text: str, name: str, where: str = "the text") -> tuple[int, int]:
    """The span of section `name`'s body (between its markers) in `text`."""
    begins = list(begin_pattern(name).finditer(text))
    ends = text.count(end_marker(name))
    if len(begins) != 1 or ends != 1:
        raise MarkerError(f"{where}: the {name} section needs one begin and one end marker, "
                          f"found {len(begins)} and {ends}")
    stop = text.find(end_marker(name))
    if stop < begins[0].end():
        raise MarkerError(f"{where}: the {name} section's end marker comes before its begin marker")
    return begins[0].end(), stop


def body(text: str, name: str, where: str = "the text") -> str:
    start, stop = span(text, name, where)
    return text[start:stop]


def replace(text: str, name: str, new_body: str, where: str = "the text") -> str:
    """`text` with section `name`'s body replaced by `new_body` (ending in a line break)."""
    start, stop = span(text, name, where)
    if new_body and not new_body.endswith("\n"):
        new_body += "\n"
    return text[:start] + new_body + text[stop:]


def write(path: pathlib.Path, name: str, new_body: str) -> bool:
    """Rewrites section `name` of the file at `path`; whether it changed."""
    text = path.read_text()
    updated = replace(text, name, new_body, str(path))
    if updated != text:
        path.write_text(updated)
    return updated != text


def names(text: str) -> set[str]:
    """Every section name a begin or end marker in `text` mentions."""
    return set(re.findall(r"<!-- ([A-Za-z][\w.-]*):(?:begin|end)\b", text))
