"""Upstream PyTorch main's registry module, loaded from a file, on the
installed PyTorch: `NATIVE_REGISTRY_UPSTREAM_MAIN=/path/to/registry.py`
(a copy of main's torch/_native/registry.py; this project ships none).

Main's module expects two things of a newer PyTorch that 2.13 lacks, which
this adapter provides and says so in its description: the C++ flag of the
unconditional mask (torch._C._get/_set_native_aot_unconditional_masked), as a
Python flag; and the sibling module `aot_manifest` (AOT kernels embedded in
aten), as one that reports no coverage, which is what main answers for an op
without an AOT declaration. The hatch is main's documented mechanism
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

from .upstream import UpstreamAdapter

ENV_VAR = "NATIVE_REGISTRY_UPSTREAM_MAIN"
PACKAGE = "_upstream_main_native"


def _provide_the_mask_flag() -> None:
    if hasattr(torch._C, "_get_native_aot_unconditional_masked"):
        return
    state = {"masked": False}
    torch._C._get_native_aot_unconditional_masked = lambda: state["masked"]
    torch._C._set_native_aot_unconditional_masked = lambda masked: state.update(masked=bool(masked))


def _load(path: str) -> types.ModuleType:
    if PACKAGE + ".registry" in sys.modules:
        return sys.modules[PACKAGE + ".registry"]
    package = types.ModuleType(PACKAGE)
    package.__path__ = []
    manifest = types.ModuleType(PACKAGE + ".aot_manifest")
    manifest.get_coverage = lambda op_symbol, dispatch_key: None
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
        self.module = _load(path)
        self.log_name = self.module.__name__
        super().__init__()
        self.revision = "namespaced-api-registry-only"
        self.description = (f"upstream main's registry.py ({path}) on torch {torch.__version__}, "
                            "with a Python mask flag and an empty aot_manifest")

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
