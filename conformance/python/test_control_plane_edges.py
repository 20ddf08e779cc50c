"""Edges of the control plane that generated mutants of the reference found
unpinned: ordering functions that fail or return junk for one graph among
several, what a reorder installs with and without reregister_overrides, a
registration made from inside an ordering function, `_native` ops of nodes
added to or reinstalled after a scope, installing a graph whose chain is
empty, hand-built nodes with bad arguments, names that cannot be encoded,
and the log records of a re-enable."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from conftest import MISSING_NS, behaviour

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

ADD_KEY = ("aten", "add.Tensor", "CPU")
SUB_KEY = ("aten", "sub.Tensor", "CPU")
ADD_STOCK = torch.tensor([6.0, 8.0])  # A + B from aten's own kernel


def cpe_accept(*a, **k):
    return True


def cpe_fill(value):
    return lambda a, *rest, **k: torch.full_like(a, value)


def cpe_add():
    return torch.ops.aten.add.Tensor(A, B)


def cpe_reversed(op_symbol, dispatch_key, graph):
    return list(reversed(graph))


class CpeRecords(logging.Handler):
    def __init__(self, level):
        super().__init__(level)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def cpe_logged(impl, action, level=logging.WARNING):
    """Records of `level` or above on the implementation's logger while `action` runs."""
    logger = logging.getLogger(impl.log_name)
    handler, saved = CpeRecords(level), logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        action()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
    return handler.records


def cpe_two_graphs(impl):
    """dsl_a then dsl_b on both mul.Tensor and add.Tensor at CPU."""
    for key in (KEY, ADD_KEY):
        for dsl in ("dsl_a", "dsl_b"):
            impl.register(dsl, *key, cpe_accept, cpe_fill(1.0))


def cpe_dsls(impl, key):
    return [n.dsl_name for n in impl.graph(*key)]


# ---- ordering: one graph's failure spares the others ---------------------------

@behaviour("ordering.failure-spares-other-graphs")
@pytest.mark.parametrize("failing_op", ["mul.Tensor", "add.Tensor"])
def test_an_ordering_function_failing_on_one_graph_still_reorders_the_others(impl, failing_op):
    cpe_two_graphs(impl)

    def failing_on_one(op_symbol, dispatch_key, graph):
        if op_symbol == failing_op:
            raise ValueError("no order for this one")
        return list(reversed(graph))

    records = cpe_logged(impl, lambda: impl.reorder(failing_on_one))
    assert len(records) == 1, [r.getMessage() for r in records]
    for key in (KEY, ADD_KEY):
        expected = ["dsl_a", "dsl_b"] if key[1] == failing_op else ["dsl_b", "dsl_a"]
        assert cpe_dsls(impl, key) == expected, key


def cpe_bad_result(impl, what, graph):
    """An ordering result for `graph` that is not a reordering of it, and a
    text its warning must name."""
    if what == "repeated-node":
        return [graph[0], graph[0], graph[1]], graph[0].node_id
    if what == "not-a-node":
        return [graph[0], "junk_item", graph[1]], "junk_item"
    if what == "other-graphs-node":
        other = ADD_KEY if graph[0].op_symbol == KEY[1] else KEY
        foreign = impl.graph(*other)[0]
        return [graph[0], foreign, graph[1]], foreign.node_id
    if what == "dropped-node":
        dropped = cpe_dropped[graph[0].op_symbol]
        return [graph[0], dropped, graph[1]], dropped.node_id
    stray = impl.make_node("dsl_stray", graph[0].lib_symbol, graph[0].op_symbol,
                           graph[0].dispatch_key, cpe_accept, cpe_fill(3.0), "stray_node_17")
    return [graph[0], stray, graph[1]], "stray_node_17"


# A node registered in each graph and then dropped from it (set_graph): it is
# no longer in its graph, so no ordering of that graph may bring it back.
cpe_dropped = {}


@behaviour("ordering.invalid-result-keeps-graph")
@pytest.mark.parametrize("what", ["repeated-node", "not-a-node", "unregistered-node",
                                  "other-graphs-node", "dropped-node"])
