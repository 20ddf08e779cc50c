"""Programs of lifecycle steps: what they are, how Hypothesis draws them, and
the child script each one becomes.

A program is a header (how the registry comes to be torch._native.registry:
a takeover later, or early activation in either import order; whether daemon
threads churn the control plane while the interpreter exits) and a list of
steps. Three op keys: aten::mul.Tensor and aten::add.Tensor at CPU (which
torch 2.13's stock registry can override too) and lc::f at CPU, an op the
program defines, removes and defines again. Every impl returns a constant
that names its node (100, 101, ...), so an answer says which node routed;
an op's own kernel gives its fallback (mul 9, add 6, lc::f 50 + generation).

The child prints one line per observation, "@@" and JSON: each step's
outcome and, after every step, one call of each op.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

KEYS = ("mul", "add", "f")
OP = {"mul": ("aten", "mul.Tensor"), "add": ("aten", "add.Tensor"), "f": ("lc", "f")}
DSLS = ("triton", "cutedsl", "user")  # the first two are torch.backends.python_native's
PLAIN_CONDS = ("always", "never", "uncond")
# Conds of lc::f's nodes that remove and define the op again mid-call: from
# the cond, from the runtime check (try_initialize_runtime), from the impl.
HOSTILE_CONDS = ("cond_redefines", "runtime_redefines", "impl_redefines",
                 "cond_removes", "cond_redefines_declines")
# Those that decline the call after changing the op: routing falls through
# to whatever the router captured from the op that is gone.
DECLINING = ("cond_removes", "cond_redefines_declines")
# A node whose cond takes every call and whose impl raises (ValueError naming
# IMPL_ERROR and the node's value): the impl error policy decides the call.
RAISING = "impl_raises"
IMPL_ERROR = "lc impl failed"
# disabled_in_thread entries: (kind, name); "CUDA" and "sub.Tensor" name no node.
SCOPE_ENTRIES = (("dsl", "triton"), ("dsl", "cutedsl"), ("dsl", "user"), ("op", "mul.Tensor"),
                 ("op", "add.Tensor"), ("op", "f"), ("key", "CPU"), ("key", "CUDA"),
                 ("op", "sub.Tensor"))
# set_coverage_check: "small" covers calls by input size (numel <= 2: every
# call the program makes), "mul" covers aten::mul only, "raises" raises
# (not covered), None unsets it.
COVERAGE = ("small", "mul", "raises", None)


@dataclass(frozen=True)
class Header:
    early: str = "off"          # "off", "torch_first", "nr_first" (NATIVE_REGISTRY_AS_TORCH_NATIVE=1)
    daemon_exit: bool = False   # daemon threads churn the control plane as the interpreter exits
    # the reference's empty-chain policy: "keep_dormant" (its default) or
    # "remove" (upstream's: a router whose chain empties is taken out)
    empty_chain: str = "keep_dormant"


# ---- steps ------------------------------------------------------------------------
# api: "ref" native_registry.registry; "stock" the module object that was
# torch._native.registry at start (taken over: the reference's); "bound"
# functions bound from it at start; "pn" torch.backends.python_native.


@dataclass(frozen=True)
class Reg:
    api: str
    key: str
    dsl: str
    cond: str


@dataclass(frozen=True)
class Install:
    api: str


@dataclass(frozen=True)
class Filter:
    api: str
    dsl: str
    disable: bool


@dataclass(frozen=True)
class Takeover:
    threads: int = 1
    refused: bool = False       # a stock node the reference refuses is registered first


@dataclass(frozen=True)
class Reorder:
    api: str
    how: str                    # "reverse", "copies_never" (dataclasses.replace), "copies_reverse"
    reregister: bool = True     # reregister_overrides (changed graphs installed again)


@dataclass(frozen=True)
class Snapshot:
    pass


@dataclass(frozen=True)
class Restore:
    which: int = 0


@dataclass(frozen=True)
class Mask:
    """The reference's _unconditional_masked() entered and held open (enter),
    or the innermost one held open left, whatever scopes or snapshots came
    between."""
    enter: bool = True


@dataclass(frozen=True)
class Trace:
    api: str                    # whose native_decomp_table the program is traced with
    key: str
    how: str = "make_fx"        # "make_fx", "export" (run_decompositions), "compile" (aot_autograd)


@dataclass(frozen=True)
class JitScope:
    key: str                    # TorchScript calling a `_native` op made inside registry.scoped()


@dataclass(frozen=True)
class CallProgram:
    which: int = 0


@dataclass(frozen=True)
class Redefine:
    remove_only: bool = False   # lc::f removed (and, unless remove_only, defined again)


@dataclass(frozen=True)
class Fork:
    pass


@dataclass(frozen=True)
class ThreadScope:
    """registry.disabled_in_thread scopes, nested (`entries`: one scope each,
    outermost first), each level's calls of every op recorded; closed
    innermost first or, with out_of_order, outermost first. With
    other_thread, a new thread opens and closes them while this thread calls
    in the middle (with every scope open there): unaffected."""
    entries: tuple = (("dsl", "triton"),)
    other_thread: bool = False
    out_of_order: bool = False


@dataclass(frozen=True)
class Stats:
    """registry.collect_stats(on); then, with reset, reset_stats(); then
    registry.stats() read and judged against the model's counts."""
    on: bool = True
    reset: bool = False


