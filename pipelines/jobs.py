"""The jobs: observing the run config files, and registering them as partitions (what the sensor does)."""

import dagster as dg

from pipelines.partitions import PARTITIONS_NAME, partition_changes
from pipelines.resources import RunConfigs

observe_job = dg.define_asset_job(
    "observe_run_config_files",
    selection=dg.AssetSelection.assets("run_config_file"),
    description="Record the content hash of run config files as their data version (one partition, or every file).",
)


@dg.op(description="Add a partition for each run config file, remove those whose file is gone.")
def sync_run_config_partitions(context: dg.OpExecutionContext, run_configs: RunConfigs) -> None:
    files = run_configs.hashes()
    changes = partition_changes(files, context.instance.get_dynamic_partitions(PARTITIONS_NAME), {})
    if changes.added:
        context.instance.add_dynamic_partitions(PARTITIONS_NAME, list(changes.added))
    for key in changes.removed:
        context.instance.delete_dynamic_partition(PARTITIONS_NAME, key)
    context.log.info(f"partitions: {sorted(files)}; added {list(changes.added)}, removed {list(changes.removed)}")


@dg.job(name="register_run_configs", description="Bring the partitions in line with configs/ (what the sensor does).")
def register_job() -> None:
    sync_run_config_partitions()