@pytest.mark.parametrize("bad_op", ["mul.Tensor", "add.Tensor"])
def test_an_ordering_result_that_is_no_reordering_keeps_that_graph_only(impl, what, bad_op):
    cpe_two_graphs(impl)
    cpe_dropped.clear()
    if what == "dropped-node":
        for key in (KEY, ADD_KEY):
            impl.register("dsl_dropped", *key, cpe_accept, cpe_fill(2.0))
            cpe_dropped[key[1]] = impl.graph(*key)[-1]
            impl.set_graph(*key, impl.graph(*key)[:-1])
    named = []

    def bad_for_one(op_symbol, dispatch_key, graph):
        if op_symbol != bad_op:
            return list(reversed(graph))
        result, name = cpe_bad_result(impl, what, graph)
        named.append(name)
        return result

    records = cpe_logged(impl, lambda: impl.reorder(bad_for_one))
    assert len(records) == 1, [r.getMessage() for r in records]
    assert named[0] in records[0].getMessage(), "the warning names what is wrong"
    for key in (KEY, ADD_KEY):
        expected = ["dsl_a", "dsl_b"] if key[1] == bad_op else ["dsl_b", "dsl_a"]
        assert cpe_dsls(impl, key) == expected, key


@behaviour("ordering.non-callable-refused")
@pytest.mark.parametrize("junk", [None, "alphabetical", 42])
def test_reordering_with_something_not_callable_is_refused(impl, junk):
    impl.register("test_dsl", *KEY, cpe_accept, cpe_fill(1.0))
    before = impl.graph(*KEY)
    with pytest.raises(TypeError, match=type(junk).__name__):
        impl.reorder(junk)
    assert impl.graph(*KEY) == before


@behaviour("ordering.non-list-keeps-graph")
@pytest.mark.parametrize("junk", ["junk", 42, (1,)])
def test_the_non_list_warning_names_the_type_returned(impl, junk):
    impl.register("test_dsl", *KEY, cpe_accept, cpe_fill(1.0))
    records = cpe_logged(impl, lambda: impl.reorder(lambda op, key, graph: junk))
    assert len(records) == 1 and type(junk).__name__ in records[0].getMessage()


# ---- ordering: what a reorder installs -----------------------------------------

