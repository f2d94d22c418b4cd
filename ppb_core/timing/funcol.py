"""The copy PyTorch's functional collectives make around a collective along a dimension other than 0,
as DTensor's sequence-parallel redistributions run them under torchtitan.

torchtitan's TP plan shards the residual stream along the sequence (dim 1 of [batch, sequence,
hidden]): `SequenceParallel` norms, `PrepareModuleInput` / `ColwiseParallel(input_layouts=Shard(1))`
gathering it before the block's first linears and the output projection, `RowwiseParallel
(output_layouts=Shard(1))` scattering the block's sums and the embedding's (9dec370 and 820504e
parallelize_llama.py `apply_tp`). DTensor redistributes through the functional collectives
(torch/distributed/tensor/placement_types.py `Shard._to_replicate_tensor`: `all_gather_tensor(...,
gather_dim=self.dim)`; `Shard._reduce_shard_tensor`: `reduce_scatter_tensor(..., scatter_dim=self.dim)`),
and NCCL gathers and scatters along dim 0 only, so torch/distributed/_functional_collectives.py
reorders in HBM:

- `reduce_scatter_tensor` with `scatter_dim != 0`: `torch.cat(torch.chunk(self, group_size,
  dim=scatter_dim))` before the collective, a copy of the whole input (read and write), in every
  release up to torch 2.13 (`_chunk_or_narrow_cat`);
- `all_gather_tensor` with `gather_dim != 0`: `torch.cat(torch.chunk(res, group_size, dim=0),
  dim=gather_dim)` after it, a copy of the whole gathered tensor, from 2023 (pytorch/pytorch #113324)
  through the torch of torchtitan's benchmark files (1963fc8, Dec 2024; 38410cf9, June 2025); from
  pull request #169404 (Dec 2025, `_maybe_view_chunk_cat`) a view when the batch is 1. Priced for a
  micro-batch above 1 only: a batch of 1 under an older torch copies too (not priced).

Inductor cannot fuse either copy away (a collective's input and a matmul's input are realized
buffers) except where async TP's micro-pipelining replaces the pattern: its fused all-gather-matmul
(fx_passes/micro_pipeline_tp.py `_find_all_gather_patterns` matches the wait, chunk and cat) and
matmul-reduce-scatter (`_find_reduce_scatter_patterns`, the chunk and cat before it); the
backward's input-gradient reduce-scatter, fed by a sum of matmuls, keeps its copy
(`pricer.torchtitan_overlap`). The fused ops copy too (torch/distributed/_symmetric_memory, the same
code from torch 1963fc8 to 2.13): `_fused_all_gather_matmul_impl` moves the shard's gather dim to the
front and flattens it (`A_shard.movedim(gather_dim, 0).flatten(0, -2)`: a copy from batch 2), and
`_pipelined_multi_all_gather_and_consume` copies the shard into the local symmetric buffer before the
first chunk's matmul ("mv", not overlapped: "we are giving up the chance to overlap"); the gathered
input it returns (`unflatten`) is strided along the sequence from batch 2, so the weight gradient's
matmul, which views it as [batch·sequence, hidden] rows, gets a copy of it (Inductor realizes a
non-viewable `view` into a matmul's input); `_fused_matmul_reduce_scatter_impl` moves and flattens
its input likewise (`A.movedim(scatter_dim, 0).flatten(0, -2)`, a copy from batch 2)."""

from __future__ import annotations

from ppb_core.timing.flops import ALL_GATHER, REDUCE_SCATTER


def sequence_copy_bytes(kind: str, payload_bytes: float, micro_batch: int, fused: bool) -> float:
    """HBM bytes of the chunk-and-cat around a sequence-dim *kind* collective of *payload_bytes*
    (the whole gathered tensor, or the whole input scattered); 0 where async TP fuses it (*fused*)."""
    if fused:
        return 0.0
    if kind == REDUCE_SCATTER or (kind == ALL_GATHER and micro_batch > 1):
        return 2.0 * payload_bytes
    return 0.0


def fused_gather_bytes(payload_bytes: float, tp: int, micro_batch: int, feeds_weight_gradient: bool) -> float:
    """HBM bytes async TP's fused all-gather-matmul copies in one pass: the shard into the symmetric
    buffer, and from batch 2 the shard flattened first and, in the pass whose weight gradient reads
    the gathered input (*feeds_weight_gradient*), that input copied into rows."""
    shard = payload_bytes / tp
    wide = micro_batch > 1
    return 2 * shard + (2 * shard if wide else 0.0) + (2 * payload_bytes if wide and feeds_weight_gradient else 0.0)


def fused_scatter_bytes(input_bytes: float, micro_batch: int) -> float:
    """HBM bytes async TP's fused matmul-reduce-scatter copies: its matmul's whole input (*input_bytes*)
    moved and flattened, from batch 2."""
    return 2 * input_bytes if micro_batch > 1 else 0.0
