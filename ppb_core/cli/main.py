"""`ppb` entry point: each sub-command's work loaded when it runs; bad input as one line, exit status 2."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from ppb_core.cli.arguments import COMMANDS, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED, OneLineParser
from ppb_core.errors import InputError

# what `ppb --help` tells a person (it showed this module's docstring, written for whoever reads the code)
DESCRIPTION = (
    "Plan pipeline-parallel training: each layer's memory and time under every recompute option, the split of "
    "the layers over the pipeline stages and their recompute, a plan you have checked against the device, the "
    "parallel layout searched. Bad input is one line and exit status 2; a plan that does not fit exit status 1."
)


def build_parser() -> argparse.ArgumentParser:
    """Every sub-command's arguments (`ppb_core.cli.arguments`, which imports nothing heavy)."""
    parser = OneLineParser(prog="ppb", description=DESCRIPTION)
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


# A command whose module is not named as the command (`import` is a Python keyword)
_MODULES = {"import": "imports"}

# `ppb check`'s own options: a word after --plan that is one of them is not the plan
_CHECK_OPTIONS = frozenset({"--json", "--no-optimum", "-q", "--quiet", "-t", "--time-limit", "-h", "--help"})


def _plan_text(argv: Sequence[str]) -> list[str]:
    """`--plan --recompute-activations`: argparse takes a single word starting with `--` for an option
    and says "expected one argument"; a Megatron-LM flag given as the plan is the plan's value (a
    text with a space argparse already takes)."""
    words = list(argv)
    for index, word in enumerate(words[:-1]):
        following = words[index + 1]
        if word == "--plan" and following.startswith("--") and following.split("=")[0] not in _CHECK_OPTIONS:
            words[index : index + 2] = [f"--plan={following}"]
            break
    return words


class Terminated(Exception):
    """SIGTERM, raised where the command is, so that what it started ends with it."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_plan_text(sys.argv[1:] if argv is None else argv))
    # The command's module (and pandas, the models, Dagster-free as it is) loads only now, so that
    # `ppb --help` and `ppb COMMAND --help` start at once.
    command = importlib.import_module(f"ppb_core.cli.{_MODULES.get(args.command, args.command)}")
    # SIGTERM (`kill PID`, a scheduler's limit) ended ppb at once and left `ppb search`'s forkserver and balancing
    # processes running on, minutes each (session 29): raised as an exception, the search ends them as on Ctrl-C
    before = signal.signal(signal.SIGTERM, _terminated)
    try:
        return int(command.run(args) or 0)
    except InputError as err:
        print(f"ppb: error: {err.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for it (128 + SIGINT), no traceback
        print("ppb: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:  # the same for SIGTERM (128 + SIGTERM)
        print("ppb: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, before)


if __name__ == "__main__":
    sys.exit(main())
