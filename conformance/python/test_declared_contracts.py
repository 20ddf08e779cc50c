"""Issue 27, item 7: declared overrides and _resolve_overload keep their
contracts. A declaration is registered all or nothing, its rows are checked
before anything registers, a defining module that cannot be imported is a
ValueError naming it, and _resolve_overload gives an OpOverload or None for
every input. None of this is in the seed file: the behaviours are
`recommended`."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest
import torch

from conftest import behaviour

NS = "_native_registry_declared_ns"
DEFINING = '''
import torch
LIB = torch.library.Library({ns!r}, "FRAGMENT")
LIB.define("first(Tensor self) -> Tensor")
LIB.impl("first", lambda x: x * 10, "CPU")
LIB.define("composite(Tensor self) -> Tensor")
LIB.impl("composite", lambda x: x * 20, "CompositeImplicitAutograd")
'''


def accept(*a, **k):
    return True


def fill(value):
    return lambda a, *rest: torch.full_like(a, value)


@pytest.fixture
def declaring(impl, tmp_path, monkeypatch):
    """A declaring module on NS with one row (NS::first, CPU kernel x*10);
    its defining module, a file the check imports, also defines
    NS::composite (CompositeImplicitAutograd only). The ops go after the test."""
    name = "_native_registry_declared_defining"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(DEFINING.format(ns=NS)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = types.ModuleType("_native_registry_declared_declaring")
    module._NAMESPACE, module._DEFINING_MODULE = NS, name
    module._OVERRIDES = (("first", accept, fill(4.0)),)
    yield module
    defining = sys.modules.pop(name, None)
    if defining is not None:
        defining.LIB._destroy()


def assert_check_and_register_refuse(declared, module, match: str) -> None:
    """check(module) and register(module, ...) each raise ValueError matching `match`."""
    for call in (lambda: declared.check(module),
                 lambda: declared.register(module, "test_dsl", "CPU")):
        with pytest.raises(ValueError, match=match):
            call()


def graphs(impl):
    return {op: [n.node_id for n in impl.graph(NS, op, "CPU")] for op in ("first", "composite")}


@behaviour("declared.register-all-or-nothing")
def test_a_row_the_registry_refuses_takes_back_the_rows_before_it(impl, declaring):
    """The second row overrides a CompositeImplicitAutograd op at CPU. A
    registry that refuses it must leave the first row unregistered too; one
    that accepts it registers both."""
    declared = impl.declared_overrides()
    declaring._OVERRIDES += (("composite", accept, fill(5.0)),)
    with impl.scope():
        impl.allow_namespace(NS)
        try:
            declared.register(declaring, "test_dsl", "CPU")
        except ValueError:
            assert graphs(impl) == {"first": [], "composite": []}, (
                f"a refused declaration left rows registered: {graphs(impl)}")
        else:
            assert all(len(ids) == 1 for ids in graphs(impl).values()), graphs(impl)


@behaviour("declared.register-all-or-nothing")
def test_a_declaration_registers_every_row_once_checked(impl, declaring):
    declared = impl.declared_overrides()
    with impl.scope():
        impl.allow_namespace(NS)
        declared.register(declaring, "test_dsl", "CPU")
        assert len(graphs(impl)["first"]) == 1
        impl.install(NS, "first", "CPU")
        assert torch.equal(getattr(torch.ops, NS).first(torch.ones(2)), torch.full((2,), 4.0))


@behaviour("declared.check-raises-valueerror")
@pytest.mark.parametrize("row, message", [
    (("first",), "row 1"),                         # one element: no cond, no impl
    (("first", accept), "row 1"),
    ("first", "row 1"),                            # a bare string, not a row
    (("first", accept, "not callable"), "impl"),
    (("first", None, fill(1.0)), "cond"),
    (("", accept, fill(1.0)), "row 1"),
], ids=["one-element", "two-elements", "bare-string", "impl-not-callable", "cond-none", "no-op"])
def test_a_malformed_row_is_refused_before_anything_registers(impl, declaring, row, message):
    declared = impl.declared_overrides()
    declaring._OVERRIDES += (row,)
    with impl.scope():
        impl.allow_namespace(NS)
        assert_check_and_register_refuse(declared, declaring, message)
        assert graphs(impl)["first"] == [], "the rows before the malformed one were registered"


@behaviour("declared.check-raises-valueerror")
@pytest.mark.parametrize("defining", ["_native_registry_no_such_module",
                                      "_native_registry_no_such_package.module",
                                      ".relative"])
def test_a_defining_module_that_cannot_be_imported_is_a_valueerror_naming_it(
        impl, declaring, defining):
    declared = impl.declared_overrides()
    declaring._DEFINING_MODULE = defining
    with impl.scope():
        impl.allow_namespace(NS)
        assert_check_and_register_refuse(declared, declaring, defining.lstrip("."))
        assert graphs(impl)["first"] == []


@behaviour("declared.check-raises-valueerror")
@pytest.mark.parametrize("attribute, value, message", [
    ("_OVERRIDES", None, "no _OVERRIDES"),          # absent: said to be absent
    ("_OVERRIDES", "first", "_OVERRIDES.*str"),     # a str is no sequence of rows: its type named
    ("_OVERRIDES", 3, "_OVERRIDES.*int"),
    ("_NAMESPACE", None, "no _NAMESPACE"),          # absent, empty or not a str: none declared
    ("_NAMESPACE", "", "no _NAMESPACE"),
    ("_NAMESPACE", 3, "no _NAMESPACE"),
    ("_DEFINING_MODULE", None, "no _DEFINING_MODULE"),
    ("_DEFINING_MODULE", "", "no _DEFINING_MODULE"),
    ("_VARIANTS", ["first"], "_VARIANTS.*first"),   # not a mapping of ops: the value named
    ("_VARIANTS", {"first": ["fast"]}, "_VARIANTS.*fast"),  # an op's variants not a mapping
], ids=["no-overrides", "overrides-str", "overrides-int", "no-namespace", "empty-namespace",
        "namespace-int", "no-defining", "empty-defining", "variants-list", "variants-of-list"])
def test_a_declaration_missing_or_mistyping_a_table_is_a_valueerror_naming_it(
        impl, declaring, attribute, value, message):
    declared = impl.declared_overrides()
    if value is None:
        if hasattr(declaring, attribute):
            delattr(declaring, attribute)
    else:
        setattr(declaring, attribute, value)
    with impl.scope():
        impl.allow_namespace(NS)
        assert_check_and_register_refuse(declared, declaring, message)
        assert graphs(impl)["first"] == []


@behaviour("declared.check-raises-valueerror")
def test_a_row_with_more_than_three_elements_is_taken_by_its_first_three(impl, declaring):
    declared = impl.declared_overrides()
    declaring._OVERRIDES = (["first", accept, fill(6.0), "a note", 2],)
    with impl.scope():
        impl.allow_namespace(NS)
        declared.check(declaring)
        declared.register(declaring, "test_dsl", "CPU")
        impl.install(NS, "first", "CPU")
        assert torch.equal(getattr(torch.ops, NS).first(torch.ones(2)), torch.full((2,), 6.0))


@behaviour("declared.check-raises-valueerror")
def test_a_defining_module_whose_own_import_fails_is_a_valueerror_naming_it(
        impl, declaring, tmp_path):
    declared = impl.declared_overrides()
    broken = "_native_registry_declared_broken_defining"
    (tmp_path / f"{broken}.py").write_text("from _native_registry_nowhere import anything\n")
    declaring._DEFINING_MODULE = broken
    with impl.scope():
        impl.allow_namespace(NS)
        with pytest.raises(ValueError, match=f"{broken}.*import") as refused:
            declared.check(declaring)  # said to fail its import, not to leave an op unresolved
        assert "_native_registry_nowhere" in str(refused.value), "the import's own error goes unsaid"
        assert graphs(impl)["first"] == []


# ---- _resolve_overload ----------------------------------------------------------------


@behaviour("namespaces.resolve-overload-total")
@pytest.mark.parametrize("lib_symbol, op_symbol", [
    ("aten", "__class__.__class__"),      # a class
    ("aten", "__class__.__name__"),       # a str attribute of one
    ("aten", "add.overloads"),            # a method of a packet
    ("aten", "add.__call__"),             # another
    ("aten", "__init__.__call__"),        # a method of a namespace
    ("aten", "add.no_such_overload"),     # a packet without that overload
    ("aten", "no_such_op"),
    ("aten", ""),
    ("aten", "."),
    ("aten", "bmm\ud800"),                # not encodable
    ("aten", None),
    ("aten", 5),
    (None, "bmm"),
    (5, "bmm"),
    ("load_library", "bmm"),              # a method of torch.ops, not a namespace
], ids=lambda v: repr(v))
def test_resolve_overload_gives_an_opoverload_or_none_for_every_input(impl, lib_symbol, op_symbol):
    got = impl.resolve_overload(lib_symbol, op_symbol)
    assert got is None, f"_resolve_overload({lib_symbol!r}, {op_symbol!r}) gave {got!r}"


@behaviour("namespaces.resolve-overload-total")
def test_resolve_overload_still_resolves_real_ops(impl):
    assert impl.resolve_overload("aten", "add.Tensor") is torch.ops.aten.add.Tensor
    assert impl.resolve_overload("aten", "bmm") is torch.ops.aten.bmm.default
    assert isinstance(impl.resolve_overload("aten", "bmm.default"), torch._ops.OpOverload)
