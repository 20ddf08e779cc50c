"""registry.explain through the adapter (feature explain): for the graph a
call would reach, each node with what decided it (a filter, its cond, a
runtime check that would be asked, the coverage check) and the kernel that
would run, without running an impl or a runtime check, and changing
nothing. Beyond upstream (issue 30): `recommended`, feature `explain`."""

from __future__ import annotations

import re
from unittest.mock import MagicMock

import pytest
import torch

from conftest import behaviour, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, dispatcher_state, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY
from test_robustness import REDEF_SETUP, script

MUL = torch.ops.aten.mul.Tensor


def forbidden():
    return MagicMock(side_effect=AssertionError("explain must run no impl"))


def verdicts(explained):
    return [node.verdict for node in explained.nodes]


def raising_cond(message):
    def cond(*_args, **_kwargs):
        raise RuntimeError(message)
    return cond


@behaviour("explain.node-verdicts-and-kernel", "explain.changes-nothing")
def test_explain_gives_each_node_s_verdict_and_the_kernel_and_runs_no_impl(impl):
    first, second, third = (MagicMock(return_value=False), MagicMock(return_value=True),
                            MagicMock(return_value=True))
    body = MagicMock(side_effect=lambda a, b: torch.full_like(a, 7.0))
    impl.register("first", *KEY, first, forbidden())
    impl.register("second", *KEY, second, body)
    impl.register("third", *KEY, third, forbidden())
    impl.install(*KEY)
    graph = impl.graph(*KEY)
    before = dispatcher_state()
    explained = impl.explain(MUL, A, B)
    assert explained.op == "aten::mul.Tensor"  # its overload named
    assert explained.dispatch_key == "CPU"
    assert [n.node_id for n in explained.nodes] == [n.node_id for n in graph]
    assert [n.dsl_name for n in explained.nodes] == ["first", "second", "third"]
    assert verdicts(explained) == ["declined", "accepted", "not reached"], str(explained)
    assert explained.kernel.kind == "impl"
    assert explained.kernel.node_id == graph[1].node_id
    assert first.call_count == 1 and second.call_count == 1
    third.assert_not_called()
    body.assert_not_called()
    assert dispatcher_state() == before
    assert len(impl.graph(*KEY)) == 3
    assert torch.equal(mul(), torch.full_like(A, 7.0))
    assert body.call_count == 1


@behaviour("explain.result-read-only")
def test_an_explanation_and_its_entries_cannot_be_changed(impl):
    impl.register("only", *KEY, MagicMock(return_value=False), forbidden())
    impl.install(*KEY)
    explained = impl.explain(MUL, A, B)
    (node,) = explained.nodes
    for record, field, value in [(explained, "dispatch_key", "CUDA"), (explained, "op", "aten::add.Tensor"),
                                 (explained, "kernel", None), (node, "verdict", "accepted"),
                                 (explained.kernel, "kind", "impl")]:
        before = getattr(record, field)
        with pytest.raises(AttributeError):
            setattr(record, field, value)
        assert getattr(record, field) == before, (type(record).__name__, field)


@behaviour("explain.node-verdicts-and-kernel")
def test_every_node_after_the_deciding_one_is_not_reached_and_names_what_decided(impl):
    later = [MagicMock(return_value=True) for _ in range(3)]
    impl.register("taker", *KEY, lambda a, b: True, forbidden())
    for k, cond in enumerate(later):
        impl.register(f"after_{k}", *KEY, cond, forbidden())
    impl.install(*KEY)
    taker = impl.graph(*KEY)[0]
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["accepted"] + ["not reached"] * 3, str(explained)
    assert all(taker.node_id in n.detail for n in explained.nodes[1:]), str(explained)
    for cond in later:
        cond.assert_not_called()


