"""C++ mutants switched at run time (mutant schemata), the first part of a
schemata build: one copy of a source file holding each of its line mutants
behind `nr_mutant_is(ID)`, which reads $NR_MUTANT_ID once per process
(and, where $NR_MUTANT_TRACE names a file, marks mutant ID reached in it:
reached_map.py).

A line that is a whole statement (it ends in `;`, its brackets balance, it
declares nothing and opens or closes no block) is switched whole, so a
mutant runs exactly the rewritten line:

    if (nr_mutant_is(3)) { <mutated line> } else if (...) { ... } else { <line> }

(a deleted statement: `if (!nr_mutant_is(3)) { <line> }`). Any other line
(an `if (...) {` header, a declaration, a line of a longer expression) is
switched on the smallest span in parentheses that covers what the mutant
changes, one argument of a call where the parentheses hold several:

    if ((nr_mutant_is(4) ? (a != b) : (a == b))) {

and a declaration on its initializer. A mutant none of these fit is switched
on a region of several lines, as a seeded fault is (below: a `throw X(`
whose arguments go on below, a condition of two lines), where one fits;
else it is left out (built as without schemata). Every switch stays on its line, so
__LINE__ and the line numbers in messages are the file's.

Whether each switched form compiles is found by compiling (compile_check):
the mutants of a line the compiler rejects are taken out, and reported, and
the rest compiled again, so one bad form stops none of the others.

The copies, at their paths in the tree under one folder, are what
-Dmutant_schemata=<folder> (meson_options.txt) compiles the core and the
extension from; schemata_build.py is the runner's use of it (--switch of a
C++ layer).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field

from . import mutagen_cpp
from .mutagen_core import Mutant
from .mutagen_cpp import _DECLARATION, _KEYWORD_START, _mask_cpp
from .mutation_report import span

# The switch's definition, included first by every switched file.
HEADER_NAME = "nr_mutant_switch.h"
HEADER = """\
// Mutant schemata: which generated mutant this process runs (harness/mutation/cpp_schemata.py).
// A schemata build only; $NR_MUTANT_ID, $NR_MUTANT_CHOICE and $NR_MUTANT_TRACE
// are read once.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace nr_schemata {
// $NR_MUTANT_CHOICE names a file whose first 8 bytes hold the chosen id,
// mapped shared and read at each switch: a warm suite (suite_server.py)
// writes it before it forks the child that runs a mutant, in a process that
// loaded this build with none chosen. Otherwise $NR_MUTANT_ID, read once.
inline const std::int64_t* shared_choice() {
  static const std::int64_t* const word = [] () -> const std::int64_t* {
    const char* path = std::getenv("NR_MUTANT_CHOICE");
    if (path == nullptr) return nullptr;
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    void* bytes = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    return bytes == MAP_FAILED ? nullptr : static_cast<const std::int64_t*>(bytes);
  }();
  return word;
}

inline long chosen_mutant() {
  if (const std::int64_t* word = shared_choice()) return static_cast<long>(__atomic_load_n(word, __ATOMIC_RELAXED));
  static const long id = [] {
    const char* value = std::getenv("NR_MUTANT_ID");
    return value != nullptr ? std::strtol(value, nullptr, 10) : -1L;
  }();
  return id;
}

// Which mutants a run reaches (reached_map.py): $NR_MUTANT_TRACE names a
// file of one byte per mutant id, mapped shared, so that child processes
// (forked or started with this environment) mark the same bytes; byte ID is
// set when the switch of mutant ID is evaluated, that is when the mutant
// could change what runs.
struct Reached {
  unsigned char* bytes = nullptr;
  long size = 0;
};
inline const Reached& reached() {
  static const Reached map = [] {
    Reached found;
    const char* path = std::getenv("NR_MUTANT_TRACE");
    if (path == nullptr) return found;
    const int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return found;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void* bytes = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (bytes != MAP_FAILED) {
        found.bytes = static_cast<unsigned char*>(bytes);
        found.size = static_cast<long>(st.st_size);
      }
    }
    ::close(fd);
    return found;
  }();
  return map;
}

inline bool mutant_is(long id) {
  const Reached& map = reached();
  if (map.bytes != nullptr && id >= 0 && id < map.size) __atomic_store_n(map.bytes + id, 1, __ATOMIC_RELAXED);
  return chosen_mutant() == id;
}
}  // namespace nr_schemata

#define nr_mutant_is(id) (::nr_schemata::mutant_is(id))
"""

_CALLEE = re.compile(r"[A-Za-z_][\w:.]*(?:->[A-Za-z_]\w*)*$")
_CONTROL = ("if", "while", "for", "switch", "catch", "return", "sizeof", "decltype", "alignof")


@dataclass
class Schemata:
    text: str
    ids: dict[str, int] = field(default_factory=dict)      # key -> its NR_MUTANT_ID
    left_out: dict[str, str] = field(default_factory=dict)  # key -> why it is not switched
    # A mutant left out whose statement has a probe: key -> the probe's id
    # (marked in a trace as a switch is, never chosen: see probe_line).
    probes: dict[str, int] = field(default_factory=dict)
    # A line mutant switched on a region of several lines (no form of its
    # own line fits): key -> the line its switch starts at, where the
    # compiler reports an error of that switch.
    anchors: dict[str, int] = field(default_factory=dict)

    def told(self, rel: str, mutants: int, seconds: float, left_out_as: str = "left out", indent: str = "") -> str:
        """A line on the file's check: how many switched, left out (and
        probed among them), then each reason with its count."""
        reasons: dict[str, int] = {}
        for why in self.left_out.values():
            reasons[why.split("\n")[0]] = reasons.get(why.split("\n")[0], 0) + 1
        return (f"{indent}{rel}: {mutants} mutants, {len(self.ids)} switched, {len(self.left_out)} {left_out_as} "
                f"({len(self.probes)} of them probed) ({seconds:.0f} s)"
                + "".join(f"\n{indent}  {n}: {why}" for why, n in reasons.items()))


def comment_at(masked: str, line: str) -> int:
    """Where a line's trailing // comment starts (len(line) for none)."""
    for i in range(len(line)):
        if line.startswith("//", i) and masked[i:i + 2] == "  ":
            return i
    return len(line)


