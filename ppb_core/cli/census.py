"""`ppb census HF_CONFIG.json --out census.json`: measure what each layer kind keeps, in real PyTorch layers.

A torchtitan run config (RUN.yaml) goes to `census_torchtitan` instead.

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

from ppb_core import limits
from ppb_core.census.measure import CENSUS_MODEL_TYPES, Shape, census, census_dtype, expert_counts, require_torch
from ppb_core.cli import census_torchtitan
from ppb_core.cli.arguments import DEFAULT_SEQ
from ppb_core.config.hf import spec_from_hf
from ppb_core.errors import InputError, shown
from ppb_core.io import atomic_write_text, check_output, read_json
from ppb_core.model.kinds import Moe, body_kind
from ppb_core.model.params import body_params


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

    raw = read_json(path, "is a directory, not a config.json")
    spec_from_hf(raw, path)  # the same checks the run config's reader makes
    if raw.get("model_type") not in CENSUS_MODEL_TYPES:
        raise InputError(
            path, "model_type", f"{shown(raw.get('model_type'))}: the census builds {', '.join(CENSUS_MODEL_TYPES)}"
        )
    return raw


def _check(args: argparse.Namespace) -> None:
    if args.out is None:
        raise InputError("ppb census", "--out", "name the census file to write")
    if args.json:
        raise InputError("ppb census", "--json", "prints a run config's torchtitan comparison; a census is written")
    if args.seq is None:
        args.seq = list(DEFAULT_SEQ)
    if len(set(args.seq)) < 2:
        raise InputError(
            "ppb census",
            "--seq",
            "give two sequence lengths at least (the fit has a term that grows with the sequence)",
        )
    if min(args.seq) < 2:
        raise InputError("ppb census", "--seq", f"each sequence length must be 2 or more, got {min(args.seq)}")
    if args.batch < 1:
        raise InputError("ppb census", "--batch", f"must be positive, got {args.batch}")
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
    check_output(args.out, inputs=(args.model_config,))


def lacks_bf16_arithmetic(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this x86 CPU has no bf16 arithmetic (its flags name neither avx512_bf16 nor amx_bf16), where
    PyTorch's CPU bf16 matmuls run orders of magnitude slower (docs/census.md); False where it cannot say."""
    try:
        flags = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    words = set(flags.split(":", 1)[-1].split())
    return "avx2" in words and not words & {"avx512_bf16", "amx_bf16"}


def run(args: argparse.Namespace) -> int:
    if Path(args.model_config).suffix in (".yaml", ".yml"):  # a run config: its torchtitan block
        return census_torchtitan.run(args)
    _check(args)
    raw = _read_config(args.model_config)
    if args.dropout is not None:
        raw["attention_dropout"] = args.dropout
    _check_fits(raw, args)

    require_torch()
    if census_dtype(raw, args.dtype) == "bf16" and lacks_bf16_arithmetic():
        # one line, even with -q: such a CPU ran one bf16 matmul of a Llama-3-8B layer in 77 s (0.18 s in fp32)
        print(
            "ppb census: warning: this CPU has no bf16 arithmetic (neither avx512_bf16 nor amx_bf16): a bf16 "
            "census of a 7-8B layer does not finish in minutes here (docs/census.md)",
            file=sys.stderr,
        )
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
