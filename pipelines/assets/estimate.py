"""Each distinct layer's memory and times, and the stages' peaks against the device."""

import dagster as dg
import pandas as pd

from pipelines.assets.common import markdown_table, stage_asset, table_metadata
from ppb_core import chain
from ppb_core.tables.schema import Summarized
from ppb_core.units import MB

OPTIONS = ("none", "slct", "comm", "both", "full")


@stage_asset("layer_memory", kinds={"python", "pandas", "parquet"})
def layer_memory(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> dg.Output[Summarized]:
    stored = chain.layer_memory(run_config, layer_walk)
    frame, peaks = stored.frame, stored.summary["stages"]
    stages = pd.DataFrame(
        {
            "stage": [p["stage"] for p in peaks],
            "body layers": [p["body_layers"] for p in peaks],
            "in flight": [p["in_flight"] for p in peaks],
            **{
                f"{part} MB": [round(p[f"{part}_bytes"] / MB) for p in peaks]
                for part in ("static", "activation", "buffer", "working", "reserved", "peak", "device")
            },
            "fits": [p["fits"] for p in peaks],
        }
    )
    peak = max(peaks, key=lambda p: p["peak_bytes"])
    shown = frame[["model_name", "node", "kind", "count", "static_bytes", *(f"activation_bytes_{o}" for o in OPTIONS)]]
    return dg.Output(
        stored,
        metadata=table_metadata(
            shown.assign(**{c: (shown[c] / MB).round(1) for c in shown.columns if "bytes" in c}).rename(
                columns=lambda c: c.replace("_bytes", " MB")
            ),
            {
                "peak_stage_memory_mb": round(peak["peak_bytes"] / MB, 1),
                "peak_stage": peak["stage"],
                "device_memory_mb": round(peak["device_bytes"] / MB, 1),
                "every_stage_fits": all(p["fits"] for p in peaks),
                "stage_peaks": dg.MetadataValue.md(markdown_table(stages, rows=len(stages))),
            },
        ),
    )


@stage_asset("layer_times", kinds={"python", "pandas", "parquet"})
def layer_times(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> dg.Output[pd.DataFrame]:
    frame = chain.layer_times(run_config, layer_walk)
    body = frame[frame["node"] == "BODY"]
    shown = frame.drop(columns="kind_json")
    figures = {
        "body_kinds": len(body),
        "body_forward_ms": float(body["forward_ms_none"].iloc[0]) if len(body) else 0.0,
        "body_backward_ms": float(body["backward_ms_none"].iloc[0]) if len(body) else 0.0,
        "full_recompute_backward_ms": float(body["backward_ms_full"].iloc[0]) if len(body) else 0.0,
    }
    return dg.Output(frame, metadata=table_metadata(shown.round(3), figures))
