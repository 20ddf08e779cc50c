"""The predicates module of an implementation with conds evaluated outside
Python (feature native-predicates, `impl.predicates_module()`): each tensor
check as the cond of a routed call, with and without `arg=`, tensors in lists
included; always and never; `&`, `|` and `~`; not_cow and same_shape; a
predicate called from Python with a call's positional arguments; and the
factories refusing bad values, naming them. Beyond upstream (its conds are
Python functions only): `recommended`."""

from __future__ import annotations

import dataclasses
from unittest.mock import patch

import pytest
import torch

from conftest import behaviour

from fixtures.python.torch_fixtures import MUL_CPU as KEY
from fixtures.python.torch_fixtures import STOCK, fill, mul

MUL = torch.ops.aten.mul.Tensor
CAT = torch.ops.aten.cat.default
CAT_KEY = ("aten", "cat", "CPU")
ADD = torch.ops.aten.add.Tensor
ADD_KEY = ("aten", "add.Tensor", "CPU")


def routes(impl, cond, calls, key=KEY):
    """For each (op, args, kwargs) of `calls`, whether an override at `key`
    with `cond` took the call (its impl ran), the call's answer checked
    against the op's own either way."""
    taken = []

    def body(*args, **kwargs):
        taken.append(True)
        return torch.full((), 7.0)  # no op's own answer: the call shows it was taken

    out = []
    with impl.scope():
        impl.register("pred_dsl", *key, cond, body)
        impl.install(*key)
        for op, args, kwargs in calls:
            taken.clear()
            answer = op(*args, **kwargs)
            if taken:
                assert torch.equal(answer, torch.full((), 7.0)), "a taken call did not return the impl's answer"
            out.append(bool(taken))
    return out


def mul_calls(*pairs):
    return [(MUL, pair, {}) for pair in pairs]


def module(impl):
    return impl.predicates_module()


F32 = torch.ones(2, 3)
F64 = torch.ones(2, 3, dtype=torch.float64)
ROW = torch.ones(3)
BIG = torch.ones(4, 4)


# ---- each tensor check, on every tensor or on one argument ----------------------------


@behaviour("predicates.tensor-checks")
def test_each_tensor_check_decides_on_every_tensor_of_the_call(impl):
    P = module(impl)
    cases = {
        "dtype_in(float32)": (P.dtype_in(torch.float32), [(F32, F32), (F32, F64)], [True, False]),
        "dtype_in(float32, float64)": (P.dtype_in(torch.float32, torch.float64), [(F32, F64), (F32, ROW.int())],
                                       [True, False]),
        "device_type('cpu')": (P.device_type("cpu"), [(F32, ROW)], [True]),
        "device_type('cuda')": (P.device_type("cuda"), [(F32, ROW)], [False]),
        "contiguous()": (P.contiguous(), [(F32, F32), (F32, torch.ones(3, 2).t())], [True, False]),
        "min_rank(2)": (P.min_rank(2), [(F32, F32), (F32, ROW)], [True, False]),
        "max_rank(1)": (P.max_rank(1), [(ROW, ROW), (F32, ROW)], [True, False]),
        "min_numel(6)": (P.min_numel(6), [(F32, F32), (F32, ROW)], [True, False]),
        "max_numel(6)": (P.max_numel(6), [(F32, ROW), (BIG, BIG)], [True, False]),
        # size(-1) counts from the last dimension; size(1) of a 1-d tensor does not exist
        "max_size(-1, 3)": (P.max_size(-1, 3), [(F32, ROW), (BIG, BIG)], [True, False]),
        "max_size(1, 3)": (P.max_size(1, 3), [(F32, F32), (F32, ROW)], [True, False]),
        "max_size(-3, 9)": (P.max_size(-3, 9), [(F32, F32)], [False]),
    }
    for name, (cond, pairs, expected) in cases.items():
        assert routes(impl, cond, mul_calls(*pairs)) == expected, name


