"""Issue 27, item 6 and the decomposition table's part of item 4: an ordering
function that returns copies of its nodes (upstream's nodes are
dataclasses, so `dataclasses.replace(node, impl_fn=...)` is the natural
way to change one), and a decomposition table read after the graph's op was
undefined or defined again. None of this is in the seed file: the
behaviours are `recommended`."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from test_ordering import Records
from conftest import behaviour

from fixtures.python.torch_fixtures import MISSING_NS, STOCK, accept, accept_too, decline, fill, mul

KEY = ("aten", "mul.Tensor", "CPU")
FAILED = "Graph transformation failed"


def reorder_logged(impl, fn, *, reregister=False) -> list[str]:
    """Runs the reordering; the warnings the implementation's logger took."""
    logger = logging.getLogger(impl.log_name)
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        impl.reorder(fn, reregister=reregister)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [r.getMessage() for r in handler.records]


def refusal_warning(warnings: list[str]) -> str:
    """The first warning that says the graph transformation failed; there must be one."""
    failed = [w for w in warnings if FAILED in w]
    assert failed, f"no warning; warnings: {warnings}"
    return failed[0]


def by_dsl(graph, dsl_name):
    (node,) = [n for n in graph if n.dsl_name == dsl_name]
    return node


def copies_of_every_node(impl, **change) -> list[str]:
    """Reorders KEY's graph into copies of its nodes with `change`
    (dataclasses.replace), re-registering; the warnings logged."""
    return reorder_logged(impl, lambda op, key, g: [dataclasses.replace(n, **change) for n in g],
                          reregister=True)


def assert_refused_naming(warnings: list[str], named: str, error: str) -> None:
    """The refusal warning names `named` (a field, or the item refused) and the error's type."""
    failed = refusal_warning(warnings)
    assert named in failed and error in failed, (
        f"the warning names neither {named!r} nor the error (a {error}): {failed}")


# ---- copies of nodes ------------------------------------------------------------------


@behaviour("ordering.copies-route")
@pytest.mark.parametrize("reregister", [False, True], ids=["then-installed", "reregistered"])
@pytest.mark.parametrize("case", ["impl", "cond", "both", "reordered"])
def test_copies_from_an_ordering_function_route_with_their_callables(impl, reregister, case):
    """Either the copies' callables route (and the graph's nodes carry them),
    or the graph is refused with the usual warning and the old ones route;
    never the old ones without a word."""
    seven, eight, nine = fill(7.0), fill(8.0), fill(9.0)
    impl.register("dsl_a", *KEY, accept, seven)
    impl.register("dsl_b", *KEY, accept, eight)
    impl.install(*KEY)
    assert torch.equal(mul(), torch.full((2,), 7.0))

    def copies(op_symbol, dispatch_key, graph):
        a, b = by_dsl(graph, "dsl_a"), by_dsl(graph, "dsl_b")
        if case == "impl":        # same order, a's impl replaced
            return [dataclasses.replace(a, impl_fn=nine), b]
        if case == "cond":        # same order, a now declines: b answers
            return [dataclasses.replace(a, cond_fn=decline), b]
        if case == "both":        # same order, a's cond and impl replaced in one copy
            return [dataclasses.replace(a, cond_fn=accept_too, impl_fn=nine), b]
        return [dataclasses.replace(b, cond_fn=decline), dataclasses.replace(a, impl_fn=nine)]

    warnings = reorder_logged(impl, copies, reregister=reregister)
    if not reregister:
        impl.install(*KEY)  # upstream's routers take a graph's callables when built
    refused = [w for w in warnings if FAILED in w]
    graph = impl.graph(*KEY)
    if refused:
        assert [n.dsl_name for n in graph] == ["dsl_a", "dsl_b"], "a refused graph changed order"
        assert by_dsl(graph, "dsl_a").impl_fn is seven, "a refused graph's callables changed"
        assert torch.equal(mul(), torch.full((2,), 7.0)), "a refused graph routes otherwise"
        return
    expected = {"impl": 9.0, "cond": 8.0, "both": 9.0, "reordered": 9.0}[case]
    assert torch.equal(mul(), torch.full((2,), expected)), (
        f"the copies' callables were ignored: {mul().tolist()}, expected {expected} ({case})")
    a = by_dsl(graph, "dsl_a")
    if case == "cond":
        assert a.cond_fn is decline
        assert a.impl_fn is seven
    else:
        assert a.impl_fn is nine
    if case == "both":
        assert a.cond_fn is accept_too, "of a copy's two new callables, one was dropped"
    assert [n.dsl_name for n in graph] == (["dsl_b", "dsl_a"] if case == "reordered"
                                           else ["dsl_a", "dsl_b"])