def groups(masked: str) -> list[tuple[int, int]]:
    """The parenthesized groups of a masked line: (index of '(', index of its ')')."""
    found, stack = [], []
    for i, c in enumerate(masked):
        if c == "(":
            stack.append(i)
        elif c == ")" and stack:
            found.append((stack.pop(), i))
    return found


def top_level_commas(masked: str, start: int, end: int) -> list[int]:
    depth, found = 0, []
    for i in range(start, end):
        c = masked[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            found.append(i)
    return found


def whole_statement(code: str) -> bool:
    """A line that is one whole statement, switchable as a block."""
    s = code.strip()
    # `return x;`, `break;` and a one-line `if (c) x;` are statements too; a
    # line that starts by going on the expression of the line before is not
    # (an `else` on the next line makes the copy fail to compile: found then).
    keyword = _KEYWORD_START.match(s)
    return (s.endswith(";") and s.count("(") == s.count(")") and s.count("{") == s.count("}")
            and s.count("[") == s.count("]")
            and (keyword is None and not _DECLARATION.match(s)
                 or keyword is not None and keyword.group(1) in ("return", "break", "continue", "if", "throw"))
            and not s.startswith(("}", "{", ")", "#", "else", *_CONTINUATION))
            and not s.endswith(("= default;", "= delete;")))


# How a line that goes on an expression from the line before starts.
# (Not `*`: a statement may start by dereferencing.)
_CONTINUATION = (":", "?", "&&", "||", "+", "-", "/", "%", "<<", ">>", ".", "->", ",", "=", "|", "^", "<", ">")


def expression_region(masked: str, start: int, end: int) -> tuple[int, int] | None:
    """The smallest region of the line around [start, end) that is a whole
    expression: the content of the innermost parentheses covering it (one
    argument of several, or the whole call where the change spans
    arguments), or a declaration's initializer; None when none is."""
    covering = [(o, c) for o, c in groups(masked) if o < start and end <= c]
    if covering:
        o, c = max(covering)
        if ";" in masked[o + 1:c]:
            return for_header_part(masked, o, c, start, end)
        commas = top_level_commas(masked, o + 1, c)
        if not commas:
            return o + 1, c
        bounds = [o] + commas + [c]
        for a, b in zip(bounds, bounds[1:]):
            if a < start and end <= b:
                return a + 1, b  # one argument
        callee = _CALLEE.search(masked[:o].rstrip())
        if callee is None or callee.group(0) in _CONTROL or masked[:o].rstrip().endswith(">"):
            return None
        return callee.start(), c + 1  # the whole call: f(b, a) for f(a, b)
    eq = re.search(r"(?<![=!<>])=(?!=)", masked)
    code_end = masked.rstrip().rstrip(";")
    if eq and eq.end() <= start and end <= len(code_end) and masked.rstrip().endswith(";") \
            and masked.count("(") == masked.count(")"):
        return eq.end(), len(code_end)
    return None


def for_header_part(masked: str, o: int, c: int, start: int, end: int) -> tuple[int, int] | None:
    """In a for header (its parentheses at o and c), the part of its three
    around [start, end) that is an expression: its condition or its step,
    or its declaration's initializer; None when none is (a change of the
    declared type or name, or across parts)."""
    semis = [i for i in range(o + 1, c) if masked[i] == ";"
             and masked[o + 1:i].count("(") == masked[o + 1:i].count(")")]
    bounds = [o] + semis + [c]
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if a < start and end <= b:
            part = masked[a + 1:b]
            if not part.strip():
                return None
            if k > 0:
                return a + 1, b  # the condition or the step
            eq = re.search(r"(?<![=!<>])=(?!=)", part)
            if eq is None or a + 1 + eq.end() > start or "," in part:
                return None
            return a + 1 + eq.end(), b  # the initializer of its one declaration
    return None


def switch_line(line: str, masked: str, alternatives: list[tuple[int, str]]) -> tuple[str, list[int]]:
    """The line with its mutants switched: (text, the ids left out)."""
    cut = comment_at(masked, line)
    code, comment = line[:cut].rstrip(), line[cut:]
    indent = code[:len(code) - len(code.lstrip())]
    if whole_statement(masked[:cut]):
        branches = []
        for mutant_id, mutated in alternatives:
            mcut = comment_at(_mask_cpp(mutated)[0], mutated)
            body = mutated[:mcut].strip()
            branches.append((mutant_id, body if body != ";" else ""))
        if len(branches) == 1 and not branches[0][1]:
            return f"{indent}if (!nr_mutant_is({branches[0][0]})) {{ {code.strip()} }}" + \
                (f"  {comment}" if comment else ""), []
        chain = " else ".join(f"if (nr_mutant_is({i})) {{ {body} }}" for i, body in branches)
        return f"{indent}{chain} else {{ {code.strip()} }}" + (f"  {comment}" if comment else ""), []
    regions: list[tuple[int, int, int, str]] = []  # start, end, id, the region's mutated text
    left_out = []
    for mutant_id, mutated in alternatives:
        start, end, replacement = span(code, mutated[:comment_at(_mask_cpp(mutated)[0], mutated)].rstrip())
        region = expression_region(masked[:cut], start, max(end, start + 1) if end == start else end)
        if region is None:
            left_out.append(mutant_id)
            continue
        a, b = region
        a += len(code[a:b]) - len(code[a:b].lstrip())  # `x = (...)`, not `x =( ...)`
        regions.append((a, b, mutant_id, code[a:start] + replacement + code[end:b]))
    # Regions that overlap are switched together, on the widest of them.
    regions.sort()
    clusters: list[list] = []
    for r in regions:
        if clusters and r[0] < clusters[-1][1]:
            cluster = clusters[-1]
            cluster[1] = max(cluster[1], r[1])
            cluster[2].append(r)
        else:
            clusters.append([r[0], r[1], [r]])
    text = code
    for a, b, members in reversed(clusters):
        chain = ""
        for ra, rb, mutant_id, alt in members:
            widened = code[a:ra] + alt + code[rb:b]
            chain += f"nr_mutant_is({mutant_id}) ? ({widened}) : "
        text = text[:a] + f"({chain}({code[a:b]}))" + text[b:]
    return text + (f"  {comment}" if comment else ""), left_out


_STATEMENT_END = (";", "{", "}")
_NOT_A_STATEMENT = ("}", "{", "else", "case ", "default", "public:", "private:", "protected:", ":", ",", ")",
                    "#", "?", "&&", "||", "<<", ">>", "+", "-", "*", "/", "%", "=", ".", "[")


def probe_line(lines: list[str], masked: list[str], number: int) -> int | None:
    """Where a probe statement is run whenever line `number` is: the first
    line of the statement that holds it, where that statement follows
    another statement or a block's `{` in the same block (so nothing can
    jump past the probe to it); None where no such line is found (a label,
    a `case`, an `else`, a preprocessor line on the way, a line that starts
    no statement). A probe the compiler rejects (a line inside an
    initializer list, a class body) is found by compiling."""
    start = number - 1
    while True:
        previous = start - 1
        while previous >= 0 and not masked[previous].strip() and not lines[previous].strip().startswith("#"):
            previous -= 1
        if previous < 0 or lines[previous].strip().startswith("#"):
            return None
        code = masked[previous].strip()
        if code.endswith(_STATEMENT_END):
            break
        if code.endswith(":") or code.endswith("else"):
            return None
        start = previous
    first = masked[start].strip()
    if not first or first.startswith(_NOT_A_STATEMENT) or re.match(r"[A-Za-z_]\w*\s*:(?!:)", first):
        return None  # no statement, or one behind a label
    return start + 1


def schemata(rel: str, text: str, mutants: list[Mutant], first_id: int = 0,
             probes: dict[int, int] | None = None, as_statements: frozenset[str] = frozenset()) -> Schemata:
    """The switched copy of `text` (the file `rel`) holding `mutants`, their
    ids numbered from `first_id` in key order; `probes`: line -> the id a
    probe statement put in front of that line marks."""
    lines = text.split("\n")
    masked = _mask_cpp(text)
    ids = {m.key: first_id + i for i, m in enumerate(sorted(mutants, key=lambda m: m.key))}
    by_line: dict[int, list[Mutant]] = {}
    # Seeded faults (they may change several lines, and say FAULT in a
    # comment) are switched on regions (switch_spans); generated mutants by line.
    spans = [m for m in mutants if switched_on_a_region(m)]
    for m in mutants:
        if m not in spans:
            by_line.setdefault(m.line, []).append(m)
    out = list(lines)
    left_out: dict[str, str] = {}
    # A line mutant no form of its line fits (a change inside a statement or
    # a condition of several lines: `throw X(` with its arguments below) is
    # switched on a region, as a seeded fault is, where one fits.
    beyond_its_line: list[Mutant] = []
    for number, found in sorted(by_line.items()):
        if lines[number - 1] != found[0].original:
            raise ValueError(f"{rel}:{number} is no longer {found[0].original.strip()!r}")
        switched, dropped = switch_line(lines[number - 1], masked[number - 1],
                                        [(ids[m.key], m.mutated) for m in found])
        out[number - 1] = switched
        beyond_its_line += [m for m in found if ids[m.key] in dropped]
    starts: dict[str, int] = {}
    left_out.update(switch_spans(text, out, [(ids[m.key], m) for m in spans + beyond_its_line], as_statements,
                                 starts))
    for m in beyond_its_line:
        if m.key in left_out:
            left_out[m.key] = "no expression or whole statement of its line covers its change"
    for key in left_out:
        del ids[key]
    for number, probe_id in (probes or {}).items():
        line = out[number - 1]
        indent = line[:len(line) - len(line.lstrip())]
        out[number - 1] = f"{indent}(void)nr_mutant_is({probe_id}); {line.lstrip()}"
    include = f'#include "{HEADER_NAME}"  // mutant schemata'
    anchors = {m.key: starts[m.key] for m in beyond_its_line if m.key in starts}
    return Schemata(_header_line(include, out), ids, left_out, anchors=anchors)


# ---- mutants of several lines (seeded faults), switched on a region --------------
#
# A seeded fault may replace lines with others (more, fewer). It is switched
# on the smallest region of the file around what it changes that is one of:
# the content of the innermost parentheses (one argument of several), an
# initializer or assigned value, or whole statements of one block (a
# statement whose block ends with `else` or `catch` taken whole):
#
#     (nr_mutant_is(7) ? (<new, on one line>) : (<the region as it is>))
#     if (nr_mutant_is(7)) { <new, on one line> } else { <the region as it is> }
#
# (an insertion between statements: `if (nr_mutant_is(7)) { <new> }`). The
# region as it is keeps its lines, so every line keeps its number; faults
# on one region are chained. A region that touches a line switched already,
# or another fault's region, is left out (rebuilt), as is one that the
# compiler rejects (compile_check).

def _balanced(masked: str) -> bool:
    stack = []
    for c in masked:
        if c in "([{":
            stack.append(c)
        elif c in ")]}":
            if not stack or "([{"[")]}".index(c)] != stack.pop():
                return False
    return not stack


def _unmatched_closer(masked: str) -> bool:
    depth = 0
    for c in masked:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return True
    return False


def _widened(text: str, mt: str, p: int, q: int, replacement: str) -> tuple[int, int, str]:
    """A change of text[p:q] into `replacement` widened until both sides are
    balanced (`erase(it)` -> `clear()` differ in `erase(it` and `clear(`):
    to the left where a side closes what it did not open, else to the right."""
    new_mt = _masked_text(text[:p] + replacement + text[q:])
    before, after = 0, 0
    while True:
        old_side = mt[p - before:q + after]
        new_side = new_mt[p - before:p + len(replacement) + after]
        if _balanced(old_side) and _balanced(new_side):
            break
        if (_unmatched_closer(old_side) or _unmatched_closer(new_side)) and before < p:
            before += 1
        elif q + after < len(text):
            after += 1
        else:
            break
    return p - before, q + after, text[p - before:p] + replacement + text[q:q + after]


def _masked_text(text: str) -> str:
    """_mask_cpp's text at the file's offsets: a preprocessor line (which
    the mask empties) is blanked at its length instead."""
    return "\n".join(m if len(m) == len(line) else " " * len(line)
                     for m, line in zip(_mask_cpp(text), text.split("\n")))


def _one_line(code: str) -> str | None:
    """A region's text on one line, its // comments cut; None where it
    holds a preprocessor line."""
    out = []
    for line, masked in zip(code.split("\n"), _mask_cpp(code)):
        if line.strip().startswith("#"):
            return None
        out.append(line[:comment_at(masked, line)].strip())
    return " ".join(part for part in out if part)


def _enclosing_parentheses(mt: str, p: int, q: int) -> tuple[int, int] | None:
    """The innermost parentheses around [p, q) of the masked text, where no
    `;`, `{` or `}` comes between: (index of '(', index of ')')."""
    depth, opening = 0, None
    for i in range(p - 1, -1, -1):
        c = mt[i]
        if c in ")]" or c == "}" and depth > 0:
            depth += 1
        elif c in "([" or c == "{" and depth > 0:
            if depth == 0:
                opening = i if c == "(" else None
                break
            depth -= 1
        elif c == "{" and _initializer_brace(mt, i):
            opening = i
            break
        elif c in ";{}":
            return None
    if opening is None:
        return None
    closing = _closer_after(mt, q, within_statement=True)
    return (opening, closing) if closing is not None and mt[closing] == ")}"["({".index(mt[opening])] else None


def _closer_after(mt: str, q: int, within_statement: bool = False) -> int | None:
    """Where the first bracket after q that closes one opened before q is
    (None: none; with `within_statement`, none before a `;` at depth 0)."""
    depth = 0
    for j in range(q, len(mt)):
        c = mt[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return j
            depth -= 1
        elif within_statement and c == ";" and depth == 0:
            return None
    return None


# Words after which a `{` opens a block: statements', a function's
# qualifiers, and (two words back) a class's or namespace's name.
_BLOCK_KEYWORDS = ("else", "try", "do", "const", "noexcept", "override", "final", "mutable")
_SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|union|enum)\s+[\w:]*$"
                             r"|->\s*[\w:<>,\s*&]+$")  # or a function's trailing return type


