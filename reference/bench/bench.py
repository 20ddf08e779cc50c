#!/usr/bin/env python3
"""What a router costs per call, from Python (issue 5).

Calls ``torch.ops.aten.<op>.Tensor(a, b)`` (and, for ``sum``,
``torch.ops.aten.sum.dim_IntList(a, [0], dtype=torch.float64)``: a call whose
Python cond gets a keyword argument, a torch.dtype and no trailing default,
so its rows price the argument conversion) with torch.utils.benchmark, one
thread, under each of:

  stock                the op with no router
  decline_cpp          the reference router, every cond a C++ predicate
                       (native_registry.predicates) that declines
  accept_cpp           the same, the last node accepting, with a C++ impl
                       (installed from C++ through libnr_bench_helper.so)
  decline_py           the reference router, every cond the Python function
                       ``never`` below
  upstream_decline_py  upstream's router (torch._native.registry), every cond
                       the same ``never``; skipped when the installed PyTorch
                       has no torch._native.registry
  accepted_cpp_cond    the reference router, one node (chain 1 only: what an
                       accepted call costs does not depend on what follows)
                       whose C++ predicate accepts and whose Python impl
                       ``prepared`` returns a tensor made beforehand
  accepted_py_cond     the same with the Python cond ``always``
  direct_impl          no router: ``prepared`` called directly, the baseline
                       the two accepted rows are compared against (issue 21,
                       item 5: the accepted call's cost over calling the impl)
  library_impl         no router: ``prepared`` registered as the op's CPU
                       kernel through torch.library (a Python kernel), called
                       as the op: what any Python kernel costs, router or not
  upstream_accepted_py upstream's router with ``always`` and ``prepared``;
                       skipped as upstream_decline_py is

With ``--feature-rows``, also the rows of issue 30's opt-ins, each a base row
above with one feature on (``<base>+<feature>``): ``stats`` (collect_stats),
``thread_scope`` (a disabled_in_thread scope open, naming another dsl),
``routing_log`` (the native_registry.routing logger at DEBUG, into a
NullHandler: the rate limit drops most decisions), ``coverage_py`` /
``coverage_cpp`` (a coverage check, a Python function / a C++ predicate,
that covers nothing) and ``fallback_policy`` (impl error policy "fallback").

Each variant is installed, timed and torn down in turn, in a shuffled order,
``--rounds`` times; the dispatch table of the op is checked to be back to
stock after every teardown. Times are the calling thread's CPU time
(time.thread_time), which a shared, loaded machine disturbs less than wall
time. Writes one JSON row per (op, numel, variant, chain) with the median and
quartiles of the per-call times of every timed block.

With ``--callgrind-calls K`` it times nothing: run under
``valgrind --tool=callgrind --collect-atstart=no``, it makes K calls of each
case with collection on and dumps the counts after each (a loop of K empty
iterations first, as the baseline to subtract), and writes the order of the
dumps to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.benchmark as benchmark

import native_registry.registry as registry
from native_registry import predicates as P

warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel.*")


# op name -> (op symbol, the statement timed with `op` the overload, whether
# accept_cpp's C++ impl, an elementwise binary op, computes it).
CALLS: dict[str, tuple[str, str, bool]] = {
    "mul": ("mul.Tensor", "op(a, b)", True),
    "add": ("add.Tensor", "op(a, b)", True),
    "sum": ("sum.dim_IntList", "op(a, [0], dtype=torch.float64)", False),
}


def op_call(op_name: str) -> tuple[str, str, Any, Callable[..., Any], bool]:
    """(op symbol, statement, the overload, a function making the call on
    (a, b), binary)."""
    op_symbol, stmt, binary = CALLS[op_name]
    name, _, overload = op_symbol.partition(".")
    op = getattr(getattr(torch.ops.aten, name), overload)
    call = eval(f"lambda a, b: {stmt}", {"op": op, "torch": torch})  # noqa: S307 (our own table)
    return op_symbol, stmt, op, call, binary


def never(*args: Any, **kwargs: Any) -> bool:
    """The Python cond of decline_py and upstream_decline_py."""
    return False


def forbidden_impl(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a benchmark that declines ran an impl")


def always(*args: Any, **kwargs: Any) -> bool:
    """The Python cond of accepted_py_cond."""
    return True


# What `prepared` returns: the op's result on the timed inputs, made before
# timing, so that the accepted rows price the route, not a kernel.
PREPARED: list[torch.Tensor] = []


def prepared(*args: Any, **kwargs: Any) -> torch.Tensor:
    """The Python impl of the accepted rows (and the call of direct_impl)."""
    return PREPARED[0]


# Variants timed with one node only, and the one that calls the impl itself.
ONE_NODE = frozenset({"accepted_cpp_cond", "accepted_py_cond", "direct_impl", "library_impl",
                      "upstream_accepted_py"})


# ---- the variants ----------------------------------------------------------------


@contextlib.contextmanager
def stock(op_symbol: str, chain: int) -> Iterator[None]:
    yield


def reference(cond: Any, impl: Callable[..., Any] = forbidden_impl
              ) -> Callable[[str, int], contextlib.AbstractContextManager]:
    @contextlib.contextmanager
    def install(op_symbol: str, chain: int) -> Iterator[None]:
        with registry.scoped():
            for i in range(chain):
                registry.register_op_override(f"bench{i}", "aten", op_symbol, "CPU", cond, impl)
            registry.register_all_overrides()
            yield

    return install


def with_feature(base: Callable[[str, int], contextlib.AbstractContextManager],
                 feature: Callable[[], contextlib.AbstractContextManager]
                 ) -> Callable[[str, int], contextlib.AbstractContextManager]:
    """`base` installed, with one of issue 30's opt-ins on around its calls."""
    @contextlib.contextmanager
    def install(op_symbol: str, chain: int) -> Iterator[None]:
        with base(op_symbol, chain), feature():
            yield

    return install


