"""Python-layer mutants switched, not rewritten (mutant schemata): one
instrumented copy of a module holds every function that has mutants once
per mutant and once as it is, each under a branch on the module's global
`_nr_mutant_`, which the module sets at import from $NR_MUTANT.

A mutant in a function's body is switched inside the body, so the branch is
taken at each call:

    import os as _nr_os; _nr_mutant_ = _nr_os.environ.get("NR_MUTANT", ""); del _nr_os
    ...
    def f(...):
        <its docstring>
        if _nr_mutant_ == '<key of mutant 1>':
            <f's body with mutant 1's line>
        elif ...
        else:
            <f's body as it is>

so a process that imported the module with no mutant chosen can choose one
later by setting the global (suite_server.py does, in a forked child: these
are `call_time`), except in a def, lambda or class the body makes: that
object may have been made before the choice (a closure a module-level call
installs at the import), so such a mutant is chosen by a fresh import. That
needs the variants to be one function to Python: the same local names, the
same kind (generator or not), no `global` or `nonlocal` declaration (which
must precede every use of its name). A mutant
that breaks one of these, or lies on a def's or decorator's line, is
switched around the def instead, read once at import:

    if _nr_mutant_ == '<key of mutant 2>':
        def f(...): <f with mutant 2's line>
    else:
        def f(...): <f as it is, its in-body switches included>

The branch runs where the def was, so the chosen def binds its name exactly
as the rewritten file's would (decorators, registrations and aliases made
later at import see it). Methods are switched inside their class body. A
mutant on a line outside any function (a module's or class's top level),
and one whose rewritten file does not compile (stillborn: it would break the
whole copy), is not switched: the runner rewrites the instrumented file for
it, as without switches (at its line there: `lines` maps each line of the
original to it).

What differs from the rewritten file is only where things are in the file:
line numbers in tracebacks, the `_nr_mutant_` global, and the cost of one
global read and comparison per switched call. resolve() gives the module a
mutant id selects, for the tests that prove it equal to the rewritten file,
statement for statement.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import inspect
import io
import tokenize
import types
from dataclasses import dataclass, field

from .mutagen_core import Mutant

VARIABLE = "_nr_mutant_"
ENVIRONMENT = "NR_MUTANT"
HEADER = f'import os as _nr_os; {VARIABLE} = _nr_os.environ.get("{ENVIRONMENT}", ""); del _nr_os'
INDENT = "    "


@dataclass
class Switched:
    text: str                                            # the instrumented module
    keys: set[str] = field(default_factory=set)          # the mutants NR_MUTANT selects
    lines: dict[int, tuple[int, str]] = field(default_factory=dict)  # line -> (its line in text, indent added)
    call_time: set[str] = field(default_factory=set)     # of keys, those read at each call (in a body,
                                                         # outside any def, lambda or class made there)

    def rewritable(self, m: Mutant) -> Mutant:
        """A mutant that is not switched, placed at its line (lines) of the instrumented text."""
        line, added = self.lines[m.line]
        original = "\n".join(self.lines[m.line + k][1] + text
                             for k, text in enumerate(m.original.split("\n")))
        mutated = "\n".join(added + text if text.strip() else text for text in m.mutated.split("\n"))
        return Mutant(m.file, line, m.kind, m.change, original, mutated, m.key)

    def rewrite(self, m: Mutant, text: str) -> str:
        """The instrumented `text` with a mutant that is not switched written in."""
        return self.rewritable(m).apply(text)

    def choosing(self, target, m: Mutant):
        """`target` as the suites see it running the switched mutant `m`: a
        fresh process is given $NR_MUTANT; a warm suite's child may choose a
        `call_time` one after the import (suite_server.py)."""
        return dataclasses.replace(target, mutant_env={ENVIRONMENT: m.key},
                                   python_mutant=m.key if m.key in self.call_time else "")


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


def compiled(text: str, name: str):
    """The module's code object; None where it does not compile."""
    try:
        return compile(text, name, "exec")
    except (SyntaxError, ValueError):
        return None


# The flags that make a function a generator or a coroutine: the variants
# merged into one body must agree on them.
_KIND_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | \
    inspect.CO_ITERABLE_COROUTINE


def _function_code(module, name: str, lines: tuple[int, ...]):
    """The code object of the function `name` defined at one of `lines`
    (CPython numbers a decorated def by its first decorator or its def)."""
    pending = [module]
    while pending:
        code = pending.pop()
        if code.co_name == name and code.co_firstlineno in lines:
            return code
        pending += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return None


