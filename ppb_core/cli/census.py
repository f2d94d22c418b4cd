"""`ppb census HF_CONFIG.json --out census.json`: measure what each layer kind keeps, in real PyTorch layers.

Needs the torch extra (`pip install 'ppb[torch]'`). Each distinct body kind of the model is built
with `transformers` on the CPU and measured at the shapes given (docs/census.md); a run config
names the file as `models[i].census` to price that model's activations from it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ppb_core.census.measure import CENSUS_MODEL_TYPES, Shape, census, require_torch
from ppb_core.config.hf import spec_from_hf
from ppb_core.errors import InputError
from ppb_core.io import atomic_write_text, read_json


def _read_config(path: str) -> dict:

    raw = read_json(path, "is a directory, not a config.json")
    spec_from_hf(raw, path)  # the same checks the run config's reader makes
    if raw.get("model_type") not in CENSUS_MODEL_TYPES:
        raise InputError(
            path, "model_type", f"{raw.get('model_type')!r}: the census builds {', '.join(CENSUS_MODEL_TYPES)}"
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
    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise InputError("ppb census", "--dropout", f"{args.dropout} is not a rate in [0, 1)")
    if args.experts is not None and (len(args.experts) > 2 or min(args.experts) < 1):
        raise InputError("ppb census", "--experts", "one or two positive counts")
    out = Path(args.out)
    if out.is_dir():
        raise InputError(args.out, None, "is a directory; give the census file's path")


def run(args: argparse.Namespace) -> int:
    _check(args)
    raw = _read_config(args.model_config)
    if args.dropout is not None:
        raw["attention_dropout"] = args.dropout

    require_torch()
    progress = None if args.quiet else (lambda line: print(f"ppb census: {line}", file=sys.stderr, flush=True))
    started = time.perf_counter()
    shapes = [Shape(args.batch, seq) for seq in sorted(set(args.seq))]
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
