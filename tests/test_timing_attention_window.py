"""Sliding-window flash attention against NVIDIA's cuDNN measurements of GPT-OSS's windowed attention.

NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training: results/gpt_oss/gb200/gpt_oss_20260424_100011.csv
(fb682ce; cuDNN 9.22, GB200, BF16, 128 heads of 64, window 128, batch 2, causal) and results/
h200_919_only_cudnn/gpt_oss_20260227_034819.csv (df73764; cuDNN 9.19, H200, 64 query and 8 KV heads of 64,
window 1024, batch 2), FLOPs counted over the window's band.
"""

from __future__ import annotations

import math

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.timing.pricer import TimeModel


def _kernels(device: str, cudnn: str):
    spec = {"vocab_size": 1000, "hidden_size": 4096, "num_layers": 1, "num_attention_heads": 64, "head_dim": 64}
    raw = {
        "name": "window",
        "models": [{"name": "llm", "spec": {**spec, "intermediate_size": 128}}],
        "training": {"seq_length": 4096, "flash_attention": True},
        "device": {"name": device},
        "timing": {"cudnn_release": cudnn},
    }
    return TimeModel(parse_run_config(raw)).kernels


def _band(s: int, w: int) -> float:
    """Keys a query walks on average: the first w queries 1..w, the rest w: (s·w − w(w−1)/2)/s."""
    return (s * w - w * (w - 1) / 2) / s


def test_blackwell_window_128_reads_cudnn_s_measured_gpt_oss_rates():
    # GB200 at 4k: forward 161, backward 182 TFLOP/s single calls. ppb's level is the 16k no-mask head-128 rate
    # (1697 forward, 1374 backward of 2500) as the device runs it back to back (`attention_forward`): the window's
    # rate is that level times 161/1697 (182/1374). 2 · 128 = 256 (sequence, head) pairs of 32 query blocks =
    # 8192 tiles on GB200's 152 SMs: 54 waves, 8192 / (54 · 152) = 0.99805 of the last filled.
    kernels = _kernels("gb200", "9.22")
    waves = 8192 / (54 * 152)
    for backward, measured, reference in ((False, 161.0, 1697.0), (True, 182.0, 1374.0)):
        level = kernels.attention_backward if backward else kernels.attention_forward
        got = kernels.attention_efficiency(backward, 256, 4096, _band(4096, 128), 64, 1.0, 128)
        assert got == pytest.approx(level * measured / reference * waves, rel=1e-9)
    # far below a causal pass over the window's keys alone (the rule the window replaces)
    rule = kernels.attention_efficiency(False, 256, 4096, _band(4096, 128), 64, 1.0)
    assert rule > 3 * kernels.attention_efficiency(False, 256, 4096, _band(4096, 128), 64, 1.0, 128)


def test_hopper_window_1024_follows_the_causal_rule_within_six_percent():
    # H200 at 4k, window 1024 (a query walks 896.1 keys on average): measured 336 forward, 289 backward TFLOP/s.
    # No sm90 window curve: the causal rule at that walk (the triangle of side 2·896 − 1) gives 315 and 275.
    kernels = _kernels("h200", "9.19")
    peak = kernels.flops_per_s / 1e12
    for backward, measured in ((False, 336.0), (True, 289.0)):
        rate = peak * kernels.attention_efficiency(backward, 128, 4096, _band(4096, 1024), 64, 1.0, 1024)
        assert math.isclose(rate, measured, rel_tol=0.065)
