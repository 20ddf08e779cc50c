"""The generated sections of doc/: each lies between `<!-- NAME:begin ... -->`
and `<!-- NAME:end -->` (harness/doc_sections.py) and is written by one
command, never by hand.

    python3 -m harness.docgen                        rewrites the sections this script generates
    python3 -m harness.docgen --check                exit 1 if one of them differs from what its command gives now
    python3 -m harness.docgen --list                 every generated section, its doc and the command that writes it
    python3 -m harness.docgen --matrix RESULTS.json  writes doc/conformance.md's latest-matrix section from a run

This script generates, from the tree alone (so --check can judge them): the
mutant figures (the samples' summary kept in doc/, and where their
survivors' code is in today's tree, by harness/mutation/mutant_figures.py --samples)
and the catalogue's counts (conformance/catalogue.toml, seeds.txt). The
latest matrix comes from a run's results.json (--matrix); the benchmark
table and the GPU run's summary are written by their own runs. Their
results stay under results/ (the commands are in SECTIONS).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

from conformance.python import catalogue

from . import ROOT, doc_sections
MEASUREMENTS = ROOT / "doc" / "measurements.md"
CONFORMANCE = ROOT / "doc" / "conformance.md"


def mutant_figures() -> str:
    proc = subprocess.run([sys.executable, "-m", "harness.mutation.mutant_figures", "--samples"],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"docgen: mutant_figures.py failed ({proc.returncode}):\n{proc.stderr}")
    return "```\n" + proc.stdout.rstrip("\n") + "\n```\n"


def catalogue_counts() -> str:
    behaviours = list(catalogue.load().values())
    count = lambda test: sum(map(test, behaviours))  # noqa: E731
    return (f"Today's catalogue: {len(behaviours)} behaviours, "
            f"{count(lambda b: b.profile == 'registry')} of the registry profile and "
            f"{count(lambda b: b.profile == 'platform')} of the *platform* profile; "
            f"{count(lambda b: b.implied)} implied by the seed file without being tested there, "
            f"{count(lambda b: b.level == 'recommended')} recommended; "
            f"{len(catalogue.seed_tests())} seed tests (`conformance/seeds.txt`).\n")


def matrix(results: pathlib.Path) -> str:
    """The totals and scores of a run (its results.json), as a table."""
    doc = json.loads(results.read_text())
    run = doc.get("run", {})
    impls = ",".join(i["spec"] for i in doc.get("implementations", []))
    outcomes = ["pass", "known-fail", "miss (recommended)", "unsupported"]
    lines = [f"{run.get('date', '?')}, PyTorch {run.get('torch', '?')}, Python {run.get('python', '?')}, "
             f"devices {','.join(run.get('devices', []))}: `./harness/run --impl {impls}`. "
             f"{doc.get('summary', '').rstrip('.').split('. ')[-1]}.", "",
             "| column | " + " | ".join(outcomes) + " | required | recommended |",
             "|---|" + "---:|" * (len(outcomes) + 2)]
    for column, totals in doc.get("totals", {}).items():
        score = doc.get("score", {}).get(column, {})
        level = lambda name: ("{passed}/{applicable}".format(**score[name])  # noqa: E731
                              if score.get(name, {}).get("applicable") else "-")
        lines.append(f"| {column} | " + " | ".join(str(totals.get(o, 0)) for o in outcomes)
                     + f" | {level('required')} | {level('recommended')} |")
    return "\n".join(lines) + "\n"


# name -> (its doc, the command that writes it, its generator here or None: written by that command)
SECTIONS = {
    "mutant-figures": (MEASUREMENTS, "python3 -m harness.docgen  (runs python3 -m harness.mutation.mutant_figures --samples)",
                       mutant_figures),
    "bench-table": (MEASUREMENTS, "reference/bench/run  (reference/bench/report.py --readme doc/measurements.md)", None),
    "gpu-run": (MEASUREMENTS, "python3 -m harness.gpu.report --from results/gpu/out --doc doc/measurements.md",
                None),
    "catalogue-counts": (CONFORMANCE, "python3 -m harness.docgen  (from conformance/catalogue.toml)",
                         catalogue_counts),
    "latest-matrix": (CONFORMANCE, "./harness/run --impl reference,upstream, then python3 -m harness.docgen "
                                   "--matrix results/results.json", None),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 on a difference")
    parser.add_argument("--list", action="store_true", help="list the generated sections and their commands")
    parser.add_argument("--matrix", type=pathlib.Path, metavar="RESULTS_JSON",
                        help="write doc/conformance.md's latest-matrix section from a run's results.json")
    args = parser.parse_args()
    if args.matrix:
        try:
            changed = doc_sections.write(CONFORMANCE, "latest-matrix", matrix(args.matrix))
        except doc_sections.MarkerError as error:
            print(f"docgen: {error}", file=sys.stderr)
            return 2
        print(f"docgen: {CONFORMANCE}: latest-matrix " + ("rewritten" if changed else "unchanged"))
        return 0
    texts = {doc: doc.read_text() for doc, _, _ in SECTIONS.values()}
    if args.list:
        for name, (doc, command, _) in SECTIONS.items():
            try:
                doc_sections.span(texts[doc], name)
                print(f"{name} ({doc.relative_to(ROOT)}): {command}")
            except doc_sections.MarkerError as error:
                print(f"{name} ({doc.relative_to(ROOT)}): {command}  (markers missing or repeated: {error})")
        return 0
    stale = []
    for name, (doc, command, generate) in SECTIONS.items():
        if generate is None:
            continue
        try:
            current = doc_sections.body(texts[doc], name, str(doc))
        except doc_sections.MarkerError as error:
            print(f"docgen: {error}", file=sys.stderr)
            return 2
        new = generate()
        if current != new:
            stale.append(name)
            texts[doc] = doc_sections.replace(texts[doc], name, new, str(doc))
    if args.check:
        for name in stale:
            print(f"docgen: the {name} section of {SECTIONS[name][0]} is stale; run: {SECTIONS[name][1]}",
                  file=sys.stderr)
        return 1 if stale else 0
    for doc, text in texts.items():
        if text != doc.read_text():
            doc.write_text(text)
    print("docgen: " + (f"rewrote {', '.join(stale)}" if stale else "up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
