"""Edges of the call path and of what teardown frees: callables released
once their overrides are gone, a `_native` op that a restore brings back,
the Dynamo shortcut on list arguments, and how refused names read in error
messages."""

from __future__ import annotations

import ast
import gc
import weakref
from unittest.mock import patch

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conftest import behaviour

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY

SEVEN = torch.tensor([7.0, 7.0])


# ---- teardown frees the callables ------------------------------------------------

def install_sevens_and_call(impl) -> tuple[weakref.ref, weakref.ref]:
    """Registers and installs an override of mul whose cond and impl only
    this function holds, calls it twice through the router, and returns weak
    references to the two callables."""
    def cond(*args, **kwargs):
        return True

    def sevens(a, *rest):
        return torch.full_like(a, 7.0)

    impl.register("test_dsl", *KEY, cond, sevens)
    impl.install(*KEY)
    for _ in range(2):
        assert torch.equal(mul(), SEVEN)
    return weakref.ref(cond), weakref.ref(sevens)


def assert_freed(ref: weakref.ref, what: str) -> None:
    gc.collect()
    assert ref() is None, (f"the {what} of an override torn down is still referenced: "
                           f"{[type(r).__name__ for r in gc.get_referrers(ref())]}")


@behaviour("lifetime.teardown-releases-callables")
def test_leaving_a_scope_releases_the_cond_of_an_override_it_removed(impl):
    with impl.scope():
        cond, _ = install_sevens_and_call(impl)
    assert torch.equal(mul(), STOCK)
    assert_freed(cond, "cond")


@behaviour("lifetime.teardown-releases-callables")
def test_leaving_a_scope_releases_the_impl_of_an_override_it_removed(impl):
    with impl.scope():
        _, body = install_sevens_and_call(impl)
    assert torch.equal(mul(), STOCK)
    assert_freed(body, "impl")


# ---- a `_native` op that comes back ------------------------------------------------

@behaviour("fake.native-op-back-after-restore")
@pytest.mark.parametrize("held", [False, True], ids=["let-go", "held"])
def test_a_native_op_brought_back_by_a_restore_shape_infers_again(impl, held):
    """The outer scope is left first, tearing the override down; leaving
    the inner one, entered while it was installed, brings it back. Held
    meanwhile (as a recorded program holds it), the op is the one retired;
    let go, an implementation may have undefined it and defines it again."""
    outer = impl.scope()
    outer.__enter__()
    impl.register("test_dsl", *KEY, lambda *a, **k: True, lambda a, b: torch.full_like(a, 7.0))
    impl.install(*KEY)
    node = impl.graph(*KEY)[0]
    kept = impl.native_op(node) if held else None
    table = torch._C._dispatch_dump_table(f"_native::{node.node_id}")
    inner = impl.scope()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert torch.equal(mul(), STOCK)
    inner.__exit__(None, None, None)
    assert torch.equal(mul(), SEVEN)
    native = kept if held else impl.native_op(node)
    assert torch.equal(native(A, B), SEVEN)
    with FakeTensorMode():
        out = native(torch.empty(3, 4), torch.empty(3, 4))
    assert out.shape == torch.Size([3, 4]) and out.dtype == torch.float32
    assert torch._C._dispatch_dump_table(f"_native::{node.node_id}") == table, \
        "the _native op's kernels differ from those it had before the teardown"
    # Left as the inner scope found it: installed. The test's own scope
    # tears it down.


# ---- the Dynamo shortcut on list arguments ---------------------------------------------

@behaviour("dynamo.shortcut-fires-for-list-arguments")
def test_a_list_of_ordinary_tensors_is_diverted(impl):
    guard_states = []

    def cond(*args, **kwargs):
        guard_states.append(impl.in_reentrant_call())
        return False

    impl.register("test_dsl", "aten", "cat", "CPU", cond, lambda *a, **k: pytest.fail("impl ran"))
    impl.install("aten", "cat", "CPU")
    with patch.object(torch.compiler, "is_dynamo_compiling", return_value=True):
        assert torch.equal(torch.cat([A, B]), torch.tensor([2.0, 3.0, 4.0, 5.0]))
    assert guard_states == [True], "a call of cat on ordinary tensors was not diverted"


