"""Static memory under ZeRO / FSDP, TP, EP / ETP and CP, HEAD and TAIL with tied embeddings; counts by hand."""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, DENSE_BODY_PARAMS, body, layers, make_run, model

from ppb_core.model.switches import LayerType

P = DENSE_BODY_PARAMS  # 41088


@pytest.mark.parametrize(
    ("parallel", "expected"),
    [
        # ZeRO-0: P·(2 params + 4 grads + 12 optimizer) = 41088·18
        ({"dp": 4, "zero": 0}, 41088 * 18),
        # ZeRO-1: optimizer states over dp 4: 41088·6 + ceil(41088/4)·12 = 246528 + 10272·12
        ({"dp": 4, "zero": 1}, 246528 + 123264),
        # ZeRO-2: gradients too: 41088·2 + 10272·16
        ({"dp": 4, "zero": 2}, 82176 + 164352),
        # ZeRO-3: parameters too: 10272·18
        ({"dp": 4, "zero": 3}, 10272 * 18),
        # FSDP shards like ZeRO-3 (zero left unstated: a stated zero other than 3 is refused)
        ({"dp": 4, "fsdp": True}, 10272 * 18),
        # context-parallel ranks shard with the data-parallel ones: dp 2 · cp 2 is a group of 4
        ({"dp": 2, "cp": 2, "zero": 1}, 246528 + 123264),
        # a shard rounds up: 41088/5 = 8217.6 -> 8218 elements
        ({"dp": 5, "zero": 3}, 8218 * 18),
    ],
)
def test_zero_levels(parallel, expected):
    run = make_run(DENSE, parallel=parallel)
    assert model(run).static_bytes(body(run)) == expected


def test_gradient_and_state_widths():
    # grad_bytes 2, optimizer_state_bytes 16, no sharding: 41088·(2 + 2 + 16)
    run = make_run(DENSE, parallel={"zero": 0}, training={"grad_bytes": 2, "optimizer_state_bytes": 16})
    breakdown = model(run).static_breakdown(body(run))
    assert (breakdown.parameter_bytes, breakdown.gradient_bytes, breakdown.optimizer_bytes) == (
        41088 * 2,
        41088 * 2,
        41088 * 16,
    )
    assert breakdown.total == 821760


def test_tensor_parallel_counts_per_rank():
    # tp 2: q,k,v on 2 heads of 16 (64·96 = 6144) and o (32·64 = 2048); norms 128; MLP 3·64·64 = 12288
    run = make_run(DENSE, parallel={"tp": 2, "zero": 0})
    assert model(run).static_bytes(body(run)) == (6144 + 2048 + 128 + 12288) * 18


MOE = {
    "vocab_size": 1024,
    "hidden_size": 64,
    "num_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "num_experts": 8,
    "experts_per_token": 2,
    "moe_intermediate_size": 32,
}


def test_expert_parallel_shards_over_expert_data_parallel():
    # dp 8, ep 4, etp 1, ZeRO-1. Non-expert: attention 16384 + norms 128 + router 64·8 = 17024, states
    # over dp 8 (2128). Experts: 8/4 = 2 per rank of 3·64·32: 12288, states over the expert-data-
    # parallel group dp·cp·tp/(ep·etp) = 2 (6144).
    run = make_run(MOE, parallel={"dp": 8, "ep": 4, "etp": 1, "zero": 1})
    memory = model(run)
    params = memory.parameters(body(run, "moe"))
    assert (params.non_expert, params.expert) == (17024, 12288)
    breakdown = memory.static_breakdown(body(run, "moe"))
    assert breakdown.parameter_bytes == (17024 + 12288) * 2
    assert breakdown.gradient_bytes == (17024 + 12288) * 4
    assert breakdown.optimizer_bytes == (2128 + 6144) * 12


def test_expert_tensor_parallel_and_zero3():
    # dp 4, tp 2, ep 2, etp 2, ZeRO-3. Non-expert at tp 2: 8192 + 128 + 512 = 8832, over dp 4: 2208.
    # Experts: 8/2 = 4 per rank of 3·64·(32/2): 12288, over dp·tp/(ep·etp) = 2: 6144.
    run = make_run(MOE, parallel={"dp": 4, "tp": 2, "ep": 2, "etp": 2, "zero": 3})
    breakdown = model(run).static_breakdown(body(run, "moe"))
    assert breakdown.parameters == 2208 + 6144
    # (the token dispatcher's state apart: test_frameworks)
    assert breakdown.total - breakdown.module_bytes == (2208 + 6144) * 18


def test_expert_tp_one_under_tensor_parallel():
    # dp 4, tp 2, ep 4, etp 1: experts 8/4 = 2 per rank of 3·64·32 = 12288, expert group 4·2/4 = 2.
    run = make_run(MOE, parallel={"dp": 4, "tp": 2, "ep": 4, "etp": 1, "zero": 1})
    breakdown = model(run).static_breakdown(body(run, "moe"))
    assert breakdown.total - breakdown.module_bytes == (8832 + 12288) * 6 + (2208 + 6144) * 12


@pytest.mark.parametrize(
    ("tied", "pp", "head", "tail"),
    [
        # tied, one stage: the HEAD holds the table 1024·64 = 65536; the TAIL its final norm (64)
        (True, 1, 65536, 64),
        # tied across stages: the last stage keeps its own copy of the table: 64 + 65536
        (True, 2, 65536, 65600),
        # untied: the output head is its own table
        (False, 1, 65536, 65600),
        (False, 2, 65536, 65600),
    ],
)
def test_head_and_tail_with_tied_embeddings(tied, pp, head, tail):
    run = make_run({**DENSE, "tied_embeddings": tied}, parallel={"pp": pp, "zero": 0})
    memory, found = model(run), layers(run)
    assert memory.static_bytes(found["HEAD"]) == head * 18
    assert memory.static_bytes(found["TAIL"]) == tail * 18


def test_vocabulary_splits_over_tensor_parallel():
    # tp 2: 512 rows of 64 per rank
    run = make_run({**DENSE, "tied_embeddings": True}, parallel={"tp": 2, "zero": 0})
    assert model(run).static_bytes(layers(run)["HEAD"]) == 512 * 64 * 18


def test_fsdp_working_set_holds_gathered_parameters():
    # Megatron-FSDP over dp 4: a gathered layer is a fresh bucket of the unit's whole size beside the rank's
    # shard (megatron_fsdp `AllGatherPipeline.async_bucket_gather` → `DataParallelBuffer.fetch_bucket`,
    # Megatron-LM febd25e3fb), so one more gathered layer adds 41088·2 bytes, not the other shards' (41088 − 10272)·2.
    run = make_run(DENSE, parallel={"dp": 4, "fsdp": True})
    memory, layer = model(run), body(run)
    args = (layer, LayerType.NOT_REC_LAYER, None)
    two, one = memory.working_extra_bytes(*args, 2, True), memory.working_extra_bytes(*args, 1, True)
    assert two - one == 41088 * 2
    zero1 = make_run(DENSE, parallel={"dp": 4, "zero": 1})
    other = model(zero1)
    assert other.working_extra_bytes(body(zero1), LayerType.NOT_REC_LAYER, None, 2, True) == (
        other.working_extra_bytes(body(zero1), LayerType.NOT_REC_LAYER, None, 1, True)
    )
    assert P == 41088
