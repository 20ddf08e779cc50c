"""The mutant of a generated-mutant run, its stable key, and what both
languages' operators share (literals off by one and replaced by constants,
exception types swapped for siblings)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

@dataclass(frozen=True)
class Mutant:
    file: str       # relative to the tree it was generated from
    line: int       # 1-based
    kind: str       # the operator class (relational, logical, ...)
    change: str     # what it does, e.g. "== -> !="
    original: str   # the line as it was (no newline); lines from `line` on, for a span
    mutated: str    # the line (the lines) as the mutant has it
    key: str = ""

    # A generated mutant changes one line. A seeded fault may change
    # several: its `original` is then the lines it replaces, joined by
    # newlines, and its `mutated` what comes in their place (any number of
    # lines, at least one).
    @property
    def lines_replaced(self) -> int:
        return self.original.count("\n") + 1

    def apply(self, text: str) -> str:
        """`text` (the whole file) with this mutant's line (lines) replaced."""
        lines = text.split("\n")
        first, count = self.line - 1, self.lines_replaced
        if "\n".join(lines[first:first + count]) != self.original:
            raise ValueError(f"{self.file}:{self.line} is no longer {self.original.strip()!r}")
        lines[first:first + count] = self.mutated.split("\n")
        return "\n".join(lines)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def with_keys(mutants: list[Mutant]) -> list[Mutant]:
    """Gives each mutant its stable key; identical lines are told apart by
    their order in the file."""
    seen: dict[str, int] = {}
    keyed = []
    for m in mutants:
        digest = hashlib.sha1(m.original.strip().encode()).hexdigest()[:10]
        base = f"{m.file}|{m.kind}|{m.change}|{digest}"
        seen[base] = seen.get(base, 0) + 1
        keyed.append(Mutant(m.file, m.line, m.kind, m.change, m.original, m.mutated,
                            f"{base}|{seen[base]}"))
    return keyed


def literal_mutations(value: int) -> list[tuple[str, str, str]]:
    """An integer literal off by one (up, and down when that stays a
    non-negative literal) and replaced by the constants 0, 1 and -1."""
    found = [("off-by-one", f"{value} -> {value + 1}", str(value + 1))]
    if value >= 2:
        found.append(("off-by-one", f"{value} -> {value - 1}", str(value - 1)))
    for constant in (0, 1, -1):
        if constant != value and constant != value + 1 and not (value >= 2 and constant == value - 1):
            found.append(("constant", f"{value} -> {constant}", str(constant) if constant >= 0 else "(-1)"))
    return found


def siblings(name: str, families) -> list[str]:
    for family in families:
        if name in family:
            return [other for other in family if other != name]
    return []
