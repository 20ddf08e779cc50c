"""Edges of routing, filters and validation that mechanically generated
mutants of the reference (./harness/run --mutants auto) found unpinned: a
runtime that is available, calls nested deeper than a router's scratch
space, a key where the op had no kernel, blank filter entries, a change that
fails part way, and a namespace once it is allowed."""

from __future__ import annotations

import re
from unittest.mock import MagicMock

import pytest
import torch

from conftest import NS, NS2, behaviour, dispatcher_state

from fixtures.python.torch_fixtures import STOCK, mul, twice_namespaces
from fixtures.python.torch_fixtures import MUL_CPU as KEY

X = torch.tensor([1.0, 2.0])


def accept(*a, **k):
    return True


def fill(value):
    return lambda a, *rest, **k: torch.full_like(a, value)


def actives(impl, *keys):
    return [node.active for key in keys for node in impl.graph(*key)]


# ---- try_initialize_runtime ----------------------------------------------------

@behaviour("routing.runtime-available-takes-the-call")
def test_an_available_runtime_takes_the_call(impl):
    runtime = MagicMock(return_value=True)
    impl.register("test_dsl", *KEY, accept, fill(42.0), try_initialize_runtime=runtime)
    impl.install(*KEY)
    # The first call, where the runtime first says it is available, is the impl's.
    assert torch.equal(mul(), torch.tensor([42.0, 42.0]))
    assert runtime.call_count == 1, "try_initialize_runtime is asked once for the call"
    assert torch.equal(mul(), torch.tensor([42.0, 42.0]))


@behaviour("routing.runtime-asked-until-available")
def test_an_unavailable_runtime_is_asked_again_on_the_next_call(impl):
    runtime = MagicMock(side_effect=[False, False, True])
    impl.register("test_dsl", *KEY, accept, fill(42.0), try_initialize_runtime=runtime)
    impl.install(*KEY)
    assert torch.equal(mul(), STOCK)
    assert torch.equal(mul(), STOCK)
    assert runtime.call_count == 2, "each matched call asks an unavailable runtime again"
    assert torch.equal(mul(), torch.tensor([42.0, 42.0]))
    assert runtime.call_count == 3


# ---- nesting -------------------------------------------------------------------

@behaviour("routing.reentrant-calls-nest-deep")
def test_an_impl_calling_its_own_op_ten_deep(impl):
    def cond(a, b):
        return float(a[0]) < 10  # the eleventh call declines: aten's kernel, ten deep

    def recurse(a, b):
        # Every level's arguments and result differ, so a level that saw
        # another's stack would show.
        return torch.ops.aten.mul.Tensor(a + 1, b) + 1

    impl.register("test_dsl", *KEY, cond, recurse)
    impl.install(*KEY)
    # Levels 0..9 each add one to a and to the result; level 10 is 10 * 2.
    for _ in range(2):  # the second nest finds what the first left behind
        assert torch.equal(mul(torch.zeros(2), torch.full((2,), 2.0)), torch.full((2,), 30.0))


# ---- a key where the op had no kernel ------------------------------------------

@behaviour("routing.declined-without-a-prior-kernel")
def test_a_declined_call_where_the_op_had_no_kernel(impl):
    xla = ("aten", "mul.Tensor", "XLA")
    takes = {"call": False}
    impl.register("test_dsl", *xla, lambda *a, **k: takes["call"], fill(7.0))
    impl.install(*xla)

    def call_at_xla():
        return torch.ops.aten.mul.Tensor.redispatch(torch._C.DispatchKeySet("XLA"), X, X)

    with pytest.raises(NotImplementedError) as raised:
        call_at_xla()
    assert "mul" in str(raised.value) and "XLA" in str(raised.value), raised.value
    takes["call"] = True
    assert torch.equal(call_at_xla(), torch.tensor([7.0, 7.0]))


# ---- blank filter entries ------------------------------------------------------