def _opener_of(mt: str, close: int) -> int:
    """Where the bracket that the one at `close` closes opens."""
    depth = 0
    for i in range(close, -1, -1):
        depth += (mt[i] in ")]}") - (mt[i] in "([{")
        if depth == 0:
            return i
    return 0


def _initializer_brace(mt: str, i: int) -> bool:
    """Whether the `{` at i opens a braced initializer list (an expression:
    after `=`, `(`, `,`, `return` or a type's name), not a block."""
    before = mt[:i].rstrip()
    word = re.search(r"[A-Za-z_]\w*$", before)
    if before.endswith(("=", "(", ",")):
        return True
    return word is not None and (word.group(0) == "return" or word.group(0) not in _BLOCK_KEYWORDS
                                 and not _SCOPE_KEYWORDS.search(before))


def _out_of_parentheses(mt: str, p: int, q: int) -> tuple[int, int]:
    """[p, q) widened to the outermost parentheses (or brackets) around it
    within its block: a change inside a call's arguments or an `if`'s
    condition is then a part of one statement, whose `;` are its own (a
    lambda's body, between braces, is a block of its own)."""
    while True:
        depth, opening = 0, None
        for i in range(p - 1, -1, -1):
            c = mt[i]
            if c in ")]}":
                depth += 1
            elif c in "([{":
                if depth == 0:
                    opening = i if c != "{" or _initializer_brace(mt, i) else None
                    break
                depth -= 1
        closing = None if opening is None else _closer_after(mt, q)
        if closing is None:
            return p, q
        p, q = opening, closing + 1


