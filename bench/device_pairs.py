"""NeMo's Llama rows that ran one preset in one container on two parts, measured against ppb side by side.

    python bench/device_pairs.py

Each pair is two rows of bench/public_runs.py whose Megatron-Bridge recipe function is the same code for
both parts (llama3_llm_pretrain.py / llama31_llm_pretrain.py `*_config_gb200` and `*_config_gb300` at
v0.4.2 c81012934 and at the archived releases' tags, line for line; the 25.11 8B rows'
`LLAMA3_8B_*_FP8_CS_BASE_CONFIG` presets at v0.2.0),
so what the pair's ratio shows is the parts and whatever else the pair's presets set apart (printed: the
run-config fields the two rows differ in). For each: the measured seconds of the slower part over the
faster's, ppb's, and ppb's GEMM seconds' (bench/decompose.py's class). A part whose measured ratio ppb's
misses by the same factor across TP 1 and TP 4, FSDP and pipelines, FP8 and MXFP8 runs its kernels slower
than ppb's catalog says, which no setting of the runs explains (docs/timing-validation.md, "The NeMo Llama rows on
Blackwell by setting (session 28)").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from decompose import decompose, machine
from public_runs import PublicRun, public_runs, row_seconds


@dataclass(frozen=True)
class Pair:
    slow: str  # the row whose part measured slower
    fast: str


PAIRS: tuple[Pair, ...] = (
    Pair("NeMo Llama 3 8B FP8 (8 GB200)", "NeMo 25.11 Llama 3 8B FP8 (8 GB300)"),
    Pair("NeMo Llama 3 8B MXFP8 (8 GB200)", "NeMo 25.11 Llama 3 8B MXFP8 (8 GB300)"),
    Pair("NeMo 26.04 Llama 3 70B FP8 FSDP (64 GB200)", "NeMo 26.04 Llama 3 70B FP8 FSDP (64 GB300)"),
    Pair("NeMo 26.04 Llama 3 70B MXFP8 TP2 PP4 (64 GB200)", "NeMo 26.04 Llama 3 70B MXFP8 PP4 VP5 (64 GB300)"),
    Pair("NeMo 26.04 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)", "NeMo 26.04 Llama 3.1 405B FP8 TP4 PP8 VP4 (256 GB300)"),
    Pair(
        "NeMo 26.04 Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)",
        "NeMo 26.04 Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)",
    ),
    # the archived releases' tables (bench/_nemo_releases.py): the same presets in 26.02, 26.02.01 and 26.06
    Pair("NeMo 26.02 Llama 3 70B FP8 FSDP (64 GB200)", "NeMo 26.02 Llama 3 70B FP8 FSDP (64 GB300)"),
    Pair("NeMo 26.02 Llama 3 70B MXFP8 TP2 PP4 (64 GB200)", "NeMo 26.02 Llama 3 70B MXFP8 PP4 VP5 (64 GB300)"),
    Pair("NeMo 26.02 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)", "NeMo 26.02 Llama 3.1 405B FP8 TP4 PP8 VP4 (256 GB300)"),
    Pair(
        "NeMo 26.02 Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)",
        "NeMo 26.02 Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)",
    ),
    Pair("NeMo 26.02.01 Llama 3 70B FP8 FSDP (64 GB200)", "NeMo 26.02.01 Llama 3 70B FP8 FSDP (64 GB300)"),
    Pair(
        "NeMo 26.02.01 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)",
        "NeMo 26.02.01 Llama 3.1 405B FP8 TP2 PP8 CP2 VP4 (256 GB300)",
    ),
    Pair(
        "NeMo 26.02.01 Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)",
        "NeMo 26.02.01 Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)",
    ),
    Pair("NeMo 26.06 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)", "NeMo 26.06 Llama 3.1 405B FP8 TP4 PP8 VP4 (256 GB300)"),
    Pair(
        "NeMo 26.06 Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)",
        "NeMo 26.06 Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)",
    ),
    Pair("NeMo Llama 3 8B FP8 (8 B200)", "NeMo Llama 3 8B FP8 (8 GB200)"),
    Pair("NeMo Llama 3 8B MXFP8 (8 B200)", "NeMo Llama 3 8B MXFP8 (8 GB200)"),
)


@dataclass(frozen=True)
class PairRatios:
    pair: Pair
    measured: float  # slow seconds over fast
    ppb: float
    ppb_gemms: float


def _fields(raw: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A run config's leaves by dotted name."""
    leaves: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            leaves.update(_fields(value, f"{prefix}{key}."))
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def apart(pair: Pair, rows: dict[str, PublicRun]) -> list[str]:
    """The run-config fields the pair's two rows set apart, beyond their names and parts."""
    slow, fast = _fields(rows[pair.slow].raw), _fields(rows[pair.fast].raw)
    keys = (set(slow) | set(fast)) - {"name", "device.name"}
    return sorted(key for key in keys if slow.get(key) != fast.get(key))


def ratios(pair: Pair, rows: dict[str, PublicRun]) -> PairRatios:
    """The pair's three ratios (module docstring)."""
    slow, fast = rows[pair.slow], rows[pair.fast]
    (slow_classes, _), (fast_classes, _) = decompose(slow), decompose(fast)
    return PairRatios(
        pair,
        slow.seconds / fast.seconds,
        row_seconds(slow) / row_seconds(fast),
        slow_classes["GEMMs"].seconds / fast_classes["GEMMs"].seconds,
    )


def main() -> int:
    print(f"machine: {machine()}")
    rows = {row.name: row for row in public_runs()}
    print(f"{'slower row / faster row':118s} measured      ppb  ppb GEMMs  set apart besides the part")
    for pair in PAIRS:
        got = ratios(pair, rows)
        names = f"{pair.slow} / {pair.fast.removeprefix('NeMo ')}"
        others = ", ".join(apart(pair, rows)) or "nothing"
        print(f"{names:118s} {got.measured:8.3f} {got.ppb:8.3f} {got.ppb_gemms:10.3f}  {others}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main() if len(sys.argv) == 1 else f"usage: {sys.argv[0]} (no arguments)")
