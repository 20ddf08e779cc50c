"""./harness/run --mutants: the suite's power against seeded faults.

Each fault of fixtures/faults/faults.toml (a `find` that must occur exactly
once in its file, and its `replace`) is applied in turn to a workspace's copy
of the tree (build-mutants/src; --jobs N: N workspaces side by side), run
against the conformance suites, and the file restored. Like a generated
mutant (mutant_runner), ordered by file so each rebuild recompiles one
object (ccache gives the restored one back): a fault of the core rebuilds
and meets the C++ suite, then the Python suite; a fault of the binding
rebuilds and meets the Python suite; a fault of the Python layer rebuilds
nothing. A fault is killed when any test fails (whatever its level), or a
suite crashes or hangs. Every fault must be killed; a fault whose `find`
text is not there exactly once is an error too.
"""

from __future__ import annotations

import dataclasses
import os
import time
import tomllib

import mutant_runner
import mutants
from mutant_records import figures
from mutant_runner import Target
from progress import duration

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
    kind: str = "seeded"

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
        if text.count(self.find) != 1:
            raise ValueError(f"{self.key}: `find` occurs {text.count(self.find)} times in {self.file}")
        return text.replace(self.find, self.replace)


def run(args) -> int:
    out = args.results / "mutants"
    out.mkdir(parents=True, exist_ok=True)
    faults = load_faults()
    only = {n for n in args.only.split(",") if n}
    if only:
        faults = [f for f in faults if f["name"] in only]
    begin = time.monotonic()
    # Faults of the Python layer alone need no build of the workspaces: their
    # suite imports the extension of --build.
    python_only = all(f["file"].endswith(".py") for f in faults)
    spaces = mutants.workspaces(args.jobs, args.build if python_only else None)
    jobs_each = max(1, (os.cpu_count() or 2) // len(spaces))
    print(f"== {len(faults)} seeded faults, {len(spaces)} at a time", flush=True)
    if not mutant_runner.prepare(spaces, jobs_each, build=not python_only):
        return 1
    stale, chosen = [], []
    for f in sorted(faults, key=lambda f: f["file"]):  # by file: consecutive faults rebuild one object
        count = (mutants.SRC / f["file"]).read_text().count(f["find"])
        if count != 1:
            stale.append((f, f"`find` occurs {count} times in {f['file']}"))
            print(f"  {f['name']:40s} STALE", flush=True)
        else:
            chosen.append(SeededFault(f["file"], f["name"], f["breaks"], f["find"], f["replace"]))
    targets = [Target("faults", sorted({f.file for f in chosen}), {f.file: ws.src / f.file for f in chosen},
                      needs_build=not python_only) for ws in spaces]
    baseline = mutant_runner.measure_baseline(targets[0], out, ws=spaces[0])
    if baseline is None:
        return 1
    print(f"  baseline done after {duration(time.monotonic() - begin)}; now each fault", flush=True)
    outcomes = mutant_runner.run_all(chosen, {}, out / "faults.jsonl", baseline, False, False,
                                     [(ws, t, out if ws == mutants.FIRST else out / ws.root.name)
                                      for ws, t in zip(spaces, targets)])
    if not python_only:
        mutant_runner.build_all(spaces, jobs_each)  # leave the copies' builds pristine
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
             f"({duration(time.monotonic() - begin)}, {len(spaces)} workspaces).", "",
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
    return 0 if killed == len(rows) else 1
