"""The call discipline that the whole population of generated mutants found
unpinned (issue 20): what a call hands its conds and impls and gives back
after (arguments released, many arguments intact, enum arguments as torch
objects, a shallower call after a deep nest), ordering functions that
interrupt or change nothing, log handlers that use the registry, and the
unconditional mask nesting. The cases a regression may crash or hang run in
a child interpreter with a timeout."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
import torch

from conftest import NS, behaviour, run_in_fresh_interpreter
from test_ordering import logged_warnings

from fixtures.python.torch_fixtures import STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

SEVEN = torch.tensor([7.0, 7.0])
FIVE = torch.tensor([5.0, 5.0])
BMM_KEY = ("aten", "bmm", "CPU")


def accept(*a, **k):
    return True


def decline(*a, **k):
    return False


def fill(value):
    return lambda a, *rest, **k: torch.full_like(a, value)


def forbidden(*a, **k):
    pytest.fail("the impl of a declining override ran")


# ---- call arguments are released ---------------------------------------------------

# How a call reaches Python: a cond that declines (the op's kernel runs), a
# cond and an impl that take it, and an unconditional override (no cond: the
# impl alone is Python's).
ROUTES = {
    "python-cond-declines": dict(cond=decline, body=forbidden, result=STOCK),
    "python-cond-and-impl": dict(cond=accept, body=fill(7.0), result=SEVEN),
    "unconditional-python-impl": dict(cond=None, body=fill(7.0), result=SEVEN, unconditional_override=True),
}


@behaviour("routing.call-arguments-released")
@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_call_arguments_are_released_after_the_call(impl, route):
    route = dict(route)
    result = route.pop("result")
    impl.register("test_dsl", *KEY, route.pop("cond"), route.pop("body"), **route)
    impl.install(*KEY)
    for _ in range(2):  # the second call goes through whatever the first left set up
        a, b = torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])
        refs = [weakref.ref(a), weakref.ref(b)]
        out = mul(a, b)
        assert torch.equal(out, result)
        del a, b, out
        gc.collect()
        assert [r() is None for r in refs] == [True, True], \
            "the tensors a call was given are still referenced once the call returned"


# ---- every argument of a many-argument op reaches cond and impl intact ----------

# aten::convolution takes nine arguments, none with a default, so every call
# passes all nine, positionally; randint_like.low_generator_dtype takes nine,
# six of them keyword-only, which a call passes by keyword when they differ
# from their defaults. The child prints what the cond and the impl saw and
# what the call returned.
MANY_ARGUMENTS = r'''
import torch

def convolution_call():
    torch.manual_seed(0)
    x, w, bias = torch.randn(1, 2, 6, 5), torch.randn(3, 2, 3, 2), torch.randn(3)
    args = (x, w, bias, [2, 1], [1, 0], [1, 2], False, [0, 0], 1)
    return torch.ops.aten.convolution.default, args, {}

def randint_like_call():
    g = torch.Generator().manual_seed(7)
    args = (torch.zeros(2, 3), 3, 9)
    kwargs = dict(generator=g, dtype=torch.int32, layout=torch.strided, device=torch.device("cpu"),
                  pin_memory=False, memory_format=torch.contiguous_format)
    return torch.ops.aten.randint_like.low_generator_dtype, args, kwargs

def same(seen, given):
    if isinstance(given, torch.Tensor):
        return seen is given
    if isinstance(given, torch.Generator):
        return isinstance(seen, torch.Generator) and seen.initial_seed() == given.initial_seed()
    return type(seen) is type(given) and seen == given

def check(where, args, kwargs, expected_args, expected_kwargs):
    problems = []
    if len(args) != len(expected_args):
        problems.append(f"{where}: {len(args)} positional arguments, expected {len(expected_args)}")
    problems += [f"{where}: argument {i} is {a!r}, expected {e!r}"
                 for i, (a, e) in enumerate(zip(args, expected_args)) if not same(a, e)]
    if sorted(kwargs) != sorted(expected_kwargs):
        problems.append(f"{where}: keywords {sorted(kwargs)}, expected {sorted(expected_kwargs)}")
    problems += [f"{where}: keyword {k} is {kwargs[k]!r}, expected {v!r}"
                 for k, v in expected_kwargs.items() if k in kwargs and not same(kwargs[k], v)]
    return problems

for name, make in (("convolution", convolution_call), ("randint_like", randint_like_call)):
    op, args, kwargs = make()
    stock = op(*args, **kwargs)
    lib, symbol = op.name().split("::")
    for takes in (False, True):
        problems, sentinel = [], torch.full_like(stock, 7)

        def cond(*a, **k):
            problems.extend(check("cond", a, k, args, kwargs))
            return takes

        def body(*a, **k):
            problems.extend(check("impl", a, k, args, kwargs))
            return sentinel.clone()

        with impl.scope():
            impl.register("test_dsl", lib, symbol, "CPU", cond, body)
            impl.install(lib, symbol, "CPU")
            if name == "randint_like":
                kwargs["generator"].manual_seed(7)  # the fallback draws what the stock call drew
            out = op(*args, **kwargs)
        expected = sentinel if takes else stock
        if not torch.equal(out, expected):
            problems.append(f"the call returned {out!r}, expected {expected!r}")
        print(f"{name} takes={takes}:", problems or "intact")
'''


@behaviour("routing.many-arguments-intact")
def test_every_argument_of_a_many_argument_op_reaches_cond_and_impl_intact(impl):
    lines = run_in_fresh_interpreter(impl, MANY_ARGUMENTS, timeout=240)
    assert lines == [f"{name} takes={takes}: intact" for name in ("convolution", "randint_like")
                     for takes in (False, True)], "\n".join(lines)


@behaviour("routing.every-arity-intact")
@pytest.mark.parametrize("keyword_only", [0, 3])
def test_every_argument_reaches_cond_and_impl_whatever_the_arity(impl, keyword_only):
    """Ops of the test namespace with 1 to 24 arguments (a tensor, then ints;
    the last `keyword_only` of them keyword-only): the cond and the impl each
    see exactly the values passed, whatever the count, so that no buffer an
    implementation keeps a call's arguments in is one short at any size."""
    if "namespaces" not in impl.features:
        pytest.skip(f"unsupported: {impl.name} lacks feature namespaces")
    problems = []
    with torch.library._scoped_library(NS, "DEF") as lib:
        calls = []
        for count in range(max(1, keyword_only + 1), 25):
            positional = count - keyword_only
            names = [f"x{i}" for i in range(1, count)]
            declared = ["Tensor a", *(f"int {n}" for n in names[:positional - 1])]
            if keyword_only:
                declared += ["*", *(f"int {n}" for n in names[positional - 1:])]
            lib.define(f"arity{count}({', '.join(declared)}) -> Tensor")
            lib.impl(f"arity{count}", lambda a, *rest, **kw: a.clone(), "CPU")
            a = torch.full((2,), float(count))
            values = [1000 * count + i for i in range(1, count)]  # none is a default
            args = (a, *values[:positional - 1])
            kwargs = dict(zip(names[positional - 1:], values[positional - 1:]))
            calls.append((count, args, kwargs))

        def seen_by(where, count, args, kwargs):
            def check(*got_args, **got_kwargs):
                if got_args[0] is not args[0] or list(got_args[1:]) != list(args[1:]) or got_kwargs != kwargs:
                    problems.append(f"{where} of arity{count} saw {got_args[1:]!r} {got_kwargs!r}")
                return where == "cond"
            return check

        with impl.scope():
            impl.allow_namespace(NS)
            for count, args, kwargs in calls:
                impl.register("test_dsl", NS, f"arity{count}", "CPU", seen_by("cond", count, args, kwargs),
                              lambda *got, _check=seen_by("impl", count, args, kwargs), **kw:
                              (_check(*got, **kw), torch.full((2,), 7.0))[1])
                impl.install(NS, f"arity{count}", "CPU")
            for count, args, kwargs in calls:
                out = getattr(getattr(torch.ops, NS), f"arity{count}").default(*args, **kwargs)
                if not torch.equal(out, torch.full((2,), 7.0)):
                    problems.append(f"arity{count} returned {out!r}, not the impl's answer")
    assert problems == []


