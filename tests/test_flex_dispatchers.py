"""Megatron-Core's flex token dispatcher backends deepep, hybridep and ncclep (megatron/core/transformer/moe/
token_dispatcher.py, fused_a2a.py, transformer_config.py at d98e8a64; HybridEP: deepseek-ai/DeepEP branch
hybrid-ep at 94a9f8f). Expected figures derived by hand in comments."""

from __future__ import annotations

import dataclasses
from math import comb

import pytest
from test_megatron_import import MOE_MLA
from test_memory_runs import make_run

from ppb_core.balance.megatron_import import import_megatron
from ppb_core.config.run import FrameworkRelease, RunConfig
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.flex_buffers import deepep_buffer_bytes, hybridep_buffer_bytes
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import body_kind
from ppb_core.timing.comm import Links, collective_seconds
from ppb_core.timing.flex import flex_sms, hybridep_ib_rates, hybridep_rates, ranks_reached
from ppb_core.timing.flops import ALL_TO_ALL, Collective, Op, OpGeometry, expert_fp8_pads, moe_ops
from ppb_core.timing.host import dispatcher_wait_s
from ppb_core.timing.launches import layer_launches

# 128 experts, top-8, h 2048 (Qwen3 30B-A3B's shape), s 4096, b 1, EP 16 over two 8-GPU nodes.
SPEC = {"vocab_size": 1024, "hidden_size": 2048, "num_layers": 2, "num_attention_heads": 32,
        "intermediate_size": 6144, "num_experts": 128, "experts_per_token": 8,
        "moe_intermediate_size": 768}  # fmt: skip
RUN = make_run(SPEC, parallel={"dp": 16, "ep": 16}, training={"seq_length": 4096})
KIND = body_kind(RUN.spec("m"), 0, RUN.training.dropout)
MOE = KIND.mlp
# the chance a rank holding 8 of the 128 experts gets none of a token's 8: C(120, 8) / C(128, 8)
MISSED = (120 * 119 * 118 * 117 * 116 * 115 * 114 * 113) / (128 * 127 * 126 * 125 * 124 * 123 * 122 * 121)


def test_a_token_reaches_each_rank_once_not_each_expert() -> None:
    assert ranks_reached(128, 8, 16) == pytest.approx(16 * (1 - MISSED))  # ≈ 6.7 ranks, not 8 copies
    # one expert a rank: every expert is its own rank, k ranks; 8 experts top-2: 8·(1 − C(7,2)/C(8,2)) = 2
    assert ranks_reached(8, 2, 8) == pytest.approx(2.0)
    assert ranks_reached(128, 8, 1) == 1.0


def test_group_limited_routing_bounds_the_ranks_a_token_reaches() -> None:
    # moe_utils.py `group_limited_topk` (Megatron-LM cf39a4ddcf, d98e8a64): a token's k experts from its group_topk
    # best groups. 32 experts in 8 groups of 4 on 8 ranks (a group a rank), top-4 groups: its 8 experts among the
    # 16 of 4 ranks, each missed with probability C(12, 8) / C(16, 8) = 495 / 12870: 4 · (1 − 495/12870) = 3.846;
    # unlimited, 8 · (1 − C(28, 8)/C(32, 8)) = 8 · (1 − 3108105/10518300) = 5.636
    assert ranks_reached(32, 8, 8) == pytest.approx(8 * (1 - 3108105 / 10518300))
    assert ranks_reached(32, 8, 8, 8, 4) == pytest.approx(4 * (1 - 495 / 12870))
    # several groups a rank (16 groups of 2 on 8 ranks, top 2 groups): at most 2 ranks
    assert ranks_reached(32, 8, 8, 16, 2) == 2.0
    # a limit of every group limits nothing
    assert ranks_reached(32, 8, 8, 8, 8) == ranks_reached(32, 8, 8)


def test_a_group_straddling_two_ranks_reaches_both() -> None:
    # 6 experts in 3 groups of 2 ({0,1}, {2,3}, {4,5}) on 2 ranks of 3 ({0,1,2}, {3,4,5}), top-2 from 1 group:
    # the middle group's token reaches both ranks, so the limit bounds at 1 group × 2 ranks, not 1 rank; the
    # unlimited mean 2 · (1 − C(3,2)/C(6,2)) = 2 · (1 − 3/15) = 1.6 stands
    assert ranks_reached(6, 2, 2, 3, 1) == pytest.approx(1.6)
    # DeepSeek-V2's 160 experts, 8 groups of 20, on 20 ranks of 8: experts 20..39 sit on ranks 2..4, 3 a group;
    # top-6 from 3 groups: at most 9 ranks, above the unlimited 20 · (1 − C(152,6)/C(160,6))
    unlimited = 20 * (1 - comb(152, 6) / comb(160, 6))
    assert unlimited < 9
    assert ranks_reached(160, 6, 20, 8, 3) == pytest.approx(unlimited)
    # several whole groups a rank keep their bound of one rank a group (16 groups of 2 on 8 ranks, top 2)
    assert ranks_reached(32, 8, 8, 16, 2) == 2.0


