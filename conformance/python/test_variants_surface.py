"""Upstream main's newer torch._native surface: variant selection
(torch._native.variants and its torch.backends.python_native front end),
_resolve_overload for any namespace, ops Python defines after registration,
declared overrides; and torch.backends.python_native's leniency and
decomposition-table identity as upstream's front ends expect them."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import textwrap
import types

import pytest
import torch

from conftest import behaviour, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

OP = "torch_nn::_linear_cross_entropy_batch_chunked"
OTHER = "aten::scatter_add_"


@pytest.fixture
def variants(impl):
    if "variants" not in impl.features:
        pytest.skip("unsupported: the adapter has no variants module")
    module = impl.variants_module()
    yield module
    for op in (OP, OTHER):
        module.set_variant(op, None)


def accept(*args, **kwargs):
    return True


def fill(value):
    return lambda a, *rest, **kwargs: torch.full_like(a, value)


# ---- variants ---------------------------------------------------------------------


@behaviour("variants.selection-store")
def test_a_selection_holds_per_op_until_dropped(variants):
    assert variants.PASSTHROUGH == "passthrough"
    assert variants.get_variant(OP, "kernel") == "kernel"
    variants.set_variant(OP, variants.PASSTHROUGH)
    assert variants.get_variant(OP, "kernel") == "passthrough"
    assert variants.get_variant(OTHER, "kernel") == "kernel"
    variants.set_variant(OP, None)
    assert variants.get_variant(OP, "kernel") == "kernel"
    variants.set_variant(OP, None)  # dropping no selection is fine
    assert variants.get_variant(OP, "kernel") == "kernel"


@behaviour("variants.selection-store")
def test_the_context_manager_puts_back_what_was_selected(variants):
    with variants.variant(OP, "second"):
        assert variants.get_variant(OP, "kernel") == "second"
    assert variants.get_variant(OP, "kernel") == "kernel"
    variants.set_variant(OP, "first")
    with variants.variant(OP, "second"):
        assert variants.get_variant(OP, "kernel") == "second"
        with variants.variant(OP, None):
            assert variants.get_variant(OP, "kernel") == "kernel"
        assert variants.get_variant(OP, "kernel") == "second"
    assert variants.get_variant(OP, "kernel") == "first"
    with pytest.raises(RuntimeError, match="boom"):
        with variants.variant(OP, variants.PASSTHROUGH):
            raise RuntimeError("boom")
    assert variants.get_variant(OP, "kernel") == "first"


@behaviour("variants.env-seeding")
def test_the_environment_variable_is_parsed_leniently(variants):
    parse = variants._parse_env
    assert parse("ns::op=a;ns2::op2=b") == {"ns::op": "a", "ns2::op2": "b"}
    assert parse(" ns::op = a ; ; ") == {"ns::op": "a"}
    assert parse(None) == {} and parse("") == {}
    for malformed in ("nocolons=a", "ns::op", "ns::op=", "=a", "ns::op= ", ";;"):
        assert parse(malformed) == {}, malformed
    assert parse("ns::op=a;junk;ns::op2=b") == {"ns::op": "a", "ns::op2": "b"}


@behaviour("variants.env-seeding")
def test_the_environment_variable_seeds_the_selection_at_import(impl):
    if "variants" not in impl.features:
        pytest.skip("unsupported: the adapter has no variants module")
    lines = run_in_fresh_interpreter(impl, """
        v = impl.variants_module()
        print(v.get_variant("ns::op", "k"), v.get_variant("ns::other", "k"))
        v.set_variant("ns::op", "later")
        print(v.get_variant("ns::op", "k"))
    """, env={"TORCH_NATIVE_OVERRIDE_VARIANTS": "ns::op=chosen;broken;ns::other="})
    assert lines == ["chosen k", "later"]


@behaviour("variants.bad-arguments-refused")
def test_a_malformed_selection_is_refused_naming_it(variants):
    for bad_op, error in ((123, TypeError), ("no_namespace", ValueError), ("::op", ValueError)):
        with pytest.raises(error, match=repr(bad_op).strip("'")):
            variants.set_variant(bad_op, "kernel")
    for bad_op, error in ((123, TypeError), ([OP], TypeError), ("no_namespace", ValueError)):
        with pytest.raises(error, match=re.escape(repr(bad_op).strip("'"))):
            with variants.variant(bad_op, "kernel"):
                pass
    for bad_name in ("", "  ", 3):
        with pytest.raises(ValueError, match=OP.split("::")[0]):
            variants.set_variant(OP, bad_name)
    assert variants.get_variant(OP, "kernel") == "kernel"


@behaviour("variants.front-end")
def test_python_native_selects_variants_in_the_store(impl):
    if "variants" not in impl.features:
        pytest.skip("unsupported: the adapter has no variants module")
    lines = run_in_fresh_interpreter(impl, f"""
        impl.serve_torch_front_ends()
        import torch.backends.python_native as pn
        from torch._native import variants
        print(variants is impl.variants_module())
        pn.set_override_variant({OP!r}, variants.PASSTHROUGH)
        print(variants.get_variant({OP!r}, "kernel"))
        pn.set_override_variant({OP!r}, None)
        with pn.override_variant({OP!r}, "other"):
            print(variants.get_variant({OP!r}, "kernel"))
        print(variants.get_variant({OP!r}, "kernel"))
    """)
    assert lines == ["True", "passthrough", "other", "kernel"]


# ---- torch.backends.python_native as upstream's tests use it ------------------------


@behaviour("frontends.empty-names-no-ops")
def test_python_native_takes_empty_names_as_no_ops(impl):
    lines = run_in_fresh_interpreter(impl, """
        impl.serve_torch_front_ends()
        import torch._native.registry as reg
        import torch.backends.python_native as pn
        a, b = torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])
        reg.register_op_override("triton", "aten", "mul.Tensor", "CPU",
                                 lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
        reg._register_all_overrides()
        pn.disable_operations("")
        pn.enable_operations("")
        pn.disable_dispatch_keys("")
        pn.enable_dispatch_keys("")
        print(torch.mul(a, b).tolist(), [n.active for n in impl.graph("aten", "mul.Tensor", "CPU")])
        print(pn.get_dsl_operations("no_such_dsl"))
        reg.deregister_op_overrides(disable_dsl_names="triton")
    """)
    assert lines == ["[7.0, 7.0] [True]", "[]"]


@behaviour("compile.decomp-table-entries-stable")
def test_decomposition_table_entries_are_stable_while_nothing_changes(impl):
    impl.register("test_dsl", *KEY, accept, fill(5.0))
    impl.install(*KEY)
    op = torch.ops.aten.mul.Tensor
    first, second = impl.decomp_table(overrides_only=True), impl.decomp_table(overrides_only=True)
    assert first[op] is second[op]
    assert impl.decomp_table()[op] is first[op]


@behaviour("compile.decomp-table-entries-are-the-registrys-own")
def test_decomposition_table_entries_are_the_registrys_own(impl):
    lines = run_in_fresh_interpreter(impl, """
        impl.serve_torch_front_ends()
        import torch._native.registry as reg
        reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU",
                                 lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
        reg._register_all_overrides()
        op = torch.ops.aten.mul.Tensor
        table = reg.native_decomp_table()
        print(table[op] is reg._native_decomp_overrides[op],
              reg.native_decomp_table(overrides_only=True)[op] is table[op])
        reg.deregister_op_overrides(disable_dsl_names="test_dsl")
        print(op in reg.native_decomp_table(overrides_only=True))
    """)
    assert lines == ["True True", "False"]


# ---- namespaces: _resolve_overload, ops defined later --------------------------------

LATE_NS = "_native_registry_late_ns"


@pytest.fixture
def late_op():
    """Defines LATE_NS::late(Tensor self) -> Tensor (x+1 at CPU) when called;
    destroyed after the test."""
    libs = []

    def define():
        lib = torch.library.Library(LATE_NS, "FRAGMENT")
        lib.define("late(Tensor self) -> Tensor")
        lib.impl("late", lambda x: x + 1, "CPU")
        libs.append(lib)
        return getattr(torch.ops, LATE_NS).late.default

    yield define
    for lib in libs:
        lib._destroy()


@behaviour("namespaces.resolve-overload")
def test_resolve_overload_finds_ops_of_any_namespace_once_defined(impl, late_op):
    if "resolve-overload" not in impl.features:
        pytest.skip("unsupported: the adapter has no (namespace, op_symbol) _resolve_overload")
    assert impl.resolve_overload("aten", "bmm") is torch.ops.aten.bmm.default
    assert impl.resolve_overload("aten", "add.Tensor") is torch.ops.aten.add.Tensor
    assert impl.resolve_overload("aten", "no_such_op") is None
    assert impl.resolve_overload(LATE_NS, "late") is None
    op = late_op()
    assert impl.resolve_overload(LATE_NS, "late") is op
    assert impl.resolve_overload(LATE_NS, "late.default") is op


@behaviour("validation.op-defined-later-installs")
def test_an_op_defined_after_registration_installs_once_defined(impl, late_op):
    if "namespaces" not in impl.features:
        pytest.skip("unsupported: the adapter has no namespaces")
    key = (LATE_NS, "late", "CPU")
    with impl.scope():  # the router goes before the op's library does
        impl.allow_namespace(LATE_NS)
        impl.register("test_dsl", *key, accept, fill(9.0))
        with pytest.raises(AttributeError, match=f"{LATE_NS}::late"):
            impl.install(*key)
        assert not impl.router_installed(*key)
        op = late_op()
        impl.install(*key)
        assert torch.equal(op(torch.zeros(2)), torch.full((2,), 9.0))


# ---- declared overrides -------------------------------------------------------------

DEFINING = '''
import torch
LIB = torch.library.Library({ns!r}, "FRAGMENT")
LIB.define("declared(Tensor self) -> Tensor")
LIB.impl("declared", lambda x: x * 10, "CPU")
'''


class _Variant:
    def __init__(self, value):
        self.eligible = accept
        self.impl = fill(value)


@pytest.fixture
def declaring(impl, tmp_path, monkeypatch):
    """A declaring module on LATE_NS whose defining module (a file, imported
    by the check) defines LATE_NS::declared."""
    if "declared-overrides" not in impl.features:
        pytest.skip("unsupported: the adapter has no declared-overrides support")
    name = "_native_registry_defining_module"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(DEFINING.format(ns=LATE_NS)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = types.ModuleType("_native_registry_declaring")
    module._NAMESPACE, module._DEFINING_MODULE = LATE_NS, name
    module._OVERRIDES = (("declared", accept, fill(4.0)),)
    module._VARIANTS = {"declared": {"kernel": _Variant(4.0), "other": _Variant(5.0)}}
    module._DEFAULT_VARIANTS = {"declared": "kernel"}
    yield module
    defining = sys.modules.pop(name, None)
    if defining is not None:
        defining.LIB._destroy()


@behaviour("declared.check-and-register")
def test_a_declared_module_registers_once_its_ops_resolve(impl, declaring):
    declared = impl.declared_overrides()
    key = (LATE_NS, "declared", "CPU")
    with impl.scope():
        impl.allow_namespace(LATE_NS)
        declared.register(declaring, "test_dsl", "CPU")
        assert [n.dsl_name for n in impl.graph(*key)] == ["test_dsl"]
        impl.install(*key)
        op = getattr(torch.ops, LATE_NS).declared.default
        assert torch.equal(op(torch.ones(2)), torch.full((2,), 4.0))


@behaviour("declared.check-and-register")
@pytest.mark.parametrize("flaw", ["unresolved-op", "variants-disagree", "default-undeclared",
                                  "default-missing", "variant-not-callable", "no-namespace"])
def test_a_flawed_declaration_is_refused_naming_the_flaw(impl, declaring, flaw):
    declared = impl.declared_overrides()
    message = {
        "unresolved-op": f"{LATE_NS}::missing",
        "variants-disagree": "_VARIANTS covers",
        "default-undeclared": "default variant 'gone'",
        "default-missing": "_DEFAULT_VARIANTS",
        "variant-not-callable": "no callable impl",
        "no-namespace": "_NAMESPACE",
    }[flaw]
    if flaw == "unresolved-op":
        declaring._OVERRIDES += (("missing", accept, fill(1.0)),)
        declaring._VARIANTS["missing"] = {"kernel": _Variant(1.0)}
        declaring._DEFAULT_VARIANTS["missing"] = "kernel"
    elif flaw == "variants-disagree":
        declaring._VARIANTS["extra"] = {"kernel": _Variant(1.0)}
    elif flaw == "default-undeclared":
        declaring._DEFAULT_VARIANTS["declared"] = "gone"
    elif flaw == "default-missing":
        del declaring._DEFAULT_VARIANTS["declared"]
    elif flaw == "variant-not-callable":
        declaring._VARIANTS["declared"]["other"].impl = None
    else:
        del declaring._NAMESPACE
    with impl.scope():
        impl.allow_namespace(LATE_NS)
        with pytest.raises(ValueError, match=message):
            declared.register(declaring, "test_dsl", "CPU")
        assert impl.graph(LATE_NS, "declared", "CPU") == []


@behaviour("declared.variant-choice")
def test_the_declared_variant_selected_is_the_one_chosen(impl, declaring):
    declared = impl.declared_overrides()
    variants = impl.variants_module()
    qualified = f"{LATE_NS}::declared"
    table = declaring._VARIANTS["declared"]
    assert declared.choose(qualified, table, "kernel") is table["kernel"]
    with variants.variant(qualified, "other"):
        assert declared.choose(qualified, table, "kernel") is table["other"]
    with variants.variant(qualified, variants.PASSTHROUGH):
        assert declared.choose(qualified, table, "kernel") == variants.PASSTHROUGH
    with variants.variant(qualified, "no_such_variant"):
        with pytest.raises(ValueError, match="no_such_variant.*declares .*passthrough"):
            declared.choose(qualified, table, "kernel")


@contextlib.contextmanager
def variant_rows_installed(impl, declaring):
    """The declaring module's _VARIANTS registered as variant_rows and
    installed, in a scope; yields the op."""
    declared = impl.declared_overrides()
    declaring._OVERRIDES = declared.variant_rows(LATE_NS, declaring._VARIANTS,
                                                 declaring._DEFAULT_VARIANTS)
    with impl.scope():
        impl.allow_namespace(LATE_NS)
        declared.register(declaring, "test_dsl", "CPU")
        impl.install(LATE_NS, "declared", "CPU")
        yield getattr(torch.ops, LATE_NS).declared.default


@behaviour("declared.passthrough")
def test_passthrough_hands_matched_calls_to_the_op(impl, declaring):
    variants = impl.variants_module()
    qualified = f"{LATE_NS}::declared"
    key = (LATE_NS, "declared", "CPU")
    reluctant = _Variant(8.0)
    reluctant.eligible = lambda *args, **kwargs: False
    declaring._VARIANTS["declared"]["reluctant"] = reluctant
    with variant_rows_installed(impl, declaring) as op:
        x = torch.ones(2)

        def result():
            return op(x).tolist()

        assert result() == [4.0, 4.0]  # the default variant
        with variants.variant(qualified, "other"):
            assert result() == [5.0, 5.0]
        with variants.variant(qualified, variants.PASSTHROUGH):
            assert result() == [10.0, 10.0]  # the op's own kernel: x * 10
            assert [n.active for n in impl.graph(*key)] == [True]  # still installed
        with variants.variant(qualified, "reluctant"):
            assert result() == [10.0, 10.0]  # its eligibility declines: the op's own
        with variants.variant(qualified, "no_such_variant"):
            with pytest.raises(ValueError, match="no_such_variant.*'kernel'.*'other'.*passthrough"):
                op(x)
        # A passthrough the module declares itself (upstream's modules do) runs as declared.
        declaring._VARIANTS["declared"][variants.PASSTHROUGH] = _Variant(6.0)
        with variants.variant(qualified, variants.PASSTHROUGH):
            assert result() == [6.0, 6.0]
        assert result() == [4.0, 4.0]


@behaviour("declared.passthrough")
def test_passthrough_selected_after_the_cond_accepted_raises_saying_so(impl, declaring):
    """Another thread may select passthrough between an accepted call's cond
    and its impl; here the variant's own eligible does it, deterministically."""
    variants = impl.variants_module()
    qualified = f"{LATE_NS}::declared"
    switching = _Variant(3.0)

    def eligible_then_switch(*args, **kwargs):
        variants.set_variant(qualified, variants.PASSTHROUGH)
        return True

    switching.eligible = eligible_then_switch
    declaring._VARIANTS["declared"]["switching"] = switching
    with variant_rows_installed(impl, declaring) as op:
        try:
            variants.set_variant(qualified, "switching")
            with pytest.raises(RuntimeError, match=f"{qualified}: passthrough was selected after the "
                                                   "override accepted the call"):
                op(torch.ones(2))
            assert op(torch.ones(2)).tolist() == [10.0, 10.0], "passthrough from the next call on"
        finally:
            variants.set_variant(qualified, None)
