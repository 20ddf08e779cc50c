"""Where a registry's Python surface meets what users do with it: writing a
registered node's callables, nodes as dataclasses, multi-result impls that
return a list, keyword arguments a cond sees under export, and reference
cycles through the registry that the garbage collector must still free."""

from __future__ import annotations

import dataclasses
import gc
import re
import weakref

import pytest
import torch

from conftest import behaviour

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

SEVEN = torch.tensor([7.0, 7.0])
NINE = torch.tensor([9.0, 9.0])
UPSTREAM_FIELDS = ("dsl_name", "op_symbol", "dispatch_key", "cond_fn", "impl_fn", "node_id",
                   "unconditional_override", "active")


def always(*args, **kwargs):
    return True


def filling(value):
    """An impl that answers a tensor like its first argument, filled with `value`."""
    def fill(a, *rest):
        return torch.full_like(a, value)
    return fill


seven, nine, ten, eleven = (filling(value) for value in (7.0, 9.0, 10.0, 11.0))


# ---- writes of a registered node's callables ------------------------------------------

@behaviour("binding.node-callable-writes-route")
def test_a_cond_written_on_a_registered_node_routes_from_the_next_install(impl):
    impl.register("test_dsl", *KEY, always, seven)
    impl.install(*KEY)
    assert torch.equal(mul(), SEVEN)
    node = impl.graph(*KEY)[0]
    node.cond_fn = lambda *args, **kwargs: False
    impl.install_all()
    assert torch.equal(mul(), STOCK), "the written cond was ignored"
    assert impl.graph(*KEY)[0].cond_fn is node.cond_fn


@behaviour("binding.node-callable-writes-route")
def test_an_impl_written_on_a_registered_node_routes_from_the_next_install(impl):
    impl.register("test_dsl", *KEY, always, seven)
    impl.install(*KEY)
    node = impl.graph(*KEY)[0]
    node.impl_fn = nine
    impl.install_all()
    assert torch.equal(mul(), NINE), "the written impl was ignored"


@behaviour("binding.written-impl-reaches-the-native-op")
def test_the_native_op_of_a_node_runs_the_impl_written_on_it_once_installed_again(impl):
    impl.register("test_dsl", *KEY, always, seven)
    impl.install(*KEY)
    node = impl.graph(*KEY)[0]
    node_id = node.node_id
    assert torch.equal(impl.native_op(node)(A, B), SEVEN)
    node.impl_fn = nine
    impl.install_all()
    (written,) = impl.graph(*KEY)
    assert written.node_id == node_id
    assert torch.equal(mul(), NINE), "the written impl does not route"
    assert torch.equal(impl.native_op(written)(A, B), NINE), \
        "the node's _native op still runs the impl it was first installed with"


@behaviour("binding.node-callable-writes-route")
def test_a_node_written_before_its_first_install_routes_by_what_was_written(impl):
    impl.register("test_dsl", *KEY, lambda *a, **k: False, seven)
    node = impl.graph(*KEY)[0]
    node.cond_fn = always
    node.impl_fn = nine
    impl.install(*KEY)
    assert torch.equal(mul(), NINE)


# ---- one object per node ---------------------------------------------------------------

@behaviour("nodes.one-object-per-node")
def test_every_query_hands_out_the_same_object_for_a_node(impl):
    impl.register("test_dsl", *KEY, always, seven)
    impl.register("other_dsl", *KEY, always, nine)
    first = impl.graph(*KEY)
    again = impl.graph(*KEY)
    assert all(a is b for a, b in zip(first, again)), "a second query made new node objects"
    seen = []
    impl.reorder(lambda op_symbol, dispatch_key, graph: seen.extend(graph) or list(graph))
    assert seen and all(any(n is f for f in first) for n in seen), (
        "the ordering function was handed other objects than the graph's")
    first[0].impl_fn = ten
    assert impl.graph(*KEY)[0] is first[0] and impl.graph(*KEY)[0].impl_fn is ten


