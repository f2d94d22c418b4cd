"""What of its transfers one of torch's symmetric-memory fused ops leaves exposed: torchtitan's async TP,
whose Inductor pass (torch/_inductor/fx_passes/micro_pipeline_tp.py) swaps a sequence-parallel
all-gather and the matmuls reading it, or a matmul and the reduce-scatter of its output, for one op of
torch/distributed/_symmetric_memory (torch 38410cf9 of the June 2025 benchmark file, and 2.13):

- `fuse_all_gather_matmul` takes every matmul `_find_consumer_matmuls` finds on the gathered input
  (torchtitan's wq, wk and wv; w1 and w3; the output projection), and `_fused_all_gather_matmul_impl`'s
  `default_consumer` runs each of them on every shard as it lands;
- `_pipelined_multi_all_gather_and_consume` consumes the local shard first, beside the first remote
  copy, then for each of the tp − 1 remote shards copies it and consumes it: the last shard's matmuls
  start after the last copy, so the copies run beside tp − 1 of the tp chunks' matmuls;
- `_pipelined_produce_and_all2all` (`_fused_matmul_reduce_scatter_impl`) computes the chunk for one peer,
  then a barrier, then pulls the peer's chunk for its own rows, tp − 1 times, and its own rows' chunk
  last, beside the last pull: the first chunk's matmul runs before any transfer, so again tp − 1 of tp;
- each transfer is `Tensor.copy_` from a peer's symmetric buffer, a copy-engine copy that takes no SMs
  from the matmuls beside it (the module's NOTE [low-contention collectives]: "Use copy engine-based copy
  whenever possible"), unlike NCCL's kernels (`Kernels.contention`).

The transfers themselves take the plain collective's link time (the same bytes over the same links);
the HBM copies around them (`ppb_core.timing.funcol`), what the matmuls lose run a shard at a time and
the pulled partials' sum are priced beside this.
"""

from __future__ import annotations


def fused_exposed_s(transfer_s: float, share: float, matmul_s: float, tp: int) -> float:
    """Seconds of a fused op's transfers (*transfer_s*, the plain collective's link time) left exposed
    when *share* of them may run beside its matmuls (*matmul_s*, all of them whole): the matmuls of
    tp − 1 of the tp chunks cover them, and what they cover costs the matmuls nothing."""
    beside = share * transfer_s
    cover = matmul_s * (tp - 1) / tp
    return transfer_s - min(beside, cover)
