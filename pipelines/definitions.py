"""The ppb code location: `dagster dev -w workspace.yaml`, or `-m pipelines.definitions`."""

from __future__ import annotations

import os

import dagster as dg

from pipelines.assets import ALL_ASSETS
from pipelines.assets.search import search_resources, search_spec_sensor, strategy_search, strategy_search_job
from pipelines.checks import ALL_CHECKS
from pipelines.io_managers import ParquetIOManager
from pipelines.jobs import chain_job, register_job
from pipelines.resources import RunConfigs
from pipelines.schedules import nightly_reestimate
from pipelines.sensors import run_config_sensor


def resources(storage_dir: str = "", config_dir: str = "", search_dir: str = "") -> dict[str, object]:
    """The resources every stage needs; empty folders mean the defaults (see `pipelines.resources`)."""
    return {
        "io_manager": ParquetIOManager(base_dir=storage_dir),
        "run_configs": RunConfigs(config_dir=config_dir),
        **search_resources(search_dir, storage_dir),
    }


# The chain is a line of quick stages: a process per step (multiprocess) costs more than the steps,
# so runs execute in process unless PPB_EXECUTOR says otherwise (deploy/README.md: scaling out).
EXECUTORS = {"in_process": dg.in_process_executor, "multiprocess": dg.multiprocess_executor}
EXECUTOR_ENV = "PPB_EXECUTOR"


def executor() -> dg.ExecutorDefinition:
    name = os.environ.get(EXECUTOR_ENV, "in_process")
    if name not in EXECUTORS:
        raise ValueError(f"${EXECUTOR_ENV}={name!r}: expected one of {', '.join(EXECUTORS)}")
    return EXECUTORS[name]


defs = dg.Definitions(
    assets=[*ALL_ASSETS, strategy_search],
    asset_checks=ALL_CHECKS,
    jobs=[chain_job, register_job, strategy_search_job],
    schedules=[nightly_reestimate],
    sensors=[run_config_sensor, search_spec_sensor],
    resources=resources(),
    executor=executor(),
)


def search_job() -> dg.JobDefinition:
    """The search job with this module's resources (folders from the PPB_* variables): what
    `dagster.reconstructable` points each step's process at to run it with the multiprocess executor."""
    return defs.resolve_job_def("search_strategies")
