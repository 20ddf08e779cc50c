"""Tests of the Python-layer mutants switched, not rewritten
(harness/mutation/mutant_switches.py, and the runner's use of it): the
instrumented module a mutant id selects is the rewritten file, statement for
statement, for the reference's own modules; it runs as the rewritten file
does; the unswitched mutants are rewritten at their line of the copy."""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

from harness.mutation import auto_mutants, mutagen, mutant_runner, mutant_switches, mutants

TOY = '''\
"""A toy module."""

from __future__ import annotations

LIMIT = 10
TEXT = """a string
    that spans lines
"""


def decorate(f):
    return f


@decorate
def clamp(x, low=0):
    """Clamped.
    Indented docstring line."""
    if x < low:
        return low
    return min(x,
               LIMIT)


class Box:
    size = 2

    def grow(self, by):
        return self.size + by

    async def later(self):
        return 1


ALIAS = clamp
'''


def test_a_mutant_id_selects_the_rewritten_module_and_none_the_original():
    found = mutagen.python_mutants("toy.py", TOY)
    switched = mutant_switches.instrument("toy.py", TOY, found)
    assert mutant_switches.resolve(switched.text, "") == mutant_switches.resolve(TOY, "")
    # Every mutant in a function or method is switched; a module's or class's top-level line is not.
    top_level = {m.key for m in found if m.original.startswith(("LIMIT", "TEXT", "ALIAS", "    size"))}
    assert top_level and switched.keys == {m.key for m in found} - top_level
    for m in found:
        if m.key in switched.keys:
            assert mutant_switches.resolve(switched.text, m.key) == mutant_switches.resolve(m.apply(TOY), ""), m
        else:  # rewritten at its line of the copy, which then is the rewritten file
            placed = switched.rewritable(m)
            rewritten = placed.apply(switched.text)
            assert mutant_switches.resolve(rewritten, "") == mutant_switches.resolve(m.apply(TOY), ""), m


def test_strings_spanning_lines_keep_their_text():
    switched = mutant_switches.instrument("toy.py", TOY, mutagen.python_mutants("toy.py", TOY))
    namespace: dict = {}
    exec(compile(switched.text, "toy.py", "exec"), namespace)
    assert namespace["TEXT"] == "a string\n    that spans lines\n"
    assert namespace["clamp"].__doc__ == "Clamped.\n    Indented docstring line."


@pytest.mark.parametrize("rel", ["reference/python/native_registry/variants.py",
                                 "reference/python/native_registry/ordering_env.py",
                                 "reference/python/native_registry/registry.py"])
def test_the_reference_s_modules_switch_to_exactly_the_rewritten_file(rel):
    text = (ROOT / rel).read_text()
    found = mutagen.mutants_of(rel, text)
    if len(found) > 20:  # a sample: each check parses the whole module twice
        found = random.Random(28).sample(found, 20)
    switched = mutant_switches.instrument(rel, text, found)
    assert len(switched.keys) >= len(found) * 2 // 3
    assert mutant_switches.resolve(switched.text, "") == mutant_switches.resolve(text, "")
    for m in found:
        want = mutant_switches.resolve(m.apply(text), "")
        if m.key in switched.keys:
            assert mutant_switches.resolve(switched.text, m.key) == want, m.key
        else:
            assert mutant_switches.resolve(switched.rewritable(m).apply(switched.text), "") == want, m.key


def test_a_stillborn_mutant_is_not_switched_and_stays_stillborn():
    text = "def f(x):\n    return x\n"
    broken = mutagen.Mutant("m.py", 2, "k", "c", "    return x", "    return x +", "m.py|k|c|0|1")
    fine = mutagen.Mutant("m.py", 2, "k", "c", "    return x", "    return None", "m.py|k|d|0|1")
    switched = mutant_switches.instrument("m.py", text, [broken, fine])
    assert switched.keys == {fine.key}
    with pytest.raises(SyntaxError):
        compile(switched.rewritable(broken).apply(switched.text), "m.py", "exec")


