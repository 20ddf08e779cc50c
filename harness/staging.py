"""Running Python against a build folder other than the editable install's.

The editable install of native_registry rebuilds and imports from ./build.
Coverage and mutant runs need the package from another build (instrumented,
or carrying a seeded fault): this stages it, sources plus that build's _C
extension and core library, and returns the environment that imports it instead.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

# Imports nothing of the harness: the lifecycle runner (reference/python/tests/
# lifecycle/run.py) loads this file by its path.
ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE_SOURCES = ROOT / "reference" / "python" / "native_registry"


def stage_package(build_dir: pathlib.Path, out_dir: pathlib.Path,
                  sources: pathlib.Path = PACKAGE_SOURCES) -> pathlib.Path:
    """Copy the package's Python files and build_dir's extension into out_dir."""
    target = out_dir / "native_registry"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for source in sources.glob("*.py"):
        shutil.copy2(source, target / source.name)
    extensions = list((build_dir / "reference" / "python").glob("_C*.so"))
    if len(extensions) != 1:
        raise FileNotFoundError(f"expected one _C extension in {build_dir}, found {extensions}")
    shutil.copy2(extensions[0], target / extensions[0].name)
    # Written by Meson; the extension finds the core library in lib/, as in the wheel.
    shutil.copy2(build_dir / "reference" / "python" / "_version.py", target / "_version.py")
    (target / "lib").mkdir()
    shutil.copy2(build_dir / "reference" / "libnative_registry.so", target / "lib")
    return out_dir


def editable_builds() -> list[str]:
    """The build folders of the editable installs this interpreter has
    (meson-python's finders on sys.meta_path): a worktree's harness must skip
    the install of another checkout too, whose build is not its ROOT/build."""
    return [str(f._build_path) for f in sys.meta_path
            if type(f).__name__ == "MesonpyMetaFinder" and isinstance(getattr(f, "_build_path", None), str)]


def editable_builds_of_new_interpreters() -> list[str]:
    """editable_builds() as an interpreter started now finds them (the
    installs' .pth files are read at start-up): an install made or moved
    since this one started shows here only. The new interpreter runs this
    file's editable_builds(), which needs nothing of the harness."""
    found = subprocess.run(
        [sys.executable, "-c", "import runpy, sys; "
         f"print('\\n'.join(runpy.run_path({__file__!r})['editable_builds']()))"],
        capture_output=True, text=True, timeout=120)
    return sorted(line for line in found.stdout.splitlines() if line)


def environment_for(staged: pathlib.Path) -> dict[str, str]:
    """os.environ with the editable finders off and the staged package first."""
    env = dict(os.environ)
    env["MESONPY_EDITABLE_SKIP"] = os.pathsep.join(
        filter(None, [env.get("MESONPY_EDITABLE_SKIP"), str(ROOT / "build"), *editable_builds()]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(staged), env.get("PYTHONPATH")]))
    return env