@behaviour("ordering.copies-route")
def test_copies_with_the_same_callables_change_nothing(impl):
    seven = fill(7.0)
    impl.register("dsl_a", *KEY, accept, seven)
    impl.install(*KEY)
    warnings = reorder_logged(impl, lambda op, key, g: [dataclasses.replace(n) for n in g],
                              reregister=True)
    assert not [w for w in warnings if FAILED in w], warnings
    assert by_dsl(impl.graph(*KEY), "dsl_a").impl_fn is seven
    assert torch.equal(mul(), torch.full((2,), 7.0))


@behaviour("ordering.copy-changes-only-callables")
@pytest.mark.parametrize("field, value", [("dsl_name", "dsl_z"), ("dispatch_key", "AutogradCPU"),
                                          ("unconditional_override", True)])
def test_a_copy_that_changes_more_than_callables_is_refused(impl, field, value):
    """A copy that moves to another dsl, key or kind of override cannot
    become the node it copies (its graph, its `_native` op and what the
    filters match are the node's): the graph is kept, with the warning,
    callables and order included."""
    seven = fill(7.0)
    impl.register("dsl_a", *KEY, accept, seven)
    impl.register("dsl_b", *KEY, accept, fill(8.0))
    impl.install(*KEY)

    def moved(op_symbol, dispatch_key, graph):
        a, b = by_dsl(graph, "dsl_a"), by_dsl(graph, "dsl_b")
        return [b, dataclasses.replace(a, impl_fn=fill(9.0), **{field: value})]

    assert_refused_naming(reorder_logged(impl, moved, reregister=True), field, "ValueError")
    graph = impl.graph(*KEY)
    assert [n.dsl_name for n in graph] == ["dsl_a", "dsl_b"]
    assert by_dsl(graph, "dsl_a").impl_fn is seven
    assert torch.equal(mul(), torch.full((2,), 7.0))


@behaviour("ordering.copy-changes-only-callables")
@pytest.mark.parametrize("field", ["cond_fn", "impl_fn", "try_initialize_runtime"])
def test_a_copy_with_a_callable_that_is_not_callable_is_refused(impl, field):
    if field == "try_initialize_runtime" and "runtime-init" not in impl.features:
        pytest.skip(f"unsupported: {impl.name} lacks feature runtime-init")
    seven = fill(7.0)
    impl.register("dsl_a", *KEY, accept, seven)
    impl.install(*KEY)
    assert_refused_naming(copies_of_every_node(impl, **{field: "not callable"}), field, "TypeError")
    node = by_dsl(impl.graph(*KEY), "dsl_a")
    assert node.impl_fn is seven and node.cond_fn is accept
    assert torch.equal(mul(), torch.full((2,), 7.0))


@behaviour("ordering.copy-changes-only-callables")
@pytest.mark.parametrize("field", ["cond_fn", "impl_fn"])
def test_a_copy_whose_cond_or_impl_is_none_is_refused(impl, field):
    """None stands for "no runtime check" in try_initialize_runtime alone."""
    seven = fill(7.0)
    impl.register("dsl_a", *KEY, accept, seven)
    impl.install(*KEY)
    assert_refused_naming(copies_of_every_node(impl, **{field: None}), field, "TypeError")
    node = by_dsl(impl.graph(*KEY), "dsl_a")
    assert node.impl_fn is seven and node.cond_fn is accept
    assert torch.equal(mul(), torch.full((2,), 7.0))


