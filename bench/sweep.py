"""A sweep of parallel strategies for one model, estimated and described: `python bench/sweep.py`.

The aim: 1,000 run configs (parallel strategies for one model) in under 60 s on 2 cores.
Starting from a shipped config (default `configs/llama3-8b.yaml`), every combination of tp, pp,
vpp, cp, ZeRO stage, sequence parallelism, micro-batches and recompute switches is tried. The
ones the validator accepts (the others are refused in one line, as a user would see) each get
`estimate` (memory per kind and option, stage peaks) and `describe_run` (the SAPP payload with
times, combined, withdrawn and scaled). The first `--count` valid ones are timed on `--workers`
processes (a fixed shuffle of the grid, so every setting is represented), and the wall
time is printed with the machine and the share that fit the device.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import random
import sys
import time
from pathlib import Path

import yaml
from _measure import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import parse_run_config  # noqa: E402
from ppb_core.errors import InputError  # noqa: E402
from ppb_core.estimate.run import estimate  # noqa: E402
from ppb_core.payload.run import describe_run  # noqa: E402

RECOMPUTE = ({}, {"softmax": 0, "ffAct": 0}, {"softmax": 0, "ffAct": 0, "normOp": 0, "gather": 0})


def strategies(base: dict, world: int) -> list[dict]:
    """Every combination of the swept settings, as raw run configs (valid or not)."""
    found = []
    grid = itertools.product(
        (1, 2, 4, 8), (1, 2, 4, 8), (1, 2), (1, 2), (0, 1, 3), (True, False), (8, 16, 32, 64), RECOMPUTE
    )
    for tp, pp, vpp, cp, zero, sp, micro_batches, recompute in grid:
        raw = yaml.safe_load(yaml.safe_dump(base))
        raw["parallel"] = {
            "dp": max(1, world // (tp * pp * cp)),
            "tp": tp,
            "pp": pp,
            "vpp": vpp,
            "cp": cp,
            "zero": zero,
            "sequence_parallel": sp and tp > 1,
            "schedule": "interleaved" if vpp > 1 else "1f1b",
        }
        raw["training"] = {**raw["training"], "micro_batches": micro_batches, "recompute": recompute}
        found.append(raw)
    return found


def _evaluate(job: tuple[dict, str, str]) -> bool | None:
    """Whether the strategy's highest stage peak fits; None when the validator refuses it."""
    raw, source, base_dir = job
    try:
        run = parse_run_config(raw, source, base_dir)
    except InputError:
        return None
    result = estimate(run)
    describe_run(run)
    return all(peak.fits for peak in result.stages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "llama3-8b.yaml"))
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--world", type=int, default=256, help="devices; dp = world / (tp·pp·cp)")
    args = parser.parse_args()
    path = Path(args.config)
    base = yaml.safe_load(path.read_text())
    print(f"machine: {machine()}")
    candidates = strategies(base, args.world)
    random.Random(0).shuffle(candidates)  # the kept ones spread over the whole grid
    started = time.perf_counter()
    valid = []
    for raw in candidates:
        try:
            parse_run_config(raw, str(path), path.parent)
        except InputError:
            continue
        valid.append(raw)
        if len(valid) == args.count:
            break
    screened = time.perf_counter() - started
    print(f"{path.stem}: {len(candidates)} combinations tried, {len(valid)} valid kept (screening {screened:.2f} s)")
    jobs = [(raw, str(path), str(path.parent)) for raw in valid]
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        fits = pool.map(_evaluate, jobs, chunksize=8)
    elapsed = time.perf_counter() - started
    print(
        f"estimate + describe of {len(jobs)} run configs on {args.workers} processes: {elapsed:.2f} s "
        f"({elapsed / max(1, len(jobs)) * 1000:.1f} ms each); {sum(bool(f) for f in fits)} fit the device"
    )


if __name__ == "__main__":
    main()
