"""`ppb describe RUN.yaml -o layers.json`: the layer descriptions the SAPP balancer reads.

Each distinct layer is described by the memory model (and the time model), identical layers
merged with a count; then bodies are combined as the run config's `ppb.combined` asks, options no
body is better off with are withdrawn, and times are scaled to the first body's forward time.
The file is `{"layers_description": [...]}` in SAPP's format; without -o it is printed.
"""

from __future__ import annotations

import argparse
import json
import sys

from ppb_core.estimate.inputs import load_run
from ppb_core.io import check_output
from ppb_core.payload.describe import describe_run
from ppb_core.payload.sapp import TOP_KEY, validate_descriptions, write_layers_description


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "describe",
        help="write the layer descriptions (SAPP balancer JSON) of a run config",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", metavar="RUN.yaml", help="the run config")
    parser.add_argument("-o", "--output", metavar="layers.json", help="where to write (default: print)")
    parser.add_argument(
        "--no-times",
        action="store_true",
        help="untimed descriptions: NONE, SLCT and FULL memory only, time 1 (SAPP's fallbacks price the rest)",
    )
    parser.set_defaults(func=run)


def _time_model_available() -> bool:
    try:
        from ppb_core.timing import TimeModel  # noqa: F401
    except ImportError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    if args.output:
        check_output(args.output)
    config = load_run(args.run)
    timed = not args.no_times
    if timed and not _time_model_available():
        print("ppb: note: no time model installed (ppb_core.timing); describing without times", file=sys.stderr)
        timed = False
    descriptions = describe_run(config, timed=timed)
    if args.output:
        write_layers_description(args.output, descriptions)
    else:
        checked = validate_descriptions(descriptions, f"{config.source} (descriptions)")
        print(json.dumps({TOP_KEY: checked}, indent=2))
    return 0
