"""Model-based teardown: a Hypothesis state machine drives random sequences of
register / disable / re-enable / reorder / install / policy / mask / snapshot /
restore through the Python API against a pure-Python model of the registry.

After every step the real ops (called through the dispatcher, Python conds,
C++ predicates, the namespaces' composite kernels calling back into a routed
aten::mul) return what the model predicts, router states and graph orders
match, and a step the model says must fail fails and changes nothing. After a
restore, the dispatch tables of every touched op equal those recorded when the
snapshot was taken; after each run, the pristine ones, `_native` ops included.

Steps per run come from a Hypothesis profile: "reliability" (the default, for
CI) or "thorough" (NR_HYPOTHESIS_PROFILE=thorough, for reference/tests/reliability/run).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

import native_registry.registry as registry
from native_registry import _C, _unconditional_masked
from native_registry import predicates as P
from conftest import MISSING_NS, NS, NS2, dispatcher_state
from fixtures.python.torch_fixtures import live_native_ops

settings.register_profile("reliability", max_examples=60, stateful_step_count=50, deadline=None,
                          derandomize=True,
                          database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=300, stateful_step_count=80, deadline=None,
                          database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(os.environ.get("NR_HYPOTHESIS_PROFILE", "reliability"))

MUL = ("aten", "mul.Tensor", "CPU")
ADD = ("aten", "add.Tensor", "CPU")
TWICE1 = (NS, "twice", "CPU")
TWICE2 = (NS2, "twice", "CPU")
MISSING = (MISSING_NS, "twice", "CPU")  # allowlisted; its op does not exist
KEYS = [MUL, ADD, TWICE1, TWICE2, MISSING]
DSLS = ["dsl_a", "dsl_b", "dsl_c"]
CONDS = ["always", "never", "small", "predicate_small", "unconditional"]

# Two inputs per op: conds tell them apart by size.
SMALL = (torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
LARGE = (torch.arange(1.0, 6.0), torch.full((5,), 3.0))

steps_run = 0


def watched_tables() -> dict[str, str]:
    """The watched ops' kernels and computed tables, and every live `_native` op."""
    state = dispatcher_state()
    state["_native ops"] = "\n".join(live_native_ops())
    return state


@dataclass
class ModelNode:
    dsl: str
    key: tuple
    cond: str
    value: float

    def takes(self, x: torch.Tensor) -> bool:
        if self.cond in ("always", "unconditional"):
            return True
        if self.cond == "never":
            return False
        return x.numel() <= 2  # "small" and "predicate_small"

    @property
    def unconditional(self) -> bool:
        return self.cond == "unconditional"


class ModelError(Exception):
    """The model says the real call must raise AttributeError (an op the
    dispatcher lacks would need a router) and change nothing."""


