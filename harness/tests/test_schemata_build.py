"""Tests of the C++ schemata build (meson_options.txt's mutant_schemata,
harness/mutation/schemata_build.py, and the runner's use of it): the option
compiles the core's and the binding's files from the copies a folder holds
and every other file from the tree, and is absent from a default build; a
switched mutant reaches both suites as NR_MUTANT_ID, a rebuilt one as the
file rewritten with it and no switch."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

from harness.mutation import cpp_schemata, mutagen, mutant_runner, mutants, schemata_build

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = (ROOT / os.environ.get("BUILD_DIR", "build")).resolve()  # ci/setup's
COPIED = ("reference/src/names.cpp", "reference/python/src/gil.cpp")


def configure(build: pathlib.Path, *options: str) -> dict[str, list[str]]:
    """Sets a build of the tree up (no compiling): each C++ file it compiles
    -> its compile command's words."""
    if shutil.which("ninja") is None:
        pytest.skip("no ninja on PATH")
    subprocess.run([*mutants.meson_command(), "setup", str(build), str(ROOT), "-Dbenchmarks=disabled",
                    "-Dbinding_unity=false", *options], check=True, capture_output=True, text=True)
    entries = json.loads((build / "compile_commands.json").read_text())
    return {str((build / e["file"]).resolve()): shlex.split(e["command"]) for e in entries}


def test_the_option_compiles_the_copies_from_its_folder_and_the_rest_from_the_tree(tmp_path):
    copies = tmp_path / "schemata"
    for rel in COPIED:
        (copies / rel).parent.mkdir(parents=True, exist_ok=True)
        (copies / rel).write_text((ROOT / rel).read_text())
    commands = configure(tmp_path / "build", f"-Dmutant_schemata={copies}")
    for rel in COPIED:
        assert str(copies / rel) in commands and str(ROOT / rel) not in commands
        words = commands[str(copies / rel)]
        assert f"-I{copies}" in words  # the switch's header
        own = words[words.index("-iquote") + 1]  # the copy's own folder's headers, in the tree
        assert pathlib.Path(own) == (ROOT / rel).parent
    # Every other core and binding file from the tree, with the header's folder too.
    core = [f for f in commands if "/reference/src/" in f or "/reference/python/src/" in f]
    from_tree = [f for f in core if f.startswith(str(ROOT))]
    assert len(core) == len(from_tree) + len(COPIED) and str(ROOT / "reference/src/types.cpp") in from_tree
    assert all(f"-I{copies}" in commands[f] for f in core)


def test_a_default_build_has_no_trace_of_the_option(tmp_path):
    commands = configure(tmp_path / "build")
    assert all(f.startswith(str(ROOT)) or "/build/" in f for f in commands)
    assert not any("-iquote" in words for words in commands.values())
    assert str(ROOT / "reference/src/names.cpp") in commands


