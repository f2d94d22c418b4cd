"""`ppb plan RUN.yaml -o OUT_DIR`: the whole chain without Dagster, every table written as Parquet.

The files are the ones the Dagster assets write (`OUT_DIR/<stage>/<run config stem>.parquet`, and
each stage's artifacts beside its table), byte for byte. Every stage runs before anything is
written, so bad input writes nothing.
"""

from __future__ import annotations

import argparse
import time

from rich.table import Table

from ppb_core import chain
from ppb_core.cli.console import table_console
from ppb_core.errors import InputError
from ppb_core.tables.schema import rows_of


def run(args: argparse.Namespace) -> int:
    stages = [step.name for step in chain.STAGES]
    if args.until is not None and args.until not in stages:
        raise InputError(None, "--until", f"no stage {args.until!r} (stages: {', '.join(stages)})")
    if not args.time_limit > 0:
        raise InputError(None, "--time-limit", f"must be positive, got {args.time_limit}")
    started = time.perf_counter()
    tables = chain.run_chain(args.run, until=args.until, settings={"pipeline_plan": {"time_limit_s": args.time_limit}})
    elapsed_ms = (time.perf_counter() - started) * 1000
    key = chain.partition_key(args.run)
    table = Table(title=f"ppb plan {key}: {len(tables)} stages in {elapsed_ms:.0f} ms, written under {args.out}")
    table.add_column("stage")
    table.add_column("rows", justify="right")
    table.add_column("files")
    for name, frame in tables.items():
        written = chain.write_stage(args.out, name, key, frame)
        table.add_row(name, str(len(rows_of(frame))), " ".join(f"{name}/{path.name}" for path in written))
    table_console().print(table)
    return 0
