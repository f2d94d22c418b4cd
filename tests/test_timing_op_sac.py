"""torchtitan's per-op selective checkpointing in the time model: what the backward runs again.

torchtitan/distributed/activation_checkpoint.py (`_apply_op_sac`): the block is replayed in the
backward; matmuls are saved except every second one of the block (wq 1 saved, wk 2 recomputed,
wv 3 saved, wo 4 recomputed, w1 5 saved, w3 6 recomputed, w2 7 saved); the flash kernel is saved;
everything else (norms, rotary, SiLU and product, residual adds) runs again.
"""

from __future__ import annotations

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.flops import MATMUL
from ppb_core.timing.model_flops import recompute_flops_per_iteration
from ppb_core.timing.pricer import TimeModel

H, HEADS, KV, FFN, SEQ, LAYERS = 512, 8, 2, 1536, 128, 4
HEAD_DIM = H // HEADS  # 64


def titan(recompute: dict):
    spec = {
        "vocab_size": 1000,
        "hidden_size": H,
        "num_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV,
        "intermediate_size": FFN,
        "max_position_embeddings": SEQ,
    }
    return parse_run_config(
        {
            "name": "titan",
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": 2, "fsdp": True, "zero": 3},
            "training": {
                "seq_length": SEQ,
                "micro_batch_size": 1,
                "micro_batches": 1,
                "dtype": "bf16",
                "flash_attention": True,
                "recompute": recompute,
            },
            "device": {"name": "h100-80gb"},
        }
    )


@pytest.fixture(scope="module")
def op_run():
    return titan({"mode": "selective", "option": "op"})