def _statement_start(mt: str, p: int) -> int:
    """Where the statement holding offset p starts: after the `;`, `{` or
    `}` before it (p itself where one comes right before it)."""
    if mt[:p].rstrip().endswith((";", "{", "}")) or not mt[:p].strip():
        return p
    depth = 0
    for i in range(p - 1, -1, -1):
        c = mt[i]
        if c in ")]":
            depth += 1
        elif c in "([":
            depth -= 1
        elif c == "}":
            if depth == 0:
                return i + 1
            depth += 1
        elif c == "{":
            if depth == 0:
                return i + 1
            depth -= 1
        elif c == ";" and depth == 0:
            return i + 1
    return 0


# A switch's label at the start of a statement (masked text): `case` and what
# it compares (qualified names too) to its `:`, or `default:`.
_LABEL = re.compile(r"\s*(?:case\b(?:[^:;{}]|::)*:(?!:)|default\s*:(?!:))")


def _statements_around(mt: str, p: int, q: int) -> tuple[int, int]:
    """The whole statements of one block around [p, q): from after the `;`,
    `{` or `}` before it, to the `;` or closing brace after it (with a
    block's `else` or `catch` after it, and a `;` right after a closing
    brace); a change that starts or ends a statement already keeps that end."""
    p, q = _out_of_parentheses(mt, p, q)
    start = _statement_start(mt, p)
    # A statement that goes on an `if`'s or a `try`'s block (`else`,
    # `catch`) is switched with the whole statement it belongs to.
    while re.match(r"\s*(else|catch)\b", mt[start:]) and mt[:start].rstrip().endswith("}"):
        start = _statement_start(mt, _opener_of(mt, len(mt[:start].rstrip()) - 1))
    # A `case X:` or `default:` label before the statement is not switched
    # with it: the switch's `if` would take the label into its block.
    while (label := _LABEL.match(mt, start, p)) is not None:
        start = label.end()
    code = mt[start:q].rstrip()
    if code.endswith(";") and _balanced(code) or code.endswith("}") and _balanced(code) \
            and not re.match(r"\s*(else|catch)\b", mt[q:]) \
            and not _initializer_brace(mt, _opener_of(mt, start + len(code) - 1)):
        return start, q
    depth, j = 0, q
    while j < len(mt):
        c = mt[j]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                return start, j
            depth -= 1
            if depth == 0:
                after = re.match(r"\s*", mt[j + 1:]).end() + j + 1
                if re.match(r"(else|catch)\b", mt[after:]):
                    j = after
                    continue
                return start, (after + 1 if mt[after:after + 1] == ";" else j + 1)
        elif c == ";" and depth == 0:
            return start, j + 1
        j += 1
    return start, len(mt)