def run_module(tmp_path, name, text, probe, mutant_id=None):
    """`text` written as module `name` in `tmp_path`, and what `probe` prints
    in a fresh Python there (or its last error line), with NR_MUTANT=`mutant_id`
    (None: unset)."""
    (tmp_path / f"{name}.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "NR_MUTANT"}
    if mutant_id is not None:
        env["NR_MUTANT"] = mutant_id
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


TOY_CALLS = "print(toy.clamp(-5), toy.clamp(50), toy.ALIAS(3), toy.Box().grow(1))"


def run_toy(tmp_path, text, mutant_id=None):
    return run_module(tmp_path, "toy", text, "import toy; " + TOY_CALLS, mutant_id)


def test_the_switched_module_runs_as_the_rewritten_one(tmp_path):
    found = {m.key: m for m in mutagen.python_mutants("toy.py", TOY)}
    switched = mutant_switches.instrument("toy.py", TOY, list(found.values()))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert run_toy(tmp_path / "a", switched.text) == run_toy(tmp_path / "b", TOY) == "0 10 3 3"
    differs = 0
    for key in random.Random(3).sample(sorted(switched.keys), 8):
        rewritten = run_toy(tmp_path / "b", found[key].apply(TOY))
        assert run_toy(tmp_path / "a", switched.text, key) == rewritten, key
        differs += rewritten != "0 10 3 3"
    assert differs  # the sample holds mutants that change what the module does


def test_the_runner_selects_a_switched_mutant_by_its_id_and_writes_no_file(tmp_path, monkeypatch):
    rel = "toy.py"
    place = tmp_path / rel
    found = mutagen.python_mutants(rel, TOY)
    target = mutant_runner.Target("python", [rel], {rel: place}, env={"X": "1", "NR_MUTANT": "stray"},
                                  needs_build=False, suites_from=tmp_path)
    monkeypatch.setenv("NR_MUTANT", "stray")
    place.write_text(TOY)
    auto_mutants.switch_all([target], found)
    # A choice inherited from the caller's environment reaches no pristine run or warm suite.
    assert target.env == {"X": "1"} and "NR_MUTANT" not in os.environ
    instrumented = place.read_text()
    seen = []

    def suite(out, timeout, impl, env, tree, ws, deselect, behaviour=None, test_limits=None):
        seen.append((env.get("NR_MUTANT"), place.read_text()))
        return [], "passed"

    monkeypatch.setattr(mutants, "python_suite", suite)
    switched = next(m for m in found if m.key in target.switched[rel].keys)
    rewritten = next(m for m in found if m.key not in target.switched[rel].keys)
    runner = mutant_runner.Runner([switched, rewritten], {}, tmp_path / "r.jsonl",
                                  {"python": 60.0, "build": 1.0}, {}, {})
    runner.run([(mutants.FIRST, target, tmp_path / "out")])
    assert seen[0] == (switched.key, instrumented)
    assert seen[1][0] is None and seen[1][1] == target.switched[rel].rewritable(rewritten).apply(instrumented)
    assert place.read_text() == instrumented  # written back after the rewritten one
    assert [o.verdict for _, o in sorted(runner.outcomes, key=lambda p: p[0])] == ["survived", "survived"]


def test_switch_goes_with_generated_mutants_of_every_layer():
    from harness import main
    for layer in ("python", "cpp", "binding"):
        assert main.main(["--check-args", "--mutants", "auto", "--mutate", layer, "--switch"]) == 0
    assert main.main(["--check-args", "--mutants", "--switch"]) == 2  # the seeded faults
    # Comparing a switched verdict with a rebuilt one: C++ layers only.
    assert main.main(["--check-args", "--mutants", "auto", "--mutate", "cpp", "--switch", "--check-switch"]) == 0
    assert main.main(["--check-args", "--mutants", "auto", "--mutate", "cpp", "--check-switch"]) == 2
    assert main.main(["--check-args", "--mutants", "auto", "--mutate", "python", "--switch", "--check-switch"]) == 2


def run_toy_chosen_late(tmp_path, text, key):
    """The toy imported with no mutant chosen, then `key` chosen by setting
    its global, as the warm suite's child does."""
    return run_module(tmp_path, "toy", text, f"import toy; toy._nr_mutant_ = {key!r}; " + TOY_CALLS)


def test_a_mutant_in_a_body_is_chosen_at_each_call_after_the_import(tmp_path):
    found = {m.key: m for m in mutagen.python_mutants("toy.py", TOY)}
    switched = mutant_switches.instrument("toy.py", TOY, list(found.values()))
    heads = {k for k, m in found.items() if m.original.lstrip().startswith(("def ", "@"))}
    assert heads and switched.call_time == switched.keys - heads  # a def's line is read at import
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    differs = 0
    # decorate's body runs at the import, before the choice: the runner sends
    # such a mutant (its line run outside any test) to a fresh process.
    for key in sorted(k for k in switched.call_time if found[k].line != TOY.split("\n").index("    return f") + 1):
        rewritten = run_toy(tmp_path / "b", found[key].apply(TOY))
        assert run_toy_chosen_late(tmp_path / "a", switched.text, key) == rewritten, key
        differs += rewritten != "0 10 3 3"
    assert differs


SHARING = '''\
LIMIT = 3
count = 0


def gen(xs):
    for x in xs:
        return x


def bump():
    global count
    count += 1


def shadowing(y):
    LIMIT = y
    return LIMIT


def dropped(y):
    z = y + 1
    return y
'''


@pytest.mark.parametrize("line,mutated,shared", [
    (7, "        yield x", False),          # a generator where the function is not: not one function
    (12, "    count -= 1", False),          # a body declaring a global name
    (16, "    pass", False),                # LIMIT no longer local: the rewritten file reads the module's
    (21, "    pass", True),                 # z no longer local, and nothing else defines it
    (22, "    return (-1)", True),
])
def test_a_mutant_shares_its_function_s_body_only_where_python_sees_one_function(line, mutated, shared):
    lines = SHARING.split("\n")
    m = mutagen.Mutant("s.py", line, "k", "c", lines[line - 1], mutated, f"s.py|k|c|{line}|1")
    switched = mutant_switches.instrument("s.py", SHARING, [m])
    assert switched.keys == {m.key}
    assert (m.key in switched.call_time) == shared
    assert mutant_switches.resolve(switched.text, m.key) == mutant_switches.resolve(m.apply(SHARING), "")
    namespace: dict = {}
    exec(compile(switched.text, "s.py", "exec"), namespace)
    assert namespace["shadowing"](5) == 5 and namespace["dropped"](2) == 2 and namespace["gen"]([4]) == 4


INSTALLED_AT_IMPORT = '''\
import logging

seen = []


def watch():
    original = logging.Logger.manager._clear_cache

    def clear_and_note():
        original()
        seen.append(1)

    logging.Logger.manager._clear_cache = clear_and_note
    return len(seen)


watch()
'''


def test_a_mutant_in_a_closure_its_unit_made_is_not_chosen_after_the_import(tmp_path):
    """watch() runs at the import and installs the closure there: choosing
    a mutant of the closure's body later (as a warm suite's child does) would
    leave the pristine closure installed, and the mutant would survive unrun.
    Its own line in watch() stays chosen at each call."""
    lines = INSTALLED_AT_IMPORT.split("\n")
    in_closure = lines.index("        seen.append(1)") + 1
    in_body = lines.index("    return len(seen)") + 1
    closure = mutagen.Mutant("w.py", in_closure, "k", "c", lines[in_closure - 1], "        pass",
                             f"w.py|k|c|{in_closure}|1")
    body = mutagen.Mutant("w.py", in_body, "k", "c", lines[in_body - 1], "    return 0",
                          f"w.py|k|c|{in_body}|1")
    switched = mutant_switches.instrument("w.py", INSTALLED_AT_IMPORT, [closure, body])
    assert switched.keys == {closure.key, body.key}
    assert switched.call_time == {body.key}
    # Chosen at the import, the closure's mutant is the one installed.
    probe = "import logging, w; logging.getLogger('x').setLevel(10); print(len(w.seen))"
    assert run_module(tmp_path, "w", switched.text, probe, closure.key) == "0"
    assert run_module(tmp_path, "w", switched.text, probe) == "1"


AFTER_A_DOCSTRING = '''\
def switch(enabled):
    """Set it.
    Returns the old one."""
    if not isinstance(enabled, bool):
        raise TypeError("a bool")
    return enabled
'''


def test_code_a_fault_inserts_after_a_docstring_is_indented_as_code():
    """A fault that only inserts lines takes the line before in too: here a
    docstring's last line, a string's continuation, which keeps its text;
    the statement inserted after it is code, indented with its function."""
    from harness.mutation import seeded_faults
    fault = seeded_faults.SeededFault(
        file="d.py", key="takes-any-truth", change="b",
        find="    if not isinstance(enabled, bool):",
        replace="    enabled = bool(enabled)  # FAULT\n    if not isinstance(enabled, bool):")
    m = fault.as_mutant(AFTER_A_DOCSTRING)
    assert m.line == 3  # the docstring's last line, taken in
    switched = mutant_switches.instrument("d.py", AFTER_A_DOCSTRING, [m])
    assert switched.keys == {m.key}
    assert mutant_switches.resolve(switched.text, m.key) == mutant_switches.resolve(m.apply(AFTER_A_DOCSTRING), "")
    assert mutant_switches.resolve(switched.text, "") == mutant_switches.resolve(AFTER_A_DOCSTRING, "")
    chosen: dict = {"_nr_mutant_": m.key}
    exec(compile(switched.text.split("\n", 1)[1], "d.py", "exec"), chosen)  # past the header
    assert chosen["switch"](1) is True
