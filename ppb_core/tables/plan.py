"""The balancer's plan as a table: one row per pipeline stage, the whole result as its summary."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ppb_core.model.switches import OPTIONS
from ppb_core.tables.schema import Column, Schema, Summarized

PIPELINE_PLAN = Schema(
    "pipeline_plan",
    "The balancer's plan, one row per pipeline stage. Summary: the whole `ppb balance RUN.yaml --json` "
    "result, times in seconds (status, objective, gap, speedup, the MindFormers yaml and Megatron-LM "
    "layout, ...). No row when no plan fits.",
    (
        Column("stage", "int64", "the pipeline stage, from 0"),
        Column("layers", "int64", "body layers the stage holds, every chunk", "layers"),
        Column("layers_per_chunk", "string", "body layers of each chunk on this stage", "JSON"),
        *(Column(o.lower(), "int64", f"body layers of the stage under {o}", "layers") for o in OPTIONS),
        Column("memory_mb", "float64", "the stage's memory as the balancer predicts it from the descriptions", "MB"),
        Column("time_s", "float64", "forward + backward of one micro-batch through the stage's layers", "s"),
        Column("bubble", "float64", "the stage's idle share of the iteration", "share"),
        Column("cells_json", "string", "per chunk, the stage's body layers under each option", "JSON"),
    ),
)


def plan_to_frame(result: Mapping[str, Any]) -> Summarized:
    """One row per stage of a `ppb balance --json` result, the result itself as the summary (it holds no
    wall-clock time, `balance.result.report`: equal plans give equal bytes)."""
    records = []
    for row in result.get("stages", []):
        stage_index = row["stage"]
        cells = [chunk_row[stage_index]["options"] for chunk_row in result["cells"]]
        records.append(
            {
                "stage": stage_index,
                "layers": row["layers"],
                "layers_per_chunk": json.dumps(row["layers_per_chunk"]),
                **{o.lower(): sum(int(cell.get(o, 0)) for cell in cells) for o in OPTIONS},
                "memory_mb": float(row["memory_mb"]),
                "time_s": float(row["time_s"]),
                "bubble": float(row["bubble"]),
                "cells_json": json.dumps(cells, sort_keys=True),
            }
        )
    return Summarized(PIPELINE_PLAN.frame(records), json.loads(json.dumps(result, sort_keys=True)))


def plan_cells(plan: Summarized) -> list[list[dict[str, int]]]:
    """The plan's cells, [chunk][stage] → {option: body layers}, from its rows."""
    by_stage = [json.loads(text) for text in plan.frame["cells_json"]]
    return [[by_stage[s][c] for s in range(len(by_stage))] for c in range(len(by_stage[0]))]
