"""The ordering function named by ``TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN``.

A module of its own, with nothing but the standard library: early activation
(``NATIVE_REGISTRY_AS_TORCH_NATIVE=1``) can hand it to ``torch._native``
while ``native_registry`` is still being imported (``import native_registry``
before ``import torch``: the package's ``import torch`` runs torch's
``torch._native``, which the early hook serves from this package).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Callable

ORDER_FN_ENV_VAR = "TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN"


@functools.cache
def get_user_ordering_fn() -> Callable[[str, str, list], list[Any]] | None:
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
