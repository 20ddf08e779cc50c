"""The kill rates of the generated mutants, from the runs' records and the
summaries kept in doc/.

    python3 -m harness.mutation.mutant_figures                  each layer's population, from its record
    python3 -m harness.mutation.mutant_figures --report R ...   per file and in all, of these records alone
                                                       (reports, shards merged, or older .jsonl)
    python3 -m harness.mutation.mutant_figures --samples        the samples of 2026-12-01, from their summary
    python3 -m harness.mutation.mutant_figures --standing R MAP  which of R's verdicts --incremental R would
                                                       keep at this tree, by MAP's reach (a C++ layer's
                                                       reached-<layer>.json); nothing runs
    python3 -m harness.mutation.mutant_figures --record-killed  adds the Python-layer mutants the records
                                                       say were killed to fixtures/faults/killed_mutants.txt

Records stay out of the source tree, under results/mutant-runs/ (ignored):
population-<layer>.mutation.json (a mutation-testing report,
harness/mutation/mutation_report.py) or, older, population-<layer>.jsonl
(layer cpp, binding, python) is what `bash
harness/gpu/mutants-on-device <layer> all ...` (--mutants auto --mutate
<layer> --own-tests over every candidate) brings back, one JSON line per
mutant with the commit and the source digest it ran at. Per file: the
candidates generated from today's tree (less the parts left out), how many
have a verdict, stillborn, killed by the conformance suites, killed only by
the reference's own tests, reviewed equivalent, survived; and per layer the
kill rate of the conformance suites alone and with the reference's own
tests, with and without the equivalents. A record of mixed sources is
reported as such (its verdicts are of different trees).

What stays in the tree is what code and docs need: a dated summary of a
few KB per measurement (doc/mutant-samples-2026-12-01.json, which
harness/docgen.py renders into doc/measurements.md through --samples) and
the keys of the killed Python-layer mutants, which harness/mutation/ci_mutants.py
reads to tell a regression from a survivor no run has seen.
"""

from __future__ import annotations

import collections
import gzip
import json
import pathlib
import sys
import types

from .. import ROOT
from . import auto_mutants, mutagen, mutant_records, mutation_report, reached_map

RECORDS = ROOT / "results" / "mutant-runs"
SAMPLES = ROOT / "doc" / "mutant-samples-2026-12-01.json"


def outcomes(path: pathlib.Path) -> list[auto_mutants.Outcome]:
    """A record's outcomes: a mutation-testing report or the older JSON lines."""
    return mutation_report.load(path)


def record_of(layer: str) -> pathlib.Path | None:
    """A layer's population record: the report, else the older JSON lines."""
    for name in (f"population-{layer}.mutation.json", f"population-{layer}.jsonl"):
        if (RECORDS / name).exists():
            return RECORDS / name
    return None


def equivalents_with(path: pathlib.Path) -> dict[str, str]:
    """The reviewed equivalents: the record's own (a report's Ignored
    mutants) and fixtures/faults/equivalent_mutants.toml's, which may have
    reviewed more since."""
    document = mutation_report.load_document(path)
    return {**(mutation_report.equivalents_of(document) if document else {}), **auto_mutants.load_equivalents()}


# ---- the samples, from their summary ------------------------------------------------

def files_now(keys: list[str], layer: str) -> dict[str, list[str]]:
    """Per key, the files of today's tree holding a mutant of the same
    operator and change on a line of the same text (the key less its file
    and occurrence): where a survivor's code lives now, [] where it is gone."""
    shape = lambda key: tuple(key.split("|")[1:4])  # noqa: E731  operator, change, line hash
    wanted = {shape(key) for key in keys}
    found: dict[tuple, set[str]] = {}
    for path in sorted(ROOT.glob(auto_mutants.LAYERS[layer])):
        rel = str(path.relative_to(ROOT))
        for m in mutagen.mutants_of(rel, path.read_text()):
            if shape(m.key) in wanted:
                found.setdefault(shape(m.key), set()).add(rel)
    return {key: sorted(found.get(shape(key), ())) for key in keys}


def print_survivors(survivors: list[dict], layer: str) -> None:
    now = files_now([s["key"] for s in survivors], layer)
    for s in survivors:
        _, kind, change, _, _ = s["key"].split("|")
        there = ", ".join(f.rsplit("/", 1)[-1] for f in now[s["key"]]) or "gone from today's tree"
        print(f"  survived: {s['where']} {kind}: {change}  (today: {there})")


