"""The sensor that keeps one partition per run config and rebuilds a partition when its file changes.

On each tick it hashes every `configs/*.yaml` (with the files each names): a new file adds a
partition, a file gone removes its partition (its stored tables stay on disk), and a hash that
differs from the one the sensor last saw is recorded as the file's new data version and, unless
the partition's run_config was already built from that very hash, requests a run of the chain.
The cursor holds the hashes last seen.
"""

import json

import dagster as dg

from pipelines.freshness import built_from, latest_materialization
from pipelines.jobs import chain_job, file_observation
from pipelines.partitions import PARTITIONS_NAME, partition_changes
from pipelines.partitions import run_configs as config_partitions
from pipelines.resources import RunConfigs


@dg.sensor(
    job=chain_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="One partition per run config; a run when a config's content hash changes.",
)
def run_config_sensor(context: dg.SensorEvaluationContext, run_configs: RunConfigs) -> dg.SensorResult:
    hashes = run_configs.hashes()
    last_seen = json.loads(context.cursor) if context.cursor else {}
    changes = partition_changes(hashes, context.instance.get_dynamic_partitions(PARTITIONS_NAME), last_seen)
    requests = [
        dg.RunRequest(
            partition_key=key,
            tags={
                "ppb/run_config": key,
                "ppb/trigger": "new run config" if key in changes.added else "run config changed",
                "ppb/config_hash": hashes[key][:16],
            },
        )
        for key in changes.changed
        if built_from(latest_materialization(context.instance, "run_config", key)) != hashes[key]
    ]
    partition_requests = []
    if changes.added:
        partition_requests.append(config_partitions.build_add_request(list(changes.added)))
    if changes.removed:
        partition_requests.append(config_partitions.build_delete_request(list(changes.removed)))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=partition_requests,
        asset_events=[file_observation(key, hashes[key]) for key in changes.changed],
        cursor=json.dumps(hashes, sort_keys=True),
    )
