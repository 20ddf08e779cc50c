"""A scope per test, measured (issue 23): N `scoped()` cycles, each
registering and installing one override and calling the op once. Prints RSS,
the time per cycle and the `_native` ops defined at 0, 1,000 and 5,000 cycles
(or at the marks given). A measurement, not a test: the figures go to the
reliability report; tests assert only the counts and memory.

    python reference/tests/reliability/scope_cycles.py [--marks 0,1000,5000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

import native_registry.registry as registry


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def native_ops() -> int:
    return sum(name.startswith("_native::") for name in torch._C._dispatch_get_all_op_names())


def cycle(a: torch.Tensor, b: torch.Tensor) -> None:
    with registry.scoped():
        registry.register_op_override("cycle_dsl", "aten", "mul.Tensor", "CPU",
                                      lambda *args: True, lambda x, y: x)
        registry.register_all_overrides()
        torch.mul(a, b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marks", default="0,1000,5000")
    parser.add_argument("--window", type=int, default=200, help="cycles timed at each mark")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    marks = [int(m) for m in args.marks.split(",")]
    a, b = torch.ones(4), torch.ones(4)
    for _ in range(50):  # warm up: first calls, caches
        cycle(a, b)
    done, rows, base_ops = 0, [], native_ops()
    for mark in marks:
        while done < mark:
            cycle(a, b)
            done += 1
        start = time.perf_counter()
        for _ in range(args.window):
            cycle(a, b)
        per_cycle_ms = (time.perf_counter() - start) / args.window * 1e3
        done += args.window
        rows.append({"cycles": mark, "rss_kib": rss_kib(), "ms_per_cycle": round(per_cycle_ms, 4),
                     "native_ops": native_ops() - base_ops})
    first, last = rows[0], rows[-1]
    span = max(last["cycles"] - first["cycles"], 1)
    summary = {
        "rows": rows,
        "rss_kib_per_cycle": round((last["rss_kib"] - first["rss_kib"]) / span, 3),
        "time_ratio_last_first": round(last["ms_per_cycle"] / first["ms_per_cycle"], 3),
    }
    for row in rows:
        print(f"{row['cycles']:>6} cycles: RSS {row['rss_kib']:>8} KiB, "
              f"{row['ms_per_cycle']:.3f} ms/cycle, {row['native_ops']} _native ops defined")
    print(f"RSS growth {summary['rss_kib_per_cycle']} KiB/cycle; "
          f"time per cycle x{summary['time_ratio_last_first']} from first to last mark")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
