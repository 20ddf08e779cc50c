"""ci/test's mutant step: a small random sample of the Python layer's
generated mutants, a new seed each day, within a fixed time budget, so that
a loss of the suite's power shows on every CI run without the GPU machine.

    python -m harness.mutation.ci_mutants --build build [--sample 3] [--budget 150] [--seed S]
                                [--baseline-from DIR]

The Python layer because its mutants need no build (they run against the
extension of --build); the core's and the binding's each cost a rebuild,
which the population runs on the GPU machine measure instead. Its mutants
are switched (--switch: one instrumented copy, NR_MUTANT selects) and its
records are a mutation-testing report, validated as it is read. Tests are
not chosen by coverage here: the coverage run would add a whole suite to
CI's time, which --baseline-from saves.

It fails only on a regression, never on chance: a sampled mutant that
survives although fixtures/faults/killed_mutants.txt (the keys the runs'
records say the suites killed: harness/mutation/mutant_figures.py --record-killed)
lists it, or a baseline that crashes. A survivor no record knows (new code, a new operator) is listed as
unreviewed without failing: whether a random draw finds one would otherwise
decide the day's colour, and the population run is where every survivor is
resolved. Reviewed equivalents are never a failure. Mutants the budget
leaves unrun are reported, not failed: a slow machine is no loss of power.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import pathlib
import signal
import subprocess
import sys

from .. import ROOT, with_root_on_path
from . import mutant_records, mutation_report
KILLED = ROOT / "fixtures" / "faults" / "killed_mutants.txt"


def killed_before() -> set[str]:
    """The keys of the Python-layer mutants a run's record says the suites killed."""
    return {line for line in KILLED.read_text().splitlines() if line and not line.startswith("#")}


def daily_seed(today: datetime.date | None = None) -> int:
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    return int(today.strftime("%Y%m%d"))


def judge(outcomes: list[dict], killed: set[str], equivalents: set[str]) -> tuple[list[dict], list[dict]]:
    """(regressions, unreviewed survivors) among a run's outcomes."""
    survivors = [o for o in outcomes if o["verdict"] == "survived" and o["key"] not in equivalents]
    return ([o for o in survivors if o["key"] in killed], [o for o in survivors if o["key"] not in killed])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    p.add_argument("--results", type=pathlib.Path, default=None)
    p.add_argument("--sample", type=int, default=3)
    p.add_argument("--seed", type=int, default=None, help="default: the UTC date, YYYYMMDD")
    p.add_argument("--budget", type=int, default=150, help="seconds for the whole run (default 150)")
    p.add_argument("--baseline-from", type=pathlib.Path, default=None, metavar="DIR",
                   help="a conformance run's --results DIR on the same build: its Python suite's results "
                        "stand for the baseline, so the budget goes to mutants")
    args = p.parse_args(argv)
    seed = daily_seed() if args.seed is None else args.seed
    results = args.results or args.build / "ci-mutants"
    print(f"ci mutants: {args.sample} Python-layer mutants, seed {seed}, budget {args.budget} s", flush=True)
    cmd = [sys.executable, "-m", "harness", "--build", str(args.build), "--mutants", "auto",
           "--mutate", "python", "--sample", str(args.sample), "--seed", str(seed), "--results", str(results),
           "--switch"]
    if args.baseline_from is not None:
        cmd += ["--baseline-from", str(args.baseline_from)]
    report = results / "mutants" / "auto-python.mutation.json"
    report.unlink(missing_ok=True)  # a report of an earlier run judges nothing
    # SIGTERM at the budget: the runner kills its suites, restores the
    # mutated file and reports the mutants run so far.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=with_root_on_path(os.environ))
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
    regressions, unreviewed = judge(outcomes, killed_before(), set(mutant_records.load_equivalents()))
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
