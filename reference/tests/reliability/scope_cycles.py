"""A scope per test, measured (issue 23): N `scoped()` cycles, each
registering and installing one override and calling the op once. Prints RSS,
the time per cycle and the `_native` ops defined at 0, 1,000 and 5,000 cycles
(or at the marks given). A measurement, not a test: the figures go to the
reliability report (reference/tests/reliability/run, doc/measurements.md); tests assert
only the counts and memory. The time at a mark is the median over five
slices of the window timed there, so one stall of a loaded machine does not
make it.

--check exits non-zero unless the run stays within issue 23's bounds: no
`_native` op left at the last mark beyond the first's, RSS growth at most
2 KiB per cycle, the time per cycle at the last mark at most 1.5x the first's.

    python reference/tests/reliability/scope_cycles.py [--marks 0,1000,5000] [--json PATH] [--check]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
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
    parser.add_argument("--window", type=int, default=500, help="cycles timed at each mark")
    parser.add_argument("--json", default=None)
    parser.add_argument("--check", nargs="?", const="all", choices=["all", "ops"],
                        help="exit 1 outside issue 23's bounds (ops: the count alone, for "
                             "sanitizer builds, whose allocators keep freed memory)")
    args = parser.parse_args()
    marks = [int(m) for m in args.marks.split(",")]
    print(f"native_registry._C from {registry._C.__file__}")
    a, b = torch.ones(4), torch.ones(4)
    for _ in range(50):  # warm up: first calls, caches
        cycle(a, b)
    done, rows, base_ops = 0, [], native_ops()
    for mark in marks:
        while done < mark:
            cycle(a, b)
            done += 1
        slices = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(args.window // 5):
                cycle(a, b)
            slices.append((time.perf_counter() - start) / (args.window // 5) * 1e3)
        per_cycle_ms = statistics.median(slices)
        done += args.window // 5 * 5
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
    summary["native_ops_left"] = last["native_ops"] - first["native_ops"]
    summary["within_bounds"] = (summary["native_ops_left"] <= 0
                                and summary["rss_kib_per_cycle"] <= 2.0
                                and summary["time_ratio_last_first"] <= 1.5)
    summary["extension"] = registry._C.__file__
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f)
    if args.check == "ops" and summary["native_ops_left"] > 0:
        print("outside issue 23's bounds: _native ops left behind")
        sys.exit(1)
    if args.check == "all" and not summary["within_bounds"]:
        print("outside issue 23's bounds (0 ops left, <= 2 KiB and <= 1.5x per cycle)")
        sys.exit(1)


if __name__ == "__main__":
    main()
