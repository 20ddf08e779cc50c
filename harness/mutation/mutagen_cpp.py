"""The C++ operators of harness/mutation/mutagen.py, over the source text: comments,
strings and the preprocessor masked first; each mutant one line."""

from __future__ import annotations

import re

from .mutagen_core import Mutant, literal_mutations, siblings, with_keys

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
# `Type name = ...;`, `const Type& name(...)`, `auto [a, b] = ...`, `Type a, b;`,
# `Type* const name = ...`, `unsigned long name`: deleting a declaration never
# compiles, so it is not a candidate (and a region over one runs to its block's end).
_DECLARATION = re.compile(r"^(const\s+|static\s+|thread_local\s+|constexpr\s+)*((unsigned|signed|long|short)\s+)*"
                          r"[\w:]+(<[^;]*>)?([\s*&]|\bconst\b)+(\[[^\]]*\]|\w+)\s*(=|\(|\{|;|\[|,)")


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
            for kind, change, new in literal_mutations(int(m.group(1))):
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
                for sibling in siblings(m.group(1), _CPP_EXCEPTION_SIBLINGS):
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
