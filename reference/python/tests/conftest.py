"""Fixtures for the binding's tests: every test runs inside registry.scoped()
and must leave the dispatch tables of the ops it may touch exactly as it found
them (torch._C._dispatch_dump and _dispatch_dump_table)."""

from __future__ import annotations

import contextlib

import pytest
import torch

import native_registry.registry as registry

NS = "_native_registry_test"
NS2 = "_native_registry_test2"
MISSING_NS = "_native_registry_missing_ns"

WATCHED = ["aten::mul.Tensor", "aten::add.Tensor", "aten::bmm", f"{NS}::twice", f"{NS2}::twice"]


def dispatcher_state() -> dict[str, str]:
    state = {}
    for name in WATCHED:
        try:
            state[name] = torch._C._dispatch_dump(name) + torch._C._dispatch_dump_table(name)
        except RuntimeError:
            state[name] = "<absent>"
    state["_native ops"] = "\n".join(
        sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("_native::"))
    )
    return state


@pytest.fixture
def reg():
    """The registry module, with everything a test does undone afterwards."""
    before = dispatcher_state()
    saved_decomp = dict(registry._native_decomp_overrides)
    with registry.scoped():
        yield registry
    assert dispatcher_state() == before, "the test left the dispatcher changed"
    assert registry._native_decomp_overrides == saved_decomp


@pytest.fixture
def namespaces(reg):
    """Two throwaway namespaces defining the same op `twice` (composite only):
    x*2 in NS, x*3 in NS2. Allowlisted for the test."""
    with contextlib.ExitStack() as stack:
        lib = stack.enter_context(torch.library._scoped_library(NS, "DEF"))
        lib.define("twice(Tensor self) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
        lib2 = stack.enter_context(torch.library._scoped_library(NS2, "DEF"))
        lib2.define("twice(Tensor self) -> Tensor")
        lib2.impl("twice", lambda x: x * 3, "CompositeExplicitAutograd")
        for ns in (NS, NS2, MISSING_NS):
            reg.allow_namespace(ns)
        # Registry teardown (the reg fixture) runs after the namespaces close
        # only if we undo our own routers first: do it here, innermost.
        saved = reg.snapshot()
        try:
            yield getattr(torch.ops, NS).twice.default, getattr(torch.ops, NS2).twice.default
        finally:
            reg.restore(saved)


def mul(a, b):
    return torch.ops.aten.mul.Tensor(a, b)
