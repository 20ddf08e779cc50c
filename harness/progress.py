"""Progress on long work: a subprocess's output logged in full while its
progress lines are echoed, and estimates of what remains."""

from __future__ import annotations

import pathlib
import subprocess

from . import ROOT


def stream(cmd: list[str], label: str, log: pathlib.Path, env: dict | None = None,
           progress=lambda line: None, cwd: pathlib.Path = ROOT) -> int:
    """Runs cmd, logging everything and echoing progress lines."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            shown = progress(line)
            if shown:
                print(f"  [{label}] {shown}", flush=True)
        return proc.wait()


def gtest_progress(line: str) -> str | None:
    if line.startswith("[       OK ]"):
        return "ok    " + line[13:].split(" (")[0].strip()
    if line.startswith("[  SKIPPED ]") and "(" in line:
        return "unsup " + line[13:].split(" (")[0].strip()
    if line.startswith("[  FAILED  ]") and "ms)" in line:
        return "FAIL  " + line[13:].split(" (")[0].strip()
    return None


def pytest_progress(line: str) -> str | None:
    for word, shown in (("PASSED", "ok   "), ("FAILED", "FAIL "), ("XFAIL", "known"),
                        ("XPASS", "XPASS"), ("SKIPPED", "unsup"), ("ERROR", "ERROR")):
        if f" {word}" in line and "::" in line:
            return f"{shown} {line.split(' ')[0].split('::', 1)[-1]}"
    return None


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def remaining(done: int, total: int, elapsed: float) -> str:
    """'about N left' from the mean time of the items done so far."""
    if done == 0:
        return "estimating"
    if done >= total:
        return "none left"
    return f"about {duration(elapsed / done * (total - done))} left"
