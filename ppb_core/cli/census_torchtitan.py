"""`ppb census RUN.yaml`: a torchtitan run's block measured on the CPU under torchtitan's checkpointing.

The block (ppb_core.census.torchtitan, torchtitan v0.2.2's Llama op sequence) is built at the run's
widths and measured at one sequence under none, op and full activation checkpointing (compiled when
the run's timing.torch_compile says so); beside each figure, what ppb's torchtitan memory module
predicts for the same block on one device. A run config cannot name this census (it has no switch
fits), so the comparison is printed, or written as JSON with --json.
"""

from __future__ import annotations

import argparse
import importlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from rich.table import Table

from ppb_core import limits
from ppb_core.census.measure import TORCH_MISSING
from ppb_core.cli.console import table_console
from ppb_core.config.run import RunConfig, load_run_config, parse_run_config
from ppb_core.config.spec import ModelSpec
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import walk

# torchtitan's activation_checkpoint words (mode, selective_ac_option) for each measured mode.
RECOMPUTE = {"none": {"mode": "none"}, "op": {"mode": "selective", "option": "op"}, "full": {"mode": "full"}}
OPTION = {"none": "NONE", "op": "SLCT", "full": "FULL"}


@dataclass(frozen=True)
class Row:
    """One AC mode: what the block keeps for its backward, measured and predicted, in bytes."""

    ac: str
    measured_bytes: int
    predicted_bytes: float

    @property
    def difference(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def _dense_llama(run: RunConfig, where: str) -> tuple[str, ModelSpec]:
    """The run's one model, if it is a block the census builds: dense, GQA, SwiGLU, RMSNorm, rotary, no biases."""
    name = run.model_names[0]
    spec = run.spec(name)
    field = "models[0]"
    if len(run.model_names) > 1 or not isinstance(spec, ModelSpec):
        raise InputError(where, "models", "the torchtitan census measures one decoder model (no towers)")
    plain = {
        "num_experts": spec.num_experts == 0,
        "kv_lora_rank": not spec.is_mla,
        "activation": spec.activation == "swiglu",
        "norm": spec.norm == "rmsnorm",
        "position_embedding": spec.position_embedding == "rope",
        "qk_norm": not spec.qk_norm,
        "head_dim": spec.head_dim in (None, spec.hidden_size // spec.num_attention_heads),
        "bias": not (spec.attention_bias or spec.attention_output_bias or spec.mlp_bias),
        "dropout": not (spec.attention_dropout or spec.hidden_dropout or run.training.dropout),  # llama3 has none
    }
    for key, ok in plain.items():
        if not ok:
            raise InputError(
                where, f"{field}.{key}", "the torchtitan census builds torchtitan's dense Llama block (llama3) only"
            )
    if spec.hidden_size % spec.num_attention_heads:
        raise InputError(where, f"{field}.num_attention_heads", "must divide hidden_size")
    return name, spec


def predicted_bytes(run: RunConfig, spec: ModelSpec, tokens: int, ac: str, dtype_name: str) -> float:
    """What ppb's torchtitan rules say one block keeps at *tokens* tokens in *dtype_name* on one device under *ac*."""
    single = parse_run_config(
        {
            "name": f"{run.name}-census",
            "framework": "torchtitan",
            "timing": {"torch_compile": run.timing.torch_compile},
            "models": [{"name": "llm", "spec": spec.model_dump(exclude_defaults=True)}],
            "parallel": {"zero": 0},
            "training": {"seq_length": tokens, "dtype": dtype_name, "recompute": RECOMPUTE[ac]},
            "device": {"name": run.device.name},
        },
        run.source,
    )
    memory = MemoryModel(single)
    layer = next(layer for layer in walk(single) if layer.node == "BODY")
    return memory.activation_bytes(layer, *memory.option_state(layer, OPTION[ac]))


def compare(run: RunConfig, tokens: int, dtype_name: str) -> list[Row]:
    """The block at the run's widths in *dtype_name*, measured at *tokens* under each AC mode, beside the rules."""
    try:  # loaded only now, as main.py loads a command: it imports torch
        titan = importlib.import_module("ppb_core.census.torchtitan")
    except ImportError as err:
        if err.name != "torch":
            raise
        raise InputError(None, None, TORCH_MISSING) from None
    _, spec = _dense_llama(run, run.source)
    dims = titan.BlockDims(
        spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads or spec.num_attention_heads,
        spec.intermediate_size,
    )  # fmt: skip
    dtype = titan.TORCH_DTYPES[dtype_name]
    compiled = run.timing.torch_compile
    return [
        Row(
            ac,
            titan.measure_block(dims, tokens, ac, dtype, compiled).kept_bytes,
            predicted_bytes(run, spec, tokens, ac, dtype_name),
        )
        for ac in titan.CHECKPOINTING
    ]


# `ppb census` flags that build HuggingFace layers, with their defaults: a run config's census takes none.
HF_ONLY = {
    "--batch": ("batch", 1),
    "--attention": ("attention", "sdpa"),
    "--experts": ("experts", None),
    "--experts-cap": ("experts_cap", 16),
    "--experts-implementation": ("experts_implementation", "grouped_mm"),
    "--dropout": ("dropout", None),
    "--no-tp-split": ("no_tp_split", False),
}


def _load(args: argparse.Namespace) -> tuple[RunConfig, int]:
    for flag, (name, default) in HF_ONLY.items():
        if getattr(args, name) != default:
            raise InputError("ppb census", flag, "measures HuggingFace layers (a config.json), not a run config")
    run = load_run_config(args.model_config)
    if run.framework != "torchtitan":
        raise InputError(
            args.model_config, "framework", f"{run.framework}: the run-config census measures torchtitan runs"
        )
    _dense_llama(run, args.model_config)
    if args.out is not None:
        raise InputError("ppb census", "--out", "a run config cannot name a torchtitan census; use --json")
    if args.seq is not None and len(args.seq) != 1:
        raise InputError("ppb census", "--seq", "one sequence length for a run config")
    tokens = run.training.seq_length if args.seq is None else args.seq[0]
    if not 2 <= tokens <= limits.SEQUENCE:
        raise InputError("ppb census", "--seq", f"{tokens} tokens is not in [2, {limits.SEQUENCE}]")
    return run, tokens


def report(run: RunConfig, tokens: int, dtype_name: str, rows: list[Row]) -> dict[str, Any]:
    """The comparison as --json prints it."""
    return {
        "run": run.source,
        "framework": "torchtitan",
        "tokens": tokens,
        "dtype": dtype_name,
        "compiled": run.timing.torch_compile,
        "modes": [asdict(row) | {"difference": row.difference} for row in rows],
    }


def run(args: argparse.Namespace) -> int:
    run_config, tokens = _load(args)
    dtype_name = args.dtype or run_config.training.dtype
    rows = compare(run_config, tokens, dtype_name)
    if args.json:
        print(json.dumps(report(run_config, tokens, dtype_name, rows), indent=2))
        return 0
    compiled = ", compiled" if run_config.timing.torch_compile else ""
    table = Table(title=f"{run_config.source}: one torchtitan block, {tokens} tokens, {dtype_name}{compiled}")
    for column in ("AC mode", "measured MB", "predicted MB", "difference"):
        table.add_column(column, justify="left" if column == "AC mode" else "right")
    for row in rows:
        table.add_row(
            row.ac, f"{row.measured_bytes / 1e6:,.3f}", f"{row.predicted_bytes / 1e6:,.3f}", f"{row.difference:+.2%}"
        )
    table_console().print(table)
    return 0
