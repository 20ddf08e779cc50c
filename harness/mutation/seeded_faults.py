"""./harness/run --mutants: the suite's power against seeded faults.

Each fault of fixtures/faults/faults.toml (a `find` text and its `replace`;
fault_anchor.py says where it applies: in its file, or wherever the code
moved) is applied in turn to a workspace's copy of the tree (build-mutants/src; --jobs N: N workspaces side by side), run
against the conformance suites, and the file restored. A fault is killed
when any test fails (whatever its level), or a suite crashes or hangs. Every
fault must be killed; a fault whose `find` text fault_anchor cannot place
once is an error too (STALE).

What keeps it short (doc/measurements.md has the figures):
* Faults are taken in file order, so a fault rebuilds one object (that of
  its file, plus the one restored when the file changes) and relinks; the
  workspaces build without debug information and the extension file by file
  with a precompiled header (mutants.MESON_OPTIONS).
* The Python suite's baseline runs on the extension of --build (the same
  sources) while the workspaces build.
* The Python layer's faults need no build: beside faults that do, they run
  in a run of their own (python_layer_run) from the moment that baseline is
  known, in workspaces of their own.
* A fault first meets the tests of the behaviour it `breaks`
  (mutant_runner.suites_for), and the whole suites only if it survives them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import tomllib

from .. import with_root_on_path
from . import fault_anchor
from . import mutant_runner
from . import mutant_switches
from . import mutants
from . import schemata_build
from . import suite_server
from .mutant_records import Outcome, figures
from .mutagen_core import Mutant
from .mutant_runner import Target
from ..progress import duration

FAULTS = mutants.ROOT / "fixtures" / "faults" / "faults.toml"


def load_faults() -> list[dict]:
    with FAULTS.open("rb") as f:
        return tomllib.load(f)["fault"]


@dataclasses.dataclass(frozen=True)
class SeededFault:
    """A fault as the runner takes a mutant: where, what, and its apply."""
    file: str
    key: str        # the fault's name
    change: str     # what it breaks
    find: str
    replace: str
    verbatim: bool = True   # found as written (else with whitespace ignored: fault_anchor)
    kind: str = "seeded"

    @property
    def behaviour(self) -> str:
        """The behaviour it breaks, whose tests meet it first (mutant_runner.suites_for)."""
        return self.change

    @property
    def where(self) -> str:
        return self.file

    @property
    def original(self) -> str:
        return self.find

    @property
    def mutated(self) -> str:
        return self.replace

    def apply(self, text: str) -> str:
        try:
            return fault_anchor.apply(text, self.find, self.replace, self.verbatim)
        except fault_anchor.AnchorError as e:
            raise ValueError(f"{self.key}: {e} in {self.file}") from None

    def as_mutant(self, text: str) -> "FaultMutant":
        """The fault as a mutant of the lines it changes in `text` (its
        file), so that it can be switched like a generated one: the lines
        from the first it changes to the last, and what comes in their
        place; a fault that only inserts or only deletes lines takes the
        line before in too (neither side is then empty)."""
        old, new = text.split("\n"), self.apply(text).split("\n")
        first = 0
        while first < min(len(old), len(new)) and old[first] == new[first]:
            first += 1
        after = 0
        while after < min(len(old), len(new)) - first and old[-1 - after] == new[-1 - after]:
            after += 1
        if first == len(old) - after or first == len(new) - after:
            first -= 1
        return FaultMutant(self.file, first + 1, "seeded", self.change, "\n".join(old[first:len(old) - after]),
                           "\n".join(new[first:len(new) - after]), self.key)


@dataclasses.dataclass(frozen=True)
class FaultMutant(Mutant):
    """A seeded fault as a mutant of its lines (SeededFault.as_mutant): its
    `change` is the behaviour it breaks, its key the fault's name."""

    @property
    def behaviour(self) -> str:
        return self.change


