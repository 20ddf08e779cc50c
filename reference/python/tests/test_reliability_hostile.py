"""Hostile input through the Python API, beyond test_api.py and test_routing.py.

Two Hypothesis fuzzers feed register_op_override and the filter functions
arbitrary arguments (any text, lone surrogates, NULs, 100,000-character names,
bytes, numbers, lists, non-callables, C++ predicates) and check each call
against an oracle written here: refused exactly when some argument is wrong,
with the exception type and the argument's name that this wrong argument
calls for, and nothing changed in registry or dispatcher. The other tests pin
ordering functions that return junk or raise BaseException, conds that
return junk, and impls that return the wrong structure.

Inputs per fuzzer come from the Hypothesis profile of test_reliability_model
("reliability" by default, "thorough" with NR_HYPOTHESIS_PROFILE=thorough).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import native_registry.registry as registry
from native_registry import _C
from native_registry import predicates as P
from conftest import MISSING_NS, NS, dispatcher_state
from test_reliability_model import PROFILE

FUZZ = settings(PROFILE, max_examples=PROFILE.max_examples * 5,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

def everything(reg, natives: bool = True) -> tuple:
    """What callers can see of the registry, and the dispatcher's watched
    tables and (unless natives=False: listing them takes milliseconds)
    `_native` ops: "nothing changed" compares two of these."""
    keys = _C.graph_keys()
    return (
        keys,
        [[n.node_id for n in _C.graph(k)] for k in keys],
        _C.filters(),
        sorted(reg.allowed_namespaces()),
        [(k, _C.router_state(k), [n.node_id for n in _C.published_chain(k)])
         for k in _C.router_keys()],
        dispatcher_state(),
        sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("_native::"))
        if natives else None,
    )


# ---- the oracle ------------------------------------------------------------------

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def blank(text: str) -> bool:
    """As the C++ side reads it: only the C locale's whitespace bytes."""
    return all(byte in b" \t\n\v\f\r" for byte in text.encode("utf-8"))


def lib_ok(text: str) -> bool:
    return IDENTIFIER.fullmatch(text) is not None


def op_ok(text: str) -> bool:
    name, dot, overload = text.partition(".")
    return IDENTIFIER.fullmatch(name) is not None and (
        not dot or IDENTIFIER.fullmatch(overload) is not None)


def key_ok(text: str) -> bool:
    if blank(text):
        return False
    try:
        key = torch._C._dispatch_key_parse(text)
    except RuntimeError:
        return False
    return key.name not in ("Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                            "Undefined") and not torch._C._dispatch_is_alias_key(key)


def expected_failures(reg, names: dict, cond, impl, runtime, unconditional) -> set:
    """Every (exception type, text the message must hold) the call may raise;
    empty if it must succeed. The API may report any one of them."""
    failures = set()
    for field, value in names.items():
        if not isinstance(value, str):
            failures.add((TypeError, field))
        elif not encodable(value):
            failures.add((ValueError, field))
    if cond is not None and not isinstance(cond, P.Predicate) and not callable(cond):
        failures.add((TypeError, "cond"))
    if not callable(impl):
        failures.add((TypeError, "impl"))
    if runtime is not None and not callable(runtime):
        failures.add((TypeError, "try_initialize_runtime"))
    if failures:
        return failures
    if blank(names["dsl_name"]):
        failures.add((ValueError, "dsl_name"))
    if not lib_ok(names["lib_symbol"]):
        failures.add((ValueError, "lib_symbol"))
    elif names["lib_symbol"] not in reg.allowed_namespaces():
        failures.add((ValueError, "lib_symbol"))
    if blank(names["op_symbol"]) or not op_ok(names["op_symbol"]):
        failures.add((ValueError, "op_symbol"))
    if not key_ok(names["dispatch_key"]):
        failures.add((ValueError, "dispatch_key"))
    if cond is None and not unconditional:
        failures.add((ValueError, "cond"))
    if unconditional and runtime is not None:
        failures.add((ValueError, "try_initialize_runtime"))
    return failures


# ---- strategies -------------------------------------------------------------------

HOSTILE_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "\t\n", "\u3000", "\x1c", "a b", "ns::op", "aten::mul", "mul.",
                     ".Tensor", "mul.Tensor.out", "9abc", "m\u00fcl", "a\x00b", "\ud800",
                     "x\udfff", "_native", "cpu", "Meta", "Autograd", "\u200b", "a" * 100_000]),
)
NOT_TEXT = st.one_of(st.none(), st.integers(), st.binary(max_size=4), st.floats(),
                     st.lists(st.text(max_size=2), max_size=2))


