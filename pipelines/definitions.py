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
from pipelines.executors import executor
from pipelines.io_managers import ParquetIOManager
from pipelines.jobs import observe_job, register_job
from pipelines.resources import CONFIG_DIR_ENV, STORAGE_DIR_ENV, RunConfigs, env_setting
from pipelines.sensors import run_config_sensor


def resources(storage_dir: str = "", config_dir: str = "", search_dir: str = "") -> dict[str, object]:
    """The resources every stage needs; empty folders mean the project's (see `pipelines.resources`)."""
    return {
        "io_manager": ParquetIOManager(base_dir=storage_dir),
        "run_configs": RunConfigs(config_dir=config_dir),
        **search_resources(search_dir, storage_dir),
    }


def definitions(storage_dir: str = "", config_dir: str = "", search_dir: str = "") -> dg.Definitions:
    """Every asset, job and sensor, with the resources reading and writing these folders."""
    return dg.Definitions(
        assets=[*ALL_ASSETS, strategy_search],
        jobs=[observe_job, register_job, strategy_search_job()],
        sensors=[run_config_sensor, automation_sensor, search_spec_sensor],
        resources=resources(storage_dir, config_dir, search_dir),
        # the chain is a line of quick stages: in process unless PPB_EXECUTOR says otherwise (deploy/README.md)
        executor=executor(),
    )


defs = definitions(env_setting(STORAGE_DIR_ENV), env_setting(CONFIG_DIR_ENV), env_setting(SEARCH_DIR_ENV))


def search_job() -> dg.JobDefinition:
    """The search job with the resources and executor the PPB_* variables say now: what
    `dagster.reconstructable` points each step's process (or Celery worker) at to run it."""
    settings = (env_setting(STORAGE_DIR_ENV), env_setting(CONFIG_DIR_ENV), env_setting(SEARCH_DIR_ENV))
    return definitions(*settings).resolve_job_def("search_strategies")
