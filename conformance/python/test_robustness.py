"""Holds up where users actually go (issue 23): ops redefined under a live
`_native` op, fork with other threads in the registry, a scope per test, an
op defined after its override was registered. Each case that could crash or
hang runs in a child interpreter with a time limit, so that a regression
fails its test instead of killing the suite. None of this is in the seed
file: the behaviours are `recommended`."""

from __future__ import annotations

import re
import textwrap
import warnings

import pytest
import torch

from conftest import behaviour, run_in_fresh_interpreter

# A namespace of its own: the child defines, destroys and redefines ops in it.
REDEF_HELPERS = """
    import torch
    NS = "_native_registry_redef"
    impl.allow_namespace(NS)
    x = torch.ones(2)

    def define(schema, kernel):
        lib = torch.library.Library(NS, "DEF")
        lib.define(schema)
        lib.impl("foo", kernel, "CPU")
        lib.impl("foo", lambda x, *rest: torch.empty_like(x), "Meta")
        return lib

    def outcome(fn, *args):
        try:
            return "returned " + str(fn(*args).tolist())
        except Exception as e:
            return "raised " + type(e).__name__ + ": " + " ".join(str(e).split())
"""

REDEF_SETUP = REDEF_HELPERS + """
    lib = define("foo(Tensor x) -> Tensor", lambda x: x + 1)
    impl.register("redef_dsl", NS, "foo", "CPU", lambda *a: True, lambda x: x * 7)
    impl.install(NS, "foo", "CPU")
    node = impl.graph(NS, "foo", "CPU")[0]
    native = impl.native_op(node)
    assert native(x).tolist() == [7.0, 7.0]
"""

REDEFINE = """
    lib._destroy()
    lib = define("foo(Tensor x, Tensor y, Tensor z) -> Tensor", lambda x, y, z: x + y + z)
"""


def script(*parts: str) -> str:
    """The parts, each dedented on its own, as one script."""
    return "\n".join(textwrap.dedent(part) for part in parts)


def check_named_error(lines, node_prefix="native"):
    """Each line 'what: outcome'; the `_native` op's calls raise, naming the op."""
    results = dict(line.split(": ", 1) for line in lines if ": " in line)
    return results


# A child's part: the warnings the implementation logs, kept in `warned`.
KEEP_WARNINGS = """
    import logging
    warned = []
    class Keep(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())
    logging.getLogger(impl.log_name).addHandler(Keep(level=logging.WARNING))
"""


def restore_saved_and_report(arguments: str, new_op: str) -> str:
    """A child's part: `saved` (the `_native` op active) restored after the
    target was defined again; what was warned, and what the `_native` op
    (called with x and `arguments`) and the new op (`new_op`) do then."""
    return f"""
        impl.module.restore(saved)              # would re-activate it on the new op
        print("warned: " + str(any(node.node_id in m and "foo" in m for m in warned)))
        print("warning: " + " ".join(" ".join(warned).split()))
        print("id: " + node.node_id)
        print("eager: " + outcome(native, x{arguments}))
        print("meta: " + outcome(native, torch.ones(2, device="meta"){arguments}))
        print("new op: " + str({new_op}))
    """


def check_restore_refused(results: dict, schemas: tuple[str, ...], computes: str) -> None:
    """The restore warned naming the override, the op and both `schemas`; the
    `_native` op still raises naming its node; the new op computes its own."""
    assert results["warned"] == "True", "the restore logged no warning naming the override and the op"
    assert all(schema in results["warning"] for schema in schemas), results["warning"]
    for what in ("eager", "meta"):
        assert results[what].startswith("raised"), f"the _native op's {what} call: {results[what]}"
        assert results["id"] in results[what], results[what]
    assert results["new op"] == computes, results["new op"]


