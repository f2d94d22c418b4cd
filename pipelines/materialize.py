"""`python -m pipelines RUN_CONFIG...`: build run configs through Dagster, then say what happened.

For each run config (its file stem under configs/, or under PPB_CONFIG_DIR's folder; or the path of a
file there), the partition is registered and every stage materialized in one run, recorded in the
Dagster instance at $DAGSTER_HOME, where `dagster dev` shows it with its whole log. The terminal gets
what a person wants to know: whether each stage of the plan fits, the plan's iteration time and gain,
and where the report is; or the one line that says what went wrong.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
from upath import UPath

from pipelines.assets import ALL_ASSETS, STAGE_ASSETS
from pipelines.checks import BAD_INPUT
from pipelines.definitions import defs
from pipelines.partitions import PARTITIONS_NAME
from pipelines.resources import CONFIG_DIR_ENV, PROJECT_ROOT, STORAGE_DIR_ENV, RunConfigs, storage_location
from ppb_core import chain
from ppb_core.cli.arguments import EXIT_BAD_INPUT, OneLineParser
from ppb_core.errors import InputError
from ppb_core.io import check_output
from ppb_core.report.render import console_summary
from ppb_core.tables.schema import Summarized

PROG = "python -m pipelines"
EXIT_FAILED = 1
# The run's events stay in the instance (the UI shows them); the terminal gets the summary, and on a
# terminal the solve's steps as they go (the plan asset logs them at INFO, Dagster's own events are DEBUG).
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
STEPS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
HOME_HINT = "DAGSTER_HOME is not set: Dagster keeps its runs there (export DAGSTER_HOME=$PWD/dagster_home)"


def storage_problem(setting: str) -> str | None:
    """What is wrong with the storage $PPB_STORAGE_DIR names, said before a run: a folder that cannot be written
    (`/proc/x`, a file) failed the run's first stage with an OSError, a URL of no fsspec filesystem with "the run
    failed"; None when it can be used (a URL's own permissions are its store's to say, at the first write)."""
    location = storage_location(setting)
    where = f"${STORAGE_DIR_ENV}={setting!r}" if setting else "storage/"
    if "://" in location:
        protocol = location.split("://", 1)[0]
        try:
            UPath(location)
        except (ValueError, ImportError) as err:
            return f"{where}: no filesystem for {protocol}:// ({last_line(str(err))})"
        return None
    try:
        check_output(location, folder=True)
    except InputError as err:
        return f"{where}: {err.problem}"
    return None


def error(line: str) -> None:
    print(f"{PROG}: error: {line}", file=sys.stderr)


def last_line(message: str) -> str:
    """The last line of an exception's message that says something: pydantic's end with a link to
    its docs ("For further information visit https://errors.pydantic.dev/..."), which was all it said."""
    said = [line.strip() for line in message.splitlines() if line.strip()]
    said = [line for line in said if not line.startswith("For further information")]
    return said[-1] if said else "failed"


def failure_line(result: dg.ExecuteInProcessResult) -> tuple[str, bool]:
    """The run's first failure in one line, and whether it is bad input (the run config's)."""
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            if data.user_failure_data and data.user_failure_data.description:
                marked = data.user_failure_data.metadata.get(BAD_INPUT)
                bad_input = event.step_key == "run_config" or bool(marked is not None and marked.value)
                return f"{event.step_key}: {data.user_failure_data.description}", bad_input
            error = data.error
            while error is not None and error.cause is not None:  # the exception the stage raised
                error = error.cause
            message = last_line(error.message) if error is not None else "failed"
            return f"{event.step_key}: {message}", False
    return "the run failed", False


