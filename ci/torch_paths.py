"""Print where the installed PyTorch keeps LibTorch, one fact a line, for meson
and for the build backend's torch pin (ci/build_backend.py).

Lines: include dir, library dir, version, C++11 ABI flag (0 or 1), and the
C++ runtime (libstdc++.so.6) this interpreter has loaded with torch, or an
empty line (meson.build links it where the compiler would link its own
runtime statically: see there).

Run by the interpreter the package is built for. Under pip's build isolation
that interpreter's own site-packages are hidden, though they are where the
package will be installed: torch is looked for there too, so that
`pip install SRC` builds against the environment's torch and never pulls
another. Without any torch it exits 1 with one line saying what to do.
"""
import importlib
import os
import site
import sys
import sysconfig

INSTRUCTION = ("torch must be importable at build time: install torch first, or "
               "`pip install --no-build-isolation ...` from an environment that has it")


def import_torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        pass
    # The target environment's folders (venv or prefix, then the user's).
    folders = [sysconfig.get_path("platlib"), sysconfig.get_path("purelib")]
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    for folder in dict.fromkeys(folders):
        if folder and os.path.isdir(os.path.join(folder, "torch")) and folder not in sys.path:
            sys.path.append(folder)
    try:
        return importlib.import_module("torch")
    except ImportError as e:
        sys.exit(f"{INSTRUCTION} ({sys.executable}: {e})")


torch = import_torch()
root = os.path.dirname(torch.__file__)
print(os.path.join(root, "include"))
print(os.path.join(root, "lib"))
print(torch.__version__.split("+")[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))


def loaded_cxx_runtime() -> str:
    """The libstdc++ shared object mapped into this process once torch is
    imported (Linux), else ''."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libstdc++.so"):
                    return path
    except OSError:
        pass
    return ""


print(loaded_cxx_runtime())
