"""Running mutants: a target (what is mutated, where, and which suites see
it), the evaluation of one mutant (build, the conformance suites, the
reference's own tests on a survivor), and the Runner that takes mutants in
order over N workspaces side by side.

Shared by --mutants (seeded faults) and --mutants auto.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import signal
import threading
import time
from dataclasses import asdict, dataclass, field

from . import mutagen  # noqa: F401 (annotations)
from . import hang_watchdog, mutants, mutation_report, reached_map, suite_server
from .mutant_records import (Outcome, awaits_own_verdict, marked_anew, resumed, tail, tree_commit,
                             tree_source)
from .mutants import FIRST, ROOT, Workspace
from .reached_map import GTEST_PREFIX, split as split_tests
from .schemata_build import SWITCH
from .. import staging, with_root_on_path
from ..progress import duration, remaining

@dataclass
class UpstreamJudge:
    """An upstream PyTorch test file (such as the seed test_registry.py) run
    against the mutated reference through upstream_compat, the module
    surface it was written for (harness.upstream_compat_plugin), after the
    reference's own tests: its tests that fail on the unmutated reference
    (`failing`, by test name) kill nothing and are left out."""
    path: pathlib.Path
    failing: list[str]
    limit: float

    def arguments(self) -> list[str]:
        left_out = ["-k", "not (" + " or ".join(self.failing) + ")"] if self.failing else []
        return [str(self.path), "-p", "harness.upstream_compat_plugin", "--rootdir", str(self.path.parent),
                *left_out]

    def run(self, out: pathlib.Path, env: dict, ws: Workspace, fail_fast: bool = True
            ) -> tuple[list[str], str]:
        """(failing tests, each named "upstream FILE::test", output)."""
        failed, output = mutants.pytest_run([self.arguments()], out, self.limit, with_root_on_path(env),
                                            self.path.parent, ws, fail_fast=fail_fast)
        return [f"upstream {self.path.name}::{t.rsplit('.', 1)[-1]}" if not t.startswith("<") else t
                for t in failed], output


def upstream_judge(path: pathlib.Path, target: "Target", ws: Workspace, out: pathlib.Path
                   ) -> UpstreamJudge | None:
    """The upstream test file's baseline on the unmutated reference: the
    judge, or None when the file cannot run at all (no test passes)."""
    print(f"== baseline: {path.name} (upstream's tests) on the unmutated reference", flush=True)
    began = time.monotonic()
    judge = UpstreamJudge(path, [], mutants.TIMEOUT_S)
    failed, output = judge.run(out, pristine_env(target, ws, out), ws, fail_fast=False)
    took = time.monotonic() - began
    ran = mutants.test_ids(out / "python.xml")
    if any(t.startswith("<") for t in failed) or len(ran) <= len(failed):
        print(f"  {path.name} does not run against the reference: {failed}\n{tail(output)}")
        return None
    judge.failing = sorted({t.rsplit("::", 1)[-1] for t in failed})
    judge.limit = max(60.0, 3 * took + 30)
    print(f"  {len(ran) - len(failed)} of its {len(ran)} tests pass in {took:.0f} s"
          + (f"; these fail before any mutant and kill nothing: {', '.join(judge.failing)}" if failed else ""),
          flush=True)
    return judge


@dataclass
class Target:
    """What is mutated: `files` (as reported), found at `place[file]`, and
    how the suites see them."""
    layer: str                   # cpp or python
    files: list[str]
    place: dict[str, pathlib.Path]
    impl: str = "adapters.reference:make"
    env: dict | None = None      # the Python suite's environment; None: the package staged from the copy
    needs_build: bool = True
    suites_from: pathlib.Path | None = None  # the tree whose conformance suites run; None: the workspace's
    left_out: dict[str, str] = field(default_factory=dict)
    # With --own-tests: the files and parts left out of the conformance
    # population, mutated for the own tests: file -> why (files), and mutant
    # key -> why (every mutant of those files and parts: Outcome.beyond_contract).
    beyond_files: dict[str, str] = field(default_factory=dict)
    beyond_contract: dict[str, str] = field(default_factory=dict)
    # Tests chosen by coverage (--tests-by-coverage): the pristine run's map
    # and the pristine texts of the files it maps; None: the whole suites.
    coverage: object | None = None
    pristine: dict[str, str] = field(default_factory=dict)
    # With --own-tests, the reference's own tests' map of the same files
    # (Python layer): which own tests can kill a mutant the conformance
    # suites did not; None: the whole own suites.
    own_coverage: object | None = None
    # Mutants switched, not rewritten (--switch): per file, its instrumented
    # copy (mutant_switches.Switched, or schemata_build.CppSwitched for C++),
    # which `place` holds for the whole run.
    switched: dict[str, object] = field(default_factory=dict)
    # What the suites' processes are given besides (NR_MUTANT_ID: the C++
    # mutant a schemata build runs; NR_MUTANT: the Python one).
    mutant_env: dict[str, str] = field(default_factory=dict)
    # With --own-tests --upstream-tests (Python layer): an upstream test file,
    # one more of the own tests; None: none.
    upstream: UpstreamJudge | None = None
    # A Python mutant switched inside its function's body (call_time), which
    # a warm suite's child can choose after the import; "": none.
    python_mutant: str = ""
    # Whether a C++ schemata mutant's covering Python tests run on a warm
    # suite (warm_tests) rather than in a fresh pytest each.
    warm_suite: bool = True
    # The schemata ids whose switch a warm suite's own import and collection
    # evaluated (seeded_faults.import_time_ids): their tests run in a fresh process.
    cold_ids: set[int] = field(default_factory=set)
    # A schemata build's sources whose mutants that are not switched any
    # worker builds on its own (schemata_build.OwnLink), by file.
    own_links: dict[str, object] = field(default_factory=dict)

    @property
    def own_tests_reach_uncovered(self) -> bool:
        """Whether the own tests judge a mutant no conformance test reaches:
        they know which of them reach it (their map), or upstream's test
        file meets every mutant."""
        return self.own_coverage is not None or self.upstream is not None


# What the copy's build of the core and the extension is made of; the layers
# mutated there (each workspace builds its own).
BUILT_FROM = ("reference/src/", "reference/include/", "reference/python/src/")


BUILT_LAYERS = ("cpp", "binding")


def check_pristine(prefixes: tuple[str, ...] = ("",), ws: Workspace = FIRST) -> None:
    """The copy must match the working tree before anything is mutated: a run
    killed hard (power, SIGKILL) left a mutated file behind, and copy_tree
    has just written it back; this proves it did."""
    for rel in mutants.tree_files():
        if not rel.startswith(prefixes):
            continue
        source, copy = ROOT / rel, ws.src / rel
        if source.is_file() and (not copy.is_file() or copy.read_bytes() != source.read_bytes()):
            raise SystemExit(f"harness/run: error: {copy} differs from {source}: another run is using "
                             f"{ws.root}, or the working tree changed since its build")


def reaches_cpp_suite(target: Target, file: str) -> bool:
    """Whether the C++ conformance suite can see a mutant of `file`: the
    core's (the binding's and the Python layer's mutants cannot reach it)."""
    return target.layer == "cpp" or target.layer == "faults" and file.startswith(("reference/src/",
                                                                                   "reference/include/"))