def name_of(valid: list[str]):
    return st.one_of(st.sampled_from(valid), HOSTILE_TEXT, NOT_TEXT)


class CallableClass:
    def __init__(self, *args, **kwargs):
        pass


CONDS = {"true": lambda *a, **k: True, "false": lambda *a, **k: False,
         "predicate": P.max_numel(2), "none": None, "int": 3, "str": "yes",
         "class": CallableClass, "object": object()}
IMPLS = {"fn": lambda a, *rest, **k: a, "none": None, "int": 0, "class": CallableClass,
         "list": [lambda: 0]}
RUNTIMES = {"none": None, "fn": lambda: True, "str": "ready", "int": 1}


@pytest.fixture
def installed(reg):
    """One installed override on aten::mul, which every refused call must
    leave routing exactly as before."""
    reg.register_op_override("resident", "aten", "mul.Tensor", "CPU", lambda *a, **k: False,
                             lambda a, b: a)
    reg.register_all_overrides()
    return reg


def test_fuzzed_registrations_match_the_oracle(installed, namespaces, record_property):
    reg = installed
    tried = 0

    @FUZZ
    @given(dsl=name_of(["dsl_a", "d\u00e9j\u00e0 vu", "x y"]),
           lib=name_of(["aten", NS, MISSING_NS, "prims"]),
           op=name_of(["mul.Tensor", "add.Tensor", "twice", "zq_absent", "mul.NoSuchOverload"]),
           key=name_of(["CPU", "CUDA", "AutogradCPU", "BackendSelect", "Meta", "Autograd",
                        "CompositeImplicitAutograd", "NotAKey"]),
           cond=st.sampled_from(sorted(CONDS)), impl=st.sampled_from(sorted(IMPLS)),
           runtime=st.sampled_from(sorted(RUNTIMES)), unconditional=st.booleans())
    def one(dsl, lib, op, key, cond, impl, runtime, unconditional):
        nonlocal tried
        tried += 1
        names = {"dsl_name": dsl, "lib_symbol": lib, "op_symbol": op, "dispatch_key": key}
        cond, impl, runtime = CONDS[cond], IMPLS[impl], RUNTIMES[runtime]
        failures = expected_failures(reg, names, cond, impl, runtime, unconditional)
        before = everything(reg, natives=False)
        with reg.scoped():
            try:
                reg.register_op_override(dsl, lib, op, key, cond, impl,
                                         try_initialize_runtime=runtime,
                                         unconditional_override=unconditional)
            except (TypeError, ValueError) as error:
                assert failures, f"refused a valid registration: {error!r}"
                message = str(error)
                assert any(isinstance(error, kind) and field in message
                           for kind, field in failures), (
                    f"{type(error).__name__}({message[:200]!r}) is none of {sorted(failures)}")
                assert everything(reg, natives=False) == before
            else:
                assert not failures, f"accepted a registration that should fail: {failures}"
                canonical = torch._C._dispatch_key_parse(key).name
                graph = reg.graph(lib, op, canonical)
                assert graph[-1].dsl_name == dsl and graph[-1].impl_fn is impl
                assert everything(reg, natives=False)[-2:] == before[-2:]  # installs nothing
        assert everything(reg, natives=False) == before

    all_before = everything(reg)
    one()
    after = everything(reg)
    assert after[:-1] == all_before[:-1]
    # No `_native` op is left: the teardowns may undefine retired ones that
    # earlier tests let go, never define one.
    assert set(after[-1]) <= set(all_before[-1]), set(after[-1]) - set(all_before[-1])
    record_property("inputs_tried", tried)
    print(f"hostile registrations: {tried} inputs")
    assert tried >= FUZZ.max_examples // 2


FILTER_ARGUMENT = st.one_of(
    st.none(), HOSTILE_TEXT, st.integers(), st.floats(), st.binary(max_size=4),
    st.lists(st.one_of(HOSTILE_TEXT, st.sampled_from(["resident", "mul.Tensor", "CPU"]),
                       st.integers(), st.none(), st.binary(max_size=2)), max_size=3),
    st.tuples(st.sampled_from(["resident", "dsl_x"])),
    st.frozensets(st.sampled_from(["resident", "CPU", " "]), max_size=2),
)


def filter_outcome(argument):
    """(exception type, message text) the call must raise, or the entries."""
    if argument is None:
        return []
    entries = [argument] if isinstance(argument, str) else argument
    try:
        entries = list(entries)
    except TypeError:
        return (TypeError, "not iterable")
    # Entries are checked in order: the first one that is not a str, or not
    # UTF-8 encodable, names the error.
    for entry in entries:
        if not isinstance(entry, str):
            return (TypeError, "filter entries must be a str")
        if not encodable(entry):
            return (ValueError, "filter entries must be encodable")
    for entry in entries:
        if blank(entry):
            return (ValueError, "must be a non-empty name")
    return entries


