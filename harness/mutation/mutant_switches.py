"""Python-layer mutants switched, not rewritten (mutant schemata): one
instrumented copy of a module holds every function that has mutants once
per mutant and once as it is, each under a branch on a process-wide mutant
id that the module reads once, at import, from $NR_MUTANT:

    import os as _nr_os; _nr_mutant_ = _nr_os.environ.get("NR_MUTANT", ""); del _nr_os
    ...
    if _nr_mutant_ == '<key of mutant 1>':
        def f(...): <f with mutant 1's line>
    elif ...
    else:
        def f(...): <f as it is>

The branch runs where the def was, so the chosen def binds its name exactly
as the rewritten file's would (decorators, registrations and aliases made
later at import see it); a call costs nothing more, mutant or not. Methods
are switched inside their class body. A mutant on a line outside any such
function (a module's or class's top level), and one whose rewritten file
does not compile (stillborn: it would break the whole copy), is not switched:
the runner rewrites the instrumented file for it, as without switches (at
its line there: `lines` maps each line of the original to it).

What differs from the rewritten file is only where things are in the file:
line numbers in tracebacks and the `_nr_mutant_` global. resolve() gives the
module a mutant id selects, for the tests that prove it equal to the
rewritten file, statement for statement.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import io
import tokenize
from dataclasses import dataclass, field

from .mutagen_core import Mutant

VARIABLE = "_nr_mutant_"
HEADER = f'import os as _nr_os; {VARIABLE} = _nr_os.environ.get("NR_MUTANT", ""); del _nr_os'
INDENT = "    "


@dataclass
class Switched:
    text: str                                            # the instrumented module
    keys: set[str] = field(default_factory=set)          # the mutants NR_MUTANT selects
    lines: dict[int, tuple[int, str]] = field(default_factory=dict)  # line -> (its line in text, indent added)

    def rewritable(self, m: Mutant) -> Mutant:
        """A mutant that is not switched, placed at its line of the instrumented text."""
        line, added = self.lines[m.line]
        return Mutant(m.file, line, m.kind, m.change, added + m.original, added + m.mutated, m.key)

    def rewrite(self, m: Mutant, text: str) -> str:
        """The instrumented `text` with a mutant that is not switched written in."""
        return self.rewritable(m).apply(text)

    def choosing(self, target, m: Mutant):
        """`target` as the suites see it running the switched mutant `m`."""
        return dataclasses.replace(target, env={**target.env, "NR_MUTANT": m.key})


def units(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions that can be switched: a module's top-level defs and the
    methods of its top-level classes (and of classes in them)."""
    found = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(node)
            elif isinstance(node, ast.ClassDef):
                walk(node.body)

    walk(tree.body)
    return found


def string_continuations(text: str) -> set[int]:
    """Lines that continue a string begun on an earlier line: their text is
    the string's, so they are never re-indented."""
    found = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
            found.update(range(tok.start[0] + 1, tok.end[0] + 1))
    return found


def header_after(tree: ast.Module) -> int:
    """The line after which the header goes: after the docstring and the
    __future__ imports, which must come first."""
    after = 0
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            after = node.end_lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            after = node.end_lineno
        else:
            break
    return after


def compiles(text: str, name: str) -> bool:
    try:
        compile(text, name, "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def instrument(rel: str, text: str, mutants: list[Mutant]) -> Switched:
    """The instrumented copy of `text` (the file `rel`), switching those of
    `mutants` that lie in a switchable function and compile."""
    tree = ast.parse(text)
    lines = text.split("\n")
    continuing = string_continuations(text)
    spans = []  # (first line, last line, indentation) of each switchable function
    for node in units(tree):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        spans.append((first, node.end_lineno, lines[first - 1][:len(lines[first - 1]) - len(lines[first - 1].lstrip())]))
    in_span = {}
    for span in spans:
        for line in range(span[0], span[1] + 1):
            in_span[line] = span
    by_span: dict[tuple, list[Mutant]] = {}
    for m in mutants:
        span = in_span.get(m.line)
        if span is not None and compiles(m.apply(text), rel):
            by_span.setdefault(span, []).append(m)

    out: list[str] = []
    mapping: dict[int, tuple[int, str]] = {}
    after = header_after(tree)
    starts = {span[0]: span for span in by_span}
    number, headed = 1, False
    while number <= len(lines):
        if number - 1 == after and not headed:
            out.append(HEADER)
            headed = True
        span = starts.get(number)
        if span is None:
            out.append(lines[number - 1])
            mapping[number] = (len(out), "")
            number += 1
            continue
        first, last, indent = span
        body = list(range(first, last + 1))
        for i, m in enumerate(by_span[span]):
            out.append(f"{indent}{'if' if i == 0 else 'elif'} {VARIABLE} == {m.key!r}:")
            for line in body:
                text_of = m.mutated if line == m.line else lines[line - 1]
                out.append(text_of if line in continuing else INDENT + text_of if text_of.strip() else text_of)
        out.append(f"{indent}else:")
        for line in body:
            added = "" if line in continuing or not lines[line - 1].strip() else INDENT
            out.append(added + lines[line - 1])
            mapping[line] = (len(out), added)
        number = last + 1
    if not headed:  # an empty module, or one that is only a docstring
        out.insert(after, HEADER)
        mapping = {line: (at + (1 if at > after else 0), added) for line, (at, added) in mapping.items()}
    return Switched("\n".join(out), {m.key for ms in by_span.values() for m in ms}, mapping)


# ---- what a mutant id selects (for the tests) -------------------------------------------

def _chosen(node: ast.If, key: str) -> list[ast.stmt] | None:
    """The branch of a switch `key` selects; None when `node` is no switch."""
    test = node.test
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == VARIABLE
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)):
        return None
    if test.comparators[0].value == key:
        return node.body
    if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
        deeper = _chosen(node.orelse[0], key)
        if deeper is not None:
            return deeper
    return node.orelse


def _resolved(body: list[ast.stmt], key: str) -> list[ast.stmt]:
    found = []
    for node in body:
        chosen = _chosen(node, key) if isinstance(node, ast.If) else None
        if chosen is not None:
            found += _resolved(chosen, key)
        elif isinstance(node, ast.ClassDef):
            found.append(copy.copy(node))
            found[-1].body = _resolved(node.body, key)
        else:
            found.append(node)
    return found


def resolve(text: str, key: str) -> str:
    """The module the instrumented `text` is with NR_MUTANT=`key` ("" for
    none), less the header, as ast.dump gives it (positions left out)."""
    tree = ast.parse(text)
    body = [n for n in _resolved(tree.body, key)
            if not (isinstance(n, ast.Import) and n.names[0].asname == "_nr_os")
            and not (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == VARIABLE)
            and not (isinstance(n, ast.Delete) and getattr(n.targets[0], "id", "") == "_nr_os")]
    return ast.dump(ast.Module(body, []))
