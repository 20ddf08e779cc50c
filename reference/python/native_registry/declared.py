"""Overrides a module declares, as upstream main's registrars on namespaces
other than aten do (pytorch/pytorch test/python_native/test_override_declarations.py
@ dcc8e13d, test_variants.py @ 3e53db82).

A declaring module names

* ``_NAMESPACE``: the namespace of the ops it overrides (``"torch_nn"``);
* ``_DEFINING_MODULE``: the module whose import defines those ops (an op
  defined by Python exists only once that module has run);
* ``_OVERRIDES``: one row ``(op_symbol, cond, impl, ...)`` per override;
* optionally ``_VARIANTS`` (``{op_symbol: {name: variant}}``, each variant
  with callables ``eligible`` and ``impl``) and ``_DEFAULT_VARIANTS``
  (``{op_symbol: name}``): the implementations one may select by name with
  :mod:`native_registry.variants`.

:func:`check` verifies a declaration without registering anything;
:func:`register` checks, then registers every row; :func:`choose` is what an
impl calls to find the selected variant; :func:`variant_rows` builds the
``_OVERRIDES`` rows of a ``_VARIANTS`` table, as upstream main's override
modules build theirs (pytorch/pytorch torch/_native/ops/linear_cross_entropy/
cutedsl_impl.py @ 3e53db82, ``_make_variant_cond`` and ``_make_variant_impl``).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterable, Mapping
from typing import Any

from . import registry, variants


def _rows(module: types.ModuleType) -> list[tuple]:
    """The rows of ``_OVERRIDES``, each checked for its shape: a tuple or list
    ``(op_symbol, cond, impl, ...)`` with a non-empty str op_symbol and a
    callable cond and impl (ValueError naming the row otherwise), so that
    registering them cannot stop part-way for a malformed row."""
    name = module.__name__
    rows = getattr(module, "_OVERRIDES", None)
    if rows is None:
        raise ValueError(f"{name} declares no _OVERRIDES")
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
        raise ValueError(f"{name}: _OVERRIDES must be a sequence of rows "
                         f"(op_symbol, cond, impl, ...), got {type(rows).__name__}")
    checked = []
    for index, row in enumerate(rows):
        if not isinstance(row, (tuple, list)) or len(row) < 3:
            raise ValueError(f"{name}: _OVERRIDES row {index} must be a tuple (op_symbol, cond, "
                             f"impl, ...), got {row!r}")
        op_symbol, cond, impl = row[:3]
        if not isinstance(op_symbol, str) or not op_symbol:
            raise ValueError(f"{name}: _OVERRIDES row {index} names no op: its op_symbol is "
                             f"{op_symbol!r}")
        for part, value in (("cond", cond), ("impl", impl)):
            if not callable(value):
                raise ValueError(f"{name}: _OVERRIDES row {index} ({op_symbol}) has a "
                                 f"{part} that is not callable: {value!r}")
        checked.append(tuple(row))
    return checked


def _import_defining(name: str, defining: str) -> None:
    """Import the module that defines the declared ops; ValueError naming it
    when it cannot be found (or is named relatively, which has no package
    to be relative to here)."""
    if defining.startswith("."):
        raise ValueError(f"{name}: _DEFINING_MODULE {defining!r} is relative; name it in full")
    try:
        importlib.import_module(defining)
    except ImportError as e:
        raise ValueError(f"{name}: _DEFINING_MODULE {defining!r} cannot be imported: {e}") from e


def check(module: types.ModuleType) -> None:
    """Raise ValueError naming the first thing wrong with ``module``'s
    declaration: a missing ``_NAMESPACE`` or ``_DEFINING_MODULE``, a row of
    ``_OVERRIDES`` that is not ``(op_symbol, cond, impl, ...)`` with a str
    op_symbol and callable cond and impl, a defining module that cannot be
    imported, an op of ``_OVERRIDES`` that does not resolve once the
    defining module is imported, a ``_VARIANTS`` table that disagrees with ``_OVERRIDES`` or
    with ``_DEFAULT_VARIANTS``, or a variant without callable ``eligible``
    and ``impl``."""
    name = module.__name__
    namespace = getattr(module, "_NAMESPACE", None)
    defining = getattr(module, "_DEFINING_MODULE", None)
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"{name} declares no _NAMESPACE")
    if not isinstance(defining, str) or not defining:
        raise ValueError(f"{name} declares no _DEFINING_MODULE")
    ops = [row[0] for row in _rows(module)]
    _import_defining(name, defining)
    for op_symbol in ops:
        if registry._resolve_overload(namespace, op_symbol) is None:
            raise ValueError(f"{name} registers {namespace}::{op_symbol}, which does not "
                             f"resolve after importing {defining}")
    table = getattr(module, "_VARIANTS", None)
    if table is None:
        return
    defaults = getattr(module, "_DEFAULT_VARIANTS", None)
    if not isinstance(table, Mapping) or not all(isinstance(v, Mapping) for v in table.values()):
        raise ValueError(f"{name}: _VARIANTS must map each op to a mapping of its variants by "
                         f"name, got {table!r}")
    if set(table) != set(ops):
        raise ValueError(f"{name}: _VARIANTS covers {sorted(table)}, but the module registers "
                         f"{sorted(ops)}")
    if not isinstance(defaults, Mapping) or set(defaults) != set(ops):
        raise ValueError(f"{name}: _DEFAULT_VARIANTS must name a default for each of "
                         f"{sorted(ops)}, got {defaults!r}")
    for op_symbol, declared in table.items():
        for variant_name, entry in declared.items():
            for part in ("eligible", "impl"):
                if not callable(getattr(entry, part, None)):
                    raise ValueError(f"{name}: {op_symbol} variant {variant_name!r} has no "
                                     f"callable {part}")
        if defaults[op_symbol] not in declared:
            raise ValueError(f"{name}: default variant {defaults[op_symbol]!r} of {op_symbol} "
                             f"is not declared; declared: {sorted(declared)}")


def register(module: types.ModuleType, dsl_name: str, dispatch_key: str, *,
             target: Any = registry) -> None:
    """Check ``module``'s declaration, then register each row of its
    ``_OVERRIDES`` (``op_symbol, cond, impl``) by ``dsl_name`` at
    ``dispatch_key`` in its namespace, through ``target`` (a module with
    upstream's register_op_override; the reference's registry by default).

    All or nothing: nothing is registered if the check fails, and if the
    registry refuses a row (a refused dispatch key, a namespace off the
    allowlist, ...) the rows registered before it are taken back, through
    ``target``'s snapshot() and restore() (the reference's registry has
    them; a target without them gets the check only), and the refusal is
    raised."""
    check(module)
    rows = _rows(module)
    saved = target.snapshot() if hasattr(target, "snapshot") and hasattr(target, "restore") else None
    try:
        for op_symbol, cond, impl, *_ in rows:
            target.register_op_override(dsl_name, module._NAMESPACE, op_symbol, dispatch_key,
                                        cond, impl)
    except BaseException:
        if saved is not None:
            target.restore(saved)
        raise


def choose(qualified_op: str, declared: Mapping[str, Any], default: str) -> Any:
    """The variant selected for ``qualified_op`` among ``declared`` (the
    module's default when none is selected); ``variants.PASSTHROUGH`` when
    that is selected and not declared (a declared passthrough variant is
    returned as any other). An unknown name raises ValueError listing the
    declared names and passthrough."""
    name = variants.get_variant(qualified_op, default)
    if name in declared:
        return declared[name]
    if name == variants.PASSTHROUGH:
        return variants.PASSTHROUGH
    raise ValueError(f"{qualified_op}: no variant {name!r}; it declares "
                     f"{sorted(set(declared) | {variants.PASSTHROUGH})}")


def variant_rows(namespace: str, table: Mapping[str, Mapping[str, Any]],
                 defaults: Mapping[str, str]) -> tuple[tuple[str, Any, Any], ...]:
    """One ``(op_symbol, cond, impl)`` row per op of ``table`` (a module's
    ``_VARIANTS``), whose cond and impl follow the variant selected for
    ``namespace::op_symbol`` at each call (``defaults[op_symbol]`` when none
    is):

    * a declared variant: the cond is its ``eligible``, the impl its ``impl``
      (a declared ``passthrough`` variant too: upstream's modules declare one
      whose impl is the op's own body);
    * ``passthrough`` not declared: the cond declines, so the router hands the
      call on as any declined call, to the op's own kernel where this is the
      only override at the key. The override stays installed and its cond in
      play; the reference's impl cannot reach the kernel below its router
      itself, so declining is how it hands the call over;
    * any other name: the cond accepts, so that the impl raises ValueError
      naming the declared variants (a typo must not fall back silently).
    """
    def make(op_symbol: str, declared: Mapping[str, Any], default: str) -> tuple:
        qualified = f"{namespace}::{op_symbol}"

        def cond(*args: Any, **kwargs: Any) -> bool:
            name = variants.get_variant(qualified, default)
            selected = declared.get(name)
            if selected is None:
                return name != variants.PASSTHROUGH
            return bool(selected.eligible(*args, **kwargs))

        def impl(*args: Any, **kwargs: Any) -> Any:
            selected = choose(qualified, declared, default)
            if selected == variants.PASSTHROUGH:
                # selected between this call's cond and impl (another thread)
                raise RuntimeError(f"{qualified}: passthrough was selected after the override "
                                   "accepted the call; it cannot hand it back now")
            return selected.impl(*args, **kwargs)

        cond.__qualname__ = f"variant_cond[{qualified}]"
        impl.__qualname__ = f"variant_impl[{qualified}]"
        return op_symbol, cond, impl

    return tuple(make(op, declared, defaults[op]) for op, declared in table.items())
