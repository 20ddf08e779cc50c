"""The Python API's surface: upstream's names and signatures, node objects,
validation with upstream's exception types, ordering, the environment hook."""

from __future__ import annotations

import ast
import inspect
import logging
import subprocess
import sys
from unittest.mock import patch

import pytest
import torch

import native_registry
import native_registry.registry as registry


def true_cond(*a, **k):
    return True


def identity(x, *rest):
    return x


UPSTREAM_SIGNATURES = {
    "register_op_override": "(backend, lib_symbol, op_symbol, dispatch_key, cond, impl, *, "
    "try_initialize_runtime=None, allow_multiple_override=False, unconditional_override=False)",
    "deregister_op_overrides": "(*, disable_dsl_names=None, disable_op_symbols=None, "
    "disable_dispatch_keys=None)",
    "reenable_op_overrides": "(*, enable_dsl_names=None, enable_op_symbols=None, "
    "enable_dispatch_keys=None)",
    "reorder_graphs_from_user_function": "(fn, *, reregister_overrides=False)",
    "get_dsl_operations": "(dsl_name, lib_symbol='aten')",
    "native_decomp_table": "(overrides_only=False)",
}


@pytest.mark.parametrize("name, expected", sorted(UPSTREAM_SIGNATURES.items()))
def test_upstream_names_and_signatures(name, expected):
    sig = inspect.signature(getattr(registry, name))
    plain = sig.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )
    assert str(plain) == expected


def test_package_exports_upstream_helpers():
    for name in ("get_user_ordering_fn", "_unconditional_masked", "_OverrideNode",
                 "register_all_overrides", "snapshot", "restore", "scoped"):
        assert callable(getattr(native_registry, name)), name