def _scope(code) -> tuple | None:
    """What two variants of a function compare to share one body: its local
    names (cells included), its free names and its kind."""
    if code is None:
        return None
    return (frozenset(code.co_varnames) | frozenset(code.co_cellvars), frozenset(code.co_freevars),
            code.co_flags & _KIND_FLAGS)


def _shares_a_body(pristine: tuple | None, mutant: tuple | None, module_names: frozenset[str]) -> bool:
    """Whether a mutant's function can share one body with the pristine one.
    Its free names and kind must be the same. It may assign fewer local names
    (a deleted statement, a discarded result): in the shared body those stay
    local, so a read of one the mutant no longer assigns raises
    UnboundLocalError where the rewritten file raises NameError (its
    subclass) for a name the module and builtins do not define; a name they
    define would be read from them there, so such a mutant is not shared."""
    if pristine is None or mutant is None or pristine[1:] != mutant[1:]:
        return False
    return mutant[0] <= pristine[0] and not (pristine[0] - mutant[0]) & module_names


def _module_names(module, tree: ast.Module) -> frozenset[str]:
    """Every name a module's top level (or a `global` declaration) may bind,
    and the builtins: a function reading one it does not assign reads these."""
    declared = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    return frozenset(set(dir(builtins)) | set(module.co_names) | set(module.co_varnames) | declared)


def _declares_scope(node: ast.AST) -> bool:
    """Whether a function's own body (not a nested scope) holds `global` or
    `nonlocal`: such a statement must come before every use of its name,
    which a second copy of the body before it would break."""
    pending = list(ast.iter_child_nodes(node))
    while pending:
        child = pending.pop()
        if isinstance(child, (ast.Global, ast.Nonlocal)):
            return True
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending += ast.iter_child_nodes(child)
    return False


# Scopes a unit's body may make: their code runs when the object made is used,
# which may be long after the unit's run chose its variant.
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class _Unit:
    """A switchable function: its lines and where its body begins."""
    first: int          # its first decorator's line, or its def's
    last: int
    indent: str         # the def's indentation
    body_from: int      # the first line a switch inside the body can hold (after a docstring); 0: none
    body_indent: str
    name: str
    def_line: int
    scope: tuple | None = None  # _scope of the pristine function


def _unit(node, lines: list[str], pristine) -> _Unit:
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    body_from, body_indent = 0, ""
    if body and body[0].lineno > node.lineno and not _declares_scope(node):
        line = lines[body[0].lineno - 1]
        if line[:body[0].col_offset].strip() == "":  # the statement begins its line
            body_from, body_indent = body[0].lineno, line[:body[0].col_offset]
    def_text = lines[first - 1]
    return _Unit(first, node.end_lineno, def_text[:len(def_text) - len(def_text.lstrip())], body_from,
                 body_indent, node.name, node.lineno,
                 _scope(_function_code(pristine, node.name, (first, node.lineno))))


