"""HybridEP's pre-registered communication buffers (Megatron-Core's flex dispatcher, backend hybridep).

Megatron builds one process-wide `HybridEPBuffer` at the first dispatch (fused_a2a.py `init_hybrid_ep_buffer`,
Megatron-LM d98e8a64: `max_num_of_tokens_per_rank` = the layer's input tokens, `num_local_experts`, the hidden
size; a later call needing more reallocates it, so the largest layer's sizes hold). Its sizes follow DeepEP's
hybrid-ep branch (94a9f8f): csrc/hybrid_ep/config.cuh `Configurer` pads the tokens per rank T to at least
512 and up to a multiple of the 64-token combine chunk. With G ranks in the expert-TP × EP group, R of them
in one NVLink domain (`detect_accessible_ranks`; ppb's `parallel.devices_per_node`) and N = G/R domains,
L local experts and hidden size h, each rank holds (use_shared_buffer on, its default: dispatch and combine
share the token and probability buffers):

* NVLink (csrc/hybrid_ep/buffer/intranode.cu `NVLCoordinator`, `max_num_of_tokens` = T·R·N, "all tokens
  routed to the same expert"): the tokens T·G·h·2 bytes (uint16), their probabilities T·G·L·R·4 (fp32)
  and the FP8 scaling factors T·G·(h/128)·4, allocated even in BF16;
* across domains, N > 1 (csrc/hybrid_ep/buffer/internode_doca.cu `RDMACoordinator`): dispatch T·h·2 +
  T·L·R·N·4 + T·(h/128)·4 for the attention-side input and (N − 1)·T·(h·2 + L·R·4 + (h/128)·4) for the
  inter-node group; combine 2·(N − 1)·T·(h·2 + L·R·4) (the intra-node reduction and the inter-node group).

Flags and chunk counters (a few KB) are left out. DeepEP's and NCCL EP's buffers are not counted.
"""

from __future__ import annotations

from collections.abc import Collection

from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import BodyKind, LayerKind, Moe, TailKind

MIN_TOKENS = 512  # config.cuh `Configurer`: std::max(max_num_of_tokens_per_rank, 512)
CHUNK_TOKENS = 64  # NUM_OF_TOKENS_PER_CHUNK_COMBINE_API's default
TOKEN_BYTES, PROB_BYTES, SCALE_BYTES = 2, 4, 4
SCALE_BLOCK = 128  # one fp32 scaling factor per 128 hidden elements


def hybridep_buffer_bytes(setup: MemorySetup, kinds: Collection[LayerKind]) -> float:
    """One rank's HybridEP buffers (module docstring), sized by the largest MoE layer of *kinds*; 0 without
    the hybridep backend or a MoE layer."""
    if setup.moe_dispatcher != "hybridep":
        return 0.0
    shapes = [(kind.hidden_size, moe.num_experts) for kind in kinds for moe in _moes(kind)]
    if not shapes:
        return 0.0
    group = setup.ep * setup.etp
    per_domain = min(group, setup.devices_per_node)
    domains = max(1, group // per_domain)
    tokens = max(setup.whole_tokens, MIN_TOKENS)
    tokens = -(-tokens // CHUNK_TOKENS) * CHUNK_TOKENS
    found = 0.0
    for hidden, experts in shapes:
        local = experts // setup.ep
        probs = local * per_domain * PROB_BYTES
        scales = hidden // SCALE_BLOCK * SCALE_BYTES
        nvlink = tokens * group * (hidden * TOKEN_BYTES + probs + scales)
        rdma = 0.0
        if domains > 1:
            dispatch = tokens * (hidden * TOKEN_BYTES + probs * domains + scales)
            dispatch += (domains - 1) * tokens * (hidden * TOKEN_BYTES + probs + scales)
            combine = 2 * (domains - 1) * tokens * (hidden * TOKEN_BYTES + probs)
            rdma = dispatch + combine
        found = max(found, nvlink + rdma)
    return found


def _moes(kind: LayerKind) -> list[Moe]:
    if isinstance(kind, BodyKind) and isinstance(kind.mlp, Moe):
        return [kind.mlp]
    if isinstance(kind, TailKind) and kind.has_mtp_modules and isinstance(kind.mtp_body.mlp, Moe):
        return [kind.mtp_body.mlp]
    return []
