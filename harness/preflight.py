"""Checks, before any suite runs, that each implementation's adapter loads
and that each suite's Python dependencies import, in the environment the
suites will run in (main.py runs this module as a subprocess with that
environment, conformance/python first on its path as pytest puts it). Prints one JSON object: {"adapters": {spec: {...}},
"modules": {module: {...}}}; each entry has "ok" and, when not ok, the
real exception, what was tried, and the fix.

    python -m harness.preflight [--adapter module:factory]... [--module name=fix]...
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback

from conformance.python import adapter as adapter_module

from . import ROOT


def exception_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def raised_where(exc: BaseException) -> str:
    """The innermost frame of the traceback: file:line in function."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    if not frames:
        return ""
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def path_fix(spec: str) -> str:
    top = spec.partition(":")[0].split(".")[0]
    return (f"put your package on PYTHONPATH: PYTHONPATH=/dir/containing/{top} "
            f"./harness/run --impl {spec} (or name a shipped implementation: reference, upstream)")


def check_adapter(spec: str) -> dict:
    module_name, _, factory = spec.partition(":")
    tried = f"import {module_name}; {module_name}.{factory}()"
    failure = {"ok": False, "spec": spec, "tried": tried}
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            fix = path_fix(spec)
        else:  # the adapter module itself was found; something it imports was not
            fix = f"the adapter imports {missing!r}, which is not installed: install it into {sys.executable}"
        # Where it was looked for: the suite's sys.path (the root, there for this module, is not on it).
        return failure | {"error": exception_text(exc), "where": raised_where(exc), "fix": fix,
                          "sys_path": [p for p in sys.path if p and p not in (str(ROOT), "")]}
    except Exception as exc:  # noqa: BLE001 - any import error is reported as it is
        return failure | {"error": exception_text(exc), "where": raised_where(exc),
                          "fix": f"fix the error raised while importing {module_name}"}
    made = getattr(module, factory, None)
    if not callable(made):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        return failure | {"error": f"AttributeError: module {module_name!r} ({module.__file__}) "
                                   f"has no callable {factory!r}",
                          "fix": f"name one of its callables after the colon: {', '.join(public) or '(none)'}"}
    try:
        adapter = made()
    except Exception as exc:  # noqa: BLE001
        return failure | {"error": exception_text(exc), "where": raised_where(exc),
                          "fix": f"{spec} raised while making the adapter; see the error"}
    name = getattr(adapter, "name", None)
    if not isinstance(name, str) or not name.strip():
        return failure | {"error": f"the adapter made by {spec} has no `name` (got {name!r})",
                          "fix": "give the adapter a short, unique `name` string"}
    unknown = sorted(set(getattr(adapter, "features", ())) - adapter_module.FEATURES)
    if unknown:
        return failure | {"error": f"the adapter declares unknown features {unknown}",
                          "fix": f"features are among {sorted(adapter_module.FEATURES)}"}
    return {"ok": True, "spec": spec, "name": name, "file": getattr(module, "__file__", ""),
            "description": str(getattr(adapter, "description", "")),
            "features": sorted(getattr(adapter, "features", ()))}


def check_module(name: str, fix: str) -> dict:
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": exception_text(exc), "where": raised_where(exc),
                "tried": f"import {name}", "fix": fix}
    return {"ok": True}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", action="append", default=[])
    parser.add_argument("--module", action="append", default=[], metavar="NAME=FIX")
    args = parser.parse_args()
    report = {"adapters": {spec: check_adapter(spec) for spec in args.adapter},
              "modules": {}}
    for item in args.module:
        name, _, fix = item.partition("=")
        report["modules"][name] = check_module(name, fix)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