@behaviour("dynamo.tracer-query-errors-reach-caller")
def test_what_the_tracer_query_raises_reaches_the_caller(impl, monkeypatch):
    consulted = []

    def cond(*args, **kwargs):
        consulted.append(True)
        return False

    impl.register("test_dsl", *KEY, cond, lambda *a, **k: pytest.fail("impl ran"))
    impl.install(*KEY)
    with patch.object(torch.compiler, "is_dynamo_compiling", side_effect=ValueError("tracer query broke")):
        with pytest.raises(ValueError, match="tracer query broke"):
            mul()
    with monkeypatch.context() as patched:
        patched.delattr(torch.compiler, "is_dynamo_compiling")
        with pytest.raises(AttributeError, match="is_dynamo_compiling"):
            mul()
    assert consulted == [], "cond was consulted although the tracer query raised"
    assert torch.equal(mul(), STOCK), "the router did not recover once the tracer query answered again"
    assert consulted == [True]


@behaviour("dynamo.tracer-query-errors-reach-caller")
def test_an_error_looking_the_tracer_query_up_reaches_the_caller(impl):
    """torch.compiler's namespace holds a key of the name's hash whose
    comparison raises, met before the name itself: looking the name up
    raises, and so does the routed call, with that error, no cond consulted."""
    consulted = []
    impl.register("test_dsl", *KEY, lambda *a, **k: consulted.append(True) or False,
                  lambda *a, **k: pytest.fail("impl ran"))
    impl.install(*KEY)
    assert torch.equal(mul(), STOCK) and consulted == [True]
    consulted.clear()
    name, namespace = "is_dynamo_compiling", vars(torch.compiler)

    class Colliding:
        armed = False

        def __hash__(self):
            return hash(name)

        def __eq__(self, other):
            if Colliding.armed:
                raise LookupError("the namespace's lookup broke")
            return self is other

    colliding, query = Colliding(), namespace.pop(name)
    try:
        namespace[colliding] = None  # the first free slot of the name's probe sequence
        namespace[name] = query       # after it: a look-up of the name meets `colliding` first
        Colliding.armed = True
        with pytest.raises(LookupError, match="the namespace's lookup broke"):
            mul()
    finally:
        Colliding.armed = False
        del namespace[colliding]
        namespace[name] = query
    assert consulted == [], "cond was consulted although looking the tracer query up raised"
    assert torch.equal(mul(), STOCK) and consulted == [True], "the router did not recover"


# ---- how refused input reads ---------------------------------------------------------

def literals_in(message: str) -> list[str]:
    """Every Python string literal ('...' or "...") in the message that
    parses, as the value it denotes."""
    found = []
    for start, quote in enumerate(message):
        if quote not in "'\"":
            continue
        for end in range(start + 1, len(message)):
            if message[end] != quote:
                continue
            try:
                value = ast.literal_eval(message[start:end + 1])
            except (SyntaxError, ValueError):
                continue
            if isinstance(value, str):
                found.append(value)
    return found


# Namespaces no registry allows, each holding a character that printed raw
# would hide or garble the value: a quote, a backslash, controls, DEL.
HOSTILE_NAMESPACES = {"quote": "bad'ns", "double-quote": 'bad"ns', "backslash": "bad\\ns",
                      "escape-lookalike": "bad\\x41ns", "newline": "bad\nns", "tab": "bad\tns",
                      "soh": "bad\x01ns", "esc": "bad\x1bns", "del": "bad\x7fns"}


@behaviour("validation.refused-names-shown-escaped")
@pytest.mark.parametrize("lib_symbol", HOSTILE_NAMESPACES.values(), ids=HOSTILE_NAMESPACES.keys())
def test_a_refused_name_is_shown_escaped_in_the_error(impl, lib_symbol):
    """Fair to any rendering that escapes as a Python literal does (upstream
    uses repr): the message holds no raw control character, and some quoted
    literal in it denotes exactly the refused value."""
    with pytest.raises(ValueError) as error:
        impl.register("test_dsl", lib_symbol, "mul.Tensor", "CPU", lambda *a, **k: True,
                      lambda a, b: a)
    message = str(error.value)
    raw = sorted({c for c in message if ord(c) < 0x20 or ord(c) == 0x7f} - {"\n"})
    assert not raw, f"raw control characters {raw!r} in {message!r}"
    if "\n" in lib_symbol:  # a message may have lines of its own, but not inside the value
        assert "bad\nns" not in message, message
    assert lib_symbol in literals_in(message), f"{lib_symbol!r} is not legible in {message!r}"

