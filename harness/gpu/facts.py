"""What the GPU run ran on, as JSON: date, host, CPU count, GPU, driver,
Python, torch (and the CUDA it was built with), Triton, g++, Meson, ninja,
GoogleTest. A fact that cannot be read is null; nothing here fails."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess


def output(*cmd: str) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    facts: dict = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                   "kernel": platform.release()}
    gpu = output("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader")
    facts["gpu"] = gpu.splitlines() if gpu else None
    try:
        import torch

        facts.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                     cuda_available=torch.cuda.is_available(),
                     cuda_device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                     cuda_capability=".".join(map(str, torch.cuda.get_device_capability(0)))
                     if torch.cuda.is_available() else None)
    except Exception as exc:  # a fact, not a failure
        facts["torch"] = f"not importable: {exc}"
    try:
        import triton

        facts["triton"] = triton.__version__
    except Exception:
        facts["triton"] = None
    gxx = output("g++", "--version")
    facts["gxx"] = gxx.splitlines()[0] if gxx else None
    facts["meson"] = output("meson", "--version")
    facts["ninja"] = output("ninja", "--version")
    facts["gtest"] = output("pkg-config", "--modversion", "gtest")
    with open(args.out, "w") as f:
        json.dump(facts, f, indent=1)
    print(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
