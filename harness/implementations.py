"""--impl: the implementations a run tests, as given on the command line
(a shipped name or module:factory), each with the suites it runs and its
label in the reports."""

from __future__ import annotations

import re
from dataclasses import dataclass


SHIPPED = {"reference": "adapters.reference:make", "upstream": "adapters.upstream:make"}


# The C++ suite binary (in the build folder) of the shipped implementations that have one.
CPP_SUITES = {"reference": "conformance/cpp/conformance_reference"}


DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class UsageError(ValueError):
    """A bad command line: reported in one line, exit status 2."""


@dataclass
class Implementation:
    """One implementation under test and the suites it runs."""
    spec: str                         # as given: a shipped name or module:factory
    python: str                       # the module:factory the Python suite loads
    cpp: str | None = None            # its C++ suite binary, relative to the build folder
    label: str = ""                   # unique; the adapter's own name (set by preflight)
    description: str = ""

    @property
    def file_stem(self) -> str:
        """The label as a file name: results/python-<stem>.log and the like."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.label or self.python)


def parse_impls(text: str) -> list[Implementation]:
    """--impl's comma-separated list; refuses what can never load."""
    impls: list[Implementation] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item in SHIPPED or item in SHIPPED.values():
            name = item if item in SHIPPED else next(k for k, v in SHIPPED.items() if v == item)
            impls.append(Implementation(item, SHIPPED[name], CPP_SUITES.get(name)))
            continue
        module, colon, factory = item.partition(":")
        if not colon:
            raise UsageError(f"--impl {item!r}: not a shipped implementation ({', '.join(SHIPPED)}) "
                             f"and not of the form module:factory (no colon); for example "
                             f"--impl mypkg.adapter:make")
        if not DOTTED.match(module):
            raise UsageError(f"--impl {item!r}: {module!r} is not a Python module path")
        if not factory.isidentifier():
            raise UsageError(f"--impl {item!r}: {factory!r} is not a Python name (the factory "
                             f"to call, after the colon)")
        impls.append(Implementation(item, item))
    if not impls:
        raise UsageError("--impl names no implementation")
    seen: dict[str, str] = {}
    for impl in impls:
        if impl.python in seen:
            raise UsageError(f"--impl names one implementation twice: {seen[impl.python]!r} and {impl.spec!r}")
        seen[impl.python] = impl.spec
    return impls


def assign_labels(impls: list[Implementation], names: dict[str, str]) -> None:
    """Each implementation's label is its adapter's own name; implementations
    whose adapters share a name are labelled by their full module:factory."""
    taken: dict[str, int] = {}
    for impl in impls:
        taken[names[impl.python]] = taken.get(names[impl.python], 0) + 1
    for impl in impls:
        name = names[impl.python]
        impl.label = name if taken[name] == 1 and name not in {i.python for i in impls} else impl.python