@dataclass
class Model:
    nodes: list = field(default_factory=list)  # ModelNode, by registration index
    graphs: dict = field(default_factory=dict)  # key -> [node index]
    by_dsl: dict = field(default_factory=dict)  # name -> [key], as the C++ indexes
    by_op: dict = field(default_factory=dict)
    by_dk: dict = field(default_factory=dict)
    off_dsl: set = field(default_factory=set)
    off_op: set = field(default_factory=set)
    off_dk: set = field(default_factory=set)
    installed: set = field(default_factory=set)
    routers: dict = field(default_factory=dict)  # key -> published [node index]
    policy: str = "keep_dormant"
    mask: int = 0

    # ---- the registry's rules ----

    def enabled(self, n: int) -> bool:
        node = self.nodes[n]
        off = node.dsl in self.off_dsl or node.key[1] in self.off_op or node.key[2] in self.off_dk
        return not off or (node.unconditional and self.mask == 0)

    def chain(self, key) -> list:
        return [n for n in self.graphs.get(key, []) if self.enabled(n)]

    def publish(self, key, reinstall: bool = False) -> None:
        chain = self.chain(key)
        if not chain:
            if key in self.routers:
                if reinstall or self.policy == "remove":
                    del self.routers[key]
                else:
                    self.routers[key] = []
            return
        if key == MISSING:
            raise ModelError(key)
        self.routers[key] = chain

    def install_graph(self, key) -> None:
        self.publish(key)
        self.installed.add(key)

    def republish(self, keys) -> None:
        # All or nothing: every router it would need must be possible first.
        for key in keys:
            if key in self.installed and key not in self.routers and self.chain(key):
                if key == MISSING:
                    raise ModelError(key)
        for key in sorted(keys):
            if key in self.installed:
                self.publish(key)

    def mask_changes(self) -> list:
        # The installed graphs holding an unconditional node the filters name:
        # the only chains the mask changes, and all it republishes.
        def off(n):
            node = self.nodes[n]
            return node.dsl in self.off_dsl or node.key[1] in self.off_op or node.key[2] in self.off_dk
        return sorted(key for key in self.installed
                      if any(self.nodes[n].unconditional and off(n) for n in self.graphs.get(key, [])))

    def named(self, dsl=(), ops=(), dks=()) -> set:
        keys = set()
        for index, names in ((self.by_dsl, dsl), (self.by_op, ops), (self.by_dk, dks)):
            for name in names:
                keys.update(index.get(name, ()))
        return keys

    def register(self, node: ModelNode) -> int:
        n = len(self.nodes)
        self.nodes.append(node)
        self.graphs.setdefault(node.key, []).append(n)
        for index, name in ((self.by_dsl, node.dsl), (self.by_op, node.key[1]),
                            (self.by_dk, node.key[2])):
            if node.key not in index.setdefault(name, []):
                index[name].append(node.key)
        return n

    # ---- the Python API's operations, each all or nothing ----

    # A filter change brings the installed routers it names in line, and
    # never installs a graph that was not installed (C++ and Python alike).
    def deregister(self, dsl=(), ops=(), dks=()) -> None:
        self.off_dsl |= set(dsl)
        self.off_op |= set(ops)
        self.off_dk |= set(dks)
        self.republish(self.named(dsl, ops, dks))

    def reenable(self, dsl=(), ops=(), dks=()) -> None:
        self.off_dsl -= set(dsl)
        self.off_op -= set(ops)
        self.off_dk -= set(dks)
        self.republish(self.named(dsl, ops, dks))

    def reorder(self, new_graphs: dict, reregister: bool) -> None:
        changed = [key for key in sorted(self.graphs) if new_graphs[key] != self.graphs[key]]
        self.graphs = {key: list(graph) for key, graph in new_graphs.items()}
        if reregister:
            for key in changed:
                self.install_graph(key)

    def install_all(self) -> None:
        if self.chain(MISSING):
            raise ModelError(MISSING)
        for key in sorted(self.graphs):
            self.install_graph(key)

    def attempt(self, operation, *args) -> "Model":
        """The model after `operation`, or this model unchanged plus ModelError."""
        after = copy.deepcopy(self)
        operation(after, *args)
        return after

    # ---- what calls return ----

    def route(self, key, x: torch.Tensor):
        for n in self.routers.get(key, []):
            if self.nodes[n].takes(x):
                return torch.full_like(x, self.nodes[n].value)
        return None

    def expect(self, key, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        routed = self.route(key, x)
        if routed is not None:
            return routed
        if key == MUL:
            return x * y
        if key == ADD:
            return x + y
        # twice's own kernel computes x * factor through aten::mul, routed too.
        factor = 2.0 if key == TWICE1 else 3.0
        inner = self.route(MUL, x)
        return inner if inner is not None else x * factor


def make_impl(value: float):
    return lambda *args, **kwargs: torch.full_like(args[0], value)


def make_cond(kind: str):
    if kind == "always":
        return lambda *a, **k: True
    if kind == "never":
        return lambda *a, **k: False
    if kind == "small":
        return lambda *a, **k: a[0].numel() <= 2
    if kind == "predicate_small":
        return P.max_numel(2, arg=0)
    return None  # unconditional


def call(key, ops, x, y):
    if key == MUL:
        return torch.ops.aten.mul.Tensor(x, y)
    if key == ADD:
        return torch.ops.aten.add.Tensor(x, y)
    return (ops[0] if key == TWICE1 else ops[1])(x)


class RegistryMachine(RuleBasedStateMachine):
    """Set up by run(): reg (the registry module) and ops (the two `twice`)."""

    reg = None
    ops = None

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.index_of: dict[str, int] = {}  # node_id -> model node index
        self.saved: list = []  # (Snapshot, Model, tables)

    @initialize()
    def start(self) -> None:
        self.pristine = self.reg.snapshot()
        self.pristine_tables = watched_tables()
        self.reg.set_empty_chain_policy("keep_dormant")

    def teardown(self) -> None:
        self.reg.restore(self.pristine)
        self.reg.set_empty_chain_policy("keep_dormant")
        assert watched_tables() == self.pristine_tables, "restore left the dispatcher changed"

    def step(self) -> None:
        global steps_run
        steps_run += 1

    def apply(self, operation, model_operation, *args) -> None:
        """Runs the real operation; the model says whether it succeeds."""
        self.step()
        before_tables = watched_tables()
        try:
            expected = self.model.attempt(model_operation, *args)
        except ModelError:
            with pytest.raises(AttributeError, match="not found"):
                operation()
            assert watched_tables() == before_tables, "a refused step changed the dispatcher"
            return
        operation()
        self.model = expected

    # ---- rules ----

    @rule(dsl=st.sampled_from(DSLS), key=st.sampled_from(KEYS), cond=st.sampled_from(CONDS))
    def register(self, dsl, key, cond):
        self.step()
        value = 100.0 + len(self.model.nodes)
        self.reg.register_op_override(dsl, *key, make_cond(cond), make_impl(value),
                                      unconditional_override=cond == "unconditional")
        n = self.model.register(ModelNode(dsl, key, cond, value))
        self.index_of[self.reg.graph(*key)[-1].node_id] = n

    @rule(kind=st.sampled_from(["dsl", "op", "dk"]),
          name=st.sampled_from(DSLS + ["mul.Tensor", "add.Tensor", "twice", "CPU"]),
          disable=st.booleans())
    def filter(self, kind, name, disable):
        kwargs = {"dsl": {"dsl": [name]}, "op": {"ops": [name]}, "dk": {"dks": [name]}}[kind]
        prefix = "disable" if disable else "enable"
        arg = {"dsl": f"{prefix}_dsl_names", "op": f"{prefix}_op_symbols",
               "dk": f"{prefix}_dispatch_keys"}[kind]
        real = self.reg.deregister_op_overrides if disable else self.reg.reenable_op_overrides
        model = Model.deregister if disable else Model.reenable
        self.apply(lambda: real(**{arg: name}), lambda m: model(m, **kwargs))

    @rule(data=st.data(), reregister=st.booleans())
    def reorder(self, data, reregister):
        plan, new_graphs = {}, {}
        for key in sorted(self.model.graphs):
            graph = self.model.graphs[key]
            how = data.draw(st.sampled_from(["permute", "subset", "junk"]), label=f"{key}")
            if how == "junk":
                plan[key] = data.draw(st.sampled_from(
                    ["tuple", "string", "none", "duplicate", "foreign", "unbound", "raise"]))
                new_graphs[key] = graph
            else:
                order = data.draw(st.permutations(range(len(graph))))
                if how == "subset":
                    order = order[:data.draw(st.integers(0, len(order)))]
                plan[key] = order
                new_graphs[key] = [graph[i] for i in order]
        other_node = {}
        for key in plan:
            others = [k for k in self.model.graphs if k != key and self.model.graphs[k]]
            other_node[key] = others[0] if others else None

        def fn(op_symbol, dispatch_key, nodes):
            key = next(k for k in plan if k[1] == op_symbol and k[2] == dispatch_key and
                       [self.index_of[n.node_id] for n in nodes] == self.model.graphs[k])
            how = plan[key]
            if isinstance(how, list):
                return [nodes[i] for i in how]
            if how == "tuple":
                return tuple(nodes)
            if how == "string":
                return ["not a node"]
            if how == "none":
                return None
            if how == "duplicate":
                return nodes + nodes[:1] if nodes else [None]
            if how == "foreign":
                other = other_node[key]
                return [self.reg.graph(*other)[0]] if other else [None]
            if how == "unbound":
                return [registry._OverrideNode("x", *key, None, None, "unbound")]
            raise ValueError("ordering function gave up")

        self.apply(lambda: self.reg.reorder_graphs_from_user_function(
            fn, reregister_overrides=reregister),
            lambda m: m.reorder(new_graphs, reregister))

    @rule()
    def install_all(self):
        self.apply(self.reg.register_all_overrides, Model.install_all)

    @rule(policy=st.sampled_from(["keep_dormant", "remove"]))
    def set_policy(self, policy):
        self.step()
        self.reg.set_empty_chain_policy(policy)
        self.model.policy = policy

    @rule()
    def masked(self):
        self.step()
        inside = copy.deepcopy(self.model)
        inside.mask = 1
        try:
            inside.republish(inside.mask_changes())
        except ModelError:
            with pytest.raises(AttributeError):
                with _unconditional_masked():
                    pass
            return
        with _unconditional_masked():
            self.check_calls(inside)
        after = copy.deepcopy(inside)
        after.mask = 0
        for key in after.mask_changes():  # each on its own: one that cannot be is logged, left
            try:
                after.publish(key)
            except ModelError:
                pass
        self.model = after

    @rule()
    def snapshot(self):
        self.step()
        self.saved.append((self.reg.snapshot(), copy.deepcopy(self.model), watched_tables()))

    @precondition(lambda self: self.saved)
    @rule(which=st.integers(0, 7))
    def restore(self, which):
        self.step()
        snap, model, tables = self.saved[-1 - which % len(self.saved)]
        self.reg.restore(snap)
        policy = self.model.policy
        self.model = copy.deepcopy(model)
        self.model.policy = policy  # a setting, not part of a snapshot
        assert watched_tables() == tables, "restore did not bring the dispatch tables back"

    # ---- after every step ----

    def check_calls(self, model: Model) -> None:
        for key in (MUL, ADD, TWICE1, TWICE2):
            for x, y in (SMALL, LARGE):
                expected = model.expect(key, x, y)
                actual = call(key, self.ops, x, y)
                assert torch.equal(actual, expected), (key, x.numel(), actual, expected)

    @invariant()
    def calls_graphs_and_routers_match_the_model(self):
        _C.check_invariants()
        self.check_calls(self.model)
        for key in KEYS:
            graph = [self.index_of[n.node_id] for n in self.reg.graph(*key)]
            assert graph == self.model.graphs.get(key, []), key
            state = self.reg.router_state(*key)
            expected = ("absent" if key not in self.model.routers
                        else "active" if self.model.routers[key] else "dormant")
            assert state == expected, (key, state, expected)
            chain = [self.index_of[h.node_id] for h in _C.published_chain(key)]
            assert chain == self.model.routers.get(key, []), key


def test_random_sequences_match_the_model_and_restore_exactly(reg, namespaces, record_property):
    RegistryMachine.reg = reg
    RegistryMachine.ops = namespaces
    before = steps_run
    run_state_machine_as_test(RegistryMachine, settings=PROFILE)
    record_property("model_steps", steps_run - before)
    record_property("profile", os.environ.get("NR_HYPOTHESIS_PROFILE", "reliability"))
    print(f"model: {steps_run - before} steps")
    assert steps_run - before >= PROFILE.max_examples