@dataclass(frozen=True)
class Coverage:
    how: str | None             # one of COVERAGE


@dataclass(frozen=True)
class Policy:
    policy: str                 # set_impl_error_policy: "raise" or "fallback"


@dataclass(frozen=True)
class Threads:
    """Two threads call mul and add throughout the inner steps."""
    steps: tuple = ()


@dataclass(frozen=True)
class Program:
    header: Header = Header()
    steps: tuple = ()

    def __repr__(self) -> str:
        return f"Program({self.header!r}, steps=({', '.join(map(repr, self.steps))}{',' if len(self.steps) == 1 else ''}))"


# ---- strategies -------------------------------------------------------------------


def _reg():
    plain = st.builds(Reg, st.sampled_from(("ref", "stock", "bound")), st.sampled_from(("mul", "add")),
                      st.sampled_from(DSLS), st.sampled_from(PLAIN_CONDS + (RAISING,)))
    f_node = st.builds(Reg, st.just("ref"), st.just("f"), st.sampled_from(DSLS),
                       st.sampled_from(PLAIN_CONDS + HOSTILE_CONDS + (RAISING,)))
    return st.one_of(plain, plain, f_node)


def _thread_scope():
    return st.builds(ThreadScope, st.lists(st.sampled_from(SCOPE_ENTRIES), min_size=1,
                                           max_size=3).map(tuple),
                     st.booleans(), st.booleans())


COVERAGE_STEP = st.builds(Coverage, st.sampled_from(COVERAGE))
POLICY_STEP = st.builds(Policy, st.sampled_from(("raise", "fallback")))


def _filter():
    return st.builds(Filter, st.sampled_from(("ref", "stock", "bound", "pn", "pn")),
                     st.sampled_from(DSLS), st.booleans())


# Steps that may run while other threads call the ops: none of them puts a
# router into the dispatcher or takes one out by the reference's own
# contract (installs and restores are documented as not to be run under
# calls); the filters of torch.backends.python_native are among them (issue 27 b).
SAFE_UNDER_CALLS = st.one_of(
    st.builds(Reg, st.just("ref"), st.sampled_from(("mul", "add")), st.sampled_from(DSLS),
              st.sampled_from(PLAIN_CONDS)),
    _filter(),
    st.builds(Reorder, st.just("ref"), st.sampled_from(("reverse", "copies_never")), st.just(False)),
    # issue 30's settings are atomic for calls in flight; a thread's scopes
    # are its own (the callers must not see them)
    _thread_scope(), COVERAGE_STEP, POLICY_STEP,
)

