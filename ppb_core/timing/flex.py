"""Megatron-Core's flex token dispatcher (`--moe-token-dispatcher-type flex`) and its three backends,
`--moe-flex-dispatcher-backend deepep | hybridep | ncclep` (megatron/core/transformer/moe/token_dispatcher.py
`MoEFlexTokenDispatcher`, `_DeepepManager`, `_HybridEPManager`, `_NCCLEPManager`; fused_a2a.py; Megatron-LM
d98e8a64; HybridEP: deepseek-ai/DeepEP branch hybrid-ep at 94a9f8f).

* **A token travels once to each rank that holds one of its experts, not once per expert.** DeepEP's
  `get_dispatch_layout` marks the ranks a token is in (`is_token_in_rank`) and its dispatch sends one row
  to each; HybridEP's dispatch writes one row per (token, destination rank) into the receiving rank's
  buffer (csrc/hybrid_ep/buffer/intranode.cu `NVLCoordinator`: `max_num_of_tokens` = tokens per rank ×
  ranks, one slot per source token and rank), and its combine returns one reduced row per (token, rank).
  With k experts picked uniformly among E over ep ranks a token reaches ep·(1 − C(E − E/ep, k)/C(E, k))
  ranks (`ranks_reached`), fewer than k copies when several of its experts share a rank; group-limited
  routing (`--moe-router-num-groups`, `--moe-router-group-topk`) reaches fewer still.
* **Across nodes, one copy per destination NVLink domain.** DeepEP's internode kernels and HybridEP's
  RDMA stage (`RDMACoordinator`: `rdma_inter_node_group_token` of max tokens × (nodes − 1) rows) send a
  token once to each remote domain, NVLink forwarding it there (`flops._remote_nodes`). HybridEP's
  "node" is the NVLink domain it detects (hybrid_ep_buffer.py `detect_accessible_ranks`, MNNVL on GB200):
  ppb's `parallel.devices_per_node`. NCCL EP's high-throughput backend is HybridEP's algorithm inside
  NCCL (`_NCCLEPManager._ensure_bootstrap`: "NCCL EP's HT backend ... nccl_ep device/hybridep_adapter.cu").
* **The permutation.** DeepEP's rows are permuted by Megatron after the dispatch (`_DeepepManager.
  get_permuted_hidden_states_by_instances`, TE's permute). HybridEP permutes inside `dispatch_with_permute`
  and unpermutes inside `combine_with_unpermute`; Megatron's own permute and unpermute are pass-throughs
  (`_HybridEPManager.get_permuted_hidden_states_by_experts`). Unfused (Megatron's default,
  `moe_permute_fusion_into_hybridep` False) they are HybridEP's own kernels (csrc/hybrid_ep/extension/
  permute.cu): the permute reads the received slots and writes the expert-major rows, the unpermute reads
  the rows and writes each token's reduced slot, the weighted sum across ranks done by the combine kernel.
  Fused (`--moe-permute-fusion-into-hybridep`), the same passes run as extra blocks of the dispatch and
  combine kernels (csrc/hybrid_ep/backend/hybrid_ep_backend.cuh at 94a9f8f, `permute_G2S_warp_group_
  device_function` / `unpermute_G2S_warp_group_device_function`; executor.cu `dispatch_postprocess`,
  `combine_preprocess`: no kernel of their own). The dispatch's permute blocks poll each chunk's flag
  (`ld.relaxed.sys`) and copy it from the received slots to the expert rows as it lands: the copy hides
  under the transfer, ppb prices no pass of its own. The combine's unpermute blocks wait on no peer:
  they read the local expert rows, write the slots the combine blocks then send, and end: ppb prices
  their pass as the unfused unpermute's, with no launch of its own. NCCL EP's `ep_dispatch` returns the
  rows expert-major and `ep_combine` reads them (`_NCCLEPManager` docstring): no pass of their own.
* **SMs beside compute.** DeepEP's kernels take `Buffer.set_num_sms` SMs, Megatron's default 20
  (`_DeepepManager.__init__`: `moe_flex_dispatcher_num_sms` else 20). HybridEP's take
  `num_sms_dispatch_api` / `num_sms_combine_api`, default 24 within one NVLink domain and 8 across
  (csrc/hybrid_ep/config.cuh `Configurer`); fused, the permute part runs min(108, SMs − dispatch SMs)
  blocks of one block an SM beside them (`get_default_config(fuse_permute_dispatch)`): nearly the whole
  device while the dispatch's transfer runs (its permute blocks wait for the last chunk), the combine's
  unpermute blocks only for their local pass (`flex_sms` by direction). NCCL EP's default (`max_num_sms`
  0) is NCCL's choice: ppb's device `comm_sms`.
* **The routing maps.** Each forward dispatch (no handle yet; the backward reuses it) HybridEP gathers its group's
  [tokens, experts] bool routing maps before its metadata scan reads them (hybrid_ep.cu `metadata_preprocessing`,
  executor.cu `allgather_routing_map`, hybrid-ep 7febc6e and 94a9f8f): inside one NVLink domain its own one-shot
  kernel (extension/allgather.cu `ag_nvl_kernel`, 32 SMs writing every peer's buffer), across domains NCCL's
  `all_gather_into_tensor` (`flops.moe_ops` `dispatch_map`, `flops.ONE_SHOT`). Megatron's TE graphs of
  `moe_preprocess` hold none of this: HybridEP's `dispatch_preprocess` only reshapes (`graphs.PREPROCESS_OUTSIDE`).
* **Host.** Dropless, HybridEP reads the permuted row count on the host inside the dispatch
  (`num_permuted_tokens` None: "causes a D2H synchronization", fused_a2a.py `hybrid_ep_dispatch`), as
  DeepEP's dispatch waits for its counts and NCCL EP's eager mode sizes its receive buffer from them:
  `host.dispatcher_wait_s` synchronizes all three at the dispatch.
* **Rates.** ppb prices DeepEP's and NCCL EP's all-to-alls, and HybridEP's across NVLink domains or on parts
  where it is not measured, at its NCCL rates: a rank's remote share of the payload, (ep − 1)/ep, over the
  link. HybridEP's own kernels are measured within one NVLink-5 domain (Hybrid-EP_Intra-node_
  Implementation.md at 6ad6896, kept unchanged as docs/README_Hybrid-EP.md to 94a9f8f; "kernel only", random
  uniform routing, top 8, 4096 tokens a rank, hidden 7168, BF16): their "algorithm bandwidth" is every row a
  rank receives, its own included, over the kernel's time (tests/test_mnnvlink_hybridep.py
  `test_intra_node_benchmark` at 6ad6896: `dispatch_bf16_nvl_recv_bytes = dispatched_hidden.numel() * 2`,
  the combine's the same bytes), so a dispatch or combine of P bytes a rank takes P / that rate
  (`hybridep_rates`), its kernel's latency inside, where ppb's NCCL model gave P·(ep − 1)/ep / (0.802 · 900
  GB/s) plus ep − 1 steps of 5 us: at ep 8 about the measured kernels (Qwen3 30B-A3B's 16,384 tokens, 358
  MB: 0.469 ms against 0.469 dispatch and 0.486 combine at 32 SMs), at ep 32 slower (0.155 ms of its 31
  steps' latency, which one kernel does not pay step by step). GB200's table (8 to 36 ranks, 16 and 32 SMs)
  is taken for every NVLink-5 part (`NVLINK5_PARTS`): B200's own figures (8 ranks, 16 SMs: 734.95 / 673.84)
  are within 2% of GB200's (750.15 / 684.27); B300 and GB300 keep the same NVLink 5 (an assumption,
  unmeasured). Each group size takes the figures of the most ranks measured up to it (EP 64: 36's, beyond
  the table), each SM count the figures of the most SMs measured up to it (below 16: none); the permute
  fused into the dispatch (other kernels, unmeasured) none. The measurement's rows are 14 KiB (hidden 7168);
  a model's smaller rows are taken at the same rate (unmeasured). Across nodes the same branch measured
  H100 (Hybrid-EP_Implementation.md at 1dddd19, "H100 Platform", IB bandwidth, kernel only, 16 to 64 ranks of
  8 a node, 4 to 16 SMs): there the bytes are a token's copy to each node it reaches, the local node
  included (tests/utils.py `count_rdma_send_from_routing_map`: "we do not set the local node map to
  zeros"), so of n nodes reached only (n − 1)/n of those bytes leave a node (`hybridep_ib_rates`: the rate
  a leaving byte takes, against ppb's NIC share, 0.94 · 50 GB/s on DGX H100): 16 ranks at 16 SMs 71.71 /
  62.95 GB/s counted, 35.9 / 31.5 a leaving byte over two nodes. The NVLink side inside each node stays
  ppb's.
"""