def instrument(rel: str, text: str, mutants: list[Mutant]) -> Switched:
    """The instrumented copy of `text` (the file `rel`), switching those of
    `mutants` that lie in a switchable function and compile.

    A mutant in a function's body (after its docstring) is switched inside
    the body, read at each call (`call_time`), where its function keeps its
    local names and its kind (generator or not) and declares no global or
    nonlocal name; the others of a function (on its def or decorator lines)
    are switched around its def, read once at import."""
    tree = ast.parse(text)
    lines = text.split("\n")
    continuing = string_continuations(text)
    pristine = compile(text, rel, "exec")
    module_names = _module_names(pristine, tree)
    in_unit: dict[int, _Unit] = {}
    nested: set[int] = set()  # lines inside a def, lambda or class within a unit
    for node in units(tree):
        unit = _unit(node, lines, pristine)
        for line in range(unit.first, unit.last + 1):
            in_unit[line] = unit
        for inner in ast.walk(node):
            if inner is not node and isinstance(inner, _NESTED_SCOPES):
                nested.update(range(inner.lineno, inner.end_lineno + 1))
    around: dict[int, list[Mutant]] = {}   # unit's first line -> mutants switched around its def
    inside: dict[int, list[Mutant]] = {}   # unit's first line -> mutants switched inside its body
    units_by_first: dict[int, _Unit] = {}
    for m in mutants:
        unit = in_unit.get(m.line)
        if unit is None or in_unit.get(m.line + m.lines_replaced - 1) is not unit:
            continue
        code = compiled(m.apply(text), rel)
        if code is None:
            continue
        units_by_first[unit.first] = unit
        in_body = unit.body_from and m.line >= unit.body_from and _shares_a_body(
            unit.scope, _scope(_function_code(code, unit.name, (unit.first, unit.def_line))), module_names)
        (inside if in_body else around).setdefault(unit.first, []).append(m)

    def indented(line: int, text_of: str, depth: int) -> tuple[str, str]:
        """A line of a copy, `depth` indents deeper (a string's continuation
        and an empty line as they are): (its text, the indentation added).
        `line`: the original's line it stands for; 0 for one a mutant adds."""
        added = "" if line in continuing or not text_of.strip() else INDENT * depth
        return added + text_of, added

    def variant(m: Mutant | None, line: int) -> list[tuple[int, str]]:
        """What stands for the original's `line` in the copy of mutant `m`
        (None: the original), each text with the original's line it stands
        for (indented()'s): its line, or the lines it replaces its span with
        (at the span's first line; none at the others). A line the mutant
        adds beyond its span stands for none: a fault that inserts code after
        a docstring's last line (a string's continuation) takes that line in,
        and the code it adds is indented as code."""
        if m is None or not m.line <= line < m.line + m.lines_replaced:
            return [(line, lines[line - 1])]
        if line != m.line:
            return []
        return [(line + k if k < m.lines_replaced else 0, text_of)
                for k, text_of in enumerate(m.mutated.split("\n"))]

    def function_copy(unit: _Unit, mutated: Mutant | None, depth: int, record: bool) -> list[str]:
        """The function's lines with `mutated`'s line (None: as it is) and
        its in-body switches, `depth` indents deeper; `record`: this copy is
        the one `lines` maps the original's lines to."""
        copy_lines: list[str] = []

        def emit(line: int, text_of: str, deeper: int, stands_for: int) -> None:
            placed, added = indented(stands_for, text_of, deeper)
            copy_lines.append(placed)
            if record:
                mapping[line] = (len(out) + len(copy_lines), added)

        switches = inside.get(unit.first, []) if mutated is None else []
        body_from = unit.body_from if switches else unit.last + 1
        for line in range(unit.first, body_from):
            for stands_for, text_of in variant(mutated, line):
                emit(line, text_of, depth, stands_for)
        if switches:
            head = INDENT * depth + unit.body_indent
            for i, m in enumerate(switches):
                copy_lines.append(f"{head}{'if' if i == 0 else 'elif'} {VARIABLE} == {m.key!r}:")
                for line in range(body_from, unit.last + 1):
                    for stands_for, text_of in variant(m, line):
                        placed, _ = indented(stands_for, text_of, depth + 1)
                        copy_lines.append(placed)
            copy_lines.append(f"{head}else:")
            for line in range(body_from, unit.last + 1):
                emit(line, lines[line - 1], depth + 1, line)
        return copy_lines

    out: list[str] = []
    mapping: dict[int, tuple[int, str]] = {}
    after = header_after(tree)
    number, headed = 1, False
    while number <= len(lines):
        if number - 1 == after and not headed:
            out.append(HEADER)
            headed = True
        unit = units_by_first.get(number)
        if unit is None:
            out.append(lines[number - 1])
            mapping[number] = (len(out), "")
            number += 1
            continue
        wrapped = around.get(unit.first, [])
        for i, m in enumerate(wrapped):
            out.append(f"{unit.indent}{'if' if i == 0 else 'elif'} {VARIABLE} == {m.key!r}:")
            out += function_copy(unit, m, 1, record=False)
        if wrapped:
            out.append(f"{unit.indent}else:")
        out += function_copy(unit, None, 1 if wrapped else 0, record=True)
        number = unit.last + 1
    if not headed:  # an empty module, or one that is only a docstring
        out.insert(after, HEADER)
        mapping = {line: (at + (1 if at > after else 0), added) for line, (at, added) in mapping.items()}
    # A mutant in a function, lambda or class made inside its unit is in the
    # object the unit's run made: one made at the import (a closure a
    # module-level call installs) was made before a warm suite's child
    # chooses, so only a fresh import chooses it.
    late = {m.key for ms in inside.values() for m in ms
            if not any(line in nested for line in range(m.line, m.line + m.lines_replaced))}
    return Switched("\n".join(out), {m.key for ms in (*around.values(), *inside.values()) for m in ms},
                    mapping, late)


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
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
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
