"""Megatron's --cp-comm-type all_gather and a2a+p2p as TransformerEngine runs them (d0067d0d
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py: `AttnFuncWithCPAndKVAllGather`,
`AttnFuncWithCPAndKVP2P` with cp_group [a2a, p2p]); Megatron-LM d98e8a64 for the flags. Values by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from small_models import LLAMA_8B_LAYER
from test_memory_runs import DENSE, body, make_run, model

from ppb_core.balance.megatron_import import import_megatron
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.ring import te_all_gather_terms, te_ring_terms
from ppb_core.model.kinds import body_kind
from ppb_core.model.switches import LayerType
from ppb_core.timing.comm import Group, Links
from ppb_core.timing.flops import ALL_GATHER, ALL_TO_ALL, P2P, REDUCE_SCATTER, OpGeometry, layer_ops
from ppb_core.timing.launches import op_launches
from ppb_core.timing.ring import all_gather_steps

KW = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}


def _run(parallel: dict, s: int = 1024, device: str = "h100-80gb", framework: str = "megatron"):
    return parse_run_config(
        {
            "name": "x",
            "framework": framework,
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": parallel,
            "training": {"seq_length": s, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": device},
        }
    )


def _ops(run) -> dict:
    ops = layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
    return {op.name.rsplit(".", 1)[-1]: op for op in ops}


def test_all_gather_s_two_calls_cover_the_causal_triangle_s_share():
    # cp 2, s = 16: c = 4 queries a call. Rank 0's chunk 0 against keys 0..3 (bottom-right causal: mean
    # (4+1)/2 = 2.5 keys), chunk 3 against all 16 (16 − (4−1)/2 = 14.5): 4·2.5 + 4·14.5 = 68 = 16·17/(2·2).
    steps = all_gather_steps(2, 8)
    assert [(x.count, x.queries, x.mean_keys, x.causal) for x in steps] == [(1, 4, 2.5, 1.0), (1, 4, 14.5, 1.0)]
    assert sum(x.pairs() for x in steps) == 16 * 17 / 4


def test_all_gather_s_collectives_and_copies_by_hand():
    # cp 2, s 1024, LLaMA-8B's attention (32 heads, 8 KV heads of 128), bf16: n = 512 local tokens.
    # Gathered K, V: 2·512·(2·8·128)·2 B = 4,194,304 (gather_along_first_dim of k and of v: 2 calls), the
    # backward gathers again and reduce-scatters dK, dV at that size (2 calls). Q = O = 512·32·128·2 = 4,194,304.
    # Forward copies: 2 reorders of the gathered (2·4,194,304·... read + write: 2·G), Q halves (2·Q), output
    # halves (2·O), `out` zeros (O), and V's contiguous copy (Megatron's V a view of the fused QKV output; K
    # written by RoPE): 2·512·1024·2 = 2,097,152: 8,388,608 + 8,388,608 + 8,388,608 + 4,194,304 + 2,097,152
    # = 31,457,280.
    # Backward: K, V reorders (2·G), dK, dV zeros (G), Q, O, dO halves (2·(Q + 2·O)), dQ halves (2·Q),
    # the dK, dV sums over both calls' 5/4·1024 = 1280 keys (3·1280·2048·2 = 15,728,640), dK, dV reorders
    # (2·G): 8,388,608 + 4,194,304 + 25,165,824 + 8,388,608 + 15,728,640 + 8,388,608 = 70,254,592.
    ops = _ops(_run({"cp": 2, "dp": 4, "cp_variant": "all_gather"}))
    gather, scatter = ops["cp_allgather_kv"], ops["cp_reduce_scatter_dkv"]
    assert (gather.forward_comm.kind, gather.forward_comm.group, gather.forward_comm.payload_bytes) == (
        ALL_GATHER,
        "cp",
        4_194_304,
    )
    assert gather.forward_comm.calls == 2 and gather.forward_comm.partner is None  # exposed: not async
    assert gather.backward_comm.kind == ALL_GATHER and gather.backward_comm.payload_bytes == 4_194_304
    assert scatter.forward_comm is None
    assert (scatter.backward_comm.kind, scatter.backward_comm.payload_bytes) == (REDUCE_SCATTER, 4_194_304)
    copies = ops["cp_ag_copies"]
    assert (copies.bytes, copies.backward_bytes) == (31_457_280, 70_254_592)
    assert op_launches(copies, **KW) == (8.0, 18.0)
    scores = ops["flash_scores"]
    assert (scores.ring, scores.ring_steps) == (2, "all_gather")
    # two flash calls a pass whatever cp (the ring's are cp)
    four = _ops(_run({"cp": 4, "dp": 2, "cp_variant": "all_gather"}))
    ring = _ops(_run({"cp": 4, "dp": 2}))
    assert op_launches(four["flash_scores"], **KW) == tuple(x / 2 for x in op_launches(ring["flash_scores"], **KW))
    assert not any(name.startswith("cp_ring") for name in ops)


def test_hierarchical_runs_an_all_to_all_inside_then_the_ring_across():
    # cp 4 as [2, 2], s 1024, tp 1: n = 256 local tokens. All-to-all of Q, K, V over the first level:
    # 256·(32·128 + 2·8·128)·2 = 3,145,728 B; the ring over the second level with 512 tokens of 16 heads (4 KV):
    # a chunk 512·(2·4·128)·2 = 1,048,576 B, 1 exchange forward, 2 backward (K, V and dK, dV); the output's
    # all-to-all 256·32·128·2 = 2,097,152 B. Flash ops: ring of 2, 16 (sequence, head) pairs of 512 queries,
    # mean keys (1024+1)/2. On an A100 the ring of 2 batches its exchange (one launch): TE batch_p2p_comm at
    # cp_size 2 (the p2p group's) below sm100.
    ops = _ops(
        _run({"cp": 4, "dp": 2, "cp_variant": "hierarchical", "hierarchical_cp_sizes": [2, 2]}, device="a100-80gb")
    )
    qkv, out, ring = ops["cp_a2a_qkv"], ops["cp_a2a_out"], ops["cp_ring"]
    assert (qkv.forward_comm.kind, qkv.forward_comm.group, qkv.forward_comm.payload_bytes) == (
        ALL_TO_ALL,
        "cp_a2a",
        3_145_728,
    )
    assert (out.forward_comm.group, out.forward_comm.payload_bytes) == ("cp_a2a", 2_097_152)
    # flash_attn_a2a_communicate: one all_to_all_single a tensor, Q, K, V (dQ, dK, dV); the output (dO) one
    assert (qkv.forward_comm.calls, qkv.backward_comm.calls, out.forward_comm.calls) == (3, 3, 1)
    assert op_launches(qkv, **KW) == (3.0, 3.0)
    assert (ring.forward_comm.kind, ring.forward_comm.group) == (P2P, "cp_p2p")
    assert (ring.forward_comm.payload_bytes, ring.forward_comm.exchanges) == (1_048_576, 1)
    assert (ring.backward_comm.payload_bytes, ring.backward_comm.exchanges) == (2_097_152, 2)
    assert op_launches(ring, **KW) == (1.0, 2.0)
    scores = ops["flash_scores"]
    assert scores.ring == 2 and scores.attention[:3] == (16, 512, 512.5)
    # TE's copies around the all-to-alls as under a2a: 2 copies · 4 B · 256·(4096 + 2048 + 4096) = 20,971,520
    assert ops["cp_a2a_reorder"].bytes == 20_971_520


def test_hierarchical_groups_sit_as_megatron_lays_them_out():
    # parallel_state.py create_hierarchical_groups: level 0 consecutive CP ranks, level 1 strided; tp 2, cp 8
    # as [4, 2]: the all-to-all over 4 ranks spanning tp·4 = 8, the ring over 2 spanning tp·cp = 16
    run = _run({"cp": 8, "tp": 2, "dp": 1, "cp_variant": "hierarchical", "hierarchical_cp_sizes": [4, 2]}, s=4096)
    groups = Links.from_run(run).groups
    assert (groups["cp_a2a"], groups["cp_p2p"]) == (Group(4, 8), Group(2, 16))


@pytest.mark.parametrize(
    "sizes, variant",
    [([1, 4], "ring"), ([4, 1], "ulysses")],  # TE attn_forward_func_with_cp: a one-rank level drops out
)
def test_a_one_rank_level_runs_the_other_variant(sizes, variant):
    run = _run({"cp": 4, "dp": 2, "cp_variant": "hierarchical", "hierarchical_cp_sizes": sizes})
    assert OpGeometry.from_run(run).cp_variant == variant


@pytest.mark.parametrize(
    "parallel, field, said",
    [
        ({"cp_variant": "hierarchical"}, "parallel", "needs hierarchical_cp_sizes"),  # arguments.py 583
        ({"cp_variant": "hierarchical", "hierarchical_cp_sizes": [2, 1]}, "parallel", "product must be cp 4"),
        ({"cp_variant": "ring", "hierarchical_cp_sizes": [2, 4]}, "parallel", "product must be cp 4"),  # 580
        ({"cp_variant": "hierarchical", "hierarchical_cp_sizes": [2, 1, 2]}, "parallel", "two levels"),
        # a product of cp, but only TEDotProductAttention under a2a+p2p uses the levels: nothing priced
        (
            {"cp_variant": "ring", "hierarchical_cp_sizes": [2, 2]},
            "parallel",
            "read only under cp_variant hierarchical",
        ),
        ({"cp_variant": "all_gather", "hierarchical_cp_sizes": [4, 1]}, "parallel", "read only under cp_variant"),
    ],
)
def test_impossible_hierarchical_sizes_are_refused(parallel, field, said):
    with pytest.raises(InputError) as err:
        _run({"cp": 4, "dp": 2, **parallel})
    assert err.value.field == field and said in err.value.problem


def test_te_only_variants_and_head_splits_are_refused():
    with pytest.raises(InputError) as err:
        _run({"cp": 2, "dp": 4, "cp_variant": "all_gather"}, framework="torchtitan")
    assert err.value.field == "parallel.cp_variant"
    # tp 8 leaves 4 query heads and 1 KV head a rank: an all-to-all over 2 cannot split the KV head
    with pytest.raises(InputError) as err:
        _run(
            {"cp": 4, "tp": 8, "dp": 1, "world_size": 32, "cp_variant": "hierarchical", "hierarchical_cp_sizes": [2, 2]}
        )
    assert err.value.field == "parallel.hierarchical_cp_sizes"
    with pytest.raises(InputError) as err:  # 2·cp = 8 load-balanced chunks
        _run({"cp": 4, "dp": 2, "cp_variant": "all_gather"}, s=1028)
    assert err.value.field == "training.seq_length"
    assert "1028 is not divisible by 2·cp = 8" in str(err.value)  # 1028 = 8·128 + 4; the value said (session 28)


LAUNCH = (
    "--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
    "--ffn-hidden-size 14336 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
    "--global-batch-size 8 --swiglu --vocab-size 1024 --bf16 --context-parallel-size 4 "
)


def test_the_importer_reads_both_flags():
    imported = import_megatron(
        LAUNCH + "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2", 8, "a100-80gb"
    )
    parallel = imported.raw["parallel"]
    assert (parallel["cp_variant"], parallel["hierarchical_cp_sizes"]) == ("hierarchical", [2, 2])
    # the sizes beside p2p: Megatron builds the groups but the ring never uses them, so a note, not a field
    ring = import_megatron(LAUNCH + "--hierarchical-context-parallel-sizes 2 2", 8, "a100-80gb")
    assert "hierarchical_cp_sizes" not in ring.raw["parallel"]
    assert "--hierarchical-context-parallel-sizes: read only under --cp-comm-type a2a+p2p, nothing priced" in ring.notes
    assert import_megatron(LAUNCH + "--cp-comm-type all_gather", 8, "a100-80gb").raw["parallel"]["cp_variant"] == (
        "all_gather"
    )
    # arguments.py validate_args: a2a+p2p needs the sizes; their product is cp (one line naming the flag)
    for flags, said in (
        ("--cp-comm-type a2a+p2p", "must be set when --cp-comm-type is a2a+p2p"),
        (
            "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 4",
            "product must be --context-parallel-size 4",
        ),
    ):
        with pytest.raises(InputError) as err:
            import_megatron(LAUNCH + flags, 8, "a100-80gb")
        assert err.value.field == "--hierarchical-context-parallel-sizes" and said in err.value.problem
    # TE takes "all_gather" only (attn_forward_func_with_cp raises "Unsupported communication type" otherwise)
    with pytest.raises(InputError) as err:
        import_megatron(LAUNCH + "--cp-comm-type allgather", 8, "a100-80gb")
    assert err.value.field == "--cp-comm-type"


# Memory: DENSE (h 64, 4 query heads of 16), micro-batch 1, T = 32 tokens a rank. With 1 KV head: Q = O = 4096,
# C = 32·(2·16)·2 = 2048; with 2 KV heads C = 4096.
Q = O = 4096


@pytest.mark.parametrize(
    "cp, forward, backward",
    [
        # forward cp·C + max(cp·C/2, Q/2 + 2·O): 4096 + max(2048, 10240); backward (3.5·cp − 0.5)·C + 1.5·Q + O:
        # 6.5·2048 + 6144 + 4096
        (2, 14336, 23552),
        (4, 8192 + 10240, 13.5 * 2048 + 10240),  # 18432, 37888
    ],
)
def test_all_gather_workspaces(cp, forward, backward):
    run = make_run(
        {**DENSE, "num_key_value_heads": 1},
        parallel={"cp": cp, "cp_variant": "all_gather"},
        training={"seq_length": 32 * cp},
        framework="megatron",
    )
    memory = model(run)
    terms = {t.name: t.bytes for t in te_all_gather_terms(body(run).kind, memory.setup)}
    assert terms == {"attention.all_gather_forward": forward, "attention.all_gather_backward": backward}
    held = memory.state_memory(body(run), LayerType.NOT_REC_LAYER)
    assert held.buffers.kept_bytes() == 0  # nothing gathered is saved
    assert (held.forward_transient_bytes, held.transient_bytes) == (forward, backward)


def test_hierarchical_ring_workspaces_are_the_ring_s_at_its_level():
    # cp 4 as [2, 2], 2 KV heads (C = 4096): TE's ring over 2 ranks: forward 2·(C + O) = 16384, backward Q + 4·C
    run = make_run(
        {**DENSE, "num_key_value_heads": 2},
        parallel={"cp": 4, "cp_variant": "hierarchical", "hierarchical_cp_sizes": [2, 2]},
        training={"seq_length": 128},
        framework="megatron",
    )
    memory = model(run)
    terms = {t.name: t.bytes for t in te_ring_terms(body(run).kind, memory.setup)}
    assert terms == {"attention.ring_forward_steps": 16384, "attention.ring_backward_buffers": 4096 + 4 * 4096}


def test_after_an_all_to_all_a_rank_reads_its_share_of_the_keys():
    # Ulysses cp 2, s 1024, LLaMA-8B: after the all-to-all a rank holds 1024 tokens of 16 query and 4 KV heads.
    # The scores op reads Q (512·32·128 = 2,097,152 elements, the same count), half of the K, V (its K):
    # 1024·(2·4·128)/2 = 524,288, in bf16, and writes the statistics (512·32·4 B):
    # (2,097,152 + 524,288)·2 + 65,536 = 5,308,416 B (every KV head's keys would be 6,356,992).
    ops = _ops(_run({"cp": 2, "dp": 4, "cp_variant": "ulysses"}))
    assert ops["flash_scores"].bytes == 5_308_416
    # hierarchical [2, 2] at cp 4: 256 local tokens, keys of 4 of the 8 KV heads: (1,048,576 + 524,288)·2 + 32,768
    ops = _ops(_run({"cp": 4, "dp": 2, "cp_variant": "hierarchical", "hierarchical_cp_sizes": [2, 2]}))
    assert ops["flash_scores"].bytes == 3_178_496


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.integers(1, 64), st.sampled_from([1, 2, 4]))
def test_every_variant_computes_the_ring_s_pairs(cp, chunk, a2a):
    # Each variant splits the causal triangle's s(s+1)/2 pairs of every head over the cp ranks: the flash ops'
    # FLOPs a rank are the ring's, and all-gather's two calls hold s(s+1)/(2cp) pairs whatever the rank.
    s = 2 * cp * chunk * 8
    steps = all_gather_steps(cp, s / cp)
    assert sum(x.pairs() for x in steps) == pytest.approx(s * (s + 1) / (2 * cp))
    ring = _ops(_run({"cp": cp, "dp": 8 // cp}, s=s))["flash_scores"].flops
    assert _ops(_run({"cp": cp, "dp": 8 // cp, "cp_variant": "all_gather"}, s=s))["flash_scores"].flops == ring
    if a2a < cp:
        sizes = [a2a, cp // a2a]
        hierarchical = {"cp": cp, "dp": 8 // cp, "cp_variant": "hierarchical", "hierarchical_cp_sizes": sizes}
        assert _ops(_run(hierarchical, s=s))["flash_scores"].flops == pytest.approx(ring)
