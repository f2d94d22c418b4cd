"""Which TransformerEngine attention backend runs attention sinks under Megatron (config/run.py
`_check_attention_sinks`, `RunConfig.te_attention_backend_run`)."""

from __future__ import annotations

import pytest
from small_models import GPT_OSS_ATTENTION_LAYER

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel

# GPT-OSS's attention (64 query and 8 key-value heads of 64, a learnable sink logit a head) in a one-layer model
_SPEC = {**GPT_OSS_ATTENTION_LAYER, "attention_sinks": True}


def _raw(device: str = "h100-80gb", flash: bool = True, sinks: bool = True, **timing) -> dict:
    return {
        "name": "sinks",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": {**_SPEC, "attention_sinks": sinks}}],
        "training": {"seq_length": 4096, "micro_batch_size": 1, "flash_attention": flash},
        "device": {"name": device},
        "timing": timing,
    }


@pytest.mark.parametrize(
    ("timing", "field", "said"),
    [
        # TE drops FlashAttention for a softmax offset; Megatron's flash backend turns the other two off
        ({"te_attention_backend": "flash"}, "timing.te_attention_backend", "no backend left"),
        # fused_attn.cpp: an offset softmax from cuDNN 9.13.1; auto falls back to the unfused core before it
        ({"cudnn_release": "9.11.0.98"}, "timing.cudnn_release", "UnfusedDotProductAttention"),
        ({"cudnn_release": "9.13.0.50"}, "timing.cudnn_release", "UnfusedDotProductAttention"),
        ({"cudnn_release": "9.13.0", "te_attention_backend": "fused"}, "timing.cudnn_release", "no backend"),
    ],
)
def test_what_te_runs_no_fused_attention_with_sinks_for_is_refused(timing, field, said):
    with pytest.raises(InputError) as refused:
        parse_run_config(_raw(**timing))
    assert field in str(refused.value) and said in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("release", ["9.13.1.26", "9.13", "9.20.0.48", None])
def test_cudnn_from_9_13_1_runs_the_sinks(release):
    # 25.11's container ships 9.13.1.26 (Megatron-Bridge v0.2.0 software-versions.md); "9.13" names no patch
    timing = {} if release is None else {"cudnn_release": release}
    assert parse_run_config(_raw(**timing)).te_attention_backend_run == "fused"


def test_the_unfused_core_and_models_without_sinks_are_not_refused():
    parse_run_config(_raw(flash=False, cudnn_release="9.11.0.98"))
    parse_run_config(_raw(sinks=False, cudnn_release="9.11.0.98", te_attention_backend="flash"))


def test_sinks_take_an_a100_off_flash_attn():
    # below sm90 auto keeps flash-attn when both qualify (`te_flash_attention`); with a softmax offset TE has only
    # cuDNN's FusedAttention (and the unfused core), so the memory side drops flash-attn's fp32 dQ buffers
    plain = parse_run_config(_raw(device="a100-80gb", sinks=False))
    sinks = parse_run_config(_raw(device="a100-80gb"))
    assert (plain.te_attention_backend_run, sinks.te_attention_backend_run) == ("auto", "fused")
    assert MemoryModel(plain).setup.te_flash and not MemoryModel(sinks).setup.te_flash
