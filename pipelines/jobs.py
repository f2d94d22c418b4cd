"""The chain job (every stage of one partition) and the job that registers run configs as partitions."""

import dagster as dg

from pipelines.partitions import PARTITIONS_NAME, partition_changes
from pipelines.resources import RunConfigs
from ppb_core import chain

chain_job = dg.define_asset_job(
    "ppb_chain",
    selection=dg.AssetSelection.assets(*(step.name for step in chain.STAGES)),
    description="Every stage of the chain for one run config, its checks included.",
)


def file_observation(key: str, digest: str) -> dg.AssetObservation:
    """The run config file's content hash, recorded as its data version."""
    return dg.AssetObservation(
        asset_key="run_config_file",
        partition=key,
        tags={"dagster/data_version": digest},
        metadata={"config_hash": digest},
    )


@dg.op(description="Add a partition for each run config file, remove those whose file is gone.")
def sync_run_config_partitions(context: dg.OpExecutionContext, run_configs: RunConfigs) -> None:
    hashes = run_configs.hashes()
    changes = partition_changes(hashes, context.instance.get_dynamic_partitions(PARTITIONS_NAME), {})
    if changes.added:
        context.instance.add_dynamic_partitions(PARTITIONS_NAME, list(changes.added))
    for key in changes.removed:
        context.instance.delete_dynamic_partition(PARTITIONS_NAME, key)
    for key, digest in hashes.items():
        context.log_event(file_observation(key, digest))
    context.log.info(f"partitions: {sorted(hashes)}; added {list(changes.added)}, removed {list(changes.removed)}")


@dg.job(name="register_run_configs", description="Bring the partitions in line with configs/ (what the sensor does).")
def register_job() -> None:
    sync_run_config_partitions()
