"""What every benchmark shares: the line naming the machine its figures come from, and the wall
time of a command run the way a user runs it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def machine() -> str:
    """Platform, processor, CPUs, Python and the load average (other work slows every figure)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {load:.2f}"
    )


def wall_seconds(command: list[str], cwd: Path, env: Mapping[str, str]) -> float:
    """Seconds *command* takes from start to exit; a failure ends the benchmark with its stderr's tail."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return elapsed


def python_env(root: Path) -> dict[str, str]:
    """This environment with *root* first on PYTHONPATH: a command then runs this tree's code."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
