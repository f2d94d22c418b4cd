"""Activation bytes per op and switch, worked out by hand for small shapes.

bc = 2 (bf16) throughout; "tokens" are s·b/cp, "whole" tokens s·b/(cp·sp).
"""

from __future__ import annotations

import pytest
from small_models import SMALL_MLA
from test_memory_runs import DENSE, body, layers, make_run, model

from ppb_core.errors import InputError
from ppb_core.memory.activations import routed_rows
from ppb_core.model.switches import KEEP_ALL, LayerType

NOT, SEL, FULL = LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER


def _part(memory, layer, state, switches, prefix):
    return sum(t.bytes for t in memory.activation_terms(layer, state, switches) if t.op.startswith(prefix))


def test_dense_flash_layer_op_by_op():
    # s 64, h 64, 4 heads of 16, SwiGLU 128, flash: tokens 64.
    run = make_run(DENSE, training={"seq_length": 64})
    memory, layer = model(run), body(run)
    terms = {t.op: (t.switch, t.bytes) for t in memory.activation_terms(layer, NOT)}
    assert terms == {
        "attention.norm_input": (None, 64 * 64 * 2),
        "attention.norm_output": ("normOp", 64 * 64 * 2),
        "attention.query": ("attBMM", 64 * 4 * 16 * 2),
        "attention.key": ("attBMM", 64 * 4 * 16 * 2),
        "attention.value": ("attBMM", 64 * 4 * 16 * 2),
        "attention.softmax_lse": ("softmax", 64 * 4 * 4),  # fp32 per head and token
        "attention.core_output": (None, 64 * 4 * 16 * 2),
        "mlp.norm_input": (None, 64 * 64 * 2),
        "mlp.norm_output": ("normOp", 64 * 64 * 2),
        "mlp.gate_up_output": (None, 64 * 2 * 128 * 2),
        "mlp.activation_output": ("ffAct", 64 * 128 * 2),
    }
    # 8192 + 24576 + 1024 + 8192 + 16384 + 32768 + 16384
    assert memory.activation_bytes(layer, NOT) == 115712
    # softmax 0 and ffAct 0 drop the LSE (1024) and the activation output (16384)
    assert memory.activation_bytes(layer, SEL, dict(KEEP_ALL, softmax=0, ffAct=0)) == 115712 - 1024 - 16384
    # full recompute keeps the input: 64·64·2
    assert memory.activation_bytes(layer, FULL) == 8192


def test_gqa_flash_keeps_narrow_keys_non_flash_expands_them():
    spec = {**DENSE, "num_key_value_heads": 2}
    flash = make_run(spec, training={"seq_length": 64})
    eager = make_run(spec, training={"seq_length": 64, "flash_attention": False})
    # flash: K and V of 2 heads: 64·2·16·2 = 4096 each
    assert _part(model(flash), body(flash), NOT, None, "attention.key") == 4096
    # non-flash: the batched matmuls run on keys and values expanded to 4 heads: 8192 each,
    # plus the softmax output over 4 heads of 64×64 scores (32768), no dropout terms at rate 0
    memory = model(eager)
    assert _part(memory, body(eager), NOT, None, "attention.key") == 8192
    assert _part(memory, body(eager), NOT, None, "attention.softmax_output") == 64 * 4 * 64 * 2
    assert not [t for t in memory.activation_terms(body(eager), NOT) if "dropout" in t.op]


def test_non_flash_dropout_terms_and_their_switches():
    run = make_run(DENSE, training={"seq_length": 64, "flash_attention": False, "dropout": 0.1})
    terms = {t.op: (t.switch, t.bytes) for t in model(run).activation_terms(body(run), NOT)}
    assert terms["attention.dropout_mask"] == ("dropout", 64 * 4 * 64 * 1)  # one byte per score
    assert terms["attention.dropout_output"] == ("headCast", 64 * 4 * 64 * 2)
    # masks after the projection and the MLP: kept whatever the switches, one byte per element
    assert terms["attention.dropout_mask_after_projection"] == (None, 64 * 64)
    assert terms["mlp.dropout_mask"] == (None, 64 * 64)


def test_qk_norm_input_under_norm_op():
    run = make_run({**DENSE, "qk_norm": True}, training={"seq_length": 64})
    memory, layer = model(run), body(run)
    # q and k before their norms: 64·(4 + 4)·16·2 = 16384; with the two norm outputs (2·8192)
    dropped = memory.activation_bytes(layer, NOT) - memory.activation_bytes(layer, SEL, dict(KEEP_ALL, normOp=0))
    assert dropped == 16384 + 16384


