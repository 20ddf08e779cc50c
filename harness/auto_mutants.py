"""./harness/run --mutants auto: the suite's power against mutants nobody chose.

Mutants of an implementation's source are generated mechanically
(harness/mutagen.py), a reproducible sample is drawn (--sample N --seed S),
and each is applied in turn to the copy of the tree the seeded-fault runner
uses (build-mutants/src; the working tree is never touched), built
incrementally in build-mutants/build (ninja recompiles the one mutated file
and relinks the core library) and run against the conformance suites
(--jobs N: N such workspaces, each taking the next mutant of the sample): the
C++ suite first (it is fast, and stops at its first failure), the Python
suite only when the C++ suite did not kill the mutant. A mutant is killed
when a test fails or a suite crashes or hangs (killed after a timeout
derived from the baseline); it is stillborn when it does not compile.
Reviewed equivalent mutants (fixtures/faults/equivalent_mutants.toml) are
data: the kill rate is given with and without them.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import time
import threading
import tomllib
from dataclasses import asdict, dataclass, field

import mutagen
import mutants
import staging
from mutants import FIRST, ROOT, Workspace
from progress import duration, remaining

EQUIVALENTS = ROOT / "fixtures" / "faults" / "equivalent_mutants.toml"
TARGET_KILL_RATE = 0.90
# What `--mutate cpp` and `--mutate python` mutate in the reference, and what
# they leave out, with why (reported with every run).
LAYERS = {
    "cpp": "reference/src/*.cpp",
    "python": "reference/python/native_registry/*.py",
}
NOT_MUTATED = {
    "reference/src/predicates.cpp": "the composable C++ predicates go beyond upstream: no behaviour "
                                    "of the catalogue, so the conformance suites do not judge them "
                                    "(the reference's own tests do)",
    "reference/python/native_registry/predicates.py": "as predicates.cpp: beyond upstream",
    "reference/python/native_registry/upstream_compat.py": "run only by --upstream-tests (upstream's "
                                                           "own test file), never by the conformance suites",
}


# Parts of a mutated file left out, with why: in C++ a section (its
# `// ---- name ----` marker), in Python a top-level def or class. Only code
# no conformance test can reach by design; reported with every run, with
# how many candidates each leaves out.
NOT_MUTATED_PARTS = {
    "reference/src/registry.cpp": {
        "self-checks": "Registry::check_invariants and dump_state: debugging aids the reference's own "
                       "stress, fuzz and model tests call after every step; a check fires only when "
                       "another part is wrong, and no implementation's conformance is judged by them",
        "graph surgery": "replace_graph, erase_graph, uninstall_graph: API beyond upstream's for "
                         "upstream_compat's view of `_graphs` (run only by --upstream-tests); no adapter "
                         "calls it",
    },
    "reference/python/native_registry/registry.py": {
        name: "API beyond upstream's that no adapter calls (the reference's own tests cover it), "
              "so the conformance suites, which judge upstream's behaviours, cannot reach it"
        for name in ("compile_backend", "Snapshot", "disallow_namespace", "set_empty_chain_policy")
    },
}


@dataclass
class Outcome:
    key: str
    where: str
    kind: str
    change: str
    original: str
    mutated: str
    verdict: str = ""            # killed, survived, stillborn
    killed_by: str = ""          # c++ conformance / python conformance
    failing: list[str] = field(default_factory=list)
    output_tail: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # build, c++, python, total


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


def load_equivalents(path: pathlib.Path = EQUIVALENTS) -> dict[str, str]:
    """Reviewed equivalent mutants: key -> reason. Each entry needs a reason."""
    if not path.exists():
        return {}
    with path.open("rb") as f:
        entries = tomllib.load(f).get("equivalent", [])
    table = {}
    for entry in entries:
        if not entry.get("reason", "").strip():
            raise ValueError(f"{path}: equivalent mutant {entry.get('key')!r} gives no reason")
        table[entry["key"]] = entry["reason"]
    return table


def figures(outcomes: list[Outcome], equivalents: dict[str, str]) -> dict:
    """The counts and kill rates of a run. The rate is killed over the
    mutants that compiled; 'without equivalents' also leaves out survivors
    reviewed as equivalent (a killed mutant is never one: it changed
    something a test saw)."""
    killed = [o for o in outcomes if o.verdict == "killed"]
    survived = [o for o in outcomes if o.verdict == "survived"]
    stillborn = [o for o in outcomes if o.verdict == "stillborn"]
    equivalent = [o for o in survived if o.key in equivalents]
    viable = len(killed) + len(survived)
    real = viable - len(equivalent)
    return {
        "sampled": len(outcomes), "stillborn": len(stillborn), "killed": len(killed),
        "survived": len(survived), "equivalent": len(equivalent),
        "killed_by_cpp": sum(o.killed_by == "c++ conformance" for o in killed),
        "killed_by_python": sum(o.killed_by == "python conformance" for o in killed),
        "killed_by_crash_or_timeout": sum(any(t.startswith("<") for t in o.failing) for o in killed),
        "kill_rate": len(killed) / viable if viable else None,
        "kill_rate_without_equivalents": len(killed) / real if real else None,
    }


def percent(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f} %"


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def choose_target(args, ws: Workspace) -> Target:
    """What `ws` mutates: its copy of the reference's C++ core, a staged
    package of the reference's Python layer, or a copy of another
    implementation's module."""
    impl = args.implementations[0]
    if impl.python != "adapters.reference:make":
        if args.mutate != "python":
            raise SystemExit(f"harness/run: error: --impl {impl.spec} is a Python implementation: "
                             f"use --mutate python (its registry module is mutated)")
        return foreign_target(impl.python, args.suite_env, ws)
    files = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(LAYERS[args.mutate])
                   if str(p.relative_to(ROOT)) not in NOT_MUTATED)
    suffix = pathlib.Path(LAYERS[args.mutate]).suffix
    left_out = {rel: why for rel, why in NOT_MUTATED.items() if rel.endswith(suffix)}
    if args.mutate == "cpp":
        return Target("cpp", files, {rel: ws.src / rel for rel in files}, left_out=left_out)
    return python_layer_target(files, left_out, ws)


