"""Each distinct layer's memory and times, and the stages' peaks against the device."""

import dagster as dg
import pandas as pd

from pipelines.assets.common import markdown_table, rounded, stage_asset, table_metadata
from ppb_core import chain
from ppb_core.model.switches import OPTIONS
from ppb_core.tables.estimate import estimate_from_frame, stages_to_frame
from ppb_core.tables.schema import Summarized
from ppb_core.units import MB

PARTS = ("static", "activation", "buffer", "working", "reserved", "peak", "device")


@stage_asset("layer_memory")
def layer_memory(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> dg.Output[Summarized]:
    stored = chain.layer_memory(run_config, layer_walk)
    result = estimate_from_frame(stored)
    peaks = result.stages
    stages = stages_to_frame(result)
    stages = stages[stages["recompute"] == "configured"]
    shown_stages = stages[["stage", "body_layers", "in_flight_json", "moment", "fits"]].assign(
        **{f"{part} MB": (stages[f"{part}_bytes"] / MB).round(0) for part in PARTS}
    )
    frame = stored.frame
    shown = frame[
        ["model_name", "node", "kind", "count", "static_bytes", *(f"activation_bytes_{o.lower()}" for o in OPTIONS)]
    ]
    peak = max(peaks, key=lambda p: p.peak_bytes)
    return dg.Output(
        stored,
        metadata=table_metadata(
            shown.assign(**{c: (shown[c] / MB).round(1) for c in shown.columns if "bytes" in c}).rename(
                columns=lambda c: c.replace("_bytes", " MB")
            ),
            {
                "peak_stage_memory_mb": rounded(peak.peak_bytes / MB, 1),
                "peak_stage": peak.stage,
                "device_memory_mb": rounded(peak.device_bytes / MB, 1),
                "every_stage_fits": all(p.fits for p in peaks),
                "stage_peaks": dg.MetadataValue.md(markdown_table(shown_stages, rows=len(shown_stages))),
            },
        ),
    )


@stage_asset("layer_times")
def layer_times(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> dg.Output[pd.DataFrame]:
    frame = chain.layer_times(run_config, layer_walk)
    body = frame[frame["node"] == "BODY"]
    first = body.iloc[0] if len(body) else None
    figures = {
        "body_kinds": len(body),
        "body_forward_ms": rounded(first["forward_ms_none"]) if first is not None else 0.0,
        "body_backward_ms": rounded(first["backward_ms_none"]) if first is not None else 0.0,
        "full_recompute_backward_ms": rounded(first["backward_ms_full"]) if first is not None else 0.0,
    }
    return dg.Output(frame, metadata=table_metadata(frame.drop(columns="kind_json"), figures))
