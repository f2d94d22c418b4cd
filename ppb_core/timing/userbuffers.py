"""TransformerEngine's userbuffers overlap of tensor-parallel collectives with GEMMs, as Megatron runs it.

Megatron-LM core_r0.8.0 with `--tp-comm-overlap` (megatron/training/initialize.py,
`_initialize_tp_communicators`: an empty `ub_cfgs` without `--tp-comm-overlap-cfg`) calls
TransformerEngine's `initialize_ub` (v1.8, transformer_engine/pytorch/module/base.py), whose defaults
give each GEMM of a transformer layer one method:
- ring exchange (`qkv_fprop`, `fc1_fprop`, `proj_dgrad`, `fc2_dgrad`: the all-gather before a GEMM).
  `UbufP2PCommOverlap::split_overlap_ag` (transformer_engine/pytorch/csrc/comm_gemm_overlap.h) runs
  the GEMM as tp chunks, each the rows of one rank's sequence shard, while the shards travel round
  the ring one hop a step. `use_ce` is on by default: a hop is a `cudaMemcpyAsync` on the copy
  engines (userbuffers.cu, `userbuffers_send`), taking no SMs. Chunk i+1 waits only for its
  shard, and the chunks go to 3 streams (`_NUM_MAX_UB_STREAMS`), so a chunk whose shard has arrived
  runs beside the one before it. The chunks together keep the SMs as busy as one grouped kernel
  of tp products; the ring still has to bring the last shard in: tp-1 hops, then that chunk alone.
- pipeline (`proj_fprop`, `fc2_fprop`: the reduce-scatter after a GEMM). `split_overlap_rs` splits
  the GEMM's output columns into `num_splits` = 4 chunks; each chunk's reduce-scatter is a
  userbuffers kernel on 16 SMs (`num_sm`), the last on `UB_MAX_SM` = 32 while nothing else runs.
  For BF16, TE v1.8 passes `gemm_overlap=False` (cpp_extensions/gemm.py; TE enabled it for Hopper
  BF16 only in November 2024, commit 2231cc87d "enable the overlap between GEMM chunk at Hopper
  BF16"), so chunk i's reduce-scatter is launched before chunk i+1's GEMM, and Megatron requires
  `CUDA_DEVICE_MAX_CONNECTIONS=1` with sequence parallelism (arguments.py): one hardware queue, in
  launch order. Chunk i+1's GEMM therefore starts when chunk i's reduce-scatter starts, which waits
  for chunk i's GEMM and for the reduce-scatter before it: a step takes the longer of a chunk's GEMM
  (slowed by the SMs the reduce-scatter beside it takes) and a chunk's reduce-scatter; the last
  reduce-scatter follows the last chunk.
- bulk (`qkv_dgrad`, `qkv_wgrad`, `fc1_dgrad`, `fc1_wgrad`): the collective runs beside a whole
  GEMM on 16 SMs, which the generic overlap already prices (`Kernels.contention`).
`set_sm_margin` defaults to 0 in TE 1.x: every GEMM is launched for all SMs, and on Hopper, whose cuBLAS
GEMMs are persistent, a chunk beside a reduce-scatter waits for its SMs (`kernels.persistent_added_s`);
TE 2.0 (d715c836e, #1427) turned it on for the bulk and pipeline methods (`timing.ub_sm_margin`).
Each GEMM is priced by the tile model (`ppb_core.timing.kernels`) at the shapes the method runs, with its
fixed kernel time once per kernel that runs alone (a pipeline chunk) and once for the ring's concurrent
chunks together.
"""

from __future__ import annotations

from ppb_core.timing.kernels import Kernels, persistent_added_s

RING_EXCHANGE, PIPELINE = "ring_exchange", "pipeline"
PIPELINE_SPLITS = 4  # initialize_ub: num_splits=4 for the pipeline method


def ring_exchange_s(kernels: Kernels, m: float, n: float, k: float, tp: int, hop_s: float) -> float:
    """An all-gather ring-exchanged under an m×k by k×n GEMM whose m rows are tp shards: the chunks
    as one grouped kernel, or the ring's tp-1 hops of *hop_s* then the last chunk alone."""
    rows = m / tp
    together = kernels.gemm_compute_s(rows, n, k, tp)
    last = kernels.gemm_compute_s(rows, n, k)
    return max(together, (tp - 1) * hop_s + last)


def rs_reduce_s(kernels: Kernels, payload_bytes: float, tp: int) -> float:
    """A reduce-scatter ring-exchanged after its GEMM (a `--tp-comm-overlap-cfg` giving proj_fprop or
    fc2_fprop `ring_exchange`: TE d0067d0d comm_gemm_overlap.cpp `CommOverlapP2PBase::split_overlap_rs`):
    the GEMM runs as tp row chunks, each sent to its owner as the next one computes (`ring_exchange_s`),
    then `reduce_bf16` sums the tp chunks received into the rank's shard: it reads them (the payload) and
    writes the shard."""
    return kernels.memory_s(payload_bytes + payload_bytes / tp)


def pipeline_s(
    kernels: Kernels,
    m: float,
    n: float,
    k: float,
    chunk_comm_s: float,
    splits: int = PIPELINE_SPLITS,
    late_ctas: bool = False,
) -> float:
    """An m×k by k×n GEMM whose n output columns run as *splits* chunks, each reduce-scattered in
    *chunk_comm_s* as the next chunk's GEMM runs (TE v1.8's BF16 order on one hardware queue). A chunk
    beside a reduce-scatter loses the SMs it takes, or, *late_ctas* (a persistent GEMM launched for every
    SM: TE 1.x's `set_sm_margin` 0), waits for them (`kernels.persistent_added_s`)."""
    chunk = kernels.gemm_compute_s(m, n / splits, k)
    if late_ctas:
        beside = chunk + persistent_added_s(chunk, chunk_comm_s)
    else:
        beside = chunk + kernels.contention * min(chunk, chunk_comm_s)  # the SMs the reduce-scatter takes
    comm_start = comm_end = 0.0
    gemm_end = chunk
    for i in range(splits):
        if i:
            gemm_end = comm_start + beside  # launched behind the previous reduce-scatter
        comm_start = max(gemm_end, comm_end)
        comm_end = comm_start + chunk_comm_s
    return comm_end
