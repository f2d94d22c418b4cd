"""The search's ranking as a table (the `strategy_search` asset's Parquet): one row per ranked strategy,
the counts and refusals as its summary."""

from __future__ import annotations

import json
from typing import Any

from ppb_core.search.rank import SearchResult
from ppb_core.tables.schema import Column, Schema, Summarized

STRATEGY_SEARCH = Schema(
    "strategy_search",
    "The fastest parallel strategies of a search spec, each balanced and timed, fastest first. "
    "Summary: the counts (enumerated, valid, screened, balanced, ...), the refusals by reason, how many "
    "leading places are proven and the least bound left unexamined (`ppb search --json` less the rows).",
    (
        Column("rank", "int64", "place in the ranking, 1 the fastest"),
        Column("name", "string", "the strategy as `ppb search` labels it (tp, cp, pp, vpp, dp, ep, ...)"),
        Column("tp", "int64", "tensor-parallel size"),
        Column("sequence_parallel", "bool", "sequence parallelism with the tensor parallelism"),
        Column("cp", "int64", "context-parallel size"),
        Column("cp_variant", "string", "ring, ulysses or all_gather context parallelism"),
        Column("pp", "int64", "pipeline stages"),
        Column("vpp", "int64", "chunks (virtual stages) per pipeline stage"),
        Column("schedule", "string", "pipeline schedule"),
        Column("dp", "int64", "data-parallel size"),
        Column("ep", "int64", "expert-parallel size (1 for a dense model)"),
        Column("etp", "int64", "tensor-parallel size of the experts"),
        Column("zero", "int64", "ZeRO stage of the optimizer (0: plain data parallelism)"),
        Column("fsdp", "bool", "fully sharded data parallelism (parameters gathered per layer)"),
        Column("micro_batch_size", "int64", "sequences per micro-batch"),
        Column("micro_batches", "int64", "micro-batches per iteration on each data-parallel rank"),
        Column("recompute_json", "string", "training.recompute as the run config writes it", "JSON"),
        Column("tokens_per_second_per_device", "float64", "tokens one device trains per second"),
        Column("iteration_s", "float64", "the balanced plan's iteration by the time model", "s"),
        Column("mfu", "float64", "model FLOPs utilization (no recompute counted)", "share"),
        Column("hfu", "float64", "hardware FLOPs utilization (recompute counted)", "share"),
        Column("peak_memory_mb", "float64", "the plan's busiest stage, as the memory model gives it", "MB"),
        Column("headroom_mb", "float64", "what that stage leaves of the device, less reserved_mb", "MB"),
        Column(
            "uniform_iteration_s",
            "Float64",
            "the best uniform split with one recompute option for every layer, if one fits",
            "s",
        ),
        Column("gain_over_uniform", "Float64", "uniform_iteration_s / iteration_s (>1: the plan is faster)"),
        Column("bound_s", "float64", "the proven lower bound the search held before balancing it", "s"),
        Column("plan_json", "string", "the balancer's plan (`ppb balance --json`)", "JSON"),
    ),
)


def ranking_to_frame(result: SearchResult) -> Summarized:
    """The ranked strategies, one row each; the whole result less the rows as the summary."""
    spec = result.spec
    records: list[dict[str, Any]] = []
    for place, entry in enumerate(result.ranked, start=1):
        s = entry.strategy
        records.append(
            {
                "rank": place,
                "name": s.label(spec),
                "tp": s.tp,
                "sequence_parallel": s.sequence_parallel,
                "cp": s.cp,
                "cp_variant": s.cp_variant,
                "pp": s.pp,
                "vpp": s.vpp,
                "schedule": s.schedule,
                "dp": s.dp,
                "ep": s.ep,
                "etp": s.etp,
                "zero": s.zero,
                "fsdp": s.fsdp,
                "micro_batch_size": s.micro_batch_size,
                "micro_batches": s.micro_batches,
                "recompute_json": json.dumps(spec.recompute_settings[s.recompute], sort_keys=True),
                "tokens_per_second_per_device": entry.tokens_per_second_per_device,
                "iteration_s": entry.seconds,
                "mfu": entry.mfu,
                "hfu": entry.hfu,
                "peak_memory_mb": entry.peak_memory_mb,
                "headroom_mb": entry.headroom_mb,
                "uniform_iteration_s": entry.uniform_seconds,
                "gain_over_uniform": entry.gain,
                "bound_s": entry.bound_s,
                "plan_json": json.dumps(entry.plan, sort_keys=True),
            }
        )
    whole = result.to_json(details=True)
    summary = {key: value for key, value in whole.items() if key != "ranked"}
    return Summarized(STRATEGY_SEARCH.frame(records), json.loads(json.dumps(summary, sort_keys=True)))