@behaviour("ordering.copy-changes-only-callables")
def test_a_copy_that_drops_the_runtime_check_routes_without_it(impl):
    if "runtime-init" not in impl.features:
        pytest.skip(f"unsupported: {impl.name} lacks feature runtime-init")
    state = {"ready": False, "asked": 0}

    def ready():
        state["asked"] += 1
        return state["ready"]

    impl.register("dsl_a", *KEY, accept, fill(7.0), try_initialize_runtime=ready)
    impl.install(*KEY)
    assert torch.equal(mul(), STOCK) and state["asked"] == 1, "its runtime is not ready"
    warnings = copies_of_every_node(impl, try_initialize_runtime=None)
    assert not [w for w in warnings if FAILED in w], warnings
    assert by_dsl(impl.graph(*KEY), "dsl_a").try_initialize_runtime is None
    assert torch.equal(mul(), torch.full((2,), 7.0)) and state["asked"] == 1, "no check asked now"


@behaviour("ordering.copy-changes-only-callables")
def test_a_copy_that_gives_an_unconditional_override_a_runtime_check_is_refused(impl):
    if "runtime-init" not in impl.features:
        pytest.skip(f"unsupported: {impl.name} lacks feature runtime-init")
    nine = fill(9.0)
    impl.register("hatch", *KEY, None, nine, unconditional_override=True)
    impl.install(*KEY)
    assert_refused_naming(copies_of_every_node(impl, try_initialize_runtime=lambda: True),
                          "try_initialize_runtime", "ValueError")
    assert by_dsl(impl.graph(*KEY), "hatch").try_initialize_runtime is None
    assert torch.equal(mul(), torch.full((2,), 9.0))


@behaviour("ordering.copy-changes-only-callables")
def test_a_copy_of_an_unconditional_override_with_another_impl_routes_with_it(impl):
    impl.register("hatch", *KEY, None, fill(9.0), unconditional_override=True)
    impl.install(*KEY)
    six = fill(6.0)
    warnings = copies_of_every_node(impl, impl_fn=six)
    assert not [w for w in warnings if FAILED in w], warnings
    assert by_dsl(impl.graph(*KEY), "hatch").impl_fn is six
    assert torch.equal(mul(), torch.full((2,), 6.0))


@behaviour("ordering.copy-changes-only-callables")
@pytest.mark.parametrize("stranger", ["int", "foreign-node", "unhashable-node-id"])
def test_an_item_that_is_neither_a_node_nor_a_copy_is_refused_naming_it(impl, stranger):
    seven = fill(7.0)
    impl.register("dsl_a", *KEY, accept, seven)
    impl.install(*KEY)
    returned = []

    def a_stranger(op_symbol, dispatch_key, graph):
        # A copy with a node_id no node of the graph has stands for a node
        # made by hand, in whatever field order the implementation's nodes take.
        node_id = ["not", "a", "node_id"] if stranger == "unhashable-node-id" else "not_a_node_id"
        returned.append(3 if stranger == "int" else dataclasses.replace(graph[0], node_id=node_id))
        return returned

    warnings = reorder_logged(impl, a_stranger, reregister=True)
    (item,) = returned
    assert_refused_naming(warnings, repr(item), "TypeError")
    assert [n.impl_fn for n in impl.graph(*KEY)] == [seven]
    assert torch.equal(mul(), torch.full((2,), 7.0))


# ---- the decomposition table after the op changed -------------------------------------

REDEF_NS = "_native_registry_redef_table"


@pytest.fixture
def redefinable():
    """REDEF_NS::foo(Tensor x) -> Tensor, x+1 at CPU; `define(kernel)` defines
    it again (after `undefine()`). Every library is destroyed after the test."""
    libs = []

    def define(kernel):
        lib = torch.library.Library(REDEF_NS, "DEF")
        lib.define("foo(Tensor x) -> Tensor")
        lib.impl("foo", kernel, "CPU")
        lib.impl("foo", lambda x: torch.empty_like(x), "Meta")
        libs.append(lib)
        return getattr(torch.ops, REDEF_NS).foo.default

    def undefine():
        libs.pop()._destroy()

    define(lambda x: x + 1)
    yield define, undefine
    for lib in libs:
        lib._destroy()


