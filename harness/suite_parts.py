"""The Python conformance suite as parts that run side by side: which files
each part takes, each part's own report files and pytest tmp_path root, and
the parts' reports joined into one JSONL, one JUnit file and one log.

Used by the conformance run (conformance_run.run_python) and by the seeded
faults' baseline (mutants.pytest_run).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator

from . import ROOT

# The Python suite's files whose tests start interpreters of their own (a child
# per takeover case, the ordering-and-log-handler child, spawned workers): about
# half the suite's time. With two cores or more they run in a pytest process
# beside the one that runs the rest, and the two reports are joined.
RUN_BESIDE = ("test_takeover.py", "test_takeover_transaction.py", "test_lifetimes.py")

# pytest's exit status when a part collected nothing (a selection emptied it).
NOTHING_COLLECTED = 5


def python_shards(device: str = "cpu") -> list[list[str]]:
    """The pytest processes of one whole Python suite run, each as its paths."""
    suite = ROOT / "conformance" / "python"
    beside = [f"conformance/python/{name}" for name in RUN_BESIDE if (suite / name).exists()]
    if device != "cpu" or (os.cpu_count() or 1) < 2 or not beside:
        return [["conformance/python"]]
    rest = [f"conformance/python/{p.name}" for p in sorted(suite.glob("test_*.py"))
            if p.name not in RUN_BESIDE]
    return [rest, beside]


def part_files(files: tuple[pathlib.Path, ...], count: int) -> list[tuple[pathlib.Path, ...]]:
    """Each part's own files beside `files` (python.jsonl: python.part0.jsonl,
    ...); with one part, `files` themselves."""
    if count == 1:
        return [files]
    return [tuple(f.with_name(f"{f.stem}.part{i}{f.suffix}") for f in files) for i in range(count)]


def join_junit(parts: list[pathlib.Path], into: pathlib.Path) -> None:
    """One JUnit file holding every part's test suites; the parts removed."""
    root = ET.Element("testsuites")
    for part in parts:
        if part.exists():
            got = ET.parse(part).getroot()
            root.extend(got if got.tag == "testsuites" else [got])
            part.unlink()
    ET.ElementTree(root).write(into, encoding="utf-8", xml_declaration=True)


def join_parts(parts: list[tuple[pathlib.Path, ...]], files: tuple[pathlib.Path, ...]) -> None:
    """Each of `files` made of its parts' (JUnit files joined, the others
    concatenated in part order); the parts removed. Nothing to do for one part."""
    if len(parts) == 1:
        return
    for k, into in enumerate(files):
        pieces = [part[k] for part in parts]
        if into.suffix == ".xml":
            join_junit(pieces, into)
            continue
        into.write_text("".join(p.read_text() for p in pieces if p.exists()))
        for p in pieces:
            p.unlink(missing_ok=True)


def joined_status(statuses: list[int | None]) -> int | None:
    """One run's exit status from its parts': None (a part ran past its time)
    wins; a part that collected nothing is no error when there are several."""
    if any(s is None for s in statuses):
        return None
    return max(0 if s == NOTHING_COLLECTED and len(statuses) > 1 else s for s in statuses)


@contextlib.contextmanager
def own_basetemp(parts: int, i: int) -> Iterator[list[str]]:
    """pytest options giving part `i` a tmp_path root of its own when there
    are several: two sessions numbering and pruning pytest's shared one at
    once could remove each other's folders."""
    if parts == 1:
        yield []
        return
    with tempfile.TemporaryDirectory(prefix=f"nr-conformance-part{i}-") as base:
        yield [f"--basetemp={base}"]


def side_by_side(count: int, run: Callable[[int], None], on_interrupt: Callable[[], None] = lambda: None) -> None:
    """run(0) .. run(count - 1) at once, part 0 in this thread (where an
    interrupt arrives: `on_interrupt` then stops the others' processes)."""
    threads = [threading.Thread(target=run, args=(i,)) for i in range(1, count)]
    for thread in threads:
        thread.start()
    try:
        run(0)
    except BaseException:
        on_interrupt()
        raise
    finally:
        for thread in threads:
            thread.join()