def new_outcome(mutant: mutagen.Mutant, target: Target, commit: tuple[str, str]) -> Outcome:
    """A mutant's outcome before any verdict."""
    return Outcome(mutant.key, mutant.where, mutant.kind, mutant.change, mutant.original.strip(),
                   mutant.mutated.strip(), commit=commit[0], source=commit[1],
                   beyond_contract=target.beyond_contract.get(mutant.key, ""))


def evaluate(mutant: mutagen.Mutant, target: Target, ws: Workspace, out: pathlib.Path,
             timeouts: dict[str, float], baseline: dict[str, list[str]], commit: tuple[str, str] = ("", ""),
             own_tests: bool = False, earlier: Outcome | None = None) -> Outcome:
    """The mutant's verdict (`target` has it switched on, or its file
    rewritten). `earlier`: its conformance verdict at this tree's source,
    recorded without the own tests' verdict that --own-tests now owes it:
    only the own tests run."""
    outcome = new_outcome(mutant, target, commit)
    path = target.place[mutant.file]
    start = time.monotonic()
    if target.needs_build and mutant.file.endswith((".cpp", ".h")):
        built = mutants.build(timeouts["build"], ws)
        outcome.seconds["build"] = time.monotonic() - start
        if not built:
            outcome.verdict = "stillborn"
            return outcome
    elif mutant.key not in getattr(target.switched.get(mutant.file), "keys", ()):  # a switched one compiles
        try:
            compile(path.read_text(), str(path), "exec")
        except SyntaxError as exc:
            outcome.verdict, outcome.output_tail = "stillborn", str(exc)
            return outcome
    if earlier is not None:
        outcome = dataclasses.replace(earlier, seconds=dict(earlier.seconds),
                                      beyond_contract=target.beyond_contract.get(mutant.key, ""))
        judge_by_own_tests(outcome, mutant, target, ws, out, timeouts, commit)
        outcome.seconds["total"] = earlier.seconds.get("total", 0.0) + outcome.seconds["own"]
        return outcome
    outcome.tests_completed = 0
    suites = suites_for(mutant, target, ws, out, timeouts, baseline)
    if target.coverage is not None and mutant.file in target.pristine:
        chosen = target.coverage.covering(mutant, target.pristine[mutant.file])
        if chosen == []:  # no test executes its line (reaches its switch): nothing can kill it
            outcome.verdict, outcome.tests_completed = "nocoverage", 0
            if own_tests and target.own_coverage is not None:
                judge_by_own_tests(outcome, mutant, target, ws, out, timeouts, commit)
            outcome.seconds["total"] = time.monotonic() - start
            return outcome
        if chosen is not None:
            outcome.covered_by = chosen
            suites = covering_suites(chosen, mutant, target, ws, out, timeouts)
        elif (watching := target.coverage.observers(mutant, target.pristine)) is not None:
            # Run at import: its observers, in a fresh interpreter (coverage_map.py).
            outcome.covered_by = watching
            suites = covering_suites(watching, mutant, target, ws, out, timeouts, fresh=True)
    for name, spent, suite in suites:
        began = time.monotonic()
        failed, output, *counted = suite()  # a warm suite counts its tests; a report tells a fresh one's
        outcome.seconds[spent] = time.monotonic() - began
        outcome.tests_completed += counted[0] if counted else mutants.tests_in(
            out / ("conformance.xml" if name.startswith("c++") else "python.xml"))
        failed = [t for t in failed if t not in baseline.get(name, [])]
        if outcome.covered_by:  # the failing tests as the coverage map names them
            ids = {covered_name(n): n for n in outcome.covered_by}
            failed = [ids.get(t, t) for t in failed]
        outcome.output_tail = tail(output)
        if failed:
            outcome.verdict, outcome.killed_by, outcome.failing = "killed", name, failed
            break
    else:
        outcome.verdict = "survived"
        if own_tests:
            judge_by_own_tests(outcome, mutant, target, ws, out, timeouts, commit)
    outcome.seconds["total"] = time.monotonic() - start
    return outcome


