"""torch's own shipped overrides under an implementation that serves
torch._native.registry: one registry after a takeover, and early activation.

torch's registrars (torch/_native/ops/) register at `import torch` when their
DSL is available, which is every CUDA machine with Triton or CuTeDSL. On
this CPU machine each is re-run in a child interpreter with its DSL's
availability check patched to "available" by an import hook (PRELUDE), so
that it registers at import exactly as on such a machine. Their routers sit
at CUDA keys, so nothing has to run on CUDA. This CPU build of torch has no
CUDA kernel of its own for the ops they override (at most a composite one,
for _fused_rms_norm a CompositeImplicitAutograd one), so the hook gives each
a stand-in one, as a CUDA build has, in every child alike; a stand-in raises
if ever called.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import behaviour, run_in_fresh_interpreter
from fixtures.python.torch_fixtures import WITHOUT_TORCH_NATIVE

# registrar -> (its module under torch._native.ops, the function it runs at
# import, its DSL, the graph keys it registers).
REGISTRARS = {
    "bmm_outer_product": ("bmm_outer_product.triton_impl", "register_to_dispatch", "triton",
                          [("aten", "bmm", "CUDA")]),
    "topk": ("topk.cutedsl_impl", "register_to_dispatch", "cutedsl",
             [("aten", "topk", "CUDA"), ("aten", "topk.values", "CUDA")]),
    "scatter_add": ("scatter_add.cutedsl_impl", "register_to_dispatch", "cutedsl",
                    [("aten", "scatter_add", "CUDA"), ("aten", "scatter_add.out", "CUDA"),
                     ("aten", "scatter_add_", "CUDA")]),
    "norm": ("norm.rmsnorm_impl", "register_rmsnorm_overrides", "cutedsl",
             [("aten", "_fused_rms_norm", "CUDA"), ("aten", "_fused_rms_norm_backward", "CUDA")]),
    "foreach_mm": ("foreach_mm.impl", "register_to_dispatch", "native",
                   [("aten", "_foreach_mm", "CUDA")]),
}

# Runs before `import torch`. CHOSEN's registrar runs (its DSL reported
# available); every other registrar is a no-op, so the child holds exactly
# CHOSEN's overrides. NEVER_INSTALL: torch's registry registers but never
# installs (the dispatcher as if it had never installed).
PRELUDE = '''
import sys
from importlib.machinery import PathFinder
CHOSEN, NEVER_INSTALL, KEYS = {chosen!r}, {never!r}, {keys!r}
REGISTRARS = {registrars!r}
AVAILABILITY = {{"torch._native.triton_utils": "_version_is_sufficient",
                "torch._native.cutedsl_utils": "_version_is_ok"}}
STAND_INS = []

def _stand_in(*args, **kwargs):
    raise RuntimeError("stand-in CUDA kernel of a CPU build: not to be called")

def _add_stand_ins(registry):
    import torch
    for graph_key in registry._graphs:
        lib_symbol, op, key = graph_key if len(graph_key) == 3 else ("aten", *graph_key)
        # a CUDA build has a kernel of the op's own at CUDA; this CPU build
        # has none (at most a composite one): give it one
        if not torch._C._dispatch_has_kernel_for_dispatch_key(lib_symbol + "::" + op, key):
            lib = torch.library.Library(lib_symbol, "IMPL", key)
            lib.impl(op, _stand_in, key)
            STAND_INS.append(lib)

def _after(name, module):
    if name in AVAILABILITY:
        from torch._vendor.packaging.version import Version
        module._check_runtime_available = lambda: (True, Version("99.0"))
        setattr(module, AVAILABILITY[name], lambda: True)
    for registrar, (path, function) in REGISTRARS.items():
        if name == "torch._native.ops." + path and registrar != CHOSEN:
            setattr(module, function, lambda: None)
    if name == "torch._native.registry":
        # torch/_native/__init__.py installs every graph through this, once
        # its registrars have run: the stand-ins go in first
        install_all = module._register_all_overrides
        def register_all():
            _add_stand_ins(module)
            if not NEVER_INSTALL:
                install_all()
        module._register_all_overrides = register_all

class _Loader:
    def __init__(self, name, inner):
        self.name, self.inner = name, inner
    def __getattr__(self, attr):
        return getattr(self.inner, attr)
    def create_module(self, spec):
        return self.inner.create_module(spec)
    def exec_module(self, module):
        self.inner.exec_module(module)
        _after(self.name, module)

class _Hook:
    def find_spec(self, name, path=None, target=None):
        if not name.startswith("torch._native."):
            return None
        spec = PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(name, spec.loader)
        return spec

sys.meta_path.insert(0, _Hook())
'''

# Prints, as JSON, what the dispatcher holds for the ops of KEYS and the
# `_native` ops and dangling impls of the process.
DISPATCHER_STATE = '''
import json
def dispatcher_state(stock_native_ops=()):
    ops = sorted({"aten::" + op for _, op, _ in KEYS})
    names = set(torch._C._dispatch_get_all_op_names())
    return {"dump": {op: torch._C._dispatch_dump(op) for op in ops},
            "table": {op: torch._C._dispatch_dump_table(op) for op in ops},
            "stock_native_ops_left": sorted(n for n in stock_native_ops if n in names),
            "dangling": sorted(str(x) for x in torch._C._dispatch_find_dangling_impls())}
'''


def prelude(registrar: str, *, never_install: bool = False) -> str:
    path, function, _, keys = REGISTRARS[registrar]
    registrars = {name: (p, f) for name, (p, f, _, _) in REGISTRARS.items()}
    return PRELUDE.format(chosen=registrar, never=never_install, keys=keys, registrars=registrars)


@behaviour("takeover.front-ends-reach-shipped-overrides")
@pytest.mark.parametrize("registrar", sorted(REGISTRARS))
def test_front_ends_control_the_overrides_torch_registered_at_import(impl, registrar):
    _, _, dsl, keys = REGISTRARS[registrar]
    lines = run_in_fresh_interpreter(impl, f"""
        KEYS, DSL = {keys!r}, {dsl!r}
        impl.serve_torch_front_ends()
        import torch._native.registry as reg
        import torch.backends.python_native as pn
        def disable():
            if DSL in pn.all_dsls: getattr(pn, DSL).disable()
            else: reg.deregister_op_overrides(disable_dsl_names=DSL)
        def enable():
            if DSL in pn.all_dsls: getattr(pn, DSL).enable()
            else: reg.reenable_op_overrides(enable_dsl_names=DSL)
        def state():
            graphs = [impl.graph(*k) for k in KEYS]
            return [bool(g) and all(n.dsl_name == DSL for n in g) for g in graphs], [
                sorted({{n.active for n in g}}) for g in graphs]
        print(json.dumps(reg.get_dsl_operations(DSL)))
        print(json.dumps(state()))
        disable(); print(json.dumps(state()))
        enable(); print(json.dumps(state()))
    """, prelude=prelude(registrar) + "\nimport json\n")
    ops = sorted({op for _, op, _ in keys})
    mine = [True] * len(keys)
    on, off = [mine, [[True]] * len(keys)], [mine, [[False]] * len(keys)]
    assert [json.loads(line) for line in lines] == [ops, on, off, on]


def _baseline(impl, registrar: str) -> dict:
    """The dispatcher of a child whose torch registry never installed."""
    _, _, _, keys = REGISTRARS[registrar]
    body = f"KEYS = {keys!r}\n" + DISPATCHER_STATE + "print(json.dumps(dispatcher_state()))\n"
    lines = run_in_fresh_interpreter(impl, body, prelude=prelude(registrar, never_install=True))
    return json.loads(lines[-1])


TAKEOVER_BODY = '''
import json
import torch._native.registry as stock
DSL = {dsl!r}
stock_key = (lambda k: k) if hasattr(stock, "_ALLOWED_LIB_SYMBOLS") else (lambda k: k[1:])
router_libs = getattr(stock, "_override_libs", None)
if router_libs is None:
    router_libs = stock._aten_override_libs
# The stock registry's state made less plain before the takeover: an
# unconditional override by another DSL at the first key, then the
# registrar's DSL disabled there (its nodes inactive, the unconditional one
# still installed).
first = KEYS[0]
stock.register_op_override("extra_dsl", "aten", first[1], first[2], None,
                           lambda *a, **k: None, unconditional_override=True)
stock._register_all_overrides()
stock.deregister_op_overrides(disable_dsl_names=DSL)
stock_nodes = [list(stock._graphs[stock_key(k)]) for k in KEYS]
stock_always_true = stock._always_true
installed = [stock_key(k) in router_libs for k in KEYS]
stock_native_ops = ["_native::" + name for name in stock._defined_native_ops]
assert stock_native_ops
print(json.dumps(sorted(stock_native_ops)))
# Its private helpers that install kernels (torch 2.13's names).
helpers = [name for name in ("_install_aten_override", "_register_node_impl")
           if hasattr(stock, name)]

def cond_of(node, always_true):
    # an unconditional override registered with cond None holds an always-true cond
    return None if node.unconditional_override and node.cond_fn is always_true else node.cond_fn

def differences(old, new, new_always_true):
    """The fields in which a migrated node differs from the stock one."""
    checks = {{
        "dsl_name": old.dsl_name == new.dsl_name,
        "lib_symbol": getattr(old, "lib_symbol", "aten") == new.lib_symbol,
        "op_symbol": old.op_symbol == new.op_symbol,
        "dispatch_key": old.dispatch_key == new.dispatch_key,
        "active": old.active == new.active,
        "unconditional_override": old.unconditional_override == new.unconditional_override,
        "cond": cond_of(old, stock_always_true) is cond_of(new, new_always_true),
        "impl": old.impl_fn is new.impl_fn,
        "try_initialize_runtime": getattr(old, "try_initialize_runtime", None)
                                  is new.try_initialize_runtime,
    }}
    return [field for field, same in checks.items() if not same]

with impl.scope():
    impl.serve_torch_front_ends()
    import torch._native.registry as reg
    got = [impl.graph(*k) for k in KEYS]
    print(json.dumps([len(g) for g in got] == [len(g) for g in stock_nodes]))
    print(json.dumps([differences(o, n, reg._always_true) for g_old, g_new in zip(stock_nodes, got)
                      for o, n in zip(g_old, g_new)]))
    print(json.dumps([impl.router_installed(*k) for k in KEYS] == installed))
    print(json.dumps([impl.router_installed(*k) for k in KEYS]))
    # The replaced module's names reach the one registry.
    print(json.dumps([stock.register_op_override is reg.register_op_override,
                      stock._graphs is reg._graphs, stock._filter_state is reg._filter_state]))
    # Its helpers without a counterpart refuse, naming themselves.
    refused = {{}}
    for name in helpers:
        try:
            getattr(stock, name)(first[1], first[2], lambda *a, **k: None)
        except RuntimeError as e:
            refused[name] = name in str(e) and "took over" in str(e)
        else:
            refused[name] = False
    print(json.dumps(refused == {{name: True for name in helpers}} and bool(helpers)))
    stock.reenable_op_overrides(enable_dsl_names=DSL)
    print(json.dumps([all(n.active for n in impl.graph(*k)) for k in KEYS]))
    # A second call moves nothing.
    ids = [[n.node_id for n in impl.graph(*k)] for k in KEYS]
    impl.serve_torch_front_ends()
    print(json.dumps(ids == [[n.node_id for n in impl.graph(*k)] for k in KEYS]))
    print(json.dumps(dispatcher_state(stock_native_ops)["stock_native_ops_left"]))
    # torch 2.13's router teardown reaches the reference's router.
    if hasattr(stock, "_destroy_aten_override"):
        stock._destroy_aten_override(first[1], first[2])
    print(json.dumps(impl.router_installed(*first)))
print(json.dumps(dispatcher_state(stock_native_ops)))
'''


@behaviour("takeover.one-registry", "takeover.stock-removed-exactly")
@pytest.mark.parametrize("registrar", sorted(REGISTRARS))
def test_takeover_moves_torchs_overrides_and_leaves_no_trace(impl, registrar):
    if "takes-over-torch-native" not in impl.features:
        pytest.skip("unsupported: the adapter does not replace a torch._native.registry")
    _, _, dsl, keys = REGISTRARS[registrar]
    body = f"KEYS = {keys!r}\n" + DISPATCHER_STATE + TAKEOVER_BODY.format(dsl=dsl)
    lines = run_in_fresh_interpreter(impl, body, prelude=prelude(registrar))
    results = [json.loads(line) for line in lines]
    (stock_native_ops, same_lengths, differences, same_routers, routers, forwarding, refused,
     reenabled, idempotent, left_inside, destroyed, after) = results
    assert same_lengths, "the reference's graphs hold other nodes than the stock registry's"
    # Each migrated node is the stock one in every field, its callables the very objects.
    assert differences == [[] for _ in differences] and differences, differences
    # a router where the stock registry had one: at the first key (the
    # unconditional override survives the disable), at no other
    assert same_routers and routers == [True] + [False] * (len(keys) - 1), routers
    assert forwarding == [True, True, True]
    assert refused, "a stock helper that installs kernels stays live after the takeover"
    assert destroyed is False, "the replaced module's router teardown did not reach the reference"
    assert reenabled == [True] * len(keys)
    assert idempotent
    # The stock `_native` ops stay, for programs recorded against them.
    assert left_inside == sorted(stock_native_ops), "a stock _native op was undefined"
    baseline = _baseline(impl, registrar)
    assert after["dump"] == baseline["dump"]
    assert after["table"] == baseline["table"]
    assert after["stock_native_ops_left"] == sorted(stock_native_ops)
    assert after["dangling"] == baseline["dangling"]


# ---- early activation -------------------------------------------------------------

PTH = pathlib.Path(__file__).resolve().parents[2] / "reference" / "python" / "native_registry_early.pth"


def _early_child(impl, value: str | None, body: str, registrar: str = "bmm_outer_product"):
    """A child whose site processes the package's .pth (as site-packages
    does at start-up) with NATIVE_REGISTRY_AS_TORCH_NATIVE=value, then runs
    `body` after importing torch. Returns (stdout lines, stderr)."""
    from adapter import subprocess_environment

    env = subprocess_environment(impl)
    if env is None:
        pytest.skip("unsupported: the adapter was not loaded by spec")
    env.pop("NATIVE_REGISTRY_AS_TORCH_NATIVE", None)
    if value is not None:
        env["NATIVE_REGISTRY_AS_TORCH_NATIVE"] = value
    script = ("import site, sys\n"
              f"site.addsitedir({str(PTH.parent)!r})\n"
              "print('torch imported by the hook:', 'torch' in sys.modules)\n"
              + prelude(registrar) + "\nimport torch, json\n" + body)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines(), out.stderr


@behaviour("takeover.early-activation")
def test_early_activation_registers_torchs_overrides_straight_into_the_reference(impl):
    if "takes-over-torch-native" not in impl.features:
        pytest.skip("unsupported: the adapter does not replace a torch._native.registry")
    lines, _ = _early_child(impl, "1", """
