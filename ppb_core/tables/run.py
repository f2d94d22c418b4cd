"""The run config as a table: one self-contained row (the `run_config` asset's)."""

from __future__ import annotations

import json

import pandas as pd

from ppb_core.config.run import RunConfig, parse_run_config, resolved_raw
from ppb_core.errors import InputError
from ppb_core.tables.schema import Column, Schema

RUN_CONFIG = Schema(
    "run_config",
    "The run config read, validated and resolved into one row that stands alone.",
    (
        Column("name", "string", "the run's name: the config's `name`, else the file stem"),
        Column("source", "string", "the run config file it was read from (absolute path)"),
        Column(
            "config_json",
            "string",
            "the whole run config as JSON, every model's architecture inlined and every path absolute",
            "JSON",
        ),
    ),
)


def run_to_frame(run: RunConfig) -> pd.DataFrame:
    """One row: the run config resolved to JSON."""
    return RUN_CONFIG.frame(
        [{"name": run.name, "source": run.source, "config_json": json.dumps(resolved_raw(run), sort_keys=True)}]
    )


def run_from_frame(frame: pd.DataFrame) -> RunConfig:
    RUN_CONFIG.require(frame)
    if len(frame) != 1:
        raise InputError("run_config table", None, f"expected one row, got {len(frame)}")
    row = frame.iloc[0]
    return parse_run_config(json.loads(row["config_json"]), str(row["source"]), ".")
