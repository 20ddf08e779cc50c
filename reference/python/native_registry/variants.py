"""Which of an override's named implementations runs: upstream main's
``torch._native.variants`` (pytorch/pytorch test/python_native/test_variants.py
@ 3e53db82), served as that module by :func:`upstream_compat.install_as_torch_native`.

A cond says whether an override applies to a call; a *variant* says which of
the implementations its module declares then runs. The selection is kept per
qualified op (``"ns::op"``), so two ops overridden by one module are chosen
independently. ``PASSTHROUGH`` is the one name reserved here: the override
stays installed (its cond still decides) and hands matched calls to the op's
own implementation (:func:`native_registry.declared.variant_rows` builds
overrides that do).

The environment variable ``TORCH_NATIVE_OVERRIDE_VARIANTS`` seeds the
selection once, when this module is first imported, as
``"ns::op=name;ns2::op2=name2"``. Entries that do not have that shape are
skipped, never raised on: the module is imported while ``import torch`` runs.

The names themselves are checked by the module that declares them (see
:mod:`native_registry.declared`), where the valid ones are known; here only
the form of the arguments is checked.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["PASSTHROUGH", "get_variant", "set_variant", "variant"]

PASSTHROUGH = "passthrough"
ENV_VAR = "TORCH_NATIVE_OVERRIDE_VARIANTS"
_ENV_VAR = ENV_VAR  # upstream's name


def _is_qualified(op: str) -> bool:
    namespace, sep, name = op.partition("::")
    return bool(sep and namespace.strip() and name.strip())


def _parse_env(raw: str | None) -> dict[str, str]:
    """The selection ``raw`` describes: ``;``-separated ``ns::op=name``
    entries, each part stripped of surrounding blanks; an entry without a
    qualified op, an ``=`` or a name is left out."""
    selection: dict[str, str] = {}
    for entry in (raw or "").split(";"):
        op, sep, name = (part.strip() for part in entry.partition("="))
        if sep and name and _is_qualified(op):
            selection[op] = name
    return selection


_selected: dict[str, str] = _parse_env(os.environ.get(ENV_VAR))


def _check_op(qualified_op: object) -> None:
    if not isinstance(qualified_op, str):
        raise TypeError(f"qualified_op must be a str 'ns::op', got {type(qualified_op).__name__}: "
                        f"{qualified_op!r}")
    if not _is_qualified(qualified_op):
        raise ValueError(f"qualified_op must name an op as 'ns::op', got {qualified_op!r}")


def get_variant(qualified_op: str, default: str) -> str:
    """The variant selected for ``qualified_op``, else ``default``."""
    return _selected.get(qualified_op, default)


def set_variant(qualified_op: str, name: str | None) -> None:
    """Select ``name`` for ``qualified_op``; ``None`` drops the selection, so
    the declaring module's default applies again."""
    _check_op(qualified_op)
    if name is None:
        _selected.pop(qualified_op, None)
        return
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"variant name for {qualified_op} must be a non-empty str or None, "
                         f"got {name!r}")
    _selected[qualified_op] = name


@contextlib.contextmanager
def variant(qualified_op: str, name: str | None) -> Iterator[None]:
    """Select ``name`` for the block; on leaving it (by an exception too) the
    selection is what it was before, a selection or none."""
    _check_op(qualified_op)
    had, previous = qualified_op in _selected, _selected.get(qualified_op)
    set_variant(qualified_op, name)
    try:
        yield
    finally:
        if had:
            _selected[qualified_op] = previous
        else:
            _selected.pop(qualified_op, None)