@behaviour("explain.node-verdicts-and-kernel")
def test_explain_takes_keyword_arguments_and_prints_a_table(impl):
    impl.register("kw_dsl", *KEY, lambda a, b: True, forbidden())
    impl.install(*KEY)
    explained = impl.explain(MUL, A, other=B)
    assert verdicts(explained) == ["accepted"]
    table = str(explained)
    assert "kw_dsl" in table and "accepted" in table and "CPU" in table


def cell_offsets(line, cells):
    """Where each of `cells` starts in `line`, found left to right."""
    offsets, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        offsets.append(at)
        at += len(cell)
    return offsets


def column_starts(line):
    """The offsets where a column of `line` starts: its first non-blank, and
    each non-blank after two blanks."""
    first = len(line) - len(line.lstrip())
    return sorted({first, *(i for i in range(2, len(line)) if line[i] != " " and line[i - 2:i] == "  ")})


def check_table(explained):
    table = str(explained)
    lines = table.splitlines()
    assert lines[0].split() == ["explain", explained.op, "at", explained.dispatch_key], table
    for text in (explained.why_key, explained.router, explained.coverage):
        assert text and any(line.endswith(text) for line in lines), (text, table)
    assert all(line == line.rstrip() for line in lines), table
    rows = [next(k for k, line in enumerate(lines) if line.split()[:2] == [str(i + 1), node.node_id])
            for i, node in enumerate(explained.nodes)]
    assert rows == list(range(rows[0], rows[0] + len(rows))), table  # one row per node, in order
    offsets = [cell_offsets(lines[k], [str(i + 1), n.node_id, n.dsl_name, n.verdict, n.detail])
               for i, (k, n) in enumerate(zip(rows, explained.nodes))]
    assert all(o == offsets[0] for o in offsets), table
    assert column_starts(lines[rows[0] - 1]) == offsets[0], table  # the header's columns
    starts, header = offsets[0], lines[rows[0] - 1]
    for c in range(len(starts) - 1):  # two blanks after each column's widest cell
        cells = [header[starts[c]:starts[c + 1]].rstrip()] + [
            [str(i + 1), n.node_id, n.dsl_name, n.verdict][c] for i, n in enumerate(explained.nodes)]
        assert starts[c + 1] - starts[c] - max(map(len, cells)) == 2, table
    kernel = " ".join(lines[rows[-1] + 1:])
    assert explained.kernel.kind in kernel and explained.kernel.detail in kernel, table
    assert kernel.index(explained.kernel.kind) < kernel.index(explained.kernel.detail), table  # kind first
    if explained.kernel.kind == "impl":
        assert explained.kernel.node_id in kernel and explained.kernel.dsl_name in kernel, table
    return lines


@behaviour("explain.table")
def test_the_table_gives_every_field_with_one_aligned_row_per_node(impl):
    # dsl names shorter than their column's header, node ids longer: both widths count.
    impl.register("a", *KEY, lambda a, b: False, forbidden())
    impl.register("bb", *KEY, lambda a, b: True, forbidden())
    impl.register("c", *KEY, lambda a, b: True, forbidden())
    impl.disable(dsl_names=["c"])
    impl.install(*KEY)
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["declined", "accepted", "disabled"], str(explained)
    check_table(explained)


@behaviour("explain.table")
def test_the_table_of_a_graph_without_a_router_gives_every_field(impl):
    impl.register("uninstalled_dsl", *KEY, lambda a, b: True, forbidden())
    explained = impl.explain(MUL, A, B, dispatch_key="CPU")
    assert explained.kernel.kind == "no router"
    check_table(explained)


@behaviour("explain.table")
def test_no_line_of_the_table_ends_in_a_blank_even_where_a_cond_s_message_does(impl):
    # The message ends both the raising node's row (its detail) and the kernel's line.
    impl.register("raising", *KEY, raising_cond("cond exploded 5150  "), forbidden())
    impl.install(*KEY)
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["raised"], str(explained)
    table = str(explained)
    assert "cond exploded 5150" in table
    assert all(line == line.rstrip() for line in table.splitlines()), table


# A list with an empty item: a comma first, or after a blank.
EMPTY_ITEM = re.compile(r"(^|\s),")


