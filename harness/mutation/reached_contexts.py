"""A pytest plugin for the per-test reach of a C++ schemata build's mutants
(reached_map.py loads it with -p): this process gets its own trace file
($NR_REACHED_DIR/<pid>.bin, $NR_REACHED_SIZE bytes, one per mutant id),
named to the build by $NR_MUTANT_TRACE before anything loads the build; its
child interpreters inherit the variable and mark the same file. Around each
test the file is read and cleared: what a test's setup, call and teardown
reached is the test's, what was reached between tests (import, collection)
is nobody's ("outside"). At the end, <pid>.json holds
{"tests": {nodeid: [ids]}, "outside": [ids], "durations": {nodeid: s}};
what the interpreter's exit reaches stays in <pid>.bin for the harness.

Imports nothing of the harness: it runs inside the suite's pytest.
"""

from __future__ import annotations

import json
import mmap
import os
import time

import pytest

_DIR = os.environ.get("NR_REACHED_DIR")
_map: mmap.mmap | None = None
if _DIR:
    _path = os.path.join(_DIR, f"{os.getpid()}.bin")
    with open(_path, "wb") as f:
        f.write(bytes(int(os.environ["NR_REACHED_SIZE"])))
    with open(_path, "r+b") as f:
        _map = mmap.mmap(f.fileno(), 0)
    os.environ["NR_MUTANT_TRACE"] = _path

_tests: dict[str, set[int]] = {}
_outside: set[int] = set()
_durations: dict[str, float] = {}


def _take() -> set[int]:
    """The ids marked since the last take, cleared."""
    found = bytes(_map)
    _map[:] = bytes(len(found))
    return {i for i, b in enumerate(found) if b}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _map is None:
        yield
        return
    _outside.update(_take())
    began = time.perf_counter()
    try:
        yield
    finally:
        _durations[item.nodeid] = _durations.get(item.nodeid, 0.0) + time.perf_counter() - began
        _tests.setdefault(item.nodeid, set()).update(_take())


def pytest_sessionfinish(session, exitstatus):
    if _map is None:
        return
    _outside.update(_take())
    with open(os.path.join(_DIR, f"{os.getpid()}.json"), "w") as f:
        json.dump({"tests": {t: sorted(ids) for t, ids in _tests.items()}, "outside": sorted(_outside),
                   "durations": _durations}, f, indent=0, sort_keys=True)
