"""GEMM library workspaces a CUDA training process takes from PyTorch's caching allocator and keeps.

They are allocated at the first matrix multiply and never freed, so they count in
`torch.cuda.memory_allocated()` at every moment of a stage, once per device (not per layer):

* **PyTorch's cuBLAS workspace** (aten/src/ATen/cuda/CublasHandlePool.cpp,
  `parseChosenWorkspaceSize` and `getNewWorkspace`, PyTorch main of 2026): one per (cuBLAS handle,
  stream), allocated through `CUDACachingAllocator`; `CUBLAS_WORKSPACE_CONFIG` unset, 4096 KiB × 8
  = 32 MiB on compute capability 9, 10 and 12 (Hopper, Blackwell) and 4096 KiB × 2 + 16 KiB × 8
  = 8,519,680 bytes before; set, the sum of its `:SIZE:COUNT` pairs whatever the device
  (`memory.cublas_workspace_config`: Megatron's CI sets `:4096:8`, 32 MiB). cuBLASLt shares it
  (`getCUDABlasLtWorkspaceSize`, unified unless `TORCH_CUBLASLT_UNIFIED_WORKSPACE=0`). Handles are
  per thread (`thread_local` PoolWindow): the forward runs GEMMs on the main thread and autograd's
  backward on its device thread, each with its own handle on the same stream: two workspaces in
  training.
* **Transformer Engine's cuBLAS workspace** (transformer_engine/pytorch/cpp_extensions/gemm.py at
  d0067d0d, `get_cublas_workspace_size_bytes` and `get_cublas_workspace`, cached per device by
  `functools.lru_cache`): 32 MiB + 1 KiB on compute capability 9 and later, 4 MiB before, for
  every TE GEMM (Megatron's default `--transformer-impl transformer_engine`). Its grouped GEMM
  (`general_grouped_gemm`, which `GroupedLinear` runs for Megatron's `TEGroupedMLP` under
  `--moe-grouped-gemm`) takes `get_cublas_workspace(device, False, True)`: one more workspace per
  compute stream, `num_compute_streams = 4` (transformer_engine/common/util/multi_stream.cpp),
  on every rank that runs routed experts. A GEMM overlapped with userbuffers (Megatron's
  `--tp-comm-overlap`: `general_gemm(..., ub=...)`) takes `get_cublas_workspace(device, True, False)`, its
  own `torch.empty` of `_NUM_MAX_UB_STREAMS = 3` such workspaces, on every rank that runs one.
"""

from __future__ import annotations

import math

KIB = 1024
MIB = KIB * KIB
TRAINING_CUBLAS_HANDLES = 2  # the main thread's (forward) and autograd's device thread's (backward)
TE_COMPUTE_STREAMS = 4  # Transformer Engine's grouped-GEMM streams, each with its own workspace
TE_UB_STREAMS = 3  # cpp_extensions/gemm.py `_NUM_MAX_UB_STREAMS`: the userbuffers GEMMs' workspace count


def torch_cublas_workspace_bytes(compute_capability: float) -> int:
    """PyTorch's default cuBLAS workspace of one handle on a device of *compute_capability*."""
    if int(compute_capability) in (9, 10, 12):
        return 4096 * KIB * 8
    return 4096 * KIB * 2 + 16 * KIB * 8


def transformer_engine_workspace_bytes(compute_capability: float) -> int:
    """Transformer Engine's cuBLAS workspace on a device of *compute_capability*."""
    return 32 * MIB + KIB if compute_capability >= 9 else 4 * MIB


def torch_training_workspace_bytes(compute_capability: float, configured_bytes: int = 0) -> int:
    """What PyTorch's GEMMs hold in a training process: one workspace per cuBLAS handle (0 off CUDA),
    each *configured_bytes* where the run sets CUBLAS_WORKSPACE_CONFIG, else the device's default."""
    if compute_capability <= 0:
        return 0
    return TRAINING_CUBLAS_HANDLES * (configured_bytes or torch_cublas_workspace_bytes(compute_capability))


__all__ = [
    "CUDNN_DETERMINISTIC_CAPABILITIES",
    "TE_COMPUTE_STREAMS",
    "TE_UB_STREAMS",
    "torch_cublas_workspace_bytes",
    "torch_training_workspace_bytes",
    "transformer_engine_workspace_bytes",
]


FA2_ROWS = 128  # flash-attn 2's mha_bwd rounds the queries to a multiple of 128 (`seqlen_q_rounded`)
FA2_HEAD = 32  # ... and a head of up to 192 to a multiple of 32 (`head_size_rounded`), a larger one to 256
FP32_BYTES = 4


