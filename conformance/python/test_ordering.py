"""Ordering functions and the environment variable that names one."""

from __future__ import annotations

import logging
from unittest.mock import patch

import pytest
import torch

from conftest import behaviour

from fixtures.python.torch_fixtures import STOCK, mul

KEY = ("aten", "mul.Tensor", "CPU")
ENV = "TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN"


def accept(*a, **k):
    return True


def first(x, *rest):
    return x


def alphabetical(op_symbol, dispatch_key, graph):
    return sorted(graph, key=lambda n: n.dsl_name)


@behaviour("ordering.user-function-reorders")
def test_ordering_function_reorders_graphs(impl):
    for dsl in ("dsl_c", "dsl_a", "dsl_b"):
        impl.register(dsl, *KEY, accept, first)
    impl.register("dsl_b", "aten", "bmm", "CPU", accept, first)
    impl.register("dsl_a", "aten", "bmm", "CPU", accept, first)
    assert [n.dsl_name for n in impl.graph(*KEY)] == ["dsl_c", "dsl_a", "dsl_b"]
    seen = []

    def recording(op_symbol, dispatch_key, graph):
        seen.append((op_symbol, dispatch_key))
        return alphabetical(op_symbol, dispatch_key, graph)

    impl.reorder(recording)
    assert [n.dsl_name for n in impl.graph(*KEY)] == ["dsl_a", "dsl_b", "dsl_c"]
    assert [n.dsl_name for n in impl.graph("aten", "bmm", "CPU")] == ["dsl_a", "dsl_b"]
    assert sorted(seen) == [("bmm", "CPU"), ("mul.Tensor", "CPU")]


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@behaviour("ordering.failure-keeps-graph")
def test_failing_ordering_function_keeps_graph_and_warns(impl):
    impl.register("test_dsl", *KEY, accept, first)
    before = impl.graph(*KEY)

    def failing(op_symbol, dispatch_key, graph):
        raise ValueError("Test exception")

    # On the implementation's own logger, as assertLogs does: PyTorch's
    # loggers do not propagate to the root logger.
    logger = logging.getLogger(impl.log_name)
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        impl.reorder(failing)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    records = handler.records
    assert len(records) == 1
    assert "Graph transformation failed" in records[0].getMessage()
    assert impl.graph(*KEY) == before


@behaviour("ordering.env-var-unset")
def test_env_var_unset_gives_none(impl):
    get = impl.user_ordering_fn()
    with patch.dict("os.environ", {}, clear=True):
        get.cache_clear()
        try:
            assert get() is None
        finally:
            get.cache_clear()


@behaviour("ordering.env-var-unresolvable")
@pytest.mark.parametrize("name", ["nonexistent.module.function", "os.sep"])  # missing; not callable
def test_env_var_unresolvable_raises(impl, name):
    get = impl.user_ordering_fn()
    with patch.dict("os.environ", {ENV: name}):
        get.cache_clear()
        try:
            with pytest.raises(ValueError, match="Could not resolve"):
                get()
        finally:
            get.cache_clear()


@behaviour("ordering.env-var-unresolvable-says-why")
@pytest.mark.parametrize("name, cause", [("nonexistent_module_nr.function", ModuleNotFoundError),
                                         ("os.sep", TypeError)])
def test_env_var_unresolvable_error_is_chained_to_its_cause(impl, name, cause):
    get = impl.user_ordering_fn()
    with patch.dict("os.environ", {ENV: name}):
        get.cache_clear()
        try:
            with pytest.raises(ValueError, match="Could not resolve") as raised:
                get()
        finally:
            get.cache_clear()
    assert type(raised.value.__cause__) is cause, repr(raised.value.__cause__)


@behaviour("ordering.env-var-resolves")
def test_env_var_names_the_ordering_function(impl):
    import os.path

    get = impl.user_ordering_fn()
    # A dotted module path: the function is the name after the last dot.
    with patch.dict("os.environ", {ENV: "os.path.join"}):
        get.cache_clear()
        try:
            assert get() is os.path.join
        finally:
            get.cache_clear()


def fill(value):
    return lambda a, *rest: torch.full_like(a, value)


def reverse(op_symbol, dispatch_key, graph):
    return list(reversed(graph))


@behaviour("ordering.reregister-keeps-filters")
@pytest.mark.parametrize("how", ["reorder-reregister", "install-all"])
def test_reinstalling_keeps_disabled_nodes_disabled(impl, how):
    impl.register("d", *KEY, accept, fill(7.0))
    impl.register("e", *KEY, lambda *a: False, fill(8.0))
    impl.install(*KEY)
    impl.disable(dsl_names="d")
    assert torch.equal(mul(), STOCK)
    if how == "reorder-reregister":
        impl.reorder(reverse, reregister=True)  # the graph changes, so it is reinstalled
    else:
        impl.install_all()
    assert torch.equal(mul(), STOCK), "a reinstall brought a disabled override back"
    assert [n.active for n in impl.graph(*KEY) if n.dsl_name == "d"] == [False]
    impl.enable(dsl_names="d")
    assert torch.equal(mul(), torch.tensor([7.0, 7.0]))


def logged_warnings(impl, action):
    """Records of WARNING or above on the implementation's logger while
    `action` runs."""
    logger = logging.getLogger(impl.log_name)
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        action()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return handler.records


@behaviour("ordering.non-list-keeps-graph")
@pytest.mark.parametrize("junk", [None, "junk", (), 42])
def test_ordering_function_returning_a_non_list_keeps_the_graph(impl, junk):
    impl.register("test_dsl", *KEY, accept, first)
    before = impl.graph(*KEY)
    records = logged_warnings(impl, lambda: impl.reorder(lambda op, key, graph: junk))
    assert len(records) == 1, [r.getMessage() for r in records]
    assert impl.graph(*KEY) == before


class Unexpected(Exception):
    pass


@behaviour("ordering.unexpected-exception-keeps-graph")
@pytest.mark.parametrize("error", [KeyError("k"), Unexpected("u"), ZeroDivisionError("z")])
def test_ordering_function_raising_an_unexpected_type_keeps_the_graph(impl, error):
    impl.register("test_dsl", *KEY, accept, first)
    before = impl.graph(*KEY)

    def failing(op_symbol, dispatch_key, graph):
        raise error

    records = logged_warnings(impl, lambda: impl.reorder(failing))
    assert len(records) == 1 and records[0].levelno >= logging.WARNING
    assert "aten::mul.Tensor" in records[0].getMessage() or "mul.Tensor" in records[0].getMessage()
    assert impl.graph(*KEY) == before


@behaviour("ordering.unexpected-exception-keeps-graph")
def test_keyboard_interrupt_in_an_ordering_function_propagates(impl):
    impl.register("test_dsl", *KEY, accept, first)
    before = impl.graph(*KEY)

    def interrupted(op_symbol, dispatch_key, graph):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        impl.reorder(interrupted)
    assert impl.graph(*KEY) == before
