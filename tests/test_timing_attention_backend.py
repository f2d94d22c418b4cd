"""Megatron's --attention-backend picks the attention kernel the time side prices, as it picks what memory keeps.

Source: Megatron-LM language_module.py `_set_attention_backend` (d98e8a64): `flash` sets NVTE_FLASH_ATTN=1 and
NVTE_FUSED_ATTN=0, `fused` the reverse, `auto` neither; TransformerEngine's `get_attention_backend`
(transformer_engine/pytorch/attention/dot_product_attention/utils.py, d0067d0d) then runs flash-attn where
only it is left, and with both left gives cuDNN's FusedAttention the preference from sm90 on. The rates are
the FlashAttention-3 paper's H100 bars (ppb_core.timing.attention_rates docstring): head size 128, no mask,
forward at 16k FlashAttention-2 370, cuDNN 595 TFLOPS/s; causal forward at 2k 298 and 484; of the H100's
989 TFLOPS/s dense BF16.
"""

from __future__ import annotations

import pytest

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.memory.setup import MemorySetup
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel

H100 = DEVICE_CATALOG["h100-80gb"]
A100 = DEVICE_CATALOG["a100-80gb"]
PEAK_H100 = 989.0  # TFLOPS/s, dense BF16


def _h100(backend: str, deterministic: bool = False) -> Kernels:
    return Kernels.from_device(H100, "bf16", "megatron", deterministic=deterministic, te_attention_backend=backend)


def test_flash_on_hopper_runs_flash_attn_2_at_its_measured_rates():
    # 132 (sequence, head) pairs of one 128-query block: one full wave on the H100's 132 SMs (waves 1).
    # No mask at 16k keys: the level itself, FlashAttention-2's 370 against cuDNN's 595 of 989.
    flash, auto, fused = _h100("flash"), _h100("auto"), _h100("fused")
    assert flash.attention_kernel == "flash2"
    assert auto.attention_kernel == fused.attention_kernel == "cudnn_sm90"
    assert flash.attention_efficiency(False, 132, 128, 16384, 128) == pytest.approx(370 / PEAK_H100, abs=1e-3)
    assert auto.attention_efficiency(False, 132, 128, 16384, 128) == pytest.approx(595 / PEAK_H100, abs=1e-3)
    # Causal forward over a 2k triangle (mean keys 1024.5): FlashAttention-2 298, cuDNN 484 TFLOPS/s.
    assert flash.attention_efficiency(False, 132, 128, 1024.5, 128, 1.0) == pytest.approx(298 / PEAK_H100, rel=2e-3)
    assert auto.attention_efficiency(False, 132, 128, 1024.5, 128, 1.0) == pytest.approx(484 / PEAK_H100, rel=2e-3)
    # So a 2k causal forward takes 484/298 = 1.624 times as long under flash.
    flops = 4 * 132 * 128 * 1024.5 * 128
    ratio = flash.attention_s(flops, 0.0, False, 132, 128, 1024.5, 128, 1.0) / auto.attention_s(
        flops, 0.0, False, 132, 128, 1024.5, 128, 1.0
    )
    assert ratio == pytest.approx(484 / 298, rel=4e-3)


def test_flash_takes_flash_attn_s_deterministic_backward_and_no_cudnn_terms():
    # Deterministic on Hopper: cuDNN keeps its dP-workspace backward under auto; under flash flash-attn 2 runs
    # its deterministic backward (`deterministic_splits`) and cuDNN's workspace and dropout cost are gone.
    auto, flash = _h100("auto", deterministic=True), _h100("flash", deterministic=True)
    assert auto.dp_workspace and not auto.deterministic_backward
    assert flash.deterministic_backward and not flash.dp_workspace
    assert _h100("auto").attention_dropout_cost == H100.attention_dropout_cost > 0
    assert _h100("flash").attention_dropout_cost == 0.0
    # head size 64: flash-attn 2's measured ratio (the paper's 16k forward 324/370 = 0.876), not cuDNN's 0.694
    assert _h100("flash").attention_head64_forward == pytest.approx(324 / 370, abs=1e-3)
    assert _h100("auto").attention_head64_forward == pytest.approx(413 / 595, abs=1e-3)


def test_the_backend_is_megatron_s_under_transformer_engine_only():
    # torchtitan's SDPA has its own backend switch; Megatron's local spec runs no TE attention.
    titan = Kernels.from_device(H100, "bf16", "torchtitan", sdpa_backend="cudnn", te_attention_backend="flash")
    assert titan.attention_kernel == "cudnn_sm90"
    local = Kernels.from_device(H100, "bf16", "megatron", transformer_engine=False, te_attention_backend="flash")
    assert local.attention_kernel == "cudnn_sm90"
    # Below sm90 auto already runs flash-attn: flash changes nothing on the A100.
    a100 = [Kernels.from_device(A100, "bf16", "megatron", te_attention_backend=b) for b in ("auto", "flash")]
    assert a100[0] == a100[1]


def _run(backend: str) -> dict:
    return {
        "name": "flash-h100",
        "framework": "megatron",
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
        "training": {"seq_length": 4096, "flash_attention": True},
        "device": {"name": "h100-80gb"},
        "timing": {"te_attention_backend": backend},
    }


def test_the_run_config_field_sets_time_and_memory_alike():
    for backend, kernel in (("flash", "flash2"), ("auto", "cudnn_sm90"), ("fused", "cudnn_sm90")):
        run = parse_run_config(_run(backend))
        assert TimeModel(run).kernels.attention_kernel == kernel
        assert MemorySetup.from_run(run).te_flash == (kernel == "flash2")