@pytest.mark.parametrize("cwd", ["repo", "elsewhere"])
def test_importable_from_repository_root_and_elsewhere(cwd, tmp_path):
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[3]
    where = root if cwd == "repo" else tmp_path
    out = subprocess.run(
        [sys.executable, "-c", "import native_registry, native_registry.registry as r; "
         "print(sorted(r.allowed_namespaces()))"],
        cwd=where, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['aten']"


def run_fresh(script: str) -> subprocess.CompletedProcess:
    """Runs `script` in a new interpreter, which must succeed."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def test_a_routed_program_writes_nothing_to_stderr():
    """The registry speaks through warnings, logging and exceptions; its own
    set-up (the fork handlers, the router's first install) prints nothing."""
    script = ("import torch, native_registry.registry as r\n"
              "r.register_op_override('d', 'aten', 'mul.Tensor', 'CPU', lambda *a, **k: True,\n"
              "                       lambda a, b: torch.full_like(a, 7.0))\n"
              "r.register_all_overrides()\n"
              "assert (torch.ones(2) * torch.ones(2) == 7).all()\n")
    out = run_fresh(script)
    assert "[native_registry]" not in out.stderr, out.stderr


def test_the_first_routers_of_a_process_have_ids_of_their_own():
    """router_id tells each router from any other at its key, 0 meaning none:
    so in a fresh process the very first routers made have distinct ids, none
    of them 0."""
    script = ("import torch, native_registry.registry as r\n"
              "from native_registry import _C\n"
              "key = ('aten', 'mul.Tensor', 'CPU')\n"
              "r.register_op_override('d', *key, lambda *a, **k: True,\n"
              "                       lambda a, b: torch.full_like(a, 7.0))\n"
              "ids = []\n"
              "for _ in range(3):\n"
              "    _C.install_graph(key, True)\n"
              "    ids.append(_C.router_id(key))\n"
              "print(ids)\n")
    out = run_fresh(script)
    ids = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert 0 not in ids and len(set(ids)) == 3, ids


def test_override_node_fields_and_defaults():
    node = registry._OverrideNode("test_dsl", "aten", "add.Tensor", "CPU", true_cond, identity,
                                  "test_node")
    assert (node.dsl_name, node.lib_symbol, node.op_symbol, node.dispatch_key) == (
        "test_dsl", "aten", "add.Tensor", "CPU")
    assert node.cond_fn is true_cond and node.impl_fn is identity
    assert node.node_id == "test_node"
    assert node.try_initialize_runtime is None
    assert node.unconditional_override is False
    assert node.active is True


def test_override_node_takes_mains_positional_order_and_refuses_unknown_fields():
    runtime = lambda: True  # noqa: E731
    node = registry._OverrideNode("d", "aten", "add.Tensor", "CPU", true_cond, identity, "n",
                                  True, False, runtime)
    assert (node.unconditional_override, node.active, node.try_initialize_runtime) == (
        True, False, runtime)
    with pytest.raises(TypeError, match="backend"):
        registry._OverrideNode("d", "aten", "add.Tensor", "CPU", true_cond, identity, "n",
                               backend="d")
    with pytest.raises(TypeError, match="multiple values"):
        registry._OverrideNode("d", "aten", "add.Tensor", "CPU", true_cond, identity, "n",
                               node_id="m")
    with pytest.raises(TypeError, match="missing"):
        registry._OverrideNode("d", "aten", "add.Tensor", "CPU", true_cond, identity)


def test_register_appends_a_bound_node_and_installs_nothing(reg):
    reg.register_op_override("backend_z", "aten", "mul.Tensor", "CPU", true_cond, identity)
    reg.register_op_override("backend_a", "aten", "mul.Tensor", "CPU", true_cond, identity)
    nodes = reg.graph("aten", "mul.Tensor", "CPU")
    assert [n.dsl_name for n in nodes] == ["backend_z", "backend_a"]
    assert nodes[0].cond_fn is true_cond and nodes[0].impl_fn is identity
    assert nodes[0].node_id != nodes[1].node_id
    assert reg.router_state("aten", "mul.Tensor", "CPU") == "absent"


def test_deregister_marks_nodes_inactive_and_reenable_restores(reg):
    reg.register_op_override("test_backend", "aten", "mul.Tensor", "CPU", true_cond, identity)
    node = reg.graph("aten", "mul.Tensor", "CPU")[0]
    assert node.active
    reg.deregister_op_overrides(disable_dsl_names="test_backend")
    assert not node.active
    reg.reenable_op_overrides(enable_dsl_names=["test_backend"])
    assert node.active
    with pytest.raises(AttributeError, match="follows the filters"):
        node.active = False


def test_a_filter_change_is_logged_once_with_what_it_names(reg, caplog):
    reg.register_op_override("dsl_a", "aten", "mul.Tensor", "CPU", lambda a, b: False,
                             lambda a, b: a)
    with caplog.at_level(logging.INFO, logger="native_registry.registry"):
        reg.deregister_op_overrides(disable_dsl_names="dsl_a", disable_dispatch_keys=["CPU"])
        reg.reenable_op_overrides(enable_dsl_names="dsl_a", enable_dispatch_keys=["CPU"])
    messages = [r.getMessage() for r in caplog.records if r.name == "native_registry.registry"]
    assert messages == ["Disabling overrides: dsl=[dsl_a] op_symbol=[] dispatch_key=[CPU]",
                        "Re-enabling overrides: dsl=[dsl_a] op_symbol=[] dispatch_key=[CPU]"]


def test_reorder_with_user_function(reg):
    for dsl in ("dsl_c", "dsl_a", "dsl_b"):
        reg.register_op_override(dsl, "aten", "mul.Tensor", "CPU", true_cond, identity)
    seen = []

    def alphabetical(op_symbol, dispatch_key, graph):
        seen.append((op_symbol, dispatch_key))
        return sorted(graph, key=lambda n: n.dsl_name)

    reg.reorder_graphs_from_user_function(alphabetical)
    assert [n.dsl_name for n in reg.graph("aten", "mul.Tensor", "CPU")] == ["dsl_a", "dsl_b", "dsl_c"]
    assert seen == [("mul.Tensor", "CPU")]


@pytest.mark.parametrize(
    "bad_fn, reason",
    [
        (lambda op, key, graph: (_ for _ in ()).throw(ValueError("Test exception")), "Test exception"),
        (lambda op, key, graph: 42, "expected a list"),
        (lambda op, key, graph: ["not a node"], "not a registered node"),
        (lambda op, key, graph: graph + graph, "appears twice"),
    ],
)
def test_failed_transformation_keeps_graph_and_warns(reg, caplog, bad_fn, reason):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", true_cond, identity)
    before = reg.graph("aten", "mul.Tensor", "CPU")
    with caplog.at_level(logging.WARNING, logger="native_registry.registry"):
        reg.reorder_graphs_from_user_function(bad_fn)
    records = [r for r in caplog.records if r.name == "native_registry.registry"]
    assert len(records) == 1
    assert "Graph transformation failed" in records[0].getMessage()
    assert reason in records[0].getMessage()
    assert reg.graph("aten", "mul.Tensor", "CPU") == before


def test_reorder_rejects_non_callable(reg):
    with pytest.raises(TypeError, match="fn must be callable"):
        reg.reorder_graphs_from_user_function("sorted")


def test_user_ordering_fn_unset_gives_none():
    with patch.dict("os.environ", {}, clear=True):
        native_registry.get_user_ordering_fn.cache_clear()
        assert native_registry.get_user_ordering_fn() is None
    native_registry.get_user_ordering_fn.cache_clear()


def test_user_ordering_fn_unresolvable_raises():
    with patch.dict("os.environ",
                    {"TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN": "nonexistent.module.function"}):
        native_registry.get_user_ordering_fn.cache_clear()
        with pytest.raises(ValueError, match="Could not resolve"):
            native_registry.get_user_ordering_fn()
    native_registry.get_user_ordering_fn.cache_clear()


def test_user_ordering_fn_resolves_a_function():
    with patch.dict("os.environ", {"TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN": "builtins.sorted"}):
        native_registry.get_user_ordering_fn.cache_clear()
        assert native_registry.get_user_ordering_fn() is sorted
    native_registry.get_user_ordering_fn.cache_clear()


@pytest.mark.parametrize("bad_key", ["Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"])
def test_disallowed_dispatch_keys(reg, bad_key):
    with pytest.raises(ValueError, match="dispatch_key="):
        reg.register_op_override("test_dsl", "aten", "mul.Tensor", bad_key, true_cond, identity)
    assert reg.graph("aten", "mul.Tensor", bad_key) == []


def test_namespace_off_the_allowlist(reg):
    assert "_native" not in reg.allowed_namespaces()
    with pytest.raises(ValueError, match="is not overridable"):
        reg.register_op_override("test_dsl", "_native", "some_op", "CPU", true_cond, identity)
    with pytest.raises(ValueError, match="can never be overridable"):
        reg.allow_namespace("_native")


def test_cond_none_needs_unconditional(reg):
    with pytest.raises(ValueError, match="cond must be provided"):
        reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", None, identity)


def test_unconditional_refuses_runtime_initialization(reg):
    with pytest.raises(ValueError, match="try_initialize_runtime cannot be provided"):
        reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", None, identity,
                                 try_initialize_runtime=lambda: True, unconditional_override=True)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"cond": 3}, TypeError, "cond must be callable, got int"),
        ({"impl": None}, TypeError, "impl must be callable, got NoneType"),
        ({"try_initialize_runtime": "yes"}, TypeError, "try_initialize_runtime must be callable"),
        ({"dispatch_key": "NotAKey"}, ValueError, "unknown dispatch_key='NotAKey'"),
        ({"dispatch_key": 5}, TypeError, "dispatch_key must be a str"),
        ({"op_symbol": "aten::mul"}, ValueError, "is not an op symbol"),
        ({"op_symbol": ""}, ValueError, "op_symbol must be a non-empty name"),
        ({"dsl_name": "  "}, ValueError, "dsl_name must be a non-empty name"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(reg, kwargs, error, message):
    args = {"dsl_name": "d", "lib_symbol": "aten", "op_symbol": "mul.Tensor",
            "dispatch_key": "CPU", "cond": true_cond, "impl": identity}
    args.update(kwargs)
    extra = {k: args.pop(k) for k in ("try_initialize_runtime",) if k in args}
    keys_before = registry._C.graph_keys()
    with pytest.raises(error, match=message):
        reg.register_op_override(*args.values(), **extra)
    assert registry._C.graph_keys() == keys_before


def test_bad_filter_entries_are_refused(reg):
    with pytest.raises(TypeError, match="filter entries must be a str"):
        reg.deregister_op_overrides(disable_dsl_names=["ok", 3])
    with pytest.raises(ValueError, match="must be a non-empty name"):
        reg.deregister_op_overrides(disable_dsl_names=[""])
    assert registry._C.filters() == ([], [], [])


def test_get_dsl_operations_defaults_to_aten(reg):
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", true_cond, identity)
    reg.register_op_override("test_dsl", "aten", "bmm", "CPU", true_cond, identity)
    reg.register_op_override("other", "aten", "add.Tensor", "CPU", true_cond, identity)
    assert reg.get_dsl_operations("test_dsl") == ["bmm", "mul.Tensor"]
    assert reg.get_dsl_operations("nobody") == []


def test_snapshot_restore_roundtrip(reg):
    saved = reg.snapshot()
    reg.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU", true_cond,
                             lambda a, b: torch.full_like(a, 3.0))
    reg.register_all_overrides()
    reg.deregister_op_overrides(disable_op_symbols="bmm")
    assert torch.equal(torch.ops.aten.mul.Tensor(torch.tensor([1.0]), torch.tensor([2.0])),
                       torch.tensor([3.0]))
    reg.restore(saved)
    assert reg.graph("aten", "mul.Tensor", "CPU") == []
    assert registry._C.filters() == ([], [], [])
    assert torch.equal(torch.ops.aten.mul.Tensor(torch.tensor([1.0]), torch.tensor([2.0])),
                       torch.tensor([2.0]))
    with pytest.raises(TypeError, match="takes a Snapshot"):
        reg.restore("not a snapshot")


