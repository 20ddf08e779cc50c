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
_WHILE_RE = re.compile(r"\bwhile \(")
_ARITHMETIC_RE = re.compile(r"(?<= )([+-])(?= )")
_TERNARY_RE = re.compile(r" \? ")
# Exception types a mutant swaps for a sibling: the same throw, another type
# (a caller catching one, or reading the Python type the binding maps it to,
# tells them apart). TORCH_CHECK's typed variants raise c10::ValueError,
# TypeError and IndexError (Python: ValueError, TypeError, IndexError).
_CPP_EXCEPTION_SIBLINGS = [
    ("TORCH_CHECK", "TORCH_CHECK_VALUE", "TORCH_CHECK_TYPE", "TORCH_CHECK_INDEX"),
    # reference/include/native_registry/errors.h
    ("RegistryError", "InvalidArgumentError", "OperatorNotFoundError", "AbortError"),
    ("py::value_error", "py::type_error", "py::index_error", "py::key_error", "py::attribute_error"),
    ("std::runtime_error", "std::logic_error", "std::invalid_argument"),
]
_CHECK_RE = re.compile(r"\b(TORCH_CHECK(?:_VALUE|_TYPE|_INDEX)?)\(")
_THROW_RE = re.compile(r"\bthrow ((?:py::|std::)?\w+)\(")
# `name = call(...);` (an assignment, not a declaration) and `return call(...);`
_ASSIGN_CALL_RE = re.compile(r"^(\s*)[\w.>\[\]-]+ = ([\w:.>-]+(?:<[^;]*>)?\(.*\));$")
_RETURN_CALL_RE = re.compile(r"^(\s*)return ([\w:.>-]+(?:<[^;]*>)?\(.*\));$")
# Casts and moves compute nothing of their own: discarding their result is a
# statement deletion, which is generated already.
_NOT_CALLS = ("std::move(", "std::forward(", "static_cast<", "reinterpret_cast<", "const_cast<",
              "dynamic_cast<")
_CALL_RE = re.compile(r"\b\w+\(")
_SIMPLE_ARG_RE = re.compile(r"^(?:[A-Za-z_][\w]*(?:(?:\.|->|::)[A-Za-z_]\w*)*|\d+|\"[^\"]*\")$")
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
    function_kinds = _function_kinds(masked)
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
        for m in _ARITHMETIC_RE.finditer(code if not _builds_text(masked, k) else ""):
            if not code[m.end():].lstrip().startswith("1"):  # `+ 1` is off-by-one's
                new = "-" if m.group(1) == "+" else "+"
                add(k, "arithmetic", f"{m.group(1)} -> {new}", m.start(), m.end(), new)
        for m in _INT_RE.finditer(code):
            if _is_array_or_template_context(code, m.start()):
                continue
            for kind, change, new in _literal_mutations(int(m.group(1))):
                add(k, kind, change, m.start(), m.end(), new)
        for regex, word in ((_IF_RE, "if"), (_WHILE_RE, "while")):
            for m in regex.finditer(code):
                close = _matching_paren(code, m.end() - 1)
                if close is None:
                    continue
                for value in ("true", "false"):
                    add(k, f"condition-{value}", f"{word} (...) -> {word} ({value})", m.end(), close, value)
        for m in _TERNARY_RE.finditer(code):
            begin = _ternary_condition_start(code, m.start())
            begin += len(code[begin:m.start()]) - len(code[begin:m.start()].lstrip())
            if code[begin:m.start()].strip():
                for value in ("true", "false"):
                    add(k, f"condition-{value}", f"... ? -> {value} ?", begin, m.start(), value)
        for regex in (_CHECK_RE, _THROW_RE):
            for m in regex.finditer(code):
                for sibling in _siblings(m.group(1), _CPP_EXCEPTION_SIBLINGS):
                    add(k, "exception-type", f"{m.group(1)} -> {sibling}", m.start(1), m.end(1), sibling)
        for m in _CALL_RE.finditer(code):
            for (a, b) in _adjacent_simple_arguments(code, m.end() - 1):
                first, second = lines[k][a[0]:a[1]], lines[k][b[0]:b[1]]
                add(k, "argument-swap", f"({first.strip()}, {second.strip()}) swapped", a[0], b[1],
                    second + lines[k][a[1]:b[0]] + first)
        stripped = code.strip()
        indent = code[:len(code) - len(code.lstrip())]
        ret = _RETURN_RE.match(code.rstrip())
        if ret and ret.group(2).strip() not in ("true", "false", "{}", "nullptr"):
            found.append(Mutant(rel, k + 1, "return-value", "return ... -> return {}", lines[k],
                                f"{ret.group(1)}return {{}};"))
        call = _ASSIGN_CALL_RE.match(code.rstrip())
        if call and _balanced_call(call.group(2)) and not _DECLARATION.match(stripped) \
                and not call.group(2).startswith(_NOT_CALLS):
            found.append(Mutant(rel, k + 1, "result-discarded", "x = f(...) -> f(...)", lines[k],
                                call.group(1) + lines[k][code.rindex(call.group(2)):].rstrip()))
        call = _RETURN_CALL_RE.match(code.rstrip())
        if call and _balanced_call(call.group(2)) and not call.group(2).startswith(_NOT_CALLS):
            found.append(Mutant(rel, k + 1, "result-discarded", "return f(...) -> f(...); return {}", lines[k],
                                call.group(1) + lines[k][code.rindex(call.group(2)):].rstrip() + " return {};"))
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
            if function_kinds[k] is not None:
                early = "return;" if function_kinds[k] == "void" else "return {};"
                found.append(Mutant(rel, k + 1, "early-return", f"statement -> {early}", lines[k],
                                    indent + early + "  // mutant: early return"))
    return with_keys(found)