@behaviour("explain.disabled-by-filter")
def test_explain_names_the_filter_entry_that_disabled_a_node(impl):
    for dsl in ("off_dsl", "on_dsl", "keyed_dsl"):
        impl.register(dsl, *KEY, lambda a, b: True, forbidden())
    impl.install(*KEY)
    impl.disable(dsl_names=["off_dsl"])
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["disabled", "accepted", "not reached"], str(explained)
    assert "off_dsl" in explained.nodes[0].detail
    # Only the entry that names it: no op symbol or dispatch key entry exists yet.
    assert "mul.Tensor" not in explained.nodes[0].detail, str(explained)
    assert not EMPTY_ITEM.search(explained.nodes[0].detail), str(explained)
    impl.disable(op_symbols=["mul.Tensor"])
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["disabled"] * 3, str(explained)
    assert "mul.Tensor" in explained.nodes[1].detail
    assert "on_dsl" not in explained.nodes[1].detail, str(explained)  # no dsl entry names it
    assert not EMPTY_ITEM.search(explained.nodes[1].detail), str(explained)
    # Two entries name the first node now: both, and no empty item between.
    assert "off_dsl" in explained.nodes[0].detail and "mul.Tensor" in explained.nodes[0].detail
    assert not EMPTY_ITEM.search(explained.nodes[0].detail), str(explained)
    assert explained.kernel.kind == "fallback"


@behaviour("explain.unconditional-masked")
def test_explain_says_an_unconditional_node_is_masked_only_under_the_mask(impl):
    impl.register("always_dsl", *KEY, None, forbidden(), unconditional_override=True)
    impl.install(*KEY)
    impl.disable(dsl_names=["always_dsl"])
    outside = impl.explain(MUL, A, B)
    assert verdicts(outside) == ["accepted"]
    assert "always_dsl" in outside.nodes[0].detail, str(outside)  # named, and why it stays
    with impl.unconditional_masked():
        explained = impl.explain(MUL, A, B)
        assert verdicts(explained) == ["masked"], str(explained)
        assert "always_dsl" in explained.nodes[0].detail
        assert explained.kernel.kind == "fallback"


@behaviour("explain.cond-raised")
def test_explain_reports_a_raising_cond_with_its_message(impl):
    later = MagicMock(return_value=True)
    impl.register("raising", *KEY, raising_cond("cond exploded 4711"), forbidden())
    impl.register("later", *KEY, later, forbidden())
    impl.install(*KEY)
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["raised", "not reached"], str(explained)
    assert "cond exploded 4711" in explained.nodes[0].detail
    assert explained.kernel.kind == "raises"
    later.assert_not_called()


@behaviour("explain.cond-raised")
def test_every_node_after_a_raising_cond_is_not_reached_and_names_that_cond(impl):
    impl.register("raising", *KEY, raising_cond("cond exploded 6120"), forbidden())
    impl.register("later_a", *KEY, lambda a, b: True, forbidden())
    impl.register("later_b", *KEY, lambda a, b: True, forbidden())
    impl.install(*KEY)
    raising = impl.graph(*KEY)[0]
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["raised", "not reached", "not reached"], str(explained)
    assert all(raising.node_id in n.detail for n in explained.nodes[1:]), str(explained)


@behaviour("explain.interrupts-propagate")
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_raised_by_a_cond_leaves_explain(impl, interrupt):
    def cond(*_args, **_kwargs):
        raise interrupt("stop 4711")
    impl.register("interrupting", *KEY, cond, forbidden())
    impl.install(*KEY)
    with pytest.raises(interrupt, match="stop 4711"):
        impl.explain(MUL, A, B)


