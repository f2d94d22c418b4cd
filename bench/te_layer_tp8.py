"""A GPT-3 175B layer at tensor parallelism 8 on 8 H100, kernel by kernel: ours against a public profile.

    python bench/te_layer_tp8.py

NVIDIA/Fuser benchmarks TransformerEngine's `te.TransformerLayer` as its tensor-parallel baseline
(tests/python/multidevice/test_transformer_engine.py at 03a9053: hidden 12288, 96 heads, FFN 4h,
batch 1, sequence 2048, BF16, TE's defaults: LayerNorm, GeLU, biases, dropout 0.1, causal; TP 8 over
the 8 "NVIDIA H100 80GB HBM3" of one node, with sequence parallelism or without, no userbuffers).
What it published:
- kernel times of one forward without sequence parallelism (`nsys stats --report cuda_gpu_kern_sum`,
  NVIDIA/Fuser PR #4844, 2025-07-24, "Transformer Engine (TP, nonoverlap)"): three cuBLAS
  `nvjet_tst_256x128_64x4_1x2_h_bz_coopA_TNT` GEMMs of 109.663, 384.733 and 401.214 us, one
  `nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN` of 288.415 us, and two `triton_poi_fused_add_native_dropout_0`
  (TE's bias-dropout-add, which its jit_fuser compiles with torch.compile) of 84.784 us on average;
- wall-clock times, synchronized, 5 rounds each, of the layer with sequence parallelism: the forward
  2.5 ms (PR #5560, 2025-11-20; 2.67 median in PR #3546, 2024-12-09), the backward 4.58 ms (PR #5667,
  2025-12-11).

The GEMMs are told apart by their FLOPs: the QKV projection (2048 x 12288 -> 4608) has the bias in its
epilogue and would need 1.07 PFLOP/s in any of the three 300-400 us kernels' place otherwise; of the
three without, the output projection (2048 x 1536 -> 12288, a quarter of FC1's FLOPs) can only be the
109.7 us one (at 309 GFLOP, FC1's and FC2's, it would run at 2.8 PFLOP/s, above the 989 peak).
The wall-clock times carry what a synchronized five-round microbenchmark carries beside the kernels:
the host's first launches, and at every collective the other ranks' skew (the profiled all-reduce's
shortest instance took 20.8 ms), so they bound the layer from above; printed, not fitted.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from _measure import machine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import parse_run_config  # noqa: E402
from ppb_core.model.switches import LayerType  # noqa: E402
from ppb_core.model.walk import BODY, walk  # noqa: E402
from ppb_core.timing.pricer import TimeModel  # noqa: E402

# NVIDIA/Fuser PR #4844's nsys kernel times (us), one forward at TP 8 without sequence parallelism
MEASURED_GEMM_US = {"qkv": 288.415, "out_proj": 109.663, "mlp_in + mlp_out": 384.733 + 401.214}
MEASURED_DROPOUT_ADD_US = 84.784  # triton_poi_fused_add_native_dropout_0, the mean of its two
MEASURED_FORWARD_SP_MS = 2.5  # PR #5560, with sequence parallelism
MEASURED_BACKWARD_SP_MS = 4.58  # PR #5667, with sequence parallelism

# ppb's op names of each measured kernel (Megatron's fused QKV GEMM is priced as its two parts)
GEMM_OPS = {"qkv": ("qk_proj", "v_proj"), "out_proj": ("out_proj",), "mlp_in + mlp_out": ("mlp_in", "mlp_out")}


def gpt3_layer(sequence_parallel: bool) -> dict:
    """The benchmarked layer as a ppb run config: one GPT-3 layer on TP 8, TE's kernels (framework megatron)."""
    return {
        "name": "fuser-te-gpt3-layer",
        "framework": "megatron",  # TE's fused LayerNorm and GEMM epilogues, cuDNN attention
        "models": [
            {
                "name": "layer",
                "spec": {
                    "vocab_size": 32000,
                    "hidden_size": 12288,
                    "num_layers": 1,
                    "num_attention_heads": 96,
                    "intermediate_size": 4 * 12288,
                    "activation": "gelu",
                    "norm": "layernorm",
                    "norm_bias": True,
                    "position_embedding": "learned",
                    "max_position_embeddings": 2048,
                    "attention_bias": True,
                    "attention_output_bias": True,
                    "mlp_bias": True,
                    "attention_dropout": 0.1,
                    "hidden_dropout": 0.1,
                },
            }
        ],
        "parallel": {"dp": 1, "tp": 8, "pp": 1, "sequence_parallel": sequence_parallel},
        "training": {
            "seq_length": 2048,
            "micro_batch_size": 1,
            "micro_batches": 1,
            "dtype": "bf16",
            "flash_attention": True,
        },
        "device": {"name": "h100-80gb"},
        "timing": {"overlap": {"tp": 0.0}},  # the benchmark runs without userbuffers
    }


def priced(sequence_parallel: bool) -> tuple[dict[tuple[str, str], float], tuple[float, float]]:
    """Our ms per (op, pass) of the layer, and its forward and backward as the balancer sees them."""
    run = parse_run_config(gpt3_layer(sequence_parallel), "bench/te_layer_tp8.py")
    model = TimeModel(run)
    layer = next(layer for layer in walk(run).layers if layer.node == BODY)
    ms: dict[tuple[str, str], float] = defaultdict(float)
    for row in model.breakdown(layer, LayerType.NOT_REC_LAYER):
        ms[row.name, row.phase] += row.ms
    return ms, model.layer_times(layer, LayerType.NOT_REC_LAYER)


def main() -> int:
    print(f"machine: {machine()}")
    ms, _ = priced(sequence_parallel=False)
    print("forward kernels at TP 8 without sequence parallelism (NVIDIA/Fuser PR #4844's nsys):")
    print(f"  {'kernel':18} {'ours us':>8} {'measured':>9} {'ours/measured':>14}")
    ours_total = measured_total = 0.0
    for kernel, measured in MEASURED_GEMM_US.items():
        ours = sum(ms[op, "forward"] for op in GEMM_OPS[kernel]) * 1e3
        ours_total += ours
        measured_total += measured
        print(f"  {kernel:18} {ours:8.1f} {measured:9.1f} {ours / measured - 1:+14.1%}")
    print(f"  {'GEMMs':18} {ours_total:8.1f} {measured_total:9.1f} {ours_total / measured_total - 1:+14.1%}")
    dropout_add = ms["residual_attention", "forward"] * 1e3
    print(
        f"  {'dropout-add':18} {dropout_add:8.1f} {MEASURED_DROPOUT_ADD_US:9.1f} "
        f"{dropout_add / MEASURED_DROPOUT_ADD_US - 1:+14.1%}"
    )
    _, (forward_ms, backward_ms) = priced(sequence_parallel=True)
    print("the layer with sequence parallelism, wall clock (synchronized, 5 rounds; an upper bound):")
    print(
        f"  forward  ours {forward_ms:.2f} ms, measured {MEASURED_FORWARD_SP_MS} ms "
        f"({forward_ms / MEASURED_FORWARD_SP_MS - 1:+.1%})"
    )
    print(
        f"  backward ours {backward_ms:.2f} ms, measured {MEASURED_BACKWARD_SP_MS} ms "
        f"({backward_ms / MEASURED_BACKWARD_SP_MS - 1:+.1%})"
    )
    both = forward_ms + backward_ms
    measured_both = MEASURED_FORWARD_SP_MS + MEASURED_BACKWARD_SP_MS
    print(
        f"  both     ours {both:.2f} ms, measured {measured_both:.2f} ms: "
        f"measured over ours x{measured_both / both:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
