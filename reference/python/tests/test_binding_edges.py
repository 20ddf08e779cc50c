"""The binding's side of issue 23: node writes reaching the core, nodes as
dataclasses, list results, C++ predicates under export and compile, cycles
through C++ objects, and bad integers given to the predicate factories."""

from __future__ import annotations

import dataclasses
import gc
import re
import weakref

import pytest
import torch

from native_registry import predicates as P

KEY = ("aten", "mul.Tensor", "CPU")
A, B = torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])
STOCK = A * B
SEVEN, NINE = torch.full((2,), 7.0), torch.full((2,), 9.0)


def always(*args, **kwargs):
    return True


def never(*args, **kwargs):
    return False


def seven(a, *rest):
    return torch.full_like(a, 7.0)


def nine(a, *rest):
    return torch.full_like(a, 9.0)


def mul():
    return torch.ops.aten.mul.Tensor(A, B)


def installed_node(reg, cond=always, impl=seven):
    reg.register_op_override("edges", *KEY, cond, impl)
    reg.register_all_overrides()
    return reg.graph(*KEY)[0]


def compiled_mul(reg):
    ep = torch.export.export(Mul(), (A, B)).run_decompositions(reg.native_decomp_table())
    return ep.module()(A, B)


class Mul(torch.nn.Module):
    def forward(self, a, b):
        return torch.mul(a, b)


# ---- node writes ---------------------------------------------------------------------

def test_a_written_cond_takes_effect_at_the_next_install_in_eager_and_export_alike(reg):
    node = installed_node(reg)
    node.cond_fn = never
    # As upstream: the installed routers keep the callables they were built with.
    assert node.cond_fn is never
    assert torch.equal(mul(), SEVEN)
    assert torch.equal(compiled_mul(reg), SEVEN)
    reg.register_all_overrides()
    assert torch.equal(mul(), STOCK)
    assert torch.equal(compiled_mul(reg), STOCK)
    reg._C.check_invariants()


@pytest.mark.parametrize("field", ["cond_fn", "impl_fn", "try_initialize_runtime"])
def test_a_callable_field_written_with_what_is_not_callable_is_refused_and_changes_nothing(reg, field):
    """Beyond upstream, whose dataclass takes the value and fails at the next
    routed call: the write raises, naming the field and the value's type."""
    node = installed_node(reg)
    before = {name: getattr(node, name) for name in ("cond_fn", "impl_fn", "try_initialize_runtime")}
    with pytest.raises(TypeError, match=f"{field} must be callable, got str"):
        setattr(node, field, "not callable")
    assert {name: getattr(node, name) for name in before} == before
    reg.register_all_overrides()
    assert torch.equal(mul(), SEVEN)
    reg._C.check_invariants()


def test_impls_written_in_a_loop_are_released_once_replaced(reg):
    """The `_native` op's binding holds the node it runs now, not every node
    it ran (issue 23: a list of them grew with each write until teardown)."""
    node = installed_node(reg)
    native = getattr(torch.ops._native, node.node_id).default
    written = []
    for value in range(1, 21):
        def impl(a, *rest, value=value):
            return torch.full_like(a, float(value))
        written.append(weakref.ref(impl))
        node.impl_fn = impl
        reg._C.install_graph(KEY, True)  # a fresh router: the old one's chains go with it
        assert torch.equal(native(A, B), torch.full((2,), float(value)))
        del impl
    gc.collect()
    alive = [i + 1 for i, ref in enumerate(written) if ref() is not None]
    assert alive == [20], f"impls replaced by later writes still held: {alive[:-1]}"


def test_a_filter_change_naming_the_graph_publishes_the_written_impl(reg):
    node = installed_node(reg)
    node.impl_fn = nine
    reg.deregister_op_overrides(disable_dsl_names="other")  # names no node of it: nothing
    assert torch.equal(mul(), SEVEN)
    reg.deregister_op_overrides(disable_dsl_names="edges")
    reg.reenable_op_overrides(enable_dsl_names="edges")
    assert torch.equal(mul(), NINE)
    assert torch.equal(getattr(torch.ops._native, node.node_id).default(A, B), NINE)


def test_a_predicate_can_be_written_as_cond_and_read_back(reg):
    node = installed_node(reg)
    node.cond_fn = P.dtype_in(torch.float64)
    reg.register_all_overrides()
    assert torch.equal(mul(), STOCK)
    assert isinstance(reg.graph(*KEY)[0].cond_fn, P.Predicate)


def test_a_written_runtime_check_is_asked(reg):
    node = installed_node(reg)
    asked = []
    node.try_initialize_runtime = lambda: asked.append(1) or False
    reg.register_all_overrides()
    assert torch.equal(mul(), STOCK) and asked == [1]
    node.try_initialize_runtime = None
    reg.register_all_overrides()
    assert torch.equal(mul(), SEVEN)


def test_restore_brings_back_the_callables_a_node_had(reg):
    node = installed_node(reg)
    saved = reg.snapshot()
    node.impl_fn = nine
    reg.register_all_overrides()
    assert torch.equal(mul(), NINE)
    reg.restore(saved)
    assert torch.equal(mul(), SEVEN)
    assert reg.graph(*KEY)[0].impl_fn is seven
    reg._C.check_invariants()


