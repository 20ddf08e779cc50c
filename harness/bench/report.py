#!/usr/bin/env python3
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
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

CALL = re.compile(r"^call/(?P<op>\w+)/(?P<variant>\w+)/n:(?P<numel>\d+)/chain:(?P<chain>\d+)"
                  r"(?:/others:(?P<others>\d+))?")
CONTROL = re.compile(r"^control/overrides:(?P<overrides>\d+)/ops:(?P<ops>\d+)")

VARIANTS = ["stock", "dormant", "decline_cpp", "accept_cpp", "decline_cpp_boxed", "decline_py",
            "upstream_decline_py"]
DESCRIPTION = {
    "stock": "the op, no router",
    "dormant": "a reference router whose chain is empty (its node disabled): the floor of a "
               "declined call",
    "decline_cpp": "reference router, every C++ cond declines",
    "accept_cpp": "reference router, last node's C++ cond accepts, C++ impl runs",
    "decline_cpp_boxed": "decline_cpp through the generic boxed kernel (what other signatures get)",
    "decline_py": "reference router, every Python cond declines",
    "upstream_decline_py": "torch._native.registry's router, the same Python cond",
}

# Published targets (issue 5).
CPP_TARGET = 1.05
PY_TARGET = 5.0


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def load_cpp(path: Path) -> tuple[list[dict], list[dict], dict]:
    data = json.loads(path.read_text())
    samples: dict[tuple, list[float]] = defaultdict(list)
    counters: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for entry in data["benchmarks"]:
        if entry.get("run_type") != "iteration" or entry.get("error_occurred"):
            continue
        name = entry["name"]
        if (m := CALL.match(name)):
            scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[entry.get("time_unit", "ns")]
            key = (m["op"], m["variant"], int(m["numel"]), int(m["chain"]),
                   int(m["others"]) if m["others"] is not None else None)
            samples[key].append(entry["cpu_time"] * scale)
        elif (m := CONTROL.match(name)):
            key = (int(m["overrides"]), int(m["ops"]))
            for field, value in entry.items():
                if field.endswith("_s") or field.startswith("bytes_per"):
                    counters[key][field].append(float(value))
    calls = []
    for (op, variant, numel, chain, others), values in samples.items():
        p25, median, p75 = quartiles(values)
        row = {"lang": "cpp", "op": op, "variant": variant, "numel": numel, "chain": chain,
               "median_ns": median, "p25_ns": p25, "p75_ns": p75, "samples": len(values)}
        if others is not None:
            row["others"] = others
        calls.append(row)
    control = [{"overrides": n, "ops": m, **{k: statistics.median(v) for k, v in fields.items()},
                "samples": min(len(v) for v in fields.values())}
               for (n, m), fields in sorted(counters.items())]
    return calls, control, data.get("context", {})


def _dumps(directory: Path, prefix: str) -> list[tuple[int, str, float]]:
    """(dump number, trigger, instructions) of each callgrind dump file."""
    out = []
    for path in directory.glob(prefix + ".*"):
        suffix = path.name[len(prefix) + 1:]
        if not suffix.isdigit():
            continue
        trigger, total = "", None
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("desc: Trigger:"):
                trigger = line.split("Client Request:", 1)[-1].strip()
            elif line.startswith(("totals:", "summary:")):
                total = float(line.split()[1])
        if total is not None:
            out.append((int(suffix), trigger, total))
    return sorted(out)


TOGGLE = re.compile(r"^toggle/ops:(?P<ops>\d+)/overrides:(?P<overrides>\d+)/rounds:(?P<rounds>\d+)")


def load_toggle_instructions(directory: Path) -> list[dict]:
    """Instructions per disable + re-enable of a dsl, from the C++ dumps."""
    out = []
    for _, name, total in _dumps(directory, "cpp.out"):
        if (m := TOGGLE.match(name)):
            out.append({"ops": int(m["ops"]), "overrides": int(m["overrides"]),
                        "instructions": total / int(m["rounds"])})
    return sorted(out, key=lambda r: (r["overrides"], r["ops"]))


