"""FLOP counts of the time model's op tables, against formulas derived by hand and Korthikanti et al. (2022).

Notation: b micro-batch size, s sequence length, h hidden size, a heads, L layers, v vocabulary,
B = b · micro_batches · dp sequences per iteration, t tensor parallel.
"""

from __future__ import annotations

import itertools

import pytest
from small_models import GPT_OSS_ATTENTION_LAYER, MLA_H1024, gpt_spec, selective_raw

from ppb_core.config.run import parse_run_config
from ppb_core.model.kinds import body_kind, head_kind, tail_kind
from ppb_core.model.switches import SWITCHES, LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.flops import OpGeometry, layer_flops, layer_ops, recompute_set
from ppb_core.timing.launches import op_launches
from ppb_core.timing.pricer import TimeModel


def gpt_run(
    h=1024,
    a=16,
    layers=4,
    s=512,
    v=32000,
    b=2,
    m=3,
    dp=2,
    tp=1,
    sp=False,
    flash=False,
    dropout=0.1,
    framework="megatron",
    **parallel,
):
    """A GPT-style run: LayerNorm, GeLU MLP of 4h, learned positions, biases, tied embeddings."""
    spec = gpt_spec(h, a, s, layers, v, dropout=dropout, tied=True)
    return parse_run_config(
        {
            "name": "gpt",
            "framework": framework,
            "models": [{"name": "gpt", "spec": spec}],
            "parallel": {"dp": dp, "tp": tp, "sequence_parallel": sp, **parallel},
            "training": {"seq_length": s, "micro_batch_size": b, "micro_batches": m, "flash_attention": flash},
            "device": {"name": "a100-80gb"},
        }
    )


def spec_run(spec: dict, s=1024, b=1, flash=True, **parallel):
    return parse_run_config(
        {
            "name": "x",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": parallel,
            "training": {"seq_length": s, "micro_batch_size": b, "flash_attention": flash},
            "device": {"name": "h100-80gb"},
        }
    )


def ops_of(run, index=0):
    geo = OpGeometry.from_run(run)
    name = run.model_names[0]
    return layer_ops(body_kind(run.spec(name), index, run.training.dropout), geo)


def names(ops) -> set[str]:
    return {op.name for op in ops}


def test_per_device_flops_of_a_gqa_swiglu_layer_with_tp_and_flash():
    # Llama-3-8B's layer at t=2, s=8192, b=1, flash: a=32 → 16 heads, 8 kv heads → 4, d=128, I=14336 → 7168.
    spec = {
        "vocab_size": 128256,
        "hidden_size": 4096,
        "num_layers": 2,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
    }
    run = spec_run(spec, s=8192, tp=2, sequence_parallel=True)
    n, h, d = 8192, 4096, 128
    pairs = 8192 * 8193 / 2  # causal (query, key) pairs per head: the kernel skips masked blocks
    forward = {
        "qk_proj": 2 * n * h * (16 + 4) * d,
        "v_proj": 2 * n * h * 4 * d,
        "flash_scores": 2 * pairs * 16 * d,
        "flash_context": 2 * pairs * 16 * d,
        "out_proj": 2 * n * 16 * d * h,
        "mlp_in": 2 * n * h * 2 * 7168,
        "mlp_out": 2 * n * 7168 * h,
    }
    ops = {op.name: op for op in ops_of(run)}
    for name, flops in forward.items():
        assert ops[name].flops == pytest.approx(flops, rel=1e-12), name
    # Backward: 2× for matmuls; flash re-forms the scores: 3× the QKᵀ part, 2× the PV part, 2.5× in all.
    assert ops["qk_proj"].backward_flops == 2 * ops["qk_proj"].flops
    assert ops["flash_scores"].backward_flops + ops["flash_context"].backward_flops == pytest.approx(
        2.5 * (forward["flash_scores"] + forward["flash_context"]), rel=1e-12
    )
    assert layer_flops(ops.values())[0] == pytest.approx(sum(forward.values()), rel=1e-12)


@pytest.mark.parametrize("dropless,factor", [(True, 1.25), (False, 1.5)])
def test_per_device_flops_of_moe_experts_follow_topk_routing(dropless, factor):
    # Mixtral-like: h=4096, 8 experts, top-2, I=14336, t=2 with SP, ep=8, etp=1, s=4096, b=1. Each TP rank
    # routes n/t = 2048 tokens, 2 copies each; the busiest rank computes imbalance (dropless) or
    # capacity-factor (capacity mode padded to capacity, token_dispatcher.py drop_and_pad) times its fair
    # share: 2048·2·factor rows.
    spec = {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "num_layers": 2,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "num_experts": 8,
        "experts_per_token": 2,
        "moe_intermediate_size": 14336,
    }
    moe = (
        {"dropless": dropless, "dropless_imbalance": factor}
        if dropless
        else {"dropless": False, "capacity_factor": factor, "pad_to_capacity": True}
    )
    run = parse_run_config(
        {
            "name": "x",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": 8, "tp": 2, "ep": 8, "etp": 1, "sequence_parallel": True},
            "training": {"seq_length": 4096, "moe": moe},
            "device": {"name": "h100-80gb"},
        }
    )
    ops = {op.name: op for op in ops_of(run)}
    rows = 2048 * 2 * factor
    assert ops["experts_in"].flops == pytest.approx(2 * rows * 4096 * 2 * 14336, rel=1e-12)
    assert ops["experts_out"].flops == pytest.approx(2 * rows * 14336 * 4096, rel=1e-12)
    assert ops["router"].flops == pytest.approx(2 * 2048 * 4096 * 8, rel=1e-12)  # n/sp tokens, 8 logits
    # Dispatch sends every copy (times the factor at the busiest rank): 2048·2·factor tokens of 4096 bf16,
    # and in a second all-to-all their probabilities, one bf16 each (token_dispatcher.py `token_dispatch`)
    assert ops["dispatch"].forward_comm.payload_bytes == pytest.approx(rows * (4096 + 1) * 2, rel=1e-12)
    assert ops["dispatch"].forward_comm.calls == ops["dispatch"].backward_comm.calls == 2


