"""Every stage asset of the chain, in chain order, plus the run config files they read."""

from pipelines.assets.config import layer_walk, run_config, run_config_file
from pipelines.assets.descriptions import (
    combined_descriptions,
    layer_descriptions,
    scaled_descriptions,
    switch_profiles,
    withdrawn_descriptions,
)
from pipelines.assets.estimate import layer_memory, layer_times
from pipelines.assets.plan import pipeline_plan, plan_report

STAGE_ASSETS = [
    run_config,
    layer_walk,
    layer_memory,
    layer_times,
    switch_profiles,
    layer_descriptions,
    combined_descriptions,
    withdrawn_descriptions,
    scaled_descriptions,
    pipeline_plan,
    plan_report,
]
ALL_ASSETS = [run_config_file, *STAGE_ASSETS]

__all__ = [
    "ALL_ASSETS",
    "STAGE_ASSETS",
    "combined_descriptions",
    "layer_descriptions",
    "layer_memory",
    "layer_times",
    "layer_walk",
    "pipeline_plan",
    "plan_report",
    "run_config",
    "run_config_file",
    "scaled_descriptions",
    "switch_profiles",
    "withdrawn_descriptions",
]
