"""The symmetric-memory workspace torchtitan's async TP holds on each device, outside the caching allocator.

Async TP (torchtitan's `enable_async_tensor_parallel`, ppb's `timing.overlap.tp` above 0 under torchtitan) has
Inductor's micro-pipelining (torch/_inductor/fx_passes/micro_pipeline_tp.py) replace a sequence-parallel
all-gather feeding matmuls, and a reduce-scatter a matmul feeds, with torch's fused ops. They stage their
transfers in one workspace per TP group, torch/distributed/_symmetric_memory/__init__.py
`get_symm_mem_workspace(group_name, min_size)`: allocated on first use and again, at the larger size, whenever a
request exceeds it, never shrunk (the same code in torch 2.6.0, the December 2024 runs' release, and 2.13). The
requests, in bytes:

* `_pipelined_multi_all_gather_and_consume` (under `_fused_all_gather_matmul_impl`): the local shard,
  `x.numel() * x.element_size()`: a sequence shard of the block's normed input, tokens/sp × hidden;
* `_pipelined_produce_and_all2all` (under `_fused_matmul_reduce_scatter_impl`): two chunks of the stacked
  partials, `out_chunks[0].numel() * out_chunks[0].element_size() * 2`, the output split over the group:
  2 × tokens/sp × hidden for the attention's output projection and the MLP's down projection (torchtitan's
  `RowwiseParallel(output_layouts=Shard(1))` on wo and w2), in the training dtype (the scaled variant's
  `out_dtype` too).

The buffer comes from `CUDASymmetricMemoryAllocator::alloc` (torch/csrc/distributed/c10d's CUDASymmetricMemory.cu,
`cuMemCreate`), not the caching allocator: neither `memory_allocated` nor `memory_reserved` counts it, so it is
no part of a stage's allocated peak or its reserved pools (`ppb_core.memory.reserved`), but a fit verdict must
find it on the device (`StagePeak.allocator_bytes`). Left out: torch 2.13's multicast path
(`_multimem_all_gather_matmul`, a whole gathered input, taken only below 2,049 gathered rows and where the
gathered input is not returned) and its native one (`TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP` set)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ppb_core.model.kinds import BodyKind, TailKind
from ppb_core.model.walk import Layer

if TYPE_CHECKING:  # `peak.stage_peaks` charges it: the model is built above this module
    from ppb_core.memory.model import MemoryModel


def async_tp(memory: MemoryModel) -> bool:
    """Whether the run is torchtitan's async TP: TP with sequence parallelism (its all-gathers and reduce-scatters)
    and the comm-GEMM overlap ppb prices it as (`pricer._fused_tp`)."""
    run = memory.run
    return run.framework == "torchtitan" and run.timing.overlap.tp > 0 and memory.setup.sp > 1


def workspace_bytes(memory: MemoryModel, layers: Iterable[Layer]) -> float:
    """The largest workspace request of the fused ops among *layers* (module docstring); 0 without async TP.

    A block's largest is its output projection's reduce-scatter, two shards of tokens × hidden; the TAIL's output
    layer gathers its input's shard (`ColwiseParallel(input_layouts=Shard(1))`); the HEAD's embedding scatters
    a lookup, not a matmul, so runs unfused."""
    if not async_tp(memory):
        return 0.0
    setup = memory.setup
    shard_rows = setup.whole_tokens  # tokens of a micro-batch on one rank of the TP group: s·b/(cp·tp)
    most = 0.0
    for layer in layers:
        kind = layer.kind
        if isinstance(kind, BodyKind):
            most = max(most, 2 * shard_rows * kind.hidden_size * setup.dtype_bytes)
        elif isinstance(kind, TailKind) and kind.has_output:
            most = max(most, shard_rows * kind.hidden_size * setup.dtype_bytes)
    return most