def test_per_device_flops_of_an_mla_layer():
    # DeepSeek-style MLA, small: h=1024, a=8 → 4 heads at t=2, q latent 256, kv latent 128, nope 64,
    # rope 32, v 64; SP: down-projections (replicated) run on the n/t = 512 local tokens; the
    # up-projections on all n = 1024 gathered tokens.
    spec = dict(MLA_H1024)
    run = spec_run(spec, s=1024, tp=2, sequence_parallel=True)
    n, local, heads = 1024, 512, 4
    pairs = 1024 * 1025 / 2
    forward = {
        "q_down": 2 * local * 1024 * 256,
        "kv_down": 2 * local * 1024 * (128 + 32),
        "q_up": 2 * n * 256 * heads * 96,
        "kv_up": 2 * n * 128 * heads * (64 + 64),
        "flash_scores": 2 * pairs * heads * 96,
        "flash_context": 2 * pairs * heads * 64,
        "out_proj": 2 * n * heads * 64 * 1024,
    }
    ops = {op.name: op for op in ops_of(run)}
    for name, flops in forward.items():
        assert ops[name].flops == pytest.approx(flops, rel=1e-12), name
    # The latents are gathered for the up-projections: q latent, kv latent and the shared rotary key.
    assert ops["gather_latents"].forward_comm.payload_bytes == n * (256 + 128 + 32) * 2
    # Megatron gathers them in three calls (multi_latent_attention.py `get_query_key_value_tensors`,
    # d98e8a64): linear_q_up_proj's and linear_kv_up_proj's TE column-parallel all-gathers and the rotary
    # key's `gather_from_sequence_parallel_region`; backward three reduce-scatters and the two linears'
    # gathers again for their weight gradients: 3 and 3 launches, then 0 and 2.
    assert run.framework == "megatron"
    assert (ops["gather_latents"].forward_comm.calls, ops["gather_latents"].backward_comm.calls) == (3, 3)
    assert ops["regather_latents"].backward_comm.calls == 2
    kw = {"tp": 2, "mla": True, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    assert op_launches(ops["gather_latents"], **kw) == (3.0, 3.0)
    assert op_launches(ops["regather_latents"], **kw) == (0.0, 2.0)


def test_mla_up_proj_recompute_gathers_the_latents_again():
    # Megatron's `mla_up_proj` selective recompute runs `qkv_up_proj_and_rope_apply` under
    # `CheckpointWithoutOutput` (multi_latent_attention.py `get_query_key_value_tensors`, c08d89bea0 and
    # d98e8a64; tensor_parallel/random.py `_recompute` replays the function whole): linear_q_up_proj and
    # linear_kv_up_proj, TE column-parallel under SP, all-gather their latent shards again in the backward; the
    # rotary key, gathered by `gather_from_sequence_parallel_region` before the checkpoint, is not. MLA_H1024 at
    # t=2, s=1024, SP: n = 1024 gathered tokens · (q latent 256 + kv latent 128) · 2 bytes = 786,432 in 2 calls,
    # against the forward's 1024 · (256 + 128 + 32) · 2 = 851,968 in 3.
    def run_of(modules):
        return parse_run_config(selective_raw(MLA_H1024, modules, {"tp": 2, "sequence_parallel": True}))

    def rerun_of(run):
        layer = next(layer for layer in walk(run) if layer.node == "BODY")
        return {op.name for op in TimeModel(run)._rerun(layer, LayerType.SEL_REC_LAYER, None)}

    run = run_of(["mla_up_proj"])
    gather = {op.name: op for op in ops_of(run)}["gather_latents"]
    assert (gather.recompute_comm.payload_bytes, gather.recompute_comm.calls) == (786_432, 2)
    assert (gather.forward_comm.payload_bytes, gather.forward_comm.calls) == (851_968, 3)
    assert {"gather_latents", "q_up", "kv_up", "rope"} <= rerun_of(run)
    # the rerun is priced at that collective, the lighter one (fewer bytes, one call fewer: one launch fewer than
    # the forward's three the host would otherwise count again)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    price = TimeModel(run).op_prices(layer)["gather_latents"]
    assert 0 < price.recompute_ms < price.forward_ms
    assert TimeModel(run)._rerun_launches(layer, LayerType.SEL_REC_LAYER, None) == -1
    # without the module (Megatron's default selective set, core_attn) the latents are not gathered again
    assert "gather_latents" not in rerun_of(run_of(["core_attn"]))


def test_mla_without_latent_norms_runs_no_norm_kernels():
    # without the latent norms the up-projections read the down-projections' outputs (gpt_layer_specs.py
    # d98e8a64, Megatron's MLA without --qk-layernorm); the GEMMs are the same
    plain = {op.name: op for op in ops_of(spec_run({**MLA_H1024, "mla_latent_norms": False}, s=1024, tp=2))}
    normed = {op.name: op for op in ops_of(spec_run(dict(MLA_H1024), s=1024, tp=2))}
    assert set(normed) - set(plain) == {"q_norm", "kv_norm"}
    assert plain["q_up"].inputs == ("q_down",) and plain["kv_up"].inputs == ("kv_down",)
    assert plain["q_up"].flops == normed["q_up"].flops


def _fp8_run(spec: dict, recipe: str, **parallel):
    """*spec* at s 1024, b 1 on an H100 under Megatron with TE FP8 GEMMs of *recipe*."""
    raw = spec_run(spec, s=1024, **parallel).model_dump(mode="json", exclude_none=True)
    return parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe}})


def test_mla_latents_are_gathered_in_fp8_their_rotary_key_in_bf16():
    # Megatron-Core (multi_latent_attention.py `get_query_key_value_tensors`, d98e8a64 and 0d8e0714cd): the q
    # and kv latents are all-gathered inside linear_q_up_proj's and linear_kv_up_proj's TE linears, which under
    # FP8 quantize the sequence shard first and gather the FP8 data (TE v2.9 linear.py / layernorm_linear.py
    # `forward`: `gather_along_first_dim(..., quantizer=...)`, row-wise only; the backward re-gather row-wise
    # for per-tensor recipes, column-wise for MXFP8); the rotary key goes through Megatron's own
    # `gather_from_sequence_parallel_region` in bf16 and is not gathered again. MLA_H1024 at tp 2 under SP,
    # n = 1024 gathered tokens, latents 256 + 128, rotary key 32:
    #   bf16:       forward 1024·(384 + 32)·2 = 851,968 B; re-gather (the two linears) 1024·384·2 = 786,432 B
    #   tensorwise: forward 1024·384·1 + 1024·32·2 = 458,752 B; re-gather 1024·384 = 393,216 B
    #   mxfp8:      forward 1024·384·33/32 + 65,536 = 471,040 B; re-gather 1024·384·33/32 = 405,504 B
    # The input gradient's three reduce-scatters stay bf16 (851,968 B). Under current scaling the two linears'
    # input quantizers each all-reduce their amax over TP (`_customize_quantizers_float8_current_scaling`):
    # two 4-byte all-reduces.
    n, bf16 = 1024, 1024 * 416 * 2
    plain = {op.name: op for op in ops_of(spec_run(dict(MLA_H1024), s=n, tp=2, sequence_parallel=True))}
    assert plain["gather_latents"].forward_comm.payload_bytes == bf16
    assert plain["regather_latents"].backward_comm.payload_bytes == 786_432
    for recipe, forward, again in (("tensorwise", 458_752, 393_216), ("mxfp8", 471_040, 405_504)):
        ops = {op.name: op for op in ops_of(_fp8_run(dict(MLA_H1024), recipe, tp=2, sequence_parallel=True))}
        gather, regather = ops["gather_latents"], ops["regather_latents"]
        assert gather.forward_comm.payload_bytes == pytest.approx(forward, rel=1e-12), recipe
        assert gather.backward_comm.payload_bytes == bf16
        assert regather.backward_comm.payload_bytes == pytest.approx(again, rel=1e-12), recipe
        assert (gather.forward_comm.calls, gather.backward_comm.calls, regather.backward_comm.calls) == (3, 3, 2)
        amax = ops.get("amax_latents")
        if recipe == "tensorwise":
            assert amax is not None and (amax.forward_comm.payload_bytes, amax.forward_comm.calls) == (4, 2)
        else:
            assert amax is None


