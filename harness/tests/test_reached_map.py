"""Tests of the per-test reach of a C++ schemata build's mutants
(harness/mutation/reached_map.py, reached_contexts.py) without a build: the
tests below mark a trace file as the switch's header does (through the file
$NR_MUTANT_TRACE names, mapped shared), in the pytest process and in a child
process, and the plugin must give each test its own ids and put what
collection marks outside any test."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from harness.mutation import reached_map
from harness.mutation.mutants import ROOT

SUITE = '''
import mmap, os, subprocess, sys

def mark(i):
    with open(os.environ["NR_MUTANT_TRACE"], "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        m[i] = 1

mark(0)  # at import: collection, outside any test

def test_one():
    mark(1)

def test_two():
    mark(2)
    # A child process started with the environment marks the same file.
    subprocess.run([sys.executable, "-c", "import mmap, os; f = open(os.environ['NR_MUTANT_TRACE'], 'r+b'); "
                    "m = mmap.mmap(f.fileno(), 0); m[3] = 1"], check=True)

def test_three():
    pass
'''


def test_each_test_gets_the_ids_it_and_its_children_reached_and_collection_is_outside(tmp_path):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    traces = tmp_path / "traces"
    traces.mkdir()
    env = {**os.environ, "NR_REACHED_DIR": str(traces), "NR_REACHED_SIZE": "8",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("NR_MUTANT_TRACE", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           reached_map.PLUGIN, "test_suite.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [found] = [json.loads(p.read_text()) for p in traces.glob("*.json")]
    assert found["tests"] == {"test_suite.py::test_one": [1], "test_suite.py::test_two": [2, 3],
                              "test_suite.py::test_three": []}
    assert found["outside"] == [0]
    assert set(found["durations"]) == set(found["tests"])


def test_the_python_parts_hold_every_test_file_once():
    parts = reached_map.python_parts(5)
    files = sorted(p.name for p in (ROOT / "conformance" / "python").glob("test_*.py"))
    assert len(parts) == 5
    assert sorted(pathlib.Path(f).name for part in parts for f in part) == files


def test_gtest_names_are_read_as_the_filter_takes_them(tmp_path):
    listing = tmp_path / "fake_gtest"
    listing.write_text("#!/bin/sh\ncat <<'OUT'\nRunning main() from gtest_main.cc\nSuite.\n  First\n  Second\n"
                       "Reference/Conformance.\n  Routes/reference  # GetParam() = 64-byte object <00>\nOUT\n")
    listing.chmod(0o755)
    assert reached_map.gtest_names(listing) == ["Suite.First", "Suite.Second", "Reference/Conformance.Routes/reference"]


class _Map:
    def __init__(self, source):
        self.source = source

    def save(self, path):
        path.write_text(self.source)

    @classmethod
    def load(cls, path):
        text = path.read_text()
        if text == "old form":
            raise ValueError("kept in an older form")
        return cls(text)


def test_a_kept_map_is_used_while_current_and_measured_again_otherwise(tmp_path):
    from harness.mutation.auto_mutants import kept_or_measured
    kept, measured = tmp_path / "map.json", []

    def measure(source):
        def run():
            measured.append(source)
            if source == "crash":
                raise RuntimeError("the measuring run crashed")
            return _Map(source)
        return run

    def get(source):
        return kept_or_measured(kept, _Map.load, lambda m: m.source == source, measure(source), "measuring",
                                lambda m: f"measured {m.source}")

    assert get("a").source == "a" and measured == ["a"]
    assert get("a").source == "a" and measured == ["a"]  # kept: not measured again
    assert get("b").source == "b" and measured == ["a", "b"]  # another tree: measured again
    kept.write_text("old form")
    assert get("b").source == "b" and measured == ["a", "b", "b"]
    assert get("crash") is None and kept.read_text() == "b"  # a crash keeps the last map


def test_a_whole_suite_s_limit_is_three_times_its_tests_one_after_the_other():
    # The reach run's parts took 82 s side by side; the tests, one after the other, 440 s:
    # a mutant's whole suite runs them in one process.
    durations = {f"conformance/python/test_a.py::test_{i}": 4.4 for i in range(100)}
    durations[reached_map.GTEST_PREFIX + "Suite.Name"] = 1.0
    found = reached_map.ReachedMap({}, [], durations, {}, suite_seconds={"python conformance": 82.0,
                                                                        "c++ conformance": 1.0})
    timeouts = reached_map.baseline_of(found)["timeouts"]
    assert timeouts["python"] == pytest.approx(3 * 440 + 30)
    assert timeouts["c++"] == 60.0
