"""The takeover of torch's stock registry as a transaction (issue 27): calls
answer the same before and after it, one caller takes over, a refusal changes
nothing, what was recorded or bound against the stock registry keeps
working, and front-end switches afterwards leave the dispatcher alone. Early
activation whatever is imported first.

Each test runs in a child interpreter, since a takeover is once per process.
The stock registry here is torch 2.13's own, at CPU keys of aten ops, with
impls that answer a constant per override so that which override answered
is visible in the result.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import behaviour, run_in_fresh_interpreter


def _takes_over(impl) -> None:
    if "takes-over-torch-native" not in impl.features:
        pytest.skip("unsupported: the adapter does not replace a torch._native.registry")


# A stock override and a reference override per op: the answer names which ran.
SETUP = '''
import json, threading
import torch._native.registry as stock
from native_registry import upstream_compat as compat
import native_registry.registry as ref
x = torch.tensor([3.0])
def const(value):
    return lambda a, *rest, **kw: torch.full_like(a, value)
def small(a, *rest, **kw):
    return a.numel() == 1
def answers():
    return [(x * x).item(), (x + x).item(), (x - x).item()]
'''


@behaviour("takeover.routing-unchanged")
@pytest.mark.parametrize("stock_on_top", [True, False])
def test_a_takeover_keeps_the_router_stacking_order(impl, stock_on_top):
    """Stock router above a reference router at one key: stock's overrides
    answer first, before and after; beneath it: the reference's."""
    _takes_over(impl)
    first, second = ("ref", "stock") if stock_on_top else ("stock", "ref")
    lines = run_in_fresh_interpreter(impl, SETUP + f'''
def install(which):
    if which == "ref":
        ref.register_op_override("ref_dsl", "aten", "mul.Tensor", "CPU", small, const(5.0))
        ref.register_all_overrides()
    else:
        stock.register_op_override("stock_dsl", "aten", "mul.Tensor", "CPU", small, const(9.0))
        stock._register_overrides_from_graph("mul.Tensor", "CPU", stock._graphs[("mul.Tensor", "CPU")])
install({first!r}); install({second!r})
before = answers()
compat.install_as_torch_native()
print(json.dumps([before, answers()]))
''')
    before, after = json.loads(lines[-1])
    assert before[0] == (9.0 if stock_on_top else 5.0)
    assert after == before


@behaviour("takeover.routing-unchanged")
def test_a_takeover_keeps_each_nodes_active_and_the_routed_order(impl):
    """A disabled unconditional stock override stays off; a graph reordered
    without reinstalling routes by its router's chain; a graph never
    installed stays uninstalled."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("uncond", "aten", "add.Tensor", "CPU", None, const(9.0),
                           unconditional_override=True)
stock.register_op_override("keep", "aten", "add.Tensor", "CPU", lambda *a, **k: False, const(8.0))
stock.register_op_override("first", "aten", "mul.Tensor", "CPU", small, const(1.0))
stock.register_op_override("second", "aten", "mul.Tensor", "CPU", small, const(2.0))
stock.register_op_override("never", "aten", "sub.Tensor", "CPU", small, const(4.0))
for key in [("add.Tensor", "CPU"), ("mul.Tensor", "CPU")]:
    stock._register_overrides_from_graph(*key, stock._graphs[key])
stock.deregister_op_overrides(disable_dsl_names="uncond")
stock.reorder_graphs_from_user_function(lambda op, key, graph: list(reversed(graph)))
before = answers()
compat.install_as_torch_native()
after = answers()
print(json.dumps([[n.active for n in ref.graph("aten", "add.Tensor", "CPU")]]))
print(json.dumps([before, after, ref.router_state("aten", "sub.Tensor", "CPU")]))
stock.reenable_op_overrides(enable_dsl_names="uncond")
print(json.dumps(answers()[1]))
''')
    # keep, uncond (reversed): the disabled unconditional one stays off
    assert json.loads(lines[-3]) == [[True, False]]
    before, after, sub_router = json.loads(lines[-2])
    assert before == [1.0, 6.0, 0.0]
    assert after == before
    assert sub_router == "absent"
    assert json.loads(lines[-1]) == 9.0  # re-enabled, it answers again


@behaviour("takeover.routing-unchanged")
def test_a_stock_state_the_reference_cannot_reproduce_is_refused_unchanged(impl):
    """A node registered after its graph's router was built does not route
    there; taking it over would make it route: refused, nothing changed."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("old", "aten", "mul.Tensor", "CPU", lambda a, b: False, const(1.0))