@behaviour("robustness.native-op-target-redefined")
def test_a_native_op_whose_target_was_redefined_raises_naming_it(impl):
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, REDEFINE, """
        print("id: " + node.node_id)
        print("eager: " + outcome(native, x))
        print("meta: " + outcome(native, torch.ones(2, device="meta")))
        print("new op: " + outcome(getattr(torch.ops, NS).foo, x, x, x))
    """), timeout=120)
    results = check_named_error(lines)
    for what in ("eager", "meta"):
        assert results[what].startswith("raised"), f"the _native op's {what} call: {results[what]}"
        assert results["id"] in results[what] and "foo" in results[what], results[what]
    assert results["new op"] == "returned [3.0, 3.0]", results["new op"]


# The op defined again with other results only: the same arguments, so only
# a check of the whole schema tells it from the op the override was made for.
REDEFINE_RESULTS = """
    lib._destroy()
    lib = torch.library.Library(NS, "DEF")
    lib.define("foo(Tensor x) -> (Tensor, Tensor)")
    lib.impl("foo", lambda x: (x + 1, x + 2), "CPU")
    lib.impl("foo", lambda x: (torch.empty_like(x), torch.empty_like(x)), "Meta")
"""


# The same argument made keyword-only: another schema as well.
REDEFINE_KEYWORD_ONLY = """
    lib._destroy()
    lib = torch.library.Library(NS, "DEF")
    lib.define("foo(*, Tensor x) -> Tensor")
    lib.impl("foo", lambda *, x: x + 1, "CPU")
    lib.impl("foo", lambda *, x: torch.empty_like(x), "Meta")
"""


# Three arguments, the last two keyword-only: the schema language writes one
# `*` before the first of them.
REDEFINE_TWO_KEYWORD_ONLY = """
    lib._destroy()
    lib = torch.library.Library(NS, "DEF")
    lib.define("foo(Tensor x, *, Tensor y, Tensor z) -> Tensor")
    lib.impl("foo", lambda x, *, y, z: x + y + z, "CPU")
    lib.impl("foo", lambda x, *, y, z: torch.empty_like(x), "Meta")
"""


@behaviour("robustness.native-op-target-redefined")
@pytest.mark.parametrize("redefinition,new_op,computes,schema_now", [
    (REDEFINE, "getattr(torch.ops, NS).foo(x, x, x).tolist()", "[3.0, 3.0]",
     "(Tensor x, Tensor y, Tensor z) -> Tensor"),
    (REDEFINE_RESULTS, "[t.tolist() for t in getattr(torch.ops, NS).foo(x)]", "[[2.0, 2.0], [3.0, 3.0]]",
     "(Tensor x) -> (Tensor, Tensor)"),
    (REDEFINE_KEYWORD_ONLY, "getattr(torch.ops, NS).foo(x=x).tolist()", "[2.0, 2.0]",
     "(*, Tensor x) -> Tensor"),
    (REDEFINE_TWO_KEYWORD_ONLY, "getattr(torch.ops, NS).foo(x, y=x, z=x).tolist()", "[3.0, 3.0]",
     "(Tensor x, *, Tensor y, Tensor z) -> Tensor"),
], ids=["other-arguments", "other-results", "keyword-only", "two-keyword-only"])
def test_a_restore_after_the_target_was_redefined_does_not_revive_the_old_op(impl, redefinition, new_op,
                                                                             computes, schema_now):
    module = impl.module
    if not hasattr(module, "snapshot") or not hasattr(module, "restore"):
        pytest.skip(f"unsupported: {impl.name} has no snapshot() and restore()")
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, KEEP_WARNINGS, """
        saved = impl.module.snapshot()           # the _native op active
        with impl.scope():
            pass
        impl.module.restore(impl.module.snapshot())
        before = impl.module.snapshot()
    """, redefinition, restore_saved_and_report("", new_op)), timeout=120)
    # Both schemas, in the schema language's notation.
    check_restore_refused(check_named_error(lines), ("(Tensor x) -> Tensor", schema_now), computes)


