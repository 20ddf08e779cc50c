"""The dated summary of a GPU run (a few KB, for doc/measurements.md), from
the files harness/gpu/run-on-device writes: the date and machine, torch and
Triton versions, the matrix of the device columns, the CUDA benchmark rows
and how to reproduce the run.

    python3 -m harness.gpu.report --from DIR [--facts facts.json] [--out section.md]
                                  [--doc doc/measurements.md] [--device-seconds N]

DIR is the device's $OUT as it comes back (matrix.md, results.json,
bench-cuda.json, facts.json side by side) or the run's results folder
(results/gpu, conformance/results.json inside); the run's files stay there,
out of the source tree. --doc replaces the section between its gpu-run
markers in that file (harness/doc_sections.py); markers missing or repeated
are an error, and the file is left as it was.
A file the run did not write is named as missing in the section; nothing is
made up.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import xml.etree.ElementTree as ET
from collections import Counter

from .. import doc_sections

SECTION = "gpu-run"  # <!-- gpu-run:begin ... --> ... <!-- gpu-run:end --> in doc/measurements.md
REPRODUCE = """\
On the GPU machine, from the repository's root, one command builds the
reference with that machine's python3 and torch (Meson directly, no
network), runs both suites at cpu and cuda, the Triton behaviours and the
CUDA benchmark rows, and writes its files into `$OUT` (under 8 minutes):

```sh
bash harness/gpu/run-on-device            # BUDGET=540 DEVICES=cpu,cuda by default
python3 -m harness.gpu.report --from "$OUT" --doc doc/measurements.md   # here, with what came back
```

Anywhere else `./harness/run --device cpu,cuda` runs the same suites: without
a CUDA device every CUDA behaviour is reported `unsupported: no CUDA device`
and the command exits 0; `bash harness/gpu/run-on-device --dry-run` prints
the steps and their time limits."""


def find(base: pathlib.Path, name: str) -> pathlib.Path | None:
    for path in (base / name, base / "conformance" / name):
        if path.is_file():
            return path
    return None


def load_json(path: pathlib.Path | None) -> dict | None:
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def machine_line(facts: dict | None, run: dict | None) -> str:
    facts, run = facts or {}, run or {}
    gpu = facts.get("gpu") or ([run["cuda_device"]] if run.get("cuda_device") else None)
    parts = [f"date {facts.get('date') or run.get('date') or 'unknown'}",
             f"GPU {'; '.join(gpu) if gpu else 'none found'}",
             f"{facts.get('cpus', '?')} CPUs",
             f"Python {facts.get('python') or run.get('python') or '?'}",
             f"torch {facts.get('torch') or run.get('torch') or '?'} (CUDA {facts.get('torch_cuda') or run.get('cuda_runtime') or '-'})",
             f"Triton {facts.get('triton') or run.get('triton') or 'not installed'}"]
    if facts.get("gxx"):
        parts.append(facts["gxx"])
    return ", ".join(parts)


def matrix_section(doc: dict | None) -> list[str]:
    if doc is None:
        return ["No results.json came back: this call did not run the conformance suites, or they did "
                "not finish (see its log)."]
    columns = [c for c in doc["columns"] if "@" in c]
    if not columns:
        return ["The run has no device column (it ran at cpu only)."]
    lines = ["| behaviour | " + " | ".join(f"`{c}`" for c in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for b in doc["behaviours"]:
        cells = [b["cells"].get(c, "-") for c in columns]
        if any(cell != "-" for cell in cells):
            lines.append(f"| `{b['id']}` | " + " | ".join(cells) + " |")
    lines += ["", "Per column (every column of the run, cpu ones included):", ""]
    for column, tally in doc["totals"].items():
        score = doc.get("score", {}).get(column, {})
        shown = ", ".join(f"{level} {s['passed']}/{s['applicable']}" for level, s in score.items()
                          if s.get("applicable"))
        lines.append(f"- `{column}`: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
                     + (f"; score {shown}" if shown else ""))
    failures = doc.get("failures", [])
    if failures:
        lines += ["", f"Failures ({len(failures)}):", ""]
        lines += [f"- `{f['behaviour']}` in `{f['column']}`: {f['outcome']} {f['test']}: "
                  f"{(f.get('message') or '').splitlines()[0][:200] if f.get('message') else ''}"
                  for f in failures[:20]]
    return lines


def bench_section(bench: dict | None) -> list[str]:
    if bench is None:
        return ["No bench-cuda.json came back: the benchmark step did not finish (see steps.log)."]
    if not bench.get("rows"):
        return [f"No benchmark rows: {bench.get('unsupported', 'none were written')}."]
    context = bench.get("context", {})
    lines = [f"`torch.ops.aten.mul.Tensor(a, b)` on {context.get('dtype', 'float16')} CUDA tensors; "
             f"medians per call ({context.get('timer', '')}, {context.get('rounds', '?')} rounds "
             f"shuffled). Added: median minus stock's. Reported, never asserted.", "",
             "| elements | variant | per call | added | ratio to stock |", "|---:|---|---:|---:|---:|"]
    for row in bench["rows"]:
        added = "" if row["variant"] == "stock" else f"{row['added_ns'] / 1000:+.2f} µs"
        lines.append(f"| {row['numel']:,} | {row['variant']} | {row['median_ns'] / 1000:.2f} µs | "
                     f"{added} | {row['ratio_to_stock']:.3f} |")
    # One line per accepting variant, each named with its cond (and the
    # torch.library floor): the cost of an accepted call over calling the
    # Triton mul directly.
    direct = [r for r in bench["rows"] if "added_over_triton_direct_ns" in r]
    for variant in dict.fromkeys(r["variant"] for r in direct):
        rows = [r for r in direct if r["variant"] == variant]
        lines += ["", f"{variant} ({ACCEPT_CONDS.get(variant, 'its cond')}) over calling the Triton "
                  "mul directly (the router's cost on an accepted call): "
                  + ", ".join(f"{r['numel']:,} elements {r['added_over_triton_direct_ns'] / 1000:+.2f} µs"
                              for r in rows) + "."]
    return lines


# What accepts the call in each accepting row of reference/bench/bench_cuda.py.
ACCEPT_CONDS = {"accept_triton": "a C++ cond", "accept_triton_py": "a Python cond",
                "triton_library": "no router: the Triton mul as the op's kernel"}


def junit_section(base: pathlib.Path) -> list[str]:
    """One line per JUnit file of the call's own pytest runs (a shorter call
    than run-on-device's, say): passed, skipped with their reasons, failed."""
    lines = []
    for path in sorted(base.glob("*.xml")):
        cases = list(ET.parse(path).getroot().iter("testcase"))
        failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
        reasons = Counter((c.find("skipped").get("message") or "").strip() for c in cases
                          if c.find("skipped") is not None)
        skipped = sum(reasons.values())
        text = f"- `{path.name}`: {len(cases) - skipped - len(failed)} passed, {skipped} skipped"
        text += "".join(f"; {n} {reason}" for reason, n in reasons.items())
        text += f", {len(failed)} failed" + (f" ({', '.join(failed)})" if failed else "")
        lines.append(text + ".")
    return ["### Tests run in this call", "", *lines, ""] if lines else []