def test_fuzzed_filter_arguments_match_the_oracle(installed, record_property):
    reg = installed
    tried = 0

    @FUZZ
    @given(which=st.sampled_from(["dsl_names", "op_symbols", "dispatch_keys"]),
           argument=FILTER_ARGUMENT)
    def one(which, argument):
        nonlocal tried
        tried += 1
        outcome = filter_outcome(argument)
        before = everything(reg, natives=False)
        with reg.scoped():
            if isinstance(outcome, tuple):
                kind, text = outcome
                with pytest.raises(kind, match=re.escape(text)):
                    reg.deregister_op_overrides(**{f"disable_{which}": argument})
                assert everything(reg, natives=False) == before
                with pytest.raises(kind, match=re.escape(text)):
                    reg.reenable_op_overrides(**{f"enable_{which}": argument})
                assert everything(reg, natives=False) == before
            else:
                reg.deregister_op_overrides(**{f"disable_{which}": argument})
                position = ["dsl_names", "op_symbols", "dispatch_keys"].index(which)
                assert set(outcome) <= set(_C.filters()[position])
                reg.reenable_op_overrides(**{f"enable_{which}": argument})
                assert not set(outcome) & set(_C.filters()[position])
                # The resident override declines every call: routing is stock.
                assert torch.equal(torch.ops.aten.mul.Tensor(torch.ones(2), torch.full((2,), 3.0)),
                                   torch.full((2,), 3.0))
        assert everything(reg, natives=False) == before

    all_before = everything(reg)
    one()
    after = everything(reg)
    assert after[:-1] == all_before[:-1]
    # No `_native` op is left: the teardowns may undefine retired ones that
    # earlier tests let go, never define one.
    assert set(after[-1]) <= set(all_before[-1]), set(after[-1]) - set(all_before[-1])
    record_property("inputs_tried", tried)
    print(f"hostile filters: {tried} inputs")
    assert tried >= FUZZ.max_examples // 2


# ---- names everywhere ---------------------------------------------------------------


@pytest.mark.parametrize("call, message", [
    (lambda r: r.allow_namespace("\ud800"), "lib_symbol must be encodable"),
    (lambda r: r.disallow_namespace(3), "lib_symbol must be a str"),
    (lambda r: r.allow_namespace("a" * 100_000 + "::b"), "is not a namespace name"),
    (lambda r: r.allow_namespace("a\x00b"), "is not a namespace name"),
    (lambda r: r.get_dsl_operations("\udfff"), "dsl_name must be encodable"),
    (lambda r: r.get_dsl_operations("d", None), "lib_symbol must be a str"),
    (lambda r: r.deregister_op_overrides(disable_dsl_names=["ok", "\ud800"]),
     "filter entries must be encodable"),
    (lambda r: r.reenable_op_overrides(enable_op_symbols=[" \t"]), "must be a non-empty name"),
    (lambda r: r.deregister_op_overrides(disable_dispatch_keys=7), "not iterable"),
])
def test_hostile_names_elsewhere_are_refused_clearly(installed, call, message):
    before = everything(installed)
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        call(installed)
    assert everything(installed) == before


def test_odd_but_valid_names_work_end_to_end(reg, namespaces):
    odd = ["d\u00e9j\u00e0\x00vu", "\u3000", "\x1c", "line\nbreak", "z" * 100_000]
    for dsl in odd:
        reg.register_op_override(dsl, "aten", "mul.Tensor", "CPU", lambda *a, **k: False,
                                 lambda a, b: a)
    reg.register_all_overrides()
    for dsl in odd:
        assert reg.get_dsl_operations(dsl) == ["mul.Tensor"]
    reg.deregister_op_overrides(disable_dsl_names=odd[:2])
    assert sorted(_C.filters()[0]) == sorted(odd[:2])
    assert reg.router_state("aten", "mul.Tensor", "CPU") == "active"


# ---- ordering functions --------------------------------------------------------------


class NodeList(list):
    pass