# ---- a shallower call after a deep nest ------------------------------------------

# Two nodes on mul. The first's cond, at every level above the deepest,
# calls mul for the level below (which nests down to the deepest), then, once
# that nest has returned, calls mul once more (a leaf: its value is too large
# to recurse), and declines. The second node's cond checks that it sees the
# very tensors the first one saw at its level, and takes the call: its impl
# multiplies without mul. Every level's arguments are distinct, so a level
# whose call shared a stack another level still held would see another's
# arguments, or none.
NEST = r'''
import torch

DEPTH = {depth}
LEAF = 1000.0
opened = []  # (a, b) of each call whose first cond ran and whose second has not
problems = []

def arguments(value):
    return torch.tensor([value, value + 0.25]), torch.tensor([value + 0.5, value + 0.75])

def call(value):
    a, b = arguments(value)
    out = torch.ops.aten.mul.Tensor(a, b)
    expected = [value * (value + 0.5), (value + 0.25) * (value + 0.75)]
    if out.tolist() != expected:
        problems.append(f"mul at {{value}} returned {{out.tolist()}}, expected {{expected}}")
    return out

def first(a, b):
    opened.append((a, b))
    level = float(a[0])
    if level < DEPTH:
        call(level + 1)
        call(LEAF + level)
    return False

def second(a, b):
    if not opened:
        problems.append("the second cond ran for a call the first never saw")
        return True
    a_seen, b_seen = opened.pop()
    if a is not a_seen or b is not b_seen:
        problems.append(f"the second cond saw {{a.tolist()}}, {{b.tolist()}}; the first "
                        f"saw {{a_seen.tolist()}}, {{b_seen.tolist()}}")
    return True

def product(a, b):
    return torch.addcmul(torch.zeros_like(a), a, b)

with impl.scope():
    impl.register("dsl_a", "aten", "mul.Tensor", "CPU", first, lambda *a: None)
    impl.register("dsl_b", "aten", "mul.Tensor", "CPU", second, product)
    impl.install("aten", "mul.Tensor", "CPU")
    for _ in range(2):  # the second nest finds what the first left behind
        call(1.0)
print(problems or "intact", len(opened))
'''


