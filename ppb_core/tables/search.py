"""The search's ranking as a table (the `strategy_search` asset's Parquet): one row per ranked strategy."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from ppb_core.search.rank import SearchResult

RANKING_COLUMNS: tuple[str, ...] = (
    "rank",  # 1 is the fastest
    "name",  # the strategy's label (tp·cp·pp·dp... as `ppb search` prints it)
    "tp",
    "sequence_parallel",
    "cp",
    "cp_variant",
    "pp",
    "vpp",
    "schedule",
    "dp",
    "ep",
    "etp",
    "zero",
    "fsdp",
    "micro_batch_size",
    "micro_batches",
    "recompute_json",  # training.recompute as the run config writes it
    "tokens_per_second_per_device",
    "iteration_s",
    "mfu",
    "hfu",
    "peak_memory_mb",  # the plan's busiest stage, as the balancer charges it
    "headroom_mb",  # what that stage leaves of the device (less reserved_mb)
    "uniform_iteration_s",  # the best uniform split with one option, if one fits (NaN otherwise)
    "gain_over_uniform",
    "bound_s",  # the proven lower bound the search held before balancing it
    "plan_json",  # the balancer's JSON
)


def ranking_to_frame(result: SearchResult) -> pd.DataFrame:
    spec = result.spec
    rows: list[dict[str, Any]] = []
    for place, entry in enumerate(result.ranked, start=1):
        s = entry.strategy
        rows.append(
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
                "uniform_iteration_s": entry.uniform_seconds if entry.uniform_seconds is not None else float("nan"),
                "gain_over_uniform": entry.gain if entry.gain is not None else float("nan"),
                "bound_s": entry.bound_s,
                "plan_json": json.dumps(entry.plan, sort_keys=True),
            }
        )
    frame = pd.DataFrame(rows, columns=list(RANKING_COLUMNS))
    return frame.astype(
        {
            "rank": "int64",
            "tp": "int64",
            "cp": "int64",
            "pp": "int64",
            "vpp": "int64",
            "dp": "int64",
            "ep": "int64",
            "etp": "int64",
            "zero": "int64",
            "micro_batch_size": "int64",
            "micro_batches": "int64",
            "sequence_parallel": "bool",
            "fsdp": "bool",
        }
    )
