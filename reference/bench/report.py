"""Turns the benchmarks' raw output into results/bench/{table.md,table.json,plot.png}.

Inputs: Google Benchmark's JSON from native_registry_bench (every repetition
kept) and the JSON rows bench.py writes. Per-call rows give the median and
the quartiles of the repetitions' CPU time per call; ratio = median / the
stock median of the same language, op and size; spread = (p75 - p25) /
median. Control-plane counters are medians over repetitions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import doc_sections

from .bench_plot import plot
from .bench_rows import (CPP_TARGET, PY_TARGET, add_ratios, find, fmt_ns, fmt_s, load_cpp, load_instructions,
                        load_toggle_instructions)
from .bench_tables import markdown, python_control

# ---- the verdicts -------------------------------------------------------------------


# How the report names an op's call (bench.py's CALLS), where it is not aten::<op>.Tensor(a, b).
OP_CALLS = {"sum": "aten::sum.dim_IntList(a, [0], dtype=torch.float64): the argument conversion"}


def targets(calls: list[dict], control: list[dict], instructions: list[dict],
            toggles: list[dict]) -> list[dict]:
    out = []
    row = find(calls, lang="cpp", op="mul", variant="decline_cpp", numel=2, chain=1)
    stock = find(calls, lang="cpp", op="mul", variant="stock", numel=2, chain=0)
    if row and stock:
        evidence = (f"time: stock {fmt_ns(stock['median_ns'])} (spread {stock['spread']:.0%}), "
                    f"router declining with a chain of 1: {fmt_ns(row['median_ns'])} "
                    f"(spread {row['spread']:.0%}): {row['added_ns']:+.0f} ns, "
                    f"ratio {row['ratio']:.3f} (target <= {CPP_TARGET})")
        met = row["ratio"] <= CPP_TARGET
        irow = find(instructions, lang="cpp", op="mul", variant="decline_cpp", numel=2, chain=1)
        ifloor = find(instructions, lang="cpp", op="mul", variant="dormant", numel=2, chain=0)
        if irow and "ratio" in irow:
            evidence += (f"; instructions: {irow['added']:+.0f} per call, ratio "
                         f"{irow['ratio']:.3f}")
            if ifloor and "ratio" in ifloor:
                evidence += (f" (a dormant router, no cond at all: {ifloor['added']:+.0f}, "
                             f"{ifloor['ratio']:.3f})")
            met = met and irow["ratio"] <= CPP_TARGET
        out.append({
            "target": "declining with a C++ cond adds at most 5% to stock aten::mul.Tensor "
                      "on 2-element tensors, called from C++",
            "met": met, "evidence": evidence})
    for op in ("mul", "add", "sum"):
        ref = find(calls, lang="python", op=op, variant="decline_py", numel=2, chain=1)
        up = find(calls, lang="python", op=op, variant="upstream_decline_py", numel=2, chain=1)
        if ref and up:
            factor = up["added_ns"] / ref["added_ns"] if ref["added_ns"] > 0 else float("inf")
            evidence = (f"time: reference adds {ref['added_ns']:+.0f} ns, upstream adds "
                        f"{up['added_ns']:+.0f} ns: {factor:.1f}x less (target >= {PY_TARGET:.0f}x)")
            met = factor >= PY_TARGET
            iref = find(instructions, lang="python", op=op, variant="decline_py", numel=2, chain=1)
            iup = find(instructions, lang="python", op=op, variant="upstream_decline_py", numel=2,
                       chain=1)
            if iref and iup and iref.get("added", 0) > 0 and "added" in iup:
                ifactor = iup["added"] / iref["added"]
                evidence += (f"; instructions: reference adds {iref['added']:+.0f}, upstream "
                             f"{iup['added']:+.0f}: {ifactor:.1f}x less")
                met = met and ifactor >= PY_TARGET
            out.append({
                "target": f"declining with a Python cond adds at least 5 times less time than "
                          f"upstream's router adds ({OP_CALLS.get(op, f'aten::{op}.Tensor')}, "
                          "2 elements, from Python)",
                "met": met, "evidence": evidence})
    by_scale = {(c["overrides"], c["ops"]): c for c in control}
    if len(by_scale) >= 2:
        small, large = sorted(by_scale)[0], sorted(by_scale)[-1]
        s, l_ = by_scale[small], by_scale[large]
        toggle = lambda c, n: c[f"disable_{n}_s"] + c[f"reenable_{n}_s"]  # noqa: E731
        per_graph_10 = toggle(l_, "10ops") / 10
        per_graph_100 = toggle(l_, "100ops") / 100
        size_factor = toggle(l_, "10ops") / toggle(s, "10ops")
        evidence = (f"time: disable + re-enable of a dsl touching 1 / 10 / 100 ops among "
                    f"{large[0]:,} overrides: {fmt_s(toggle(l_, '1op'))} / "
                    f"{fmt_s(toggle(l_, '10ops'))} / {fmt_s(toggle(l_, '100ops'))} "
                    f"({fmt_s(per_graph_10)} and {fmt_s(per_graph_100)} per graph at 10 and 100); "
                    f"the 10-op toggle among {small[0]:,} overrides: {fmt_s(toggle(s, '10ops'))}, "
                    f"so {size_factor:.2f}x for a registry {large[0] // small[0]}x larger")
        met = size_factor <= 2.0 and per_graph_100 <= 2.0 * per_graph_10
        criterion = "met when both factors are <= 2"
        counts = {(t["overrides"], t["ops"]): t["instructions"] for t in toggles}
        if all(k in counts for k in ((large[0], 10), (large[0], 100), (small[0], 10))):
            i_per_graph = (counts[(large[0], 100)] / 100) / (counts[(large[0], 10)] / 10)
            i_size = counts[(large[0], 10)] / counts[(small[0], 10)]
            evidence += (f"; instructions (callgrind): {counts.get((large[0], 1), 0):,.0f} / "
                         f"{counts[(large[0], 10)]:,.0f} / {counts[(large[0], 100)]:,.0f}, so "
                         f"{i_per_graph:.2f}x per graph from 10 to 100 ops and {i_size:.2f}x for "
                         f"the {large[0] // small[0]}x larger registry")
            met = i_per_graph <= 1.5 and i_size <= 1.5
            criterion = ("judged on instructions, which caches do not disturb: met when both "
                         "factors are <= 1.5")
        out.append({
            "target": "toggling one dsl costs in proportion to the graphs it touches",
            "met": met, "evidence": evidence + f" ({criterion})"})
    return out


# ---- the tables ---------------------------------------------------------------------


# ---- the plot -----------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpp", type=Path, required=True)
    parser.add_argument("--python", type=Path)
    parser.add_argument("--machine", type=Path, help="JSON: cpu, nproc, torch, date")
    parser.add_argument("--out", type=Path, required=True, help="the results folder")
    parser.add_argument("--callgrind", type=Path,
                        help="folder of callgrind dumps (cpp.out.*, py.out.*, py_order.json, calls.json)")
    parser.add_argument("--python-control", type=Path,
                        help="times of reference/bench/control_py.py (its dumps: pyctl.out.* in --callgrind)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--readme", type=Path,
                        help="also put the table (less its long listing) between the bench-table "
                             "markers of this file")
    args = parser.parse_args()

    calls, control, context = load_cpp(args.cpp)
    if args.python and args.python.exists():
        calls += json.loads(args.python.read_text())["rows"]
    add_ratios(calls)
    machine = json.loads(args.machine.read_text()) if args.machine else {}
    instructions = (load_instructions(args.callgrind)
                    if args.callgrind and (args.callgrind / "calls.json").exists() else [])
    toggles = (load_toggle_instructions(args.callgrind)
               if args.callgrind and (args.callgrind / "calls.json").exists() else [])
    verdicts = targets(calls, control, instructions, toggles)
    py_control_lines, py_control_verdict = python_control(args.python_control, args.callgrind)
    if py_control_verdict:
        verdicts.append(py_control_verdict)
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(calls, control, verdicts, machine, instructions, toggles)
    text = text.rstrip("\n") + "\n" + "\n".join(py_control_lines) + "\n"
    (args.out / "table.md").write_text(text)
    (args.out / "table.json").write_text(json.dumps(
        {"machine": machine, "google_benchmark_context": context, "targets": verdicts,
         "calls": calls, "control": control, "instructions": instructions,
         "toggle_instructions": toggles}, indent=1))
    if not args.no_plot:
        plot(calls, control, args.out / "plot.png")
    if args.readme:
        update_readme(args.readme, text)
    print(text)
    return 0


def update_readme(path: Path, table: str) -> None:
    """Replaces the bench-table section of `path` (harness/doc_sections.py)
    with the table, whose long listing of every row stays in
    results/bench/table.md."""
    short = table.split("\n### Every row", 1)[0].rstrip() + "\n"
    try:
        doc_sections.write(path, "bench-table", short)
    except doc_sections.MarkerError as error:
        raise SystemExit(str(error))


if __name__ == "__main__":
    sys.exit(main())
