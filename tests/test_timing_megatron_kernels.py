"""What Megatron-LM's own kernels and modules add to a layer: bias passes, the unfused core's copies,
its causal softmax, the SP re-gather and whole-module replays. Expected bytes derived by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppb_core.config.run import load_run_config, parse_run_config, resolved_raw
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.pricer import TimeModel

# GPT layer: h 1024, 16 heads of 64, fc 4096, biases everywhere; s 512, b 2, TP 2: n = 1024 tokens,
# 8 heads (512 columns each of Q, K, V) and 2048 fc columns per rank; fp16 (2 bytes).
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
H, S, B, TP = 1024, 512, 2, 2
N = S * B


def gpt(framework="megatron", impl="transformer_engine", sp=False, recompute=None):
    spec = {
        "vocab_size": 32000,
        "hidden_size": H,
        "num_layers": 2,
        "num_attention_heads": 16,
        "intermediate_size": 4 * H,
        "activation": "gelu",
        "norm": "layernorm",
        "norm_bias": True,
        "position_embedding": "learned",
        "max_position_embeddings": S,
        "attention_bias": True,
        "attention_output_bias": True,
        "mlp_bias": True,
    }
    training = {"seq_length": S, "micro_batch_size": B, "dtype": "fp16", "flash_attention": False}
    if recompute is not None:
        training["recompute"] = recompute
    return parse_run_config(
        {
            "name": "gpt",
            "framework": framework,
            "models": [{"name": "gpt", "spec": spec}],
            "parallel": {"tp": TP, "sequence_parallel": sp},
            "training": training,
            "device": {"name": "a100-80gb"},
            "timing": {"transformer_impl": impl},
        }
    )


def ops(run) -> dict:
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    return {op.name: op for op in TimeModel(run).ops(layer)}


def test_bias_passes_outside_the_gemm():
    te, local = ops(gpt()), ops(gpt(impl="local"))
    # A returned bias's gradient: one read of the output gradient over the tokens (fc1: n × 2048,
    # the projections' outputs: n × 1024), under either implementation.
    for table in (te, local):
        assert table["mlp_in"].side_bytes == (0.0, N * 2048 * 2)
        assert table["out_proj"].side_bytes == (0.0, N * H * 2)
        assert table["mlp_out"].side_bytes == (0.0, N * H * 2)
    # The fused QKV adds its own: in the epilogue under TransformerEngine; the local implementation
    # adds it after the GEMM (read and write n × 512 for Q|K's 1024 columns: n × 1024 × 2 × 2) and
    # reduces its gradient (n × 1024 × 2).
    assert te["qk_proj"].side_bytes == (0.0, 0.0)
    assert local["qk_proj"].side_bytes == (2 * N * 1024 * 2, N * 1024 * 2)
    assert local["v_proj"].side_bytes == (2 * N * 512 * 2, N * 512 * 2)
    # Other frameworks: none modelled.
    assert ops(gpt(framework="mindformers"))["mlp_in"].side_bytes == (0.0, 0.0)


def test_the_bias_passes_are_priced_at_the_hbm_rate():
    run, plain = gpt(impl="local"), gpt(framework="mindformers")
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    hbm = 2039e9 * 0.8
    ours = TimeModel(run).op_prices(layer)["qk_proj"]
    theirs = TimeModel(plain).op_prices(layer)["qk_proj"]
    assert ours.forward_ms - theirs.forward_ms == pytest.approx(2 * N * 1024 * 2 / hbm * 1e3, rel=1e-9)
    # backward: the bias gradient's pass (n × 1024 columns of 2 bytes), and the weight gradient's output:
    # Megatron's fused accumulation reads and writes the fp32 main_grad (8 bytes an element), MindFormers'
    # GEMM writes it in the compute dtype (2 bytes; layers.py `Linear.construct`): 6 bytes × the weight's
    # h 1024 × 1024 Q|K columns per rank
    bias_bytes, wgrad_bytes = N * 1024 * 2, (8 - 2) * 1024 * 1024
    assert ours.backward_ms - theirs.backward_ms == pytest.approx((bias_bytes + wgrad_bytes) / hbm * 1e3, rel=1e-9)


def test_the_unfused_core_copies_and_its_causal_softmax():
    megatron, other = ops(gpt()), ops(gpt(framework="mindformers"))
    # Q|K gradients concatenated back: read and write n × (512 + 512) × 2, and baddbmm's alpha on dQ and
    # dK: read and write (n + n keys) × 512 × 2; V's n × 512 × 2; the context permuted forward (its
    # backward views): read and write n × 512 × 2.
    assert megatron["scores"].side_bytes == (0.0, 2 * N * 1024 * 2 + 2 * (N + N) * 512 * 2)
    assert megatron["context"].side_bytes == (2 * N * 512 * 2, 2 * N * 512 * 2)
    assert other["scores"].side_bytes == (0.0, 0.0)
    # Scores per rank: 8 heads × b 2 × 512² = 4,194,304 elements of 2 bytes. Megatron's own causal kernel
    # (--transformer-impl local) reads the lower half and writes all (1.5 passes; backward 0.5 + 0.5 + 1);
    # TransformerEngine's (the TE spec's, a full mask since v2.0) and elsewhere 2 and 3.
    scores = 8 * B * S * S * 2
    local = ops(gpt(impl="local"))
    assert (local["softmax"].bytes, local["softmax"].backward_bytes) == (1.5 * scores, 2 * scores)
    assert (megatron["softmax"].bytes, megatron["softmax"].backward_bytes) == (2 * scores, 3 * scores)
    assert (other["softmax"].bytes, other["softmax"].backward_bytes) == (2 * scores, 3 * scores)


def test_megatron_replays_a_checkpointed_module_whole():
    core = gpt(recompute={"granularity": "selective", "modules": ["core_attn"]})
    model = TimeModel(core)
    layer = next(layer for layer in walk(core) if layer.node == "BODY")
    again = {r.name for r in model.breakdown(layer, LayerType.SEL_REC_LAYER) if r.phase == "recompute"}
    # core_attn's switches drop the scores and probabilities (no dropout here); the replay runs PV too,
    # and TE's unfused core builds its mask again (`flops.te_attention_mask`)
    assert again == {"attention_mask", "scores", "softmax", "context"}
    mlp = gpt(recompute={"granularity": "selective", "modules": ["mlp"]})
    model = TimeModel(mlp)
    again = {r.name for r in model.breakdown(layer, LayerType.SEL_REC_LAYER) if r.phase == "recompute"}
    assert again == {"mlp_in", "mlp_act", "mlp_out", "reduce_mlp"}
    # Any other setting (a switch profile) is the switches alone: only the norms.
    rows = model.breakdown(layer, LayerType.SEL_REC_LAYER, {"normOp": 0})
    assert {r.name for r in rows if r.phase == "recompute"} == {"norm1", "norm2"}


def test_a_checkpointed_moe_layer_is_replayed_whole():
    # Megatron's `moe` module: router, permutation, dispatch, experts, combine run again; `shared_experts`
    # (DeepSeek-style) only the shared experts. Mixtral has no shared experts.
    raw = resolved_raw(load_run_config(CONFIGS / "mixtral-8x7b.yaml"))
    raw["training"]["recompute"] = {"granularity": "selective", "modules": ["moe"]}
    run = parse_run_config(raw)
    model = TimeModel(run)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    again = {r.name for r in model.breakdown(layer, LayerType.SEL_REC_LAYER) if r.phase == "recompute"}
    moe = {"router", "router_topk", "permute", "dispatch", "experts_in", "experts_act", "experts_out", "combine"}
    assert moe | {"unpermute"} <= again
    assert not again & {"norm1", "norm2", "qk_proj", "out_proj", "residual_moe"}