STEP = st.one_of(
    _reg(), _reg(),
    st.builds(Install, st.sampled_from(("ref", "stock"))),
    st.builds(Install, st.sampled_from(("ref", "stock"))),
    _filter(), _filter(),
    st.builds(Takeover, st.sampled_from((1, 1, 2)), st.sampled_from((False, False, True))),
    st.builds(Takeover, st.sampled_from((1, 2)), st.just(False)),
    st.builds(Reorder, st.sampled_from(("ref", "stock")),
              st.sampled_from(("reverse", "copies_never", "copies_reverse"))),
    st.just(Snapshot()), st.builds(Restore, st.integers(0, 3)),
    st.builds(Mask, st.booleans()),
    st.builds(Trace, st.sampled_from(("ref", "stock")), st.sampled_from(("mul", "add")),
              st.sampled_from(("make_fx", "make_fx", "export", "compile"))),
    st.builds(JitScope, st.sampled_from(("mul", "add"))),
    st.builds(CallProgram, st.integers(0, 3)),
    st.builds(Redefine, st.booleans()),
    st.just(Fork()),
    st.builds(Threads, st.lists(SAFE_UNDER_CALLS, min_size=1, max_size=8).map(tuple)),
    # issue 30: per-thread disables, stats, the coverage check, the impl error policy
    _thread_scope(), _thread_scope(),
    st.builds(Stats, st.booleans(), st.booleans()), st.builds(Stats, st.just(True), st.booleans()),
    COVERAGE_STEP, POLICY_STEP,
)

HEADER = st.builds(Header, st.sampled_from(("off", "off", "off", "torch_first", "nr_first")),
                   st.sampled_from((False, False, True)),
                   st.sampled_from(("keep_dormant", "keep_dormant", "remove")))

PROGRAMS = st.builds(Program, HEADER, st.lists(STEP, min_size=1, max_size=12).map(tuple))


# ---- the child script ---------------------------------------------------------------

PRELUDE = r'''
import faulthandler, json, os, sys, threading, time, dataclasses, logging
faulthandler.enable()
def out(*a):
    sys.stdout.write("@@" + json.dumps(a) + "\n"); sys.stdout.flush()
def named(e):
    return [type(e).__module__, type(e).__qualname__, str(e)[:400]]
'''

