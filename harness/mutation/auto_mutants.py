"""./harness/run --mutants auto: the suite's power against mutants nobody chose.

Mutants of an implementation's source are generated mechanically
(harness/mutation/mutagen.py), a reproducible sample is drawn (--sample N --seed S),
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

import dataclasses
import fnmatch
import hashlib
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys
import time

from . import coverage_map
from . import mutagen
from . import mutant_runner
from . import mutant_switches
from . import reached_map
from . import mutation_report
from . import mutants
from . import schemata_build
from .. import staging, with_root_on_path
from .mutant_records import (EQUIVALENTS, TARGET_KILL_RATE, Outcome, awaits_own_verdict, figures,  # noqa: F401
                            load_equivalents, per_mutant, percent, summary, write_report)
from .mutant_runner import BUILT_FROM, BUILT_LAYERS, Target, check_pristine
from .mutants import FIRST, ROOT, Workspace

# What `--mutate cpp`, `--mutate binding` and `--mutate python` mutate in the
# reference, and what they leave out, with why (reported with every run).
LAYERS = {
    "cpp": "reference/src/*.cpp",
    "binding": "reference/python/src/*.cpp",
    "python": "reference/python/native_registry/*.py",
}
NOT_MUTATED = {
    "reference/src/predicates.cpp": "the composable C++ predicates go beyond upstream: no behaviour "
                                    "of the catalogue, so the conformance suites do not judge them "
                                    "(the reference's own tests do)",
    "reference/src/self_check.cpp": "Registry::check_invariants and dump_state: debugging aids the "
                                    "reference's own stress, fuzz and model tests call after every "
                                    "step; a check fires only when another part is wrong, and no "
                                    "implementation's conformance is judged by them",
    "reference/python/native_registry/predicates.py": "as predicates.cpp: beyond upstream",
    "reference/python/src/predicates_py.cpp": "as predicates.cpp: the predicates' Python binding, beyond "
                                             "upstream (one catalogue behaviour, explain.predicate-conds, "
                                             "calls a single predicate through it)",
    "reference/python/native_registry/upstream_compat.py": "run only by --upstream-tests (upstream's "
                                                           "own test file), never by the conformance suites",
    "reference/python/native_registry/check.py": "check_overrides, opcheck for overrides: a tool that "
                                                 "checks an override against its op, not a behaviour of "
                                                 "a registry (upstream has none; no adapter offers it), "
                                                 "so the conformance suites never call it (the "
                                                 "reference's own tests do)",
}


# Files whose tests all need what only some hosts' torch has: mutated only
# there. Elsewhere every test reaching them reports "unsupported", so each of
# their mutants would survive unseen; left out instead, saying why, and run
# where torch has it (`--only FILE` on such a host) with the records merged.
NEEDS_TORCH_NATIVE = {
    "reference/python/native_registry/takeover.py": "its tests move torch's own registry "
                                                    "(torch._native.registry) into the reference",
}


def host_lacks(module: str) -> bool:
    """Whether this host's Python cannot import `module` (torch._native)."""
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


def left_out_on_this_host() -> dict[str, str]:
    """NEEDS_TORCH_NATIVE's files, where this host's torch lacks torch._native."""
    if not host_lacks("torch._native"):
        return {}
    import torch
    return {rel: f"{why}, and torch {torch.__version__} here has no torch._native: mutate it on a host "
                 f"whose torch has (--only {rel}) and merge the records"
            for rel, why in NEEDS_TORCH_NATIVE.items()}


# Parts of a mutated file left out, with why: in C++ a section (its
# `// ---- name ----` marker), in Python a top-level def or class. Only code
# no conformance test can reach by design; reported with every run, with
# how many candidates each leaves out.
INVARIANTS = ("the table's half of Registry::check_invariants (self_check.cpp, left out whole): a "
              "debugging aid the reference's own stress, fuzz and model tests call after every step; "
              "a check fires only when another part is wrong, and no adapter calls it")