def _builds_text(masked: list[str], k: int) -> bool:
    """Whether line k concatenates strings (a string literal on it, or on the
    line its expression continues from): `+` there is std::string's, and
    `-` would not compile."""
    if '"' in masked[k]:
        return True
    previous = next((line for line in reversed(masked[:k]) if line.strip()), "")
    return '"' in previous and not previous.rstrip().endswith((";", "{", "}"))


def _literal_mutations(value: int) -> list[tuple[str, str, str]]:
    """An integer literal off by one (up, and down when that stays a
    non-negative literal) and replaced by the constants 0, 1 and -1."""
    found = [("off-by-one", f"{value} -> {value + 1}", str(value + 1))]
    if value >= 2:
        found.append(("off-by-one", f"{value} -> {value - 1}", str(value - 1)))
    for constant in (0, 1, -1):
        if constant != value and constant != value + 1 and not (value >= 2 and constant == value - 1):
            found.append(("constant", f"{value} -> {constant}", str(constant) if constant >= 0 else "(-1)"))
    return found


def _siblings(name: str, families) -> list[str]:
    for family in families:
        if name in family:
            return [other for other in family if other != name]
    return []


def _ternary_condition_start(code: str, question: int) -> int | None:
    """Where the condition of the `?` at `question` begins: after the nearest
    unbalanced `(`, or a `=`, `return`, `,` or `{` at the same depth."""
    depth = 0
    for j in range(question - 1, -1, -1):
        c = code[j]
        if c in ")]":
            depth += 1
        elif c in "([":
            if depth == 0:
                return j + 1
            depth -= 1
        elif depth == 0 and c in ",{;" or depth == 0 and c == "=" and code[j - 1:j + 1] not in ("==", "!=", "<=", ">="):
            return j + 1
        elif depth == 0 and code[max(0, j - 6):j + 1].endswith("return") and (j < 6 or not code[j - 6].isalnum()):
            return j + 1
    indent = len(code) - len(code.lstrip())
    return indent