BODY_START = r'''
import torch
import torch._native.registry as S
import native_registry.registry as nr
from native_registry import upstream_compat as compat
import torch.backends.python_native as pn
out("loaded", nr.__file__)
BOUND = {"register_op_override": S.register_op_override,
         "deregister_op_overrides": S.deregister_op_overrides,
         "reenable_op_overrides": S.reenable_op_overrides}
X = torch.full((2,), 3.0)
WARNED = []
class _Warned(logging.Handler):
    def emit(self, record):
        if "Graph transformation failed" in record.getMessage():
            WARNED.append(1)
def listen():
    # On the loggers that emit it, each time: torch's logging setup may
    # clear the handlers of "torch" (which the root never sees) on the way.
    for _name in ("torch._native.registry", "native_registry.registry"):
        _lg = logging.getLogger(_name)
        if not any(isinstance(h, _Warned) for h in _lg.handlers):
            _lg.addHandler(_Warned())
def imp(v):
    fn = lambda *a, **k: torch.full_like(a[0], float(v))
    fn._lc_value = v  # which node a stats entry is
    return fn
OPS = {"mul": ("aten", "mul.Tensor"), "add": ("aten", "add.Tensor"), "f": ("lc", "f")}
# The impl error policy's notices: each "lc impl failed <value>" warned, in
# order, on whichever thread (every one shown: the registry's once per node
# is what is judged).
import re, warnings
WARNED_VALUES = []
warnings.filterwarnings("always", category=RuntimeWarning, message="native_registry: the impl of override")
_showwarning = warnings.showwarning
def _record_warning(message, category, *rest, **kw):
    text = str(message)
    if issubclass(category, RuntimeWarning) and text.startswith("native_registry: the impl of override"):
        found = re.search(r"lc impl failed (\d+)", text)
        WARNED_VALUES.append(int(found.group(1)) if found else -1)
        return
    _showwarning(message, category, *rest, **kw)
warnings.showwarning = _record_warning
def read_stats():
    values = {}
    for _k, (_lib, _op) in OPS.items():
        try:
            for _n in nr.graph(_lib, _op, "CPU"):
                _v = getattr(_n.impl_fn, "_lc_value", None)
                if _v is not None:
                    values[_n.node_id] = _v
        except Exception:
            pass
    _s = nr.stats()
    nodes = [[values[n.node_id], n.taken, n.declined, n.raised] for n in _s.nodes if n.node_id in values]
    graphs = {}
    for g in _s.graphs:
        for _k, (_lib, _op) in OPS.items():
            if (g.lib_symbol, g.op_symbol, g.dispatch_key) == (_lib, _op, "CPU"):
                graphs[_k] = [g.calls, g.fallbacks, g.covered, g.fell_back_after_error]
    return nodes, graphs
def coverage_of(how):
    if how == "small":
        return lambda op_symbol, key, args, kwargs: args[0].numel() <= 2
    if how == "mul":
        return lambda op_symbol, key, args, kwargs: op_symbol == "mul.Tensor"
    if how == "raises":
        def c(op_symbol, key, args, kwargs):
            raise ValueError("coverage probe failed")
        return c
    return None
def always(*a, **k): return True
def never(*a, **k): return False
LC = {"lib": None, "gen": -1}
def define_f():
    gen = LC["gen"] + 1
    lib = torch.library.Library("lc", "DEF")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x, _v=50.0 + gen: torch.full_like(x, _v), "CPU")
    LC["lib"], LC["gen"] = lib, gen
    torch.ops.lc.__dict__.pop("f", None)
def remove_f():
    if LC["lib"] is not None:
        LC["lib"]._destroy()
        LC["lib"] = None
        torch.ops.lc.__dict__.pop("f", None)
def redefine_f():
    remove_f(); define_f()
define_f()
nr.allow_namespace("lc")
def count(graphs):
    return sum(len(g) for g in graphs.values())
out("start", 0 if S is compat else count(S._graphs), sum(len(nr._C.graph(k)) for k in nr._C.graph_keys()))
def call_f():
    if LC["lib"] is None:
        return "undefined"
    return float(torch.ops.lc.f.default(X)[0])
CALLS = {"mul": lambda: float(torch.mul(X, X)[0]), "add": lambda: float(torch.add(X, X)[0]), "f": call_f}
def answers(names=("mul", "add", "f")):
    res = []
    for name in names:
        try:
            res.append(CALLS[name]())
        except Exception as e:
            res.append(named(e))
    return res
def calls(i):
    res = answers()
    try:
        has = any(getattr(k, "_schema", None) is not None and k._schema.name == "lc::f"
                  for k in nr.native_decomp_table(overrides_only=True))
    except Exception as e:
        has = named(e)
    out("calls", i, res, has, list(WARNED_VALUES))
def cond_of(kind):
    if kind == "cond_redefines":
        def c(*a, **k):
            redefine_f(); return True
        return c
    if kind == "cond_removes":
        def c(*a, **k):
            remove_f(); return False
        return c
    if kind == "cond_redefines_declines":
        def c(*a, **k):
            redefine_f(); return False
        return c
    return {"always": always, "never": never, "uncond": None}.get(kind, always)  # impl_raises: always
def runtime_of(kind):
    if kind == "runtime_redefines":
        def r():
            redefine_f(); return True
        return r
    return None
def impl_of(kind, v):
    if kind == "impl_redefines":
        def i(*a, **k):
            redefine_f(); return torch.full_like(a[0], float(v))
        i._lc_value = v
        return i
    if kind == "impl_raises":
        def i(*a, **k):
            raise ValueError(f"lc impl failed {v}")
        i._lc_value = v
        return i
    return imp(v)
POISONED = [False]
PROGS = []
SNAPS = []
MASKS = []
def stock_install():
    if POISONED[0]:
        for k in list(S._graphs):
            if k[-1] != "Autograd":
                S._register_overrides_from_graph(*k, S._graphs[k], filter_state=S._filter_state)
    else:
        S._register_all_overrides()
'''