@behaviour("predicates.tensor-checks")
def test_a_check_given_arg_looks_at_that_argument_only(impl):
    P = module(impl)
    cases = {
        "dtype_in(float32, arg=0)": (P.dtype_in(torch.float32, arg=0), [(F32, F64), (F64, F32)], [True, False]),
        "dtype_in(float64, arg=1)": (P.dtype_in(torch.float64, arg=1), [(F32, F64), (F64, F32)], [True, False]),
        "contiguous(arg=1)": (P.contiguous(arg=1), [(torch.ones(3, 2).t(), F32), (F32, torch.ones(3, 2).t())],
                              [True, False]),
        "min_rank(2, arg=0)": (P.min_rank(2, arg=0), [(F32, ROW), (ROW, F32)], [True, False]),
        "max_numel(3, arg=1)": (P.max_numel(3, arg=1), [(F32, ROW), (ROW, F32)], [True, False]),
        "max_size(0, 2, arg=0)": (P.max_size(0, 2, arg=0), [(F32, ROW), (BIG, torch.ones(4))], [True, False]),
        "device_type('cpu', arg=0)": (P.device_type("cpu", arg=0), [(F32, ROW)], [True]),
        # an argument the op does not have holds no tensor: the check fails
        "dtype_in(float32, arg=5)": (P.dtype_in(torch.float32, arg=5), [(F32, F32)], [False]),
        "min_rank(0, arg=2)": (P.min_rank(0, arg=2), [(F32, F32)], [False]),
    }
    for name, (cond, pairs, expected) in cases.items():
        assert routes(impl, cond, mul_calls(*pairs)) == expected, name


@behaviour("predicates.tensor-checks")
def test_an_argument_holding_no_tensor_fails_a_check_given_it(impl):
    """add.Tensor's keyword-only alpha is a number: a check given arg=2 sees
    no tensor there and fails, whatever alpha is; arg=1 sees `other`."""
    P = module(impl)
    calls = [(ADD, (F32, F32), {"alpha": 2}), (ADD, (F32, F32), {})]
    assert routes(impl, P.max_rank(8, arg=2), calls, ADD_KEY) == [False, False]
    assert routes(impl, P.max_rank(8, arg=1), calls, ADD_KEY) == [True, True]


@behaviour("predicates.tensor-checks")
def test_a_check_looks_into_tensor_lists(impl):
    """cat's tensors come as one list argument: every tensor in it is checked,
    without arg= and with arg=0."""
    P = module(impl)
    calls = [(CAT, ([F32, F32],), {}), (CAT, ([F32, F64],), {}), (CAT, ([F64, F32],), {})]
    assert routes(impl, P.dtype_in(torch.float32), calls, CAT_KEY) == [True, False, False]
    assert routes(impl, P.dtype_in(torch.float32, arg=0), calls, CAT_KEY) == [True, False, False]
    assert routes(impl, P.min_rank(2, arg=0), calls, CAT_KEY) == [True, True, True]
    # arg=1 is cat's dim, no tensor
    assert routes(impl, P.min_rank(0, arg=1), calls[:1], CAT_KEY) == [False]
    assert routes(impl, P.same_shape(), [(CAT, ([F32, F32],), {}), (CAT, ([F32, BIG[:, :3]],), {})],
                  CAT_KEY) == [True, False]


# ---- always, never, not_cow, same_shape and the combinators ----------------------------


