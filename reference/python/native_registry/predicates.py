"""Conds evaluated in C++, with no Python on the call path.

Each checks the tensor arguments of a call: all of them (tensors in lists
included), or only ``args[arg]`` when ``arg=`` is given; a call with no tensor
there fails the check. Combine with ``&``, ``|`` and ``~``::

    from native_registry import predicates as P
    cond = P.dtype_in(torch.float32, torch.bfloat16) & P.max_numel(1 << 20) & P.not_cow()
    registry.register_op_override("my_dsl", "aten", "mul.Tensor", "CPU", cond, impl)

A predicate is also callable from Python with the op's arguments, which is
how the compile-time decomposition routers evaluate it.
"""

from ._C import predicates as _p

Predicate = _p.Predicate
always = _p.always
never = _p.never
dtype_in = _p.dtype_in
device_type = _p.device_type
contiguous = _p.contiguous
min_rank = _p.min_rank
max_rank = _p.max_rank
min_numel = _p.min_numel
max_numel = _p.max_numel
max_size = _p.max_size
not_cow = _p.not_cow
same_shape = _p.same_shape

__all__ = [
    "Predicate", "always", "never", "dtype_in", "device_type", "contiguous", "min_rank",
    "max_rank", "min_numel", "max_numel", "max_size", "not_cow", "same_shape",
]
