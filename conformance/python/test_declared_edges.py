"""Declared overrides and the variants module at their edges: a relative
defining module refused although its ops resolve, registration through a
target that cannot take rows back, the names of the rows variant_rows
builds, and the variants module's names as upstream main's module has them."""

from __future__ import annotations

import importlib
import re
import sys

import pytest

from conftest import behaviour
from test_declared_contracts import (  # noqa: F401 (declaring: the fixture, for the tests here)
    NS, accept, assert_check_and_register_refuse, declaring, fill, graphs)


@behaviour("declared.check-raises-valueerror")
def test_a_relative_defining_module_is_refused_even_where_its_ops_resolve(impl, declaring):
    """The defining module imported already (its ops resolve): naming it
    relatively is still a ValueError naming it, and nothing registers."""
    declared = impl.declared_overrides()
    importlib.import_module(declaring._DEFINING_MODULE)
    relative = "." + declaring._DEFINING_MODULE
    declaring._DEFINING_MODULE = relative
    with impl.scope():
        impl.allow_namespace(NS)
        assert_check_and_register_refuse(declared, declaring, re.escape(relative))
        assert graphs(impl)["first"] == []


class Target:
    """A registry-like target of declared.register: upstream's
    register_op_override, refusing the op `refuses`; snapshot() and
    restore() only where asked for, each noted in `calls`."""

    def __init__(self, refuses: str, snapshot: bool, restore: bool):
        self.refuses, self.rows, self.calls = refuses, [], []
        if snapshot:
            self.snapshot = lambda: self.calls.append("snapshot") or "saved"
        if restore:
            self.restore = lambda saved: self.calls.append(("restore", saved))

    def register_op_override(self, dsl_name, lib_symbol, op_symbol, dispatch_key, cond, impl,
                             **kwargs):
        if op_symbol == self.refuses:
            raise ValueError(f"{op_symbol} refused by the target")
        self.rows.append((lib_symbol, op_symbol, dispatch_key))


@behaviour("declared.register-all-or-nothing")
@pytest.mark.parametrize("snapshot, restore", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["neither", "snapshot-only", "restore-only", "both"])
def test_a_target_registers_the_rows_and_its_refusal_is_raised_as_it_is(impl, declaring, snapshot,
                                                                        restore):
    """register(..., target=T) registers through T. A refusal part-way is
    raised as T raised it; T's rows are taken back through T's snapshot()
    and restore() where T has both, and neither is called where T lacks one."""
    declared = impl.declared_overrides()
    declaring._OVERRIDES += (("composite", accept, fill(5.0)),)
    importlib.import_module(declaring._DEFINING_MODULE)
    target = Target("composite", snapshot, restore)
    with pytest.raises(ValueError, match="composite refused by the target"):
        declared.register(declaring, "test_dsl", "CPU", target=target)
    assert target.rows == [(NS, "first", "CPU")]
    expected = ["snapshot", ("restore", "saved")] if snapshot and restore else []
    assert target.calls == expected, f"a target with snapshot={snapshot}, restore={restore} got {target.calls}"
    # Through a target that takes everything, every row is registered.
    target = Target("nothing", snapshot, restore)
    declared.register(declaring, "test_dsl", "CPU", target=target)
    assert target.rows == [(NS, "first", "CPU"), (NS, "composite", "CPU")]


@behaviour("declared.variant-rows-named")
def test_the_rows_variant_rows_builds_name_their_op(impl):
    class Variant:
        @staticmethod
        def eligible(*args, **kwargs):
            return True

        @staticmethod
        def impl(a, *rest, **kwargs):
            return a

    declared = impl.declared_overrides()
    rows = declared.variant_rows("aten", {"mul.Tensor": {"v": Variant}, "add.Tensor": {"v": Variant}},
                                 {"mul.Tensor": "v", "add.Tensor": "v"})
    assert sorted(row[0] for row in rows) == ["add.Tensor", "mul.Tensor"]
    for op_symbol, cond, body in rows:
        for part in (cond, body):
            assert f"aten::{op_symbol}" in part.__qualname__, (
                f"the row of aten::{op_symbol} is named {part.__qualname__!r}")
            assert f"aten::{op_symbol}" in repr(part)


@behaviour("variants.upstream-names")
def test_the_variants_module_has_upstreams_names(impl):
    if "variants" not in impl.features:
        pytest.skip("unsupported: the adapter has no variants module")
    module = impl.variants_module()
    assert sys.modules.get(module.__name__) is module
    namespace: dict = {}
    exec(f"from {module.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == {"PASSTHROUGH", "get_variant", "set_variant", "variant"}
    assert module._ENV_VAR == "TORCH_NATIVE_OVERRIDE_VARIANTS"