def test_te_norms_inside_a_linear_feed_only_layernorm_linear_gemms():
    # Megatron's TE spec (gpt_layer_specs.py, d98e8a64): linear_qkv and a dense MLP's linear_fc1 are
    # TELayerNormColumnParallelLinear, the norm run inside the linear (which under FP8 can write the quantized
    # input, or take its amax); MLA's input_layernorm is a norm module of its own before linear_q_down_proj and
    # linear_kv_down_proj (TE linears, no norm), its up-projections TELayerNormColumnParallelLinear under
    # qk_layernorm; an MoE layer's pre_mlp_layernorm is its own module before the router and the shared expert.
    dense = {op.name for op in ops_of(spec_run(_llama(), tp=2, sequence_parallel=True)) if op.norm_input}
    assert dense == {"qk_proj", "v_proj", "mlp_in"}
    mla = {op.name for op in ops_of(spec_run({**MLA_H1024, "intermediate_size": 2048}, tp=2)) if op.norm_input}
    assert mla == {"q_up", "kv_up", "mlp_in"}
    plain_mla = {op.name for op in ops_of(spec_run({**MLA_H1024, "mla_latent_norms": False}, tp=2)) if op.norm_input}
    assert plain_mla == {"mlp_in"}
    moe = _llama(num_experts=4, experts_per_token=2, moe_intermediate_size=256, shared_expert_intermediate_size=256)
    assert {op.name for op in ops_of(spec_run(moe, tp=2)) if op.norm_input} == {"qk_proj", "v_proj"}


def test_delayed_scaling_layernorm_linear_norms_write_fp8():
    # TE v2.9 extensions/normalization.cpp: a LayerNormLinear's norm under delayed scaling (`Float8Quantizer`) is
    # FULLY_FUSED, writing its output in FP8 (a byte) where other recipes write bf16 and quantize after. _llama
    # at tp 1, 1024 tokens of h 512: bf16 norm forward 1024·512·(2 + 2) = 2,097,152 B, delayed 1024·512·(2 + 1) =
    # 1,572,864 B for norm1 and the dense MLP's norm2; MLA's input norm (its own module) stays 16-bit, its latent
    # norms (in the up-projections' LayerNormLinears) write FP8: q 1024·256·3 = 786,432 B.
    for recipe, out in (("tensorwise", 2), ("delayed", 1)):
        ops = {op.name: op for op in ops_of(_fp8_run(_llama(), recipe))}
        assert ops["norm1"].bytes == ops["norm2"].bytes == 1024 * 512 * (2 + out), recipe
        assert ops["norm1"].backward_bytes == 3 * 1024 * 512 * 2
    mla = {op.name: op for op in ops_of(_fp8_run({**MLA_H1024, "intermediate_size": 2048}, "delayed"))}
    assert mla["norm1"].bytes == 1024 * 1024 * 4
    assert mla["q_norm"].bytes == 786_432


def test_mtp_projection_gathers_its_input_in_fp8_and_its_output_in_bf16():
    # Megatron-Core's MTP layer (multi_token_prediction.py `_proj_and_transformer_layer`, d98e8a64 and
    # 0d8e0714cd) runs `_concat_embeddings` inside `get_fp8_context`: eh_proj, a TE column-parallel linear,
    # all-gathers its quantized SP input (TE v2.9 linear.py `_Linear.forward`), under current scaling after an
    # amax all-reduce. Its output goes through `gather_from_tensor_model_parallel_region` (bf16; backward a
    # split) and `scatter_to_sequence_parallel_region` (a split; backward an all-gather of the sequence).
    # _llama at tp 2 under SP: n = 1024 tokens, h = 512: the input gather 1024·1024·1 = 1,048,576 B (bf16
    # 2,097,152), re-gathered alike; the output 1024·512·2 = 1,048,576 B each way, all-gathers both.
    run = _fp8_run(_llama(mtp_layers=1), "tensorwise", tp=2, sequence_parallel=True)
    tail = {op.name: op for op in layer_ops(tail_kind(run.spec("llm"), 1024), OpGeometry.from_run(run))}
    assert tail["mtp0.gather_projection"].forward_comm.payload_bytes == 1_048_576
    assert tail["mtp0.gather_projection"].backward_comm.payload_bytes == 2_097_152  # the input gradient, bf16
    assert tail["mtp0.regather_projection"].backward_comm.payload_bytes == 1_048_576
    assert tail["mtp0.amax_projection"].forward_comm.payload_bytes == 4
    projected = tail["mtp0.gather_projected"]
    assert (projected.forward_comm.kind, projected.backward_comm.kind) == ("all_gather", "all_gather")
    assert projected.forward_comm.payload_bytes == projected.backward_comm.payload_bytes == 1_048_576
    # without SP the output gather's backward is a split: no collective
    plain = _fp8_run(_llama(mtp_layers=1), "tensorwise", tp=2)
    tail = {op.name: op for op in layer_ops(tail_kind(plain.spec("llm"), 1024), OpGeometry.from_run(plain))}
    assert tail["mtp0.gather_projected"].backward_comm is None


def _llama(**extra):
    return {
        "vocab_size": 1024,
        "hidden_size": 512,
        "num_layers": 1,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        **extra,
    }


# What each switch reruns (docs/timing.md, "Recompute"): the op producing each tensor the switch drops,
# and whatever transient tensor that op needs.
def test_megatron_gathers_the_shard_again_in_every_backward():
    # Megatron keeps only the shard of an SP input and all-gathers it again behind the input gradient
    # (LinearWithGradAccumulationAndAsyncCommunication.backward): no switch governs it.
    ops = {op.name: op for op in ops_of(gpt_run(tp=2, sp=True))}
    for stem, consumer in (("attention", "qk_proj"), ("mlp", "mlp_in")):
        again = ops[f"regather_{stem}"]
        assert again.switch is None and again.forward_comm is None
        assert (again.backward_comm.kind, again.backward_comm.partner) == ("all_gather", (consumer, "dgrad"))
        assert ops[f"gather_{stem}"].switch is None
    assert recompute_set(tuple(ops.values()), {"gather": 0}) == ()


def test_recompute_sets_of_an_eager_gpt_layer_with_sp_and_dropout():
    ops = ops_of(gpt_run(tp=2, sp=True, framework="mindformers"))
    expect = {
        "attBMM": {"qk_proj", "v_proj"},  # no rope: the projections hold Q, K, V
        "headCast": {"dropout_probs"},  # from the kept softmax output and mask
        "softmax": {"scores", "softmax"},  # the scores are never kept: QKᵀ runs again
        "dropout": {"dropout_mask"},  # regenerated from the RNG state
        "normOp": {"norm1", "norm2"},
        "gather": {"gather_attention", "gather_mlp"},  # SP all-gathers sent again
        "ffAct": {"mlp_act"},
        "attUp": set(),
    }
    for switch, expected in expect.items():
        assert names(recompute_set(ops, {switch: 0})) == expected, switch
    assert recompute_set(ops, {}) == ()
    korthikanti = {"softmax": 0, "headCast": 0, "dropout": 0}
    assert names(recompute_set(ops, korthikanti)) == {"scores", "softmax", "dropout_mask", "dropout_probs"}


