"""PPB payload times per shipped run config: `python bench/ppb.py [--repeat 30]`.

For each config: loading it, `describe_run` (descriptions with the time model, combined,
withdrawn, scaled: the SAPP payload) cold (the first call in the process: imports done, but the
schedule's in-flight counts and other per-size caches still empty) and warm (median of repeats;
each call builds its memory and time models afresh, so every kind is priced again), and
`profile_run` (switch profiles at the schedule's in-flight counts). Prints the machine first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from _measure import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import load_run_config  # noqa: E402
from ppb_core.memory import run_in_flight_counts  # noqa: E402
from ppb_core.payload.profiling import profile_run  # noqa: E402
from ppb_core.payload.run import describe_run  # noqa: E402


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(
        f"{'config':<16} {'layers':>6} {'bodies':>6}  {'load ms':>8} {'cold ms':>8} {'warm ms':>8} {'profile ms':>10}"
    )
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        started = time.perf_counter()
        run = load_run_config(path)
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        descriptions = describe_run(run)
        cold = time.perf_counter() - started
        warm = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            describe_run(run)
            warm.append(time.perf_counter() - started)
        counts = run_in_flight_counts(run)
        started = time.perf_counter()
        profile_run(run, most_in_flight=max(counts), in_flight=counts)
        profiled = time.perf_counter() - started
        bodies = sum(1 for d in descriptions if d["type"] == "BODY")
        print(
            f"{path.stem:<16} {run.total_body_layers:>6} {bodies:>6}  {_ms(loaded)} {_ms(cold)} "
            f"{_ms(statistics.median(warm))} {_ms(profiled):>10}"
        )


if __name__ == "__main__":
    main()
