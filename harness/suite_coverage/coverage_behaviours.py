"""Which behaviour reaches which code: per catalogue behaviour, the lines its
tests reach (Python: coverage.py contexts; C++: one gcov run per test), the
behaviours ranked by what they alone reach, and the fewest-reaching ones.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import time
from collections import defaultdict

from ..progress import duration as progress_duration, remaining as progress_remaining

from conformance.python import catalogue

from .. import ROOT
# The registry itself and its binding; not the tests.
MEASURED = ["reference/src/*", "reference/include/*", "reference/python/src/*"]
BUILD = ROOT / "build-coverage"


def shown_name(filename: str) -> str:
    path = pathlib.Path(filename)
    # An installed package (torch's registry) by its package path, even when
    # the virtual environment lives inside the repository (.venv).
    if path.is_relative_to(ROOT) and "site-packages" not in path.parts:
        return str(path.relative_to(ROOT))
    parts = path.parts
    return str(pathlib.Path(*parts[parts.index("torch"):])) if "torch" in parts else filename



def per_behaviour(cov, reports: dict[str, pathlib.Path]) -> dict:
    """For each implementation: each behaviour's lines (file -> line numbers)
    executed by its tests, the lines only it reaches, and per file the
    statements no behaviour reaches."""
    behaviours_of = {}
    for label, path in reports.items():
        for line in (path.read_text().splitlines() if path.exists() else []):
            row = json.loads(line)
            behaviours_of[(label, row["test"])] = row["behaviours"]
    data = cov.get_data()
    reached: dict[str, dict[str, dict[str, set[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    files: dict[str, dict] = {}
    for filename in sorted(data.measured_files()):
        name = shown_name(filename)
        statements = set(cov.analysis2(filename)[1])
        by_test: set[int] = set()
        owner = None
        for lineno, contexts in data.contexts_by_lineno(filename).items():
            for context in contexts:
                static, _, test = context.partition("|")
                kind, _, label = static.partition(":")
                if kind != "conformance" or not test:
                    continue
                owner = label
                by_test.add(lineno)
                for bid in behaviours_of.get((label, test.split("::", 1)[-1]), []):
                    reached[label][bid][name].add(lineno)
        if owner is not None:
            files[name] = {"implementation": owner, "statements": len(statements),
                           "reached by no behaviour": sorted(statements - by_test)}
    cat = catalogue.load()
    return {"files": files, "implementations": {label: rank(cat, per) for label, per in reached.items()}}


def cpp_per_behaviour(out: pathlib.Path, binary: pathlib.Path, xml: pathlib.Path, files: dict,
                      label: str) -> dict:
    """Each C++ test alone, its gcov counters written under a folder of its
    own (GCOV_PREFIX; the build's own counters stay as they are), read with
    gcov's JSON output: the reference's lines each behaviour's tests execute.
    Adds the C++ files' unreached lines to `files`."""
    from .. import matrix

    rows = [r for r in matrix.gtest_rows(xml, label) if r["outcome"] == "pass"] if xml.exists() else []
    work = out / "per-test-gcov"
    if work.exists():
        shutil.rmtree(work)
    gcno = {p.relative_to(BUILD): p for p in BUILD.rglob("*.gcno")}
    wanted = tuple(str(ROOT / m.rstrip("*")) for m in MEASURED)
    reached: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    executable: dict[str, set[int]] = defaultdict(set)
    hit_any: dict[str, set[int]] = defaultdict(set)
    start = time.monotonic()
    for index, row in enumerate(rows, 1):
        prefix = work / str(index)
        env = dict(os.environ, GCOV_PREFIX=str(prefix), GCOV_PREFIX_STRIP="0")
        subprocess.run([str(binary), f"--gtest_filter={row['test']}", "--gtest_brief=1"], cwd=ROOT,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        mirror = prefix / BUILD.relative_to("/")
        gcdas = sorted(mirror.rglob("*.gcda"))
        for gcda in gcdas:  # gcov reads the notes file beside the counters
            source = gcno.get(gcda.relative_to(mirror).with_suffix(".gcno"))
            if source and not gcda.with_suffix(".gcno").exists():
                gcda.with_suffix(".gcno").symlink_to(source)
        lines = gcov_lines(gcdas, wanted)
        for name, (counted, hit) in lines.items():
            executable[name] |= counted
            hit_any[name] |= hit
            for bid in row["behaviours"]:
                reached[bid][name] |= hit
        shutil.rmtree(prefix)
        if index % 10 == 0 or index == len(rows):
            elapsed = time.monotonic() - start
            print(f"  [{index}/{len(rows)}] C++ tests measured one by one "
                  f"(elapsed {progress_duration(elapsed)}, {progress_remaining(index, len(rows), elapsed)})",
                  flush=True)
    cat = catalogue.load()
    for name in sorted(executable):
        files[name] = {"implementation": f"{label} (C++)", "statements": len(executable[name]),
                       "reached by no behaviour": sorted(executable[name] - hit_any[name])}
    return rank(cat, reached)


def gcov_lines(gcdas: list[pathlib.Path], wanted: tuple[str, ...]) -> dict[str, tuple[set[int], set[int]]]:
    """gcov's JSON for these counter files: per source file of ours, the lines
    with code and the lines executed."""
    found: dict[str, tuple[set[int], set[int]]] = {}
    if not gcdas:
        return found
    proc = subprocess.run(["gcov", "--json-format", "--stdout", *map(str, gcdas)], cwd=gcdas[0].parent,
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        for entry in json.loads(line).get("files", []):
            path = entry["file"]
            if not path.startswith("/"):
                path = str((BUILD / path).resolve())
            if not path.startswith(wanted):
                continue
            name = str(pathlib.Path(path).relative_to(ROOT))
            counted, hit = found.setdefault(name, (set(), set()))
            for ln in entry["lines"]:
                counted.add(ln["line_number"])
                if ln["count"]:
                    hit.add(ln["line_number"])
    return found


def rank(cat: dict, reached: dict[str, dict[str, set[int]]]) -> dict:
    """Per behaviour: the lines its tests execute and those only it reaches,
    fewest lines first."""
    entries = {}
    for bid, by_file in reached.items():
        mine = {(f, n) for f, ns in by_file.items() for n in ns}
        others = set()
        for other, their in reached.items():
            if other != bid:
                others |= {(f, n) for f, ns in their.items() for n in ns}
        entries[bid] = {"title": cat[bid].title, "profile": cat[bid].profile,
                        "level": getattr(cat[bid], "level", None) or "required",
                        "lines": len(mine), "only this behaviour": len(mine - others),
                        "by file": {f: sorted(ns) for f, ns in by_file.items()}}
    return dict(sorted(entries.items(), key=lambda kv: kv[1]["lines"]))


def fewest(behaviours: dict, label: str, count: int = 5) -> list[tuple[str, int]]:
    """The registry-profile behaviours whose tests execute the fewest lines."""
    entries = behaviours["implementations"].get(label, {})
    return [(bid, e["lines"]) for bid, e in entries.items() if e["profile"] == "registry"][:count]
