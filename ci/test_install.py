"""The package installs as PyTorch users install extensions (run by ci/test).

Builds a wheel with the README's command (`pip`, build isolation on) in a
plain venv that has only torch, installs it into a fresh plain venv that has
only torch, and checks, away from the source tree: the import and
__version__, the libraries it loads (the wheel's and that venv's torch, none
from the build venv or this machine's global torch), the metadata pin, the
wheel's contents and RPATHs, a C++ program built with CMake against the
installed package, the pkg-config file, and use as a Meson subproject.

The build venv and the wheel's build folder (build-install/) are kept between
runs while the venv's torch is the one wanted, so a second run recompiles
nothing; the venv the wheel is installed into is made afresh each time.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORK = ROOT / "build-install"
TORCH = "torch==2.13.0"  # the CPU wheel that lies on this machine's disk


def run(cmd, **kwargs) -> str:
    """Runs cmd from / (away from the source tree); its output, or a failure with it."""
    kwargs.setdefault("cwd", "/")
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def clean_env() -> dict[str, str]:
    """The environment without this process's venv, editable finder or PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MESONPY_EDITABLE_SKIP")}
    return env


def plain_venv(path: pathlib.Path) -> pathlib.Path:
    shutil.rmtree(path, ignore_errors=True)
    WORK.mkdir(exist_ok=True)
    run([sys.executable, "-m", "venv", path])
    run([path / "bin/python", "-m", "pip", "install", "-q", TORCH], env=clean_env())
    return path


