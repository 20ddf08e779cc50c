"""Nodes, registration and validation."""

from __future__ import annotations

import re

import pytest
import torch

from conftest import NS, NS2, behaviour, dispatcher_state


def accept(*a, **k):
    return True


def first(x, *rest, **k):
    return x


@behaviour("nodes.fields-and-defaults")
def test_node_fields_and_defaults(impl):
    node = impl.make_node("test_dsl", "aten", "add.Tensor", "CPU", accept, first, "test_node")
    assert (node.dsl_name, node.lib_symbol, node.op_symbol, node.dispatch_key) == (
        "test_dsl", "aten", "add.Tensor", "CPU")
    assert node.cond_fn is accept and node.impl_fn is first
    assert node.node_id == "test_node"
    assert node.try_initialize_runtime is None
    assert node.unconditional_override is False
    assert node.active is True
    node.active = False  # a node made by hand is a plain record: its fields are settable
    assert node.active is False


@behaviour("nodes.fields-and-defaults")
@pytest.mark.parametrize("form", ["two-positional-then-keywords", "three-positional-then-keywords",
                                  "every-field-positional"])
def test_node_fields_in_mains_other_forms(impl, form):
    make = impl.module._OverrideNode
    if form == "two-positional-then-keywords":
        node = make("test_dsl", "aten", op_symbol="add.Tensor", dispatch_key="CPU", cond_fn=accept,
                    impl_fn=first, node_id="test_node")
    elif form == "three-positional-then-keywords":
        node = make("test_dsl", "aten", "add.Tensor", dispatch_key="CPU", cond_fn=accept,
                    impl_fn=first, node_id="test_node")
    else:
        node = make("test_dsl", "aten", "add.Tensor", "CPU", accept, first, "test_node", True, False, None)
    assert (node.dsl_name, node.lib_symbol, node.op_symbol, node.dispatch_key, node.node_id) == (
        "test_dsl", "aten", "add.Tensor", "CPU", "test_node")
    assert node.cond_fn is accept and node.impl_fn is first
    if form == "every-field-positional":
        assert (node.unconditional_override, node.active, node.try_initialize_runtime) == (True, False, None)


@behaviour("registration.appends-in-order")
def test_registration_appends_in_order_and_installs_nothing(impl):
    impl.register("backend_z", "aten", "mul.Tensor", "CPU", accept, lambda a, b: a + 1)
    impl.register("backend_a", "aten", "mul.Tensor", "CPU", accept, lambda a, b: a + 2)
    nodes = impl.graph("aten", "mul.Tensor", "CPU")
    assert [n.dsl_name for n in nodes] == ["backend_z", "backend_a"]
    assert nodes[0].cond_fn is accept
    assert not impl.router_installed("aten", "mul.Tensor", "CPU")
    assert torch.equal(torch.ops.aten.mul.Tensor(torch.tensor([2.0]), torch.tensor([4.0])),
                       torch.tensor([8.0]))


@behaviour("registration.node-ids-unique")
def test_node_ids_unique_across_teardowns(impl):
    seen = []
    for _ in range(3):
        with impl.scope():
            for _ in range(3):
                impl.register("test_dsl", "aten", "mul.Tensor", "CPU", accept, first)
            seen += [n.node_id for n in impl.graph("aten", "mul.Tensor", "CPU")]
    assert len(seen) == 9 and len(set(seen)) == 9


@behaviour("registration.node-id-names-the-override")
def test_a_node_id_names_its_op_and_dsl(impl):
    impl.register("backend_z", "aten", "mul.Tensor", "CPU", accept, first)
    (node,) = impl.graph("aten", "mul.Tensor", "CPU")
    assert "mul_Tensor" in node.node_id and "backend_z" in node.node_id, node.node_id


@behaviour("namespaces.graph-key-carries-namespace")
def test_graph_key_and_node_carry_the_namespace(impl, namespaces):
    impl.register("test_dsl", NS, "twice", "CPU", accept, first)
    nodes = impl.graph(NS, "twice", "CPU")
    assert len(nodes) == 1 and nodes[0].lib_symbol == NS
    assert impl.graph("aten", "twice", "CPU") == []


@behaviour("validation.disallowed-dispatch-keys")
@pytest.mark.parametrize("bad_key", ["Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"])
def test_disallowed_dispatch_keys(impl, bad_key):
    with pytest.raises(ValueError, match="dispatch_key="):
        impl.register("test_dsl", "aten", "mul.Tensor", bad_key, accept, first)
    assert impl.graph("aten", "mul.Tensor", bad_key) == []