@behaviour("ordering.reorder-installs-nothing")
def test_a_reorder_without_reregister_leaves_the_dispatcher_alone(impl):
    impl.register("dsl_a", *KEY, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_b", *KEY, cpe_accept, cpe_fill(8.0))
    impl.register("dsl_a", *ADD_KEY, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_b", *ADD_KEY, cpe_accept, cpe_fill(8.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([7.0, 7.0]))
    impl.reorder(cpe_reversed)
    assert cpe_dsls(impl, KEY) == ["dsl_b", "dsl_a"]
    assert torch.equal(mul(), torch.tensor([7.0, 7.0])), "the installed router took the new order"
    assert not impl.router_installed(*ADD_KEY), "a reorder installed a graph"
    assert torch.equal(cpe_add(), ADD_STOCK)
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([8.0, 8.0]))


@behaviour("ordering.reregister-installs-changed-graphs")
def test_a_reorder_with_reregister_installs_every_changed_graph(impl):
    impl.register("dsl_a", *KEY, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_b", *KEY, cpe_accept, cpe_fill(8.0))
    impl.register("dsl_a", *ADD_KEY, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_b", *ADD_KEY, cpe_accept, cpe_fill(8.0))
    impl.register("dsl_a", *SUB_KEY, cpe_accept, cpe_fill(7.0))  # one node: reversed, unchanged
    impl.install(*KEY)
    impl.reorder(cpe_reversed, reregister=True)
    assert torch.equal(mul(), torch.tensor([8.0, 8.0]))
    # Never installed before, but changed: installed now.
    assert impl.router_installed(*ADD_KEY)
    assert torch.equal(cpe_add(), torch.tensor([8.0, 8.0]))
    # Never installed and not changed: still not installed.
    assert not impl.router_installed(*SUB_KEY)


@behaviour("ordering.reregister-installs-changed-graphs")
def test_a_graph_returned_as_unchanged_copies_is_not_installed(impl):
    impl.register("dsl_a", *SUB_KEY, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_b", *SUB_KEY, cpe_accept, cpe_fill(8.0))
    # Copies equal to the nodes, in the same order: the graph is unchanged.
    impl.reorder(lambda op_symbol, dispatch_key, graph: [dataclasses.replace(n) for n in graph],
                 reregister=True)
    assert not impl.router_installed(*SUB_KEY), "a graph returned unchanged was installed"


@behaviour("ordering.registration-during-ordering-kept")
def test_a_registration_made_by_the_ordering_function_is_kept(impl):
    impl.register("dsl_a", *KEY, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_b", *KEY, cpe_accept, cpe_fill(8.0))

    def registering(op_symbol, dispatch_key, graph):
        impl.register("dsl_late", *KEY, cpe_accept, cpe_fill(9.0))
        return list(reversed(graph))

    impl.reorder(registering)
    assert "dsl_late" in cpe_dsls(impl, KEY), "the ordering function's registration was lost"


@behaviour("ordering.registration-during-ordering-kept")
def test_copies_for_a_graph_the_ordering_function_registered_into_are_dropped_alone(impl):
    impl.register("dsl_a", *KEY, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_a", *ADD_KEY, cpe_accept, cpe_fill(7.0))
    seen = []

    def registering_then_copying(op_symbol, dispatch_key, graph):
        if not seen:  # the first graph asked: it changes while fn runs
            impl.register("dsl_late", "aten", op_symbol, dispatch_key, lambda *a, **k: False,
                          cpe_fill(9.0))
        seen.append(op_symbol)
        return [dataclasses.replace(n, impl_fn=cpe_fill(8.0)) for n in graph]

    warnings = cpe_logged(impl, lambda: impl.reorder(registering_then_copying, reregister=True))
    assert sorted(seen) == ["add.Tensor", "mul.Tensor"], seen
    changed = KEY if seen[0] == KEY[1] else ADD_KEY
    other = ADD_KEY if changed == KEY else KEY
    assert cpe_dsls(impl, changed) == ["dsl_a", "dsl_late"], "the ordering function's registration was lost"
    assert any("Graph transformation failed" in r.getMessage() for r in warnings), \
        "copies for a graph that changed meanwhile were dropped without a warning"
    run = {KEY: mul, ADD_KEY: cpe_add}
    impl.install(*changed)
    assert torch.equal(run[changed](), torch.tensor([7.0, 7.0])), \
        "a copy for the graph that changed meanwhile gave its node its impl"
    assert torch.equal(run[other](), torch.tensor([8.0, 8.0])), \
        "the other graph's copies were dropped with the changed graph's"


# ---- `_native` ops of nodes installed again -------------------------------------

@behaviour("installation.native-ops-follow-reinstalls")
def test_a_node_added_to_an_installed_graph_gets_its_native_op(impl):
    impl.register("dsl_a", *KEY, lambda *a, **k: False, cpe_fill(7.0))
    impl.install(*KEY)
    impl.register("dsl_b", *KEY, cpe_accept, cpe_fill(8.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([8.0, 8.0]))
    for node, value in zip(impl.graph(*KEY), (7.0, 8.0)):
        assert torch.equal(impl.native_op(node)(A, B), torch.tensor([value, value])), node.node_id


@behaviour("installation.native-ops-follow-reinstalls")
def test_a_node_registered_disabled_into_an_installed_graph_gets_its_native_op_once_enabled(impl):
    impl.register("dsl_a", *KEY, lambda *a, **k: False, cpe_fill(7.0))
    impl.install(*KEY)
    impl.disable(dsl_names=["dsl_b"])  # before dsl_b exists
    impl.register("dsl_b", *KEY, cpe_accept, cpe_fill(8.0))
    assert torch.equal(mul(), STOCK)
    impl.enable(dsl_names=["dsl_b"])  # goes into the chain of the router already in
    assert torch.equal(mul(), torch.tensor([8.0, 8.0]))
    node = impl.graph(*KEY)[1]
    assert torch.equal(impl.native_op(node)(A, B), torch.tensor([8.0, 8.0])), node.node_id


@behaviour("installation.native-ops-follow-reinstalls")
def test_a_node_installed_again_after_a_scope_routes_and_keeps_its_native_op(impl):
    impl.register("dsl_a", *KEY, cpe_accept, cpe_fill(7.0))
    with impl.scope():  # (a scope may start empty: what it installs is not asserted)
        impl.install(*KEY)
    assert torch.equal(mul(), STOCK)
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([7.0, 7.0]))
    (node,) = impl.graph(*KEY)
    assert torch.equal(impl.native_op(node)(A, B), torch.tensor([7.0, 7.0]))


@behaviour("teardown.native-op-of-a-disabled-override-kept")
def test_the_native_op_of_a_disabled_override_outlives_a_scope_entered_while_disabled(impl):
    impl.register("dsl_a", *KEY, cpe_accept, cpe_fill(7.0))
    impl.install(*KEY)
    impl.disable(dsl_names=["dsl_a"])
    assert torch.equal(mul(), STOCK)
    with impl.scope():  # its entry had the op, though no router routes to it
        pass
    (node,) = impl.graph(*KEY)
    assert torch.equal(impl.native_op(node)(A, B), torch.tensor([7.0, 7.0])), node.node_id


# ---- installing everything -----------------------------------------------------

@behaviour("validation.empty-chain-needs-no-op")
def test_installing_all_skips_an_unresolvable_op_whose_overrides_are_all_disabled(impl, namespaces):
    impl.register("dsl_gone", MISSING_NS, "twice", "CPU", cpe_accept, cpe_fill(1.0))
    impl.register("dsl_here", *KEY, cpe_accept, cpe_fill(7.0))
    impl.disable(dsl_names="dsl_gone")
    impl.install_all()  # no router is needed where no override is enabled
    assert torch.equal(mul(), torch.tensor([7.0, 7.0]))


# ---- nodes built by hand -------------------------------------------------------

def cpe_node_class(impl):
    return type(impl.make_node("d", "aten", "mul.Tensor", "CPU", cpe_accept, cpe_fill(1.0), "n"))


@behaviour("nodes.bad-arguments-refused")
@pytest.mark.parametrize("case", ["unknown-keyword", "keyword-repeats-positional", "missing-field"])
def test_a_node_built_with_bad_arguments_raises_type_error(impl, case):
    node_class = cpe_node_class(impl)
    fields = dict(dsl_name="d", lib_symbol="aten", op_symbol="mul.Tensor", dispatch_key="CPU",
                  cond_fn=cpe_accept, impl_fn=cpe_fill(1.0), node_id="n")
    with pytest.raises(TypeError):
        if case == "unknown-keyword":
            node_class(**fields, priority=3)
        elif case == "keyword-repeats-positional":
            node_class("d", **fields)
        else:
            del fields["node_id"]
            node_class(**fields)


@behaviour("nodes.unconditional-cond-fn-true")
def test_the_cond_fn_of_an_unconditional_node_registered_without_one_is_true(impl):
    impl.register("test_dsl", *KEY, None, cpe_fill(5.0), unconditional_override=True)
    (node,) = impl.graph(*KEY)
    assert node.cond_fn(A, B) is True


# ---- names that cannot be encoded ----------------------------------------------

UNENCODABLE = "dsl_\ud800"  # a lone surrogate: no UTF-8 form


def cpe_value_error_or_nothing(action, argument):
    """An implementation may take a name that has no UTF-8 form (a Python
    registry can) or refuse it with a ValueError naming the argument; it
    must not fail any other way."""
    try:
        return action()
    except ValueError as error:
        assert argument in str(error)
    return None


@behaviour("validation.unencodable-names")
def test_registering_under_an_unencodable_name_is_taken_or_refused_with_value_error(impl):
    cpe_value_error_or_nothing(
        lambda: impl.register(UNENCODABLE, *KEY, cpe_accept, cpe_fill(1.0)), "dsl_name")
    assert [n.dsl_name for n in impl.graph(*KEY)] in ([], [UNENCODABLE])


@behaviour("validation.unencodable-names")
def test_asking_for_the_operations_of_an_unencodable_name_finds_none_or_refuses(impl):
    impl.register("test_dsl", *KEY, cpe_accept, cpe_fill(1.0))
    assert cpe_value_error_or_nothing(lambda: impl.dsl_operations(UNENCODABLE), "dsl_name") in (None, [])
    if "namespaces" in impl.features:  # else get_dsl_operations takes no lib_symbol
        assert cpe_value_error_or_nothing(
            lambda: impl.dsl_operations("test_dsl", "ns_\ud800"), "lib_symbol") in (None, [])


@behaviour("validation.unencodable-names")
def test_allowing_an_unencodable_namespace_is_taken_or_refused_with_value_error(impl):
    if "namespaces" in impl.features:  # else there is no allowlist to add to
        cpe_value_error_or_nothing(lambda: impl.allow_namespace("ns_\ud800"), "lib_symbol")
    else:
        pytest.skip("unsupported: no allowlist to add to")


@behaviour("validation.unencodable-names")
@pytest.mark.parametrize("field", ["dsl_names", "op_symbols", "dispatch_keys"])
def test_a_filter_entry_with_no_utf8_form_is_taken_or_refused_naming_it(impl, field):
    impl.register("test_dsl", *KEY, cpe_accept, cpe_fill(1.0))
    entry = "x_\ud800"
    cpe_value_error_or_nothing(lambda: impl.disable(**{field: [entry]}), repr(entry))
    assert [n.active for n in impl.graph(*KEY)] == [True], "a filter naming nothing registered"


# ---- log records ---------------------------------------------------------------

@behaviour("filters.changes-logged")
@pytest.mark.parametrize("names", ["test_dsl", ["test_dsl", "other_dsl"]], ids=["one", "list"])
@pytest.mark.parametrize("change", ["disable", "enable"])
def test_disabling_and_reenabling_each_log_a_record(impl, change, names):
    impl.register("test_dsl", *KEY, cpe_accept, cpe_fill(1.0))
    records = cpe_logged(impl, lambda: getattr(impl, change)(dsl_names=names), logging.INFO)
    assert records and all(r.levelno == logging.INFO for r in records)
    for name in [names] if isinstance(names, str) else names:
        assert name in records[0].getMessage(), (name, records[0].getMessage())


# ---- filters naming nothing registered ------------------------------------------

@behaviour("filters.unknown-names-change-nothing")
@pytest.mark.parametrize("field", ["dsl_names", "op_symbols", "dispatch_keys"])
def test_disabling_names_no_graph_has_changes_nothing(impl, field):
    # Several graphs, so that every index holds more than one entry.
    for key in (KEY, ADD_KEY, ("aten", "mul.Tensor", "AutocastCPU")):
        impl.register("dsl_a", *key, cpe_accept, cpe_fill(7.0))
    impl.register("dsl_b", *KEY, cpe_accept, cpe_fill(8.0))
    impl.install(*KEY)
    impl.disable(**{field: "never_registered_name"})
    assert all(n.active for key in (KEY, ADD_KEY) for n in impl.graph(*key))
    assert torch.equal(mul(), torch.tensor([7.0, 7.0]))
    impl.enable(**{field: "never_registered_name"})
    assert torch.equal(mul(), torch.tensor([7.0, 7.0]))


# ---- symbols that are no identifiers -------------------------------------------

@behaviour("validation.bad-input-changes-nothing")
@pytest.mark.parametrize("op_symbol", ["2mul.Tensor", "mul.2Tensor"])
def test_an_op_symbol_starting_with_a_digit_is_refused_at_registration(impl, op_symbol):
    with pytest.raises(ValueError, match=op_symbol.replace(".", r"\.")):
        impl.register("test_dsl", "aten", op_symbol, "CPU", cpe_accept, cpe_fill(1.0))
    assert impl.graph("aten", op_symbol, "CPU") == []
