"""The conformance run (./harness/run without a mode): the catalogue checks,
each implementation's C++ and Python suites at each device, the matrix and
its reports (terminal, results.json, matrix.html), and the host's facts."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import sys
import time

from conformance.python import catalogue as catalogue_module

from . import matrix, report_html, suite_parts
from .implementations import Implementation
from .progress import gtest_progress, pytest_progress, stream


def device_suffix(device: str) -> str:
    """What a device run adds to file names and progress labels ("" at cpu)."""
    return "" if device == "cpu" else f"-{device}"


def run_cpp(impl: Implementation, build: pathlib.Path, results: pathlib.Path,
            device: str = "cpu") -> tuple[int, list[dict]]:
    # impl.cpp is relative to the build folder, or absolute (--cpp-impl).
    # The suite reads its device from CONFORMANCE_DEVICE; at another device
    # than cpu only its device tests (Conformance.Device*) run.
    stem = impl.file_stem + device_suffix(device)
    xml = results / f"cpp-{stem}.xml"
    cmd = [str(build / impl.cpp), f"--gtest_output=xml:{xml}"]
    if device != "cpu":
        cmd.append("--gtest_filter=*Conformance.Device*")
    status = stream(cmd, f"c++ {impl.label}{device_suffix(device)}", results / f"cpp-{stem}.log",
                    env=dict(os.environ, CONFORMANCE_DEVICE=device), progress=gtest_progress)
    rows = matrix.gtest_rows(xml, impl.label, device) if xml.exists() else []
    return status, rows


def run_python(impl: Implementation, results: pathlib.Path, env: dict | None = None,
               extra: tuple[str, ...] = (), device: str = "cpu") -> tuple[int, list[dict]]:
    # At another device than cpu only the device tests (marker `device`) run.
    stem = impl.file_stem + device_suffix(device)
    files = tuple(results / f"python-{stem}.{kind}" for kind in ("jsonl", "xml", "log"))
    report = files[0]
    shards = suite_parts.python_shards(device)
    parts = suite_parts.part_files(files, len(shards))
    label = f"py {impl.label}{device_suffix(device)}"
    statuses: list[int | None] = [0] * len(shards)

    def run(i: int) -> None:
        part_report, part_xml, part_log = parts[i]
        cmd = [sys.executable, "-m", "pytest", *shards[i], "-v", "-p", "no:cacheprovider",
               f"--impl={impl.python}", f"--conformance-report={part_report}", f"--device={device}",
               f"--junitxml={part_xml}", *extra]
        if device != "cpu":
            cmd += ["-m", "device"]
        with suite_parts.own_basetemp(len(shards), i) as basetemp:
            statuses[i] = stream([*cmd, *basetemp], label, part_log, env=env, progress=pytest_progress)

    suite_parts.side_by_side(len(shards), run)
    suite_parts.join_parts(parts, files)
    # pytest's exit codes: 0 passed, 1 tests failed, 5 nothing collected (a
    # part that a selection emptied), others: the run itself broke.
    status = suite_parts.joined_status(statuses)
    rows = matrix.python_rows(report) if report.exists() else []
    for row in rows:  # the harness's label, unique even where adapters share a name
        row["implementation"] = impl.label
    return status, rows


def conformance(args) -> int:
    results: pathlib.Path = args.results
    for old in list(results.glob("*.xml")) + list(results.glob("*.jsonl")):
        old.unlink()
    start = time.monotonic()

    print("== catalogue and traceability")
    problems = catalogue_module.check_all(args.spec if args.spec and args.spec.exists() else None)
    for p in problems:
        print(f"  PROBLEM: {p}")
    catalogue = catalogue_module.load()

    rows: list[dict] = []
    unexpected = bool(problems)
    broken: list[str] = []  # suites that crashed or reported nothing
    env = args.suite_env  # imports the package built in args.build, like the C++ suite

    def cpp_column(impl: Implementation, device: str) -> bool:
        """Runs one C++ suite into `rows`; whether its results are unexpected."""
        at = "" if device == "cpu" else f" at device {device}"
        print(f"== C++ suite against {impl.label}{at}", flush=True)
        status, got = run_cpp(impl, args.build, results, device)
        rows.extend(got)
        if not got:
            broken.append(f"the C++ suite against {impl.label}{at} reported nothing (exit {status}); "
                          f"see {results / f'cpp-{impl.file_stem}{device_suffix(device)}.log'}")
        return matrix.suite_failed(status, got, catalogue)

    for device in args.devices:
        at = "" if device == "cpu" else f" at device {device}"
        for impl in args.implementations:
            if impl.cpp:
                unexpected |= cpp_column(impl, device)
            print(f"== Python suite against {impl.label}{at}", flush=True)
            status, got = run_python(impl, results, env=env, device=device,
                                     extra=tuple(f"--expectations={p}" for p in args.expectations))
            rows += got
            if not got:
                broken.append(f"the Python suite against {impl.label}{at} reported nothing (exit "
                              f"{status}); see {results / f'python-{impl.file_stem}{device_suffix(device)}.log'}")
            unexpected |= matrix.suite_failed(status, got, catalogue) or status != 0
        for impl in args.cpp_implementations:  # --cpp-impl: a C++ column only
            unexpected |= cpp_column(impl, device)

    import torch

    platform_label = f"platform: torch {torch.__version__}"
    labels, table = matrix.build(catalogue, rows, platform_label, catalogue_module.load_devices())
    missing = [row[0] for row in table if "missing" in row]
    unexpected |= bool(missing)
    header = (f"# Conformance matrix\n\nImplementations: {', '.join(i.label for i in args.implementations)}. "
              f"PyTorch {torch.__version__}, Python {platform.python_version()}, "
              f"{platform.machine()}. Devices: {', '.join(args.devices)}"
              f"{device_note(args.devices)}. {len(catalogue)} behaviours, {len(rows)} test results, "
              f"{time.monotonic() - start:.0f} s.")
    score = matrix.scores(catalogue, labels, table)
    md = matrix.markdown(labels, table, header)
    md += "\nScore (passed / applicable; unsupported behaviours are not applicable):\n\n" + "".join(
        f"- {label}: {matrix.score_line(s)}\n" for label, s in score.items())
    (results / "matrix.md").write_text(md)
    document = report_html.document(
        catalogue, rows, labels, table,
        implementations=[{"label": i.label, "spec": i.spec, "description": i.description,
                          "suites": (["cpp"] if i.cpp else []) + ["python"]}
                         for i in args.implementations]
                        + [{"label": i.label, "spec": i.spec, "description": i.description,
                            "suites": ["cpp"]} for i in args.cpp_implementations],
        summary=header.splitlines()[-1], problems=problems + broken)
    (results / "matrix.html").write_text(report_html.page(document, results))
    document["run"] = run_facts(args.devices)
    (results / "results.json").write_text(json.dumps(document, indent=1))
    print()
    print(matrix.terminal(labels, table))
    print()
    for label, tally in matrix.counts(labels, table).items():
        print(f"  {label}: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
              + f"; score: {matrix.score_line(score[label])}")
    for r in rows:
        if r["outcome"] == "stale":
            print(f"  fixed: expectation stale: {r['implementation']} {r['side']} {r['test']}")
        elif r["outcome"] == "fail" and not matrix.is_fatal(r, catalogue):
            print(f"  miss (recommended): {r['implementation']} {r['side']} {r['test']}")
    listing = report_html.failure_list(document)
    if listing:
        print("\n" + listing)
    passed = sum(not matrix.is_fatal(r, catalogue) for r in rows)
    failed = len(rows) - passed + len(problems) + len(missing)
    print(f"\nreports: {results}/matrix.md, matrix.html, results.json, cpp-*.xml, python-*.xml")
    print(f"{passed} passed, {failed} failed")
    return 1 if unexpected else 0


def run_facts(devices: list[str]) -> dict:
    """Where the run ran, for reports of device runs (harness/gpu/report.py)."""
    import torch

    facts = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
             "python": platform.python_version(), "machine": platform.machine(),
             "devices": devices, "cuda_available": torch.cuda.is_available(),
             "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
             "cuda_runtime": torch.version.cuda}
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    return facts


def device_note(devices: list[str]) -> str:
    """" (CUDA: NVIDIA H200)" or " (no CUDA device)" when the run has a cuda device."""
    if "cuda" not in devices:
        return ""
    import torch

    return f" (CUDA: {torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else " (no CUDA device)"
