"""What every benchmark shares: the line naming the machine its figures come from, and the wall
time of a command run the way a user runs it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
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


class CpuSampler:
    """CPU-seconds of this process and every process it starts (a search's pool and balancing
    processes come from a fork server, so `getrusage` of the children misses them): /proc is read
    every *interval* seconds while running, each descendant's last reading kept. A descendant's CPU
    after its last reading (under *interval*) is missed, and one running before the sampler counts from
    its start. Linux only; elsewhere `seconds` is None."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.seen: dict[tuple[int, int], float] = {}  # (pid, start tick) -> CPU-seconds last read
        self.started = time.process_time()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.before: dict[tuple[int, int], float] = {}  # descendants already running: only their CPU from now
        if Path("/proc/self/stat").exists():
            self._sample()
            self.before = dict(self.seen)
        self.thread.start()

    def _stats(self) -> dict[int, tuple[int, int, float]]:
        """pid -> (parent pid, start tick, CPU-seconds) of every process /proc lists."""
        found: dict[int, tuple[int, int, float]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "stat").read_text()
            except OSError:  # it ended meanwhile
                continue
            fields = text[text.rindex(")") + 2 :].split()  # after "pid (name) "
            found[int(entry.name)] = (int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / self.tick)
        return found

    def _sample(self) -> None:
        stats = self._stats()
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _) in stats.items():
            children.setdefault(parent, []).append(pid)
        todo = list(children.get(os.getpid(), []))
        while todo:
            pid = todo.pop()
            _, start, cpu = stats[pid]
            self.seen[(pid, start)] = cpu
            todo += children.get(pid, [])

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self._sample()

    def seconds(self) -> float | None:
        """CPU-seconds so far: this process's since the sampler started, its descendants' whole."""
        if not Path("/proc/self/stat").exists():
            return None
        self._sample()
        descendants = sum(cpu - self.before.get(key, 0.0) for key, cpu in self.seen.items())
        return time.process_time() - self.started + descendants

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join()
