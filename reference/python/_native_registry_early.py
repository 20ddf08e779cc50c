"""Early activation: the reference becomes ``torch._native.registry`` before
torch's registrars run, so they register straight into it (no takeover).

Off unless the environment variable ``NATIVE_REGISTRY_AS_TORCH_NATIVE`` is
``1``. The wheel installs ``native_registry_early.pth``, whose one line reads
the variable at interpreter start-up and, only when it is set, imports this
module and calls :func:`activate`. This module imports nothing beyond the
standard library and never imports torch itself: it puts a one-shot finder
in front of ``sys.meta_path`` that, when ``import torch`` reaches its last
step (``import torch._native``), places
``native_registry.upstream_compat`` as ``torch._native.registry`` before
torch's ``torch/_native/__init__.py`` runs, lets that run (its registrars
and its ``_register_all_overrides()`` then go to the reference), and ends
with ``upstream_compat.install_as_torch_native()`` (variants, front ends).

Misconfiguration is reported on stderr and never stops the interpreter: a
value other than ``1`` or ``0``, torch already imported, or a
native_registry that cannot be imported (torch then keeps its own registry).
"""

from __future__ import annotations

import sys

ENV_VAR = "NATIVE_REGISTRY_AS_TORCH_NATIVE"


def _warn(message: str) -> None:
    sys.stderr.write(f"native_registry: {ENV_VAR}: {message}\n")


class _Loader:
    """torch's own loader of torch._native, with the reference in place."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            from native_registry import upstream_compat
        except Exception as e:  # a broken install must not make torch unimportable
            _warn(f"native_registry cannot be imported ({e!r}); torch._native keeps its "
                  "own registry")
            self._inner.exec_module(module)
            return
        sys.modules["torch._native.registry"] = upstream_compat
        module.registry = upstream_compat
        self._inner.exec_module(module)
        upstream_compat.install_as_torch_native()


class _Finder:
    """Finds torch._native once, through the ordinary path finder, and hands
    it to :class:`_Loader`."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch._native":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def activate(value: str | None) -> bool:
    """Arm the finder when ``value`` is "1"; "0" or empty: off. Returns
    whether it is armed."""
    value = (value or "").strip()
    if value in ("", "0"):
        return False
    if value != "1":
        _warn(f"expected 1 or 0, got {value!r}; the reference is not activated")
        return False
    if "torch._native" in sys.modules:
        _warn("torch._native is already imported; call "
              "native_registry.upstream_compat.install_as_torch_native() instead")
        return False
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return True