@behaviour("validation.namespace-allowlist")
def test_namespace_off_the_allowlist(impl):
    assert "_native" not in impl.allowed_namespaces()
    with pytest.raises(ValueError, match="is not overridable"):
        impl.register("test_dsl", "_native", "some_op", "CPU", accept, first)


@behaviour("validation.allowlist-refusal-names-allowed")
def test_the_allowlist_refusal_names_every_allowed_namespace(impl, namespaces):
    allowed = impl.allowed_namespaces()
    assert {"aten", NS, NS2} <= allowed
    with pytest.raises(ValueError, match="is not overridable") as raised:
        impl.register("test_dsl", "nr_never_allowed", "twice", "CPU", accept, first)
    for namespace in sorted(allowed):  # each a name of its own, not run into the next
        assert re.search(rf"(?<!\w){re.escape(namespace)}(?!\w)", str(raised.value)), (
            namespace, str(raised.value))


@behaviour("validation.cond-required")
def test_cond_required_unless_unconditional(impl):
    with pytest.raises(ValueError, match="cond must be provided"):
        impl.register("test_dsl", "aten", "mul.Tensor", "CPU", None, first)
    assert impl.graph("aten", "mul.Tensor", "CPU") == []


@behaviour("validation.unconditional-refuses-runtime-init")
def test_unconditional_refuses_runtime_initialization(impl):
    with pytest.raises(ValueError, match="try_initialize_runtime cannot be provided"):
        impl.register("test_dsl", "aten", "mul.Tensor", "CPU", None, first,
                      try_initialize_runtime=lambda: True, unconditional_override=True)


@behaviour("validation.bad-input-changes-nothing")
@pytest.mark.parametrize("bad", [
    {"dispatch_key": "NotADispatchKey"},
    {"dispatch_key": ""},
    {"op_symbol": ""},
    {"dsl_name": ""},
    {"cond": 42},
    {"impl": None},
    {"dispatch_key": "Autograd"},  # an alias key: no kernel runs at it, so no router could
    {"dsl_name": "bad\udc80"},  # a lone surrogate: no UTF-8 spelling, so no C++ string
    {"dsl_name": 3},
    {"op_symbol": "mul."},  # a dot must be followed by an overload name
    {"op_symbol": "mul.Tensor-x"},
])
def test_bad_input_changes_nothing(impl, bad):
    impl.register("kept", "aten", "mul.Tensor", "CPU", lambda *a: False, first)
    impl.install("aten", "mul.Tensor", "CPU")
    before_graph = impl.graph("aten", "mul.Tensor", "CPU")
    before_tables = dispatcher_state()
    args = {"dsl_name": "d", "lib_symbol": "aten", "op_symbol": "mul.Tensor", "dispatch_key": "CPU",
            "cond": accept, "impl": first}
    args.update(bad)
    with pytest.raises((ValueError, TypeError)) as raised:
        impl.register(*args.values())
    for value in bad.values():  # the error names the bad value, where it has a name
        if isinstance(value, str) and value.strip():
            named = value in str(raised.value) or repr(value)[1:-1] in str(raised.value)
            assert named, f"the error does not name {value!r}: {raised.value}"
    assert impl.graph("aten", "mul.Tensor", "CPU") == before_graph
    assert dispatcher_state() == before_tables


@behaviour("validation.undefined-op-fails-at-install")
def test_undefined_op_fails_loudly_at_install(impl, namespaces):
    from conftest import MISSING_NS

    impl.register("test_dsl", MISSING_NS, "twice", "CPU", accept, first)
    with pytest.raises(AttributeError, match="not found; is the namespace"):
        impl.install(MISSING_NS, "twice", "CPU")
    assert not impl.router_installed(MISSING_NS, "twice", "CPU")


@behaviour("namespaces.dsl-operations-per-namespace")
def test_dsl_operations_report_one_namespace(impl, namespaces):
    impl.register("test_dsl", NS, "twice", "CPU", accept, first)
    impl.register("test_dsl", "aten", "mul.Tensor", "CPU", accept, first)
    assert impl.dsl_operations("test_dsl", lib_symbol=NS) == ["twice"]
    assert impl.dsl_operations("test_dsl") == ["mul.Tensor"]
