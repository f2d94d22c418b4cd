"""`ppb plan RUN.yaml -o OUT_DIR`: the whole chain without Dagster, every table written as Parquet.

The files are the ones the Dagster assets write (`OUT_DIR/<stage>/<run config stem>.parquet`, and
each stage's artifacts beside its table), byte for byte. Every stage runs before anything is
written, so bad input writes nothing.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ppb_core import chain, limits
from ppb_core.cli.console import chain_progress, table_console
from ppb_core.errors import InputError, shown
from ppb_core.io import check_output, remove_stale_temporaries
from ppb_core.report.render import console_summary
from ppb_core.tables.schema import Summarized, rows_of
from ppb_core.units import counted


def wall_time(seconds: float) -> str:
    """Wall time as a person reads it: ms below a second, seconds above (91.0 s, not 91013 ms)."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:,.1f} s"


def run(args: argparse.Namespace) -> int:
    stages = [step.name for step in chain.STAGES]
    if args.until is not None and args.until not in stages:
        raise InputError(None, "--until", f"no stage {shown(args.until)} (stages: {', '.join(stages)})")
    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise InputError(None, "--time-limit", f"must be a positive number of seconds, got {args.time_limit}")
    if not (math.isfinite(args.work) and 0 < args.work <= limits.BALANCE_WORK):
        most = limits.BALANCE_WORK
        raise InputError(None, "--work", f"must be a positive multiple of at most {most:g}, got {args.work}")
    check_output(args.out, folder=True)
    started = time.perf_counter()
    with chain_progress(args.quiet) as (starting, hook):
        settings = {"pipeline_plan": {"time_limit_s": args.time_limit, "progress": hook, "work": args.work}}
        tables = chain.run_chain(args.run, until=args.until, settings=settings, starting=starting)
    key = chain.partition_key(args.run)
    elapsed = wall_time(time.perf_counter() - started)
    table = Table(title=f"ppb plan {key}: {counted(len(tables), 'stage')} in {elapsed}, written under {args.out}")
    table.add_column("stage")
    table.add_column("rows", justify="right")
    table.add_column("files")
    for name in stages:  # only ppb's own folders: OUT_DIR may hold anything else
        remove_stale_temporaries(Path(args.out) / name)
    written = chain.write_stages(args.out, key, tables)  # all or nothing
    for name, frame in tables.items():
        table.add_row(name, str(len(rows_of(frame))), " ".join(f"{name}/{path.name}" for path in written[name]))
    console = table_console()
    console.print(table)
    report = tables.get("plan_report")
    if isinstance(report, Summarized):  # what `python -m pipelines` ends with: fits? iteration? the report
        markdown = next(path for path in written["plan_report"] if path.suffix == ".md")
        for line in console_summary(report, markdown):
            console.print(f"  {escape(line)}", soft_wrap=True)
    return 0