def has_torch(path: pathlib.Path) -> bool:
    if not (path / "bin/python").exists():
        return False
    probe = subprocess.run([path / "bin/python", "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, cwd="/", env=clean_env())
    return probe.returncode == 0 and probe.stdout.startswith(TORCH.split("==")[1])


@pytest.fixture(scope="module")
def venv() -> pathlib.Path:
    """A fresh plain venv with torch, into which the wheel is installed."""
    return plain_venv(WORK / "venv")


@pytest.fixture(scope="module")
def wheel(venv) -> pathlib.Path:
    """The wheel, built in a plain venv with torch (kept, so its torch's headers
    keep their dates and the build stays incremental), installed into venv."""
    builder = WORK / "build-venv"
    if not has_torch(builder):
        plain_venv(builder)
    out = WORK / "dist"
    shutil.rmtree(out, ignore_errors=True)
    run([builder / "bin/python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", out,
         f"-Cbuild-dir={WORK / 'wheel-build'}", ROOT], env=clean_env())
    (built,) = out.glob("native_registry-*.whl")
    run([venv / "bin/python", "-m", "pip", "install", "-q", built], env=clean_env())
    return built


def venv_python(venv, code: str) -> str:
    return run([venv / "bin/python", "-c", code], env=clean_env())


def test_imports_from_the_venv_with_its_torch(venv, wheel):
    facts = json.loads(venv_python(venv, """
import json, native_registry, torch
maps = open('/proc/self/maps').read().split()
print(json.dumps({'version': native_registry.__version__, 'file': native_registry.__file__,
    'libs': sorted({p for p in maps if p.endswith(('/libnative_registry.so', '/libtorch_cpu.so'))})}))
"""))
    print("native_registry.__version__ =", facts["version"])
    assert facts["version"] == "0.1.0"
    site = str(venv / "lib")
    assert facts["file"].startswith(site), facts["file"]
    # Both libraries come from the venv: ours from the wheel, LibTorch from the venv's torch.
    assert len(facts["libs"]) == 2 and all(p.startswith(site) for p in facts["libs"]), facts["libs"]


def test_metadata_pins_the_torch_it_was_built_for(venv, wheel):
    requires = json.loads(venv_python(venv, """
import importlib.metadata as m, json, torch
print(json.dumps([m.requires('native_registry'), torch.__version__]))
"""))
    major, minor = requires[1].split(".")[:2]
    assert requires[0] == [f"torch=={major}.{minor}.*"]


def test_wheel_ships_the_package_and_nothing_of_the_tests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    print("\n".join(sorted(names)))
    expected = {
        "native_registry/__init__.py", "native_registry/_version.py", "native_registry/registry.py",
        "native_registry/lib/libnative_registry.so",
        "native_registry/include/native_registry/registry.h",
        "native_registry/include/native_registry/native_registry.h",
        "native_registry/share/cmake/native_registry/native_registryConfig.cmake",
        "native_registry/share/cmake/native_registry/native_registryConfigVersion.cmake",
        "native_registry/lib/pkgconfig/native_registry.pc",
        "native_registry/takeover.py", "native_registry/variants.py", "native_registry/declared.py",
        # early activation: at the top of site-packages, where site runs .pth files
        "native_registry_early.pth", "_native_registry_early.py",
    }
    assert expected <= names, expected - names
    assert any(n.startswith("native_registry/_C.") and n.endswith(".so") for n in names)
    assert not [n for n in names if "test" in n or "bench" in n or "fixture" in n]


def test_early_activation_hook_is_installed_off_by_default(venv, wheel):
    """The wheel's .pth costs nothing unset (torch not imported at start-up)
    and with NATIVE_REGISTRY_AS_TORCH_NATIVE=1 makes the reference torch's
    registry before torch's registrars run."""
    probe = """
import json, sys
before = 'torch' in sys.modules
import torch, torch._native.registry as r
print(json.dumps([before, r.__name__]))
"""
    off = json.loads(run([venv / "bin/python", "-c", probe], env=clean_env()))
    assert off == [False, "torch._native.registry"]
    on = json.loads(run([venv / "bin/python", "-c", probe],
                        env={**clean_env(), "NATIVE_REGISTRY_AS_TORCH_NATIVE": "1"}))
    assert on == [False, "native_registry.upstream_compat"]


def test_binaries_find_their_libraries_relative_to_themselves(venv, wheel):
    site = pathlib.Path(venv_python(venv, "import native_registry, os; print(os.path.dirname(native_registry.__file__))").strip())
    for binary in [*site.glob("_C.*.so"), site / "lib/libnative_registry.so"]:
        dynamic = run(["readelf", "-d", binary])
        rpaths = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "RUNPATH" in line or "RPATH" in line]
        assert rpaths and all(p.startswith("$ORIGIN") for r in rpaths for p in r.split(":")), (binary, rpaths)


def test_cmake_program_builds_and_runs_against_the_installed_package(venv, wheel, tmp_path):
    """fixtures/install/cmake's consumer, and the README's C++ example beside it."""
    readme = (ROOT / "README.md").read_text().split("## The C++ API", 1)[1]
    example = tmp_path / "readme_example.cpp"
    example.write_text(re.search(r"^```cpp\n(.*?)^```", readme, flags=re.M | re.S).group(1))
    prefix = venv_python(venv, "import native_registry; print(native_registry.cmake_prefix_path)").strip()
    build = tmp_path / "cmake"
    run(["cmake", "-S", ROOT / "fixtures/install/cmake", "-B", build, "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_PREFIX_PATH={prefix}", f"-DPython3_EXECUTABLE={venv / 'bin/python'}",
         f"-DREADME_EXAMPLE={example}"])
    run(["cmake", "--build", build, "-j2"])
    assert run([build / "consumer"], env=clean_env()).strip() == "ok"
    run([build / "readme_example"], env=clean_env())  # exit 0: the override routed the call


def test_pkg_config_names_the_installed_folders(venv, wheel):
    site = pathlib.Path(venv_python(venv, "import native_registry, os; print(os.path.dirname(native_registry.__file__))").strip())
    env = dict(clean_env(), PKG_CONFIG_PATH=str(site / "lib/pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "native_registry"], env=env).split()
    folders = [f[2:] for f in flags if f.startswith(("-I", "-L"))]
    folders += [flags[i + 1] for i, f in enumerate(flags) if f == "-isystem"]
    assert "-lnative_registry" in flags and "-ltorch" in flags
    assert folders and all(pathlib.Path(f).is_dir() for f in folders), folders
    assert (site / "include/native_registry/registry.h").is_file()


def test_meson_subproject_gives_the_dependency_without_the_tests(tmp_path):
    project = tmp_path / "consumer"
    shutil.copytree(ROOT / "fixtures/install", project)
    (project / "meson/subprojects").mkdir()
    (project / "meson/subprojects/native_registry").symlink_to(ROOT)
    run(["meson", "setup", tmp_path / "build", project / "meson"])
    targets = json.loads(run(["meson", "introspect", "--targets", tmp_path / "build"]))
    assert sorted(t["name"] for t in targets) == ["consumer", "native_registry"]
