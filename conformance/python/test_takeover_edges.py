"""Edges of taking over torch's stock registry: stock states the takeover
must refuse (filters naming no dsl, a router that routes what the filters
disable, a router routing a node its graph dropped), a graph never
installed before an installed one, the stock routers leaving the
dispatcher also where a program holds them, stock functions a program
wrapped, and the stock module put back after its takeover.

Each test runs in a child interpreter, since a takeover is once per
process; the stock registry is torch 2.13's own, at CPU keys of aten ops,
with impls answering a constant per override.
"""

from __future__ import annotations

import json

import pytest

from conftest import behaviour, run_in_fresh_interpreter
from test_takeover_transaction import SETUP as TRANSACTION_SETUP, _takes_over


# The transaction tests' stock and reference overrides, and a takeover that
# reports its refusal.
SETUP = TRANSACTION_SETUP + '''
import sys
def take_over():
    """None when taken over, else the error's type and message."""
    try:
        compat.install_as_torch_native()
    except Exception as e:
        return [type(e).__name__, str(e)]
    return None
'''


@behaviour("takeover.routing-unchanged")
@pytest.mark.parametrize("entry,value", [("op_symbols", "mul.Tensor"), ("dispatch_keys", "CPU")])
def test_stock_filters_naming_no_dsl_that_would_disable_a_routed_reference_node_refuse(
        impl, entry, value):
    """The stock registry disabled mul.Tensor by op symbol or CPU by
    dispatch key only, while the new registry routes a node there: taking
    the filters over would turn it off. Refused naming the node, nothing
    changed."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + f'''
ref.register_op_override("mine", "aten", "mul.Tensor", "CPU", lambda a, b: True, const(5.0))
ref.register_all_overrides()
stock.deregister_op_overrides(disable_{entry}={value!r})
before = answers()
error = take_over()
print(json.dumps([error is not None and error[0], error is not None and "mine" in error[1],
                  answers() == before, before[0], sys.modules["torch._native.registry"] is stock]))
''')
    assert json.loads(lines[-1]) == ["TakeoverRefused", True, True, 5.0, True]


@behaviour("takeover.routing-unchanged")
def test_a_graph_never_installed_before_an_installed_one_leaves_that_one_routed(impl):
    """The stock registry's first graph was never installed, its second
    was: after the takeover the second still answers, the first still
    does not."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("never", "aten", "sub.Tensor", "CPU", small, const(4.0))
stock.register_op_override("routed", "aten", "mul.Tensor", "CPU", small, const(1.0))
stock._register_overrides_from_graph("mul.Tensor", "CPU", stock._graphs[("mul.Tensor", "CPU")])
before = answers()
error = take_over()
print(json.dumps([error, before, answers(), ref.router_state("aten", "mul.Tensor", "CPU"),
                  ref.router_state("aten", "sub.Tensor", "CPU")]))
''')
    error, before, after, mul_router, sub_router = json.loads(lines[-1])
    assert error is None
    assert before == [1.0, 6.0, 0.0]
    assert after == before
    assert (mul_router, sub_router) == ("active", "absent")


@behaviour("takeover.routing-unchanged")
def test_a_stock_router_routing_a_node_its_filters_disable_refuses_the_takeover(impl):
    """dsl 'off' disabled, then every graph installed again through
    _register_all_overrides, which reads no filters: its router routes the
    disabled node. Taking over would turn it off: refused naming it,
    nothing changed."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("off", "aten", "mul.Tensor", "CPU", small, const(1.0))
stock.deregister_op_overrides(disable_dsl_names="off")
stock._register_all_overrides()
before = answers()
error = take_over()
print(json.dumps([error is not None and error[0], error is not None and "off" in error[1],
                  answers() == before, before[0], sys.modules["torch._native.registry"] is stock]))
''')
    assert json.loads(lines[-1]) == ["TakeoverRefused", True, True, 1.0, True]


@behaviour("takeover.routing-unchanged")
def test_a_stock_router_routing_a_node_its_graph_dropped_refuses_the_takeover(impl):
    """A reorder without reinstalling drops the node that answers from its
    graph; the stock router still routes it. Taking over the graph alone
    would change the answer: refused naming the dropped node, nothing
    changed."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("first", "aten", "mul.Tensor", "CPU", lambda a, b: False, const(1.0))
stock.register_op_override("second", "aten", "mul.Tensor", "CPU", small, const(2.0))
stock._register_all_overrides()
dropped = stock._graphs[("mul.Tensor", "CPU")][1].node_id
stock.reorder_graphs_from_user_function(lambda op, key, graph: graph[:1])
before = answers()
error = take_over()
print(json.dumps([error is not None and error[0], error is not None and dropped in error[1],
                  answers() == before, before[0], sys.modules["torch._native.registry"] is stock,
                  ref.graph("aten", "mul.Tensor", "CPU") == []]))
''')
    assert json.loads(lines[-1]) == ["TakeoverRefused", True, True, 2.0, True, True]


@behaviour("takeover.routing-unchanged")
def test_a_stock_router_replaced_while_a_program_holds_the_old_one_routes_as_the_new_one(impl):
    """The program holds the stock router's kernel (torch.library.get_kernel)
    while the stock registry reorders and reinstalls the graph: the old
    router lives on beside the new one. After the takeover calls answer as
    the new one routed (second first), not as the old one."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
