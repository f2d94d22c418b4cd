"""At the limits (ppb_core.limits): the largest run ppb accepts still estimates, in bounded
time, with every figure finite and non-negative and every integer column inside int64 (a
`hidden_size` of 10^18 used to overflow the Parquet table; the limits keep every product far
inside). One step over any limit is refused (tests/test_inputs.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ppb_core import limits
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.estimate.run import estimate
from ppb_core.memory import MemoryModel
from ppb_core.tables.estimate import estimate_to_frame
from ppb_core.tables.schema import rows_of
from ppb_core.timing.pricer import TimeModel

# Every model dimension at its limit, MoE with every expert routed and shared.
SPEC = {
    "vocab_size": limits.VOCABULARY,
    "hidden_size": limits.HIDDEN,
    "num_layers": limits.LAYERS,
    "num_attention_heads": limits.HEADS,
    "intermediate_size": limits.FFN,
    "max_position_embeddings": limits.POSITIONS,
    "num_experts": limits.EXPERTS,
    "experts_per_token": limits.EXPERTS,
    "moe_intermediate_size": limits.FFN,
    "shared_experts": limits.EXPERTS,
    "shared_expert_intermediate_size": limits.FFN,
}


def _largest() -> dict:
    stages = limits.STAGES // 2  # 256 stages of 2 chunks: the interleaved schedule needs m ≥ pp
    return {
        "models": [{"name": "llm", "spec": SPEC}],
        "parallel": {"pp": stages, "vpp": 2, "schedule": "interleaved"},
        "training": {
            "seq_length": limits.SEQUENCE,
            "micro_batch_size": limits.MICRO_BATCH_SIZE,
            "micro_batches": limits.SCHEDULE_CELLS // (stages * 2),
            "flash_attention": False,  # the score matrices too: seq² per head
            "dtype": "fp32",
        },
        "device": {
            "memory_mb": limits.DEVICE_MEMORY_MB,
            "peak_tflops": limits.DEVICE_RATE_MIN,
            "hbm_bandwidth_gbs": limits.DEVICE_RATE_MIN,
            "intra_node_bandwidth_gbs": limits.DEVICE_RATE_MIN,
            "inter_node_bandwidth_gbs": limits.DEVICE_RATE_MIN,
            "matmul_efficiency": limits.DEVICE_RATE_MIN,
            "memory_efficiency": limits.DEVICE_RATE_MIN,
            "comm_efficiency": limits.DEVICE_RATE_MIN,
            "collective_latency_us": limits.DEVICE_LATENCY_US,
        },
    }


def test_the_largest_run_estimates_with_every_figure_finite() -> None:
    run = parse_run_config(_largest(), "largest.yaml")
    result = estimate(run, MemoryModel(run), times=TimeModel(run))
    frame = rows_of(estimate_to_frame(result))
    numbers = frame.select_dtypes("number").to_numpy(dtype=float)
    assert np.isfinite(numbers).all() and (numbers >= 0).all()
    # int64 columns hold their Python integers exactly (an overflow would have raised or wrapped).
    assert frame["parameters"].max() < 2**62 and frame["parameters"].min() > 0
    json.dumps(result.to_json(), allow_nan=False)  # --json stays strict JSON


@pytest.mark.parametrize(
    ("section", "field", "value"),
    [
        ("training", "seq_length", limits.SEQUENCE + 1),
        ("training", "micro_batch_size", limits.MICRO_BATCH_SIZE + 1),
        ("parallel", "pp", limits.STAGES + 1),
        ("device", "hbm_bandwidth_gbs", limits.DEVICE_RATE_MIN / 2),
        ("device", "peak_tflops", limits.DEVICE_RATE * 2),
        ("device", "comm_efficiency", 5e-324),
    ],
)
def test_one_step_over_is_refused(section: str, field: str, value: float) -> None:
    raw = _largest()
    raw[section][field] = value
    with pytest.raises(InputError) as err:
        parse_run_config(raw, "over.yaml")
    assert err.value.field == f"{section}.{field}"