def build(instance: dg.DagsterInstance, key: str, time_limit_s: float | None, steps: bool = False) -> int:
    """One run config through every stage; its summary printed (with *steps*, the solve's steps
    before it). The exit status."""
    if not instance.has_dynamic_partition(PARTITIONS_NAME, key):
        instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
    started = time.perf_counter()
    result = dg.materialize(
        ALL_ASSETS,
        selection=STAGE_ASSETS,
        partition_key=key,
        instance=instance,
        resources=defs.resources,
        run_config={
            **(STEPS if steps else QUIET),
            "ops": {"pipeline_plan": {"config": {"time_limit_s": time_limit_s}}},
        },
        tags={"ppb/run_config": key, "ppb/trigger": PROG},
        raise_on_error=False,
    )
    if not result.success:
        line, bad_input = failure_line(result)
        error(f"{key}: {line} (run {result.run_id[:8]})")
        return EXIT_BAD_INPUT if bad_input else EXIT_FAILED
    report = result.output_for_node("plan_report")
    assert isinstance(report, Summarized)
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == "plan_report"]
    report_path = event.materialization.metadata["file.md"].value
    print(
        f"{key}: {len(STAGE_ASSETS)} tables in {time.perf_counter() - started:.1f} s (Dagster run {result.run_id[:8]})"
    )
    for line in console_summary(report, report_path):
        print(f"  {line}")
    return 0


def partition_of(given: str, found: dict[str, Path]) -> str:
    """The partition a run config argument names: its stem, or the path of one of the folder's files
    (`configs/llama3-8b.yaml`, as `ppb` takes it; it was looked up as `configs/configs/llama3-8b.yaml.yaml`)."""
    if given.endswith((".yaml", ".yml")):
        for key, path in found.items():
            if Path(given).resolve() == path.resolve():
                return key
    return given


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "keys",
        nargs="+",
        metavar="RUN_CONFIG",
        help="a run config's name: its file stem under configs/ (PPB_CONFIG_DIR sets the folder), or the path of "
        "a file there",
    )
    parser.add_argument(
        "-t",
        "--time-limit",
        type=float,
        default=chain.PLAN_TIME_LIMIT_S,
        metavar="SECONDS",
        help="a wall-clock limit on the balancer's search, a last-resort safety net (default: none; it ends on "
        "deterministic work limits)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="on a terminal too, the summary alone")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):  # as ppb plan
        error(f"--time-limit: must be a positive number of seconds, got {args.time_limit}")
        return EXIT_BAD_INPUT
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        error(HOME_HINT)
        return EXIT_BAD_INPUT
    run_configs = RunConfigs(config_dir=dg.EnvVar(CONFIG_DIR_ENV).get_value("") or "")
    found = run_configs.discover()
    keys = [partition_of(key, found) for key in args.keys]
    for key in keys:
        if key not in found:
            named = key if key.endswith((".yaml", ".yml")) else run_configs.path(key)
            if key.endswith((".yaml", ".yml")) and Path(key).is_file():  # a run config outside the folder
                error(
                    f"{key}: not under {run_configs.directory()}, the run configs' folder: copy it there, or set "
                    f"{CONFIG_DIR_ENV} to its folder"
                )
                return EXIT_BAD_INPUT
            error(
                f"{named}: no such run config: give a file stem under {run_configs.directory()} "
                f"(found: {', '.join(found) or 'none'}; {CONFIG_DIR_ENV} sets the folder)"
            )
            return EXIT_BAD_INPUT  # before the instance is made: nothing written
    problem = storage_problem(dg.EnvVar(STORAGE_DIR_ENV).get_value("") or "")
    if problem:
        error(problem)
        return EXIT_BAD_INPUT  # before the instance is made: nothing written
    if not Path(home).exists():  # a new instance, set as the project's (telemetry off, one solve at a time)
        Path(home).mkdir(parents=True)
        shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", Path(home) / "dagster.yaml")
    status = 0
    with dg.DagsterInstance.get() as instance:
        for key in keys:
            steps = not args.quiet and sys.stderr.isatty()  # long solves show their progress
            status = max(status, build(instance, key, args.time_limit, steps))
    return status