def test_tensor_and_sequence_parallel_split():
    # tp 2, SP: whole tensors (norms) over 2 as well: attention.norm_input 32·64·2 = 4096; heads 2: Q 64·2·16·2
    run = make_run(DENSE, parallel={"tp": 2, "sequence_parallel": True}, training={"seq_length": 64})
    memory = model(run)
    terms = {t.op: t.bytes for t in memory.activation_terms(body(run), NOT)}
    assert terms["attention.norm_input"] == 4096
    assert terms["attention.query"] == 4096
    assert terms["mlp.gate_up_output"] == 64 * 2 * 64 * 2
    assert memory.activation_bytes(body(run), NOT) == 115712 / 2  # every term halves
    assert memory.activation_bytes(body(run), FULL) == 4096  # the input, sequence-sharded


SMALL_GQA = {**DENSE, "num_key_value_heads": 2}


def test_context_parallel_ring_halves_every_term():
    # cp 2: tokens 32 per rank; with 2 kv heads: norms 8192, Q 4096, K 2048, V 2048, LSE 512, core 4096,
    # MLP norms 8192, gate/up 16384, activation 8192
    ring = make_run(SMALL_GQA, parallel={"cp": 2}, training={"seq_length": 64})
    whole = make_run(SMALL_GQA, training={"seq_length": 64})
    assert model(ring).activation_bytes(body(ring), NOT) == 53760
    assert model(whole).activation_bytes(body(whole), NOT) == 2 * 53760


def test_context_parallel_ulysses_refuses_fewer_kv_heads_than_cp():
    # one kv head, cp 2: Ulysses would need a whole sequence of half a head a rank. TE d0067d0d
    # AttnFuncWithCPAndQKVOA2A asserts K's heads divide by cp (MindFormers' LLamaAttention likewise), so the
    # run config refuses it rather than price a replicated head no framework runs
    spec = {**DENSE, "num_key_value_heads": 1}
    make_run(spec, parallel={"cp": 2}, training={"seq_length": 64})  # the ring keeps K of 32 tokens × 1 head
    with pytest.raises(InputError) as caught:
        make_run(spec, parallel={"cp": 2, "cp_variant": "ulysses"}, training={"seq_length": 64})
    assert caught.value.field == "parallel.cp"


MLA = SMALL_MLA


def test_mla_latents_and_up_projected_heads():
    # s 32, 4 heads, q/k heads of 8 + 4, v heads of 8
    run = make_run(MLA, training={"seq_length": 32})
    memory, layer = model(run), body(run)
    terms = {t.op: (t.switch, t.bytes) for t in memory.activation_terms(layer, NOT) if t.op.startswith("attention")}
    assert terms == {
        "attention.norm_input": (None, 32 * 64 * 2),
        "attention.norm_output": ("normOp", 32 * 64 * 2),
        "attention.q_latent": (None, 32 * 16 * 2),  # c_q before its norm
        "attention.q_latent_norm": ("attUp", 32 * 16 * 2),
        "attention.kv_latent": (None, 32 * (8 + 4) * 2),  # c_kv and the shared rope key
        "attention.kv_latent_norm": ("attUp", 32 * 8 * 2),
        "attention.query": ("attUp", 32 * 4 * 12 * 2),
        "attention.key": ("attUp", 32 * 4 * 12 * 2),
        "attention.value": ("attUp", 32 * 4 * 8 * 2),
        "attention.softmax_lse": ("softmax", 32 * 4 * 4),
        "attention.core_output": (None, 32 * 4 * 8 * 2),
    }
    # attUp 0 drops the normed latents and the heads: 1024 + 512 + 3072 + 3072 + 2048
    assert memory.activation_bytes(layer, NOT) - memory.activation_bytes(layer, SEL, dict(KEEP_ALL, attUp=0)) == 9728
    # attBMM keeps nothing of its own on a latent-attention layer
    assert memory.activation_bytes(layer, SEL, dict(KEEP_ALL, attBMM=0)) == memory.activation_bytes(layer, NOT)


def test_mla_without_latent_norms_keeps_the_latents_once():
    # Megatron's MLA without --qk-layernorm (gpt_layer_specs.py d98e8a64: plain column-parallel up-projections):
    # the up-projections keep the latents the norms kept before, and nothing is normed: the two attUp
    # norm outputs above go, 32·16·2 + 32·8·2 = 1536 bytes fewer, and attUp 0 drops only the heads (8192)
    run = make_run({**MLA, "mla_latent_norms": False}, training={"seq_length": 32})
    normed = make_run(MLA, training={"seq_length": 32})
    memory, layer = model(run), body(run)
    ops = {t.op for t in memory.activation_terms(layer, NOT)}
    assert "attention.q_latent" in ops and "attention.kv_latent" in ops
    assert not {"attention.q_latent_norm", "attention.kv_latent_norm"} & ops
    assert model(normed).activation_bytes(body(normed), NOT) - memory.activation_bytes(layer, NOT) == 1536
    assert memory.activation_bytes(layer, NOT) - memory.activation_bytes(layer, SEL, dict(KEEP_ALL, attUp=0)) == 8192