def python_layer_target(files: list[str], left_out: dict[str, str], ws: Workspace) -> Target:
    """The reference's Python layer, mutated in a package of the workspace's
    own (python-layer: the pristine sources and the first workspace's built
    extension, which every Python workspace shares), so a C++ run may use the
    copy and its build meanwhile."""
    staged = staging.stage_package(FIRST.build, ws.root / "python-layer",
                                   sources=ROOT / "reference" / "python" / "native_registry")
    place = {rel: staged / "native_registry" / pathlib.Path(rel).name for rel in files}
    return Target("python", files, place, env=staging.environment_for(staged), needs_build=False,
                  suites_from=ROOT, left_out=left_out)


def foreign_target(spec: str, env: dict, ws: Workspace) -> Target:
    """A Python implementation's registry module (its adapter's `module`),
    copied into the workspace's impl/ and mutated there; a pytest plugin
    (mutant_loader) makes the suite import the copy in its place."""
    found = subprocess.run(
        [sys.executable, "-c", "import adapter, json; a = adapter.load(%r); m = a.module; "
         "print(json.dumps([m.__name__, m.__file__]))" % spec],
        cwd=ROOT / "conformance" / "python", env=env, capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"harness/run: error: cannot find the registry module of {spec} (its adapter's "
                         f"`module` attribute):\n{found.stderr[-2000:]}")
    name, file = json.loads(found.stdout)
    copy = ws.root / "impl" / pathlib.Path(file).name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(pathlib.Path(file).read_text())
    env = {**env, "NR_MUTANT_MODULE": name, "NR_MUTANT_FILE": str(copy),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "harness"), env.get("PYTHONPATH", "")]),
           "PYTEST_ADDOPTS": "-p mutant_loader"}
    print(f"  mutating {name} ({file}), through a copy in {copy}")
    return Target("python", [file], {file: copy}, impl=spec, env=env, needs_build=False, suites_from=ROOT)


