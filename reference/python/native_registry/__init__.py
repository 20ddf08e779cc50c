"""native_registry: the reference op-override registry, in C++ on LibTorch's
dispatcher, with upstream ``torch._native``'s Python API.

    import native_registry.registry as registry   # drop-in for torch._native.registry
    from native_registry import get_user_ordering_fn, _unconditional_masked
"""

from __future__ import annotations

import os

import torch  # noqa: F401  (LibTorch must be loaded before the extension)

from . import predicates, registry
from ._version import __version__  # noqa: F401  (written by Meson)
from .explain import Explanation, explain  # noqa: F401
from .registry import (  # noqa: F401
    Snapshot,
    UserOrderingFn,
    _OverrideNode,
    _unconditional_masked,
    allow_namespace,
    allowed_namespaces,
    deregister_op_overrides,
    disallow_namespace,
    get_dsl_operations,
    native_decomp_table,
    reenable_op_overrides,
    register_all_overrides,
    register_op_override,
    reorder_graphs_from_user_function,
    restore,
    scoped,
    snapshot,
)

# The ordering function named by the environment: its own module, so that
# install_as_torch_native can reach it while this package is still importing.
from .ordering_env import ORDER_FN_ENV_VAR, get_user_ordering_fn  # noqa: E402,F401

# For CMAKE_PREFIX_PATH, as torch.utils.cmake_prefix_path: find_package(native_registry)
# finds the installed package's CMake files there (share/cmake/native_registry).
cmake_prefix_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "share", "cmake")


def __getattr__(name: str) -> object:
    """``check_overrides`` (from .check), imported on first use: imported
    here, ``python -m native_registry.check`` would find its module loaded
    before running it as __main__ (runpy's RuntimeWarning, two copies)."""
    if name == "check_overrides":
        from .check import check_overrides

        return check_overrides
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
