"""The executors `PPB_EXECUTOR` picks: in process, a process per step, or a Celery worker pool.

`in_process` (the default) and `multiprocess` are Dagster's own. `celery` is dagster-celery's
executor (the optional `cluster` extra, `pip install -e '.[cluster]'`), its broker and result
backend from the environment so that the runs and the workers (`python -m pipelines.celery_worker`)
agree: `PPB_CELERY_BROKER` (any Celery broker URL; `filesystem:///a/folder` is kombu's filesystem
transport with its queue in that folder: a one-machine try-out, no broker to run) and
`PPB_CELERY_BACKEND` (default: `file://<folder>/results` beside a filesystem broker, else `rpc://`).
dagster-celery is imported only when `celery` is asked for, so the rest of the project runs without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

EXECUTOR_ENV = "PPB_EXECUTOR"
CELERY_BROKER_ENV = "PPB_CELERY_BROKER"
CELERY_BACKEND_ENV = "PPB_CELERY_BACKEND"
FILESYSTEM = "filesystem://"
NAMES = ("in_process", "multiprocess", "celery")
# The queue dagster-celery routes every step to (dagster_celery.make_app: the "dagster" queue).
CELERY_QUEUE = "dagster"


def _setting(name: str) -> str:
    return dg.EnvVar(name).get_value("") or ""


def executor_name() -> str:
    """`$PPB_EXECUTOR`, checked: in_process when unset."""
    name = _setting(EXECUTOR_ENV) or "in_process"
    if name not in NAMES:
        raise ValueError(f"${EXECUTOR_ENV}={name!r}: expected one of {', '.join(NAMES)}")
    return name


def celery_app_args() -> dict[str, Any]:
    """The Celery app's arguments, the same for the executor and the workers: the broker, the result
    backend and, for a filesystem broker, the folders its messages and results go through."""
    broker = _setting(CELERY_BROKER_ENV)
    if not broker:
        raise ValueError(
            f"${EXECUTOR_ENV}=celery needs ${CELERY_BROKER_ENV} (a Celery broker URL, or filesystem:///dir)"
        )
    backend = _setting(CELERY_BACKEND_ENV)
    config: dict[str, Any] = {}
    if broker.startswith(FILESYSTEM):
        folder = Path(broker.removeprefix(FILESYSTEM) or ".").resolve()
        queue = folder / "queue"
        queue.mkdir(parents=True, exist_ok=True)
        # kombu.transport.filesystem: producers write to data_folder_out, consumers read data_folder_in;
        # one folder for both makes it one queue shared by the run and the workers; the exchange table
        # (control_folder, else ./control of each process) beside it.
        config["broker_transport_options"] = {
            "data_folder_in": str(queue),
            "data_folder_out": str(queue),
            "control_folder": str(folder / "control"),
        }
        broker = FILESYSTEM
        if not backend:
            (folder / "results").mkdir(parents=True, exist_ok=True)
            backend = f"file://{folder / 'results'}"  # celery.backends.filesystem
    return {"broker": broker, "backend": backend or "rpc://", "config_source": config}


def celery_executor() -> dg.ExecutorDefinition:
    """dagster-celery's executor with the broker and backend of the environment."""
    args = celery_app_args()
    try:
        from dagster_celery import celery_executor as executor
    except ImportError as err:
        raise ValueError(f"${EXECUTOR_ENV}=celery needs dagster-celery: pip install -e '.[cluster]'") from err
    return executor.configured(args, name="celery")


def executor() -> dg.ExecutorDefinition:
    """The code location's default: the chain is a line of quick stages, so in process unless asked."""
    name = executor_name()
    if name == "celery":
        return celery_executor()
    return dg.in_process_executor if name == "in_process" else dg.multiprocess_executor


def search_executor() -> dg.ExecutorDefinition:
    """The search job's: its shards side by side, in processes here or on the Celery workers."""
    return celery_executor() if executor_name() == "celery" else dg.multiprocess_executor
