"""Megatron's unfused attention core as TransformerEngine and Megatron-Core run it: the mask TE builds
each forward, the softmax's reads, baddbmm's scaled gradients, the context copy, the BMMs' dtype."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.flops import recompute_set
from ppb_core.timing.nan_fill import deterministic_fill_bytes
from ppb_core.timing.pricer import TimeModel

# 16 heads of 64, sequence 2048, one sequence a micro-batch, no TP: n = keys = 2048 tokens.
S, HEADS, D, BC = 2048, 16, 64, 2


def _run(impl: str = "transformer_engine", **timing) -> object:
    spec = {
        "vocab_size": 4096,
        "hidden_size": HEADS * D,
        "num_layers": 2,
        "num_attention_heads": HEADS,
        "intermediate_size": 4096,
        "activation": "gelu",
        "norm": "layernorm",
        "position_embedding": "learned",
        "max_position_embeddings": S,
    }
    raw = {
        "name": "u",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": spec}],
        "parallel": {"tp": 1},
        "training": {"seq_length": S, "flash_attention": False},
        "device": ROUND_DEVICE,
        "timing": {"transformer_impl": impl, **timing},
    }
    return parse_run_config(raw)


def _ops(run) -> dict:
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    return {op.name: op for op in TimeModel(run).ops(layer)}


def test_te_builds_the_full_mask_every_forward():
    # get_full_mask (TE d0067d0d utils.py) per (query, key) element: int32 difference 4, swa_left and
    # swa_right 8 each, two comparisons 5 each, ~ 2, & 3, logical_not 2 = 37 bytes; 10 kernels.
    ops = _ops(_run())
    mask = ops["attention_mask"]
    assert (mask.bytes, mask.backward_bytes) == (37 * S * S, 0.0)
    assert mask.launches == (10.0, 0.0)
    # Megatron's own core (--transformer-impl local) takes the model's mask: nothing built
    assert "attention_mask" not in _ops(_run("local"))


def test_the_softmax_reads_every_score_under_te_and_the_lower_triangle_under_megatron_s_kernel():
    pairs = HEADS * S * S
    # TE: read all, write all (2 · pairs · 2 bytes); backward reads both, writes one (3 · pairs · 2)
    te = _ops(_run())["softmax"]
    assert (te.bytes, te.backward_bytes) == (2 * pairs * BC, 3 * pairs * BC)
    # Megatron's scaled_upper_triang kernel: half of each read
    local = _ops(_run("local"))["softmax"]
    assert (local.bytes, local.backward_bytes) == (1.5 * pairs * BC, 2 * pairs * BC)


def test_baddbmm_s_alpha_scales_dq_and_dk_and_the_context_is_copied_forward_only():
    ops = _ops(_run())
    scores, context = ops["scores"], ops["context"]
    # split's backward joins dQ, dK (and dV, on the context op) into the QKV gradient: 2·n·(h·d + h·d/2)·2
    # with kv_width = 2·h·d; alpha: dQ and dK read and written, 2·(n + keys)·h·d·2; kernels 1 + 2
    joined = 2 * S * (HEADS * D + HEADS * D) * BC
    alpha = 2 * (S + S) * HEADS * D * BC
    assert scores.side_bytes == (0.0, joined + alpha)
    assert scores.side_kernels == (1.0, 3.0)
    # the context's permute(...).contiguous(): read and write n·h·d forward; backward only V's join
    assert context.side_bytes == (2 * S * HEADS * D * BC, 2 * S * HEADS * D * BC)


def test_the_bmms_stay_in_16_bits_under_fp8_training():
    ops = _ops(_run(matmul_dtype="fp8", fp8_recipe="tensorwise"))
    assert not ops["scores"].fp8 and not ops["context"].fp8
    assert ops["qk_proj"].fp8 and ops["out_proj"].fp8  # TE's linears do


def test_te_s_score_buffer_is_nan_filled_under_deterministic_mode():
    ops = list(_ops(_run()).values())
    fills = deterministic_fill_bytes(ops, BC, wgrad_fused=True)
    # torch.empty of [b·h, s, s] in bf16: 16 · 2048² · 2 bytes, forward
    assert fills["scores"] == pytest.approx((HEADS * S * S * BC, 0.0))
    local = list(_ops(_run("local")).values())
    assert "scores" not in deterministic_fill_bytes(local, BC, wgrad_fused=True)


def test_the_mask_is_rebuilt_where_the_softmax_runs_again():
    ops = _ops(_run())
    again = {op.name for op in recompute_set(list(ops.values()), {"softmax": 0})}
    # the softmax's inputs: the scores (transient) and the mask (transient); nothing else of the core
    assert {"softmax", "scores", "attention_mask"} <= again
    assert "context" not in again
