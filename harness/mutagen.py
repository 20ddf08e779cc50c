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
import hashlib
import io
import random
import re
import tokenize
from dataclasses import dataclass

# ---- the mutant ----------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    file: str       # relative to the tree it was generated from
    line: int       # 1-based
    kind: str       # the operator class (relational, logical, ...)
    change: str     # what it does, e.g. "== -> !="
    original: str   # the line as it was (no newline)
    mutated: str    # the line as the mutant has it
    key: str = ""

    def apply(self, text: str) -> str:
        """`text` (the whole file) with this mutant's line replaced."""
        lines = text.split("\n")
        if lines[self.line - 1] != self.original:
            raise ValueError(f"{self.file}:{self.line} is no longer {self.original.strip()!r}")
        lines[self.line - 1] = self.mutated
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


def sample(candidates: list[Mutant], n: int | None, seed: int) -> list[Mutant]:
    """A reproducible sample: the same candidates, n and seed give the same
    mutants whatever order they were generated in. Ordered by file and line,
    so a run recompiles each file once per mutant, not twice."""
    ordered = sorted(candidates, key=lambda m: m.key)
    chosen = ordered if n is None or n >= len(ordered) else random.Random(seed).sample(ordered, n)
    return sorted(chosen, key=lambda m: (m.file, m.line, m.key))


# ---- C++ -----------------------------------------------------------------------

# Binary operators with spaces around them (the project's style), so template
# brackets, `->`, `<<` and `>>` never match.
_RELATIONAL = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_RELATIONAL_RE = re.compile(r"(?<= )(==|!=|<=|>=|<|>)(?= )")
_LOGICAL_RE = re.compile(r"(?<= )(&&|\|\|)(?= )")
_NOT_RE = re.compile(r"!(?=[\w(*])")
_BOOL_RE = re.compile(r"\b(true|false)\b")
_INT_RE = re.compile(r"(?<![\w.'])(\d+)(?![\w.'])")
_PLUS_MINUS_ONE_RE = re.compile(r"(?<= )([+-]) 1(?![\w.])")
_IF_RE = re.compile(r"\bif \(")
_LOOP_EXIT_RE = re.compile(r"\b(break|continue);")
_RETURN_RE = re.compile(r"^(\s*)return (.+);$")
_KEYWORD_START = re.compile(r"^(return|break|continue|case|default|using|typedef|namespace|struct|class|"
                            r"enum|template|static_assert|goto|public|private|protected|if|else|for|"
                            r"while|do|switch|try|catch|throw)\b")
# `Type name = ...;`, `const Type& name(...)`, `auto [a, b] = ...`: deleting a
# declaration never compiles, so it is not a candidate.
_DECLARATION = re.compile(r"^(const\s+|static\s+|thread_local\s+|constexpr\s+)*"
                          r"[\w:]+(<[^;]*>)?[\s*&]+(\[[^\]]*\]|\w+)\s*(=|\(|\{|;|\[)")


