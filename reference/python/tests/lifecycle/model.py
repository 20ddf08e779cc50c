"""The model: which node answers each call, step by step, and the judge that
reads a child's observations against it.

The dispatcher is modelled as a stack of routers per op key (torch 2.13's
stock routers and the reference's), each holding the kernel that was on top
when it was installed (its fallback): a call walks the top router's chain
(first node whose cond takes the call answers), then its captured kernel's,
down to the op's own. The stock registry follows torch 2.13's rules (every
filter change re-installs the graphs it names, unconditional overrides are
disabled like any other); the reference follows its own (routers keep their
capture and swap chains; unconditional overrides survive a disable; the
compatibility module re-installs as upstream does).

Where a legal implementation may do either of two things (an ordering
function's copies applied or refused with "Graph transformation failed";
a function bound from the replaced module before the takeover working or
refusing by name), the child's observation says which, and the model
follows it. A takeover is judged as a transaction: every call right after it
answers as right before it (but for a stock impl that raised: under the
reference's impl error policy "fallback" it now falls back, as set). What the model cannot tell after a takeover
merged two registries' graphs for one op (their order) it no longer pins:
those nodes may or may not answer, but nothing else may.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

from . import program as P

FALLBACK = {"mul": 9.0, "add": 6.0}
# A refusal by name from a function the takeover left behind.
TAKEOVER_WORDS = ("took over", "taken over", "native_registry", "install_as_torch_native")


class ModelError(Exception):
    """The step must raise (AttributeError: lc::f is not defined and would
    need a router)."""


@dataclass
class Node:
    nid: int
    key: str
    dsl: str
    cond: str          # "always", "never", or one of program.HOSTILE_CONDS
    uncond: bool
    value: int
    uncertain: bool = False
    raises: bool = False   # its impl raises (program.RAISING)

    def takes(self) -> bool:
        return self.cond != "never"


_uids = itertools.count()


@dataclass
class Router:
    owner: str                 # "stock" or "ref"
    chain: list                # node ids
    captured: "Router | None" = None
    stale: bool = False        # its op (lc::f) left the dispatcher
    uid: int = field(default_factory=lambda: next(_uids))


@dataclass
class Expect:
    values: set = field(default_factory=set)
    error_ok: bool = False
    anything: bool = False
    marker: str | None = None   # an error must say this (an impl's own error)

    def admits(self, observed) -> bool:
        if self.anything:
            return True
        if isinstance(observed, list):
            return (self.error_ok and is_named(observed)
                    and (self.marker is None or self.marker in observed[2]))
        return observed in self.values

    def __repr__(self) -> str:
        if self.anything:
            return "anything"
        return f"one of {sorted(self.values, key=str)}" + (" or a named error" if self.error_ok else "")


@dataclass
class Effect:
    """What one call adds to the stats (issue 30): its graph's calls,
    fallbacks, covered and fell_back_after_error, and per node (by value)
    taken, declined and raised; the values whose impl error fell back (each
    warns once per process)."""
    calls: int = 0
    fallbacks: int = 0
    covered: int = 0
    fell_back: int = 0
    raised_calls: int = 0   # of calls, those whose impl's error was the call's (policy "raise")
    nodes: dict = field(default_factory=dict)   # value -> [taken, declined, raised]
    warns: set = field(default_factory=set)

    def node(self, value) -> list:
        return self.nodes.setdefault(value, [0, 0, 0])

    def shape(self) -> tuple:
        return (self.calls, self.fallbacks, self.covered, self.fell_back, self.raised_calls,
                tuple(sorted((v, tuple(c)) for v, c in self.nodes.items())))


def is_named(err: list) -> bool:
    """A named Python exception: a builtin's or torch's or the registry's
    own class, never SystemError, never a C++ internal assert."""
    module, qualname, message = err[:3]
    return ((module == "builtins" or module.split(".")[0] in ("torch", "native_registry"))
            and qualname not in ("SystemError",) and "INTERNAL ASSERT" not in message)


class Model:
    def __init__(self, header: P.Header) -> None:
        self.nodes: dict[int, Node] = {}
        self.stock_graphs: dict[str, list] = {}
        self.stock_filters: set = set()
        self.stock_routers: dict[str, Router] = {}
        self.ref_graphs: dict[str, list] = {}
        self.ref_filters: set = set()
        self.ref_installed: set = set()
        self.ref_routers: dict[str, Router] = {}
        self.layers: dict[str, list] = {k: [] for k in P.KEYS}
        self.taken_over = header.early != "off"
        self.poisoned = False
        self.uncertain: set = set()    # keys whose answers are no longer pinned
        self.f_defined, self.f_gen = True, 0
        self.snaps: list = []
        self.programs: list = []       # what each recorded program answers
        self.base_stock = self.base_ref = 0
        # routers put where the op had none: a dispatcher write the
        # reference documents as not to be run under calls of that op
        self.fresh_routers = 0
        # issue 30's settings of the reference (settings, not state: a
        # snapshot does not hold them); torch 2.13's routers know none
        self.coverage = None            # program.COVERAGE
        self.policy = "raise"
        self.stats_on = False
        self.node_counts: dict = {}     # value -> [taken, declined, raised]
        self.graph_counts: dict = {}    # key -> [calls, fallbacks, covered, fell_back]
        self.raised_calls: dict = {}    # key -> of its calls, those an impl's error ended
        self.stats_unpinned: set = set()  # keys whose counts calls the model cannot see touched
        self.must_warn: set = set()     # values whose impl error fell back in a call seen
        # the reference's _unconditional_masked() held open (a count: it
        # nests), and its empty-chain policy (a setting, as the header sets it)
        self.mask_depth = 0
        self.remove_empty = header.empty_chain == "remove"

    # ---- the dispatcher ----

    def top(self, key):
        return self.layers[key][-1] if self.layers[key] else None

    def add_router(self, key, router: Router) -> None:
        router.captured = self.top(key)
        self.layers[key].append(router)

    def remove_router(self, key, router: Router) -> None:
        stack = self.layers[key]
        if router not in stack:
            return
        above = stack[stack.index(router) + 1:]
        if any(r.captured is router for r in above):
            # a router installed over it keeps calling it: how a removed
            # router behaves there is not pinned here
            self.uncertain.add(key)
        stack.remove(router)

    def fallback(self, key) -> float:
        return FALLBACK[key] if key != "f" else 50.0 + self.f_gen

    # ---- rules ----

    def stock_enabled(self, nid) -> bool:
        return self.nodes[nid].dsl not in self.stock_filters

    def ref_enabled(self, nid) -> bool:
        """Filters disable an unconditional node only while the mask is up."""
        node = self.nodes[nid]
        return node.dsl not in self.ref_filters or (node.uncond and self.mask_depth == 0)

    def ref_chain(self, key) -> list:
        return [n for n in self.ref_graphs.get(key, []) if self.ref_enabled(n)]

    def new_node(self, key, dsl, cond, value) -> int:
        nid = len(self.nodes)
        self.nodes[nid] = Node(nid, key, dsl, "always" if cond in ("uncond", P.RAISING) else cond,
                               cond == "uncond", value, raises=cond == P.RAISING)
        return nid

    # ---- issue 30: per-thread disables, the coverage check, stats ----

    def covers(self, key) -> bool:
        return self.coverage == "small" or (self.coverage == "mul" and key == "mul")

    def thread_disabled(self, node: Node, off) -> bool:
        """FilterSet's rule for a thread's scopes: named by dsl, bare op
        symbol or dispatch key (every node here is at CPU); unconditional
        nodes stay."""
        if node.uncond:
            return False
        op = P.OP[node.key][1]
        return any((kind == "dsl" and name == node.dsl) or (kind == "op" and name == op)
                   or (kind == "key" and name == "CPU") for kind, name in off)

    def count(self, key, effect: "Effect | None") -> None:
        """A call the model saw: its counts (stats on), its notices."""
        if effect is not None:
            self.must_warn |= effect.warns
        if not self.stats_on:
            return
        if effect is None:
            self.stats_unpinned.add(key)
            return
        self.add_counts(key, effect, 1)

    def add_counts(self, key, effect: "Effect", times: int) -> None:
        graph = self.graph_counts.setdefault(key, [0, 0, 0, 0])
        for n, add in enumerate((effect.calls, effect.fallbacks, effect.covered, effect.fell_back)):
            graph[n] += add * times
        self.raised_calls[key] = self.raised_calls.get(key, 0) + effect.raised_calls * times
        for value, adds in effect.nodes.items():
            counts = self.node_counts.setdefault(value, [0, 0, 0])
            for n, add in enumerate(adds):
                counts[n] += add * times

    def unpin_stats(self, keys=P.KEYS) -> None:
        if self.stats_on:
            self.stats_unpinned.update(keys)

    def reset_stats(self) -> None:
        self.node_counts, self.graph_counts, self.stats_unpinned = {}, {}, set()
        self.raised_calls = {}

    # ---- the stock registry (torch 2.13) ----

    def stock_reinstall(self, key, filtered: bool = True) -> None:
        """torch 2.13's re-registration of one graph: with its filter state
        (a filter change, a reorder), or without (_register_all_overrides,
        which passes none: every node goes in, whatever the filters)."""
        old = self.stock_routers.pop(key, None)
        if old is not None:
            self.remove_router(key, old)
        chain = [n for n in self.stock_graphs.get(key, []) if not filtered or self.stock_enabled(n)]
        if chain:
            router = Router("stock", chain)
            self.add_router(key, router)
            self.stock_routers[key] = router

    def stock_keys_of(self, dsls) -> list:
        return [k for k in P.KEYS if any(self.nodes[n].dsl in dsls for n in self.stock_graphs.get(k, []))]

    def stock_filter(self, dsl, disable) -> None:
        if disable:
            self.stock_filters.add(dsl)
            keys = self.stock_keys_of(self.stock_filters)
        else:
            self.stock_filters.discard(dsl)
            keys = self.stock_keys_of({dsl})
        for key in keys:
            self.stock_reinstall(key)

    # ---- the reference ----

    def publish(self, key, reinstall: bool) -> None:
        router = self.ref_routers.get(key)
        stale = router is not None and router.stale
        chain = self.ref_chain(key)
        if not chain:
            if router is not None:
                if stale or reinstall or self.remove_empty:
                    self.remove_router(key, router)
                    del self.ref_routers[key]
                else:
                    router.chain = []
            return
        new = router is None or stale or reinstall
        if new and key == "f" and not self.f_defined:
            raise ModelError(key)
        if not new:
            router.chain = chain
            return
        if router is None:
            self.fresh_routers += 1
        else:
            self.remove_router(key, router)
        router = self.ref_routers[key] = Router("ref", chain)
        self.add_router(key, router)

    def ref_install(self, key, reinstall: bool) -> None:
        self.publish(key, reinstall)
        self.ref_installed.add(key)

    def needs_router(self, key) -> bool:
        router = self.ref_routers.get(key)
        return bool(self.ref_chain(key)) and (router is None or router.stale)

    def ref_install_all(self) -> None:
        if "f" in self.ref_graphs and self.needs_router("f") and not self.f_defined:
            raise ModelError("f")
        for key in sorted(self.ref_graphs, key=P.KEYS.index):
            self.ref_install(key, False)

    def ref_keys_of(self, dsls) -> list:
        return [k for k in P.KEYS if any(self.nodes[n].dsl in dsls for n in self.ref_graphs.get(k, []))]

    def ref_filter(self, dsl, disable) -> None:
        """native_registry.registry's: installed routers of the graphs named follow."""
        (self.ref_filters.add if disable else self.ref_filters.discard)(dsl)
        keys = [k for k in self.ref_keys_of({dsl}) if k in self.ref_installed]
        if "f" in keys and self.needs_router("f") and not self.f_defined:
            raise ModelError("f")
        for key in keys:
            self.publish(key, False)

    def compat_reinstall(self, keys) -> None:
        for key in sorted(keys, key=P.KEYS.index):  # upstream_compat._reinstall: sorted keys
            if key in self.ref_graphs:
                self.ref_install(key, True)

    def compat_filter(self, dsl, disable) -> None:
        """upstream_compat's: the reference's, then every graph named re-installed."""
        self.ref_filter(dsl, disable)
        self.compat_reinstall(self.ref_keys_of(self.ref_filters if disable else {dsl}))

    # ---- calls ----

    def expect(self, key, off=()) -> tuple[Expect, bool]:
        """What calling `key` now may give, and whether the call runs an
        lc::f node that defines the op again (its side effect)."""
        return self.route(key, off)[:2]

    def route(self, key, off=()) -> tuple[Expect, bool, "Effect | None"]:
        """expect's answer, and the call's Effect on the stats (None: not
        pinned). `off`: the calling thread's disabled_in_thread entries.
        The reference's routers ask the coverage check first (a covered
        call goes to the captured kernel), skip the nodes this thread's
        scopes name, and under the "fallback" policy run the captured kernel
        when the chosen impl raises; torch 2.13's know none of it."""
        if key == "f" and not self.f_defined:
            return Expect({"undefined"}), False, Effect()
        if key in self.uncertain:
            return Expect(anything=True), False, None
        result, router, seen, effect = Expect(), self.top(key), set(), Effect()
        pinned = True
        while router is not None:
            if router.uid in seen:
                return Expect(anything=True), False, None
            seen.add(router.uid)
            ours = router.owner == "ref"
            if ours:
                effect.calls += 1
                if self.covers(key):
                    effect.fallbacks += 1
                    effect.covered += 1
                    router = router.captured
                    continue
            for nid in router.chain:
                node = self.nodes[nid]
                if ours and self.thread_disabled(node, off):
                    continue
                if node.uncertain:
                    if node.cond in P.HOSTILE_CONDS:
                        return Expect(anything=True), False, None
                    pinned = False
                    if node.raises:
                        result.error_ok, result.marker = True, P.IMPL_ERROR
                    else:
                        result.values.add(float(node.value))
                    continue
                if node.cond in P.DECLINING:
                    # falls through to a kernel of the op that is gone:
                    # not pinned, as long as it is no crash
                    return Expect(anything=True), True, None
                if node.takes():
                    if ours:
                        effect.node(node.value)[0] += 1
                    if node.raises:
                        if ours:
                            effect.node(node.value)[2] += 1
                        if ours and self.policy == "fallback":
                            effect.fell_back += 1
                            effect.fallbacks += 1
                            effect.warns.add(node.value)
                            break  # the captured kernel answers
                        if ours:
                            effect.raised_calls += 1
                        result.error_ok, result.marker = True, P.IMPL_ERROR
                        return result, False, effect if pinned else None
                    result.values.add(float(node.value))
                    hostile = node.cond in P.HOSTILE_CONDS
                    result.error_ok = hostile
                    return result, hostile, None if hostile or not pinned else effect
                if ours:
                    effect.node(node.value)[1] += 1
            else:
                if ours:
                    effect.fallbacks += 1
            router = router.captured
        result.values.add(self.fallback(key))
        return result, False, effect if pinned else None

    def after_call(self, key, redefines: bool, off=()) -> None:
        if redefines:
            node = self.first_hostile(off)
            self.redefine(remove_only=node is not None and node.cond == "cond_removes")

    def first_hostile(self, off=()):
        router = self.top("f")
        while router is not None:
            ours = router.owner == "ref"
            if ours and self.covers("f"):
                router = router.captured
                continue
            for nid in router.chain:
                if ours and self.thread_disabled(self.nodes[nid], off):
                    continue
                if self.nodes[nid].cond in P.HOSTILE_CONDS or self.nodes[nid].takes():
                    node = self.nodes[nid]
                    return node if node.cond in P.HOSTILE_CONDS else None
            router = router.captured
        return None

    def redefine(self, remove_only: bool) -> None:
        if self.f_defined:
            self.f_defined = False
            self.layers["f"] = []
            router = self.ref_routers.get("f")
            if router is not None:
                router.stale = True
        if not remove_only:
            self.f_defined, self.f_gen = True, self.f_gen + 1

    def decomp_entry_f(self) -> bool | None:
        """Whether native_decomp_table holds lc::f (None: not pinned)."""
        if "f" in self.uncertain:
            return None
        router = self.ref_routers.get("f")
        return bool(self.f_defined and router is not None and not router.stale and router.chain)

    def node_count(self) -> int:
        return (self.base_stock + self.base_ref + sum(map(len, self.ref_graphs.values()))
                + sum(map(len, self.stock_graphs.values())))

    # ---- the takeover ----

    def refuses_takeover(self) -> bool:
        """takeover.plan's refusal: a stock graph never installed, at a key
        where the reference has a router, holds a node the stock filters
        leave on (or an unconditional one): taking it over would start
        routing calls to it."""
        never_installed = any(
            nids and key not in self.stock_routers and key in self.ref_routers
            and any(self.nodes[n].uncond or self.nodes[n].dsl not in self.stock_filters
                    for n in nids)
            for key, nids in self.stock_graphs.items())
        # A stock router that routes a node its filters disable (installed by
        # _register_all_overrides, which reads no filters), or leaves out one
        # they leave on: a state the reference cannot reproduce exactly.
        disagrees = any(
            (n in router.chain) == (self.nodes[n].dsl in self.stock_filters)
            for key, router in self.stock_routers.items()
            for n in self.stock_graphs.get(key, []))
        # The stock filters become the reference's: refused where they would
        # disable a node a reference router routes now (unconditional ones
        # are exempt there).
        disables_routed = any(
            self.nodes[n].dsl in self.stock_filters and not self.nodes[n].uncond
            for router in self.ref_routers.values() for n in router.chain)
        # A reference graph without a router (never installed, or installed
        # while its chain was empty) at a key a stock router routes: one
        # registry cannot keep its nodes silent and route the stock ones, so
        # taking over would start routing calls to them.
        unrouted_reference = any(
            self.ref_graphs.get(key) and key not in self.ref_routers
            for key in self.stock_routers if key in self.stock_graphs)
        return never_installed or disagrees or disables_routed or unrouted_reference

    def take_over(self) -> dict:
        """Merge the stock registry into the reference; returns what each
        call answered just before (the takeover must change none)."""
        before = {key: self.expect(key)[0] for key in P.KEYS}
        for key, nids in self.stock_graphs.items():
            if self.ref_graphs.get(key) and nids:
                for nid in self.ref_graphs[key] + nids:  # their merged order is not pinned
                    self.nodes[nid].uncertain = True
            self.ref_graphs.setdefault(key, []).extend(nids)
        for nid in itertools.chain.from_iterable(self.stock_graphs.values()):
            # a node whose enabled state the reference's rules would change
            # (a disabled unconditional one) must keep answering as before
            # right after; later, its state is not pinned
            if self.stock_enabled(nid) != (self.nodes[nid].uncond or self.nodes[nid].dsl not in
                                           self.ref_filters | self.stock_filters):
                self.nodes[nid].uncertain = True
        for nid in itertools.chain.from_iterable(self.ref_graphs.values()):
            if self.nodes[nid].dsl in self.stock_filters - self.ref_filters and not self.nodes[nid].uncond:
                self.nodes[nid].uncertain = True
        installed = list(self.stock_routers)
        for key, router in list(self.stock_routers.items()):
            self.remove_router(key, router)
        self.stock_routers.clear()
        self.ref_filters |= self.stock_filters
        self.base_ref += self.base_stock
        self.base_stock = 0
        self.stock_graphs, self.stock_filters = {}, set()
        for key in installed:
            self.uncertain.discard(key)  # the layers below were rebuilt
            self.ref_install(key, True)
        self.taken_over = True
        return before

    # ---- snapshots ----

    def snapshot(self) -> None:
        self.snaps.append(copy.deepcopy({
            "graphs": self.ref_graphs, "filters": self.ref_filters,
            "installed": self.ref_installed, "f_gen": self.f_gen, "f_defined": self.f_defined,
            "base_ref": self.base_ref, "mask_depth": self.mask_depth,
            "routers": {k: (r.uid, list(r.chain), r.stale) for k, r in self.ref_routers.items()}}))

    def restore(self, which: int) -> None:
        if not self.snaps:
            return
        saved = self.snaps[-1 - which % len(self.snaps)]
        self.ref_graphs = copy.deepcopy(saved["graphs"])
        self.ref_filters = set(saved["filters"])
        self.ref_installed = set(saved["installed"])
        mask_changed = saved["mask_depth"] != self.mask_depth

        def chain_now(routed: list, key) -> list:
            """The chain a router routed then, by the mask of now: the
            unconditional nodes the filters name come in or go."""
            if not mask_changed:
                return list(routed)
            return [n for n in self.ref_graphs.get(key, [])
                    if (n in routed or (self.nodes[n].uncond and self.nodes[n].dsl in self.ref_filters))
                    and self.ref_enabled(n)]

        for key in P.KEYS:
            current, old = self.ref_routers.get(key), saved["routers"].get(key)
            if key == "f" and (saved["f_gen"] != self.f_gen or not self.f_defined
                               or (current is not None and current.stale) or (old and old[2])):
                self.uncertain.add("f")  # rebuilt on the op as it is now: not pinned here
                continue
            if old is None:
                if current is not None:
                    self.remove_router(key, current)
                    del self.ref_routers[key]
                # installed with no router then (an empty chain): a router
                # where the mask of now lets a node in
                chain = chain_now([], key) if key in self.ref_installed else []
                if chain:
                    router = self.ref_routers[key] = Router("ref", chain)
                    self.add_router(key, router)
            elif current is not None and current.uid == old[0]:
                current.chain = chain_now(old[1], key)
            else:
                if current is not None:
                    self.remove_router(key, current)
                router = self.ref_routers[key] = Router("ref", chain_now(old[1], key))
                self.add_router(key, router)
        # torch's own overrides merged by a takeover after the snapshot go too
        self.base_ref = saved["base_ref"]

    def mask(self, enter: bool) -> None:
        """_unconditional_masked() entered or left: the installed graphs whose
        chain the mask changes are published again (a router whose op left
        the dispatcher is left as it is: no call reaches it)."""
        if not enter and self.mask_depth == 0:
            return  # nothing held open: the step does nothing
        before = {k: self.ref_chain(k) for k in self.ref_installed}
        self.mask_depth += 1 if enter else -1
        for key in sorted(self.ref_installed, key=P.KEYS.index):
            router = self.ref_routers.get(key)
            if self.ref_chain(key) == before[key] or (router is not None and router.stale):
                continue
            try:
                self.publish(key, False)
            except ModelError:
                self.uncertain.add(key)  # lc::f gone with no router: put back as it can, warned

    # ---- programs ----

    def traced(self, api, key) -> tuple:
        """What a make_fx trace with a native_decomp_table records."""
        if api == "stock" and not self.taken_over:
            router = self.stock_routers.get(key)
        else:
            router = self.ref_routers.get(key)
            if router is not None and router.stale:
                router = None
        if router is None:
            return ("eager", key)
        if router.owner == "ref" and self.covers(key):
            return ("eager", key)  # the compile router asks the coverage check as it traces
        for nid in router.chain:
            node = self.nodes[nid]
            if node.uncertain:
                return ("any",)
            if node.takes():
                return ("node", nid, "stock" if api == "stock" and not self.taken_over else "ref")
        return ("eager", key)

    def live(self, nid) -> bool:
        """Whether node nid is still in a graph of a registry that routes
        (a program holding its `_native` op must then still answer with it)."""
        in_ref = any(nid in g for g in self.ref_graphs.values())
        in_stock = not self.taken_over and any(nid in g for g in self.stock_graphs.values())
        return in_ref or in_stock