def test_the_package_reports_its_version():
    """native_registry.__version__ is the project's version (meson.build's
    project(), which the installed distribution's metadata also carries)."""
    import importlib.metadata
    import pathlib
    import re

    meson = (pathlib.Path(__file__).parents[3] / "meson.build").read_text()
    project_version = re.search(r"version:\s*'([^']+)'", meson).group(1)
    assert native_registry.__version__ == project_version
    assert importlib.metadata.version("native_registry") == project_version
    assert re.fullmatch(r"\d+\.\d+\.\d+", native_registry.__version__)


def test_upstreams_private_name_of_register_all_overrides_is_the_same_function():
    import native_registry.registry as registry
    assert registry._register_all_overrides is registry.register_all_overrides


# ---- small edges of the Python layer ------------------------------------------------

def test_a_node_given_more_positional_fields_than_it_has_is_refused():
    fields = registry._OverrideNode.__dataclass_fields__
    with pytest.raises(TypeError, match=f"at most {len(fields)} positional arguments \\({len(fields) + 1} given\\)"):
        registry._OverrideNode(*(["x"] * (len(fields) + 1)))


def test_the_log_sink_logs_nothing_while_the_interpreter_finalizes(monkeypatch, caplog):
    monkeypatch.setattr(registry, "log", None)  # as the module's globals are cleared at exit
    registry._forward_log("warning", "at exit", _finalizing=lambda: True)
    monkeypatch.undo()
    with caplog.at_level(logging.INFO, logger=registry.log.name):
        registry._forward_log("warning", "while running", _finalizing=lambda: False)
    assert [r.getMessage() for r in caplog.records] == ["while running"]


