"""Argument values of every kind reach a Python cond and impl as they reach a
torch.library Python kernel (the oracle, asked of torch itself): an argument
equal to its schema default is left out whatever its type (float, str, int
list, Scalar, bool, None), one that differs is passed even where it compares
equal in Python (alpha=1.0 against the default 1); a number given for a
Tensor argument (the 2 of `a * 2`) as the Python number; optional tensors,
tensor lists and strings as such; and ops with more keyword-only arguments
than a call usually passes (ten, some at their defaults)."""

from __future__ import annotations


import pytest
import torch

from conftest import NS, behaviour, kernel_receives

X4 = torch.arange(16.0).reshape(1, 1, 4, 4)
V = torch.tensor([-1.0, 2.0])
W = torch.tensor([0.5, 1.5])


def form(value):
    """Tensors as "Tensor" (and their identity checked apart), anything else
    as (type name, value): 1 and 1.0 and True differ."""
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [form(v) for v in value])
    return (type(value).__name__, value)


def recorder(calls: list, answer: bool):
    def record(*args, **kwargs):
        calls.append((tuple(form(a) for a in args), {k: form(v) for k, v in kwargs.items()}))
        return answer
    return record



def torch_library_kernel_sees(op_symbol: str, call) -> tuple:
    """What a torch.library Python kernel at CPU receives for `call` (the
    oracle, from torch), as recorded here."""
    calls = []
    kernel_receives(op_symbol, call, recorder(calls, False))
    return calls[0]


# op symbol, the call, what its kernel receives (the form above)
CASES = {
    "float-default-given": ("leaky_relu", lambda: torch.ops.aten.leaky_relu(V, 0.01),
                            (("Tensor",), {})),
    "float-other": ("leaky_relu", lambda: torch.ops.aten.leaky_relu(V, 0.2),
                    (("Tensor", ("float", 0.2)), {})),
    "str-default-given": ("gelu", lambda: torch.ops.aten.gelu(V, approximate="none"),
                          (("Tensor",), {})),
    "str-other": ("gelu", lambda: torch.nn.functional.gelu(V, approximate="tanh"),
                  (("Tensor",), {"approximate": ("str", "tanh")})),
    "scalar-default-given": ("add.Tensor", lambda: torch.ops.aten.add.Tensor(V, W, alpha=1),
                             (("Tensor", "Tensor"), {})),
    "scalar-other": ("add.Tensor", lambda: torch.add(V, W, alpha=2),
                     (("Tensor", "Tensor"), {"alpha": ("int", 2)})),
    "scalar-float-for-int-default": ("add.Tensor", lambda: torch.ops.aten.add.Tensor(V, W, alpha=1.0),
                                     (("Tensor", "Tensor"), {"alpha": ("float", 1.0)})),
    "scalars-at-defaults": ("softplus", lambda: torch.ops.aten.softplus(V, 1, 20), (("Tensor",), {})),
    "scalar-before-a-default": ("softplus", lambda: torch.ops.aten.softplus(V, 2),
                                (("Tensor", ("int", 2)), {})),
    "wrapped-int": ("mul.Tensor", lambda: V * 2, (("Tensor", ("int", 2)), {})),
    "wrapped-float": ("mul.Tensor", lambda: V * 2.5, (("Tensor", ("float", 2.5)), {})),
    "optional-tensor-none-before-a-tensor": ("clamp.Tensor", lambda: torch.clamp(V, max=W),
                                             (("Tensor", ("NoneType", None), "Tensor"), {})),
    "optional-tensor-trailing-none": ("clamp.Tensor", lambda: torch.clamp(V, min=W),
                                      (("Tensor", "Tensor"), {})),
    "tensor-list": ("cat", lambda: torch.cat([V, W]), ((("list", ["Tensor", "Tensor"]),), {})),
    "tensor-list-and-int": ("cat", lambda: torch.cat([V, W], -1),
                            ((("list", ["Tensor", "Tensor"]), ("int", -1)), {})),
    "int-lists-at-defaults": ("max_pool2d_with_indices",
                              lambda: torch.ops.aten.max_pool2d_with_indices(X4, [2, 2], [], [0, 0], [1, 1]),
                              (("Tensor", ("list", [("int", 2), ("int", 2)])), {})),
    "int-list-and-bool-given": ("max_pool2d_with_indices",
                                lambda: torch.ops.aten.max_pool2d_with_indices(X4, [2, 2], [1, 1], [0, 0], [1, 1],
                                                                               True),
                                (("Tensor", ("list", [("int", 2), ("int", 2)]),
                                  ("list", [("int", 1), ("int", 1)]), ("list", [("int", 0), ("int", 0)]),
                                  ("list", [("int", 1), ("int", 1)]), ("bool", True)), {})),
}


@behaviour("arguments.values-by-kind")
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cond_and_impl_get_each_kind_of_value_as_a_torch_library_kernel(impl, case):
    op_symbol, call, expected = CASES[case]
    stock = call()
    assert torch_library_kernel_sees(op_symbol, call) == expected, "the table agrees with torch"
    for answer in (False, True):
        conds, impls = [], []
        record_impl = recorder(impls, False)

        def body(*args, **kwargs):
            record_impl(*args, **kwargs)
            return stock.clone() if isinstance(stock, torch.Tensor) else tuple(t.clone() for t in stock)

        with impl.scope():
            impl.register("test_dsl", "aten", op_symbol, "CPU", recorder(conds, answer), body)
            impl.install("aten", op_symbol, "CPU")
            out = call()
        assert conds == [expected], f"the cond saw {conds}"
        assert impls == ([expected] if answer else []), f"the impl saw {impls}"
        got, want = (out, stock) if isinstance(stock, torch.Tensor) else (out[0], stock[0])
        assert torch.equal(got, want), "the call's answer is not the op's"


