"""The reference's messages for a malformed override declaration (the
conformance suite asks for a ValueError naming the row or the module; these
fix which one each mistake gets, so that a user reading it knows what to
change)."""

from __future__ import annotations

import types

import pytest
import torch

from native_registry import declared


def accept(*args, **kwargs):
    return True


def twice(a, b):
    return torch.full_like(a, 2.0)


def declaration(**fields) -> types.ModuleType:
    """A declaring module: a valid one, with `fields` set (None: deleted)."""
    module = types.ModuleType("nr_declaring")
    module._NAMESPACE, module._DEFINING_MODULE = "aten", "torch"
    module._OVERRIDES = (("mul.Tensor", accept, twice),)
    for name, value in fields.items():
        if value is None:
            delattr(module, name)
        else:
            setattr(module, name, value)
    return module


@pytest.mark.parametrize("fields, message", [
    ({"_OVERRIDES": None}, "nr_declaring declares no _OVERRIDES"),
    ({"_OVERRIDES": "mul.Tensor"}, "_OVERRIDES must be a sequence of rows .* got str"),
    ({"_OVERRIDES": 5}, "_OVERRIDES must be a sequence of rows .* got int"),
    ({"_NAMESPACE": None}, "nr_declaring declares no _NAMESPACE"),
    ({"_NAMESPACE": ""}, "nr_declaring declares no _NAMESPACE"),
    ({"_DEFINING_MODULE": None}, "nr_declaring declares no _DEFINING_MODULE"),
    ({"_DEFINING_MODULE": ""}, "nr_declaring declares no _DEFINING_MODULE"),
    ({"_DEFINING_MODULE": ".ops"}, "_DEFINING_MODULE '.ops' is relative; name it in full"),
    ({"_DEFINING_MODULE": "nr_no_such_module"}, "_DEFINING_MODULE 'nr_no_such_module' cannot be imported"),
    ({"_VARIANTS": ["mul.Tensor"]}, "_VARIANTS must map each op to a mapping of its variants"),
    ({"_VARIANTS": {"mul.Tensor": 3}}, "_VARIANTS must map each op to a mapping of its variants"),
], ids=["no-overrides", "overrides-a-str", "overrides-an-int", "no-namespace", "empty-namespace",
        "no-defining-module", "empty-defining-module", "relative-defining-module",
        "defining-module-missing", "variants-a-list", "variant-table-not-a-mapping"])
def test_each_malformed_declaration_gets_its_own_message(fields, message):
    with pytest.raises(ValueError, match=message):
        declared.check(declaration(**fields))


def test_a_row_longer_than_three_is_taken_by_its_first_three():
    declared.check(declaration(_OVERRIDES=(("mul.Tensor", accept, twice, "extra"),)))


class _Target:
    """A registry module stand-in (declared.register's `target`) that records
    rows and refuses the op `refused`; with `snapshot`/`restore` only where asked."""

    def __init__(self, refused: str, snapshot: bool, restore: bool):
        self.rows, self.refused, self.restored = [], refused, []
        if snapshot:
            self.snapshot = lambda: list(self.rows)
        if restore:
            self.restore = lambda saved: self.restored.append(saved)

    def register_op_override(self, dsl_name, namespace, op_symbol, dispatch_key, cond, impl):
        if op_symbol == self.refused:
            raise ValueError(f"{op_symbol} refused")
        self.rows.append(op_symbol)


TWO_ROWS = (("mul.Tensor", accept, twice), ("add.Tensor", accept, twice))


@pytest.mark.parametrize("snapshot, restore", [(False, False), (True, False), (False, True)],
                         ids=["neither", "snapshot-only", "restore-only"])
def test_a_target_without_snapshot_and_restore_gets_the_refusal_and_no_take_back(snapshot, restore):
    target = _Target("add.Tensor", snapshot, restore)
    with pytest.raises(ValueError, match="add.Tensor refused"):
        declared.register(declaration(_OVERRIDES=TWO_ROWS), "dsl", "CPU", target=target)
    assert target.rows == ["mul.Tensor"] and target.restored == []


def test_a_target_with_snapshot_and_restore_takes_back_the_rows_before_a_refusal():
    target = _Target("add.Tensor", True, True)
    with pytest.raises(ValueError, match="add.Tensor refused"):
        declared.register(declaration(_OVERRIDES=TWO_ROWS), "dsl", "CPU", target=target)
    assert target.restored == [[]]


def test_variant_rows_name_their_op_in_the_cond_and_impl():
    class Variant:
        eligible, impl = staticmethod(accept), staticmethod(twice)

    ((op, cond, impl),) = declared.variant_rows("aten", {"mul.Tensor": {"v": Variant}}, {"mul.Tensor": "v"})
    assert (op, cond.__qualname__, impl.__qualname__) == (
        "mul.Tensor", "variant_cond[aten::mul.Tensor]", "variant_impl[aten::mul.Tensor]")


def test_the_variants_module_keeps_upstreams_private_name_of_its_variable():
    from native_registry import variants
    assert variants._ENV_VAR == variants.ENV_VAR == "TORCH_NATIVE_OVERRIDE_VARIANTS"