@behaviour("validation.blank-filter-entries-refused")
@pytest.mark.parametrize("blank", ["", "  "])
@pytest.mark.parametrize("which", ["dsl_names", "op_symbols", "dispatch_keys"])
@pytest.mark.parametrize("change", ["disable", "enable"])
def test_blank_filter_entries_are_refused(impl, change, which, blank):
    impl.register("kept", *KEY, accept, fill(42.0))
    impl.install(*KEY)
    if change == "enable":
        impl.disable(dsl_names=["kept"])  # so that the re-enable would change something
    before = (actives(impl, KEY), dispatcher_state(), mul())
    # A good entry beside the blank one: it must not take effect either.
    arguments = {"dsl_names": ["kept"]}
    arguments[which] = arguments.get(which, []) + [blank]
    with pytest.raises(ValueError, match=f"{change}_{which}"):
        getattr(impl, change)(**arguments)
    assert (actives(impl, KEY), dispatcher_state()) == before[:2]
    assert torch.equal(mul(), before[2])


# ---- a change that fails part way ----------------------------------------------

# Namespaces that sort after NS (and are registered after it), so that an
# implementation working graph by graph, in registration or in key order,
# reaches NS's graph before the failing one.
DOOMED_NS = "_native_registry_zz_doomed"   # defined, then unloaded mid-test
NEVER_NS = "_native_registry_zz_never"     # never defined


def beside_a_doomed_graph(impl, doomed_dsls, disabled=()):
    """NS::twice's graph (dsl `d`, answering 99) and DOOMED_NS::twice's (a
    node per dsl of `doomed_dsls`, answering 7, 8, ...), `disabled` disabled,
    both installed while DOOMED_NS::twice is defined; on return it is gone.
    Gives the two keys."""
    routed, doomed = (NS, "twice", "CPU"), (DOOMED_NS, "twice", "CPU")
    impl.allow_namespace(DOOMED_NS)
    impl.register("d", *routed, accept, fill(99.0))
    with torch.library._scoped_library(DOOMED_NS, "DEF") as lib:
        lib.define("twice(Tensor self) -> Tensor")
        lib.impl("twice", lambda x: x * 5, "CompositeExplicitAutograd")
        for value, dsl in enumerate(doomed_dsls, start=7):
            impl.register(dsl, *doomed, accept, fill(float(value)))
        if disabled:
            impl.disable(dsl_names=list(disabled))
        impl.install(*routed)
        impl.install(*doomed)
    return routed, doomed


@behaviour("validation.failed-change-changes-nothing")
def test_a_reenable_that_fails_part_way_changes_nothing(impl, namespaces):
    ns_twice, _ = namespaces
    # The doomed graph's chain is empty at its install: no router, nothing
    # captured; re-enabling `d` cannot give it a router now.
    routed, doomed = beside_a_doomed_graph(impl, ["d"], disabled=["d"])
    before = dispatcher_state()
    with pytest.raises(AttributeError, match="not found; is the namespace"):
        impl.enable(dsl_names=["d"])
    assert actives(impl, routed, doomed) == [False, False], "the failed re-enable changed the filters"
    assert torch.equal(ns_twice(X), X * 2), "the failed re-enable gave the other graph its route back"
    assert dispatcher_state() == before


@behaviour("validation.failed-change-changes-nothing")
def test_a_disable_that_fails_part_way_changes_nothing(impl, namespaces):
    ns_twice, _ = namespaces
    # Disabling `d` leaves the doomed graph `e` to route, which needs a
    # router its op can no longer have.
    routed, doomed = beside_a_doomed_graph(impl, ["d", "e"])
    before = dispatcher_state()
    with pytest.raises(AttributeError, match="not found; is the namespace"):
        impl.disable(dsl_names=["d"])
    assert actives(impl, routed, doomed) == [True, True, True], "the failed disable changed the filters"
    assert torch.equal(ns_twice(X), torch.full_like(X, 99.0)), \
        "the failed disable took the other graph's route away"
    assert dispatcher_state() == before