@behaviour("explain.runtime-check-not-asked")
def test_explain_does_not_ask_the_runtime_check_and_explains_the_nodes_after_it(impl):
    runtime = MagicMock(return_value=True)
    impl.register("jit", *KEY, lambda a, b: True, forbidden(), try_initialize_runtime=runtime)
    impl.register("declining", *KEY, lambda a, b: False, forbidden())
    impl.register("backup", *KEY, lambda a, b: True, forbidden())
    impl.install(*KEY)
    graph = impl.graph(*KEY)
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["runtime check", "declined", "accepted"], str(explained)
    runtime.assert_not_called()
    assert explained.kernel.kind == "impl"
    assert explained.kernel.node_id == graph[0].node_id
    assert graph[2].node_id in explained.kernel.detail


def explained_graph(impl, *nodes):
    """(graph, explanation of mul) once `nodes`, each (dsl name, whether its
    cond accepts, whether a runtime check is behind it), are installed. No
    impl and no runtime check may run."""
    for dsl, accepts, runtime in nodes:
        impl.register(dsl, *KEY, lambda a, b, accepts=accepts: accepts, forbidden(),
                      try_initialize_runtime=forbidden() if runtime else None)
    impl.install(*KEY)
    return impl.graph(*KEY), impl.explain(MUL, A, B)


@behaviour("explain.runtime-check-not-asked")
def test_a_node_behind_a_runtime_check_that_alone_accepts_is_the_kernel(impl):
    graph, explained = explained_graph(impl, ("declining", False, False), ("jit_only", True, True),
                                       ("declining_too", False, False))
    assert verdicts(explained) == ["declined", "runtime check", "declined"], str(explained)
    assert (explained.kernel.kind, explained.kernel.node_id, explained.kernel.dsl_name) == (
        "impl", graph[1].node_id, "jit_only"), str(explained)
    assert KEY[2] in explained.kernel.detail, str(explained)  # else the op's own kernel at CPU
    # No node after it accepts: what runs if its runtime is unavailable is the op's own
    # kernel, and the detail names no impl for it.
    assert "own kernel" in explained.kernel.detail, str(explained)
    assert "impl" not in explained.kernel.detail, str(explained)


@behaviour("explain.no-router", "explain.runtime-check-not-asked")
def test_explain_without_a_router_says_what_runs_once_installed_if_the_runtime_is_unavailable(impl):
    impl.register("declining", *KEY, lambda a, b: False, forbidden())
    impl.register("jit_only", *KEY, lambda a, b: True, forbidden(), try_initialize_runtime=forbidden())
    (_, jit), explained = impl.graph(*KEY), impl.explain(MUL, A, B)
    assert verdicts(explained) == ["declined", "runtime check"], str(explained)
    assert explained.kernel.kind == "no router", str(explained)
    detail = explained.kernel.detail
    assert jit.node_id in detail, str(explained)  # once installed, its impl if its runtime is ready
    assert "own kernel" in detail[detail.index(jit.node_id):], str(explained)  # else the op's own


@behaviour("explain.runtime-check-not-asked")
def test_the_kernel_s_detail_names_each_later_node_in_the_order_they_would_be_tried(impl):
    graph, explained = explained_graph(impl, ("jit_a", True, True), ("jit_b", True, True),
                                       ("backup", True, False))
    assert verdicts(explained) == ["runtime check", "runtime check", "accepted"], str(explained)
    assert explained.kernel.node_id == graph[0].node_id
    detail = explained.kernel.detail
    assert graph[1].node_id in detail and graph[2].node_id in detail, str(explained)
    assert detail.index(graph[1].node_id) < detail.index(graph[2].node_id), str(explained)


@behaviour("explain.fallback-when-none-accepts")
def test_explain_names_the_op_s_own_kernel_when_no_node_takes_the_call(impl):
    impl.register("declining", *KEY, lambda a, b: False, forbidden())
    impl.install(*KEY)
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["declined"]
    assert explained.kernel.kind == "fallback", str(explained)
    assert explained.kernel.node_id is None
    assert KEY[2] in explained.kernel.detail, str(explained)  # the key whose kernel was captured
    # At a key that was a fallthrough before the router, the next key's kernel runs; at a
    # key where the op had no kernel before it (aten has none at XLA without torch_xla), a
    # call no node takes raises: the kind says which.
    for key, kind in (("AutocastCPU", "fallthrough"), ("XLA", "no kernel")):
        impl.register("declining", KEY[0], KEY[1], key, lambda a, b: False, forbidden())
        impl.install(KEY[0], KEY[1], key)
        explained = impl.explain(MUL, A, B, dispatch_key=key)
        assert explained.kernel.kind == kind, str(explained)
        assert explained.kernel.node_id is None and key in explained.kernel.detail, str(explained)


