"""A registry's Python surface where generated mutants of the reference's
node views, stats views and upstream-shaped module found it unpinned: writes
of a registered node's fixed fields, nodes built with too many or too few
fields, the copy an ordering function puts in a node's place and the node
object read before it, a scope that undoes a written callable, counts asked
of a node the registry does not hold or of an op no router ever served, names
that are not str, and upstream's private name for installing every graph.
Not in the seed file except that last name: the others are `recommended`."""

from __future__ import annotations

import dataclasses
import gc
import re

import pytest
import torch

from conftest import behaviour
from test_ordering_copies import FAILED, reorder_logged

from fixtures.python.torch_fixtures import STOCK, accept, accept_too, decline, dispatcher_state, fill, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

ADD_KEY = ("aten", "add.Tensor", "CPU")
SEVEN = torch.full((2,), 7.0)
NINE = torch.full((2,), 9.0)
ELEVEN = torch.full((2,), 11.0)
FIXED_FIELDS = ("dsl_name", "lib_symbol", "op_symbol", "dispatch_key", "node_id",
                "unconditional_override")


seven, nine, eleven = fill(7.0), fill(9.0), fill(11.0)


def surface_fields(node):
    return {f: getattr(node, f, None) for f in FIXED_FIELDS}


def surface_installed(impl):
    """One override on KEY (accept, seven), installed; nothing holds its node."""
    impl.register("surface_dsl", *KEY, accept, seven)
    impl.install(*KEY)
    assert torch.equal(mul(), SEVEN)


def surface_put_a_copy(copies, **change):
    """An ordering function that puts copies (with `change`) of KEY's nodes in
    their places and keeps them in `copies`; other graphs as they are."""
    def fn(op_symbol, dispatch_key, graph):
        if (op_symbol, dispatch_key) != KEY[1:]:
            return graph
        copies.extend(dataclasses.replace(node, **change) for node in graph)
        return list(copies)
    return fn


# ---- a registered node's fixed fields -----------------------------------------------

@behaviour("nodes.registered-fields-read-only")
@pytest.mark.parametrize("field, value", [
    ("dsl_name", "surface_other_dsl"), ("lib_symbol", "surface_other_ns"), ("op_symbol", "add.Tensor"),
    ("dispatch_key", "CUDA"), ("node_id", "surface_other_id"), ("unconditional_override", True)])
def test_a_write_of_a_registered_nodes_fixed_field_raises_attribute_error_naming_it(impl, field, value):
    surface_installed(impl)
    node = impl.graph(*KEY)[0]
    before = surface_fields(node)
    with pytest.raises(AttributeError) as raised:
        setattr(node, field, value)
    assert re.search(rf"\b{field}\b", str(raised.value)), f"the error does not name {field}: {raised.value}"
    assert surface_fields(node) == before, "the refused write changed the node"
    assert surface_fields(impl.graph(*KEY)[0]) == before
    impl.install_all()
    assert torch.equal(mul(), SEVEN), "the refused write changed routing"
    assert impl.dsl_operations("surface_dsl") == ["mul.Tensor"]
    impl.disable(dsl_names=["surface_dsl"])
    assert torch.equal(mul(), STOCK), "the filters no longer match the node by its dsl name"


@behaviour("nodes.registered-fields-read-only")
@pytest.mark.parametrize("value", [False, True])
def test_writing_active_on_a_registered_node_raises_attribute_error_naming_the_filters(impl, value):
    surface_installed(impl)
    node = impl.graph(*KEY)[0]
    with pytest.raises(AttributeError) as raised:
        node.active = value
    message = str(raised.value)
    assert "active" in message and "deregister_op_overrides" in message, (
        f"the error does not say that the filters (deregister_op_overrides) decide active: {message}")
    assert node.active is True
    impl.install_all()
    assert torch.equal(mul(), SEVEN)
    impl.disable(dsl_names=["surface_dsl"])
    assert node.active is False and torch.equal(mul(), STOCK)


# ---- nodes built by hand: too many fields, or main's form without its cond ----------

def surface_node_class(impl):
    return type(impl.make_node("d", "aten", "mul.Tensor", "CPU", accept, seven, "n"))


@behaviour("nodes.bad-arguments-refused")
def test_a_node_given_more_positional_fields_than_it_has_raises_type_error(impl):
    node_class = surface_node_class(impl)
    every_field = ("d", "aten", "mul.Tensor", "CPU", accept, seven, "n", False, True, None)
    with pytest.raises(TypeError):
        node_class(*every_field, "one too many")


@behaviour("nodes.bad-arguments-refused")
def test_a_node_in_mains_form_with_four_positional_fields_and_no_cond_raises_type_error(impl):
    """Main's form with dsl_name, lib_symbol, op_symbol and dispatch_key
    positional (the fourth a str: a dispatch key, not torch 2.13's cond_fn)
    and cond_fn missing."""
    node_class = surface_node_class(impl)
    with pytest.raises(TypeError, match="cond_fn"):
        node_class("d", "aten", "mul.Tensor", "CPU", impl_fn=seven, node_id="n")