def _arguments(code: str, open_at: int) -> list[tuple[int, int]] | None:
    """The top-level arguments of the call whose `(` is at `open_at`, as
    (start, end) spans on the line; None when the call does not close on it."""
    close = _matching_paren(code, open_at)
    if close is None:
        return None
    spans, depth, start = [], 0, open_at + 1
    for j in range(open_at + 1, close):
        c = code[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            spans.append((start, j))
            start = j + 1
    spans.append((start, close))
    return spans


def _adjacent_simple_arguments(code: str, open_at: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of adjacent arguments of one lexical kind (two names, two
    integers or two string literals) that differ: swapping them is a
    classic slip that type-checks whenever their types agree."""
    spans = _arguments(code, open_at)
    if not spans or len(spans) < 2:
        return []
    def kind(text: str) -> str | None:
        text = text.strip()
        if not _SIMPLE_ARG_RE.match(text):
            return None
        return "string" if text.startswith('"') else "int" if text[0].isdigit() else "name"
    pairs = []
    for a, b in zip(spans, spans[1:]):
        ta, tb = code[a[0]:a[1]], code[b[0]:b[1]]
        if kind(ta) and kind(ta) == kind(tb) and ta.strip() != tb.strip():
            # The spans without the spaces around each argument.
            a = (a[0] + len(ta) - len(ta.lstrip()), a[1] - (len(ta) - len(ta.rstrip())))
            b = (b[0] + len(tb) - len(tb.lstrip()), b[1] - (len(tb) - len(tb.rstrip())))
            pairs.append((a, b))
    return pairs


def _balanced_call(text: str) -> bool:
    """Whether `text` is one call: its first `(` closes at its end."""
    open_at = text.find("(")
    return open_at > 0 and _matching_paren(text, open_at) == len(text) - 1


def _function_kinds(masked: list[str]) -> list[str | None]:
    """Per line: "void" or "value" when it lies in the body of a function
    (its head starts a line outside any other function; namespaces do not
    count), else None. A lambda's body counts as its enclosing function's,
    so an early return there may not compile (stillborn, reported)."""
    kinds: list[str | None] = []
    stack: list[str | None] = []  # per open brace: "namespace", or the function's kind, or None
    pending = None
    for code in masked:
        head = code.strip()
        in_function = any(kind in ("void", "value") for kind in stack)
        if not in_function and head[:1].isalpha():
            if head.startswith(("namespace", "extern")):
                pending = "namespace"
            elif head.startswith(("struct", "class", "enum", "union")):
                pending = None
            elif re.match(r"^(static\s+|inline\s+|\[\[\w+\]\]\s+)*void\b|^(PYBIND11_MODULE|TORCH_LIBRARY\w*)\(",
                          head):
                pending = "void"
            elif "(" in head:
                pending = "value"
        body = next((kind for kind in stack if kind in ("void", "value")), None)
        kinds.append(body if in_function else None)
        for c in code:
            if c == "{":
                stack.append(pending if not in_function else "block")
                pending = None
                in_function = any(kind in ("void", "value") for kind in stack)
            elif c == "}" and stack:
                stack.pop()
                in_function = any(kind in ("void", "value") for kind in stack)
    return kinds


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
# A raised exception's type swapped for a sibling: callers catch by type.
_PY_SIBLINGS = ("ValueError", "TypeError", "RuntimeError")
_PY_EXCEPTIONS = {name: [s for s in _PY_SIBLINGS if s != name]
                  for name in (*_PY_SIBLINGS, "KeyError", "IndexError", "AttributeError", "LookupError")}


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
            elif before == "raise" and s in _PY_EXCEPTIONS:
                for sibling in _PY_EXCEPTIONS[s]:
                    add(row, "exception-type", f"{s} -> {sibling}", col, end_col, sibling)
        elif tok.type == tokenize.OP and tok.string in ("+", "-", "+=", "-=") and (
                len(tok.string) == 2 or tokens[i - 1].type in (tokenize.NAME, tokenize.NUMBER, tokenize.STRING)
                or before in (")", "]")) and not (tok.string in ("+", "-") and after == "1"):
            new = {"+": "-", "-": "+", "+=": "-=", "-=": "+="}[tok.string]
            add(row, "arithmetic", f"{tok.string} -> {new}", col, end_col, new)
        elif tok.type == tokenize.NUMBER and tok.string.isdigit():
            for kind, change, new in _literal_mutations(int(tok.string)):
                add(row, kind, change, col, end_col, new)

    tree = ast.parse(text)
    in_function = _python_function_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp) and node.lineno == node.end_lineno and lines[node.lineno - 1].isascii():
            for value in ("True", "False"):
                add(node.lineno, f"condition-{value.lower()}", f"... if ... else ... -> {value}",
                    node.test.col_offset, node.test.end_col_offset, value)
        if isinstance(node, ast.Call) and node.lineno == node.end_lineno and lines[node.lineno - 1].isascii():
            for a, b in zip(node.args, node.args[1:]):
                if _same_simple_kind(a, b):
                    line = lines[node.lineno - 1]
                    first, second = line[a.col_offset:a.end_col_offset], line[b.col_offset:b.end_col_offset]
                    add(node.lineno, "argument-swap", f"({first}, {second}) swapped", a.col_offset,
                        b.end_col_offset, second + line[a.end_col_offset:b.col_offset] + first)
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
            if isinstance(node.value, ast.Call):
                add(node.lineno, "result-discarded", "return f(...) -> f(...); return None", 0, len(line),
                    indent + line[node.value.col_offset:node.value.end_col_offset] + "; return None")
        elif isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise)) \
                and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            add(node.lineno, "statement-deletion", "statement deleted", 0, len(line), indent + "pass")
            if node.lineno in in_function:
                add(node.lineno, "early-return", "statement -> return", 0, len(line), indent + "return")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and all(
                    isinstance(t, (ast.Name, ast.Attribute, ast.Subscript)) for t in node.targets):
                add(node.lineno, "result-discarded", "x = f(...) -> f(...)", 0, len(line),
                    indent + line[node.value.col_offset:node.value.end_col_offset])
        elif isinstance(node, (ast.Break, ast.Continue)):
            new = "continue" if isinstance(node, ast.Break) else "break"
            add(node.lineno, "loop-exit", f"{line.strip()} -> {new}", 0, len(line), indent + new)
    found.sort(key=lambda m: (m.line, m.kind, m.change))
    return with_keys(found)


def _same_simple_kind(a: ast.expr, b: ast.expr) -> bool:
    """Two adjacent arguments of one lexical kind (names, or constants of one
    type) that differ: swapping them is a slip nothing checks statically."""
    if isinstance(a, ast.Name) and isinstance(b, ast.Name):
        return a.id != b.id
    return (isinstance(a, ast.Constant) and isinstance(b, ast.Constant) and type(a.value) is type(b.value)
            and a.value != b.value)


def _python_function_lines(tree: ast.Module) -> set[int]:
    """The lines of statements directly in a function's body (at any depth
    of its blocks, not in a nested class): where `return` is legal."""
    found: set[int] = set()

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, True)
            elif isinstance(child, ast.ClassDef):
                visit(child, False)
            elif isinstance(child, (ast.Lambda,)):
                continue
            else:
                if inside and isinstance(child, ast.stmt):
                    found.add(child.lineno)
                visit(child, inside)
    visit(tree, False)
    return found


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
