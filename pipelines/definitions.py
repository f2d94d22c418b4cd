"""The ppb code location: `dagster dev -w workspace.yaml`, or `-m pipelines.definitions`."""

from __future__ import annotations

import dagster as dg

from pipelines.assets import ALL_ASSETS
from pipelines.assets.search import (
    SEARCH_DIR_ENV,
    search_resources,
    search_spec_sensor,
    strategy_search,
    strategy_search_job,
)
from pipelines.automation import automation_sensor
from pipelines.io_managers import ParquetIOManager
from pipelines.jobs import observe_job, register_job
from pipelines.resources import CONFIG_DIR_ENV, STORAGE_DIR_ENV, RunConfigs, SettingError, env_setting
from pipelines.sensors import run_config_sensor


def resources(storage_dir: str = "", config_dir: str = "", search_dir: str = "") -> dict[str, object]:
    """The resources every stage needs; empty folders mean the project's (see `pipelines.resources`)."""
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
    name = dg.EnvVar(EXECUTOR_ENV).get_value("in_process") or "in_process"
    if name not in EXECUTORS:
        raise SettingError(f"${EXECUTOR_ENV}={name!r}: expected one of {', '.join(EXECUTORS)}")
    return EXECUTORS[name]


def definitions(storage_dir: str = "", config_dir: str = "", search_dir: str = "") -> dg.Definitions:
    """Every asset, job and sensor, with the resources reading and writing these folders."""
    return dg.Definitions(
        assets=[*ALL_ASSETS, strategy_search],
        jobs=[observe_job, register_job, strategy_search_job],
        sensors=[run_config_sensor, automation_sensor, search_spec_sensor],
        resources=resources(storage_dir, config_dir, search_dir),
        executor=executor(),
    )


defs = definitions(env_setting(STORAGE_DIR_ENV), env_setting(CONFIG_DIR_ENV), env_setting(SEARCH_DIR_ENV))


def search_job() -> dg.JobDefinition:
    """The search job with this module's resources (folders from the PPB_* variables): what
    `dagster.reconstructable` points each step's process at to run it with the multiprocess executor."""
    return defs.resolve_job_def("search_strategies")