def judge_by_own_tests(outcome: Outcome, mutant: mutagen.Mutant, target: Target, ws: Workspace,
                       out: pathlib.Path, timeouts: dict[str, float], commit: tuple[str, str] = ("", "")) -> None:
    """The own tests' verdict on a mutant the conformance suites did not
    kill (outcome.own_tests): where the own tests have a map, the ones that
    execute its line (or, for a line run at import, its observers), cheapest
    first, stopping at the first failure, and "nocoverage" where none does;
    else the whole own suites."""
    began = time.monotonic()
    chosen = None
    own_map = target.own_coverage
    if own_map is not None and mutant.file in target.pristine:
        chosen = own_map.covering(mutant, target.pristine[mutant.file])
        if chosen is None:
            chosen = own_map.observers(mutant, target.pristine)
    if chosen == []:
        outcome.own_tests = "nocoverage"
    else:
        failed, output = own_tests_of(target, ws, out, timeouts, only=chosen)
        outcome.own_tests, outcome.own_failing = ("killed" if failed else "survived"), failed
        if failed:
            outcome.output_tail = tail(output)
    if outcome.own_tests != "killed" and target.upstream is not None:
        # Upstream's test file meets every mutant the own tests left alive:
        # it has no coverage map, and runs in seconds.
        failed, output = target.upstream.run(out, python_env(target, ws, out) or pristine_env(target, ws, out), ws)
        if failed:
            outcome.own_tests, outcome.own_failing, outcome.output_tail = "killed", failed, tail(output)
    outcome.seconds["own"] = time.monotonic() - began
    outcome.own_commit, outcome.own_source = commit


def covering_suites(chosen: list[str], mutant: mutagen.Mutant, target: Target, ws: Workspace,
                    out: pathlib.Path, timeouts: dict[str, float], fresh: bool = False
                    ) -> list[tuple[str, str, object]]:
    """The suites a mutant meets where a coverage map chose its tests: the
    C++ conformance tests among them (reached_map names them
    GTEST_PREFIX + Suite.Name), then the Python ones, each cheapest first
    and stopping at the first failure, each given three times its tests'
    pristine time; the Python ones in a fresh pytest where `fresh` (a
    mutant the warm suite's import would have decided)."""
    gtests, nodeids = split_tests(chosen)
    suites = []
    if gtests and reaches_cpp_suite(target, mutant.file):
        suites.append(("c++ conformance", "c++-covering", lambda: mutants.cpp_suite(
            out, covering_timeout(target.coverage.seconds_of([GTEST_PREFIX + t for t in gtests]),
                                  timeouts.get("c++", mutants.TIMEOUT_S)),
            fail_fast=True, ws=ws, env=target.mutant_env, only=gtests)))
    if nodeids:
        limit = covering_timeout(target.coverage.seconds_of(nodeids), timeouts["python"])
        suites.append(("python conformance", "python-covering",
                       lambda: (None if fresh else warm_tests(target, ws, out, nodeids, limit)) or mutants.python_tests(
                           out, limit, target.impl, python_env(target, ws, out), target.suites_from, ws, nodeids,
                           test_limits=per_test_limits(target))))
    return suites


# The warm suites (suite_server.py) of this run, one per worker (its out
# folder); warm_suites_off() stops them.
_warm: dict[pathlib.Path, suite_server.SuiteServer] = {}
_warm_lock = threading.Lock()
_warm_stopped = threading.Event()  # an interrupt stopped them: no fresh pytest in their place


def warm_tests(target: Target, ws: Workspace, out: pathlib.Path, nodeids: list[str], limit: float
               ) -> tuple[list[str], str, int] | None:
    """A switched mutant's covering Python tests on the worker's warm suite
    (a C++ schemata mutant, or a Python one switched inside its function's
    body): (failing tests as a suite run's report names them, output, tests
    run); None where the warm suite cannot judge them (no such switch
    chosen, --fresh-suites, the server did not start or lost a test): a
    fresh pytest then runs them. The caller has made sure that the mutant is
    reached by tests only (covering() gives None for one reached outside
    any), so the server's import and collection did not decide it."""
    if not target.warm_suite or (SWITCH not in target.mutant_env and not target.python_mutant) \
            or int(target.mutant_env.get(SWITCH, suite_server.NO_MUTANT)) in target.cold_ids:
        return None
    with _warm_lock:
        server = _warm.get(out)
        if server is None:
            env = {**pristine_env(target, ws, out), **mutants.FREED_MEMORY_FILLED, **mutants.MUTANT_RUN_SUITES}
            args = ["conformance/python", f"--impl={target.impl}", f"--basetemp={out / 'warm-tmp'}"]
            server = _warm[out] = suite_server.SuiteServer(args, str(target.suites_from or ws.src), env,
                                                           str(out / "warm-suite.log"))
    reply = server.run(int(target.mutant_env.get(SWITCH, suite_server.NO_MUTANT)), nodeids, limit,
                       str(out / "warm-child.log"), python_mutant=target.python_mutant)
    if reply is None and _warm_stopped.is_set():
        return ["<interrupted>"], "", 0
    if reply is None:
        if server.broken and not server.reported:
            server.reported = True
            print(f"  warm suite of {out} did not start (its mutants' Python tests run in a fresh pytest "
                  f"each); the end of {server.log}:\n{server.why_broken}", flush=True)
        return None
    if reply["timeout"]:
        failed = ["<timeout>"]
    elif reply["signal"] is not None:
        failed = [f"<exit -{reply['signal']}>"]
    else:
        failed = [t if t.startswith("<") else junit_name(t) for t in reply["failed"]]
    return failed, reply["tail"], reply["ran"]