@behaviour("predicates.combinators")
def test_always_never_and_their_combinations(impl):
    P = module(impl)
    f32, f64 = P.dtype_in(torch.float32), P.dtype_in(torch.float64)
    small = P.max_numel(6)
    calls = mul_calls((F32, F32), (F64, F64), (BIG, BIG), (F32, F64))
    cases = {
        "always()": (P.always(), [True, True, True, True]),
        "never()": (P.never(), [False, False, False, False]),
        "f32 & small": (f32 & small, [True, False, False, False]),
        "small & f32": (small & f32, [True, False, False, False]),
        "f32 | f64": (f32 | f64, [True, True, True, False]),
        "f64 | small": (f64 | small, [True, True, False, True]),
        "~f32": (~f32, [False, True, False, True]),
        "~never()": (~P.never(), [True, True, True, True]),
        "~(f32 | f64)": (~(f32 | f64), [False, False, False, True]),
        "(f32 & small) | (f64 & small)": ((f32 & small) | (f64 & small), [True, True, False, False]),
        "always() & never()": (P.always() & P.never(), [False] * 4),
        "never() | always()": (P.never() | P.always(), [True] * 4),
    }
    for name, (cond, expected) in cases.items():
        assert routes(impl, cond, calls) == expected, name


@behaviour("predicates.combinators")
def test_same_shape_asks_every_tensor_for_one_shape(impl):
    P = module(impl)
    calls = mul_calls((F32, F32), (F32, ROW), (ROW, ROW), (F32, F64))
    assert routes(impl, P.same_shape(), calls) == [True, False, True, True]
    assert routes(impl, P.same_shape() & P.dtype_in(torch.float32), calls) == [True, False, True, False]


@behaviour("predicates.combinators")
def test_not_cow_declines_a_call_with_a_copy_on_write_tensor(impl):
    P = module(impl)
    plain, other = torch.ones(3), torch.ones(3)
    lazy = torch._lazy_clone(other)  # `other` and `lazy` share copy-on-write storage now
    assert torch._C._is_cow_tensor(lazy)
    calls = mul_calls((plain, plain.clone()), (plain, lazy), (lazy, plain))
    assert routes(impl, P.not_cow(), calls) == [True, False, False]
    assert routes(impl, ~P.not_cow(), calls) == [False, True, True]
    assert torch._C._is_cow_tensor(lazy), "routing the call materialised the copy-on-write tensor"


# ---- a predicate called from Python -------------------------------------------------------


@behaviour("predicates.direct-call")
def test_a_predicate_called_with_positional_arguments_answers_as_the_cond(impl):
    """Tensors and lists (or tuples) of tensors are checked; any other value,
    and a list holding anything but tensors, holds no tensor."""
    P = module(impl)
    f32 = P.dtype_in(torch.float32)
    cases = [
        (f32, (F32, F32), True),
        (f32, (F32, F64), False),
        (f32, ([F32, F32], 0), True),
        (f32, ((F32, F64), 0), False),
        (f32, (1, 2.0, "x"), False),         # no tensor at all
        (f32, ([F32, 1],), False),           # a mixed list holds no tensor
        (f32, ([],), False),
        (f32, (F32, [F64, 3]), True),        # the mixed list is no tensor: F32 decides
        (P.dtype_in(torch.float64, arg=1), (F32, F64), True),
        (P.dtype_in(torch.float64, arg=1), (F64, F32), False),
        (P.dtype_in(torch.float64, arg=1), (F64,), False),
        (P.min_rank(2, arg=1), (ROW, [F32, BIG]), True),
        (P.same_shape(), (F32, [F32, F64]), True),
        (P.same_shape(), (F32, [F32, ROW]), False),
        (P.always(), (), True),
        (P.never(), (F32,), False),
        (~f32 | P.max_rank(1), (ROW,), True),
    ]
    for predicate, args, expected in cases:
        assert predicate(*args) is expected, (predicate, args)
    assert f32(F32, other=F64) is True, "a keyword argument was checked (only positional ones are)"


@behaviour("predicates.direct-call")
def test_a_predicate_survives_copying_with_its_answers(impl):
    """A node's cond may be copied (dataclasses.asdict deep-copies it): a
    copy answers as the original."""
    import copy
    P = module(impl)
    predicate = P.dtype_in(torch.float32) & ~P.min_numel(10)
    for made in (copy.copy(predicate), copy.deepcopy(predicate)):
        assert [made(F32, F32), made(F64, F64), made(BIG, BIG)] == [True, False, False]