class CallFoo(torch.nn.Module):
    def forward(self, x):
        return getattr(torch.ops, REDEF_NS).foo(x)


def entries_for(table, qualified):
    """The table's keys that name `qualified` (OpOverload objects of any
    definition of it)."""
    return [op for op in table if str(op) == qualified]


@behaviour("compile.decomp-table-drops-changed-targets")
def test_the_table_drops_an_op_undefined_since_install(impl, redefinable):
    define, undefine = redefinable
    with impl.scope():  # the router goes before the op's last library does
        impl.allow_namespace(REDEF_NS)
        impl.register("test_dsl", REDEF_NS, "foo", "CPU", accept, fill(7.0))
        impl.install(REDEF_NS, "foo", "CPU")
        assert entries_for(impl.decomp_table(overrides_only=True), f"{REDEF_NS}.foo.default")
        undefine()
        left = entries_for(impl.decomp_table(overrides_only=True), f"{REDEF_NS}.foo.default")
        assert left == [], f"the table holds a router for an op no longer defined: {left}"


@behaviour("compile.decomp-table-drops-changed-targets")
def test_the_table_holds_no_router_for_an_op_defined_again(impl, redefinable):
    """Defined again with a kernel of its own at the router's key: eager runs
    that kernel, and so must export with the table."""
    define, undefine = redefinable
    x = torch.ones(2)
    with impl.scope():
        impl.allow_namespace(REDEF_NS)
        impl.register("test_dsl", REDEF_NS, "foo", "CPU", accept, fill(7.0))
        impl.install(REDEF_NS, "foo", "CPU")
        undefine()
        op = define(lambda x: x + 100)
        assert torch.equal(op(x), torch.full((2,), 101.0)), "eager does not run the new op"
        table = impl.decomp_table()
        assert op not in table or table[op] is torch.export.default_decompositions().get(op), (
            "the table maps the new op to the old op's overrides")
        program = torch.export.export(CallFoo(), (x,)).run_decompositions(table)
        assert torch.equal(program.module()(x), torch.full((2,), 101.0))


@behaviour("compile.decomp-table-drops-changed-targets")
def test_the_table_still_routes_an_op_that_did_not_change(impl, redefinable):
    """The control: the same steps without the redefinition route through
    the override in export."""
    x = torch.ones(2)
    with impl.scope():
        impl.allow_namespace(REDEF_NS)
        impl.register("test_dsl", REDEF_NS, "foo", "CPU", accept, fill(7.0))
        impl.install(REDEF_NS, "foo", "CPU")
        program = torch.export.export(CallFoo(), (x,)).run_decompositions(impl.decomp_table())
        assert torch.equal(program.module()(x), torch.full((2,), 7.0))


@behaviour("ordering.copies-reregister-all-or-nothing")
def test_copies_for_an_op_that_does_not_resolve_change_nothing_on_reregister(impl, namespaces):
    """reregister_overrides=True must install every graph the copies
    changed; one whose op is not defined makes the reordering raise
    AttributeError naming it, and no graph keeps a change."""
    seven = fill(7.0)
    missing_impl = fill(1.0)
    impl.register("dsl_a", *KEY, accept, seven)
    impl.register("dsl_a", MISSING_NS, "nothing", "CPU", accept, missing_impl)
    impl.install(*KEY)

    def copies(op_symbol, dispatch_key, graph):
        return [dataclasses.replace(n, impl_fn=fill(9.0)) for n in graph]

    with pytest.raises(AttributeError, match=f"{MISSING_NS}::nothing"):
        impl.reorder(copies, reregister=True)
    assert impl.graph(*KEY)[0].impl_fn is seven, "a graph kept the copies' callables"
    assert impl.graph(MISSING_NS, "nothing", "CPU")[0].impl_fn is missing_impl
    assert torch.equal(mul(), torch.full((2,), 7.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.full((2,), 7.0)), "the graph took the copies' callables"