import native_registry.registry as nr
from native_registry import upstream_compat
import torch._native.registry as reg
print(reg is upstream_compat)
print(json.dumps([n.dsl_name for n in nr.graph("aten", "bmm", "CUDA")]),
      nr.router_state("aten", "bmm", "CUDA"))
# torch's own registry module never ran: nothing it installs is in the dispatcher
print("_native/registry.py" in torch._C._dispatch_dump("aten::bmm"))
# nor was it imported and then taken over: no such module object exists at all
import gc, types
print(any(isinstance(m, types.ModuleType) and m.__name__ == "torch._native.registry"
          for m in gc.get_objects()))
import torch.backends.python_native as pn
pn.triton.disable(); print(nr.graph("aten", "bmm", "CUDA")[0].active)
pn.triton.enable(); print(nr.graph("aten", "bmm", "CUDA")[0].active)
from torch._native import variants
print(variants.__name__)
""")
    assert lines == ["torch imported by the hook: False", "True", '["triton"] active', "False",
                     "False", "False", "True", "native_registry.variants"]


@behaviour("takeover.early-activation")
@pytest.mark.parametrize("value", [None, "0", "yes"])
def test_without_early_activation_torch_keeps_its_registry(impl, value):
    if "takes-over-torch-native" not in impl.features:
        pytest.skip("unsupported: the adapter does not replace a torch._native.registry")
    lines, stderr = _early_child(impl, value, """
