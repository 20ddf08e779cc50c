"""Tests of the C++ mutant schemata (harness/mutation/cpp_schemata.py) on a
toy program compiled with the system's C++ compiler: one build holds the
mutants, NR_MUTANT_ID picks one at run time, and each then runs as the
program rewritten with that mutant does; a line whose switched form does not
compile is found by compiling and left out, the others kept."""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import shutil
import subprocess

import pytest

from harness.mutation import cpp_schemata, mutagen, suite_server

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler on PATH")

TOY = """\
#include <cstdio>
int compute(int a, int b) { return a - b; }
bool done = false;
int pick(int a, int b, int n) {
  if (a == b && !done) return 100;
  int total = a + 1;
  for (int i = 0; i < n; ++i) {
    if (i == 3) continue;
    total = total + i;
  }
  int sign = 0;
  if (total > n) sign = 1;
  else sign = 2;
  return compute(total, b) * sign;
}
int main() {
  std::printf("%d %d\\n", pick(1, 2, 5), pick(4, 4, 2));
  return 0;
}
"""


def build(tmp: pathlib.Path, name: str, text: str) -> pathlib.Path:
    (tmp / f"{name}.cpp").write_text(text)
    binary = tmp / name
    subprocess.run([CXX, "-std=c++17", "-O0", "-I", str(tmp), str(tmp / f"{name}.cpp"), "-o", str(binary)],
                   check=True, capture_output=True, text=True)
    return binary


def output(binary: pathlib.Path, mutant_id: int | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NR_MUTANT_ID"}
    if mutant_id is not None:
        env["NR_MUTANT_ID"] = str(mutant_id)
    return subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=30).stdout.strip()


def syntax_check(tmp: pathlib.Path) -> list[str]:
    return [CXX, "-std=c++17", "-fsyntax-only", "-I", str(tmp), "-x", "c++", "-"]