@pytest.mark.parametrize("field, value", [
    ("dsl_name", "other"), ("lib_symbol", "other"), ("op_symbol", "add.Tensor"),
    ("dispatch_key", "CUDA"), ("node_id", "x"), ("unconditional_override", True)])
def test_a_write_of_a_fixed_field_is_refused_naming_it(reg, field, value):
    node = installed_node(reg)
    before = getattr(node, field)
    with pytest.raises(AttributeError, match=f"{field} of a registered node is fixed"):
        setattr(node, field, value)
    assert getattr(node, field) == before


def test_active_of_a_registered_node_is_refused(reg):
    node = installed_node(reg)
    with pytest.raises(AttributeError, match="follows the filters"):
        node.active = False


@pytest.mark.parametrize("field", ["cond_fn", "impl_fn", "try_initialize_runtime"])
def test_a_non_callable_written_is_refused_and_changes_nothing(reg, field):
    node = installed_node(reg)
    before = getattr(node, field)
    with pytest.raises(TypeError, match=f"{field} must be callable"):
        setattr(node, field, 3)
    assert getattr(node, field) is before
    reg.register_all_overrides()
    assert torch.equal(mul(), SEVEN)


def test_a_runtime_check_on_an_unconditional_node_is_refused(reg):
    reg.register_op_override("edges", *KEY, None, seven, unconditional_override=True)
    node = reg.graph(*KEY)[0]
    with pytest.raises(ValueError, match="try_initialize_runtime cannot be provided"):
        node.try_initialize_runtime = always
    assert node.try_initialize_runtime is None


def test_a_node_read_before_a_reorder_that_returned_its_copy_reports_the_copys_callables(reg):
    """Nodes are views of the core's one record: the object a user holds
    follows the node an ordering function's copy put in the graph."""
    node = installed_node(reg)
    reg.reorder_graphs_from_user_function(
        lambda op, key, graph: [dataclasses.replace(graph[0], impl_fn=nine)], reregister_overrides=True)
    assert node.impl_fn is nine, "the node read before the reorder still reports the replaced impl"
    assert reg.graph(*KEY)[0].impl_fn is nine
    assert torch.equal(torch.ones(2) * torch.ones(2), torch.full((2,), 9.0))


def test_a_write_on_a_node_no_longer_in_its_graph_is_refused(reg):
    node = installed_node(reg)
    reg.reorder_graphs_from_user_function(lambda op, key, graph: [])
    with pytest.raises(ValueError, match="is not in the graph"):
        node.cond_fn = never


def test_a_node_built_by_hand_takes_any_write(reg):
    node = reg._OverrideNode("d", "aten", "mul.Tensor", "CPU", always, seven, "n")
    node.dsl_name, node.cond_fn, node.active = "e", never, False
    assert (node.dsl_name, node.cond_fn, node.active) == ("e", never, False)


# ---- dataclass nodes ---------------------------------------------------------------

def test_asdict_and_fields_of_a_registered_node_with_a_predicate_cond(reg):
    cond = P.dtype_in(torch.float32)
    node = installed_node(reg, cond=cond)
    record = dataclasses.asdict(node)
    assert [f.name for f in dataclasses.fields(node)] == [
        "dsl_name", "lib_symbol", "op_symbol", "dispatch_key", "cond_fn", "impl_fn", "node_id",
        "unconditional_override", "active", "try_initialize_runtime"]
    assert record["cond_fn"].description == cond.description
    assert record["try_initialize_runtime"] is None


def test_replace_gives_an_unregistered_copy_that_takes_writes(reg):
    node = installed_node(reg)
    copy = dataclasses.replace(node, dsl_name="copy")
    copy.cond_fn = never  # a plain record: nothing reaches the registry
    assert copy._handle is None
    assert reg.graph(*KEY)[0] is node and node.dsl_name == "edges" and node.cond_fn is always
    assert torch.equal(mul(), SEVEN)


# ---- C++ predicates see keywords in every router ---------------------------------------

SEARCH = ("aten", "searchsorted.Tensor", "CPU")
SORTED, PROBES, SORTER = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.5]), torch.tensor([0, 1, 2])
NINETY_NINE = torch.tensor([99])


class Search(torch.nn.Module):
    def forward(self, s, v, sorter):
        return torch.searchsorted(s, v, sorter=sorter)


def test_a_predicate_declines_a_keyword_tensor_in_eager_export_and_compile(reg):
    reg.register_op_override("edges", *SEARCH, P.dtype_in(torch.float32),
                             lambda s, v, **k: torch.full(v.shape, 99, dtype=torch.long))
    reg.register_all_overrides()
    eager = torch.searchsorted(SORTED, PROBES, sorter=SORTER)
    assert torch.equal(eager, torch.tensor([2]))
    ep = torch.export.export(Search(), (SORTED, PROBES, SORTER)).run_decompositions(
        reg.native_decomp_table())
    assert torch.equal(ep.module()(SORTED, PROBES, SORTER), eager)
    torch._dynamo.reset()
    compiled = torch.compile(Search(), backend=reg.compile_backend("aot_eager"))
    assert torch.equal(compiled(SORTED, PROBES, SORTER), eager)
    # Without the keyword every tensor is float32: all three take the override.
    assert torch.equal(torch.searchsorted(SORTED, PROBES), NINETY_NINE)
    torch._dynamo.reset()