from __future__ import annotations

from math import comb

FLEX_DISPATCHERS = ("deepep", "hybridep", "ncclep")
DEEPEP_DEFAULT_SMS = 20  # token_dispatcher.py `_DeepepManager.__init__`, d98e8a64
HYBRIDEP_SMS_ONE_DOMAIN = 24  # csrc/hybrid_ep/config.cuh `Configurer`, hybrid-ep 94a9f8f
HYBRIDEP_SMS_ACROSS = 8
HYBRIDEP_FUSED_PERMUTE_BLOCKS = 108  # `get_default_config`: min(108, sm_count − dispatch blocks)
# HybridEP's kernel-only algorithm bandwidth within one NVLink-5 domain, GB/s (module docstring): {SMs: {ranks:
# (BF16 dispatch, combine)}}, deepseek-ai/DeepEP hybrid-ep 6ad6896 Hybrid-EP_Intra-node_Implementation.md, "GB200
# Platform", kernel only.
HYBRIDEP_KERNEL_GBS_NVLINK5 = {
    16: {8: (750.15, 684.27), 16: (661.93, 600.75), 24: (637.80, 565.53), 32: (629.79, 547.25), 36: (612.85, 543.27)},
    32: {8: (764.03, 737.13), 16: (706.95, 666.26), 24: (665.97, 639.80), 32: (642.23, 605.15), 36: (632.31, 596.99)},
}
NVLINK5_PARTS = ("b200", "gb200", "b300", "gb300")
# HybridEP's kernel-only IB algorithm bandwidth on H100 across 8-GPU nodes, GB/s (module docstring): {SMs: {ranks:
# (BF16 dispatch, combine)}}, deepseek-ai/DeepEP hybrid-ep 1dddd19 Hybrid-EP_Implementation.md, "H100 Platform".
HYBRIDEP_IB_GBS_H100 = {
    4: {16: (44.40, 52.00), 32: (52.60, 51.00), 64: (48.00, 46.00)},
    8: {16: (76.80, 68.00), 32: (54.50, 56.40), 64: (50.55, 51.03)},
    16: {16: (71.71, 62.95), 32: (57.69, 57.46), 64: (49.97, 49.77)},
}
HYBRIDEP_IB_PARTS = ("h100-80gb",)