stock._register_overrides_from_graph("mul.Tensor", "CPU", stock._graphs[("mul.Tensor", "CPU")])
stock.register_op_override("late", "aten", "mul.Tensor", "CPU", small, const(2.0))
before = answers()
dump = torch._C._dispatch_dump("aten::mul.Tensor")
try:
    compat.install_as_torch_native()
except RuntimeError as e:
    print(json.dumps(["refused", "late" in str(e)]))
import sys
print(json.dumps([answers() == before, torch._C._dispatch_dump("aten::mul.Tensor") == dump,
                  sys.modules["torch._native.registry"] is stock,
                  ref.graph("aten", "mul.Tensor", "CPU") == []]))
''')
    assert json.loads(lines[-2]) == ["refused", True]
    assert json.loads(lines[-1]) == [True, True, True, True]


@behaviour("takeover.routing-unchanged")
def test_a_disabled_unconditional_stock_override_keeps_its_cond_once_re_enabled(impl):
    """An unconditional stock override given a cond and disabled is taken
    over as an ordinary node, off; re-enabled, it takes only the calls its
    cond accepts, as in the stock registry."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("uncond", "aten", "add.Tensor", "CPU", small, const(9.0),
                           unconditional_override=True)
stock._register_overrides_from_graph("add.Tensor", "CPU", stock._graphs[("add.Tensor", "CPU")])
stock.deregister_op_overrides(disable_dsl_names="uncond")
pair = torch.tensor([3.0, 4.0])
before = [(x + x).item(), (pair + pair).tolist()]
compat.install_as_torch_native()
stock.reenable_op_overrides(enable_dsl_names="uncond")
print(json.dumps([before, [(x + x).item(), (pair + pair).tolist()]]))
''')
    before, after = json.loads(lines[-1])
    assert before == [6.0, [6.0, 8.0]], "disabled: the op's own kernel"
    assert after == [9.0, [6.0, 8.0]], "re-enabled: its cond takes the 1-element call only"


@behaviour("takeover.routing-unchanged")
def test_an_unconditional_stock_override_never_installed_stays_exempt_from_filters(impl):
    """An unconditional stock override registered (active) after the stock
    filters named its dsl, its graph never installed, is taken over
    unconditional: installed later, it routes, as the stock registry would
    route it (filters exempt it)."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.deregister_op_overrides(disable_dsl_names="uncond")
stock.register_op_override("uncond", "aten", "sub.Tensor", "CPU", None, const(9.0),
                           unconditional_override=True)
before = (x - x).item()
compat.install_as_torch_native()
after = (x - x).item()
ref.register_all_overrides()
print(json.dumps([before, after, (x - x).item()]))
''')
    assert json.loads(lines[-1]) == [0.0, 0.0, 9.0]


# One registry routes mul.Tensor (its override takes 1-element calls, 5 or
# 9), the other holds an override it never installed that would take every
# call: taking over would install it beneath the routed one.
IDLE_BESIDE_ROUTED = {
    "stock-idle": ("""
ref.register_op_override("mine", "aten", "mul.Tensor", "CPU", small, const(5.0))
ref.register_all_overrides()
stock.register_op_override("idle", "aten", "mul.Tensor", "CPU", lambda *a, **k: True, const(9.0))
""", 5.0),
    "reference-idle": ("""
ref.register_op_override("idle", "aten", "mul.Tensor", "CPU", lambda *a, **k: True, const(5.0))
stock.register_op_override("theirs", "aten", "mul.Tensor", "CPU", small, const(9.0))
stock._register_overrides_from_graph("mul.Tensor", "CPU", stock._graphs[("mul.Tensor", "CPU")])
""", 9.0),
}


@behaviour("takeover.routing-unchanged")
@pytest.mark.parametrize("case", sorted(IDLE_BESIDE_ROUTED))
def test_a_graph_never_installed_at_a_key_the_other_registry_routes_is_refused(impl, case):
    """A graph never installed routes nowhere; at a key the other registry
    routes, taking it over would put it in the routed chain, where it would
    take the calls the routed override declines. Refused, nothing changed."""
    _takes_over(impl)
    setup, routed_answer = IDLE_BESIDE_ROUTED[case]
    lines = run_in_fresh_interpreter(impl, SETUP + setup + '''
pair = torch.tensor([3.0, 4.0])
before = answers() + (pair * pair).tolist()
try:
    compat.install_as_torch_native()
except RuntimeError as e:
    print(json.dumps(["refused", "never installed" in str(e)]))
import sys
print(json.dumps([answers() + (pair * pair).tolist() == before, before[0],
                  before[3:] == [9.0, 16.0], sys.modules["torch._native.registry"] is stock]))
''')
    assert json.loads(lines[-2]) == ["refused", True]
    assert json.loads(lines[-1]) == [True, routed_answer, True, True]


@behaviour("takeover.routing-unchanged")
def test_stock_filters_that_would_disable_a_routed_reference_node_refuse_the_takeover(impl):
    """The stock registry's filters become the new registry's: where they
    disable a dsl the new registry routes now, taking them over would change
    that op's answer. Refused, nothing changed (found by the lifecycle model,
    seed 2026120304)."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