# What the copy's build of the core and the extension is made of.
BUILT_FROM = ("reference/src/", "reference/include/", "reference/python/src/")


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


def evaluate(mutant: mutagen.Mutant, target: Target, ws: Workspace, out: pathlib.Path,
             timeouts: dict[str, float], baseline: dict[str, list[str]]) -> Outcome:
    outcome = Outcome(mutant.key, mutant.where, mutant.kind, mutant.change, mutant.original.strip(),
                      mutant.mutated.strip())
    path = target.place[mutant.file]
    start = time.monotonic()
    if target.needs_build and mutant.file.endswith(".cpp"):
        built = mutants.build(timeouts["build"], ws)
        outcome.seconds["build"] = time.monotonic() - start
        if not built:
            outcome.verdict = "stillborn"
            return outcome
    else:
        try:
            compile(path.read_text(), str(path), "exec")
        except SyntaxError as exc:
            outcome.verdict, outcome.output_tail = "stillborn", str(exc)
            return outcome
    suites = []
    if mutant.file.endswith(".cpp"):  # the Python layer's mutants cannot reach the C++ suite
        suites.append(("c++ conformance",
                       lambda: mutants.cpp_suite(out, timeouts["c++"], fail_fast=True, ws=ws)))
    suites.append(("python conformance",
                   lambda: mutants.python_suite(out, timeouts["python"], target.impl, target.env,
                                                target.suites_from, ws, baseline.get("deselect", []))))
    for name, suite in suites:
        began = time.monotonic()
        failed, output = suite()
        outcome.seconds[name.split()[0]] = time.monotonic() - began
        failed = [t for t in failed if t not in baseline.get(name, [])]
        outcome.output_tail = tail(output)
        if failed:
            outcome.verdict, outcome.killed_by, outcome.failing = "killed", name, failed
            break
    else:
        outcome.verdict = "survived"
    outcome.seconds["total"] = time.monotonic() - start
    return outcome


def prepare(spaces: list[Workspace], jobs_each: int) -> bool:
    """Copies the tree into each workspace and builds them side by side."""
    for ws in spaces:
        mutants.copy_tree(ws)
        check_pristine(ws=ws)
    where = ", ".join(str(ws.root) for ws in spaces)
    print(f"== baseline build in {where} (the first one takes minutes)", flush=True)
    built = {}
    threads = [threading.Thread(target=lambda ws=ws: built.__setitem__(ws, mutants.build(ws=ws, jobs=jobs_each)))
               for ws in spaces]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [str(ws.build) for ws in spaces if not built.get(ws)]
    if failed:
        print(f"baseline build failed in {', '.join(failed)}")
    return not failed