@pytest.mark.parametrize("bad", [None, 1, "yes"])
def test_collect_stats_takes_a_bool_only_and_changes_nothing_else(reg, bad):
    before = reg.collect_stats(True)
    try:
        with pytest.raises(TypeError, match=f"collect_stats takes a bool, got {type(bad).__name__}: {bad!r}"):
            reg.collect_stats(bad)
        assert reg.collect_stats(True) is True, "a refused setting changed the collection"
    finally:
        reg.collect_stats(before)


def test_the_package_names_its_cmake_folder_and_check_overrides():
    """doc/install.md: `cmake_prefix_path` is the package's share/cmake folder
    (what CMAKE_PREFIX_PATH takes); `check_overrides` is reached from the
    package (imported on first use); any other missing name is an AttributeError."""
    import os

    import native_registry.check
    package = os.path.dirname(os.path.abspath(native_registry.__file__))
    assert native_registry.cmake_prefix_path == os.path.join(package, "share", "cmake")
    assert native_registry.check_overrides is native_registry.check.check_overrides
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        native_registry.no_such_name


def test_a_node_keeps_no_per_instance_dict():
    """Graphs hold many nodes: their fields live in slots, so a node has no
    __dict__ and takes no attribute it does not have."""
    node = registry._OverrideNode("dsl", "aten", "mul.Tensor", "CPU", lambda *a: True, lambda *a: None, "n")
    assert not hasattr(node, "__dict__")
    with pytest.raises(AttributeError):
        node.no_such_field = 1


@pytest.mark.parametrize("module, names", [
    ("check", {"CHECKS", "CheckReport", "CheckResult", "check_overrides", "main"}),
    ("observe", {"NodeStats", "GraphStats", "RoutingStats", "DisabledInThread", "routing_log"}),
    ("variants", {"PASSTHROUGH", "get_variant", "set_variant", "variant"}),
])
def test_a_star_import_gives_the_modules_documented_names(module, names):
    namespace: dict = {}
    exec(f"from native_registry.{module} import *", namespace)
    assert set(namespace) - {"__builtins__"} == names
