"""`ppb` entry point: each sub-command's work loaded when it runs; bad input as one line, exit status 2."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ppb_core.cli.arguments import COMMANDS, EXIT_BAD_INPUT, OneLineParser
from ppb_core.errors import InputError


def build_parser() -> argparse.ArgumentParser:
    """Every sub-command's arguments (`ppb_core.cli.arguments`, which imports nothing heavy)."""
    parser = OneLineParser(prog="ppb", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(
            name,
            help=command.summary,
            description=command.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The command's module (and pandas, the models, Dagster-free as it is) loads only now, so that
    # `ppb --help` and `ppb COMMAND --help` start at once.
    command = importlib.import_module(f"ppb_core.cli.{args.command}")
    try:
        return int(command.run(args) or 0)
    except InputError as err:
        print(f"ppb: error: {err.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