def ranks_reached(experts: int, k: int, ep: int, groups: int = 0, group_limit: int = 0) -> float:
    """Ranks a token's k distinct experts sit on: the mean when they are uniform among *experts* (experts/ep
    on each of *ep* ranks), each rank missed with probability C(E − E/ep, k) / C(E, k); with a group limit the
    smaller of that mean and the limit's bound below. Group-limited routing (Megatron's
    `group_limited_topk`, moe_utils.py at cf39a4ddcf and d98e8a64: the experts in *groups* equal groups of
    consecutive experts, a token's k taken from its *group_limit* best groups) bounds that: where each group
    spans whole ranks (groups dividing ep), the k are among limit·E/groups experts on limit·ep/groups ranks;
    otherwise they reach at most *group_limit* times the ranks one group spans (`_group_span`): one where
    several groups share a rank, two or more where a group straddles ranks (Megatron checks only that the
    groups divide the experts: DeepSeek-V2's 160 experts in 8 groups of 20 on 20 ranks of 8)."""
    if ep <= 1:
        return 1.0
    reached = _uniform_ranks(experts, k, ep)
    if not groups or not 0 < group_limit < groups:
        return reached
    if ep % groups == 0:
        return min(reached, _uniform_ranks(group_limit * experts // groups, k, group_limit * ep // groups))
    return min(reached, float(group_limit * _group_span(experts, groups, ep)))


def _group_span(experts: int, groups: int, ep: int) -> int:
    """The most ranks one group's consecutive experts sit on (experts/ep consecutive experts a rank)."""
    size, local = experts // groups, experts // ep
    return max(((g + 1) * size - 1) // local - (g * size) // local + 1 for g in range(groups))


def _uniform_ranks(experts: int, k: int, ep: int) -> float:
    local = experts // ep
    missed = comb(experts - local, k) / comb(experts, k) if experts - local >= k else 0.0
    return ep * (1.0 - missed)


def in_kernel_permutation(dispatcher: str, fused_into_hybridep: bool) -> bool:
    """Whether the backend's dispatch and combine kernels permute themselves (module docstring)."""
    return dispatcher == "ncclep" or (dispatcher == "hybridep" and fused_into_hybridep)


def flex_sms(
    dispatcher: str, configured: int | None, ep_nodes: int, device_sms: int, fused: bool, combine: bool = False
) -> int:
    """SMs a flex backend's dispatch (or, *combine*, its combine) direction takes beside compute for its
    transfer; 0: the device's NCCL share. Fused HybridEP's permute blocks wait out the dispatch's transfer;
    its unpermute blocks end after their local pass (module docstring), so the combine keeps its own."""
    if dispatcher == "deepep":
        return configured or DEEPEP_DEFAULT_SMS
    if dispatcher == "hybridep":
        sms = configured or (HYBRIDEP_SMS_ONE_DOMAIN if ep_nodes <= 1 else HYBRIDEP_SMS_ACROSS)
        if fused and not combine:
            sms += min(HYBRIDEP_FUSED_PERMUTE_BLOCKS, max(0, device_sms - sms))
        return min(sms, device_sms)
    if dispatcher == "ncclep" and configured:
        return configured
    return 0


def hybridep_rates(device: str, ranks: int, sms: int, fused: bool) -> tuple[float, ...]:
    """(dispatch, combine) bytes/s of HybridEP's kernels for *ranks* within one NVLink domain of *device* on
    *sms* SMs (module docstring): () where not measured (another part, fewer than 16 SMs or 8 ranks, the
    permute fused)."""
    if device not in NVLINK5_PARTS or fused:
        return ()
    return _measured(HYBRIDEP_KERNEL_GBS_NVLINK5, ranks, sms)


def _measured(table: dict[int, dict[int, tuple[float, float]]], ranks: int, sms: int) -> tuple[float, ...]:
    """A measured (dispatch, combine) pair at the most SMs measured up to *sms* and the most ranks up to
    *ranks*, in bytes/s; () below the table."""
    measured_sms = [count for count in table if count <= sms]
    if not measured_sms:
        return ()
    by_ranks = table[max(measured_sms)]
    measured_ranks = [count for count in by_ranks if count <= ranks]
    if not measured_ranks:
        return ()
    dispatch, combine = by_ranks[max(measured_ranks)]
    return dispatch * 1e9, combine * 1e9


def hybridep_ib_rates(device: str, ranks: int, sms: int, fused: bool, nodes: int) -> tuple[float, ...]:
    """(dispatch, combine) bytes/s a byte leaving a node takes in HybridEP's kernels across *nodes* nodes of
    *device* (module docstring): the measured IB algorithm rate over the share of its counted copies that
    leave, (nodes − 1)/nodes; () where not measured."""
    if device not in HYBRIDEP_IB_PARTS or fused or nodes <= 1:
        return ()
    counted = _measured(HYBRIDEP_IB_GBS_H100, ranks, sms)
    return tuple(rate * (nodes - 1) / nodes for rate in counted)
