"""Megatron's routed experts without --moe-grouped-gemm: a `SequentialMLP`, each local expert's GEMMs
their own kernels and launches (`Op.sequential`, `ppb_core.timing.launches`, `ppb_core.timing.pricer`)."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.launches import layer_launches
from ppb_core.timing.pricer import TimeModel

# 8 experts, top-2, hidden 1024, SwiGLU experts of width 512 (fc1 1024 wide), s 4096, b 1, one GPU:
# 4096 · 2 = 8192 routed rows, 1024 an expert (balanced routing).
SPEC = {
    "vocab_size": 4096,
    "hidden_size": 1024,
    "num_layers": 1,
    "num_attention_heads": 8,
    "intermediate_size": 4096,
    "num_experts": 8,
    "experts_per_token": 2,
    "moe_intermediate_size": 512,
    "activation": "swiglu",
}


def _run(grouped_gemm: bool, kernel_us: float = 5.0):
    return parse_run_config(
        {
            "name": "seq",
            "framework": "megatron",
            "models": [{"name": "moe", "spec": SPEC}],
            "parallel": {},
            "training": {"seq_length": 4096, "moe": {"grouped_gemm": grouped_gemm}},
            "device": dict(ROUND_DEVICE, gemm_kernel_us=kernel_us),
        }
    )


def _moe(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


def _launches(run):
    ops = TimeModel(run).ops(_moe(run))
    return layer_launches(ops, tp=1, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True)


def test_a_sequential_mlp_runs_each_expert_s_gemm_as_its_own_kernel():
    # megatron/core/transformer/moe/experts.py `SequentialMLP.forward` (d98e8a64): each of the 8 local
    # experts' MLP on its 1024 rows. fc1 per expert 1024×1024 by 1024×1024 on ROUND_DEVICE (64 SMs, a
    # 128×128 tile at 5e13 / 64 FLOP/s): 64 tiles, one wave of 2·128·128·1024 / 7.8125e11 = 42.95 us
    # (= 2·1024³ / 5e13), plus the 5 us every GEMM kernel spends (kernels.py `kernel_s`):
    #   sequential 8 · (42.95 + 5) = 383.6 us;
    #   grouped (TEGroupedMLP) 512 tiles, 8 waves of 42.95 us, and its fixed time once a round of TE's 4
    #   compute streams (8 GEMMs: 2 rounds, `TimeModel._grouped_rounds`): 343.6 + 2 · 5 = 353.6 us.
    # fc2 (1024 rows × 512 by 512 × 1024 an expert): 64 tiles, one wave of 21.47 us:
    #   sequential 8 · (21.47 + 5) = 211.8 us; grouped 8 · 21.47 + 2 · 5 = 181.8 us.
    # The HBM bound stays below: fc1 moves (8192·1024 + 8·1024² + 8192·1024) · 2 B / 5e11 B/s = 100.7 us.
    wave_in, wave_out = 2 * 1024**3 / 5e13, 2 * 1024 * 1024 * 512 / 5e13
    sequential = TimeModel(_run(False)).op_prices(_moe(_run(False)))
    grouped = TimeModel(_run(True)).op_prices(_moe(_run(True)))
    assert sequential["experts_in"].forward_ms == pytest.approx(8 * (wave_in + 5e-6) * 1e3)
    assert grouped["experts_in"].forward_ms == pytest.approx((8 * wave_in + 2 * 5e-6) * 1e3)
    assert sequential["experts_out"].forward_ms == pytest.approx(8 * (wave_out + 5e-6) * 1e3)
    assert grouped["experts_out"].forward_ms == pytest.approx((8 * wave_out + 2 * 5e-6) * 1e3)
    # the cat of the experts' outputs: 8192 rows · 1024 · 2 B read and written, 2·16.78 MB / 5e11 B/s;
    # backward the token gradients' cat the same (the probs' cat: its bytes left out)
    cat = 2 * 8192 * 1024 * 2 / 5e11 * 1e3
    assert sequential["experts_cat"].forward_ms == pytest.approx(cat)
    assert sequential["experts_cat"].backward_ms == pytest.approx(cat)
    assert "experts_cat" not in grouped


def test_a_sequential_mlp_launches_each_expert_s_kernels():
    # experts.py `SequentialMLP.forward` (d98e8a64): per expert its TE linears fc1 and fc2 (one GEMM
    # forward; input and weight gradient backward, the weight's gradient accumulated in the GEMM under
    # gradient-accumulation fusion) and its fused weighted SwiGLU (mlp.py `MLP.forward`
    # `weighted_bias_swiglu_impl`: one kernel each way), then `torch.cat` of their outputs (one
    # forward); backward the two `torch.split`s' gradients are cats (two).
    #   fc1, fc2: 8 forward, 16 backward each (as TE's grouped GEMM: one GEMM a group each way)
    #   activation: 8 and 8 (one for all experts when grouped)
    #   cat: 1 and 2 (none when grouped)
    sequential, grouped = _launches(_run(False)), _launches(_run(True))
    for name in ("experts_in", "experts_out"):
        assert sequential[name] == grouped[name] == (8.0, 16.0)
    assert sequential["experts_act"] == (8.0, 8.0) and grouped["experts_act"] == (1.0, 1.0)
    assert sequential["experts_cat"] == (1.0, 2.0)
    total = sum(sum(count) for count in sequential.values()) - sum(sum(count) for count in grouped.values())
    assert total == 7 * 2 + 3


def test_one_local_expert_runs_its_mlp_without_the_loop():
    # SequentialMLP.forward with num_local_experts == 1 calls the expert on every row: no split, no cat,
    # the same kernels as the grouped path's one group. EP 8 over 8 GPUs: one expert a rank.
    raw = {
        "name": "seq",
        "framework": "megatron",
        "models": [{"name": "moe", "spec": SPEC}],
        "parallel": {"ep": 8, "dp": 8},
        "training": {"seq_length": 4096},
        "device": dict(ROUND_DEVICE, gemm_kernel_us=5.0),
    }
    grouped = parse_run_config(raw)
    sequential = parse_run_config({**raw, "training": {"seq_length": 4096, "moe": {"grouped_gemm": False}}})
    assert TimeModel(sequential).op_prices(_moe(sequential)) == TimeModel(grouped).op_prices(_moe(grouped))