def python_layer_run(args, names: list[str], out: pathlib.Path, baseline: pathlib.Path) -> subprocess.Popen:
    """The faults of the Python layer, in a run of their own beside this one:
    they need no build (their suite imports the extension of --build), so
    they start as soon as the Python suite's baseline is known (`baseline`,
    which they share), in workspaces of their own (NR_MUTANTS_WORK), while
    this run builds; their lines come prefixed."""
    env = {**with_root_on_path(os.environ), "NR_MUTANTS_WORK": str(mutants.WORK / "faults-python"),
           "NR_MUTANTS_BASELINE": str(baseline)}
    child = subprocess.Popen([sys.executable, "-m", "harness", "--build", str(args.build),
                              "--mutants", "faults", "--only", ",".join(names), "--jobs", "1",
                              "--results", str(out)], env=env, cwd=mutants.ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def relay() -> None:
        for line in child.stdout:
            print(f"  python layer| {line.rstrip()}", flush=True)
    threading.Thread(target=relay, daemon=True).start()
    return child


def python_layer_outcomes(child: subprocess.Popen, out: pathlib.Path, stop: bool) -> list[Outcome]:
    """What the Python layer's run recorded, once it has ended; with `stop`
    (this run failed or was interrupted) it is stopped first: on SIGTERM it
    restores its files and reports what it ran."""
    if stop and child.poll() is None:
        child.terminate()
    elif child.poll() is None:
        print("== waiting for the Python layer's faults", flush=True)
    try:
        child.wait(timeout=90 if stop else None)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    records = out / "mutants" / "faults.jsonl"
    if not records.exists():
        return []
    return [Outcome(**json.loads(line)) for line in records.read_text().splitlines() if line]


def run_built(args, chosen: list[SeededFault], spaces: list, out: pathlib.Path, begin: float,
              start_beside=lambda baseline: None) -> list | None:
    """The faults in `chosen` over the workspaces: their outcomes, None when
    a build or the baseline fails. The workspaces build (unless every fault
    is of the Python layer) while the Python suite's baseline runs on the
    extension of --build (the same sources); `start_beside` gets that
    baseline's file as soon as it is known. NR_MUTANTS_BASELINE: a baseline
    measured already (that of the run this one runs beside)."""
    python_only = all(f.file.endswith(".py") for f in chosen)
    jobs_each = max(1, (os.cpu_count() or 2) // len(spaces))
    mutant_runner.prepare(spaces, jobs_each, build=False)
    built, builder = {}, None
    if not python_only:
        print(f"== baseline build in {', '.join(str(ws.root) for ws in spaces)} (the first one takes minutes)",
              flush=True)
        builder = threading.Thread(target=lambda: built.update(mutant_runner.build_all(spaces, jobs_each)))
        builder.start()
    targets = [Target("faults", sorted({f.file for f in chosen}), {f.file: ws.src / f.file for f in chosen},
                      needs_build=not python_only) for ws in spaces]
    given = os.environ.get("NR_MUTANTS_BASELINE")
    if given:
        baseline = json.loads(pathlib.Path(given).read_text())
    else:
        baseline = mutant_runner.measure_baseline(targets[0], out, which=("python conformance",),
                                                  ws=dataclasses.replace(spaces[0], extension_from=args.build))
    if baseline is None:
        if builder is not None:
            mutants.kill_live()  # the baseline failed or was interrupted: no build is waited for
            builder.join()
        return None
    (out / "baseline.json").write_text(json.dumps(baseline))
    start_beside(out / "baseline.json")
    if builder is not None:
        builder.join()
        failed = [str(ws.build) for ws in spaces if not built.get(ws)]
        if failed:
            print(f"baseline build failed in {', '.join(failed)}")
            return None
        cpp = mutant_runner.measure_baseline(targets[0], out, ws=spaces[0], which=("c++ conformance",))
        if cpp is None:
            return None
        baseline = {**baseline, "c++ conformance": cpp["c++ conformance"],
                    "timeouts": {**baseline["timeouts"], **cpp["timeouts"]}}
    print(f"  baseline done after {duration(time.monotonic() - begin)}; now each fault", flush=True)
    outcomes = mutant_runner.run_all(chosen, {}, out / "faults.jsonl", baseline, False, False,
                                     [(ws, t, out if ws == mutants.FIRST else out / ws.root.name)
                                      for ws, t in zip(spaces, targets)])
    if not python_only:
        mutant_runner.build_all(spaces, jobs_each)  # leave the copies' builds pristine
    return outcomes


def run_switched(args, chosen: list[SeededFault], out: pathlib.Path) -> list[Outcome] | None:
    """The faults in `chosen` switched, not rebuilt (the switches of --mutants
    auto --switch): each taken as a mutant of the lines it changes
    (SeededFault.as_mutant); those of the C++ core and the binding compiled
    into ONE schemata build (schemata_build.switch), those of the Python
    layer into instrumented copies of its modules (mutant_switches); --jobs N
    workers then run them side by side, each fault meeting its behaviour's
    tests first, the Python ones on the worker's warm suite (suite_server.py).
    A fault no switch fits (a header's, a region another switch overlaps, a
    form the compiler rejects) is rebuilt one by one at the end, as
    without switches. None when a build or the baseline fails."""
    ws = schemata_build.space(mutants.workspaces(1)[0])
    jobs_each = os.cpu_count() or 2
    at = (mutant_runner.tree_commit(), mutant_runner.tree_source())
    mutant_runner.prepare([ws], jobs_each, build=False)
    faults = [f.as_mutant((ws.src / f.file).read_text()) for f in chosen]
    files = sorted({m.file for m in faults})
    target = Target("faults", files, {rel: ws.src / rel for rel in files})
    built = [m for m in faults if not m.file.endswith(".py")]
    print(f"== {len(faults)} seeded faults switched: {len(built)} in the schemata build, "
          f"{len(faults) - len(built)} in the Python layer's modules", flush=True)
    # The Python suite's baseline runs on the extension of --build (the same
    # sources) while the schemata build is checked and built; the C++
    # suite's (seconds), on the schemata build, after it. Where a baseline
    # of these very suites is kept, measured on another source of the
    # reference, it stands for the Python one, and the Python tests that
    # kill are run on the pristine implementation at the end instead
    # (confirm_kills).
    kept, exact, confirmed = kept_baseline(ws, at[1], suites_source())
    switched: dict = {}
    building = threading.Thread(target=lambda: switched.update(
        ok=schemata_build.switch([target], [ws], built, jobs_each)))
    building.start()
    python_baseline = kept if kept is not None else mutant_runner.measure_baseline(
        target, out, ws=dataclasses.replace(ws, extension_from=args.build), which=("python conformance",))
    if python_baseline is None:
        mutants.kill_live()  # the baseline failed or was interrupted: no build is waited for
    building.join()
    if not switched.get("ok") or python_baseline is None:
        return None
    for rel in files:
        mine = [m for m in faults if m.file == rel]
        if rel.endswith(".py"):
            target.switched[rel] = mutant_switches.instrument(rel, target.pristine[rel], mine)
            target.place[rel].write_text(target.switched[rel].text)
    count = sum(len(s.keys) for s in target.switched.values())
    print(f"  {count} of the {len(faults)} faults switched; the others rebuilt one by one at the end", flush=True)
    # (A baseline kept of this source whose Python half was confirmed, not
    # measured, still has its C++ half of this source.)
    baseline = kept if exact or confirmed is not None else None
    if baseline is None:
        cpp = mutant_runner.measure_baseline(target, out, ws=ws, which=("c++ conformance",))
        if cpp is None:
            return None
        python = {k: v for k, v in python_baseline.items() if k not in CPP_BASELINE}
        baseline = {**python, **{k: v for k, v in cpp.items() if k in CPP_BASELINE}, "tests": sorted(
            {t for t in python.get("tests", []) if not t.startswith("Reference/")} | set(cpp.get("tests", []))),
                    "timeouts": {**python_baseline["timeouts"], **cpp["timeouts"]}}
    workers = max(1, args.jobs)
    places = [(ws, target, out if k == 0 else out / f"worker-{k}") for k in range(workers)]
    target.cold_ids = import_time_ids(target, ws, [place[2] for place in places])
    if target.cold_ids:
        print(f"  {len(target.cold_ids)} switches are evaluated at the suite's import: their faults' Python tests "
              f"run in a fresh pytest", flush=True)
    outcomes = mutant_runner.run_all(faults, {}, out / "faults.jsonl", baseline, False, False, places,
                                     shared_build=True, at=at)
    # The last fault rebuilt left its objects in the build: built again, it
    # is the pristine implementation (for the confirmation, and the next run).
    if len(outcomes) == len(faults) and not mutant_runner.build_all([ws], jobs_each).get(ws):
        print(f"the schemata build in {ws.build} does not build again")
        return None
    if kept is not None and not exact:
        outcomes, confirmed = confirm_kills(faults, outcomes, baseline, target, ws, out, places, at,
                                            confirmed or set())
    if len(outcomes) == len(faults):  # a whole run: its baseline stands for the next run of this source
        (ws.root / KEPT_BASELINE).write_text(json.dumps({
            "source": at[1], "suites": suites_source(), "baseline": baseline,
            "confirmed": None if kept is None or exact else sorted(confirmed)}))
    return outcomes


# What the C++ suite's baseline gives (measured at every run that has no
# baseline of this very tree: seconds).
CPP_BASELINE = ("c++ conformance", "cpp_behaviour_tests")


def suites_source() -> str:
    """A digest of the conformance suites (what a baseline's list of tests,
    their behaviours and times depend on)."""
    from .auto_mutants import suite_files
    from .mutation_report import tests_digest
    return tests_digest(suite_files())


def confirm_kills(faults: list, outcomes: list[Outcome], baseline: dict, target: Target, ws, out: pathlib.Path,
                  places: list, at: tuple[str, str], already: set[str] = frozenset()
                  ) -> tuple[list[Outcome], set[str]]:
    """With a Python baseline of another source of the reference, a Python
    test that failed under a fault is a kill only if it passes on the
    pristine implementation: those tests (and, for a fault killed by a crash
    or a hang, its behaviour's tests) run once, in one pytest on the
    schemata build with no fault chosen. A test that fails there kills
    nothing: it joins the baseline's failures, and the faults it killed run
    again."""
    nodeids = {mutant_runner.junit_name(nodeid): nodeid for tests in baseline.get("behaviour_tests", {}).values()
               for nodeid, _ in tests}
    behaviours = {m.key: m.behaviour for m in faults}
    wanted: dict[str, set[str]] = {}  # node id -> the faults its failure killed
    for o in outcomes:
        if o.verdict != "killed" or o.killed_by != "python conformance":
            continue
        # (A failure is named twice: as its JUnit report names it, and as its
        # conformance report's row does.)
        named = [nodeids[t] for t in o.failing if t in nodeids]
        unknown = [t for t in o.failing if t.startswith("conformance.") and t not in nodeids]
        if unknown or not named:  # a crash, a hang, or a test the map does not know: its behaviour's tests
            named += [nodeid for nodeid, _ in baseline.get("behaviour_tests", {}).get(behaviours[o.key], [])]
        for nodeid in named:
            if nodeid not in already:  # (confirmed by an earlier run of this source)
                wanted.setdefault(nodeid, set()).add(o.key)
    if not wanted:
        return outcomes, set(already)
    print(f"== the {len(wanted)} Python tests that killed a fault, on the pristine implementation (the baseline "
          f"is of another source of the reference)", flush=True)
    check = out / "confirm"
    check.mkdir(parents=True, exist_ok=True)
    failed, output = mutants.pytest_run([[*sorted(wanted), f"--impl={target.impl}"]], check,
                                        baseline["timeouts"]["python"], mutant_runner.pristine_env(target, ws, check),
                                        target.suites_from, ws, fail_fast=False, conformance_report=True)
    if any(t.startswith("<") for t in failed):
        raise SystemExit(f"harness/run: error: the pristine implementation crashes or hangs in the tests that "
                         f"killed faults: {failed}\n{output[-3000:]}")
    if not failed:
        print("  all pass: every kill stands", flush=True)
        return outcomes, set(already) | set(wanted)
    again = set().union(*(wanted.get(nodeids.get(t, t), set()) for t in failed))
    print(f"  {len(failed)} fail on the pristine implementation too (they kill nothing): {', '.join(failed)}; "
          f"the {len(again)} faults they killed run again", flush=True)
    baseline["python conformance"] = sorted(set(baseline.get("python conformance", [])) | set(failed))
    baseline["deselect"] = sorted(set(baseline.get("deselect", [])) | {nodeids[t] for t in failed if t in nodeids})
    rerun = mutant_runner.run_all([m for m in faults if m.key in again], {}, out / "faults-again.jsonl", baseline,
                                  False, False, places, shared_build=True, at=at)
    if len(rerun) < len(again):  # interrupted: the run ends with no verdict of those, and keeps no baseline
        raise KeyboardInterrupt
    by_key = {o.key: o for o in rerun}
    passed = {nodeid for nodeid in wanted if mutant_runner.junit_name(nodeid) not in failed}
    return [by_key.get(o.key, o) for o in outcomes], set(already) | passed


KEPT_BASELINE = "faults-baseline.json"  # beside the workspace's builds


def kept_baseline(ws, source: str, suites: str) -> tuple[dict | None, bool, set[str] | None]:
    """The baseline an earlier run kept beside the workspace's builds (both
    suites with no fault chosen: their failures kill nothing; their times
    give the limits; their reports name each behaviour's tests): (it, whether
    it was measured on this tree's source, the Python tests confirmed on
    this source where its Python half was measured on another). None where
    none is kept or it is of other conformance suites."""
    kept = ws.root / KEPT_BASELINE
    found = json.loads(kept.read_text()) if kept.exists() else {}
    confirmed = found.get("confirmed")
    if found.get("source") == source and confirmed is None:
        print(f"== baseline: that of this tree's source, kept in {kept}", flush=True)
        return found["baseline"], True, None
    if found.get("suites") == suites:
        print(f"== baseline: that of these suites, its Python half measured on another source of the reference, "
              f"kept in {kept}; the Python tests that kill are run on the pristine implementation at the end",
              flush=True)
        return found["baseline"], False, set(confirmed or ()) if found.get("source") == source else None
    return None, False, None


def import_time_ids(target: Target, ws, outs: list[pathlib.Path]) -> set[int]:
    """Starts each worker's warm suite with a trace of the switches it
    evaluates (cpp_schemata.HEADER, $NR_MUTANT_TRACE) and gives those its
    import and collection evaluated: a fault there is decided before any
    test, so its tests cannot run in that suite's forked child."""
    ids = [i for s in target.switched.values() for i in getattr(s, "ids", {}).values()]
    if not ids:
        return set()
    trace = ws.root / "faults-import-trace.bin"
    trace.write_bytes(bytes(max(ids) + 1))
    servers = []
    for out in outs:  # as mutant_runner.warm_tests starts one, with the trace
        out.mkdir(parents=True, exist_ok=True)
        env = {**mutant_runner.pristine_env(target, ws, out), **mutants.FREED_MEMORY_FILLED,
               **mutants.MUTANT_RUN_SUITES, "NR_MUTANT_TRACE": str(trace)}
        args = ["conformance/python", f"--impl={target.impl}", f"--basetemp={out / 'warm-tmp'}"]
        servers.append(suite_server.SuiteServer(args, str(ws.src), env, str(out / "warm-suite.log")))
    threads = [threading.Thread(target=server.start) for server in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    marked = trace.read_bytes()
    mutant_runner.adopt_warm_suites(dict(zip(outs, servers)))
    return {i for i in ids if marked[i]}


def run(args) -> int:
    out = args.results / "mutants"
    out.mkdir(parents=True, exist_ok=True)
    faults = load_faults()
    only = {n for n in args.only.split(",") if n}
    if only:
        faults = [f for f in faults if f["name"] in only]
    begin = time.monotonic()
    stale, chosen = [], []
    for f in faults:
        try:
            anchor = fault_anchor.locate(f["file"], f["find"], mutants.ROOT)
        except fault_anchor.AnchorError as e:
            stale.append((f, str(e)))
            print(f"  {f['name']:40s} STALE: {e}", flush=True)
            continue
        chosen.append(SeededFault(anchor.file, f["name"], f["breaks"], f["find"], f["replace"],
                                  anchor.verbatim))
    chosen.sort(key=lambda f: f.file)  # by file: consecutive faults rebuild one object
    if not getattr(args, "rebuild", False):
        print(f"== {len(chosen)} seeded faults, {args.jobs} at a time, switched", flush=True)
        try:
            outcomes = run_switched(args, chosen, out)
        except KeyboardInterrupt:
            outcomes = None
        if outcomes is None:
            return 1
        return report(chosen, stale, outcomes, out, begin, args.jobs)
    # Faults of the Python layer need no build of the workspaces: their suite
    # imports the extension of --build. Beside faults that do, they run at
    # once in a run of their own (python_layer_run).
    layer = [f for f in chosen if f.file.endswith(".py")]
    beside = layer if layer and len(layer) < len(chosen) else []
    children: list[subprocess.Popen] = []
    if beside:
        chosen = [f for f in chosen if not f.file.endswith(".py")]
        signal.signal(signal.SIGTERM, mutant_runner.interrupt)  # stops the child too (below)
    spaces = mutants.workspaces(args.jobs, args.build if all(f.file.endswith(".py") for f in chosen) else None)
    print(f"== {len(chosen)} seeded faults, {len(spaces)} at a time"
          + (f"; the Python layer's {len(beside)} beside them" if beside else ""), flush=True)
    try:
        outcomes = run_built(args, chosen, spaces, out, begin, lambda baseline: children.append(python_layer_run(
            args, [f.key for f in beside], args.results / "python-layer", baseline)) if beside else None)
    except KeyboardInterrupt:
        outcomes = None
    failed = outcomes is None
    if children:
        stop = failed or len(outcomes) < len(chosen)  # a failure or an interrupt stops the child too
        outcomes = (outcomes or []) + python_layer_outcomes(children[0], args.results / "python-layer", stop)
        chosen += beside
    if failed:
        return 1
    return report(chosen, stale, outcomes, out, begin, len(spaces))


def report(chosen: list[SeededFault], stale: list, outcomes: list[Outcome], out: pathlib.Path, begin: float,
           jobs: int) -> int:
    """The faults' table (out/mutants.md) and the terminal's summary: 0 when
    every fault was killed."""
    by_name = {o.key: o for o in outcomes}
    rows = [(f, "STALE", why) for f, why in stale]
    for fault in chosen:
        o = by_name.get(fault.key)
        if o is None:
            rows.append((fault.__dict__ | {"name": fault.key, "breaks": fault.change}, "NOT RUN", "interrupted"))
            continue
        verdict = {"killed": "killed", "survived": "SURVIVED", "stillborn": "BROKEN"}[o.verdict]
        detail = (f"{o.killed_by}: {len(o.failing)} ({', '.join(o.failing[:3])}{', ...' if len(o.failing) > 3 else ''})"
                  if o.verdict == "killed" else "the faulty variant does not compile" if o.verdict == "stillborn"
                  else "no test failed")
        rows.append(({"name": fault.key, "breaks": fault.change}, verdict, detail))
    killed = sum(r[1] == "killed" for r in rows)
    lines = ["# Seeded faults", "", f"{killed} of {len(rows)} killed "
             f"({duration(time.monotonic() - begin)}, {jobs} at a time).", "",
             "| fault | breaks | verdict | failing tests |", "|---|---|---|---|"]
    lines += [f"| {f['name']} | {f['breaks']} | {v} | {d} |" for f, v, d in rows]
    (out / "mutants.md").write_text("\n".join(lines) + "\n")
    stats = figures(outcomes, {})
    print(f"\n{killed} of {len(rows)} faults killed ({stats['killed_by_cpp']} by the C++ suite, "
          f"{stats['killed_by_python']} by the Python suite) in {duration(time.monotonic() - begin)}; "
          f"table: {out / 'mutants.md'}")
    for f, v, d in rows:
        if v != "killed":
            print(f"  {v}: {f['name']}: {d}")
    # A fault its behaviour's tests do not kill costs a whole Python suite
    # (minutes): its `breaks` names the wrong behaviour, or that behaviour's
    # tests miss what it breaks.
    wide = [o.key for o in outcomes if "python" in o.seconds]
    if wide:
        print(f"  note: {len(wide)} faults met the whole Python suite, their behaviour's tests not killing "
              f"them: {', '.join(wide)}")
    return 0 if killed == len(rows) else 1