def _initializer(mt: str, start: int, end: int, p: int, q: int) -> tuple[int, int] | None:
    """The value a statement [start, end) initializes or assigns, where
    [p, q) lies in it: after its first `=` (not a comparison's) at depth 0,
    to its closing `;`."""
    if not mt[start:end].rstrip().endswith(";"):
        return None
    close = start + len(mt[start:end].rstrip()) - 1
    depth = 0
    for i in range(start, p):
        c = mt[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif (c == "=" and depth == 0 and mt[i - 1] not in "=!<>" and mt[i + 1:i + 2] != "="):
            return (i + 1, close) if q <= close else None
    return None


def _code_span(original: str, mutated: str) -> tuple[int, int, str]:
    """span() of two texts of several lines, their // comments and trailing
    blanks left out, and the new text's /* */ comments (a fault's new lines
    often say FAULT in a comment):
    [start, end) offsets in `original`, and the code that replaces them."""
    def code(text: str) -> tuple[str, list[int]]:
        kept, starts, at = [], [], 0
        for line, masked in zip(text.split("\n"), _mask_cpp(text)):
            kept.append(line[:comment_at(masked, line)].rstrip() if len(masked) == len(line) else line)
            starts.append(at)
            at += len(line) + 1
        return "\n".join(kept), starts

    old_code, old_starts = code(original)
    new_code, _ = code(re.sub(r"\s*/\*.*?\*/", "", mutated))
    a, b, replacement = span(old_code, new_code)

    def placed(offset: int) -> int:  # an offset in old_code -> in original (same line, same column)
        line = old_code.count("\n", 0, offset)
        return old_starts[line] + offset - (old_code.rfind("\n", 0, offset) + 1)
    return placed(a), placed(b), replacement


def _block_end(mt: str, at: int) -> int:
    """Where the block around offset `at` closes (its `}`)."""
    closing = _closer_after(mt, at)
    return len(mt) if closing is None else closing


def declares(masked: str) -> bool:
    """Whether statements (masked) declare a name at their top level:
    switched whole, in `else { ... }`, the name would end with the block
    (an RAII guard, a lock, would then be released at once)."""
    depth, start = 0, 0
    for i, c in enumerate(masked):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth == 0 and (c == ";" or c == "}"):
            statement = masked[start:i + 1].strip()
            if _DECLARATION.match(statement) and not _KEYWORD_START.match(statement):
                return True
            start = i + 1
    return False


def span_region(text: str, mt: str, p: int, q: int, replacement: str, statements: bool = False
                ) -> tuple[str, int, int] | None:
    """Where a change of text[p:q] into `replacement` is switched: (form,
    start, end) of the region of `text` (form "expression", "statements"
    or "insert"), or None where no region fits."""
    group = None if statements else _enclosing_parentheses(mt, p, q)
    if group is not None and _balanced(mt[p:q]) and _balanced(_masked_text(replacement)):
        o, c = group
        if ";" not in mt[o + 1:c]:
            bounds = [o, *top_level_commas(mt, o + 1, c), c]
            for a, b in zip(bounds, bounds[1:]):
                if a < p and q <= b:
                    return "expression", a + 1, b
    start, end = _statements_around(mt, p, q)
    if not text[p:q].strip() and not mt[start:p].strip() \
            and _masked_text(replacement).rstrip().endswith((";", "}")):
        return "insert", p, p  # whole statements between two
    value = None if statements else _initializer(mt, start, end, p, q)
    if value is not None:
        return "expression", *value
    while start < end and mt[start].isspace():
        start += 1
    while end > start and mt[end - 1].isspace():
        end -= 1
    if declares(mt[start:end]):
        # Switched whole in `else { }`, a declaration would end with that
        # block (an RAII guard released at once): the region then runs to
        # its block's end, where the name ended anyway.
        end = _block_end(mt, end)
        while end > start and mt[end - 1].isspace():
            end -= 1
    covered = (start <= p or not mt[p:start].strip()) and (q <= end or not mt[end:q].strip())
    if not covered or not _balanced(mt[start:end]) \
            or not _balanced(_masked_text(text[start:p] + replacement + text[q:end])) \
            or re.match(r"(else|case|default)\b|\w+\s*:(?!:)", mt[start:end]):
        return None
    return "statements", start, end


def switched_on_a_region(m: Mutant) -> bool:
    return m.kind == SEEDED or "\n" in m.original or "\n" in m.mutated


def switch_spans(text: str, out: list[str], spans: list[tuple[int, Mutant]],
                 as_statements: frozenset[str] = frozenset(), starts_at: dict[str, int] | None = None
                 ) -> dict[str, str]:
    """Writes into `out` (the file's lines, some switched already) the
    switches of region mutants (id, mutant), chained where they change one
    region; regions that overlap are joined into the whole statements
    around both. The keys left out, with why; `starts_at` gets each switched
    key's first line (1-based)."""
    lines = text.split("\n")
    mt = _masked_text(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    changes: list[tuple[int, str, int, int, str]] = []  # id, key, [p, q) in text, its replacement
    groups: list[list] = []  # [form, start, end, [change, ...]]
    left_out: dict[str, str] = {}
    for mutant_id, m in spans:
        first = starts[m.line - 1]
        if text[first:first + len(m.original)] != m.original:
            raise ValueError(f"{m.file}:{m.line} is no longer {m.original.strip()!r}")
        a, b, replacement = _code_span(m.original, m.mutated)
        p, q, replacement = _widened(text, mt, first + a, first + b, replacement)
        change = (mutant_id, m.key, p, q, replacement.strip())
        found = span_region(text, mt, p, q, replacement, m.key in as_statements)
        if found is None:
            left_out[m.key] = "no expression or whole statements around its change"
            continue
        groups.append([*found, [change]])

    def overlap(g: list, h: list) -> bool:
        return g[1] < h[2] and h[1] < g[2] or g[1] == g[2] == h[1] == h[2] and g[0] != h[0]

    # Groups of one region are chained; overlapping ones joined, on the
    # statements around both, until none overlap.
    merged = True
    while merged:
        merged = False
        for i, g in enumerate(groups):
            for h in groups[i + 1:]:
                if (g[0], g[1], g[2]) == (h[0], h[1], h[2]) or overlap(g, h):
                    if (g[0], g[1], g[2]) != (h[0], h[1], h[2]):
                        a, b = _statements_around(mt, min(g[1], h[1]), max(g[2], h[2]))
                        while a < b and mt[a].isspace():
                            a += 1
                        while b > a and mt[b - 1].isspace():
                            b -= 1
                        g[0], g[1], g[2] = "statements", a, b
                    g[3] += h[3]
                    groups.remove(h)
                    merged = True
                    break
            if merged:
                break
    switched = text
    for form, start, end, members in sorted(groups, key=lambda g: -g[1]):
        touched = range(text.count("\n", 0, start), text.count("\n", 0, end) + 1)
        alternatives = []
        for mutant_id, key, p, q, replacement in members:
            if p < start and not mt[p:start].strip():  # blanks the region leaves out
                p = start
            if end < q and not mt[end:q].strip():
                q = end
            new = _one_line(text[start:p] + replacement + text[q:end]) if start <= p and q <= end else None
            if new is None or any(out[k] != lines[k] for k in touched) or (
                    form == "statements" and not _balanced(_masked_text(text[start:p] + replacement + text[q:end]))):
                left_out[key] = "no expression or whole statements around its change that it alone switches"
            else:
                alternatives.append((mutant_id, new))
                if starts_at is not None:
                    starts_at[key] = text.count("\n", 0, start) + 1
        if not alternatives:
            continue
        region = text[start:end]
        if form == "expression":
            replaced = "(" + "".join(f"nr_mutant_is({i}) ? ({new}) : " for i, new in alternatives) + f"({region}))"
        else:
            replaced = " else ".join(f"if (nr_mutant_is({i})) {{ {new} }}" for i, new in alternatives)
            replaced += " " if form == "insert" else f" else {{ {region} }}"
        switched = switched[:start] + replaced + switched[end:]
    switched_lines = switched.split("\n")
    for form, start, end, _ in groups:
        for k in range(text.count("\n", 0, start), text.count("\n", 0, end) + 1):
            if out[k] == lines[k]:
                out[k] = switched_lines[k]
    return left_out


def _header_line(include: str, out: list[str]) -> str:
    # A blank first line takes the include; otherwise it goes in front,
    # and a #line directive keeps every later line's number.
    if not out[0].strip():
        return "\n".join([include] + out[1:])
    return "\n".join([include, "#line 1", *out])


# The kinds whose switched form most often does not compile, taken out of a
# failing line one kind a round, in this order, until it compiles (its other
# mutants kept): `return {};` in a constructor, of a type with no default or
# in a lambda whose return type is deduced, arguments swapped to types that
# do not convert, a ternary of two types.
SUSPECTS = ("early-return", "return-value", "result-discarded", "argument-swap", "negation")

SEEDED = "seeded"  # the kind of a seeded fault taken as a mutant (seeded_faults.FaultMutant)

# The ids a file of N mutants may use from its first: N for its switches,
# N for its probes; the next file's start after them.
ID_SPAN = 2

NEAR = 3  # lines after a switched line an error it causes may be reported at
# An error, or where an error in a header came from: the line that required
# a template, or that expanded the switch's macro (in a constant expression).
_ERROR = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+):(?: error: (?P<message>.*)|\s+required from here"
                    r"| note: in expansion of macro)", re.M)


def error_lines(stderr: str, source_name: str) -> dict[int, list[str]]:
    """The compiler's error lines in the checked copy (read from stdin as
    `source_name`), each with its messages ("" for a required-from or
    macro-expansion note)."""
    lines: dict[int, list[str]] = {}
    for m in _ERROR.finditer(stderr):
        if m.group("file") in (source_name, "<stdin>"):
            lines.setdefault(int(m.group("line")), []).append(m.group("message") or "")
    return lines


WIDE = 60  # lines before an error a culprit is looked for where none is NEAR (a lambda's return type)
CULPRIT_TRIES = 4  # error lines (the first ones) a culprit is looked for from before the file is given up


def compile_check(rel: str, text: str, mutants: list[Mutant], command: list[str], source_name: str,
                  first_id: int = 0, rounds: int = 100, cwd: pathlib.Path | None = None) -> Schemata:
    """The schemata of `mutants` whose switched forms compile: `command`
    (a compiler and its flags, reading the source from stdin with -x c++ -)
    checks the copy; the mutants of each line it rejects are left out (as
    CompileError of their schemata form) and the rest checked again."""
    chosen = list(mutants)
    left: dict[str, str] = {}
    suspected: dict[int, int] = {}  # line -> how many of SUSPECTS went first
    # Region mutants whose expression form did not compile (a ternary of two
    # types): tried once more on whole statements before they are left out.
    on_statements: set[str] = set()
    # The line each mutant's switch starts at: its own, or for one switched
    # on a region of several lines that region's first (Schemata.anchors),
    # as the last copy checked had it.
    anchors: dict[str, int] = {}

    def at(m: Mutant) -> int:
        return anchors.get(m.key, m.line)

    def take_out(dropped: set[str]) -> list[Mutant]:
        retried = {m.key for m in chosen if m.key in dropped and switched_on_a_region(m)} - on_statements
        on_statements.update(retried)
        for key in dropped - retried:
            left[key] = "its schemata form does not compile (CompileError in the schemata build)"
        return [m for m in chosen if m.key not in dropped - retried]

    def culprits(line: int) -> set[str]:
        """The keys taken out of a line that does not compile: the mutants
        of the next kind of SUSPECTS it holds, if the line holds others
        too; else all of them. (Unchecked: the line may fail for another
        line's switch, a declaration's, taken out in a later round.)"""
        mine = [m for m in chosen if at(m) == line]
        while suspected.get(line, 0) < len(SUSPECTS):
            kind = SUSPECTS[suspected.get(line, 0)]
            suspected[line] = suspected.get(line, 0) + 1
            suspects = {m.key for m in mine if m.kind == kind}
            if suspects and len(suspects) < len(mine):
                return suspects
        return {m.key for m in mine}

    def errors(kept: list[Mutant]) -> tuple[Schemata, dict[int, list[str]], str]:
        """The copy of `kept`, its error lines (the copy's lines are the
        file's, after the include and the #line directive) with their
        messages ({0: []} for errors at no line of it), the compiler's output."""
        found = schemata(rel, text, kept, first_id, as_statements=frozenset(on_statements))
        anchors.update(found.anchors)
        done = subprocess.run(command, input=found.text, capture_output=True, text=True, cwd=cwd)
        lines = error_lines(done.stderr, source_name)
        return found, (lines or {0: []}) if done.returncode else {}, done.stderr

    def clears(line: int, removed: list[int]) -> bool:
        return line not in errors([m for m in chosen if at(m) not in removed])[1]

    def culprit_of(first: int) -> int | None:
        """The switched line whose switch makes line `first` fail: of those
        at most NEAR lines before it, nearest first (then the line after it),
        the first whose removal clears it; else, of those at most WIDE lines before, found by
        bisection (the fewest, nearest first, whose removal clears it)."""
        near = sorted({at(m) for m in chosen if first - NEAR <= at(m) <= first}, reverse=True) + \
            [first + 1] * any(at(m) == first + 1 for m in chosen)  # `x ? a` before a switched `: b;`
        found = next((line for line in near if clears(first, [line])), None)
        if found is not None:
            return found
        wide = sorted({at(m) for m in chosen if first - WIDE <= at(m) <= first}, reverse=True)
        if not wide or not clears(first, wide):
            return None
        low, high = 1, len(wide)  # removing wide[:high] clears it
        while low < high:
            mid = (low + high) // 2
            if clears(first, wide[:mid]):
                high = mid
            else:
                low = mid + 1
        return wide[high - 1]

    for _ in range(rounds):
        found, bad, stderr = errors(chosen)
        left.update(found.left_out)
        if not bad:
            # A region left out in an earlier round (a line it spans was
            # switched then) may fit once that line's mutants are taken out.
            found.left_out = {key: why for key, why in left.items() if key not in found.ids}
            return with_probes(rel, text, chosen, found, mutants, first_id, command, source_name, cwd, rounds,
                               frozenset(on_statements))
        # An error shows at the switched line or after it (a dangling
        # `else` on the next line, a lambda's return type at its end). One
        # at a switched line is that line's, unless it is about an `else`:
        # the compiler reports every such error it finds, and all those
        # lines are taken out at once. Else culprit_of finds the switched
        # line before the first error that causes it.
        lines_switched = {at(m) for m in chosen}
        at_switch = {line for line, messages in bad.items() if line in lines_switched
                     and not any("without a previous" in message for message in messages)}
        if at_switch:
            chosen = take_out(set().union(*(culprits(line) for line in at_switch)))
            continue
        # The first error may come before its cause (a call that
        # instantiates a lambda whose body is broken further down): the
        # next few error lines are searched from too.
        culprit = next((found for found in map(culprit_of, sorted(line for line in bad if line)[:CULPRIT_TRIES])
                        if found is not None), None)
        if culprit is None:  # errors at no switched line: every form of the file is suspect
            for m in chosen:
                left[m.key] = "the schemata copy of its file does not compile:\n" + stderr[-500:]
            return Schemata(text, {}, left)
        chosen = take_out(culprits(culprit))
    for m in chosen:
        left[m.key] = "not checked: too many rounds of compile errors"
    return Schemata(text, {}, left)


def with_probes(rel: str, text: str, chosen: list[Mutant], found: Schemata, mutants: list[Mutant], first_id: int,
                command: list[str], source_name: str, cwd: pathlib.Path | None, rounds: int,
                as_statements: frozenset[str] = frozenset()) -> Schemata:
    """`found` (its switches compile) with a probe in front of the statement
    of each mutant it leaves out (probe_line), so that a trace tells which
    tests reach those too; a probe the compiler rejects is taken out (its
    mutants then have none). A file's switches take ids from `first_id` on,
    fewer than it has mutants (ID_SPAN), and its probes the as many after."""
    masked = _mask_cpp(text)
    lines = text.split("\n")
    left = [m for m in mutants if m.key in found.left_out]
    places = {m.key: probe_line(lines, masked, m.line) for m in left}
    numbers = sorted({n for n in places.values() if n is not None})
    probes = {n: first_id + len(mutants) + i for i, n in enumerate(numbers)}
    for _ in range(rounds):
        if not probes:
            break
        probed = schemata(rel, text, chosen, first_id, probes, as_statements)
        done = subprocess.run(command, input=probed.text, capture_output=True, text=True, cwd=cwd)
        if done.returncode == 0:
            probed.left_out = found.left_out
            probed.probes = {key: probes[n] for key, n in places.items() if n in probes}
            return probed
        bad = set(error_lines(done.stderr, source_name))
        # An error at or soon after a probed line is that probe's.
        culprits = {n for n in probes if any(n <= b <= n + NEAR for b in bad)}
        if not culprits:
            break
        probes = {n: i for n, i in probes.items() if n not in culprits}
    return found


def compile_entry(entries: list[dict], rel: str) -> dict | None:
    """The entry of a build's compile_commands.json that compiles `rel` (the
    tree's file, or its schemata copy at the same relative path); None: none."""
    return next((e for e in entries if ("/" + pathlib.PurePosixPath(e["file"]).as_posix()).endswith("/" + rel)),
                None)


def mutant_compile_words(entry: dict) -> list[str]:
    """An entry's compile command as a copy's compile runs it: without the
    dependency file's options (-MD, -MMD, -MQ X, -MF X, -MT X), without
    -Werror (a mutant that warns still compiles; a schemata build is not an
    adopter's), its diagnostics without colour."""
    kept, skip = [], False
    for w in shlex.split(entry["command"]):
        if skip:
            skip = False
        elif w in ("-MF", "-MQ", "-MT"):
            skip = True
        elif w.startswith("-fdiagnostics-color"):
            kept.append("-fdiagnostics-color=never")
        elif w != "-Werror" and not w.startswith(("-MD", "-MMD")):
            kept.append(w)
    return kept


def source_folder(entry: dict) -> pathlib.Path:
    """The folder of an entry's source: a copy compiled elsewhere finds that
    folder's headers through -iquote."""
    return (pathlib.Path(entry["directory"]) / entry["file"]).resolve().parent


def compile_command(build: pathlib.Path, rel: str, header_dir: pathlib.Path) -> list[str]:
    """The build's compile command of `rel` (its compile_commands.json; it
    runs in the build folder), made to check a copy from stdin (mutant_compile_words):
    -fsyntax-only, the switch's header and the file's own directory on the
    include path, no output."""
    entry = compile_entry(json.loads((build / "compile_commands.json").read_text()), rel)
    if entry is None:
        raise ValueError(f"{build}/compile_commands.json has no command for {rel}")
    kept, skip = [], False
    for w in mutant_compile_words(entry):
        if skip:
            skip = False
        elif w in ("-o", "-c"):
            skip = w == "-o"
        elif not w.endswith(rel) and w != entry["file"]:
            kept.append(w)
    return [*kept, "-fsyntax-only", "-iquote", str(source_folder(entry)),
            "-I", str(header_dir.resolve()), "-x", "c++", "-"]


def main(argv: list[str] | None = None) -> int:
    from .mutants import ROOT

    p = argparse.ArgumentParser(prog="python -m harness.mutation.cpp_schemata",
                                description="the schemata copy of C++ files, checked by compiling")
    p.add_argument("files", nargs="+", help="relative to the repository, e.g. reference/src/names.cpp")
    p.add_argument("--build", type=pathlib.Path, required=True, help="a build with compile_commands.json")
    p.add_argument("--out", type=pathlib.Path, required=True, help="where the copies and the header go")
    p.add_argument("--root", type=pathlib.Path, default=ROOT, help="where the files are (the repository)")
    p.add_argument("--plain", action="store_true",
                   help="also compile each mutant left out as its plain rewritten file: how many of them "
                        "compile (built on their own in a run) and how many are stillborn")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / HEADER_NAME).write_text(HEADER)
    first = 0
    for rel in args.files:
        text = (args.root / rel).read_text()
        found = mutagen_cpp.cpp_mutants(rel, text)
        began = time.monotonic()
        command = compile_command(args.build, rel, args.out)
        result = compile_check(rel, text, found, command, "<stdin>", first, cwd=args.build)
        copy = args.out / rel  # where -Dmutant_schemata=OUT looks for it
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(result.text)
        first += ID_SPAN * len(found)
        print(result.told(rel, len(found), time.monotonic() - began))
        if args.plain:
            left = [m for m in found if m.key in result.left_out]
            compiles = sum(subprocess.run(command, input=m.apply(text), capture_output=True, text=True,
                                          cwd=args.build).returncode == 0 for m in left)
            print(f"  of the {len(left)} left out, as plain rewritten files: {compiles} compile, "
                  f"{len(left) - compiles} do not (stillborn)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