# foo(Tensor x, int n) at first, then the same arguments with a default value
# for n: another schema (a call may leave n out of the new op, not of the
# `_native` one), though only the default tells them apart.
REDEF_SETUP_SCALED = REDEF_SETUP.replace(
    'define("foo(Tensor x) -> Tensor", lambda x: x + 1)',
    'define("foo(Tensor x, int n) -> Tensor", lambda x, n: x + n)').replace(
    "lambda *a: True, lambda x: x * 7", "lambda *a: True, lambda x, n: x * 7").replace(
    "assert native(x).tolist()", "assert native(x, 1).tolist()")
assert all(part in REDEF_SETUP_SCALED for part in ("int n)", "lambda x, n: x * 7", "native(x, 1)")), (
    "REDEF_SETUP changed: rewrite REDEF_SETUP_SCALED")

REDEFINE_DEFAULT = """
    lib._destroy()
    lib = define("foo(Tensor x, int n=1) -> Tensor", lambda x, n=1: x + n)
"""


@behaviour("robustness.native-op-target-redefined")
def test_a_restore_after_the_targets_argument_got_a_default_does_not_revive_the_old_op(impl):
    module = impl.module
    if not hasattr(module, "snapshot") or not hasattr(module, "restore"):
        pytest.skip(f"unsupported: {impl.name} has no snapshot() and restore()")
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP_SCALED, KEEP_WARNINGS, """
        saved = impl.module.snapshot()           # the _native op active
    """, REDEFINE_DEFAULT, restore_saved_and_report(", 1", "getattr(torch.ops, NS).foo(x).tolist()")),
        timeout=120)
    # Both schemas; the default value as the schema language writes it, or elided.
    check_restore_refused(check_named_error(lines), ("(Tensor x, int n) -> Tensor", "int n="), "[2.0, 2.0]")


@behaviour("robustness.scope-after-target-redefined")
def test_a_scope_left_while_the_routed_op_is_gone_does_not_route_its_successor(impl):
    """The op defined again with the same schema and not installed again (so
    the new op computes its own result), then a scope entered and left: the
    scope's end must not build a router on the new op from the old chain."""
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, KEEP_WARNINGS, """
        lib._destroy()
        lib = define("foo(Tensor x) -> Tensor", lambda x: x + 2)   # the same schema, anew
        print("before: " + outcome(getattr(torch.ops, NS).foo, x))
        with impl.scope():
            pass
        print("after: " + outcome(getattr(torch.ops, NS).foo, x))
        print("warned: " + str([" ".join(m.split()) for m in warned]))
    """), timeout=120)
    results = check_named_error(lines)
    assert results["before"] == "returned [3.0, 3.0]", f"the new op before the scope: {results['before']}"
    assert results["after"] == "returned [3.0, 3.0]", f"the new op after the scope: {results['after']}"
    # The scope changed nothing, so it has nothing to warn about.
    assert results["warned"] == "[]", f"the scope warned: {results['warned']}"


@behaviour("robustness.scope-after-target-redefined")
def test_a_restore_holding_a_router_whose_op_is_gone_brings_the_others_back(impl):
    """A snapshot holds the router of an op that has left the dispatcher (it
    sorts first) and a router of aten::mul installed since an earlier
    snapshot; restoring the earlier one removes mul's router, restoring the
    later one must bring it back, the gone op's record notwithstanding."""
    module = impl.module
    if not hasattr(module, "snapshot") or not hasattr(module, "restore"):
        pytest.skip(f"unsupported: {impl.name} has no snapshot() and restore()")
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, """
        import logging
        warned = []
        class Keep(logging.Handler):
            def emit(self, record):
                warned.append(" ".join(record.getMessage().split()))
        logging.getLogger(impl.log_name).addHandler(Keep(level=logging.WARNING))
        def warnings_since():
            said = list(warned)
            warned.clear()
            return str(said)
        impl.register("mul_dsl", "aten", "mul.Tensor", "CPU", lambda *a: True,
                      lambda a, b: torch.full_like(a, 5.0))
        early = impl.module.snapshot()   # the foo router; no mul router
        impl.install("aten", "mul.Tensor", "CPU")
        lib._destroy()                   # foo leaves the dispatcher
        saved = impl.module.snapshot()   # foo's router (its op gone) and mul's
        impl.module.restore(early)       # foo's router cannot be rebuilt: its op is gone
        print("between: " + outcome(torch.mul, x, x))
        print("warned between: " + warnings_since())
        lib = define("foo(Tensor x) -> Tensor", lambda x: x + 2)   # the same schema, anew
        impl.module.restore(saved)       # foo's record: a router whose op had gone
        print("restored: " + outcome(torch.mul, x, x))
        print("new foo: " + outcome(getattr(torch.ops, NS).foo, x))
        print("warned restored: " + warnings_since())
    """), timeout=120)
    results = check_named_error(lines)
    assert results["between"] == "returned [1.0, 1.0]", results["between"]
    assert results["restored"] == "returned [5.0, 5.0]", (
        f"mul's router was not brought back: {results['restored']}")
    # No router is built on the op defined since from the chain of the one that went.
    assert results["new foo"] == "returned [3.0, 3.0]", f"the new op after the restore: {results['new foo']}"
    # Each restore that could not put foo's router back says so, naming the op.
    for when in ("between", "restored"):
        assert "_native_registry_redef::foo" in results[f"warned {when}"], (
            f"the restore {when} did not warn about foo's router: {results[f'warned {when}']}")


