"""How long the `ppb` command takes to start: `python bench/startup.py [--repeat 15]`.

Times, each in a fresh process, the median and the best of `--repeat` runs:
- `python -c pass` (the interpreter alone, with this environment's site-packages: the floor);
- `ppb --help` and `ppb estimate --help` (what a user types first; the aim is under 0.3 s);
- `python -c "import ppb_core.cli.main"`;
and for `ppb estimate --help`, the modules it imports that take longest (`python -X importtime`),
so a regression names its cause. Prints the machine first: on a loaded machine every figure
grows, the interpreter's floor with them, so read the figures against the floor.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from _measure import machine, python_env, wall_seconds

ROOT = Path(__file__).resolve().parents[1]
AIM_S = 0.3


def slowest_imports(command: list[str], env: dict[str, str], count: int = 8) -> list[tuple[str, float]]:
    """The modules with the largest cumulative import time (`-X importtime`), top level first."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command], cwd=ROOT, env=env, capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line.split("|"))
        if cumulative.isdigit() and not name.startswith(" "):
            rows.append((name.strip(), int(cumulative) / 1e6))
    return sorted(rows, key=lambda row: -row[1])[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="runs of each command (median and best reported)")
    args = parser.parse_args()
    env = python_env(ROOT)
    ppb = shutil.which("ppb")
    if ppb is None:
        sys.exit("ppb is not installed: pip install -e .")
    print(f"machine: {machine()}")
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ppb --help": [ppb, "--help"],
        "ppb estimate --help": [ppb, "estimate", "--help"],
        "import ppb_core.cli.main": [sys.executable, "-c", "import ppb_core.cli.main"],
    }
    results = {}
    for label, command in commands.items():
        wall_seconds(command, ROOT, env)  # warm the file cache
        runs = [wall_seconds(command, ROOT, env) for _ in range(args.repeat)]
        results[label] = (statistics.median(runs), min(runs))
    floor = results["python -c pass"][0]
    print(f"{'command':<28} {'median s':>9} {'best s':>8} {'over the floor':>15}")
    for label, (median, best) in results.items():
        print(f"{label:<28} {median:>9.3f} {best:>8.3f} {median - floor:>+15.3f}")
    for label in ("ppb --help", "ppb estimate --help"):
        median = results[label][0]
        verdict = "under" if median < AIM_S else "OVER"
        print(f"{label}: {verdict} the {AIM_S} s aim ({median:.3f} s median)")
    print("slowest imports of `ppb estimate --help` (cumulative s):")
    for name, seconds in slowest_imports(["-m", "ppb_core.cli.main", "estimate", "--help"], env):
        print(f"  {seconds:7.3f}  {name}")


if __name__ == "__main__":
    main()
