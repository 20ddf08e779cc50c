"""The conformance harness's command line. ./harness/run calls it once the
build is up to date (and first with --check-args, before installing or
building anything); ci/test calls it directly. `./harness/run --help` says
what every option does.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

from conformance.python import catalogue as catalogue_module

from . import CONFORMANCE_PYTHON, ROOT, cpp_impls, staging, with_root_on_path
from .conformance_run import conformance
from .implementations import Implementation, UsageError, assign_labels, parse_impls

DESCRIPTION = """\
Runs the conformance suites (C++ with GoogleTest, Python with pytest) against
one or more implementations of PyTorch's op-override registry and reports
which catalogue behaviours each one holds: a behaviour x implementation matrix
and a list of every failure with its assertion message on the terminal, and
results/matrix.md, matrix.html, results.json and JUnit XML. An implementation
is `reference` (the C++ reference and its Python binding: both suites),
`upstream` (torch._native.registry of the installed PyTorch: the Python suite)
or any Python adapter named `module:factory` (the Python suite). Before any
suite runs, every adapter is imported and every suite's dependencies are
checked; a problem is reported with the real exception and its fix. Other
modes measure coverage of an implementation (--coverage), run the suites
against seeded faults (--mutants), or run an upstream test file against the
installed PyTorch and the reference (--upstream-tests). Relative paths are
taken from the directory the command is run in. Exit status: 0 when every
result is as expected; 1 on an unexpected result (a failure of a required
behaviour that no expectation file lists, a suite that crashed, a catalogue or
traceability problem, a fault no test kills); 2 on bad usage or an
implementation or dependency that cannot be loaded. A recommended behaviour's
failure ("miss") and a known failure that now passes ("fixed: expectation
stale") are reported and not fatal."""

EXAMPLES = """\
examples:
  ./harness/run                                    the reference, both suites
  ./harness/run --impl reference,upstream          also the installed PyTorch's torch._native
  PYTHONPATH=~/src ./harness/run --impl mypkg.adapter:make
                                                   your implementation, through its adapter
  ./harness/run --impl upstream --results /tmp/up  reports into another folder
  ./harness/run --impl mypkg.adapter:make --expectations my-known-failures.toml
                                                   your known failures, with reasons
  ./harness/run --cpp-impl mine=path/to/conformance_mine
                                                   a C++ suite binary linked with your adapter
  ./harness/run --device cpu,cuda                  also the device tests at CUDA keys with CUDA
                                                   tensors, a column per device (unsupported
                                                   without a CUDA device)
  ./harness/run --coverage                         coverage of the reference: C++ (lcov) and Python
  ./harness/run --coverage --impl reference,upstream
                                                   also upstream's torch/_native/registry.py
  ./harness/run --mutants                          every seeded fault of fixtures/faults/faults.toml
  ./harness/run --mutants --only drop-first-node   one fault
  ./harness/run --mutants auto --sample 200 --seed 1
                                                   200 generated mutants of reference/src/*.cpp
  ./harness/run --mutants auto --mutate python --sample 100 --seed 1
                                                   100 of the reference's Python layer
  ./harness/run --mutants auto --mutate python --impl upstream --sample 50
                                                   50 of upstream's torch/_native/registry.py
  ./harness/run --mutants auto --mutate python --shard 2/4
                                                   the second of four shards (merge: mutation_report)
  ./harness/run --mutants auto --mutate python --incremental OLD.mutation.json
                                                   only mutants whose line or tests changed since
  ./harness/run --mutants auto --mutate python --own-tests --own-tests-after OLD.jsonl.gz
                                                   the own tests alone for what OLD's run left alive
  ./harness/run --upstream-tests ../shared/spec/test_registry.py
                                                   an upstream test file: installed torch vs reference
  ./harness/run --mutants auto --mutate python --own-tests --upstream-tests ../shared/spec/test_registry.py
                                                   that file judges too what the own tests leave alive

environment: PYTHON (the interpreter; default python3), BUILD_DIR (the build
folder ./harness/run builds, relative to the repository; default build).
The adapter protocol: conformance/python/adapter.py; expectation files
(known failures with reasons): conformance/expectations/<adapter name>.toml."""


def resolve_paths(args) -> None:
    """Every path option against the caller's directory (./harness/run runs
    this in the directory it was called from), absolute from here on: the
    suites run in subprocesses with other working directories."""
    for option in ("build", "results", "spec", "upstream_tests", "baseline_from", "incremental", "own_tests_after"):
        value = getattr(args, option)
        if value is not None:
            setattr(args, option, value.expanduser().resolve())
    if args.upstream_tests is not None and not args.upstream_tests.is_file():
        raise UsageError(f"--upstream-tests {args.upstream_tests}: no such file (relative paths are "
                         f"taken from {pathlib.Path.cwd()})")
    if args.only and not args.mutants:
        raise UsageError("--only goes with --mutants")
    if args.mutants != "auto" and (args.sample is not None or args.mutate != "cpp" or args.seed != 1
                                   or args.resume or args.own_tests):
        raise UsageError("--sample, --seed, --mutate, --resume and --own-tests go with --mutants auto")
    if args.mutants != "auto" and (args.shard is not None or args.incremental is not None):
        raise UsageError("--shard and --incremental go with --mutants auto")
    if args.tests_by_coverage and (args.mutants != "auto" or args.mutate != "python" and not args.switch):
        raise UsageError("--tests-by-coverage goes with --mutants auto --mutate python, or --mutate cpp|binding "
                         "--switch")
    if args.switch and args.mutants != "auto":
        raise UsageError("--switch goes with --mutants auto (the seeded faults are switched unless --rebuild)")
    if args.rebuild and args.mutants != "faults":
        raise UsageError("--rebuild goes with --mutants (the seeded faults)")
    if args.check_switch and not (args.switch and args.mutate in ("cpp", "binding")):
        raise UsageError("--check-switch goes with --mutants auto --mutate cpp|binding --switch")
    if args.fresh_suites and not (args.switch and args.tests_by_coverage and args.mutate in ("cpp", "binding")):
        raise UsageError("--fresh-suites goes with --mutants auto --mutate cpp|binding --switch --tests-by-coverage")
    if args.shard is not None:
        args.shard = parse_shard(args.shard)
    if args.incremental is not None and not args.incremental.is_file():
        raise UsageError(f"--incremental {args.incremental}: no such report")
    if args.upstream_tests is not None and args.mutants and not (
            args.mutants == "auto" and args.own_tests and args.mutate == "python"):
        raise UsageError("--upstream-tests with --mutants goes with --mutants auto --mutate python --own-tests "
                         "(upstream's test file is one more of the own tests)")
    if args.own_tests_after is not None and not (args.mutants == "auto" and args.own_tests):
        raise UsageError("--own-tests-after goes with --mutants auto --own-tests")
    if args.own_tests_after is not None and not args.own_tests_after.is_file():
        raise UsageError(f"--own-tests-after {args.own_tests_after}: no such record")
    if args.baseline_from is not None and (args.mutants != "auto" or args.mutate != "python"):
        raise UsageError("--baseline-from goes with --mutants auto --mutate python")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give a positive number of workspaces")
    if args.mutants == "auto" and len(args.implementations) != 1:
        raise UsageError("--mutants auto mutates one implementation: give one --impl")
    if args.sample is not None and args.sample < 1:
        raise UsageError(f"--sample {args.sample}: give a positive number of mutants")


def parse_shard(spec: str) -> tuple[int, int]:
    """--shard K/N as (K, N), 1 <= K <= N."""
    k, _, n = spec.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise UsageError(f"--shard {spec}: give K/N with 1 <= K <= N, such as 2/4")
    return int(k), int(n)


def suite_modules(args) -> dict[str, str]:
    """Python modules the chosen mode's suites import -> the fix when one is missing."""
    setup = "run ./ci/setup, or install it into $PYTHON"
    modules = {"pytest": f"pip install pytest ({setup})", "torch": f"pip install torch ({setup})"}
    if args.upstream_tests:
        modules["torch.testing._internal.common_utils"] = (
            "upstream's test files import torch.testing._internal, which needs numpy and expecttest: "
            f"pip install numpy expecttest ({setup})")
    if args.coverage:
        modules["coverage"] = f"pip install coverage ({setup})"
    return modules


def preflight(args) -> list[str]:
    """Imports every adapter and every suite dependency in the environment the
    suites will run in; returns the problems, each with its fix."""
    problems: list[str] = []
    try:
        env = staging.environment_for(staging.stage_package(args.build, args.results / "_package"))
    except FileNotFoundError as exc:
        return [f"no usable build in {args.build}: {exc}\n    fix: ./harness/run builds it "
                f"(or: meson setup {args.build} && meson compile -C {args.build})"]
    args.suite_env = env
    if not (args.mutants or args.upstream_tests):
        for impl in args.implementations:
            if impl.cpp and not (args.build / impl.cpp).is_file():
                problems.append(f"the C++ suite of {impl.spec} is not built: {args.build / impl.cpp}\n"
                                f"    fix: meson compile -C {args.build}")
    tools = {"lcov": "apt-get install lcov (ci/setup does)", "genhtml": "apt-get install lcov (ci/setup does)"}
    for tool, fix in (tools.items() if args.coverage else ()):
        if shutil.which(tool) is None:
            problems.append(f"{tool} is not on PATH\n    fix: {fix}")
    # The suite's sys.path (pytest puts conformance/python first), the root for `-m harness.preflight`.
    cmd = [sys.executable, "-m", "harness.preflight"]
    for impl in args.implementations:
        cmd += ["--adapter", impl.python]
    for module, fix in suite_modules(args).items():
        cmd += ["--module", f"{module}={fix}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=with_root_on_path(env, CONFORMANCE_PYTHON),
                          capture_output=True, text=True)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return problems + [f"the preflight check itself failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"]
    for spec, found in report["adapters"].items():
        if not found["ok"]:
            problems.append(explain(f"cannot load implementation {spec!r}", found))
    for module, found in report["modules"].items():
        if not found["ok"]:
            problems.append(explain(f"a suite needs {module!r}, which does not import", found))
    if not problems:
        names = {spec: found["name"] for spec, found in report["adapters"].items()}
        assign_labels(args.implementations, names)
        for impl in args.implementations:
            impl.description = report["adapters"][impl.python]["description"]
    return problems


def explain(what: str, found: dict) -> str:
    lines = [what, f"    {found['error']}"]
    if found.get("where"):
        lines.append(f"    raised at {found['where']}")
    if found.get("tried"):
        lines.append(f"    tried: {found['tried']}")
    if found.get("sys_path"):
        lines.append("    searched: " + os.pathsep.join(found["sys_path"][:8])
                     + (" ..." if len(found["sys_path"]) > 8 else ""))
    lines.append(f"    fix: {found['fix']}")
    return "\n".join(lines)


def parse_devices(text: str) -> list[str]:
    """--device's comma-separated list, each a device of conformance/devices.toml."""
    known = catalogue_module.load_devices()
    devices = [d.strip() for d in text.split(",") if d.strip()]
    for device in devices:
        if device not in known:
            raise UsageError(f"--device {device!r}: not a device of conformance/devices.toml "
                             f"({', '.join(known)})")
    if not devices:
        raise UsageError("--device names no device")
    return list(dict.fromkeys(devices))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness/run", description=DESCRIPTION, epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", default="reference", metavar="LIST",
                   help="comma-separated implementations to test: reference, upstream, or "
                        "module:factory (a Python adapter; its package must be importable, e.g. on "
                        "PYTHONPATH). Default: reference")
    p.add_argument("--device", default="cpu", metavar="LIST",
                   help="comma-separated devices to run the suites at (conformance/devices.toml): "
                        "cpu runs every test; cuda runs the device tests of both suites with CUDA "
                        "tensors at CUDA, AutogradCUDA and AutocastCUDA (and the Triton tests), each "
                        "reported 'unsupported: no CUDA device' without one. A matrix column per "
                        "device. Default: cpu")
    p.add_argument("--build", type=pathlib.Path, default=ROOT / "build", metavar="DIR",
                   help="the build folder whose C++ suite and Python extension are tested "
                        "(default: build/ of the repository; ./harness/run builds it first)")
    p.add_argument("--results", type=pathlib.Path, default=ROOT / "results", metavar="DIR",
                   help="where reports, logs and JUnit XML go (default: results/ of the repository)")
    p.add_argument("--spec", type=pathlib.Path, default=ROOT.parent / "shared" / "spec" / "test_registry.py",
                   metavar="PATH", help="upstream's test_registry.py, to check conformance/seeds.txt "
                   "lists exactly its tests; skipped when the file is absent (default: %(default)s)")
    p.add_argument("--expectations", action="append", default=[], metavar="PATH",
                   help="known failures of the --impl implementations (TOML, as "
                        "conformance/expectations/*.toml; see conformance/ADAPTERS.md); replaces "
                        "their own expectations/<name>.toml; may be repeated")
    p.add_argument("--cpp-impl", action="append", default=[], metavar="NAME=PATH",
                   help="also run a C++ conformance binary (the suite library linked with another "
                        "implementation's adapter) as the C++ column NAME; may be repeated")
    p.add_argument("--coverage", action="store_true",
                   help="coverage of the --impl implementations under the conformance suites: "
                        "coverage.py with branches for Python ones, gcov/lcov (instrumented build in "
                        "build-coverage/) for the reference's C++; one HTML report, Cobertura XML and a "
                        "per-behaviour table in results/coverage/")
    p.add_argument("--mutants", nargs="?", const="faults", choices=["faults", "auto"], default=None,
                   help="faults (the default): each seeded fault of fixtures/faults/faults.toml, switched in "
                        "a copy of the tree (build-mutants/; see --rebuild), against the conformance suites: every "
                        "fault must be killed; table in results/mutants/mutants.md. auto: generate mutants "
                        "of the implementation's source mechanically (see --mutate, --sample, --seed), "
                        "build and run each in the same copy; kill rates with and without the reviewed "
                        "equivalents of fixtures/faults/equivalent_mutants.toml, every survivor with its "
                        "suite output, in results/mutants/auto-<layer>.md and .json; exit status 1 below "
                        "a 90 %% kill rate")
    p.add_argument("--only", default="", metavar="NAMES",
                   help="with --mutants: only these comma-separated fault names; with --mutants auto: "
                        "only these mutant keys, file:line places or files (every mutant of the file), "
                        "comma-separated, or @FILE with one per line (whether the sample drew them or not)")
    p.add_argument("--mutate", default="cpp", choices=["cpp", "binding", "python"],
                   help="with --mutants auto: the reference's C++ core (reference/src/*.cpp), its binding "
                        "(reference/python/src/*.cpp) or its Python layer (reference/python/native_registry/"
                        "*.py); with --impl module:factory, python mutates the adapter's registry module (its "
                        "`module`). Default: cpp")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="with --mutants auto: a reproducible random sample of N mutants (default: all)")
    p.add_argument("--shuffle", action="store_true",
                   help="with --mutants auto: take the chosen mutants in an order shuffled by --seed (not file "
                        "order), so that a run stopped early (or resumed in parts) has judged a uniform random "
                        "sample of them; which mutants are chosen, and their ids, are unchanged")
    p.add_argument("--seed", type=int, default=1, metavar="S",
                   help="with --mutants auto: the sample's seed (default: 1)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --mutants (seeded faults) or --mutants auto: N at a time: N workers on the one "
                        "schemata build (the seeded faults, and --switch of a C++ layer), else N workspaces "
                        "(copies of the tree, each with its own build: build-mutants and build-mutants/job-K), "
                        "each C++ workspace costing a full build first. Default: 1")
    p.add_argument("--own-tests", action="store_true",
                   help="with --mutants auto: run each mutant the conformance suites leave alive against the "
                        "reference's own tests too (reference/tests, reference/python/tests), and record "
                        "which kill it: the kill rate of the conformance suites alone and with them")
    p.add_argument("--run-equivalents", action="store_true",
                   help="with --mutants auto: run the reviewed equivalent mutants too "
                        "(fixtures/faults/equivalent_mutants.toml), to check a review; by default each is "
                        "recorded as a reviewed equivalent (status Ignored) without running it")
    p.add_argument("--resume", action="store_true",
                   help="with --mutants auto: keep the verdicts an interrupted run of the same sample recorded "
                        "(results/mutants/auto-<layer>.jsonl) and run only the mutants it did not reach")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="with --mutants auto: run only the K-th of N shards of the chosen mutants (a mutant's "
                        "shard: a hash of its key mod N, so N machines or CI jobs split a run deterministically); "
                        "merge their reports with python -m harness.mutation.mutation_report merge")
    p.add_argument("--tests-by-coverage", action="store_true",
                   help="with --mutants auto --mutate python: run the pristine Python suite once under "
                        "coverage.py, per test (child interpreters included); a mutant then meets only the tests "
                        "executing its line, cheapest first, stopping at the first failure, and one no test "
                        "executes is NoCoverage, not run (the map is kept in results/mutants/coverage-python.json "
                        "while the tree's source is unchanged). --mutate cpp|binding --switch: the schemata build "
                        "marks each mutant a test reaches (each C++ test alone, the Python suite per test, child "
                        "processes included), kept in results/mutants/reached-<layer>.json")
    p.add_argument("--switch", action="store_true",
                   help="with --mutants auto: switch the mutants instead of rewriting a file for each (mutant "
                        "schemata). --mutate python: one instrumented copy of each module holds every function "
                        "with mutants once per mutant, chosen at import by NR_MUTANT; a mutant outside a function "
                        "is rewritten as without it. --mutate cpp|binding: ONE build (build-mutants/schemata-build, "
                        "-Dmutant_schemata) holds the chosen mutants, each chosen at run time by NR_MUTANT_ID; a "
                        "mutant whose switched form does not compile, or that no form fits, is rebuilt one by one "
                        "as without it")
    p.add_argument("--rebuild", action="store_true",
                   help="with --mutants (the seeded faults): apply each fault to the copy of the tree and rebuild "
                        "it, in --jobs workspaces side by side, instead of switching them (the default: every "
                        "fault compiled into ONE schemata build, or an instrumented copy of its Python module, "
                        "chosen at run time; each meets its behaviour's tests first, the Python ones on a warm "
                        "suite; a fault no switch fits is rebuilt one by one at the end)")
    p.add_argument("--fresh-suites", action="store_true",
                   help="with --mutants auto --mutate cpp|binding --switch --tests-by-coverage: run each mutant's "
                        "Python tests in a fresh pytest, not on the worker's warm suite (one pytest that collected "
                        "the suite once, with the build loaded and no mutant chosen, and forks a child per mutant "
                        "that chooses it through $NR_MUTANT_CHOICE: harness/mutation/suite_server.py)")
    p.add_argument("--check-switch", action="store_true",
                   help="with --mutants auto --mutate cpp|binding --switch: run each switched mutant rebuilt too "
                        "(its file rewritten in the same build) and compare the two verdicts, in "
                        "results/mutants/auto-<layer>.switch-check.jsonl; the report keeps the switched verdict")
    p.add_argument("--incremental", type=pathlib.Path, default=None, metavar="REPORT",
                   help="with --mutants auto: take over the verdicts of an earlier run's report "
                        "(results/mutants/auto-<layer>.mutation.json) for the mutants whose line and whose "
                        "tests' sources are unchanged, and run only the others")
    p.add_argument("--own-tests-after", type=pathlib.Path, default=None, metavar="RECORD",
                   help="with --mutants auto --own-tests: take the conformance verdicts of an earlier run's record "
                        "(a report, or its .jsonl or .jsonl.gz journal; another tree's too) for the mutants whose line "
                        "is unchanged: those it killed keep their verdict, those it left alive meet only the own "
                        "tests now (each verdict records the tree it came from); the conformance suites alone "
                        "are not run again")
    p.add_argument("--baseline-from", type=pathlib.Path, metavar="DIR",
                   help="with --mutants auto --mutate python: the Python suite's results of a conformance run "
                        "of the reference on the same build (its --results DIR) stand for the baseline run, "
                        "which is then not repeated (ci/test's mutant sample)")
    p.add_argument("--upstream-tests", type=pathlib.Path, metavar="PATH",
                   help="run an upstream PyTorch test file (such as test/test_registry.py) against the "
                        "installed torch._native and against the reference; table in "
                        "results/upstream-tests/. With --mutants auto --mutate python --own-tests: the "
                        "file, run against the reference through upstream_compat, judges every mutant "
                        "the own tests leave alive, as one more of the own tests")
    p.add_argument("--check-args", action="store_true", help=argparse.SUPPRESS)  # ./harness/run, before building
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.implementations = parse_impls(args.impl)
        args.devices = parse_devices(args.device)
        resolve_paths(args)
        args.expectations = [pathlib.Path(p).expanduser().resolve() for p in args.expectations]
        args.cpp_implementations = [] if args.check_args else [
            Implementation(f"{name}={binary}", "", str(binary), name, f"C++ suite binary {binary}")
            for name, binary in cpp_impls.parse(args.cpp_impl)]
    except (UsageError, ValueError) as exc:
        print(f"harness/run: error: {exc}", file=sys.stderr)
        return 2
    if args.check_args:
        return 0
    args.results.mkdir(parents=True, exist_ok=True)
    print("== checking the implementations and the suites' dependencies", flush=True)
    problems = preflight(args)
    if problems:
        for problem in problems:
            print(f"harness/run: error: {problem}", file=sys.stderr)
        print(f"harness/run: {len(problems)} problem(s) before any suite ran; nothing was run",
              file=sys.stderr)
        return 2
    for impl in args.implementations:
        print(f"  {impl.label}: {impl.description}")
    if args.coverage:
        from .suite_coverage import coverage_report

        return coverage_report.run(args)
    if args.mutants == "auto":
        from .mutation import auto_mutants

        return auto_mutants.run(args)
    if args.mutants:
        from .mutation import seeded_faults

        return seeded_faults.run(args)
    if args.upstream_tests:
        from . import upstream_tests

        return upstream_tests.run(args)
    return conformance(args)


if __name__ == "__main__":
    sys.exit(main())
