"""The flex dispatcher backends' pre-registered communication buffers (Megatron-Core's
`--moe-token-dispatcher-type flex`): HybridEP's and DeepEP's, one set a rank.

**HybridEP** (backend hybridep).

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

Flags and chunk counters (a few KB) are left out.

**DeepEP** (backend deepep). Megatron's `get_buffer` (fused_a2a.py, d98e8a64) sizes one `deep_ep.Buffer` for the
expert-TP × EP group of G ranks from the larger of `Buffer.get_dispatch_config(G)` and `get_combine_config(G)`
hints, with hidden bytes h·max(element size, 2) = 2h. DeepEP (deepseek-ai/DeepEP, deep_ep/buffer.py and
csrc/config.hpp `Config::get_nvl_buffer_size_hint` / `get_rdma_buffer_size_hint`, hybrid-ep 94a9f8f) counts,
with c = SMs/2 channels (SMs: `moe_flex_dispatcher_num_sms`, else Megatron's 20), n = min(G, 8) NVLink
peers, r = max(G/8, 1) RDMA ranks, and the config's NVLink and RDMA receive chunks Cn and Cr tokens:

* NVLink: c·n·((2r + 3)·4 + Cn·(2h + 8 + 128·8 + 128·4 + 128·4)) (counters, tokens, source metadata,
  top-k indices and weights, scales), to 128 B;
* RDMA, G > 8: c·r·(18·2·4 + 2·Cr·(2h + 8 + 128·8 + 128·4 + 128·4 + 16)), to 128 B.

A group size missing from DeepEP's table (it asserts) counts nothing. NCCL EP's buffers (Transformer
Engine's) are not counted.
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


# deep_ep/buffer.py `get_dispatch_config` / `get_combine_config`: ranks -> (NVLink, RDMA) receive chunk tokens
DEEPEP_RECEIVE_CHUNKS = {
    2: (256, 128),
    4: (256, 128),
    8: (256, 128),
    16: (288, 128),
    24: (288, 128),
    32: (288, 128),
    64: (288, 128),
    128: (560, 128),
    144: (720, 128),
    160: (720, 128),
}
DEEPEP_DEFAULT_SMS = 20  # token_dispatcher.py `_DeepepManager.__init__`
NVL_PEERS = 8  # csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS
TOPK_SLOTS, SCALE_SLOTS, SOURCE_META_BYTES, INT4_BYTES = 128, 128, 8, 16  # kNumMaxTopK, kNumMaxScales, SourceMeta


def deepep_buffer_bytes(setup: MemorySetup, kinds: Collection[LayerKind]) -> float:
    """One rank's DeepEP buffer (module docstring), sized by the widest MoE layer of *kinds*; 0 without the
    deepep backend, a MoE layer, or a group size in DeepEP's table."""
    group = setup.ep * setup.etp
    hiddens = [kind.hidden_size for kind in kinds for _ in _moes(kind)]
    if setup.moe_dispatcher != "deepep" or not hiddens or group not in DEEPEP_RECEIVE_CHUNKS:
        return 0.0
    nvl_chunk, rdma_chunk = DEEPEP_RECEIVE_CHUNKS[group]
    channels = (setup.flex_num_sms or DEEPEP_DEFAULT_SMS) // 2
    peers, rdma_ranks = min(group, NVL_PEERS), max(group // NVL_PEERS, 1)
    per_token = 2 * max(hiddens) + SOURCE_META_BYTES + TOPK_SLOTS * (8 + 4) + SCALE_SLOTS * 4
    nvl = channels * peers * ((2 * rdma_ranks + 3) * 4 + nvl_chunk * per_token)
    rdma = 0
    if group > NVL_PEERS:
        rdma = channels * rdma_ranks * ((NVL_PEERS * 2 + 2) * 2 * 4 + 2 * rdma_chunk * (per_token + INT4_BYTES))
    return float(_to_128(nvl) + _to_128(rdma))


def flex_buffer_bytes(setup: MemorySetup, kinds: Collection[LayerKind]) -> float:
    """One rank's flex-dispatcher buffers, whichever backend registers them: one sum for the workspace that
    holds them and for what PyTorch's allocator never counts (`ppb_core.memory.allocated.uncounted_bytes`)."""
    return hybridep_buffer_bytes(setup, kinds) + deepep_buffer_bytes(setup, kinds)


def _to_128(size: int) -> int:
    return -(-size // 128) * 128


def _moes(kind: LayerKind) -> list[Moe]:
    if isinstance(kind, BodyKind) and isinstance(kind.mlp, Moe):
        return [kind.mlp]
    if isinstance(kind, TailKind) and kind.has_mtp_modules and isinstance(kind.mtp_body.mlp, Moe):
        return [kind.mtp_body.mlp]
    return []
