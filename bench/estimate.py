"""Benchmark: estimating DeepSeek-V3 (61 layers, P=16, V=2) in the core, cold and warm, and how the cost scales.

    python bench/estimate.py [--repeat 30]

Prints the machine, then times (ms): loading the run config; the first estimate in the process
(cold: the walk, a fresh MemoryModel, every distinct kind under every option, the schedule's
micro-batches in flight, the per-stage summary); the same again warm (median and best of
--repeat: a fresh MemoryModel and walk each time; the in-flight counts, a pure function of the
schedule's sizes, come from the process's memo); its parts; the rows with the model's memo full.
Then the same run with 610 layers (ten times the layers, the same four distinct kinds): the
ratio of the times, and how many times the activation formulas ran in each (the cost follows
distinct kinds, the walk and the stage summary follow layers).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from _measure import machine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import RunConfig, load_run_config  # noqa: E402
from ppb_core.errors import InputError  # noqa: E402
from ppb_core.estimate.run import estimate  # noqa: E402
from ppb_core.memory import ActivationFormulas, MemoryModel, run_in_flight  # noqa: E402
from ppb_core.model.walk import walk  # noqa: E402
from ppb_core.schedules import micro_batches_in_flight  # noqa: E402


class CountingFormulas(ActivationFormulas):
    """The formulas, counting how many times a kind is priced."""

    def __init__(self) -> None:
        self.calls = 0

    def terms(self, kind, setup):
        self.calls += 1
        return super().terms(kind, setup)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


def _with(run: RunConfig, micro_batches: int | None = None, layers: int | None = None) -> RunConfig:
    update: dict = {}
    if micro_batches is not None:
        update["training"] = run.training.model_copy(update={"micro_batches": micro_batches})
    if layers is not None:
        name = run.model_names[0]
        update["specs"] = {name: run.spec(name).model_copy(update={"num_layers": layers})}
        # the config's layout places its 61 layers (session 28): the scaled run is split evenly, as before
        update["parallel"] = run.parallel.model_copy(update={"layout": None})
    return run.model_copy(update=update)


def _timed(run: RunConfig, repeat: int, stages: bool = True) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        estimate(run, MemoryModel(run), stages=stages)
        times.append(time.perf_counter() - start)
    return times


def _median(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "deepseek-v3.yaml"))
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    print(f"machine: {machine()}")

    start = time.perf_counter()
    run = load_run_config(args.config)
    load = time.perf_counter() - start
    try:
        run_in_flight(run)
    except InputError as err:
        pp = run.parallel.pp
        fixed = -(-run.training.micro_batches // pp) * pp
        print(f"note: {err.line()}; timing with micro_batches {fixed} instead")
        run = _with(run, micro_batches=fixed)
    layer_walk = walk(run)
    kinds = len(layer_walk.distinct())
    par = run.parallel
    print(
        f"run:     {run.name}: {run.total_body_layers} layers, {kinds} distinct (model, node, kind), "
        f"P={par.pp} V={par.vpp} m={run.training.micro_batches}"
    )
    print(f"load + validate the run config        {_ms(load)}")

    start = time.perf_counter()
    result = estimate(run, MemoryModel(run))
    cold = time.perf_counter() - start
    print(f"estimate, cold (first in process)     {_ms(cold)}")

    warm = _timed(run, args.repeat)
    print(
        f"estimate, warm (median of {args.repeat:>3})       {_ms(statistics.median(warm))}   "
        f"best {_ms(min(warm)).strip()}"
    )
    kinds_only = _timed(run, args.repeat, stages=False)
    print(f"  the rows alone (no stage summary)   {_ms(statistics.median(kinds_only))}")
    sizes = (par.schedule, par.pp, par.vpp, run.training.micro_batches)
    print(
        f"  micro-batches in flight, uncached   {_ms(_median(lambda: micro_batches_in_flight(*sizes), args.repeat))}"
        "   (ppb_core.schedules; the estimate memoizes it per size)"
    )
    print(f"  the walk (ppb_core.model.walk)           {_ms(_median(lambda: walk(run), args.repeat))}")
    given = _median(lambda: estimate(run, MemoryModel(run), layer_walk=layer_walk, stages=False), args.repeat)
    print(f"  the rows, walk given, fresh model   {_ms(given)}")
    memory = MemoryModel(run)
    estimate(run, memory, layer_walk=layer_walk, stages=False)
    memo = _median(lambda: estimate(run, memory, layer_walk=layer_walk, stages=False), args.repeat)
    print(f"  the rows again, memo full           {_ms(memo)}")
    peak = max(result.stages, key=lambda p: p.peak_bytes)
    print(
        f"  result: {len(result.layers)} rows, {len(result.stages)} stages; highest peak stage {peak.stage}: "
        f"{peak.peak_bytes / 2**30:.2f} GiB of {peak.device_bytes / 2**30:.2f} GiB"
    )

    big = _with(run, layers=run.total_body_layers * 10)
    big_warm = _timed(big, max(5, args.repeat // 3))
    big_rows = _timed(big, max(5, args.repeat // 3), stages=False)
    calls = {}
    for label, variant in (("x1", run), ("x10", big)):
        counting = CountingFormulas()
        estimate(variant, MemoryModel(variant, activations={variant.model_names[0]: counting}))
        calls[label] = counting.calls
    ratio = statistics.median(big_warm) / statistics.median(warm)
    print(
        f"{big.total_body_layers} layers (same kinds), warm       {_ms(statistics.median(big_warm))}   "
        f"ratio {ratio:.2f}x for 10x the layers"
    )
    rows_ratio = statistics.median(big_rows) / statistics.median(kinds_only)
    print(f"  the rows alone                      {_ms(statistics.median(big_rows))}   ratio {rows_ratio:.2f}x")
    big_walk = walk(big)
    big_given = _median(
        lambda: estimate(big, MemoryModel(big), layer_walk=big_walk, stages=False), max(5, args.repeat // 3)
    )
    print(
        f"  the rows, walk given, fresh model   {_ms(big_given)}   ratio {big_given / given:.2f}x "
        "(grouping 10x the layers by kind; the kinds are priced once)"
    )
    print(
        f"activation formulas run: {calls['x1']} times at {run.total_body_layers} layers, "
        f"{calls['x10']} at {big.total_body_layers}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
