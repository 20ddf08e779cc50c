"""A warm Python conformance suite for switched mutants (a C++ schemata
build's, and the Python layer's switched inside a function's body): one
pytest process per worker imports torch and the build and collects the
whole suite once, with no mutant chosen; for each mutant it forks, and the
child runs that mutant's covering tests (in order, stopping at the first
failure of any level) with the mutant chosen. A mutant then costs its tests'
time, not pytest's and torch's start and the collection (about 5 to 10 s a
mutant; mutmut 3 forks for the same reason).

The choice reaches the build through $NR_MUTANT_CHOICE, a file of one
int64 (the chosen id, -1: none) that the schemata header maps shared and
reads at each switch (cpp_schemata.HEADER): the server writes it before it
forks, so the child, and every interpreter the child's tests start (they
inherit the variable), run the mutant, while the loaded build stays the one
the server loaded. A Python mutant is chosen in the child, after the fork:
the `_nr_mutant_` global of each instrumented module in sys.modules, and
$NR_MUTANT for what is imported or started later (mutant_switches.py).
This is sound only for a mutant whose switch the server's
own import and collection did not evaluate: one reached outside any test
(reached_map.ReachedMap.outside) was decided there and runs in a fresh
process instead (the caller's choice, covering() returns None for it).

Two halves in one file:
- the plugin (loaded with -p into the suite's pytest; imports nothing of
  the harness): with $NR_SUITE_SERVER_FDS="<read fd>,<write fd>" set, its
  pytest_runtestloop serves requests, one JSON line each, instead of
  running the session: {"mutant": id, "tests": [node ids], "timeout": s,
  "log": path, "python_mutant": key or ""} -> {"failed": [...], "ran": n, "missing": [...],
  "timeout": bool, "signal": n|null, "tail": text};
- SuiteServer, the harness's client: starts one, sends requests, stops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time

import pytest

CHOICE_VARIABLE = "NR_MUTANT_CHOICE"
# A Python mutant's choice (mutant_switches.ENVIRONMENT and .VARIABLE; the
# plugin imports nothing of the harness, test_suite_server checks the two agree).
PYTHON_ENVIRONMENT = "NR_MUTANT"
PYTHON_VARIABLE = "_nr_mutant_"
FDS_VARIABLE = "NR_SUITE_SERVER_FDS"
PLUGIN = "harness.mutation.suite_server"
NO_MUTANT = -1
_WORD = struct.Struct("<q")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_choice(path: str, mutant: int) -> None:
    with open(path, "r+b") as f:
        f.write(_WORD.pack(mutant))


# -- the plugin: inside the suite's pytest ----------------------------------

def _reply(failed=(), ran=0, missing=(), timeout=False, signal=None, tail="") -> dict:
    """A request's answer (the shape the module's head gives)."""
    return {"failed": list(failed), "ran": ran, "missing": list(missing), "timeout": timeout,
            "signal": signal, "tail": tail}


def _serve_one(session, items: dict, request: dict, tell) -> dict:
    wanted = request["tests"]
    missing = [t for t in wanted if t not in items]
    if missing:  # a fresh run would stop at them: the caller runs one
        return _reply(missing=missing)
    result_path = request["log"] + ".result"
    write_choice(os.environ[CHOICE_VARIABLE], int(request["mutant"]))
    try:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _run_in_child(session, [items[t] for t in wanted], request["log"], result_path,
                          request.get("python_mutant", ""))
        tell({"child": pid})  # so that a client stopping the run can kill its group
        return _wait_for(pid, float(request["timeout"]), request["log"], result_path)
    finally:
        write_choice(os.environ[CHOICE_VARIABLE], NO_MUTANT)


def _choose_python_mutant(key: str) -> None:
    """Chooses a Python mutant switched inside its function's body
    (mutant_switches.py) in this process after its import: the global each
    instrumented module reads at each call, and $NR_MUTANT for the modules
    imported from here on and the interpreters the tests start."""
    os.environ[PYTHON_ENVIRONMENT] = key
    for module in list(sys.modules.values()):
        if PYTHON_VARIABLE in getattr(module, "__dict__", {}):
            setattr(module, PYTHON_VARIABLE, key)


def _run_in_child(session, chosen: list, log: str, result_path: str, python_mutant: str = "") -> None:
    status = 1
    try:
        os.setpgid(0, 0)  # its own group: a timeout kills the interpreters its tests started too
        if python_mutant:
            _choose_python_mutant(python_mutant)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        failed: list[str] = []
        reports: list[str] = []

        class Watch:
            @staticmethod
            def pytest_runtest_logreport(report):
                if report.failed and report.nodeid not in failed:
                    failed.append(report.nodeid)
                    reports.append(str(report.longrepr)[-4000:])

        session.config.pluginmanager.register(Watch(), "nr-suite-server-watch")
        ran = 0
        for i, item in enumerate(chosen):
            following = chosen[i + 1] if i + 1 < len(chosen) else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=following)
            ran += 1
            if failed:
                break
        with open(result_path, "w") as f:
            json.dump({"failed": failed, "ran": ran, "tail": "\n".join(reports)}, f)
        status = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # no atexit, no session finish: the server's session is not this child's


def _wait_for(pid: int, timeout: float, log: str, result_path: str) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            _kill_group(pid)
            os.waitpid(pid, 0)
            return _reply(timeout=True, tail=_tail(log))
        time.sleep(0.02)
    _kill_group(pid)  # what its tests left running
    found = {"failed": [], "ran": 0, "tail": ""}
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and os.path.exists(result_path):
        with open(result_path) as f:
            found = json.load(f)
        os.unlink(result_path)
    crashed = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if crashed is None and not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        found["failed"] = found["failed"] or [f"<exit {os.WEXITSTATUS(status)}>"]
    return _reply(found["failed"], found["ran"], signal=crashed, tail=found["tail"] or _tail(log))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(path: str, size: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    fds = os.environ.get(FDS_VARIABLE)
    if not fds:
        return None
    if session.testsfailed:  # collection errors: serve nothing, the client falls back
        return None
    read_fd, write_fd = (int(fd) for fd in fds.split(","))
    for fd in (read_fd, write_fd):  # not into the interpreters the tests start
        os.set_inheritable(fd, False)
    items = {item.nodeid: item for item in session.items}
    with os.fdopen(read_fd, "r") as requests, os.fdopen(write_fd, "w") as replies:
        def tell(message: dict) -> None:
            replies.write(json.dumps(message) + "\n")
            replies.flush()

        tell({"ready": len(items)})
        for line in requests:
            tell(_serve_one(session, items, json.loads(line), tell))
    return True


# -- the client: in the harness ---------------------------------------------

class SuiteServer:
    """One warm suite (see the module's text). run() answers None where the
    server cannot judge a request (it did not start, a test is missing, it
    died): the caller then runs the tests in a fresh pytest."""

    START_LIMIT_S = 600.0

    def __init__(self, args: list[str], cwd: str, env: dict, log: str) -> None:
        self.args, self.cwd, self.env, self.log = args, cwd, env, log
        self.proc: subprocess.Popen | None = None
        self.broken = False
        self.why_broken = ""  # the end of its log, where it did not start
        self.reported = False  # whether the terminal was told it did not start
        self.child = 0  # the child running a request now
        self.choice = ""

    def start(self) -> bool:
        if self.proc is not None or self.broken:
            return self.proc is not None
        handle, self.choice = tempfile.mkstemp(prefix="nr-choice-", suffix=".bin")
        os.write(handle, _WORD.pack(NO_MUTANT))
        os.close(handle)
        to_server, self._send = os.pipe()
        self._receive, from_server = os.pipe()
        env = {**self.env, CHOICE_VARIABLE: self.choice, FDS_VARIABLE: f"{to_server},{from_server}",
               "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, self.env.get("PYTHONPATH")]))}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "pytest", *self.args, "-p", PLUGIN, "-s", "-q",
                                          "-p", "no:cacheprovider"], cwd=self.cwd, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, pass_fds=(to_server, from_server),
                                         start_new_session=True)
        os.close(to_server)
        os.close(from_server)
        self._replies = os.fdopen(self._receive, "r")
        if self._reply(self.START_LIMIT_S) is None:
            self.close()
            self.broken, self.why_broken = True, _tail(self.log, 2000)
            return False
        return True

    def run(self, mutant: int, tests: list[str], timeout: float, log: str, python_mutant: str = ""
            ) -> dict | None:
        if not self.start():
            return None
        request = {"mutant": mutant, "tests": tests, "timeout": timeout, "log": log,
                   "python_mutant": python_mutant}
        try:
            os.write(self._send, (json.dumps(request) + "\n").encode())
        except OSError:
            self.close()
            return None
        reply = self._reply(60)
        if reply is not None and "child" in reply:
            self.child = reply["child"]
            reply = self._reply(timeout + 60)
        self.child = 0
        if reply is None:  # the server died, hung or was stopped: a later request starts another
            self.close()
            return None
        return None if reply["missing"] else reply

    def _reply(self, limit: float) -> dict | None:
        try:
            ready, _, _ = select.select([self._replies], [], [], limit)
            line = self._replies.readline() if ready else ""
        except (OSError, ValueError):  # closed by close() in another thread (an interrupt)
            return None
        return json.loads(line) if line else None

    def close(self) -> None:
        if self.proc is None:
            return
        # The server first: killed after its child, it could still see the
        # child die and answer the request in flight with that signal (a
        # verdict of the interrupt, not of the mutant). The child has a
        # group of its own.
        child = self.child
        for group in (self.proc.pid, child):
            if group:
                _kill_group(group)
        self.proc.wait()
        self.proc = None
        for closing in (lambda: os.close(self._send), self._replies.close):
            try:
                closing()
            except OSError:
                pass
        if self.choice:
            with contextlib.suppress(FileNotFoundError):  # a run's cleanup of /tmp may have taken it
                os.unlink(self.choice)
            self.choice = ""

