"""`ppb` entry point: one sub-command module per stage, bad input as one line and exit status 2."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ppb_core.errors import InputError

# Each module offers `add_parser(subparsers)` and a `run(args) -> int` bound as the default `func`.
COMMANDS: tuple[str, ...] = ("plan", "estimate", "describe", "profile", "census", "balance", "search")

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ppb", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"ppb_core.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        print(f"ppb: error: {err.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
