"""What MindFormers' DeepSeek-V2 card runs, priced as its code runs it: the BatchMatMul MoE (MoEV2) without sequence
parallelism, what each model-parallel rank dispatches, all-to-alls and reduces (`ppb_core.timing.flops.
mindformers_moev2`), and the unfused attention's softmax in softmax_compute_type under jit_level O1
(`mindformers_softmax_bytes`).

mindformers/modules/transformer/moe.py at 2388c729a (the DeepSeek-V2 card's figure) and a4dfb8219: the norm's output
is whole on every model-parallel rank (`(dp, 1, 1)`), so each rank routes the micro-batch's N tokens, gathers them
into E experts × capacity slots (`TopkRouterV2.dispatch`) and all-to-alls that whole tensor over expert_parallel
(`ffn_forward`'s `transpose_5dim_ep2`); the experts' w1/w3 split their width over mp (`LlamaFeedForward.shard`:
`(ep, mp, 1)`), w2 its input (`(ep, 1, mp)`) with its partial sums all-reduced; the column-split input's gradient
all-reduced in the backward. Hand numbers: N = s·b = 1024, k = 2, capacity factor 2.0, h = 512, bf16 (2 bytes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.kinds import body_kind
from ppb_core.search.enumerate import grid
from ppb_core.search.spec import parse_search_spec
from ppb_core.timing.flops import ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, OpGeometry, layer_ops

SPEC = {
    "vocab_size": 32000,
    "hidden_size": 512,
    "num_layers": 2,
    "num_attention_heads": 8,
    "intermediate_size": 1024,
    "num_experts": 8,
    "experts_per_token": 2,
    "moe_intermediate_size": 256,
}
N, K, FACTOR, H, BC = 1024, 2, 2.0, 512, 2


def moe_ops(
    framework: str = "mindformers", sp: bool = False, jit_level: str | None = "O1", tp: int = 4, **timing
) -> dict:
    raw = {
        "name": "x",
        "framework": framework,
        "models": [{"name": "llm", "spec": SPEC}],
        "parallel": {"dp": 4, "tp": tp, "ep": 4, "sequence_parallel": sp},
        "training": {
            "seq_length": N,
            "micro_batch_size": 1,
            "flash_attention": False,
            "moe": {"dropless": False, "capacity_factor": FACTOR, "pad_to_capacity": True},
        },
        "device": {"name": "ascend-910b"},
    }
    raw["timing"] = ({"jit_level": jit_level} if jit_level else {}) | timing
    run = parse_run_config(raw)
    ops = layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
    return {op.name: op for op in ops}


def test_each_rank_all_to_alls_the_whole_micro_batch_padded_to_capacity():
    ops = moe_ops()
    # N·k·factor slots of h bf16 each, every one of the 4 mp ranks: 1024 · 2 · 2 · 512 · 2 = 4,194,304 bytes
    slots_bytes = N * K * FACTOR * H * BC
    for name in ("dispatch", "combine"):
        forward, backward = ops[name].forward_comm, ops[name].backward_comm
        assert (forward.kind, forward.group, forward.payload_bytes) == (ALL_TO_ALL, "ep", slots_bytes), name
        assert (backward.kind, backward.payload_bytes) == (ALL_TO_ALL, slots_bytes), name
    # the experts compute every slot of their own experts from the 4 replicas: the same N·k·factor rows
    assert ops["experts_in"].flops == pytest.approx(2 * N * K * FACTOR * H * 2 * (256 / 4), rel=1e-12)


def test_the_experts_reduce_by_all_reduce_and_nothing_is_gathered():
    ops = moe_ops()
    slots_bytes = N * K * FACTOR * H * BC
    assert "gather_experts" not in ops
    reduce = ops["reduce_experts"]
    assert (reduce.forward_comm.kind, reduce.forward_comm.group, reduce.forward_comm.payload_bytes) == (
        ALL_REDUCE,
        "etp",
        slots_bytes,
    )
    assert reduce.backward_comm is None
    grad = ops["reduce_experts_grad"]
    assert grad.forward_comm is None
    assert (grad.backward_comm.kind, grad.backward_comm.payload_bytes) == (ALL_REDUCE, slots_bytes)


def test_dispatch_and_combine_passes_read_and_write_the_whole_micro_batch():
    # dispatch: concat of a zero row (read N, write N + 1 ≈ N rows) and the Gather into the slots (read and write
    # C = N·k·factor rows): (2N + 2C)·h·bc = (2048 + 8192) · 1024 = 10,485,760 bytes each way.
    c = N * K * FACTOR
    ops = moe_ops()
    assert ops["permute"].bytes == pytest.approx((2 * N + 2 * c) * H * BC, rel=1e-12)
    assert ops["permute"].backward_bytes == ops["permute"].bytes
    # combine under O1: concat (read C, write C), Gather of the k slots (read and write N·k), the coefficients'
    # Mul fused into the ReduceSum over k (read N·k, write N): (2C + 3N·k + N)·h·bc; at O0 the product is written and
    # read once more (2N·k)
    fused = (2 * c + 3 * N * K + N) * H * BC
    assert ops["unpermute"].bytes == pytest.approx(fused, rel=1e-12)
    assert ops["unpermute"].backward_bytes == ops["unpermute"].bytes
    assert moe_ops(jit_level=None)["unpermute"].bytes == pytest.approx(fused + 2 * N * K * H * BC, rel=1e-12)


def test_at_model_parallel_1_moev2_runs_its_own_dispatch_and_combine():
    """mp 1 runs the same MoEV2 code (moe.py `MoEV2.construct`, `TopkRouterV2.dispatch` / `combine`, 2388c729a and
    a4dfb8219): capacity ⌈2 · 1024 · 2.0 / 8⌉ = 512 slots an expert (a multiple of mp 1), 2.0 over the fair share
    k·N/E = 256, so C = N·k·2 = 4096 slots; the dispatch pass (2N + 2C)·h·bc = (2048 + 8192) · 1024 = 10,485,760
    bytes, where the Megatron permute ppb took before read and wrote the N·k = 2048 copies: 2 · 2048 · 1024 =
    4,194,304; the all-to-all the rank's C slots either way, 4096 · 512 · 2 = 4,194,304 bytes; the combine (2C + 3N·k
    + N)·h·bc = (8192 + 6144 + 1024) · 1024 = 15,728,640 bytes under O1; nothing over mp."""
    ops = moe_ops(tp=1)
    assert ops["permute"].bytes == ops["permute"].backward_bytes == 10_485_760
    assert ops["unpermute"].bytes == ops["unpermute"].backward_bytes == 15_728_640
    assert ops["dispatch"].forward_comm.payload_bytes == ops["combine"].forward_comm.payload_bytes == 4_194_304
    assert not {"reduce_experts", "reduce_experts_grad", "gather_experts"} & set(ops)
    # use_seq_parallel at mp 1 changes nothing (`_ffn_forward_sq` with mp 1 makes the same single all-to-all)
    assert moe_ops(tp=1, sp=True)["permute"].bytes == 10_485_760


def test_sequence_parallel_and_megatron_keep_the_split_tokens():
    # under use_seq_parallel MoEV2 runs `_ffn_forward_sq` (not read): the tokens stay split over tp as before; and
    # Megatron's MoE without SP routes 1/t of them: N/4·k·factor slots in the all-to-all (Megatron's with their
    # probabilities beside them), gathered over expert TP and reduce-scattered back
    sequence_parallel, megatron = moe_ops(sp=True), moe_ops(framework="megatron", jit_level=None)
    split = N / 4 * K * FACTOR * H * BC
    assert sequence_parallel["dispatch"].forward_comm.payload_bytes == pytest.approx(split, rel=1e-12)
    assert megatron["dispatch"].forward_comm.payload_bytes == pytest.approx(split + N / 4 * K * FACTOR * BC, rel=1e-12)
    for ops in (sequence_parallel, megatron):
        assert ops["reduce_experts"].forward_comm.kind == REDUCE_SCATTER
        assert "gather_experts" in ops


def test_the_unfused_softmax_in_softmax_compute_type_under_o1():
    # `_attn`: the scores (bf16, 2 bytes) scaled, masked and cast to float32 (4) in one DVM kernel (read 2, write 4),
    # the aclnn Softmax (read 4, write 4), the Cast back (read 4, write 2): 20 bytes a score element forward.
    # Backward: the gradient's Cast up (2 + 4), SoftmaxBackward (read 4 + 4, write 4), the Cast down fused with the
    # scale's Mul (4 + 2): 24. Score elements a rank: 8 heads / tp 4 = 2 heads of N × N (unfused: the whole square).
    pairs = 2 * N * N
    softmax = moe_ops(softmax_compute_type="fp32")["softmax"]
    assert (softmax.bytes, softmax.backward_bytes) == (20 * pairs, 24 * pairs)
    # softmax_compute_type the compute dtype: no Casts: the fused kernel (2 + 2), Softmax (2 + 2); backward
    # SoftmaxBackward (3 · 2) and the scale (2 + 2)
    same = moe_ops(softmax_compute_type="bf16")["softmax"]
    assert (same.bytes, same.backward_bytes) == (8 * pairs, 10 * pairs)
    # kernels: with the Casts the fused Mul/Add/Cast, Softmax and the Cast back (backward: the Cast up,
    # SoftmaxBackward, the Cast down with the Mul), 3 each way; without them the fused Mul/Add and Softmax
    # (SoftmaxBackward and the Mul), 2
    assert softmax.launches == (3.0, 3.0)
    assert same.launches == (2.0, 2.0)
    # unset, or without O1: one fused kernel, read the scores and write the probabilities (2 + 2); backward 3 · 2
    for ops in (moe_ops(), moe_ops(jit_level=None, softmax_compute_type="fp32")):
        assert (ops["softmax"].bytes, ops["softmax"].backward_bytes) == (4 * pairs, 6 * pairs)


def test_softmax_compute_type_is_mindformers_only():
    with pytest.raises(InputError, match="softmax_compute_type"):
        moe_ops(framework="megatron", jit_level=None, softmax_compute_type="fp32")


def test_moev2_pads_each_expert_to_its_capacity_rounded_to_model_parallel():
    # calculate_expert_capacity_v2: ⌈k·N·factor / E⌉ = ⌈2 · 1024 · 1.1 / 8⌉ = ⌈281.6⌉ = 282 slots, rounded up to a
    # multiple of mp 4: 284; over the fair share k·N/E = 256: 1.109375 (the factor alone: 1.1)
    def share(sp: bool) -> float:
        raw = {
            "name": "x",
            "framework": "mindformers",
            "models": [{"name": "llm", "spec": SPEC}],
            "parallel": {"dp": 4, "tp": 4, "ep": 4, "sequence_parallel": sp},
            "training": {"seq_length": N, "moe": {"dropless": False, "capacity_factor": 1.1}},
            "device": {"name": "ascend-910b"},
        }
        return parse_run_config(raw).routed_share

    assert share(False) == 284 / 256
    # under use_seq_parallel the router's groups hold N/4 = 256 tokens, rounded to 1: ⌈70.4⌉ = 71 over 64, the same
    assert share(True) == 71 / 64
    # DeepSeek-V2's card shape (160 experts, top 6, 4096 tokens, factor 2.0, mp 8): ⌈307.2⌉ = 308 → 312, over 153.6
    raw = {
        "name": "x",
        "framework": "mindformers",
        "models": [{"name": "llm", "spec": {**SPEC, "num_experts": 160, "experts_per_token": 6}}],
        "parallel": {"dp": 4, "tp": 8, "ep": 4},
        "training": {"seq_length": 4096, "moe": {"dropless": False, "capacity_factor": 2.0}},
        "device": {"name": "ascend-910b"},
    }
    assert parse_run_config(raw).routed_share == pytest.approx(312 / 153.6, rel=1e-12)


def test_mindformers_capacity_moe_runs_its_experts_over_model_parallel():
    """MoEV2's experts split over model_parallel (llama_layer.py `LlamaFeedForward.shard`: w1/w3 `(ep, mp, 1)`, w2
    `(ep, 1, mp)`): an expert TP other than tp is not a run MindFormers makes; Megatron's is its own setting."""
    raw = {
        "name": "x",
        "framework": "mindformers",
        "models": [{"name": "llm", "spec": SPEC}],
        "parallel": {"dp": 2, "tp": 4, "ep": 8, "etp": 1},
        "training": {"seq_length": N, "moe": {"dropless": False, "capacity_factor": FACTOR}},
        "device": {"name": "ascend-910b"},
    }
    with pytest.raises(InputError, match=r"parallel\.etp: 1: MindFormers' capacity MoE .* etp = tp 4"):
        parse_run_config(raw)
    assert parse_run_config({**raw, "parallel": {"dp": 8, "tp": 4, "ep": 8, "etp": 4}}).parallel.expert_tp == 4
    assert parse_run_config({**raw, "framework": "megatron"}).parallel.expert_tp == 1


def test_a_mindformers_capacity_moe_search_keeps_etp_at_tp():
    """The search's default expert TP (1) is not MindFormers' for a capacity MoE: its grid follows tp (0)."""
    data = Path(__file__).parent / "data" / "search"
    raw = yaml.safe_load((data / "tiny-moe.yaml").read_text())
    raw["limits"].pop("fsdp")
    megatron = parse_search_spec(raw, "tiny-moe.yaml", data)
    raw["framework"], raw["device"] = "mindformers", {"name": "ascend-910b"}
    raw["training"]["moe"] = {"dropless": False, "capacity_factor": 2.0}
    assert grid(megatron).etp == (1,)
    assert grid(parse_search_spec(raw, "tiny-moe.yaml", data)).etp == (0,)
