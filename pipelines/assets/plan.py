"""The balancer's plan, and the report a person looks at instead of reading it.

The plan's own page shows the report (its chart and summary): the plan is evaluated by the
memory and time models there too, so nobody has to open `plan_report` to see whether it fits.
"""

import dagster as dg
import pandas as pd
from pydantic import Field

from pipelines.assets.common import rounded, stage_asset, table_metadata
from pipelines.checks import MEMORY_MODEL_AGREES_THE_PLAN_FITS, PLAN_FITS_THE_DEVICE, checked, verdict
from ppb_core import chain, limits
from ppb_core.balance.progress import log_lines
from ppb_core.report.render import embedded_markdown
from ppb_core.tables.report import stage_memory_mb
from ppb_core.tables.schema import Summarized

# The solver runs in this pool: `concurrency.pools.default_limit` in dagster.yaml bounds how many
# solves run at once on the instance (each takes a core until its work limits end it).
SOLVER_POOL = "ppb_solver"


class PlanConfig(dg.Config):
    time_limit_s: float | None = Field(
        default=chain.PLAN_TIME_LIMIT_S,
        gt=0,
        description="a wall-clock limit on the balancer's search, a last-resort safety net (none: it ends on "
        "deterministic work limits, the same plan on any machine)",
    )
    work: float = Field(
        default=1.0,
        gt=0,
        le=limits.BALANCE_WORK,
        description="a multiple of the balancer's deterministic work limits (`ppb balance --work`)",
    )


def plan_figures(plan: dict) -> dict[str, object]:
    """The plan's headline figures, rounded as a person reads them."""
    figures: dict[str, object] = {"solver_status": plan["status"]}
    if plan.get("gap") is not None:
        figures["gap"] = rounded(plan["gap"], 4)
    iteration, uniform = plan.get("iteration"), plan.get("baseline_iteration")
    if iteration:  # by the time model, in seconds (the solver's objective is in its own time unit)
        figures["iteration_s"] = rounded(iteration["seconds"])
        figures["tokens_per_s_per_device"] = rounded(iteration["tokens_per_second_per_device"], 0)
        figures["mfu"] = rounded(iteration["mfu"])
    if uniform:
        figures["best_uniform_iteration_s"] = rounded(uniform["seconds"])
    if plan.get("peak_memory_mb") is not None:
        figures["peak_stage_memory_mb"] = rounded(plan["peak_memory_mb"], 1)
        figures["device_memory_mb"] = rounded(plan["input"]["memory_mb"], 1)
        figures["speedup_over_uniform"] = rounded(plan["speedup"]) if plan.get("speedup") else 0.0
        figures["mindformers_yaml"] = dg.MetadataValue.md(
            "\n".join(
                f"    {key}: {plan[key]}"
                for key in ("offset", "recompute", "select_recompute", "select_comm_recompute")
            )
        )
    if plan.get("message"):
        figures["message"] = plan["message"]
    return figures


@stage_asset(
    "pipeline_plan",
    kinds={"python", "pandas", "parquet", "highs"},
    pool=SOLVER_POOL,
    check_specs=[PLAN_FITS_THE_DEVICE],
)
def pipeline_plan(
    context: dg.AssetExecutionContext, config: PlanConfig, run_config: pd.DataFrame, scaled_descriptions: pd.DataFrame
):
    # The solve's steps (incumbent, bound, gap) in the run's log as they happen: a long solve shows progress.
    stored = chain.pipeline_plan(
        run_config,
        scaled_descriptions,
        time_limit_s=config.time_limit_s,
        progress=log_lines(context.log.info),
        work=config.work,
    )
    # no plan fits (the run config's device is too small for it) or none was found within the limits (raise
    # them): bad input as `ppb balance` says
    no_plan = stored.summary["status"] == "infeasible" or stored.frame.empty
    yield from checked(PLAN_FITS_THE_DEVICE, chain.plan_problems(run_config, stored), bad_input=no_plan)
    report = chain.plan_report(run_config, stored)
    yield dg.Output(
        stored,
        metadata=table_metadata(
            stored.frame.drop(columns="cells_json"),
            {"report": dg.MetadataValue.md(embedded_markdown(report)), **plan_figures(dict(stored.summary))},
        ),
    )


@stage_asset(
    "plan_report", kinds={"python", "pandas", "parquet", "matplotlib"}, check_specs=[MEMORY_MODEL_AGREES_THE_PLAN_FITS]
)
def plan_report(run_config: pd.DataFrame, pipeline_plan: Summarized):
    stored = chain.plan_report(run_config, pipeline_plan)
    frame = stored.frame
    yield verdict(MEMORY_MODEL_AGREES_THE_PLAN_FITS, chain.report_problems(stored), warn=True)
    files = chain.stage_artifacts("plan_report", stored)
    yield dg.Output(
        stored,
        metadata=table_metadata(
            frame,
            {
                "report": dg.MetadataValue.md(embedded_markdown(stored, files)),
                "peak_stage_memory_mb": rounded(stage_memory_mb(frame).max(), 1),
                "device_memory_mb": rounded(frame["device_mb"].min(), 1),
                "slowest_stage_ms": rounded((frame["forward_ms"] + frame["backward_ms"]).max()),
                **{
                    name: rounded(stored.summary[key])
                    for name, key in (
                        ("iteration_s", "iteration_s"),
                        ("best_uniform_iteration_s", "baseline_iteration_s"),
                        ("megatron_flags_iteration_s", "megatron_iteration_s"),  # a plan Megatron cannot say
                    )
                    if stored.summary.get(key) is not None
                },
            },
        ),
    )