@behaviour("robustness.restore-removes-a-router-it-cannot-route")
def test_a_restore_that_cannot_unmask_a_stale_override_leaves_no_router(impl):
    """An unconditional override of foo, disabled and masked, while foo is
    defined again with three arguments; a second override installed on the
    new op (routed alone: the first is masked) and a scope entered; the mask
    left (it cannot let the first override in: its `_native` op was made for
    the old schema), then the scope. That restore cannot route the graph as
    the mask of now says either: it must leave no router on foo (the new op
    computes its own result, not the second override's) and warn naming foo."""
    lines = run_in_fresh_interpreter(impl, script(REDEF_HELPERS, KEEP_WARNINGS, """
        lib = define("foo(Tensor x) -> Tensor", lambda x: x + 1)
        impl.register("masked_dsl", NS, "foo", "CPU", None, lambda x: x * 6, unconditional_override=True)
        impl.install(NS, "foo", "CPU")           # its _native op: made for foo(Tensor x)
        impl.disable(dsl_names=["masked_dsl"])
        mask = impl.unconditional_masked()
        mask.__enter__()
        lib._destroy()
        lib = define("foo(Tensor x, Tensor y, Tensor z) -> Tensor", lambda x, y, z: x + y + z)
        impl.register("second_dsl", NS, "foo", "CPU", lambda *a: True, lambda x, y, z: x * 8)
        impl.install(NS, "foo", "CPU")
        foo = getattr(torch.ops, NS).foo
        print("masked: " + outcome(foo, x, x, x))
        scope = impl.scope()
        scope.__enter__()                        # its snapshot: the mask up, the second override routed
        mask.__exit__(None, None, None)
        warned.clear()
        scope.__exit__(None, None, None)
        print("router: " + str(impl.router_installed(NS, "foo", "CPU")))
        print("restored: " + outcome(foo, x, x, x))
        print("warned: " + str(any(NS + "::foo" in m for m in warned)))
    """), timeout=120)
    results = check_named_error(lines)
    assert results["masked"] == "returned [8.0, 8.0]", (
        f"under the mask, the second override did not take foo's call: {results['masked']}")
    assert results["router"] == "False", (
        "the restore left a router on foo that it could not route as the mask of now says")
    assert results["restored"] == "returned [3.0, 3.0]", (
        f"after the restore, foo did not compute its own result: {results['restored']}")
    assert results["warned"] == "True", "the restore logged no warning naming foo"