ref.register_op_override("mine", "aten", "mul.Tensor", "CPU", lambda a, b: True, const(5.0))
ref.register_all_overrides()
stock.deregister_op_overrides(disable_dsl_names="mine")
before = answers()
try:
    compat.install_as_torch_native()
except RuntimeError as e:
    print(json.dumps(["refused", "mine" in str(e)]))
import sys
print(json.dumps([answers() == before, before[0] == 5.0,
                  sys.modules["torch._native.registry"] is stock]))
''')
    assert json.loads(lines[-2]) == ["refused", True]
    assert json.loads(lines[-1]) == [True, True, True]


@behaviour("takeover.serialised")
def test_concurrent_takeovers_take_over_once(impl):
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
for i in range(12):
    stock.register_op_override(f"dsl{i}", "aten", "mul.Tensor", "CPU", lambda a, b: False,
                               const(float(i)))
stock._register_all_overrides()
count = len(stock._graphs[("mul.Tensor", "CPU")])
barrier = threading.Barrier(4)
errors = []
def take():
    barrier.wait()
    try:
        compat.install_as_torch_native()
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=take) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps([count, len(ref.graph("aten", "mul.Tensor", "CPU")), errors]))
''')
    count, taken, errors = json.loads(lines[-1])
    assert errors == []
    assert taken == count == 12


# What the reference refuses of a stock state: an override at a
# CompositeImplicitAutograd op (matmul), found before anything is registered;
# a cond that is not callable, found by the reference's registration once the
# overrides before it are registered (which must then be undone).
REFUSED_OVERRIDES = {
    "composite-op": ('stock.register_op_override("triton", "aten", "matmul", "CPU", lambda a, b: False, '
                     'const(1.0))', None),
    "cond-not-callable": ('stock.register_op_override("triton", "aten", "div.Tensor", "CPU", 123, const(1.0))',
                          "TypeError"),
}


@behaviour("takeover.refusal-changes-nothing")
@pytest.mark.parametrize("refused", sorted(REFUSED_OVERRIDES))
def test_a_refused_takeover_leaves_torchs_module_helpers_and_dispatcher(impl, refused):
    """The stock registry holds an override the reference refuses: the
    takeover raises, and torch's module, the names its DSL helpers bound,
    the front end and the dispatcher are exactly as before, and the
    reference holds nothing of it."""
    _takes_over(impl)
    register_refused, error = REFUSED_OVERRIDES[refused]
    lines = run_in_fresh_interpreter(impl, SETUP + f'''
import sys
import torch._native.triton_utils as triton_utils
import torch.backends.python_native as pn
stock.register_op_override("triton", "aten", "mul.Tensor", "CPU", small, const(9.0))
{register_refused}
stock._register_all_overrides()
''' + '''
def fingerprint():
    return ({name: id(value) for name, value in vars(stock).items()},
            {name: id(value) for name, value in vars(triton_utils).items()},
            torch._C._dispatch_dump("aten::mul.Tensor"), torch._C._dispatch_dump("aten::matmul"),
            sys.modules["torch._native.registry"] is stock, answers())
before = fingerprint()
try:
    compat.install_as_torch_native()
    print(json.dumps("taken over"))
except Exception as e:
    print(json.dumps(type(e).__name__))
print(json.dumps([a == b for a, b in zip(before, fingerprint())]))
pn.triton.disable()
print(json.dumps([answers()[0], ref.graph("aten", "mul.Tensor", "CPU") == []]))
''')
    assert json.loads(lines[-3]) != "taken over"
    if error is not None:  # the reference's own refusal, not an error of the undoing
        assert json.loads(lines[-3]) == error
    assert json.loads(lines[-2]) == [True] * 6
    # torch's own DSL switch still controls torch's own registry; the
    # reference holds none of the overrides it took before the refusal
    assert json.loads(lines[-1]) == [9.0, True]


