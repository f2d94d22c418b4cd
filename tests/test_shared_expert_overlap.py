"""Megatron's --moe-shared-expert-overlap (megatron/core/transformer/moe/shared_experts.py `SharedExpertMLP`,
token_dispatcher.py `MoEAlltoAllTokenDispatcher.token_dispatch` / `token_combine`, transformer_config.py
`__post_init__`; NVIDIA/Megatron-LM d98e8a64): the shared experts' FC1 side beside the dispatch's all-to-all, their
FC2 side beside the combine's, each way. Expected figures derived by hand in comments."""

from __future__ import annotations

import pytest
from test_memory_runs import make_run

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.errors import InputError
from ppb_core.model.walk import BODY, walk
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.shared_overlap import beside

# 8 experts, top-2, h 1024, expert width 2048, one shared expert of 2048 (SwiGLU); s 4096, TP 2 (SP), EP 4.
SPEC = {"vocab_size": 1024, "hidden_size": 1024, "num_layers": 2, "num_attention_heads": 8,
        "intermediate_size": 4096, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 2048,
        "shared_experts": 1, "shared_expert_intermediate_size": 2048}  # fmt: skip
PARALLEL = {"tp": 2, "dp": 4, "ep": 4, "sequence_parallel": True}


def _run(spec: dict | None = None, parallel: dict | None = None, **timing):
    return make_run(
        spec or SPEC, parallel={**PARALLEL, **(parallel or {})}, training={"seq_length": 4096}, timing=timing
    )


def _priced(run):
    model = TimeModel(run)
    layer = next(x for x in walk(run) if x.node == BODY)
    return model, layer, model.op_prices(layer)


def test_fc1s_side_runs_beside_the_dispatch_and_fc2s_beside_the_combine() -> None:
    model, layer, _ = _priced(_run())
    pairs = beside(model.ops(layer))
    # `pre_forward_comm` (the SP all-gather: its forward, its backward reduce-scatter and the backward's
    # re-gather) and `linear_fc1_forward_and_act` after the tokens' all-to-all; `linear_fc2_forward` and
    # `post_forward_comm` (the SP reduce-scatter) after the combine's
    assert set(pairs) == {"dispatch", "combine"}
    assert set(pairs["dispatch"]) == {"gather_shared", "regather_shared", "shared_in", "shared_act"}
    assert set(pairs["combine"]) == {"shared_out", "reduce_shared"}
    # without expert parallelism no all-to-all to hide behind
    model, layer, _ = _priced(_run(parallel={"ep": 1, "dp": 16}))
    assert beside(model.ops(layer)) == {}


def test_each_all_to_all_keeps_what_its_side_of_the_shared_experts_does_not_cover() -> None:
    _, _, before = _priced(_run())
    model, _, after = _priced(_run(moe_shared_expert_overlap=True))
    k = model.kernels.contention  # the compute slowed by the NCCL kernels' SMs while the two overlap
    for name, side, phase in (
        ("dispatch", ("gather_shared", "regather_shared", "shared_in", "shared_act"), "forward_ms"),
        ("dispatch", ("gather_shared", "regather_shared", "shared_in", "shared_act"), "backward_ms"),
        ("combine", ("shared_out", "reduce_shared"), "forward_ms"),
        ("combine", ("shared_out", "reduce_shared"), "backward_ms"),
    ):
        # the all-to-all of E ms runs beside the side stream's C ms: the pair's wall max(E, C) plus the
        # contention's share of the part overlapped, so the all-to-all keeps max(E − C, k·min(E, C))
        e = getattr(before[name], phase)
        c = sum(getattr(before[op], phase) for op in side)
        assert e > 0 and c > 0
        assert getattr(after[name], phase) == pytest.approx(max(e - c, k * min(e, c)))
        assert getattr(after[name], phase) < e
    # the shared experts' own prices do not move: they still run, on the side stream
    for op in ("shared_in", "shared_act", "shared_out", "gather_shared", "reduce_shared"):
        assert after[op] == before[op]

    # so the layer is faster by what the all-to-alls hid, no more
    def gain(n: str) -> float:
        return before[n].forward_ms + before[n].backward_ms - after[n].forward_ms - after[n].backward_ms

    saved, hidden = sum(gain(n) for n in after), gain("dispatch") + gain("combine")
    assert saved == pytest.approx(hidden) and hidden > 0


def test_the_flag_moves_nothing_without_shared_experts_or_without_ep() -> None:
    plain = {k: v for k, v in SPEC.items() if not k.startswith("shared")}
    assert _priced(_run(plain))[2] == _priced(_run(plain, moe_shared_expert_overlap=True))[2]
    alone = {"ep": 1, "dp": 16}
    assert _priced(_run(parallel=alone))[2] == _priced(_run(parallel=alone, moe_shared_expert_overlap=True))[2]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        # transformer_config.py: "moe_shared_expert_overlap only works with alltoall or flex token dispatcher."
        ({"timing": {"moe_dispatcher": "allgather"}}, "not allgather"),
        # "shared_experts recompute cannot work with --moe-shared-expert-overlap."
        ({"training": {"recompute": {"granularity": "selective", "modules": ["shared_experts"]}}}, "shared_experts"),
        # 'disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm'
        ({"parallel": {"overlap_moe_expert_parallel_comm": True}}, "overlap_moe_expert_parallel_comm"),
        ({"framework": "torchtitan"}, "set framework megatron"),
    ],
)
def test_what_megatron_refuses_with_the_flag_is_refused_in_one_line(changes: dict, said: str) -> None:
    timing = {"moe_shared_expert_overlap": True, **changes.get("timing", {})}
    with pytest.raises(InputError, match=r"timing\.moe_shared_expert_overlap") as error:
        make_run(
            SPEC,
            parallel={**PARALLEL, **changes.get("parallel", {})},
            training={"seq_length": 4096, **changes.get("training", {})},
            framework=changes.get("framework"),
            timing=timing,
        )
    assert said in str(error.value) and "\n" not in str(error.value)


def test_the_import_reads_the_flag() -> None:
    flags = (
        "--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --num-experts 8 "
        "--moe-router-topk 2 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
        "--seq-length 4096 --micro-batch-size 1 --global-batch-size 32 --tensor-model-parallel-size 2 "
        "--sequence-parallel --expert-model-parallel-size 4 --moe-token-dispatcher-type alltoall --bf16 "
        "--vocab-size 1024 --position-embedding-type rope --swiglu --disable-bias-linear --normalization RMSNorm"
    )
    for extra, expected in (("", False), (" --moe-shared-expert-overlap", True)):
        run = run_config_of(import_megatron(flags + extra, 8, "h100-80gb"), "case")
        assert run.timing.moe_shared_expert_overlap is expected
    # Megatron-Core refuses it with the allgather dispatcher: said with the flag
    allgather = flags.replace("alltoall", "allgather") + " --moe-shared-expert-overlap"
    with pytest.raises(InputError, match="--moe-shared-expert-overlap"):
        run_config_of(import_megatron(allgather, 8, "h100-80gb"), "case")
