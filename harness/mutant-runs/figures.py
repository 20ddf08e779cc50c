"""The kill rates of the generated-mutant samples of 2026-12-01, with their
survivors re-run after the gaps were closed.

    python3 harness/mutant-runs/figures.py

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


def main() -> None:
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


if __name__ == "__main__":
    main()
