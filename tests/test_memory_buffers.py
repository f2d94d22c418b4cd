"""Communication buffers at one and at k micro-batches in flight, the gather switch, `_dynamic_mem`'s split.

These are SAPP's buffer conventions (hyper-parallel's MemEst), which `framework: mindformers` keeps (each layer's
workspaces in its own "once" part, the gathered inputs kept); Megatron-Core's and torchtitan's
are in test_frameworks.py.
"""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, body, layers, make_run, model

from ppb_core.memory import MemoryModel
from ppb_core.model.switches import KEEP_ALL, LayerType

NOT, SEL, FULL = LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER

# DENSE at tp 2 with SP, dp 2, ZeRO-2, s 64:
# - each of the 2 gathered inputs (attention, MLP) adds (t−1)/t of 64·64·2: 4096, kept per micro-batch;
# - the gradient bucket: the layer's 20608 parameters per TP rank (6144 + 2048 + 128 + 12288) · 4 bytes.
KEPT, BUCKET = 2 * 4096, 20608 * 4


def _run(**parallel):
    return make_run(
        DENSE,
        parallel={"tp": 2, "sequence_parallel": True, "dp": 2, "zero": 2, **parallel},
        training={"seq_length": 64, "micro_batches": 8},
        framework="mindformers",
    )


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_layered_buffers_grow_per_micro_batch(k):
    run = _run()
    memory = model(run)
    assert memory.buffers(body(run), NOT).at(k) == BUCKET + k * KEPT
    activation, buffers = memory.dynamic_bytes(body(run), NOT, None, k)
    assert activation == k * memory.activation_bytes(body(run), NOT)
    assert buffers == BUCKET + k * KEPT


def test_gather_switch_and_full_recompute_keep_only_the_bucket():
    run = _run()
    memory = model(run)
    for state, switches in ((SEL, dict(KEEP_ALL, gather=0)), (FULL, None)):
        assert memory.buffers(body(run), state, switches).at(1) == BUCKET
        assert memory.buffers(body(run), state, switches).at(5) == BUCKET
    # other switches leave the buffers alone
    assert memory.buffers(body(run), SEL, dict(KEEP_ALL, softmax=0, ffAct=0)).at(3) == BUCKET + 3 * KEPT


def test_split_is_exact_at_one_and_many():
    # pp 2, m 8: many = max(2, min(2, 8)) = 2; the split is the same at any many, the buffers being
    # linear: per micro-batch (at(many) − at(1))/(many − 1) = KEPT, once BUCKET
    run = _run(pp=2)
    memory = model(run)
    assert memory.many == 2
    one, per_mb, once = memory.buffer_split(body(run), NOT)
    assert (one, per_mb, once) == (BUCKET + KEPT, KEPT, BUCKET)
    assert memory.buffers(body(run), NOT).split(4) == (BUCKET + KEPT, KEPT, BUCKET)


def test_zero_one_reduces_in_place():
    run = _run(zero=1)
    assert model(run).buffers(body(run), NOT).at(3) == 3 * KEPT


def test_reference_rule_max_of_groups_and_its_excess():
    # MemEst's evaluators/comm.py: max(dp, tp, cp) + ep. tp at k is k·8192 against the bucket 82432: the bucket wins
    # up to k = 10. At many = 16: at(16) = 131072; per_mb = (131072 − 82432)/15; the linear split
    # over-charges at k = 4 by one + 3·per_mb − at(4) = 3·per_mb.
    run = _run()
    memory = MemoryModel(run, buffer_rule="reference")
    buffers = memory.buffers(body(run), NOT)
    assert [buffers.at(k) for k in (1, 4, 10, 11, 16)] == [BUCKET, BUCKET, BUCKET, 11 * KEPT, 16 * KEPT]
    one, per_mb, once = buffers.split(16)
    assert per_mb == (16 * KEPT - BUCKET) / 15
    assert once == BUCKET - per_mb
    assert one + 3 * per_mb - buffers.at(4) == pytest.approx(3 * (16 * KEPT - BUCKET) / 15)


def test_context_parallel_ring_and_ulysses_buffers():
    # cp 2, one kv head of 16, tokens 32: a chunk of keys and values is 32·(2·16)·2 = 2048 bytes.
    spec = {**DENSE, "num_key_value_heads": 1}
    ring = make_run(spec, parallel={"cp": 2}, training={"seq_length": 64}, framework="mindformers")
    buffers = model(ring).buffers(body(ring), NOT)
    assert buffers.kept_bytes("cp") == 2048  # the cp − 1 chunks the ring brought in
    assert buffers.transient_bytes("cp") == 4096  # its double buffer
    assert buffers.at(3) == 4096 + 3 * 2048
    assert model(ring).buffers(body(ring), SEL, dict(KEEP_ALL, gather=0)).at(3) == 4096
    # Ulysses splits key/value heads by cp too (MindFormers' LLamaAttention: n_kv_head a multiple of
    # model_parallel·ulysses_cp_num), so two kv heads: keys and values of 32 tokens are 32·(2·2·16)·2 = 4096
    ulysses = make_run(
        {**DENSE, "num_key_value_heads": 2},
        parallel={"cp": 2, "cp_variant": "ulysses"},
        training={"seq_length": 64},
        framework="mindformers",
    )
    buffers = model(ulysses).buffers(body(ulysses), NOT)
    # the all-to-all sends queries (32·64·2) and keys and values (4096) once; nothing is kept
    assert (buffers.kept_bytes(), buffers.transient_bytes()) == (0, 4096 + 4096)


def test_tail_keeps_its_gathered_input_and_head_keeps_nothing():
    # SP at tp 2: the output head's input gathered, 64·64·2/2 = 4096 per micro-batch; never recomputed
    run = make_run(
        DENSE, parallel={"tp": 2, "sequence_parallel": True}, training={"seq_length": 64}, framework="mindformers"
    )
    memory, found = model(run), layers(run)
    assert memory.buffers(found["TAIL"], LayerType.OUTPUT_LAYER).at(3) == 3 * 4096
    assert memory.buffers(found["HEAD"], LayerType.EMBEDDING_LAYER).at(3) == 0


def test_no_gathered_copies_without_sequence_parallelism():
    run = make_run(DENSE, parallel={"tp": 2}, training={"seq_length": 64}, framework="mindformers")
    assert model(run).buffers(body(run), NOT).at(4) == 0
