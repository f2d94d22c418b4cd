"""Ring attention's memory as Megatron-Core (TransformerEngine) and torchtitan (PyTorch) hold it.

DENSE with one key/value head (h 64, 4 query heads of 16), micro-batch 1, s = 32·cp: every rank holds
T = 32 tokens. Q = O = 32·4·16·2 = 4096 bytes (queries, output), C = 32·(2·1·16)·2 = 2048 (keys and values).
"""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, body, make_run, model

from ppb_core.memory.frameworks.ring import ring_bytes, te_ring_terms, torch_ring_terms
from ppb_core.model.switches import KEEP_ALL, LayerType

NOT, SEL, FULL = LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER
SPEC = {**DENSE, "num_key_value_heads": 1}
Q = O = 4096
C = 2048


def _run(framework: str, cp: int):
    return make_run(SPEC, parallel={"cp": cp}, training={"seq_length": 32 * cp}, framework=framework)


def test_ring_bytes_by_hand():
    run = _run("megatron", 2)
    memory = model(run)
    assert ring_bytes(body(run).kind, memory.setup) == (Q, O, C)


@pytest.mark.parametrize(
    "cp, forward, backward",
    [
        # TE d0067d0d AttnFuncWithCPAndKVP2P: forward p2p_comm_buffers + out_per_step, cp·(C + O);
        # backward dq_buffer (Q) + two (2, C) buffers (4·C)
        (2, 2 * (C + O), Q + 4 * C),  # 12288, 12288
        (4, 4 * (C + O), Q + 4 * C),  # 24576, 12288
    ],
)
def test_megatron_ring_workspaces(cp, forward, backward):
    run = _run("megatron", cp)
    memory = model(run)
    terms = {t.name: t.bytes for t in te_ring_terms(body(run).kind, memory.setup)}
    assert terms == {"attention.ring_forward_steps": forward, "attention.ring_backward_buffers": backward}
    held = memory.state_memory(body(run), NOT)
    assert held.buffers.kept_bytes() == 0  # TE keeps the last chunk received in place of the local one
    assert (held.forward_transient_bytes, held.transient_bytes) == (forward, backward)


@pytest.mark.parametrize(
    "cp, forward, backward",
    [
        # torch 2.13 _templated_ring_attention: gathered K, V (cp·C) + the fp32 merge (9·O less the kept O);
        # backward: fp32 dQ (2·Q), gathered K, V (cp·C), the send cat (C), fp32 dK/dV exchange (8·C), half-chunk
        # step dK, dV (C/2): 2·2048 + 8·4096 = 36864 and 2·4096 + 10.5·2048 = 29696 at cp 2
        (2, 2 * C + 8 * O, 2 * Q + 10.5 * C),
        (4, 4 * C + 8 * O, 2 * Q + 12.5 * C),  # 40960, 33792
    ],
)
def test_torchtitan_ring_workspaces(cp, forward, backward):
    run = _run("torchtitan", cp)
    memory = model(run)
    terms = {t.name: t.bytes for t in torch_ring_terms(body(run).kind, memory.setup)}
    assert terms == {"attention.ring_forward_merge": forward, "attention.ring_backward_sums": backward}
    held = memory.state_memory(body(run), NOT)
    assert held.buffers.kept_bytes() == 0  # SAPP's 1·C received chunk a micro-batch is not kept
    assert (held.forward_transient_bytes, held.transient_bytes) == (forward, backward)


# torchtitan before ff0829c10 (9dec370 models/llama/model.py `Attention.forward`): `repeat_kv` copies K and V out
# to every query head before SDPA, so the ring gathers, concatenates and exchanges the widened ones,
# C_w = 32·(2·4·16)·2 = 8192 = 4·C; the non-CP dK, dV the ring's replace stay the layer's own C.
C_WIDE = 8192


@pytest.mark.parametrize(
    "cp, forward, backward",
    [
        # forward cp·C_w + 8·O = 16384 + 32768; backward 2·Q + (cp + 9.5)·C_w − C = 8192 + 94208 − 2048
        (2, 49152, 100352),
        (4, 65536, 116736),  # 32768 + 32768; 8192 + 13.5·8192 − 2048
    ],
)
def test_torchtitan_ring_workspaces_with_repeat_kv(cp, forward, backward):
    run = make_run(
        SPEC, parallel={"cp": cp}, training={"seq_length": 32 * cp}, framework="torchtitan", timing={"repeat_kv": True}
    )
    memory = model(run)
    assert memory.setup.repeat_kv
    assert ring_bytes(body(run).kind, memory.setup, widened=True) == (Q, O, C_WIDE)
    terms = {t.name: t.bytes for t in torch_ring_terms(body(run).kind, memory.setup)}
    assert terms == {"attention.ring_forward_merge": forward, "attention.ring_backward_sums": backward}
    assert not model(_run("torchtitan", cp)).setup.repeat_kv  # v0.2.2's enable_gqa: the default


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_ring_workspaces_stay_under_recompute(framework):
    # a workspace of the pass: no switch drops it, and full recompute runs the forward again
    run = _run(framework, 2)
    memory = model(run)

    def both(state, switches=None):
        held = memory.state_memory(body(run), state, switches)
        return held.forward_transient_bytes, held.transient_bytes

    assert both(SEL, dict(KEEP_ALL, gather=0)) == both(FULL) == both(NOT)


def test_forward_workspace_is_charged_without_the_backward_gradient():
    # torchtitan cp 4 (forward 40960, backward 33792) with an MLP of 16 (fused gate/up 32 wide): the largest
    # gradient is a hidden-wide one (q, the attention output, the layer's input), 32·64·2 = 4096. With cp > 1
    # torchtitan always shards with FSDP2 (v0.2.2 parallel_dims.py fsdp_enabled = dp_shard or cp enabled), so
    # the backward holds FSDP2's parameters too, the same on both sides. One layer's parameters P: q, o 2·64·64
    # = 8192, k, v 2·64·16 = 2048 (one key/value head of 16), two norms 2·64 = 128, gate, up, down 3·64·16 =
    # 3072: P = 13440. FSDP2 at the end of the unit's gradients (the layer's neighbours alike, nothing
    # recomputed): itself gathered in bf16 2·P, its bf16 gradients 2·P, the prefetched unit before it 2·P, the
    # fp32 reduce-scatter input of the unit after it 4·P (MixedPrecisionPolicy reduce_dtype float32) = 10·P =
    # 134400. The backward 134400 + 4096 + 33792 = 172288, the forward 134400 + 40960 = 175360: the forward's
    # workspace without the gradient is the larger (with it, 179456).
    run = make_run(
        {**SPEC, "intermediate_size": 16},
        parallel={"cp": 4, "fsdp": True},
        training={"seq_length": 128},
        framework="torchtitan",
    )
    memory = model(run)
    assert memory.parameters(body(run)).total == 13440
    assert memory.largest_gradient_bytes(body(run)) == 4096
    parameters = 10 * 13440
    assert (
        memory.working_extra_bytes(body(run), NOT, None, 2, True)
        == max(parameters + 4096 + 33792, parameters + 40960)
        == 175360
    )