@contextlib.contextmanager
def setting(read_and_write: Callable[[Any], Any], value: Any) -> Iterator[None]:
    previous = read_and_write(value)
    try:
        yield
    finally:
        read_and_write(previous)


@contextlib.contextmanager
def routing_log_on() -> Iterator[None]:
    logger = logging.getLogger("native_registry.routing")
    handler = logging.NullHandler()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.setLevel(level)
        logger.propagate = propagate
        logger.removeHandler(handler)


@contextlib.contextmanager
def setting_read_then_written(read: Callable[[], Any], write: Callable[[Any], Any],
                              value: Any) -> Iterator[None]:
    previous = read()
    write(value)
    try:
        yield
    finally:
        write(previous)


def feature_rows(variants: dict) -> dict:
    features = {
        "stats": lambda: setting(registry.collect_stats, True),
        "thread_scope": lambda: registry.disabled_in_thread(dsl_names=["another_dsl"]),
        "routing_log": routing_log_on,
        "coverage_py": lambda: setting_read_then_written(
            registry.coverage_check, registry.set_coverage_check, lambda *args: False),
        "coverage_cpp": lambda: setting_read_then_written(
            registry.coverage_check, registry.set_coverage_check, P.dtype_in(torch.float16)),
    }
    rows = {f"{base}+{name}": with_feature(variants[base], feature)
            for base in ("decline_py", "accepted_py_cond") for name, feature in features.items()}
    rows["accepted_py_cond+fallback_policy"] = with_feature(
        variants["accepted_py_cond"], lambda: setting_read_then_written(
            registry.impl_error_policy, registry.set_impl_error_policy, "fallback"))
    return rows


@contextlib.contextmanager
def library_impl(op_symbol: str, chain: int) -> Iterator[None]:
    """``prepared`` as the op's CPU kernel, through torch.library."""
    library = torch.library.Library("aten", "IMPL", "CPU")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": meant
        warnings.simplefilter("ignore")
        library.impl(op_symbol, prepared, "CPU")
    try:
        yield
    finally:
        library._destroy()


