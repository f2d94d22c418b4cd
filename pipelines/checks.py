"""Asset checks: blocking where a wrong table must not flow on to the stages after it.

Each check is one call to a `ppb_core.chain` predicate returning the problems it found. They are
partitioned like their assets (`partitions_def`, a preview feature of Dagster 1.13), so each
loads only the partition it checks.
"""

from collections.abc import Sequence

import dagster as dg
import pandas as pd

from pipelines.assets import (
    combined_descriptions,
    layer_descriptions,
    layer_walk,
    pipeline_plan,
    plan_report,
    scaled_descriptions,
    withdrawn_descriptions,
)
from pipelines.partitions import run_configs
from ppb_core import chain
from ppb_core.tables.schema import Summarized


def problems_result(problems: Sequence[str]) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"problems": len(problems), "details": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems))},
    )


@dg.asset_check(
    asset=layer_walk,
    blocking=True,
    partitions_def=run_configs,
    additional_ins={"run_config": dg.AssetIn("run_config")},
    description="Every sub-model walked whole (one HEAD, all body layers, one TAIL); no empty cell.",
)
def layer_walk_is_whole(layer_walk: pd.DataFrame, run_config: pd.DataFrame) -> dg.AssetCheckResult:
    return problems_result(chain.walk_problems(run_config, layer_walk))


SOUND = "No negative or missing figure; at least one body; every body offers the same options."


@dg.asset_check(asset=layer_descriptions, blocking=True, partitions_def=run_configs, description=SOUND)
def layer_descriptions_are_sound(layer_descriptions: pd.DataFrame) -> dg.AssetCheckResult:
    return problems_result(chain.description_problems(layer_descriptions))


@dg.asset_check(asset=combined_descriptions, blocking=True, partitions_def=run_configs, description=SOUND)
def combined_descriptions_are_sound(combined_descriptions: pd.DataFrame) -> dg.AssetCheckResult:
    return problems_result(chain.description_problems(combined_descriptions))


@dg.asset_check(asset=withdrawn_descriptions, blocking=True, partitions_def=run_configs, description=SOUND)
def withdrawn_descriptions_are_sound(withdrawn_descriptions: pd.DataFrame) -> dg.AssetCheckResult:
    return problems_result(chain.description_problems(withdrawn_descriptions))


@dg.asset_check(
    asset=scaled_descriptions,
    blocking=True,
    partitions_def=run_configs,
    additional_ins={"withdrawn_descriptions": dg.AssetIn("withdrawn_descriptions")},
    description=(
        "Sound as the other description tables, and every time is the withdrawn one over the first "
        "body's forward time, which becomes 1."
    ),
)
def scaled_relative_to_first_body(
    scaled_descriptions: pd.DataFrame, withdrawn_descriptions: pd.DataFrame
) -> dg.AssetCheckResult:
    return problems_result(
        chain.description_problems(scaled_descriptions)
        + chain.scaling_problems(withdrawn_descriptions, scaled_descriptions)
    )


@dg.asset_check(
    asset=pipeline_plan,
    blocking=True,
    partitions_def=run_configs,
    additional_ins={"run_config": dg.AssetIn("run_config")},
    description="A plan exists, places every body layer, and every stage fits the run config's device memory.",
)
def plan_fits_the_device(pipeline_plan: Summarized, run_config: pd.DataFrame) -> dg.AssetCheckResult:
    return problems_result(chain.plan_problems(run_config, pipeline_plan))


@dg.asset_check(
    asset=plan_report,
    partitions_def=run_configs,
    description="The memory model, evaluating the plan layer by layer, agrees that every stage fits (a warning).",
)
def memory_model_agrees_the_plan_fits(plan_report: Summarized) -> dg.AssetCheckResult:
    result = problems_result(chain.report_problems(plan_report))
    return dg.AssetCheckResult(passed=result.passed, metadata=result.metadata, severity=dg.AssetCheckSeverity.WARN)


ALL_CHECKS = [
    layer_walk_is_whole,
    layer_descriptions_are_sound,
    combined_descriptions_are_sound,
    withdrawn_descriptions_are_sound,
    scaled_relative_to_first_body,
    plan_fits_the_device,
    memory_model_agrees_the_plan_fits,
]