def section(base: pathlib.Path, facts_path: pathlib.Path | None, device_seconds: float | None) -> str:
    facts = load_json(facts_path or find(base, "facts.json"))
    doc = load_json(find(base, "results.json"))
    bench = load_json(find(base, "bench-cuda.json"))
    run = (doc or {}).get("run")
    lines = ["## The latest GPU run", "",
             machine_line(facts, run) + "."]
    if device_seconds is not None:
        lines[-1] += f" Device time used: {device_seconds:.0f} s."
    if doc is not None:
        lines += ["", doc.get("summary", "")]
    lines += ["", "### Conformance at the CUDA keys", "", *matrix_section(doc), "", *junit_section(base),
              "### CUDA benchmark rows", "", *bench_section(bench),
              "", "### How to reproduce", "", REPRODUCE]
    return "\n".join(lines) + "\n"


def write_into_doc(doc: pathlib.Path, text: str) -> None:
    """Replaces the gpu-run section of `doc`; MarkerError (nothing written)
    unless its markers are there, once each."""
    doc_sections.write(doc, SECTION, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="base", type=pathlib.Path, required=True)
    parser.add_argument("--facts", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--doc", "--readme", dest="doc", type=pathlib.Path,
                        help="the Markdown file whose gpu-run section to rewrite (doc/measurements.md)")
    parser.add_argument("--device-seconds", type=float)
    args = parser.parse_args()
    if not args.base.is_dir():
        print(f"report.py: --from {args.base}: no such folder", file=sys.stderr)
        return 2
    text = section(args.base, args.facts, args.device_seconds)
    if args.out:
        args.out.write_text(text)
    if args.doc:
        try:
            write_into_doc(args.doc, text)
        except doc_sections.MarkerError as error:
            print(f"report.py: {error}; put the markers where the section belongs "
                  f"(see harness/doc_sections.py), then run this again", file=sys.stderr)
            return 1
    if not (args.out or args.doc):
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