import gc
stock.register_op_override("first", "aten", "mul.Tensor", "CPU", small, const(1.0))
stock.register_op_override("second", "aten", "mul.Tensor", "CPU", small, const(2.0))
stock._register_all_overrides()
held = torch.library.get_kernel("aten::mul.Tensor", "CPU")
gc.collect()
stock.reorder_graphs_from_user_function(lambda op, key, graph: list(reversed(graph)),
                                        reregister_overrides=True)
before = answers()[0]
error = take_over()
print(json.dumps([error, before, answers()[0]]))
''')
    assert json.loads(lines[-1]) == [None, 2.0, 2.0]


@behaviour("takeover.stock-removed-exactly")
def test_stock_routers_leave_the_dispatcher_although_a_program_holds_them(impl):
    """A program holding the stock registry's router libraries and its
    router maps: after the takeover no stock router is in the dispatcher
    (the op answers by the new registry alone: off once its dsl is
    disabled), and the maps it held are empty."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("stock_dsl", "aten", "mul.Tensor", "CPU", small, const(8.0))
stock._register_all_overrides()
router_libs = getattr(stock, "_override_libs", None)
if router_libs is None:
    router_libs = stock._aten_override_libs
held_libs, held_decomps = dict(router_libs), stock._native_decomp_overrides
assert held_libs and held_decomps
before = answers()[0]
error = take_over()
stock_file = stock.__spec__.origin
in_dispatcher = stock_file in torch._C._dispatch_dump("aten::mul.Tensor")
compat.deregister_op_overrides(disable_dsl_names="stock_dsl")
print(json.dumps([error, before, in_dispatcher, answers()[0], len(router_libs),
                  len(held_decomps)]))
''')
    error, before, in_dispatcher, disabled, libs_left, decomps_left = json.loads(lines[-1])
    assert error is None
    assert before == 8.0
    assert not in_dispatcher, "a stock router held by the program stayed in the dispatcher"
    assert disabled == 9.0, "a stock router still answers the call the new registry declines"
    assert (libs_left, decomps_left) == (0, 0), "the stock router maps still hold routers"


@behaviour("takeover.one-registry")
def test_stock_functions_a_program_wrapped_are_taken_over_too(impl):
    """A program wrapped stock functions with functools.wraps before the
    takeover (a logging wrapper, say), or with a wrapper that copies only
    the name and module: the takeover succeeds; the functools.wraps wrappers
    the program holds reach the new registry (registering there) or refuse,
    naming themselves, where the new registry has no counterpart, as do the
    module's names (whichever wrapper) and a function bound before the
    takeover; each refusing function is named for itself."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
import functools
calls = []
def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)
    return wrapper
stock.register_op_override = logged(stock.register_op_override)
stock._register_node_impl = logged(stock._register_node_impl)
held_register, held_node_impl = stock.register_op_override, stock._register_node_impl
def copied(fn):
    def wrapper(*args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)
    wrapper.__name__, wrapper.__module__ = fn.__name__, fn.__module__
    return wrapper
stock._get_or_create_library = copied(stock._get_or_create_library)
from torch._native.registry import _install_aten_override
stock.register_op_override("stock_dsl", "aten", "mul.Tensor", "CPU", small, const(8.0))
stock._register_all_overrides()
error = take_over()
out = [error, answers()[0]]
def refusal(fn, *args):
    try:
        fn(*args)
    except RuntimeError as e:
        return fn.__name__ in str(e) and "took over" in str(e)
    except Exception as e:
        return type(e).__name__
    return "ran"
out.append(refusal(stock._register_node_impl, None, None, "CPU"))
out.append(refusal(held_node_impl, None, None, "CPU"))
out.append(refusal(stock._get_or_create_library, "CPU"))
held_register("late_dsl", "aten", "add.Tensor", "CPU", small, const(7.0))
out.append([len(ref.graph("aten", "add.Tensor", "CPU")), calls.count("register_op_override")])
out.append(refusal(_install_aten_override, "mul.Tensor", "CPU", const(1.0)))
out.append([stock._register_node_impl.__name__, stock._install_aten_override.__name__,
            _install_aten_override.__name__, stock._get_or_create_library.__name__])
out.append(answers()[0])
print(json.dumps(out))
''')
    (error, routed, wrapped_refused, held_wrapper_refused, copied_refused, registered,
     bound_refused, names, after) = json.loads(lines[-1])
    assert error is None
    assert routed == 8.0
    assert wrapped_refused is True, "a wrapped stock function stayed live through the module"
    assert held_wrapper_refused is True, "a held wrapper of a stock function ran the stock code"
    assert copied_refused is True, "a stock function wrapped without functools.wraps stayed live"
    assert registered == [1, 2], "a held wrapper of register_op_override missed the new registry"
    assert bound_refused is True, "a stock function bound before the takeover stayed live"
    assert names == ["_register_node_impl", "_install_aten_override", "_install_aten_override",
                     "_get_or_create_library"]
    assert after == 8.0


@behaviour("takeover.one-registry")
def test_a_stock_module_put_back_after_its_takeover_is_not_taken_over_again(impl):
    """A program puts the stock module it saved back into sys.modules and
    asks for the takeover again: nothing moves a second time (each override
    once), the calls answer as before."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("stock_dsl", "aten", "mul.Tensor", "CPU", small, const(8.0))
stock._register_all_overrides()
first = take_over()
sys.modules["torch._native.registry"] = stock
second = take_over()
print(json.dumps([first, second, len(ref.graph("aten", "mul.Tensor", "CPU")), answers()[0],
                  sys.modules["torch._native.registry"] is compat]))
''')
    assert json.loads(lines[-1]) == [None, None, 1, 8.0, True]