def _ops(dispatcher: str, in_kernel: bool = False) -> dict[str, Op]:
    geo = OpGeometry(seq_length=4096, ep=16, ep_nodes=2, dispatcher=dispatcher, flex_in_kernel=in_kernel)
    return {op.name: op for op in moe_ops(KIND, MOE, geo)}


def test_hybridep_sends_a_token_once_a_rank_and_permutes_inside_its_kernels_when_fused() -> None:
    h, tokens = 2048, 4096
    sent = tokens * 16 * (1 - MISSED)  # (token, rank) slots
    unfused = _ops("hybridep")
    # dispatch: one bf16 row a slot over NVLink; across nodes one a remote node reached (flops._remote_nodes:
    # 2·(1 − (1/2)^8) nodes reached, half of them remote)
    dispatch = unfused["dispatch"].forward_comm
    assert dispatch.payload_bytes == pytest.approx(sent * h * 2)
    assert dispatch.inter_node_bytes == pytest.approx(tokens * 2 * (1 - 0.5**8) * 0.5 * h * 2)
    # unfused: HybridEP's own permute reads the slots and writes the 8 expert rows a token, its unpermute back;
    # forward, its metadata scan reads the 16 ranks' gathered routing maps too, a byte a token and expert
    routing_map = tokens * 128 * 16
    assert unfused["permute"].bytes == pytest.approx((sent + tokens * 8) * h * 2 + routing_map)
    assert unfused["unpermute"].bytes == pytest.approx((sent + tokens * 8) * h * 2)
    # metadata scan + permute, and the bf16 probabilities cast to the fp32 HybridEP takes (token_dispatcher.py
    # `_HybridEPManager.dispatch`: `self.token_probs.float()`, 0d8e0714cd and core_v0.17.0); backward the
    # unpermute and the probabilities' gradient cast back
    assert unfused["permute"].launches == (3.0, 2.0)
    fused = _ops("hybridep", in_kernel=True)
    # fused (hybrid_ep_backend.cuh at 94a9f8f): the dispatch kernel's permute blocks copy each chunk as it lands,
    # under the transfer: no pass priced; the combine kernel's unpermute blocks still read the 8 expert rows a
    # token and write its slots before the combine sends them: the unfused unpermute's bytes, each direction
    # (the permute's backward is `combine_with_unpermute`, the unpermute's `dispatch_with_permute`)
    assert fused["permute"].bytes == routing_map and fused["unpermute"].backward_bytes == 0
    assert fused["unpermute"].bytes == pytest.approx((sent + tokens * 8) * h * 2)
    assert fused["permute"].backward_bytes == pytest.approx((sent + tokens * 8) * h * 2)
    assert fused["permute"].launches == (2.0, 1.0)  # the metadata scan and the cast
    assert fused["unpermute"].launches == (0.0, 0.0)  # inside the combine kernel
    # NCCL EP's kernels read and write the expert rows themselves: no pass either way
    ncclep = _ops("ncclep", in_kernel=True)
    assert ncclep["permute"].bytes == ncclep["permute"].backward_bytes == 0
    assert ncclep["unpermute"].bytes == ncclep["unpermute"].backward_bytes == 0
    # --moe-router-dtype fp32: the probabilities are fp32 already, no cast
    geo = OpGeometry(seq_length=4096, ep=16, ep_nodes=2, dispatcher="hybridep", router_bytes=4)
    fp32 = {op.name: op for op in moe_ops(KIND, MOE, geo)}
    assert fp32["permute"].launches == (2.0, 1.0)
    # the alltoall dispatcher sends every routed copy: 8 a token
    assert _ops("alltoall")["dispatch"].forward_comm.payload_bytes == pytest.approx(tokens * 8 * h * 2 + tokens * 8 * 2)


def test_the_backends_take_their_own_sms() -> None:
    # HybridEP's Configurer (config.cuh): 24 within one NVLink domain, 8 across; fused, the permute blocks
    # take min(108, 132 − 24) = 108 more of an H100's 132
    assert flex_sms("hybridep", None, 1, 132, False) == 24
    assert flex_sms("hybridep", None, 2, 132, False) == 8
    assert flex_sms("hybridep", None, 1, 132, True) == 132
    assert flex_sms("hybridep", 16, 1, 132, True) == 16 + 108
    assert flex_sms("deepep", None, 2, 132, False) == 20  # `_DeepepManager.__init__`: else 20
    assert flex_sms("ncclep", None, 1, 132, False) == 0  # NCCL's own choice: the device's NCCL share
    assert flex_sms("ncclep", 12, 1, 132, False) == 12
    # the combine direction: fused, its unpermute blocks end after their local pass (no peer flag polled,
    # `unpermute_G2S_warp_group_device_function`), the transfer keeps the combine API's own SMs
    assert flex_sms("hybridep", 16, 1, 132, True, combine=True) == 16
    assert flex_sms("hybridep", None, 2, 132, True, combine=True) == 8


