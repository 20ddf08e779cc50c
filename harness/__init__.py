"""The conformance harness: runs the suites of conformance/ against
implementations and reports the behaviour x implementation matrix.

    python -m harness --help        (./harness/run builds first, then runs this)

The runner is this package's top level: the command line (main), the
implementations it is given (implementations, cpp_impls, preflight), the
suites' runs (conformance_run, suite_parts, upstream_tests), the matrix and its
reports (matrix, report_html, junit_summary, docgen). Tools beside it, each a
subpackage with its own README: mutation/ (seeded faults and generated
mutants), suite_coverage/ (what the suites cover of an implementation), gpu/
(the run on the GPU machine). The benchmarks and the reliability run measure
the reference, not the suite: they live in reference/bench and
reference/tests/reliability.

Modules import each other relatively; child processes that load a module of
this package (a pytest plugin, say) get the repository root on PYTHONPATH from
`with_root_on_path`.
"""

from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFORMANCE_PYTHON = ROOT / "conformance" / "python"


def with_root_on_path(env: dict[str, str], *first: pathlib.Path) -> dict[str, str]:
    """A copy of env whose PYTHONPATH starts with `first` and the repository
    root (so a child can import `harness.…` or `conformance.python.…`)."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*map(str, first), str(ROOT), env.get("PYTHONPATH")]))
    return env
