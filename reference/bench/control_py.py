#!/usr/bin/env python3
"""What a toggle costs from Python, against the size of the registry (issue 10).

Disables and re-enables a dsl that overrides one op (aten::mul.Tensor at CPU,
installed) while 0, 1,000 or 10,000 overrides of other dsls sit on another op
(aten::add.Tensor at CPU, installed). With one source of truth in C++, the
cost must not grow with the registry: the target is the 10,000 case within
1.5x of the 0 case in instructions.

Times: the calling thread's CPU time per disable + re-enable, median over
blocks. With ``--callgrind`` it times nothing: run under ``valgrind
--tool=callgrind --collect-atstart=no``, it dumps the counts of ``--rounds``
toggles per case (after an empty loop of as many iterations, the baseline)
and writes the order of the dumps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import native_registry.registry as registry

SIZES = (0, 1000, 10000)


def declines(*args, **kwargs):
    return False


def populate(others: int) -> None:
    for i in range(others):
        registry.register_op_override(f"other{i % 100}", "aten", "add.Tensor", "CPU", declines,
                                      lambda a, b: a)
    registry.register_op_override("one", "aten", "mul.Tensor", "CPU", declines, lambda a, b: a)
    registry.register_all_overrides()


def toggle() -> None:
    registry.deregister_op_overrides(disable_dsl_names="one")
    registry.reenable_op_overrides(enable_dsl_names="one")


def timed(rounds: int, blocks: int) -> list[float]:
    per_toggle = []
    for _ in range(blocks):
        start = time.thread_time()
        for _ in range(rounds):
            toggle()
        per_toggle.append((time.thread_time() - start) / rounds)
    return per_toggle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200, help="toggles per block (or dump)")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows, order = [], []
    if args.callgrind:
        start, dump = torch._C._valgrind_toggle, torch._C._valgrind_toggle_and_dump_stats
        start()
        for _ in range(args.rounds):
            pass
        dump()
        order.append({"case": "baseline", "rounds": args.rounds})
    for others in SIZES:
        with registry.scoped():
            populate(others)
            toggle()  # warm
            if args.callgrind:
                start()
                for _ in range(args.rounds):
                    toggle()
                dump()
                order.append({"case": "toggle", "others": others, "rounds": args.rounds})
            else:
                times = timed(args.rounds, args.blocks)
                quartiles = statistics.quantiles(times, n=4)
                rows.append({"others": others, "median_s": statistics.median(times),
                             "p25_s": quartiles[0], "p75_s": quartiles[2]})
                print(f"control_py: {others} others: {statistics.median(times) * 1e6:.1f} us "
                      "per disable + re-enable", flush=True)
    with open(args.out, "w") as out:
        json.dump(order if args.callgrind else rows, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