def adopt_warm_suites(servers: dict[pathlib.Path, suite_server.SuiteServer]) -> None:
    """Warm suites started by the caller, as the workers' (by out folder)."""
    with _warm_lock:
        _warm.update(servers)


def warm_suites_off(interrupted: bool = False) -> None:
    if interrupted:
        _warm_stopped.set()
    with _warm_lock:
        for server in _warm.values():
            server.close()
        _warm.clear()


def covered_name(test: str) -> str:
    """A test as a coverage map names it -> as a suite run's report does."""
    return test[len(GTEST_PREFIX):] if test.startswith(GTEST_PREFIX) else junit_name(test)


def junit_name(nodeid: str) -> str:
    """A pytest node id as its JUnit report (and so a suite run) names the
    test: conformance/python/test_a.py::Case::test_b[x] -> conformance.python.test_a.Case.test_b[x]."""
    path, _, rest = nodeid.partition("::")
    name, bracket, params = rest.partition("[")  # a parameter id may hold "::"
    return ".".join([path.removesuffix(".py").replace("/", "."), *name.split("::")]) + bracket + params


def covering_timeout(seconds: float, whole_suite: float) -> float:
    """The time limit of a mutant's covering tests: three times their
    pristine time, pytest's start-up included, as a whole suite's; never
    more than the whole suite's limit."""
    return min(whole_suite, max(60.0, 3 * (seconds + 10) + 20))


def suites_for(mutant: mutagen.Mutant, target: Target, ws: Workspace, out: pathlib.Path,
               timeouts: dict[str, float], baseline: dict) -> list[tuple[str, str, object]]:
    """The suites a mutant meets, in order, each (name, its key in
    Outcome.seconds, run): a seeded fault (which names the behaviour it
    breaks) first meets that behaviour's tests: its C++ tests where the
    baseline named them, else the whole C++ suite (seconds, and stopping at
    its first failure) where the behaviour is expressed in C++ too; then its
    Python tests (on the worker's warm suite where the fault is switched and
    the baseline named them); then whatever is left of both suites. Most
    faults die in the first, so the whole Python suite runs only for the rest."""
    deselect = baseline.get("deselect", [])
    behaviour = getattr(mutant, "behaviour", None)
    # One behaviour's tests get three times what they took in the baseline,
    # start-up included, as a whole suite does: a fault that hangs them (a
    # deadlock) is killed in a minute, not after the whole suite's limit.
    took = baseline.get("behaviour_seconds", {}).get(behaviour)
    subset = covering_timeout(took, timeouts["python"]) if took is not None else timeouts["python"]
    python = lambda behaviour=None: mutants.python_suite(  # noqa: E731
        out, subset if behaviour else timeouts["python"], target.impl, python_env(target, ws, out),
        target.suites_from, ws, deselect, behaviour=behaviour, test_limits=per_test_limits(target))
    reaches_cpp = reaches_cpp_suite(target, mutant.file)
    cpp = ([("c++ conformance", "c++", lambda: mutants.cpp_suite(out, timeouts["c++"], fail_fast=True, ws=ws,
                                                                 env=target.mutant_env))]
           if reaches_cpp else [])
    if not behaviour or not mutants.behaviour_files(behaviour):
        return cpp + [("python conformance", "python", python)]
    first = [("python conformance", "python-first", lambda: python(behaviour))]
    named = [nodeid for nodeid, _ in baseline.get("behaviour_tests", {}).get(behaviour, [])
             if nodeid not in deselect]
    if named:  # the baseline's tests of the behaviour, cheapest first (warm where switched)
        first = [("python conformance", "python-first", lambda: warm_tests(target, ws, out, named, subset) or
                  mutants.python_tests(out, subset, target.impl, python_env(target, ws, out), target.suites_from,
                                       ws, named, test_limits=per_test_limits(target)))]
    gtests = baseline.get("cpp_behaviour_tests", {}).get(behaviour, [])
    if reaches_cpp and gtests:
        cpp = [("c++ conformance", "c++-first", lambda: mutants.cpp_suite(
            out, timeouts["c++"], fail_fast=True, ws=ws, env=target.mutant_env, only=gtests))] + cpp
    if "cpp" in mutants.behaviour_sides(behaviour):
        return cpp[:1] + first + cpp[1:] + [("python conformance", "python", python)]
    return first + cpp + [("python conformance", "python", python)]


def per_test_limits(target: Target) -> dict[str, float] | None:
    """Each Python test's own time limit (hang_watchdog), where a coverage
    map measured the tests' pristine times: a mutant that hangs one test of
    a whole suite (one reached at import, say) is then killed at that test's
    limit, not the suite's."""
    durations = getattr(target.coverage, "durations", None)
    if not durations:
        return None
    return hang_watchdog.limits_from({t: s for t, s in durations.items() if not t.startswith(GTEST_PREFIX)})


def python_env(target: Target, ws: Workspace, out: pathlib.Path) -> dict | None:
    """The Python suite's environment: the target's (None: the package
    staged from the workspace's build), with the mutant's switch."""
    if not target.mutant_env:
        return target.env
    return {**pristine_env(target, ws, out), **target.mutant_env}


def pristine_env(target: Target, ws: Workspace, out: pathlib.Path) -> dict:
    """The Python suite's environment with no mutant chosen: the target's,
    else the package staged from the workspace's build."""
    return target.env if target.env is not None else mutants.package_env(ws, out)


# The reference's own tests (beyond the conformance suites), by layer.
OWN_GTESTS, OWN_FIXTURE = mutants.OWN_GTESTS, mutants.OWN_FIXTURE


