"""Strategy search at scale: `python bench/search.py [SEARCH.yaml ...] [--workers N] [--devices N ...] [--balanced N]`.

Searches the shipped specs (default: searches/llama3-70b-1024.yaml, a Llama-3-70B on 1024 H100s, and
searches/deepseek-v3-2048.yaml, DeepSeek-V3 on 2048 H100s), each on every device count of `--devices`
(default: 1024 and 2048; a spec whose batch is set for its own devices, `DEFAULT_DEVICES`, on those:
searches/torchtitan-llama3.1-8b-128.yaml on 128), and prints for each: the machine, the strategies enumerated,
valid, screened, bounded by the relaxed program, balanced and pruned, the wall time of screening and of the
whole search, how many places are proven and the proven gap (how much faster than our first an unexamined
strategy could at most be), and the ranked top 5 (tokens/s per device, iteration seconds, MFU, peak GiB, the
balancer's own gap); then where each published production setting of that search (`PUBLISHED`) ranks and what
our first choice gains over it. Beside the wall time it prints the CPU-seconds of the search over all its
processes (the balancing and pool processes sampled from /proc: `_measure.CpuSampler`) and the load
average before and after, since the machine may be shared. Every decision is deterministic (work limits, a
balance budget: `--balanced`, default the spec's `top`); `--seconds` is only a wall-clock safety net, reported
when it fires. The goal
(issue 14): 10,000+ strategies screened and the top 20 balanced in under 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from _measure import CpuSampler, machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import parse_run_config  # noqa: E402
from ppb_core.search.enumerate import Strategy, enumerate_strategies  # noqa: E402
from ppb_core.search.rank import Ranked, SearchResult, evaluate, search  # noqa: E402
from ppb_core.search.spec import SearchSpec, load_search_spec  # noqa: E402
from ppb_core.timing.iteration import Iteration, run_iteration  # noqa: E402
from ppb_core.units import percent_words  # noqa: E402

DEFAULT_SPECS = ("searches/llama3-70b-1024.yaml", "searches/deepseek-v3-2048.yaml")
# Specs whose batch is set for their own devices (torchtitan's benchmark: local batch 2 on its 128 GPUs).
DEFAULT_DEVICES: dict[str, tuple[int, ...]] = {
    "torchtitan-llama3.1-8b-8": (8,),
    "torchtitan-llama3.1-8b-128": (128,),
    "torchtitan-llama3.1-70b-256": (256,),
    "llama3-8b-64": (64,),
    "llama3.1-405b-16384": (16384,),
}

# Published production settings, placed in our ranking of the same search (the spec's batch and device):
# each one's source, and its strategy (the spec's first recompute setting: the balancer still chooses
# each layer's option).
PUBLISHED: dict[str, list[tuple[str, dict]]] = {
    "llama3-8b-64": [
        (
            "NVIDIA Megatron-Bridge perf recipe llama3_8b_pretrain_64gpu_h100_bf16_config: TP1 PP1 CP2",
            dict(tp=1, cp=2, pp=1, vpp=1, schedule="1f1b", zero=1, micro_batch_size=1),
        ),
    ],
    "llama3-70b-1024": [
        (
            "NVIDIA Megatron-Bridge perf recipe llama3_70b_pretrain_64gpu_h100_bf16_config: TP4 PP4 CP2 VP5",
            dict(tp=4, cp=2, pp=4, vpp=5, schedule="interleaved", zero=1, micro_batch_size=1),
        ),
        (
            "Llama 3 paper (arXiv 2407.21783) Table 4, 405B at 8K: TP8 CP1 PP16 (its layout, on this 70B)",
            dict(tp=8, cp=1, pp=16, vpp=1, schedule="1f1b", zero=1, micro_batch_size=1),
        ),
    ],
    "torchtitan-llama3.1-8b-8": [
        (
            "torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 1: FSDP 8, local batch 2, op-SAC",
            dict(tp=1, cp=1, pp=1, vpp=1, schedule="1f1b", zero=3, fsdp=True, micro_batch_size=2),
        ),
    ],
    "torchtitan-llama3.1-8b-128": [
        (
            "torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 3: FSDP 128, local batch 2, op-SAC",
            dict(tp=1, cp=1, pp=1, vpp=1, schedule="1f1b", zero=3, fsdp=True, micro_batch_size=2),
        ),
    ],
    "torchtitan-llama3.1-70b-256": [
        (
            "torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 4: FSDP 32 × TP 8, local batch 16, full AC",
            dict(tp=8, cp=1, pp=1, vpp=1, schedule="1f1b", zero=3, fsdp=True, micro_batch_size=16),
        ),
    ],
    "deepseek-v3-2048": [
        (
            "DeepSeek-V3 technical report (arXiv 2412.19437) §3.2: PP16 DualPipe, EP64, ZeRO-1 DP, no TP",
            dict(tp=1, cp=1, pp=16, vpp=2, schedule="dualpipev", ep=64, zero=1, micro_batch_size=1),
        ),
    ],
    # §3.3.2: an interleaved schedule, optimizer states and gradients sharded over DP (ZeRO-2); Table 4: 16
    # sequences per DP rank. Its layout: "the first model chunk on the first stage has only the embedding, and the
    # last model chunk on the last stage has only output projection and loss calculation", one layer a chunk
    # otherwise: V = 8 chunks a rank over 126 + 2 places (bench/public_runs.py's rows, since December 2026), which no
    # point of the grid is (126 layers do not fill 16·8 cells; the search gives every cell a layer), so it is priced
    # as published (`run_iteration` on that layout, the spec's recompute on every layer) and placed by its time. The
    # grid's own interleaved TP8 CP1 PP16 points at V = 2 and 4, balanced as the search balances, are placed too.
    "llama3.1-405b-16384": [
        (
            "Llama 3 paper (arXiv 2407.21783) Table 4 and §3.3.2, 405B at 8K: TP8 CP1 PP16 (DP64 on 8,192 GPUs, "
            "DP128 on 16,384), V=8, its layout E|(t|)*126L as published (not a point of the grid)",
            dict(tp=8, cp=1, pp=16, vpp=8, schedule="interleaved", zero=2, micro_batch_size=1, layout="E|(t|)*126L"),
        ),
        *(
            (
                f"the same TP8 CP1 PP16 in the grid at V={vpp}, balanced (the paper's V is 8, above)",
                dict(tp=8, cp=1, pp=16, vpp=vpp, schedule="interleaved", zero=2, micro_batch_size=1),
            )
            for vpp in (2, 4)
        ),
    ],
}


def published(spec: SearchSpec, fields: dict) -> Strategy:
    """The strategy of a published setting on the spec's devices and batch."""
    dp = spec.devices // (fields["tp"] * fields["cp"] * fields["pp"])
    return Strategy(
        dp=dp,
        ep=fields.get("ep", 1),
        etp=1 if spec.moe else fields["tp"],  # a dense model's expert tp follows tp, as the grid writes it
        sequence_parallel=fields["tp"] > 1,
        cp_variant="ring",
        fsdp=fields.get("fsdp", False),
        micro_batches=spec.global_batch // (dp * fields["micro_batch_size"]),
        recompute=0,
        **{key: value for key, value in fields.items() if key not in ("ep", "fsdp", "layout")},
    )


