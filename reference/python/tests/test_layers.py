"""The Python layer's three modules (node views, compile/export routing, the
API) are used by the package's other modules only through what each
exports: public names, and of the private ones only those a layer exports
on purpose, upstream's names (nodes' and compile_routing's __all__,
registry's UPSTREAM_SURFACE). A read of the source, not of behaviour: it
keeps private helpers private, so a change to one stays inside its module."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "native_registry"  # the sources
LAYERS = ("nodes", "compile_routing", "registry")


def exported(layer: str) -> set[str]:
    """The layer's __all__ and UPSTREAM_SURFACE, as its source writes them."""
    names: set[str] = set()
    for node in ast.parse((PACKAGE / f"{layer}.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("__all__", "UPSTREAM_SURFACE") for t in node.targets):
            names |= set(ast.literal_eval(node.value))
    return names


def uses(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(layer, name, line) for each name a module takes from a layer: `from
    .layer import name`, and `alias.name` where `alias` is bound to the
    layer by `from . import layer [as alias]`."""
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module in LAYERS:
                found += [(node.module, a.name, node.lineno) for a in node.names]
            elif node.module is None:
                aliases.update({a.asname or a.name: a.name for a in node.names if a.name in LAYERS})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.append((aliases[node.value.id], node.attr, node.lineno))
    return found


def private_uses(path: pathlib.Path) -> list[str]:
    exports = {layer: exported(layer) for layer in LAYERS}
    return [f"{path.name}:{line}: {layer}.{name}"
            for layer, name, line in uses(ast.parse(path.read_text()))
            if name.startswith("_") and name not in exports[layer]]


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_modules_use_the_layers_only_through_their_exports(module):
    assert private_uses(PACKAGE / module) == []


def test_the_check_sees_a_private_use(tmp_path):
    source = tmp_path / "user.py"
    source.write_text("from . import nodes as _n\nfrom .registry import _check_name\n"
                      "_n._views\n_n.node_of\n")
    assert sorted(private_uses(source)) == ["user.py:2: registry._check_name", "user.py:3: nodes._views"]
