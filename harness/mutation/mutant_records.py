"""The records of a mutant run: each mutant's outcome (one JSON line per
mutant, as it comes, so that an interrupted run resumes), the reviewed
equivalents, the figures computed from outcomes, and the reports.

Shared by --mutants (seeded faults), --mutants auto, the GPU runner and
harness/mutation/mutant_figures.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import statistics
import subprocess
import tomllib
from dataclasses import asdict, dataclass, field

from . import mutagen  # noqa: F401 (annotations)
from . import mutants
from .mutants import ROOT
from ..progress import duration

EQUIVALENTS = ROOT / "fixtures" / "faults" / "equivalent_mutants.toml"


TARGET_KILL_RATE = 0.90


@dataclass
class Outcome:
    key: str
    where: str
    kind: str
    change: str
    original: str
    mutated: str
    verdict: str = ""            # killed, survived, stillborn, nocoverage (by the conformance suites)
    killed_by: str = ""          # c++ conformance / python conformance
    failing: list[str] = field(default_factory=list)
    output_tail: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # build, c++, python, own, total
    commit: str = ""             # the tree it ran at (git describe --always --dirty)
    source: str = ""             # what its verdict depends on (tree_source)
    # --own-tests: a mutant the conformance suites did not kill run against
    # the reference's own tests too: killed, survived, or nocoverage (no own
    # test reaches it, by the own tests' coverage map); "" when not run.
    own_tests: str = ""
    own_failing: list[str] = field(default_factory=list)
    # The tree the own tests ran at: commit and source as above. Another than
    # the conformance verdict's only where --own-tests-after carried that
    # verdict over from an earlier record (its line unchanged).
    own_commit: str = ""
    own_source: str = ""
    # Why no conformance test can reach it, where it lies in a file or part
    # left out of the conformance population (auto_mutants.NOT_MUTATED,
    # NOT_MUTATED_PARTS) and was mutated for the own tests (--own-tests): it
    # counts in the "with own tests" figure only. "" for every other mutant.
    beyond_contract: str = ""
    # Tests chosen by coverage: the tests that execute the mutant's line in
    # the pristine run ([] where no coverage was measured), and how many tests
    # ran before the verdict (-1: not counted).
    covered_by: list[str] = field(default_factory=list)
    tests_completed: int = -1
    # The incremental mode's keys: digests of the mutant's line and of the
    # sources of the tests its verdict depends on; `reused`: the commit a
    # verdict was taken over from instead of run again ("" when run).
    line_digest: str = ""
    tests_digest: str = ""
    reused: str = ""
    # A killed mutant's: a digest of the sources of the tests that failed
    # (reached_map.tests_sources). While they and its line are unchanged the
    # kill stands, whatever other tests that reach it became; "" where a
    # crash or a timeout killed it (no one test to name).
    failing_digest: str = ""


def load_equivalents(path: pathlib.Path = EQUIVALENTS) -> dict[str, str]:
    """Reviewed equivalent mutants: key -> reason. Each entry needs a reason,
    and each mutant is reviewed once."""
    if not path.exists():
        return {}
    with path.open("rb") as f:
        entries = tomllib.load(f).get("equivalent", [])
    table = {}
    for entry in entries:
        if not entry.get("reason", "").strip():
            raise ValueError(f"{path}: equivalent mutant {entry.get('key')!r} gives no reason")
        if entry["key"] in table:  # one review per mutant: a second would be counted twice
            raise ValueError(f"{path}: equivalent mutant {entry['key']!r} is reviewed twice")
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
    uncovered = [o for o in outcomes if o.verdict == "nocoverage"]
    equivalent = [o for o in survived if o.key in equivalents]
    # A mutant no test executes is not killed: it counts as a survivor would.
    viable = len(killed) + len(survived) + len(uncovered)
    real = viable - len(equivalent)
    return {
        "sampled": len(outcomes), "stillborn": len(stillborn), "killed": len(killed),
        "survived": len(survived), "equivalent": len(equivalent), "no_coverage": len(uncovered),
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


def tree_commit() -> str:
    """The commit the working tree is at, "-dirty" when it has changes."""
    found = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=ROOT,
                           capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else "unknown"


# What a verdict depends on: the implementation and the suites, not the
# harness, its records or the reviewed equivalents.
VERDICT_DEPENDS_ON = ("reference/", "conformance/", "fixtures/")
VERDICT_IGNORES = ("fixtures/faults/",)


def tree_source() -> str:
    """A digest of what a verdict depends on (VERDICT_DEPENDS_ON) as the
    working tree has it: committing a population record, or a harness
    change, keeps the verdicts so far valid; a change of the reference or
    the suites does not."""
    digest = hashlib.sha1()
    for rel in sorted(mutants.tree_files()):
        if rel.startswith(VERDICT_DEPENDS_ON) and not rel.startswith(VERDICT_IGNORES) and (ROOT / rel).is_file():
            digest.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def marked_anew(outcomes: dict[str, Outcome], beyond: dict[str, str]) -> dict[str, Outcome]:
    """The verdicts a run carries in (kept, resumed, reviewed equivalents),
    each marked beyond the contract or not as this run's target marks it
    (`beyond`: key -> why): a file or part named beyond the contract since
    the verdict was recorded keeps its verdict and takes the new mark."""
    return {key: dataclasses.replace(o, beyond_contract=beyond.get(key, "")) for key, o in outcomes.items()}


def awaits_own_verdict(outcome: Outcome, own_tests: bool, uncovered_too: bool = False) -> bool:
    """Whether --own-tests still owes `outcome` the own tests' verdict: a
    conformance survivor's, and with `uncovered_too` (the own tests have a
    coverage map of their own) a mutant no conformance test reaches."""
    owed = ("survived", "nocoverage") if uncovered_too else ("survived",)
    return own_tests and outcome.verdict in owed and not outcome.own_tests


def resumed(records: pathlib.Path, chosen: list[mutagen.Mutant], source: str = "",
            own_tests: bool = False, uncovered_too: bool = False) -> dict[str, Outcome]:
    """The verdicts an interrupted run recorded for mutants of this sample,
    of this source (tree_source: a verdict of another tree may not hold; or
    whose own tests' verdict is of this source, its conformance verdict
    carried over by --own-tests-after), with the own tests' verdict where
    --own-tests asks for one (awaits_own_verdict)."""
    keys = {m.key for m in chosen}
    done = {}
    if records.exists():
        for line in records.read_text().splitlines():
            outcome = Outcome(**json.loads(line))
            of_this_tree = not source or source in (outcome.source, outcome.own_source)
            if outcome.key in keys and of_this_tree and not awaits_own_verdict(outcome, own_tests, uncovered_too):
                done[outcome.key] = outcome
    return done


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
            f"{stats['stillborn']} stillborn, {stats.get('no_coverage', 0)} no coverage, {stats['killed']} killed ({stats['killed_by_cpp']} by the C++ "
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


# ---- fixtures/faults/killed_mutants.txt: what ci_mutants tells a regression by ------------

KILLED = ROOT / "fixtures" / "faults" / "killed_mutants.txt"
KILLED_HEAD = """\
# The generated mutants of the Python layer that a run of the conformance
# suites killed, one a line: its key (mutagen.py's), then, after a tab, the
# conformance test that failed first in that run where the record names one.
# harness/mutation/ci_mutants.py samples them, runs those tests first and fails
# when one of them survives. Written by python3 -m harness.mutation.mutant_figures
# --record-killed from the records under results/mutant-runs/ (it only adds).
"""


def read_killed() -> dict[str, str]:
    """killed_mutants.txt: each key, with the test that killed it ("" where
    no record named one)."""
    if not KILLED.exists():
        return {}
    killed = {}
    for line in KILLED.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, test = line.partition("\t")
            killed[key] = test
    return killed


def write_killed(killed: dict[str, str]) -> None:
    KILLED.write_text(KILLED_HEAD + "".join(f"{key}\t{test}\n" if test else f"{key}\n"
                                            for key, test in sorted(killed.items())))


def killing_test(outcome: Outcome) -> str:
    """The Python conformance test a killed outcome names as failing ("" if none)."""
    return next((t for t in outcome.failing if t.startswith("conformance/python/") and "::" in t), "")