def _mask_cpp(text: str) -> list[str]:
    """The file's lines with comments, string and character literals blanked
    (same length), and preprocessor lines emptied."""
    out, i, n = [], 0, len(text)
    chars = list(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            chars[i:j] = " " * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            chars[i:j] = [ch if ch == "\n" else " " for ch in text[i:j]]
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delim = text[i + 2:text.find("(", i)]
            j = text.find(")" + delim + '"', i)
            j = n if j < 0 else j + len(delim) + 2
            chars[i:j] = [ch if ch == "\n" else " " for ch in text[i:j]]
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            chars[i + 1:j] = " " * (j - i - 1)
            i = j + 1
        else:
            i += 1
    for line in "".join(chars).split("\n"):
        out.append("" if line.lstrip().startswith("#") else line)
    return out


def _matching_paren(code: str, open_at: int) -> int | None:
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "(":
            depth += 1
        elif code[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return None


def cpp_mutants(rel: str, text: str) -> list[Mutant]:
    lines = text.split("\n")
    masked = _mask_cpp(text)
    found: list[Mutant] = []

    def add(number: int, kind: str, change: str, start: int, end: int, new: str) -> None:
        line = lines[number]
        found.append(Mutant(rel, number + 1, kind, change, line, line[:start] + new + line[end:]))

    for k, code in enumerate(masked):
        if not code.strip() or "static_assert" in code or "NOLINT" in lines[k]:
            continue
        for m in _RELATIONAL_RE.finditer(code):
            op = m.group(1)
            add(k, "relational", f"{op} -> {_RELATIONAL[op]}", m.start(), m.end(), _RELATIONAL[op])
        for m in _LOGICAL_RE.finditer(code):
            new = "||" if m.group(1) == "&&" else "&&"
            add(k, "logical", f"{m.group(1)} -> {new}", m.start(), m.end(), new)
        for m in _NOT_RE.finditer(code):
            add(k, "negation", "! removed", m.start(), m.end(), "")
        for m in _BOOL_RE.finditer(code):
            new = "false" if m.group(1) == "true" else "true"
            add(k, "boolean", f"{m.group(1)} -> {new}", m.start(), m.end(), new)
        for m in _PLUS_MINUS_ONE_RE.finditer(code):
            new = "-" if m.group(1) == "+" else "+"
            add(k, "off-by-one", f"{m.group(1)} 1 -> {new} 1", m.start(1), m.end(1), new)
        for m in _INT_RE.finditer(code):
            if m.group(1) in ("0", "1") and not _is_array_or_template_context(code, m.start()):
                value = int(m.group(1))
                add(k, "off-by-one", f"{value} -> {value + 1}", m.start(), m.end(), str(value + 1))
        for m in _IF_RE.finditer(code):
            close = _matching_paren(code, m.end() - 1)
            if close is None:
                continue
            for value in ("true", "false"):
                add(k, f"condition-{value}", f"if (...) -> if ({value})", m.end(), close, value)
        stripped = code.strip()
        indent = code[:len(code) - len(code.lstrip())]
        ret = _RETURN_RE.match(code.rstrip())
        if ret and ret.group(2).strip() not in ("true", "false", "{}", "nullptr"):
            found.append(Mutant(rel, k + 1, "return-value", "return ... -> return {}", lines[k],
                                f"{ret.group(1)}return {{}};"))
        for m in _LOOP_EXIT_RE.finditer(code):
            new = "continue" if m.group(1) == "break" else "break"
            add(k, "loop-exit", f"{m.group(1)}; -> {new};", m.start(1), m.end(1), new)
        if (stripped not in ("break;", "continue;") and stripped.endswith(";")
              and stripped.count("(") == stripped.count(")")
              and not _KEYWORD_START.match(stripped) and not _DECLARATION.match(stripped)
              and not stripped.startswith(("}", ")", "{"))
              and not stripped.endswith(("= delete;", "= default;"))
              and _statement_starts_line(masked, k)):
            found.append(Mutant(rel, k + 1, "statement-deletion", "statement deleted", lines[k],
                                indent + ";  // mutant: statement deleted"))
    return with_keys(found)


def _is_array_or_template_context(code: str, at: int) -> bool:
    """Literals that size arrays or templates, or that are a bit shift, are
    left alone: mutating them rarely compiles or means anything."""
    before = code[:at].rstrip()
    return before.endswith(("<", "[", "<<", ">>"))


def _statement_starts_line(masked: list[str], k: int) -> bool:
    """Whether line k begins a statement (the previous code line ended one,
    or opened or closed a block), not a continued expression."""
    for previous in reversed(masked[:k]):
        if previous.strip():
            return previous.rstrip().endswith((";", "{", "}", ":")) or _IF_RE.search(previous) is not None \
                and previous.rstrip().endswith(")")
    return True


# ---- Python --------------------------------------------------------------------

_PY_COMPARE = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}


def python_mutants(rel: str, text: str) -> list[Mutant]:
    lines = text.split("\n")
    found: list[Mutant] = []

    def add(row: int, kind: str, change: str, start: int, end: int, new: str) -> None:
        line = lines[row - 1]
        if "pragma: no mutate" in line:
            return
        found.append(Mutant(rel, row, kind, change, line, line[:start] + new + line[end:]))

    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
              if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                                tokenize.DEDENT)]
    for i, tok in enumerate(tokens):
        (row, col), (end_row, end_col) = tok.start, tok.end
        if row != end_row:
            continue
        after = tokens[i + 1].string if i + 1 < len(tokens) else ""
        before = tokens[i - 1].string if i else ""
        if tok.type == tokenize.OP and tok.string in _PY_COMPARE:
            new = _PY_COMPARE[tok.string]
            add(row, "relational", f"{tok.string} -> {new}", col, end_col, new)
        elif tok.type == tokenize.NAME:
            s = tok.string
            if s in ("and", "or"):
                new = "or" if s == "and" else "and"
                add(row, "logical", f"{s} -> {new}", col, end_col, new)
            elif s in ("True", "False"):
                new = "False" if s == "True" else "True"
                add(row, "boolean", f"{s} -> {new}", col, end_col, new)
            elif s == "not" and after != "in" and before != "is":
                add(row, "negation", "not removed", col, tokens[i + 1].start[1]
                    if tokens[i + 1].start[0] == row else end_col, "")
            elif s == "is":
                if after == "not":
                    add(row, "relational", "is not -> is", col, tokens[i + 1].end[1], "is")
                else:
                    add(row, "relational", "is -> is not", col, end_col, "is not")
            elif s == "in" and before == "not":
                add(row, "relational", "not in -> in", tokens[i - 1].start[1], end_col, "in")
        elif tok.type == tokenize.NUMBER and tok.string.isdigit() and int(tok.string) < 10:
            add(row, "off-by-one", f"{tok.string} -> {int(tok.string) + 1}", col, end_col,
                str(int(tok.string) + 1))

    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.stmt) or node.lineno != getattr(node, "end_lineno", node.lineno):
            if isinstance(node, (ast.If, ast.While)) and node.test.lineno == node.test.end_lineno \
                    and node.test.lineno == node.lineno:
                _condition_mutants(add, node)
            continue
        line = lines[node.lineno - 1]
        indent = line[:len(line) - len(line.lstrip())]
        if not line.isascii():
            continue  # the syntax tree counts columns in bytes
        rest = line[node.end_col_offset:].strip()
        if node.col_offset != len(indent) or (rest and not rest.startswith("#")):
            continue  # shares its line with other code
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            add(node.lineno, "return-value", "return ... -> return None", 0, len(line),
                indent + "return None")
        elif isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise)) \
                and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            add(node.lineno, "statement-deletion", "statement deleted", 0, len(line), indent + "pass")
        elif isinstance(node, (ast.Break, ast.Continue)):
            new = "continue" if isinstance(node, ast.Break) else "break"
            add(node.lineno, "loop-exit", f"{line.strip()} -> {new}", 0, len(line), indent + new)
    found.sort(key=lambda m: (m.line, m.kind, m.change))
    return with_keys(found)


