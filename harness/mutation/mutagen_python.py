"""The Python operators of harness/mutation/mutagen.py, over the tokens and the
syntax tree; each mutant one line, every one compiles."""

from __future__ import annotations

import ast
import io
import tokenize

from .mutagen_core import Mutant, literal_mutations, with_keys

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
            for kind, change, new in literal_mutations(int(tok.string)):
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
