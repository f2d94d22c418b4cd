"""A Celery worker that runs the steps `PPB_EXECUTOR=celery` sends: `python -m pipelines.celery_worker [OPTIONS]`.

The app is dagster-celery's (`dagster_celery.make_app`, its `execute_plan` task on the `dagster`
queue) with the broker and backend of `pipelines.executors.celery_app_args`, read from the same
`PPB_CELERY_*` variables as the runs, so both ends meet. Extra arguments go to `celery worker`
(`--hostname shard1@%h`, `--loglevel WARNING`); `celery -A pipelines.celery_worker worker
-Q dagster` is the same worker. Each step runs in the worker's process with the code of this
checkout, so every machine needs the project installed and the shared `PPB_STORAGE_DIR`,
`PPB_SEARCH_DIR` and Dagster instance (deploy/README.md).
"""

from __future__ import annotations

import sys

from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from pipelines.executors import CELERY_QUEUE, celery_app_args

# A step runs in the worker's own process, one at a time (Celery's solo pool): a shard balances each
# strategy in a process of its own (ppb_core.search.rank), which the default prefork pool forbids (its
# children are daemons, and daemons may not start processes), and Dagster's capture of a step's output
# is per process, so the threads pool hangs with two steps in one process. Start one worker per step to
# run side by side (per core); `--pool` given on the command line wins.
POOL = ("--pool", "solo")
app = make_app(CeleryExecutor.for_cli(**celery_app_args()).app_args())
execute_plan = create_task(app)


def main(argv: list[str] | None = None) -> None:
    """Start the worker on the `dagster` queue, one step fetched at a time (dagster-celery's own setting)."""
    options = sys.argv[1:] if argv is None else argv
    app.worker_main(["worker", "--queues", CELERY_QUEUE, "--prefetch-multiplier=1", "--loglevel=INFO", *POOL, *options])


if __name__ == "__main__":
    main()
