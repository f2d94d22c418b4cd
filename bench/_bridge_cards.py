"""Megatron-Bridge's own measured runs of its recipes, as run configs for bench/public_runs.py.

One matched pair: Megatron-Core's combined 1F1B (`overlap_moe_expert_parallel_comm`) off and on under the flex
dispatcher's HybridEP backend, Qwen3 30B-A3B in BF16 on 16 H100 (NVIDIA-NeMo/Megatron-Bridge 7ded17dae,
2026-07-25, "perf(recipe): overlap Qwen3 expert communication on H100"):
- on: examples/model_verification_cards/qwen3-30b-a3b/card.yaml, the H100 entry of the performance recipe
  (bridge_commit 8198fd9cd, `--recipe qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config`, 50 steps):
  `last_10_steps_step_time_ms_avg: 20992.030`;
- off: skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md, "HybridEP Production-Shape Benchmark", the
  reproduced baseline with only the overlap changed, iterations 5-20: 24.7138 s a step (its commit not stated:
  taken as the other's).

The recipe (8198fd9cd): src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py
`qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config` (BF16, forced load balance, the overlap on with
delay_wgrad_compute off, `_benchmark_common`: BF16 gradient reduction, HybridEP on 32 SMs, rope fusion) over
recipes/qwen/h100/qwen3_moe.py's 16-GPU config (TP 1, PP 1, EP 16, no SP, sequence 4096, GBS 1024, MBS 1, no
recompute, router fusion, permute fusion, grouped GEMMs, TE graphs of moe_router and moe_preprocess) and
recipes/common.py `_pretrain_common` (distributed optimizer, gradient reduction and parameter gathers
overlapped). `_benchmark_common` "must stay in sync with `_set_common_perf_overrides`" (perf_recipes/_common.py),
so bench/_nemo.py's `_qwen3_run` (the NeMo presets' common settings) is the run, in BF16. Releases: the
commit's 3rdparty/Megatron-LM submodule 6cd6ea530e (2026-07-23), pyproject.toml's Transformer Engine
2e559f062 (VERSION 2.17.0), docker/Dockerfile.ci's base nvcr.io/nvidia/pytorch:26.06-py3 (PyTorch 2.12.0a0
and cuDNN 9.21.1.3, as the NeMo 26.06 container on that base states them, bench/_nemo_releases.py).

The same skill's alltoall pair (41.25 against 31.31 s, "SFT", its sequence and recipe not stated) is not priced.
"""

from __future__ import annotations

from typing import Any

from _nemo import _ROUTER, QWEN3_30B_A3B, _flex, _qwen3_run, _te_graphs

BRIDGE_CARDS = (
    "Megatron-Bridge verification card and EP-overlap skill (NVIDIA-NeMo/Megatron-Bridge 7ded17dae, "
    "examples/model_verification_cards/qwen3-30b-a3b/card.yaml, skills/nemo-mbridge-perf-expert-parallel-overlap)"
)
_RELEASES = {"megatron_core": "2026-07-23", "transformer_engine": "2.17", "pytorch": "2.12.0a0"}
_CUDNN = "9.21.1.3"
# (label, combined 1F1B, seconds a step, what the source states)
_ROWS: tuple[tuple[str, bool, float, str], ...] = (
    ("Qwen3 30B-A3B BF16 EP16 HybridEP (16 H100)", False, 24.7138, "24.7138 s a step (iterations 5-20)"),
    ("Qwen3 30B-A3B BF16 EP16 HybridEP EP-overlap (16 H100)", True, 20.99203, "20,992.03 ms a step (steps 41-50)"),
)
SKIPPED_BRIDGE: tuple[tuple[str, str], ...] = (
    (
        "Megatron-Bridge Qwen3 30B-A3B BF16 EP16 alltoall, EP overlap off / on (16 H100)",
        "an SFT run whose sequence and recipe the skill does not state (41.25 / 31.31 s a step)",
    ),
)


def bridge_card_rows() -> list[dict[str, Any]]:
    """The pair's fields for bench/public_runs.py's PublicRun."""
    rows = []
    for label, overlap, seconds, published in _ROWS:
        raw = _qwen3_run(label, QWEN3_30B_A3B, 16, 1024, 1, {"ep": 16}, "h100-80gb", a2a_overlap=overlap)
        timing = raw["timing"]
        timing.update(matmul_dtype="bf16", fp8_param_gather=False, delay_wgrad_compute=False, cudnn_release=_CUDNN)
        timing.pop("fp8_recipe")
        timing.update({**_flex("hybridep"), **_te_graphs(*_ROUTER)})
        raw["training"].pop("fp8_cache")
        raw["framework_release"] = dict(_RELEASES)
        rows.append(
            {
                "name": f"Megatron-Bridge {label}",
                "source": BRIDGE_CARDS,
                "raw": raw,
                "published": published,
                "seconds": seconds,
                "assumptions": (
                    "routing balanced (forced)",
                    "the overlap-off run at the overlap-on run's commit and container",
                    "cuDNN as the NeMo 26.06 container on the same PyTorch base",
                ),
            }
        )
    return rows
