"""ci/test's mutant step: a small random sample of the Python layer's
generated mutants that a record says the conformance suites killed, a new
seed each day, within a fixed time budget, so that a loss of the suite's
power shows on every CI run without the GPU machine.

    python -m harness.mutation.ci_mutants --build build [--sample 5] [--budget 150] [--seed S]
                                [--baseline-from DIR]

The sample is drawn from fixtures/faults/killed_mutants.txt (written from the
population runs' records: harness/mutation/mutant_figures.py --record-killed),
among the keys today's generator still makes (a key holds a digest of its
line: an edited line is another mutant). A random draw from every candidate
judged nothing in CI's budget: a survivor runs the whole Python suite
(3 to 4 min), and most draws held one; finding new survivors is what the
population runs are for. The suite stops at its first failure, and the tests
the records name as each sampled mutant's first failure run first
($NR_CONFORMANCE_RUN_FIRST, read by conformance/python/conftest.py), so a
mutant still killed costs a pytest start and a test or two, and only one
that is no longer killed runs the whole suite.

The Python layer because its mutants need no build (they run against the
extension of --build); the core's and the binding's need the schemata build,
which the population runs on the GPU machine measure instead. Its mutants
are switched (--switch: one instrumented copy, NR_MUTANT selects) and its
records are a mutation-testing report, validated as it is read.
--baseline-from: the conformance run before it stands for the baseline.

It fails only on a regression: a sampled mutant that survives (reviewed
equivalents never count), or a baseline that crashes. Mutants the budget
leaves unrun are reported, not failed: a slow machine is no loss of power.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import pathlib
import random
import signal
import subprocess
import sys

from .. import ROOT, with_root_on_path
from . import mutagen, mutant_records, mutation_report

# The tests to run first, one node id a line (conformance/python/conftest.py).
RUN_FIRST = "NR_CONFORMANCE_RUN_FIRST"


def todays(keys: set[str]) -> set[str]:
    """Those of `keys` that today's generator still makes from today's files."""
    made = set()
    for rel in sorted({key.split("|", 1)[0] for key in keys}):
        path = ROOT / rel
        if path.exists():
            made |= {m.key for m in mutagen.mutants_of(rel, path.read_text())}
    return keys & made


def draw(killed: dict[str, str], n: int, seed: int) -> list[str]:
    """The day's sample: n of the killed keys today's tree still has."""
    present = sorted(todays(set(killed)))
    return random.Random(seed).sample(present, min(n, len(present)))


def daily_seed(today: datetime.date | None = None) -> int:
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    return int(today.strftime("%Y%m%d"))


def judge(outcomes: list[dict], killed: dict[str, str] | set[str], equivalents: set[str]) -> tuple[list[dict], list[dict]]:
    """(regressions, unreviewed survivors) among a run's outcomes."""
    survivors = [o for o in outcomes if o["verdict"] == "survived" and o["key"] not in equivalents]
    return ([o for o in survivors if o["key"] in killed], [o for o in survivors if o["key"] not in killed])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    p.add_argument("--results", type=pathlib.Path, default=None)
    p.add_argument("--sample", type=int, default=5)
    p.add_argument("--seed", type=int, default=None, help="default: the UTC date, YYYYMMDD")
    p.add_argument("--budget", type=int, default=150, help="seconds for the whole run (default 150)")
    p.add_argument("--baseline-from", type=pathlib.Path, default=None, metavar="DIR",
                   help="a conformance run's --results DIR on the same build: its Python suite's results "
                        "stand for the baseline, so the budget goes to mutants")
    args = p.parse_args(argv)
    seed = daily_seed() if args.seed is None else args.seed
    results = args.results or args.build / "ci-mutants"
    killed = mutant_records.read_killed()  # key -> the test that failed first, or ""
    sample = draw(killed, args.sample, seed)
    print(f"ci mutants: {len(sample)} of the Python-layer mutants a record says were killed "
          f"({len(killed)} listed), seed {seed}, budget {args.budget} s", flush=True)
    if not sample:
        print("ci mutants: none of fixtures/faults/killed_mutants.txt's keys is among today's mutants: "
              "nothing to judge (record a population run's kills: mutant_figures.py --record-killed)")
        return 0
    results.mkdir(parents=True, exist_ok=True)
    keys = results / "sample-keys.txt"
    keys.write_text("".join(f"{key}\n" for key in sample))
    cmd = [sys.executable, "-m", "harness", "--build", str(args.build), "--mutants", "auto",
           "--mutate", "python", "--only", f"@{keys}", "--seed", str(seed), "--results", str(results),
           "--switch"]
    if args.baseline_from is not None:
        cmd += ["--baseline-from", str(args.baseline_from)]
    first = list(dict.fromkeys(killed[key] for key in sample if killed[key]))
    report = results / "mutants" / "auto-python.mutation.json"
    report.unlink(missing_ok=True)  # a report of an earlier run judges nothing
    # SIGTERM at the budget: the runner kills its suites, restores the
    # mutated file and reports the mutants run so far.
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**with_root_on_path(os.environ), RUN_FIRST: "\n".join(first)})
    try:
        status = proc.wait(timeout=args.budget)
    except subprocess.TimeoutExpired:
        print(f"ci mutants: the budget of {args.budget} s ran out; judging the mutants run so far", flush=True)
        proc.send_signal(signal.SIGTERM)
        status = None
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if not report.exists():
        if status is None:
            print("ci mutants: no mutant ran within the budget (the baseline took it all): nothing to judge")
            return 0
        print(f"ci mutants: FAILED: the run ended (exit {status}) without a report: the baseline crashed")
        return 1
    # The run's records (a mutation-testing report, validated as it is read).
    document = mutation_report.load_document(report)
    outcomes = [dataclasses.asdict(o) for o in mutation_report.outcomes_of(document)]
    regressions, unreviewed = judge(outcomes, killed, set(mutant_records.load_equivalents()))
    verdicts = [o["verdict"] for o in outcomes]
    print(f"ci mutants: {len(outcomes)} of {document['config'].get('chosen', '?')} run: "
          f"{verdicts.count('killed')} killed, {verdicts.count('survived')} survived, "
          f"{verdicts.count('stillborn')} stillborn, {verdicts.count('nocoverage')} not covered")
    for o in unreviewed:
        print(f"  unreviewed survivor (no record knows it; not a failure): {o['where']} {o['kind']}: "
              f"{o['change']}\n      {o['original']}\n   -> {o['mutated']}")
    for o in regressions:
        print(f"  REGRESSION: {o['where']} {o['kind']}: {o['change']} survives; a record says it was killed"
              f"\n      {o['original']}\n   -> {o['mutated']}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