@behaviour("validation.failed-change-changes-nothing")
def test_an_install_all_that_fails_part_way_installs_nothing(impl, namespaces):
    ns_twice, _ = namespaces
    impl.allow_namespace(NEVER_NS)
    impl.register("d", NS, "twice", "CPU", accept, fill(99.0))
    impl.register("d", NEVER_NS, "twice", "CPU", accept, fill(7.0))
    before = dispatcher_state()
    with pytest.raises(AttributeError, match="not found; is the namespace"):
        impl.install_all()
    assert not impl.router_installed(NS, "twice", "CPU"), "install_all installed a graph before failing"
    assert torch.equal(ns_twice(X), X * 2)
    assert dispatcher_state() == before


@behaviour("filters.change-checks-installed-graphs-only")
def test_a_filter_change_naming_a_graph_of_an_undefined_op_never_installed_raises_nothing(impl):
    """A change checks nothing of a graph never installed: its op may not be
    defined yet (the graph gets its router when installed)."""
    never = (NEVER_NS, "twice", "CPU")
    impl.allow_namespace(NEVER_NS)
    impl.register("d", *never, accept, fill(7.0))
    impl.register("e", *never, accept, fill(8.0))
    before = dispatcher_state()
    impl.disable(dsl_names=["d"])      # the graph of e still routes: its op must not be looked up
    impl.enable(dsl_names=["d"])
    impl.disable(op_symbols=["twice"])
    impl.enable(op_symbols=["twice"])
    assert not impl.router_installed(*never)
    assert dispatcher_state() == before


# ---- graphs the unconditional mask passes over or leaves ----------------------------

# A namespace that sorts before aten and NS, so that an implementation going
# graph by graph in key order meets its graph first.
EARLY_DOOMED_NS = "_native_registry_a_doomed"   # defined, then unloaded mid-test
BMM = ("aten", "bmm", "CPU")


def expect_the_mask_masks_mul(impl):
    """Enters and leaves the mask twice: the disabled unconditional override of
    mul.Tensor (answering 5s) is masked inside, back outside."""
    for round in range(2):
        with impl.unconditional_masked():
            assert torch.equal(mul(), STOCK), f"the mask left the override in round {round}"
        assert torch.equal(mul(), torch.full_like(STOCK, 5.0)), f"the override did not come back in round {round}"


@behaviour("unconditional.mask-passes-over-graphs-it-cannot-change")
def test_the_mask_passes_over_a_graph_installed_with_no_override(impl):
    impl.install(*BMM)   # nothing registered for it: nothing to route
    impl.register("u", *KEY, None, fill(5.0), unconditional_override=True)
    impl.install(*KEY)
    impl.disable(dsl_names=["u"])
    expect_the_mask_masks_mul(impl)
    assert not impl.router_installed(*BMM)


@behaviour("unconditional.mask-passes-over-graphs-it-cannot-change")
def test_the_mask_passes_over_an_installed_graph_whose_op_is_gone(impl):
    doomed = (EARLY_DOOMED_NS, "twice", "CPU")
    impl.allow_namespace(EARLY_DOOMED_NS)
    impl.register("u", *KEY, None, fill(5.0), unconditional_override=True)
    impl.install(*KEY)
    with torch.library._scoped_library(EARLY_DOOMED_NS, "DEF") as lib:
        lib.define("twice(Tensor self) -> Tensor")
        lib.impl("twice", lambda x: x * 5, "CompositeExplicitAutograd")
        impl.register("u", *doomed, None, fill(7.0), unconditional_override=True)
        impl.register("e", *doomed, accept, fill(8.0))
        impl.install(*doomed)
        impl.disable(dsl_names=["u"])
    # The doomed graph's chain would change too, but its router cannot be rebuilt.
    expect_the_mask_masks_mul(impl)


@behaviour("unconditional.mask-republishes-masked-graphs-only")
def test_the_mask_leaves_a_graph_it_does_not_mask_as_published(impl):
    impl.register("d", *KEY, lambda *a: False, fill(7.0))
    impl.install(*KEY)
    # Registered after the install: no call reaches it until the graph is installed again.
    impl.register("e", *KEY, accept, fill(8.0))
    impl.register("u", *BMM, None, fill(5.0), unconditional_override=True)
    impl.install(*BMM)
    impl.disable(dsl_names=["u"])   # a graph the mask does change
    for _ in range(2):
        with impl.unconditional_masked():
            assert torch.equal(mul(), STOCK), "entering the mask published e"
        assert torch.equal(mul(), STOCK), "leaving the mask published e"
    impl.install(*KEY)
    assert torch.equal(mul(), torch.full_like(STOCK, 8.0))