def test_a_runs_geometry_carries_its_backends_sms() -> None:
    # EP 16 over two 8-GPU nodes: HybridEP's across-domain default, 8; the recipes' 32 where stated; fused on an
    # H100 (132 SMs): 24 + min(108, 132 − 24); alltoall: none of its own (NCCL's share)
    def sms(**timing) -> int:
        return OpGeometry.from_run(make_run(SPEC, parallel={"dp": 16, "ep": 16}, timing=timing)).flex_sms

    assert sms(moe_dispatcher="hybridep") == 8
    assert sms(moe_dispatcher="hybridep", moe_flex_dispatcher_num_sms=32) == 32
    assert sms(moe_dispatcher="hybridep", moe_flex_dispatcher_num_sms=24, moe_permute_fusion_into_hybridep=True) == 132
    assert sms(moe_dispatcher="alltoall") == 0
    fused_timing = {
        "moe_dispatcher": "hybridep",
        "moe_flex_dispatcher_num_sms": 32,
        "moe_permute_fusion_into_hybridep": True,
    }
    fused = OpGeometry.from_run(make_run(SPEC, parallel={"dp": 16, "ep": 16}, timing=fused_timing))
    assert (fused.flex_sms, fused.flex_combine_sms) == (32 + 100, 32)  # min(108, 132 − 32) = 100 permute blocks


def test_fused_hybridep_holds_its_permute_blocks_only_in_the_dispatch_direction() -> None:
    # the dispatch kernel (the dispatch, the combine's backward: `HybridEPCombine.backward` calls
    # `dispatch_with_permute`) holds 32 + 100 SMs; the combine kernel (the combine, the dispatch's backward) 32
    geo = OpGeometry(seq_length=4096, ep=16, ep_nodes=2, dispatcher="hybridep", flex_in_kernel=True,
                     flex_sms=132, flex_combine_sms=32)  # fmt: skip
    ops = {op.name: op for op in moe_ops(KIND, MOE, geo)}
    assert ops["dispatch"].forward_comm.sms == 132 and ops["combine"].backward_comm.sms == 132
    assert ops["combine"].forward_comm.sms == 32 and ops["dispatch"].backward_comm.sms == 32


def test_hybridep_dispatch_waits_for_its_counts_as_deepeps() -> None:
    ops = [Op("moe.router_topk", "moe", "memory"), Op("moe.permute", "moe", "memory"),
           Op("moe.dispatch", "moe", "comm"), Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
           Op("moe.unpermute", "moe", "memory")]  # fmt: skip
    forward = {"moe.router_topk": 1.0, "moe.permute": 0.0, "moe.dispatch": 1.0, "moe.experts_in": 2.0,
               "moe.unpermute": 0.0}  # fmt: skip
    # resumed at the dispatch from an idle GPU; the flex dispatcher permutes after the dispatch
    # (`MoEFlexTokenDispatcher.dispatch_postprocess`), so six launches at 1.5, 3, ..., 9: the dispatch, the
    # permutation, the two GEMMs, unpermute, the next layer's router (its permutation follows its own wait).
    # The GPU work launched before the last one: the dispatch's 1 s and the GEMMs' 2: it waits 9 − 3 = 6
    for backend in ("deepep", "hybridep", "ncclep"):
        wait = dispatcher_wait_s(ops, forward, 1.5, dropless=True, wrap=True, dispatcher=backend)
        assert wait == pytest.approx(6.0)