def test_recompute_sets_with_rope_qk_norm_and_flash():
    rope = ops_of(spec_run(_llama(), s=256, flash=False))
    assert names(recompute_set(rope, {"attBMM": 0})) == {"qk_proj", "rope", "v_proj"}
    assert names(recompute_set(rope, {"headCast": 0})) == set()  # no attention dropout: no such tensor
    # Qwen3's q/k-norm: its input (the q/k projection's output) is counted under normOp.
    qk_norm = ops_of(spec_run(_llama(qk_norm=True), s=256))
    assert names(recompute_set(qk_norm, {"normOp": 0})) == {"norm1", "qk_proj", "norm2"}
    assert names(recompute_set(qk_norm, {"attBMM": 0})) == {"qk_norm", "rope", "v_proj"}
    # Flash keeps O and the log-sum-exp (softmax): recomputing it reruns the score half of the kernel.
    assert names(recompute_set(qk_norm, {"softmax": 0})) == {"flash_scores"}
    assert names(recompute_set(qk_norm, {"dropout": 0, "headCast": 0})) == set()


def test_recompute_sets_with_context_parallelism_and_mla():
    ring = ops_of(spec_run(_llama(), s=256, cp=2))
    assert names(recompute_set(ring, {"gather": 0})) == {"cp_ring"}  # the ring's chunks sent again
    ulysses = ops_of(spec_run(_llama(), s=256, cp=2, cp_variant="ulysses"))
    assert names(recompute_set(ulysses, {"attBMM": 0})) == {"qk_proj", "rope", "v_proj", "cp_a2a_qkv"}
    mla = ops_of(
        spec_run(
            {
                **_llama(num_key_value_heads=8),
                "q_lora_rank": 64,
                "kv_lora_rank": 32,
                "qk_nope_head_dim": 32,
                "qk_rope_head_dim": 16,
                "v_head_dim": 32,
            },
            s=256,
        )
    )
    assert names(recompute_set(mla, {"attUp": 0})) == {"q_norm", "kv_norm", "q_up", "kv_up", "rope"}
    assert names(recompute_set(mla, {"attBMM": 0})) == set()  # MLA's Q, K, V are attUp's


@pytest.mark.parametrize("case", ["gpt-sp", "llama-ring", "mla-sp"])
def test_the_recompute_set_of_a_setting_is_the_union_of_its_switches_alone(case):
    run = {
        "gpt-sp": lambda: gpt_run(tp=2, sp=True),
        "llama-ring": lambda: spec_run(_llama(qk_norm=True), s=256, cp=2, tp=2, sequence_parallel=True),
        "mla-sp": lambda: spec_run(
            {
                **_llama(num_key_value_heads=8),
                "q_lora_rank": 64,
                "kv_lora_rank": 32,
                "qk_nope_head_dim": 32,
                "qk_rope_head_dim": 16,
                "v_head_dim": 32,
            },
            s=256,
            tp=2,
            sequence_parallel=True,
        ),
    }[case]()
    ops = ops_of(run)
    alone = {switch: names(recompute_set(ops, {switch: 0})) for switch in SWITCHES}
    for bits in itertools.product((0, 1), repeat=len(SWITCHES)):
        setting = dict(zip(SWITCHES, bits, strict=True))
        union = set().union(*(alone[s] for s, bit in setting.items() if not bit))
        assert names(recompute_set(ops, setting)) == union
        # No op is rerun by two switches alone: their costs add up.
        assert sum(len(alone[s]) for s, bit in setting.items() if not bit) == len(union)


def test_layer_flops_count_what_each_state_reruns():
    ops = ops_of(gpt_run())
    forward, backward = layer_flops(ops, LayerType.NOT_REC_LAYER)
    assert backward == 2 * forward  # eager attention: every matmul's backward is twice its forward
    assert layer_flops(ops, LayerType.FULL_REC_LAYER) == (forward, 3 * forward)
    scores = next(op for op in ops if op.name == "scores").flops
    assert layer_flops(ops, LayerType.SEL_REC_LAYER, {"softmax": 0}) == (forward, 2 * forward + scores)


@pytest.mark.parametrize(
    ("framework", "fusion", "forward", "backward"),
    [
        # Megatron's VocabParallelCrossEntropy op by op, per logit (bf16 logits, fp32 copy):
        # .float() 2 + 4, max 4, -= 4 + 4, exp 4 + 4, sum 4, div_ 4 + 4 = 38; mul_ 4 + 4, back to bf16 4 + 2 = 14
        ("megatron", False, 38, 14),
        # --cross-entropy-loss-fusion: upcast and max 2 + 4, shift-exp-sum 4 + 4, div 4 + 4 = 22; backward
        # (calculate_gradients compiled, fused_cross_entropy.py 96a894ef6): the saved softmax copied 4 + 4,
        # then read 4, the bf16 gradient written 2 and the product written back over the softmax 4 = 18
        ("megatron", True, 22, 18),
        # torchtitan (train.py `cross_entropy(pred.flatten(0, 1).float(), ...)`, no TP), aten op by aten op:
        # _to_copy 2 + 4, _log_softmax 4 + 4 = 14; nll_loss_backward writes the fp32 gradient 4,
        # _log_softmax_backward_data reads it and the output and writes 4 + 4 + 4, _to_copy back 4 + 2 = 22;
        # a 32,000-wide fp32 row (128 KB) is past SoftMax.cu's register and 48 KiB shared-memory caches, so
        # cunn_SoftMaxForward reads it twice more (max, sum, epilogue: + 8) and cunn_SoftMaxBackward the
        # gradient once more (+ 4): 22 and 26
        ("torchtitan", False, 22, 26),
        # other frameworks: read 2, write the fp32 softmax 4, rewrite it 4 + 4 = 14; its gradient 4 + 4 + 2 = 10
        ("mindformers", False, 14, 10),
    ],
)
def test_the_loss_moves_the_bytes_of_its_framework_s_cross_entropy(framework, fusion, forward, backward):
    run = gpt_run(v=32000, s=512, b=2, framework=framework)
    run = run.model_copy(update={"timing": run.timing.model_copy(update={"cross_entropy_fusion": fusion})})
    tail = tail_kind(run.spec(run.model_names[0]), 32000)
    loss = next(op for op in layer_ops(tail, OpGeometry.from_run(run)) if op.name == "output.loss")
    logits = 2 * 512 * 32000  # b · s tokens × v (tp 1)
    assert loss.bytes == logits * forward
    assert loss.backward_bytes == logits * backward


# linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv at ead96b6, rows 2321-2323 and 2327-2329: Megatron's
# unfused vocab_parallel_cross_entropy (benchmark_megatron_cross_entropy.py, TP 1, bf16 logits of S 2048 x B 4),
# H100 80GB HBM3, 2026-06-15: (vocabulary, forward ms, "backward" ms, which reruns the forward each iteration)
MEGATRON_CE_H100 = [
    (32768, 4.0230560302734375, 5.412109375),
    (65536, 7.9344024658203125, 10.669661521911621),
    (131072, 15.812352180480957, 21.2467098236084),
]


@pytest.mark.parametrize(("vocab", "forward_ms", "with_backward_ms"), MEGATRON_CE_H100)
def test_megatron_s_op_by_op_loss_moves_what_an_h100_measured(vocab, forward_ms, with_backward_ms):
    # the counted bytes over the measured time, as a share of 3.35 TB/s: forward 38 a logit at 0.76-0.77,
    # backward 14 at 0.81-0.83 (the benchmark's backward less its forward): both at HBM's streaming rate
    run = gpt_run(v=vocab, s=2048, b=4, framework="megatron")
    tail = tail_kind(run.spec(run.model_names[0]), vocab)
    loss = next(op for op in layer_ops(tail, OpGeometry.from_run(run)) if op.name == "output.loss")
    logits = 2048 * 4 * vocab
    assert loss.bytes / logits == 38 and loss.backward_bytes / logits == 14
    assert loss.bytes / (forward_ms * 1e-3) / 3.35e12 == pytest.approx(0.765, abs=0.02)
    assert loss.backward_bytes / ((with_backward_ms - forward_ms) * 1e-3) / 3.35e12 == pytest.approx(0.82, abs=0.02)


# Liger-Kernel all_benchmark_data.csv at ead96b6, rows 2303-2305 and 2309-2311: Megatron's fused
# fused_vocab_parallel_cross_entropy (megatron-core 0.19.0+96a894ef6, benchmark_megatron_cross_entropy.py, TP 1,
# bf16 logits of S 2048 x B 4), H100 80GB HBM3: (vocabulary, forward ms, "backward" ms, forward included)
MEGATRON_FUSED_CE_H100 = [
    (32768, 2.831264019012451, 4.448922157287598),
    (65536, 5.76310920715332, 8.981760025024414),
    (131072, 11.809796333312988, 18.23187828063965),
]


@pytest.mark.parametrize(("vocab", "forward_ms", "with_backward_ms"), MEGATRON_FUSED_CE_H100)
def test_megatron_s_fused_loss_backward_moves_what_an_h100_measured(vocab, forward_ms, with_backward_ms):
    # the backward's 18 bytes a logit (the softmax copy, the cast gradient, the product written back) over the
    # measured backward (row less forward): 0.89-0.90 of 3.35 TB/s, a copy's streaming rate; the 6 bytes of one
    # pass would be 0.30. The forward's 22 run at 0.60-0.62 (not asserted: slower than its count explains).
    run = gpt_run(v=vocab, s=2048, b=4, framework="megatron")
    run = run.model_copy(update={"timing": run.timing.model_copy(update={"cross_entropy_fusion": True})})
    tail = tail_kind(run.spec(run.model_names[0]), vocab)
    loss = next(op for op in layer_ops(tail, OpGeometry.from_run(run)) if op.name == "output.loss")
    logits = 2048 * 4 * vocab
    assert loss.backward_bytes / logits == 18
    assert loss.backward_bytes / ((with_backward_ms - forward_ms) * 1e-3) / 3.35e12 == pytest.approx(0.895, abs=0.01)


@pytest.mark.parametrize("tp", [1, 4])
def test_transformer_engine_s_loss_reads_the_logits_twice_and_writes_the_gradient_over_them(tp):
    # TE release_v2.9 transformer_engine/pytorch/triton/cross_entropy.py (Megatron-Bridge 5776a6d90's pin):
    # online_softmax_kernel reads the bf16 logits (2); cross_entropy_kernel reads them again (2) and writes the
    # bf16 gradient in place (2) = 6; backward element_mul_kernel reads and writes it in place, 2 + 2 = 4.
    # Under TP one all_gather_into_tensor of m, d and X_y (3 fp32 a token) from every rank: 3 · 4 · n · tp.
    run = gpt_run(v=32000, s=512, b=2, tp=tp, framework="megatron")
    timing = {"cross_entropy_fusion": True, "cross_entropy_fusion_impl": "te"}
    run = run.model_copy(update={"timing": run.timing.model_copy(update=timing)})
    tail = tail_kind(run.spec(run.model_names[0]), 32000)
    ops = {op.name: op for op in layer_ops(tail, OpGeometry.from_run(run))}
    logits = 2 * 512 * 32000 // tp  # b · s tokens × v / tp
    assert (ops["output.loss"].bytes, ops["output.loss"].backward_bytes) == (logits * 6, logits * 4)
    if tp > 1:
        comm = ops["output.reduce_loss"].forward_comm
        assert (comm.kind, comm.payload_bytes) == ("all_gather", 3 * 4 * 2 * 512 * tp)
    else:
        assert "output.reduce_loss" not in ops