@behaviour("nodes.one-object-per-node")
def test_writes_through_a_node_and_through_a_copy_put_in_its_place_end_in_the_last(impl):
    """An ordering function puts a copy in a node's place (dataclasses.replace
    with another impl); the node read before is written, then the copy: the
    graph routes by what was written last through the copy."""
    impl.register("test_dsl", *KEY, always, seven)
    impl.install(*KEY)
    (original,) = impl.graph(*KEY)
    copies = []

    def put_a_copy(op_symbol, dispatch_key, graph):
        copies.append(dataclasses.replace(graph[0], impl_fn=nine))
        return copies

    impl.reorder(put_a_copy, reregister=True)
    assert torch.equal(mul(), NINE)
    original.impl_fn = ten
    copies[0].impl_fn = eleven
    impl.install_all()
    assert torch.equal(mul(), torch.full((2,), 11.0)), "the last write, through the copy, does not route"
    assert impl.graph(*KEY)[0].impl_fn is eleven


# ---- nodes are dataclasses ---------------------------------------------------------------

@behaviour("binding.node-is-a-dataclass")
def test_a_registered_node_is_a_dataclass_with_upstreams_fields(impl):
    impl.register("test_dsl", *KEY, always, seven)
    node = impl.graph(*KEY)[0]
    assert dataclasses.is_dataclass(node)
    names = [f.name for f in dataclasses.fields(node)]
    assert set(UPSTREAM_FIELDS) <= set(names)
    record = dataclasses.asdict(node)
    assert record["dsl_name"] == "test_dsl" and record["op_symbol"] == "mul.Tensor"
    assert record["node_id"] == node.node_id and record["active"] is True
    assert record["impl_fn"] is seven


@behaviour("binding.node-is-a-dataclass")
def test_replacing_a_field_of_a_registered_node_gives_an_unregistered_copy(impl):
    impl.register("test_dsl", *KEY, always, seven)
    impl.install(*KEY)
    node = impl.graph(*KEY)[0]
    copy = dataclasses.replace(node, impl_fn=nine)
    assert copy is not node and copy.impl_fn is nine and copy.node_id == node.node_id
    assert node.impl_fn is seven
    assert impl.graph(*KEY)[0].impl_fn is seven
    impl.install_all()
    assert torch.equal(mul(), SEVEN), "replace() changed the registered node"


# ---- a result that is not a tensor -------------------------------------------------------

SCALAR = ("aten", "_local_scalar_dense", "CPU")


@behaviour("binding.scalar-result-impl")
def test_an_impl_of_an_op_returning_a_scalar_gives_the_call_its_value(impl):
    impl.register("test_dsl", *SCALAR, always, lambda *args, **kwargs: 42.5)
    impl.install(*SCALAR)
    x = torch.tensor([3.0])
    assert torch.ops.aten._local_scalar_dense(x) == 42.5
    assert x.item() == 42.5  # Tensor.item() calls the op

# ---- multi-result impls ---------------------------------------------------------------

TOPK = ("aten", "topk", "CPU")
X = torch.tensor([3.0, 1.0, 2.0])
VALUES, INDICES = torch.tensor([30.0, 20.0]), torch.tensor([0, 2])


@behaviour("binding.multi-result-impl-returns-a-sequence")
def test_an_impl_of_topk_may_return_a_list(impl):
    impl.register("test_dsl", *TOPK, always, lambda *args, **kwargs: [VALUES, INDICES])
    impl.install(*TOPK)
    values, indices = torch.topk(X, 2)
    assert torch.equal(values, VALUES) and torch.equal(indices, INDICES)


@behaviour("binding.multi-result-impl-wrong-result-named")
@pytest.mark.parametrize("returned, named", [(torch.tensor([1.0]), "Tensor"), ("ab", "str"),
                                             ([torch.tensor([1.0])], "list")],
                         ids=["tensor", "str-of-the-length", "short-list"])
def test_an_impl_of_topk_returning_something_else_makes_the_call_raise_naming_it(impl, returned, named):
    impl.register("test_dsl", *TOPK, always, lambda *args, **kwargs: returned)
    impl.install(*TOPK)
    with pytest.raises((TypeError, RuntimeError)) as refused:
        torch.topk(X, 2)
    words = re.findall(r"\w+", str(refused.value))
    assert named in words and "2" in words, f"what was returned, or the 2 results asked, goes unsaid: {refused.value}"


@behaviour("binding.single-result-impl-wrong-result-raises")
@pytest.mark.parametrize("returned", [3, 2.5, "ab"], ids=["int", "float", "str"])
def test_an_impl_of_mul_returning_no_tensor_makes_the_call_raise(impl, returned):
    impl.register("test_dsl", *KEY, lambda a, b: a.numel() == 2, lambda a, b: returned)
    impl.install(*KEY)
    with pytest.raises((TypeError, RuntimeError)):
        mul()
    assert torch.equal(mul(torch.ones(3), torch.ones(3)), torch.ones(3)), "the router routes on"