@behaviour("validation.change-refused-by-a-stale-native-op-changes-nothing")
def test_a_reenable_that_meets_a_stale_native_op_changes_nothing(impl):
    """foo's override disabled (its `_native` op still defined for foo), foo
    defined again with another schema and installed again for a second
    override (a router in place on the new foo); re-enabling the first
    override's dsl, which also names an override of a graph that sorts before
    foo's, must raise and change nothing: the stale op is found before
    anything is published."""
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, """
        EARLY = "_native_registry_a_early"   # sorts before NS
        early_lib = torch.library.Library(EARLY, "DEF")
        early_lib.define("twice(Tensor x) -> Tensor")
        early_lib.impl("twice", lambda x: x * 2, "CPU")
        impl.allow_namespace(EARLY)
        impl.register("redef_dsl", EARLY, "twice", "CPU", lambda *a: True, lambda x: x * 9)
        impl.install(EARLY, "twice", "CPU")
        impl.disable(dsl_names=["redef_dsl"])
    """, REDEFINE, """
        impl.register("second_dsl", NS, "foo", "CPU", lambda *a: True, lambda x, y, z: x * 8)
        impl.install(NS, "foo", "CPU")
        print("enable: " + outcome(lambda: impl.enable(dsl_names=["redef_dsl"]) or x))
        print("early: " + outcome(getattr(torch.ops, EARLY).twice, x))
        print("active: " + str(impl.graph(EARLY, "twice", "CPU")[0].active))
    """), timeout=120)
    results = check_named_error(lines)
    assert results["enable"].startswith("raised"), "re-enabling the override whose _native op is stale raised nothing"
    assert results["early"] == "returned [2.0, 2.0]", (
        f"the failed re-enable gave the earlier graph its route back: {results['early']}")
    assert results["active"] == "False", "the failed re-enable changed the filters"


@behaviour("robustness.reinstall-after-target-redefined")
@pytest.mark.parametrize("install_again", ['impl.install(NS, "foo", "CPU")', "impl.install_all()"],
                         ids=["install", "install-all"])
def test_a_graph_installed_again_after_its_target_was_redefined_routes_the_new_op(impl, install_again):
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, """
        lib._destroy()
        lib = define("foo(Tensor x) -> Tensor", lambda x: x + 2)   # the same schema, anew
    """, install_again, """
        native = impl.native_op(impl.graph(NS, "foo", "CPU")[0])
        print("routed: " + outcome(getattr(torch.ops, NS).foo, x))
        print("eager: " + outcome(native, x))
        try:
            print("meta: " + str(tuple(native(torch.ones(3, device="meta")).shape)))
        except Exception as e:
            print("meta: raised " + " ".join(str(e).split()))
    """), timeout=120)
    results = check_named_error(lines)
    assert results["routed"] == "returned [7.0, 7.0]", f"the new op's call: {results['routed']}"
    assert results["eager"] == "returned [7.0, 7.0]", f"the _native op's eager call: {results['eager']}"
    assert results["meta"] == "(3,)", f"the _native op's meta call: {results['meta']}"


@behaviour("robustness.native-op-target-removed")
def test_a_native_op_whose_target_left_the_dispatcher_raises(impl):
    """Disabled (under the policy that removes an emptied router, upstream's),
    then its library destroyed, then another op defined: the `_native` op
    must not call through the handle it had."""
    lines = run_in_fresh_interpreter(impl, script("""
        policy = getattr(impl.module, "set_empty_chain_policy", None)
        if policy is not None:
            policy("remove")
    """, REDEF_SETUP, """
        impl.disable(dsl_names=["redef_dsl"])
        lib._destroy()
        del lib
        other = torch.library.Library(NS, "DEF")
        for i in range(8):                     # reuse whatever the old entry's memory was
            other.define(f"bar{i}(Tensor x) -> Tensor")
            other.impl(f"bar{i}", lambda x: x * 1000, "CompositeExplicitAutograd")
        print("id: " + node.node_id)
        print("eager: " + outcome(native, x))
        print("meta: " + outcome(native, torch.ones(2, device="meta")))
    """), timeout=120)
    results = check_named_error(lines)
    for what in ("eager", "meta"):
        assert "1000" not in results[what], f"the _native op dispatched to an unrelated op: {results[what]}"
        assert results[what].startswith("raised RuntimeError"), (
            f"the _native op's {what} call after its target left: {results[what]}")
        assert results["id"] in results[what] and "foo" in results[what], (
            f"the error names neither the override nor the op: {results[what]}")
        # foo has no overload name: written as its schema writes it, with no
        # dot after it (an overload name would follow one).
        assert not re.search(r"::foo\.(?![A-Za-z_])", results[what]), (
            f"the error writes the op's name with a dangling dot: {results[what]}")


