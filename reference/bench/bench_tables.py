"""The benchmark report's tables (markdown): the per-call pivot and long
tables, the control plane, the instruction counts, the Python control plane,
and the page that holds them with the verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from .bench_rows import ACCEPTED, DESCRIPTION, VARIANTS, _dumps, find, fmt_ns, fmt_s


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
    order = {v: i for i, v in enumerate(VARIANTS + ACCEPTED)}
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


def accepted_table(calls: list[dict], instructions: list[dict]) -> list[str]:
    """The accepted rows against calling their impl directly: median time and
    instructions per call, what each adds over the direct call, and the ratio."""
    keys = sorted({(r["op"], r["numel"]) for r in calls + instructions
                   if r["lang"] == "python" and r["variant"] == "direct_impl"})
    lines = ["| op | numel | variant | median | added over direct | ×direct | instructions | "
             "added over direct | ×direct |", "|---|---|---|---|---|---|---|---|---|"]
    for op, numel in keys:
        want = dict(lang="python", op=op, numel=numel, chain=1)
        direct_t = find(calls, variant="direct_impl", **want)
        direct_i = find(instructions, variant="direct_impl", **want)
        for v in ACCEPTED:
            t, i = find(calls, variant=v, **want), find(instructions, variant=v, **want)
            if t is None and i is None:
                continue
            cells = [op, f"{numel:,}", v]
            if t is not None and direct_t is not None:
                cells += [fmt_ns(t["median_ns"]), f"{t['median_ns'] - direct_t['median_ns']:+,.0f} ns",
                          f"{t['median_ns'] / direct_t['median_ns']:.2f}"]
            else:
                cells += ["–"] * 3
            if i is not None and direct_i is not None:
                cells += [f"{i['instructions']:,.0f}",
                          f"{i['instructions'] - direct_i['instructions']:+,.0f}",
                          f"{i['instructions'] / direct_i['instructions']:.2f}"]
            else:
                cells += ["–"] * 3
            lines.append("| " + " | ".join(cells) + " |")
    return lines if len(lines) > 2 else []


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
    against 0 / 1k / 10k overrides on other ops (reference/bench/control_py.py)."""
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
    lines += ["", "Variants: " + "; ".join(f"`{v}`: {DESCRIPTION[v]}" for v in VARIANTS + ACCEPTED
                                           if any(r['variant'] == v for r in calls)) + "."]
    if (accepted := accepted_table(calls, instructions)):
        lines += ["", "### An accepted call over calling its impl directly (Python, chain of 1)", ""]
        lines += accepted
        lines += ["", "Times and instructions per call. The impl returns a tensor made beforehand, "
                  "so these rows price the route, not a kernel."]
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
