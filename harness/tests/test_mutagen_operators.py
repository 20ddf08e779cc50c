"""Tests of the mutation operators issue 20 added to the generators (argument
swaps, forced conditions, sibling exceptions, constants, discarded results,
early returns, loop exits), each on a small source, and that every operator
occurs among the reference's own candidates."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]

from harness.mutation import auto_mutants, mutagen


# ---- the operators added for issue 20 ----------------------------------------------

CPP_MORE = """\
namespace nr {
void run(int a, int b) {
  while (more(a)) step(a, b);
  const int pick = ready ? a : b;
  TORCH_CHECK(a > 0, "a must be positive");
  if (a == 3) throw InvalidArgumentError("bad");
  total = compute(a, b);
  auto kept = compute(a, b);
  log(a - b);
  use(a, "text " + name);
}
int value(int a) {
  work(a);
  return compute(a, 7);
}
}  // namespace nr
"""


def mutated_line(found, line, kind, change):
    (m,) = [m for m in found if (m.line, m.kind, m.change) == (line, kind, change)]
    return m.mutated.strip()


def test_cpp_argument_swap_of_adjacent_arguments_of_one_kind():
    found = mutagen.cpp_mutants("a.cpp", CPP_MORE)
    assert mutated_line(found, 3, "argument-swap", "(a, b) swapped") == "while (more(a)) step(b, a);"
    # A string and a name are not swapped: they are of different kinds.
    assert not any(m.line == 10 and m.kind == "argument-swap" for m in found)


def test_cpp_conditions_of_while_and_the_conditional_operator():
    found = mutagen.cpp_mutants("a.cpp", CPP_MORE)
    assert mutated_line(found, 3, "condition-false", "while (...) -> while (false)") == "while (false) step(a, b);"
    assert mutated_line(found, 4, "condition-true", "... ? -> true ?") == "const int pick = true ? a : b;"
    assert mutated_line(found, 4, "condition-false", "... ? -> false ?") == "const int pick = false ? a : b;"


def test_cpp_exception_types_swap_for_siblings():
    found = mutagen.cpp_mutants("a.cpp", CPP_MORE)
    checks = {m.change for m in found if m.line == 5 and m.kind == "exception-type"}
    assert checks == {"TORCH_CHECK -> TORCH_CHECK_VALUE", "TORCH_CHECK -> TORCH_CHECK_TYPE",
                      "TORCH_CHECK -> TORCH_CHECK_INDEX"}
    assert mutated_line(found, 6, "exception-type", "InvalidArgumentError -> OperatorNotFoundError") == \
        'if (a == 3) throw OperatorNotFoundError("bad");'


def test_cpp_constants_become_zero_one_and_minus_one_and_move_by_one():
    found = mutagen.cpp_mutants("a.cpp", CPP_MORE)
    got = {m.change: m.mutated.strip() for m in found if m.line == 6 and m.kind in ("constant", "off-by-one")}
    assert got == {"3 -> 4": 'if (a == 4) throw InvalidArgumentError("bad");',
                   "3 -> 2": 'if (a == 2) throw InvalidArgumentError("bad");',
                   "3 -> 0": 'if (a == 0) throw InvalidArgumentError("bad");',
                   "3 -> 1": 'if (a == 1) throw InvalidArgumentError("bad");',
                   "3 -> -1": 'if (a == (-1)) throw InvalidArgumentError("bad");'}


def test_cpp_a_calls_result_discarded():
    found = mutagen.cpp_mutants("a.cpp", CPP_MORE)
    assert mutated_line(found, 7, "result-discarded", "x = f(...) -> f(...)") == "compute(a, b);"
    assert not any(m.line == 8 and m.kind == "result-discarded" for m in found), "a declaration"
    assert mutated_line(found, 14, "result-discarded", "return f(...) -> f(...); return {}") == \
        "compute(a, 7); return {};"


def test_cpp_arithmetic_but_not_string_concatenation():
    found = mutagen.cpp_mutants("a.cpp", CPP_MORE)
    assert mutated_line(found, 9, "arithmetic", "- -> +") == "log(a + b);"
    assert not any(m.line == 10 and m.kind == "arithmetic" for m in found)


def test_cpp_early_return_fits_the_functions_return_type():
    found = mutagen.cpp_mutants("a.cpp", CPP_MORE)
    assert mutated_line(found, 9, "early-return", "statement -> return;") == "return;  // mutant: early return"
    assert mutated_line(found, 13, "early-return", "statement -> return {};") == \
        "return {};  // mutant: early return"


def test_cpp_break_and_continue_swap():
    found = mutagen.cpp_mutants("a.cpp", "void f() {\n  for (;;) {\n    break;\n    continue;\n  }\n}\n")
    assert {(m.line, m.change) for m in found if m.kind == "loop-exit"} == {
        (3, "break; -> continue;"), (4, "continue; -> break;")}


PY_MORE = '''\
def f(a, b):
    x = g(a, b)
    y = a if ready else b
    if a == 3:
        raise ValueError("bad")
    total = a - b
    total += 2
    h(a)
    return g(b, 1)
'''


def test_python_operators_added_for_issue_20():
    found = mutagen.python_mutants("m.py", PY_MORE)
    assert mutated_line(found, 2, "argument-swap", "(a, b) swapped") == "x = g(b, a)"
    assert mutated_line(found, 2, "result-discarded", "x = f(...) -> f(...)") == "g(a, b)"
    assert mutated_line(found, 3, "condition-true", "... if ... else ... -> True") == "y = a if True else b"
    assert {m.change for m in found if m.line == 5 and m.kind == "exception-type"} == {
        "ValueError -> TypeError", "ValueError -> RuntimeError"}
    assert mutated_line(found, 4, "constant", "3 -> 0") == "if a == 0:"
    assert mutated_line(found, 4, "constant", "3 -> -1") == "if a == (-1):"
    assert mutated_line(found, 4, "off-by-one", "3 -> 2") == "if a == 2:"
    assert mutated_line(found, 6, "arithmetic", "- -> +") == "total = a + b"
    assert mutated_line(found, 7, "arithmetic", "+= -> -=") == "total -= 2"
    assert mutated_line(found, 8, "early-return", "statement -> return") == "return"
    assert mutated_line(found, 9, "result-discarded", "return f(...) -> f(...); return None") == \
        "g(b, 1); return None"
    for m in found:
        compile(m.apply(PY_MORE), "m.py", "exec")


def test_every_operator_the_issue_names_is_generated_on_the_reference():
    """relational, logical, ! deletion, boolean flips, +/-, off-by-one
    literals, statement deletion, return {}, early return, and the ones
    issue 20 adds: each occurs among the reference's candidates."""
    kinds = {"relational", "logical", "negation", "boolean", "arithmetic", "off-by-one", "statement-deletion",
             "return-value", "early-return", "argument-swap", "condition-true", "condition-false",
             "exception-type", "constant", "result-discarded", "loop-exit"}
    for layer in auto_mutants.LAYERS.values():
        found = {m.kind for p in ROOT.glob(layer)
                 for m in mutagen.mutants_of(str(p.relative_to(ROOT)), p.read_text())}
        assert kinds - {"loop-exit", "arithmetic"} <= found, (layer, kinds - found)