import torch._native.registry as reg
print(reg.__name__, "native_registry" in sys.modules)
""")
    assert lines == ["torch imported by the hook: False", "torch._native.registry False"]
    if value == "yes":
        assert "NATIVE_REGISTRY_AS_TORCH_NATIVE" in stderr and "'yes'" in stderr
    else:
        assert "NATIVE_REGISTRY_AS_TORCH_NATIVE" not in stderr


# ---- a PyTorch without torch._native ------------------------------------------------


@behaviour("frontends.features-follow-host-torch")
def test_a_torch_without_torch_native_gets_no_front_end_features(impl):
    if getattr(getattr(impl, "module", None), "__name__", "").startswith("torch._native"):
        pytest.skip("unsupported: the implementation is torch's own torch._native, which such a "
                    "PyTorch does not have")
    lines = run_in_fresh_interpreter(impl, """
        print(sorted({"torch-front-ends", "takes-over-torch-native"} & set(impl.features)))
        # The registry itself still works there.
        key = ("aten", "mul.Tensor", "CPU")
        with impl.scope():
            impl.register("test_dsl", *key, lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
            impl.install(*key)
            print(torch.mul(torch.ones(2), torch.ones(2)).tolist())
        print(torch.mul(torch.ones(2), torch.ones(2)).tolist())
    """, prelude=WITHOUT_TORCH_NATIVE)
    assert lines == ["[]", "[7.0, 7.0]", "[1.0, 1.0]"]