# ---- the factories refuse bad values ----------------------------------------------------------


class Index:
    """An int by __index__ (as numpy's integers are)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


class BrokenIndex:
    def __index__(self):
        raise ArithmeticError("no index today")


@behaviour("predicates.bad-arguments")
@pytest.mark.parametrize("make,error,named", [
    (lambda P: P.dtype_in(), ValueError, "dtype"),
    (lambda P: P.dtype_in("float32"), TypeError, "str"),
    (lambda P: P.dtype_in(torch.float32, 1), TypeError, "int"),
    (lambda P: P.dtype_in(torch.float32, arg=-1), ValueError, "-1"),
    (lambda P: P.dtype_in(torch.float32, arg=True), TypeError, "bool"),
    (lambda P: P.dtype_in(torch.float32, arg="0"), TypeError, "str"),
    (lambda P: P.min_rank(True), TypeError, "bool"),
    (lambda P: P.max_rank(1.5), TypeError, "float"),
    (lambda P: P.min_numel(2 ** 63), OverflowError, str(2 ** 63)),
    (lambda P: P.max_numel(-2 ** 64), OverflowError, str(-2 ** 64)),
    (lambda P: P.max_size("0", 3), TypeError, "str"),
    (lambda P: P.max_size(0, None), TypeError, "NoneType"),
    (lambda P: P.contiguous(arg=-3), ValueError, "-3"),
    (lambda P: P.device_type(0), TypeError, "int"),
    (lambda P: P.device_type("no_such_device"), ValueError, "no_such_device"),
    (lambda P: P.device_type("cpu", arg=-1), ValueError, "-1"),
    (lambda P: P.min_rank(BrokenIndex()), ArithmeticError, "no index today"),
], ids=["dtype-in-empty", "dtype-in-str", "dtype-in-int", "arg-negative", "arg-bool", "arg-str",
        "limit-bool", "limit-float", "limit-too-big", "limit-too-small", "dim-str", "size-none",
        "contiguous-arg-negative", "device-type-int", "device-type-unknown", "device-type-arg-negative",
        "index-raises"])
def test_a_factory_refuses_a_bad_value_naming_it(impl, make, error, named):
    P = module(impl)
    with pytest.raises(error, match=named.replace("(", r"\(")):
        make(P)


@behaviour("predicates.bad-arguments")
def test_a_factory_takes_an_int_by_its_index_and_limits_at_the_int64_edges(impl):
    P = module(impl)
    calls = mul_calls((F32, F32), (F32, ROW))
    assert routes(impl, P.min_rank(Index(2), arg=Index(1)), calls) == [True, False]
    assert routes(impl, P.max_numel(2 ** 63 - 1) & P.min_numel(-2 ** 63), calls) == [True, True]


# ---- Python beside a predicate while Dynamo traces -------------------------------------


@behaviour("predicates.python-beside-a-predicate-diverted")
@pytest.mark.parametrize("python_part", ["runtime-check", "cond-from-a-copy"])
def test_a_python_callable_beside_a_predicate_runs_under_the_guard_while_tracing(impl, python_part):
    guard_states = []

    def noting_the_guard(*args, **kwargs):
        guard_states.append(impl.in_reentrant_call())
        return False

    if python_part == "runtime-check":
        if "runtime-init" not in impl.features:
            pytest.skip(f"unsupported: {impl.name} lacks feature runtime-init")
        impl.register("pred_dsl", *KEY, module(impl).always(), fill(7.0),
                      try_initialize_runtime=noting_the_guard)
        impl.install(*KEY)
    else:
        impl.register("pred_dsl", *KEY, module(impl).always(), fill(7.0))
        impl.install(*KEY)
        impl.reorder(lambda op, key, graph: [dataclasses.replace(n, cond_fn=noting_the_guard)
                                             for n in graph], reregister=True)
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(mul(), STOCK)
    assert guard_states == [True], "the Python callable did not run once, under the re-entrancy guard"
