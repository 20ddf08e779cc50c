"""takeover.py's helpers, one by one, where generated mutants found them
unpinned (session 26) by the conformance suite's takeovers of torch 2.13's
registry: keys and router libraries of upstream main's registry (keyed
``(lib, op, key)``, routers in ``_override_libs``), where the stock router
sits when its module has no file or its key no kernel, a stock router at an
op that does not resolve, no filters to take over, and a redirected stock
function's defaults. In-process: none of them takes anything over."""

from __future__ import annotations

import logging
import types

import pytest

from native_registry import takeover, upstream_compat as compat


def test_full_key_gives_a_torch_2_13_key_its_namespace_and_keeps_mains():
    assert takeover._full_key(("mul.Tensor", "CPU")) == ("aten", "mul.Tensor", "CPU")
    assert takeover._full_key(("aten", "mul.Tensor", "CPU")) == ("aten", "mul.Tensor", "CPU")
    assert takeover._full_key(("torch_nn", "f", "CUDA")) == ("torch_nn", "f", "CUDA")


def test_router_libraries_are_mains_where_the_module_has_them():
    main, old = {("aten", "mul.Tensor", "CPU"): "main's"}, {("mul.Tensor", "CPU"): "2.13's"}
    both = types.SimpleNamespace(_override_libs=main, _aten_override_libs=old)
    assert takeover._router_libraries(both) is main
    assert takeover._router_libraries(types.SimpleNamespace(_override_libs=main)) is main
    assert takeover._router_libraries(types.SimpleNamespace(_aten_override_libs=old)) is old
    assert takeover._router_libraries(types.SimpleNamespace()) == {}


def test_the_stock_router_is_on_top_only_where_its_file_registered_the_top_kernel():
    stock = types.ModuleType("stock")
    stock.__file__ = "/torch/_native/registry.py"
    top = ["CPU: fn_CPU [kernel] registered at /torch/_native/registry.py:123",
           "CPU (inactive): registered at /torch/library.py:1"]
    assert takeover._stock_on_top(stock, top) is True
    assert takeover._stock_on_top(stock, top[::-1]) is False
    assert takeover._stock_on_top(stock, []) is False  # no kernel at the key
    assert takeover._stock_on_top(types.ModuleType("no_file"), top) is False


def empty_state(key, **change):
    fields = dict(graphs={key: []}, installed=[key], filters=([], [], []), routed={key: []},
                  on_top=frozenset(), actives={}, composite_implicit=frozenset())
    fields.update(change)
    return takeover.StockState(**fields)


def test_a_stock_router_at_an_op_that_does_not_resolve_refuses_the_takeover(reg):
    key = ("aten", "no_such_op.Tensor", "CPU")
    with pytest.raises(takeover.TakeoverRefused, match="does not resolve"):
        takeover.plan(empty_state(key), compat)
    # The same state at an op that resolves plans its install.
    resolving = ("aten", "mul.Tensor", "CPU")
    assert takeover.plan(empty_state(resolving), compat).install == [resolving]


def test_no_stock_filters_disable_nothing_and_log_nothing(reg, caplog):
    for name in ("native_registry.registry", "torch._native.registry"):
        caplog.set_level(logging.DEBUG, logger=name)
    takeover._register(takeover.Plan([], {}, [], ([], [], [])), compat)
    assert [r.getMessage() for r in caplog.records] == []
    assert [list(f) for f in reg._C.filters()] == [[], [], []]


def stock_function(a, b=2, *, c=3):
    return ("stock", a, b, c)


def test_a_redirected_function_keeps_no_defaults_of_its_own():
    calls = []

    def target(*args, **kwargs):
        calls.append((args, kwargs))
        return "target"

    fn = types.FunctionType(stock_function.__code__, {}, "stock_function",
                            stock_function.__defaults__, stock_function.__closure__)
    fn.__kwdefaults__ = dict(stock_function.__kwdefaults__)
    takeover._redirect(fn, target)
    assert fn(1, c=5) == "target" and calls == [((1,), {"c": 5})]
    # It runs the target with the target's defaults: none of its own remain.
    assert fn.__defaults__ is None and fn.__kwdefaults__ is None