@pytest.mark.parametrize(("compile_loss", "forward", "backward"), [(False, 38, 38), (True, 14, 10)])
def test_torchtitan_s_loss_parallel_moves_what_its_dtensor_handlers_move(compile_loss, forward, backward):
    # torch/distributed/tensor/parallel/loss.py, eager on the vocabulary shard: .float() 2 + 4, amax 4,
    # x - max 4 + 4, exp 4 + 4, sum 4, shifted - logsumexp 4 + 4 = 38; backward zeros_like 4, exp(x) 4 + 4,
    # + 4 + 4 + 4, * grad 4 + 4, the cast back 4 + 2 = 38. Compiled: the generic count (2 + 12, 8 + 2)
    run = gpt_run(v=32000, s=512, b=2, tp=2, framework="torchtitan")
    run = run.model_copy(
        update={"timing": run.timing.model_copy(update={"torch_compile": True, "compile_loss": compile_loss})}
    )
    tail = tail_kind(run.spec(run.model_names[0]), 32000)
    loss = next(op for op in layer_ops(tail, OpGeometry.from_run(run)) if op.name == "output.loss")
    logits = 2 * 512 * 16000  # b · s tokens × v / tp
    assert loss.bytes == logits * forward
    assert loss.backward_bytes == logits * backward


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_megatron_s_embedding_gradient_is_dense(framework):
    """Megatron's VocabParallelEmbedding runs F.embedding (megatron/core/tensor_parallel/layers.py): its
    backward fills a bf16 gradient of the whole local table with zeros, scatters the tokens' rows into
    it, and DDP's hook adds it to the fp32 main gradient (`param.main_grad.add_(param.grad.data)`)."""
    run = gpt_run(v=32000, s=512, b=2, tp=2, dropout=None, framework=framework)
    head = head_kind(run.spec(run.model_names[0]), 32000)
    lookup = next(op for op in layer_ops(head, OpGeometry.from_run(run)) if op.name == "embedding.lookup")
    rows = 2 * 512 * 1024  # b · s tokens × h
    # scatter: read each token row's gradient (2) and accumulate it (4 + 4), twice with learned positions
    scatter = rows * (2 + 2 * 4) * 2
    # the dense table: 32000 / 2 vocabulary rows and 512 position rows of h, zeroed (2), read (2) and
    # added into the main gradient (4 + 4): 12 bytes an element
    table = (32000 // 2 + 512) * 1024 * (2 + 2 + 4 + 4)
    # torchtitan's nn.Embedding: the same CUDA backward zero-fills the bf16 table gradient (2 an element)
    # and FSDP2 reduce-scatters it (no main-gradient add)
    zeroed = (32000 // 2 + 512) * 1024 * 2
    assert lookup.backward_bytes == scatter + (table if framework == "megatron" else zeroed)


def _with_timing(run, **timing):
    return run.model_copy(update={"timing": run.timing.model_copy(update=timing)})


@pytest.mark.parametrize(("fusion", "forward", "backward"), [(True, 2, 2), (False, 12, 13)])
def test_megatron_s_unfused_rotary_embedding_moves_each_op_s_bytes(fusion, forward, backward):
    """`--no-rope-fusion`: rope_utils.py `_apply_rotary_pos_emb_bshd` one op at a time, per element of Q
    and K read + written: t·cos 2, −x2 1, cat 2, ·sin 2, sum 3, final cat 2 = 12; backward ·sin 2,
    negation 1, halves joined 2, ·cos 2, two gradients summed 3, the slice's zero-filled gradient 3 = 13.
    Fused: read and write once."""
    run = _with_timing(spec_run(_llama(), s=1024), rope_fusion=fusion)
    rope = {op.name: op for op in ops_of(run)}["rope"]
    elements = 1024 * (8 + 2) * 64  # n tokens × (heads + kv heads) · head size 512/8
    assert rope.bytes == elements * 2 * forward
    assert rope.backward_bytes == elements * 2 * backward


def test_mla_s_unfused_rotary_embedding_by_hand():
    # The MLA layer of test_per_device_flops_of_an_mla_layer at t = 1: 8 heads, nope 64, rope 32,
    # v 64, n = 1024 tokens, bf16.
    spec = dict(MLA_H1024)
    n, heads = 1024, 8
    fused = {op.name: op for op in ops_of(spec_run(spec, s=1024))}["rope"]
    # fused: Q and K (8 heads × 96) read and written once
    assert fused.bytes == fused.backward_bytes == 2 * 2 * n * heads * 96 * 2
    unfused = {op.name: op for op in ops_of(_with_timing(spec_run(spec, s=1024), rope_fusion=False))}["rope"]
    # forward per token: rotary steps 14 × 32 on 8 query heads and the one key part (9 × 448 = 4032);
    # Q and K concatenated, 2 × 2 × 8 × 96 = 3072; V made contiguous, 2 × 8 × 64 = 1024: 8128 elements
    assert unfused.bytes == n * 8128 * 2
    # backward per token: rotary steps 20 × 32 on 9 parts (5760); q's split joined 2 × 8 × 96 (1536);
    # kv's split joined 2 × 8 × (64 + 64) (2048); the expanded key part summed over heads 9 × 32 (288): 9632
    assert unfused.backward_bytes == n * 9632 * 2


def test_torchtitan_s_float8_tensor_parallelism_gathers_float8():
    # torchtitan v0.2.2 parallelize.py: tensorwise Float8 linears take torchao's Float8ColwiseParallel /
    # Float8RowwiseParallel / PrepareFloat8ModuleInput (float8_tensor_parallel.py): the norm's sequence
    # shard is cast to float8 before its all-gather, and the rowwise output's gradient is cast to float8
    # (NoopFwToFloat8BwDynamic) before its backward all-gather; both reduce-scatters stay bf16.
    # s = 1024, b = 1, h = 512 at t = 2: the gathered tensor is 1024 · 512 elements, 524,288 bytes
    # in float8, 1,048,576 in bf16.
    def comms(matmul_dtype):
        run = parse_run_config(
            {
                "name": "tt",
                "framework": "torchtitan",
                "models": [{"name": "llm", "spec": _llama()}],
                "parallel": {"tp": 2, "sequence_parallel": True},
                "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
                "device": {"name": "h100-80gb"},
                "timing": {"matmul_dtype": matmul_dtype, "fp8_recipe": "tensorwise"},
            }
        )
        return {op.name: op for op in ops_of(run)}

    elements = 1024 * 512
    for dtype, gathered in (("fp8", elements), ("bf16", 2 * elements)):
        ops = comms(dtype)
        for entry in ("gather_attention", "gather_mlp"):
            assert ops[entry].forward_comm.payload_bytes == gathered  # the forward all-gather
            assert ops[entry].recompute_comm.payload_bytes == gathered  # and again when recomputed
            assert ops[entry].backward_comm.payload_bytes == 2 * elements  # input gradient: bf16
        for exit_ in ("reduce_attention", "reduce_mlp"):
            assert ops[exit_].forward_comm.payload_bytes == 2 * elements  # partial sums: bf16
            assert ops[exit_].backward_comm.payload_bytes == gathered  # the output gradient's gather


@pytest.mark.parametrize(
    ("fusion", "impl", "kind", "calls"),
    [(False, "native", "all_reduce", 3), (True, "native", "all_reduce", 2), (True, "te", "all_gather", 1)],
)
def test_the_loss_s_statistics_cross_tp_in_the_calls_its_code_makes(fusion, impl, kind, calls):
    # megatron/core/tensor_parallel/cross_entropy.py `_VocabParallelCrossEntropy.forward` (d98e8a64): all_reduce
    # of the max, of the target logits and of the sums of exponentials, 3 calls; fused_cross_entropy.py cats
    # the last two into one, 2; TE's cross_entropy_forward one all_gather_into_tensor of m, d and X_y, 1
    run = gpt_run(v=32000, s=512, b=2, tp=2, framework="megatron")
    timing = {"cross_entropy_fusion": fusion, "cross_entropy_fusion_impl": impl}
    run = run.model_copy(update={"timing": run.timing.model_copy(update=timing)})
    tail = tail_kind(run.spec(run.model_names[0]), 32000)
    comm = next(op for op in layer_ops(tail, OpGeometry.from_run(run)) if op.name == "output.reduce_loss").forward_comm
    assert (comm.kind, comm.calls) == (kind, calls)


def test_sliding_window_layer_computes_its_band_only():
    # GPT-OSS's attention at s = 4096, b = 1, flash, 64 heads of 64 (8 kv heads), window 128 on layer 0:
    # the first 128 queries see 1..128 keys, the other 3968 see 128 each: 128·129/2 + 3968·128 = 516,160
    # pairs a head (= s·w − w(w−1)/2 = 524,288 − 8,128); forward QKᵀ 2·64·516,160·64 = 4,228,382,720.
    # Layer 1 attends in full: 4096·4097/2 = 8,390,656 pairs a head, 2·64·8,390,656·64 = 68,736,253,952.
    spec = {
        "vocab_size": 1000,
        "hidden_size": 2880,
        "num_layers": 2,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "sliding_window": 128,
        "window_layers": [0],
        "attention_sinks": True,
    }
    run = spec_run(spec, s=4096)
    windowed, full = ({op.name: op for op in ops_of(run, index)} for index in (0, 1))
    assert windowed["flash_scores"].flops == 4_228_382_720 == windowed["flash_context"].flops
    assert full["flash_scores"].flops == 68_736_253_952
    # the kernel's shape: 64 (sequence, head) pairs of 4096 queries, 516,160 / 4096 = 126.02 keys a query
    assert windowed["flash_scores"].attention == (64.0, 4096.0, 516_160 / 4096, 64, 1.0)


# one GPT-OSS 120B MoE layer: 128 experts, top 4, quick-GEGLU with biases and its clamp at 7 (its config.json)
GPT_OSS_MOE_LAYER = {
    **GPT_OSS_ATTENTION_LAYER,
    "activation": "quick_geglu",
    "num_experts": 128,
    "experts_per_token": 4,
    "moe_intermediate_size": 2880,
    "expert_bias": True,
    "router_bias": True,
    "activation_clamp": 7.0,
}


def test_gpt_oss_experts_fc2_bias_is_megatron_s_per_expert_loop():
    # TEGroupedMLP._apply_bias (Megatron-LM 2edffadb52): per local expert t + b·p, then torch.cat. GPT-OSS 120B's
    # MoE at s = 4096, b = 1, EP 8: 16 local experts; 4096 tokens · top-4 = 16,384 rows (balanced) of h 2880 in
    # bf16, probabilities bf16 (no promotion). Forward: b·p written (2), t and b·p read, the sum written (6), the
    # cat read and written (4): 12 bytes a row element = 16,384 · 2880 · 12 = 566,231,040; 2 kernels an expert and
    # the cat's: 33. Backward (autograd's mul backward writes each product g·p and g·b in full, then sums it to the
    # broadcast input's shape): each product read g and wrote (4), each sum read it (2): 12 bytes an element =
    # 566,231,040; 4 kernels an expert: 64; then the two torch.split's gradients joined (SplitWithSizesBackward0:
    # an aten::cat, torch 2.13): t's read and written, 2 · 2 · 47,185,920 = 188,743,680, the probabilities',
    # 2 · 2 · 16,384 = 65,536: 755,040,256 bytes, 66 kernels. The broadcast products run on PyTorch's
    # non-contiguous path: b·p written forward (2 bytes an element: 94,371,840), g·p and g·b read and written
    # backward (8: 377,487,360).
    spec = GPT_OSS_MOE_LAYER
    ops = {op.name: op for op in ops_of(spec_run(spec, s=4096, dp=8, ep=8))}
    bias = ops["experts_bias"]
    assert (bias.bytes, bias.backward_bytes, bias.launches) == (566_231_040, 755_040_256, (33.0, 66.0))
    assert bias.strided_bytes == (94_371_840, 377_487_360)
    assert bias.inputs == ("experts_out",)
    assert ops["combine"].inputs == ("experts_bias",)
    # weighted_bias_quick_geglu_impl's eager clamp (fused_bias_geglu.py, 2edffadb52) between fc1 and the fused
    # activation: E = 16,384 rows · 2880 = 47,185,920 elements a half; forward the two clamps and the cat, 8
    # passes of 2 bytes = 754,974,720, 4 launches (the offset's H2D copy one); backward the clamps' masks and
    # wheres, 7 passes of 2 bytes and 8 of 1, then the chunk's gradient joined (autograd's SplitBackward0 is an
    # aten::cat, torch 2.13: read both halves, write both, 4 passes of 2 bytes) = 30 bytes an element =
    # 1,415,577,600, 9 launches
    clamp = ops["experts_clamp"]
    assert (clamp.bytes, clamp.backward_bytes, clamp.launches) == (754_974_720, 1_415_577_600, (4.0, 9.0))
    assert (clamp.inputs, ops["experts_act"].inputs, clamp.switch) == (("experts_in",), ("experts_clamp",), "ffAct")
    # the offset's `torch.tensor(linear_offset, device=...)` is a blocking copy (PyTorch `memcpy_and_sync`): one sync
    assert (clamp.syncs, ops["experts_act"].syncs) == (1, 0)
    # each of its kernels reads or writes a `chunk` half (a view, not contiguous): priced at the eager share over
    # such halves (kernels.STRIDED_EAGER_SHARE); the fused activation after it, one compiled kernel, is not
    assert clamp.strided and not ops["experts_act"].strided and not bias.strided
    # without a clamp value (Megatron-LM's --activation-func-clamp-value unset) `if clamp_value is not None` skips it
    unclamped = {op.name: op for op in ops_of(spec_run({**spec, "activation_clamp": 0.0}, s=4096, dp=8, ep=8))}
    assert "experts_clamp" not in unclamped and unclamped["experts_act"].inputs == ("experts_in",)


def test_gpt_oss_clamp_is_priced_at_the_strided_eager_share():
    # the clamp above (H100, 3,350 GB/s): 754,974,720 bytes at 0.515 of the peak forward = 0.4376 ms, 1,415,577,600
    # at 0.603 backward = 0.7008 ms (kernels.STRIDED_EAGER_SHARE), not at the fused share 0.8 (0.2817 / 0.5282 ms);
    # plus each kernel's fixed GPU time, H100's 1.6 µs (cudnn-frontend's H200 RMSNorm sweep): the clamp's 4
    # kernels forward (two clamps, the limit's tensor, ...) and 9 backward (`_glu_clamp`'s launches)
    run = spec_run(GPT_OSS_MOE_LAYER, s=4096, dp=8, ep=8)
    clamp = next(op for op in ops_of(run) if op.name == "experts_clamp")
    model = TimeModel(run)
    assert model._phase_s(clamp, "forward") == pytest.approx(754_974_720 / (3350e9 * 0.515) + 4 * 1.6e-6)
    assert model._phase_s(clamp, "backward") == pytest.approx(1_415_577_600 / (3350e9 * 0.603) + 9 * 1.6e-6)


def test_gpt_oss_fc2_bias_under_hybridep_runs_in_fp32():
    # HybridEP returns fp32 probabilities whatever the router's dtype (token_dispatcher.py `_HybridEPManager.
    # dispatch`: `self.token_probs.float()`; hybrid_ep.cu writes them as kFloat32), so `_apply_bias`'s b·p and sums
    # are fp32: E = 16,384 rows · 2880 = 47,185,920 elements. Forward: b·p written (4), t (2) and b·p (4) read and
    # the sum written (4), the cat read and written (8), the cast to bf16 read and written (6): 28 bytes =
    # 1,321,205,760; kernels 2 an expert, the cat, the cast: 34. Backward: the output gradient cast up (2 + 4), t's
    # gradient cast down (4 + 2), the two products (4 + 4 each) and their sums (4 each): 36 bytes = 1,698,693,120,
    # and the splits' gradients joined, t's in bf16 (2 + 2: 188,743,680) and the fp32 probabilities' (16,384 · 8 =
    # 131,072): 1,887,567,872; kernels 4 an expert, t's gradient cast and the bias gradient's cast an expert, the
    # cast up, the two cats: 6 · 16 + 3 = 99. Non-contiguous path: b·p's fp32 write (4: 188,743,680), the two
    # products' fp32 reads and writes (16: 754,974,720).
    spec = GPT_OSS_MOE_LAYER
    run = parse_run_config(
        {
            "name": "x",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": 8, "ep": 8},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": "h100-80gb"},
            "timing": {"moe_dispatcher": "hybridep"},
        }
    )
    bias = {op.name: op for op in ops_of(run)}["experts_bias"]
    assert (bias.bytes, bias.backward_bytes, bias.launches) == (1_321_205_760, 1_887_567_872, (34.0, 99.0))
    assert bias.strided_bytes == (188_743_680, 754_974_720)


def test_gpt_oss_fc2_bias_broadcast_products_at_the_strided_eager_share():
    # The bf16 per-expert loop above on H100 (3,350 GB/s; Megatron's element-wise ops at its memory efficiency 0.8):
    # forward 566,231,040 bytes, 94,371,840 of them b·p's broadcast write at 0.515 (STRIDED_EAGER_SHARE): 471,859,200
    # / 2,680e9 = 0.17607 ms + 94,371,840 / 1,725.25e9 = 0.05470 ms; backward 755,040,256, 377,487,360 of them the
    # two broadcast products at 0.603: 377,552,896 / 2,680e9 = 0.14088 ms + 377,487,360 / 2,020.05e9 = 0.18687 ms;
    # plus H100's fixed 1.6 µs a kernel (cudnn-frontend's H200 RMSNorm sweep) over the loop's kernels, 16 local
    # experts in bf16 (no cast): forward 2 an expert + the cat = 33, backward 4 an expert + 2 = 66
    run = spec_run(GPT_OSS_MOE_LAYER, s=4096, dp=8, ep=8)
    bias = next(op for op in ops_of(run) if op.name == "experts_bias")
    model = TimeModel(run)
    forward = 471_859_200 / (3350e9 * 0.8) + 94_371_840 / (3350e9 * 0.515) + 33 * 1.6e-6
    backward = 377_552_896 / (3350e9 * 0.8) + 377_487_360 / (3350e9 * 0.603) + 66 * 1.6e-6
    assert model._phase_s(bias, "forward") == pytest.approx(forward)
    assert model._phase_s(bias, "backward") == pytest.approx(backward)


def test_yarn_scaled_rotary_runs_megatron_s_unfused_steps():
    # attention.py passes mscale = _yarn_get_concentration_factor_from_config (core_v0.17.0, 0d8e0714cd): with
    # GPT-OSS's factor 32 and no mscale, 0.1·ln 32 + 1 = 1.3466, and rope_utils.py `apply_rotary_pos_emb` takes
    # the unfused path for any mscale != 1 even under apply_rope_fusion. Q and K of one rank at s = 4096, b = 1:
    # (64 + 8) heads of 64 = 4608 channels, 4096 · 4608 = 18,874,368 elements; fused 2 bytes read + 2 written
    # each way = 75,497,472; unfused 12 passes forward (24 bytes) = 452,984,832, 13 backward (26) = 490,733,568
    # (`UNFUSED_ROPE_FORWARD` / `_BACKWARD`). A factor of 1 is no scaling (`_yarn_get_mscale`: 1.0 at scale <= 1).
    spec = GPT_OSS_ATTENTION_LAYER
    for factor, fused in ((0.0, True), (1.0, True), (32.0, False)):
        run = spec_run({**spec, "rope_yarn_factor": factor}, s=4096)
        rope = {op.name: op for op in ops_of(run)}["rope"]
        assert run.rope_fused is fused
        if fused:
            assert (rope.bytes, rope.backward_bytes) == (75_497_472, 75_497_472)
            assert rope.strided_bytes == (0.0, 0.0)
        else:
            assert (rope.bytes, rope.backward_bytes) == (452_984_832, 490_733_568)
            # t·cos and ·sin broadcast cos and sin, the negation reads a chunk half: 5 passes of 2 bytes each way on
            # PyTorch's non-contiguous path (CUDALoops.cuh `launch_legacy_kernel`): 18,874,368 · 10 = 188,743,680
            assert rope.strided_bytes == (188_743_680, 188_743_680)


def test_megatron_s_unfused_bias_dropout_add():
    # fused_bias_dropout.py `_bias_dropout_add_func` run eagerly (bias_dropout_fusion False, GPTOSSBridge;
    # core_v0.17.0): the attention branch returns out_proj's bias: `x + bias` (read, write), F.dropout at p 0
    # (PyTorch returns its input: no kernel), `residual + out` (read two, write one). s 4096, h 2880, bf16:
    # E = 4096 · 2880 = 11,796,480 elements; forward 5 passes · 2 bytes = 117,964,800, 2 kernels; backward the
    # fork's sum only, 3 passes = 70,778,880, 1 kernel. The MoE branch returns no bias: 3 passes, 1 kernel.
    # Fused (the default): 3 passes forward, the branch's gradient and the sum backward, 5 passes.
    spec = {
        **GPT_OSS_ATTENTION_LAYER,
        "attention_bias": True,
        "attention_output_bias": True,
        "num_experts": 8,
        "experts_per_token": 2,
        "moe_intermediate_size": 2880,
    }
    raw = {
        "name": "x",
        "models": [{"name": "llm", "spec": spec}],
        "training": {"seq_length": 4096, "micro_batch_size": 1},
        "timing": {"bias_dropout_fusion": False},
        "device": {"name": "h100-80gb"},
    }
    ops = {op.name: op for op in ops_of(parse_run_config(raw))}
    attention, moe = ops["residual_attention"], ops["residual_moe"]
    assert (attention.bytes, attention.backward_bytes, attention.launches) == (117_964_800, 70_778_880, (2.0, 1.0))
    assert (moe.bytes, moe.backward_bytes, moe.launches) == (70_778_880, 70_778_880, (1.0, 1.0))
    # `x + bias` broadcasts the bias row over the tokens (PyTorch's non-contiguous kernel): its 2 passes of 2 bytes,
    # 11,796,480 · 4 = 47,185,920, forward only (the backward's adds hand the gradient on)
    assert (attention.strided_bytes, moe.strided_bytes) == ((47_185_920, 0.0), (0.0, 0.0))
    fused = {op.name: op for op in ops_of(spec_run(spec, s=4096))}["residual_attention"]
    assert (fused.bytes, fused.backward_bytes, fused.launches) == (70_778_880, 117_964_800, None)
    # with dropout (p 0.1): native_dropout's kernel each way. Forward the bias add 4 bytes an element, the
    # dropout 2 read + 2 written + the 1-byte mask = 5, the residual add 6: 15; backward the dropout's gradient
    # (read 2 and the mask, write 2) 5 and the fork's sum 6: 11
    raw["models"][0]["spec"] = {**spec, "hidden_dropout": 0.1}
    dropped = {op.name: op for op in ops_of(parse_run_config(raw))}["residual_attention"]
    assert (dropped.bytes, dropped.backward_bytes) == (11_796_480 * 15, 11_796_480 * 11)
    assert dropped.launches == (3.0, 2.0)