def load_instructions(directory: Path) -> list[dict]:
    """Instructions per call: the C++ dumps are named after their benchmark
    (the least over repetitions is kept); the Python dumps come in the order
    py_order.json gives, less the empty loop's count."""
    meta = json.loads((directory / "calls.json").read_text())
    rows: dict[tuple, float] = {}
    for _, name, total in _dumps(directory, "cpp.out"):
        if (m := CALL.match(name)):
            key = ("cpp", m["op"], m["variant"], int(m["numel"]), int(m["chain"]),
                   int(m["others"]) if m["others"] is not None else None)
            per_call = total / meta["cpp_calls"]
            rows[key] = min(rows.get(key, per_call), per_call)
    order_path = directory / "py_order.json"
    if order_path.exists():
        order = json.loads(order_path.read_text())
        dumps = _dumps(directory, "py.out")
        if len(dumps) >= len(order):
            baseline = 0.0
            for case, (_, _, total) in zip(order, dumps):
                if case.get("case") == "baseline":
                    baseline = total / case["calls"]
                    continue
                key = ("python", case["op"], case["variant"], case["numel"], case["chain"], None)
                rows[key] = total / case["calls"] - baseline
    out = []
    for (lang, op, variant, numel, chain, others), instr in rows.items():
        row = {"lang": lang, "op": op, "variant": variant, "numel": numel, "chain": chain,
               "instructions": instr}
        if others is not None:
            row["others"] = others
        out.append(row)
    stock = {(r["lang"], r["op"], r["numel"]): r["instructions"] for r in out
             if r["variant"] == "stock" and "others" not in r}
    for r in out:
        if (base := stock.get((r["lang"], r["op"], r["numel"]))):
            r["added"] = r["instructions"] - base
            r["ratio"] = r["instructions"] / base
    return out


def add_ratios(rows: list[dict]) -> None:
    stock = {(r["lang"], r["op"], r["numel"]): r for r in rows
             if r["variant"] == "stock" and "others" not in r}
    for row in rows:
        base = stock.get((row["lang"], row["op"], row["numel"]))
        if base is None:
            continue
        row["ratio"] = row["median_ns"] / base["median_ns"]
        row["added_ns"] = row["median_ns"] - base["median_ns"]
        row["spread"] = (row["p75_ns"] - row["p25_ns"]) / row["median_ns"]


def fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:.1f} µs"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def fmt_s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def find(rows: list[dict], **want: Any) -> dict | None:
    for row in rows:
        if all(row.get(k) == v for k, v in want.items()) and ("others" in want or "others" not in row):
            return row
    return None


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


