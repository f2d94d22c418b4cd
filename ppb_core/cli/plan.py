"""`ppb plan RUN.yaml -o OUT_DIR`: the whole chain without Dagster, every table written as Parquet.

The files are the ones the Dagster assets write (`OUT_DIR/<stage>/<run config stem>.parquet`, and
each stage's artifacts beside its table), byte for byte. Every stage runs before anything is
written, so bad input writes nothing.
"""

from __future__ import annotations

import argparse
import math
import time

from ppb_core import chain
from ppb_core.errors import InputError
from ppb_core.io import check_output


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="run every stage for a run config and write each table as Parquet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", metavar="RUN.yaml", help="the run config")
    parser.add_argument("-o", "--out", metavar="OUT_DIR", default="out", help="output folder (default: out)")
    parser.add_argument(
        "--until", choices=[step.name for step in chain.STAGES], help="stop after this stage (default: all)"
    )
    parser.add_argument(
        "-t",
        "--time-limit",
        type=float,
        default=chain.PLAN_TIME_LIMIT_S,
        metavar="SECONDS",
        help=f"seconds the balancer may search (default {chain.PLAN_TIME_LIMIT_S:g})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ppb_core.cli.console import table_console

    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise InputError(None, "--time-limit", f"must be a positive number of seconds, got {args.time_limit}")
    check_output(args.out, folder=True)
    started = time.perf_counter()
    tables = chain.run_chain(args.run, until=args.until, settings={"pipeline_plan": {"time_limit_s": args.time_limit}})
    elapsed_ms = (time.perf_counter() - started) * 1000
    key = chain.partition_key(args.run)
    table = Table(title=f"ppb plan {key}: {len(tables)} stages in {elapsed_ms:.0f} ms, written under {args.out}")
    table.add_column("stage")
    table.add_column("rows", justify="right")
    table.add_column("files")
    written = chain.write_stages(args.out, key, tables)  # all or nothing
    for name, frame in tables.items():
        table.add_row(name, str(len(frame)), " ".join(f"{name}/{path.name}" for path in written[name]))
    table_console().print(table)
    return 0