class LengthRaises(list):
    def __len__(self):
        raise ValueError("this sequence has no length")


class SecondItemRaises(list):
    def __getitem__(self, index):
        if index == 1:
            raise LookupError("this sequence has no second result")
        return list.__getitem__(self, index)


@behaviour("binding.multi-result-impl-sequence-errors-propagate")
@pytest.mark.parametrize("sequence, raised, message", [
    (LengthRaises, ValueError, "this sequence has no length"),
    (SecondItemRaises, LookupError, "this sequence has no second result")], ids=["len", "item"])
def test_what_the_returned_sequence_raises_is_the_call_s_error(impl, sequence, raised, message):
    impl.register("test_dsl", *TOPK, always, lambda *args, **kwargs: sequence([VALUES, INDICES]))
    impl.install(*TOPK)
    with pytest.raises(raised) as caught:
        torch.topk(X, 2)
    assert type(caught.value) is raised and str(caught.value) == message, (
        f"the sequence's own error was replaced: {caught.value!r}")


@behaviour("binding.multi-result-impl-returns-a-sequence")
def test_an_impl_of_topk_may_return_a_tuple_or_torch_return_type(impl):
    results = [(VALUES, INDICES), torch.return_types.topk((VALUES, INDICES))]
    impl.register("test_dsl", *TOPK, always, lambda *args, **kwargs: results.pop(0))
    impl.install(*TOPK)
    for _ in range(2):
        values, indices = torch.topk(X, 2)
        assert torch.equal(values, VALUES) and torch.equal(indices, INDICES)


# ---- keyword arguments under export ------------------------------------------------------

SEARCHSORTED = ("aten", "searchsorted.Tensor", "CPU")
SORTED = torch.tensor([1.0, 2.0, 3.0])
PROBES = torch.tensor([2.5])
SORTER = torch.tensor([0, 1, 2])


class SearchWithSorter(torch.nn.Module):
    def forward(self, s, v, sorter):
        return torch.searchsorted(s, v, sorter=sorter)


def only_float_tensors(*args, **kwargs):
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    return all(t.dtype == torch.float32 for t in tensors)


@behaviour("binding.compile-router-sees-keywords")
def test_export_declines_where_eager_declines_on_a_keyword_tensor(impl):
    impl.register("test_dsl", *SEARCHSORTED, only_float_tensors,
                  lambda s, v, **kwargs: torch.full(v.shape, 99, dtype=torch.long))
    impl.install(*SEARCHSORTED)
    eager = torch.searchsorted(SORTED, PROBES, sorter=SORTER)
    assert torch.equal(eager, torch.tensor([2])), "eager took the override"
    ep = torch.export.export(SearchWithSorter(), (SORTED, PROBES, SORTER))
    ep = ep.run_decompositions(impl.decomp_table())
    assert torch.equal(ep.module()(SORTED, PROBES, SORTER), eager)
    assert not any("_native" in str(n.target) for n in ep.graph.nodes if n.op == "call_function")


def override_float32_searches_by_a_native_predicate(impl):
    """searchsorted overridden at CPU, answering 99s, for calls whose tensors
    are all float32, by the cond evaluated outside Python dtype_in(float32)."""
    supported = "native-predicates" in impl.features
    if not supported:
        pytest.skip(f"unsupported: {impl.name} lacks feature native-predicates")
    predicates = impl.predicates_module()
    impl.register("test_dsl", *SEARCHSORTED, predicates.dtype_in(torch.float32),
                  lambda s, v, **kwargs: torch.full(v.shape, 99, dtype=torch.long))
    impl.install(*SEARCHSORTED)


@behaviour("binding.compile-router-sees-keywords")
def test_export_declines_where_eager_declines_with_a_native_predicate(impl):
    """The same call with a cond evaluated outside Python (issue 23's case:
    dtype_in(float32) sees the int64 sorter in eager; the compile router's
    predicate must see it too)."""
    override_float32_searches_by_a_native_predicate(impl)
    eager = torch.searchsorted(SORTED, PROBES, sorter=SORTER)
    assert torch.equal(eager, torch.tensor([2])), "eager took the override"
    ep = torch.export.export(SearchWithSorter(), (SORTED, PROBES, SORTER))
    ep = ep.run_decompositions(impl.decomp_table())
    assert torch.equal(ep.module()(SORTED, PROBES, SORTER), eager)
    assert not any("_native" in str(n.target) for n in ep.graph.nodes if n.op == "call_function")


