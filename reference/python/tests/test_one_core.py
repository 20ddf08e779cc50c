"""One core per process: a C++ extension loaded into this process
(fixtures/cpp/cross_extension.cpp, through ctypes) and Python's _C share one
Registry::global(), since both link libnative_registry.so. What the C++
extension registers, Python sees, disables and restores; what Python
registers, the C++ extension sees and toggles. Checked through the low-level
_C functions and through real calls of aten::mul."""

from __future__ import annotations

import ctypes
import os
import pathlib

import pytest
import torch

import native_registry._C as _C
from fixtures.python.torch_fixtures import MUL_CPU, STOCK, mul

ABSENT, DORMANT, ACTIVE = 0, 1, 2


def build_dir() -> pathlib.Path:
    """The Meson build folder of this _C (NR_BUILD_DIR when _C is a staged copy)."""
    if os.environ.get("NR_BUILD_DIR"):
        return pathlib.Path(os.environ["NR_BUILD_DIR"])
    return pathlib.Path(_C.__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cpp():
    """The C++ extension, loaded as an adopter's would be."""
    lib = ctypes.CDLL(str(build_dir() / "fixtures" / "cpp" / "libnr_cross_extension.so"))
    for name in ("nr_cross_register", "nr_cross_disable", "nr_cross_reenable", "nr_cross_count",
                 "nr_cross_published", "nr_cross_router_state"):
        getattr(lib, name).restype = ctypes.c_int
    lib.nr_cross_register.argtypes = [ctypes.c_char_p] * 4 + [ctypes.c_double]
    lib.nr_cross_last_error.restype = ctypes.c_char_p
    return lib


def call(lib, name, *args):
    """lib.name(*args) with str arguments; an error of the C++ API fails the test."""
    result = getattr(lib, name)(*(a.encode() if isinstance(a, str) else a for a in args))
    assert result >= 0, f"{name}{args}: {lib.nr_cross_last_error().decode()}"
    return result


def dsl_names(key) -> list[str]:
    return [node.dsl_name for node in _C.graph(key)]


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def defined_in(lib: ctypes.CDLL, symbol: str) -> tuple[int, str]:
    """Where lib resolves symbol: its address and the file that defines it."""
    address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
    info = DlInfo()
    assert ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), ctypes.byref(info))
    return address, os.path.basename(info.dli_fname.decode())


def test_the_extension_and_python_resolve_one_registry_global(cpp):
    global_fn = "_ZN15native_registry8Registry6globalEv"  # Registry::global()
    python_side = defined_in(ctypes.CDLL(_C.__file__), global_fn)
    assert python_side == defined_in(cpp, global_fn)
    assert python_side[1] == "libnative_registry.so"
    loaded = {line.split()[-1] for line in pathlib.Path("/proc/self/maps").read_text().splitlines()
              if line.endswith("/libnative_registry.so")}
    assert len(loaded) == 1, loaded


def test_what_cpp_registers_python_sees_disables_and_restores(reg, cpp):
    before = _C.snapshot()
    call(cpp, "nr_cross_register", "cpp_dsl", *MUL_CPU, 7.0)

    assert MUL_CPU in _C.graph_keys()
    assert dsl_names(MUL_CPU) == ["cpp_dsl"]
    assert _C.router_state(MUL_CPU) == "active"
    assert torch.equal(mul(), torch.full_like(STOCK, 7.0))

    _C.deregister_op_overrides(["cpp_dsl"], [], [])
    assert not _C.is_enabled(_C.graph(MUL_CPU)[0])
    assert _C.router_state(MUL_CPU) == "dormant"
    assert call(cpp, "nr_cross_published", "cpp_dsl", *MUL_CPU) == 0
    assert torch.equal(mul(), STOCK)

    _C.reenable_op_overrides(["cpp_dsl"], [], [])
    assert call(cpp, "nr_cross_published", "cpp_dsl", *MUL_CPU) == 1
    assert torch.equal(mul(), torch.full_like(STOCK, 7.0))

    _C.restore(before)
    assert MUL_CPU not in _C.graph_keys()
    assert call(cpp, "nr_cross_count", "cpp_dsl", *MUL_CPU) == 0
    assert call(cpp, "nr_cross_router_state", *MUL_CPU) == ABSENT
    assert torch.equal(mul(), STOCK)


def test_what_python_registers_cpp_sees_and_toggles(reg, cpp):
    before = _C.snapshot()
    _C.register_op_override("py_dsl", *MUL_CPU, lambda *args, **kwargs: True, lambda a, b: a + b,
                            None, False)
    _C.install_all()
    assert call(cpp, "nr_cross_count", "py_dsl", *MUL_CPU) == 1
    assert call(cpp, "nr_cross_router_state", *MUL_CPU) == ACTIVE
    added = torch.tensor([6.0, 8.0])  # A + B
    assert torch.equal(mul(), added)

    call(cpp, "nr_cross_disable", "py_dsl")
    assert _C.filters()[0] == ["py_dsl"]
    assert _C.router_state(MUL_CPU) == "dormant"
    assert torch.equal(mul(), STOCK)

    call(cpp, "nr_cross_reenable", "py_dsl")
    assert _C.filters()[0] == []
    assert _C.router_state(MUL_CPU) == "active"
    assert torch.equal(mul(), added)

    _C.restore(before)
    assert call(cpp, "nr_cross_count", "py_dsl", *MUL_CPU) == 0
    assert torch.equal(mul(), STOCK)
