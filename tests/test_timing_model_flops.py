"""Model FLOPs equal Megatron-LM's `num_floating_point_operations`; hardware FLOPs add what recompute reruns.

Expected values are derived by hand from Megatron-LM's formula (megatron/training/training.py,
`transformer_flops`, NVIDIA/Megatron-LM at d98e8a64ddf3): per token, 3 passes × 2 FLOPs per
multiply-add = 6 per weight, and 6·(heads·kv_channels) per (query, key) pair of the causal square
(s² pairs per sequence, the mask halving them and the multiply-add doubling them back).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from small_models import gpt_spec

from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.timing.model_flops import (
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    model_flops_utilization,
    recompute_flops_per_iteration,
)

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def gpt_run(h=1024, a=16, layers=4, s=512, v=32000, b=2, m=3, dp=2, tp=1, flash=False):
    spec = gpt_spec(h, a, s, layers, v, biases=False, dropout=None, tied=True)
    return parse_run_config(
        {
            "name": "gpt",
            "models": [{"name": "gpt", "spec": spec}],
            "parallel": {"dp": dp, "tp": tp},
            "training": {"seq_length": s, "micro_batch_size": b, "micro_batches": m, "flash_attention": flash},
            "device": {"name": "a100-80gb"},
        }
    )


@pytest.mark.parametrize(
    "h,a,layers,s,v,b,m,dp,tp",
    [
        (6144, 64, 48, 2048, 51200, 4, 1, 1, 8),  # Korthikanti's 22B
        (12288, 96, 96, 2048, 51200, 1, 64, 2, 8),  # GPT-3 175B
        (1024, 16, 4, 512, 32000, 2, 3, 2, 1),
    ],
)
def test_dense_mha_gelu_is_megatrons_closed_form(h, a, layers, s, v, b, m, dp, tp):
    # MHA (kv heads = heads, kv_channels = h/a), GeLU 4h: per token and layer 6·(h·3h + h·h) + 6·h·4h·2
    # = 72h²; core 6h per pair, s² pairs per sequence; logits 6hv per token. With B sequences:
    # 72·B·s·L·h²·(1 + s/(12h) + v/(12hL)): Korthikanti's eq. 7 with the causal half of the square.
    B = b * m * dp
    expected = 72 * B * s * layers * h**2 * (1 + s / (12 * h) + v / (12 * h * layers))
    assert model_flops_per_iteration(gpt_run(h, a, layers, s, v, b, m, dp, tp)) == pytest.approx(expected, rel=1e-12)


def test_gqa_swiglu_llama3_8b():
    # h=4096, 32 layers, 32 heads, 8 kv heads, d=128, SwiGLU 14336, vocab 128256.
    # attention per token and layer: 6·(4096·(4096 + 1024 + 1024) + 4096·4096) = 251,658,240
    # MLP: 6·4096·14336·3 = 1,056,964,608; both × 32 layers = 41,875,931,136
    # logits: 6·4096·128256 = 3,152,019,456 → 45,027,950,592 per token
    # core: 6·4096 per pair and layer × 32 = 786,432 per pair
    # The shipped run: s = 8192, 1 × 32 micro-batches × dp 8 = 256 sequences, 2,097,152 tokens.
    run = load_run_config(CONFIGS / "llama3-8b.yaml")
    expected = 2_097_152 * 45_027_950_592 + 256 * 8192**2 * 786_432
    assert model_flops_per_iteration(run) == expected


def test_moe_mixtral_8x7b():
    # Attention as Llama's: 251,658,240. MoE: 6·4096·(14336·2 experts)·3 = 2,113,929,216 (no router,
    # no shared expert). Per layer 2,365,587,456 × 32 = 75,698,798,592; logits 6·4096·32000 =
    # 786,432,000 → 76,485,230,592 per token; core 786,432 per pair.
    # The shipped run: s = 4096, 1 × 64 × dp 16 = 1024 sequences, 4,194,304 tokens.
    run = load_run_config(CONFIGS / "mixtral-8x7b.yaml")
    expected = 4_194_304 * 76_485_230_592 + 1024 * 4096**2 * 786_432
    assert model_flops_per_iteration(run) == expected


def test_mla_moe_mtp_deepseek_v3():
    # h=7168, 61 layers (3 dense of 18432, 58 MoE of 8 × 2048 + one shared 2048), 128 heads, q latent
    # 1536, kv latent 512, nope 128, rope 64, v 128, vocab 129280, one MTP module (an MoE layer).
    # MLA per token and layer: q 1536·(7168 + 128·192 + 1) = 48,760,320; kv 512·(7168 + 128·256 + 1)
    # = 20,447,744; rope key 7168·64 = 458,752; out 128·128·7168 = 117,440,512; sum 187,107,328,
    # × 6 = 1,122,643,968, × 62 layers (61 + MTP) = 69,603,926,016.
    # MLP: 6·7168·(18432·3·3 dense + (2048·8 + 2048)·3·59 MoE) = 43,008·3,428,352 = 147,446,562,816.
    # MTP norms and projection: 6·(3·7168 + 2·7168²) = 616,691,712. Logits 6·7168·129280·2 =
    # 11,120,148,480. Per token: 228,787,329,024. Core: 6·(128·192/2 + 128·128/2) = 122,880 per pair
    # and layer, × 62 = 7,618,560.
    # The shipped run: s = 4096, 1 × 128 × dp 128 = 16384 sequences, 67,108,864 tokens.
    run = load_run_config(CONFIGS / "deepseek-v3.yaml")
    expected = 67_108_864 * 228_787_329_024 + 16384 * 4096**2 * 7_618_560
    assert model_flops_per_iteration(run) == expected


def test_hardware_flops_add_what_each_option_reruns():
    # GPT, h=1024, a=16, L=4, s=512, eager, B = 12 sequences: full recompute reruns every layer's
    # forward matmuls, 24·s·h² + 4·s²·h per sequence (eager: the whole square is computed); the
    # output layer is never recomputed.
    run = gpt_run()
    B, L, s, h = 12, 4, 512, 1024
    layer_forward = 24 * s * h**2 + 4 * s**2 * h
    assert recompute_flops_per_iteration(run, None) == 0
    assert recompute_flops_per_iteration(run, "NONE") == 0
    assert recompute_flops_per_iteration(run, "FULL") == pytest.approx(B * L * layer_forward, rel=1e-12)
    assert hardware_flops_per_iteration(run, "FULL") == pytest.approx(
        model_flops_per_iteration(run) + B * L * layer_forward, rel=1e-12
    )
    # Two layers of four fully recomputed: half of it.
    half = recompute_flops_per_iteration(run, lambda _model, index: "FULL" if index < 2 else "NONE")
    assert half == pytest.approx(B * 2 * layer_forward, rel=1e-12)


def test_mfu_divides_by_every_devices_peak_at_the_dtype():
    # 22B on 8 A100s (312 TFLOPS bf16): model FLOPs in 1 s over 8 × 312e12.
    run = gpt_run(6144, 64, 48, 2048, 51200, 4, 1, 1, 8)
    flops = 72 * 4 * 2048 * 48 * 6144**2 * (1 + 2048 / (12 * 6144) + 51200 / (12 * 6144 * 48))
    assert model_flops_utilization(run, 1000.0) == pytest.approx(flops / (8 * 312e12), rel=1e-12)


def test_gpt_oss_120b_counts_no_window_and_no_gate():
    # h=2880, 36 layers, 64 heads and 8 kv heads of 64, 128 experts top-4 of 2880, vocab 201088, the
    # quick-GEGLU counted at 2 (not --swiglu), every layer's core as a full causal one (no window).
    # attention per token and layer: 6·(2880·(4096 + 512 + 512) + 4096·2880) = 159,252,480
    # MoE: 6·2880·(2880·4)·2 = 398,131,200; both × 36 = 20,065,812,480
    # logits: 6·2880·201088 = 3,474,800,640 → 23,540,613,120 per token
    # core: 6·4096 per pair and layer × 36 = 884,736 per pair; at s = 4096: 884,736·4096 = 3,623,878,656 a token
    # → 27,164,491,776 FLOPs a token. NeMo 26.04's table (Megatron-Bridge docs/performance-summary.md at
    # 74695a06d, GPT OSS 120B at 4096): 433 TFLOP/s over 15,938 tokens/s (GB200) = 27.17e9, 355 / 13,045
    # (B200) = 27.21e9, 158 / 5,810 (H100) = 27.19e9: within 0.2% of 27.164e9 (the table's 3-digit TFLOP/s
    # rounds to 0.3% at most; its two columns are each an average of their own).
    # The shipped run: s = 4096, 1 × 80 micro-batches × dp 16 = 1280 sequences, 5,242,880 tokens.
    run = load_run_config(CONFIGS / "gpt-oss-120b.yaml")
    expected = 5_242_880 * 23_540_613_120 + 1280 * 4096**2 * 884_736
    assert model_flops_per_iteration(run) == expected
    assert expected / 5_242_880 == 27_164_491_776
    for tflops, tokens in ((433, 15938), (355, 13045), (158, 5810)):
        assert abs(tflops * 1e12 / tokens / 27_164_491_776 - 1) < 0.002
