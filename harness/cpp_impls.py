"""`--cpp-impl NAME=PATH`: C++ conformance binaries of other implementations
(the suite library linked with their adapter), each a column of the matrix."""

from __future__ import annotations

import os
import pathlib
import re

NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse(specs: list[str]) -> list[tuple[str, pathlib.Path]]:
    """[(name, absolute binary path)]; a malformed spec, a bad name, a path that
    is not an executable file or a name given twice is a ValueError naming it."""
    out: list[tuple[str, pathlib.Path]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--cpp-impl wants NAME=PATH, got {spec!r}")
        if not NAME.match(name):
            raise ValueError(f"--cpp-impl name {name!r}: letters, digits, '_', '.', '-' only")
        binary = pathlib.Path(path).resolve()
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise ValueError(f"--cpp-impl {name}: {path!r} is not an executable file")
        if any(n == name for n, _ in out):
            raise ValueError(f"--cpp-impl name {name!r} given twice")
        out.append((name, binary))
    return out
