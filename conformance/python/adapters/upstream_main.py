"""Upstream PyTorch main's registry module, loaded from a file, on the
installed PyTorch: `NATIVE_REGISTRY_UPSTREAM_MAIN=/path/to/registry.py`
(a copy of main's torch/_native/registry.py; this project ships none).

Main's module expects things of a newer PyTorch that 2.13 lacks, which this
adapter provides and says so in its description: the C++ flags of the
unconditional mask (torch._C._get/_set_native_aot_unconditional_masked) and
of AOT kernels (torch._C._get/_set_native_aot_enabled, off where
TORCH_DISABLE_NATIVE_AOT=1), as Python flags; and the sibling module
`aot_manifest` (AOT kernels embedded in aten), whose get_coverage answers
None (no AOT declaration, main's answer for almost every op) except inside
the adapter's coverage_check() scope, where its covers() asks that check
as main's does its grid (gated on the switch, an exception 'uncovered'). The hatch is main's documented mechanism
(_set_mask_unconditional, which torch._native._unconditional_masked() flips).
Main's get_user_ordering_fn lives in torch/_native/__init__.py, which is not
loaded; the two behaviours that need it are expectation entries.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types

import torch

from . import setting_for_the_scope
from .upstream import UpstreamAdapter

ENV_VAR = "NATIVE_REGISTRY_UPSTREAM_MAIN"
PACKAGE = "_upstream_main_native"


def _provide_the_mask_flag() -> None:
    if hasattr(torch._C, "_get_native_aot_unconditional_masked"):
        return
    state = {"masked": False}
    torch._C._get_native_aot_unconditional_masked = lambda: state["masked"]
    torch._C._set_native_aot_unconditional_masked = lambda masked: state.update(masked=bool(masked))


# The check the adapter's coverage_check() scope sets; None outside one.
_COVERAGE: dict[str, object] = {"check": None}


def _provide_the_aot_switch() -> None:
    """main's Context flag of AOT kernels (torch._C._get/_set_native_aot_enabled),
    as a Python flag that starts off where TORCH_DISABLE_NATIVE_AOT=1, as
    main's does."""
    if hasattr(torch._C, "_get_native_aot_enabled"):
        return
    state = {"enabled": os.environ.get("TORCH_DISABLE_NATIVE_AOT") != "1"}
    torch._C._get_native_aot_enabled = lambda: state["enabled"]
    torch._C._set_native_aot_enabled = lambda enabled: state.update(enabled=bool(enabled))


class _Coverage:
    """What main's aot_manifest.get_coverage returns for an op with an AOT
    declaration, with the adapter's check in place of main's grid matching:
    covers() gates on the Context switch and degrades an exception to
    'uncovered', as main's _Coverage.covers does."""

    def __init__(self, op_symbol: str, dispatch_key: str) -> None:
        self.op_symbol, self.dispatch_key = op_symbol, dispatch_key

    def covers(self, args: tuple, kwargs: dict) -> bool:
        check = _COVERAGE["check"]
        if check is None or not torch._C._get_native_aot_enabled():
            return False
        try:
            return bool(check(self.op_symbol, self.dispatch_key, args, kwargs))
        except Exception:
            return False


def _get_coverage(op_symbol: str, dispatch_key: str) -> _Coverage | None:
    """Every op is 'declared' while a coverage_check() scope is open (main
    asks at install), none otherwise, which is what main answers for an op
    without an AOT declaration."""
    return _Coverage(op_symbol, dispatch_key) if _COVERAGE["check"] is not None else None


def _load(path: str) -> types.ModuleType:
    if PACKAGE + ".registry" in sys.modules:
        return sys.modules[PACKAGE + ".registry"]
    package = types.ModuleType(PACKAGE)
    package.__path__ = []
    manifest = types.ModuleType(PACKAGE + ".aot_manifest")
    manifest.get_coverage = _get_coverage
    sys.modules[PACKAGE], sys.modules[manifest.__name__] = package, manifest
    package.aot_manifest = manifest
    spec = importlib.util.spec_from_file_location(PACKAGE + ".registry", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    # Ids far from those of the installed torch._native, which shares the
    # `_native` namespace in this process.
    module._node_id_counter = 1_000_000
    return module


class UpstreamMainAdapter(UpstreamAdapter):
    name = "upstream-main"
    expectations_name = "upstream"   # one file for upstream's revisions

    def __init__(self) -> None:
        path = os.environ.get(ENV_VAR)
        if not path or not os.path.isfile(path):
            raise ImportError(f"{ENV_VAR} must name upstream main's torch/_native/registry.py, got {path!r}")
        _provide_the_mask_flag()
        _provide_the_aot_switch()
        self.module = _load(path)
        self.log_name = self.module.__name__
        super().__init__()
        self.revision = "namespaced-api-registry-only"
        self.features = self.features | {"aot-coverage"}
        self.description = (f"upstream main's registry.py ({path}) on torch {torch.__version__}, "
                            "with Python mask and AOT flags and an aot_manifest whose coverage "
                            "is the adapter's check")

    @contextlib.contextmanager
    def scope(self):
        # The mask's flag is process state, and main's _unconditional_masked()
        # leaves it set where entering raised (its rebuild raises after the
        # flag is set): each scope puts it back, so that a mask that failed
        # fails its own test, not every later one's.
        masked = torch._C._get_native_aot_unconditional_masked()
        try:
            with super().scope():
                yield
        finally:
            torch._C._set_native_aot_unconditional_masked(masked)

    def _hatch(self):
        module = self.module

        @contextlib.contextmanager
        def masked():
            previous = module._set_mask_unconditional(True)
            try:
                yield
            finally:
                module._set_mask_unconditional(previous)

        return masked

    def coverage_check(self, check):
        return setting_for_the_scope(lambda: _COVERAGE["check"],
                                     lambda value: _COVERAGE.update(check=value), check)

    def aot_enabled(self, enabled):
        return setting_for_the_scope(torch._C._get_native_aot_enabled,
                                     torch._C._set_native_aot_enabled, enabled)

    def variants_module(self):
        """main's torch/_native/variants.py, where it lies beside the registry
        file (NATIVE_REGISTRY_UPSTREAM_MAIN's directory), loaded as that
        package's `variants`; None where it does not."""
        name = PACKAGE + ".variants"
        if name in sys.modules:
            return sys.modules[name]
        path = os.path.join(os.path.dirname(os.environ[ENV_VAR]), "variants.py")
        if not os.path.isfile(path):
            return None
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def user_ordering_fn(self):
        raise NotImplementedError("main's get_user_ordering_fn (torch/_native/__init__.py) is not loaded")


def make() -> UpstreamMainAdapter:
    return UpstreamMainAdapter()