@behaviour("explain.no-router")
def test_explain_says_a_graph_without_a_router_leaves_the_call_to_the_op(impl):
    impl.register("not_installed", *KEY, lambda a, b: True, forbidden())
    explained = impl.explain(MUL, A, B)
    assert explained.kernel.kind == "no router", str(explained)
    assert not impl.router_installed(*KEY)
    (node,) = impl.graph(*KEY)
    assert node.node_id in explained.kernel.detail, str(explained)  # what it would run once installed
    assert explained.kernel.node_id is None and explained.kernel.dsl_name is None, str(explained)


@behaviour("explain.no-router")
def test_explain_of_a_graph_without_a_router_says_that_once_installed_the_call_would_raise(impl):
    impl.register("declines", *KEY, lambda a, b: False, forbidden())
    impl.register("raises", *KEY, raising_cond("cond exploded 5812"), forbidden())
    explained = impl.explain(MUL, A, B)
    assert explained.kernel.kind == "no router", str(explained)
    assert verdicts(explained) == ["declined", "raised"], str(explained)
    assert "cond exploded 5812" in explained.kernel.detail, str(explained)


@behaviour("explain.router-state")
def test_explain_says_whether_the_router_is_absent_dormant_or_active(impl):
    impl.register("stateful", *KEY, lambda a, b: False, forbidden())
    never_installed = explained = impl.explain(MUL, A, B)
    assert explained.router.startswith("absent"), str(explained)
    assert "own kernel" in explained.kernel.detail, str(explained)
    impl.install(*KEY)
    explained = impl.explain(MUL, A, B)
    assert explained.router == "active", str(explained)
    impl.disable(dsl_names=["stateful"])
    explained = impl.explain(MUL, A, B)
    assert explained.router.startswith("dormant"), str(explained)
    # Installed again with its chain empty, the graph has no router: absent
    # still, in words other than those of a graph never installed.
    impl.install(*KEY)
    assert not impl.router_installed(*KEY)
    explained = impl.explain(MUL, A, B)
    assert explained.router.startswith("absent"), str(explained)
    assert explained.router != never_installed.router, str(explained)


@behaviour("explain.coverage-check")
def test_explain_reports_the_coverage_check(impl):
    cond = MagicMock(return_value=True)
    with impl.coverage_check(lambda op, key, args, kwargs: True):
        impl.register("covered_dsl", *KEY, cond, forbidden())
        impl.install(*KEY)
        explained = impl.explain(MUL, A, B)
        impl.register("covered_too", *KEY, cond, forbidden())
        impl.install(*KEY)
        explained = impl.explain(MUL, A, B)
        assert verdicts(explained) == ["not reached", "not reached"], str(explained)
        assert all("coverage" in n.detail for n in explained.nodes), str(explained)
        assert explained.kernel.kind == "fallback"
        assert KEY[2] in explained.kernel.detail, str(explained)  # the op's own kernel at CPU
        assert "covered" in explained.coverage and "not covered" not in explained.coverage
        cond.assert_not_called()

    with impl.coverage_check(lambda op, key, args, kwargs: False):
        impl.install(*KEY)
        explained = impl.explain(MUL, A, B)
        assert verdicts(explained) == ["accepted", "not reached"], str(explained)
        assert "not covered" in explained.coverage
        assert "raise" not in explained.coverage, explained.coverage  # it answered: nothing raised

    def raising(op, key, args, kwargs):
        raise RuntimeError("manifest unreadable 99")

    with impl.coverage_check(raising):
        impl.install(*KEY)
        explained = impl.explain(MUL, A, B)
        assert verdicts(explained) == ["accepted", "not reached"], str(explained)
        assert "manifest unreadable 99" in explained.coverage and "not covered" in explained.coverage
        assert explained.kernel.kind == "impl"

    # Coverage checks switched off: the check is not asked, the conds decide.
    with impl.coverage_check(lambda op, key, args, kwargs: True), impl.aot_enabled(False):
        impl.install(*KEY)
        explained = impl.explain(MUL, A, B)
        assert verdicts(explained) == ["accepted", "not reached"], str(explained)
        assert explained.kernel.kind == "impl"
        assert "not asked" in explained.coverage


