"""`ppb` entry point: each sub-command's work loaded when it runs; bad input as one line, exit status 2."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from ppb_core.cli.arguments import COMMANDS
from ppb_core.errors import InputError

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse with a bad flag as one line, as any bad input (not the usage block before it);
    sub-command parsers are of this class too (`add_subparsers` makes its parsers of the parent's)."""

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        line = line if len(line) <= 300 else line[:300] + "…"
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {line} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """Every sub-command's arguments (`ppb_core.cli.arguments`, which imports nothing heavy)."""
    parser = _Parser(prog="ppb", description=__doc__)
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
