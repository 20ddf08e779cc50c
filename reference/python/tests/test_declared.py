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
