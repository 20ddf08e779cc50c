"""Checks the catalogue and the traceability of both suites.

    python3 conformance/python/check.py [--spec PATH/TO/test_registry.py]

Fails when the catalogue is malformed (levels included), a seed test maps to
no behaviour, a behaviour expressible on a side has no test there, a test
names an unknown behaviour, or a test uses an adapter feature its behaviours
do not declare in `requires`, or a behaviour devices.toml lists for a device
has no device test on a side where it is expressible. With --spec, also checks that seeds.txt lists exactly that file's
tests.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import catalogue as c


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=pathlib.Path)
    args = parser.parse_args()
    found = c.check_all(args.spec if args.spec and args.spec.exists() else None)
    behaviours = c.load()
    py = c.python_references(c.CONFORMANCE / "python")
    cpp = c.cpp_references(c.CONFORMANCE / "cpp")
    print(f"catalogue: {len(behaviours)} behaviours "
          f"({sum(b.profile == 'registry' for b in behaviours.values())} registry, "
          f"{sum(b.profile == 'platform' for b in behaviours.values())} platform, "
          f"{sum(b.implied for b in behaviours.values())} implied), "
          f"{len(c.seed_tests())} seed tests mapped; "
          f"named by python tests: {len(py)}, by C++ tests: {len(cpp)}")
    for problem in found:
        print(f"  PROBLEM: {problem}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
