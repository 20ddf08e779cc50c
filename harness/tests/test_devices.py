"""Tests of the device runs (issue 14): --device on the command line, a
matrix column per device run, the CUDA behaviours reported unsupported
where there is no CUDA device, the GPU entry script's plan, and the README
section written from a GPU run's files."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]

from conformance.python import catalogue
from harness import main, matrix, with_root_on_path
from harness.gpu import report

BUILD = pathlib.Path(os.environ.get("BUILD_DIR", "build"))
BUILD = BUILD if BUILD.is_absolute() else ROOT / BUILD
DEVICES = catalogue.load_devices()


def test_device_lists_are_checked_before_anything_runs():
    assert main.parse_devices("cpu, cuda,cuda") == ["cpu", "cuda"]
    with pytest.raises(main.UsageError, match="'tpu': not a device of conformance/devices.toml"):
        main.parse_devices("cpu,tpu")
    with pytest.raises(main.UsageError, match="names no device"):
        main.parse_devices(",")


def test_a_device_run_has_its_own_column_holding_only_its_behaviours():
    cat = catalogue.load()
    listed = DEVICES["cuda"].behaviours[0]
    unlisted = next(b for b in cat if b not in DEVICES["cuda"].behaviours and cat[b].profile == "registry")
    rows = [{"test": "t", "behaviours": [listed], "side": "python", "implementation": "reference",
             "outcome": "pass"},
            {"test": "t", "behaviours": [listed], "side": "python", "implementation": "reference",
             "device": "cuda", "outcome": "unsupported", "reason": "unsupported: no CUDA device"},
            {"test": "u", "behaviours": [unlisted], "side": "python", "implementation": "reference",
             "device": "cuda", "outcome": "fail"}]
    labels, table = matrix.build(cat, rows, "platform", DEVICES)
    assert labels == ["python: reference", "python: reference @cuda", "platform"]
    cells = {row[0]: row[2:] for row in table}
    assert cells[listed] == ["pass", "unsupported", "-"]
    assert cells[unlisted][1] == "-", "a behaviour devices.toml does not list for cuda has no cuda cell"


def test_every_cuda_behaviour_has_a_device_test_on_each_of_its_sides():
    refs = catalogue.device_test_references(catalogue.CONFORMANCE / "python", catalogue.CONFORMANCE / "cpp")
    assert catalogue.device_problems(catalogue.load(), DEVICES, refs) == []
    broken = catalogue.Device("cuda", "CUDA", "AutogradCUDA", "AutocastCUDA",
                              DEVICES["cuda"].behaviours + ("ordering.env-var-unset",))
    problems = catalogue.device_problems(catalogue.load(), {**DEVICES, "cuda": broken}, refs)
    assert problems == ["ordering.env-var-unset is listed for device cuda but no python device test names it"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run where there is no CUDA device")
def test_without_a_cuda_device_every_cuda_behaviour_is_unsupported_and_the_run_exits_0(tmp_path):
    assert (BUILD / "build.ninja").exists(), f"this test runs the harness on the build in {BUILD}"
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness", "--build", str(BUILD),
                           "--results", str(results), "--device", "cuda"],
                          cwd=tmp_path, env=with_root_on_path(os.environ), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((results / "results.json").read_text())
    assert doc["columns"] == ["cpp: reference @cuda", "python: reference @cuda",
                              f"platform: torch {torch.__version__}"]
    assert doc["run"]["devices"] == ["cuda"] and doc["run"]["cuda_available"] is False
    for side in ("cpp", "python"):
        tested = {b for r in doc["results"] if r["side"] == side for b in r["behaviours"]}
        expected = {b for b in DEVICES["cuda"].behaviours if side in catalogue.load()[b].sides}
        assert tested == expected, side
    assert doc["results"] and all(r["outcome"] == "unsupported" and r["device"] == "cuda"
                                  and r["reason"] == "unsupported: no CUDA device" for r in doc["results"])
    for b in doc["behaviours"]:
        for column, cell in b["cells"].items():
            if "@cuda" in column:
                assert cell in ("unsupported", "-"), (b["id"], column, cell)
    assert "Devices: cuda (no CUDA device)" in (results / "matrix.md").read_text()


def test_the_gpu_script_plans_every_step_inside_its_budget(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "harness" / "gpu" / "run-on-device"), "--dry-run"],
                          env=dict(os.environ, OUT=str(tmp_path), BUDGET="540", PYTHON=sys.executable),
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    steps = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("== ")]
    assert steps == ["facts", "configure", "build", "stage", "bench", "observe-rows", "conformance",
                     "report"]
    assert "--device cpu,cuda" in proc.stdout
    assert "-m mesonbuild.mesonmain setup build-gpu -Dtests=enabled" in proc.stdout
    assert "pip" not in proc.stdout, "the GPU machine has no network: nothing may be installed"
    assert not list(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == ["steps.log"]


def fake_run(folder: pathlib.Path) -> None:
    """The files a GPU run brings back, small and made up for the test."""
    folder.mkdir()
    (folder / "facts.json").write_text(json.dumps({
        "date": "2026-12-01 13:00 UTC", "gpu": ["NVIDIA H200, 580.159.04, 143771 MiB"], "cpus": 16,
        "python": "3.12.3", "torch": "2.11.0+cu130", "torch_cuda": "13.0", "triton": "3.6.0"}))
    (folder / "results.json").write_text(json.dumps({
        "summary": "Implementations: reference. 75 behaviours.",
        "columns": ["python: reference", "python: reference @cuda", "platform: torch 2.11.0"],
        "behaviours": [{"id": "routing.first-match-wins",
                        "cells": {"python: reference": "pass", "python: reference @cuda": "pass",
                                  "platform: torch 2.11.0": "-"}},
                       {"id": "ordering.env-var-unset",
                        "cells": {"python: reference": "pass", "python: reference @cuda": "-",
                                  "platform: torch 2.11.0": "-"}}],
        "totals": {"python: reference @cuda": {"pass": 1}},
        "score": {"python: reference @cuda": {"required": {"passed": 1, "applicable": 1}}},
        "failures": []}))
    (folder / "bench-cuda.json").write_text(json.dumps({
        "context": {"dtype": "float16", "rounds": 5, "timer": "synchronised"},
        "rows": [{"numel": 2, "variant": "stock", "median_ns": 5000.0, "added_ns": 0.0, "ratio_to_stock": 1.0},
                 {"numel": 2, "variant": "decline_cpp", "median_ns": 5400.0, "added_ns": 400.0,
                  "ratio_to_stock": 1.08}]}))


def test_the_readme_section_is_written_from_the_runs_files_and_replaced_next_time(tmp_path):
    run = tmp_path / "out"
    fake_run(run)
    text = report.section(run, None, 312)
    assert "NVIDIA H200" in text and "torch 2.11.0+cu130 (CUDA 13.0)" in text and "Triton 3.6.0" in text
    assert "Device time used: 312 s." in text
    assert "| `routing.first-match-wins` | pass |" in text
    assert "ordering.env-var-unset" not in text, "a behaviour with no cuda cell is not in the GPU table"
    assert "| 2 | decline_cpp | 5.40 µs | +0.40 µs | 1.080 |" in text
    doc = tmp_path / "measurements.md"
    doc.write_text("# x\n\n## Benchmarks\n\nb\n\n<!-- gpu-run:begin (by report.py) -->\nold\n"
                   "<!-- gpu-run:end -->\n\n## Reliability\n\nr\n")
    report.write_into_doc(doc, text)
    report.write_into_doc(doc, text.replace("312 s", "99 s"))
    written = doc.read_text()
    assert written.count("## The latest GPU run") == 1 and "99 s" in written and "312 s" not in written
    assert "old" not in written
    assert (written.index("## Benchmarks") < written.index("gpu-run:begin") < written.index("99 s")
            < written.index("gpu-run:end") < written.index("## Reliability"))


@pytest.mark.parametrize("markers", ["", "<!-- gpu-run:end -->\n",
                                     "<!-- gpu-run:begin -->\n<!-- gpu-run:end -->\n" * 2])
def test_the_doc_is_left_alone_unless_its_section_markers_are_there_once_each(tmp_path, markers):
    """A missing or repeated marker is an error, never a section made up
    somewhere (the doc once held the GPU section twice that way)."""
    doc = tmp_path / "measurements.md"
    doc.write_text(before := f"# x\n\n{markers}\n## Reliability\n")
    with pytest.raises(report.doc_sections.MarkerError, match="gpu-run"):
        report.write_into_doc(doc, report.section(tmp_path, None, None))
    assert doc.read_text() == before


def test_a_run_that_brought_nothing_back_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    text = report.section(tmp_path / "empty", None, None)
    assert "No results.json came back" in text and "No bench-cuda.json came back" in text


def test_the_benchmark_rows_compute_stocks_result_and_leave_the_table_as_it_was(tmp_path):
    """bench_cuda.py at the CPU key (its smoke mode: no Triton rows), tiny
    and short; the script itself checks each variant's result and the
    dispatch table after each teardown. Nothing about time is asserted."""
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "reference.bench.bench_cuda", "--device", "cpu",
                           "--sizes", "2", "--rounds", "1", "--min-run-time", "0.01", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [r["variant"] for r in doc["rows"]] == ["stock", "dormant", "decline_cpp", "decline_py"]
    assert set(doc["context"]["left_out"]) == {"accept_triton", "accept_triton_py", "triton_library",
                                               "triton_direct"}
    stock = doc["rows"][0]
    assert stock["added_ns"] == 0 and stock["ratio_to_stock"] == 1
    assert all(r["median_ns"] > 0 and r["samples"] > 0 for r in doc["rows"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run where there is no CUDA device")
def test_the_cuda_benchmark_writes_no_rows_without_a_cuda_device_and_says_why(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "reference.bench.bench_cuda", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0
    doc = json.loads(out.read_text())
    assert doc["rows"] == [] and doc["unsupported"] == "no CUDA device"
    assert "No benchmark rows: no CUDA device." in report.bench_section(doc)