MOE = {
    "vocab_size": 1024,
    "hidden_size": 32,
    "num_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "num_experts": 4,
    "experts_per_token": 2,
    "moe_intermediate_size": 16,
}


@pytest.mark.parametrize(
    ("moe", "rows"),
    [
        # dropless, the busiest rank 1.5× its share: 16 tokens · 2 copies · 1.5
        ({"dropless": True, "dropless_imbalance": 1.5}, 48),
        # capacity mode: every expert padded to capacity 1.25·16·2/4: 16·2·1.25 rows
        ({"dropless": False, "capacity_factor": 1.25}, 40),
    ],
)
def test_moe_capacity_and_dropless(moe, rows):
    # the formulas' terms as SAPP keeps them (framework mindformers); Megatron-Core's combine differs
    # (test_frameworks.py)
    run = make_run(MOE, training={"seq_length": 16, "moe": moe}, framework="mindformers")
    memory, layer = model(run), body(run, "moe")
    assert routed_rows(layer.kind.mlp, memory.setup) == rows
    # norms 2·16·32·2 = 2048; router scores 16·4·2 = 128; top-k probabilities 16·2·2 = 64 and
    # indices 16·2·8 = 256; combined tokens 16·2·32·2 = 2048; per routed row: the token 32·2,
    # gate/up 2·16·2 and the activation 16·2, 160 bytes
    assert _part(memory, layer, NOT, None, "moe.") == 2048 + 128 + 64 + 256 + 2048 + 160 * rows
    # ffAct 0 drops the experts' activation outputs: 32 bytes a row
    assert _part(memory, layer, NOT, None, "moe.") - _part(memory, layer, SEL, dict(KEEP_ALL, ffAct=0), "moe.") == (
        32 * rows
    )


def test_moe_shared_experts_and_gate():
    spec = {**MOE, "shared_experts": 1, "shared_expert_intermediate_size": 24, "shared_expert_gate": True}
    run = make_run(spec, training={"seq_length": 16})
    terms = {t.op: t.bytes for t in model(run).activation_terms(body(run, "moe"), NOT)}
    # the shared expert runs every token: gate/up 16·2·24·2, activation 16·24·2; the gate keeps its
    # output (16·1·2) and the shared output it scales (16·32·2)
    assert terms["moe.shared.gate_up_output"] == 1536
    assert terms["moe.shared.activation_output"] == 768
    assert terms["moe.shared_gate"] == 32
    assert terms["moe.shared_output"] == 1024


def test_expert_parallel_moves_tokens_to_buffers_and_keeps_the_total():
    # ep 2 (dp 2): of the 32 dispatched rows (dropless, imbalance 1) and the 32 combined ones, half
    # stayed local (activations) and half crossed the network (buffers kept per micro-batch)
    # (SAPP's conventions, framework mindformers: the send buffer is one of the layer's buffers)
    one = make_run(MOE, training={"seq_length": 16}, framework="mindformers")
    two = make_run(MOE, parallel={"dp": 2, "ep": 2}, training={"seq_length": 16}, framework="mindformers")
    m1, m2 = model(one), model(two)
    l1, l2 = body(one, "moe"), body(two, "moe")
    terms = {t.op: t.bytes for t in m2.activation_terms(l2, NOT)}
    assert terms["moe.dispatched_tokens"] == 32 * 32 * 2 / 2
    assert terms["moe.combined_tokens"] == 32 * 32 * 2 / 2
    remote = m2.buffers(l2, NOT).kept_bytes("ep")
    assert remote == 2 * 32 * 32 * 2 / 2
    assert m2.activation_bytes(l2, NOT) + remote == m1.activation_bytes(l1, NOT)
    # the all-to-all's send buffer: the larger of 32 dispatched and 32 returned rows, once
    assert m2.buffers(l2, NOT).transient_bytes("ep") == 32 * 32 * 2


