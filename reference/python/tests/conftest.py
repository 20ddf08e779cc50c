"""Fixtures for the binding's tests: every test runs inside registry.scoped()
and must leave the dispatch tables of the ops it may touch exactly as it found
them."""

from __future__ import annotations

import pytest

import native_registry.registry as registry

from fixtures.python.torch_fixtures import (  # noqa: F401
    MISSING_NS, NS, NS2, assert_shared_tensors_intact, dispatcher_state, mul, twice_namespaces)


@pytest.fixture
def reg():
    """The registry module, with everything a test does undone afterwards."""
    before = dispatcher_state()
    saved_decomp = set(registry.native_decomp_table(overrides_only=True))
    with registry.scoped():
        yield registry
    assert dispatcher_state() == before, "the test left the dispatcher changed"
    assert_shared_tensors_intact()
    assert set(registry.native_decomp_table(overrides_only=True)) == saved_decomp
    registry._C.check_invariants()


@pytest.fixture
def namespaces(reg):
    """The two throwaway namespaces, allowlisted; the registry's routers on
    them are undone (an inner scope) before the namespaces go."""
    with twice_namespaces() as ops:
        for ns in (NS, NS2, MISSING_NS):
            reg.allow_namespace(ns)
        saved = reg.snapshot()
        try:
            yield ops
        finally:
            reg.restore(saved)
