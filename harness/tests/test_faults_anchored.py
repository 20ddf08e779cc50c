"""Every seeded fault applies to today's tree: its `find` occurs exactly once
in its file, and the behaviour it breaks is in the catalogue. A refactor that
moves or rewrites code a fault names fails here, in seconds, instead of as a
STALE fault at the next ./harness/run --mutants."""

from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_seeded_fault_applies_once_and_names_a_behaviour():
    faults = tomllib.loads((ROOT / "fixtures/faults/faults.toml").read_text())["fault"]
    behaviours = {b["id"] for b in
                  tomllib.loads((ROOT / "conformance/catalogue.toml").read_text())["behaviour"]}
    problems = []
    names = [f["name"] for f in faults]
    problems += [f"{n}: named twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for f in faults:
        count = (ROOT / f["file"]).read_text().count(f["find"])
        if count != 1:
            problems.append(f"{f['name']}: `find` occurs {count} times in {f['file']}")
        if f["breaks"] not in behaviours:
            problems.append(f"{f['name']}: breaks {f['breaks']!r}, not in the catalogue")
    assert problems == []