def helper_accept(helper: ctypes.CDLL) -> Callable[[str, int], contextlib.AbstractContextManager]:
    @contextlib.contextmanager
    def install(op_symbol: str, chain: int) -> Iterator[None]:
        handle = helper.nr_bench_install(op_symbol.encode(), chain, 1)
        if not handle:
            raise RuntimeError(f"nr_bench_install({op_symbol!r}, {chain}) failed")
        try:
            yield
        finally:
            helper.nr_bench_remove(handle)

    return install


def load_upstream() -> Any | None:
    """torch._native.registry, if it has the API this benchmark drives."""
    try:
        import torch._native.registry as upstream
    except ImportError:
        return None
    needed = ("register_op_override", "_register_overrides_from_graph", "_aten_override_libs",
              "_graphs")
    return upstream if all(hasattr(upstream, name) for name in needed) else None


# Upstream's module state a registration touches; put back after each use.
_UPSTREAM_STATE = ("_graphs", "_dsl_name_to_lib_graph", "_op_symbol_to_lib_graph",
                   "_dispatch_key_to_lib_graph", "_native_decomp_overrides")


def upstream_router(upstream: Any, cond: Any = never, impl: Callable[..., Any] = forbidden_impl
                    ) -> Callable[[str, int], contextlib.AbstractContextManager]:
    @contextlib.contextmanager
    def install(op_symbol: str, chain: int) -> Iterator[None]:
        key = (op_symbol, "CPU")
        if key in upstream._aten_override_libs:
            raise RuntimeError(f"upstream already overrides {key}")
        saved = {name: {k: (list(v) if isinstance(v, list) else v)
                        for k, v in getattr(upstream, name).items()}
                 for name in _UPSTREAM_STATE}
        try:
            for i in range(chain):
                upstream.register_op_override(f"bench{i}", "aten", op_symbol, "CPU", cond, impl)
            upstream._register_overrides_from_graph(op_symbol, "CPU", upstream._graphs[key])
            yield
        finally:
            library = upstream._aten_override_libs.pop(key, None)
            if library is not None:
                library._destroy()
            for name, value in saved.items():
                state = getattr(upstream, name)
                state.clear()
                state.update(value)

    return install


# ---- timing ------------------------------------------------------------------------


def quantiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return q[0], statistics.median(values), q[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--helper", required=True, help="path to libnr_bench_helper.so")
    parser.add_argument("--ops", default="mul,add,sum")
    parser.add_argument("--sizes", default="2,1000,1000000")
    parser.add_argument("--chains", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.1,
                        help="seconds of calls per timed round of one row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--feature-rows", action="store_true",
                        help="also the rows with one of issue 30's opt-ins on (see above)")
    parser.add_argument("--out", required=True, help="where to write the JSON rows")
    parser.add_argument("--callgrind-calls", type=int, default=0,
                        help="count instructions under callgrind instead of timing")
    args = parser.parse_args()

    torch.set_num_threads(1)
    helper = ctypes.CDLL(args.helper)
    helper.nr_bench_install.restype = ctypes.c_void_p
    helper.nr_bench_install.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    helper.nr_bench_remove.argtypes = [ctypes.c_void_p]
    upstream = load_upstream()

    variants: dict[str, Callable[[str, int], contextlib.AbstractContextManager]] = {
        "decline_cpp": reference(P.dtype_in(torch.float16)),
        "accept_cpp": helper_accept(helper),
        "decline_py": reference(never),
        "accepted_cpp_cond": reference(P.dtype_in(torch.float32), prepared),
        "accepted_py_cond": reference(always, prepared),
        "direct_impl": stock,
        "library_impl": library_impl,
    }
    if upstream is not None:
        variants["upstream_decline_py"] = upstream_router(upstream)
        variants["upstream_accepted_py"] = upstream_router(upstream, always, prepared)
    else:
        print("torch._native.registry not found: no upstream rows", file=sys.stderr)

    if args.feature_rows:
        variants.update(feature_rows(variants))
    chains = [int(c) for c in args.chains.split(",")]
    if args.callgrind_calls:
        return count_instructions(args, variants, chains)
    rng = random.Random(args.seed)
    rows = []
    for op_name in args.ops.split(","):
        op_symbol, stmt, overload, op, binary = op_call(op_name)
        qualified = f"aten::{op_symbol}"
        before = torch._C._dispatch_dump(qualified)
        for numel in (int(n) for n in args.sizes.split(",")):
            a, b = torch.rand(numel), torch.rand(numel)
            expected = op(a, b)
            PREPARED[:] = [expected]
            cases = [("stock", 0)] + [(v, c) for v in applicable(variants, binary)
                                      for c in chains_of(v, chains)]
            blocks: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
            for _ in range(args.rounds):
                rng.shuffle(cases)
                for variant, chain in cases:
                    install = stock if variant == "stock" else variants[variant]
                    with install(op_symbol, chain):
                        # Not a timing check: the variant must compute what stock does.
                        if not torch.equal(op(a, b), expected):
                            raise AssertionError(f"{variant}/{chain} computes another result")
                        timed = stmt.replace("op(", "prepared(") if variant == "direct_impl" else stmt
                        timer = benchmark.Timer(stmt=timed, globals={"op": overload, "torch": torch,
                                                                          "a": a, "b": b,
                                                                          "prepared": prepared},
                                                timer=time.thread_time, num_threads=1)
                        measurement = timer.blocked_autorange(min_run_time=args.min_run_time)
                        blocks[(variant, chain)].extend(measurement.times)
                    if torch._C._dispatch_dump(qualified) != before:
                        raise AssertionError(f"{variant}/{chain} left {qualified} changed")
            for (variant, chain), times in blocks.items():
                p25, median, p75 = quantiles(times)
                rows.append({"lang": "python", "op": op_name, "variant": variant, "numel": numel,
                             "chain": chain, "median_ns": median * 1e9, "p25_ns": p25 * 1e9,
                             "p75_ns": p75 * 1e9, "samples": len(times)})
                print(f"python {op_name:3s} n={numel:<8d} {variant:20s} chain={chain:<3d} "
                      f"{median * 1e9:10.0f} ns  [{p25 * 1e9:.0f}, {p75 * 1e9:.0f}]", flush=True)

    with open(args.out, "w") as out:
        json.dump({"context": {"torch": torch.__version__, "python": platform.python_version(),
                               "upstream": upstream is not None, "timer": "time.thread_time",
                               "rounds": args.rounds, "min_run_time": args.min_run_time},
                   "rows": rows}, out, indent=1)
    return 0


def chains_of(variant: str, chains: list[int]) -> list[int]:
    return [1] if variant.partition("+")[0] in ONE_NODE else chains


def applicable(variants: dict, binary: bool) -> list[str]:
    """The variants an op is measured under: accept_cpp's impl computes
    elementwise binary ops only."""
    return [v for v in variants if binary or v != "accept_cpp"]


def count_instructions(args: argparse.Namespace, variants: dict, chains: list[int]) -> int:
    """One callgrind dump per case, in the order written to args.out."""
    toggle, dump = torch._C._valgrind_toggle, torch._C._valgrind_toggle_and_dump_stats
    calls = args.callgrind_calls
    order = []

    toggle()
    for _ in range(calls):
        pass
    dump()
    order.append({"lang": "python", "case": "baseline", "calls": calls})
    for op_name in args.ops.split(","):
        op_symbol, _, _, op, binary = op_call(op_name)
        for numel in (int(n) for n in args.sizes.split(",")):
            a, b = torch.rand(numel), torch.rand(numel)
            PREPARED[:] = [op(a, b)]
            for variant, chain in [("stock", 0)] + [(v, c) for v in applicable(variants, binary)
                                                    for c in chains_of(v, chains)]:
                install = stock if variant == "stock" else variants[variant]
                call = prepared if variant == "direct_impl" else op  # the same one call as timed
                with install(op_symbol, chain):
                    for _ in range(10):
                        call(a, b)
                    toggle()
                    for _ in range(calls):
                        call(a, b)
                    dump()
                order.append({"lang": "python", "op": op_name, "variant": variant,
                              "numel": numel, "chain": chain, "calls": calls})
    with open(args.out, "w") as out:
        json.dump(order, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
