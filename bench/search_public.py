"""The search against hand-tuned published strategies: `python bench/search_public.py [ROW ...] [--list]`.

For a row of bench/public_runs.py (a strategy NVIDIA, Meta or PyTorch tuned by hand and published with its
throughput), search the same model, device, GPU count, sequence and global batch, with the row's own
framework, precision and timing flags, and place the published strategy in the ranking: where it ranks,
its balanced time, its time as published (the row's own split and recompute, what bench/public_runs.py
prices), and how far our first is from it, all in ppb's own seconds. The grid is the search's default
(docs/search.md) widened to hold the row's own sizes (its VP, micro-batch size, FSDP, EP). A balance budget
(`--balanced`, default 10: the least bounds balanced, deterministic) keeps the work bounded; the ranking
says how many places are proven. ROW: a substring of the row's name (default: `DEFAULT_ROWS`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from _measure import CpuSampler, machine
from public_runs import PublicRun, config, public_runs, row_seconds
from search import place_among

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppb_core.errors import InputError  # noqa: E402
from ppb_core.search.enumerate import Refusal, Strategy, enumerate_strategies, validate  # noqa: E402
from ppb_core.search.rank import Ranked, _relax, _start, evaluate, search  # noqa: E402
from ppb_core.search.spec import (  # noqa: E402
    CHOSEN_TRAINING,
    DEFAULT_MICRO_BATCH_SIZE,
    DEFAULT_VPP,
    SearchSpec,
    parse_search_spec,
)
from ppb_core.units import percent_words  # noqa: E402

# Rows whose search fits this shared 2-core machine (tens of CPU-seconds to a few minutes each).
DEFAULT_ROWS = (
    "NeMo Llama 3 8B FP8 FSDP (8 H100)",
    "NeMo Llama 3 70B FP8 TP4 PP8 (64 H100)",
    "NeMo 26.04 Llama 3 70B FP8 TP4 PP8 GBS256 (64 H100)",
    "NeMo Llama 3 8B FP8 (8 B200)",
)


# Timing flags a recipe sets for some layouts only, which one spec (every strategy's timing) cannot: Megatron-Bridge
# sets --overlap-param-gather-with-optimizer-step where DP, PP and VP all exceed 1 (utils/helpers.py
# `set_user_overrides`; Megatron-LM asserts virtual stages and the distributed optimizer for it), and
# --delay-wgrad-compute with the EP overlap (`set_moe_a2a_overlap_overrides`; Megatron-Core asserts
# parallel.overlap_moe_expert_parallel_comm, which the default grid leaves off: limits.ep_overlap, docs/search.md).
# The search runs without them; the published strategy is placed with its own EP overlap (`published_strategy`).
PER_LAYOUT_TIMING = ("overlap_param_gather_with_optimizer_step", "delay_wgrad_compute")


def _world(parallel: dict[str, Any]) -> int:
    return int(parallel["dp"]) * int(parallel.get("tp", 1)) * int(parallel.get("cp", 1)) * int(parallel.get("pp", 1))


def published_strategy(row: PublicRun) -> Strategy:
    """The row's parallel layout as a point of the search's grid, read from its parsed run config (a layout's
    virtual stages included: a row may give them by `parallel.layout` alone). Its recompute: the spec's first
    setting; the balancer chooses each layer's option, so the row's own recompute is one of its plans."""
    run = config(row)
    par, training = run.parallel, run.training
    return Strategy(
        tp=par.tp,
        cp=par.cp,
        pp=par.pp,
        dp=par.dp,
        vpp=par.vpp,
        schedule=par.schedule if par.vpp > 1 or par.schedule != "interleaved" else "1f1b",
        ep=par.ep,
        etp=par.expert_tp if "ep" in row.raw["parallel"] else par.tp,
        sequence_parallel=par.sequence_parallel,
        cp_variant=par.cp_variant,
        zero=3 if par.fsdp else par.zero,
        fsdp=par.fsdp,
        micro_batch_size=training.micro_batch_size,
        micro_batches=training.micro_batches,
        recompute=0,
        group=par.microbatch_group_size_per_vp_stage or 0,
        ep_overlap=par.overlap_moe_expert_parallel_comm,
    )


def spec_of(row: PublicRun, balanced: int, ep_overlap: bool = False) -> SearchSpec:
    """The search a user would run for the row's job: its model, device, GPUs, sequence and global batch,
    framework, precision and timing flags; the default grid plus the row's own sizes (*ep_overlap*: with the
    combined 1F1B tried too, `limits.ep_overlap: [false, true]`, on a row with experts)."""
    raw = row.raw
    parallel, training = raw["parallel"], raw["training"]
    batch = int(training["micro_batch_size"]) * int(training["micro_batches"]) * int(parallel["dp"])
    limits: dict[str, Any] = {
        "vpp": sorted({*DEFAULT_VPP, config(row).parallel.vpp}),
        "micro_batch_size": sorted({*DEFAULT_MICRO_BATCH_SIZE, int(training["micro_batch_size"])}),
    }
    if parallel.get("fsdp"):
        limits["fsdp"] = [False, True]
    if "ep" in parallel:
        limits["etp"] = sorted({1, int(parallel.get("etp", 1))})
        if ep_overlap:
            limits["ep_overlap"] = [False, True]
    spec_raw = {
        "name": "public-" + "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in row.name)[:80],
        "framework": raw.get("framework", "megatron"),
        "models": raw["models"],
        "devices": _world(parallel),
        "devices_per_node": int(parallel.get("devices_per_node", 8)),
        "device": raw["device"],
        "training": {
            **{key: value for key, value in training.items() if key not in CHOSEN_TRAINING},
            "global_batch": batch,
        },
        "timing": {key: value for key, value in raw.get("timing", {}).items() if key not in PER_LAYOUT_TIMING},
        "limits": limits,
        "search": {"top": balanced, "balance_budget": balanced},
    }
    if "ppb" in raw:
        spec_raw["ppb"] = raw["ppb"]
    if "memory" in raw:  # the Megatron CI GPT 7B rows' CUBLAS_WORKSPACE_CONFIG
        spec_raw["memory"] = raw["memory"]
    if "framework_release" in raw:
        # the releases the row's container ran (bench/_nemo.py RELEASES_2511, RELEASES_2604), as its own
        # `as published` time prices them; until session 27 the search priced every strategy, the published one
        # placed among them too, at the newest code ppb follows (Qwen3 30B-A3B EP16 on 16 H100 at 26.04: the
        # first, MBS 2, 18.746 s in the search against 18.795 s for `ppb estimate` of the same settings)
        spec_raw["framework_release"] = raw["framework_release"]
    return parse_search_spec(spec_raw, f"bench/public_runs.py row {row.name!r}", ROOT / "configs")


def place(row: PublicRun, balanced: int, workers: int | None, ep_overlap: bool = False, verbose: bool = False) -> None:
    """Search the row's job, then place its published strategy (*verbose*: every strategy balanced, its bound and
    its seconds or why it has none)."""
    spec = spec_of(row, balanced, ep_overlap)
    strategy = published_strategy(row)
    load_before = os.getloadavg()[0]
    sampler = CpuSampler()
    started = time.perf_counter()
    result = search(spec, workers)
    cpu = sampler.seconds()
    sampler.stop()
    wall = time.perf_counter() - started
    grid = {point for point in enumerate_strategies(spec) if isinstance(point, Strategy)}
    print(f"\n{row.name} ({row.source})")
    counts = result.counts
    print(
        f"  {spec.devices} × {spec.device.name}, {spec.global_batch} sequences of {spec.seq_length}: "
        "enumerated {enumerated:,}, valid {valid:,}, relaxed {relaxed:,}, balanced {balanced:,}, "
        "pruned {pruned:,}, unexamined {unexamined:,}".format(**counts)
        + f"; {result.to_json(True)['proven']} proven"
        + ("" if result.proven_gap is None else f", proven gap {percent_words(result.proven_gap)}")
    )
    print(f"  CPU {cpu or float('nan'):.1f} s, wall {wall:.0f} s, load {load_before:.1f} → {os.getloadavg()[0]:.1f}")
    for number, entry in enumerate(result.ranked[:3], start=1):
        print(f"  {number}. {entry.strategy.label(spec):44s} {entry.seconds:8.3f} s  MFU {100 * entry.mfu:4.1f} %")
    if verbose:
        for entry in result.balanced:
            print(
                f"     balanced {entry.strategy.label(spec):44s} bound {entry.bound_s:8.3f} s, {entry.seconds:8.3f} s"
            )
        for reason, count in result.reasons().items():
            print(f"     {count:,} {reason} (e.g. {result.example(reason)})")
    if not result.ranked:  # say why, rather than place against nothing
        for reason, count in result.reasons().items():
            print(f"  {count:,} {reason} (e.g. {result.example(reason)})")
    mine = {entry.strategy: entry for entry in result.balanced}.get(strategy)
    if mine is None:  # the search's screen first, as the search takes it: its relaxed program may refuse it
        _start(spec)
        checked = validate(spec, strategy)
        relaxed = _relax(strategy) if not isinstance(checked, Refusal) else ""
        mine = Refusal(strategy, relaxed, "") if relaxed and isinstance(relaxed, str) else evaluate(spec, strategy)
    as_published = row_seconds(row)
    print(f"  published {strategy.label(spec)}{'' if strategy in grid else ' (not in the grid)'}:")
    print(f"    as published (its split and recompute): {as_published:.3f} s; measured {row.seconds:.3f} s")
    if not isinstance(mine, Ranked):
        print(f"    balanced: refused: {mine.reason}")
        return
    if not result.ranked:
        print(f"    balanced: {mine.seconds:.3f} s, MFU {100 * mine.mfu:.1f} %: nothing ranked to place it against")
        return
    faster = sum(1 for other in result.ranked if other.key() < mine.key())
    where, _ = place_among(result, faster, mine.seconds)
    first = result.ranked[0].seconds
    print(
        f"    balanced: {mine.seconds:.3f} s, MFU {100 * mine.mfu:.1f} %, peak {mine.peak_memory_mb / 1024:.1f} GiB:"
        f" {where}; our first {first:.3f} s is {mine.seconds / first:.3f}× as fast"
        f" ({as_published / first:.3f}× the as-published time)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", help="substrings of row names (default: DEFAULT_ROWS)")
    parser.add_argument("--balanced", type=int, default=10, help="balance budget and top (default 10)")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: the CPUs)")
    parser.add_argument("--list", action="store_true", help="list the rows and their GPUs, then stop")
    parser.add_argument(
        "--ep-overlap", action="store_true", help="MoE rows: try the combined 1F1B too (limits.ep_overlap)"
    )
    parser.add_argument("--verbose", action="store_true", help="every strategy balanced and every reason")
    args = parser.parse_args()
    rows = public_runs()
    if args.list:
        for row in rows:
            print(f"{_world(row.raw['parallel']):6d}  {row.name}")
        return 0
    wanted = args.rows or list(DEFAULT_ROWS)
    chosen = [row for row in rows if any(text == row.name or text in row.name for text in wanted)]
    if args.rows == [] and len(chosen) != len(DEFAULT_ROWS):
        print("bench/search_public.py: DEFAULT_ROWS names a row public_runs.py no longer has", file=sys.stderr)
        return 2
    print(f"machine: {machine()}")
    for row in chosen:
        try:
            place(row, args.balanced, args.workers, args.ep_overlap, args.verbose)
        except InputError as err:
            print(f"\n{row.name}: its search is refused: {err}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
