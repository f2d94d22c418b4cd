"""What the benchmarks against published runs share: the Llama 3 models as Meta's config.json
files state them, torchtitan's run config, and reading a row's run config.

Used by bench/public_runs.py (iteration times) and bench/public_memory.py (memory peaks).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import RunConfig, parse_run_config  # noqa: E402

_LLAMA3 = {"vocab_size": 128256, "num_key_value_heads": 8, "max_position_embeddings": 131072}
LLAMA31_8B = {**_LLAMA3, "hidden_size": 4096, "num_layers": 32, "num_attention_heads": 32, "intermediate_size": 14336}
LLAMA31_70B = {**_LLAMA3, "hidden_size": 8192, "num_layers": 80, "num_attention_heads": 64, "intermediate_size": 28672}
LLAMA3_405B = {
    **_LLAMA3,
    "hidden_size": 16384,
    "num_layers": 126,
    "num_attention_heads": 128,
    "intermediate_size": 53248,
}


def torchtitan_run(
    name: str,
    spec: dict[str, Any],
    parallel: dict[str, Any],
    seq_length: int,
    micro_batch_size: int,
    micro_batches: int,
    recompute: str | dict[str, str],
    device: dict[str, Any],
) -> dict[str, Any]:
    """A torchtitan Llama run as its benchmarks run it: FSDP2 (ZeRO-3), bf16, flash attention."""
    return {
        "name": name,
        "framework": "torchtitan",
        "models": [{"name": "llm", "spec": spec}],
        "parallel": {"fsdp": True, "zero": 3, **parallel},
        "training": {
            "seq_length": seq_length,
            "micro_batch_size": micro_batch_size,
            "micro_batches": micro_batches,
            "dtype": "bf16",
            "flash_attention": True,
            "recompute": recompute,
        },
        "device": device,
    }


def torchtitan_llama31_8b(gpus: int, device: dict[str, Any]) -> dict[str, Any]:
    """torchtitan's Llama 3.1 8B benchmark on *gpus* H100 (llama3_h100_202412_torchtitan.md, Tables 1
    and 3): FSDP over all of them, local batch 2 of 8192 tokens, per-op selective checkpointing."""
    recompute = {"mode": "selective", "option": "op"}
    return torchtitan_run(f"torchtitan-llama3.1-8b-fsdp{gpus}", LLAMA31_8B, {"dp": gpus}, 8192, 2, 1, recompute, device)


def run_config(raw: dict[str, Any], name: str) -> RunConfig:
    """A row's run config, its model files named relative to configs/."""
    return parse_run_config(raw, name, ROOT / "configs")