@behaviour("robustness.other-overload-removed")
def test_another_overload_leaving_the_dispatcher_leaves_this_one_routed(impl):
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, """
        lib_a = torch.library.Library(NS, "FRAGMENT")
        lib_a.define("bar.a(Tensor x) -> Tensor")
        lib_a.impl("bar.a", lambda x: x + 1, "CPU")
        lib_b = torch.library.Library(NS, "FRAGMENT")
        lib_b.define("bar.b(Tensor x, Tensor y) -> Tensor")
        lib_b.impl("bar.b", lambda x, y: x + y, "CPU")
        accept = [True]
        impl.register("overload_dsl", NS, "bar.a", "CPU", lambda *a, **k: accept[0], lambda x: x * 7)
        impl.install(NS, "bar.a", "CPU")
        bar_a = getattr(torch.ops, NS).bar.a
        print("before: " + outcome(bar_a, x))
        lib_b._destroy()
        print("taken: " + outcome(bar_a, x))
        accept[0] = False
        print("declined: " + outcome(bar_a, x))
    """), timeout=120)
    results = check_named_error(lines)
    assert results["before"] == "returned [7.0, 7.0]", results["before"]
    assert results["taken"] == "returned [7.0, 7.0]", (
        f"bar.a's call after another overload, bar.b, left the dispatcher: {results['taken']}")
    assert results["declined"] == "returned [2.0, 2.0]", (
        f"bar.a's declined call after bar.b left the dispatcher: {results['declined']}")


@behaviour("robustness.quiet-in-normal-use")
def test_normal_use_writes_nothing_to_stderr(impl):
    written = []
    lines = run_in_fresh_interpreter(impl, """
        import torch
        with impl.scope():
            impl.register("quiet_dsl", "aten", "mul.Tensor", "CPU", lambda *a, **k: True, lambda a, b: a + b)
            impl.install("aten", "mul.Tensor", "CPU")
            print(torch.mul(torch.ones(2), torch.ones(2)).tolist())
        print(torch.mul(torch.ones(2), torch.ones(2)).tolist())
    """, stderr=written, timeout=120)
    assert lines == ["[2.0, 2.0]", "[1.0, 1.0]"], lines
    assert written == [""], f"normal use wrote to stderr: {written[0]!r}"


# ---- fork ----------------------------------------------------------------------

FORK_BODY = """
    import os, threading, time, torch
    from fixtures.python.torch_fixtures import A, B
    KEY = ("aten", "mul.Tensor", "CPU")
    impl.register("bg_dsl", *KEY, lambda *a: False, lambda a, b: a)
    impl.install(*KEY)
    kind = {kind!r}

    def work():
        if kind == "register":
            with impl.scope():  # bounded: registrations outpace the forks
                for _ in range(20):
                    impl.register("bg_dsl", *KEY, lambda *a: False, lambda a, b: a)
        elif kind == "install":
            impl.install(*KEY)
        elif kind == "toggle":
            impl.disable(dsl_names=["bg_dsl"])
            impl.enable(dsl_names=["bg_dsl"])
        elif kind == "reorder":
            impl.reorder(lambda op, key, graph: list(reversed(graph)))
        elif kind == "restore":
            with impl.scope():
                impl.register("bg_dsl", *KEY, lambda *a: False, lambda a, b: a)

    stop = threading.Event()
    def busy():
        while not stop.is_set():
            work()
    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    time.sleep(0.05)
    stuck = 0
    for _ in range({forks}):
        pid = os.fork()
        if pid == 0:
            try:
                with impl.scope():
                    impl.register("child_dsl", *KEY, lambda *a: True, lambda a, b: torch.full_like(a, 9.0))
                    impl.install(*KEY)
                    ok = torch.equal(torch.mul(A, B), torch.full_like(A, 9.0))
                os._exit(0 if ok else 3)
            except BaseException:
                os._exit(2)
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                stuck += status != 0
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                stuck += 1
                break
            time.sleep(0.002)
        if stuck:
            break  # one is enough: a lock held across fork hangs most, 20 s each
    stop.set()
    thread.join(30)
    print(stuck)
"""