@behaviour("routing.shallower-call-after-deep-nest")
@pytest.mark.parametrize("depth", [12, 20])
def test_a_shallower_call_after_a_deep_nest_sees_its_own_arguments(impl, depth):
    lines = run_in_fresh_interpreter(impl, NEST.format(depth=depth), timeout=240)
    assert lines == ["intact 0"], "\n".join(lines)


# ---- an interrupt from an ordering function ----------------------------------------

def two_node_graphs(impl):
    """mul and bmm at CPU, each with two nodes (dsl_a's takes the call),
    mul's installed; returns what the graphs hold."""
    for key in (KEY, BMM_KEY):
        impl.register("dsl_a", *key, accept, fill(7.0))
        impl.register("dsl_b", *key, accept, fill(8.0))
    impl.install(*KEY)
    return {key: impl.graph(*key) for key in (KEY, BMM_KEY)}


@behaviour("ordering.interrupt-changes-nothing")
@pytest.mark.parametrize("when", ["first-graph", "after-a-reordered-graph"])
def test_an_interrupt_from_an_ordering_function_propagates_and_changes_nothing(impl, when):
    before = two_node_graphs(impl)
    calls = []

    def interrupting(op_symbol, dispatch_key, graph):
        calls.append(op_symbol)
        if when == "first-graph" or len(calls) == 2:
            raise KeyboardInterrupt
        return list(reversed(graph))  # a real change, which must not land either

    def reorder():
        with pytest.raises(KeyboardInterrupt):
            impl.reorder(interrupting, reregister=True)

    assert logged_warnings(impl, reorder) == [], "an interrupt was logged as a failed transformation"
    assert {key: impl.graph(*key) for key in before} == before
    assert torch.equal(mul(), SEVEN), "the installed router changed"