def own_tests_of(target: Target, ws: Workspace, out: pathlib.Path, timeouts: dict[str, float],
                 only: list[str] | None = None) -> tuple[list[str], str]:
    """The reference's own tests on a conformance survivor: its GoogleTest
    binaries (built here, incrementally) for the core, its pytest suite
    (reference/python/tests) for every layer, or `only` these of its pytest
    tests (node ids, given three times their time in the own tests' map):
    (failing tests, output)."""
    failed, outputs = [], []
    if target.needs_build:
        wanted = [*(OWN_GTESTS if target.layer == "cpp" else ()), OWN_FIXTURE]
        if not mutants.build(timeouts["build"], ws, targets=wanted):
            return ["<the own tests do not build>"], ""
    if target.layer == "cpp":
        for binary in OWN_GTESTS:
            more, output = mutants.gtest(ws.build / binary, out / "own.xml", timeouts["own"], fail_fast=True,
                                         env=target.mutant_env)
            failed += more
            outputs.append(output)
            if failed:
                return failed, "\n".join(outputs)
    env = python_env(target, ws, out) or mutants.package_env(ws, out)
    if target.needs_build:  # test_one_core loads a fixture library from the build of this _C
        env = {**env, "NR_BUILD_DIR": str(ws.build)}
    own_map = target.own_coverage
    whole = ["reference/python/tests", *(f"--deselect={t}" for t in getattr(own_map, "failing", []))]
    limit = covering_timeout(own_map.seconds_of(only), timeouts["own"]) if only else timeouts["own"]
    limits = hang_watchdog.limits_from(own_map.durations) if own_map is not None and own_map.durations else None
    more, output = mutants.pytest_run([only or whole], out, limit, env, target.suites_from, ws, fail_fast=True,
                                      test_limits=limits)
    return failed + more, "\n".join(outputs + [output])


def prepare(spaces: list[Workspace], jobs_each: int, build: bool = True) -> bool:
    """Copies the tree into each workspace and builds them side by side."""
    for ws in spaces:
        mutants.copy_tree(ws)
        check_pristine(ws=ws)
    if not build:
        return True
    where = ", ".join(str(ws.root) for ws in spaces)
    print(f"== baseline build in {where} (the first one takes minutes)", flush=True)
    built = build_all(spaces, jobs_each)
    failed = [str(ws.build) for ws in spaces if not built.get(ws)]
    if failed:
        print(f"baseline build failed in {', '.join(failed)}")
    return not failed


def build_all(spaces: list[Workspace], jobs_each: int) -> dict[Workspace, bool]:
    """Builds the workspaces side by side (after a run: their builds match
    the pristine copies again)."""
    built: dict[Workspace, bool] = {}
    threads = [threading.Thread(target=lambda ws=ws: built.__setitem__(ws, mutants.build(ws=ws, jobs=jobs_each)))
               for ws in spaces]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return built


def measure_baseline(target: Target, out: pathlib.Path, own_tests: bool = False, ws: Workspace = FIRST,
                     which: tuple[str, ...] = ("c++ conformance", "python conformance")) -> dict | None:
    """Runs the suites a mutant of `target` meets on the unmutated tree (of
    those `which` names): their failures (which kill nothing), the Python
    suite's node ids to deselect, and each suite's timeout (derived from its
    time). None when a suite crashes (or the own tests fail)."""
    print(f"== baseline: {' and '.join(which)} on the unmutated implementation", flush=True)
    signal.signal(signal.SIGTERM, interrupt)  # a time limit here too stops the suites it started
    timeouts, baseline = {"build": 900.0}, {"timeouts": {}}
    suites = []
    if "python conformance" in which:
        suites.append(("python conformance", lambda t: mutants.python_suite(
            out, t, target.impl, target.env, target.suites_from, ws, fail_fast=False)))
    if "c++ conformance" in which and (target.layer == "cpp" or target.layer == "faults" and target.needs_build):
        suites.insert(0, ("c++ conformance", lambda t: mutants.cpp_suite(out, t, ws=ws)))
    if own_tests:
        suites.append(("own tests", lambda t: own_tests_of(target, ws, out, {**timeouts, "own": t})))
    for name, suite in suites:
        began = time.monotonic()
        try:
            failed, output = suite(mutants.TIMEOUT_S * 2)
        except KeyboardInterrupt:
            print(f"baseline {name} interrupted")
            return None
        took = time.monotonic() - began
        if name == "python conformance":
            took = max(took, mutants.serial_seconds(out / "python.xml"))
        if any(t.startswith("<") for t in failed) or (failed and name == "own tests"):
            print(f"baseline {name} crashed or failed: {failed}\n{tail(output)}")
            return None
        if failed:
            print(f"  note: {name} fails before any mutant, so these kill nothing: {failed}")
        baseline[name] = failed
        # Every test the baseline ran: the report's testFiles.
        baseline.setdefault("tests", []).extend(mutants.test_ids(
            out / ("conformance.xml" if name == "c++ conformance" else "python.xml")) if name != "own tests" else [])
        if name == "python conformance":
            baseline["deselect"] = mutants.baseline_deselect(out)
            baseline["behaviour_seconds"] = mutants.behaviour_seconds(out)
            baseline["behaviour_tests"] = mutants.behaviour_tests(out)
        if name == "c++ conformance":
            baseline["cpp_behaviour_tests"] = mutants.cpp_behaviour_tests(out / "conformance.xml")
        # A mutant's run may be slower (a loaded machine, other workspaces'
        # runs beside it) but not three times slower, unless it hangs.
        limit = timeouts[name.split()[0]] = max(60.0, 3 * took + 30)
        print(f"  {name}: {duration(took)} (a mutant's run is killed after {duration(limit)})", flush=True)
    baseline["timeouts"] = timeouts
    return baseline


