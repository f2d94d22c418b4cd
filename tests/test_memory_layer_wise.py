"""Megatron's layer-wise distributed optimizer on its legacy path (`--no-use-layer-wise-param-layout`).

optimizer/layer_wise_optimizer.py `_shard_params_ping_pong` (Megatron-LM d98e8a64): every parameter of the
rank's model sorted by size, dealt 0, 1, …, dp−1, dp−1, …, 0 over the data-parallel ranks; a rank keeps the
optimizer states of its own parameters (memory/frameworks/layer_wise.py).
"""

from __future__ import annotations

from collections import Counter

import pytest

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel, stage_peaks
from ppb_core.memory.frameworks.layer_wise import extra_state_bytes, ping_pong
from ppb_core.model.walk import walk

# Megatron CI's moe/gpt3_moe_mcore_te_ep8_resume_torch_dist_dist_muon (model_config.yaml at d98e8a64)
CASE = (
    "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 4 --global-batch-size 32"
    " --seq-length 1024 --max-position-embeddings 1024 --disable-bias-linear --expert-model-parallel-size 8"
    " --num-experts 8 --moe-token-dispatcher-type allgather --moe-router-topk 2 --moe-ffn-hidden-size 1024"
    " --moe-grouped-gemm --bf16 --optimizer muon --use-distributed-optimizer"
)


def test_ping_pong_deals_the_sorted_parameters_back_and_forth():
    # sizes 5, 1, 4, 2, 3 sorted 1, 2, 3, 4, 5; over 2 ranks the order 0, 1, 1, 0, 0: rank 0 holds the
    # states of 1, 4 and 5, rank 1 of 2 and 3
    assert ping_pong([(5, 500), (1, 100), (4, 400), (2, 200), (3, 300)], 2) == [100 + 400 + 500, 200 + 300]


def _run(flags: str):
    return run_config_of(import_megatron(flags, 8, "h100-80gb"), "case")


def test_the_rank_dealt_the_embedding_holds_its_states():
    # dp 8 (ep 8 over 8 GPUs: one expert a rank, expert-dp 1). The non-expert parameters, 88 of them: 50 of 512
    # (each layer's two LayerNorms' weight and bias, the final norm's), 12 routers of 8·512 = 4096, 12 projections
    # of 512·512 = 262,144, the positions 1024·512 = 524,288, 12 QKV of 1536·512 = 786,432, the word embedding
    # 50304·512 = 25,755,648 (GPT-2's 50257 padded to 128). Dealt over 8 ranks in the order 0..7, 7..0: rank 7
    # takes indices 7, 8, 23, 24, 39, 40 (norms, Adam: 6·512·12 = 36,864), 55, 56 (routers, Muon's 8 bytes:
    # 65,536), 71, 72 (projections: 4,194,304) and 87, the embedding (Adam: 309,067,776): 313,364,480 bytes, the
    # most of any rank. Evenly (the layout's 1/dp): Adam's 26,305,536 elements · 12 + Muon's 12,632,064 · 8 =
    # 416,722,944, /8 = 52,090,368. The experts (expert-dp 1) are whole either way. Extra: 261,274,112 bytes.
    legacy = _run(f"{CASE} --no-use-layer-wise-param-layout")
    assert legacy.training.layer_wise_param_layout is False
    memory = MemoryModel(legacy)
    layers = tuple(Counter(layer.kind for layer in walk(legacy)).items())
    assert extra_state_bytes(layers, memory.setup) == pytest.approx(313_364_480 - 52_090_368)
    # the stage's static memory, at every moment, carries it
    plain = MemoryModel(_run(CASE))
    peaks = [stage_peaks(m, walk(m.run), [[1]], 80 * 2**30)[0] for m in (memory, plain)]
    assert peaks[0].static_bytes - peaks[1].static_bytes == pytest.approx(261_274_112)
    assert peaks[0].step_bytes - peaks[1].step_bytes == pytest.approx(261_274_112)


def test_the_flag_outside_the_layer_wise_optimizer():
    # training.py wrap_model_chunks_with_ddp: the layout concerns the layer-wise optimizer only (Muon with the
    # distributed optimizer); elsewhere Megatron reads the flag and changes nothing
    adam = CASE.replace("--optimizer muon", "--optimizer adam")
    assert (
        "layer_wise_param_layout"
        not in import_megatron(f"{adam} --no-use-layer-wise-param-layout", 8, "h100-80gb").raw["training"]
    )
    raw = import_megatron(adam, 8, "h100-80gb").raw
    raw["training"]["layer_wise_param_layout"] = False
    with pytest.raises(InputError) as caught:
        run_config_of(type(import_megatron(adam, 8, "h100-80gb"))(raw), "case")
    assert caught.value.field == "--no-use-layer-wise-param-layout"


def test_before_0044db1f20_the_layer_wise_optimizer_has_no_layout():
    # 0044db1f20 (2026-05-20, "Route non-Muon params through DistributedOptimizer") added the precomputed layout
    # and `--no-use-layer-wise-param-layout` to keep the path that came before: a launch of older code without
    # the flag runs that legacy path (Megatron CI's dist_muon case, its H100 values of 5fe3f06658, 2026-05-07)
    old = import_megatron(CASE, 8, "h100-80gb", release={"megatron_core": "2026-05-07"})
    assert old.raw["training"]["layer_wise_param_layout"] is False
    assert "layer_wise_param_layout" not in import_megatron(CASE, 8, "h100-80gb").raw["training"]
    held = import_megatron(CASE, 8, "h100-80gb", release={"megatron_core": "2026-05-20"})
    assert "layer_wise_param_layout" not in held.raw["training"]