NOT_MUTATED_PARTS = {
    "reference/src/graph_table.cpp": {"invariants": INVARIANTS},
    "reference/src/router_table.cpp": {"invariants": INVARIANTS},
    "reference/src/filter_set.cpp": {"invariants": INVARIANTS},
    "reference/src/native_op_table.cpp": {"invariants": INVARIANTS},
    "reference/src/retired_native_ops.cpp": {
        "invariants": "retired_counts, read only by Registry::check_invariants (the `_native` op "
                      "table's half) and dump_state (self_check.cpp, left out whole): debugging aids "
                      "no implementation's conformance is judged by; the reference's own tests cover them",
    },
    "reference/src/explain.cpp": {
        "explain by name": "Registry::explain(op_name, ...): C++ API beyond the adapter's contract, which "
                           "explains an OperatorHandle (the overload it resolves to, mutated); the "
                           "reference's own tests cover the name's parsing",
    },
    "reference/src/graphs.cpp": {
        "graph surgery": "replace_graph and erase_graph: API beyond upstream's for upstream_compat's "
                         "view of `_graphs` (run only by --upstream-tests); no adapter calls it",
    },
    "reference/src/install.cpp": {
        "graph surgery": "uninstall_graph: API beyond upstream's for upstream_compat's view of "
                         "upstream's router libraries (run only by --upstream-tests); no adapter calls it",
    },
    "reference/python/native_registry/compile_routing.py": {
        "compile_backend": "API beyond upstream's that no adapter calls (the reference's own tests "
                           "cover it), so the conformance suites, which judge upstream's behaviours, "
                           "cannot reach it",
    },
    "reference/python/native_registry/__init__.py": {
        "__getattr__": "the package's lazy import of check_overrides, beyond the contract as "
                       "check.py is; the reference's own tests cover it (test_api.py)",
    },
    "reference/python/native_registry/nodes.py": {
        name: "called only by upstream_compat.py (torch 2.13's `_graphs` view, which registers "
              "hand-made nodes and gives them back on a refusal): beyond the contract as that "
              "file is; the reference's own tests cover it (test_upstream_compat.py)"
        for name in ("is_bound", "adopt", "unbind", "bindings", "restore_bindings")
    },
    "reference/python/native_registry/observe.py": {
        name: "the Python view's conveniences beyond what an adapter reads (the records by "
              "node and by graph, a scope entered with `with`): the printed table, a scope used "
              "as a decorator, the reprs; the reference's own tests cover them "
              "(test_observe_views.py)"
        for name in ("RoutingStats.__repr__", "RoutingStats.__str__", "_table",
                     "DisabledInThread._recreate_cm", "DisabledInThread.__repr__")
    },
    "reference/python/native_registry/registry.py": {
        name: "API beyond upstream's that no adapter calls (the reference's own tests cover it), "
              "so the conformance suites, which judge upstream's behaviours, cannot reach it"
        for name in ("Snapshot", "disallow_namespace", "set_empty_chain_policy")
    },
}


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
    # With --own-tests, what is left out of the conformance population by
    # design is mutated too, for the own tests (Target.beyond_files); what
    # this host cannot run stays out.
    beyond = NOT_MUTATED if args.own_tests else {}
    not_mutated = {**{rel: why for rel, why in NOT_MUTATED.items() if rel not in beyond}, **left_out_on_this_host()}
    files = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(LAYERS[args.mutate])
                   if str(p.relative_to(ROOT)) not in not_mutated)
    left_out = {rel: why for rel, why in not_mutated.items() if fnmatch.fnmatch(rel, LAYERS[args.mutate])}
    if args.mutate in BUILT_LAYERS:
        target = Target(args.mutate, files, {rel: ws.src / rel for rel in files}, left_out=left_out)
    else:
        target = python_layer_target(files, left_out, ws, args.build)
    target.beyond_files = {rel: why for rel, why in beyond.items() if rel in files}
    return target


def python_layer_target(files: list[str], left_out: dict[str, str], ws: Workspace,
                        build: pathlib.Path) -> Target:
    """The reference's Python layer, mutated in a package of the workspace's
    own (python-layer: the pristine sources and the extension built in
    `build` (--build), which every Python workspace shares), so a C++ run may
    use the copy and its build meanwhile."""
    staged = staging.stage_package(build, ws.root / "python-layer",
                                   sources=ROOT / "reference" / "python" / "native_registry")
    place = {rel: staged / "native_registry" / pathlib.Path(rel).name for rel in files}
    # NR_BUILD_DIR: the own tests' test_one_core loads a fixture library of that build.
    env = {**staging.environment_for(staged), "NR_BUILD_DIR": str(build)}
    return Target("python", files, place, env=env, needs_build=False,
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
           "PYTHONPATH": with_root_on_path(env)["PYTHONPATH"],
           "PYTEST_ADDOPTS": "-p harness.mutation.mutant_loader"}
    print(f"  mutating {name} ({file}), through a copy in {copy}")
    return Target("python", [file], {file: copy}, impl=spec, env=env, needs_build=False, suites_from=ROOT)