def test_hybridep_buffers_are_counted_per_rank() -> None:
    setup = MemorySetup(seq_length=4096, micro_batch_size=1, dtype_bytes=2, ep=16, moe_dispatcher="hybridep")
    # T 4096, G 16 ranks, R 8 a domain, N 2 domains, L 8 local experts, h 2048
    nvlink = 4096 * 16 * (2048 * 2 + 8 * 8 * 4 + 2048 // 128 * 4)  # tokens, fp32 probs, fp32 scales
    dispatch = 4096 * (2048 * 2 + 8 * 8 * 4 * 2 + 16 * 4) + 4096 * (2048 * 2 + 8 * 8 * 4 + 16 * 4)
    combine = 2 * 4096 * (2048 * 2 + 8 * 8 * 4)
    assert hybridep_buffer_bytes(setup, [KIND]) == nvlink + dispatch + combine  # 362,283,008 B ≈ 345 MiB
    # at most 512 tokens (padded up: config.cuh), within one domain no RDMA buffers
    small = MemorySetup(seq_length=128, micro_batch_size=1, dtype_bytes=2, ep=8, moe_dispatcher="hybridep")
    assert hybridep_buffer_bytes(small, [KIND]) == 512 * 8 * (2048 * 2 + 16 * 8 * 4 + 16 * 4)
    assert hybridep_buffer_bytes(MemorySetup(seq_length=4096, ep=16, moe_dispatcher="deepep"), [KIND]) == 0


def test_deepeps_buffer_follows_its_size_hints() -> None:
    # Megatron's get_buffer: hidden bytes 2·2048; G 16: dispatch Config(20, 36, 288, 20, 128), combine
    # Config(20, 4, 288, 12, 128): receive chunks 288 (NVLink) and 128 (RDMA); 20 SMs: 10 channels, 8 peers,
    # 2 RDMA ranks. A token's slot: 4096 + 8 (SourceMeta) + 128·8 + 128·4 (top-k) + 128·4 (scales) = 6152 B.
    nvl = 10 * 8 * ((2 * 2 + 3) * 4 + 288 * 6152)  # 141,744,320, to 128 B: 141,744,384
    rdma = 10 * 2 * ((8 * 2 + 2) * 2 * 4 + 2 * 128 * (6152 + 16))  # 31,583,040, to 128 B: 31,583,104
    assert (nvl, rdma) == (141_744_320, 31_583_040)
    setup = MemorySetup(seq_length=4096, dtype_bytes=2, ep=16, moe_dispatcher="deepep")
    assert deepep_buffer_bytes(setup, [KIND]) == 141_744_384 + 31_583_104
    # 40 SMs: twice the channels
    wider = MemorySetup(seq_length=4096, dtype_bytes=2, ep=16, moe_dispatcher="deepep", flex_num_sms=40)
    assert deepep_buffer_bytes(wider, [KIND]) == 283_488_640 + 63_166_080
    # one node (G 8): no RDMA buffer; G 12 is not in DeepEP's table (it asserts): nothing counted
    eight = MemorySetup(seq_length=4096, dtype_bytes=2, ep=8, moe_dispatcher="deepep")
    nvl = 10 * 8 * ((2 * 1 + 3) * 4 + 256 * 6152)  # 125,994,560, to 128 B: 125,994,624
    assert nvl == 125_994_560 and deepep_buffer_bytes(eight, [KIND]) == 125_994_624
    assert deepep_buffer_bytes(MemorySetup(seq_length=4096, ep=12, moe_dispatcher="deepep"), [KIND]) == 0


@pytest.mark.parametrize(
    ("parallel", "framework", "timing", "field"),
    [
        ({"dp": 16, "ep": 16}, "torchtitan", {"moe_dispatcher": "hybridep"}, "timing.moe_dispatcher"),
        ({"dp": 16}, None, {"moe_dispatcher": "ncclep"}, "timing.moe_dispatcher"),  # asserts TP×EP > 1
        (
            {"dp": 16, "ep": 16},
            None,
            {"moe_permute_fusion_into_hybridep": True},
            "timing.moe_permute_fusion_into_hybridep",
        ),
        ({"dp": 16, "ep": 16}, None, {"moe_flex_dispatcher_num_sms": 16}, "timing.moe_flex_dispatcher_num_sms"),
        (
            {"dp": 16, "ep": 16},
            None,
            {"moe_dispatcher": "hybridep", "moe_flex_dispatcher_num_sms": 200},  # config.cuh asserts ≤ SMs
            "timing.moe_flex_dispatcher_num_sms",
        ),
    ],
)
def test_what_megatron_refuses_is_refused(parallel, framework, timing, field) -> None:
    with pytest.raises(InputError) as caught:
        make_run(SPEC, parallel=parallel, training={"seq_length": 4096}, framework=framework, timing=timing)
    assert caught.value.field == field


def test_the_import_reads_the_backends_words() -> None:
    text = MOE_MLA.replace(
        "--moe-token-dispatcher-type alltoall",
        "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-permute-fusion-into-hybridep "
        "--moe-hybridep-pad-uneven-dispatch-inputs --moe-hybridep-num-sms 16",
    )
    timing = import_megatron(text, 8, "h100-80gb").raw["timing"]
    assert timing["moe_dispatcher"] == "hybridep"
    assert timing["moe_permute_fusion_into_hybridep"] and timing["moe_hybridep_pad_uneven_dispatch_inputs"]
    assert timing["moe_flex_dispatcher_num_sms"] == 16  # the deprecated knob routed (__post_init__)
    # transformer_config.py __post_init__: "Only one backend is supported for flex token dispatcher."
    both = text.replace("--moe-hybridep-num-sms 16", "--moe-enable-deepep")
    with pytest.raises(InputError) as caught:
        import_megatron(both, 8, "h100-80gb")
    assert caught.value.field == "--moe-enable-deepep"
    # two different deprecated SM counts: "Conflicting deprecated SM-count knobs"
    clash = text.replace("--moe-hybridep-num-sms 16", "--moe-hybridep-num-sms 16 --moe-deepep-num-sms 20")
    with pytest.raises(InputError):
        import_megatron(clash, 8, "h100-80gb")


def _fp8_run(dispatcher: str, release: str | None = None, **moe: object) -> RunConfig:
    run = make_run(
        SPEC,
        parallel={"dp": 16, "ep": 16},
        training={"seq_length": 4096, "moe": moe} if moe else {"seq_length": 4096},
        timing={"matmul_dtype": "fp8", "fp8_recipe": "tensorwise", "moe_dispatcher": dispatcher},
    )
    if release is None:
        return run
    return run.model_copy(update={"framework_release": FrameworkRelease(megatron_core=release)})


def test_megatrons_deepep_dispatches_bf16_under_fp8_deepseeks_own_recipe_fp8() -> None:
    # fused_a2a.py `FusedDispatch.forward` (core_r0.16.0 55ac708251, d98e8a64) hands DeepEP the tokens as
    # `MoELayer.dispatch` gets them, the pre-MLP norm's BF16 output: no FP8 on the wire under Megatron's FP8
    # GEMMs. DeepSeek-V3 report §3.3.3: its own framework dispatches in FP8 (and the gradient before the
    # down-projections), the combine in BF16. EP 16 over two 8-GPU nodes, 4096 tokens, h 2048, top 8 of 128:
    # a token reaches 16·(1 − MISSED) ranks and 2·(1 − (1/2)^8)·(1/2) remote nodes.
    h, tokens = 2048, 4096
    sent = tokens * 16 * (1 - MISSED)
    remote = tokens * 2 * (1 - 0.5**8) * 0.5

    def comms(run: RunConfig) -> tuple[Collective, Collective, Collective]:
        ops = {op.name: op for op in moe_ops(KIND, MOE, OpGeometry.from_run(run))}
        return ops["dispatch"].forward_comm, ops["dispatch"].backward_comm, ops["combine"].backward_comm

    megatron = _fp8_run("deepep")
    for comm in comms(megatron):  # 2 bytes an element, each way
        assert comm.payload_bytes == pytest.approx(sent * h * 2)
        assert comm.inter_node_bytes == pytest.approx(remote * h * 2)
    deepseek = megatron.model_copy(update={"training": megatron.training.model_copy(update={"fp8_cache": "deepseek"})})
    dispatch, dispatch_back, combine_back = comms(deepseek)
    assert dispatch.payload_bytes == pytest.approx(sent * h)  # FP8: 1 byte
    assert combine_back.inter_node_bytes == pytest.approx(remote * h)  # the gradient before the down-projection
    assert dispatch_back.payload_bytes == pytest.approx(sent * h * 2)  # the combine's BF16 in reverse


def test_te_grouped_mlp_pads_its_fp8_rows_unless_the_dispatcher_aligned_them() -> None:
    # experts.py `TEGroupedMLP.forward` (0d8e0714cd, core_v0.17.0): under FP8 `quantization_padding` (TE's
    # Fp8Padding) on the permuted rows and on their probabilities (the latter since the experts weight their
    # own activations, core 0.13), `quantization_unpadding` on the output; HybridEP's dispatch pads to the
    # alignment itself (`pad_multiple`), DeepEP's permutation from 554ce493e3 (core 0.17).
    assert expert_fp8_pads(_fp8_run("alltoall")) == 2
    assert expert_fp8_pads(_fp8_run("alltoall", "core_r0.12.0")) == 1
    assert expert_fp8_pads(_fp8_run("hybridep")) == 0
    assert expert_fp8_pads(_fp8_run("deepep", "core_v0.16.0")) == 2
    assert expert_fp8_pads(_fp8_run("deepep", "core_v0.17.0")) == 0
    assert expert_fp8_pads(_fp8_run("alltoall", None, grouped_gemm=False)) == 0  # a SequentialMLP: no Fp8Padding
    assert expert_fp8_pads(RUN) == 0  # BF16
    # the ops: the pads before the experts' first GEMM, the unpad after their last; each copies the rows
    # (read and write, bf16): 4096 tokens · 8 = 32768 rows of 2048: 2 · 32768 · 2048 · 2 = 268435456 bytes each
    # way; the fp32 probabilities 2 · 32768 · 4 = 262144
    geo = OpGeometry(seq_length=4096, ep=16, ep_nodes=2, dispatcher="alltoall", expert_fp8_pads=2)
    ops = moe_ops(KIND, MOE, geo)
    names = [op.name for op in ops]
    assert names.index("experts_pad") < names.index("experts_pad_probs") < names.index("experts_in")
    assert names.index("experts_out") < names.index("experts_unpad") < names.index("combine")
    table = {op.name: op for op in ops}
    assert table["experts_pad"].bytes == pytest.approx(268435456.0)
    assert table["experts_pad"].backward_bytes == pytest.approx(268435456.0)
    assert table["experts_pad_probs"].bytes == pytest.approx(262144.0)
    assert table["experts_unpad"].bytes == pytest.approx(268435456.0)
    # each a TE module's call: one kernel each way, a launch (not a plain PyTorch op's share)
    launches = layer_launches(
        ops, tp=1, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True, plain_share=0.4
    )
    for name in ("experts_pad", "experts_pad_probs", "experts_unpad"):
        assert launches[name] == (1.0, 1.0)
    assert "experts_pad" not in {op.name for op in moe_ops(KIND, MOE, dataclasses.replace(geo, expert_fp8_pads=0))}


def test_hybridep_takes_its_kernels_measured_rate_inside_an_nvlink5_domain() -> None:
    # DeepEP hybrid-ep 6ad6896, Hybrid-EP_Intra-node_Implementation.md, "GB200 Platform", kernel only, GB/s
    # (BF16 dispatch, combine): 8 ranks at 32 SMs 764.03 / 737.13, at 16 SMs 750.15 / 684.27; 36 ranks at 32 SMs
    # 632.31 / 596.99
    assert hybridep_rates("b200", 8, 32, False) == (764.03e9, 737.13e9)
    assert hybridep_rates("gb300", 8, 24, False) == (750.15e9, 684.27e9)  # 24 SMs: the 16-SM figures
    assert hybridep_rates("gb200", 64, 32, False) == (632.31e9, 596.99e9)  # past 36 ranks: 36's
    assert hybridep_rates("gb200", 20, 32, False) == (706.95e9, 666.26e9)  # 20 ranks: 16's
    # not measured: NVLink 4, fewer than 16 SMs, the permute fused into the kernels, fewer than 8 ranks
    assert hybridep_rates("h100-80gb", 8, 32, False) == ()
    assert hybridep_rates("b200", 8, 8, False) == ()
    assert hybridep_rates("b200", 8, 32, True) == ()
    assert hybridep_rates("b200", 4, 32, False) == ()


def test_a_hybridep_all_to_all_in_one_domain_moves_every_row_at_that_rate() -> None:
    # Qwen3 30B-A3B's shape on 8 B200, EP 8, HybridEP on the recipes' 32 SMs: the geometry carries the 8-rank
    # 32-SM rates; over two 8-GPU H100 nodes none (across domains, and no NVLink-4 figure)
    run = make_run(SPEC, parallel={"dp": 8, "ep": 8}, training={"seq_length": 4096}, device={"name": "b200"},
                   timing={"moe_dispatcher": "hybridep", "moe_flex_dispatcher_num_sms": 32})  # fmt: skip
    geo = OpGeometry.from_run(run)
    assert geo.hybridep_rates == (764.03e9, 737.13e9)
    across = make_run(SPEC, parallel={"dp": 16, "ep": 16}, timing={"moe_dispatcher": "hybridep"})
    assert OpGeometry.from_run(across).hybridep_rates == ()
    ops = {op.name: op for op in moe_ops(KIND, MOE, geo)}
    # the dispatch's combine kernel backward, the combine's dispatch kernel (fused_a2a.py HybridEPDispatch /
    # HybridEPCombine backward)
    dispatch, combine = ops["dispatch"], ops["combine"]
    assert dispatch.forward_comm.algorithm_bytes_per_s == 764.03e9
    assert dispatch.backward_comm.algorithm_bytes_per_s == 737.13e9
    assert combine.forward_comm.algorithm_bytes_per_s == 737.13e9
    assert combine.backward_comm.algorithm_bytes_per_s == 764.03e9
    # 4096 tokens, each to 8·(1 − C(112, 8)/C(128, 8)) = 5.339 of 8 ranks holding 16 experts each, a bf16 row of
    # 2048: 4096 · 5.339 · 4096 B = 89.58 MB, over 764.03 GB/s: 0.1172 ms (its own row included, no NCCL steps)
    missed = (112 * 111 * 110 * 109 * 108 * 107 * 106 * 105) / (128 * 127 * 126 * 125 * 124 * 123 * 122 * 121)
    reached = 8 * (1 - missed)
    payload = 4096 * reached * 2048 * 2
    assert dispatch.forward_comm.payload_bytes == pytest.approx(payload)
    links = Links.from_run(run)
    assert collective_seconds(dispatch.forward_comm, links) == pytest.approx(payload / 764.03e9)
    assert collective_seconds(dispatch.forward_comm, links) == pytest.approx(0.1172e-3, rel=1e-3)
    # without a measured rate, NCCL's all-to-all: 7/8 of it at the 8-rank share nccl-tests measured on B200
    # (aiconfigurator's alltoall_perf: 2·2^28 B / 0.83417 ms · 7/8 = 563.1 GB/s of 900, 0.626), 7 steps of 5 us
    plain = Collective(ALL_TO_ALL, "ep", payload, "ep")
    assert collective_seconds(plain, links) == pytest.approx(payload * 7 / 8 / (0.626 * 900e9) + 7 * 5e-6)
    # a flex backend's own kernels with no measured rate (DeepEP's) are not NCCL's: the link at 0.802
    kernels = Collective(ALL_TO_ALL, "ep", payload, "ep", flex_backend=True)
    assert collective_seconds(kernels, links) == pytest.approx(payload * 7 / 8 / (0.802 * 900e9) + 7 * 5e-6)


def test_hybridep_gathers_every_ranks_routing_map_before_its_scan() -> None:
    # hybrid-ep 7febc6e and 94a9f8f, executor.cu `allgather_routing_map`: each forward dispatch (no handle yet)
    # gathers the [tokens, experts] bool routing maps of its group, one NVLink domain by its own kernel
    # (extension/allgather.cu `ag_nvl_kernel`: one shot, every peer's buffer written at once), then the metadata
    # scan reads the gathered map. Qwen3 30B-A3B's shape, EP 8 on one B200 node: 4096 tokens × 128 experts =
    # 524,288 B a rank, 8 ranks: 4,194,304 B gathered; 7/8 of it arrives over NVLink 5 at 0.802 · 900 GB/s
    # (the NCCL share the all-to-all test above uses), one step's 5 us: 3,670,016 B / 721.8 GB/s = 5.085 us + 5 us.
    run = make_run(SPEC, parallel={"dp": 8, "ep": 8}, training={"seq_length": 4096}, device={"name": "b200"},
                   timing={"moe_dispatcher": "hybridep", "moe_flex_dispatcher_num_sms": 32})  # fmt: skip
    ops = {op.name: op for op in moe_ops(KIND, MOE, OpGeometry.from_run(run))}
    gather = ops["dispatch_map"].forward_comm
    assert gather.payload_bytes == 4096 * 128 * 8 == 4_194_304
    assert ops["dispatch_map"].backward_comm is None  # the backward reuses the forward's handle
    seconds = collective_seconds(gather, Links.from_run(run))
    assert seconds == pytest.approx(4_194_304 * 7 / 8 / (0.802 * 900e9) + 5e-6)
    assert seconds == pytest.approx(10.085e-6, rel=1e-3)
    # the scan reads it once, beside the permute's own pass; the other dispatchers gather no map
    plain = {
        op.name: op for op in moe_ops(KIND, MOE, dataclasses.replace(OpGeometry.from_run(run), dispatcher="deepep"))
    }
    assert "dispatch_map" not in plain and "dispatch_map" not in _ops("alltoall")
    assert ops["permute"].bytes == pytest.approx(plain["permute"].bytes + 4_194_304)
    # across two 8-GPU H100 nodes (EP 16), NCCL's ring all-gather: 15 steps
    across = _ops("hybridep")["dispatch_map"].forward_comm
    assert across.payload_bytes == 4096 * 128 * 16


def test_hybridep_gathers_the_maps_with_nccl_where_its_custom_allgather_is_off() -> None:
    # hybrid-ep 7febc6e (the Megatron-LM MoE recipes' pin) and 94a9f8f: deep_ep/hybrid_ep_buffer.py
    # `HybridEPBuffer.__init__(enable_custom_allgather=False)`, which Megatron's `init_hybrid_ep_buffer` never sets,
    # and executor.cu `allgather_routing_map`: `if (config.num_of_nodes > 1 || !enable_custom_allgather)` NCCL's
    # `all_gather_into_tensor`. The test above's map (EP 8 on one B200 node, 4,194,304 B gathered) then moves as
    # NCCL's ring: 7/8 of it at B200's measured 8-rank all-gather share of 900 GB/s (0.683, `nccl_gather_shares`)
    # and 7 steps of 5 us: 3,670,016 B / 614.7 GB/s = 5.971 us + 35 us = 40.971 us.
    timing = {"moe_dispatcher": "hybridep", "moe_flex_dispatcher_num_sms": 32, "hybridep_custom_allgather": False}
    run = make_run(SPEC, parallel={"dp": 8, "ep": 8}, training={"seq_length": 4096}, device={"name": "b200"},
                   timing=timing)  # fmt: skip
    gather = {op.name: op for op in moe_ops(KIND, MOE, OpGeometry.from_run(run))}["dispatch_map"].forward_comm
    assert gather.payload_bytes == 4_194_304 and gather.method is None
    seconds = collective_seconds(gather, Links.from_run(run))
    assert seconds == pytest.approx(4_194_304 * 7 / 8 / (0.683 * 900e9) + 7 * 5e-6)
    assert seconds == pytest.approx(40.971e-6, rel=1e-4)
    # the switch is HybridEP's alone
    with pytest.raises(InputError, match=r"timing\.hybridep_custom_allgather"):
        make_run(SPEC, parallel={"dp": 8, "ep": 8}, device={"name": "b200"},
                 timing={"moe_dispatcher": "deepep", "hybridep_custom_allgather": True})  # fmt: skip


def test_hybridep_across_h100_nodes_takes_its_measured_ib_rate_a_leaving_byte() -> None:
    # DeepEP hybrid-ep 1dddd19, Hybrid-EP_Implementation.md, "H100 Platform", kernel only, IB GB/s counted with the
    # local node's copies (tests/utils.py count_rdma_send_from_routing_map): 16 ranks at 16 SMs 71.71 / 62.95; over
    # two nodes half the counted copies leave: 35.855 / 31.475 GB/s a leaving byte
    assert hybridep_ib_rates("h100-80gb", 16, 32, False, 2) == pytest.approx((35.855e9, 31.475e9))
    # 64 ranks over 8 nodes at 8 SMs: 50.55 / 51.03 counted, 7/8 of them leaving
    assert hybridep_ib_rates("h100-80gb", 64, 8, False, 8) == pytest.approx((50.55e9 * 7 / 8, 51.03e9 * 7 / 8))
    assert hybridep_ib_rates("b200", 16, 32, False, 2) == ()  # not measured across B200 nodes
    assert hybridep_ib_rates("h100-80gb", 16, 32, False, 1) == ()
    # Qwen3 30B-A3B's shape at EP 16 over two 8-GPU H100 nodes, the recipe's 32 SMs
    run = make_run(SPEC, parallel={"dp": 16, "ep": 16}, training={"seq_length": 4096},
                   timing={"moe_dispatcher": "hybridep", "moe_flex_dispatcher_num_sms": 32})  # fmt: skip
    geo = OpGeometry.from_run(run)
    assert geo.hybridep_rates == () and geo.hybridep_ib_rates == pytest.approx((35.855e9, 31.475e9))
    dispatch = {op.name: op for op in moe_ops(KIND, MOE, geo)}["dispatch"]
    assert dispatch.forward_comm.inter_node_bytes_per_s == pytest.approx(35.855e9)
    assert dispatch.backward_comm.inter_node_bytes_per_s == pytest.approx(31.475e9)
    # 4096 tokens reach 2·(1 − 0.5^8) = 1.9922 nodes, half of them remote: 4096 · 0.99609 · 4096 B = 16.71 MB leave,
    # at 35.855 GB/s 0.4661 ms; NVLink's side, 6.5965 of 16 ranks' rows a token (1 − C(120, 8)/C(128, 8) = 0.41228
    # each), 7 of them local: 4096 · 6.5965 · 4096 / 16 · 7 B over 0.8 · 450 GB/s = 0.1345 ms; the slower one, then
    # 15 steps of 5 + 5 us (NVLink's and the node's latency)
    leaving = 4096 * 2 * (1 - 0.5**8) * 0.5 * 2048 * 2
    intra = 4096 * 16 * (1 - MISSED) * 2048 * 2 / 16 * 7 / (0.8 * 450e9)
    links = Links.from_run(run)
    assert collective_seconds(dispatch.forward_comm, links) == pytest.approx(
        max(intra, leaving / 35.855e9) + 15 * 10e-6
    )
    assert leaving / 35.855e9 == pytest.approx(0.4661e-3, rel=1e-3) and intra == pytest.approx(0.1345e-3, rel=1e-3)


def test_the_busiest_ranks_share_reaches_the_passes_where_tokens_land() -> None:
    # the busiest EP rank receives 1.5× its share (training.moe.dropless_imbalance 1.5): every rank waits for it
    # at the all-to-all, so its received slots set the dispatch's bytes and its expert rows the GEMMs'
    h, tokens, r = 2048, 4096, 1.5
    sent = tokens * 16 * (1 - MISSED)
    for dispatcher in ("deepep", "hybridep"):
        geo = OpGeometry(seq_length=4096, ep=16, ep_nodes=2, dispatcher=dispatcher, routing_factor=r)
        ops = {op.name: op for op in moe_ops(KIND, MOE, geo)}
        assert ops["dispatch"].forward_comm.payload_bytes == pytest.approx(r * sent * h * 2)
        # the flex permute runs where the slots land (token_dispatcher.py MoEFlexTokenDispatcher.dispatch_postprocess,
        # d98e8a64): it reads the busiest rank's 1.5·sent slots and writes its 1.5·tokens·8 expert rows; HybridEP's
        # scan reads the 16 ranks' routing maps, a byte a token and expert whatever the routing
        scan = tokens * 128 * 16 if dispatcher == "hybridep" else 0
        assert ops["permute"].bytes == pytest.approx(r * (sent + tokens * 8) * h * 2 + scan)
        assert ops["unpermute"].bytes == pytest.approx(r * (sent + tokens * 8) * h * 2)
    # the alltoall dispatcher permutes a rank's own tokens before sending (dispatch_preprocess): 2·4096·8 rows of
    # h bf16 whatever the routing; its sort by local expert (dispatch_postprocess, 128 experts over 16 ranks) runs
    # on the received rows: 2·rows·(h·2 + 2 bytes of probability), rows = 4096·8·1.5
    geo = OpGeometry(seq_length=4096, ep=16, ep_nodes=2, dispatcher="alltoall", routing_factor=r)
    ops = {op.name: op for op in moe_ops(KIND, MOE, geo)}
    rows = tokens * 8 * r
    assert ops["permute"].bytes == pytest.approx(2 * tokens * 8 * h * 2 + 2 * rows * (h * 2 + 2))
    # experts_in: 2·rows·h·2·768 (gate and up) on the busiest rank
    assert ops["experts_in"].flops == pytest.approx(2 * rows * 2048 * 2 * 768)
