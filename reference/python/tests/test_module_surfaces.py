"""The package's modules' public surfaces where generated mutants found them
unpinned (session 26): each module's ``__all__`` (what ``import *`` gives),
``predicates.Predicate``, a ``Snapshot`` being immutable, ``disallow_namespace``
taking a namespace off the allowlist, and the names and filter sets
``upstream_compat`` carries for code written against torch's module."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

import native_registry
from native_registry import _C, nodes, observe, predicates, upstream_compat, variants
import native_registry.registry as registry


def star(module_name: str) -> list[str]:
    found: dict = {}
    exec(f"from {module_name} import *", found)  # noqa: S102
    return sorted(n for n in found if n != "__builtins__")


@pytest.mark.parametrize("module, names", [
    (observe, ["NodeStats", "GraphStats", "RoutingStats", "DisabledInThread", "routing_log"]),
    (variants, ["PASSTHROUGH", "get_variant", "set_variant", "variant"]),
])
def test_each_module_exports_its_documented_names(module, names):
    assert module.__all__ == names
    assert star(module.__name__) == sorted(names)


def test_predicate_is_the_type_of_every_predicate():
    assert predicates.Predicate is _C.predicates.Predicate
    assert "Predicate" in star("native_registry.predicates")
    assert isinstance(predicates.dtype_in(torch.float32) & predicates.not_cow(), predicates.Predicate)


def test_a_snapshot_is_immutable(reg):
    saved = reg.snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        saved._native = reg.snapshot()._native
    hash(saved)  # frozen: hashable by its one field


def test_disallow_namespace_takes_it_off_the_allowlist(reg):
    ns = "_native_registry_surface_ns"
    reg.allow_namespace(ns)
    assert ns in reg.allowed_namespaces()
    reg.disallow_namespace(ns)
    assert ns not in reg.allowed_namespaces()
    with pytest.raises(ValueError):
        reg.register_op_override("surface", ns, "twice", "CPU", lambda *a: True, lambda x: x)


# ---- upstream_compat: torch's module's names -------------------------------------------------


def test_upstream_compat_carries_torchs_names():
    assert upstream_compat._DISALLOWED_DISPATCH_KEYS == frozenset(
        {"Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"})
    assert upstream_compat._always_true(1, x=2) is True
    assert upstream_compat._always_true is nodes._always_true
    assert upstream_compat.UserOrderingFn is nodes.UserOrderingFn
    assert upstream_compat.GraphKey == tuple[str, str, str]
    assert typing.get_args(upstream_compat.UserOrderingFn)[1] == list[upstream_compat._OverrideNode]


def test_upstream_compat_register_all_overrides_installs_every_graph(reg):
    assert upstream_compat.register_all_overrides is upstream_compat._register_all_overrides
    reg.register_op_override("surface", "aten", "mul.Tensor", "CPU", lambda *a, **k: True,
                             lambda a, b: torch.full_like(a, 7.0))
    upstream_compat.register_all_overrides()
    assert torch.equal(torch.ones(2) * torch.ones(2), torch.full((2,), 7.0))


@pytest.mark.parametrize("attribute, entry, field", [
    ("_dsl_names", "surface_dsl", 0),
    ("_op_symbols", "mul.Tensor", 1),
    ("_dispatch_keys", "CPU", 2),
])
def test_upstream_compat_filter_sets_are_the_cores_three_lists(reg, attribute, entry, field):
    filters = getattr(upstream_compat._filter_state, attribute)
    filters.add(entry)
    assert [list(f) for f in _C.filters()] == [[entry] if i == field else [] for i in range(3)]
    assert entry in filters and list(filters) == [entry]
    filters.discard(entry)
    assert [list(f) for f in _C.filters()] == [[], [], []]
    reg.deregister_op_overrides(**{("disable_dsl_names", "disable_op_symbols",
                                    "disable_dispatch_keys")[field]: entry})
    assert list(filters) == [entry]
