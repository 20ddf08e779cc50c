"""The conformance suite's child interpreters (conformance/python/
fresh_interpreters.py): a fork server's child must end, print and fail as
`python -c` does, since the harness's mutant runs judge with one and every
other run without."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "conformance" / "python"))
import fresh_interpreters  # noqa: E402

SCRIPTS = {
    "prints and ends": "import sys\nprint('out', sys.argv)\nprint('err', file=sys.stderr)\n",
    "exit status": "import sys\nprint('before')\nsys.exit(3)\n",
    "uncaught exception": "raise ValueError('bad value 7')\n",
    "atexit and a thread joined at the end": (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done', flush=True))).start()\n"),
    "killed by a signal": "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "environment and folder": "import os\nprint(os.environ['NR_TEST_VALUE'], os.getcwd())\n",
    # Every script conftest runs begins so: what differs before it (torch
    # imported already) is what the server saves.
    "a new __main__ after import torch": (
        "import torch\nimport __main__\nprint(sorted(k for k in vars(__main__) if not k.startswith('__')))\n"
        "print(torch.ones(2).sum().item())\n"),
    # The server's own filter for its fork is gone in the child.
    "warnings filters after import torch": "import torch, warnings\nprint(warnings.filters)\n",
}


def run_both(script: str, monkeypatch) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    env = {**os.environ, "NR_TEST_VALUE": "v1"}
    for variable in fresh_interpreters.COVERAGE:
        env.pop(variable, None)
    monkeypatch.delenv(fresh_interpreters.ENV_VAR, raising=False)
    started = fresh_interpreters.run(script, env, timeout=120)
    monkeypatch.setenv(fresh_interpreters.ENV_VAR, "1")
    assert fresh_interpreters.forking("", env)
    forked = fresh_interpreters.run(script, env, timeout=120)
    return started, forked


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_forked_child_ends_prints_and_fails_as_python_c_does(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    started, forked = run_both(SCRIPTS[name], monkeypatch)
    assert forked.returncode == started.returncode
    assert forked.stdout == started.stdout
    if name == "uncaught exception":  # the traceback's last line; its frames name the server
        assert forked.stderr.splitlines()[-1] == started.stderr.splitlines()[-1] == "ValueError: bad value 7"
    else:
        assert forked.stderr == started.stderr


def test_a_forked_child_past_its_time_is_killed_and_the_server_serves_on(monkeypatch):
    monkeypatch.setenv(fresh_interpreters.ENV_VAR, "1")
    env = dict(os.environ)
    with pytest.raises(subprocess.TimeoutExpired):
        fresh_interpreters.run("import time\ntime.sleep(60)\n", env, timeout=2)
    assert fresh_interpreters.run("print('next')\n", env, timeout=60).stdout == "next\n"


def test_a_prelude_or_coverage_measurement_starts_python_from_nothing(monkeypatch):
    monkeypatch.setenv(fresh_interpreters.ENV_VAR, "1")
    assert not fresh_interpreters.forking("import builtins\n", dict(os.environ))
    for variable in fresh_interpreters.COVERAGE:
        assert not fresh_interpreters.forking("", {**os.environ, variable: "x"})
    # The prelude runs before torch is imported.
    out = fresh_interpreters.run("print('torch' in sys.modules)\n", dict(os.environ), timeout=120,
                                 prelude="import sys\nprint('torch' in sys.modules)\nimport torch\n")
    assert out.stdout.split() == ["False", "True"]


def test_one_server_per_environment_and_process(monkeypatch):
    monkeypatch.setenv(fresh_interpreters.ENV_VAR, "1")
    base = dict(os.environ)
    fresh_interpreters.run("pass\n", base, timeout=60)
    first = fresh_interpreters._servers[fresh_interpreters._key(base)]
    # A variable pytest sets per test is not part of the key.
    fresh_interpreters.run("pass\n", {**base, "PYTEST_CURRENT_TEST": "t (call)"}, timeout=60)
    assert fresh_interpreters._servers[fresh_interpreters._key(base)] is first
    # Another environment: another server, the first one ended.
    other = {**base, "NR_TEST_VALUE": "v2"}
    assert fresh_interpreters.run("import os\nprint(os.environ['NR_TEST_VALUE'])\n", other,
                                  timeout=60).stdout == "v2\n"
    assert first.process.poll() is not None and len(fresh_interpreters._servers) == 1


def test_a_server_that_ended_gives_way_to_a_python_started_from_nothing(monkeypatch):
    monkeypatch.setenv(fresh_interpreters.ENV_VAR, "1")
    env = dict(os.environ)
    fresh_interpreters.run("pass\n", env, timeout=60)
    server = fresh_interpreters._servers[fresh_interpreters._key(env)]
    server.process.kill()
    server.process.wait()
    assert fresh_interpreters.run("print('still runs')\n", env, timeout=120).stdout == "still runs\n"
    assert fresh_interpreters._key(env) not in fresh_interpreters._servers
