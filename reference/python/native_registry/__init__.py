"""native_registry: the reference op-override registry, in C++ on LibTorch's
dispatcher, with upstream ``torch._native``'s Python API.

    import native_registry.registry as registry   # drop-in for torch._native.registry
    from native_registry import get_user_ordering_fn, _unconditional_masked
"""

from __future__ import annotations

import functools
import importlib
import os

import torch  # noqa: F401  (LibTorch must be loaded before the extension)

from . import predicates, registry
from ._version import __version__  # noqa: F401  (written by Meson)
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

ORDER_FN_ENV_VAR = "TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN"

# For CMAKE_PREFIX_PATH, as torch.utils.cmake_prefix_path: find_package(native_registry)
# finds the installed package's CMake files there (share/cmake/native_registry).
cmake_prefix_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "share", "cmake")


@functools.cache
def get_user_ordering_fn() -> UserOrderingFn | None:
    """The ordering function named by ``TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN``
    (``package.module.fn``), or None when it is unset or empty.

    Raises ValueError ("Could not resolve ...") when the name does not lead to
    a callable. Cached, like upstream's: call ``get_user_ordering_fn.cache_clear()``
    after changing the variable.
    """
    spec = os.getenv(ORDER_FN_ENV_VAR)
    if not spec:
        return None
    try:
        module_name, fn_name = spec.rsplit(".", 1)
        fn = getattr(importlib.import_module(module_name), fn_name)
        if not callable(fn):
            raise TypeError(f"{spec} is not callable")
    except Exception as e:
        raise ValueError(
            f"Could not resolve {ORDER_FN_ENV_VAR}={spec!r} into an importable, callable "
            "function (expected 'package.module.function')"
        ) from e
    return fn
