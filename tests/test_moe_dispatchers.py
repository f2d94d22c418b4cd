"""Megatron-Core's token dispatchers priced as each runs (megatron/core/transformer/moe/token_dispatcher.py,
moe_utils.py, d98e8a64): the allgather dispatcher, Megatron's default (`--moe-token-dispatcher-type`,
megatron/core/transformer/transformer_config.py `moe_token_dispatcher_type`), against the alltoall one.
Expected figures derived by hand in comments."""

from __future__ import annotations

import pytest
from test_megatron_import import MOE_MLA
from test_memory_runs import make_run

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.errors import InputError
from ppb_core.memory.activations import routed_rows
from ppb_core.memory.frameworks.megatron import allgather_row_map, allgather_state_bytes
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import body_kind
from ppb_core.timing.comm import Links, collective_seconds
from ppb_core.timing.flops import ALL_GATHER, COMM, REDUCE_SCATTER, Collective, Op, OpGeometry, moe_ops
from ppb_core.timing.host import dispatcher_wait_s
from ppb_core.timing.launches import layer_launches

# 8 experts, top-2, h 1024, expert width 2048 (SwiGLU); s 4096, b 1, TP 2 (sequence parallel), EP 4, ETP 1.
SPEC = {"vocab_size": 1024, "hidden_size": 1024, "num_layers": 2, "num_attention_heads": 8,
        "intermediate_size": 4096, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 2048}  # fmt: skip
RUN = make_run(SPEC, parallel={"tp": 2, "dp": 4, "ep": 4, "sequence_parallel": True}, training={"seq_length": 4096})
KIND = body_kind(RUN.spec("m"), 0, RUN.training.dropout)
MOE = KIND.mlp
GEOMETRY = {"seq_length": 4096, "micro_batch_size": 1, "dtype_bytes": 2, "tp": 2, "sequence_parallel": True,
            "ep": 4, "etp": 1}  # fmt: skip


def _ops(**fields) -> dict[str, Op]:
    geo = OpGeometry(**{**GEOMETRY, "dispatcher": "allgather", "router_bytes": 4, **fields})
    return {op.name: op for op in moe_ops(KIND, MOE, geo)}


def test_the_allgather_dispatcher_gathers_the_groups_tokens_and_reduce_scatters_in_the_probs_dtype() -> None:
    ops = _ops()
    # token_dispatch: [S/TP·B, H] gathered over the tp_ep group (etp·ep = 4): T = 4096/2 · 4 = 8192 rows.
    # Tokens bf16: 8192·1024·2 = 16,777,216 B; probabilities fp32 (--moe-router-dtype fp32): 8192·8·4
    # = 262,144 B; the routing map bool: 8192·8 = 65,536 B, forward only (gathered under no_grad).
    assert ops["dispatch"].forward_comm == Collective(ALL_GATHER, "tp_ep", 16_777_216, "ep")
    assert ops["dispatch"].backward_comm.kind == REDUCE_SCATTER
    assert ops["dispatch_probs"].forward_comm.payload_bytes == 262_144
    assert ops["dispatch_map"].forward_comm.payload_bytes == 65_536
    assert ops["dispatch_map"].backward_comm is None
    # token_combine: `hidden_states.to(self.local_probs.dtype)` before the reduce-scatter: fp32,
    # 8192·1024·4 = 33,554,432 B; its backward the all-gather of as many.
    combine = ops["combine"]
    assert (combine.forward_comm.kind, combine.forward_comm.payload_bytes) == (REDUCE_SCATTER, 33_554_432)
    assert combine.backward_comm.kind == ALL_GATHER
    # and the result cast back to bf16: 2048 rows · 1024 · (4 + 2) = 12,582,912 B
    assert ops["combine_cast"].bytes == 12_582_912
    # Without expert TP or EP nothing is gathered, reduced or cast (`token_dispatch`, `token_combine`:
    # `if self.tp_size > 1 or self.ep_size > 1`); the unpermute still fills its zeros and adds the rows.
    alone = _ops(ep=1, tp=1, sequence_parallel=False)
    assert not {"dispatch", "dispatch_probs", "dispatch_map", "combine", "combine_cast"} & set(alone)
    assert alone["local_unpermute"].launches == (2, 1)
    # no all-to-all and no expert-TP gather of its own
    assert not {"permute", "unpermute", "gather_experts", "reduce_experts"} & set(ops)
    # the experts compute this rank's copies: 2048 tokens · 2 copies · etp 1 = 4096 rows (T·k/ep)
    assert ops["experts_in"].gemm[0] * ops["experts_in"].gemm[3] == 4096


