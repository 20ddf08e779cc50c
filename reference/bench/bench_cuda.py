"""What the reference router costs per call at CUDA (issue 14), side by side
in one run: ``torch.ops.aten.mul.Tensor(a, b)`` on float16 CUDA tensors of
2 and 1M elements under each of

  stock          the op with no router
  dormant        the reference router installed at CUDA, its one node
                 disabled (the chain is empty; the router stays)
  decline_cpp    the router, its cond a C++ predicate that declines
                 (native_registry.predicates.dtype_in(torch.float32))
  decline_py     the router, its cond a Python function that declines
  accept_triton  the router, its cond the C++ predicate dtype_in(float16),
                 its impl the Triton mul of fixtures/python/triton_mul.py
  accept_triton_py  the same with a Python cond that accepts (``always``)
  triton_direct  the same Triton mul called directly, with no router (what
                 accept_triton costs without routing)
  triton_library the same Triton mul as the op's CUDA kernel through
                 torch.library, no router: what calling it as the op costs
                 whatever routes it (the floor of the accepting rows)

Timing: torch.utils.benchmark.Timer with its default timer, which
synchronises CUDA at both ends of each timed block (so a block's time covers
every kernel its calls launched), blocked_autorange, one thread; the
variants are installed, timed and torn down in turn in a shuffled order,
--rounds times, and the op's dispatch table is checked to be back to stock
after each teardown. Writes JSON rows (median and quartiles of the per-call
times of the blocks) with, for each, the added time per call and the ratio
to stock. Timing is reported, never asserted.

Without a CUDA device it writes no rows and says why. `--device cpu` runs
the same variants at the CPU key (the Triton ones need CUDA and are left
out): a smoke run of this script on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import platform
import random
import statistics
import sys
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.utils.benchmark as benchmark

from fixtures.python.triton_mul import TritonMul, triton

warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel.*")

VARIANTS = ("stock", "dormant", "decline_cpp", "decline_py", "accept_triton", "accept_triton_py",
            "triton_library", "triton_direct")
TRITON_VARIANTS = ("accept_triton", "accept_triton_py", "triton_library", "triton_direct")
# The rows compared with calling the Triton mul directly.
OVER_DIRECT = ("accept_triton", "accept_triton_py", "triton_library")


def never(*args, **kwargs) -> bool:
    return False


def always(*args, **kwargs) -> bool:
    return True


def forbidden(*args, **kwargs):
    raise AssertionError("a declining benchmark ran its impl")


def variant(name: str, key: tuple[str, str, str], registry,
            predicates) -> Callable[[], contextlib.AbstractContextManager]:
    """The context that sets up one variant (and, for triton_direct, nothing)."""
    @contextlib.contextmanager
    def install() -> Iterator[None]:
        if name in ("stock", "triton_direct"):
            yield
            return
        if name == "triton_library":
            library = torch.library.Library(key[0], "IMPL", key[2])
            with warnings.catch_warnings():  # overriding the op's own CUDA kernel is the point
                warnings.simplefilter("ignore")
                library.impl(key[1], TritonMul(), key[2])
            try:
                yield
            finally:
                library._destroy()
            return
        with registry.scoped():
            cond, impl = {
                "dormant": (never, forbidden),
                "decline_cpp": (predicates.dtype_in(torch.float32), forbidden),
                "decline_py": (never, forbidden),
                "accept_triton": (predicates.dtype_in(torch.float16), TritonMul()),
                "accept_triton_py": (always, TritonMul()),
            }[name]
            registry.register_op_override(f"bench_{name}", *key, cond, impl)
            registry.register_all_overrides()
            if name == "dormant":
                registry.deregister_op_overrides(disable_dsl_names=[f"bench_{name}"])
            yield
    return install


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--sizes", default="2,1000000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.2,
                        help="seconds of calls per timed round of one row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="where to write the JSON rows")
    args = parser.parse_args()

    context = {"torch": torch.__version__, "python": platform.python_version(),
               "triton": getattr(triton, "__version__", None),
               "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
               "timer": "torch.utils.benchmark default timer, CUDA-synchronised per block",
               "rounds": args.rounds, "min_run_time": args.min_run_time, "dtype": "float16"}
    missing = "no CUDA device" if args.device == "cuda" and not torch.cuda.is_available() else None
    if missing:
        print(f"bench_cuda: unsupported: {missing}; no rows", file=sys.stderr)
        pathlib.Path(args.out).write_text(json.dumps({"context": context, "unsupported": missing,
                                                      "rows": []}, indent=1))
        return 0

    import native_registry.registry as registry
    from .bench import quantiles  # the CPU benchmark's: median and quartiles of the block times
    from native_registry import predicates

    variants = [v for v in VARIANTS
                if v not in TRITON_VARIANTS or (args.device == "cuda" and triton is not None)]
    if len(variants) < len(VARIANTS):
        context["left_out"] = {v: "Triton is not installed" if triton is None else "Triton runs at cuda"
                               for v in TRITON_VARIANTS}
    key = ("aten", "mul.Tensor", args.device.upper())
    torch.set_num_threads(1)
    op = torch.ops.aten.mul.Tensor
    direct = TritonMul()
    before = torch._C._dispatch_dump("aten::mul.Tensor")
    rng = random.Random(args.seed)
    rows = []
    for numel in (int(n) for n in args.sizes.split(",")):
        a = torch.rand(numel, device=args.device, dtype=torch.float16)
        b = torch.rand(numel, device=args.device, dtype=torch.float16)
        expected = op(a, b)
        blocks: dict[str, list[float]] = {name: [] for name in variants}
        order = list(variants)
        for _ in range(args.rounds):
            rng.shuffle(order)
            for name in order:
                call = direct if name == "triton_direct" else op
                with variant(name, key, registry, predicates)():
                    # Not a timing check: every variant computes what stock does.
                    if not torch.equal(call(a, b), expected):
                        raise AssertionError(f"{name} computes another result")
                    timer = benchmark.Timer(stmt="call(a, b)", globals={"call": call, "a": a, "b": b},
                                            num_threads=1)
                    blocks[name].extend(timer.blocked_autorange(min_run_time=args.min_run_time).times)
                if torch._C._dispatch_dump("aten::mul.Tensor") != before:
                    raise AssertionError(f"{name} left aten::mul.Tensor changed")
        stock = statistics.median(blocks["stock"])
        for name in variants:
            p25, median, p75 = quantiles(blocks[name])
            row = {"lang": "python", "device": args.device, "op": "mul", "numel": numel, "variant": name,
                   "median_ns": median * 1e9, "p25_ns": p25 * 1e9, "p75_ns": p75 * 1e9,
                   "samples": len(blocks[name]), "added_ns": (median - stock) * 1e9,
                   "ratio_to_stock": median / stock}
            if name in OVER_DIRECT:
                row["added_over_triton_direct_ns"] = (median - statistics.median(blocks["triton_direct"])) * 1e9
            rows.append(row)
            print(f"{args.device} mul n={numel:<8d} {name:14s} {median * 1e9:9.0f} ns  "
                  f"[{p25 * 1e9:.0f}, {p75 * 1e9:.0f}]  added {row['added_ns']:+8.0f} ns  "
                  f"x{row['ratio_to_stock']:.3f}", flush=True)
    pathlib.Path(args.out).write_text(json.dumps({"context": context, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
