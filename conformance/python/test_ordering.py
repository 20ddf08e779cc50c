"""Ordering functions and the environment variable that names one."""

from __future__ import annotations

import logging
from unittest.mock import patch

import pytest

from conftest import behaviour

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
def test_env_var_unresolvable_raises(impl):
    get = impl.user_ordering_fn()
    with patch.dict("os.environ", {ENV: "nonexistent.module.function"}):
        get.cache_clear()
        try:
            with pytest.raises(ValueError, match="Could not resolve"):
                get()
        finally:
            get.cache_clear()