# ---- an ordering function returning its graph unchanged ------------------------------

@behaviour("ordering.unchanged-graph-no-warning")
@pytest.mark.parametrize("nodes", [1, 3])
@pytest.mark.parametrize("returns", ["the-same-list", "a-copy"])
def test_an_ordering_function_returning_its_graph_unchanged_logs_nothing(impl, nodes, returns):
    for value in range(nodes):
        impl.register(f"dsl_{value}", *KEY, accept, fill(7.0 + value))
    impl.install(*KEY)
    before = impl.graph(*KEY)
    seen = []

    def unchanged(op_symbol, dispatch_key, graph):
        seen.append(op_symbol)
        return graph if returns == "the-same-list" else list(graph)

    records = logged_warnings(impl, lambda: impl.reorder(unchanged, reregister=True))
    assert seen == ["mul.Tensor"]
    assert [r.getMessage() for r in records] == []
    assert impl.graph(*KEY) == before
    assert torch.equal(mul(), SEVEN)


# ---- a log handler may use the registry ----------------------------------------------

# An INFO handler on the registry's logger that, for each record, reads a
# graph, lists a DSL's operations and makes a routed call. A
# registry that called it with its lock held would deadlock here, so the
# child runs under a timeout.
LOG_HANDLER = r'''
import logging, torch

KEY = ("aten", "mul.Tensor", "CPU")
seen = []

class UsesTheRegistry(logging.Handler):
    def emit(self, record):
        product = torch.ops.aten.mul.Tensor(torch.tensor([2.0]), torch.tensor([4.0]))
        seen.append((len(impl.graph(*KEY)), len(impl.dsl_operations("test_dsl")), float(product[0])))

logger = logging.getLogger(impl.log_name)
handler, level = UsesTheRegistry(logging.INFO), logger.level
logger.addHandler(handler)
logger.setLevel(logging.INFO)
try:
    with impl.scope():
        impl.register("test_dsl", *KEY, lambda *a, **k: True, lambda a, b: torch.full_like(a, 7.0))
        impl.install(*KEY)
        impl.disable(dsl_names="test_dsl")
        disabled = len(seen)
        impl.enable(dsl_names="test_dsl")
        enabled = len(seen) - disabled
        after = float(torch.ops.aten.mul.Tensor(torch.tensor([2.0]), torch.tensor([4.0]))[0])
finally:
    logger.removeHandler(handler)
    logger.setLevel(level)
print(disabled > 0, enabled > 0, sorted(set(seen)), after)
'''


@behaviour("logging.handler-may-use-registry")
def test_a_log_handler_may_query_and_use_the_registry(impl):
    lines = run_in_fresh_interpreter(impl, LOG_HANDLER, timeout=90)
    # Each handler call sees the one node and its one operation; the routed
    # call inside it gets 8 (disabled) or 7 (enabled), by when the record is
    # logged; after the two changes the override takes calls again.
    assert len(lines) == 1, lines
    disabled, enabled, rest = lines[0].split(" ", 2)
    assert (disabled, enabled) == ("True", "True"), lines[0]
    seen, after = rest.rsplit(" ", 1)
    assert after == "7.0", lines[0]
    assert eval(seen) and set(eval(seen)) <= {(1, 1, 7.0), (1, 1, 8.0)}, lines[0]


# ---- the unconditional mask nests -----------------------------------------------------

@behaviour("unconditional.mask-nests")
def test_the_unconditional_mask_nests(impl):
    impl.register("test_dsl", *KEY, None, fill(5.0), unconditional_override=True)
    impl.install(*KEY)
    impl.disable(dsl_names="test_dsl")
    assert torch.equal(mul(), FIVE)
    for _ in range(2):  # a second round finds what the first left behind
        with impl.unconditional_masked():
            assert torch.equal(mul(), STOCK)
            with impl.unconditional_masked():
                assert torch.equal(mul(), STOCK)
            assert torch.equal(mul(), STOCK), "leaving the inner mask lifted the outer one"
        assert torch.equal(mul(), FIVE), "leaving the outer mask left it in force"


