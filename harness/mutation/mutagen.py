"""Mutants nobody chose: classic mutation operators applied mechanically to
C++ (over the source text) and Python (over its tokens and syntax tree).

Every mutant replaces one line by one other line, so it is reported as
file:line and restored by writing the file back. A mutant's key is stable
under edits elsewhere in the file: file, operator, what it changes, a hash of
the line's text and, for identical lines, which occurrence it is; reviewed
equivalent mutants (fixtures/faults/equivalent_mutants.toml) are keyed by it.
"""

from __future__ import annotations

import ast
import random
import re

from .mutagen_core import Mutant, with_keys  # noqa: F401 (the mutant, for the runners)
from .mutagen_cpp import cpp_mutants
from .mutagen_python import python_mutants


def sample(candidates: list[Mutant], n: int | None, seed: int) -> list[Mutant]:
    """A reproducible sample: the same candidates, n and seed give the same
    mutants whatever order they were generated in. Ordered by file and line,
    so a run recompiles each file once per mutant, not twice."""
    ordered = sorted(candidates, key=lambda m: m.key)
    chosen = ordered if n is None or n >= len(ordered) else random.Random(seed).sample(ordered, n)
    return sorted(chosen, key=lambda m: (m.file, m.line, m.key))


def mutants_of(rel: str, text: str) -> list[Mutant]:
    return python_mutants(rel, text) if rel.endswith(".py") else cpp_mutants(rel, text)


_CPP_SECTION_RE = re.compile(r"^// ---- (.+?) -+\s*$")


def part_lines(rel: str, text: str, names: set[str]) -> dict[str, set[int]]:
    """The (1-based) lines of each named part of a file: in Python a def or
    class by its qualified name (`helper`, `Class`, `Class.method`; its
    decorators included), in C++ a section, from its `// ---- name ----`
    marker line to the next marker or the end. A name not found maps to no
    lines (the caller reports it)."""
    found: dict[str, set[int]] = {name: set() for name in names}
    if rel.endswith(".py"):
        def walk(body: list[ast.stmt], prefix: str) -> None:
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = prefix + node.name
                    if name in names:
                        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                        found[name] = set(range(first, (node.end_lineno or node.lineno) + 1))
                    if isinstance(node, ast.ClassDef):
                        walk(node.body, name + ".")

        walk(ast.parse(text).body, "")
        return found
    current = None
    for number, line in enumerate(text.split("\n"), 1):
        marker = _CPP_SECTION_RE.match(line)
        if marker:
            current = marker.group(1) if marker.group(1) in names else None
        if current:
            found[current].add(number)
    return found
