"""The kill rates of the generated mutants, recomputed from the records.

    python3 harness/mutant-runs/figures.py              the populations
    python3 harness/mutant-runs/figures.py --samples    the samples of 2026-12-01

Populations: population-<layer>.jsonl (layer cpp, binding, python), the
verdicts of `harness/gpu/mutants-on-device <layer> all ...` (--mutants auto
--mutate <layer> --own-tests over every candidate), one JSON line per mutant
with the commit and the source digest it ran at. Per file: the candidates
generated from today's tree (less the parts left out), how many have a
verdict, stillborn, killed by the conformance suites, killed only by the
reference's own tests, reviewed equivalent, survived; and per layer the kill
rate of the conformance suites alone and with the reference's own tests,
with and without the equivalents. A record of mixed sources is reported as
such (its verdicts are of different trees).
"""

import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "harness"))
import auto_mutants  # noqa: E402
import mutagen  # noqa: E402

SAMPLED_AT = "d6d6b9d"


def outcomes(name: str) -> list[auto_mutants.Outcome]:
    return [auto_mutants.Outcome(**json.loads(line)) for line in (HERE / name).read_text().splitlines()]


def keys_left_out(text_of) -> set[str]:
    keys = set()
    for rel, reasons in auto_mutants.NOT_MUTATED_PARTS.items():
        if rel.endswith(".cpp"):
            text = text_of(rel)
            lines = set().union(*mutagen.part_lines(rel, text, set(reasons)).values())
            keys |= {m.key for m in mutagen.mutants_of(rel, text) if m.line in lines}
    return keys