@behaviour("robustness.fork-during-control-plane")
@pytest.mark.parametrize("kind", ["register", "install", "toggle", "reorder", "restore"])
def test_a_child_forked_during_control_plane_work_can_use_the_registry(impl, kind):
    forks = 40
    stuck = run_in_fresh_interpreter(impl, FORK_BODY.format(kind=kind, forks=forks), timeout=600)[-1]
    assert int(stuck) == 0, f"a child forked during {kind} hung or failed (forking stops at the first)"


MP_WORKER = '''
import adapter
impl = adapter.load()

def work(value):
    import torch
    with impl.scope():
        impl.register("mp_dsl", "aten", "mul.Tensor", "CPU", lambda *a: True,
                      lambda a, b: torch.full_like(a, float(value)))
        impl.install("aten", "mul.Tensor", "CPU")
        return torch.mul(torch.ones(2), torch.ones(2)).tolist()
'''


@behaviour("robustness.fork-during-control-plane")
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_workers_can_use_the_registry(impl, method, tmp_path):
    (tmp_path / "nr_mp_worker.py").write_text(MP_WORKER)
    results = run_in_fresh_interpreter(impl, f"""
        import multiprocessing, threading
        import nr_mp_worker
        impl = nr_mp_worker.impl
        stop = threading.Event()
        def busy():
            while not stop.is_set():
                with impl.scope():
                    impl.register("bg_dsl", "aten", "mul.Tensor", "CPU", lambda *a: False, lambda a, b: a)
        thread = threading.Thread(target=busy, daemon=True)
        thread.start()
        with multiprocessing.get_context({method!r}).Pool(2) as pool:
            print(pool.map_async(nr_mp_worker.work, range(6)).get(timeout=240))
        stop.set()
        thread.join(30)
    """, timeout=300, extra_path=(tmp_path,))[-1]
    assert results == str([[float(v)] * 2 for v in range(6)])


# ---- an op defined after its override was registered ----------------------------------

LATE_NS = "_native_registry_late_py"


@behaviour("validation.composite-implicit-refused-at-install")
@pytest.mark.parametrize("how", ["install", "install_all"])
def test_an_op_defined_composite_after_registration_is_refused_at_install(impl, how):
    """Registered at CPU before the op exists; the op then defined with only
    a CompositeImplicitAutograd kernel: a router at CPU would take it out of
    autograd, so installing is refused as registering would have been."""
    impl.allow_namespace(LATE_NS)
    impl.register("late_dsl", LATE_NS, "late", "CPU", lambda *a, **k: False, lambda x: x)
    lib = torch.library.Library(LATE_NS, "DEF")
    try:
        lib.define("late(Tensor x) -> Tensor")
        lib.impl("late", lambda x: x * 2, "CompositeImplicitAutograd")
        with pytest.raises(ValueError) as error:
            if how == "install":
                impl.install(LATE_NS, "late", "CPU")
            else:
                impl.install_all()
        message = str(error.value)
        assert f"{LATE_NS}::late" in message and "CompositeImplicitAutograd" in message, message
        assert "AutogradCPU" in message, "the message says where to register instead"
        assert not impl.router_installed(LATE_NS, "late", "CPU")
        x = torch.ones(2, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "an autograd kernel was not registered ..."
            getattr(torch.ops, LATE_NS).late(x).sum().backward()
        assert x.grad.tolist() == [2.0, 2.0]
    finally:
        lib._destroy()