def pivot(rows: list[dict], stock_head: str, variant_head: str,
          stock_cell: Callable[[dict], str], cell: Callable[[dict], str]) -> list[str]:
    """One line per (language, op, size): the stock cell, then each variant's
    cells at each chain length (the dormant variant has no chain)."""
    chains = sorted({r["chain"] for r in rows if r["variant"] not in ("stock", "dormant")})
    variants = [v for v in VARIANTS[1:] if any(r["variant"] == v for r in rows)]
    head = ["lang", "op", "numel", stock_head] + [
        f"{v}{variant_head}" + ("" if v == "dormant" else f", chain {'/'.join(map(str, chains))}")
        for v in variants]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted({(r["lang"], r["op"], r["numel"]) for r in rows},
                  key=lambda k: (k[0] != "cpp", k[1] != "mul", k[2]))
    for lang, op, numel in keys:
        stock = find(rows, lang=lang, op=op, variant="stock", numel=numel, chain=0)
        if stock is None:
            continue
        cells = ["C++" if lang == "cpp" else "python", op, f"{numel:,}", stock_cell(stock)]
        for v in variants:
            parts = []
            for c in ([0] if v == "dormant" else chains):
                row = find(rows, lang=lang, op=op, variant=v, numel=numel, chain=c)
                parts.append(cell(row) if row else "–")
            cells.append(" / ".join(parts) if any(p != "–" for p in parts) else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def pivot_table(calls: list[dict]) -> list[str]:
    """Each variant's ratio of its median time to stock's."""
    return pivot(calls, "stock median (spread)", " ×stock",
                 lambda stock: f"{fmt_ns(stock['median_ns'])} ({stock['spread']:.0%})",
                 lambda row: f"{row['ratio']:.2f}")


def long_table(calls: list[dict]) -> list[str]:
    head = ["lang", "op", "numel", "variant", "chain", "median", "p25", "p75", "spread",
            "ratio", "added", "samples"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {v: i for i, v in enumerate(VARIANTS)}
    for r in sorted(calls, key=lambda r: (r["lang"] != "cpp", r["op"] != "mul", r["numel"],
                                          order.get(r["variant"], 99), r["chain"],
                                          r.get("others", -1))):
        variant = r["variant"] + (f" (others: {r['others']:,})" if "others" in r else "")
        lines.append("| " + " | ".join([
            "C++" if r["lang"] == "cpp" else "python", r["op"], f"{r['numel']:,}", variant,
            str(r["chain"]), fmt_ns(r["median_ns"]), fmt_ns(r["p25_ns"]), fmt_ns(r["p75_ns"]),
            f"{r.get('spread', 0):.0%}", f"{r['ratio']:.3f}" if "ratio" in r else "–",
            f"{r['added_ns']:+.0f} ns" if "added_ns" in r else "–", str(r["samples"])]) + " |")
    return lines


def control_table(control: list[dict]) -> list[str]:
    cols = [("register_s", "register all"), ("install_all_s", "install all"),
            ("disable_1op_s", "disable 1-op dsl"), ("reenable_1op_s", "re-enable 1-op dsl"),
            ("disable_10ops_s", "disable 10-op dsl"), ("reenable_10ops_s", "re-enable 10-op dsl"),
            ("disable_100ops_s", "disable 100-op dsl"),
            ("reenable_100ops_s", "re-enable 100-op dsl"),
            ("reorder_all_s", "reorder all (reinstall)"), ("teardown_s", "teardown")]
    head = ["overrides", "ops"] + [label for _, label in cols] + [
        "heap/override registered", "heap/override installed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in control:
        lines.append("| " + " | ".join(
            [f"{c['overrides']:,}", f"{c['ops']:,}"] + [fmt_s(c[k]) for k, _ in cols] +
            [f"{c['bytes_per_override_registered']:,.0f} B",
             f"{c['bytes_per_override_installed']:,.0f} B"]) + " |")
    return lines


def instruction_table(instructions: list[dict]) -> list[str]:
    """Each variant's instructions added over stock, and its ratio to stock."""
    lines = pivot(instructions, "stock", ": added (×stock)",
                  lambda stock: f"{stock['instructions']:,.0f}",
                  lambda r: f"{r['added']:+,.0f} ({r['ratio']:.3f})" if "added" in r else "–")
    others = sorted((r for r in instructions if "others" in r), key=lambda r: r["others"])
    if len(others) >= 2:
        lines += ["", "C++ mul, one declining node, against overrides on other ops: " + ", ".join(
            f"{r['others']:,} others: {r['instructions']:,.0f}" for r in others) + "."]
    return lines


def others_lines(calls: list[dict]) -> list[str]:
    rows = sorted((r for r in calls if "others" in r), key=lambda r: r["others"])
    if len(rows) < 2:
        return []
    base = rows[0]
    out = ["| overrides on other ops | median | spread | ×(none) |", "|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['others']:,} | {fmt_ns(r['median_ns'])} | "
                   f"{(r['p75_ns'] - r['p25_ns']) / r['median_ns']:.0%} | "
                   f"{r['median_ns'] / base['median_ns']:.3f} |")
    return out


def python_control(times_path: Path | None, callgrind: Path | None) -> tuple[list[str], dict | None]:
    """Lines and a verdict for Python's disable + re-enable of a 1-op dsl
    against 0 / 1k / 10k overrides on other ops (harness/bench/control_py.py)."""
    if times_path is None or not times_path.exists():
        return [], None
    times = {r["others"]: r for r in json.loads(times_path.read_text())}
    instr: dict[int, float] = {}
    order_path = callgrind / "pyctl_order.json" if callgrind else None
    if order_path and order_path.exists():
        order = json.loads(order_path.read_text())
        dumps = [total for _, _, total in _dumps(callgrind, "pyctl.out")]
        if len(dumps) == len(order):
            base = dumps[0] / order[0]["rounds"]
            for entry, total in zip(order[1:], dumps[1:]):
                instr[entry["others"]] = total / entry["rounds"] - base
    sizes = sorted(times)
    lines = ["", "### Control plane from Python (disable + re-enable of a 1-op dsl)", "",
             "| overrides on other ops | median | spread | instructions | ×(none), instructions |",
             "|---|---|---|---|---|"]
    for n in sizes:
        r = times[n]
        spread = (r["p75_s"] - r["p25_s"]) / r["median_s"] if r["median_s"] else 0
        ratio = f"{instr[n] / instr[sizes[0]]:.3f}" if n in instr and instr.get(sizes[0]) else "–"
        count = f"{instr[n]:,.0f}" if n in instr else "–"
        lines.append(f"| {n:,} | {fmt_ns(r['median_s'] * 1e9)} | {spread:.0%} | {count} | {ratio} |")
    verdict = None
    if instr.get(0) and instr.get(10000):
        factor = instr[10000] / instr[0]
        verdict = {"target": "a Python disable + re-enable of a 1-op dsl among 10,000 overrides "
                             "on other ops costs at most 1.5x the same with none, in instructions",
                   "met": factor <= 1.5,
                   "evidence": f"instructions: {instr[0]:,.0f} with none, {instr[10000]:,.0f} "
                               f"with 10,000 ({factor:.2f}x); time: "
                               f"{fmt_ns(times[0]['median_s'] * 1e9)} / "
                               f"{fmt_ns(times[10000]['median_s'] * 1e9)}"}
    return lines, verdict


def markdown(calls: list[dict], control: list[dict], verdicts: list[dict],
             machine: dict, instructions: list[dict], toggles: list[dict]) -> str:
    load = machine.get("load_average")
    lines = [f"Machine: {machine.get('cpu', '?')}, nproc {machine.get('nproc', '?')}, "
             f"PyTorch {machine.get('torch', '?')}, one thread; {machine.get('date', '')}"
             + (f", load average {load[0]:.1f} at the start" if load else "") + ". "
             f"Times are CPU time per call of the calling thread, medians over repetitions; "
             f"spread = (p75 - p25) / median.", ""]
    lines += ["### Targets", ""]
    for v in verdicts:
        lines.append(f"- **{'met' if v['met'] else 'NOT met'}**: {v['target']}. {v['evidence']}.")
    lines += ["", "### Per call: ratio to stock at chains of 1 / 4 / 16 nodes", ""]
    lines += pivot_table(calls)
    lines += ["", "Variants: " + "; ".join(f"`{v}`: {DESCRIPTION[v]}" for v in VARIANTS
                                           if any(r['variant'] == v for r in calls)) + "."]
    if instructions:
        lines += ["", "### Instructions per call (callgrind; deterministic, unlike the times)", "",
                  "Added instructions over stock and the ratio to stock; Python counts are less "
                  "an empty loop's.", ""]
        lines += instruction_table(instructions)
    if (others := others_lines(calls)):
        lines += ["", "### A call's cost against overrides on other ops "
                  "(C++, mul, 2 elements, one declining node)", ""] + others
    if control:
        lines += ["", "### Control plane (C++ Registry API; medians of the toggles)", ""]
        lines += control_table(control)
        if toggles:
            lines += ["", "Instructions per disable + re-enable (callgrind): " + "; ".join(
                f"{t['ops']} op{'s' if t['ops'] > 1 else ''} among {t['overrides']:,}: "
                f"{t['instructions']:,.0f}" for t in toggles) + "."]
    lines += ["", "### Every row", ""] + long_table(calls)
    return "\n".join(lines) + "\n"


# ---- the plot -----------------------------------------------------------------------


def plot(calls: list[dict], control: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(17, 9), constrained_layout=True)
    chains = sorted({r["chain"] for r in calls if r["variant"] not in ("stock", "dormant")})
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
    for i, lang in enumerate(("cpp", "python")):
        for j, op in enumerate(("mul", "add")):
            ax = axes[i][j]
            variants = [v for v in VARIANTS[1:] if find(calls, lang=lang, op=op, variant=v,
                                                        numel=2, chain=chains[0])]
            width = 0.8 / max(1, len(chains))
            for k, c in enumerate(chains):
                xs, ys, lo, hi = [], [], [], []
                for x, v in enumerate(variants):
                    r = find(calls, lang=lang, op=op, variant=v, numel=2, chain=c)
                    s = find(calls, lang=lang, op=op, variant="stock", numel=2, chain=0)
                    if not r or not s:
                        continue
                    xs.append(x + (k - (len(chains) - 1) / 2) * width)
                    ys.append(r["ratio"])
                    lo.append(max(0.0, r["ratio"] - r["p25_ns"] / s["median_ns"]))
                    hi.append(max(0.0, r["p75_ns"] / s["median_ns"] - r["ratio"]))
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=f"chain {c}",
                       color=colors[k % len(colors)])
            ax.axhline(1.0, color="black", linewidth=0.8)
            if lang == "cpp" and op == "mul":
                ax.axhline(CPP_TARGET, color="red", linestyle="--", linewidth=0.8,
                           label="target 1.05")
            ax.set_xticks(range(len(variants)))
            ax.set_xticklabels([v.replace("_", "\n", 1) for v in variants], fontsize=8)
            stock = find(calls, lang=lang, op=op, variant="stock", numel=2, chain=0)
            ax.set_title(f"{'C++' if lang == 'cpp' else 'Python'}: aten::{op}.Tensor, 2 floats "
                         f"(stock {fmt_ns(stock['median_ns']) if stock else '?'})")
            ax.set_ylabel("median / stock median (bars: p25–p75)")
            ax.legend(fontsize=8)

    ax = axes[0][2]
    for c in control:
        ns = [1, 10, 100]
        ys = [(c[f"disable_{n}_s"] + c[f"reenable_{n}_s"]) * 1e6 for n in ("1op", "10ops", "100ops")]
        ax.plot(ns, ys, marker="o", label=f"{c['overrides']:,} overrides / {c['ops']:,} ops")
    if control:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ops the dsl touches")
        ax.set_ylabel("disable + re-enable (µs)")
        ax.set_title("Control plane: toggling one dsl (C++)")
        ax.legend(fontsize=8)

    ax = axes[1][2]
    for lang, style in (("cpp", "-"), ("python", "--")):
        for v in ("decline_cpp", "decline_py", "upstream_decline_py"):
            pts = sorted((r["numel"], r["added_ns"]) for r in calls
                         if r["lang"] == lang and r["op"] == "mul" and r["variant"] == v
                         and r["chain"] == 1 and "added_ns" in r)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                        label=f"{'C++' if lang == 'cpp' else 'Python'} {v}")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=100)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("elements")
    ax.set_ylabel("median - stock median (ns)")
    ax.set_title("Added time per call, mul, chain of 1")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpp", type=Path, required=True)
    parser.add_argument("--python", type=Path)
    parser.add_argument("--machine", type=Path, help="JSON: cpu, nproc, torch, date")
    parser.add_argument("--out", type=Path, required=True, help="the results folder")
    parser.add_argument("--callgrind", type=Path,
                        help="folder of callgrind dumps (cpp.out.*, py.out.*, py_order.json, calls.json)")
    parser.add_argument("--python-control", type=Path,
                        help="times of harness/bench/control_py.py (its dumps: pyctl.out.* in --callgrind)")
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


README_BEGIN, README_END = "<!-- bench-table:begin -->", "<!-- bench-table:end -->"


def update_readme(path: Path, table: str) -> None:
    """Replaces what lies between the markers with the table, whose long
    listing of every row stays in results/bench/table.md."""
    readme = path.read_text()
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{path}: no {README_BEGIN} ... {README_END} markers")
    short = table.split("\n### Every row", 1)[0].rstrip() + "\n"
    path.write_text(readme[:begin + len(README_BEGIN)] + "\n" + short + readme[end:])


if __name__ == "__main__":
    sys.exit(main())