@pytest.mark.parametrize("make, reason", [
    (lambda g, other, stale: (n for n in g), "expected a list"),
    (lambda g, other, stale: dict(enumerate(g)), "expected a list"),
    # Nodes are dataclasses with upstream's field equality, so unhashable, as upstream's.
    (lambda g, other, stale: dict.fromkeys(g), "unhashable type: '_OverrideNode'"),
    (lambda g, other, stale: [None], "TypeError: ordering function returned NoneType None, not a registered node"),
    (lambda g, other, stale: [*g, 3], "TypeError: ordering function returned int 3, not a registered node"),
    (lambda g, other, stale: [registry._OverrideNode("x", "aten", "mul.Tensor", "CPU",
                                                     None, None, "fake")],
     "TypeError: ordering function returned _OverrideNode(dsl_name='x' ... which is neither a registered "
     "node nor a copy of a node of aten::mul.Tensor/CPU"),
    # A copy whose node_id is not even hashable is told apart the same way.
    (lambda g, other, stale: [dataclasses.replace(g[0], node_id=["mul"])],
     "TypeError: ordering function returned _OverrideNode(dsl_name='resident' ... which is neither a "
     "registered node nor a copy of a node of aten::mul.Tensor/CPU"),
    (lambda g, other, stale: [stale], "is not in this graph"),
    (lambda g, other, stale: [other], "belongs to the graph of aten::add.Tensor/CPU"),
    (lambda g, other, stale: NodeList(g + g[:1]), "appears twice"),
])
def test_ordering_junk_keeps_the_graph_and_the_router(installed, caplog, make, reason):
    reg = installed
    with reg.scoped():  # a node of this graph that restore took away again
        reg.register_op_override("stale", "aten", "mul.Tensor", "CPU", lambda *a: True,
                                 lambda a, b: a)
        stale = reg.graph("aten", "mul.Tensor", "CPU")[-1]
    reg.register_op_override("other", "aten", "add.Tensor", "CPU", lambda *a: False,
                             lambda a, b: a)
    reg.register_op_override("second", "aten", "mul.Tensor", "CPU", lambda *a: False,
                             lambda a, b: a)
    reg.register_all_overrides()
    other = reg.graph("aten", "add.Tensor", "CPU")[0]
    before = everything(reg)

    def fn(op_symbol, dispatch_key, graph):
        return make(graph, other, stale) if op_symbol == "mul.Tensor" else graph

    with caplog.at_level(logging.WARNING, logger="native_registry.registry"):
        reg.reorder_graphs_from_user_function(fn, reregister_overrides=True)
    messages = [r.getMessage() for r in caplog.records if r.name == "native_registry.registry"]
    assert len(messages) == 1 and "Graph transformation failed" in messages[0]
    assert all(part in messages[0] for part in reason.split(" ... ")), messages[0]
    assert everything(reg) == before


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_ordering_function_interrupts_propagate_and_undo(installed, caplog, error):
    reg = installed
    for dsl in ("b1", "b2"):
        reg.register_op_override(dsl, "aten", "add.Tensor", "CPU", lambda *a: False,
                                 lambda a, b: a)
    reg.register_all_overrides()
    before = everything(reg)
    seen = []

    def fn(op_symbol, dispatch_key, graph):
        seen.append(op_symbol)
        if op_symbol == "add.Tensor":
            return list(reversed(graph))
        raise error("stop")

    with caplog.at_level(logging.WARNING, logger="native_registry.registry"):
        with pytest.raises(error):
            reg.reorder_graphs_from_user_function(fn, reregister_overrides=True)
    assert not [r for r in caplog.records if "Graph transformation failed" in r.getMessage()]
    assert everything(reg) == before
    assert seen == ["add.Tensor", "mul.Tensor"]


# ---- conds and impls ------------------------------------------------------------------

X, Y = torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])


class ExplodingBool:
    def __bool__(self):
        raise ZeroDivisionError("bool exploded")


@pytest.mark.parametrize("answer, outcome", [
    (None, "declines"), (0, "declines"), ("", "declines"), ([], "declines"),
    ("yes", "takes"), ([0], "takes"), (torch.tensor(True), "takes"),
    (torch.ones(3), (RuntimeError, "ambiguous")),
    (ExplodingBool(), (ZeroDivisionError, "bool exploded")),
])
def test_cond_answers_are_read_for_their_truth(installed, answer, outcome):
    reg = installed
    reg.register_op_override("junk", "aten", "mul.Tensor", "CPU", lambda *a, **k: answer,
                             lambda a, b: torch.full_like(a, 7.0))
    reg.register_all_overrides()
    before = everything(reg)
    if outcome == "declines":
        assert torch.equal(torch.ops.aten.mul.Tensor(X, Y), torch.tensor([8.0, 15.0]))
    elif outcome == "takes":
        assert torch.equal(torch.ops.aten.mul.Tensor(X, Y), torch.full((2,), 7.0))
    else:
        kind, text = outcome
        with pytest.raises(kind, match=text):
            torch.ops.aten.mul.Tensor(X, Y)
        assert not registry._router_active.on
    assert everything(reg) == before


