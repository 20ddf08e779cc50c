"""The benchmark's rows: Google Benchmark's JSON and bench.py's rows read
into per-call, control-plane and instruction-count rows, their ratios to
stock, the variants and the targets, and how figures are written.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


CALL = re.compile(r"^call/(?P<op>\w+)/(?P<variant>\w+)/n:(?P<numel>\d+)/chain:(?P<chain>\d+)"
                  r"(?:/others:(?P<others>\d+))?")


CONTROL = re.compile(r"^control/overrides:(?P<overrides>\d+)/ops:(?P<ops>\d+)")


VARIANTS = ["stock", "dormant", "decline_cpp", "accept_cpp", "decline_cpp_boxed", "decline_py",
            "upstream_decline_py"]


# The accepted-call rows (issue 21, item 5), compared with calling the impl
# directly rather than with stock: their impl returns a tensor made
# beforehand, so a ratio to stock would price no kernel. Reported in a table
# of their own (bench_tables.accepted_table), not in the pivots.
ACCEPTED = ["accepted_cpp_cond", "accepted_py_cond", "upstream_accepted_py", "library_impl",
            "direct_impl"]


DESCRIPTION = {
    "stock": "the op, no router",
    "dormant": "a reference router whose chain is empty (its node disabled): the floor of a "
               "declined call",
    "decline_cpp": "reference router, every C++ cond declines",
    "accept_cpp": "reference router, last node's C++ cond accepts, C++ impl runs",
    "decline_cpp_boxed": "decline_cpp through the generic boxed kernel (what other signatures get)",
    "decline_py": "reference router, every Python cond declines",
    "upstream_decline_py": "torch._native.registry's router, the same Python cond",
    "accepted_cpp_cond": "reference router, one node whose C++ cond accepts, Python impl returning "
                         "a prepared tensor",
    "accepted_py_cond": "the same with a Python cond that accepts",
    "upstream_accepted_py": "torch._native.registry's router, the same Python cond and impl",
    "library_impl": "no router: that Python impl as the op's CPU kernel through torch.library",
    "direct_impl": "no router: that Python impl called directly",
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