def run(args) -> int:
    out = args.results / "mutants"
    out.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    equivalents = load_equivalents()
    reference = args.implementations[0].python == "adapters.reference:make"
    spaces = mutants.workspaces(args.jobs)
    # Each workspace of a C++ run builds the core; Python-layer workspaces
    # share the first one's build; another implementation's module needs none.
    built_spaces = spaces if reference and args.mutate == "cpp" else [FIRST] if reference else []
    jobs_each = max(1, (os.cpu_count() or 2) // len(built_spaces)) if built_spaces else 1
    if not reference:
        pass  # another implementation's module: nothing of the reference is built or mutated
    elif args.mutate == "python" and (FIRST.build / "build.ninja").exists():
        # The copy and its build may be a C++ run's, mid-mutant: use the
        # build as it is if what it is built from is pristine, never rebuild
        # it, and touch none of its sources.
        check_pristine(BUILT_FROM)
    elif not prepare(built_spaces, jobs_each):
        return 1
    targets = [choose_target(args, ws) for ws in spaces]
    target = targets[0]

    candidates, parts_left_out = generate(target)
    chosen = mutagen.sample(candidates, args.sample, args.seed)
    only = chosen_only(args.only)
    if only:  # these mutants, whether the sample drew them or not
        chosen = [m for m in candidates if m.key in only or m.where in only]
        missing = only - {m.key for m in chosen} - {m.where for m in chosen}
        if missing:
            print(f"  --only: {len(missing)} not among the candidates (their line changed or was removed, "
                  f"or a part left out holds it): {', '.join(sorted(missing))}", flush=True)
    print(f"== mutants of {target.layer} ({', '.join(target.files)}): {len(candidates)} candidates, "
          f"{len(chosen)} sampled (seed {args.seed}), {len(spaces)} at a time", flush=True)
    for rel, why in target.left_out.items():
        print(f"  not mutated: {rel}: {why}")
    for part, (count, why) in parts_left_out.items():
        print(f"  not mutated: {part} ({count} candidates): {why}")

    print("== baseline: the suites on the unmutated implementation", flush=True)
    timeouts, baseline = {"build": 900.0}, {}
    suites = [("python conformance", lambda t: mutants.python_suite(out, t, target.impl, target.env,
                                                                    target.suites_from, fail_fast=False))]
    if target.layer == "cpp":
        suites.insert(0, ("c++ conformance", lambda t: mutants.cpp_suite(out, t)))
    for name, suite in suites:
        began = time.monotonic()
        failed, output = suite(mutants.TIMEOUT_S * 2)
        took = time.monotonic() - began
        if any(t.startswith("<") for t in failed):
            print(f"baseline {name} crashed: {failed}\n{tail(output)}")
            return 1
        if failed:
            print(f"  note: {name} fails before any mutant, so these kill nothing: {failed}")
        baseline[name] = failed
        if name == "python conformance":
            baseline["deselect"] = mutants.baseline_deselect(out)
        # A mutant's run may be slower (a loaded machine, other workspaces'
        # runs beside it) but not three times slower, unless it hangs.
        limit = timeouts[name.split()[0]] = max(60.0, 3 * took + 30)
        print(f"  {name}: {duration(took)} (a mutant's run is killed after {duration(limit)})", flush=True)

    # A SIGTERM unwinds like Ctrl-C: the mutated files are restored, the
    # mutants run so far are reported.
    signal.signal(signal.SIGTERM, interrupt)
    records = out / f"auto-{target.layer}.jsonl"
    done = resumed(records, chosen) if args.resume else {}
    if args.resume:
        print(f"  --resume: {len(done)} of the {len(chosen)} mutants have a verdict in {records}", flush=True)
        records.write_text("".join(json.dumps(asdict(o)) + "\n" for o in done.values()))
    else:
        records.write_text("")
    runner = Runner(chosen, equivalents, records, timeouts, baseline, done)
    try:
        runner.run([(ws, t, out if ws == FIRST else out / ws.root.name) for ws, t in zip(spaces, targets)])
    except KeyboardInterrupt:
        print(f"\n  interrupted after {len(runner.outcomes)} mutants; the mutated files are restored; "
              f"reporting those", flush=True)
    # The report first, then the rebuilds: a second SIGTERM (a time limit)
    # no longer stops either.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    outcomes = [o for _, o in sorted(runner.outcomes, key=lambda pair: pair[0])]
    stats = figures(outcomes, equivalents)
    stats.update(candidates=len(candidates), chosen=len(chosen), seed=args.seed, requested=args.sample,
                 files=target.files, not_mutated=target.left_out, impl=target.impl, jobs=len(spaces),
                 parts_not_mutated={part: {"candidates": n, "why": why} for part, (n, why) in parts_left_out.items()},
                 seconds_total=time.monotonic() - begin, seconds_per_mutant=per_mutant(outcomes))
    write_report(out / f"auto-{target.layer}", stats, outcomes, equivalents)
    print(summary(stats))
    print(f"  report: {out / f'auto-{target.layer}.md'} (and .json)")
    for o in outcomes:
        if o.verdict == "survived" and o.key not in equivalents:
            print(f"  survived: {o.where} {o.kind}: {o.change}\n      {o.original}\n   -> {o.mutated}")
    if target.needs_build:  # the builds match the pristine copies again
        restored = [threading.Thread(target=mutants.build, kwargs={"ws": ws, "jobs": jobs_each})
                    for ws in built_spaces]
        for t in restored:
            t.start()
        for t in restored:
            t.join()
    rate = stats["kill_rate_without_equivalents"]
    return 0 if rate is not None and rate >= TARGET_KILL_RATE else 1


def chosen_only(spec: str) -> set[str]:
    """--only's mutants: comma-separated keys or file:line places, or @FILE
    with one per line (a run's survivors, say)."""
    if spec.startswith("@"):
        return {line.strip() for line in pathlib.Path(spec[1:]).read_text().splitlines() if line.strip()}
    return {o for o in spec.split(",") if o}


def generate(target: Target) -> tuple[list[mutagen.Mutant], dict[str, tuple[int, str]]]:
    """The candidates of the target's files, less the parts NOT_MUTATED_PARTS
    leaves out; and per part left out, how many candidates it held and why."""
    candidates, left_out = [], {}
    for rel in target.files:
        text = target.place[rel].read_text()
        reasons = NOT_MUTATED_PARTS.get(rel, {})
        parts = mutagen.part_lines(rel, text, set(reasons))
        for name, lines in parts.items():
            if not lines:
                raise SystemExit(f"harness/run: error: {rel} has no part {name!r} (NOT_MUTATED_PARTS in "
                                 f"{pathlib.Path(__file__).name} names it)")
        skipped = set().union(*parts.values()) if parts else set()
        for m in mutagen.mutants_of(rel, text):
            if m.line in skipped:
                name = next(n for n, lines in parts.items() if m.line in lines)
                count, why = left_out.get(f"{rel}: {name}", (0, reasons[name]))
                left_out[f"{rel}: {name}"] = (count + 1, why)
            else:
                candidates.append(m)
    return candidates, left_out


def resumed(records: pathlib.Path, chosen: list[mutagen.Mutant]) -> dict[str, Outcome]:
    """The verdicts an interrupted run recorded for mutants of this sample."""
    keys = {m.key for m in chosen}
    done = {}
    if records.exists():
        for line in records.read_text().splitlines():
            outcome = Outcome(**json.loads(line))
            if outcome.key in keys:
                done[outcome.key] = outcome
    return done


class Runner:
    """Runs the sample in order over the workspaces, one thread each; each
    takes the next mutant when it is done with one. Outcomes are recorded
    (the .jsonl) and printed as they come."""

    def __init__(self, chosen: list[mutagen.Mutant], equivalents: dict[str, str], records: pathlib.Path,
                 timeouts: dict[str, float], baseline: dict[str, list[str]], done: dict[str, Outcome]):
        numbered = list(enumerate(chosen, 1))
        self.pending = [(i, m) for i, m in numbered if m.key not in done]
        self.total, self.equivalents, self.records = len(chosen), equivalents, records
        self.timeouts, self.baseline = timeouts, baseline
        self.outcomes: list[tuple[int, Outcome]] = [(i, done[m.key]) for i, m in numbered if m.key in done]
        self.already = len(self.outcomes)
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.errors: list[BaseException] = []
        self.start = time.monotonic()

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
            for t in threads:
                t.join()
            raise
        if self.errors:
            raise self.errors[0]

    def work(self, ws: Workspace, target: Target, out: pathlib.Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        try:
            while not self.stop.is_set():
                with self.lock:
                    if not self.pending:
                        return
                    index, mutant = self.pending.pop(0)
                path = target.place[mutant.file]
                pristine = path.read_text()
                try:
                    path.write_text(mutant.apply(pristine))
                    outcome = evaluate(mutant, target, ws, out, self.timeouts, self.baseline)
                finally:
                    path.write_text(pristine)
                if self.stop.is_set():
                    return  # its suites were killed by the interrupt: no verdict
                self.record(index, mutant, outcome)
        except BaseException as exc:  # reported by the main thread; the others stop
            self.errors.append(exc)
            self.stop.set()

    def record(self, index: int, mutant: mutagen.Mutant, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append((index, outcome))
            done = len(self.outcomes)
            with self.records.open("a") as f:
                f.write(json.dumps(asdict(outcome)) + "\n")
            verdict = outcome.verdict.upper() if outcome.verdict == "survived" else outcome.verdict
            if outcome.verdict == "survived" and outcome.key in self.equivalents:
                verdict = "equivalent"
            elapsed = time.monotonic() - self.start
            spent = " ".join(f"{k} {v:.0f}s" for k, v in outcome.seconds.items() if k != "total")
            left = remaining(done - self.already, self.total - self.already, elapsed)
            print(f"  [{done}/{self.total}] {verdict:10s} {mutant.where} {mutant.kind}: {mutant.change} "
                  f"({spent}; elapsed {duration(elapsed)}, {left})",
                  flush=True)


def interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def per_mutant(outcomes: list[Outcome]) -> dict[str, dict[str, float]]:
    """Median and mean seconds per mutant, of each phase."""
    phases: dict[str, list[float]] = {}
    for o in outcomes:
        for phase, seconds in o.seconds.items():
            phases.setdefault(phase, []).append(seconds)
    return {p: {"median": statistics.median(v), "mean": statistics.fmean(v), "n": len(v)}
            for p, v in phases.items()}


def summary(stats: dict) -> str:
    timing = stats["seconds_per_mutant"].get("total")
    run = (f"{stats['sampled']} sampled (seed {stats['seed']})" if stats["sampled"] == stats["chosen"] else
           f"{stats['sampled']} run of {stats['chosen']} sampled (seed {stats['seed']}; interrupted)")
    return (f"\n{stats['candidates']} candidates, {run}: "
            f"{stats['stillborn']} stillborn, {stats['killed']} killed ({stats['killed_by_cpp']} by the C++ "
            f"suite, {stats['killed_by_python']} by the Python suite; {stats['killed_by_crash_or_timeout']} "
            f"by a crash or timeout), {stats['survived']} survived ({stats['equivalent']} reviewed "
            f"equivalent)\nkill rate {percent(stats['kill_rate'])}; without equivalents "
            f"{percent(stats['kill_rate_without_equivalents'])} (target {percent(TARGET_KILL_RATE)}); "
            f"{duration(stats['seconds_total'])} in all"
            + (f" ({stats['jobs']} workspaces at a time)" if stats.get("jobs", 1) > 1 else "")
            + (f", {timing['median']:.0f} s per mutant (median; mean {timing['mean']:.0f} s)" if timing else ""))


def write_report(stem: pathlib.Path, stats: dict, outcomes: list[Outcome], equivalents: dict[str, str]) -> None:
    stem.with_suffix(".json").write_text(json.dumps(
        {"figures": stats, "mutants": [asdict(o) for o in outcomes]}, indent=1))
    lines = ["# Generated mutants", "", summary(stats).strip(), ""]
    lines += [f"- not mutated: `{rel}`: {why}" for rel, why in stats["not_mutated"].items()]
    lines += [f"- not mutated: `{part}` ({p['candidates']} candidates): {p['why']}"
              for part, p in stats.get("parts_not_mutated", {}).items()]
    survivors = [o for o in outcomes if o.verdict == "survived"]
    lines += ["", "## Survivors", ""]
    for o in survivors:
        lines += [f"### {o.where} {o.kind}: {o.change}" + (" (reviewed equivalent)" if o.key in equivalents else ""),
                  "", f"key `{o.key}`", "", "```", f"- {o.original}", f"+ {o.mutated}", "```", ""]
        if o.key in equivalents:
            lines += [f"Equivalent: {equivalents[o.key]}", ""]
        lines += ["Suite output (tail):", "", "```", o.output_tail, "```", ""]
    lines += ["## Every mutant", "", "| mutant | mutation | verdict | by | seconds |", "|---|---|---|---|---|"]
    lines += [f"| {o.where} | {o.kind}: `{o.change}` | {o.verdict} | {o.killed_by} "
              f"({', '.join(o.failing[:2])}) | {o.seconds.get('total', 0):.0f} |" for o in outcomes]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