# ---- enum arguments reach conds as torch objects ---------------------------------------

def declining_and_recording(seen):
    def cond(*args, **kwargs):
        seen.append((args, kwargs))
        return False
    return cond


@behaviour("routing.enum-arguments-as-torch-objects")
def test_a_cond_sees_torch_dtype_for_a_scalar_type_argument(impl):
    """_softmax_backward_data's input_dtype (positional) and
    norm.ScalarOpt_dim_dtype's dtype (keyword-only) are ScalarType, not
    Optional; randint_like.low_generator_dtype's dtype is Optional."""
    grad, out = torch.ones(2, 3), torch.softmax(torch.randn(2, 3), 1)
    x = torch.randn(3, 2)
    g = torch.Generator()
    calls = {
        "_softmax_backward_data": (lambda: torch.ops.aten._softmax_backward_data(
            grad, out, 1, torch.float32), lambda args, kwargs: args[3]),
        "norm.ScalarOpt_dim_dtype": (lambda: torch.ops.aten.norm.ScalarOpt_dim_dtype(
            x, 2, [0], False, dtype=torch.float64), lambda args, kwargs: kwargs.get("dtype")),
        "randint_like.low_generator_dtype": (lambda: torch.ops.aten.randint_like.low_generator_dtype(
            x, 0, 5, generator=g, dtype=torch.int16), lambda args, kwargs: kwargs.get("dtype")),
    }
    expected = {"_softmax_backward_data": torch.float32, "norm.ScalarOpt_dim_dtype": torch.float64,
                "randint_like.low_generator_dtype": torch.int16}
    for symbol, (call, pick) in calls.items():
        stock = call()
        seen = []
        with impl.scope():
            impl.register("test_dsl", "aten", symbol, "CPU", declining_and_recording(seen), forbidden)
            impl.install("aten", symbol, "CPU")
            g.manual_seed(0)
            routed = call()
        g.manual_seed(0)
        assert torch.equal(routed, call()) if symbol.startswith("randint") else torch.equal(routed, stock)
        assert len(seen) == 1, symbol
        value = pick(*seen[0])
        assert value is expected[symbol], f"{symbol}'s cond saw {value!r}, expected {expected[symbol]!r}"


@behaviour("routing.enum-arguments-as-torch-objects")
def test_a_cond_sees_torch_layout_and_memory_format_arguments(impl):
    """No aten op with a CPU kernel takes a non-Optional Layout or
    MemoryFormat: an op of the test namespace does, beside an Optional one."""
    supported = "namespaces" in impl.features
    if not supported:
        pytest.skip(f"unsupported: {impl.name} lacks feature namespaces")
    with torch.library._scoped_library(NS, "DEF") as lib:
        lib.define("kinds(Tensor x, ScalarType d, Layout l, MemoryFormat m, MemoryFormat? o) -> Tensor")
        lib.impl("kinds", lambda x, d, l, m, o: x.to(d), "CPU")
        op = getattr(torch.ops, NS).kinds.default
        x = torch.ones(2)
        args = (x, torch.float64, torch.strided, torch.channels_last, torch.preserve_format)
        seen = []
        with impl.scope():
            impl.allow_namespace(NS)
            impl.register("test_dsl", NS, "kinds", "CPU", declining_and_recording(seen), forbidden)
            impl.install(NS, "kinds", "CPU")
            routed = op(*args)
        assert torch.equal(routed, x.double())
        assert len(seen) == 1
        got, _ = seen[0]
        assert got[0] is x
        assert list(got[1:]) == list(args[1:]) and all(
            type(a) is type(e) for a, e in zip(got[1:], args[1:])), f"the cond saw {got[1:]!r}"