def as_published(spec: SearchSpec, strategy: Strategy, layout: str) -> Iteration:
    """The strategy on its published layout (Megatron-LM's --pipeline-model-parallel-layout), priced as
    bench/public_runs.py prices a row: `run_iteration` on the layout, every layer at the spec's first recompute."""
    raw = strategy.run_raw(spec)
    raw["parallel"]["layout"] = layout
    return run_iteration(parse_run_config(raw, spec.source, spec.base_dir))


def _gap_text(result: SearchResult) -> str:
    gap = result.proven_gap
    if gap is None:
        return ""
    return f"; proven gap {percent_words(gap)} (least bound left {result.unexamined_bound_s:.3f} s)"


def place_among(result: SearchResult, faster: int, seconds: float) -> tuple[str, float]:
    """Where a published setting falls among the ranked, given how many ranked beat it, and how much
    faster the search's first is."""
    where = f"place {faster + 1}" if faster < len(result.ranked) else f"below the top {len(result.ranked)}"
    return where, (seconds / result.ranked[0].seconds if result.ranked else float("nan"))


def place_published(result: SearchResult, spec: SearchSpec) -> None:
    """Where each published setting of the spec ranks, and what our first gains over it."""
    settings = PUBLISHED.get(spec.name, [])
    grid = {point for point in enumerate_strategies(spec) if isinstance(point, Strategy)} if settings else set()
    balanced = {entry.strategy: entry for entry in result.balanced if entry.stopped_by != "time_limit"}
    for source, fields in settings:
        strategy = published(spec, fields)
        if "layout" in fields:
            priced = as_published(spec, strategy, fields["layout"])
            faster = sum(1 for other in result.ranked if other.seconds < priced.seconds)
            where, gain = place_among(result, faster, priced.seconds)
            print(
                f"  published: {source}\n    {strategy.label(spec)} on {fields['layout']}, as published: "
                f"{priced.seconds:.3f} s, {priced.tokens_per_second_per_device:,.0f} tokens/s/dev, MFU "
                f"{100 * priced.mfu:.1f} %: {where} by its time; our first is {gain:.3f}× as fast"
            )
            continue
        # a setting the search balanced is not balanced again: `evaluate` is deterministic (work limits), so
        # the search's entry is what it would give (unless the wall-clock safety net stopped that balance)
        entry = balanced.get(strategy) or evaluate(spec, strategy)
        print(f"  published: {source}\n    {strategy.label(spec)}: ", end="")
        if strategy not in grid:
            print("not in the searched grid (the spec's limits leave it out), ", end="")
        if not isinstance(entry, Ranked):
            print(f"refused: {entry.reason}")
            continue
        faster = sum(1 for other in result.ranked if other.key() < entry.key())
        where, gain = place_among(result, faster, entry.seconds)
        print(
            f"{entry.seconds:.3f} s, {entry.tokens_per_second_per_device:,.0f} tokens/s/dev,"
            f" MFU {100 * entry.mfu:.1f} %, peak {entry.peak_memory_mb / 1024:.1f} GiB:"
            f" {where}; our first is {gain:.3f}× as fast"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", default=list(DEFAULT_SPECS))
    parser.add_argument("--workers", type=int, default=None, help="processes (default: the CPUs)")
    parser.add_argument(
        "--devices", type=int, nargs="+", default=None, help="device counts to search on (default: 1024 and 2048)"
    )
    parser.add_argument("--balanced", type=int, default=None, help="balance budget (default: the spec's top)")
    parser.add_argument("--seconds", type=float, default=None, help="wall-clock safety net of each search")
    parser.add_argument(
        "--ep-overlap", action="store_true", help="try the combined 1F1B too (limits.ep_overlap: [false, true])"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for name in args.specs:
        spec = load_search_spec(ROOT / name)
        for devices in args.devices or DEFAULT_DEVICES.get(spec.name, (1024, 2048)):
            run_one(spec, devices, args)


def run_one(spec: SearchSpec, devices: int, args: argparse.Namespace) -> None:
    """One search on *devices*, its figures and the published settings placed."""
    options = {"balance_budget": args.balanced or spec.search.top}
    if args.seconds:
        options["time_budget_s"] = args.seconds
    update: dict = {"devices": devices, "search": spec.search.model_copy(update=options)}
    if args.ep_overlap:
        update["limits"] = spec.limits.model_copy(update={"ep_overlap": [False, True]})
    spec = spec.model_copy(update=update)
    marks: dict[str, float] = {}
    cpu_marks: dict[str, float | None] = {}
    sampler = CpuSampler()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    started = time.perf_counter()

    def progress(event: str, figures: dict) -> None:
        if event == "screening done":
            marks["screened"] = time.perf_counter() - started
            cpu_marks["screened"] = sampler.seconds()
        if event == "balanced":
            marks.setdefault("first balanced", time.perf_counter() - started)

    result = search(spec, args.workers, progress)
    cpu = sampler.seconds()
    sampler.stop()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    counts = result.counts
    print(f"\n{spec.name} on {spec.devices} × {spec.device.name}, {spec.global_batch} sequences of {spec.seq_length}")
    print(
        "  enumerated {enumerated:,}, valid {valid:,}, screened {screened:,}, relaxed {relaxed:,}, "
        "balanced {balanced:,}, pruned {pruned:,}, unexamined {unexamined:,}".format(**counts)
    )
    times = ", ".join(f"{key} at {value:.1f} s" for key, value in marks.items())
    if cpu is not None:
        screened = cpu_marks.get("screened")
        print(
            f"  CPU {cpu:.1f} s over its processes"
            + (f" (screening {screened:.1f})" if screened is not None else "")
            + f", load {load_before:.2f} at the start, {load:.2f} at the end"
        )
    print(
        f"  wall {result.seconds:.1f} s ({times}); top {len(result.ranked)} balanced, "
        f"{result.to_json(True)['proven']} proven"
        + _gap_text(result)
        + ("; the wall-clock safety net stopped it" if result.clock_stopped else "")
        + (f"; {counts['clock_stopped']} balances stopped by the clock" if counts.get("clock_stopped") else "")
    )
    for place, entry in enumerate(result.ranked[:5], start=1):
        own = "" if entry.balance_gap is None else f"  balancer gap {percent_words(entry.balance_gap)}"
        print(
            f"  {place}. {entry.strategy.label(spec):40s} {entry.tokens_per_second_per_device:8,.0f} tokens/s/dev"
            f"  {entry.seconds:7.3f} s  MFU {100 * entry.mfu:4.1f} %  peak {entry.peak_memory_mb / 1024:5.1f} GiB{own}"
        )
    place_published(result, spec)


if __name__ == "__main__":
    main()
