"""Delayed scaling's amax reductions: what a Megatron model chunk's FP8 autocast costs each micro-batch.

Megatron-Core runs a TransformerBlock's layers inside one `fp8_autocast` under delayed scaling
(transformer_block.py `TransformerBlock.forward`: core_r0.9.0 enters it around the layer loop; from
core_r0.12.0 the "outer" context, `use_outer_fp8_context` for `Fp8Recipe.delayed` only, d98e8a64 the same),
with `fp8_group` = `parallel_state.get_amax_reduction_group(with_context_parallel=True)`: the tensor-,
context- and data-parallel ranks of one pipeline stage (`_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP`).
TransformerEngine then reduces the amaxes twice a chunk a micro-batch (fp8.py, v1.6 and v1.10; quantization.py
at v2.9): on the autocast's exit (`fp8_autocast_exit` → `reduce_and_update_fp8_tensors(forward=True)`) and in
the backward of the chunk's first FP8 module (linear.py / layernorm_linear.py `reduce_and_update_bwd_fp8_tensors`,
set by `is_first_fp8_module`). Each reduction concatenates the registered amaxes (`torch.cat`), all-reduces
them with MAX (`reduce_tensor_across_group_op_max`: `torch.distributed.all_reduce(..., async_op=False)`, the
compute stream waiting for NCCL) and runs the fused amax-history and scale update
(`fused_amax_and_scale_update_after_reduction`). Only delayed scaling registers tensors in that global buffer
(quantization.py `add_fp8_tensors_to_global_buffer`, v2.9: "delayed scaling only function"); current scaling
and MXFP8 reduce nothing there (their per-quantizer TP reductions: `flops._te_amax_reduction`).

Priced: the all-reduce's latency, a few hundred bytes over the stage's tp·cp·dp ranks, added to each cell's
forward and backward that holds FP8 GEMMs: inside the node nccl-tests' measured latency for the group size
(`DeviceProfile.nccl_small_all_reduce_us`, NCCL's tuner choosing the algorithm, as NeMo's recipes leave it;
linear in the ring's steps past the largest group measured), else the scalar rule's 2(g−1) steps; across nodes
the rule's 2·⌈log2 nodes⌉ tree steps at the inter-node latency too (`reporting.scalar_across_nodes_seconds`).
Not priced: the concatenation and the update (two small kernels, a few kilobytes), the reduction of a chunk
rerun under full recompute (TE's checkpoint re-enters the autocast), and any wait for a slower rank of the
group, which the all-reduce makes every rank of it share.
"""

from __future__ import annotations

from ppb_core.config.devices import measured_share
from ppb_core.config.run import RunConfig
from ppb_core.timing.comm import Group, Links
from ppb_core.timing.reporting import scalar_across_nodes_seconds

REDUCTIONS_PER_CHUNK = 2  # the autocast's exit (forward) and the first module's backward


def delayed_amax_reductions(run: RunConfig) -> bool:
    """Whether the run reduces delayed scaling's amaxes chunk by chunk: Megatron with TransformerEngine's
    FP8 under the delayed recipe (module docstring)."""
    timing = run.timing
    return (
        run.framework == "megatron"
        and timing.transformer_impl == "transformer_engine"
        and timing.matmul_dtype == "fp8"
        and timing.fp8_recipe == "delayed"
        and run.training.fp8_cache != "deepseek"  # DeepSeek's own fine-grained recipe scales online
    )


def amax_group(run: RunConfig) -> Group:
    """Megatron's amax reduction group with context parallelism: a stage's tp·cp·dp ranks, consecutive under
    its default rank order (tp-cp-ep-dp-pp, pipeline outermost)."""
    par = run.parallel
    size = par.tp * par.cp * par.dp
    return Group(size, size)


def in_node_all_reduce_s(local: int, links: Links, measured: tuple[tuple[int, float], ...]) -> float:
    """A few hundred bytes all-reduced over *local* ranks of one NVLink domain: *measured* (group size, us)
    where it covers the size (linear between two sizes), past its largest size that latency per ring step
    (2(g−1) of them), without a measurement the scalar rule's 2(g−1) steps of the catalog's latency."""
    if local <= 1:
        return 0.0
    if not measured:
        return 2 * (local - 1) * links.latency_s
    largest, largest_us = measured[-1]
    if local <= largest:
        return measured_share(measured, local) * 1e-6
    return largest_us * (local - 1) / (largest - 1) * 1e-6


def amax_reduction_seconds(run: RunConfig, links: Links) -> float:
    """One reduction's all-reduce, on the compute stream (module docstring); 0 where the run reduces none."""
    if not delayed_amax_reductions(run):
        return 0.0
    group = amax_group(run)
    if group.size <= 1:
        return 0.0
    measured = run.device.profile().nccl_small_all_reduce_us
    return in_node_all_reduce_s(links.in_node(group), links, measured) + scalar_across_nodes_seconds(group, links)