@behaviour("explain.chooses-the-call-key")
def test_explain_picks_the_highest_key_of_the_call_with_a_graph(impl):
    impl.register("backend", *KEY, lambda a, b: True, forbidden())
    at_backend = impl.explain(MUL, A, B)
    assert at_backend.dispatch_key == "CPU"
    # Why that key: the call's keys passed over on the way to it are named.
    words = re.findall(r"[A-Za-z]+", at_backend.why_key)
    assert "AutogradCPU" in words and "CPU" in words, at_backend.why_key
    impl.register("autograd", "aten", "mul.Tensor", "AutogradCPU", lambda a, b: True, forbidden())
    assert impl.explain(MUL, A, B).dispatch_key == "AutogradCPU"
    at_cpu = impl.explain(MUL, A, B, dispatch_key="CPU")
    assert at_cpu.dispatch_key == "CPU"
    assert [n.dsl_name for n in at_cpu.nodes] == ["backend"]


@behaviour("explain.bad-input")
def test_explain_refuses_a_key_or_op_without_a_graph_naming_it(impl):
    impl.register("only_cpu", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
    impl.register("autograd", "aten", "mul.Tensor", "AutogradCPU", lambda a, b: False, forbidden())
    impl.install(*KEY)
    before = dispatcher_state()
    with pytest.raises(ValueError, match="AutocastCPU") as refused:
        impl.explain(MUL, A, B, dispatch_key="AutocastCPU")
    words = re.findall(r"[A-Za-z]+", str(refused.value))
    assert "CPU" in words and "AutogradCPU" in words, f"the keys with a graph go unnamed: {refused.value}"
    x = torch.ones(1, 2, 2)
    with pytest.raises(ValueError, match="bmm") as refused:
        impl.explain(torch.ops.aten.bmm.default, x, x)
    words = re.findall(r"[A-Za-z]+", str(refused.value))
    assert "none" in words, f"that the op has a graph nowhere goes unsaid: {refused.value}"
    assert "CPU" in words, f"the keys the call visits go unnamed: {refused.value}"
    assert dispatcher_state() == before
    assert torch.equal(mul(), torch.full_like(A, 7.0))


@behaviour("explain.unpublished-changes")
def test_explain_of_a_graph_changed_since_its_install_tells_what_the_router_does_now(impl):
    later = MagicMock(return_value=True)
    impl.register("installed_dsl", *KEY, lambda a, b: False, forbidden())
    impl.install(*KEY)
    impl.register("later_dsl", *KEY, later, forbidden())  # not installed since
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["declined", "not published"], str(explained)
    assert explained.kernel.kind == "fallback", str(explained)
    later.assert_not_called()


@behaviour("explain.unpublished-changes")
def test_explain_of_a_graph_unchanged_since_its_install_asks_for_no_install(impl):
    impl.register("declining", *KEY, lambda a, b: False, forbidden())
    impl.register("accepting", *KEY, lambda a, b: True, forbidden())
    impl.install(*KEY)
    explained = impl.explain(MUL, A, B)
    assert verdicts(explained) == ["declined", "accepted"], str(explained)
    assert not any("install" in node.detail for node in explained.nodes), str(explained)


@behaviour("explain.unpublished-changes")
def test_explain_of_a_graph_reordered_since_its_install_lists_the_router_s_order(impl):
    impl.register("first_dsl", *KEY, lambda a, b: False, forbidden())
    impl.register("second_dsl", *KEY, lambda a, b: True, forbidden())
    impl.install(*KEY)
    routed = [n.node_id for n in impl.graph(*KEY)]
    impl.reorder(lambda op, key, graph: list(reversed(graph)))  # not reinstalled
    assert [n.node_id for n in impl.graph(*KEY)] == routed[::-1]
    explained = impl.explain(MUL, A, B)
    assert [n.node_id for n in explained.nodes] == routed, str(explained)  # once each, as routed
    assert verdicts(explained) == ["declined", "accepted"], str(explained)
    assert explained.kernel.node_id == routed[1]
    # A node registered since, after the reordered ones: listed too, once.
    impl.register("third_dsl", *KEY, lambda a, b: True, forbidden())
    explained = impl.explain(MUL, A, B)
    assert [n.dsl_name for n in explained.nodes] == ["first_dsl", "second_dsl", "third_dsl"], str(explained)
    assert verdicts(explained) == ["declined", "accepted", "not published"], str(explained)


@behaviour("explain.native-op")
def test_explain_of_a_native_op_names_its_node(impl):
    impl.register("native_dsl", *KEY, lambda a, b: False, forbidden())
    impl.install(*KEY)
    impl.register("other_dsl", *KEY, lambda a, b: False, forbidden())
    impl.install(*KEY)
    node = impl.graph(*KEY)[0]
    explained = impl.explain(impl.native_op(node), A, B)
    assert [(n.node_id, n.dsl_name, n.verdict) for n in explained.nodes] == [
        (node.node_id, "native_dsl", "native op")]
    assert explained.nodes[0].detail.endswith("enabled")
    assert explained.dispatch_key == KEY[2]
    assert (explained.kernel.kind, explained.kernel.node_id, explained.kernel.dsl_name) == (
        "impl", node.node_id, "native_dsl")
    assert explained.kernel.detail and explained.router and explained.coverage
    assert impl.explain(impl.native_op(node)) == explained, "its arguments are not needed"
    impl.disable(dsl_names=["native_dsl"])
    disabled = impl.explain(impl.native_op(node), A, B)
    assert disabled.nodes[0].detail.endswith("disabled"), str(disabled)
    assert disabled.kernel.kind == "impl"


@behaviour("explain.native-op", "explain.bad-input")
def test_explain_of_a_native_op_whose_override_is_gone_refuses_it_naming_it(impl):
    with impl.scope():
        impl.register("gone_dsl", *KEY, lambda a, b: False, forbidden())
        impl.install(*KEY)
        node = impl.graph(*KEY)[0]
        op = impl.native_op(node)
    before = dispatcher_state()
    with pytest.raises(ValueError, match=re.escape(node.node_id)):
        impl.explain(op, A, B)
    assert dispatcher_state() == before


@behaviour("explain.predicate-conds")
def test_explain_evaluates_predicate_conds_as_the_call_would(impl):
    P = impl.predicates_module()
    impl.register("half_only", *KEY, P.dtype_in(torch.float16), forbidden())
    impl.install(*KEY)
    assert verdicts(impl.explain(MUL, A, B)) == ["declined"]
    half = impl.explain(MUL, A.half(), B.half())
    assert verdicts(half) == ["accepted"], str(half)
    assert half.kernel.kind == "impl"


@behaviour("explain.router-op-gone")
def test_explain_of_a_graph_whose_router_s_op_left_the_dispatcher_says_the_call_raises(impl):
    """The op the router was installed for destroyed and defined again (the
    same schema, a kernel for every backend but none at CPU, where the router
    still is), the graph not installed since: the call raises, and explain
    says so, asking no cond; installed again, it routes."""
    lines = run_in_fresh_interpreter(impl, script(REDEF_SETUP, """
        impl.register("later_dsl", NS, "foo", "CPU", lambda *a: True, lambda x: x * 9)
        impl.install(NS, "foo", "CPU")
        lib._destroy()
        lib = torch.library.Library(NS, "DEF")
        lib.define("foo(Tensor x) -> Tensor")
        lib.impl("foo", lambda x: x + 2, "CompositeExplicitAutograd")
        op = getattr(torch.ops, NS).foo.default
        explained = impl.explain(op, x)
        print("kernel: " + explained.kernel.kind)
        print("verdicts: " + ",".join(n.verdict for n in explained.nodes))
        print("details: " + " | ".join(n.detail for n in explained.nodes))
        print("coverage: " + explained.coverage)
        print("call: " + outcome(op, x))
        impl.install(NS, "foo", "CPU")
        print("after install: " + impl.explain(op, x).kernel.kind + " " + outcome(op, x))
    """), timeout=120)
    results = dict(line.split(": ", 1) for line in lines if ": " in line)
    assert results["call"].startswith("raised"), results  # what explain must foresee
    assert results["kernel"] == "raises", results
    assert results["verdicts"] == "not reached,not reached", results
    details = results["details"].split(" | ")
    assert len(details) == 2 and all("dispatcher" in d for d in details), results  # why not reached
    assert "not asked" in results["coverage"], results
    assert results["after install"] == "impl returned [7.0, 7.0]", results


@behaviour("explain.op-names")
def test_explain_takes_an_op_by_its_name_as_by_its_overload(impl):
    impl.register("named_dsl", *KEY, lambda a, b: False, forbidden())
    impl.register("bmm_dsl", "aten", "bmm", "CPU", lambda a, b: True, forbidden())
    impl.install(*KEY)
    impl.install("aten", "bmm", "CPU")
    by_overload = impl.explain(MUL, A, B)
    assert impl.explain("aten::mul.Tensor", A, B) == by_overload
    x = torch.ones(1, 2, 2)
    unnamed = impl.explain(torch.ops.aten.bmm.default, x, x)
    assert unnamed.op == "aten::bmm", unnamed.op
    for spelled in ("aten::bmm", "aten::bmm.default"):
        assert impl.explain(spelled, x, x) == unnamed, spelled


@behaviour("explain.op-names")
@pytest.mark.parametrize("op,error,named", [
    (torch.ops.aten.mul, TypeError, "aten::mul"),  # the packet: which overload?
    ("mul.Tensor", ValueError, "mul.Tensor"),       # no namespace
    ("aten::", ValueError, "aten::"),
    ("::mul", ValueError, "::mul"),
    (42, TypeError, "int"),
    ("aten::no_such_op.bogus", AttributeError, "'aten::no_such_op.bogus'"),
    ("aten::no_such_op", AttributeError, "'aten::no_such_op'"),  # no dot after it
], ids=["packet", "no-namespace", "no-name", "empty-namespace", "not-an-op", "unknown-overload",
        "unknown-op"])
def test_explain_refuses_an_op_it_cannot_name_naming_it(impl, op, error, named):
    impl.register("named_dsl", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
    impl.install(*KEY)
    before = dispatcher_state()
    with pytest.raises(error, match=re.escape(named)) as refused:
        impl.explain(op, A, B)
    if op is torch.ops.aten.mul:
        assert "overload" in str(refused.value), f"the fix goes unsaid: {refused.value}"
    assert dispatcher_state() == before
    assert torch.equal(mul(), torch.full_like(A, 7.0))


@behaviour("explain.op-names")
def test_explain_refuses_a_dispatch_key_that_is_no_key_name(impl):
    cond = MagicMock(return_value=False)
    impl.register("named_dsl", *KEY, cond, forbidden())
    impl.install(*KEY)
    with pytest.raises(TypeError, match="7"):
        impl.explain(MUL, A, B, dispatch_key=7)
    with pytest.raises(ValueError, match="''"):
        impl.explain(MUL, A, B, dispatch_key="")
    cond.assert_not_called()
