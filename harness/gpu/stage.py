"""Stages the package built in --build (sources, _C, the core library) into
--into, which then goes first on PYTHONPATH (harness/staging.py): how the GPU
run imports the reference without pip."""

from __future__ import annotations

import argparse
import pathlib

from .. import staging


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=pathlib.Path, required=True)
    parser.add_argument("--into", type=pathlib.Path, required=True)
    args = parser.parse_args()
    staging.stage_package(args.build.resolve(), args.into.resolve())
    print(f"staged native_registry from {args.build} into {args.into}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
