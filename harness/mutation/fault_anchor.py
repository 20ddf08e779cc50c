"""Where a seeded fault applies in today's tree, so that a refactor that
moves or reformats code does not make its faults stale.

A fault (fixtures/faults/faults.toml) names a `file`, a `find` text and its
`replace`. The `file` is where the text was written, not a promise: the text
is looked for, in this order, and must be found exactly once at the first
level that finds it at all:

1. verbatim in the named file;
2. verbatim in any source of the same language under reference/ (code moved
   to another file);
3. C++ only: ignoring whitespace (`find` and the code compared with every
   space, tab and line break removed), in the named file, then in any C++
   source under reference/ (code re-indented or re-wrapped). Python's
   indentation is its syntax, so Python is matched verbatim only.

What is replaced is the span of the original code the text matched; the
`replace` text goes in as written (C++ does not care about the indentation
it brings).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

from .. import ROOT
CPP_SUFFIXES = (".cpp", ".h")
_WHITESPACE = re.compile(r"\s+")


class AnchorError(ValueError):
    """The fault's text is not in the tree exactly once."""


@dataclasses.dataclass(frozen=True)
class Anchor:
    file: str          # relative to the repository
    verbatim: bool     # found as written (else with whitespace ignored)


def _sources_under(root: pathlib.Path, suffixes: tuple[str, ...]) -> list[pathlib.Path]:
    """The reference's sources of these suffixes, its own tests left out
    (they are not what a fault breaks)."""
    reference = root / "reference"
    tests = (reference / "tests", reference / "python" / "tests")
    return sorted(p for p in reference.rglob("*") if p.suffix in suffixes and p.is_file()
                  and not any(t in p.parents for t in tests))


def _squeezed(text: str) -> tuple[str, list[int]]:
    """The text without whitespace, and each kept character's index in it."""
    kept = [i for i, c in enumerate(text) if not c.isspace()]
    return "".join(text[i] for i in kept), kept


def spans(text: str, find: str, verbatim: bool) -> list[tuple[int, int]]:
    """Every (start, end) of `find` in `text`: as written, or with whitespace ignored."""
    if verbatim:
        out, at = [], text.find(find)
        while at >= 0:
            out.append((at, at + len(find)))
            at = text.find(find, at + 1)
        return out
    needle = _WHITESPACE.sub("", find)
    if not needle:
        return []
    squeezed, index = _squeezed(text)
    out, at = [], squeezed.find(needle)
    while at >= 0:
        start, end = index[at], index[at + len(needle) - 1] + 1
        # Leading indentation the text was written with is replaced too, so
        # that a replace written for the start of a line starts the line.
        if find[:1] in " \t":
            while start > 0 and text[start - 1] in " \t":
                start -= 1
        out.append((start, end))
        at = squeezed.find(needle, at + 1)
    return out


def locate(file: str, find: str, root: pathlib.Path = ROOT) -> Anchor:
    """The level-by-level search the module docstring describes."""
    named = root / file
    cpp = named.suffix in CPP_SUFFIXES
    suffixes = CPP_SUFFIXES if cpp else (named.suffix,)
    levels = [True, False] if cpp else [True]
    for verbatim in levels:
        for candidates in ([named] if named.exists() else [], _sources_under(root, suffixes)):
            found = [(p, n) for p in candidates
                     if (n := len(spans(p.read_text(), find, verbatim)))]
            if not found:
                continue
            if len(found) == 1 and found[0][1] == 1:
                return Anchor(str(found[0][0].relative_to(root)), verbatim)
            where = ", ".join(f"{p.relative_to(root)} ({n}x)" for p, n in found)
            raise AnchorError(f"`find` occurs more than once ({where})"
                              + ("" if verbatim else ", whitespace ignored"))
    raise AnchorError(f"`find` occurs nowhere (looked in {file}, then every {'/'.join(suffixes)} "
                      "source under reference/" + (", also ignoring whitespace)" if cpp else ")"))


def apply(text: str, find: str, replace: str, verbatim: bool) -> str:
    """`text` with its one match of `find` replaced."""
    found = spans(text, find, verbatim)
    if len(found) != 1:
        raise AnchorError(f"`find` occurs {len(found)} times")
    start, end = found[0]
    return text[:start] + replace + text[end:]