def _body(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


def test_every_second_matmul_and_every_elementwise_op_runs_again(op_run):
    model = TimeModel(op_run)
    rows = [r for r in model.breakdown(_body(op_run), LayerType.SEL_REC_LAYER) if r.phase == "recompute"]
    matmul = sum(r.flops for r in rows if r.category == MATMUL)
    # wk: 2·128·512·(2·64) = 16,777,216; wo: 2·128·512·512 = 67,108,864; w3: 2·128·512·1536 = 201,326,592
    assert matmul == pytest.approx(16_777_216 + 67_108_864 + 201_326_592)
    names = {r.name for r in rows}
    assert {"norm1", "rope", "norm2", "mlp_act", "residual_attention", "residual_mlp"} <= names
    assert not names & {"v_proj", "mlp_out", "flash_scores", "flash_context"}
    # the pieces cost their share: wk's quarter of wq|wk is priced below the whole op's forward
    forward = {r.name: r.ms for r in model.breakdown(_body(op_run), LayerType.NOT_REC_LAYER) if r.phase == "forward"}
    again = {r.name: r.ms for r in rows}
    assert again["qk_proj"] < forward["qk_proj"] and again["mlp_in"] < forward["mlp_in"]
    assert again["out_proj"] == pytest.approx(forward["out_proj"])


def test_the_run_recomputes_what_its_op_table_says_and_hfu_counts_it(op_run):
    model = TimeModel(op_run)
    layer = _body(op_run)
    forward, backward = model.layer_times(layer, LayerType.SEL_REC_LAYER)
    plain_forward, plain_backward = model.layer_times(layer, LayerType.NOT_REC_LAYER)
    again = sum(r.ms for r in model.breakdown(layer, LayerType.SEL_REC_LAYER) if r.phase == "recompute")
    assert forward == pytest.approx(plain_forward)
    assert backward == pytest.approx(plain_backward + again)
    # HFU's extra FLOPs: the rerun matmuls of every layer, every sequence (global batch 2·1, micro-batch 1)
    per_layer = 16_777_216 + 67_108_864 + 201_326_592
    assert recompute_flops_per_iteration(op_run, "SLCT") == pytest.approx(per_layer * LAYERS * 2)


def test_a_switch_profile_is_not_the_op_policy(op_run):
    # Any setting other than the run's own is ppb's switches alone (here only the norms dropped).
    model = TimeModel(op_run)
    rows = model.breakdown(_body(op_run), LayerType.SEL_REC_LAYER, {"normOp": 0})
    assert {r.name for r in rows if r.phase == "recompute"} == {"norm1", "norm2"}


# A DeepSeek-V3-style block (MLA with a query LoRA, 4 routed experts of 64 top 2, one shared expert
# of 64), h 256, 4 heads (no-RoPE 32 + RoPE 16 per query/key head, values 32), q rank 64, kv rank 32.
MLA_MOE = {
    "vocab_size": 1000,
    "hidden_size": 256,
    "num_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "max_position_embeddings": SEQ,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "num_experts": 4,
    "experts_per_token": 2,
    "moe_intermediate_size": 64,
    "shared_experts": 1,
    "shared_expert_intermediate_size": 64,
}


def titan_moe(spec: dict):
    return parse_run_config(
        {
            "name": "titan-moe",
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": 2, "ep": 2, "fsdp": True, "zero": 3},
            "training": {
                "seq_length": SEQ,
                "micro_batch_size": 1,
                "micro_batches": 1,
                "dtype": "bf16",
                "flash_attention": True,
                "recompute": {"mode": "selective", "option": "op"},
            },
            "device": {"name": "h100-80gb"},
        }
    )


def test_mla_moe_blocks_rerun_what_the_memory_rules_do_not_save():
    # deepseek_v3/model/model.py's forward order counts wq_a 1, wq_b 2, wkv_a 3, wkv_b 4, wo 5, the
    # router's gate 6, the shared expert's w1 7, w3 8, w2 9: the even ones run again, and so do the
    # routed experts (`torch._grouped_mm`, not in the save list). T = 128 tokens:
    #   wq_b 2·128·64·(4·48) = 3,145,728; wkv_b 2·128·32·(4·(32+32)) = 2,097,152;
    #   gate 2·128·256·4 = 262,144; shared w3 2·128·256·64 = 4,194,304;
    #   routed w1|w3 over 128·2 = 256 rows 2·256·256·128 = 16,777,216, w2 2·256·64·256 = 8,388,608.
    run = titan_moe(MLA_MOE)
    model = TimeModel(run)
    rows = [r for r in model.breakdown(_body(run), LayerType.SEL_REC_LAYER) if r.phase == "recompute"]
    per_layer = 3_145_728 + 2_097_152 + 262_144 + 4_194_304 + 16_777_216 + 8_388_608
    assert sum(r.flops for r in rows if r.category == MATMUL) == pytest.approx(per_layer)
    names = {r.name for r in rows}
    assert {"q_up", "kv_up", "router", "shared_in", "experts_in", "experts_out", "q_norm", "rope"} <= names
    assert not names & {"q_down", "kv_down", "out_proj", "shared_out", "flash_scores", "flash_context"}
    # DeepSeek-V3's save list holds all_to_all_single: the dispatch and combine are not sent again
    assert not names & {"dispatch", "combine"}
    # HFU counts them: 2 layers, 2 sequences (dp 2 · micro-batch 1)
    assert recompute_flops_per_iteration(run, "SLCT") == pytest.approx(per_layer * 2 * 2)


def test_qwen3_moe_blocks_send_their_all_to_alls_again():
    # Qwen3 (GQA with qk norms; qwen3/infra/parallelize.py's save list has no all_to_all_single):
    # wq 1, wk 2, wv 3, wo 4, gate 5 saved, no shared expert; the dispatch and combine run again.
    # GQA 4 heads of 64, 2 KV heads, h 256, T 128: wk 2·128·256·(2·64) = 8,388,608; wo
    # 2·128·256·256 = 16,777,216; routed experts 16,777,216 + 8,388,608 as above.
    spec = {k: v for k, v in MLA_MOE.items() if not k.startswith(("q_lora", "kv_lora", "qk_", "v_head", "shared"))}
    spec.update({"num_key_value_heads": 2, "qk_norm": True, "head_dim": 64})
    run = titan_moe(spec)
    rows = [r for r in TimeModel(run).breakdown(_body(run), LayerType.SEL_REC_LAYER) if r.phase == "recompute"]
    assert sum(r.flops for r in rows if r.category == MATMUL) == pytest.approx(
        8_388_608 + 16_777_216 + 16_777_216 + 8_388_608
    )
    assert {"dispatch", "combine"} <= {r.name for r in rows}