def test_a_relative_folder_is_refused(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as failed:
        configure(tmp_path / "build", "-Dmutant_schemata=relative/dir")
    assert "give an absolute path" in failed.value.stdout + failed.value.stderr


def test_the_schemata_workspace_builds_from_its_copies_without_werror():
    ws = schemata_build.space(mutants.Workspace(pathlib.Path("/w")))
    assert (ws.build, ws.schemata, ws.src) == (pathlib.Path("/w/schemata-build"), pathlib.Path("/w/schemata"),
                                               pathlib.Path("/w/src"))
    assert mutants.options_of(ws) == {**mutants.MESON_OPTIONS, "mutant_schemata": "/w/schemata", "werror": "false"}
    assert "mutant_schemata" not in mutants.options_of(mutants.Workspace(pathlib.Path("/w")))


TOY = """\
#include <string>
int clamp(int x, int low) {
  if (x < low) return low;
  return x;
}
"""


def toy_switched() -> tuple[schemata_build.CppSwitched, list[mutagen.Mutant]]:
    found = mutagen.cpp_mutants("reference/src/toy.cpp", TOY)
    s = cpp_schemata.schemata("reference/src/toy.cpp", TOY, found, first_id=7)
    return schemata_build.CppSwitched(s.text, TOY, s.ids, s.left_out), found


def test_a_switched_mutant_reaches_both_suites_as_its_id(tmp_path, monkeypatch):
    switched, found = toy_switched()
    mutant = next(m for m in found if m.key in switched.keys)
    seen = {}

    def cpp_suite(out, timeout, fail_fast, ws, env):
        seen["c++"] = env
        return [], ""

    def python_suite(out, timeout, impl, env, *rest, **kwargs):
        seen["python"] = env
        return [], ""

    monkeypatch.setattr(mutants, "cpp_suite", cpp_suite)
    monkeypatch.setattr(mutants, "python_suite", python_suite)
    monkeypatch.setattr(mutants, "package_env", lambda ws, out: {"PYTHONPATH": "staged"})
    target = mutant_runner.Target("cpp", [mutant.file], {mutant.file: tmp_path / "toy.cpp"})
    chosen = switched.choosing(target, mutant)
    assert chosen.mutant_env == {"NR_MUTANT_ID": str(switched.ids[mutant.key])} and not target.mutant_env
    timeouts = {"c++": 60.0, "python": 60.0, "build": 60.0}
    for _, _, suite in mutant_runner.suites_for(mutant, chosen, mutants.FIRST, tmp_path, timeouts, {}):
        suite()
    assert seen == {"c++": chosen.mutant_env, "python": {"PYTHONPATH": "staged", **chosen.mutant_env}}
    # Unswitched (the baseline, a rebuilt mutant): the suites' own environments.
    seen.clear()
    for _, _, suite in mutant_runner.suites_for(mutant, target, mutants.FIRST, tmp_path, timeouts, {}):
        suite()
    assert seen == {"c++": {}, "python": None}


def test_a_rebuilt_mutant_is_the_file_rewritten_with_no_switch():
    switched, found = toy_switched()
    for m in found:
        assert switched.rewrite(m, switched.text) == m.apply(TOY)
        assert "nr_mutant_is" not in switched.rewrite(m, switched.text)


def test_the_runner_switches_by_id_rebuilds_the_rest_and_checks_the_switch(tmp_path, monkeypatch):
    """One switched mutant runs on the copy as it is, its id in the suites'
    environment; one left out runs on the file rewritten with it (and no
    switch), the copy written back after; --check-switch runs the switched
    one rewritten too and records both verdicts."""
    rel = "reference/src/toy.cpp"
    switched, found = toy_switched()
    on = next(m for m in found if m.key in switched.keys)
    off = next(m for m in found if m.key != on.key)
    switched.ids.pop(off.key)  # as if its form did not compile
    place = tmp_path / "toy.cpp"
    place.write_text(switched.text)
    target = mutant_runner.Target("cpp", [rel], {rel: place}, switched={rel: switched}, pristine={rel: TOY})
    seen = []
    monkeypatch.setattr(mutants, "build", lambda *args, **kwargs: True)

    def cpp_suite(out, timeout, fail_fast, ws, env):
        seen.append((env.get("NR_MUTANT_ID"), place.read_text()))
        return (["T.fails"] if env or place.read_text() != switched.text else []), ""

    monkeypatch.setattr(mutants, "cpp_suite", cpp_suite)
    runner = mutant_runner.Runner([on, off], {}, tmp_path / "r.jsonl", {"c++": 60.0, "python": 60.0, "build": 1.0}, {}, {})
    runner.check_switch = True
    runner.run([(mutants.FIRST, target, tmp_path / "out")])
    assert seen == [(str(switched.ids[on.key]), switched.text), (None, on.apply(TOY)), (None, off.apply(TOY))]
    assert place.read_text() == switched.text
    assert [o.verdict for _, o in sorted(runner.outcomes, key=lambda p: p[0])] == ["killed", "killed"]
    rows = [json.loads(line) for line in (tmp_path / "r.switch-check.jsonl").read_text().splitlines()]
    assert [(r["key"], r["same"], r["switched"]["failing"], r["rebuilt"]["failing"]) for r in rows] == \
        [(on.key, True, ["T.fails"], ["T.fails"])]


def test_workers_sharing_one_schemata_build_run_the_switched_mutants_first_and_rebuild_alone(tmp_path):
    """Runner.take with a shared build: every worker takes switched mutants;
    the first worker alone takes a rebuilt one, and only once no other
    worker is inside a mutant's run; the others stop when no switched one
    is left."""
    switched, found = toy_switched()
    on = [m for m in found if m.key in switched.keys][:2]
    off = next(m for m in found if m.key not in {m.key for m in on})
    switched.ids.pop(off.key, None)
    runner = mutant_runner.Runner([off, *on], {}, tmp_path / "r.jsonl", {}, {}, {})
    first, second = tmp_path / "out", tmp_path / "out" / "worker-1"
    runner.rebuilder, runner.switched_keys = first, set(switched.keys)
    ws = mutants.FIRST
    assert runner.take(ws, second)[1].key == on[0].key
    runner.busy = 1  # the second worker runs it
    assert runner.take(ws, first)[1].key == on[1].key
    assert runner.take(ws, second) is None  # only a rebuilt one is left: not for it
    assert runner.take(ws, first) == "wait"  # a worker still runs a switched mutant
    runner.busy = 0
    assert runner.take(ws, first)[1].key == off.key
    assert runner.take(ws, first) is None


def test_a_mutant_of_a_core_source_is_built_on_its_own_and_loaded_in_place_of_the_build(tmp_path):
    """OwnLink with the checkout's build (ci/setup's, as it is; nothing in
    it changes): a core source rewritten with a mutant compiles into the
    worker's folder and the core library links there again; the C++
    suite's binary and a Python interpreter given its environment load
    that library, and the mutated code runs there; a mutant that does not
    compile is told by the compiler's output, and no library is left."""
    rel = "reference/src/names.cpp"
    links = schemata_build.own_links(BUILD, [rel, "reference/src/types.h", "reference/python/src/gil.cpp"])
    # The core's source only: a header has no object, the binding's is a module Python imports by its path.
    assert list(links) == [rel] and links[rel].library == "reference/libnative_registry.so"
    before = {p: p.stat().st_mtime_ns for p in (BUILD / "reference").glob("libnative_registry.so*") if p.is_file()}
    text = (ROOT / rel).read_text()
    marker = 'throw InvalidArgumentError(std::string(what) + " must be a non-empty name, got "'
    assert marker in text
    mutated = text.replace(marker, 'throw InvalidArgumentError(std::string(what) + " OWN-LINKED MUTANT, got "', 1)
    into = tmp_path / "worker"
    built, output = links[rel].built(mutated, into, 600)
    assert built, output[-3000:]
    env = {**os.environ, **links[rel].environment(into)}
    traced = subprocess.run([str(BUILD / mutants.GTEST["conformance"])], capture_output=True, text=True,
                            env={**env, "LD_TRACE_LOADED_OBJECTS": "1"})
    assert f"{into / 'lib' / 'libnative_registry.so'}" in traced.stdout
    probe = "import native_registry as nr\ntry:\n    nr.allow_namespace(' ')\nexcept ValueError as e:\n    print(e)\n"
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "OWN-LINKED MUTANT" in ran.stdout, ran.stdout + ran.stderr[-3000:]
    pristine = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert "must be a non-empty name" in pristine.stdout and "OWN-LINKED" not in pristine.stdout
    broken, output = links[rel].built(text.replace(marker, "throw InvalidArgumentError(undeclared_name +", 1),
                                      into, 600)
    assert not broken and "undeclared_name" in output
    assert not (into / "lib" / "libnative_registry.so").exists()
    assert before == {p: p.stat().st_mtime_ns for p in (BUILD / "reference").glob("libnative_registry.so*")
                      if p.is_file()}


def test_a_mutant_built_on_its_own_meets_the_suites_with_its_library_first_or_is_stillborn(tmp_path, monkeypatch):
    """Runner.run_one with an OwnLink for the mutant's file: the file
    rewritten with the mutant (no switch) is what is built, into the
    worker's folder; the suites get the link's environment and no switch;
    the shared copy is never written; one that does not build is stillborn
    with the compiler's output, and no suite runs."""
    rel = "reference/src/toy.cpp"
    switched, found = toy_switched()
    live, dead = found[:2]  # as if neither were switched
    switched.ids.pop(live.key, None)
    switched.ids.pop(dead.key, None)
    place = tmp_path / "toy.cpp"
    place.write_text(switched.text)
    target = mutant_runner.Target("cpp", [rel], {rel: place}, switched={rel: switched}, pristine={rel: TOY})
    built_texts, seen = [], []

    class Link:
        def built(self, text, into, timeout):
            built_texts.append((text, into))
            return (text == live.apply(TOY)), "toy.cpp:3: error: no such thing"

        def environment(self, into):
            return {"LD_LIBRARY_PATH": str(into / "lib")}

    monkeypatch.setattr(mutants, "build", lambda *args, **kwargs: True)

    def cpp_suite(out, timeout, fail_fast, ws, env):
        seen.append(dict(env))
        return ["T.fails"], ""

    monkeypatch.setattr(mutants, "cpp_suite", cpp_suite)
    runner = mutant_runner.Runner([live, dead], {}, tmp_path / "r.jsonl", {"c++": 60.0, "python": 60.0, "build": 1.0},
                                  {}, {})
    runner.rebuilder, runner.own_links = tmp_path / "out", {rel: Link()}
    runner.run([(mutants.FIRST, target, tmp_path / "out")])
    outcomes = [o for _, o in sorted(runner.outcomes, key=lambda p: p[0])]
    assert [o.verdict for o in outcomes] == ["killed", "stillborn"]
    assert "no such thing" in outcomes[1].output_tail and outcomes[1].seconds["build"] >= 0
    assert built_texts == [(live.apply(TOY), tmp_path / "out" / "own-build"), (dead.apply(TOY), tmp_path / "out" / "own-build")]
    assert seen == [{"LD_LIBRARY_PATH": str(tmp_path / "out" / "own-build" / "lib")}]
    assert place.read_text() == switched.text


def test_workers_sharing_a_schemata_build_take_mutants_built_on_their_own_in_order(tmp_path):
    """Runner.take: a mutant of a file with an OwnLink is any worker's, in
    the order given among the switched ones; a header's (none) waits for
    the first worker alone once the others are done."""
    switched, found = toy_switched()
    on = next(m for m in found if m.key in switched.keys)
    own = [m for m in found if m.key != on.key][:2]
    header = mutagen.Mutant("reference/src/toy.h", 1, "constant", "1 -> 0", "int x = 1;", "int x = 0;", "h|1")
    runner = mutant_runner.Runner([own[0], header, on, own[1]], {}, tmp_path / "r.jsonl", {}, {}, {})
    first, second = tmp_path / "out", tmp_path / "out" / "worker-1"
    runner.rebuilder, runner.switched_keys = first, {on.key}
    runner.own_links = {"reference/src/toy.cpp": object()}
    ws = mutants.FIRST
    assert [runner.take(ws, second)[1].key for _ in range(3)] == [own[0].key, on.key, own[1].key]
    assert runner.take(ws, second) is None
    assert runner.take(ws, first)[1].key == header.key


def test_a_switched_mutant_meets_only_the_tests_that_reach_it(tmp_path, monkeypatch):
    """evaluate with a reached_map.ReachedMap: the C++ tests reaching the
    mutant run alone (--gtest_filter), then the Python ones; a mutant no test
    reaches is NoCoverage without a run; one reached outside any test, or not
    switched, meets the whole suites."""
    from harness.mutation import reached_map
    rel = "reference/src/toy.cpp"
    switched, found = toy_switched()
    on = [m for m in found if m.key in switched.keys][:3]
    ids = {m.key: switched.ids[m.key] for m in on}
    reached = reached_map.ReachedMap(
        reached={test: [ids[on[0].key]] for test in ["gtest:S.Slow", "gtest:S.Fast", "conformance/python/test_x.py::test_y"]},
        outside=[ids[on[2].key]], durations={"gtest:S.Slow": 2.0, "gtest:S.Fast": 0.5}, ids=ids)
    place = tmp_path / "toy.cpp"
    place.write_text(switched.text)
    # The suites are stubs here: no warm suite (test_suite_server.py tests it).
    target = mutant_runner.Target("cpp", [rel], {rel: place}, switched={rel: switched}, pristine={rel: TOY},
                                  coverage=reached, warm_suite=False)
    runs = []
    monkeypatch.setattr(mutants, "build", lambda *args, **kwargs: True)
    monkeypatch.setattr(mutants, "cpp_suite", lambda out, timeout, fail_fast=False, ws=None, env=None, only=None:
                        runs.append(("c++", only)) or ([], ""))
    monkeypatch.setattr(mutants, "python_suite", lambda *args, **kwargs: runs.append(("python", None)) or ([], ""))
    monkeypatch.setattr(mutants, "python_tests", lambda out, timeout, impl, env, tree, ws, nodeids, test_limits=None:
                        runs.append(("python", nodeids)) or ([], ""))
    monkeypatch.setattr(mutant_runner, "python_env", lambda *args: {})
    timeouts = {"c++": 60.0, "python": 60.0, "build": 1.0}

    def outcome(m):
        runs.clear()
        return mutant_runner.evaluate(m, switched.choosing(target, m), mutants.FIRST, tmp_path, timeouts, {})

    assert outcome(on[0]).verdict == "survived"
    assert runs == [("c++", ["S.Fast", "S.Slow"]), ("python", ["conformance/python/test_x.py::test_y"])]
    assert outcome(on[1]).verdict == "nocoverage" and runs == []
    assert outcome(on[2]).verdict == "survived" and runs == [("c++", None), ("python", None)]