def _step_code(i: int, step, value_of: dict) -> list[str]:
    """Python lines (unindented) that run one step; they may raise."""
    if isinstance(step, Reg):
        lib, op = OP[step.key]
        v = value_of[id(step), i]
        uncond = step.cond == "uncond"
        fn = {"ref": "nr.register_op_override", "stock": "S.register_op_override",
              "bound": 'BOUND["register_op_override"]'}[step.api]
        extra = ""
        if step.api == "ref" and step.cond == "runtime_redefines":
            extra = f", try_initialize_runtime=runtime_of({step.cond!r})"
        return [f"{fn}({step.dsl!r}, {lib!r}, {op!r}, 'CPU', cond_of({step.cond!r}), "
                f"impl_of({step.cond!r}, {v}), unconditional_override={uncond}{extra})"]
    if isinstance(step, Install):
        return ["nr.register_all_overrides()" if step.api == "ref" else "stock_install()"]
    if isinstance(step, Filter):
        if step.api == "pn":
            if step.dsl in ("triton", "cutedsl"):
                return [f"pn.{step.dsl}.enabled = {not step.disable}"]
            return ["pass"]
        verb = "deregister" if step.disable else "reenable"
        arg = "disable_dsl_names" if step.disable else "enable_dsl_names"
        fn = {"ref": f"nr.{verb}_op_overrides", "stock": f"S.{verb}_op_overrides",
              "bound": f'BOUND["{verb}_op_overrides"]'}[step.api]
        return [f"{fn}({arg}={step.dsl!r})"]
    if isinstance(step, Takeover):
        lines = []
        if step.refused:
            lines += ["try:",
                      "    S.register_op_override('refused', 'aten', 'mul.Tensor', 'Autograd', always, imp(999))",
                      "    POISONED[0] = S is not compat",
                      "except Exception:",
                      "    pass"]
        lines += ["_errs = []",
                  "def _take():",
                  "    try:",
                  "        compat.install_as_torch_native()",
                  "    except Exception as e:",
                  "        _errs.append(named(e))",
                  f"_ts = [threading.Thread(target=_take) for _ in range({step.threads})]",
                  "[t.start() for t in _ts]; [t.join(60) for t in _ts]",
                  "out('takeover', i, sum(len(nr._C.graph(k)) for k in nr._C.graph_keys()), _errs, "
                  "any(t.is_alive() for t in _ts))"]
        return lines
    if isinstance(step, Reorder):
        fn = "nr.reorder_graphs_from_user_function" if step.api == "ref" \
            else "S.reorder_graphs_from_user_function"
        body = {"reverse": "list(reversed(g))",
                "copies_never": "[dataclasses.replace(n, cond_fn=never) for n in g]",
                "copies_reverse": "[dataclasses.replace(n) for n in reversed(g)]"}[step.how]
        return ["del WARNED[:]", "listen()",
                f"{fn}(lambda op, key, g: {body}, reregister_overrides={step.reregister})",
                "out('warned', i, bool(WARNED))"]
    if isinstance(step, Snapshot):
        return ["SNAPS.append(nr.snapshot())"]
    if isinstance(step, Restore):
        return ["if SNAPS:", f"    nr.restore(SNAPS[-1 - {step.which} % len(SNAPS)])"]
    if isinstance(step, Mask):
        if step.enter:
            return ["MASKS.append(nr._unconditional_masked())", "MASKS[-1].__enter__()"]
        return ["if MASKS:", "    MASKS.pop().__exit__(None, None, None)"]
    if isinstance(step, Trace):
        lib, op = OP[step.key]
        table = "nr.native_decomp_table" if step.api == "ref" else "S.native_decomp_table"
        torch_fn = "torch.mul" if step.key == "mul" else "torch.add"
        if step.how == "export":
            lines = ["class _M(torch.nn.Module):",
                     f"    def forward(self, x): return {torch_fn}(x, x)",
                     f"_ep = torch.export.export(_M(), (X,)).run_decompositions({table}())",
                     "_gm = _ep.graph_module",
                     "PROGS.append(_ep.module())"]
        elif step.how == "compile":
            lines = ["from torch._dynamo.backends.common import aot_autograd",
                     "from functorch.compile import make_boxed_func",
                     "_seen = []",
                     "def _fw(gm, _inputs):",
                     "    _seen.append(gm); return make_boxed_func(gm.forward)",
                     f"_fn = torch.compile(lambda x: {torch_fn}(x, x), fullgraph=True, "
                     f"backend=aot_autograd(fw_compiler=_fw, decompositions={table}()))",
                     "_fn(X)",  # compiles now, with the table as it is now
                     "_gm = _seen[-1]",
                     "PROGS.append(_fn)"]
        else:
            lines = ["from torch.fx.experimental.proxy_tensor import make_fx",
                     f"_gm = make_fx(lambda x: {torch_fn}(x, x), decomposition_table={table}())(X)",
                     # run by an Interpreter: it calls the op objects the graph holds
                     "PROGS.append(torch.fx.Interpreter(_gm).run)"]
        return lines + ["out('traced', i, [getattr(n.target, '__name__', str(n.target)) "
                        "for n in _gm.graph.nodes if n.op == 'call_function'])"]
    if isinstance(step, JitScope):
        lib, op = OP[step.key]
        v = value_of[id(step), i]
        return ["with nr.scoped():",
                f"    nr.register_op_override('user', {lib!r}, {op!r}, 'CPU', always, imp({v}))",
                f"    nr._C.install_graph(({lib!r}, {op!r}, 'CPU'), False)",
                f"    _nid = nr.graph({lib!r}, {op!r}, 'CPU')[-1].node_id",
                "    _cu = torch.jit.CompilationUnit('def g(x):\\n    return torch.ops._native.' + _nid + '(x, x)\\n')",
                "    out('jit_inside', i, float(_cu.g(X)[0]))",
                "PROGS.append(_cu.g)"]
    if isinstance(step, CallProgram):
        return ["if PROGS:",
                f"    out('program', i, float(PROGS[{step.which} % len(PROGS)](X)[0]))"]
    if isinstance(step, Redefine):
        return ["remove_f()" if step.remove_only else "redefine_f()"]
    if isinstance(step, ThreadScope):
        kinds = {"dsl": "dsl_names", "op": "op_symbols", "key": "dispatch_keys"}
        scopes = ", ".join(f"nr.disabled_in_thread({kinds[kind]}={name!r})" for kind, name in step.entries)
        order = "list(_open)" if step.out_of_order else "list(reversed(_open))"
        lines = [f"_scopes = [{scopes}]",
                 "_seen = []; _main = []; _errs = []; _open = []",
                 "_held = threading.Event(); _go = threading.Event()",
                 "def _levels():",
                 "    try:",
                 "        _seen.append(answers())",
                 "        for _sc in _scopes:",
                 "            _sc.__enter__(); _open.append(_sc)",
                 "            _seen.append(answers())",
                 "        _held.set(); _go.wait(60)",
                 f"        for _sc in {order}:",
                 "            _open.remove(_sc); _sc.__exit__(None, None, None)",
                 "            _seen.append(answers())",
                 "    except Exception as e:",
                 "        _errs.append(named(e))",
                 "    finally:",
                 "        _held.set()",
                 "        for _sc in reversed(_open):",
                 "            _sc.__exit__(None, None, None)"]
        if step.other_thread:
            lines += ["_t = threading.Thread(target=_levels); _t.start()",
                      "_held.wait(60); _main.append(answers()); _go.set(); _t.join(60)",
                      "_hung = _t.is_alive()"]
        else:
            lines += ["_go.set(); _levels(); _hung = False"]
        return lines + ["out('scoped', i, _seen, _main, _errs, _hung)"]
    if isinstance(step, Stats):
        lines = [f"nr.collect_stats({step.on})"]
        if step.reset:
            lines.append("nr.reset_stats()")
        return lines + ["out('stats', i, *read_stats())"]
    if isinstance(step, Coverage):
        return [f"nr.set_coverage_check(coverage_of({step.how!r}))"]
    if isinstance(step, Policy):
        return [f"nr.set_impl_error_policy({step.policy!r})"]
    if isinstance(step, Fork):
        return ["_pid = os.fork()",
                "if _pid == 0:",
                "    try:",
                "        _r = answers(('mul', 'add'))",
                "        os.write(1, ('@@' + json.dumps(['forked', i, _r]) + '\\n').encode())",
                "    finally:",
                "        os._exit(0)",
                "_deadline = time.time() + 30",
                "while True:",
                "    _p, _st = os.waitpid(_pid, os.WNOHANG)",
                "    if _p:",
                "        out('fork', i, _st); break",
                "    if time.time() > _deadline:",
                "        os.kill(_pid, 9); os.waitpid(_pid, 0); out('fork', i, 'hung'); break",
                "    time.sleep(0.01)"]
    raise TypeError(step)


