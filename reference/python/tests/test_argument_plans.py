"""The argument plan a Python cond or impl keeps per schema (argument_plan.cpp):
the forms it hands on stay torch.library's when one node sees calls that pass
different keyword arguments, when the plan's schema is removed and its op
defined again with another, and on an out= overload."""

from __future__ import annotations

import pytest
import torch

NS = "nr_argument_plans"


def recording(seen: list, answer: bool = False):
    def cond(*args, **kwargs):
        seen.append((tuple("Tensor" if isinstance(a, torch.Tensor) else a for a in args),
                     {k: "Tensor" if isinstance(v, torch.Tensor) else v
                      for k, v in kwargs.items()}))
        return answer
    return cond


def test_one_node_hands_on_each_calls_own_keyword_arguments(reg):
    # empty_like has five keyword-only arguments, all defaulting to None: a
    # call passes only those it gives, and the kwnames a plan keeps per set of
    # passed keywords must not leak from one call into the next.
    seen = []
    reg.register_op_override("test_dsl", "aten", "empty_like", "CPU", recording(seen),
                             lambda *a, **k: None)
    reg.register_all_overrides()
    x = torch.ones(2, 2, 1, 1)
    empty_like = torch.ops.aten.empty_like.default
    empty_like(x, dtype=torch.float16)
    empty_like(x, memory_format=torch.channels_last)
    empty_like(x)
    empty_like(x, layout=torch.strided, memory_format=torch.channels_last)
    empty_like(x, dtype=torch.float16)
    assert seen == [
        (("Tensor",), {"dtype": torch.float16}),
        (("Tensor",), {"memory_format": torch.channels_last}),
        (("Tensor",), {}),
        (("Tensor",), {"layout": torch.strided, "memory_format": torch.channels_last}),
        (("Tensor",), {"dtype": torch.float16}),
    ]


def test_a_positional_argument_at_its_default_before_a_given_one_is_passed(reg):
    seen = []
    reg.register_op_override("test_dsl", "aten", "topk", "CPU", recording(seen),
                             lambda *a, **k: None)
    reg.register_all_overrides()
    x = torch.arange(5.0)
    torch.ops.aten.topk.default(x, 2, -1, True, False)  # dim, largest at their defaults
    torch.ops.aten.topk.default(x, 2, -1, True, True)
    torch.ops.aten.topk.default(x, 2, 0)
    assert seen == [(("Tensor", 2, -1, True, False), {}), (("Tensor", 2), {}),
                    (("Tensor", 2, 0), {})]


def test_an_out_overload_gets_out_as_a_keyword(reg):
    seen = []
    reg.register_op_override("test_dsl", "aten", "add.out", "CPU", recording(seen),
                             lambda *a, **k: None)
    reg.register_all_overrides()
    out = torch.empty(2)
    torch.add(torch.ones(2), torch.ones(2), out=out)
    torch.add(torch.ones(2), torch.ones(2), alpha=3, out=out)
    assert seen == [(("Tensor", "Tensor"), {"out": "Tensor"}),
                    (("Tensor", "Tensor"), {"alpha": 3, "out": "Tensor"})]
    assert torch.equal(out, torch.full((2,), 4.0))


def test_a_node_follows_its_op_when_the_op_is_defined_again_differently(reg):
    # The node (and its plan) outlives the op's schema: the library that
    # defined it goes, another defines the same name with other arguments.
    # A kernel of a third library keeps the op's dispatcher entry, so the new
    # schema sits where the old one was; the node's cond must get the new
    # schema's forms, not the old plan's.
    reg.allow_namespace(NS)
    seen = []
    reg.register_op_override("test_dsl", NS, "scale", "CPU", recording(seen),
                             lambda *a, **k: None)
    key = (NS, "scale", "CPU")
    x = torch.ones(2)

    def scale(*args, **kwargs):  # the op of the library now defining it
        return torch.ops.nr_argument_plans.scale(*args, **kwargs)

    def first():
        assert torch.equal(scale(x, 3), x * 3)

    def second():
        assert torch.equal(scale(x, factor=4.0), x * 4)
        scale(x, k=3)

    versions = [("scale(Tensor x, int k=2, int j=5) -> Tensor", lambda x, k=2, j=5: x * k, first),
                ("scale(Tensor x, *, float factor=1.0, int k=2) -> Tensor",
                 lambda x, *, factor=1.0, k=2: x * factor, second)]
    keeps_the_entry = None
    try:
        for schema, kernel, calls in versions:
            lib = torch.library.Library(NS, "DEF")
            try:
                lib.define(schema)
                lib.impl("scale", kernel, "CompositeExplicitAutograd")
                if keeps_the_entry is None:
                    keeps_the_entry = torch.library.Library(NS, "IMPL")
                    keeps_the_entry.impl("scale", lambda *a, **k: None, "Meta")
                if calls is second:
                    # The node's `_native` op keeps the schema it was defined
                    # with: installing it for the op defined again differently
                    # is refused, naming the op (issue 23), rather than
                    # routing through a stale plan or schema.
                    with pytest.raises(AttributeError, match="scale changed since"):
                        reg._C.install_graph(key, True)
                    continue
                reg._C.install_graph(key, True)
                try:
                    calls()
                finally:
                    reg._C.uninstall_graph(key)
            finally:
                lib._destroy()
    finally:
        if keeps_the_entry is not None:
            keeps_the_entry._destroy()
    assert seen == [(("Tensor", 3), {})]  # the refused install saw no call