def _condition_mutants(add, node: ast.If | ast.While) -> None:
    test = node.test
    kinds = ("true", "false") if isinstance(node, ast.If) else ("false",)
    for value in kinds:
        add(test.lineno, f"condition-{value}", f"{type(node).__name__.lower()} ... -> {value.title()}",
            test.col_offset, test.end_col_offset, value.title())


def mutants_of(rel: str, text: str) -> list[Mutant]:
    return python_mutants(rel, text) if rel.endswith(".py") else cpp_mutants(rel, text)


# ---- parts of a file left out ----------------------------------------------------

_CPP_SECTION_RE = re.compile(r"^// ---- (.+?) -+\s*$")


def part_lines(rel: str, text: str, names: set[str]) -> dict[str, set[int]]:
    """The (1-based) lines of each named part of a file: in Python a top-level
    def or class (its decorators included), in C++ a section, from its
    `// ---- name ----` marker line to the next marker or the end. A name not
    found maps to no lines (the caller reports it)."""
    found: dict[str, set[int]] = {name: set() for name in names}
    if rel.endswith(".py"):
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                found[node.name] = set(range(first, (node.end_lineno or node.lineno) + 1))
        return found
    current = None
    for number, line in enumerate(text.split("\n"), 1):
        marker = _CPP_SECTION_RE.match(line)
        if marker:
            current = marker.group(1) if marker.group(1) in names else None
        if current:
            found[current].add(number)
    return found
