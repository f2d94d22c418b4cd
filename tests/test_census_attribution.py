"""Attribution of kept tensors to ops, switches and TP sides, on hand-built layer graphs (no torch).

The graphs mimic what the recorder logs for HuggingFace's RMSNorm, gated MLP and eager attention;
every expected byte count is the sum of the storages named in the comment.
"""

from __future__ import annotations

from ppb_core.census.attribution import (
    EXTERNAL,
    INPUT,
    OP,
    PARAM,
    LayerGraph,
    OpRecord,
    StorageRecord,
    attribute,
    bucket_bytes,
    kept_storages,
    part_bytes,
    recompute_shares,
)

LAYER = ("", "LlamaDecoderLayer")
NORM = ("input_layernorm", "LlamaRMSNorm")
MLP = ("mlp", "LlamaMLP")
ATTN = ("self_attn", "LlamaAttention")


def _linear(path: str, cls: str = "Linear") -> tuple[str, str]:
    return (path, cls)


def _graph(ops: list[OpRecord], sizes: dict[int, tuple[int, str]], saved: list[int]) -> LayerGraph:
    storages = {sid: StorageRecord(sid, size, origin) for sid, (size, origin) in sizes.items()}
    return LayerGraph(ops, storages, {sid: [0] for sid in saved}, input_sid=0)


def _norm_mlp() -> LayerGraph:
    """x → RMSNorm (fp32 copy, rsqrt, normalize, cast, weight) → gate/up → silu · up → down → + x."""
    sizes = {
        0: (100, INPUT),
        1: (10, PARAM),
        2: (30, PARAM),
        3: (30, PARAM),
        4: (30, PARAM),
        5: (200, OP),
        6: (4, OP),
        7: (200, OP),
        8: (100, OP),
        9: (100, OP),
        10: (300, OP),
        11: (300, OP),
        12: (300, OP),
        13: (300, OP),
        14: (100, OP),
        15: (100, OP),
    }
    ops = [
        OpRecord(0, "_to_copy", (LAYER, NORM), (0,), (5,)),
        OpRecord(1, "rsqrt", (LAYER, NORM), (5,), (6,)),
        OpRecord(2, "mul", (LAYER, NORM), (5, 6), (7,)),
        OpRecord(3, "_to_copy", (LAYER, NORM), (7,), (8,)),
        OpRecord(4, "mul", (LAYER, NORM), (1, 8), (9,)),
        OpRecord(
            5, "mm", (LAYER, MLP, _linear("mlp.gate_proj")), (9, 2), (10,), param="mlp.gate_proj.weight", flops=600.0
        ),
        OpRecord(6, "mm", (LAYER, MLP, _linear("mlp.up_proj")), (9, 3), (11,), param="mlp.up_proj.weight", flops=600.0),
        OpRecord(7, "silu", (LAYER, MLP, ("mlp.act_fn", "SiLUActivation")), (10,), (12,)),
        OpRecord(8, "mul", (LAYER, MLP), (12, 11), (13,)),
        OpRecord(
            9, "mm", (LAYER, MLP, _linear("mlp.down_proj")), (13, 4), (14,), param="mlp.down_proj.weight", flops=600.0
        ),
        OpRecord(10, "add", (LAYER,), (0, 14), (15,)),
    ]
    return _graph(ops, sizes, saved=[5, 6, 8, 9, 10, 11, 12, 13])


def _size(graph: LayerGraph, sids: set[int]) -> int:
    return sum(graph.storages[sid].nbytes for sid in sids)


def test_norm_and_mlp_switches_sides_and_kept_sets() -> None:
    graph = _norm_mlp()
    attribution = attribute(graph)
    assert [attribution.roles[i].switch for i in range(11)] == [
        "normOp",
        "normOp",
        "normOp",
        "normOp",
        "normOp",
        None,
        None,
        "ffAct",
        "ffAct",
        None,
        None,
    ]
    assert attribution.acting() == ("normOp", "ffAct")
    # Whole side: the input and the norm's tensors; TP side: gate, up, silu, product; the down
    # projection's output is reduced back to whole.
    assert {sid for sid, side in attribution.sides.items() if side == "tp"} == {10, 11, 12, 13}
    plain = kept_storages(graph, attribution, ())
    # Input 100 + fp32 copy 200 + rsqrt 4 + cast 100 + normalized 100 = 504 whole; 4·300 split.
    assert bucket_bytes(graph, attribution, plain) == {"saved": 504, "saved_tp": 1200, "routed": 0, "routed_tp": 0}
    # normOp rebuilds 5–9 from the input (kept anyway): 100 + 1200.
    assert _size(graph, kept_storages(graph, attribution, {"normOp"})) == 1300
    # ffAct rebuilds silu and the product (12, 13) from gate and up, which stay: 504 + 600.
    assert _size(graph, kept_storages(graph, attribution, {"ffAct"})) == 1104
    # Both: the input, gate and up.
    assert kept_storages(graph, attribution, {"normOp", "ffAct"}) == {0, 10, 11}
    # Full recompute keeps the input alone.
    assert kept_storages(graph, attribution, None) == {0}
    parts = part_bytes(graph, attribution, plain)
    assert parts[("mlp.act_fn:silu", "ffAct", "saved_tp")] == 300
    assert parts[("input_layernorm:_to_copy", "normOp", "saved")] == 300  # the fp32 copy and the cast back
    assert parts[("input", None, "saved")] == 100
    # Nothing a switch covers is a projection: no FLOPs of them rerun.
    assert recompute_shares(graph, attribution, {"ffAct", "normOp"}) == (0.0, 0.0)


