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
  on every rank that runs routed experts.
"""

from __future__ import annotations

KIB = 1024
MIB = KIB * KIB
TRAINING_CUBLAS_HANDLES = 2  # the main thread's (forward) and autograd's device thread's (backward)
TE_COMPUTE_STREAMS = 4  # Transformer Engine's grouped-GEMM streams, each with its own workspace


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
    "TE_COMPUTE_STREAMS",
    "torch_cublas_workspace_bytes",
    "torch_training_workspace_bytes",
    "transformer_engine_workspace_bytes",
]
