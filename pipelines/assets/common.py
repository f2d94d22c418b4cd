"""What every stage asset shares: its partitions, group, code version, and readable metadata."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.partitions import run_configs
from ppb_core import chain

GROUP = "ppb"
PREVIEW_ROWS = 12
PREVIEW_WIDTH = 48


def stage_asset(name: str, kinds: set[str], **kwargs: Any) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """`@dg.asset` for the chain stage *name*: described and versioned by the stage itself."""
    return dg.asset(
        name=name,
        partitions_def=run_configs,
        group_name=GROUP,
        code_version=chain.code_version(name),
        description=chain.stage(name).description,
        kinds=kinds,
        **kwargs,
    )


def _cell(value: Any) -> str:
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= PREVIEW_WIDTH else text[: PREVIEW_WIDTH - 1] + "…"


def markdown_table(frame: pd.DataFrame, rows: int = PREVIEW_ROWS) -> str:
    """The first *rows* rows as a markdown table, long cells cut, with the total row count."""
    shown = frame.head(rows)
    lines = ["| " + " | ".join(map(_cell, shown.columns)) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in shown.itertuples(index=False)]
    if len(frame) > rows:
        lines.append(f"\n{rows} of {len(frame)} rows")
    return "\n".join(lines)


def table_metadata(frame: pd.DataFrame, figures: Mapping[str, Any]) -> dict[str, Any]:
    """A markdown preview of the table and the stage's key figures, as a person reads them in the UI."""
    return {"preview": dg.MetadataValue.md(markdown_table(frame)), **figures}
