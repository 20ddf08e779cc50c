#!/usr/bin/env python3
"""The generated sections of doc/measurements.md: each lies between
`<!-- NAME:begin ... -->` and `<!-- NAME:end -->` and is written by one
command, never by hand.

    python3 harness/docgen.py            rewrites the sections this script generates
    python3 harness/docgen.py --check    exit 1 if one of them differs from what its command gives now
    python3 harness/docgen.py --list     every generated section and the command that writes it

This script generates the mutant figures (from the records in
harness/mutant-runs/ and today's tree, by figures.py); the benchmark table and
the GPU run's summary are written by their own runs, whose results stay under
results/ (the commands are in SECTIONS).
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

import doc_sections

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "doc" / "measurements.md"

# name -> (the command that writes the section, whether this script runs it)
SECTIONS = {
    "mutant-figures": ("python3 harness/docgen.py  (runs python3 harness/mutant-runs/figures.py)", True),
    "bench-table": ("harness/bench/run  (harness/bench/report.py --readme doc/measurements.md)", False),
    "gpu-run": ("python3 harness/gpu/report.py --from results/gpu/out --doc doc/measurements.md", False),
}


def mutant_figures() -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "harness" / "mutant-runs" / "figures.py")],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"docgen: figures.py failed ({proc.returncode}):\n{proc.stderr}")
    return "```\n" + proc.stdout.rstrip("\n") + "\n```\n"


GENERATORS = {"mutant-figures": mutant_figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 on a difference")
    parser.add_argument("--list", action="store_true", help="list the generated sections and their commands")
    parser.add_argument("--doc", type=pathlib.Path, default=DOC, help="the file (default doc/measurements.md)")
    args = parser.parse_args()
    text = args.doc.read_text()
    if args.list:
        for name, (command, _) in SECTIONS.items():
            try:
                doc_sections.span(text, name)
                print(f"{name}: {command}")
            except doc_sections.MarkerError as error:
                print(f"{name}: {command}  (markers missing or repeated: {error})")
        return 0
    stale = []
    for name, generate in GENERATORS.items():
        try:
            current = doc_sections.body(text, name, str(args.doc))
        except doc_sections.MarkerError as error:
            print(f"docgen: {error}", file=sys.stderr)
            return 2
        new = generate()
        if current != new:
            stale.append(name)
            text = doc_sections.replace(text, name, new, str(args.doc))
    if args.check:
        for name in stale:
            print(f"docgen: the {name} section of {args.doc} is stale; run: {SECTIONS[name][0]}",
                  file=sys.stderr)
        return 1 if stale else 0
    args.doc.write_text(text)
    print(f"docgen: {args.doc}: " + (f"rewrote {', '.join(stale)}" if stale else "up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