def baseline_from_results(results: pathlib.Path, stem: str) -> dict | None:
    """The baseline of a Python-layer run read from a conformance run's
    results (python-<stem>.jsonl and .xml) instead of measured again: its
    failures and misses (a mutant run fails on any level) kill nothing and
    are deselected; the timeout derives from the suite's time as
    measure_baseline's does. None when the results are not there."""
    report, xml = results / f"python-{stem}.jsonl", results / f"python-{stem}.xml"
    if not report.exists() or not xml.exists():
        print(f"baseline: no conformance results of {stem} in {results}")
        return None
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    failing = [r for r in rows if r["outcome"] in ("fail", "miss")]
    took = mutants.serial_seconds(xml)  # the parts of a two-process run, one after the other
    limit = max(60.0, 3 * took + 30)
    print(f"== baseline: the conformance run's results in {results} ({len(rows)} rows, "
          f"{len(failing)} failing; a mutant's run is killed after {duration(limit)})", flush=True)
    return {"python conformance": sorted({r["test"] for r in failing}), "tests": mutants.test_ids(xml),
            "deselect": sorted({r["nodeid"] for r in failing if "nodeid" in r}),
            "timeouts": {"build": 900.0, "python": limit}}


def run_all(chosen: list, equivalents: dict[str, str], records: pathlib.Path, baseline: dict, resume: bool,
            own_tests: bool, places: list[tuple[Workspace, Target, pathlib.Path]],
            digests: dict[str, tuple[str, str]] | None = None,
            reused: dict[str, Outcome] | None = None, check_switch: bool = False,
            shared_build: bool = False, at: tuple[str, str] | None = None,
            owed_after: dict[str, Outcome] | None = None) -> list[Outcome]:
    """Runs `chosen` over the workspaces, recording each outcome in `records`
    (keeping, with `resume`, the verdicts recorded there of this tree's source);
    the outcomes in order. `owed_after`: conformance verdicts of an earlier
    tree (--own-tests-after) whose mutants meet only the own tests now.
    Ctrl-C or a SIGTERM stops it: the mutated files are restored and the
    outcomes so far returned."""
    signal.signal(signal.SIGTERM, interrupt)
    # `at`: the commit and source the workspaces were copied at (a run's
    # first step), so that an edit of the tree during a long run is not
    # what its verdicts claim to be of.
    commit, source = at or (tree_commit(), tree_source())
    uncovered_too = places[0][1].own_tests_reach_uncovered
    done = marked_anew({**(reused or {}), **(resumed(records, chosen, source, own_tests, uncovered_too)
                                              if resume else {})}, places[0][1].beyond_contract)
    # Verdicts of this source that lack only the own tests' (a --resume with
    # --own-tests of a run without): those mutants meet the own tests alone.
    owed = {key: o for key, o in {**(owed_after or {}), **(resumed(records, chosen, source) if resume else {})}.items()
            if key not in done and awaits_own_verdict(o, own_tests, uncovered_too)}
    if resume:
        print(f"  --resume: {len(done)} of the {len(chosen)} mutants have a verdict of this tree "
              f"({commit}, source {source}) in {records}", flush=True)
    records.write_text("".join(json.dumps(asdict(o)) + "\n" for o in done.values()))
    runner = Runner(chosen, equivalents, records, baseline["timeouts"], baseline, done, (commit, source),
                    own_tests)
    runner.owed = owed
    runner.digests = digests or {}
    runner.check_switch = check_switch
    runner.switched_keys = {key for s in places[0][1].switched.values() for key in s.keys}
    runner.own_links = places[0][1].own_links
    runner.keep_to_files = places[0][1].needs_build
    if shared_build:  # the places share one schemata build (a C++ layer's --switch)
        runner.rebuilder = places[0][2]
    if check_switch:
        records.with_suffix(".switch-check.jsonl").unlink(missing_ok=True)
    try:
        runner.run(places)
    except KeyboardInterrupt:
        print(f"\n  interrupted after {len(runner.outcomes)} mutants; the mutated files are restored; "
              f"reporting those", flush=True)
    finally:
        warm_suites_off()
    # The report first, then the rebuilds: a second SIGTERM (a time limit)
    # no longer stops either.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if check_switch:
        print(f"  --check-switch: {len(runner.check_differs)} switched mutants whose verdict differs from their "
              f"rebuilt one's{': ' + ', '.join(runner.check_differs) if runner.check_differs else ''} "
              f"({records.with_suffix('.switch-check.jsonl')})", flush=True)
    return [o for _, o in sorted(runner.outcomes, key=lambda pair: pair[0])]


