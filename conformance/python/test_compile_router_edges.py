"""The compile/export router (the decomposition table's) at its edges: a
coverage check made by the predicates module, a router whose chain is empty
beside others, a chain a teardown changed (its cached router goes, and with
it the `_native` ops only it held), and _resolve_overload of an op a C++
library took out of the dispatcher while torch.ops still holds its object."""

from __future__ import annotations

import json

import torch

from conftest import behaviour, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

ADD = ("aten", "add.Tensor", "CPU")


def accept(*_args, **_kwargs):
    return True


def sevens(a, *_rest, **_kwargs):
    return torch.full_like(a, 7.0)


# ---- a coverage check made by the predicates module ---------------------------------


@behaviour("aot.predicate-check")
def test_a_predicate_as_the_coverage_check_decides_in_eager_and_in_the_compile_router(impl):
    """dtype_in(float32) as the check: float32 calls are covered (the op's own
    kernel; NotImplemented from the compile router), float64 calls are not
    (the cond routes, in both routers)."""
    predicates = impl.predicates_module()
    a64, b64 = A.double(), B.double()
    with impl.coverage_check(predicates.dtype_in(torch.float32)):
        impl.register("aot_dsl", *KEY, accept, sevens)
        impl.install(*KEY)
        assert torch.equal(mul(), STOCK), "a float32 call the check covers was routed"
        assert torch.equal(mul(a64, b64), torch.full_like(a64, 7.0)), "an uncovered call was not routed"
        router = impl.decomp_table(overrides_only=True)[torch.ops.aten.mul.Tensor]
        assert router(A, B) is NotImplemented, "the compile router routed a covered call"
        assert torch.equal(router(a64, b64), torch.full_like(a64, 7.0)), \
            "the compile router declined a call the check does not cover"
        # The check sees a keyword argument in its schema place, as in eager.
        assert torch.equal(router(A, other=b64), torch.full_like(A, 7.0)), \
            "the compile router's check missed the float64 keyword argument"
        assert router(A, other=B) is NotImplemented


# ---- the table around a router with nothing to route ------------------------------------


@behaviour("export.decomp-table-contents")
def test_a_graph_disabled_beside_another_leaves_the_other_in_the_table(impl):
    """Two graphs installed; each in turn has its only dsl disabled: the
    other's router stays in the table (in whatever order the implementation
    walks its graphs)."""
    add, mul_op = torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor
    already = set(impl.decomp_table(overrides_only=True))
    impl.register("edge_add", *ADD, accept, sevens)
    impl.register("edge_mul", *KEY, accept, sevens)
    impl.install(*ADD)
    impl.install(*KEY)
    for off, on, on_op in (("edge_add", "edge_mul", mul_op), ("edge_mul", "edge_add", add)):
        impl.enable(dsl_names=[on])
        impl.disable(dsl_names=[off])
        table = impl.decomp_table(overrides_only=True)
        assert set(table) == already | {on_op}, (
            f"with {off} disabled the table holds {sorted(map(str, set(table) - already))}")
        assert torch.equal(table[on_op](A, B), torch.full_like(A, 7.0))
    impl.enable(dsl_names=["edge_add", "edge_mul"])
    assert set(impl.decomp_table(overrides_only=True)) == already | {add, mul_op}


# ---- a teardown that changes a chain drops its compile router ----------------------------

NATIVE_OP_DEFINED = """
    import gc
    def defined(node_id):
        return f"_native::{node_id}" in torch._C._dispatch_get_all_op_names()
    a, b = torch.ones(2), torch.ones(2)
    mul_op = torch.ops.aten.mul.Tensor
"""


@behaviour("lifetime.scope-cycles-stay-flat")
def test_a_table_read_in_an_inner_scope_holds_no_native_op_after_it(impl):
    """An outer scope installs an override; an inner one adds a second to the
    same graph and reads the decomposition table (its router routes into the
    second's `_native` op). Once the inner scope is left, its override's
    `_native` op, held by nothing the test keeps, is undefined by the next
    teardown, although the graph's router stays (the outer override); the
    same with the graph's router gone (one scope)."""
    lines = run_in_fresh_interpreter(impl, NATIVE_OP_DEFINED + """
    with impl.scope():
        impl.register("outer_dsl", "aten", "mul.Tensor", "CPU", lambda *args: False,
                      lambda x, y: torch.full_like(x, 5.0))
        impl.install("aten", "mul.Tensor", "CPU")
        with impl.scope():
            impl.register("inner_dsl", "aten", "mul.Tensor", "CPU", lambda *args: True,
                          lambda x, y: torch.full_like(x, 7.0))
            impl.install("aten", "mul.Tensor", "CPU")
            inner = impl.graph("aten", "mul.Tensor", "CPU")[-1].node_id
            print("inner routed: " + str(impl.decomp_table(overrides_only=True)[mul_op](a, b).tolist()))
        gc.collect()
        with impl.scope():
            pass
        print("inner defined after: " + str(defined(inner)))
        print("outer call: " + str(torch.mul(a, b).tolist()))
    with impl.scope():
        impl.register("single_dsl", "aten", "mul.Tensor", "CPU", lambda *args: True,
                      lambda x, y: torch.full_like(x, 3.0))
        impl.install("aten", "mul.Tensor", "CPU")
        single = impl.graph("aten", "mul.Tensor", "CPU")[0].node_id
        print("single routed: " + str(impl.decomp_table(overrides_only=True)[mul_op](a, b).tolist()))
    gc.collect()
    with impl.scope():
        pass
    print("single defined after: " + str(defined(single)))
    """, timeout=300)
    results = dict(line.split(": ", 1) for line in lines if ": " in line)
    assert results["inner routed"] == "[7.0, 7.0]", results
    assert results["single routed"] == "[3.0, 3.0]", results
    assert results["outer call"] == "[1.0, 1.0]", results
    assert results["inner defined after"] == "False", (
        "the inner scope's `_native` op outlived its scope: a decomposition table read there "
        "still holds it")
    assert results["single defined after"] == "False", (
        "the scope's `_native` op outlived it: a decomposition table read there still holds it")


# ---- _resolve_overload of an op the dispatcher no longer has -----------------------------


@behaviour("namespaces.resolve-overload-total")
def test_resolve_overload_of_an_op_a_cpp_library_took_away_is_none(impl):
    """A library made through torch._C (as a C++ extension's is) defines an op;
    torch.ops hands out its object; the library is destroyed. torch.ops still
    holds the object (only torch.library.Library drops it), but the op is no
    longer in the dispatcher: it resolves to None. In a child interpreter: the
    namespace torch.ops keeps would trip later tests that walk every op."""
    lines = run_in_fresh_interpreter(impl, """
        import gc, json
        name = "_native_registry_gone_ns"
        library = torch._C._dispatch_library("DEF", name, "")
        library.define("twice(Tensor x) -> Tensor", "", [])
        namespace = getattr(torch.ops, name)
        before = impl.resolve_overload(name, "twice") is namespace.twice.default
        library.reset()
        del library
        gc.collect()
        try:
            torch._C._dispatch_find_schema_or_throw(f"{name}::twice", "")
            gone = False
        except RuntimeError:
            gone = True
        after = impl.resolve_overload(name, "twice")
        print(json.dumps([before, gone, hasattr(namespace, "twice"), repr(after)]))
    """)
    before, gone, kept, after = json.loads(lines[-1])
    assert before, "the op defined through torch._C did not resolve to torch.ops' object"
    assert gone and kept, "the test needs the op gone from the dispatcher and its packet kept by torch.ops"
    assert after == "None", f"an op the dispatcher lacks resolved to {after}"
