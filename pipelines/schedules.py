"""Nightly re-estimation: one run per stale partition, none for the fresh ones.

`pipelines.freshness.Staleness` decides (its docstring says exactly how): Dagster's own stale
status of every stage asset in the partition, plus the run config's content hash against the
one run_config was last read from.
"""

import os

import dagster as dg

from pipelines.freshness import Staleness
from pipelines.jobs import chain_job
from pipelines.partitions import PARTITIONS_NAME
from pipelines.resources import RunConfigs

NIGHTLY_CRON = os.environ.get("PPB_NIGHTLY_CRON", "0 2 * * *")
NIGHTLY_TIMEZONE = os.environ.get("PPB_NIGHTLY_TIMEZONE", "UTC")


@dg.schedule(
    job=chain_job,
    cron_schedule=NIGHTLY_CRON,
    execution_timezone=NIGHTLY_TIMEZONE,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Re-estimate every run config whose inputs or code changed since it was last built.",
)
def nightly_reestimate(context: dg.ScheduleEvaluationContext, run_configs: RunConfigs):
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    hashes = run_configs.hashes()
    staleness = Staleness(context.instance, context.repository_def.asset_graph)
    requests = []
    for key in sorted(context.instance.get_dynamic_partitions(PARTITIONS_NAME)):
        if key not in hashes:
            continue  # the file is gone; the sensor removes the partition
        reasons = staleness.reasons(key, hashes[key])
        if reasons:
            context.log.info(f"{key}: {'; '.join(reasons)}")
            requests.append(
                dg.RunRequest(
                    partition_key=key,
                    run_key=f"nightly:{day}:{key}",
                    tags={"ppb/run_config": key, "ppb/trigger": "nightly", "ppb/stale": reasons[0][:200]},
                )
            )
    return requests or dg.SkipReason("every partition is fresh")