def samples() -> None:
    """The samples of 2026-12-01, rendered from their kept summary."""
    s = json.loads(SAMPLES.read_text())
    print(f"Samples measured {s['measured']}; summary {SAMPLES.relative_to(ROOT)} "
          f"(computed at {s['computed_at']}); 'today' is where a survivor's line is in this tree.")
    cpp = s["cpp"]
    print(f"\nC++ core, {sum(cpp['classes'].values())} sampled at {cpp['sampled_at']}:")
    for name, count in sorted(cpp["classes"].items()):
        print(f"{count:4d}  {name}")
    c = cpp["classes"]
    killed = c.get("killed at the first run", 0) + c.get("killed at the re-run", 0)
    survived = c.get("survived at the re-run", 0) + c.get("not re-run", 0)
    equivalent = c.get("reviewed equivalent", 0)
    print(f"kill rate without equivalents: {killed}/{killed + survived} = {100 * killed / (killed + survived):.1f} %")
    print(f"counting equivalents as survivors: {killed}/{killed + survived + equivalent} = "
          f"{100 * killed / (killed + survived + equivalent):.1f} %")
    print_survivors(cpp["survivors"], "cpp")
    py = s["python"]
    rate = 100 * py["killed"] / (py["killed"] + py["survived"] - py["equivalent"])
    print(f"\nPython layer, {py['sampled']} sampled: {py['stillborn']} stillborn, {py['killed']} killed "
          f"({py['killed_at_first_run']} at the first run), {py['survived']} survived "
          f"({py['equivalent']} reviewed equivalent); kill rate without equivalents {rate:.1f} %")
    print_survivors(py["survivors"], "python")
    fresh = py["fresh_run"]
    print(f"fresh run: {fresh['killed']} killed, {fresh['survived']} survived")


# ---- populations, from their records ---------------------------------------------------

def population_rows(layer: str, records: list[auto_mutants.Outcome], equivalents: dict[str, str]
                    ) -> tuple[list[dict], dict]:
    """Per file and for the whole layer: the counts and rates."""
    files = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(auto_mutants.LAYERS[layer])
                   if str(p.relative_to(ROOT)) not in auto_mutants.NOT_MUTATED)
    target = auto_mutants.Target(layer, files, {rel: ROOT / rel for rel in files})
    candidates, _ = auto_mutants.generate(target)
    by_file: dict[str, list[auto_mutants.Outcome]] = {}
    for o in records:
        by_file.setdefault(o.where.rsplit(":", 1)[0], []).append(o)
    rows = []
    for rel in files + sorted(set(by_file) - set(files)):
        rows.append(counts(rel, sum(m.file == rel for m in candidates), by_file.get(rel, []), equivalents))
    total = counts(f"{layer} (all)", len(candidates), records, equivalents)
    return rows, total


def report_figures(paths: list[pathlib.Path]) -> int:
    """Per file and in all, the counts and rates of the given records (reports
    or older JSON lines, merged) alone: no candidates are generated, so a
    record of another tree or a shard reads as it is."""
    records, equivalents = [], {}
    for path in paths:
        records += outcomes(path)
        equivalents.update(equivalents_with(path))
    by_file: dict[str, list[auto_mutants.Outcome]] = {}
    for o in records:
        by_file.setdefault(o.where.rsplit(":", 1)[0], []).append(o)
    rows = [counts(rel, len(found), found, equivalents) for rel, found in sorted(by_file.items())]
    total = counts("(all)", len(records), records, equivalents)
    columns = list(total)
    print(" | ".join(columns))
    for row in rows + [total]:
        print(" | ".join(str(row[c]) for c in columns))
    return 0


def counts(name: str, candidates: int, outcomes: list[auto_mutants.Outcome], equivalents: dict[str, str]) -> dict:
    # Mutants beyond the contract (Outcome.beyond_contract: mutated for the
    # own tests only) count in "with own tests" alone; the conformance
    # columns are of the rest.
    beyond = [o for o in outcomes if o.beyond_contract]
    within = [o for o in outcomes if not o.beyond_contract]
    row = contract_counts(name, candidates, within, equivalents)
    every = contract_counts(name, candidates, outcomes, equivalents) if beyond else row
    row.update({"beyond the contract": len(beyond),
                **{column: every[column] for column in ("killed by own tests", "equivalent",
                                                        "survived", "with own tests", "no own coverage either",
                                                        "not run by own tests")}})
    return row


def contract_counts(name: str, candidates: int, outcomes: list[auto_mutants.Outcome], equivalents: dict[str, str]
                    ) -> dict:
    killed = sum(o.verdict == "killed" for o in outcomes)
    survivors = [o for o in outcomes if o.verdict == "survived"]
    equivalent = sum(o.key in equivalents for o in survivors)
    uncovered = [o for o in outcomes if o.verdict == "nocoverage"]  # by the conformance suites
    # The own tests' kills: of conformance survivors, and of mutants no
    # conformance test reaches (where the own tests had a map of their own).
    own_kills = lambda group: sum(o.own_tests == "killed" for o in group if o.key not in equivalents)  # noqa: E731
    own_of_survivors = own_kills(survivors)
    own = own_of_survivors + own_kills(uncovered)
    left = len(survivors) - equivalent - own_of_survivors
    real = killed + len(survivors) - equivalent + len(uncovered)  # a mutant no test executes is not killed
    rate = lambda k, n: f"{100 * k / n:.1f} %" if n else "n/a"  # noqa: E731
    return {"file": name, "candidates": candidates, "verdicts": len(outcomes),
            "stillborn": sum(o.verdict == "stillborn" for o in outcomes),
            "no coverage": len(uncovered), "killed": killed,
            "killed by own tests": own, "equivalent": equivalent, "survived": left,
            "conformance": rate(killed, real), "conformance (equivalents as survivors)": rate(killed, real + equivalent),
            "with own tests": rate(killed + own, real),
            "no own coverage either": sum(o.own_tests == "nocoverage" for o in uncovered),
            "not run by own tests": sum(not o.own_tests for o in survivors)}


