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

How many buffers one reduction goes through (`amax_buffers`): `reduce_and_update_fp8_tensors` loops over the
global buffer's keys of its direction. TE v1.6 and v1.10 key it by whether the module holds FP8 parameters too
(fp8.py `get_key_in_buffer`: `f"{fwd_bwd_key}_{fp8_weights}_{autocast_key}"`; `prepare_forward` registers a
module with `fp8_weights=self._get_fp8_params()`), so under FP8 parameters (Float8Tensor weights: NeMo's
fp8_params, Megatron's --fp8-param-gather, `timing.fp8_param_gather`) the linears' amaxes sit in one buffer and
TE's DotProductAttention's (a module without parameters, registered by its own `prepare_forward(...,
num_gemms=3)`, attention.py v1.10) in another: each reduction concatenates, all-reduces and updates twice. TE
28aa41a3f (#1326, v1.13; `releases.CHANGES["te_fp8_params_one_amax_buffer"]`) keys it by direction and
autocast alone: once.

Priced: the all-reduce's latency, a few hundred bytes over the stage's tp·cp·dp ranks, once a buffer, added to
each cell's forward and backward that holds FP8 GEMMs: inside the node nccl-tests' measured latency for the group
size (`DeviceProfile.nccl_small_all_reduce_us`, NCCL's tuner choosing the algorithm, as NeMo's recipes leave it;
linear in the ring's steps past the largest group measured), else the scalar rule's 2(g−1) steps; across nodes
the rule's 2·⌈log2 nodes⌉ tree steps at the inter-node latency too (`reporting.scalar_across_nodes_seconds`).
And the host's launches a buffer (`REDUCTION_LAUNCHES`): the `torch.cat` (a plain PyTorch op,
`launches.PLAIN_OP_SHARE`), the NCCL all-reduce and `tex.fused_amax_and_scale_update_after_reduction` (one kernel
for up to `AMAX_PARAMS_LIMIT` tensors, recipe/delayed_scaling.cu: 32 KiB of kernel parameters, hundreds of
modules), issued after the chunk's last layer's forward (the autocast's exit) and in its first layer's backward
(the first module's, the last to run): where that layer's launches already outrun its GPU work the host is late
by them less the all-reduces' latency (`host_added_s`; iteration.py adds it to the cell). Not priced: the
concatenation's and the update's GPU time (a few kilobytes), the reduction of a chunk rerun under full recompute
(TE's checkpoint re-enters the autocast), and any wait for a slower rank of the group, which the all-reduce makes
every rank of it share.
"""

from __future__ import annotations

from ppb_core.config.devices import measured_share
from ppb_core.config.run import RunConfig
from ppb_core.timing.comm import Group, Links
from ppb_core.timing.launches import PLAIN_OP_SHARE
from ppb_core.timing.reporting import scalar_across_nodes_seconds

REDUCTIONS_PER_CHUNK = 2  # the autocast's exit (forward) and the first module's backward
# The host's launches of one buffer's reduction (module docstring): torch.cat (plain), the all-reduce, the update
REDUCTION_LAUNCHES = PLAIN_OP_SHARE + 2.0


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


def amax_buffers(run: RunConfig) -> int:
    """The global amax buffers one reduction concatenates, all-reduces and updates (module docstring): two under
    FP8 parameters before TE v1.13 (the linears' and the attention's), else one."""
    if run.timing.fp8_param_gather and not run.framework_release.holds("te_fp8_params_one_amax_buffer"):
        return 2
    return 1


def amax_reduction_seconds(run: RunConfig, links: Links) -> float:
    """One reduction's all-reduces, one a buffer, on the compute stream (module docstring); 0 where the run
    reduces none."""
    if not delayed_amax_reductions(run):
        return 0.0
    group = amax_group(run)
    if group.size <= 1:
        return 0.0
    measured = run.device.profile().nccl_small_all_reduce_us
    one = in_node_all_reduce_s(links.in_node(group), links, measured) + scalar_across_nodes_seconds(group, links)
    return amax_buffers(run) * one


def amax_reduction_launches(run: RunConfig) -> float:
    """The host's launches of one reduction, in kernel launches (`REDUCTION_LAUNCHES` a buffer); 0 where the run
    reduces none. One rank alone reduces nothing over NCCL (TE skips the all-reduce at a group of one) but still
    concatenates and updates."""
    if not delayed_amax_reductions(run):
        return 0.0
    launches = REDUCTION_LAUNCHES if amax_group(run).size > 1 else REDUCTION_LAUNCHES - 1.0
    return amax_buffers(run) * launches


def host_added_s(launched_s: float, device_s: float, extra_s: float, reduction_s: float) -> float:
    """What the host's launches of a reduction (*extra_s*) add to a layer pass that issues them after its own
    (*launched_s* of launches against *device_s* of GPU work): once the host is behind, every launch of it less
    the all-reduces' latency (*reduction_s*) the GPU spends meanwhile; a host ahead by device_s − launched_s
    hides that much of them too."""
    return max(0.0, extra_s - reduction_s - max(0.0, device_s - launched_s))
