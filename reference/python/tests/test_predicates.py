"""The C++ predicate library, from Python: each predicate, composition, and
use as a cond with no Python on the decline path."""

from __future__ import annotations

import sys

import pytest
import torch

from native_registry import predicates as P
from conftest import mul

F32 = torch.ones(2, 3)
F16 = torch.ones(2, 3, dtype=torch.float16)


@pytest.mark.parametrize(
    "predicate, args, expected",
    [
        (P.always(), (), True),
        (P.never(), (F32,), False),
        (P.dtype_in(torch.float32), (F32, F32), True),
        (P.dtype_in(torch.float32), (F32, F16), False),
        (P.dtype_in(torch.float32, torch.float16), (F32, F16), True),
        (P.dtype_in(torch.float16, arg=1), (F32, F16), True),
        (P.dtype_in(torch.float32), (), False),  # no tensor: a tensor check fails
        (P.dtype_in(torch.float32), (2.0, "x"), False),
        (P.device_type("cpu"), (F32,), True),
        (P.device_type("cuda"), (F32,), False),
        (P.contiguous(), (F32,), True),
        (P.contiguous(), (F32.t(),), False),
        (P.contiguous(arg=0), (F32, F32.t()), True),
        (P.max_rank(2), (F32,), True),
        (P.max_rank(1), (F32,), False),
        (P.min_rank(3), (F32,), False),
        (P.max_numel(6), (F32,), True),
        (P.max_numel(5), (F32,), False),
        (P.min_numel(7), (F32,), False),
        (P.max_size(-1, 3), (F32,), True),
        (P.max_size(0, 1), (F32,), False),
        (P.max_size(5, 100), (F32,), False),  # no such dimension
        (P.not_cow(), (F32,), True),
        (P.not_cow(), (torch._lazy_clone(torch.ones(2)),), False),  # a fresh one: lazy cloning makes its source copy-on-write too
        (P.same_shape(), (F32, F16), True),
        (P.same_shape(), (F32, torch.ones(3)), False),
        (P.dtype_in(torch.float32), ([F32, F32],), True),  # tensors inside a list
        (P.dtype_in(torch.float32), ([F32, F16],), False),
    ],
)
def test_each_predicate(predicate, args, expected):
    assert predicate(*args) is expected


def test_composition_and_description():
    small_f32 = P.dtype_in(torch.float32) & P.max_numel(6)
    assert small_f32(F32) and not small_f32(F16) and not small_f32(torch.ones(7))
    either = P.dtype_in(torch.float16) | P.max_rank(1)
    assert either(F16) and either(torch.ones(3)) and not either(F32)
    assert (~P.never())(F32)
    assert "dtype in {Float}" in repr(small_f32) and "numel <= 6" in repr(small_f32)


def test_bad_predicate_arguments():
    with pytest.raises(TypeError, match="torch.dtype"):
        P.dtype_in("float32")
    with pytest.raises(ValueError, match="at least one dtype"):
        P.dtype_in()
    with pytest.raises(ValueError, match="non-negative index"):
        P.contiguous(arg=-1)
    with pytest.raises(ValueError, match="'not-a-device' is not a device type"):
        P.device_type("not-a-device")


def test_predicate_as_cond_routes_without_python_on_decline(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU",
                             P.dtype_in(torch.float16) & P.max_numel(4),
                             lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()
    half = torch.ones(2, dtype=torch.float16)
    assert torch.equal(mul(half, half), torch.full_like(half, 7.0))

    # A declined call runs no Python function between the op's entry
    # (OpOverload.__call__, in torch/_ops.py) and the fallback.
    python_calls = []

    def profiler(frame, event, arg):
        if event == "call" and not frame.f_code.co_filename.endswith("_ops.py"):
            python_calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    a, b = torch.ones(2), torch.ones(2)
    op = torch.ops.aten.mul.Tensor
    sys.setprofile(profiler)
    try:
        out = op(a, b)
    finally:
        sys.setprofile(None)
    assert torch.equal(out, torch.ones(2))
    assert python_calls == []

    # The same probe does see a Python cond, so it can fail.
    reg.register_op_override("py", "aten", "add.Tensor", "CPU", lambda *args: False, lambda *x: x[0])
    reg.register_all_overrides()
    sys.setprofile(profiler)
    try:
        torch.ops.aten.add.Tensor(a, b)
    finally:
        sys.setprofile(None)
    assert any("<lambda>" in call for call in python_calls)


@pytest.mark.parametrize("dtype, expected", [(torch.float16, 7.0), (torch.float32, 1.0)])
def test_a_predicate_cond_decides_in_a_decomposed_program_as_in_eager(reg, dtype, expected):
    """The decomposition table's router asks a C++ predicate cond with the
    traced call's arguments: a program exported and decomposed with
    native_decomp_table() takes the override where eager does, and only there."""
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU",
                             P.dtype_in(torch.float16) & P.max_numel(4),
                             lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()

    class Mul(torch.nn.Module):
        def forward(self, a, b):
            return a * b

    x = torch.ones(2, dtype=dtype)
    assert torch.equal(mul(x, x), torch.full_like(x, expected))  # eager
    program = torch.export.export(Mul(), (x, x)).run_decompositions(reg.native_decomp_table())
    assert torch.equal(program.module()(x, x), torch.full_like(x, expected))
    # Decided when decomposed: the program calls the override's `_native` op
    # itself, or the op (which the eager router would route again).
    called = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert any(t.startswith("_native.") for t in called) == (expected == 7.0), called


def test_a_predicate_coverage_check_declines_in_a_decomposed_program_as_in_eager(reg):
    """A C++ predicate set as the coverage check is asked by the
    decomposition table's router too: a call it covers keeps the op."""
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", P.always(),
                             lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()
    reg.set_coverage_check(P.dtype_in(torch.float16))
    try:
        class Mul(torch.nn.Module):
            def forward(self, a, b):
                return a * b

        for dtype, routed in ((torch.float16, False), (torch.float32, True)):
            x = torch.ones(2, dtype=dtype)
            program = torch.export.export(Mul(), (x, x)).run_decompositions(reg.native_decomp_table())
            called = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
            assert any(t.startswith("_native.") for t in called) == routed, (dtype, called)
    finally:
        reg.set_coverage_check(None)
