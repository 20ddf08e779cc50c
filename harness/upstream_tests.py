"""./harness/run --upstream-tests PATH: an upstream PyTorch test file (such as
test/test_registry.py) run twice, side by side: against the installed
PyTorch's torch._native, and against the reference through
native_registry.upstream_compat, which presents upstream's module surface.
The project does not contain such a file; CI passes the seed file."""

from __future__ import annotations

import pathlib
import sys
import xml.etree.ElementTree as ET

from . import with_root_on_path
from .progress import pytest_progress, stream


def outcomes(xml: pathlib.Path) -> dict[str, str]:
    result = {}
    if not xml.exists():
        return result
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            result[name] = "fail"
        elif case.find("skipped") is not None:
            result[name] = "skip"
        else:
            result[name] = "pass"
    return result


def run(args) -> int:
    path = args.upstream_tests  # main.py resolved it against the caller's directory and checked it
    out = args.results / "upstream-tests"
    out.mkdir(parents=True, exist_ok=True)
    # main.py's preflight staged the package and checked the imports; the root: the plugin.
    env = with_root_on_path(args.suite_env)
    runs = {
        "installed torch._native": [],
        "reference (upstream_compat)": ["-p", "harness.upstream_compat_plugin"],
    }
    results = {}
    for label, extra in runs.items():
        xml = out / ("installed.xml" if "installed" in label else "reference.xml")
        print(f"== {path.name} against {label}", flush=True)
        log_path = out / f"{xml.stem}.log"
        stream([sys.executable, "-m", "pytest", str(path), "-v", "-p", "no:cacheprovider",
                "--rootdir", str(path.parent), f"--junitxml={xml}", *extra],
               label, log_path, env=env, progress=pytest_progress, cwd=out)
        results[label] = outcomes(xml)
        if not results[label]:
            # Nothing collected or no report written: show why in the CI log.
            print(f"  no results from {label}; the end of {log_path}:")
            print("    " + "\n    ".join(log_path.read_text(errors="replace").splitlines()[-20:]))

    labels = list(results)
    names = sorted(set().union(*results.values()))
    lines = [f"# {path.name}: installed PyTorch vs reference", "",
             "| test | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    lines += [f"| {n} | " + " | ".join(results[l].get(n, "-") for l in labels) + " |" for n in names]
    totals = {l: sum(v == "pass" for v in results[l].values()) for l in labels}
    lines += ["", "| | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels),
              "| passed | " + " | ".join(str(totals[l]) for l in labels) + " |",
              "| of | " + " | ".join(str(len(results[l])) for l in labels) + " |"]
    (out / "upstream-tests.md").write_text("\n".join(lines) + "\n")
    for label in labels:
        print(f"  {label}: {totals[label]} of {len(results[label])} passed")
    print(f"table: {out / 'upstream-tests.md'}")
    # The reference must pass every test of the registry profile; platform
    # tests check the host PyTorch, whatever the registry.
    from conformance.python import catalogue

    platform_only = {seed for b in catalogue.load().values() if b.profile == "platform" for seed in b.seeds}
    unexpected = [n for n, v in results[labels[1]].items() if v == "fail" and n not in platform_only]
    for name in unexpected:
        print(f"  UNEXPECTED: the reference fails {name}")
    return 0 if all(results.values()) and not unexpected else 1