def _wrapped(i: int, step, value_of: dict, calls: bool = True) -> list[str]:
    """One step with its outcome reported, then one call of each op."""
    lines = [f"i = {i}", "try:"]
    lines += ["    " + line for line in _step_code(i, step, value_of)]
    lines += ["    out('step', i, 'ok')",
              "except Exception as e:",
              "    out('step', i, 'err', *named(e))"]
    if calls:
        lines.append("calls(i)")
    return lines


def numbering(program: Program) -> list[tuple[int, object, bool]]:
    """(step number, step, inside a Threads step) in the order they run;
    a Threads step is numbered, then its inner steps."""
    out = []
    for step in program.steps:
        out.append((len(out), step, False))
        if isinstance(step, Threads):
            for inner in step.steps:
                out.append((len(out), inner, True))
    return out


def values(program: Program) -> dict:
    """The constant each registering step's impl returns: 100, 101, ..."""
    value_of = {}
    for i, step, _ in numbering(program):
        if isinstance(step, (Reg, JitScope)):
            value_of[id(step), i] = 100 + len(value_of)
    return value_of


def render(program: Program, universe: dict) -> str:
    """The child script. `universe`: key -> every answer a caller thread may see."""
    value_of = values(program)
    lines = [PRELUDE]
    if program.header.early == "nr_first":
        lines.append("import native_registry")
    lines.append(BODY_START)
    if program.header.empty_chain != "keep_dormant":
        lines.append(f"nr.set_empty_chain_policy({program.header.empty_chain!r})")
    numbered = numbering(program)
    pos = 0
    while pos < len(numbered):
        i, step, _ = numbered[pos]
        pos += 1
        if not isinstance(step, Threads):
            lines += _wrapped(i, step, value_of)
            continue
        lines += [f"UNIVERSE = {universe!r}",
                  "_stop = threading.Event(); _bad = []; _rounds = [0]; _made = []",
                  "def _caller():",
                  "    made = {'mul': 0, 'add': 0}; _made.append(made)  # each its own: exact totals",
                  "    while not _stop.is_set():",
                  "        for _name in ('mul', 'add'):",
                  "            made[_name] += 1",
                  "            try:",
                  "                _v = CALLS[_name]()",
                  "            except Exception as e:",
                  "                if not (UNIVERSE['raises'] and " + repr(IMPL_ERROR) + " in str(e)):",
                  "                    _bad.append([_name] + named(e))",
                  "                continue",
                  "            if _v not in UNIVERSE[_name]:",
                  "                _bad.append([_name, _v])",
                  "        _rounds[0] += 1",
                  "_callers = [threading.Thread(target=_caller) for _ in range(2)]",
                  "[t.start() for t in _callers]",
                  "time.sleep(0.05)"]
        for _ in step.steps:
            j, inner, _ = numbered[pos]
            pos += 1
            if isinstance(inner, Filter) and inner.api != "ref":
                # torch 2.13's own registry re-installs routers on every
                # filter change, a LibTorch hazard under calls that is not
                # the reference's: such a step runs only once the reference
                # is torch._native.registry
                lines += ["if sys.modules['torch._native.registry'] is not compat:",
                          f"    out('skipped', {j})",
                          "else:"]
                lines += ["    " + line for line in _wrapped(j, inner, value_of, calls=False)]
            else:
                lines += _wrapped(j, inner, value_of, calls=False)
            lines.append("time.sleep(0.02)")
        lines += ["_stop.set(); [t.join(30) for t in _callers]",
                  f"out('callers', {i}, _bad[:3], len(_bad), _rounds[0], "
                  "any(t.is_alive() for t in _callers), "
                  "{k: sum(m[k] for m in _made) for k in ('mul', 'add')})"]
        lines.append(f"calls({i})")
    if program.header.daemon_exit:
        # The control plane only: a daemon thread inside an aten op when the
        # interpreter exits aborts stock torch itself on Python 3.11 (its
        # bindings take the GIL back in a destructor); that case is judged
        # against stock torch by conformance/python/test_interpreter_exit.py.
        lines += ["def _churn():",
                  "    while True:",
                  "        try:",
                  "            nr.deregister_op_overrides(disable_dsl_names='user')",
                  "            nr.reenable_op_overrides(enable_dsl_names='user')",
                  "            with nr.scoped():",
                  "                nr.register_op_override('daemon', 'aten', 'mul.Tensor', 'CPU', never, imp(1))",
                  "        except Exception:",
                  "            pass",
                  "for _ in range(2):",
                  "    threading.Thread(target=_churn, daemon=True).start()",
                  "time.sleep(0.1)"]
    lines.append("out('end')")
    return "\n".join(lines) + "\n"