# ---- a scope over several graphs --------------------------------------------------

@behaviour("teardown.scope-restores-every-graph")
def test_leaving_a_scope_restores_every_graph_it_changed(impl, namespaces):
    ns_twice, ns2_twice = namespaces
    first, second = (NS, "twice", "CPU"), (NS2, "twice", "CPU")
    # Each with an override that takes the call and one that declines.
    for key, value in ((first, 7.0), (second, 8.0)):
        impl.register("d", *key, accept, fill(value))
        impl.register("e", *key, lambda *a: False, fill(value * 10))
        impl.install(*key)
    with impl.scope():
        impl.disable(dsl_names=["d"])   # each router stays, routing through e alone
        assert torch.equal(ns_twice(X), X * 2)
        assert torch.equal(ns2_twice(X), X * 3)
    assert torch.equal(ns_twice(X), torch.full_like(X, 7.0)), "leaving the scope left the first graph changed"
    assert torch.equal(ns2_twice(X), torch.full_like(X, 8.0)), "leaving the scope left the second graph changed"


# ---- allow_namespace -----------------------------------------------------------

@behaviour("validation.native-namespace-never-allowed")
def test_the_native_namespace_can_never_be_allowed(impl):
    before = set(impl.allowed_namespaces())
    with pytest.raises(ValueError, match="_native"):
        impl.allow_namespace("_native")
    assert set(impl.allowed_namespaces()) == before


@behaviour("validation.malformed-namespace-never-allowed")
@pytest.mark.parametrize("bad", ["", " ", "aten::mul", "my.ns", "my ns"])
def test_a_name_no_namespace_has_is_never_allowed(impl, bad):
    before = set(impl.allowed_namespaces())
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        impl.allow_namespace(bad)
    assert set(impl.allowed_namespaces()) == before


@behaviour("validation.install-refuses-unregistrable-key")
@pytest.mark.parametrize("op_symbol, dispatch_key, shown", [
    ("aten::mul.Tensor", "CPU", "aten::mul.Tensor"),
    ("mul Tensor", "CPU", "mul Tensor"),
    ("mul.Tensor", "Meta", "Meta"),
], ids=["qualified-op-symbol", "blank-in-op-symbol", "meta-key"])
def test_installing_under_a_key_no_registration_could_make_is_refused(impl, op_symbol, dispatch_key,
                                                                      shown):
    before = dispatcher_state()
    with pytest.raises(ValueError, match=re.escape(repr(shown))):
        impl.install("aten", op_symbol, dispatch_key)
    assert not impl.router_installed("aten", op_symbol, dispatch_key)
    assert dispatcher_state() == before


@behaviour("validation.allowed-namespace-accepted")
def test_an_allowed_namespace_is_then_accepted(impl):
    with twice_namespaces() as (ns_twice, ns2_twice):
        with impl.scope():  # routers on these ops go before the namespaces do
            assert NS not in impl.allowed_namespaces()
            with pytest.raises(ValueError, match="is not overridable"):
                impl.register("d", NS, "twice", "CPU", accept, fill(5.0))
            impl.allow_namespace(NS)
            assert NS in impl.allowed_namespaces()
            assert NS2 not in impl.allowed_namespaces(), "allowing one namespace allowed another"
            impl.register("d", NS, "twice", "CPU", accept, fill(5.0))
            with pytest.raises(ValueError, match="is not overridable"):
                impl.register("d", NS2, "twice", "CPU", accept, fill(5.0))
            impl.install(NS, "twice", "CPU")
            assert torch.equal(ns_twice(X), torch.tensor([5.0, 5.0]))
            assert torch.equal(ns2_twice(X), X * 3)