def test_a_cond_raising_keyboard_interrupt_reaches_the_caller(installed):
    reg = installed

    def cond(*args, **kwargs):
        raise KeyboardInterrupt("from a cond")

    reg.register_op_override("kb", "aten", "mul.Tensor", "CPU", cond, lambda a, b: a)
    reg.register_all_overrides()
    before = everything(reg)
    with pytest.raises(KeyboardInterrupt, match="from a cond"):
        torch.ops.aten.mul.Tensor(X, Y)
    assert everything(reg) == before
    reg.deregister_op_overrides(disable_dsl_names="kb")
    assert torch.equal(torch.ops.aten.mul.Tensor(X, Y), torch.tensor([8.0, 15.0]))


VALUES, INDICES = torch.zeros(2), torch.zeros(2, dtype=torch.long)


@pytest.mark.parametrize("result, message", [
    (VALUES, "must return a tuple or list of 2 values, got Tensor"),
    ((), "must return a tuple or list of 2 values, got tuple of 0 values"),
    ((VALUES,), "must return a tuple or list of 2 values, got tuple of 1 values"),
    ((VALUES, INDICES, VALUES), "must return a tuple or list of 2 values, got tuple of 3 values"),
    ([VALUES, INDICES, VALUES], "must return a tuple or list of 2 values, got list of 3 values"),
    ({0: VALUES, 1: INDICES}, "must return a tuple or list of 2 values, got dict"),
    ("ab", "must return a tuple or list of 2 values, got str"),
    ((VALUES, "indices"), "returned str where the schema promises a Tensor"),
    ((None, INDICES), "returned NoneType where the schema promises a Tensor"),
])
def test_impls_returning_the_wrong_structure_for_a_multi_result_op(installed, result, message):
    reg = installed
    reg.register_op_override("shape", "aten", "max.dim", "CPU", lambda *a, **k: True,
                             lambda x, dim, keepdim=False: result)
    reg.register_all_overrides()
    before = everything(reg)
    with pytest.raises((RuntimeError, TypeError), match=re.escape(message)):
        torch.max(torch.ones(2, 2), 0)
    assert everything(reg) == before
    reg.deregister_op_overrides(disable_dsl_names="shape")
    assert torch.equal(torch.max(torch.ones(2, 2), 0).values, torch.ones(2))


@pytest.mark.parametrize("result", [[torch.ones(2)], (torch.ones(2),), 3.0, object()])
def test_impls_returning_a_non_tensor_for_a_tensor_op(installed, result):
    reg = installed
    reg.register_op_override("wrong", "aten", "mul.Tensor", "CPU", lambda *a, **k: True,
                             lambda a, b: result)
    reg.register_all_overrides()
    before = everything(reg)
    with pytest.raises((RuntimeError, TypeError), match="where the schema promises a Tensor"):
        torch.ops.aten.mul.Tensor(X, Y)
    assert everything(reg) == before


def test_an_impl_that_disables_its_own_dsl_finishes_its_call(installed):
    reg = installed

    def impl(a, b):
        reg.deregister_op_overrides(disable_dsl_names="once")
        return torch.full_like(a, 5.0)

    reg.register_op_override("once", "aten", "mul.Tensor", "CPU", lambda *a, **k: True, impl)
    reg.register_all_overrides()
    assert torch.equal(torch.ops.aten.mul.Tensor(X, Y), torch.full((2,), 5.0))
    assert torch.equal(torch.ops.aten.mul.Tensor(X, Y), torch.tensor([8.0, 15.0]))


def test_a_del_run_by_the_interpreters_finalization_can_call_a_routed_op_and_the_control_plane():
    # The finalizing (main) thread may take the GIL back after a torch call let
    # it go: it must never be parked as a daemon thread is, or the exit hangs.
    program = textwrap.dedent("""
        import builtins, os, torch
        import native_registry.registry as reg
        def cond(a, b):
            os.write(1, b"cond asked\\n")
            return False
        reg.register_op_override("dsl_a", "aten", "mul.Tensor", "CPU", cond, lambda a, b: a)
        reg.register_all_overrides()
        class RunsAtExit:
            def __del__(self):
                out = torch.ones(2) * torch.ones(2)
                os.write(1, f"routed call at exit: {out.tolist()}\\n".encode())
                reg.deregister_op_overrides(disable_dsl_names="dsl_a")
                os.write(1, b"control plane at exit\\n")
        builtins.nr_runs_at_exit = RunsAtExit()  # dropped late in the finalization
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["cond asked", "routed call at exit: [1.0, 1.0]",
                                        "control plane at exit"], done.stdout
