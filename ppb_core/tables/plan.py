"""The balancer's plan as a table: one row per pipeline stage."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ppb_core.model.switches import OPTIONS

PLAN_COLUMNS = (
    "stage",
    "layers",
    "layers_per_chunk",
    *(o.lower() for o in OPTIONS),
    "memory_mb",
    "time",
    "bubble",
    "cells_json",
)

# What the balancer reports that differs from one solve to the next: wall-clock seconds.
_VOLATILE = ("seconds",)


def plan_to_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """One row per stage of a `ppb balance --json` result; the whole result in `attrs["plan"]`.

    Per stage: layers (and per chunk), layers under each option, the balancer's predicted memory
    (MB), time of one micro-batch (the descriptions' unit) and idle share, and each chunk's option
    counts as JSON. An infeasible problem gives no row. Wall-clock seconds are left out of the
    stored result (the solver's notes too, which quote them), so equal plans give equal bytes.
    """
    stable = {key: value for key, value in result.items() if key not in _VOLATILE}
    if "solver" in stable:
        stable["solver"] = {key: value for key, value in stable["solver"].items() if key != "notes"}
    rows = []
    for row in result.get("stages", []):
        stage_index = row["stage"]
        cells = [chunk_row[stage_index]["options"] for chunk_row in result["cells"]]
        rows.append(
            {
                "stage": stage_index,
                "layers": row["layers"],
                "layers_per_chunk": json.dumps(row["layers_per_chunk"]),
                **{o.lower(): sum(int(cell.get(o, 0)) for cell in cells) for o in OPTIONS},
                "memory_mb": float(row["memory_mb"]),
                "time": float(row["time"]),
                "bubble": float(row["bubble"]),
                "cells_json": json.dumps(cells, sort_keys=True),
            }
        )
    frame = pd.DataFrame(rows, columns=list(PLAN_COLUMNS)).astype(
        {
            "stage": "int64",
            "layers": "int64",
            "layers_per_chunk": "string",
            **{o.lower(): "int64" for o in OPTIONS},
            "memory_mb": "float64",
            "time": "float64",
            "bubble": "float64",
            "cells_json": "string",
        }
    )
    frame.attrs["plan"] = json.dumps(stable, sort_keys=True)
    return frame