@behaviour("takeover.recorded-programs-keep-working")
def test_programs_and_handles_recorded_against_the_stock_registry_keep_working(impl):
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
stock.register_op_override("stock_dsl", "aten", "mul.Tensor", "CPU", small, const(9.0))
stock._register_all_overrides()
class M(torch.nn.Module):
    def forward(self, a):
        return a * a
program = torch.export.export(M(), (x,)).run_decompositions(stock.native_decomp_table())
native = [n for n in program.graph.nodes if "_native" in str(n.target)]
handle = native[0].target if native else None
compat.install_as_torch_native()
import gc; gc.collect()
out = [program.module()(x).item(), handle(x, x).item() if handle is not None else None,
       answers()[0]]
print(json.dumps(out))
''')
    assert json.loads(lines[-1]) == [9.0, 9.0, 9.0]


@behaviour("takeover.routing-unchanged")
@pytest.mark.parametrize("entry,value", [("op_symbols", "mul.Tensor"), ("dispatch_keys", "CPU")])
def test_a_stock_filter_naming_no_dsl_still_applies_after_the_takeover(impl, entry, value):
    """The stock registry disabled by op symbol or by dispatch key only: off
    before, after, once installed again by the served module, and on once
    re-enabled."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + f'''
stock.register_op_override("stock_dsl", "aten", "mul.Tensor", "CPU", small, const(8.0))
stock._register_all_overrides()
stock.deregister_op_overrides(disable_{entry}={value!r})
out = [answers()[0]]
compat.install_as_torch_native()
import torch._native.registry as served
out.append(answers()[0])
served._register_all_overrides()
out.append(answers()[0])
served.reenable_op_overrides(enable_{entry}={value!r})
out.append(answers()[0])
print(json.dumps(out))
''')
    assert json.loads(lines[-1]) == [9.0, 9.0, 9.0, 8.0]


@behaviour("takeover.bound-names-keep-working")
def test_names_bound_from_the_stock_module_before_the_takeover_keep_working(impl):
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
from torch._native.registry import (register_op_override, deregister_op_overrides,
    reenable_op_overrides, _register_all_overrides, get_dsl_operations)
filter_state = stock._filter_state
stock.register_op_override("stock_dsl", "aten", "mul.Tensor", "CPU", small, const(8.0))
stock._register_all_overrides()
compat.install_as_torch_native()
out = []
register_op_override("late_dsl", "aten", "add.Tensor", "CPU", small, const(7.0))
out.append(len(ref.graph("aten", "add.Tensor", "CPU")))
_register_all_overrides()
out.append(answers()[:2])
out.append(get_dsl_operations("stock_dsl"))
deregister_op_overrides(disable_dsl_names="stock_dsl")
out.append(answers()[0])
reenable_op_overrides(enable_dsl_names="stock_dsl")
out.append(answers()[0])
filter_state.update("late_dsl", None, None)  # the old filter-state object, torch 2.13's method
out.append([answers()[1], "late_dsl" in stock._filter_state._dsl_names])
print(json.dumps(out))
''')
    # registered once; installed; listed; off (x*x is 9 by the op too, so the
    # override answers 8 here) and on again; the old filter object disables
    assert json.loads(lines[-1]) == [1, [8.0, 7.0], ["mul.Tensor"], 9.0, 8.0, [6.0, True]]