def test_a_predicate_evaluated_on_a_call_places_keywords_by_the_schema():
    sorter_only = P.dtype_in(torch.int64, arg=5)  # searchsorted.Tensor's `sorter`
    assert sorter_only.evaluate_on_call("aten::searchsorted", "Tensor", (SORTED, PROBES),
                                        {"sorter": SORTER})
    assert not sorter_only.evaluate_on_call("aten::searchsorted", "Tensor", (SORTED, PROBES), {})
    # Named as written, with no dot after an op without an overload name.
    for name, overload, written in [("aten::no_such_op", "", "'aten::no_such_op'"),
                                    ("aten::no_such_op", "bogus", "'aten::no_such_op.bogus'")]:
        with pytest.raises(ValueError, match="no op " + re.escape(written)):
            sorter_only.evaluate_on_call(name, overload, (), {})


# ---- cycles through C++ ---------------------------------------------------------------

@pytest.mark.parametrize("view", ["Node", "Snapshot"])
def test_a_view_made_without_its_value_is_traversed_as_holding_only_its_type(view):
    """The collector may meet an instance whose C++ value was never made
    (`__new__` alone): its traversal visits the type, and succeeds, as
    gc.get_referents shows (a traversal that failed there raises SystemError)."""
    from native_registry import _C
    kind = getattr(_C, view)
    bare = kind.__new__(kind)
    assert gc.is_tracked(bare)
    assert gc.get_referents(bare) == [kind]


def test_a_cond_holding_its_snapshot_is_collected_after_restore(reg):
    def register():
        holder = {}

        def cond(*args, **kwargs):
            return holder is not None

        reg.register_op_override("edges", *KEY, cond, seven)
        reg.register_all_overrides()
        holder["snapshot"] = reg.snapshot()
        return weakref.ref(cond)

    saved = reg.snapshot()
    ref = register()
    reg.restore(saved)
    gc.collect()
    assert ref() is None, "a cond holding a snapshot that holds its node leaked"


def test_a_cond_holding_its_view_is_collected_after_restore(reg):
    refs = []
    saved = reg.snapshot()
    for _ in range(5):
        holder = {}

        def cond(*args, holder=holder, **kwargs):
            return holder is not None

        reg.register_op_override("edges", *KEY, cond, seven)
        holder["node"] = reg.graph(*KEY)[-1]
        refs.append(weakref.ref(cond))
        del cond, holder
    reg.register_all_overrides()
    assert torch.equal(mul(), SEVEN)
    reg.restore(saved)
    gc.collect()
    assert [r() for r in refs] == [None] * 5


def test_a_registered_cond_in_a_cycle_survives_collection(reg):
    holder = {}

    def cond(*args, holder=holder, **kwargs):
        return holder["node"] is not None

    reg.register_op_override("edges", *KEY, cond, seven)
    reg.register_all_overrides()
    holder["node"] = reg.graph(*KEY)[0]
    ref = weakref.ref(cond)
    del cond, holder
    for _ in range(3):
        gc.collect()
    assert ref() is not None
    assert torch.equal(mul(), SEVEN), "collection broke a registered node's cond"


# ---- bad integers to the predicate factories -------------------------------------------

@pytest.mark.parametrize("make, error, message", [
    (lambda: P.dtype_in(torch.float32, arg=2**64), OverflowError, "arg must fit"),
    (lambda: P.dtype_in(torch.float32, arg=-1), ValueError, "arg must be a non-negative"),
    (lambda: P.dtype_in(torch.float32, arg=True), TypeError, "arg must be an int, got bool"),
    (lambda: P.dtype_in(torch.float32, arg="0"), TypeError, "arg must be an int, got str"),
    (lambda: P.contiguous(arg=2**70), OverflowError, "arg must fit"),
    (lambda: P.max_numel(2**64), OverflowError, "limit must fit"),
    (lambda: P.min_rank(-2**64), OverflowError, "limit must fit"),
    (lambda: P.max_rank(1.5), TypeError, "limit must be an int, got float"),
    (lambda: P.max_size(2**63, 1), OverflowError, "dim must fit"),
    (lambda: P.max_size(0, None), TypeError, "size must be an int, got NoneType"),
    (lambda: P.device_type("no-such-device"), ValueError, "'no-such-device' is not a device type"),
    (lambda: P.device_type(0), TypeError, "device type name"),
])
def test_bad_values_for_the_predicate_factories_raise_naming_the_argument(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_index_like_integers_are_taken():
    assert P.max_numel(torch.tensor(3).item()).description
    assert P.dtype_in(torch.float32, arg=__import__("numpy").int64(1))(A, B)