# ---- a copy put in a node's place, and the node object read before ------------------

@behaviour("nodes.one-object-per-node")
def test_a_copy_put_in_a_nodes_place_reads_what_routes_whatever_was_written_through_the_node(impl):
    """The node read before the reordering is written after it. Upstream's
    graph holds the copy, so that write reaches nothing; a registry whose
    node and copy stand for one node takes it. Either way the copy reads the
    callables that route, and the impl the copy replaced never routes again."""
    surface_installed(impl)
    (original,) = impl.graph(*KEY)
    copies = []
    impl.reorder(surface_put_a_copy(copies, impl_fn=nine), reregister=True)
    (copy,) = copies
    assert torch.equal(mul(), NINE)
    original.cond_fn = decline
    impl.install_all()
    reached = torch.equal(mul(), STOCK)
    if not reached:
        assert torch.equal(mul(), NINE), "the impl the copy replaced routes again"
    assert copy.cond_fn is (decline if reached else accept), (
        "the copy does not read the cond that routes")
    assert copy.impl_fn is nine
    copy.cond_fn = accept_too
    impl.install_all()
    assert torch.equal(mul(), NINE), "a write through the copy brought back the impl it replaced"
    assert copy.cond_fn is accept_too and copy.impl_fn is nine
    assert impl.graph(*KEY)[0].impl_fn is nine and impl.graph(*KEY)[0].cond_fn is accept_too


@behaviour("nodes.one-object-per-node")
def test_a_copy_put_in_a_nodes_place_works_after_the_node_read_before_is_let_go(impl):
    surface_installed(impl)
    original = impl.graph(*KEY)[0]  # held while the ordering function runs
    copies = []
    impl.reorder(surface_put_a_copy(copies, impl_fn=nine), reregister=True)
    (copy,) = copies
    del original
    gc.collect()
    assert copy.impl_fn is nine and copy.cond_fn is accept
    copy.impl_fn = eleven
    impl.install_all()
    assert torch.equal(mul(), ELEVEN)
    assert impl.graph(*KEY)[0].impl_fn is eleven


@behaviour("nodes.one-object-per-node")
def test_once_nothing_holds_the_nodes_read_before_a_query_hands_out_the_copies(impl):
    """Upstream's graph holds what the ordering function returned; code that
    keeps those copies (as dict keys, compared with `is`) finds them in the
    graph, as long as no node object read before is still held."""
    surface_installed(impl)
    copies = []
    impl.reorder(surface_put_a_copy(copies, impl_fn=nine), reregister=True)
    gc.collect()
    (node,) = impl.graph(*KEY)
    assert node is copies[0], "a query made a new object for the node instead of the copy"
    assert impl.graph(*KEY)[0] is node


# ---- a scope undoes a callable written inside it ------------------------------------

@behaviour("teardown.node-writes-undone")
def test_a_callable_written_inside_a_scope_is_undone_when_it_ends(impl):
    surface_installed(impl)
    node = impl.graph(*KEY)[0]
    with impl.scope():
        node.impl_fn = nine
        impl.install_all()
        assert torch.equal(mul(), NINE)
    assert torch.equal(mul(), SEVEN), "the router the scope ended still runs the written impl"
    # Read before any query of the graph: the object held across the scope
    # reads what routes, not what was written inside.
    assert node.impl_fn is seven, "the node read before the scope reads the impl written in it"
    assert impl.graph(*KEY)[0].impl_fn is seven, "the graph reports the impl written in the scope"
    impl.install_all()
    assert torch.equal(mul(), SEVEN), "the next install routes by the impl written in the scope"


# ---- ordering: a repeated node, once as a copy -------------------------------------------

@behaviour("ordering.invalid-result-keeps-graph")
@pytest.mark.parametrize("bad_op", ["mul.Tensor", "add.Tensor"])
def test_a_result_repeating_a_node_as_a_copy_keeps_that_graph_with_one_warning(impl, bad_op):
    """For one graph, fn returns a copy of a node with another impl and the
    node itself; for the other, copies with another impl. The first graph is
    kept (order and callables) with one warning naming the node; the second
    takes its copies', whichever graph comes first."""
    for key in (KEY, ADD_KEY):
        impl.register("surface_dsl", *key, accept, seven)
    repeated = []

    def fn(op_symbol, dispatch_key, graph):
        if op_symbol == bad_op:
            repeated.append(graph[0].node_id)
            return [dataclasses.replace(graph[0], impl_fn=nine), graph[0]]
        return [dataclasses.replace(node, impl_fn=eleven) for node in graph]

    warnings = reorder_logged(impl, fn, reregister=True)
    failed = [w for w in warnings if FAILED in w]
    assert len(failed) == 1 and repeated[0] in failed[0], warnings
    for key in (KEY, ADD_KEY):
        nodes = impl.graph(*key)
        expected = seven if key[1] == bad_op else eleven
        assert [n.impl_fn for n in nodes] == [expected], (key, [n.impl_fn for n in nodes])
    impl.install_all()
    assert torch.equal(mul(), SEVEN if bad_op == "mul.Tensor" else ELEVEN)


