"""The interface an implementation exposes to the Python conformance suite,
and how the suite finds it: a ``module:factory`` path given by ``--impl`` or
the environment variable NATIVE_REGISTRY_IMPL (default: the reference).

An adapter is any object with the attributes and methods of ``Adapter``. Node
objects it returns carry upstream's attributes: dsl_name, lib_symbol,
op_symbol, dispatch_key, cond_fn, impl_fn, node_id, try_initialize_runtime,
unconditional_override, active.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

ENV_VAR = "NATIVE_REGISTRY_IMPL"
DEFAULT = "adapters.reference:make"

# Features an adapter may declare; a behaviour that requires one the adapter
# lacks is reported "unsupported" rather than run (catalogue field `requires`).
FEATURES = frozenset({
    "namespaces",                      # lib_symbol other than aten, allowlist
    "runtime-init",                    # try_initialize_runtime
    "unconditional-survives-disable",  # the exemption exists as an API concept
    "unconditional-hatch",             # _unconditional_masked()
    "dynamo-shortcut",                 # the trace shortcut and its re-entrancy flag
    "native-op-meta",                  # _native::<node_id> with a fake/meta kernel
    "concurrent-control-plane",        # chain changes safe while calls run
    "reentrant-control-plane",         # a cond, impl or callback may use the control plane,
                                       # teardown included, during a call
    "torch-front-ends",                # serve_torch_front_ends(): torch.backends.python_native
                                       # and torch's DSL helpers call the implementation
    "takes-over-torch-native",         # serve_torch_front_ends() replaces a torch._native.registry
                                       # that already ran, taking its overrides over
    "variants",                        # variants_module(): upstream main's torch._native.variants
    "resolve-overload",                # resolve_overload(ns, op): main's _resolve_overload
    "declared-overrides",              # declared_overrides(): checks and registers a module's
                                       # _NAMESPACE/_DEFINING_MODULE/_OVERRIDES/_VARIANTS
    "native-predicates",               # predicates_module(): conds evaluated outside Python
                                       # (dtype_in(*dtypes), ...), taken as a cond by register
    "aot-coverage",                    # coverage_check(fn), aot_enabled(flag): upstream main's
                                       # AOT pre-check (aot_manifest.covers) and its switch
    "explain",                         # explain(op, *args, dispatch_key=None, **kwargs): each
                                       # node's verdict for a call and the kernel it would run
    "impl-error-fallback",             # impl_error_policy("raise" | "fallback"): an impl's error
                                       # runs the op's own kernel (beyond upstream)
    "thread-disables",                 # disabled_in_thread(dsl_names=, op_symbols=, dispatch_keys=):
                                       # this thread's calls skip the named overrides (beyond upstream)
    "routing-stats",                   # collect_stats(flag), node_stats(node), graph_stats(*key),
                                       # reset_stats(): per-node and per-graph counts (beyond upstream)
    "routing-observability",           # profiler ranges and the native_registry.routing
                                       # logger (beyond upstream)
})


class Adapter(Protocol):
    name: str           # short: the matrix column and, by default, expectations/<name>.toml
    description: str    # what exactly is under test, with versions
    # Optional (see ADAPTERS.md): `revision`, which API revision the
    # implementation is (expectation entries name it); `expectations_name`,
    # the expectation file's stem when it is not `name`.
    features: frozenset[str]
    log_name: str       # the logger that receives "Graph transformation failed"

    def scope(self) -> AbstractContextManager[None]:
        """Everything done inside is undone on exit, dispatcher included."""

    def register(self, dsl_name: str, lib_symbol: str, op_symbol: str, dispatch_key: str,
                 cond: Callable[..., bool] | None, impl: Callable[..., Any], *,
                 try_initialize_runtime: Callable[[], bool] | None = None,
                 unconditional_override: bool = False,
                 allow_multiple_override: bool | None = None) -> None:
        """None: the argument is not passed at all (it is upstream main's)."""
    def graph(self, lib_symbol: str, op_symbol: str, dispatch_key: str) -> list[Any]: ...
    def set_graph(self, lib_symbol: str, op_symbol: str, dispatch_key: str,
                  nodes: list[Any]) -> None: ...
    def install(self, lib_symbol: str, op_symbol: str, dispatch_key: str) -> None:
        """(Re)install one graph: the router is replaced, capturing the kernel
        live once the old one is gone; an empty chain leaves no router."""
    def install_all(self) -> None: ...
    def router_installed(self, lib_symbol: str, op_symbol: str, dispatch_key: str) -> bool:
        """Whether a router kernel for the key is in the dispatcher, whether or
        not its chain holds a node (a dormant router counts)."""
    def disable(self, *, dsl_names=None, op_symbols=None, dispatch_keys=None) -> None: ...
    def enable(self, *, dsl_names=None, op_symbols=None, dispatch_keys=None) -> None: ...
    def reorder(self, fn: Callable, *, reregister: bool = False) -> None: ...
    def dsl_operations(self, dsl_name: str, lib_symbol: str | None = None) -> list[str]: ...
    def allow_namespace(self, lib_symbol: str) -> None: ...
    def allowed_namespaces(self) -> frozenset[str]: ...
    def decomp_table(self, overrides_only: bool = False) -> dict: ...
    def unconditional_masked(self) -> AbstractContextManager[None]: ...
    def in_reentrant_call(self) -> bool: ...
    def make_node(self, *fields: Any) -> Any: ...
    def user_ordering_fn(self) -> Callable: ...
    def native_op(self, node: Any) -> Any: ...
    def serve_torch_front_ends(self) -> None: ...  # feature torch-front-ends
    def variants_module(self) -> Any: ...  # feature variants
    def resolve_overload(self, lib_symbol: str, op_symbol: str) -> Any: ...  # resolve-overload
    def declared_overrides(self) -> Any: ...  # feature declared-overrides
    def predicates_module(self) -> Any: ...  # feature native-predicates
    def coverage_check(self, check: Callable[..., bool]) -> AbstractContextManager[None]:
        """Feature aot-coverage: inside, routers of graphs installed inside ask
        check(op_symbol, dispatch_key, args, kwargs) before any cond."""
    def aot_enabled(self, enabled: bool) -> AbstractContextManager[None]:
        """Feature aot-coverage: coverage checks switched on or off inside."""
    def explain(self, op: Any, *args: Any, dispatch_key: str | None = None, **kwargs: Any) -> Any:
        """Feature explain: for the graph the call of op(*args, **kwargs) would
        reach (dispatch_key None: its highest key with a graph), an object with
        op ("ns::name.overload"), dispatch_key, why_key, router and coverage
        (str, in words), nodes (each with node_id, dsl_name, verdict, detail)
        and kernel (kind, node_id, dsl_name, detail), whose str() is its
        table; runs no impl and no runtime check. Verdicts and kernel kinds as
        the C++ adapter's."""
    def impl_error_policy(self, policy: str) -> AbstractContextManager[None]:
        """Feature impl-error-fallback: "raise" or "fallback" inside."""
    def disabled_in_thread(self, *, dsl_names: Sequence[str] = (), op_symbols: Sequence[str] = (),
                           dispatch_keys: Sequence[str] = ()) -> AbstractContextManager[None]:
        """Feature thread-disables: inside, this thread's calls see the named overrides as disabled."""
    def collect_stats(self, collect: bool) -> AbstractContextManager[None]:
        """Feature routing-stats: counting on or off inside."""
    def node_stats(self, node: Any) -> dict[str, int]:
        """Feature routing-stats: a node's taken, declined, runtime_unavailable, raised."""
    def graph_stats(self, lib_symbol: str, op_symbol: str, dispatch_key: str) -> dict[str, int]:
        """Feature routing-stats: a graph's calls and fallbacks (zeros if it routed none)."""
    def reset_stats(self) -> None:
        """Feature routing-stats: every count back to zero."""
    # Optional: self_check() -> None, the implementation's own consistency
    # check, raising on a broken invariant (see ADAPTERS.md, "self_check").


def load(spec: str | None = None) -> Adapter:
    spec = spec or os.environ.get(ENV_VAR) or DEFAULT
    module_name, _, factory = spec.partition(":")
    if not factory:
        raise ValueError(f"an implementation is named 'module:factory', got {spec!r}")
    adapter = getattr(importlib.import_module(module_name), factory)()
    unknown = set(adapter.features) - FEATURES
    if unknown:
        raise ValueError(f"{spec} declares unknown features {sorted(unknown)}")
    SPECS[id(adapter)] = spec
    return adapter


# The spec each loaded adapter came from, so a subprocess can load it again.
SPECS: dict[int, str] = {}


def self_check(adapter: Adapter) -> None:
    """Runs the adapter's optional self_check(), if it has one."""
    check = getattr(adapter, "self_check", None)
    if check is not None:
        check()


def revision_of(adapter: Adapter) -> str | None:
    return getattr(adapter, "revision", None)


def expectations_name(adapter: Adapter) -> str:
    return getattr(adapter, "expectations_name", adapter.name)


def identity(adapter: Adapter) -> str:
    """What tells two loads of an implementation apart: the description, the
    adapter's class and the file of the registry module it drives."""
    module = getattr(adapter, "module", None)
    where = getattr(module, "__file__", None) or getattr(module, "__name__", None)
    return f"{adapter.description} | {type(adapter).__module__}.{type(adapter).__qualname__} | {where}"


def subprocess_environment(adapter: Adapter) -> dict[str, str] | None:
    """The environment under which a child Python loads the same
    implementation (its spec in NATIVE_REGISTRY_IMPL, this process's
    sys.path as PYTHONPATH, every other variable inherited), or None when
    the adapter was not loaded by spec. The child must still check
    identity(): an implementation a pytest plugin swapped in is not
    reproduced this way."""
    spec = SPECS.get(id(adapter))
    if spec is None:
        return None
    env = dict(os.environ)
    env[ENV_VAR] = spec
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    return env
