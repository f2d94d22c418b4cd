"""Benchmark of the time model: pricing every layer of a run under the five options, cold and warm.

    python bench/timing.py [--repeat N]

Prints the machine, then for each shipped config (every `configs/*.yaml`) the median time to price every layer of the
walk (all five options), cold (a new TimeModel and empty op-table cache) and warm (the same
model again), and DeepSeek-V3 at 61 and at 610 layers of the same kinds: pricing cost follows
the distinct kinds, not the layers (the walk itself stays linear). Then the whole iteration
(`run_iteration`) per config with the models warm: most of it is the schedule's simulation,
which follows stages × chunks × micro-batches.
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

from ppb_core.config.run import load_run_config, parse_run_config, resolved_raw  # noqa: E402
from ppb_core.memory import MemoryModel  # noqa: E402
from ppb_core.model.walk import walk  # noqa: E402
from ppb_core.timing.flops import layer_ops  # noqa: E402
from ppb_core.timing.iteration import run_iteration  # noqa: E402
from ppb_core.timing.pricer import TimeModel  # noqa: E402


def price_all(model: TimeModel, layers) -> None:
    for layer in layers:
        model.option_times(layer)


def measure(run, repeat: int) -> tuple[float, float, int, int, int]:
    """(cold ms, warm ms, layers, distinct kinds, states priced), medians over *repeat* runs."""
    layers = list(walk(run))
    cold, warm = [], []
    model = TimeModel(run)
    for _ in range(repeat):
        layer_ops.cache_clear()
        start = time.perf_counter()
        model = TimeModel(run)
        price_all(model, layers)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        price_all(model, layers)
        warm.append(time.perf_counter() - start)
    kinds = len({(layer.model_name, layer.kind) for layer in layers})
    priced = len(model._parts)  # distinct (kind, state, switches) the model evaluated
    return statistics.median(cold) * 1e3, statistics.median(warm) * 1e3, len(layers), kinds, priced


SHIPPED = sorted(path.stem for path in (ROOT / "configs").glob("*.yaml"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"{'config':28s} {'layers':>6s} {'kinds':>5s} {'priced':>6s} {'cold ms':>8s} {'warm ms':>8s}")
    results = {}
    for name in SHIPPED:
        run = load_run_config(ROOT / "configs" / f"{name}.yaml")
        results[name] = measure(run, args.repeat)
    raw = resolved_raw(load_run_config(ROOT / "configs" / "deepseek-v3.yaml"))
    raw["models"][0]["spec"]["num_layers"] = 610
    raw["parallel"].pop("layout", None)  # the config's layout places its 61 layers (session 28): split evenly
    results["deepseek-v3 x10 layers"] = measure(parse_run_config(raw, "deepseek-v3-610"), args.repeat)
    for name, (cold, warm, layers, kinds, priced) in results.items():
        print(f"{name:28s} {layers:6d} {kinds:5d} {priced:6d} {cold:8.2f} {warm:8.3f}")
    small, big = results["deepseek-v3"], results["deepseek-v3 x10 layers"]
    print(
        f"610 vs 61 layers: cold {big[0] / small[0]:.2f}x, warm {big[1] / small[1]:.2f}x "
        f"(layers {big[2] / small[2]:.1f}x; kinds {big[3]} vs {small[3]}; states priced {big[4]} vs {small[4]})."
    )
    print("What grows with the layers is one memo lookup per layer (hashing its kind); the pricing does not.")
    print(f"{'iteration (models warm)':28s} {'ms':>8s} {'schedule ops':>12s}")
    for name in SHIPPED:
        run = load_run_config(ROOT / "configs" / f"{name}.yaml")
        times, memory = TimeModel(run), MemoryModel(run)
        run_iteration(run, times=times, memory=memory)
        samples = []
        for _ in range(max(3, args.repeat // 4)):
            start = time.perf_counter()
            run_iteration(run, times=times, memory=memory)
            samples.append(time.perf_counter() - start)
        ops = 2 * run.parallel.pp * run.parallel.vpp * run.training.micro_batches
        print(f"{name:28s} {statistics.median(samples) * 1e3:8.2f} {ops:12d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