def run(args) -> int:
    out = args.results / "mutants"
    out.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    equivalents = load_equivalents()
    reference = args.implementations[0].python == "adapters.reference:make"
    # Each workspace of a C++ or binding run builds the core and the
    # extension; Python-layer workspaces share the extension of --build;
    # another implementation's module needs none.
    built = reference and args.mutate in BUILT_LAYERS
    # --switch of a C++ layer: ONE schemata build (schemata_build.py, built
    # once the mutants are chosen) stands for the build; --jobs N workers run
    # its switched mutants side by side (nothing is rebuilt for them); the
    # first worker rebuilds the others one by one once the switched ones are done.
    schemata = built and getattr(args, "switch", False)
    spaces = [schemata_build.space(mutants.workspaces(1)[0])] if schemata else mutants.workspaces(args.jobs)
    built_spaces = spaces if built else []
    jobs_each = max(1, (os.cpu_count() or 2) // len(built_spaces)) if built_spaces else 1
    if args.own_tests and not reference:
        raise SystemExit("harness/run: error: --own-tests runs the reference's own tests: mutate the reference")
    if reference and args.mutate == "python" and args.build.resolve() == FIRST.build.resolve():
        # The copy and its build may be a C++ run's, mid-mutant: use the
        # build as it is if what it is built from is pristine, never rebuild
        # it, and touch none of its sources.
        check_pristine(BUILT_FROM)
    # What the verdicts are of: the tree as the workspaces copy it now.
    at = (mutant_runner.tree_commit(), mutant_runner.tree_source())
    if built_spaces and not mutant_runner.prepare(built_spaces, jobs_each, build=not schemata):
        return 1
    targets = [choose_target(args, ws) for ws in spaces]
    target = targets[0]
    if reference and args.mutate == "python":
        check_imports_staged(target)

    candidates, parts_left_out = generate_for(targets, beyond_too=args.own_tests)
    chosen = mutagen.sample(candidates, args.sample, args.seed)
    only = chosen_only(args.only)
    if only:  # these mutants, whether the sample drew them or not
        chosen, missing = named_by(candidates, only)
        if missing:
            print(f"  --only: {len(missing)} not among the candidates (their line changed or was removed, "
                  f"or a part left out holds it): {', '.join(sorted(missing))}", flush=True)
    sampled = len(chosen)
    if getattr(args, "shard", None):
        chosen = in_shard(chosen, *args.shard)
        print(f"  --shard {args.shard[0]}/{args.shard[1]}: {len(chosen)} of the {sampled} chosen mutants",
              flush=True)
    print(f"== mutants of {target.layer} ({', '.join(target.files)}): {len(candidates)} candidates, "
          f"{len(chosen)} sampled (seed {args.seed}), {args.jobs if schemata else len(spaces)} at a time", flush=True)
    for rel, why in target.left_out.items():
        print(f"  not mutated: {rel}: {why}")
    # With --own-tests, the parts are mutated: they and target.beyond_files
    # count in the "with own tests" figure only.
    state = "beyond the contract, mutated for the own tests" if args.own_tests else "not mutated"
    for part, (count, why) in parts_left_out.items():
        print(f"  {state}: {part} ({count} candidates): {why}")
    for rel, why in target.beyond_files.items():
        print(f"  {state}: {rel}: {why}")

    if schemata and not schemata_build.switch(targets, spaces, chosen, jobs_each):
        return 1
    if schemata:
        links = own_links_checked(targets[0], spaces[0], out)
        for t in targets:
            t.own_links = links
    coverage = None
    if args.baseline_from is not None:
        baseline = mutant_runner.baseline_from_results(args.baseline_from, args.implementations[0].file_stem)
    elif getattr(args, "tests_by_coverage", False) and not (args.own_tests and schemata):
        baseline = {"timeouts": {"build": 900.0}}  # the coverage runs stand for it
    else:
        baseline = mutant_runner.measure_baseline(target, out, args.own_tests, ws=spaces[0])
    if baseline is None:
        return 1
    if getattr(args, "tests_by_coverage", False) and schemata:
        coverage = reached_of(targets[0], spaces[0], out, baseline, jobs=os.cpu_count() or 1, source=at[1])
        if coverage is None:
            return 1
        if "python" not in baseline["timeouts"]:
            baseline = reached_map.baseline_of(coverage)
        for t in targets:
            t.coverage = coverage  # t.pristine: the texts schemata_build.switch kept
    elif getattr(args, "tests_by_coverage", False):
        coverage = coverage_of(target, spaces[0], out, baseline)
        if coverage is None:
            return 1
        if "python" not in baseline["timeouts"]:
            baseline = baseline_of(coverage)
        own = own_coverage_of(target, spaces[0], out) if args.own_tests else None
        if args.own_tests and own is None:
            return 1
        if own is not None:
            baseline["timeouts"].setdefault("own", max(60.0, 3 * own.seconds + 30))
        for t in targets:
            t.coverage, t.pristine = coverage, {rel: t.place[rel].read_text() for rel in t.files}
            t.own_coverage = own
    if getattr(args, "upstream_tests", None) is not None:
        judge = mutant_runner.upstream_judge(args.upstream_tests, target, spaces[0], out)
        if judge is None:
            return 1
        for t in targets:
            t.upstream = judge
    if getattr(args, "switch", False) and not schemata:
        switch_all(targets, chosen)
    for t in targets:
        t.warm_suite = not getattr(args, "fresh_suites", False)
    records = out / f"auto-{target.layer}.jsonl"
    if getattr(args, "shuffle", False):  # only the order: ids and checks were made in file order
        chosen = random.Random(args.seed).sample(chosen, len(chosen))
    digests = digests_of(chosen, target, coverage)
    reused = {}
    if getattr(args, "incremental", None) is not None:
        reused = reusable(mutation_report.load(args.incremental), digests, args.own_tests,
                          uncovered_too=target.own_tests_reach_uncovered)
        print(f"  --incremental: {len(reused)} of the {len(chosen)} mutants keep their verdict of "
              f"{args.incremental} (their line and their tests' sources unchanged)", flush=True)
    owed_after = {}
    if getattr(args, "own_tests_after", None) is not None:
        kept, owed_after = carried_over(mutation_report.load(args.own_tests_after), digests,
                                        uncovered_too=target.own_tests_reach_uncovered)
        reused = {**kept, **reused}
        print(f"  --own-tests-after: of the {len(chosen)} mutants, {len(kept)} keep their verdict of "
              f"{args.own_tests_after} and {len(owed_after)} its conformance verdict, meeting only the own "
              f"tests now (their line unchanged)", flush=True)
    if not getattr(args, "run_equivalents", False):
        unrun = reviewed_unrun(chosen, equivalents, at)
        if unrun:
            print(f"  {len(unrun)} of the {len(chosen)} mutants are reviewed equivalents "
                  f"(fixtures/faults/equivalent_mutants.toml): recorded as such, not run "
                  f"(--run-equivalents runs them)", flush=True)
        reused = {**unrun, **reused}
    places = [(ws, t, out if ws.root == FIRST.root else out / ws.root.name) for ws, t in zip(spaces, targets)]
    if schemata:
        # (--check-switch rebuilds every mutant too: one worker.)
        workers = 1 if getattr(args, "check_switch", False) else args.jobs
        places = [(spaces[0], targets[0], out if k == 0 else out / f"worker-{k}") for k in range(workers)]
    outcomes = mutant_runner.run_all(chosen, equivalents, records, baseline, args.resume, args.own_tests,
                                     places, digests=digests, reused=reused,
                                     check_switch=schemata and getattr(args, "check_switch", False),
                                     shared_build=schemata, at=at, owed_after=owed_after)
    stats = figures(outcomes, equivalents)
    stats.update(candidates=len(candidates), chosen=len(chosen), seed=args.seed, requested=args.sample,
                 files=target.files, not_mutated=target.left_out, impl=target.impl, jobs=len(places),
                 parts_not_mutated={part: {"candidates": n, "why": why} for part, (n, why) in parts_left_out.items()},
                 seconds_total=time.monotonic() - begin, seconds_per_mutant=per_mutant(outcomes))
    write_report(out / f"auto-{target.layer}", stats, outcomes, equivalents)
    document = mutation_report.report(
        outcomes, equivalents, {rel: target.pristine.get(rel) or target.place[rel].read_text() for rel in target.files},
        config={"layer": target.layer, "impl": target.impl, "seed": args.seed, "sample": args.sample,
                "shard": "/".join(map(str, args.shard)) if getattr(args, "shard", None) else "1/1",
                "candidates": len(candidates), "chosen": len(chosen), "sampled": sampled,
                "commit": at[0], "seconds_total": round(stats["seconds_total"], 1)},
        tests=baseline.get("tests", []))
    report_path = out / f"auto-{target.layer}.mutation.json"
    mutation_report.write(document, report_path)
    mutation_report.write_html(document, out / f"auto-{target.layer}-html")
    print(summary(stats))
    print(f"  report: {out / f'auto-{target.layer}.md'} (and .json); records: {report_path} "
          f"(mutation-testing-report-schema), a page per file in {out / f'auto-{target.layer}-html'}/")
    for o in outcomes:
        if o.verdict == "survived" and o.key not in equivalents:
            print(f"  survived: {o.where} {o.kind}: {o.change}\n      {o.original}\n   -> {o.mutated}")
    if target.needs_build:  # the builds match the pristine copies again
        mutant_runner.build_all(built_spaces, jobs_each)
    rate = stats["kill_rate_without_equivalents"]
    return 0 if rate is not None and rate >= TARGET_KILL_RATE else 1


def own_links_checked(target: Target, ws: Workspace, out: pathlib.Path) -> dict[str, object]:
    """The schemata build's sources whose mutants that are not switched are
    built on their own (schemata_build.own_links), once it is seen that the
    C++ suite's binary and the Python suite's interpreter load a library so
    built in place of the build's (one of the smallest such sources, as it
    is); none where they do not, saying why (those mutants are then rebuilt
    one by one at the end)."""
    links = schemata_build.own_links(ws.build, [rel for rel, s in target.switched.items() if s.left_out])
    if not links:
        return {}
    began = time.monotonic()
    rel, link = min(links.items(), key=lambda item: len(target.switched[item[0]].original))
    into = out / "own-link-check"
    built, output = link.built(target.switched[rel].original, into, 900)
    library = str((into / "lib").resolve())
    loaded = {}
    if built:
        gtest = subprocess.run([str(ws.build / mutants.GTEST["conformance"])], capture_output=True, text=True,
                               env={**os.environ, **link.environment(into), "LD_TRACE_LOADED_OBJECTS": "1"})
        loaded["the C++ suite"] = library in gtest.stdout
        maps = subprocess.run([sys.executable, "-c", "import native_registry; print(open('/proc/self/maps').read())"],
                              capture_output=True, text=True, cwd=target.suites_from or ws.src,
                              env={**mutant_runner.pristine_env(target, ws, into), **link.environment(into)})
        loaded["the Python suite"] = library in maps.stdout
    if not built or not all(loaded.values()):
        why = (f"{rel} as it is does not build so:\n{output[-2000:]}" if not built else
               f"{' and '.join(k for k, v in loaded.items() if not v)} would not load the library built so")
        print(f"  the mutants that are not switched are rebuilt one by one at the end: {why}", flush=True)
        return {}
    print(f"  the mutants of {len(links)} files that are not switched: each built on its own by the worker that "
          f"takes it, side by side (its library loaded first; checked on {rel}, "
          f"{time.monotonic() - began:.0f} s)", flush=True)
    return links


def check_imports_staged(target: Target) -> None:
    """The suites must import the package staged for mutation, not an
    installed one (an editable install's finder comes before PYTHONPATH):
    else every mutant would survive, silently."""
    staged = next(iter(target.place.values())).parent
    found = subprocess.run([sys.executable, "-c", "import native_registry; print(native_registry.__file__)"],
                           cwd=target.suites_from, env=target.env, capture_output=True, text=True)
    where = pathlib.Path(found.stdout.strip() or "?").parent
    if found.returncode != 0 or where.resolve() != staged.resolve():
        raise SystemExit(f"harness/run: error: the suites would import native_registry from {where}, not from "
                         f"the package staged for mutation ({staged}): no mutant would be seen\n"
                         f"{found.stderr[-2000:]}")


def switch_all(targets: list[Target], chosen: list[mutagen.Mutant]) -> None:
    """--switch: each target's mutated files replaced by their instrumented
    copies, holding the chosen mutants that can be switched (the others are
    rewritten there, mutant by mutant, as without --switch)."""
    began = time.monotonic()
    os.environ.pop(mutant_switches.ENVIRONMENT, None)  # the pristine runs and the warm suites choose none
    for t in targets:
        if t.needs_build:
            raise SystemExit("harness/run: error: --switch switches Python-layer mutants only")
        t.env = {k: v for k, v in t.env.items() if k != mutant_switches.ENVIRONMENT}
        t.pristine = t.pristine or {rel: t.place[rel].read_text() for rel in t.files}
        for rel in t.files:
            mine = [m for m in chosen if m.file == rel]
            if mine:
                t.switched[rel] = mutant_switches.instrument(rel, t.pristine[rel], mine)
                t.place[rel].write_text(t.switched[rel].text)
    count = sum(len(s.keys) for s in targets[0].switched.values())
    print(f"  --switch: {count} of the {len(chosen)} mutants switched by NR_MUTANT in instrumented copies "
          f"({time.monotonic() - began:.1f} s); the others rewritten one by one", flush=True)


def in_shard(chosen: list[mutagen.Mutant], k: int, n: int) -> list[mutagen.Mutant]:
    """The mutants of shard k of n: a hash of the key, not the order, decides,
    so every machine given the same candidates splits them the same way."""
    return [m for m in chosen if int(hashlib.sha1(m.key.encode()).hexdigest()[:12], 16) % n == k - 1]


# The tests a verdict depends on, where no coverage narrows them: the whole
# conformance suites (their tests, adapters and catalogue).
SUITE_SOURCES = ("conformance/",)


def suite_files() -> list[pathlib.Path]:
    return [ROOT / rel for rel in mutants.tree_files() if rel.startswith(SUITE_SOURCES)]


def digests_of(chosen: list[mutagen.Mutant], target: Target, coverage: coverage_map.CoverageMap | None = None
               ) -> dict[str, tuple[str, str]]:
    """Per mutant key: a digest of its line (indentation included: in Python
    it is syntax) and of the sources of the tests its verdict depends on: the
    files of the tests covering it where coverage chose them, else the whole
    conformance suites'."""
    suites = mutation_report.tests_digest(suite_files())
    found = {}
    for m in chosen:
        tests = (coverage.covering(m, target.pristine[m.file])
                 if coverage is not None and m.file in target.pristine else None)
        if tests is not None and target.own_coverage is not None:  # the own tests' verdict too
            own = target.own_coverage.covering(m, target.pristine[m.file])
            tests = None if own is None else tests + own
        digest = suites if tests is None else reached_map.tests_digest(tests)
        found[m.key] = (mutation_report.digest(m.original), digest)
    return found


def baseline_of(coverage: coverage_map.CoverageMap) -> dict:
    """The baseline a coverage run gives (it ran the whole pristine suite):
    its failures kill nothing and are deselected; the whole suite's limit
    derives from its time (coverage.py's overhead included) as
    measure_baseline's does."""
    return {"python conformance": list(coverage.failing_names), "deselect": list(coverage.failing),
            "tests": sorted(coverage.durations),
            "timeouts": {"build": 900.0, "python": max(60.0, 3 * coverage.seconds + 30)}}


# How long the coverage run may take where no baseline measured the suite:
# the whole suite under coverage.py, one process, on a slow machine.
COVERAGE_RUN_LIMIT_S = 3 * 3600


def kept_or_measured(kept: pathlib.Path, load, current, measure, heading: str, summary):
    """A map of the pristine suite kept in `kept`: the kept one where it
    loads and `current(found)` says it is of this tree; else measured again
    (`measure()`, announced by `heading`), saved, and told by `summary(found)`.
    None when the measuring run crashes (RuntimeError)."""
    found = None
    try:
        found = load(kept) if kept.exists() else None
    except (TypeError, ValueError):
        pass  # kept in an older form: measured again
    if found is not None and current(found):
        print(f"  tests by coverage: the map of this tree in {kept}", flush=True)
        return found
    print(heading, flush=True)
    try:
        found = measure()
    except RuntimeError as exc:
        print(f"tests by coverage: {exc}")
        return None
    found.save(kept)
    print(f"  {summary(found)}; kept in {kept}", flush=True)
    return found


def coverage_of(target: Target, ws: Workspace, out: pathlib.Path, baseline: dict) -> coverage_map.CoverageMap | None:
    """The per-test coverage of the target's files under the pristine Python
    suite: kept in out/coverage-<layer>.json and measured again only when
    the tree's source changed (None when the measuring run crashes)."""
    source = mutant_runner.tree_source()
    began = time.monotonic()
    return kept_or_measured(
        out / f"coverage-{target.layer}.json", coverage_map.CoverageMap.load, lambda found: found.source == source,
        lambda: coverage_map.measure(
            {rel: target.place[rel] for rel in target.files},
            ["conformance/python", f"--impl={target.impl}",
             *(f"--deselect={nodeid}" for nodeid in baseline.get("deselect", []))],
            out / "coverage-run", mutant_runner.pristine_env(target, ws, out), target.suites_from or ws.src,
            3 * baseline["timeouts"]["python"] if "python" in baseline["timeouts"] else COVERAGE_RUN_LIMIT_S, source),
        "== tests by coverage: the pristine Python suite once under coverage.py, per test "
        "(child interpreters included)",
        lambda found: f"{len(found.durations)} tests, {sum(len(lines) for lines in found.tests.values())} lines "
                      f"executed by a test, in {time.monotonic() - began:.0f} s")


def own_coverage_of(target: Target, ws: Workspace, out: pathlib.Path) -> coverage_map.CoverageMap | None:
    """The per-test coverage of the target's files under the reference's
    own pytest suite (--own-tests), kept in out/coverage-<layer>-own.json
    as coverage_of's map is."""
    source = mutant_runner.tree_source()
    began = time.monotonic()
    return kept_or_measured(
        out / f"coverage-{target.layer}-own.json", coverage_map.CoverageMap.load, lambda found: found.source == source,
        lambda: coverage_map.measure(
            {rel: target.place[rel] for rel in target.files}, ["reference/python/tests"], out / "coverage-own-run",
            mutant_runner.pristine_env(target, ws, out), target.suites_from or ws.src, COVERAGE_RUN_LIMIT_S, source),
        "== tests by coverage: the reference's own pytest suite once under coverage.py, per test",
        lambda found: f"{len(found.durations)} own tests, {sum(len(lines) for lines in found.tests.values())} lines "
                      f"executed by a test, in {time.monotonic() - began:.0f} s")


def reached_of(target: Target, ws: Workspace, out: pathlib.Path, baseline: dict, jobs: int, source: str
               ) -> reached_map.ReachedMap | None:
    """Which tests reach each switched mutant of the schemata build of `ws`
    (reached_map.py): kept in out/reached-<layer>.json and measured again
    when the tree's source or the mutants' ids change (None when the
    measuring run crashes)."""
    ids = {key: i for s in target.switched.values() for key, i in {**s.ids, **s.probes}.items()}
    return kept_or_measured(
        out / f"reached-{target.layer}.json", reached_map.ReachedMap.load,
        lambda found: found.source == source and found.ids == ids,
        lambda: reached_map.measure(ws, ids, target.layer, target.impl, mutant_runner.pristine_env(target, ws, out),
                                    target.suites_from or ws.src,
                                    out / "reached-run", jobs,
                                    baseline["timeouts"].get("python", COVERAGE_RUN_LIMIT_S), source),
        f"== tests by coverage: which tests reach each of the {len(ids)} switched or probed mutants (both suites "
        f"pristine, per test, child processes included)",
        lambda found: f"{len(found.durations)} tests; {sum(1 for i in ids.values() if i in found.tests)} of the "
                      f"{len(ids)} switched mutants reached by a test, {len(found.outside)} outside any; "
                      f"{found.seconds:.0f} s")


def reusable(earlier: list[Outcome], digests: dict[str, tuple[str, str]], own_tests: bool,
             uncovered_too: bool = False) -> dict[str, Outcome]:
    """The earlier verdicts the incremental mode keeps: of a mutant chosen now,
    with the same line and tests digests, and a verdict (with the own tests'
    where --own-tests asks for it: awaits_own_verdict); a kill while the
    tests that killed it are unchanged (still_killed); a mutant that did not
    compile while its line is unchanged (no test ran)."""
    kept = {}
    for o in earlier:
        if (o.key in digests and o.verdict in ("killed", "survived", "stillborn", "nocoverage")
                and not awaits_own_verdict(o, own_tests, uncovered_too)
                and ((o.line_digest, o.tests_digest) == digests[o.key] or still_killed(o, digests[o.key][0])
                     or (o.verdict == "stillborn" and o.line_digest == digests[o.key][0]))):
            kept[o.key] = dataclasses.replace(o, reused=o.reused or o.commit)
    return kept


def still_killed(o: Outcome, line_digest: str) -> bool:
    """A kill stands while the mutant's line and the sources of the tests
    that killed it are unchanged (Stryker's incremental mode keeps a kill
    so), whatever the other tests that reach it became; the own tests'
    verdict, where it has one, still needs the whole set unchanged."""
    return (o.line_digest == line_digest and not o.own_tests and bool(o.failing_digest)
            and o.failing_digest == mutant_runner.killing_digest(o))


def carried_over(earlier: list[Outcome], digests: dict[str, tuple[str, str]], uncovered_too: bool
                 ) -> tuple[dict[str, Outcome], dict[str, Outcome]]:
    """--own-tests-after: an earlier run's conformance verdicts, at its own
    tree, for the mutants chosen now whose line is unchanged (digests: the
    chosen mutants'). Those it killed (or that did not compile) keep their
    verdict; those it left alive meet the own tests alone now (the owed);
    one that has the own tests' verdict already keeps it. The conformance
    suites are not run again: the verdicts say which tree each came from."""
    kept, owed = {}, {}
    for o in earlier:
        if o.key not in digests or o.verdict not in ("killed", "survived", "stillborn", "nocoverage"):
            continue
        if not o.line_digest or o.line_digest != digests[o.key][0]:
            continue  # its line changed, or the record cannot tell
        if awaits_own_verdict(o, True, uncovered_too):
            owed[o.key] = o
        else:
            kept[o.key] = dataclasses.replace(o, reused=o.reused or o.commit)
    return kept, owed


def reviewed_unrun(chosen: list[mutagen.Mutant], equivalents: dict[str, str],
                   at: tuple[str, str]) -> dict[str, Outcome]:
    """The chosen mutants reviewed as equivalent, as survivors not run (a
    mutation-testing report's Ignored, as Stryker leaves its ignored mutants
    unrun): a review is keyed by the mutant's line, so an edit of that line
    runs the mutant again. Running one costs a survivor's time, every test
    that reaches it; for the core's routing lines that is most of the suites."""
    return {m.key: Outcome(m.key, m.where, m.kind, m.change, m.original, m.mutated, verdict="survived",
                           output_tail=f"not run: a reviewed equivalent: {equivalents[m.key]}",
                           tests_completed=0, commit=at[0], source=at[1])
            for m in chosen if m.key in equivalents}


def named_by(candidates: list[mutagen.Mutant], only: set[str]) -> tuple[list[mutagen.Mutant], set[str]]:
    """The candidates --only names (by key, file:line or file), and the names
    that name none of them."""
    chosen = [m for m in candidates if m.key in only or m.where in only or m.file in only]
    return chosen, only - {m.key for m in chosen} - {m.where for m in chosen} - {m.file for m in chosen}


def chosen_only(spec: str) -> set[str]:
    """--only's mutants: comma-separated keys, file:line places or files
    (every mutant of the file), or @FILE with one per line (a run's
    survivors, say)."""
    if spec.startswith("@"):
        return {line.strip() for line in pathlib.Path(spec[1:]).read_text().splitlines() if line.strip()}
    return {o for o in spec.split(",") if o}


def generate_for(targets: list[Target], beyond_too: bool = False
                 ) -> tuple[list[mutagen.Mutant], dict[str, tuple[int, str]]]:
    """generate() for the first of the workers' targets (copies of one tree),
    its beyond_contract marks shared with every target: each worker's
    verdicts say which of its mutants lie beyond the contract."""
    found = generate(targets[0], beyond_too)
    for target in targets[1:]:
        target.beyond_contract = targets[0].beyond_contract
    return found


def generate(target: Target, beyond_too: bool = False) -> tuple[list[mutagen.Mutant], dict[str, tuple[int, str]]]:
    """The candidates of the target's files, less the parts NOT_MUTATED_PARTS
    leaves out; and per part left out, how many candidates it held and why.
    With `beyond_too` (--own-tests) those parts' candidates are kept too, and
    they and every candidate of target.beyond_files are marked in
    target.beyond_contract with why."""
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
                if not beyond_too:
                    continue
                target.beyond_contract[m.key] = f"{name}: {why}"
            elif rel in target.beyond_files:
                target.beyond_contract[m.key] = target.beyond_files[rel]
            candidates.append(m)
    return candidates, left_out


