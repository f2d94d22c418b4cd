"""`ppb describe RUN.yaml -o layers.json`: the layer descriptions the SAPP balancer reads.

Each distinct layer is described by the memory model (and the time model), identical layers
merged with a count; then bodies are combined as the run config's `ppb.combined` asks, options no
body is better off with are withdrawn, and times are scaled to the first body's forward time.
The file is `{"layers_description": [...]}` in SAPP's format; without -o it is printed.
"""

from __future__ import annotations

import argparse
import json

from ppb_core.estimate.inputs import load_run
from ppb_core.io import check_output
from ppb_core.payload.run import describe_run
from ppb_core.payload.sapp import TOP_KEY, validate_descriptions, write_layers_description


def run(args: argparse.Namespace) -> int:
    config = load_run(args.run)
    if args.output:
        check_output(args.output, inputs=(args.run, *config.files_read()))
    descriptions = describe_run(config, timed=not args.no_times)
    if args.output:
        write_layers_description(args.output, descriptions)
    else:
        checked = validate_descriptions(descriptions, f"{config.source} (descriptions)")
        print(json.dumps({TOP_KEY: checked}, indent=2))
    return 0
