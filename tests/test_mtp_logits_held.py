"""The last MTP head's logits through the model's loss under Megatron-Core 0.15 and 0.16.

From d7bf5aaaa8 (2025-08-26) `GPTModel._postprocess` ran the MTP heads' output layer and loss in its own loop, so
its local `mtp_logits` lived on through the model's own output layer and loss's forward (gpt_model.py at
11debfa7b4); 9d71cb1cd2 (2026-02-04, core_v0.17.0) moved the loop into `process_mtp_loss`, whose return frees
them, and before d7bf5aaaa8 `MultiTokenPredictionBlock.forward` dropped them on its return.
"""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, layers

from ppb_core.config.run import parse_run_config
from ppb_core.memory import MemoryModel

# tp 2, seq 64, micro-batch 2: T = 128 tokens, v/t = 1024/2 = 512 logits a token, so 65,536 logits a rank;
# the 16-bit logits 2·65,536 = 131,072 B; the data loader's bool mask b·s·s = 2·64·64 = 8,192 B; the fused
# loss's fp32 scatter copy 4·65,536 = 262,144 B
LOGITS_BYTES = 131_072
MASK_BYTES = 8_192
SCATTER_COPY_BYTES = 262_144


def _loss_bytes(release: str | None, fusion: bool, impl: str = "native", mtp: int = 1) -> float:
    raw = {
        "name": "mtp-logits",
        "framework": "megatron",
        "models": [{"name": "m", "spec": {**DENSE, "mtp_layers": mtp}}],
        "parallel": {"tp": 2, "sequence_parallel": True, "world_size": 2},
        "training": {"seq_length": 64, "micro_batch_size": 2},
        "device": {"name": "h100-80gb"},
        "timing": {"cross_entropy_fusion": fusion, "cross_entropy_fusion_impl": impl},
    }
    if release is not None:
        raw["framework_release"] = {"megatron_core": release}
    run = parse_run_config(raw, "mtp-logits.yaml")
    return MemoryModel(run).loss_bytes(layers(run)["TAIL"])


@pytest.mark.parametrize("release", ["0.15", "0.16", "2025-08-26", "2026-01-14"])
def test_the_plain_loss_forward_holds_the_mtp_logits_in_the_window(release: str) -> None:
    # forward: the logits, the mask and the MTP head's logits, 131,072 + 8,192 + 131,072; the backward's 16-bit
    # gradient alone is smaller
    assert _loss_bytes(release, fusion=False) == LOGITS_BYTES + MASK_BYTES + LOGITS_BYTES == 270_336


@pytest.mark.parametrize("release", [None, "0.14", "0.17", "2025-08-17", "2026-02-04"])
def test_outside_the_window_the_forward_holds_the_logits_and_the_mask(release: str | None) -> None:
    assert _loss_bytes(release, fusion=False) == LOGITS_BYTES + MASK_BYTES == 139_264


@pytest.mark.parametrize("release", [None, "0.16"])
def test_the_fused_loss_backward_stays_the_larger(release: str | None) -> None:
    # 131,072 + max(8,192 + 131,072, 262,144): the scatter copy's backward either way
    assert _loss_bytes(release, fusion=True) == LOGITS_BYTES + SCATTER_COPY_BYTES == 393_216


def test_no_mtp_layer_or_te_loss_holds_none_more() -> None:
    assert _loss_bytes("0.16", fusion=False, mtp=0) == _loss_bytes(None, fusion=False, mtp=0) == 139_264
    # TE's loss saves each head's 16-bit logits (counted in the TAIL): only its row buffers and the mask
    assert _loss_bytes("0.16", fusion=True, impl="te") == _loss_bytes(None, fusion=True, impl="te")