class Runner:
    """Runs the sample over the workspaces, one thread each; each takes its
    next mutant (Runner.take) when it is done with one. Outcomes are
    recorded (the .jsonl) and printed as they come."""

    def __init__(self, chosen: list[mutagen.Mutant], equivalents: dict[str, str], records: pathlib.Path,
                 timeouts: dict[str, float], baseline: dict[str, list[str]], done: dict[str, Outcome],
                 commit: tuple[str, str] = ("", ""), own_tests: bool = False):
        self.commit, self.own_tests = commit, own_tests
        numbered = list(enumerate(chosen, 1))
        self.pending = [(i, m) for i, m in numbered if m.key not in done]
        self.at: dict[Workspace, str] = {}  # the file each workspace's last mutant changed
        self.total, self.equivalents, self.records = len(chosen), equivalents, records
        self.timeouts, self.baseline = timeouts, baseline
        self.outcomes: list[tuple[int, Outcome]] = [(i, done[m.key]) for i, m in numbered if m.key in done]
        self.already = len(self.outcomes)
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.errors: list[BaseException] = []
        self.check_differs: list[str] = []
        self.start = time.monotonic()
        self.busy = 0  # workers inside a mutant's run
        # The editable installs an interpreter started now would load: the
        # suites' environment skips those of the run's start (staging), so a
        # new one (ci/setup run meanwhile) would make every fresh interpreter
        # import it instead of the mutated package, and its mutants survive.
        self.editable = staging.editable_builds_of_new_interpreters()
        self.editable_checked = time.monotonic()

    # Where the workers share one schemata build: the worker (by its out
    # folder) that alone runs the mutants that are not switched, each
    # rewriting and rebuilding that build, once no other worker runs one;
    # and the switched mutants' keys. None: each worker has a build of its own.
    rebuilder: pathlib.Path | None = None
    switched_keys: set[str] = set()
    own_links: dict[str, object] = {}  # file -> schemata_build.OwnLink
    # Whether a rewritten mutant costs a compile (a C++ layer's), which a
    # worker saves by keeping to the file of its last one.
    keep_to_files: bool = True

    def any_worker_runs(self, m: mutagen.Mutant) -> bool:
        """Whether a worker sharing the schemata build runs `m` side by side
        with the others: switched, or built on its own (own_links)."""
        return m.key in self.switched_keys or m.file in self.own_links

    def run(self, places: list[tuple[Workspace, Target, pathlib.Path]]) -> None:
        threads = [threading.Thread(target=self.work, args=place, daemon=True) for place in places]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.5)
        except KeyboardInterrupt:
            self.stop.set()
            mutants.kill_live()
            warm_suites_off(interrupted=True)  # the workers waiting on a warm suite's child go on
            for t in threads:
                t.join()
            raise
        if self.errors:
            raise self.errors[0]

    def take(self, ws: Workspace, out: pathlib.Path | None = None) -> tuple[int, mutagen.Mutant] | None | str:
        """The next mutant for the worker at `ws` writing to `out` (under
        self.lock): one of the file its last mutant changed, else the first
        of a file no other workspace is at, else the first. A mutant of
        another file than the last costs a second compile, the restored
        file's; with the mutants in file order and each workspace keeping to
        its files, that happens once per file rather than at almost every
        mutant. Workers sharing a schemata build (self.rebuilder) take the
        switched mutants and those built on their own (own_links), in order;
        the rebuilder then takes the rest once the others are idle ("wait"
        until then)."""
        if self.rebuilder is not None:
            side_by_side = next((k for k, (_, m) in enumerate(self.pending) if self.any_worker_runs(m)), None)
            if side_by_side is not None:
                return self.pending.pop(side_by_side)
            if out != self.rebuilder or not self.pending:
                return None
            if self.busy:
                return "wait"
        if not self.pending:
            return None
        if not self.keep_to_files or self.pending[0][1].key in self.switched_keys:
            # No compile to save by keeping to a file (a switched mutant, or a
            # layer that is not built), so the order as given (a --shuffle's:
            # a run cut short judged a uniform sample).
            index, mutant = self.pending.pop(0)
            self.at[ws] = mutant.file
            return index, mutant
        # A rewritten mutant leads: keep to a file among the rewritten ones
        # only, so that the switched ones behind it keep their order (a
        # worker at a file would otherwise take that file's switched mutants
        # one after another while the rewritten one stays first).
        rewritten = [k for k, (_, m) in enumerate(self.pending) if m.key not in self.switched_keys]
        at = {f for w, f in self.at.items() if w != ws}
        pick = next((k for k in rewritten if self.pending[k][1].file == self.at.get(ws)), None)
        if pick is None:
            pick = next((k for k in rewritten if self.pending[k][1].file not in at), rewritten[0])
        index, mutant = self.pending.pop(pick)
        self.at[ws] = mutant.file
        return index, mutant

    def work(self, ws: Workspace, target: Target, out: pathlib.Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        try:
            while not self.stop.is_set():
                with self.lock:
                    taken = self.take(ws, out)
                    if taken is not None and taken != "wait":
                        self.busy += 1
                if taken is None:
                    return
                if taken == "wait":
                    time.sleep(0.5)
                    continue
                try:
                    self.run_one(ws, target, out, *taken)
                finally:
                    with self.lock:
                        self.busy -= 1
        except BaseException as exc:  # reported by the main thread; the others stop
            self.errors.append(exc)
            self.stop.set()

    def check_editable_installs(self) -> None:
        """Raises (ending the run, its verdicts so far kept) once the editable
        installs a new interpreter loads differ from the run's start; looked
        at every 20 s at most."""
        with self.lock:
            if time.monotonic() - self.editable_checked < 20:
                return
            self.editable_checked = time.monotonic()
        now = staging.editable_builds_of_new_interpreters()
        if now != self.editable:
            raise RuntimeError(
                f"the editable installs changed during the run ({self.editable} at its start, {now} now: "
                f"ci/setup or a pip install ran meanwhile); the suites' fresh interpreters would import "
                f"them, not the mutated package, so no later verdict could be trusted. Run again "
                f"(--resume keeps the verdicts so far)")

    def run_one(self, ws: Workspace, target: Target, out: pathlib.Path, index: int, mutant: mutagen.Mutant
                ) -> None:
        self.check_editable_installs()
        switched = target.switched.get(mutant.file)
        if switched is not None and mutant.key in switched.keys:
            # The instrumented copy is in place (and built): the suites' processes select it.
            outcome = evaluate(mutant, switched.choosing(target, mutant), ws, out, self.timeouts,
                               self.baseline, self.commit, self.own_tests, self.owed.get(mutant.key))
            if self.check_switch and not self.stop.is_set():
                self.compare(mutant, outcome, self.rewritten(mutant, target, switched, ws, out))
        elif self.rebuilder is not None and mutant.file in self.own_links:
            outcome = self.built_on_its_own(mutant, target, switched, ws, out)
        else:
            outcome = self.rewritten(mutant, target, switched, ws, out)
        if self.stop.is_set():
            return  # its suites were killed by the interrupt: no verdict
        self.record(index, mutant, outcome)

    digests: dict[str, tuple[str, str]] = {}
    owed: dict[str, Outcome] = {}  # run_all's: earlier verdicts that await only the own tests'
    # --check-switch: each switched mutant is run rewritten too, and the two
    # verdicts compared (in <records>.switch-check.jsonl).
    check_switch = False

    def rewritten(self, mutant: mutagen.Mutant, target: Target, switched: object | None, ws: Workspace,
                  out: pathlib.Path) -> Outcome:
        """The mutant's outcome with its file rewritten (not switched), the
        file's text put back afterwards whatever happens."""
        path = target.place[mutant.file]
        copy = ws.schemata / mutant.file if ws.schemata is not None else None
        if copy is not None and copy.exists() and path != copy:  # the build would never see the mutant
            raise RuntimeError(f"{mutant.file}: the schemata build compiles {copy}, not {path}")
        pristine = path.read_text()
        try:
            path.write_text(switched.rewrite(mutant, pristine) if switched is not None else mutant.apply(pristine))
            return evaluate(mutant, target, ws, out, self.timeouts, self.baseline, self.commit, self.own_tests,
                            self.owed.get(mutant.key))
        finally:
            path.write_text(pristine)

    def built_on_its_own(self, mutant: mutagen.Mutant, target: Target, switched: object, ws: Workspace,
                         out: pathlib.Path) -> Outcome:
        """The outcome of a mutant that is not switched, its library built
        into the worker's folder (schemata_build.OwnLink) and loaded in place
        of the shared build's; stillborn where it does not compile or link."""
        link, into = self.own_links[mutant.file], out / "own-build"
        began = time.monotonic()
        built, output = link.built(switched.rewrite(mutant, ""), into, self.timeouts["build"])
        spent = time.monotonic() - began
        if not built:
            outcome = new_outcome(mutant, target, self.commit)
            outcome.verdict, outcome.output_tail = "stillborn", tail(output)
        else:
            outcome = evaluate(mutant, dataclasses.replace(target, mutant_env=link.environment(into)), ws, out,
                               self.timeouts, self.baseline, self.commit, self.own_tests,
                               self.owed.get(mutant.key))
        outcome.seconds["build"] = spent
        outcome.seconds["total"] = outcome.seconds.get("total", 0.0) + spent
        return outcome

    def compare(self, mutant: mutagen.Mutant, switched: Outcome, rebuilt: Outcome) -> None:
        def verdict(o: Outcome) -> dict:
            return {"verdict": o.verdict, "killed_by": o.killed_by, "failing": o.failing}
        same = verdict(switched) == verdict(rebuilt)
        row = {"key": mutant.key, "where": mutant.where, "same": same,
               "switched": {**verdict(switched), "seconds": switched.seconds},
               "rebuilt": {**verdict(rebuilt), "seconds": rebuilt.seconds}}
        with self.lock:
            with self.records.with_suffix(".switch-check.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"  switch check: {mutant.where} {mutant.kind}: switched {switched.verdict} "
                  f"({switched.seconds.get('total', 0):.0f} s), rebuilt {rebuilt.verdict} "
                  f"({rebuilt.seconds.get('total', 0):.0f} s): {'same' if same else 'DIFFERENT'}", flush=True)
            if not same:
                self.check_differs.append(mutant.key)

    def record(self, index: int, mutant: mutagen.Mutant, outcome: Outcome) -> None:
        outcome.line_digest, outcome.tests_digest = self.digests.get(mutant.key, ("", ""))
        if self.digests:
            outcome.failing_digest = killing_digest(outcome)
        with self.lock:
            self.outcomes.append((index, outcome))
            done = len(self.outcomes)
            with self.records.open("a") as f:
                f.write(json.dumps(asdict(outcome)) + "\n")
            verdict = outcome.verdict.upper() if outcome.verdict == "survived" else outcome.verdict
            if outcome.verdict == "survived" and outcome.key in self.equivalents:
                verdict = "equivalent"
            if outcome.own_tests:  # what the reference's own tests made of it
                verdict += f", own tests: {outcome.own_tests}"
            elapsed = time.monotonic() - self.start
            spent = " ".join(f"{k} {v:.0f}s" for k, v in outcome.seconds.items() if k != "total")
            left = remaining(done - self.already, self.total - self.already, elapsed)
            print(f"  [{done}/{self.total}] {verdict:10s} {mutant.where} {mutant.kind}: {mutant.change} "
                  f"({spent}; elapsed {duration(elapsed)}, {left})",
                  flush=True)


def killing_digest(outcome: Outcome) -> str:
    """The digest of the sources of the tests that killed `outcome` (the
    incremental mode keeps a kill while they are unchanged); "" where it
    was not killed, or not by tests a file can be named for (a crash or a
    timeout of the whole run, an upstream test)."""
    if outcome.verdict != "killed" or not outcome.failing or any(
            t.startswith(("<", "upstream ")) for t in outcome.failing):
        return ""
    return reached_map.tests_digest(outcome.failing)


def interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
