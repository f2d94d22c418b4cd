"""The recompute vocabulary the SAPP balancer's users know: layer types, switches, options, keys."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from ppb_core.config.recompute import SWITCHES  # a switch at 1 keeps its op's activation, at 0 recomputes it

# Switches a layer kind may keep nothing under (attUp acts only on MLA layers).
OPTIONAL: tuple[str, ...] = ("attUp",)

# The balancer's recompute options, in the order that settles a tie between two.
OPTIONS: tuple[str, ...] = ("NONE", "SLCT", "COMM", "BOTH", "FULL")
SELECTIVE_OPTIONS: tuple[str, ...] = ("SLCT", "COMM", "BOTH")

# Where MindFormers applies each option among a (chunk, stage) cell's layers, counting from the
# cell's first layer as its yaml does (`recompute`, `select_recompute`, `select_comm_recompute`):
# full recompute first, then both selective kinds, then one of them, then none. SLCT and COMM
# share a rank: a cell the yaml can describe never holds both.
CELL_RANK: dict[str, int] = {"FULL": 0, "BOTH": 1, "SLCT": 2, "COMM": 2, "NONE": 3}
ALONG_A_CELL: tuple[str, ...] = tuple(sorted(CELL_RANK, key=CELL_RANK.__getitem__))

# Where the balancer reads each option's memory per micro-batch (MB) and its backward time.
MEMORY_KEY: dict[str, str] = {
    "NONE": "memory_activation",
    "SLCT": "memory_select_rec",
    "COMM": "memory_select_comm",
    "BOTH": "memory_both_comm_select",
    "FULL": "memory_recompute",
}
TIME_KEY: dict[str, str] = {
    "NONE": "backward_time",
    "SLCT": "select_rec_time",
    "COMM": "select_comm_time",
    "BOTH": "both_comm_select_time",
    "FULL": "recompute_time",
}
# The balancer's fallback backward-time coefficients when a description states none (DEFAULT_COEF of
# hyper-parallel's hyper_parallel/auto_parallel/sapp_ppb/utils/recompute.py, mindspore-ai/hyper-parallel).
DEFAULT_COEF: dict[str, float] = {"NONE": 0.0, "SLCT": 0.04, "COMM": 0.125, "BOTH": 0.165, "FULL": 0.5}
COEF_KEY: dict[str, str] = {
    "NONE": "backward_coef",
    "SLCT": "select_rec_coef",
    "COMM": "select_comm_coef",
    "BOTH": "both_comm_select_coef",
    "FULL": "recompute_coef",
}

# HyperParallel's selective policy: keep the attention matmuls, recompute everything else.
HYPER_SELECTIVE_REC_OP: dict[str, int] = {
    "attBMM": 1,
    "headCast": 0,
    "dropout": 0,
    "softmax": 0,
    "normOp": 0,
    "gather": 0,
    "ffAct": 0,
}


class LayerType(Enum):
    """What a layer is to the memory and time models: a body under a recompute state, or an end."""

    NOT_REC_LAYER = "NOT_REC_LAYER"
    SEL_REC_LAYER = "SEL_REC_LAYER"
    FULL_REC_LAYER = "FULL_REC_LAYER"
    EMBEDDING_LAYER = "EMBEDDING_LAYER"
    OUTPUT_LAYER = "OUTPUT_LAYER"


KEEP_ALL: dict[str, int] = dict.fromkeys(SWITCHES, 1)


def normalized(switches: Mapping[str, object] | None) -> dict[str, int]:
    """Every switch as 0 or 1; a switch not stated keeps its op (1)."""
    stated = switches or {}
    return {name: int(bool(stated.get(name, 1))) for name in SWITCHES}


def recomputed(switches: Mapping[str, object] | None) -> frozenset[str]:
    """The names a switch setting recomputes."""
    return frozenset(name for name, state in normalized(switches).items() if not state)


def selective_switches(configured: Mapping[str, object] | None) -> dict[str, dict[str, int]]:
    """The switch settings of the selective options.

    SLCT is the layer's configured selective recompute, COMM recomputes the tensor-parallel
    gathers alone, and BOTH does both.
    """
    slct = normalized(configured)
    return {"SLCT": slct, "COMM": dict(KEEP_ALL, gather=0), "BOTH": dict(slct, gather=0)}


def option_state(option: str, configured: Mapping[str, object] | None) -> tuple[LayerType, dict[str, int]]:
    """The layer type and switch setting an option evaluates a body layer at."""
    if option == "NONE":
        return LayerType.NOT_REC_LAYER, dict(KEEP_ALL)
    if option == "FULL":
        return LayerType.FULL_REC_LAYER, dict(KEEP_ALL)
    return LayerType.SEL_REC_LAYER, selective_switches(configured)[option]
