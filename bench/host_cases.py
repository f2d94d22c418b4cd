"""Megatron CI's small cases, whose iterations are the host launching kernels: ppb against them.

    python bench/host_cases.py

The catalog's `host_kernel_us` (Megatron's host time per kernel launch on DGX H100 and DGX A100) is
measured by one case, gpt/gpt3_mcore_te_tp4_pp1_dist_optimizer_overlap_grad_reduce_param_gather
(bench/decompose.py). These are other cases of the same harness (NVIDIA/Megatron-LM d98e8a64,
tests/functional_tests/test_cases, one node of 8 GPUs, `iteration-time` golden values, median of the
logged iterations after the first), each with every flag of its model_config.yaml that ppb models; a
check of the launch counts (`ppb_core.timing.launches`) on other layers and layouts, not a fit. Each
row prints the measured seconds, ppb's GPU work alone (`host_kernel_us` 0), ppb with the host, and
the error of the latter.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import machine  # noqa: E402
from _public import GPT_SMALL, run_config  # noqa: E402

from ppb_core.timing.iteration import run_iteration  # noqa: E402

# Flags of every case below (model_config.yaml): --deterministic-mode, --no-gradient-accumulation-fusion,
# --log-params-norm, --log-num-zeros-in-grad, the distributed optimizer, bf16, sequence 1024, micro-batch
# 4, global batch 32, 12 layers of hidden 512 and 8 heads, the GPT-2 vocabulary (50257).
_TIMING = {
    "gradient_accumulation_fusion": False,
    "deterministic": True,
    "log_params_norm": True,
    "log_num_zeros_in_grad": True,
}
# moe/*: --disable-bias-linear, top-2 of 8 experts, --moe-router-dtype fp32 where set, grouped GEMM.
_MOE_SMALL = {
    **GPT_SMALL,
    "attention_bias": False,
    "attention_output_bias": False,
    "mlp_bias": False,
    "num_experts": 8,
    "experts_per_token": 2,
}


def _run(
    name: str,
    gpu: str,
    spec: dict[str, Any],
    parallel: dict[str, Any],
    flash: bool,
    dispatcher: str = "alltoall",
    **training: Any,
) -> dict:
    """*dispatcher*: the case's --moe-token-dispatcher-type (Megatron's default allgather where none is given)."""
    dp = 8 // (parallel.get("tp", 1) * parallel.get("pp", 1))
    return {
        "name": name,
        "framework": "megatron",
        "models": [{"name": "llm", "spec": spec, "pad_vocab_multiple": 128}],
        "parallel": {"dp": dp, "zero": 1, **parallel},
        "training": {
            "seq_length": 1024,
            "micro_batch_size": 4,
            "micro_batches": 32 // (4 * dp),
            "dtype": "bf16",
            "flash_attention": flash,
            **training,
        },
        "device": {"name": f"{gpu}-80gb", "reserved_mb": 0},
        "timing": {**_TIMING, "moe_dispatcher": dispatcher},
    }


# (case, GPU, commit of its golden values, logged iteration-time values after the first, run config)
CASES: list[tuple[str, str, str, tuple[float, ...], dict]] = [
    # gpt/gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer: TP 1, DP 8 (one micro-batch), TE's fused
    # attention (no --attention-backend), 100 iterations; the first 49 values (2-50) kept.
    (
        "gpt/gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer",
        "h100",
        "93ebf8d72f",
        (0.06943, 0.05355, 0.05519, 0.05339, 0.05191, 0.05307, 0.05226, 0.05375, 0.05249, 0.05316, 0.05218,
         0.05297, 0.05203, 0.05301, 0.05212, 0.05321, 0.05214, 0.05298, 0.05256, 0.05306, 0.05175, 0.05387,
         0.05212, 0.05322, 0.05305, 0.05287, 0.05194, 0.05257, 0.05207, 0.05373, 0.05187, 0.05349, 0.05193,
         0.05417, 0.05347, 0.05341, 0.05199, 0.05342, 0.05289, 0.05293, 0.05239, 0.05297, 0.0534, 0.05293,
         0.05208, 0.05325, 0.05259, 0.05288),
        _run("tp1", "h100", GPT_SMALL, {"tp": 1}, True),
    ),
    (
        "gpt/gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer",
        "a100",
        "adc69dba2d",
        (0.10915, 0.1088, 0.11097, 0.1066, 0.10661, 0.10875, 0.10698, 0.10675, 0.10779, 0.10869, 0.10963,
         0.10676, 0.10842, 0.10681, 0.10678, 0.10683, 0.1072, 0.10704, 0.10665, 0.10819),
        _run("tp1", "a100", GPT_SMALL, {"tp": 1}, True),
    ),
    # moe/gpt3_mcore_te_tp2_pp1_te_8experts_etp1_ep4: TP 2 with SP, EP 4, ETP 1, DP 4 (two micro-batches),
    # experts of the FFN width (2048), aux-loss routing, unfused attention, no --moe-token-dispatcher-type:
    # Megatron's default allgather dispatcher (megatron/core/transformer/transformer_config.py).
    (
        "moe/gpt3_mcore_te_tp2_pp1_te_8experts_etp1_ep4",
        "h100",
        "adc69dba2d",
        (0.5695, 0.51238, 0.4924, 0.46909, 0.47791, 0.47242, 0.48363, 0.49304, 0.43496, 0.45131),
        _run(
            "moe-tp2-ep4",
            "h100",
            {**_MOE_SMALL, "moe_intermediate_size": 2048},
            {"tp": 2, "ep": 4, "etp": 1, "sequence_parallel": True},
            False,
            "allgather",
            moe={"router": {"aux_losses": ["aux_loss"]}},  # --moe-aux-loss-coeff 1e-2
        ),
    ),
    (
        "moe/gpt3_mcore_te_tp2_pp1_te_8experts_etp1_ep4",
        "a100",
        "adc69dba2d",
        (0.31096, 0.3091, 0.29978, 0.3021, 0.30241, 0.31582, 0.30896, 0.31245, 0.31484, 0.3136),
        _run(
            "moe-tp2-ep4",
            "a100",
            {**_MOE_SMALL, "moe_intermediate_size": 2048},
            {"tp": 2, "ep": 4, "etp": 1, "sequence_parallel": True},
            False,
            "allgather",
            moe={"router": {"aux_losses": ["aux_loss"]}},  # --moe-aux-loss-coeff 1e-2
        ),
    ),
    # moe/gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_dist_optimizer: TP 4 with SP, EP 2, ETP 2,
    # PP 2 (DP 1, eight micro-batches), experts of 1024, a shared expert of 512, fp32 router, TE's fused
    # attention, --no-bias-gelu-fusion, the alltoall dispatcher; 100 iterations, the first 49 values (2-50) kept.
    (
        "moe/gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_dist_optimizer",
        "h100",
        "cd4afffa64",
        (0.90833, 0.86431, 0.87482, 0.8573, 0.85553, 0.83513, 0.83483, 0.83557, 0.83528, 1.58117, 0.82194,
         0.81823, 0.81808, 0.81282, 0.82548, 0.81502, 0.81167, 0.81094, 0.83617, 0.828, 0.82514, 0.85341,
         0.81784, 0.81255, 0.81988, 0.84249, 1.54481, 0.82635, 0.81779, 0.83092, 0.82788, 0.8237, 0.83024,
         0.81681, 0.81326, 1.61795, 0.84407, 0.85127, 0.82922, 0.83611, 0.81901, 2.40554, 0.81924, 0.84478,
         0.8247, 1.5457, 0.81497, 0.80868),
        _run(
            "moe-tp4-ep2-pp2",
            "h100",
            {**_MOE_SMALL, "moe_intermediate_size": 1024, "shared_experts": 1, "shared_expert_intermediate_size": 512},
            {"tp": 4, "pp": 2, "ep": 2, "etp": 2, "sequence_parallel": True},
            True,
            moe={"router_dtype": "fp32"},
        ),
    ),
]  # fmt: skip


def evaluate() -> list[tuple[str, str, str, float, float, float]]:
    """(case, GPU, commit, measured median, ppb's GPU work alone, ppb with the host) per case."""
    rows = []
    for case, gpu, commit, values, raw in CASES:
        alone = {**raw, "device": {**raw["device"], "host_kernel_us": 0.0}}
        rows.append(
            (
                case,
                gpu,
                commit,
                statistics.median(values),
                run_iteration(run_config(alone, case)).seconds,
                run_iteration(run_config(raw, case)).seconds,
            )
        )
    return rows


def main() -> int:
    print(f"machine: {machine()}")
    print(f"{'case':72s} {'gpu':4s} {'commit':10s} {'measured':>8s} {'GPU only':>8s} {'ppb':>7s} {'error':>7s}")
    errors = []
    for case, gpu, commit, measured, alone, ours in evaluate():
        errors.append(abs(ours / measured - 1))
        print(f"{case:72s} {gpu:4s} {commit:10s} {measured:8.3f} {alone:8.3f} {ours:7.3f} {ours / measured - 1:+7.1%}")
    print(f"mean absolute error: {statistics.mean(errors):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