@behaviour("ordering.unchanged-graph-no-warning")
def test_an_ordering_function_handed_an_emptied_graph_returning_it_logs_nothing(impl):
    impl.register("surface_dsl", *KEY, accept, seven)
    impl.set_graph(*KEY, [])  # an earlier ordering emptied the graph
    seen = []

    def unchanged(op_symbol, dispatch_key, graph):
        seen.append((op_symbol, list(graph)))
        return graph

    warnings = reorder_logged(impl, unchanged, reregister=True)
    assert [w for w in warnings if FAILED in w] == [], warnings
    assert impl.graph(*KEY) == []
    assert torch.equal(mul(), STOCK)


# ---- stats: a node the registry does not hold, an op no router served ----------------

@behaviour("stats.node-not-held-refused")
def test_the_counts_of_a_node_the_registry_does_not_hold_are_a_key_error_naming_it(impl):
    with impl.scope():
        impl.register("surface_gone", *KEY, accept, seven)
        impl.install(*KEY)
        (gone,) = impl.graph(*KEY)
        gone_id = gone.node_id
        with impl.collect_stats(True):
            mul()
        assert impl.node_stats(gone)["taken"] == 1
    with pytest.raises(KeyError, match=re.escape(gone_id)):
        impl.node_stats(gone)
    stranger = impl.make_node("surface_stranger", "aten", "mul.Tensor", "CPU", accept, seven,
                              "surface_never_registered")
    with pytest.raises(KeyError, match="surface_never_registered"):
        impl.node_stats(stranger)


@behaviour("stats.unrouted-graph-counts-zero")
def test_a_graph_of_an_op_no_router_ever_served_counts_zero(impl):
    """Ops no other test routes: a registry that keeps the graphs its routers
    ever served still has no entry for them."""
    registered = ("aten", "lcm.default", "CPU")  # overrides registered, never installed
    bare = ("aten", "gcd.default", "CPU")        # no graph at all
    impl.register("surface_idle", *registered, accept, lambda a, b: a)
    zero = {"calls": 0, "fallbacks": 0}
    ints = torch.tensor([4, 6])
    with impl.collect_stats(True):
        assert impl.graph_stats(*registered) == zero
        assert impl.graph_stats(*bare) == zero
        assert torch.gcd(ints, ints).tolist() == [4, 6]
        assert impl.graph_stats(*bare) == zero, "a call no router saw"


# ---- names that are not str ------------------------------------------------------------

@behaviour("validation.names-must-be-str")
@pytest.mark.parametrize("argument, value", [
    ("dsl_name", b"surface_dsl"), ("lib_symbol", b"aten"), ("op_symbol", b"mul.Tensor"),
    ("dispatch_key", b"CPU"), ("dispatch_key", 5), ("op_symbol", None)])
def test_a_name_that_is_not_a_str_is_refused_with_type_error_naming_the_argument(impl, argument, value):
    impl.register("kept", *KEY, decline, seven)
    impl.install(*KEY)
    before_graph, before_tables = impl.graph(*KEY), dispatcher_state()
    args = {"dsl_name": "surface_dsl", "lib_symbol": "aten", "op_symbol": "mul.Tensor",
            "dispatch_key": "CPU", "cond": accept, "impl": nine}
    args[argument] = value
    with pytest.raises(TypeError) as raised:
        impl.register(*args.values())
    assert argument in str(raised.value), f"the error does not name {argument}: {raised.value}"
    assert impl.graph(*KEY) == before_graph
    assert impl.dsl_operations("surface_dsl") == []
    assert dispatcher_state() == before_tables


@behaviour("validation.names-must-be-str")
@pytest.mark.parametrize("entries", [[b"surface_dsl"], [5]], ids=["bytes", "int"])
def test_a_filter_entry_that_is_not_a_str_is_refused_with_type_error(impl, entries):
    surface_installed(impl)
    with pytest.raises(TypeError):
        impl.disable(dsl_names=entries)
    assert impl.graph(*KEY)[0].active is True
    assert torch.equal(mul(), SEVEN)


# ---- upstream's private name for installing every graph -------------------------------

@behaviour("api.register-all-private-name")
def test_the_module_installs_every_graph_by_upstreams_private_name(impl):
    impl.register("surface_dsl", *KEY, accept, seven)
    impl.register("surface_dsl", *ADD_KEY, accept, nine)
    assert torch.equal(mul(), STOCK), "registering installed"
    impl.module._register_all_overrides()
    assert torch.equal(mul(), SEVEN)
    assert torch.equal(torch.ops.aten.add.Tensor(torch.ones(2), torch.ones(2)), NINE)