def test_residual_before_a_recomputed_norm_is_kept() -> None:
    # A norm whose input is a residual sum (not saved by anyone) must keep that sum to be rebuilt.
    sizes = {0: (100, INPUT), 1: (10, PARAM), 2: (100, OP), 3: (200, OP), 4: (100, OP)}
    post = ("post_attention_layernorm", "LlamaRMSNorm")
    ops = [
        OpRecord(0, "add", (LAYER,), (0, 0), (2,)),
        OpRecord(1, "_to_copy", (LAYER, post), (2,), (3,)),
        OpRecord(2, "mul", (LAYER, post), (3, 1), (4,)),
    ]
    graph = _graph(ops, sizes, saved=[3, 4])
    attribution = attribute(graph)
    assert kept_storages(graph, attribution, ()) == {0, 3, 4}
    # Recomputing the norm drops 3 and 4 (300) and keeps the sum 2 (100).
    assert kept_storages(graph, attribution, {"normOp"}) == {0, 2}


def _attention() -> LayerGraph:
    """Eager attention: projections, rotary, GQA copies, QKᵀ, scale, mask, softmax, cast, AV, output copy."""
    sizes = {
        0: (100, INPUT),
        1: (40, PARAM),
        2: (10, PARAM),
        3: (10, PARAM),
        4: (40, PARAM),
        30: (8, EXTERNAL),
        31: (16, EXTERNAL),
        20: (64, OP),
        21: (16, OP),
        22: (16, OP),
        24: (64, OP),
        25: (16, OP),
        26: (64, OP),
        27: (64, OP),
        28: (256, OP),
        29: (256, OP),
        32: (256, OP),
        33: (512, OP),
        34: (256, OP),
        35: (64, OP),
        36: (64, OP),
        37: (100, OP),
    }
    ops = [
        OpRecord(
            0,
            "mm",
            (LAYER, ATTN, _linear("self_attn.q_proj")),
            (0, 1),
            (20,),
            param="self_attn.q_proj.weight",
            flops=800.0,
        ),
        OpRecord(
            1,
            "mm",
            (LAYER, ATTN, _linear("self_attn.k_proj")),
            (0, 2),
            (21,),
            param="self_attn.k_proj.weight",
            flops=200.0,
        ),
        OpRecord(
            2,
            "mm",
            (LAYER, ATTN, _linear("self_attn.v_proj")),
            (0, 3),
            (22,),
            param="self_attn.v_proj.weight",
            flops=200.0,
        ),
        OpRecord(3, "mul", (LAYER, ATTN), (20, 30), (24,)),  # rotary on q
        OpRecord(4, "mul", (LAYER, ATTN), (21, 30), (25,)),  # rotary on k
        OpRecord(5, "clone", (LAYER, ATTN), (25,), (26,)),  # repeat_kv copies
        OpRecord(6, "clone", (LAYER, ATTN), (22,), (27,)),
        OpRecord(7, "bmm", (LAYER, ATTN), (24, 26), (28,)),  # QKᵀ
        OpRecord(8, "mul", (LAYER, ATTN), (28,), (29,)),  # scaling
        OpRecord(9, "add", (LAYER, ATTN), (29, 31), (32,)),  # mask
        OpRecord(10, "_softmax", (LAYER, ATTN), (32,), (33,)),
        OpRecord(11, "_to_copy", (LAYER, ATTN), (33,), (34,)),  # fp32 → bf16
        OpRecord(12, "bmm", (LAYER, ATTN), (34, 27), (35,)),  # AV
        OpRecord(13, "clone", (LAYER, ATTN), (35,), (36,)),  # transpose(1, 2).contiguous()
        OpRecord(
            14,
            "mm",
            (LAYER, ATTN, _linear("self_attn.o_proj")),
            (36, 4),
            (37,),
            param="self_attn.o_proj.weight",
            flops=800.0,
        ),
    ]
    return _graph(ops, sizes, saved=[24, 26, 33, 34, 27, 36])