def test_the_allgather_dispatchers_collectives_run_over_expert_tp_times_ep() -> None:
    run = make_run(
        {"vocab_size": 1024, "hidden_size": 64, "num_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 64, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 32},
        parallel={"tp": 2, "dp": 4, "ep": 4, "etp": 2, "sequence_parallel": True},
        timing={"moe_dispatcher": "allgather"},
    )  # fmt: skip
    links = Links.from_run(run)
    assert (links.groups["tp_ep"].size, links.groups["tp_ep"].span) == (8, 8)
    # a ring all-gather of P bytes over 8 ranks in one node: P·7/8 over NVLink at NCCL's share measured for 8
    # H100 (0.745 of 450 GB/s: aiconfigurator's nccl-tests, `NCCL_GATHER_SHARES_H100`) plus 7 steps' latency
    gather = Collective(ALL_GATHER, "tp_ep", 8e6, "ep")
    seconds = 8e6 * 7 / 8 / (0.745 * 450e9) + 7 * links.latency_s
    assert collective_seconds(gather, links) == pytest.approx(seconds)


def test_the_allgather_dispatchers_launches_follow_its_code() -> None:
    launches = layer_launches(
        tuple(_ops().values()), tp=2, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True
    )
    # dispatch_postprocess with EP: the two column copies, the count and its copy to the host (2 + 2);
    # unfused permute: transpose, argsort's index fill + radix sort's histogram, scan, one pass (4),
    # modulo, index_select (7); the probabilities' and the map's transposes and masked_select (2 + 4).
    # Backward: index_select's zero-filled index_add (2), masked_scatter into zeros (3), the slice's
    # zero-filled gradient (2).
    assert launches["local_permute"] == (2 + 2 + 7 + 6, 2 + 3 + 2)
    # unpermute: zeros and scatter_add_, then the cast to fp32 (3); backward the gather and the cast (2)
    assert launches["local_unpermute"] == (3, 2)
    # one NCCL kernel per gather; the map's none backward
    assert [launches[name] for name in ("dispatch_map", "dispatch_probs", "dispatch", "combine")] == [
        (1, 0),
        (1, 1),
        (1, 1),
        (1, 1),
    ]
    # --moe-permute-fusion: Transformer Engine's row map (`make_row_id_map`'s three Triton passes, TE
    # d0067d0d triton/permutation.py) and permute (4), its unpermute backward (1)
    fused = layer_launches(
        tuple(_ops(permute_fusion=True).values()),
        tp=2,
        rope_fusion=True,
        cross_entropy_fusion=False,
        wgrad_fused=True,
    )
    assert fused["local_permute"] == (2 + 2 + 4 + 6, 1 + 5)
    assert fused["local_unpermute"] == (1 + 1, 1 + 1)


def test_the_allgather_dispatchers_transposes_of_one_local_experts_column_are_views() -> None:
    # EP 8 over 8 experts (Megatron CI's EP 8 cases): the local map and probabilities are [T, 1] columns
    # (token_dispatcher.py `dispatch_postprocess`, 5fe3f06658), so `.T.contiguous()` returns the [1, T]
    # view itself: no kernel for the permute's map transpose nor for masked_select's two transposes.
    one = _ops(ep=8)
    launches = layer_launches(tuple(one.values()), tp=2, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True)
    # column copies and count (2 + 2); argsort's 4, modulo, index_select (6); masked_select (4): 14;
    # backward unchanged (2 + 3 + 2)
    assert launches["local_permute"] == (2 + 2 + 6 + 4, 2 + 3 + 2)
    fused = layer_launches(
        tuple(_ops(ep=8, permute_fusion=True).values()),
        tp=2,
        rope_fusion=True,
        cross_entropy_fusion=False,
        wgrad_fused=True,
    )
    assert fused["local_permute"] == (2 + 2 + 4 + 4, 1 + 5)
    # bytes, by hand: T = 4096/2 · 8 = 16,384 gathered rows of one column (cells 16,384), rows = 2048 · 2 =
    # 4096 copies, h 1024, bf16, fp32 probabilities: the column copies 2 · cells · (1 + 4), the count
    # (cells), argsort (cells · (1 + 8)), index_select (2 · rows · h · 2), masked_select's reads (cells ·
    # (4 + 1)) and rows written (rows · 4); no transposes (map 1 + 1, probabilities 4 + 4 and 1 + 1).
    cells, rows = 16_384, 4096
    sliced = 2 * cells * (1 + 4)
    expected = sliced + cells + cells * 9 + 2 * rows * 1024 * 2 + cells * (4 + 1) + rows * 4
    assert one["local_permute"].bytes == expected


def test_the_allgather_dispatcher_waits_for_the_host_twice() -> None:
    ops = [
        Op("moe.router_topk", "moe", "memory"),
        Op("moe.dispatch", "moe", COMM),
        Op("moe.local_permute", "moe", "memory"),
        Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.local_unpermute", "moe", "memory"),
    ]
    forward = {"moe.router_topk": 1.0, "moe.dispatch": 1.0, "moe.local_permute": 0.5, "moe.experts_in": 2.0,
               "moe.local_unpermute": 1.0}  # fmt: skip
    launches = {"moe.router_topk": 1, "moe.dispatch": 1, "moe.local_permute": 2, "moe.experts_in": 2,
                "moe.local_unpermute": 1}  # fmt: skip
    # `.cpu()` before the permutation: nothing queued; its two launches at 1.5 and 3 against the GPU
    # reaching them at 0 and 0.25: 2.75. masked_select at its end waits again: the experts' GEMMs and
    # the unpermute launched at 1.5, 3, 4.5 against 0, 1, 2: 2.5. Dropless or not, 2.75 + 2.5 = 5.25.
    for dropless in (True, False):
        wait = dispatcher_wait_s(ops, forward, 1.5, dropless, launches, dispatcher="allgather")
        assert wait == pytest.approx(5.25)


def test_the_allgather_dispatchers_memory_by_hand() -> None:
    setup = MemorySetup(**GEOMETRY, framework="megatron", moe_dispatcher="allgather", router_bytes=4)
    rows = routed_rows(MOE, setup)  # 4096/2 · 2 · 1 = 4096
    assert rows == 4096
    # unfused: one int64 sorted index per row; fused: TE's row_id_map [T, 2·2 + 1] int32, T = 8192
    assert allgather_row_map(MOE, setup) == (4096, 8)
    fused = MemorySetup(**GEOMETRY, framework="megatron", moe_dispatcher="allgather", permute_fusion=True)
    assert allgather_row_map(MOE, fused) == (8192 * 5, 4)
    # module state: local_map 8192·2 bool + local_probs 4096 fp32 = 16,384 + 16,384; idle the row map 4096·8
    assert allgather_state_bytes(MOE, setup) == (16_384 + 16_384, 32_768)


@pytest.mark.parametrize(
    ("flags", "dispatcher", "noted"),
    [
        ("", "allgather", False),  # Megatron's default (transformer_config.py moe_token_dispatcher_type)
        ("--moe-token-dispatcher-type allgather", "allgather", False),
        ("--moe-token-dispatcher-type alltoall", "alltoall", False),
        ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep", "deepep", False),
        ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", "hybridep", False),
        ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ncclep", "ncclep", False),
        ("--moe-token-dispatcher-type flex --moe-enable-deepep", "deepep", False),  # deprecated: deepep
    ],
)
def test_the_import_carries_the_dispatcher(flags: str, dispatcher: str, noted: bool) -> None:
    text = MOE_MLA.replace("--moe-token-dispatcher-type alltoall", flags)
    imported = import_megatron(text, 8, "h100-80gb")
    assert imported.raw["timing"]["moe_dispatcher"] == dispatcher
    assert any(note.startswith("--moe-token-dispatcher-type") for note in imported.notes) == noted
    assert run_config_of(imported, "case").timing.moe_dispatcher == dispatcher


def test_the_allgather_dispatcher_is_megatrons_and_not_under_combined_1f1b() -> None:
    with pytest.raises(InputError) as caught:
        make_run(SPEC, parallel={"dp": 4, "ep": 4}, timing={"moe_dispatcher": "allgather"}, framework="torchtitan")
    assert caught.value.field == "timing.moe_dispatcher"
    # transformer_config.py __post_init__: "overlap_moe_expert_parallel_comm is supported with alltoall/flex"
    with pytest.raises(InputError) as caught:
        make_run(
            SPEC,
            parallel={"dp": 4, "ep": 4, "overlap_moe_expert_parallel_comm": True},
            timing={"moe_dispatcher": "allgather"},
        )
    assert caught.value.field == "parallel.overlap_moe_expert_parallel_comm"


def test_the_allgather_dispatcher_runs_a_sequential_mlps_experts_one_by_one() -> None:
    # no --moe-grouped-gemm: SequentialMLP loops over its 8/4 = 2 local experts (experts.py
    # SequentialMLP.forward), then torch.cat of their outputs feeds the unpermute, as under the all-to-all
    ops = _ops(sequential_experts=True)
    assert [ops[name].sequential for name in ("experts_in", "experts_act", "experts_out")] == [2, 2, 2]
    assert ops["local_unpermute"].inputs == ("experts_cat",)
    assert _ops()["local_unpermute"].inputs == ("experts_out",)


def test_the_alltoall_dispatcher_sorts_its_rows_by_local_expert_and_back() -> None:
    # 8 experts over EP 4: 2 local experts, so dispatch_postprocess and combine_preprocess each copy the
    # rows (sort_chunks_by_idxs). Rows: 4096/2 tokens · top-2 = 4096 (ETP 1, no padding). Permute before:
    # read and write 4096·1024·2 = 16,777,216 B; the sort after the all-to-all read and write the rows
    # and their fp32 probabilities: 2·4096·(1024·2 + 4) = 16,809,984 B. Unpermute: (2 + 1)·2048·1024·2
    # = 12,582,912 B, and the sort back 16,777,216 B (no probabilities). Backward likewise.
    ops = _ops(dispatcher="alltoall")
    assert (ops["permute"].bytes, ops["permute"].backward_bytes) == (16_777_216 + 16_809_984,) * 2
    assert (ops["unpermute"].bytes, ops["unpermute"].backward_bytes) == (12_582_912 + 16_777_216,) * 2
    # one local expert (EP 8): no sort
    single = _ops(dispatcher="alltoall", ep=8)
    assert single["permute"].bytes == 16_777_216
    assert single["unpermute"].bytes == 12_582_912


def test_the_alltoall_dispatcher_sends_the_probabilities_apart_and_reduces_in_their_dtype() -> None:
    # token_dispatch (d98e8a64): the tokens' all-to-all, then the permuted probabilities' own: 2 calls
    # each way. Rows 4096 (above): tokens 4096·1024·2 = 8,388,608 B, probabilities fp32 4096·4 = 16,384 B.
    ops = _ops(dispatcher="alltoall")
    dispatch = ops["dispatch"]
    assert (dispatch.forward_comm.calls, dispatch.backward_comm.calls) == (2, 2)
    assert dispatch.forward_comm.payload_bytes == 8_388_608 + 16_384
    kw = {"tp": 2, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    launches = layer_launches([dispatch, ops["combine"]], **kw)
    assert launches == {"dispatch": (2.0, 2.0), "combine": (1.0, 1.0)}
    # Each call pays the group's steps: an all-to-all over EP 4 in the node, 3 steps a call
    links = Links.from_run(RUN)
    one = collective_seconds(Collective("all_to_all", "ep", 8e6, "ep"), links)
    two = collective_seconds(Collective("all_to_all", "ep", 8e6, "ep", calls=2), links)
    assert two - one == pytest.approx(3 * links.latency_s)
    # With expert TP 2 (TP 2, EP 2): dispatch_postprocess all-gathers tokens and probabilities (2 calls);
    # combine_preprocess reduce-scatters `hidden_states.to(self.probs.dtype)`: fp32 here. Rows now
    # 4096/2 · 2 (top-2) · 2 (etp) = 8192: gathered 8192·(1024·2 + 4) = 16,809,984 B; reduced
    # 8192·1024·4 = 33,554,432 B; cast before (8192 rows) and after (4096): (8192 + 4096)·1024·(2 + 4)
    # = 75,497,472 B each way, two plain kernels each way.
    etp = _ops(dispatcher="alltoall", ep=2, etp=2)
    gather = etp["gather_experts"]
    assert (gather.forward_comm.calls, gather.backward_comm.calls, gather.forward_comm.payload_bytes) == (
        2,
        2,
        16_809_984,
    )
    assert etp["reduce_experts"].forward_comm.payload_bytes == 33_554_432
    cast = etp["reduce_experts_cast"]
    assert (cast.bytes, cast.backward_bytes, cast.launches) == (75_497_472, 75_497_472, (2.0, 2.0))
    # in the training dtype there is nothing to cast
    assert "reduce_experts_cast" not in _ops(dispatcher="alltoall", ep=2, etp=2, router_bytes=2)


def test_megatrons_experts_weight_an_unfused_activation_by_the_probabilities() -> None:
    # experts.py `TEGroupedMLP.forward` (`bias_act_func`) and mlp.py `MLP.forward`, d98e8a64: GeLU (no
    # fusion a routed expert can take) runs `intermediate * probs.unsqueeze(-1)` then `.to(dtype)`.
    # Rows 4096 (alltoall, above), expert width 2048: 8,388,608 elements. GeLU alone moves 2 · 2 bytes an
    # element forward, 3 · 2 backward (`_activation`).
    gelu = body_kind(make_run({**SPEC, "activation": "gelu"}).spec("m"), 0, RUN.training.dropout)
    elements, rows = 4096 * 2048, 4096

    def act(router_bytes: int) -> Op:
        geo = OpGeometry(**{**GEOMETRY, "dispatcher": "alltoall", "router_bytes": router_bytes})
        return {op.name: op for op in moe_ops(gelu, gelu.mlp, geo)}["experts_act"]

    # bf16 probabilities: forward the product (read 2, write 2 an element; the probabilities 4096 · 2),
    # no cast; backward g·p (2 + 2), g·x (2 + 2 + 2), the sum (read 2, write 4096 · 2): launches 1 + 1
    # forward, 1 + 3 backward
    bf16 = act(2)
    assert bf16.bytes == elements * 4 + elements * 4 + rows * 2
    assert bf16.backward_bytes == elements * 6 + elements * (4 + 6 + 2) + rows * 2
    assert bf16.launches == (2.0, 4.0)
    # fp32 (--moe-router-dtype fp32): the product in fp32 (read 2, write 4) and cast back (read 4,
    # write 2); backward the cast up (2 + 4), g·p (4 + 4), the cast down (4 + 2), g·x (4 + 4 + 2), the sum
    # (4, and 4096 · 4 written): launches 1 + 2 forward, 1 + 5 backward
    fp32 = act(4)
    assert fp32.bytes == elements * 4 + elements * (6 + 6) + rows * 4
    assert fp32.backward_bytes == elements * 6 + elements * (6 + 8 + 6 + 10 + 4) + rows * 4
    assert fp32.launches == (3.0, 6.0)
    # SwiGLU's fused weighted kernel (the default bias_swiglu_fusion) and other frameworks: nothing added
    geo = OpGeometry(**{**GEOMETRY, "dispatcher": "alltoall", "router_bytes": 4})
    assert {op.name: op for op in moe_ops(KIND, MOE, geo)}["experts_act"].launches is None
    titan = OpGeometry(**{**GEOMETRY, "dispatcher": "alltoall", "router_bytes": 4, "framework": "torchtitan"})
    assert {op.name: op for op in moe_ops(gelu, gelu.mlp, titan)}["experts_act"].launches is None


def test_the_moe_layer_adds_the_shared_output_and_sums_its_inputs_gradients() -> None:
    # moe_layer.py (d98e8a64): the norm's output feeds the router and the dispatch (and the shared
    # experts): autograd sums their input gradients, one add a consumer past the first, each reading
    # two and writing one [2048, 1024] bf16 tensor (4096 tokens over SP 2): 3 · 2048 · 1024 · 2 =
    # 12,582,912 B. Without shared experts: nothing forward, one add backward.
    for dispatcher in ("alltoall", "allgather"):
        sums = _ops(dispatcher=dispatcher)["moe_sums"]
        assert (sums.bytes, sums.backward_bytes, sums.launches) == (0, 12_582_912, (0.0, 1.0))
    # With a shared expert `postprocess` adds its output to the routed one (forward 12,582,912 B), and
    # backward three consumers' gradients meet: two adds
    shared = body_kind(
        make_run({**SPEC, "shared_experts": 1, "shared_expert_intermediate_size": 2048}).spec("m"), 0, 0.0
    )
    geo = OpGeometry(**{**GEOMETRY, "dispatcher": "alltoall", "router_bytes": 4})
    sums = {op.name: op for op in moe_ops(shared, shared.mlp, geo)}["moe_sums"]
    assert (sums.bytes, sums.backward_bytes, sums.launches) == (12_582_912, 2 * 12_582_912, (1.0, 2.0))
    # other frameworks' MoE blocks are their own
    titan = OpGeometry(**{**GEOMETRY, "dispatcher": "alltoall", "framework": "torchtitan"})
    assert "moe_sums" not in {op.name for op in moe_ops(KIND, MOE, titan)}


@pytest.mark.parametrize(
    ("fused", "ep", "permute", "unpermute"),
    [
        # fused, 2 local experts (EP 4): preprocess 13 + row map 3 + permute 1; backward 3. Unpermute: the
        # sort after the all-to-all (chunk map + sort 2) and back (2) and the unpermute (1); backward 1 + 1 + 1
        (True, 4, (13 + 4, 3), (2 + 2 + 1, 3)),
        # fused, one local expert (EP 8): no sorts
        (True, 8, (17, 3), (1, 1)),
        # unfused, 2 local experts: preprocess 13 + the local counts' copy 1; the map's transpose, argsort 4,
        # `%`, the probabilities' transpose and gather, index_select: 9; backward the two zero-filled
        # index_add / index_put, 2 + 2. Unpermute: the cats after the all-to-all (tokens, probabilities: 2)
        # and before it (1), zeros + scatter_add (2); backward the three splits' cats and the gather
        (False, 4, (14 + 9, 4), (3 + 2, 3 + 1)),
        (False, 8, (13 + 9, 4), (2, 1)),
    ],
)
def test_the_alltoall_dispatchers_launches_follow_its_code(fused, ep, permute, unpermute) -> None:
    ops = _ops(dispatcher="alltoall", permute_fusion=fused, ep=ep)
    assert ops["permute"].launches == permute
    assert ops["unpermute"].launches == unpermute