def fault_switched_alone(tmp: pathlib.Path, rel: str, text: str, find: str, replace: str):
    """A seeded fault of `text` (`find` -> `replace`), checked by compiling
    alone: (the fault as a mutant, the schemata), asserting it is switched."""
    from harness.mutation.seeded_faults import SeededFault
    (tmp / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    fault = SeededFault(rel, "fault", "toy.behaviour", find, replace).as_mutant(text)
    checked = cpp_schemata.compile_check(rel, text, [fault], syntax_check(tmp), "<stdin>")
    assert fault.key in checked.ids, checked.left_out
    return fault, checked


def test_one_build_runs_each_mutant_as_its_rewritten_program(tmp_path):
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    found = mutagen.cpp_mutants("toy.cpp", TOY)
    switched = cpp_schemata.compile_check("toy.cpp", TOY, found, syntax_check(tmp_path), "<stdin>")
    assert len(switched.ids) >= len(found) // 2
    schemata = build(tmp_path, "schemata", switched.text)
    pristine = output(build(tmp_path, "pristine", TOY))
    assert output(schemata) == pristine == "7 100"  # no mutant chosen: the program as it is
    by_key = {m.key: m for m in found}
    differ = 0
    for key in random.Random(28).sample(sorted(switched.ids), 10):
        rewritten = output(build(tmp_path, f"m{switched.ids[key]}", by_key[key].apply(TOY)))
        assert output(schemata, switched.ids[key]) == rewritten, key
        differ += rewritten != pristine
    assert differ  # the sample holds mutants that change the output


def test_a_line_whose_switched_form_does_not_compile_is_left_out_and_the_others_kept(tmp_path):
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    found = mutagen.cpp_mutants("toy.cpp", TOY)
    # `if (total > n) sign = 1;` has an `else` on the next line: switched whole,
    # the `else` is left dangling, which does not compile.
    line = next(i for i, text in enumerate(TOY.split("\n"), 1) if "if (total > n)" in text)
    on_it = {m.key for m in found if m.line == line}
    assert on_it
    plain = cpp_schemata.schemata("toy.cpp", TOY, found)
    assert on_it <= set(plain.ids)  # the text alone cannot tell
    checked = cpp_schemata.compile_check("toy.cpp", TOY, found, syntax_check(tmp_path), "<stdin>")
    assert on_it.isdisjoint(checked.ids)
    assert all("does not compile" in checked.left_out[k] for k in on_it)
    assert set(checked.ids) == set(plain.ids) - on_it
    build(tmp_path, "checked", checked.text)  # what is left compiles


def test_the_command_line_writes_the_copy_and_counts_the_plain_forms_of_those_left_out(tmp_path, capsys):
    """python -m harness.mutation.cpp_schemata FILE --build B --out O --plain:
    the checked copy at O/FILE, and of the mutants left out (the `if` with an
    `else` on the next line), how many compile as their plain rewritten file."""
    (tmp_path / "toy.cpp").write_text(TOY)
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    (build_dir / "compile_commands.json").write_text(json.dumps([{
        "directory": str(build_dir), "file": "../toy.cpp", "output": "toy.o",
        "command": f"{CXX} -std=c++17 -o toy.o -c ../toy.cpp"}]))
    found = mutagen.cpp_mutants("toy.cpp", TOY)
    line = next(i for i, text in enumerate(TOY.split("\n"), 1) if "if (total > n)" in text)
    left = [m for m in found if m.line == line]
    assert cpp_schemata.main(["toy.cpp", "--root", str(tmp_path), "--build", str(build_dir),
                              "--out", str(tmp_path / "out"), "--plain"]) == 0
    said = capsys.readouterr().out
    assert f"of the {len(left)} left out, as plain rewritten files: {len(left)} compile, 0 do not" in said
    assert "nr_mutant_is" in (tmp_path / "out" / "toy.cpp").read_text()


def test_every_switch_stays_on_its_line():
    found = mutagen.cpp_mutants("toy.cpp", TOY)
    text = cpp_schemata.schemata("toy.cpp", TOY, found).text.split("\n")
    assert text[1] == "#line 1"
    body = text[2:]
    assert len(body) == len(TOY.split("\n"))
    for original, switched in zip(TOY.split("\n"), body):
        assert ("nr_mutant_is" in switched) or switched == original


@pytest.mark.parametrize("line,mutated,expected", [
    ("  if (a == b) {", "  if (a != b) {", "  if ((nr_mutant_is(0) ? (a != b) : (a == b))) {"),
    ("  x = f(a, b);", "  x = f(b, a);", "  if (nr_mutant_is(0)) { x = f(b, a); } else { x = f(a, b); }"),
    ("  work(i);", "  ;  // mutant: statement deleted", "  if (!nr_mutant_is(0)) { work(i); }"),
    ("  auto y = g(a, n + 1);", "  auto y = g(a, n - 1);", "  auto y = g(a, (nr_mutant_is(0) ? (n - 1) : (n + 1)));"),
    ("  auto y = g(a,", "  auto y = g(a", None),  # no expression covers it
    # A for header: its condition, its step, its declaration's initializer; not its declared type.
    ("  for (size_t i = 0; i < n.size(); ++i) {", "  for (size_t i = 0; i <= n.size(); ++i) {",
     "  for (size_t i = 0; (nr_mutant_is(0) ? (i <= n.size()) : (i < n.size())); ++i) {"),
    ("  for (size_t i = 0; i < n.size(); ++i) {", "  for (size_t i = 0; i < n.size(); --i) {",
     "  for (size_t i = 0; i < n.size(); (nr_mutant_is(0) ? (--i) : (++i))) {"),
    ("  for (size_t i = 0; i < n.size(); ++i) {", "  for (size_t i = 1; i < n.size(); ++i) {",
     "  for (size_t i = (nr_mutant_is(0) ? (1) : (0)); i < n.size(); ++i) {"),
    ("  for (size_t i = 0; i < n; ++i) {", "  for (int i = 0; i < n; ++i) {", None),
])
def test_the_switched_forms(line, mutated, expected):
    masked = cpp_schemata._mask_cpp(line)[0]
    switched, left_out = cpp_schemata.switch_line(line, masked, [(0, mutated)])
    if expected is None:
        assert left_out == [0]
    else:
        assert (switched, left_out) == (expected, [])


SPREAD = """\
#include <cstdio>
#include <stdexcept>
#include <string>
struct Wide : std::runtime_error { using std::runtime_error::runtime_error; };
struct Narrow : std::runtime_error { using std::runtime_error::runtime_error; };
int check(int x) {
  if (x > 2 &&
      x < 10) {
    throw Wide(std::string("too big: ") +
               std::to_string(x));
  }
  return x;
}
int main() {
  try {
    check(5);
    std::printf("none\\n");
  } catch (const Wide& e) {
    std::printf("wide %s\\n", e.what());
  } catch (const Narrow& e) {
    std::printf("narrow %s\\n", e.what());
  }
  return 0;
}
"""


def test_a_line_mutant_inside_a_statement_of_several_lines_is_switched_on_the_statement(tmp_path):
    """No form of its own line fits a change of `throw Wide(` whose
    arguments go on below, nor one inside a condition of two lines: each is
    switched on its statement or expression as a seeded fault is, every
    line keeping its number, and runs as its rewritten program."""
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    lines = SPREAD.split("\n")
    throw = next(i for i, text in enumerate(lines, 1) if "throw Wide(" in text)
    condition = next(i for i, text in enumerate(lines, 1) if "x < 10" in text)
    found = mutagen.with_keys([
        mutagen.Mutant("spread.cpp", throw, "exception-type", "Wide -> Narrow", lines[throw - 1],
                       lines[throw - 1].replace("Wide", "Narrow")),
        mutagen.Mutant("spread.cpp", condition, "relational", "< -> >", lines[condition - 1],
                       lines[condition - 1].replace("<", ">")),
    ])
    for m in found:
        assert cpp_schemata.switch_line(m.original, cpp_schemata._mask_cpp(m.original)[0], [(0, m.mutated)])[1] == [0]
    switched = cpp_schemata.compile_check("spread.cpp", SPREAD, found, syntax_check(tmp_path), "<stdin>")
    assert set(switched.ids) == {m.key for m in found} and not switched.left_out
    assert switched.anchors[found[0].key] == throw and switched.anchors[found[1].key] == condition - 1
    assert len(switched.text.split("\n")) == len(lines) + 2  # the include and a #line directive only
    binary = build(tmp_path, "spread", switched.text)
    assert output(binary) == output(build(tmp_path, "pristine", SPREAD)) == "wide too big: 5"
    for m in found:
        assert output(binary, switched.ids[m.key]) == output(build(tmp_path, f"m{switched.ids[m.key]}", m.apply(SPREAD)))
    assert output(binary, switched.ids[found[0].key]) == "narrow too big: 5"
    assert output(binary, switched.ids[found[1].key]) == "none"


REACH = """\\
#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>
int never(int a) {
  return a + 1;
}
int in_child(int a) {
  return a * 2;
}
int always(int a) {
  return a - 3;
}
int looped(int n) {
  int total = 0;
  for (int i = 0, j = n; i < j; ++i) {
    total += i;
  }
  return total;
}
int never_looped(int n) {
  int total = 1;
  for (int i = 0, j = n; i < j; ++i) {
    total *= i;
  }
  return total;
}
int main(int argc, char**) {
  if (argc > 5) std::printf("%d\\n", never(argc) + never_looped(argc));
  if (looped(argc) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    std::printf("%d\\n", in_child(argc));
    std::fflush(stdout);
    _exit(0);
  }
  waitpid(child, nullptr, 0);
  std::printf("%d\\n", always(argc));
  return 0;
}
"""


def test_a_trace_file_marks_each_mutant_a_run_reaches_its_forked_children_included(tmp_path):
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    found = mutagen.cpp_mutants("reach.cpp", REACH)
    switched = cpp_schemata.compile_check("reach.cpp", REACH, found, syntax_check(tmp_path), "<stdin>")
    binary = build(tmp_path, "reach", switched.text)
    lines = REACH.split("\n")
    body = {"never": "a + 1", "in_child": "a * 2", "always": "a - 3"}
    by_function = {name: {switched.ids[m.key] for m in found if m.key in switched.ids
                          and f"return {text};" in lines[m.line - 1]}
                   for name, text in body.items()}
    assert all(by_function.values()), by_function  # each function's line holds a switched mutant
    trace = tmp_path / "reached.bin"
    trace.write_bytes(bytes(max(switched.ids.values()) + 1))
    env = {**{k: v for k, v in os.environ.items() if k != "NR_MUTANT_ID"}, "NR_MUTANT_TRACE": str(trace)}
    done = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.split() == ["2", "-2"]  # no mutant chosen: as it is
    reached = {i for i, b in enumerate(trace.read_bytes()) if b}
    assert by_function["always"] <= reached
    assert by_function["in_child"] <= reached  # marked by the forked child, in the same file
    assert not by_function["never"] & reached
    # Without the variable nothing is marked, and the program runs the same.
    trace.write_bytes(bytes(len(trace.read_bytes())))
    plain = subprocess.run([str(binary)], env={k: v for k, v in env.items() if k != "NR_MUTANT_TRACE"},
                           capture_output=True, text=True, timeout=30)
    assert plain.stdout == done.stdout and not any(trace.read_bytes())


def test_a_mutant_no_switch_fits_is_probed_at_its_statement_and_the_trace_marks_the_probe(tmp_path):
    """A `for` header declaring two names takes no switch on their
    initializers: a probe in front of its statement marks whether a run
    reaches them (the mutants themselves are rebuilt)."""
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    found = mutagen.cpp_mutants("reach.cpp", REACH)
    switched = cpp_schemata.compile_check("reach.cpp", REACH, found, syntax_check(tmp_path), "<stdin>")
    lines = REACH.split("\n")
    headers = {name: next(i for i, text in enumerate(lines, 1) if text.strip().startswith("for (")
                          and name in lines[i - 3]) for name in ("looped", "never_looped")}
    probes = {name: {switched.probes[m.key] for m in found if m.line == line and m.key in switched.probes}
              for name, line in headers.items()}
    assert all(len(ids) == 1 for ids in probes.values()), probes  # one probe per statement
    assert not set(switched.ids.values()) & {i for ids in probes.values() for i in ids}
    binary = build(tmp_path, "probed", switched.text)
    trace = tmp_path / "reached.bin"
    trace.write_bytes(bytes(max([*switched.ids.values(), *switched.probes.values()]) + 1))
    env = {**{k: v for k, v in os.environ.items() if k != "NR_MUTANT_ID"}, "NR_MUTANT_TRACE": str(trace)}
    done = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["2", "-2"]
    reached = {i for i, b in enumerate(trace.read_bytes()) if b}
    assert probes["looped"] <= reached and not probes["never_looped"] & reached


@pytest.mark.parametrize("text, line, where", [
    ("void f() {\n  int x = 0;\n  for (int i = 0; i < 3; ++i) {\n  }\n}", 3, 3),  # its own line
    ("void f() {\n  g(1,\n    h(2));\n}", 3, 2),                                  # a call's first line
    ("void f() {\n  if (a)\n    g(1,\n      2);\n}", 4, 2),                        # an if without braces: in front of the if
    ("void f() {\n  if (a) {\n  } else\n    g(1,\n      2);\n}", 5, None),         # behind an else
    ("void f() {\n  switch (x) {\n    case 1:\n      g(1,\n        2);\n  }\n}", 5, None),  # behind a case
    ("void f() {\n  again: g(1,\n    2);\n}", 3, None),                            # behind a label
    ("#if X\n  g(1,\n    2);\n#endif", 3, None),                                  # a preprocessor line
])
def test_a_probe_goes_where_nothing_can_jump_past_it_to_the_line(text, line, where):
    from harness.mutation.mutagen_cpp import _mask_cpp
    assert cpp_schemata.probe_line(text.split("\n"), _mask_cpp(text), line) == where


@pytest.mark.parametrize("line, whole", [
    ("  x = f(a);", True),
    ("  *out = value;", True),
    ("  return total;", True),
    ("                  : r.chain_under(key, chain);", False),  # the end of `c ? a` on the line before
    ("      && ready(b);", False),
    ("  int y = f(a);", False),                                  # declares: switched on its initializer
])
def test_a_line_going_on_the_expression_before_it_is_no_whole_statement(line, whole):
    from harness.mutation.mutagen_cpp import _mask_cpp
    assert cpp_schemata.whole_statement(_mask_cpp(line)[0]) is whole


CONSTANT = """\
#include <cstdio>
constexpr int limit(int a) {
  return a + 2;
}
int scaled(int a) {
  constexpr int k = limit(3);
  return a * k;
}
int main() {
  std::printf("%d\\n", scaled(2));
  return 0;
}
"""


def test_a_switch_in_a_constant_expression_is_left_out_by_its_line_and_the_rest_kept(tmp_path):
    """The switch reads the environment, so it cannot run in a constant
    expression: the compiler's error is in the switch's header, and the note
    naming the line that expanded it puts the blame there."""
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    found = mutagen.cpp_mutants("constant.cpp", CONSTANT)
    checked = cpp_schemata.compile_check("constant.cpp", CONSTANT, found, syntax_check(tmp_path), "<stdin>")
    lines = CONSTANT.split("\n")
    constant = {m.key for m in found if "constexpr int k" in lines[m.line - 1] or "a + 2" in lines[m.line - 1]}
    assert constant and constant.isdisjoint(checked.ids)
    assert {m.key for m in found if "a * k" in lines[m.line - 1]} <= set(checked.ids)  # the rest kept
    build(tmp_path, "constant", checked.text)


CHOOSER = """\
#include <cstdio>
#include "nr_mutant_switch.h"
int main() {
  std::printf("%d\\n", static_cast<int>(nr_mutant_is(4)));
  std::fflush(stdout);
  std::getchar();
  std::printf("%d\\n", static_cast<int>(nr_mutant_is(4)));
  return 0;
}
"""


def test_the_choice_file_is_read_at_each_switch_and_overrides_the_variable(tmp_path):
    # The warm suite (suite_server.py) forks its children from one process
    # that loaded the build: the choice must be read at each switch.
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    binary = build(tmp_path, "chooser", CHOOSER)
    choice = tmp_path / "choice.bin"
    choice.write_bytes(bytes(8))
    suite_server.write_choice(str(choice), 4)
    env = {**os.environ, "NR_MUTANT_CHOICE": str(choice), "NR_MUTANT_ID": "7"}
    proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "1"
    suite_server.write_choice(str(choice), suite_server.NO_MUTANT)
    out, _ = proc.communicate("\n", timeout=30)
    assert out.strip() == "0"
    # Without the file the variable chooses.
    assert output(binary, 4).split() == ["1", "1"]
    assert output(binary, 5).split() == ["0", "0"]


# Seeded faults change whole regions (harness/mutation/seeded_faults.py takes
# each as a mutant of the lines it changes): statements replaced by more or
# fewer, inserted, deleted; a condition or an initializer spanning lines;
# two faults of one region, and two whose regions overlap.
REGIONS = """\
#include <cstdio>
int weigh(int a, int b) {
  int total = a;
  if (a > 2 ||
      b > 5) {
    total += 10;
  }
  const int scale = a > b
                        ? 2
                        : 3;
  total = total * scale;  // scaled
  total += b;
  std::printf("%d ", total);
  return total;
}
int main() {
  int sum = weigh(1, 2) + weigh(3, 1) + weigh(0, 9);
  std::printf("%d\\n", sum);
  return 0;
}
"""

REGION_FAULTS = {
    # name: (lines, replacement)
    "condition-spans-lines": ("  if (a > 2 ||\n      b > 5) {", "  if (false) {  // FAULT"),
    "initializer-spans-lines": ("  const int scale = a > b\n                        ? 2\n                        : 3;",
                                "  const int scale = 1;  // FAULT: never scaled"),
    "statement-deleted": ("  total += b;", "  // FAULT: b is not added"),
    "statements-replaced": ("  total = total * scale;  // scaled\n  total += b;",
                            "  total = scale;  // FAULT\n  total -= b;\n  total *= 2;"),
    "statement-inserted": ("  int total = a;", "  int total = a;\n  total -= 1;  // FAULT"),
    "same-region-as-inserted": ("  int total = a;", "  int total = a;\n  total += 7;  // FAULT"),
    "argument-of-a-call": ("  std::printf(\"%d \", total);", "  std::printf(\"%d \", total + 1);  /* FAULT */"),
}


def region_mutants() -> list:
    from harness.mutation.seeded_faults import SeededFault
    return [SeededFault("regions.cpp", name, "toy.behaviour", find, replace).as_mutant(REGIONS)
            for name, (find, replace) in REGION_FAULTS.items()]


def test_a_fault_of_several_lines_runs_switched_as_its_rewritten_program(tmp_path):
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    found = region_mutants()
    assert any(m.lines_replaced > 1 for m in found) and any("\n" in m.mutated for m in found)
    checked = cpp_schemata.compile_check("regions.cpp", REGIONS, found, syntax_check(tmp_path), "<stdin>")
    assert set(checked.ids) == {m.key for m in found}, checked.left_out
    # Every line keeps its number: the copy has the file's lines after its
    # include and a `#line 1`.
    assert checked.text.split("\n")[1] == "#line 1"
    assert len(checked.text.split("\n")) == len(REGIONS.split("\n")) + 2
    schemata = build(tmp_path, "schemata", checked.text)
    pristine = output(build(tmp_path, "pristine", REGIONS))
    assert output(schemata) == pristine
    for m in found:
        rewritten = output(build(tmp_path, f"m{checked.ids[m.key]}", m.apply(REGIONS)))
        assert rewritten != pristine, m.key  # each fault changes what the program prints
        assert output(schemata, checked.ids[m.key]) == rewritten, m.key


def test_faults_of_one_region_are_chained_and_overlapping_regions_joined():
    found = region_mutants()
    text = cpp_schemata.schemata("regions.cpp", REGIONS, found).text
    inserted = [line for line in text.split("\n") if "int total = a;" in line]
    assert len(inserted) == 1 and inserted[0].count("nr_mutant_is(") == 2  # one region, two faults
    # statement-deleted's region lies inside statements-replaced's: both are
    # switched on the statements around the two, one chain.
    joined = next(line for line in text.split("\n") if "total = scale;" in line)
    assert joined.count("nr_mutant_is(") == 2 and "else {" in joined


@pytest.mark.parametrize("find, replace, switched", [
    # A declaration switched whole would end with its `else { }` block (an
    # RAII guard released at once): the region runs to its block's end.
    ("  std::lock_guard<std::mutex> lock(m);", "  // FAULT: unlocked", True),
    # One element of a braced initializer list is an expression, not a block.
    ("  return {a, b > 0};", "  return {a, false};  // FAULT", True),
    # A lambda's body, after its trailing return type, is a block of its own.
    ("    g(x);", "    // FAULT", True),
])
def test_what_a_region_switch_takes(find, replace, switched):
    text = ("#include <mutex>\nstd::mutex m;\nvoid g(int);\nstruct P { int a; bool b; };\n"
            "P make(int a, int b) {\n  std::lock_guard<std::mutex> lock(m);\n  return {a, b > 0};\n}\n"
            "auto f = [](int x) -> int {\n    g(x);\n    return x;\n};\n")
    from harness.mutation.seeded_faults import SeededFault
    fault = SeededFault("t.cpp", "fault", "toy.behaviour", find, replace).as_mutant(text)
    found = cpp_schemata.schemata("t.cpp", text, [fault])
    assert (fault.key in found.ids) == switched, found.left_out
    if switched:  # starting on its own line
        changed = [line for line in found.text.split("\n")[2:] if "nr_mutant_is(" in line]
        assert len(changed) == 1 and find.strip().split("(")[0].split("{")[0] in changed[0]
    if "lock_guard" in find:  # the guard's block, to its end, in both branches
        assert "if (nr_mutant_is(0)) { return {a, b > 0}; } else { std::lock_guard<std::mutex> lock(m);" \
            in found.text and "return {a, b > 0}; }\n}" in found.text


def test_a_region_whose_expression_form_does_not_compile_is_switched_on_its_statement(tmp_path):
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    text = "void h(int);\nvoid h(const char*);\nvoid k(int x) {\n  h(x);\n}\n"
    from harness.mutation.seeded_faults import SeededFault
    fault = SeededFault("k.cpp", "fault", "toy.behaviour", "  h(x);", '  h("text");  // FAULT').as_mutant(text)
    assert "? (" in cpp_schemata.schemata("k.cpp", text, [fault]).text  # a ternary of two types at first
    checked = cpp_schemata.compile_check("k.cpp", text, [fault], syntax_check(tmp_path), "<stdin>")
    assert fault.key in checked.ids, checked.left_out
    assert 'if (nr_mutant_is(0)) { h("text"); } else { h(x); }' in checked.text


LABELLED = """\
#include <cstdio>
namespace kinds { enum class Kind { kA, kB, kC }; }
int score(kinds::Kind k, int x) {
  switch (k) {
    case kinds::Kind::kA:
      return x + 1;
    case kinds::Kind::kB:
      // two statements after a comment
      x *= 3;
      x -= 1;
      return x;
    default:
      return x > 2 ? x : -x;
  }
}
int main() {
  std::printf("%d %d %d\\n", score(kinds::Kind::kA, 4), score(kinds::Kind::kB, 4), score(kinds::Kind::kC, 4));
}
"""


@pytest.mark.parametrize("find, replace", [
    ("      return x + 1;", "      return 0;  // FAULT"),
    ("      x *= 3;\n      x -= 1;", "      x -= 1;  // FAULT: never tripled"),
    ("      return x > 2 ? x : -x;", "      return -x;  // FAULT"),
])
def test_statements_after_a_case_label_are_switched_without_the_label(tmp_path, find, replace):
    """A `case X:` or `default:` label (qualified names in X too) ends
    before the statements a fault changes: the switch's `if` starts after
    it, and the program switched runs as the fault's rewritten program."""
    fault, checked = fault_switched_alone(tmp_path, "l.cpp", LABELLED, find, replace)
    switched = [line for line in checked.text.split("\n") if "nr_mutant_is(" in line]
    assert len(switched) == 1 and re.match(r"\s*if \(nr_mutant_is\(", switched[0]), switched
    pristine = output(build(tmp_path, "pristine", LABELLED))
    rewritten = output(build(tmp_path, "rewritten", fault.apply(LABELLED)))
    schemata = build(tmp_path, "schemata", checked.text)
    assert rewritten != pristine
    assert output(schemata) == pristine and output(schemata, checked.ids[fault.key]) == rewritten


BRACED = """\
#include <cstdio>
#include <map>
#include <utility>
int main() {
  std::map<int, std::pair<int, int>> records;
  const int ids[] = {1, 2, 3};
  for (int id : ids) records[id] = {id, id * 2};
  std::printf("%zu %d\\n", records.size(), records.empty() ? 0 : records.rbegin()->second.second);
}
"""


def test_a_statement_ending_in_a_braced_list_is_switched_to_its_semicolon(tmp_path):
    """A statement whose last token before its `;` is a braced initializer
    list (`x = {a, b};`) ends at the `;`, not at the list's `}`: both
    branches of the switch keep their `;`, and it compiles and runs as the
    fault's rewritten program."""
    fault, checked = fault_switched_alone(tmp_path, "b.cpp", BRACED, "  for (int id : ids) records[id] = {id, id * 2};",
                                          "  (void)ids;  // FAULT: nothing recorded")
    pristine = output(build(tmp_path, "pristine", BRACED))
    schemata = build(tmp_path, "schemata", checked.text)
    assert pristine == "3 6"
    assert output(schemata) == pristine
    assert output(schemata, checked.ids[fault.key]) == output(build(tmp_path, "rewritten", fault.apply(BRACED))) == "0 0"


SEVERAL = """\
#include <cstdio>
#include <string>
int main() {
  std::string a, b;
  a += "x";
  b += "yz";
  std::printf("%zu %zu\\n", a.size(), b.size());
}
"""


def test_a_declaration_of_several_names_is_switched_to_its_block_s_end(tmp_path):
    """`Type a, b;` is a declaration: a change of it is switched together
    with the rest of its block, which uses the names, not inside a block of
    its own that would end them."""
    fault, checked = fault_switched_alone(tmp_path, "s.cpp", SEVERAL, "  std::string a, b;",
                                          '  std::string a = "w", b;')
    schemata = build(tmp_path, "schemata", checked.text)
    assert output(schemata) == output(build(tmp_path, "pristine", SEVERAL)) == "1 2"
    assert output(schemata, checked.ids[fault.key]) == output(build(tmp_path, "rewritten", fault.apply(SEVERAL))) \
        == "2 2"


# The call instantiates the lambda (line 4), so the compiler's first error
# is there, two lines before the switch that breaks the lambda's body.
# (`decltype(k) n` is a declaration the region finder does not know as
# one: its switch ends the name in a block of its own.)
CAUSE_BELOW = """\
#include <cstdio>
template <class F> auto call(F f) -> decltype(f()) { return f(); }
int main() {
  int r = call([] {
    int k = 0;
    decltype(k) n = 2;
    n += k;
    return static_cast<int>(n);
  });
  std::printf("%d\\n", r);
}
"""


def test_a_switch_that_breaks_code_above_its_line_is_found_from_a_later_error(tmp_path):
    """A switch whose error the compiler reports first above it (at the
    call that instantiates the lambda it is in) is found from the next
    error line and left out alone; the file's other mutants stay switched."""
    from harness.mutation.seeded_faults import SeededFault
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    breaks = SeededFault("c.cpp", "breaks", "toy.behaviour", "    decltype(k) n = 2;",
                         "    long n = 3;").as_mutant(CAUSE_BELOW)
    fine = SeededFault("c.cpp", "fine", "toy.behaviour", '  std::printf("%d\\n", r);',
                       '  std::printf("%d\\n", r + 10);').as_mutant(CAUSE_BELOW)
    checked = cpp_schemata.compile_check("c.cpp", CAUSE_BELOW, [breaks, fine], syntax_check(tmp_path), "<stdin>")
    assert breaks.key in checked.left_out and "CompileError" in checked.left_out[breaks.key]
    assert fine.key in checked.ids, checked.left_out
    schemata = build(tmp_path, "schemata", checked.text)
    assert output(schemata) == "2" and output(schemata, checked.ids[fine.key]) == "12"


DEDUCED = """\
#include <cstdio>
int sub(int a, int b) { return a - b; }
int main() {
  int x = 5, y = 2;
  auto f = [&] {
    return sub(x, y);
  };
  std::printf("%d\\n", f());
}
"""


def test_a_line_keeps_the_switches_that_compile_beside_those_that_do_not(tmp_path):
    """In a lambda whose return type is deduced, `return {};` does not
    compile, switched or not; the arguments swapped on the same line do:
    only the kinds whose removal lets the line compile are left out."""
    (tmp_path / cpp_schemata.HEADER_NAME).write_text(cpp_schemata.HEADER)
    found = [m for m in mutagen.cpp_mutants("l.cpp", DEDUCED) if m.line == 6]
    swap = next(m for m in found if m.kind == "argument-swap")
    assert {"return-value", "result-discarded"} <= {m.kind for m in found}
    checked = cpp_schemata.compile_check("l.cpp", DEDUCED, found, syntax_check(tmp_path), "<stdin>")
    assert swap.key in checked.ids, checked.left_out
    assert {m.key for m in found if m.kind in ("return-value", "result-discarded")} <= set(checked.left_out)
    schemata = build(tmp_path, "schemata", checked.text)
    assert output(schemata) == "3" and output(schemata, checked.ids[swap.key]) == "-3"
