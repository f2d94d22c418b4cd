"""torchtitan's FlashAttention-2 is PyTorch SDPA's flash backend (aten's copy of flash-attn 2's kernels), whose
forward runs at the share of flash-attn 2's the two reach on one GPU.

Source: pytorch/benchmark pull request #2443 (Aug 2024), tritonbench's flash_attention operator
(torchbenchmark/operators/flash_attention/operator.py: `sdpa` pins sdpa_kernel([SDPBackend.FLASH_ATTENTION]),
`flash_v2` calls flash-attn's flash_attn_qkvpacked_func), BF16, one sequence of 16k tokens, 16 heads of 128, no
mask, on one H100: SDPA 6.551 ms, flash-attn 2 6.142 ms. FLOPs 4 · 16384² · 16 · 128 = 2.199e12, so 335.7 and
358.0 TFLOP/s. The catalog's FlashAttention-2 level is flash-attn 2's in the FlashAttention-3 paper (H100 SXM5,
the same shape): 370 of the H100's 989 dense BF16 TFLOPS/s.
"""

from __future__ import annotations

import pytest

from ppb_core.config.devices import DEVICE_CATALOG, SDPA_FLASH2_FORWARD_RATIO
from ppb_core.config.run import parse_run_config
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel

H100 = DEVICE_CATALOG["h100-80gb"]
A100 = DEVICE_CATALOG["a100-80gb"]
PEAK_H100 = 989.0  # TFLOPS/s, dense BF16
# one wave of (sequence, head) pairs on the H100's 132 SMs, a 128-query block each, 16k keys, head size 128
SHAPE = (132, 128, 16384, 128)


def test_the_ratio_is_the_pull_request_s_pair():
    # 6.142 / 6.551 = 0.93757, kept to three places
    assert abs(SDPA_FLASH2_FORWARD_RATIO - 6.142 / 6.551) < 5e-4
    assert H100.sdpa_flash2_forward_ratio == SDPA_FLASH2_FORWARD_RATIO == 0.938
    # no such pair on an A100: as fast as flash-attn 2
    assert A100.sdpa_flash2_forward_ratio == 1.0


def test_torchtitan_s_flash_forward_runs_at_sdpa_s_share_of_flash_attn_2():
    titan = Kernels.from_device(H100, "bf16", "torchtitan", sdpa_backend="flash")
    megatron = Kernels.from_device(H100, "bf16", "megatron", te_attention_backend="flash")
    assert titan.attention_kernel == megatron.attention_kernel == "flash2"
    # forward, 16k, no mask: flash-attn 2 370 TFLOP/s; PyTorch's 370 · 0.938 = 347.1
    assert megatron.attention_efficiency(False, *SHAPE) == pytest.approx(370 / PEAK_H100, abs=1e-3)
    assert titan.attention_efficiency(False, *SHAPE) == pytest.approx(370 * 0.938 / PEAK_H100, abs=1e-3)
    # so a forward pass takes 1 / 0.938 = 1.066 times flash-attn 2's time
    flops = 4 * 132 * 128 * 16384 * 128
    ratio = titan.attention_s(flops, 0.0, False, *SHAPE) / megatron.attention_s(flops, 0.0, False, *SHAPE)
    assert ratio == pytest.approx(1 / 0.938, rel=1e-3)
    # the backward has no measured pair: flash-attn 2's 322 TFLOP/s for both
    assert titan.attention_efficiency(True, *SHAPE) == megatron.attention_efficiency(True, *SHAPE)
    assert titan.attention_efficiency(True, *SHAPE) == pytest.approx(322 / PEAK_H100, abs=1e-3)


def test_cudnn_and_unmeasured_devices_keep_their_rates():
    cudnn = Kernels.from_device(H100, "bf16", "torchtitan", sdpa_backend="cudnn")
    assert cudnn.attention_forward == H100.attention_forward_efficiency
    a100 = Kernels.from_device(A100, "bf16", "torchtitan", sdpa_backend="flash")
    assert a100.attention_forward == A100.flash2_forward_efficiency == 0.73


def _titan_run(device: dict) -> dict:
    return {
        "name": "sdpa-flash",
        "framework": "torchtitan",
        "models": [
            {
                "name": "llm",
                "spec": {
                    "vocab_size": 4096,
                    "hidden_size": 2048,
                    "num_layers": 2,
                    "num_attention_heads": 16,
                    "intermediate_size": 8192,
                },
            }
        ],
        "parallel": {"tp": 1},
        "training": {"seq_length": 4096},
        "device": device,
        "timing": {"sdpa_backend": "flash"},
    }


def test_a_run_config_may_state_its_gpu_s_ratio():
    catalog = TimeModel(parse_run_config(_titan_run({"name": "h100-80gb"}))).kernels
    stated = TimeModel(parse_run_config(_titan_run({"name": "h100-80gb", "sdpa_flash2_forward_ratio": 1.0}))).kernels
    # 0.374 of peak (370 / 989) times the ratio
    assert catalog.attention_forward == pytest.approx(0.374 * 0.938)
    assert stated.attention_forward == pytest.approx(0.374)