@behaviour("frontends.filter-change-reregisters-named-graphs")
def test_a_served_filter_change_reregisters_every_graph_the_filter_names(impl):
    """dsl_b disabled, then the graph reordered without reregister_overrides
    into copies whose conds decline: not routed yet (7); a disable of an
    unrelated dsl re-registers the graph, which the filter names through
    dsl_b, and the copies decline (9, the op's own); a re-enable of dsl_b
    re-registers it too (still 9). dsl_c's graph, registered after the
    install and never installed, routes nothing (0, x - x) until a re-enable
    naming dsl_c re-registers it (4)."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
import dataclasses
compat.install_as_torch_native()
import torch._native.registry as served
served.register_op_override("dsl_a", "aten", "mul.Tensor", "CPU", small, const(7.0))
served.register_op_override("dsl_b", "aten", "mul.Tensor", "CPU", small, const(5.0))
served._register_all_overrides()
served.deregister_op_overrides(disable_dsl_names="dsl_b")
results = [(x * x).item()]
declining = lambda *a, **k: False
served.reorder_graphs_from_user_function(
    lambda op, key, graph: [dataclasses.replace(n, cond_fn=declining) for n in graph])
results.append((x * x).item())
served.deregister_op_overrides(disable_dsl_names="dsl_unrelated")
results.append((x * x).item())
served.reenable_op_overrides(enable_dsl_names="dsl_b")
results.append((x * x).item())
served.register_op_override("dsl_c", "aten", "sub.Tensor", "CPU", small, const(4.0))
results.append((x - x).item())
served.reenable_op_overrides(enable_dsl_names="dsl_c")
results.append((x - x).item())
print(json.dumps(results))
''')
    assert json.loads(lines[-1]) == [7.0, 7.0, 9.0, 9.0, 0.0, 4.0]


@behaviour("frontends.switches-keep-routers")
def test_front_end_switches_after_a_takeover_leave_the_dispatcher_alone(impl):
    """pn.<dsl>.enabled toggles while two threads call the op: every answer
    is the override's (7) or the op's own (9), and the router never leaves
    the dispatcher (its table is never rewritten under the callers)."""
    _takes_over(impl)
    lines = run_in_fresh_interpreter(impl, SETUP + '''
import contextlib
import torch.backends.python_native as pn
from native_registry import _C
stock.register_op_override("triton", "aten", "mul.Tensor", "CPU", small, const(7.0))
stock._register_all_overrides()
compat.install_as_torch_native()
key = ("aten", "mul.Tensor", "CPU")
router = _C.router_id(key)
stop, wrong, ids = threading.Event(), [], set()
def call():
    while not stop.is_set():
        value = (x * x).item()
        if value not in (7.0, 9.0):
            wrong.append(value)
threads = [threading.Thread(target=call) for _ in range(2)]
for t in threads: t.start()
for i in range(200):
    pn.triton.enabled = bool(i % 2)
    ids.add(_C.router_id(key))
    with getattr(pn.triton, "disabled", contextlib.nullcontext)():
        ids.add(_C.router_id(key))
stop.set()
for t in threads: t.join()
pn.triton.enabled = False
off = (x * x).item()
pn.triton.enabled = True
print(json.dumps([wrong, sorted(ids) == [router], off, (x * x).item()]))
''')
    wrong, same_router, off, on = json.loads(lines[-1])
    assert wrong == []
    assert same_router, "a front-end switch rewrote the dispatcher under callers"
    assert (off, on) == (9.0, 7.0)


# ---- early activation, whatever is imported first -------------------------------------

PTH = pathlib.Path(__file__).resolve().parents[2] / "reference" / "python" / "native_registry_early.pth"


@behaviour("takeover.early-activation-any-import-order")
@pytest.mark.parametrize("first", ["native_registry", "native_registry.registry", "torch",
                                   "native_registry.upstream_compat", "spawn"])
def test_early_activation_works_whatever_is_imported_first(impl, first, tmp_path):
    _takes_over(impl)
    from adapter import subprocess_environment

    env = subprocess_environment(impl)
    if env is None:
        pytest.skip("unsupported: the adapter was not loaded by spec")
    env["NATIVE_REGISTRY_AS_TORCH_NATIVE"] = "1"
    # A site folder holding the wheel's .pth and the module it imports, made
    # a site folder of every interpreter of the test (a spawned child too) by
    # a sitecustomize, as site-packages is for an installed wheel.
    site_dir, boot = tmp_path / "site", tmp_path / "boot"
    site_dir.mkdir(), boot.mkdir()
    for source in (PTH, PTH.parent / "_native_registry_early.py"):
        (site_dir / source.name).write_text(source.read_text())
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(boot), env.get("PYTHONPATH")]))
    check = ("import sys, torch, native_registry.upstream_compat as c\n"
             "print(sys.modules['torch._native.registry'] is c, "
             "torch._native.get_user_ordering_fn is native_registry.get_user_ordering_fn)\n")
    if first == "spawn":
        body = ("import multiprocessing as mp\n"
                "def child(q):\n"
                "    import sys, torch, native_registry, native_registry.upstream_compat as c\n"
                "    q.put(sys.modules['torch._native.registry'] is c)\n"
                "if __name__ == '__main__':\n"
                "    ctx = mp.get_context('spawn'); q = ctx.Queue()\n"
                "    p = ctx.Process(target=child, args=(q,)); p.start()\n"
                "    print(q.get(timeout=240)); p.join(60); print(p.exitcode)\n")
    else:
        body = f"import {first}\nimport native_registry\n" + check
    main = tmp_path / "main.py"  # a file: a spawned child imports its __main__ from it
    main.write_text(body)
    out = subprocess.run([sys.executable, str(main)], capture_output=True, text=True,
                         timeout=300, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split()
    assert lines == (["True", "0"] if first == "spawn" else ["True", "True"]), out.stdout