@behaviour("arguments.values-by-kind")
def test_a_wrapped_number_keeps_the_tensors_the_call_was_given(impl):
    """Beside the number, the tensor argument is the caller's own object."""
    seen = []
    impl.register("test_dsl", "aten", "mul.Tensor", "CPU",
                  lambda a, b: seen.append((a, b)) or False, lambda a, b: pytest.fail("declined"))
    impl.install("aten", "mul.Tensor", "CPU")
    assert torch.equal(V * 3, torch.tensor([-3.0, 6.0]))
    assert len(seen) == 1 and seen[0][0] is V and type(seen[0][1]) is int and seen[0][1] == 3


@behaviour("arguments.values-by-kind")
def test_dtype_layout_and_memory_format_arguments_reach_the_cond_as_a_kernel_gets_them(impl):
    """An op of the test namespace whose optional dtype, layout and
    memory_format come before an int, so a None among them is passed, not
    left out as a default: given, each is the torch object (torch.float64,
    torch.strided, torch.channels_last); None, it is None; as the op's own
    Python kernel at CPU receives them."""
    if "namespaces" not in impl.features:
        pytest.skip(f"unsupported: {impl.name} lacks feature namespaces")
    calls = [(None, None, None, 3), (torch.float64, torch.strided, torch.channels_last, 3),
             (None, torch.strided, None, 4), (torch.int32, None, torch.contiguous_format, 5)]
    with torch.library._scoped_library(NS, "DEF") as lib:
        lib.define("enum_args(Tensor x, ScalarType? dtype, Layout? layout, MemoryFormat? memory_format, "
                   "int k) -> Tensor")
        kernel_saw = []
        lib.impl("enum_args", lambda x, *rest: kernel_saw.append(rest) or x + rest[-1], "CPU")
        op = getattr(torch.ops, NS).enum_args.default
        stocks = [op(V, *args) for args in calls]
        assert kernel_saw == calls, "the op's own kernel saw other values than were passed"
        conds, impls = [], []
        with impl.scope():
            impl.allow_namespace(NS)
            impl.register("test_dsl", NS, "enum_args", "CPU",
                          lambda x, *rest: conds.append(rest) or rest[-1] == 4,
                          lambda x, *rest: impls.append(rest) or torch.full_like(x, -1.0))
            impl.install(NS, "enum_args", "CPU")
            outs = [op(V, *args) for args in calls]
    assert conds == calls, f"the cond saw {conds}"
    assert impls == [calls[2]], f"the impl saw {impls}"
    for args, out, stock in zip(calls, outs, stocks):
        want = torch.full_like(V, -1.0) if args[-1] == 4 else stock
        assert torch.equal(out, want), args


@behaviour("arguments.many-keyword-only-defaults")
def test_ten_keyword_only_arguments_pass_those_off_their_defaults(impl):
    """An op of the test namespace with ten keyword-only arguments with
    defaults (more than a plan may index by bit set): each call passes by
    keyword exactly those that differ from their defaults, in schema order, to
    the cond and to the impl; none at all when all are at their defaults."""
    if "namespaces" not in impl.features:
        pytest.skip(f"unsupported: {impl.name} lacks feature namespaces")
    names = [f"k{i}" for i in range(10)]
    with torch.library._scoped_library(NS, "DEF") as lib:
        lib.define(f"many_kw(Tensor x, *, {', '.join(f'int {n}={i}' for i, n in enumerate(names))}) -> Tensor")
        lib.impl("many_kw", lambda x, **kw: x + sum(kw.values()), "CPU")
        op = getattr(torch.ops, NS).many_kw.default
        calls = [{}, {"k0": 0, "k9": 9}, {"k3": 30}, {"k0": 100, "k9": 900},
                 {n: 10 * i + 1 for i, n in enumerate(names)}, {"k1": 11, "k2": 2, "k8": 88}]
        stocks = [op(V, **kwargs) for kwargs in calls]
        conds, impls = [], []
        with impl.scope():
            impl.allow_namespace(NS)
            impl.register("test_dsl", NS, "many_kw", "CPU",
                          lambda x, **kw: conds.append(dict(kw)) or kw.get("k0", 0) == 100,
                          lambda x, **kw: impls.append(dict(kw)) or torch.full_like(x, -1.0))
            impl.install(NS, "many_kw", "CPU")
            outs = [op(V, **kwargs) for kwargs in calls]
    expected = [{k: v for k, v in kwargs.items() if v != names.index(k)} for kwargs in calls]
    assert conds == expected
    assert [list(seen) for seen in conds] == [[n for n in names if n in seen] for seen in expected], \
        "keywords out of schema order"
    assert impls == [expected[3]]
    assert torch.equal(outs[3], torch.full_like(V, -1.0))
    for kwargs, out, stock in zip(calls, outs, stocks):
        if kwargs.get("k0", 0) != 100:
            assert torch.equal(out, stock), kwargs