def samples() -> None:
    """The samples of 2026-12-01, with their survivors re-run after the gaps
    were closed.

    C++: cpp-sample-200-seed-1.jsonl, the verdicts of `--mutants auto --sample
    200 --seed 1` at commit d6d6b9d on the lent 16-core machine (cpp-run-1.log,
    cpp-run-2.log: `harness/gpu/mutants-on-device`); cpp-survivors-rerun.jsonl,
    `--only @cpp-survivors.txt` at commit f2de216 there. Python layer:
    python-sample-100-seed-1.jsonl, `--mutants auto --mutate python --sample 100
    --seed 1 --jobs 2` at commit feeb34e on the 2-core machine;
    python-survivors-rerun.jsonl, `--only @python-survivors.txt` after the node
    forms were tested; python-fresh-run.jsonl, the same command again from
    scratch at commit e2f9564. Each C++ mutant
    of the sample is put in one class, from the verdicts and from today's tree:
    the parts left out (auto_mutants.NOT_MUTATED_PARTS, in today's source or in
    d6d6b9d's), the reviewed equivalents, and mutants whose line is gone.
    """
    equivalents = auto_mutants.load_equivalents()
    rerun = {o.key: o for o in outcomes("cpp-survivors-rerun.jsonl")}
    then = lambda rel: subprocess.run(["git", "show", f"{SAMPLED_AT}:{rel}"], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout
    left = keys_left_out(lambda rel: (ROOT / rel).read_text()) | keys_left_out(then)
    today = {m.key for p in (ROOT / "reference" / "src").glob("*.cpp")
             for m in mutagen.mutants_of(str(p.relative_to(ROOT)), p.read_text())}
    classes: dict[str, list[auto_mutants.Outcome]] = {}
    for o in outcomes("cpp-sample-200-seed-1.jsonl"):
        if o.verdict == "stillborn":
            c = "stillborn"
        elif o.key in left:
            c = "in a part left out"
        elif o.verdict == "killed":
            c = "killed at the first run"
        elif o.key in equivalents:
            c = "reviewed equivalent"
        elif o.key in rerun:
            c = f"{rerun[o.key].verdict} at the re-run"
        elif o.key not in today:
            c = "its code deleted"
        else:
            c = "not re-run"
        classes.setdefault(c, []).append(o)
    for c, members in sorted(classes.items()):
        print(f"{len(members):4d}  {c}")
    killed = len(classes.get("killed at the first run", [])) + len(classes.get("killed at the re-run", []))
    survived = len(classes.get("survived at the re-run", [])) + len(classes.get("not re-run", []))
    equivalent = len(classes.get("reviewed equivalent", []))
    print(f"kill rate without equivalents: {killed}/{killed + survived} = {100 * killed / (killed + survived):.1f} %")
    print(f"counting equivalents as survivors: {killed}/{killed + survived + equivalent} = "
          f"{100 * killed / (killed + survived + equivalent):.1f} %")
    for o in classes.get("survived at the re-run", []) + classes.get("not re-run", []):
        print(f"  survived: {o.where} {o.kind}: {o.change}")
    print("\nPython layer:")
    rerun = {o.key: o for o in outcomes("python-survivors-rerun.jsonl")}
    sample = outcomes("python-sample-100-seed-1.jsonl")
    final = [rerun.get(o.key, o) if o.verdict == "survived" else o for o in sample]
    stats = auto_mutants.figures(final, equivalents)
    print(f"{stats['sampled']} sampled: {stats['stillborn']} stillborn, {stats['killed']} killed "
          f"({sum(o.verdict == 'killed' for o in sample)} at the first run), {stats['survived']} survived "
          f"({stats['equivalent']} reviewed equivalent); kill rate "
          f"{auto_mutants.percent(stats['kill_rate'])}, without equivalents "
          f"{auto_mutants.percent(stats['kill_rate_without_equivalents'])}")
    for o in final:
        if o.verdict == "survived":
            print(f"  survived: {o.where} {o.kind}: {o.change}")
    fresh = auto_mutants.figures(outcomes("python-fresh-run.jsonl"), equivalents)
    print(f"fresh run: {fresh['killed']} killed, {fresh['survived']} survived; kill rate without equivalents "
          f"{auto_mutants.percent(fresh['kill_rate_without_equivalents'])}")


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


def counts(name: str, candidates: int, outcomes: list[auto_mutants.Outcome], equivalents: dict[str, str]) -> dict:
    killed = sum(o.verdict == "killed" for o in outcomes)
    survivors = [o for o in outcomes if o.verdict == "survived"]
    equivalent = sum(o.key in equivalents for o in survivors)
    own = sum(o.own_tests == "killed" for o in survivors if o.key not in equivalents)
    left = len(survivors) - equivalent - own
    real = killed + own + left
    rate = lambda k, n: f"{100 * k / n:.1f} %" if n else "n/a"  # noqa: E731
    return {"file": name, "candidates": candidates, "verdicts": len(outcomes),
            "stillborn": sum(o.verdict == "stillborn" for o in outcomes), "killed": killed,
            "killed by own tests": own, "equivalent": equivalent, "survived": left,
            "conformance": rate(killed, real), "conformance (equivalents as survivors)": rate(killed, real + equivalent),
            "with own tests": rate(killed + own, real),
            "not run by own tests": sum(not o.own_tests for o in survivors)}


def populations() -> None:
    equivalents = auto_mutants.load_equivalents()
    found = False
    for layer in auto_mutants.LAYERS:
        path = HERE / f"population-{layer}.jsonl"
        if not path.exists():
            continue
        found = True
        records = outcomes(path.name)
        sources = sorted({(o.commit, o.source) for o in records})
        print(f"\n{layer}: {path.name}, at " + ", ".join(f"{c} (source {s})" for c, s in sources)
              + ("  MIXED: verdicts of different trees" if len({s for _, s in sources}) > 1 else ""))
        rows, total = population_rows(layer, records, equivalents)
        columns = list(total)
        print(" | ".join(columns))
        for row in rows + [total]:
            print(" | ".join(str(row[c]) for c in columns))
    if not found:
        print("no population record yet (population-<layer>.jsonl); --samples gives the samples' figures")


if __name__ == "__main__":
    samples() if "--samples" in sys.argv[1:] else populations()
