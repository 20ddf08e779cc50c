"""Child interpreters for the tests that need a new Python
(conftest.run_in_fresh_interpreter).

By default each is `python -c SCRIPT`, started from nothing. With
NR_CONFORMANCE_FORK_SERVER=1 (starting Python and importing torch is most
of what those tests cost; the harness's mutant runs set it, see
harness/mutation/mutants.py), a fork server stands in for the start:
one Python per environment that has imported torch and nothing else, and
forks a child per script. The child is what `python -c SCRIPT` would be
once `import torch` had run: the script's own environment, working folder,
a new `__main__`, its stdout and stderr in files, and it ends as an
interpreter ends (atexit handlers, non-daemon threads joined), its status
as subprocess reports it (negative: the signal).

What `python -c` would do differently before `import torch` cannot be
forked from a server that has imported it, so these always start from
nothing: a script with a prelude (it runs before torch imports), a run
under coverage.py's subprocess measurement, and a host without os.fork.
The server is keyed by the whole environment but PYTEST_CURRENT_TEST
(pytest's, set per test; read by no import), since what Python's start and
torch's import read can be any variable; it belongs to the process that
started it (a child pytest forks starts its own) and ends when that
process's end of its pipe closes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading

ENV_VAR = "NR_CONFORMANCE_FORK_SERVER"
# coverage.py's subprocess measurement starts in a new interpreter only.
COVERAGE = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")
# Set anew in each child: read by nothing before the script runs.
PER_CALL = ("PYTEST_CURRENT_TEST",)

# The server: reads one JSON request a line from fd argv[1], forks, answers
# {"pid"} at once and {"status"} (os.waitpid's) when the child has ended, on
# fd argv[2]. Only the child returns from serve(), with its request.
_SERVER = r"""
import json, os, sys, warnings
requests, answers = os.fdopen(int(sys.argv[1])), os.fdopen(int(sys.argv[2]), "w")
del sys.argv[1:]
import torch

def serve():
    answers.write("ready\n"); answers.flush()
    for line in requests:
        request = json.loads(line)
        # Python 3.12 warns of a fork in a process with threads (torch's import
        # starts one); the filters are as they were again once the block ends,
        # in the child too.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
            if pid == 0:
                requests.close(); answers.close()
                return request
        answers.write(json.dumps({"pid": pid}) + "\n"); answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"status": status}) + "\n"); answers.flush()
    sys.exit(0)

request = serve()
script = request["script"]
for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
    opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(opened, fd)
    os.close(opened)
os.environ.clear()
os.environ.update(request["env"])
os.chdir(request["cwd"])
import types
main = types.ModuleType("__main__")
sys.modules["__main__"] = main
exec(compile(script, "<string>", "exec"), main.__dict__)
"""


class _Server:
    def __init__(self, env: dict[str, str]):
        to_server, self._requests = os.pipe()
        self._answers, from_server = os.pipe()
        self.owner = os.getpid()
        self.process = subprocess.Popen([sys.executable, "-c", _SERVER, str(to_server), str(from_server)],
                                        env=env, pass_fds=(to_server, from_server), stdin=subprocess.DEVNULL)
        os.close(to_server)
        os.close(from_server)
        self._buffer = b""
        if self._line(timeout=300) != "ready":
            raise RuntimeError("the fork server did not start")

    def _line(self, timeout: float | None) -> str | None:
        """The server's next answer; None when `timeout` passed first."""
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._answers], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._answers, 65536)
            if not chunk:
                raise RuntimeError("the fork server ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def run(self, script: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="nr-child-") as folder:
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            request = {"script": script, "env": env, "cwd": os.getcwd(), "stdout": out, "stderr": err}
            os.write(self._requests, (json.dumps(request) + "\n").encode())
            pid = json.loads(self._line(timeout=60))["pid"]
            answer = self._line(timeout)
            if answer is None:
                os.kill(pid, signal.SIGKILL)
                self._line(timeout=60)
                raise subprocess.TimeoutExpired(["<forked>", "-c", script], timeout)
            status = os.waitstatus_to_exitcode(json.loads(answer)["status"])
            with open(out) as o, open(err) as e:
                return subprocess.CompletedProcess(["<forked>", "-c", script], status, o.read(), e.read())

    def close(self) -> None:
        os.close(self._requests)
        os.close(self._answers)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_servers: dict[tuple, _Server] = {}
_lock = threading.Lock()


def _key(env: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k not in PER_CALL))


def forking(prelude: str, env: dict[str, str]) -> bool:
    """Whether a child may come from the fork server (the module's head)."""
    return (os.environ.get(ENV_VAR) == "1" and not prelude.strip() and hasattr(os, "fork")
            and not any(v in env for v in COVERAGE))


def run(script: str, env: dict[str, str], timeout: float, prelude: str = "") -> subprocess.CompletedProcess:
    """`python -c prelude + script` under `env`, as subprocess.run would
    return it (text, stdout and stderr captured); raises
    subprocess.TimeoutExpired after `timeout` seconds."""
    whole = prelude + script
    if not forking(prelude, env):
        return _started(whole, env, timeout)
    # One call at a time: a server serves one child at a time.
    with _lock:
        key = _key(env)
        server = _servers.get(key)
        if server is not None and server.owner != os.getpid():
            server = None  # a forked copy of another process's: that one's pipes, not ours
        if server is None:
            for old in [k for k, s in _servers.items() if s.owner == os.getpid()]:
                _servers.pop(old).close()  # one server a process: the environment changed
            server = _servers[key] = _Server(env)
        try:
            return server.run(whole, env, timeout)
        except (RuntimeError, OSError):  # the server itself ended (it runs no test code): start from nothing
            _servers.pop(key).process.kill()
    return _started(whole, env, timeout)


def _started(script: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """A new `python -c script`, from nothing."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)