def test_routed_rows_under_tensor_and_expert_tensor_parallel():
    # tp 2 with SP and etp 1: each TP rank dispatches its own half of the 16 tokens: 8·2 rows;
    # etp 2: the two ranks of an expert see the same rows, 16·2
    etp1 = make_run(MOE, parallel={"tp": 2, "sequence_parallel": True, "etp": 1}, training={"seq_length": 16})
    etp2 = make_run(MOE, parallel={"tp": 2, "sequence_parallel": True, "etp": 2}, training={"seq_length": 16})
    assert routed_rows(body(etp1, "moe").kind.mlp, model(etp1).setup) == 16
    assert routed_rows(body(etp2, "moe").kind.mlp, model(etp2).setup) == 32


def test_head_keeps_token_ids_and_dropout_mask():
    run = make_run(DENSE, training={"seq_length": 64})
    assert model(run).activation_bytes(layers(run)["HEAD"], LayerType.EMBEDDING_LAYER) == 64 * 8
    dropped = make_run(
        {**DENSE, "position_embedding": "learned", "max_position_embeddings": 64},
        training={"seq_length": 64, "dropout": 0.1},
    )
    # token ids and position ids (8 bytes each) and the 1-byte mask of 64×64
    assert model(dropped).activation_bytes(layers(dropped)["HEAD"], LayerType.EMBEDDING_LAYER) == 512 + 512 + 4096


def test_tail_keeps_norm_and_fp32_softmax_of_the_logits():
    run = make_run(DENSE, training={"seq_length": 64})
    # norm input and output 2·64·64·2 = 16384; logits softmax 64·1024·4 = 262144; labels 64·8
    assert model(run).activation_bytes(layers(run)["TAIL"], LayerType.OUTPUT_LAYER) == 16384 + 262144 + 512
    split = make_run(DENSE, parallel={"tp": 2}, training={"seq_length": 64})
    # vocabulary-parallel: 512 of the 1024 logits per token on each rank
    assert model(split).activation_bytes(layers(split)["TAIL"], LayerType.OUTPUT_LAYER) == 16384 + 131072 + 512


def test_tail_with_a_multi_token_prediction_module():
    run = make_run({**DENSE, "mtp_layers": 1}, training={"seq_length": 64})
    # main loss 279040; MTP: token ids 512, embedding 8192, projection input 64·128·2 = 16384, one
    # body layer (115712, as test_dense_flash_layer_op_by_op) and its own loss 279040; under Megatron
    # (the default framework) the MTP's hidden-state norm keeps its input, 64·64·2 = 8192, apart from
    # the copy torch.cat makes for the output layer (megatron/core/transformer/multi_token_prediction.py
    # `MultiTokenPredictionBlock.forward` returns `torch.cat(hidden_states_list)`)
    assert model(run).activation_bytes(layers(run)["TAIL"], LayerType.OUTPUT_LAYER) == (
        279040 + 512 + 8192 + 16384 + 115712 + 279040 + 8192
    )
    seed = make_run({**DENSE, "mtp_layers": 1}, training={"seq_length": 64}, framework="mindformers")
    assert model(seed).activation_bytes(layers(seed)["TAIL"], LayerType.OUTPUT_LAYER) == (
        279040 + 512 + 8192 + 16384 + 115712 + 279040
    )


def test_expert_tensor_parallel_gathered_rows_are_a_gather_buffer():
    # tp 2 + SP, etp 2, ep 1: 32 rows (test above); this rank's dispatch brought 16 of them (16·32·2 =
    # 1024 bytes, an activation), the expert-TP all-gather the other 16 (1024, a tp buffer that gather 0
    # drops: the backward gathers them again)
    run = make_run(MOE, parallel={"tp": 2, "sequence_parallel": True, "etp": 2}, training={"seq_length": 16})
    memory, layer = model(run), body(run, "moe")
    terms = {t.op: t.bytes for t in memory.activation_terms(layer, NOT)}
    assert terms["moe.dispatched_tokens"] == 1024
    gathered = [t for t in memory.buffers(layer, NOT).terms if t.name == "moe.expert_gathered_tokens"]
    assert [(t.bytes, t.kept, t.switch) for t in gathered] == [(1024, True, "gather")]
    recomputed = memory.buffers(layer, SEL, dict(KEEP_ALL, gather=0)).terms
    assert all(t.name != "moe.expert_gathered_tokens" for t in recomputed)


def test_mla_latent_norms_off_is_megatron_s_and_mla_s():
    # the field means Megatron's MLA without --qk-layernorm: refused on a model without MLA, and under
    # torchtitan (whose DeepSeek-V3 MLA norms its latents, components of model.py `Attention`)
    with pytest.raises(InputError):
        make_run({**DENSE, "mla_latent_norms": False})
    with pytest.raises(InputError) as caught:
        make_run({**MLA, "mla_latent_norms": False}, framework="torchtitan")
    assert caught.value.field == "models.0.spec.mla_latent_norms"
