"""What every stage asset shares: partitions, group, code version, automation, columns, readable metadata."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.automation import rebuild_when_changed
from pipelines.columns import column_schema
from pipelines.partitions import run_configs
from ppb_core import chain

GROUP = "ppb"
PREVIEW_ROWS = 12
PREVIEW_WIDTH = 48
KINDS = {"python", "pandas", "parquet"}


def stage_asset(
    name: str, kinds: set[str] = KINDS, **kwargs: Any
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """`@dg.asset` for the chain stage *name*: described, versioned and columned by the stage itself."""
    step = chain.stage(name)
    return dg.asset(
        name=name,
        partitions_def=run_configs,
        group_name=GROUP,
        code_version=chain.code_version(name),
        description=f"{step.description}\n\n{step.schema.description}",
        metadata={"dagster/column_schema": column_schema(step.schema)},
        automation_condition=rebuild_when_changed(),
        kinds=kinds,
        **kwargs,
    )


def rounded(value: float, digits: int = 3) -> float:
    """A figure as a person reads it: *digits* decimals (MB to 1, ms to 3, ratios to 3)."""
    return round(float(value), digits)


def _cell(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        text = f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    else:
        text = str(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= PREVIEW_WIDTH else text[: PREVIEW_WIDTH - 1] + "…"


def markdown_table(frame: pd.DataFrame, rows: int = PREVIEW_ROWS) -> str:
    """The first *rows* rows as a markdown table, numbers rounded, long cells cut, with the row count."""
    shown = frame.head(rows)
    lines = ["| " + " | ".join(map(_cell, shown.columns)) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in shown.itertuples(index=False)]
    if len(frame) > rows:
        lines.append(f"\n{rows} of {len(frame)} rows")
    return "\n".join(lines)


def table_metadata(frame: pd.DataFrame, figures: Mapping[str, Any]) -> dict[str, Any]:
    """A markdown preview of the table and the stage's key figures, as a person reads them in the UI."""
    return {"preview": dg.MetadataValue.md(markdown_table(frame)), **figures}