class SearchPlain(torch.nn.Module):
    def forward(self, s, v):
        return torch.searchsorted(s, v)


@behaviour("binding.compile-router-sees-keywords")
def test_export_takes_the_override_where_eager_takes_it_with_a_native_predicate(impl):
    """The other half: a predicate that accepts the call in eager accepts it
    in the compile router too (its arguments reach it, not a stand-in)."""
    override_float32_searches_by_a_native_predicate(impl)
    eager = torch.searchsorted(SORTED, PROBES)
    assert torch.equal(eager, torch.tensor([99])), "eager declined the override"
    ep = torch.export.export(SearchPlain(), (SORTED, PROBES))
    ep = ep.run_decompositions(impl.decomp_table())
    assert torch.equal(ep.module()(SORTED, PROBES), eager)
    assert any("_native" in str(n.target) for n in ep.graph.nodes if n.op == "call_function"), (
        "the exported program does not call the override's _native op")


# ---- cycles through the registry ---------------------------------------------------------

def assert_collected(ref: weakref.ref, what: str) -> None:
    gc.collect()
    assert ref() is None, f"{what} is still alive after its scope and gc.collect()"


def assert_a_node_held_by_its_own_callable_is_collected(impl, field: str) -> None:
    """Registers an override whose `field` (cond, impl or
    try_initialize_runtime; the others plain functions held elsewhere) holds
    the override's own node in its closure, routes a call, closes the scope
    and drops every reference: the callable must be collected."""
    def register_self_referencing():
        holder = {}

        def cond_holding_the_node(*args, **kwargs):
            return holder["node"] is not None

        def seven_holding_the_node(x, y):
            assert holder["node"] is not None
            return torch.full_like(x, 7.0)

        def runtime_holding_the_node():
            return holder["node"] is not None

        closing = {"cond": cond_holding_the_node, "impl": seven_holding_the_node,
                   "try_initialize_runtime": runtime_holding_the_node}[field]
        callables = {"cond": always, "impl": seven, field: closing}
        impl.register("test_dsl", *KEY, callables.pop("cond"), callables.pop("impl"), **callables)
        impl.install(*KEY)
        holder["node"] = impl.graph(*KEY)[0]
        assert torch.equal(mul(), SEVEN)
        return weakref.ref(closing)

    with impl.scope():
        ref = register_self_referencing()
    assert torch.equal(mul(), STOCK)
    assert_collected(ref, f"a {field} whose closure holds its node")


@behaviour("binding.cycles-through-the-registry-collected")
def test_a_cond_holding_its_own_node_is_collected_after_its_scope(impl):
    assert_a_node_held_by_its_own_callable_is_collected(impl, "cond")


@behaviour("binding.cycles-through-the-registry-collected")
@pytest.mark.parametrize("holder_field", ["impl", "try_initialize_runtime"])
def test_an_impl_or_runtime_check_holding_its_own_node_is_collected_after_its_scope(
        impl, holder_field):
    """As for a cond, with the node's other callables."""
    if holder_field == "try_initialize_runtime" and "runtime-init" not in impl.features:
        pytest.skip(f"unsupported: {impl.name} takes no try_initialize_runtime")
    assert_a_node_held_by_its_own_callable_is_collected(impl, holder_field)


@behaviour("binding.cycles-through-the-registry-collected")
def test_a_cond_holding_a_snapshot_taken_after_it_is_collected_after_restore(impl):
    module = impl.module
    if not hasattr(module, "snapshot") or not hasattr(module, "restore"):
        pytest.skip(f"unsupported: {impl.name} has no snapshot() and restore()")

    def register_holding_a_snapshot():
        holder = {}

        def cond(*args, **kwargs):
            return holder["snapshot"] is not None

        impl.register("test_dsl", *KEY, cond, seven)
        # Taken after the registration, the snapshot holds the node, whose
        # cond's closure holds the snapshot: a cycle through C++.
        holder["snapshot"] = module.snapshot()
        return weakref.ref(cond)

    saved = module.snapshot()
    ref = register_holding_a_snapshot()
    module.restore(saved)
    assert_collected(ref, "a cond whose closure holds a snapshot taken after its registration")
