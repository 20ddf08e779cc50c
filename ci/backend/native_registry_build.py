"""The package's build backend: meson-python, plus the torch pin it cannot write.

_C and libnative_registry.so are compiled against one PyTorch's C++ ABI, so
the wheel must require that PyTorch (torch==X.Y.*, as torchvision and
torchaudio pin theirs). meson-python takes dependencies only statically from
pyproject.toml (it refuses `dynamic = ["dependencies"]`), so this wraps its
hooks and adds the pin to the built wheel's METADATA (and RECORD). The
version comes from ci/torch_paths.py run by this interpreter: the same
script and interpreter that meson.build asks, so the pin names the torch the
build compiled against.
"""

from __future__ import annotations

import base64
import hashlib
import pathlib
import subprocess
import sys
import zipfile

import mesonpy

ROOT = pathlib.Path(__file__).resolve().parents[2]

get_requires_for_build_sdist = mesonpy.get_requires_for_build_sdist
get_requires_for_build_wheel = mesonpy.get_requires_for_build_wheel
get_requires_for_build_editable = mesonpy.get_requires_for_build_editable
build_sdist = mesonpy.build_sdist


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = mesonpy.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_requirement(pathlib.Path(wheel_directory) / name, torch_requirement())
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = mesonpy.build_editable(wheel_directory, config_settings, metadata_directory)
    add_requirement(pathlib.Path(wheel_directory) / name, torch_requirement())
    return name


def torch_requirement() -> str:
    """'torch==2.13.*' for a build against torch 2.13.x."""
    probe = subprocess.run([sys.executable, str(ROOT / "ci" / "torch_paths.py")],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit(probe.stderr.strip())
    major, minor = probe.stdout.splitlines()[2].split(".")[:2]
    return f"torch=={major}.{minor}.*"


def record_entry(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def add_requirement(wheel: pathlib.Path, requirement: str) -> None:
    """Rewrite wheel with `Requires-Dist: requirement` in its METADATA."""
    with zipfile.ZipFile(wheel) as src:
        entries = [(info, src.read(info)) for info in src.infolist()]
    metadata_path = next(i.filename for i, _ in entries
                         if i.filename.endswith(".dist-info/METADATA"))
    record_path = metadata_path.rsplit("/", 1)[0] + "/RECORD"
    original = next(data for info, data in entries if info.filename == metadata_path)
    # The headers end at the first blank line; the description follows.
    headers, sep, body = original.decode().partition("\n\n")
    metadata = f"{headers}\nRequires-Dist: {requirement}{sep}{body}".encode()
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in entries:
            if info.filename == metadata_path:
                data = metadata
            elif info.filename == record_path:
                lines = [record_entry(metadata_path, metadata)
                         if line.startswith(metadata_path + ",") else line
                         for line in data.decode().splitlines()]
                data = ("\n".join(lines) + "\n").encode()
            out.writestr(info, data)
    rewritten.replace(wheel)
