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
