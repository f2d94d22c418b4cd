"""The balancer's plan, and the report a person looks at instead of reading it."""

import base64

import dagster as dg
import pandas as pd
from pydantic import Field

from pipelines.assets.common import stage_asset, table_metadata
from ppb_core import chain
from ppb_core.tables.schema import Summarized


class PlanConfig(dg.Config):
    time_limit_s: float = Field(default=chain.PLAN_TIME_LIMIT_S, gt=0, description="seconds the balancer may search")


@stage_asset("pipeline_plan", kinds={"python", "pandas", "parquet", "highs"})
def pipeline_plan(
    config: PlanConfig, run_config: pd.DataFrame, scaled_descriptions: pd.DataFrame
) -> dg.Output[Summarized]:
    stored = chain.pipeline_plan(run_config, scaled_descriptions, time_limit_s=config.time_limit_s)
    frame, plan = stored.frame, stored.summary
    figures: dict[str, object] = {"solver_status": plan["status"]}
    if plan.get("gap") is not None:
        figures["gap"] = float(plan["gap"])
    if plan.get("objective") is not None:
        figures["iteration_time"] = float(plan["objective"])
    if not frame.empty:
        figures["peak_stage_memory_mb"] = float(plan["peak_memory_mb"])
        figures["device_memory_mb"] = float(plan["input"]["memory_mb"])
        figures["speedup_over_uniform"] = float(plan["speedup"]) if plan.get("speedup") else 0.0
        figures["mindformers_yaml"] = dg.MetadataValue.md(
            "\n".join(
                f"    {key}: {plan[key]}"
                for key in ("offset", "recompute", "select_recompute", "select_comm_recompute")
            )
        )
    if plan.get("message"):
        figures["message"] = plan["message"]
    return dg.Output(stored, metadata=table_metadata(frame.drop(columns="cells_json"), figures))


@stage_asset("plan_report", kinds={"python", "pandas", "parquet", "matplotlib"})
def plan_report(run_config: pd.DataFrame, pipeline_plan: Summarized) -> dg.Output[Summarized]:
    stored = chain.plan_report(run_config, pipeline_plan)
    frame = stored.frame
    files = chain.stage_artifacts("plan_report", stored)
    image = base64.b64encode(files[".png"]).decode()
    summary = files[".md"].decode().replace(f"]({stored.summary['image']})", f"](data:image/png;base64,{image})")
    total = frame["parameters_mb"] + frame["activations_mb"] + frame["buffers_mb"]
    return dg.Output(
        stored,
        metadata=table_metadata(
            frame,
            {
                "report": dg.MetadataValue.md(summary),
                "peak_stage_memory_mb": round(float(total.max()), 1),
                "device_memory_mb": round(float(frame["device_mb"].min()), 1),
                "slowest_stage_ms": round(float((frame["forward_ms"] + frame["backward_ms"]).max()), 3),
            },
        ),
    )
