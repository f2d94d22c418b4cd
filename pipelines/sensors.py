"""The sensor that keeps one partition per run config and observes a file when it changes.

On each tick it hashes every `configs/*.yaml` (with the files each names): a new file adds a
partition, a file gone removes its partition (its stored tables stay on disk), and a file whose
hash differs from the one the sensor saw on its last tick is observed (a run of
`observe_run_config_files` for that partition), which records the hash as the file's data
version; the automation sensor then rebuilds what depends on it. The first tick only records the
hashes: starting Dagster is no change, and launches nothing. A file that cannot be read is hashed
by its problem, so it stays a partition whose run says what is wrong; the sensor never fails on it.
"""

import json

import dagster as dg

from pipelines.automation import SENSOR_INTERVAL_S
from pipelines.jobs import observe_job
from pipelines.partitions import PARTITIONS_NAME, partition_changes
from pipelines.partitions import run_configs as config_partitions
from pipelines.resources import RunConfigs


@dg.sensor(
    job=observe_job,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="One partition per run config file; an observation of a file whose contents changed.",
)
def run_config_sensor(context: dg.SensorEvaluationContext, run_configs: RunConfigs) -> dg.SensorResult:
    hashes = run_configs.hashes()
    first_tick = context.cursor is None
    last_seen = json.loads(context.cursor) if context.cursor else {}
    changes = partition_changes(hashes, context.instance.get_dynamic_partitions(PARTITIONS_NAME), last_seen)
    requests = [
        dg.RunRequest(
            run_key=f"{key}:{hashes[key]}",
            partition_key=key,
            tags={"ppb/run_config": key, "ppb/trigger": "new file" if key not in last_seen else "file changed"},
        )
        for key in ([] if first_tick else changes.changed)
    ]
    partition_requests = []
    if changes.added:
        partition_requests.append(config_partitions.build_add_request(list(changes.added)))
    if changes.removed:
        partition_requests.append(config_partitions.build_delete_request(list(changes.removed)))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=partition_requests,
        cursor=json.dumps(hashes, sort_keys=True),
    )