def flash2_backward_workspace_bytes(
    batch: float,
    heads: float,
    queries: float,
    head_dim: int,
    sms: int,
    deterministic: bool,
    kv_heads: float | None = None,
    element_bytes: int = 2,
) -> float:
    """What flash-attn 2's backward allocates beside its gradients for one call (Dao-AILab/flash-attention
    csrc/flash_attn/flash_api.cpp `mha_bwd`, 0251105a): `softmax_d`, fp32 `[b, heads, s_q rounded]`, and
    `dq_accum`, fp32 `[b, s_q rounded, heads, d rounded]`, which under `deterministic` is `nsplits` of them,
    nsplits = ⌈SMs / (b·heads)⌉ (`torch::zeros({nsplits, ...})`). Transformer Engine runs it on sm80 (its
    `get_attention_backend` prefers FusedAttention only from sm90 on, and drops cuDNN's for a deterministic
    backward below sm90: attention/dot_product_attention/utils.py at d0067d0d); both come from PyTorch's
    caching allocator for the kernel's duration. With fewer key/value heads (*kv_heads*, GQA) it also takes
    `dk_expanded` and `dv_expanded`, `[b, s_k, heads, d]` in the inputs' dtype, summed into dK, dV after
    (self-attention: s_k = s_q)."""
    rows = math.ceil(queries / FA2_ROWS) * FA2_ROWS
    width = math.ceil(head_dim / FA2_HEAD) * FA2_HEAD if head_dim <= 192 else 256
    splits = math.ceil(sms / (batch * heads)) if deterministic and sms else 1
    expanded = (
        2 * batch * queries * heads * head_dim * element_bytes if kv_heads is not None and kv_heads < heads else 0
    )
    return batch * heads * rows * FP32_BYTES * (1 + splits * width) + expanded


DP_WORKSPACE_PAD = 64  # rows and columns cuDNN's dP workspace pads queries and keys to
# Compute capabilities (major) on which TransformerEngine keeps cuDNN attention for a deterministic training
# backward: sm90, and sm100 from cuDNN 9.18.1 (TE release 2.18 at e7c550c5, the pin of Megatron CI's GB200
# golden values at 7e6a045a2a: common/fused_attn/fused_attn.cpp `nvte_get_fused_attn_backend`, "determinism
# on Blackwell ... 9.18.1+: bwd: non-deterministic/deterministic"; before it, TE PR #2130 disabled the fused
# backend there). Below sm90 `get_attention_backend` drops it; sm120 gets No_Backend (the same function).
CUDNN_DETERMINISTIC_CAPABILITIES = (9, 10)
DP_WORKSPACE_ELEMENT_BYTES = 2  # dS in the 16-bit I/O type


def cudnn_dp_workspace_bytes(sequences: float, queries: float, keys: float) -> float:
    """The workspace of cuDNN's deterministic SDPA backward on Hopper and sm100 for *sequences* (sequence, head)
    pairs of *queries* × *keys*: b·h·⌈s_q/64⌉·64·⌈s_kv/64⌉·64·2 bytes.

    TransformerEngine (release_v2.16 at f8a01cd5, the Megatron CI's H100 runs; release_v2.8 alike)
    keeps its cuDNN FusedAttention (sub-backend 1) on sm90 under NVTE_ALLOW_NONDETERMINISTIC_ALGO=0
    (pytorch/attention/dot_product_attention/utils.py `get_attention_backend`, "Filter: Determinism")
    and sets `set_deterministic_algorithm` on the backward graph (common/fused_attn/
    fused_attn_f16_arbitrary_seqlen.cu `fused_attn_arbitrary_seqlen_bwd_impl`); the cudnn-frontend it
    builds (3rdparty v1.22.0, include/cudnn_frontend/node/scaled_dot_product_flash_attention.h
    `CompositeSDPABackwardNode`) then forces the dP-workspace implementation, whose dS workspace the
    same file sizes as above (NVIDIA/cudnn-frontend PR #398, 2026-07, names the same size for the path).
    TransformerEngine takes the graph's workspace from PyTorch's caching allocator
    (pytorch/csrc/extensions/attention.cpp `fused_attn_bwd`: `allocateSpace`, `at::empty`) for the
    kernel's duration: it counts in `torch.cuda.max_memory_allocated()`. On sm100 the same graph
    (`CUDNN_DETERMINISTIC_CAPABILITIES`): cudnn-frontend's forcing does not look at the arch (v1.23.0, the
    same node: dBias "or" `is_deterministic_algorithm`), only the engine it then asks for does
    (`override_heuristics_query`, engine 5 on sm100)."""

    def pad(rows: float) -> float:
        return math.ceil(rows / DP_WORKSPACE_PAD) * DP_WORKSPACE_PAD

    return sequences * pad(queries) * pad(keys) * DP_WORKSPACE_ELEMENT_BYTES
