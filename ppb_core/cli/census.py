"""`ppb census HF_CONFIG.json --out census.json`: measure what each layer kind keeps, in real PyTorch layers.

Needs the torch extra (`pip install 'ppb[torch]'`). Each distinct body kind of the model is built
with `transformers` on the CPU and measured at the shapes given (docs/census.md); a run config
names the file as `models[i].census` to price that model's activations from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

from ppb_core.census.measure import expert_counts
from ppb_core.config import limits
from ppb_core.config.hf import spec_from_hf
from ppb_core.errors import InputError, shown
from ppb_core.io import atomic_write_text, check_output, read_json
from ppb_core.model.kinds import Moe, body_kind
from ppb_core.model.params import body_params

DEFAULT_SEQ = (128, 256, 512)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "census",
        help="measure each layer kind's activations in real PyTorch layers (needs ppb[torch])",
        description=__doc__,
    )
    parser.add_argument("model_config", help="a HuggingFace config.json")
    parser.add_argument("--out", "-o", required=True, help="the census file to write (JSON)")
    parser.add_argument(
        "--seq",
        type=int,
        nargs="+",
        default=list(DEFAULT_SEQ),
        help="sequence lengths to measure at, two at least (default 128 256 512)",
    )
    parser.add_argument("--batch", type=int, default=1, help="micro-batch size to measure at (default 1)")
    parser.add_argument(
        "--attention",
        choices=("eager", "sdpa"),
        default="sdpa",
        help="HuggingFace attention implementation (default sdpa)",
    )
    parser.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32"),
        default=None,
        help="activation dtype (default: the config's torch_dtype, else bf16)",
    )
    parser.add_argument(
        "--experts",
        type=int,
        nargs="+",
        default=None,
        help="routed experts to build MoE kinds with (default: the model's, or two counts from "
        "which the census scales when the model has more than --experts-cap)",
    )
    parser.add_argument(
        "--experts-cap", type=int, default=16, help="build the model's own routed experts up to this many (default 16)"
    )
    parser.add_argument(
        "--experts-implementation",
        choices=("grouped_mm", "eager", "batched_mm"),
        default="grouped_mm",
        help="HuggingFace experts implementation (default grouped_mm, as a loaded model runs)",
    )
    parser.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="attention dropout to measure with, as a run config's training.dropout sets it",
    )
    parser.add_argument(
        "--no-tp-split",
        action="store_true",
        help="do not measure a tensor-parallel rank's share (the working set is then split as the kept bytes are)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    parser.set_defaults(func=run)


def available_bytes() -> int | None:
    """Memory this machine can still give (Linux's MemAvailable), or None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def layer_bytes_at_least(raw: dict, args: argparse.Namespace) -> int:
    """A lower bound of what measuring the model's largest layer holds: its weights as built (routed
    experts capped as the census builds them) and its input and output at the longest shape."""
    spec = spec_from_hf(raw, args.model_config)
    element = 4 if (args.dtype or "bf16") == "fp32" else 2
    built = max(args.experts or expert_counts(raw, args.experts_cap))
    weights = 0
    for index in sorted({body_kind(spec, i).name: i for i in range(spec.num_layers)}.values()):
        kind = body_kind(spec, index)
        if isinstance(kind.mlp, Moe):
            kind = dataclasses.replace(kind, mlp=dataclasses.replace(kind.mlp, num_experts=max(built, 1)))
        weights = max(weights, body_params(kind).total)
    tokens = args.batch * max(args.seq)
    held = tokens * spec.hidden_size * 2
    if args.attention == "eager":  # the score matrix, one per head
        held += args.batch * spec.num_attention_heads * max(args.seq) ** 2
    return (weights + held) * element


def _check_fits(raw: dict, args: argparse.Namespace) -> None:
    """Refuse, before building anything, a layer this machine certainly cannot hold."""
    needed, free = layer_bytes_at_least(raw, args), available_bytes()
    if free is not None and needed > free:
        raise InputError(
            args.model_config,
            None,
            f"measuring one layer needs at least {needed / 2**30:,.1f} GiB; this machine has "
            f"{free / 2**30:,.1f} GiB free (fewer --seq, --batch or --experts, or a larger machine)",
        )


def _read_config(path: str) -> dict:
    from ppb_core.census.measure import CENSUS_MODEL_TYPES
    from ppb_core.config.hf import spec_from_hf

    raw = read_json(path, "is a directory, not a config.json")
    spec_from_hf(raw, path)  # the same checks the run config's reader makes
    if raw.get("model_type") not in CENSUS_MODEL_TYPES:
        raise InputError(
            path, "model_type", f"{shown(raw.get('model_type'))}: the census builds {', '.join(CENSUS_MODEL_TYPES)}"
        )
    return raw


def _check(args: argparse.Namespace) -> None:
    if len(set(args.seq)) < 2:
        raise InputError(
            "ppb census",
            "--seq",
            "give two sequence lengths at least (the fit has a term that grows with the sequence)",
        )
    if min(args.seq) < 2 or args.batch < 1:
        raise InputError("ppb census", "--seq" if min(args.seq) < 2 else "--batch", "must be positive (seq ≥ 2)")
    for flag, values, limit in (
        ("--seq", args.seq, limits.SEQUENCE),
        ("--batch", [args.batch], limits.MICRO_BATCH_SIZE),
        ("--experts", args.experts or [], limits.EXPERTS),
        ("--experts-cap", [args.experts_cap], limits.EXPERTS),
    ):
        if max(values, default=0) > limit:
            raise InputError("ppb census", flag, limits.over(max(values), limit))
    if args.experts_cap < 1:
        raise InputError("ppb census", "--experts-cap", f"must be positive, got {args.experts_cap}")
    if args.dropout is not None and not (math.isfinite(args.dropout) and 0 <= args.dropout < 1):
        raise InputError("ppb census", "--dropout", f"{args.dropout} is not a rate in [0, 1)")
    if args.experts is not None and (len(args.experts) > 2 or min(args.experts) < 1):
        raise InputError("ppb census", "--experts", "one or two positive counts")
    check_output(args.out)


def run(args: argparse.Namespace) -> int:
    _check(args)
    raw = _read_config(args.model_config)
    if args.dropout is not None:
        raw["attention_dropout"] = args.dropout
    _check_fits(raw, args)
    from ppb_core.census.measure import Shape, census, require_torch

    require_torch()
    progress = None if args.quiet else (lambda line: print(f"ppb census: {line}", file=sys.stderr, flush=True))
    started = time.perf_counter()
    shapes = [Shape(args.batch, seq) for seq in sorted(set(args.seq))]
    try:
        result = census(
            raw,
            attention=args.attention,
            shapes=shapes,
            dtype=args.dtype,
            experts=args.experts,
            experts_cap=args.experts_cap,
            experts_implementation=args.experts_implementation,
            split_working=not args.no_tp_split,
            source=str(args.model_config),
            dropout=args.dropout,
            progress=progress,
        )
    except (MemoryError, RuntimeError) as err:  # torch's allocator: "DefaultCPUAllocator: can't allocate memory"
        if isinstance(err, RuntimeError) and "allocat" not in str(err) and "out of memory" not in str(err):
            raise
        raise InputError(
            args.model_config, None, "ran out of memory measuring a layer (fewer --seq or --batch)"
        ) from None
    atomic_write_text(args.out, result.to_json())
    longest = shapes[-1].seq
    print(
        f"{args.out}: {result.model_type}, {args.attention} attention, {result.dtype}, micro-batch {args.batch}, "
        f"{time.perf_counter() - started:.1f} s"
    )
    for kind in result.kinds:
        record = kind.activations(longest)
        fit = kind.fit
        print(
            f"  {kind.name} (layer {kind.layer_index}): bytes per token at seq {longest}: kept "
            f"{record.saved:,.0f} whole + {record.saved_tp:,.0f} split by TP"
            + (f" + routed {record.routed:,.0f} + {record.routed_tp:,.0f}" if kind.experts else "")
            + f"; backward holds {record.working + record.working_tp:,.0f}; "
            f"fit residual {fit.get('kept_max_relative_residual', 0.0):.2%}"
            + (f"; experts measured {kind.experts['measured']} of {kind.experts['model']}" if kind.experts else "")
        )
    return 0
