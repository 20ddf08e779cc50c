"""Exploration: random programs for a time budget, every failure class kept
(not only the first), each shrunk to a small program by deleting steps
while its signature persists; prints a Markdown list.

    cd reference/python/tests
    NR_LIFECYCLE_PACKAGE=/work/stage-3d47080 python -m lifecycle.explore --seconds 900 --seed 1

doc/lifecycle-3d47080.md was written from such a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from hypothesis import HealthCheck, given, seed, settings

from . import program as P
from . import run as R


def _smaller(program: P.Program):
    """Candidates one deletion or simplification smaller, smallest first."""
    steps = program.steps
    for end in range(1, len(steps)):  # the steps after the failing one first
        yield P.Program(program.header, steps[:end])
    for pos, step in enumerate(steps):  # a Threads step's inner steps without the threads
        if isinstance(step, P.Threads):
            yield P.Program(program.header, steps[:pos] + step.steps + steps[pos + 1:])
    for width in (4, 2, 1):
        for start in range(0, len(steps), width):
            if width < len(steps):
                yield P.Program(program.header, steps[:start] + steps[start + width:])
    for pos, step in enumerate(steps):
        if isinstance(step, P.Threads):
            for k in range(len(step.steps)):
                inner = step.steps[:k] + step.steps[k + 1:]
                if inner:
                    yield P.Program(program.header, steps[:pos] + (P.Threads(inner),) + steps[pos + 1:])
        if isinstance(step, P.Takeover) and step.threads == 2:
            yield P.Program(program.header, steps[:pos] + (dataclasses.replace(step, threads=1),)
                            + steps[pos + 1:])
    if program.header.daemon_exit:
        yield P.Program(dataclasses.replace(program.header, daemon_exit=False), steps)
    if program.header.early != "off":
        yield P.Program(dataclasses.replace(program.header, early="off"), steps)


def shrink(program: P.Program, signature: str, deadline: float) -> P.Program:
    """Greedy: take the first smaller program that fails the same way."""
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for candidate in _smaller(program):
            if time.monotonic() > deadline:
                break
            failure, _ = R.check(candidate)
            if failure is not None and failure[0] == signature:
                program, improved = candidate, True
                break
    return program


def explore(seconds: float, seed_value: int, shrink_seconds: float,
            plain_header: bool = False) -> dict:
    found: dict[str, tuple] = {}  # signature -> (program, detail, count)
    started = time.monotonic()
    examples = [0]

    @seed(seed_value)
    @settings(max_examples=max(10, int(seconds / 1.5)), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(program=P.PROGRAMS)
    def search(program):
        if time.monotonic() - started > seconds:
            return
        if plain_header:
            program = P.Program(P.Header(), program.steps)
        examples[0] += 1
        failure, _ = R.check(program)
        if failure is not None:
            signature, detail = failure
            old = found.get(signature)
            if old is None or len(program.steps) < len(old[0].steps):
                found[signature] = (program, detail, (old[2] if old else 0) + 1)
            else:
                found[signature] = (old[0], old[1], old[2] + 1)
            print(f"[{time.monotonic() - started:6.0f} s] {signature}", flush=True)

    try:
        search()
    except Exception as e:  # the budget ran out inside Hypothesis' own bookkeeping
        print(f"search ended: {e!r}", file=sys.stderr)
    shrunk = {}
    deadline = time.monotonic() + shrink_seconds
    for signature, (program, detail, count) in sorted(found.items()):
        small = shrink(program, signature, deadline)
        failure, _ = R.check(small)
        shrunk[signature] = (small, failure[1] if failure else detail, count)
    return {"examples": examples[0], "found": shrunk}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--shrink-seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the classes found here too")
    parser.add_argument("--plain-header", action="store_true",
                        help="no early activation, no daemon threads at exit (their classes "
                             "fail every program they touch, and hide the others)")
    args = parser.parse_args(argv)
    result = explore(args.seconds, args.seed, args.shrink_seconds, args.plain_header)
    print(f"\n{result['examples']} programs, {len(result['found'])} failure classes\n")
    for signature, (program, detail, count) in result["found"].items():
        print(f"- **{signature}** ({count} programs)\n  `{program!r}`\n  {detail.splitlines()[0][:300]}\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({s: {"program": repr(p), "detail": d, "count": c}
                       for s, (p, d, c) in result["found"].items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