def test_attention_core_switches() -> None:
    graph = _attention()
    attribution = attribute(graph)
    roles = [attribution.roles[i].switch for i in range(15)]
    assert roles == [
        None,
        None,
        None,
        "attBMM",
        "attBMM",
        "attBMM",
        "attBMM",
        "softmax",
        "softmax",
        "softmax",
        "softmax",
        "headCast",
        "attBMM",
        None,
        None,
    ]
    # Everything between the column projections and o_proj is on the TP side.
    assert all(attribution.sides[sid] == "tp" for sid in (20, 21, 22, 24, 26, 27, 33, 34, 36))
    assert attribution.sides[37] == "whole"
    plain = kept_storages(graph, attribution, ())
    # q 64 + k copy 64 + fp32 probabilities 512 + bf16 probabilities 256 + v copy 64 + output 64 = 1024, + input.
    assert _size(graph, plain) == 100 + 1024
    # softmax rebuilds the scores and the fp32 probabilities from q and k, which stay: −512.
    assert _size(graph, kept_storages(graph, attribution, {"softmax"})) == 100 + 512
    # headCast rebuilds the bf16 probabilities from the fp32 ones: −256.
    assert _size(graph, kept_storages(graph, attribution, {"headCast"})) == 100 + 768
    # attBMM drops rotary q and the GQA copies (64·3) but keeps the projections' outputs (64 + 16 + 16).
    assert kept_storages(graph, attribution, {"attBMM"}) == {0, 20, 21, 22, 33, 34, 36}
    assert _size(graph, kept_storages(graph, attribution, {"attBMM"})) == 100 + 1024 - 192 + 96
    # The model's cos/sin (30) and mask (31) are never the layer's.
    assert not kept_storages(graph, attribution, {"attBMM", "softmax"}) & {30, 31}


def test_mla_up_projections_are_att_up_and_their_flops_share() -> None:
    sizes = {0: (100, INPUT), 1: (10, PARAM), 2: (40, PARAM), 3: (40, PARAM), 4: (20, OP), 5: (80, OP), 6: (100, OP)}
    ops = [
        OpRecord(
            0,
            "mm",
            (LAYER, ATTN, _linear("self_attn.kv_a_proj_with_mqa")),
            (0, 1),
            (4,),
            param="self_attn.kv_a_proj_with_mqa.weight",
            flops=100.0,
        ),
        OpRecord(
            1,
            "mm",
            (LAYER, ATTN, _linear("self_attn.kv_b_proj")),
            (4, 2),
            (5,),
            param="self_attn.kv_b_proj.weight",
            flops=300.0,
        ),
        OpRecord(
            2,
            "mm",
            (LAYER, ATTN, _linear("self_attn.o_proj")),
            (5, 3),
            (6,),
            param="self_attn.o_proj.weight",
            flops=600.0,
        ),
    ]
    graph = _graph(ops, sizes, saved=[4, 5])
    attribution = attribute(graph)
    assert attribution.roles[1].switch == "attUp"
    assert attribution.sides[4] == "whole" and attribution.sides[5] == "tp" and attribution.sides[6] == "whole"
    # attUp reruns kv_b_proj: 300 of the attention's 1000 projection FLOPs; the latent (4) stays.
    assert recompute_shares(graph, attribution, {"attUp"}) == (0.3, 0.0)
    assert kept_storages(graph, attribution, {"attUp"}) == {0, 4}


def test_routed_experts_have_their_own_buckets() -> None:
    experts = ("mlp.experts", "MixtralExperts")
    moe = ("mlp", "MixtralSparseMoeBlock")
    sizes = {
        0: (100, INPUT),
        1: (90, PARAM),
        2: (90, PARAM),
        3: (50, OP),
        4: (120, OP),
        5: (60, OP),
        6: (60, OP),
        7: (50, OP),
    }
    ops = [
        OpRecord(0, "index", (LAYER, moe, experts), (0,), (3,)),  # the tokens routed to one expert
        OpRecord(1, "mm", (LAYER, moe, experts), (3, 1), (4,), param="mlp.experts.gate_up_proj"),
        OpRecord(2, "silu", (LAYER, moe, experts, ("mlp.experts.act_fn", "SiLUActivation")), (4,), (5,)),
        OpRecord(3, "mul", (LAYER, moe, experts), (5, 4), (6,)),
        OpRecord(4, "mm", (LAYER, moe, experts), (6, 2), (7,), param="mlp.experts.down_proj"),
    ]
    graph = _graph(ops, sizes, saved=[3, 4, 5, 6])
    attribution = attribute(graph)
    assert [attribution.roles[i].switch for i in range(5)] == [None, None, "ffAct", "ffAct", None]
    plain = kept_storages(graph, attribution, ())
    assert bucket_bytes(graph, attribution, plain) == {"saved": 100, "saved_tp": 0, "routed": 50, "routed_tp": 240}