def populations() -> None:
    found = False
    for layer in auto_mutants.LAYERS:
        path = record_of(layer)
        if path is None:
            continue
        found = True
        records = outcomes(path)
        equivalents = equivalents_with(path)
        sources = sorted({(o.commit, o.source) for o in records})
        print(f"\n{layer}: {path.relative_to(ROOT)}, at " + ", ".join(f"{c} (source {s})" for c, s in sources)
              + ("  MIXED: verdicts of different trees" if len({s for _, s in sources}) > 1 else ""))
        rows, total = population_rows(layer, records, equivalents)
        columns = list(total)
        print(" | ".join(columns))
        for row in rows + [total]:
            print(" | ".join(str(row[c]) for c in columns))
    if not found:
        print(f"no population record in {RECORDS.relative_to(ROOT)}/ (population-<layer>.mutation.json "
              f"or .jsonl, "
              f"from harness/gpu/mutants-on-device); --samples gives the samples' figures")


# ---- the killed keys harness/mutation/ci_mutants.py reads ----------------------------------------

def record_killed() -> int:
    """Adds the killed Python-layer mutants of the records (and the test each
    record names as failing first) to fixtures/faults/killed_mutants.txt."""
    layer = auto_mutants.LAYERS["python"].rsplit("/", 1)[0] + "/"
    killed = mutant_records.read_killed()
    before = dict(killed)
    for path in sorted([*RECORDS.glob("**/*.jsonl"), *RECORDS.glob("**/*.mutation.json")]):
        for record in outcomes(path):
            if record.verdict == "killed" and record.key.startswith(layer):
                killed[record.key] = mutant_records.killing_test(record) or killed.get(record.key, "")
    mutant_records.write_killed(killed)
    print(f"{mutant_records.KILLED.relative_to(ROOT)}: {len(killed)} keys ({len(killed.keys() - before.keys())} "
          f"new, {sum(1 for k, t in killed.items() if t and t != before.get(k))} killing tests named anew, "
          f"from {RECORDS.relative_to(ROOT)})")
    return 0


def standing(record: pathlib.Path, reach: pathlib.Path) -> int:
    """What `--incremental record` would keep at this tree, given the reach
    map a run would choose tests by (auto_mutants.digests_of, .reusable):
    the verdicts that still stand, and per file how many must run again."""
    reviewed = mutant_records.load_equivalents()  # recorded anew, unrun, whatever the record says
    earlier = [o for o in mutation_report.load(record) if o.key not in reviewed]
    files = sorted({o.key.split("|", 1)[0] for o in earlier})
    texts = {rel: (ROOT / rel).read_text() for rel in files if (ROOT / rel).is_file()}
    keys = {o.key for o in earlier}
    chosen = [m for rel, text in texts.items() for m in mutagen.mutants_of(rel, text) if m.key in keys]
    target = types.SimpleNamespace(pristine=texts, own_coverage=None)
    text = gzip.decompress(reach.read_bytes()).decode() if reach.suffix == ".gz" else reach.read_text()
    digests = auto_mutants.digests_of(chosen, target, reached_map.ReachedMap(**json.loads(text)))
    kept = auto_mutants.reusable(earlier, digests, own_tests=False)
    run_again = collections.Counter(o.where.rsplit(":", 1)[0] for o in earlier if o.key not in kept)
    print(f"{len(kept)} of the {len(earlier)} verdicts of {record} stand at this tree "
          f"({dict(collections.Counter(o.verdict for o in kept.values()))}); "
          f"{len(earlier) - len(kept)} run again (reviewed equivalents left out):")
    for rel, n in sorted(run_again.items()):
        print(f"  {rel}: {n}")
    return 0


if __name__ == "__main__":
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        print(__doc__)
    elif "--record-killed" in sys.argv[1:]:
        sys.exit(record_killed())
    elif sys.argv[1:2] == ["--report"] and sys.argv[2:]:
        sys.exit(report_figures([pathlib.Path(p) for p in sys.argv[2:]]))
    elif sys.argv[1:2] == ["--standing"] and len(sys.argv) == 4:
        sys.exit(standing(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])))
    elif "--samples" in sys.argv[1:]:
        samples()
    else:
        populations()
