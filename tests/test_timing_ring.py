"""Ring attention step by step (`ppb_core.timing.ring`), against values derived by hand from the
frameworks' code: PyTorch's `_templated_ring_attention(_backward)` (torch 2.13,
torch/distributed/tensor/experimental/_context_parallel/_attention.py) and TransformerEngine's
`AttnFuncWithCPAndKVP2P` (d0067d0d, attention/dot_product_attention/context_parallel.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from small_models import LLAMA_8B_LAYER

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.kinds import body_kind
from ppb_core.model.walk import walk
from ppb_core.timing.comm import collective_seconds
from ppb_core.timing.flops import Collective, OpGeometry, layer_ops
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.launches import op_launches
from ppb_core.timing.pricer import TimeModel, torchtitan_overlap
from ppb_core.timing.ring import (
    exposed_exchanges_s,
    first_rank_steps,
    last_rank_steps,
    merge_bytes,
    ring_attention_s,
)


def _run(
    framework: str, cp: int, s: int = 1024, repeat_kv: bool = True, compiled: bool = False, overlap: dict | None = None
):
    timing = {"repeat_kv": repeat_kv, "torch_compile": compiled} if framework == "torchtitan" else {}
    timing |= {"overlap": overlap} if overlap else {}
    return parse_run_config(
        {
            "name": "x",
            "framework": framework,
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"cp": cp, "dp": 8 // cp},
            "training": {"seq_length": s, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": "h100-80gb"},
            "timing": timing,
        }
    )


def _ops(framework: str, cp: int, s: int = 1024, repeat_kv: bool = True, compiled: bool = False) -> dict:
    """One layer's ops; torchtitan's with *repeat_kv* as before ff0829c10 (its published CP runs)."""
    run = _run(framework, cp, s, repeat_kv, compiled)
    ops = layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
    return {op.name: op for op in ops}


def test_the_ring_s_steps_cover_the_causal_triangle_s_share():
    # cp 4, s = 4096, s_l = 1024: step 0's triangle 1024·1025/2 = 524,800 pairs, three rectangles of
    # 1024 × 512 = 524,288 each: 2,097,664 = s(s+1)/(2cp) = 4096·4097/8.
    steps = last_rank_steps(4, 1024)
    assert [(st.count, st.queries, st.mean_keys, st.causal) for st in steps] == [
        (1, 1024, 512.5, 1.0),
        (3, 1024, 512, 0.0),
    ]
    assert sum(st.pairs() for st in steps) == 4096 * 4097 / 8
    # the first rank: the same triangle, then three of its second chunk's 512 queries × 1024 keys
    first = first_rank_steps(4, 1024)
    assert [(st.count, st.queries, st.mean_keys, st.causal) for st in first] == [
        (1, 1024, 512.5, 1.0),
        (3, 512, 1024, 0.0),
    ]
    assert sum(st.pairs() for st in first) == 4096 * 4097 / 8


def test_each_ring_step_runs_at_its_own_shape_s_rate():
    # A device of 1e15 FLOP/s, flash forward 0.5 of it, 132 SMs, FlashAttention-2's curves (the default
    # kernel); 32 (sequence, head) pairs, cp 2, s_l = 4096, head 128: 32 query blocks × 32 = 1024 tiles,
    # waves 1024 / (8·132). Step 0: the 4096-token causal triangle (mean keys 2048.5), 319 TFLOPS/s of the
    # 16k no-mask 370 (FlashAttention-3's paper, Fig. 5d/5c); step 1: 2048 keys without the mask, 362.
    kernels = Kernels(1e15, 0.8, 132, 3e12, 0.5, 0.4)
    waves = 1024 / 1056
    rate0 = 1e15 * 0.5 * 319 / 370 * waves
    rate1 = 1e15 * 0.5 * 362 / 370 * waves
    pairs0, pairs1 = 32 * 4096 * 2048.5, 32 * 4096 * 2048
    flops = 4 * 128 * (pairs0 + pairs1)  # QKᵀ and PV, 2·d each a pair
    expected = 4 * 128 * pairs0 / rate0 + 4 * 128 * pairs1 / rate1
    attention = (32.0, 4096.0, (pairs0 + pairs1) / (32 * 4096), 128.0, 1.0)
    assert ring_attention_s(kernels, flops, 0.0, False, attention, 2) == pytest.approx(expected, rel=1e-12)


def test_a_later_step_costs_the_slower_rank_s_shape():
    # The same device and curves; 5 (sequence, head) pairs, cp 2, s_l = 8192, head 128. Step 0 (every
    # rank): the 8192-token triangle (mean keys 4096.5), the causal curve at 8k, 333 of the 16k no-mask 370;
    # 64 query blocks × 5 = 320 tiles, waves 320 / (3·132). Step 1: the last rank's 8192 queries × 4096 keys
    # (no mask at 4k, 368; the same 320 tiles), the first rank's 4096 × 8192 (370 at 8k; 32 × 5 = 160
    # tiles, waves 160 / (2·132)): the first rank's call is the slower and the ring waits for it.
    kernels = Kernels(1e15, 0.8, 132, 3e12, 0.5, 0.4)
    rate0 = 1e15 * 0.5 * 333 / 370 * 320 / 396
    last = 1e15 * 0.5 * 368 / 370 * 320 / 396
    first = 1e15 * 0.5 * 370 / 370 * 160 / 264
    assert first < last
    pairs0, pairs1 = 5 * 8192 * 4096.5, 5 * 8192 * 4096
    flops = 4 * 128 * (pairs0 + pairs1)
    expected = 4 * 128 * pairs0 / rate0 + 4 * 128 * pairs1 / first
    attention = (5.0, 8192.0, (pairs0 + pairs1) / (5 * 8192), 128.0, 1.0)
    assert ring_attention_s(kernels, flops, 0.0, False, attention, 2) == pytest.approx(expected, rel=1e-12)


def test_an_exchange_longer_than_its_step_shows_the_difference():
    # 4 ms in 2 exchanges of 2 ms beside steps of 1.5 ms: 0.5 ms each shows, 1 ms; with a tenth of the
    # SMs taken by the collective the hidden 1.5 ms cost 0.15 ms more each: 2·(0.5 + 0.15) = 1.3 ms.
    assert exposed_exchanges_s(4e-3, 2, 1.5e-3, 1.0, 0.0) == pytest.approx(1e-3)
    assert exposed_exchanges_s(4e-3, 2, 1.5e-3, 1.0, 0.1) == pytest.approx(1.3e-3)
    assert exposed_exchanges_s(2e-3, 2, 1.5e-3, 1.0, 0.0) == 0.0


def test_torchtitan_s_merges_and_gradient_sums_per_element():
    # cp 2, the last rank (1), one element each of output (= queries) and of K, V together.
    # Forward: step 0's `out.to(float32)` 6; step 1 (i ≤ rank, whole rows) its cast 6, `out - block_out`
    # 12, the sigmoid's product 8, the subtraction 12; `results()` cast back 6: 50 an output element;
    # K, V `.contiguous()` 4 and step 0's `torch.cat` to send them 4: 8 a K/V element.
    # Backward: fp32 zeros 4 each; dQ `+=` 10 a step (2 steps) and cast back 6: 30; dK, dV: step 0's
    # `+=` 10, step 1's `_partial_update` (half of 10, then `torch.cat` 8) 13, a `torch.cat` to send a
    # step 8·2, the cast back 6, `.contiguous()` 4, step 0's K, V cat 4: 4 + 10 + 13 + 16 + 6 + 4 + 4 = 57.
    assert merge_bytes("torchtitan", 2, 1.0, 0.0, 0.0) == (50.0, 0.0)
    assert merge_bytes("torchtitan", 2, 0.0, 1.0, 0.0) == (0.0, 30.0)
    assert merge_bytes("torchtitan", 2, 0.0, 0.0, 1.0) == (8.0, 57.0)


def test_torchtitan_s_compiled_merges_per_element():
    # The ring traced into the block's Inductor graph, last rank (every later step whole rows).
    # cp 2: step 1's merge reads step 0's bf16 output (its fp32 cast fused in) 2 and its own 2, writes
    # the bf16 result (`results()`'s cast fused in) 2: 6; K, V: one send-buffer cat, read 2 write 2: 4.
    # Backward: dQ's chain (zeros, two bf16 adds, the cast back) one kernel: read 2·2, write 2 = 6;
    # dK, dV: step 0 into the fp32 send buffer 2 + 4 = 6, step 1 half (4 + 2 + 4) half (4 + 4) = 9,
    # the last received cast back 4 + 2 = 6: 21 (the K, V cat is the forward's, merged by CSE).
    assert merge_bytes("torchtitan", 2, 1.0, 0.0, 0.0, compiled=True) == (6.0, 0.0)
    assert merge_bytes("torchtitan", 2, 0.0, 1.0, 0.0, compiled=True) == (0.0, 6.0)
    assert merge_bytes("torchtitan", 2, 0.0, 0.0, 1.0, compiled=True) == (4.0, 21.0)
    # cp 4: forward steps 1, 2, 3: (2 + 2 + 4) + (4 + 2 + 4) + (4 + 2 + 2) = 26; dQ 4·2 + 2 = 10;
    # dK, dV 6 + 3·9 + 6 = 39; K, V 4 forward. All-to-all rotation: three live send cats, 3·4 = 12.
    assert merge_bytes("torchtitan", 4, 1.0, 1.0, 1.0, compiled=True) == (30.0, 49.0)
    assert merge_bytes("torchtitan", 4, 0.0, 0.0, 1.0, compiled=True, sends=3) == (12.0, 39.0)
    # Megatron's count does not depend on it
    assert merge_bytes("megatron", 4, 1.0, 1.0, 1.0, compiled=True) == merge_bytes("megatron", 4, 1.0, 1.0, 1.0)
    # the op: s 1024, cp 2 → 512 tokens, 32 heads of 128: 2,097,152 output (= query) elements; K, V
    # widened to 32 heads: 4,194,304. Forward 6·2,097,152 + 4·4,194,304; backward 6·2,097,152 + 21·4,194,304.
    merge = _ops("torchtitan", 2, compiled=True)["cp_merge"]
    assert (merge.bytes, merge.backward_bytes) == (6 * 2_097_152 + 4 * 4_194_304, 6 * 2_097_152 + 21 * 4_194_304)
    # compiled, the backward's all-gather of K, V is the forward's (AOTAutograd's CSE of the joint
    # graph merges the two identical all-gathers): none in the backward; eager gathers again
    assert _ops("torchtitan", 2, compiled=True)["cp_ring"].backward_comm is None
    assert _ops("torchtitan", 2)["cp_ring"].backward_comm.payload_bytes == 16_777_216


def test_compiled_torchtitan_waits_for_each_ring_exchange():
    # `_maybe_wrap_tensor` waits right behind a traced collective: nothing of the ring's exchanges is
    # hidden under torch.compile (cp_ring 0) unless the run states a share; eager torchtitan and
    # Megatron keep the default 1.0.
    assert torchtitan_overlap(_run("torchtitan", 2, compiled=True)).cp_ring == 0.0
    assert torchtitan_overlap(_run("torchtitan", 2)).cp_ring == 1.0
    assert torchtitan_overlap(_run("megatron", 2)).cp_ring == 1.0
    stated = _run("torchtitan", 2, compiled=True, overlap={"cp_ring": 0.5})
    assert torchtitan_overlap(stated).cp_ring == 0.5  # a share the run states is kept


def test_megatron_s_corrections_per_element():
    # TE d0067d0d `AttnFuncWithCPAndKVP2P`, cp 4, last rank, 16-bit: the output stays 16-bit
    # (`flash_attn_fwd_out_correction_init` returns `.to(out_init_step.dtype)`: read 2, write 2 = 4;
    # three `flash_attn_fwd_out_correction` `out.add_`: read 2 + 2, write 2 = 6 each; the closing
    # `.to(fwd_nominal_dtype)` a no-op): 4 + 3·6 = 22 an output element; K, V `torch.cat` once 4.
    # Backward: dQ into the 16-bit `dq_buffer` copied at step 0 (4), added at steps 1..3 (6 each):
    # 22; dK, dV: the saved chunk copied into the send buffer 4, step 0 copies half a chunk (4/2 = 2),
    # steps 1 and 2 add half a chunk (6/2 = 3 each), step 3 (the diagonal) adds the whole one 6:
    # 4 + 2 + 3 + 3 + 6 = 18. At cp 2: forward 4 + 6 = 10; dQ 4 + 6 = 10; dK, dV 4 + 2 + 6 = 12.
    assert merge_bytes("megatron", 4, 1.0, 0.0, 0.0) == (22.0, 0.0)
    assert merge_bytes("megatron", 4, 0.0, 1.0, 0.0) == (0.0, 22.0)
    assert merge_bytes("megatron", 4, 0.0, 0.0, 1.0) == (4.0, 18.0)
    assert merge_bytes("megatron", 2, 1.0, 1.0, 1.0) == (14.0, 22.0)


def test_what_each_framework_s_ring_sends():
    # s 1024, cp 2: 512 local tokens. torchtitan repeats K, V to the 32 query heads before SDPA:
    # 512 · 32 · 2 · 128 = 4,194,304 elements; its all-gather's gathered tensor twice that in bf16,
    # 16,777,216 bytes, once before step 1 (one exchange), again in the backward; the fp32 dK, dV
    # sums go to the next rank after each step (4 B an element, 16,777,216), the last one exposed.
    titan = _ops("torchtitan", 2)
    ring, grads, last = titan["cp_ring"], titan["cp_ring_grads"], titan["cp_ring_grads_last"]
    assert (ring.forward_comm.kind, ring.forward_comm.payload_bytes, ring.forward_comm.exchanges) == (
        "all_gather",
        16_777_216,
        1,
    )
    assert ring.backward_comm.payload_bytes == 16_777_216
    assert (grads.backward_comm.payload_bytes, grads.backward_comm.exchanges) == (16_777_216, 1)
    assert (last.backward_comm.payload_bytes, last.backward_comm.partner) == (16_777_216, None)
    assert titan["flash_scores"].ring == titan["flash_context"].ring == 2
    # v0.2.2 (enable_gqa): PyTorch's ring (torch 2.13 _context_parallel/_attention.py) gathers K and V
    # as SDPA gets them, at the 8 heads: a quarter of the above, 4,194,304 bytes
    gqa = _ops("torchtitan", 2, repeat_kv=False)
    assert gqa["cp_ring"].forward_comm.payload_bytes == 4_194_304
    assert gqa["cp_ring_grads_last"].backward_comm.payload_bytes == 4_194_304
    # Megatron sends the 8 KV heads: 512 · 8 · 2 · 128 · 2 B = 2,097,152 a step (one step at cp 2);
    # the backward K, V at step 0 and dK, dV at step 1: twice that, in 2 exchanges.
    mega = _ops("megatron", 2)["cp_ring"]
    assert (mega.forward_comm.kind, mega.forward_comm.payload_bytes, mega.forward_comm.exchanges) == (
        "p2p",
        2_097_152,
        1,
    )
    assert (mega.backward_comm.payload_bytes, mega.backward_comm.exchanges) == (4_194_304, 2)


def test_torchtitan_s_all_to_all_rotation_shifts_a_chunk_a_step():
    # timing.cp_rotate_method alltoall (PyTorch's _AllToAllRotater): cp 4, s 2048 → 512 local tokens,
    # K, V widened to 32 heads: 512·32·256·2 B = 8,388,608 a chunk, shifted by steps 0..2: 3 exchanges
    # of it, 25,165,824 bytes, each beside one step; eager shifts them again in the backward
    run = parse_run_config(
        {
            "name": "x",
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"cp": 4, "dp": 2},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": "h100-80gb"},
            "timing": {"repeat_kv": True, "cp_rotate_method": "alltoall"},
        }
    )
    ops = {
        op.name: op for op in layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
    }
    ring = ops["cp_ring"]
    assert (ring.forward_comm.kind, ring.forward_comm.payload_bytes, ring.forward_comm.exchanges) == (
        "p2p",
        25_165_824,
        3,
    )
    assert ring.backward_comm.payload_bytes == 25_165_824
    # refused under Megatron, whose ring is its own
    with pytest.raises(InputError, match=r"timing\.cp_rotate_method"):
        parse_run_config({**run.model_dump(exclude_unset=True), "framework": "megatron"})


def test_torchtitan_s_all_gather_hides_behind_step_0_only():
    # TP 8 fills the node, so the CP 2 group leaves it: the all-gather of the widened K, V
    # (1024 local tokens · 4 heads · 256 · 2 B · 2 ranks) runs over one NIC beside step 0 alone, the
    # flash ops' forward over cp = 2 calls; what is longer shows, the hidden part costs 16 of the
    # H100's 132 SMs (contention 16/132).
    run = parse_run_config(
        {
            "name": "x",
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"cp": 2, "tp": 8, "dp": 1, "sequence_parallel": True},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": "h100-80gb"},
            "timing": {"repeat_kv": True},  # K, V widened, as before ff0829c10
        }
    )
    model = TimeModel(run)
    layer = next(layer for layer in walk(run) if layer.index == 0)
    prices = model.op_prices(layer)
    step_ms = (prices["flash_scores"].forward_ms + prices["flash_context"].forward_ms) / 2
    gather_ms = collective_seconds(Collective("all_gather", "cp", 2 * 1024 * 4 * 256 * 2, "cp_ring"), model.links) * 1e3
    hidden = min(gather_ms, step_ms)
    assert gather_ms > step_ms  # the case this test is about
    assert prices["cp_ring"].forward_ms == pytest.approx(gather_ms - hidden + 16 / 132 * hidden)


def test_megatron_s_ring_launches_a_kernel_set_a_step():
    # cp 2 under TE: two flash calls a pass, each one forward and three backward launches (launches.FLASH;
    # the second call's on the scores op); TE d0067d0d's forward: the K, V `torch.cat`, the statistics'
    # `torch.clone`, step 0's output correction, one statistics and one output correction for step 1:
    # 5 = 2·cp + 1 (the final `.to()` a no-op); backward: the saved chunk's `copy_`, then dQ, dK, dV
    # copied or added a step: 7 = 3·cp + 1;
    # batch_isend_irecv once forward (step 0), twice backward (K, V at step 0; dK, dV at step 1).
    ops = _ops("megatron", 2)
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    assert op_launches(ops["flash_scores"], **kw) == (2.0, 6.0)
    assert op_launches(ops["flash_context"], **kw) == (1.0, 3.0)
    assert op_launches(ops["cp_merge"], **kw) == (5.0, 7.0)
    assert op_launches(ops["cp_ring"], **kw) == (1.0, 2.0)


def test_megatron_s_ring_exchanges_batched_only_at_cp_2_before_blackwell():
    # TE d0067d0d AttnFuncWithCPAndKVP2P: batch_p2p_comm = (compute capability < 10.0 and cp == 2);
    # otherwise flash_attn_p2p_communicate calls torch.distributed.isend and irecv apart, two NCCL
    # launches an exchange. cp 2 on a B200 (10.0): forward 1 exchange · 2 = 2, backward 2 · 2 = 4;
    # cp 4 on an H100 (9.0): forward 3 · 2 = 6, backward 4 · 2 = 8; cp 2 on an H100 batched: (1, 2).
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}

    def ring(cp: int, device: str):
        run = parse_run_config(
            {
                "name": "x",
                "framework": "megatron",
                "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
                "parallel": {"cp": cp, "dp": 8 // cp},
                "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
                "device": {"name": device},
            }
        )
        ops = layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
        return next(op for op in ops if op.name.endswith("cp_ring"))

    assert op_launches(ring(2, "b200"), **kw) == (2.0, 4.0)
    assert op_launches(ring(4, "h100-80gb"), **kw) == (6.0, 8.0)
    assert op_launches(ring(2, "h100-80gb"), **kw) == (1.0, 2.0)


@pytest.mark.parametrize(
    ("release", "device", "cp", "expected"),
    [
        # TE release_v1.14 and v2.2 attention.py: batch_p2p_comm = NVTE_BATCH_MHA_P2P_COMM or (cp_size == 2),
        # whatever the GPU: cp 2 on a B200 one batched call an exchange, forward 1, backward 2
        ("1.14", "b200", 2, (1.0, 2.0)),
        ("2025-03-18", "b200", 2, (1.0, 2.0)),  # NeMo 25.04's TE (bench/_nemo2.py)
        ("v2.2", "b200", 4, (6.0, 8.0)),  # cp 4 never batched: 3 exchanges · 2 forward, 4 · 2 backward
        # v2.3 (ba5dc5dde): batch_p2p_comm = NVTE_BATCH_MHA_P2P_COMM alone: cp 2 on an H100 unbatched, 1 · 2 and 2 · 2
        ("v2.3", "h100-80gb", 2, (2.0, 4.0)),
        # v2.4 on (0828aa860): batched again below compute capability 10.0 only
        ("v2.4", "h100-80gb", 2, (1.0, 2.0)),
        ("2.7.0", "b200", 2, (2.0, 4.0)),
    ],
)
def test_megatron_s_ring_exchanges_batched_as_the_te_release_decides(release, device, cp, expected):
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    run = parse_run_config(
        {
            "name": "x",
            "framework": "megatron",
            "framework_release": {"transformer_engine": release},
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"cp": cp, "dp": 8 // cp},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": device},
        }
    )
    ops = layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
    ring = next(op for op in ops if op.name.endswith("cp_ring"))
    assert op_launches(ring, **kw) == expected


def test_megatron_s_a2a_copies_each_tensor_twice_around_its_all_to_alls():
    # --cp-comm-type a2a under TE (d0067d0d flash_attn_a2a_communicate, sbhd): Q, K, V and O copied twice
    # each forward (a contiguous copy and an index_select reorder), dO, dQ, dK, dV backward. cp 2, s 1024:
    # 512 local tokens; Q 512·32·128 = 2,097,152 elements, K and V 512·2·8·128 = 1,048,576, O as Q;
    # 2 copies · (2 + 2) B · 5,242,880 = 41,943,040 bytes each way; 2 kernels a tensor, 8 each way.
    run = parse_run_config(
        {
            "name": "x",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"cp": 2, "dp": 4, "cp_variant": "ulysses"},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": "h100-80gb"},
        }
    )
    ops = {
        op.name.rsplit(".", 1)[-1]: op
        for op in layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
    }
    reorder = ops["cp_a2a_reorder"]
    assert (reorder.bytes, reorder.backward_bytes) == (41_943_040, 41_943_040)
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    assert op_launches(reorder, **kw) == (8.0, 8.0)
    # the ring (p2p) has none
    assert not any(name.endswith("cp_a2a_reorder") for name in _ops("megatron", 2))


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["megatron", "torchtitan"]),
    st.sampled_from(["h100-80gb", "b200"]),
    st.sampled_from([2048, 4096, 8192]),
    st.sampled_from([(2, 4), (4, 8), (2, 8)]),
)
def test_more_cp_never_lowers_a_local_token_s_ring_traffic_or_launches(framework, device, s, pair):
    # each rank's ring exchanges carry (cp − 1) chunks of its n = s/cp local tokens' K, V (and their
    # gradients) a pass: per local token (cp − 1)·width, growing with cp; launches grow with the steps
    def ring(cp: int) -> tuple[float, tuple[float, ...]]:
        run = parse_run_config(
            {
                "name": "x",
                "framework": framework,
                "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
                "parallel": {"cp": cp, "dp": 8 // cp},
                "training": {"seq_length": s, "micro_batch_size": 1, "flash_attention": True},
                "device": {"name": device},
            }
        )
        geo = OpGeometry.from_run(run)
        ops = {op.name.rsplit(".", 1)[-1]: op for op in layer_ops(body_kind(run.spec("llm"), 0, 0.0), geo)}
        kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
        sent = sum(
            c.payload_bytes
            for name in ("cp_ring", "cp_ring_grads", "cp_ring_grads_last")
            if name in ops
            for c in (ops[name].forward_comm, ops[name].backward_comm)
            if c is not None
        )
        launches = tuple(map(sum, zip(*(op_launches(op, **kw) for op in ops.values()), strict=True)))
        return sent / geo.tokens, launches

    fewer, more = ring(pair[0]), ring(pair[1])
    assert more[0] >= fewer[0]
    assert more[1][0] >= fewer[1][0] and more[1][1] >= fewer[1][1]
