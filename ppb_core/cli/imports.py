"""`ppb import megatron LAUNCH --gpus N --device NAME -o RUN.yaml`: the run config a Megatron-LM launch
says (`ppb_core.balance.megatron_import`), and `ppb import torchtitan JOB.toml` the run config of a
torchtitan job (`ppb_core.balance.torchtitan_import`); each flag or key that bears on memory or time
and that ppb does not model is said on stderr, one line each."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from ppb_core import limits
from ppb_core.balance.megatron_import import Imported, import_megatron, run_config_of
from ppb_core.balance.torchtitan_import import import_torchtitan, torchtitan_run_config
from ppb_core.balance.torchtitan_pyconfig import python_release, read_config
from ppb_core.config.releases import parse_release
from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError
from ppb_core.estimate.held_back import held_back_line
from ppb_core.estimate.run import device_summary
from ppb_core.io import atomic_write_text, check_output, read_text
from ppb_core.units import counted


def run(args: argparse.Namespace) -> int:
    if args.output:
        check_output(args.output, inputs=(args.launch,))
    if args.gpus is not None and args.gpus < 1:
        raise InputError(None, "--gpus", f"must be a positive count, got {args.gpus}")
    if args.gpus is not None and args.gpus > limits.DEVICES:
        raise InputError(None, "--gpus", limits.over(args.gpus, limits.DEVICES, "devices"))
    if args.tokenizer_vocab is not None and args.tokenizer_vocab < 1:
        raise InputError(None, "--tokenizer-vocab", f"must be a positive size, got {args.tokenizer_vocab}")
    source: str = args.launch
    if args.framework == "torchtitan":
        return _torchtitan(args, source)
    for option, value in (("--config", args.config_function), ("--torchtitan-release", args.torchtitan_release)):
        if value is not None:
            raise InputError(None, option, "is torchtitan's: a Megatron-LM launch states its own")
    if not source.strip():
        raise InputError(None, "LAUNCH", "is empty: give Megatron-LM flags (--...) or a launch script")
    pasted = not os.path.exists(source) and " --" in source  # a command line: `torchrun ... pretrain_gpt.py --...`
    if source.lstrip().startswith("--") or pasted:
        text, where = source, "LAUNCH"
    else:
        if not os.path.exists(source):
            raise InputError(source, None, "no such file (and not Megatron-LM flags)")
        text, where = read_text(source), source
        if not text.strip():
            raise InputError(source, None, "is empty: no Megatron-LM flags")
    base = Path(source).parent if where != "LAUNCH" else None
    release = {
        library: value
        for library, value in (("megatron_core", args.megatron_core_release), ("transformer_engine", args.te_release))
        if value is not None
    }
    imported = import_megatron(
        text, args.gpus, args.device, where, args.tokenizer_vocab, _file_reader(base), _release_options(release)
    )
    name = args.name or (Path(source).stem if where != "LAUNCH" else "megatron-launch")
    imported.raw["name"] = name
    run = run_config_of(imported, where)  # every check before anything is written
    return _write(args, imported, "flag", run)


def _release_options(release: dict[str, str]) -> dict[str, str]:
    """The stated releases, each checked as its option (`ppb_core.config.releases`)."""
    options = {"megatron_core": "--megatron-core-release", "transformer_engine": "--te-release"}
    for library, value in release.items():
        try:
            parse_release(library, value)
        except ValueError as err:
            raise InputError(None, options[library], str(err)) from None
    return release


def _file_reader(base: Path | None):
    """A file a launch names (`--tp-comm-overlap-cfg`), as Megatron opens it: relative to the working
    directory, else to the launch script's; None where neither holds it or it is no text."""

    def read(path: str) -> str | None:
        for candidate in (Path(path), *([base / path] if base is not None else [])):
            if candidate.is_file():
                try:
                    return read_text(str(candidate))
                except InputError:
                    return None
        return None

    return read


def _torchtitan(args: argparse.Namespace, source: str) -> int:
    if args.tokenizer_vocab is not None:
        raise InputError(None, "--tokenizer-vocab", "is Megatron's: torchtitan's vocabulary is its model flavor's")
    for option, value in (("--megatron-core-release", args.megatron_core_release), ("--te-release", args.te_release)):
        if value is not None:
            raise InputError(None, option, "is Megatron's: torchtitan's version is said in its timing fields")
    if not os.path.exists(source):
        said = "a torchtitan config function's .py file" if Path(source).suffix == ".py" else "a torchtitan job TOML"
        raise InputError(source, None, f"no such file ({said})")
    if Path(source).suffix == ".py":  # a config function (from 9810191bb), read without running it
        release = python_release(args.torchtitan_release)
        imported = read_config(read_text(source), source, args.config_function, release, args.gpus, args.device)
        imported.raw["name"] = args.name or args.config_function or Path(source).stem
        run = torchtitan_run_config(imported, source)
        return _write(args, imported, "field", run)
    for option, value in (("--config", args.config_function), ("--torchtitan-release", args.torchtitan_release)):
        if value is not None:
            said = "reads a config function's .py file (torchtitan from 9810191bb); a job TOML is v0.2.2's"
            raise InputError(None, option, said)
    imported = import_torchtitan(read_text(source), args.gpus, args.device, source)
    imported.raw["name"] = args.name or Path(source).stem
    run = torchtitan_run_config(imported, source)  # every check before anything is written
    return _write(args, imported, "key", run)


def _write(args: argparse.Namespace, imported: Imported, what: str, run: RunConfig) -> int:
    document = yaml.safe_dump(imported.raw, sort_keys=False, allow_unicode=True)
    for note in imported.notes:
        # each note names what it prices otherwise ("...: not modelled by ppb (priced as if not given)"); the prefix
        # said "not modelled" before it until session 32, twice in one line
        print(f"ppb: note: {note}", file=sys.stderr)
    # the run config holds `device.reserved_mb: auto`: what that holds back on this layout, and why
    print(f"ppb: {held_back_line(device_summary(run))}", file=sys.stderr)
    if args.output:
        atomic_write_text(args.output, document)  # its folders made, as `ppb balance -o` makes them
        # "(0 keys not modelled)" until session 34: the count is said only when there is one
        unmodelled = f" ({counted(len(imported.notes), what)} not modelled)" if imported.notes else ""
        print(f"wrote {args.output}{unmodelled}")
    else:
        print(document, end="")
    return 0
