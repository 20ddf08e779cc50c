"""Adapters shipped with the suite: the reference binding and upstream's
torch._native.registry of the installed PyTorch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch


@contextlib.contextmanager
def setting_for_the_scope(read: Callable[[], Any], write: Callable[[Any], Any],
                          value: Any) -> Iterator[None]:
    """`value` written for the scope; what `read` gave before is written
    back on leaving it, also by an exception (the adapters' coverage_check,
    aot_enabled and impl_error_policy)."""
    previous = read()
    write(value)
    try:
        yield
    finally:
        write(previous)


class UpstreamShapedAdapter:
    """What every adapter over a module with upstream's public API shares.
    Subclasses set `module` (the registry module) and add the rest."""

    module = None

    def disable(self, *, dsl_names=None, op_symbols=None, dispatch_keys=None):
        self.module.deregister_op_overrides(disable_dsl_names=dsl_names,
                                            disable_op_symbols=op_symbols,
                                            disable_dispatch_keys=dispatch_keys)

    def enable(self, *, dsl_names=None, op_symbols=None, dispatch_keys=None):
        self.module.reenable_op_overrides(enable_dsl_names=dsl_names,
                                          enable_op_symbols=op_symbols,
                                          enable_dispatch_keys=dispatch_keys)

    def reorder(self, fn, *, reregister=False):
        self.module.reorder_graphs_from_user_function(fn, reregister_overrides=reregister)

    def dsl_operations(self, dsl_name, lib_symbol=None):
        if lib_symbol is None:
            return self.module.get_dsl_operations(dsl_name)
        return self.module.get_dsl_operations(dsl_name, lib_symbol=lib_symbol)

    def decomp_table(self, overrides_only=False):
        return self.module.native_decomp_table(overrides_only=overrides_only)

    def make_node(self, *fields):
        return self.module._OverrideNode(*fields)

    def native_op(self, node):
        return getattr(torch.ops._native, node.node_id).default

    def resolve_overload(self, lib_symbol, op_symbol):
        return self.module._resolve_overload(lib_symbol, op_symbol)
