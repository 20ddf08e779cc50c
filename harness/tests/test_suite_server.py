"""Tests of the warm suite (harness/mutation/suite_server.py) on a toy
pytest suite whose tests read the chosen mutant as a schemata build does
(the choice file named by $NR_MUTANT_CHOICE): one collection serves many
mutants, each in a forked child that stops at its first failure; a hang is
cut at the request's limit, a crash is reported by its signal, interpreters
the tests start see the same mutant, and a test the server lacks is not
judged there."""

from __future__ import annotations

import os
import pathlib
import struct
import time

import pytest

from harness.mutation import suite_server

TOY = '''
import os, signal, struct, subprocess, sys, time

def chosen():
    with open(os.environ["NR_MUTANT_CHOICE"], "rb") as f:
        return struct.unpack("<q", f.read(8))[0]

with open(os.environ["TOY_IMPORTS"], "a") as f:  # one line per import of this module
    f.write("imported\\n")

def test_first():
    assert chosen() != 3

def test_second():
    assert chosen() != 5

def test_hangs_under_seven():
    while chosen() == 7:
        time.sleep(0.05)

def test_crashes_under_nine():
    if chosen() == 9:
        os.kill(os.getpid(), signal.SIGSEGV)

def test_a_child_interpreter_sees_the_same_mutant():
    code = "import os, struct; print(struct.unpack('<q', open(os.environ['NR_MUTANT_CHOICE'], 'rb').read(8))[0])"
    seen = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
    assert seen != 11
'''

FIRST, SECOND = "test_toy.py::test_first", "test_toy.py::test_second"


@pytest.fixture
def server(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_toy.py").write_text(TOY)
    imports = tmp_path / "imports.txt"
    env = {**os.environ, "TOY_IMPORTS": str(imports)}
    started = suite_server.SuiteServer(["test_toy.py", f"--basetemp={tmp_path / 'tmp'}"], str(suite), env,
                                       str(tmp_path / "server.log"))
    started.imports = imports
    started.child_log = str(tmp_path / "child.log")
    yield started
    started.close()


def test_one_collection_serves_many_mutants_each_stopping_at_its_first_failure(server):
    killed = server.run(3, [FIRST, SECOND], 60, server.child_log)
    assert (killed["failed"], killed["ran"], killed["timeout"], killed["signal"]) == ([FIRST], 1, False, None)
    assert "assert 3 != 3" in killed["tail"]
    second = server.run(5, [FIRST, SECOND], 60, server.child_log)
    assert (second["failed"], second["ran"]) == ([SECOND], 2)
    survived = server.run(4, [FIRST, SECOND], 60, server.child_log)
    assert (survived["failed"], survived["ran"]) == ([], 2)
    assert server.imports.read_text().splitlines() == ["imported"]  # collected once, in the server


def test_the_choice_is_put_back_after_each_mutant(server):
    server.run(3, [FIRST], 60, server.child_log)
    with open(server.choice, "rb") as f:
        assert struct.unpack("<q", f.read(8))[0] == suite_server.NO_MUTANT


def test_a_hang_is_cut_at_the_limit_and_the_server_serves_on(server):
    hung = server.run(7, ["test_toy.py::test_hangs_under_seven"], 3, server.child_log)
    assert hung["timeout"] is True
    assert server.run(6, ["test_toy.py::test_hangs_under_seven"], 30, server.child_log)["failed"] == []


def test_a_crash_is_reported_by_its_signal(server):
    crashed = server.run(9, ["test_toy.py::test_crashes_under_nine", FIRST], 60, server.child_log)
    assert crashed["signal"] == 11
    assert server.run(8, ["test_toy.py::test_crashes_under_nine"], 60, server.child_log)["signal"] is None


def test_interpreters_started_by_a_test_see_the_chosen_mutant(server):
    test = "test_toy.py::test_a_child_interpreter_sees_the_same_mutant"
    assert server.run(11, [test], 60, server.child_log)["failed"] == [test]
    assert server.run(12, [test], 60, server.child_log)["failed"] == []


def test_a_test_the_server_did_not_collect_is_not_judged_there(server):
    assert server.run(3, ["test_toy.py::test_absent", FIRST], 60, server.child_log) is None


def test_a_suite_that_does_not_collect_serves_nothing(tmp_path):
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\n")
    broken = suite_server.SuiteServer(["test_broken.py"], str(tmp_path), dict(os.environ),
                                      str(tmp_path / "server.log"))
    try:
        assert broken.run(1, ["test_broken.py::test_x"], 30, str(tmp_path / "child.log")) is None
        assert broken.broken
    finally:
        broken.close()
    assert pathlib.Path(tmp_path / "server.log").read_text()  # pytest's own words on why


def test_closing_a_server_mid_request_kills_the_child_and_ends_the_request(server):
    import threading
    answers = []
    worker = threading.Thread(target=lambda: answers.append(
        server.run(7, ["test_toy.py::test_hangs_under_seven"], 120, server.child_log)))
    worker.start()
    deadline = time.monotonic() + 60
    while not server.child and time.monotonic() < deadline:
        time.sleep(0.05)
    child = server.child
    assert child
    server.close()
    worker.join(30)
    assert not worker.is_alive() and answers == [None]
    assert gone(child)


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether `pid` has ended (a zombie nobody reaped yet counts)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


# A module instrumented as the Python layer's are, and a suite over it.
PY_MODULE = '''\
def double(x):
    return x * 2


def triple(x):
    return x * 3
'''

PY_SUITE = '''
import subprocess, sys
import toy_module

def test_double():
    assert toy_module.double(2) == 4

def test_triple():
    assert toy_module.triple(2) == 6

def test_a_child_interpreter_imports_the_same_mutant():
    code = "import toy_module; print(toy_module.double(2))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "4"
'''


def test_a_python_mutant_switched_in_a_body_is_chosen_in_the_child_after_the_collection(tmp_path):
    from harness.mutation import mutagen, mutant_switches
    assert (suite_server.PYTHON_ENVIRONMENT, suite_server.PYTHON_VARIABLE) == \
        (mutant_switches.ENVIRONMENT, mutant_switches.VARIABLE)
    suite = tmp_path / "suite"
    suite.mkdir()
    found = mutagen.python_mutants("toy_module.py", PY_MODULE)
    switched = mutant_switches.instrument("toy_module.py", PY_MODULE, found)
    (suite / "toy_module.py").write_text(switched.text)
    (suite / "test_py.py").write_text(PY_SUITE)
    doubling = next(m for m in found if m.key in switched.call_time and m.mutated == "    return x * 3")
    env = {k: v for k, v in os.environ.items() if k != "NR_MUTANT"}
    served = suite_server.SuiteServer(["test_py.py", f"--basetemp={tmp_path / 'tmp'}"], str(suite),
                                      {**env, "PYTHONPATH": str(suite)}, str(tmp_path / "server.log"))
    log = str(tmp_path / "child.log")
    try:
        tests = ["test_py.py::test_triple", "test_py.py::test_double"]
        killed = served.run(suite_server.NO_MUTANT, tests, 60, log, python_mutant=doubling.key)
        assert (killed["failed"], killed["ran"]) == (["test_py.py::test_double"], 2), killed
        child = "test_py.py::test_a_child_interpreter_imports_the_same_mutant"
        assert served.run(suite_server.NO_MUTANT, [child], 60, log, python_mutant=doubling.key)["failed"] == [child]
        pristine = served.run(suite_server.NO_MUTANT, tests + [child], 60, log)
        assert (pristine["failed"], pristine["ran"]) == ([], 3)  # the server itself never chose it
    finally:
        served.close()
