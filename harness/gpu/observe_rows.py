"""Issue 30's rows on the GPU machine: a Triton override of aten::mul.Tensor
at CUDA, seen through registry.explain (an fp16 call it takes, an fp32 call it
declines), registry.stats over a known mix of calls, the torch.profiler
ranges of one taken and one declined call (with the Triton kernel's launch),
and check_overrides of the override against the op at CUDA. Prints each as
text and writes them, with what each should be, to --out as JSON.

    python -m harness.gpu.observe_rows --out results/gpu/observe-rows.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import native_registry
import native_registry.registry as registry
from fixtures.python.triton_mul import TritonMul, fp16_same_shape, triton


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available() or triton is None:
        print("no CUDA device or no Triton: nothing to show", file=sys.stderr)
        return 1
    impl = TritonMul()
    rows: dict = {"torch": torch.__version__, "triton": triton.__version__}
    with registry.scoped():
        registry.register_op_override("triton", "aten", "mul.Tensor", "CUDA", fp16_same_shape, impl)
        registry.register_all_overrides()
        a16 = torch.rand(4096, device="cuda", dtype=torch.float16)
        a32 = a16.float()
        mul = torch.ops.aten.mul.Tensor

        taken, declined = registry.explain(mul, a16, a16), registry.explain(mul, a32, a32)
        print(taken, declined, sep="\n\n")
        rows["explain"] = {
            "fp16": {"dispatch_key": taken.dispatch_key, "verdicts": [n.verdict for n in taken.nodes],
                     "kernel": taken.kernel.kind, "expected": ["accepted", "impl"]},
            "fp32": {"dispatch_key": declined.dispatch_key,
                     "verdicts": [n.verdict for n in declined.nodes],
                     "kernel": declined.kernel.kind, "expected": ["declined", "fallback"]},
        }

        registry.collect_stats(True)
        registry.reset_stats()
        for _ in range(10):
            a16 * a16
        for _ in range(5):
            a32 * a32
        torch.cuda.synchronize()
        stats = registry.stats()
        registry.collect_stats(False)
        print(stats)
        node = stats.nodes[0]
        graph = stats.graph("mul.Tensor", "CUDA")
        rows["stats"] = {"taken": node.taken, "declined": node.declined, "calls": graph.calls,
                         "fallbacks": graph.fallbacks,
                         "expected": {"taken": 10, "declined": 5, "calls": 15, "fallbacks": 5}}

        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            a16 * a16
            a32 * a32
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events()
                        if e.name.startswith("native_registry::") or "mul_kernel" in e.name})
        print("profiler:", names)
        rows["profiler"] = {"ranges": names, "expected": ["native_registry::fallback::mul.Tensor",
                                                          "native_registry::triton::mul.Tensor"]}

        # The caller's samples: torch's op_db needs expecttest, which the GPU
        # machine lacks. fp16 CUDA pairs the cond takes (three shapes, one
        # non-contiguous pair it declines) and an fp32 pair it declines.
        shapes = [(7,), (64, 33), (2, 3, 1025)]
        samples = [((torch.randn(s, device="cuda", dtype=torch.float16),
                     torch.randn(s, device="cuda", dtype=torch.float16)), {}) for s in shapes]
        wide = torch.randn(8, 16, device="cuda", dtype=torch.float16)
        samples.append(((wide.t(), wide.t()), {}))
        samples.append(((a32[:100], a32[:100]), {}))
        report = native_registry.check_overrides(mul, samples=samples, device="cuda")
        print(report)
        rows["check_overrides"] = {"failures": [str(f) for f in report.failures],
                                   "table": str(report)}
    ok = (rows["explain"]["fp16"]["verdicts"] == ["accepted"]
          and rows["explain"]["fp16"]["kernel"] == "impl"
          and rows["explain"]["fp32"]["kernel"] == "fallback"
          and rows["stats"]["taken"] == 10 and rows["stats"]["fallbacks"] == 5
          and set(rows["profiler"]["expected"]) <= set(names)
          and not report.failures)
    rows["ok"] = ok
    with open(args.out, "w") as out:
        json.dump(rows, out, indent=1)
    print("observe rows:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
