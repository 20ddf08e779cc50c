"""Upstream's torch._native.registry, as the installed PyTorch ships it.

Versions differ: newer ones key graphs by (lib_symbol, op_symbol,
dispatch_key) and have an allowlist, try_initialize_runtime, the Dynamo
shortcut and _unconditional_masked(); older ones (2.13 among them) key by
(op_symbol, dispatch_key) and accept aten only. The adapter probes what is
there and declares only those features; a behaviour needing a missing one is
reported unsupported, and behaviour differences are expectation entries.

Teardown follows what upstream's own tests do: save the module's tables,
destroy every router library the test created, put the tables back, and
rebuild any saved router a test replaced.
"""

from __future__ import annotations

import contextlib
import inspect
import sys

import torch

try:
    import torch._native as native
    import torch._native.registry as registry
except ImportError:  # a PyTorch without torch._native
    native = registry = None


from . import UpstreamShapedAdapter


class UpstreamAdapter(UpstreamShapedAdapter):
    module = registry
    name = "upstream"
    log_name = "torch._native.registry"

    def __init__(self) -> None:
        if self.module is None:
            raise ImportError(f"torch {torch.__version__} has no torch._native.registry")
        self.description = f"torch._native.registry of torch {torch.__version__}"
        params = inspect.signature(self.module.register_op_override).parameters
        self._namespaced = hasattr(self.module, "_ALLOWED_LIB_SYMBOLS")
        # The API revision expectation entries name: 2.13's registry keys
        # graphs by (op_symbol, dispatch_key) and has no allowlist; the
        # namespaced API (upstream main, the seed file's) has both.
        self.revision = "namespaced-api" if self._namespaced else "torch-2.13-api"
        self._override_libs_name = ("_override_libs" if hasattr(self.module, "_override_libs")
                                    else "_aten_override_libs")
        # A registry in Python: what a call uses is kept alive by the call's
        # own references, so the control plane may run inside a call.
        features = {"native-op-meta", "unconditional-survives-disable", "reentrant-control-plane"}
        if self._namespaced:
            features.add("namespaces")
        if "try_initialize_runtime" in params:
            features.add("runtime-init")
        if self._hatch() is not None:
            features.add("unconditional-hatch")
        if hasattr(self.module, "_router_active"):
            features.add("dynamo-shortcut")
        if self.module is sys.modules.get("torch._native.registry"):
            features.add("torch-front-ends")  # it is the registry torch's front ends call
        if self.variants_module() is not None:
            features.add("variants")
        resolve = getattr(self.module, "_resolve_overload", None)
        if resolve is not None and len(inspect.signature(resolve).parameters) == 2:
            features.add("resolve-overload")  # main's (namespace, op_symbol)
        self.features = frozenset(features)

    # ---- keys: (lib, op, key) here, (op, key) in older versions -------------

    def _key(self, lib_symbol, op_symbol, dispatch_key):
        return (lib_symbol, op_symbol, dispatch_key) if self._namespaced else (op_symbol, dispatch_key)

    def _override_libs(self):
        return getattr(self.module, self._override_libs_name)

    # ---- teardown -----------------------------------------------------------

    _MAPS = ("_dsl_name_to_lib_graph", "_op_symbol_to_lib_graph", "_dispatch_key_to_lib_graph")

    @contextlib.contextmanager
    def scope(self):
        r = self.module
        saved_libs = dict(self._override_libs())
        saved = {
            "graphs": dict(r._graphs),
            "decomp": dict(r._native_decomp_overrides),
            "maps": {m: {k: list(v) for k, v in getattr(r, m).items()} for m in self._MAPS},
            "filters": (set(r._filter_state._dsl_names), set(r._filter_state._op_symbols),
                        set(r._filter_state._dispatch_keys)),
            "allowed": getattr(r, "_ALLOWED_LIB_SYMBOLS", None),
        }
        r._graphs.clear()
        for m in self._MAPS:
            getattr(r, m).clear()
        for s in (r._filter_state._dsl_names, r._filter_state._op_symbols,
                  r._filter_state._dispatch_keys):
            s.clear()
        try:
            yield
        finally:
            libs = self._override_libs()
            for key, lib in list(libs.items()):
                if saved_libs.get(key) is not lib:
                    lib._destroy()
            clobbered = [k for k, lib in saved_libs.items() if libs.get(k) is not lib]
            libs.clear()
            libs.update({k: lib for k, lib in saved_libs.items() if k not in clobbered})
            r._graphs.clear()
            r._graphs.update(saved["graphs"])
            for m, content in saved["maps"].items():
                target = getattr(r, m)
                target.clear()
                target.update({k: list(v) for k, v in content.items()})
            for s, content in zip((r._filter_state._dsl_names, r._filter_state._op_symbols,
                                   r._filter_state._dispatch_keys), saved["filters"]):
                s.clear()
                s.update(content)
            if saved["allowed"] is not None:
                r._ALLOWED_LIB_SYMBOLS = saved["allowed"]
            r._native_decomp_overrides.clear()
            r._native_decomp_overrides.update(saved["decomp"])
            if clobbered:
                r._register_all_overrides()

    # ---- the API ------------------------------------------------------------

    def register(self, dsl_name, lib_symbol, op_symbol, dispatch_key, cond, impl, *,
                 try_initialize_runtime=None, unconditional_override=False,
                 allow_multiple_override=None):
        kwargs = {"unconditional_override": unconditional_override}
        if try_initialize_runtime is not None:
            kwargs["try_initialize_runtime"] = try_initialize_runtime
        if allow_multiple_override is not None:
            kwargs["allow_multiple_override"] = allow_multiple_override
        self.module.register_op_override(dsl_name, lib_symbol, op_symbol, dispatch_key, cond, impl,
                                      **kwargs)

    def graph(self, lib_symbol, op_symbol, dispatch_key):
        return list(self.module._graphs.get(self._key(lib_symbol, op_symbol, dispatch_key), []))

    def set_graph(self, lib_symbol, op_symbol, dispatch_key, nodes):
        self.module._graphs[self._key(lib_symbol, op_symbol, dispatch_key)] = list(nodes)

    def install(self, lib_symbol, op_symbol, dispatch_key):
        key = self._key(lib_symbol, op_symbol, dispatch_key)
        self.module._register_overrides_from_graph(*key, self.module._graphs.get(key, []))

    def install_all(self):
        self.module._register_all_overrides()

    def router_installed(self, lib_symbol, op_symbol, dispatch_key):
        return self._key(lib_symbol, op_symbol, dispatch_key) in self._override_libs()

    def allow_namespace(self, lib_symbol):
        self.module._ALLOWED_LIB_SYMBOLS = self.module._ALLOWED_LIB_SYMBOLS | {lib_symbol}

    def allowed_namespaces(self):
        return frozenset(getattr(self.module, "_ALLOWED_LIB_SYMBOLS", {"aten"}))

    def _hatch(self):
        """The _unconditional_masked() context manager, where there is one."""
        return getattr(native, "_unconditional_masked", None)

    def unconditional_masked(self):
        return self._hatch()()

    def in_reentrant_call(self):
        return getattr(self.module._router_active, "on", False)

    def serve_torch_front_ends(self):
        pass  # torch's front ends already call this registry

    def variants_module(self):
        """torch._native.variants where this torch has one (main; 2.13 has none)."""
        try:
            import torch._native.variants as variants
        except ImportError:
            return None
        return variants

    def user_ordering_fn(self):
        from torch._native import get_user_ordering_fn

        return get_user_ordering_fn


def make() -> UpstreamAdapter:
    return UpstreamAdapter()
