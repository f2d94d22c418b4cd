"""One training iteration in seconds: the pipeline schedule, its links, data-parallel communication, the optimizer.

`run_iteration(run, cell_options=None)` prices the run as configured (its uniform split and its
recompute setting), or a balancer plan's cells `[chunk][stage] -> {option: body layers}`, and
returns an `Iteration`: seconds, tokens per second per device, MFU (Megatron-LM's model FLOPs,
`ppb_core.timing.model_flops`), HFU (with what recompute reruns), and a breakdown in seconds
that adds up to the iteration:

- `compute`: the busiest stage's forward and backward work over the iteration (every
  micro-batch's layers, recompute, exposed TP/CP/EP collectives, embedding and loss included);
- `bubble`: what the schedule leaves idle on the critical path beyond that work;
- `fsdp_communication`: ZeRO-3/FSDP parameter all-gathers and gradient reduce-scatters that the
  prefetch does not hide behind the previous layer's compute;
- `p2p`: pipeline sends and receives, activation bytes over the link two stages share plus its
  latency, posted and waited for as Megatron's schedules do (`ppb_core.pipeline_p2p`), blocking
  the sender (MindFormers) or in the background (torchtitan);
- `dp_communication`: the data-parallel gradient reduction's exposed tail (bucketed, overlapped
  with the last micro-batch's backward), the distributed optimizer's exposed parameter
  all-gather, tied embeddings' gradient all-reduce between the first and last stage;
- `optimizer`: the step, memory-bound: bytes of the gradients, master weights and moments a
  device holds, read and written at the achieved HBM bandwidth, plus the gradient norm and the
  zeroing of the gradient buffers.
- `bookkeeping`: Megatron's per-iteration statistics beside the step (`--log-params-norm`,
  `--log-num-zeros-in-grad` passes), its scalar all-reduces and its host syncs (`timing.reporting`);
  torchtitan's all-reduces of the clipped gradients' total norm (`timing.titan_step`).

`hidden` states, per kind of communication, the share of its link time hidden behind compute.
Framework rules (`framework_rules`): which overlaps each framework runs. docs/timing.md has
every term and its source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ppb_core.config.run import DTYPE_BYTES, RunConfig
from ppb_core.host_copies import HostCopies, HostLayer
from ppb_core.memory import MemoryModel, configured_option
from ppb_core.memory.frameworks import te_offload
from ppb_core.memory.frameworks.mindformers import optimizer_shards
from ppb_core.memory.frameworks.te_fp8 import fp8_weights
from ppb_core.model.geometry import per_rank
from ppb_core.model.kinds import MTP_PART, EncoderBodyKind, LayerKind, TailKind
from ppb_core.model.params import LayerParams
from ppb_core.model.placement import CellOptions, place_plan
from ppb_core.model.switches import LayerType, option_state
from ppb_core.model.walk import BODY, HEAD, Layer, LayerWalk, walk
from ppb_core.pipeline_p2p import OVERLAP_BY_RELEASE, simulate_p2p
from ppb_core.schedules import Timeline, canonical, cell_order, combined_pairs, simulate
from ppb_core.timing.batch import batch_seconds, reads
from ppb_core.timing.combined import direction_contention, layer_segments, mtp_segments, step_saving
from ppb_core.timing.comm import Group, Links, collective_seconds
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Collective, OpGeometry
from ppb_core.timing.fp8_amax import (
    REDUCTIONS_PER_CHUNK,
    amax_reduction_launches,
    amax_reduction_seconds,
    host_added_s,
)
from ppb_core.timing.fsdp_float8 import precompute_scale_seconds
from ppb_core.timing.host import HostWaits
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.launches import PLAIN_OP_SHARE
from ppb_core.timing.model_flops import (
    devices,
    global_batch_sequences,
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    utilization,
)
from ppb_core.timing.muon import layer_matrices
from ppb_core.timing.muon import step_seconds as muon_step_seconds
from ppb_core.timing.offload import cpu_offload_waits, reload_seconds, reload_wait_s
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.reporting import bookkeeping, bookkeeping_seconds, pass_bytes, with_statistics_groups
from ppb_core.timing.titan_step import (
    clip_norm_seconds,
    fsdp2_units,
    optimizer_bytes_per_element,
    pipelined_grad_bytes,
    post_backward_reduce_end,
)

MASTER_BYTES = 4  # the fp32 master copy of a 16-bit parameter
BREAKDOWN_KEYS: tuple[str, ...] = (
    "compute",
    "bubble",
    "fsdp_communication",
    "p2p",
    "dp_communication",
    "optimizer",
    "bookkeeping",
)
FRAMEWORKS: tuple[str, ...] = ("megatron", "torchtitan", "mindformers")
MEGATRON_MIN_BUCKET = 40_000_000  # Megatron-Core DDP: bucket_size = max(40M, 1M · dp·cp) parameters
MEGATRON_BUCKET_PER_RANK = 1_000_000
FP32 = 4


@dataclass(frozen=True)
class Iteration:
    """One training iteration: seconds, throughput, utilization, and where the time goes (seconds)."""

    seconds: float
    tokens_per_second_per_device: float
    mfu: float
    hfu: float
    breakdown: dict[str, float]
    hidden: dict[str, float] = field(default_factory=dict)  # share of each communication's link time hidden
    link_seconds: dict[str, float] = field(default_factory=dict)  # each communication's time on its link
    tokens: int = 0
    devices: int = 0
    model_flops: float = 0.0
    hardware_flops: float = 0.0
    framework: str = "megatron"
    # of `compute`, the seconds the busiest stage's GPU waits for Megatron's host to launch its kernels
    host_wait_seconds: float = 0.0
    # the stage whose work is `compute`, and `compute` in parts adding up to it: its layers ("layers",
    # their waits for the host included), Megatron's get_batch broadcasts ("batch_broadcast"), delayed scaling's
    # amax all-reduces ("amax_reduction") and the host's launches of them ("amax_host"), and what combined 1F1B
    # steps save ("combined_saving", negative); for tools that split the iteration
    busiest_stage: int = 0
    compute_parts: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "tokens_per_second_per_device": self.tokens_per_second_per_device,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "breakdown": dict(self.breakdown),
            "hidden": dict(self.hidden),
            "link_seconds": dict(self.link_seconds),
            "tokens": self.tokens,
            "devices": self.devices,
            "model_flops": self.model_flops,
            "hardware_flops": self.hardware_flops,
            "framework": self.framework,
            "host_wait_seconds": self.host_wait_seconds,
        }


@dataclass(frozen=True)
class FrameworkRules:
    """What a framework overlaps and how often it communicates (docs/timing.md, "Framework rules")."""

    name: str
    p2p_blocking: bool  # sends wait until the receiver has the tensor
    fsdp_reshard_after_forward: bool  # ZeRO-3/FSDP: gather the parameters again for the backward
    fsdp_gather_every_micro_batch: bool
    fsdp_reduce_every_micro_batch: bool
    bucket_parameters: int  # DP gradient buckets (0: one per layer, as FSDP2 reduces per module)
    # Megatron-Core r0.8: only the first pipeline stage's first model chunk is cut into buckets; every
    # other stage and chunk reduces its gradients as one bucket once its last backward is done
    buckets_first_chunk_only: bool = False
    # Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): steady forward-backward pairs
    # run as one step, layer beside layer (`ppb_core.timing.combined`)
    combined_1f1b: bool = False
    # where the sends and receives are posted and waited for (`ppb_core.pipeline_p2p`); "" for
    # `p2p_blocking`'s simpler model
    p2p_protocol: str = ""
    # Megatron's --overlap-p2p-communication-warmup-flush: the interleaved warm-up's and cool-down's receives
    # prefetched an op earlier (`ppb_core.pipeline_p2p`)
    p2p_warmup_flush: bool = False
    # MindFormers' gradient_aggregation_group: gradients reduced, and parameters gathered, in MindSpore's
    # fused communication ops, one per fusion id (`mindspore_fusion_id`); 0: by `bucket_parameters`
    fusion_groups: int = 0


# MindFormers' default parallel_config.gradient_aggregation_group (`TransformerOpParallelConfig.__init__`,
# mindformers/modules/transformer/transformer.py at a4dfb8219, v1.4.0-beta2: "The fusion group size of the
# optimizer state sharding. Default: 4"); every model-card yaml without a pipeline states 4.
MINDFORMERS_GRADIENT_AGGREGATION_GROUP = 4


def mindspore_fusion_id(run: RunConfig, layer: Layer, groups: int) -> int:
    """The fusion id of a layer's parameters in a MindFormers run, which MindSpore's fused communication
    ops group by.

    MindFormers (v1.4.0-beta2, a4dfb8219) sets it with `Cell.set_comm_fusion`: each transformer layer in
    models/utils.py `LayerSetting.set`, 2 under a pipeline, else int(layer_id / d) + 1 with d = max(int((L + 1)
    / groups), 1) (the yaml's `offset` is 0 on every card row without a pipeline, and taken so); the token
    embedding (and the final norm) in llama.py `LlamaModel.__init__` (glm2.py alike) 2 under a pipeline,
    else `groups`: the embedding's gradients, the backward's last, share the last layers' id. The output
    projection sets none: a parameter's default fusion_type_ 1 (mindspore/core/ir/param_info.h). MindSpore
    gives each gradient reduction and optimizer-parallel gather its parameter's id (frontend/parallel
    `AddCommOpFusionType`), and the backend fuses every op of one (group, op, fusion id, dtype) into one
    (backend/common/pass/communication_op_fusion.cc `CommunicationOpFusion::Run`, 095ae7e2: one segment
    each under the parallel optimizer and outside pure data-parallel mode, no size split), whose inputs
    are all its members' gradients."""
    if layer.node == BODY:
        if run.parallel.pp > 1:
            return 2
        span = max((run.spec(layer.model_name).num_layers + 1) // groups, 1)
        return layer.index // span + 1
    if layer.node == HEAD:
        return 2 if run.parallel.pp > 1 else groups
    return 1


def mindspore_reduction_bytes(run: RunConfig) -> int:
    """Bytes an element of a MindFormers run's data-parallel gradient reduction: the parameter's own dtype
    (model_config.param_init_type, `timing.param_dtype`), not an fp32 main gradient.

    MindSpore (mindspore/ccsrc/frontend/parallel/step_parallel.cc and step_parallel_utils.cc, the stored 2024
    versions, contemporary with the cards' MindFormers v1.4.0-beta2 of January 2025; the 2022 version, 72cc2522,
    gathered after a 16-bit cast everywhere, which differs for fp32 parameters): without the parallel optimizer
    the mirror op, whose backward all-reduces the gradient, goes between the parameter and MindFormers' `Linear` cast
    (`InsertMirrorBeforeCast` under `gradient_fp32_sync`, on by default, context.cc `ParallelContext::Reset`);
    under it the optimizer-parallel AllGather goes on the parameter itself without a pipeline
    (`InsertAllGatherAfterCast` and `FindChildCastWithFP32ToFP16` return nothing when
    `pipeline_stage_split_num() <= 1`), its backward a ReduceScatter of the parameter's gradient; over
    micro-batches the reduced tensor is the accumulation buffer `accu_grads`, a clone of the parameters
    (`_MicroStepAllGather`'s bprop, ops/_grad_experimental/grad_comm_ops.py; mindformers/wrapper/wrapper.py
    `MFPipelineWithLossScaleCell`, a4dfb8219: `self.weights.clone(prefix="accu_grads")`). Each way the
    parameter's dtype."""
    return DTYPE_BYTES[run.timing.param_dtype or run.training.dtype]


def mindspore_gather_bytes(run: RunConfig) -> int:
    """Bytes an element of a MindFormers run's optimizer-parallel parameter AllGather: the parameter's dtype
    where MindSpore gathers the parameter itself (no pipeline, gradient accumulation or not), else the compute
    dtype.

    step_parallel.cc `InsertAllGatherOp` (v2.3.0-v2.4.x; parallel_preprocessor.cc from v2.5.0): under a pipeline
    `InsertAllGatherAfterCast` moves the gather after the `Linear`'s cast to the compute dtype, and
    step_parallel_utils.cc `FindChildCastWithFP32ToFP16` casts an fp32 parameter down before it "for saving
    communication"; both return nothing when `pipeline_stage_split_num() <= 1` (74a88bb0053, in every tag
    v2.3.0-v2.6.0 and mindspore-ai/mindspore_test a05ce58802d of 2025-07; neither reads grad_accumulation_step:
    MindFormers' accumulation without a pipeline, base_trainer.py v1.4.0-beta2 wrapping MindSpore's
    `GradAccumulationCell`, gathers as a run without it), so then the gather takes the parameter as it is."""
    if run.parallel.pp > 1:
        return run.training.dtype_bytes
    return mindspore_reduction_bytes(run)


def fused_by_id(
    run: RunConfig, members: Sequence[tuple[float, LayerParams, Layer]], groups: int, first: bool = False
) -> list[tuple[float, LayerParams]]:
    """MindSpore's fused ops over *members* (time, parameters, layer): one per fusion id, at the latest of
    its members' times (a reduction waits for its last gradient) or with *first* the earliest (a gather is
    needed by its first reader), with their parameters summed; in time order."""
    fused: dict[int, tuple[float, LayerParams]] = {}
    for when, params, layer in members:
        key = mindspore_fusion_id(run, layer, groups)
        if key not in fused:
            fused[key] = (when, params)
        else:
            seen, total = fused[key]
            fused[key] = (min(seen, when) if first else max(seen, when), total + params)
    return sorted(fused.values(), key=lambda item: item[0])


def framework_rules(run: RunConfig) -> FrameworkRules:
    """The run's framework's rules.

    - Megatron-LM (Megatron-Core DDP, distributed optimizer): gradients in buckets of
      max(40M, 1M·dp·cp) parameters (distributed_data_parallel.py), on the first pipeline stage's
      first model chunk only: `DistributedDataParallel.__init__` sets no bucket size on a stage
      past the first and `get_model` passes `disable_bucketing=(model_chunk_idx > 0)` (training.py,
      core_r0.8.0), and with `delay_grad_reduce` (on unless `--no-delay-grad-reduce`) the schedules
      start those stages' and chunks' reductions only once their last backward is done
      (schedules.py, `grad_sync_func`); P2P synchronous in 1F1B (each op's send batched with the
      next op's receive) and overlapped in the interleaved schedule (`--overlap-p2p-communication` on
      by default there, forced off otherwise; arguments.py), or there under `timing.overlap_p2p_comm`
      false in one blocking call a step (`megatron_batched`, as Megatron-LM of 2022): `ppb_core.pipeline_p2p`. Its FSDP
      (`--use-megatron-fsdp`) gathers per micro-batch. Under `timing.deepspeed_pipeline`
      (Megatron-DeepSpeed) DeepSpeed's engine's blocking sends and receives instead (`deepspeed`).
    - torchtitan (FSDP2 on every transformer block, torch.distributed.pipelining): one reduce-scatter
      per block; `reshard_after_forward` is on without pipeline parallelism and off with it
      (parallelize.py: the "default" policy), and with a pipeline the schedule skips gradient sync
      until the last micro-batch; without one, every micro-batch's backward reduce-scatters.
      Pipeline sends: Schedule1F1B's batched sends and receives (`ppb_core.pipeline_p2p`, torch_1f1b);
      the looped schedules' time steps in lock step (torch_looped, `ppb_core.pipeline_lockstep`).
    - MindFormers (MindSpore): synchronous send/receive in its pipeline; optimizer parallelism as a
      distributed optimizer; gradients reduced and parameters gathered in MindSpore's fused communication
      ops, one per fusion id MindFormers sets (`mindspore_fusion_id`, `timing.gradient_aggregation_group`).
    """
    name = run.framework
    pipelined = run.parallel.pp > 1
    interleaved = canonical(run.parallel.schedule, run.parallel.vpp) != "1f1b" and run.parallel.vpp > 1
    dp = run.parallel.dp * run.parallel.cp
    bucket = max(MEGATRON_MIN_BUCKET, MEGATRON_BUCKET_PER_RANK * dp)
    if name == "torchtitan":
        protocol = "torch_looped" if interleaved else "torch_1f1b"
        return FrameworkRules(name, False, not pipelined, not pipelined, not pipelined, 0, p2p_protocol=protocol)
    if name == "mindformers":
        groups = run.timing.gradient_aggregation_group or MINDFORMERS_GRADIENT_AGGREGATION_GROUP
        return FrameworkRules(name, True, True, True, True, bucket, fusion_groups=groups)
    return FrameworkRules(
        "megatron",
        not interleaved,
        True,
        True,
        True,
        bucket,
        buckets_first_chunk_only=True,
        combined_1f1b=run.parallel.overlap_moe_expert_parallel_comm,
        p2p_protocol=(OVERLAP_BY_RELEASE[run.send_waits] if run.timing.overlap_p2p_comm else "megatron_batched")
        if interleaved
        else ("deepspeed" if run.timing.deepspeed_pipeline else "megatron_sync"),
        p2p_warmup_flush=interleaved and run.timing.overlap_p2p_comm_warmup_flush,
    )


# ---------------------------------------------------------------------------------------------
# Placement and per-cell times


def _layers_and_options(
    run: RunConfig,
    memory: MemoryModel,
    cell_options: CellOptions | None,
    by_model: Mapping[str, CellOptions] | None = None,
    mtp_cell: tuple[int, int] | None = None,
) -> tuple[LayerWalk, dict[Layer, str]]:
    """The layers in their cells and each body layer's option. As configured: full recompute where the
    run's rule puts it (all layers, Megatron's uniform or block, torchtitan's every N-th block), the
    model's configured option (SLCT when a switch recomputes, else NONE) elsewhere."""
    if cell_options is not None:
        return place_plan(run, cell_options, by_model, mtp_cell)
    placed = walk(run)
    configured = {name: configured_option(memory, name) for name in run.model_names}
    rule = run.recompute
    chosen: dict[Layer, str] = {}
    for stage in range(placed.stages):
        first = 0
        for chunk in range(placed.chunks):
            bodies = [layer for layer in placed.in_cell(chunk, stage) if layer.node == BODY]
            for layer, option in zip(bodies, rule.chunk_options(len(bodies), first), strict=True):
                chosen[layer] = "FULL" if option == "FULL" else configured[layer.model_name]
            first += len(bodies)
    return placed, chosen


def configured_states(run: RunConfig, memory: MemoryModel) -> dict[Layer, tuple[LayerType, dict | None]]:
    """Each layer of the run as configured (no plan) and the state (and switches) `run_iteration` prices it
    at: its recompute option's, a HEAD's embedding, a TAIL's output (for tools that split its seconds)."""
    placed, chosen = _layers_and_options(run, memory, None)
    return {layer: _state(layer, chosen, memory) for layer in placed}


def _data_links(run: RunConfig, links: Links, memory: MemoryModel) -> Links:
    """The run's links with the data-parallel groups added: dp·cp ranks spaced tp·cp apart (Megatron's
    rank order tp, cp, dp, pp), experts' data-parallel group likewise. The pipeline's neighbours are placed
    edge by edge (`pipeline_edge_local`)."""
    par, setup = run.parallel, memory.setup
    span = par.tp * par.cp * par.dp
    groups = dict(links.groups)
    groups["dp"] = Group(setup.data_group, span)
    groups["edp"] = Group(max(1, setup.expert_data_group), span)
    return replace(links, groups=groups)


def p2p_bytes(run: RunConfig, layer: Layer) -> float:
    """One micro-batch's activations (or their gradient) a cell ending in *layer* sends the next stage:
    b·s/cp tokens of the hidden size, split over TP under sequence parallelism; (1 + mtp)·h per token
    out of a standalone MTP's chunk (multi_token_prediction.py `MultiTokenPredictionBlock.forward`
    concatenates the hidden state and each MTP layer's; p2p_communication.py `_communicate` exchanges
    the shapes first under `mtp_standalone`, Megatron-LM commit d98e8a64)."""
    par, train = run.parallel, run.training
    hidden = run.spec(layer.model_name).hidden_size
    tokens = train.micro_batch_size * train.seq_length / par.cp / (par.tp if par.sequence_parallel else 1)
    if isinstance(layer.kind, EncoderBodyKind):  # a vision block hands on the tower's own tokens, whole over CP
        tokens = train.micro_batch_size * layer.kind.tokens / (par.tp if par.sequence_parallel else 1)
    if isinstance(layer.kind, TailKind) and layer.kind.part == MTP_PART:
        hidden *= 1 + layer.kind.mtp_layers
    return tokens * hidden * train.dtype_bytes


def pipeline_edge_local(run: RunConfig, sender: int, receiver: int) -> bool:
    """Whether every rank of pipeline stage *sender* shares a node with its peer in stage *receiver*.

    The three frameworks number ranks stage-major, a stage's tp·cp·dp ranks consecutive: Megatron-Core's
    `RankGenerator` (parallel_state.py, order "tp-cp-ep-dp-pp", pp slowest; core_r0.8.0 and d98e8a64),
    MindSpore's `DeviceManager::Init` (mindspore/ccsrc/frontend/parallel/device_manager.cc: stage_devices_
    the consecutive device_num/stage_num ranks of each stage, stage_id_ = rank / that) and torchtitan's
    meshes (torchtitan/distributed/parallel_dims.py at b5bcd76c6: ["pp", "dp_replicate", "dp_shard", "cp",
    "tp"], pp outermost). Rank s·span + i sends to r·span + i; with span = tp·cp·dp not a multiple of
    the node, some boundaries stay inside a server and others cross (span 4 on nodes of 8: 0→1 inside,
    1→2 across). The stage waits for its slowest rank: one pair leaving the node puts the edge on the NIC."""
    par = run.parallel
    span, node = par.tp * par.cp * par.dp, par.devices_per_node
    return all((sender * span + i) // node == (receiver * span + i) // node for i in range(span))


def p2p_seconds(run: RunConfig, links: Links, layer: Layer, edge: tuple[int, int] = (0, 1)) -> float:
    """`p2p_bytes` over the link between the stages of *edge* (sender, receiver), with its latency:
    inside a server (`pipeline_edge_local`) a device-to-device link, else the NIC.

    Under `timing.pipe_partitioned` without sequence parallelism each tensor-parallel rank sends its
    1/tp share and the receiver all-gathers the whole over the tensor-parallel group before it reads it
    (DeepSpeed runtime/pipe/engine.py `PipelineEngine._exec_forward_pass` and `_exec_send_grads`:
    `PartitionedTensor(..., group=self.grid.get_slice_parallel_group())`, `part.full()` on arrival;
    microsoft/DeepSpeed 0050fdad, the same since 2021)."""
    payload = p2p_bytes(run, layer)
    par = run.parallel
    gather = 0.0
    if run.timing.pipe_partitioned and par.tp > 1 and not par.sequence_parallel:
        gather = collective_seconds(Collective(ALL_GATHER, "tp", payload, "tp"), links)
        payload /= par.tp
    local = pipeline_edge_local(run, *edge)
    bandwidth = links.pair_bytes_per_s() if local else links.inter_node_bytes_per_s
    return payload / bandwidth + links.latency_s + (0.0 if local else links.inter_node_latency_s) + gather


@dataclass
class _Cells:
    forward: list[list[float]]
    backward: list[list[float]]
    fsdp_forward: list[list[float]]  # exposed gather seconds per micro-batch
    fsdp_backward: list[list[float]]
    transfer: list[list[float]]


def _fsdp_exposed(
    layers: Sequence[tuple[float, float]],
    gathers: Sequence[float],
    reduces: Sequence[float],
    rules: FrameworkRules,
    contention: float = 0.0,
    regathers: Sequence[float] | None = None,
) -> tuple[float, float, float, float, float]:
    """Per micro-batch over a cell's layers in order: (exposed forward, exposed backward, link seconds
    forward, link seconds backward), then the once-per-iteration reduce-scatters' link seconds (torchtitan
    under a pipeline: they queue after the last backward, `_post_reduce_end`). Each layer's gather is
    prefetched behind the previous layer's compute (the first one's
    is exposed); the backward walks the layers in reverse, its gathers prefetched likewise and each
    reduce-scatter running behind the next layer's backward, the last one's exposed. *regathers*:
    each layer's gather before its backward when it is not its forward gather under
    `rules.fsdp_reshard_after_forward` (torchtitan's units, `titan_step.fsdp2_units`)."""
    if regathers is None:
        regathers = [gather if rules.fsdp_reshard_after_forward else 0.0 for gather in gathers]
    forward_exposed = backward_exposed = forward_link = backward_link = 0.0
    # What runs beside a layer's compute costs *contention* of its time (the SMs it takes).
    previous = 0.0
    for (forward, _), gather in zip(layers, gathers, strict=True):
        forward_exposed += max(0.0, gather - previous) + contention * min(gather, previous)
        forward_link += gather
        previous = forward
    previous = 0.0
    reverse = list(zip(layers, regathers, reduces, strict=True))[::-1]
    pending = 0.0
    for (_, backward), again, reduce in reverse:
        # the previous layer's reduce-scatter and this layer's gather share the time of the previous backward
        work = again + (pending if rules.fsdp_reduce_every_micro_batch else 0.0)
        backward_exposed += max(0.0, work - previous) + contention * min(work, previous)
        backward_link += work
        pending = reduce
        previous = backward
    if rules.fsdp_reduce_every_micro_batch:
        backward_exposed += pending
        backward_link += pending
    once_link = 0.0 if rules.fsdp_reduce_every_micro_batch else sum(reduces)
    return forward_exposed, backward_exposed, forward_link, backward_link, once_link


# ---------------------------------------------------------------------------------------------
# The iteration


def run_iteration(
    run: RunConfig,
    cell_options: CellOptions | None = None,
    times: TimeModel | None = None,
    memory: MemoryModel | None = None,
    by_model: Mapping[str, CellOptions] | None = None,
    mtp_cell: tuple[int, int] | None = None,
) -> Iteration:
    """The iteration of the run as configured (*cell_options* None) or of a plan's cells.

    *by_model* places each sub-model along the cells on its own (`model.placement.model_cell_options`),
    as a plan whose combined bodies stand for layers of several sub-models needs. *mtp_cell*: the
    plan runs the MTP layers there, apart from the loss (Megatron-Core's standalone MTP).
    """
    par, train = run.parallel, run.training
    times = times if times is not None else TimeModel(run)
    memory = memory if memory is not None else MemoryModel(run)
    rules = framework_rules(run)
    placed, chosen = _layers_and_options(run, memory, cell_options, by_model, mtp_cell)
    links = _data_links(run, times.links, memory)
    kernels = times.kernels
    stages, chunks, m = par.pp, par.vpp, train.micro_batches
    setup = memory.setup
    fsdp = setup.shard_level >= 3

    zeros = [[0.0] * stages for _ in range(chunks)]
    cells = _Cells(*([row[:] for row in zeros] for _ in range(5)))
    per_cell: dict[tuple[int, int], list[tuple[Layer, float, float]]] = {}
    link = exposed = again_link = again_exposed = 0.0
    states: dict[Layer, tuple[LayerType, dict | None]] = {}
    waits: dict[Layer, HostWaits] = {}  # the GPU's waits for the host in the layer (`TimeModel.host`)
    host_layers: dict[tuple[int, int], list[HostLayer]] = {}  # offloaded copies, cell by cell (`host_copies`)
    for layer in placed:
        state = states[layer] = _state(layer, chosen, memory)
        f_ms, b_ms = times.layer_times(layer, *state)
        waits[layer] = times.host(layer, *state)
        forward_s, backward_s = f_ms / 1e3, b_ms / 1e3  # with the layer's waits for the host
        copy_s = wait_s = 0.0
        if times.calibration is None:  # the waits for offloaded activations' reloads (`timing/offload.py`)
            window = backward_s + (forward_s if rules.combined_1f1b else 0.0)
            offloaded = memory.state_memory(layer, *state).offloaded_bytes
            copy_s = reload_seconds(offloaded, times.device.host_link_gbs)
            wait_s = reload_wait_s(offloaded, times.device.host_link_gbs, window)
            backward_s += wait_s
        host_layers.setdefault((layer.chunk, layer.stage), []).append(HostLayer(forward_s, backward_s, copy_s, wait_s))
        per_cell.setdefault((layer.chunk, layer.stage), []).append((layer, forward_s, backward_s))
        cells.forward[layer.chunk][layer.stage] += forward_s
        cells.backward[layer.chunk][layer.stage] += backward_s
        l1, e1, l2, e2 = times.link_ms(layer, *state)
        link, exposed, again_link, again_exposed = link + l1, exposed + e1, again_link + l2, again_exposed + e2

    if train.cpu_offloading_num_layers and times.calibration is None:  # TE's CPU offloading (pp 1: one cell)
        forward_wait, backward_wait = _cpu_offload_waits(run, memory, times, per_cell[(0, 0)], states)
        cells.forward[0][0] += forward_wait
        cells.backward[0][0] += backward_wait

    batch = [0.0] * stages  # a micro-batch's get_batch broadcasts on each stage
    if run.framework == "megatron" and run.timing.batch_broadcast:  # get_batch's broadcasts (`timing/batch.py`)
        for (chunk, stage), seconds in batch_loading(run, placed.layers, links).items():
            cells.forward[chunk][stage] += seconds
            batch[stage] += seconds
            host_layers.setdefault((chunk, stage), []).insert(0, HostLayer(seconds, 0.0, 0.0))  # before the layers

    # delayed scaling's amax reductions: a cell holding FP8 GEMMs reduces once forward, once backward (`fp8_amax`),
    # the host launching them after its last FP8 layer's forward and in its first one's backward
    amax = [0.0] * stages
    amax_host = [0.0] * stages
    reduction = amax_reduction_seconds(run, links)
    host_counted = run.framework == "megatron" and times.calibration is None and run.timing.cuda_graph_impl == "none"
    launched = amax_reduction_launches(run) * times.launch_s() if host_counted else 0.0
    if reduction > 0 or launched > 0:
        for (chunk, stage), entries in _fp8_cells(times, per_cell).items():
            cells.forward[chunk][stage] += reduction
            cells.backward[chunk][stage] += reduction
            amax[stage] += REDUCTIONS_PER_CHUNK * reduction
            if launched > 0:
                (first, _, first_backward), (last, last_forward, _) = entries[0], entries[-1]
                forward_host = host_added_s(
                    waits[last].launch_forward, last_forward - waits[last].forward, launched, reduction
                )
                backward_host = host_added_s(
                    waits[first].launch_backward, first_backward - waits[first].backward, launched, reduction
                )
                cells.forward[chunk][stage] += forward_host
                cells.backward[chunk][stage] += backward_host
                amax_host[stage] += forward_host + backward_host

    # ZeRO-3 / FSDP: each layer's parameters gathered (bf16; torchtitan's Float8 weights in float8 under
    # its float8 all-gather, `LayerParams.gathered_bytes`) and gradients reduce-scattered over dp·cp.
    fsdp_link = fsdp_once = fsdp_once_link = 0.0
    precompute = [0.0] * stages  # torchtitan's Float8 scale precompute after the step, per stage
    # torchtitan under a pipeline: each cell's copy-ins and reduce-scatters, queued after its last backward
    post_reduce: dict[tuple[int, int], float] = {}
    if fsdp:
        for (chunk, stage), entries in per_cell.items():
            gathers, reduces = [], []
            for layer, _, _ in entries:
                params = memory.parameters(layer)
                gathers.append(_dp_collective(ALL_GATHER, params, train.dtype_bytes, links, gathered=True))
                reduces.append(_dp_collective(REDUCE_SCATTER, params, setup.grad_bytes, links))
            again: list[float] | None = None
            regathered = [rules.fsdp_reshard_after_forward] * len(entries)
            if rules.name == "torchtitan":  # its FSDP2 units (titan_step.fsdp2_units)
                units = fsdp2_units(
                    [layer.node for layer, _, _ in entries],
                    [_last_block(run, layer) for layer, _, _ in entries],
                    gathers,
                    reduces,
                    run.timing.fsdp_units,
                    rules.fsdp_reshard_after_forward,
                )
                gathers, again, reduces = list(units.forward), list(units.backward), list(units.reduces)
                regathered = list(units.regathered)
            fe, be, fl, bl, once_link = _fsdp_exposed(
                [(f, b) for _, f, b in entries], gathers, reduces, rules, kernels.contention, again
            )
            copies = [fsdp2_copy_seconds(run, memory.parameters(layer), kernels) for layer, _, _ in entries]
            if rules.name == "torchtitan" and not rules.fsdp_reduce_every_micro_batch:
                # FSDP2 keeps the unsharded gradients in fp32 across the micro-batches (titan_step)
                added, copy_in = pipelined_grad_bytes(m, train.dtype_bytes, train.grad_bytes)
                held = [memory.parameters(layer).total for layer, _, _ in entries]
                be += sum(kernels.memory_s(added * params) for params in held)
                copies = [(out, kernels.memory_s(copy_in * n)) for (out, _), n in zip(copies, held, strict=True)]
            fe += sum(out for out, _ in copies)
            be += sum(
                (out if regathered[index] else 0.0) + (reduce_in if rules.fsdp_reduce_every_micro_batch else 0.0)
                for index, (out, reduce_in) in enumerate(copies)
            )
            if not rules.fsdp_reduce_every_micro_batch:  # after the backward, not beside it (titan_step)
                post_reduce[(chunk, stage)] = sum(reduces) + sum(r for _, r in copies)
            if not rules.fsdp_gather_every_micro_batch:  # parameters kept whole after the first gather
                fsdp_once += fe
                fe = 0.0
            cells.fsdp_forward[chunk][stage] = fe
            cells.fsdp_backward[chunk][stage] = be
            fsdp_link += (fl + bl) * (m if rules.fsdp_gather_every_micro_batch else 1)
            fsdp_once_link += once_link
            if run.timing.fp8_precompute_scale:
                kinds = [layer.kind for layer, _, _ in entries]
                precompute[stage] += precompute_scale_seconds(kinds, setup, links, kernels)
        fsdp_once += max(precompute)  # the stages run theirs at once
        fsdp_once_link += max(precompute)

    # Pipeline transfers: each cell's output to the next cell along the model, over the link between the
    # two stages' ranks (`pipeline_edge_local`); the last cell sends nothing.
    if stages > 1:
        along = cell_order(par.schedule, stages, chunks)
        receiver = {cell: along[index + 1][1] for index, cell in enumerate(along[:-1])}
        for chunk in range(chunks):
            for stage in range(stages):
                edge = (stage, receiver.get((chunk, stage), stage))
                entries = per_cell.get((chunk, stage))
                layer = entries[-1][0] if entries else placed.layers[0]
                cells.transfer[chunk][stage] = p2p_seconds(run, links, layer, edge)

    schedule, group = par.schedule, par.microbatch_group_size_per_vp_stage
    combined = _combined_savings(run, times, per_cell, states, waits) if rules.combined_1f1b else None
    # the offloaded copies' device-to-host streams (`ppb_core.host_copies`), only where something is copied
    host: HostCopies | None = HostCopies([[host_layers.get((c, s), []) for s in range(stages)] for c in range(chunks)])
    host = host if host is not None and host.any() else None
    plain = simulate(schedule, cells.forward, cells.backward, m, combined=combined, group=group, host=host)
    with_fsdp_f = [[cells.forward[c][s] + cells.fsdp_forward[c][s] for s in range(stages)] for c in range(chunks)]
    with_fsdp_b = [[cells.backward[c][s] + cells.fsdp_backward[c][s] for s in range(stages)] for c in range(chunks)]
    gathered = (
        simulate(schedule, with_fsdp_f, with_fsdp_b, m, combined=combined, group=group, host=host) if fsdp else plain
    )
    if stages == 1:
        timeline = gathered
    elif rules.p2p_protocol and canonical(schedule, chunks) in ("1f1b", "interleaved"):
        timeline = simulate_p2p(
            rules.p2p_protocol,
            schedule,
            with_fsdp_f,
            with_fsdp_b,
            m,
            cells.transfer,
            combined,
            group,
            warmup_flush=rules.p2p_warmup_flush,
            host=host,
        )
    else:
        blocking = rules.p2p_blocking
        timeline = simulate(
            schedule,
            with_fsdp_f,
            with_fsdp_b,
            m,
            transfer=cells.transfer,
            blocking=blocking,
            combined=combined,
            group=group,
            host=host,
        )
    saved = [0.0] * stages  # what each stage's combined steps save
    if combined is not None:
        for stage, pairs in enumerate(combined_pairs(schedule, stages, chunks, m, group)):
            saved[stage] = sum(combined[f][b][stage] for f, b in pairs)
    stage_work = [
        sum(cells.forward[c][s] + cells.backward[c][s] for c in range(chunks)) * m - saved[s] for s in range(stages)
    ]
    busiest = max(range(stages), key=stage_work.__getitem__)
    work = stage_work[busiest]
    compute = work
    # of it, the busiest stage's GPU waiting for Megatron's host to launch its kernels (`TimeModel.host`)
    waiting = sum(host.forward + host.backward for layer, host in waits.items() if layer.stage == busiest)
    host_wait = min(compute, m * (waiting + amax_host[busiest]))
    bubble = plain.makespan - work
    if post_reduce:
        fsdp_once += max(0.0, _post_reduce_end(timeline, post_reduce, stages, chunks) - timeline.makespan)
    fsdp_term = gathered.makespan - plain.makespan + fsdp_once
    p2p = timeline.makespan - gathered.makespan

    # Data-parallel gradient reduction per stage, overlapped with its last backward but for the tail.
    dp_tail, dp_link, dp_exposed = _dp_reduction(
        run, rules, memory, links, kernels, per_cell, timeline, fsdp, stages, chunks
    )
    dp_term = max(0.0, dp_tail - timeline.makespan)
    gather_exposed, gather_link = _param_gather(run, rules, memory, links, kernels, per_cell, fsdp, timeline)
    embedding_sync = _embedding_sync(run, memory, links, placed)
    dp_term += gather_exposed + embedding_sync
    optimizer = _optimizer_seconds(run, memory, kernels, per_cell)
    extra = _bookkeeping_seconds(run, memory, kernels, links, per_cell)

    breakdown = {
        "compute": compute,
        "bubble": bubble,
        "fsdp_communication": fsdp_term,
        "p2p": p2p,
        "dp_communication": dp_term,
        "optimizer": optimizer,
        "bookkeeping": extra,
    }
    seconds = sum(breakdown.values())
    tokens = global_batch_sequences(run) * train.seq_length
    count = devices(run)
    flops = model_flops_per_iteration(run)

    by_index = {(layer.model_name, layer.index): option for layer, option in chosen.items()}
    hardware = hardware_flops_per_iteration(run, lambda model, index: by_index.get((model, index), "NONE"))
    hidden = {
        "layer_collectives": _share(link * m, exposed * m),
        "recompute_gathers": _share(again_link * m, again_exposed * m),
        "dp_communication": _share(dp_link + gather_link, dp_exposed + gather_exposed),
    }
    link_seconds = {
        "layer_collectives": link * m / 1e3,
        "recompute_gathers": again_link * m / 1e3,
        "dp_communication": dp_link + gather_link,
    }
    if fsdp:
        hidden["fsdp_communication"] = _share(fsdp_link + fsdp_once_link, fsdp_term)
        link_seconds["fsdp_communication"] = fsdp_link + fsdp_once_link
    return Iteration(
        seconds=seconds,
        tokens_per_second_per_device=tokens / seconds / count,
        mfu=utilization(run, flops, seconds),
        hfu=utilization(run, hardware, seconds),
        breakdown=breakdown,
        hidden=hidden,
        link_seconds=link_seconds,
        tokens=tokens,
        devices=count,
        model_flops=flops,
        hardware_flops=hardware,
        framework=rules.name,
        host_wait_seconds=host_wait,
        busiest_stage=busiest,
        compute_parts={
            "layers": work + saved[busiest] - m * (batch[busiest] + amax[busiest] + amax_host[busiest]),
            "batch_broadcast": m * batch[busiest],
            "amax_reduction": m * amax[busiest],
            "amax_host": m * amax_host[busiest],
            "combined_saving": -saved[busiest],
        },
    )


def _fp8_cells(times: TimeModel, per_cell) -> dict[tuple[int, int], list]:
    """The cells whose layers run FP8 GEMMs (`Op.fp8`: the output layer and the router stay in 16 bits), each
    one model chunk's TransformerBlock on one stage, with those layers' entries (layer, forward, backward
    seconds) in model order."""
    fp8: dict[LayerKind, bool] = {}
    held = {}
    for cell, entries in per_cell.items():
        for layer, _, _ in entries:
            if layer.kind not in fp8:
                fp8[layer.kind] = any(op.gemm is not None and op.fp8 and op.weight_elements for op in times.ops(layer))
        found = [entry for entry in entries if fp8[entry[0].kind]]
        if found:
            held[cell] = found
    return held


def _cpu_offload_waits(run: RunConfig, memory: MemoryModel, times: TimeModel, entries, states) -> tuple[float, float]:
    """(forward, backward) seconds a micro-batch waits for Transformer Engine's CPU offloading copies
    (`timing.offload.cpu_offload_waits`) over the cell's decoder layers in order, each copying what
    `te_offload.offloaded_bytes` says at the device's `host_link_gbs`."""
    forward, backward, copies = [], [], []
    for layer, forward_s, backward_s in entries:
        if layer.node == BODY:
            forward.append(forward_s)
            backward.append(backward_s)
            moved = te_offload.offloaded_bytes(memory.state_memory(layer, *states[layer]))
            copies.append(reload_seconds(moved, times.device.host_link_gbs))
    return cpu_offload_waits(forward, backward, copies, run.training.cpu_offloading_num_layers)


def _last_block(run: RunConfig, layer: Layer) -> bool:
    """The model's last transformer block (torchtitan does not reshard it after the forward)."""
    return layer.node == BODY and layer.index == run.spec(layer.model_name).num_layers - 1


def _combined_savings(run, times, per_cell, states, waits) -> list[list[list[float]]]:
    """[forward chunk][backward chunk][stage]: what a combined 1F1B step of those chunks saves
    (`combined.step_saving` over the cells' transformer layers, the decoder's then the MTP layers a
    TAIL part in the cell runs, `combined.mtp_segments`; the embedding and the heads' losses run alone).

    A paired forward layer's wait for the host is saved too: when its dispatcher synchronizes, the
    backward layer's experts are already launched on the compute stream
    (`TransformerLayerSchedulePlan.run` launches mlp_bwd before dispatch_fwd), so the GPU works on while
    the host resumes. But one host thread launches both layers of a pair: the paired layers take at
    least the host's time to launch them all (`HostWaits.launch_forward` + `launch_backward`), so a
    step never saves more than their times (with their waits for the host) beyond that."""
    stages, chunks = run.parallel.pp, run.parallel.vpp
    delay = run.timing.delay_wgrad_compute
    segments: dict[tuple[int, int], list] = {}
    bodies: dict[tuple[int, int], list[Layer]] = {}
    for (chunk, stage), entries in per_cell.items():
        bodies[(chunk, stage)] = [layer for layer, _, _ in entries if layer.node == BODY]
        segments[(chunk, stage)] = [
            layer_segments(times, layer, *states[layer], delay_wgrad=delay) for layer in bodies[(chunk, stage)]
        ]
        for layer, _, _ in entries:  # a TAIL part's MTP layers, after the decoder layers
            segments[(chunk, stage)] += mtp_segments(times, layer, states[layer][0], delay)
    # the all-to-alls beside compute take their SMs: a flex backend's own count (`flex.flex_sms`), else NCCL's
    geo = OpGeometry.from_run(run)
    flex = geo.flex_sms
    contention = min(1.0, flex / times.kernels.sms) if flex else times.kernels.contention
    # ... each direction its own (fused HybridEP's combine keeps its own SMs, `flex.flex_sms`)
    combine_flex = flex if geo.flex_combine_sms is None else geo.flex_combine_sms
    combine_contention = min(1.0, combine_flex / times.kernels.sms) if combine_flex else times.kernels.contention
    totals = {layer: (forward, backward) for entries in per_cell.values() for layer, forward, backward in entries}

    def saving(f: int, b: int, s: int) -> float:
        forwards, backwards = segments.get((f, s), []), segments.get((b, s), [])
        pairs = min(len(forwards), len(backwards))
        paired_forward = bodies.get((f, s), [])[:pairs]
        paired_backward = bodies.get((b, s), [])[::-1][:pairs]
        hidden_waits = sum(waits[layer].dispatcher for layer in paired_forward)
        shared = direction_contention(forwards, backwards[::-1], contention, combine_contention)
        saved = step_saving(forwards, backwards[::-1], shared, delay) + hidden_waits
        launching = sum(waits[layer].launch_forward for layer in paired_forward) + sum(
            waits[layer].launch_backward for layer in paired_backward
        )
        if launching <= 0:
            return saved
        timed = sum(totals[layer][0] for layer in paired_forward) + sum(totals[layer][1] for layer in paired_backward)
        return min(saved, max(0.0, timed - launching))

    return [[[saving(f, b, s) for s in range(stages)] for b in range(chunks)] for f in range(chunks)]


def batch_loading(run: RunConfig, layers: Sequence[Layer], links: Links) -> dict[tuple[int, int], float]:
    """Each data-reading cell's seconds a micro-batch in Megatron's `get_batch` (`timing/batch.py`): the cell
    of the token embedding broadcasts tokens and positions, the cell of the loss labels and the loss mask,
    a cell holding both (or the MTP layers, which read the tokens too) all four; each the causal mask too
    where the data loader builds it (`timing.attention_mask_in_dataloader`)."""
    cells: dict[tuple[int, int], list[bool]] = {}
    for layer in layers:
        first, last = reads(layer)
        if first or last:
            cell = cells.setdefault((layer.chunk, layer.stage), [False, False])
            cell[0], cell[1] = cell[0] or first, cell[1] or last
    train, mask = run.training, run.timing.attention_mask_in_dataloader
    b, s = train.micro_batch_size, train.seq_length
    return {cell: batch_seconds(b, s, first, last, mask, links) for cell, (first, last) in cells.items()}


def _state(layer: Layer, chosen: Mapping[Layer, str], memory: MemoryModel) -> tuple[LayerType, dict | None]:
    """The state (and switches) a layer runs at: a body layer's option, a HEAD's embedding, a TAIL's output."""
    if layer.node == BODY:
        return option_state(chosen[layer], memory.configured_switches(layer.model_name))
    return (LayerType.EMBEDDING_LAYER if layer.node == HEAD else LayerType.OUTPUT_LAYER), None


def _share(link: float, exposed: float) -> float:
    """The hidden share of *link* seconds of which *exposed* were not hidden (1.0 when nothing was sent)."""
    if link <= 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - exposed / link))


def _post_reduce_end(timeline: Timeline, post_reduce: dict[tuple[int, int], float], stages: int, chunks: int) -> float:
    """The latest end of a rank's reduce-scatter queue under torchtitan's pipeline
    (`titan_step.post_backward_reduce_end`): each chunk's queue after its last micro-batch's backward."""
    latest = 0.0
    for stage in range(stages):
        last = [0.0] * chunks
        for op, end in zip(timeline.orders[stage], timeline.ends[stage], strict=True):
            if op.kind == "B":
                last[op.chunk] = max(last[op.chunk], end)
        queue = [(last[chunk], post_reduce.get((chunk, stage), 0.0)) for chunk in range(chunks)]
        latest = max(latest, post_backward_reduce_end(queue))
    return latest


def fsdp2_copy_seconds(run: RunConfig, params: LayerParams, kernels) -> tuple[float, float]:
    """(all-gather copy-out, reduce-scatter copy-in) seconds of one FSDP2 unit of *params*
    (their elements before data-parallel sharding), on the compute stream; torchtitan only.

    torch.distributed.fsdp._fully_shard._fsdp_collectives (torch 2.13; the same functions since
    torch 2.4): after each all-gather, `foreach_all_gather_copy_out` copies the gathered buffer into
    every parameter's unsharded storage (`torch.ops.fsdp.split_with_sizes_copy`: read and write the
    parameters in the compute dtype, bc + bc an element) on the current stream; before each
    reduce-scatter `foreach_reduce` copies the bf16 gradients into the reduce-scatter input in the
    reduce dtype (`foreach_reduce_scatter_copy_in`, `torch.ops.fsdp.chunk_cat`: bc + grad_bytes) on
    the current stream. The copy-out moves the unit as gathered (`LayerParams.gathered_bytes`): under
    the Float8 all-gather a byte for each float8 weight element (torchao float8/fsdp_utils.py
    `fsdp_post_all_gather` makes the unsharded weight over the gathered float8 data). Not priced:
    the all-gather copy-in (`_get_param_all_gather_inputs` casts the fp32 shard to bf16, or to
    float8 in `fsdp_pre_all_gather`, and `all_gather_copy_in` copies it into the all-gather input:
    1/dp of the above each) runs on FSDP2's own copy-in stream beside the compute; the gradient division is
    none for fp32 and bf16 reductions (`_get_gradient_divide_factors`: NCCL's ReduceOp.AVG); the
    sharded gradient is assigned, not added, on the first micro-batch."""
    if run.framework != "torchtitan":
        return 0.0, 0.0
    bc, grad = run.training.dtype_bytes, run.training.grad_bytes
    return kernels.memory_s(2 * params.gathered_bytes(bc)), kernels.memory_s((bc + grad) * params.total)


def _dp_collective(kind: str, params: LayerParams, element_bytes: int, links: Links, gathered: bool = False) -> float:
    """One collective over a layer's parameters: non-expert ones over dp·cp, experts over their group.
    *gathered*: FSDP's parameter all-gather, its float8 weights at a byte (`LayerParams.gathered_bytes`)."""
    seconds = 0.0
    if params.non_expert:
        float8 = params.float8 if gathered else 0
        payload = (params.non_expert - float8) * element_bytes + float8
        seconds += collective_seconds(Collective(kind, "dp", payload, "dp"), links)
    if params.expert:
        seconds += collective_seconds(Collective(kind, "edp", params.expert * element_bytes, "dp"), links)
    return seconds


def grad_pass_bytes(run: RunConfig, expert: bool = False) -> int:
    """HBM bytes per parameter (an expert's where *expert*) that Megatron-Core's DDP moves over a
    gradient bucket before reducing it, on the compute stream (param_and_grad_buffer.py
    `start_grad_sync`, core_r0.8.0 and d98e8a64): the NaN check reads the bucket for its norm
    (`grad_data.norm(p=2)`, unless `--no-check-for-nan-in-loss-and-grad` or fp16's dynamic loss
    scaling turns it off: arguments.py), and `grad_data *= gradient_scaling_factor` reads and writes
    it unless the factor is 1 (distributed_data_parallel.py `DistributedDataParallel.__init__`): 1/(dp·cp)
    by default, so 1 only without data parallelism; 1 under `--calculate-per-token-loss` (its
    division comes after the reduction, `per_token_scale_bytes`); under `--ddp-average-in-collective`
    1 for non-expert parameters (NCCL averages) and expert-dp / (dp·cp) for experts. Other
    frameworks: none."""
    if run.framework != "megatron":
        return 0
    par, timing = run.parallel, run.timing
    grad = run.training.grad_bytes
    check = timing.check_for_nan_in_grad and run.training.dtype != "fp16"
    if timing.calculate_per_token_loss:
        scaled = False
    elif timing.ddp_average_in_collective:
        scaled = expert and par.tp != par.ep * par.expert_tp  # expert-dp = dp·cp·tp/(ep·etp)
    else:
        scaled = par.dp * par.cp > 1
    return (grad if check else 0) + (2 * grad if scaled else 0)


def _dp_reduction(run, rules, memory, links, kernels, per_cell, timeline, fsdp, stages, chunks):
    """(latest end of a stage's reduction, link seconds, exposed seconds) over every stage.

    Buckets fill in backward order (the stage's last chunk's last layer first); a bucket's
    reduction starts when its last gradient is ready and after the previous bucket's, on one
    communication stream. Megatron's passes over a full bucket (`grad_pass_bytes`) run first on the
    compute stream, so they delay the rest of the backward and the bucket's own reduction. The last
    micro-batch's backward of a stage is taken to run back to back at the end of the stage's
    timeline, but under Megatron's interleaved schedule, whose chunks reduce when the schedule
    launches them (`chunk_sync_launches`, read off the timeline). With `timing.overlap.dp` 0 every
    reduction waits for the backward to end."""
    overlap = run.timing.overlap.dp
    contention = kernels.contention
    kind = REDUCE_SCATTER if memory.setup.shard_level >= 1 else ALL_REDUCE
    setup = memory.setup
    if setup.optimizer_parallel and setup.accumulates and not setup.accumulation_shard:
        # MindSpore's optimizer parallel over micro-batches: the backward of `_MicroStepAllGather` (pipeline)
        # and `_MiniStepAllGather` (gradient accumulation) all-reduces the whole `accu_grads` and keeps its
        # slice (`split(all_reduce(z))[rank]`; mindspore-ai/mindspore c3665836, mindspore/python/mindspore/ops/
        # _grad_experimental/grad_comm_ops.py), not a reduce-scatter
        kind = ALL_REDUCE
    latest = 0.0
    link_total = exposed_total = 0.0
    if fsdp:
        return 0.0, 0.0, 0.0
    reduces = memory.setup.data_group > 1 or memory.setup.expert_data_group > 1
    per_parameter, per_expert = grad_pass_bytes(run), grad_pass_bytes(run, expert=True)
    if not reduces and not per_parameter and not per_expert:
        return 0.0, 0.0, 0.0
    interleaved = canonical(run.parallel.schedule, chunks) == "interleaved"
    launched = chunk_sync_launches(timeline) if rules.buckets_first_chunk_only and interleaved else None
    for stage in range(stages):
        end = timeline.ends[stage][-1] if timeline.ends[stage] else 0.0
        entries = [(chunk, entry) for chunk in range(chunks) for entry in per_cell.get((chunk, stage), [])]
        # backward order: last layer first
        clock = end - sum(b for _, (_, _, b) in entries)
        ready: list[tuple[float, float, int]] = []  # (time its gradients are ready, parameters, chunk)
        layers: list[Layer] = []
        for chunk, (layer, _, backward) in reversed(entries):
            clock += backward
            when = clock if launched is None else launched[stage].get(chunk, end)
            ready.append((when, memory.parameters(layer), chunk))
            layers.append(layer)
        buckets: list[tuple[float, float]] = []  # (ready time, collective seconds)
        start = 0
        passes = 0.0  # the compute stream's time in bucket passes so far
        if rules.fusion_groups:  # MindSpore's fused reductions, one per fusion id and op (no bucket passes)
            element = mindspore_reduction_bytes(run)
            for op, members in _mindspore_reductions(memory, kind, ready, layers).items():
                for when, params in fused_by_id(run, members, rules.fusion_groups):
                    buckets.append((when, _dp_collective(op, params, element, links) if reduces else 0.0))
            buckets.sort(key=lambda bucket: bucket[0])
            ready = []  # nothing left for the size rule
        for last in bucket_ends([(params.total, chunk) for _, params, chunk in ready], rules, stage):
            params_sum = ready[start][1]
            for _, params, _ in ready[start + 1 : last + 1]:
                params_sum = params_sum + params
            passes += kernels.memory_s(params_sum.non_expert * per_parameter + params_sum.expert * per_expert)
            seconds = _dp_collective(kind, params_sum, memory.setup.grad_bytes, links) if reduces else 0.0
            buckets.append((ready[last][0] + passes, seconds))
            start = last + 1
        end += passes
        link, exposed = bucket_tail(buckets, end, overlap, contention)
        latest = max(latest, end + exposed)
        link_total += link
        exposed_total = max(exposed_total, exposed)
    return latest, link_total / max(1, stages), exposed_total


def _mindspore_gathered(memory: MemoryModel, layer: Layer) -> LayerParams:
    """What of a layer MindSpore gathers in the forward: under its optimizer parallel the sharded weights only
    (`optimizer_shards`: no embedding table unless `model_config.parallel_optimizer`, no norm scale or bias);
    under SAPP's ZeRO words every parameter."""
    params = memory.parameters(layer)
    if not memory.setup.optimizer_parallel:
        return params
    return optimizer_shards(params, layer.kind, memory.setup)[0]


def _mindspore_reductions(
    memory: MemoryModel, kind: str, ready: Sequence[tuple[float, LayerParams, int]], layers: Sequence[Layer]
) -> dict[str, list[tuple[float, LayerParams, Layer]]]:
    """A stage's gradients (when ready, parameters, chunk; backward order) by the collective MindSpore reduces them
    with: under its optimizer parallel the sharded weights' with *kind* (the AllGather's backward) and the whole
    ones' with an all-reduce (their mirror op, step_parallel.cc `InsertMirrorOps`), each op type fused on its own
    (communication_op_fusion.cc fuses one (group, op, fusion id, dtype)); else every gradient with *kind*."""
    if not memory.setup.optimizer_parallel:
        return {kind: [(when, params, layer) for (when, params, _), layer in zip(ready, layers, strict=True)]}
    ops: dict[str, list[tuple[float, LayerParams, Layer]]] = {}
    for (when, params, _), layer in zip(ready, layers, strict=True):
        sharded, whole = optimizer_shards(params, layer.kind, memory.setup)
        for op, part in ((kind, sharded), (ALL_REDUCE, whole)):
            if part.total:
                ops.setdefault(op, []).append((when, part, layer))
    return ops


def chunk_sync_launches(timeline) -> list[dict[int, float]]:
    """Per stage, when Megatron's interleaved schedule launches each model chunk's gradient reduction.

    Megatron-Core core_r0.8.0 schedules.py `forward_backward_pipelining_with_interleaving`
    (`backward_step_helper`; d98e8a64 `backward_step_helper_postprocess`, the same rule): with
    `--overlap-grad-reduce` and `delay_grad_reduce` (d98e8a64: `align_grad_reduce`), on by default,
    training.py sets `grad_sync_func` to each chunk's `start_grad_sync`, and the k-th backward of pipeline
    rank r launches the sync of the chunk whose last micro-batch is backward k − r ("we launch
    asynchronous communication at the same time across the pipeline-parallel group"); those still
    pending after the cool-down are launched after the last backward. The chunk's gradients are
    reduced as a whole from there (its buckets one after another); no bucket launches during the
    backward, which runs under `no_sync`."""
    found: list[dict[int, float]] = []
    for stage, (order, ends) in enumerate(zip(timeline.orders, timeline.ends, strict=True)):
        backward_ends = [end for op, end in zip(order, ends, strict=True) if op.kind == "B"]
        last_of: dict[int, int] = {}
        for k, op in enumerate(op for op in order if op.kind == "B"):
            last_of[op.chunk] = k
        found.append({chunk: backward_ends[min(k + stage, len(backward_ends) - 1)] for chunk, k in last_of.items()})
    return found


def bucket_ends(gradients: Sequence[tuple[float, int]], rules: FrameworkRules, stage: int) -> list[int]:
    """The indices of the gradients (parameters, model chunk), in backward order, that close a bucket.

    A bucket closes once it holds `rules.bucket_parameters` (every gradient is its own bucket when that
    is 0); the last gradient closes the last one. Under Megatron-Core's rule
    (`buckets_first_chunk_only`) a model chunk's buffer also ends its last bucket, and only the first
    stage's first chunk is cut by size: every other chunk is one bucket."""
    ends: list[int] = []
    filled = 0.0
    for index, (parameters, chunk) in enumerate(gradients):
        filled += parameters
        last = index + 1 == len(gradients)
        if rules.buckets_first_chunk_only:
            size = rules.bucket_parameters if (stage, chunk) == (0, 0) else 0
            full = last or gradients[index + 1][1] != chunk or (bool(size) and filled >= size)
        else:
            full = last or not rules.bucket_parameters or filled >= rules.bucket_parameters
        if full:
            ends.append(index)
            filled = 0.0
    return ends


def bucket_tail(
    buckets: Sequence[tuple[float, float]], end: float, overlap: float, contention: float = 0.0
) -> tuple[float, float]:
    """(link seconds, exposed seconds) of gradient buckets (ready time, collective seconds) reduced one
    after another on one stream from when each is ready, against a backward ending at *end*: with
    *overlap* 1 only what runs past *end* is exposed, plus *contention* of what ran beside the
    backward (the SMs it took); with 0 every reduction waits for the end."""
    link = sum(seconds for _, seconds in buckets)
    finish = 0.0
    for when, seconds in buckets:
        finish = max(finish, when) + seconds
    tail = max(0.0, finish - end)
    beside = max(0.0, link - tail)
    return link, overlap * (tail + contention * beside) + (1 - overlap) * link


def optimizer_traffic(
    states_held: float,
    gradients_held: float,
    whole: float,
    setup,
    master_copy: bool = False,
    loss_scaled: bool = False,
) -> float:
    """HBM bytes of one device's optimizer step: for each parameter whose states it holds, read the
    gradient, read and write the states (fp32 master copy and moments: `state_bytes`), write the
    16-bit parameter; read each held gradient once more for the norm; zero the whole gradient buffer.

    Megatron's mixed-precision optimizers (megatron/core/optimizer/optimizer.py) do two passes more:
    *master_copy*, `_copy_main_params_to_model_params` after the step reads the fp32 master copy
    again (`_multi_tensor_copy_this_to_that`: read 4 bytes, the 16-bit write counted above);
    *loss_scaled* (fp16's `DynamicGradScaler`), `_unscale_main_grads_and_check_for_nan` reads and
    writes every held gradient (`torch._amp_foreach_non_finite_check_and_unscale_`)."""
    per_state = setup.grad_bytes + 2 * setup.state_bytes + setup.dtype_bytes + (MASTER_BYTES if master_copy else 0)
    per_gradient = setup.grad_bytes * (3 if loss_scaled else 1)
    return states_held * per_state + gradients_held * per_gradient + whole * setup.grad_bytes


def _param_gather(run, rules, memory, links, kernels, per_cell, fsdp, timeline) -> tuple[float, float]:
    """The distributed optimizer's all-gather of the updated (16-bit) parameters: the exposed seconds of
    the stage it delays most, and that stage's link seconds.

    Megatron-Core (core_r0.8.0, `DistributedOptimizer`; the same rule in d98e8a64's
    param_and_grad_buffer.py `finish_param_sync`) gathers the gradient buckets' parameters bucket by
    bucket in forward order (each chunk's buckets reversed, chunk after chunk:
    `_get_model_param_buffer_dp_views`). With `--overlap-param-gather` the first bucket's gather is
    launched before the forward (`zero_grad`); a module's forward pre-hook waits for its bucket's
    gather (a stream wait: the host goes on) and then launches the next bucket's
    (`_finish_param_sync_helper`). The host runs ahead of the GPU, so the gathers run back to back on
    the communication stream from the start of the iteration, one bucket ahead of the forward of the
    first micro-batch, and a bucket's forward waits until its gather is in: the stage's forwards wait
    max over buckets of (gathers up to it − the time of its first use), plus the SMs the gathers take
    beside compute. The first bucket's gather is exposed on the first stage; on a later stage it runs
    while the stage waits for its first input. With `timing.overlap.param_gather` 0 every gather is
    exposed (without the flag the optimizer step gathers synchronously). Under
    `--overlap-param-gather-with-optimizer-step` the first chunk's gathers start early
    (`gather_head_start`)."""
    if fsdp or memory.setup.shard_level < 1 or memory.setup.data_group <= 1:
        return 0.0, 0.0
    share = run.timing.overlap.param_gather
    dtype_bytes = run.training.dtype_bytes
    # MXFP8 parameters are gathered in BF16: Megatron-Core cannot map an MXFP8Tensor into the parameter buffer,
    # so a bucket holding one shares the gradient buffer and its `param_data` is that buffer viewed as bf16
    # (param_and_grad_buffer.py `_ParamAndGradBuffer.__init__`, "For MXFP8 param: Create a shared buffer for
    # param AG and grad RS", core_v0.15.0 as NeMo 25.11 ran it, core_v0.17.0, d98e8a64; the distributed
    # optimizer copies its fp32 shard in, distrib_optimizer.py `_copy_main_params_to_param_buffer`, and the
    # parameters are cast to MXFP8 as they are copied out after the gather): 2 bytes an element, not 1
    quantized_gather = memory.setup.fp8_param_gather and run.timing.fp8_recipe != "mxfp8"
    worst_link = worst_exposed = 0.0
    for stage in range(run.parallel.pp):
        first_forward: dict[int, float] = {}
        for op, begin in zip(timeline.orders[stage], timeline.starts[stage], strict=True):
            if op.kind == "F":
                first_forward.setdefault(op.chunk, begin)
        gathers: list[tuple[float, float]] = []  # (first use in the timeline, gather seconds), forward order
        for chunk in range(run.parallel.vpp):
            entries = per_cell.get((chunk, stage), [])
            if not entries:
                continue
            offsets = [0.0]
            for _, forward, _ in entries:
                offsets.append(offsets[-1] + forward)
            if rules.fusion_groups:  # MindSpore's fused gathers, one per fusion id, before its first reader
                element = mindspore_gather_bytes(run)
                start_at = first_forward.get(chunk, 0.0)
                members = [
                    (start_at + offsets[index], gathered, layer)
                    for index, (layer, _, _) in enumerate(entries)
                    if (gathered := _mindspore_gathered(memory, layer)).total
                ]
                for use, params in fused_by_id(run, members, rules.fusion_groups, first=True):
                    gathers.append((use, _parameter_gather_seconds(params, LayerParams(), element, links)))
                continue
            backward_order = list(reversed(entries))
            ends = bucket_ends(
                [(memory.parameters(layer).total, chunk) for layer, _, _ in backward_order], rules, stage
            )
            buckets, first = [], 0
            for last in ends:  # backward order: bucket = layers first..last of backward_order
                params, fp8 = LayerParams(), LayerParams()
                for layer, _, _ in backward_order[first : last + 1]:
                    params = params + memory.parameters(layer)
                    if quantized_gather:
                        fp8 = fp8 + fp8_weights(layer.kind, memory.setup)
                buckets.append((len(entries) - 1 - last, params, fp8))  # its first layer in forward order
                first = last + 1
            for index, params, fp8 in reversed(buckets):
                use = first_forward.get(chunk, 0.0) + offsets[index]
                gathers.append((use, _parameter_gather_seconds(params, fp8, dtype_bytes, links)))
        if not gathers:
            continue
        link = sum(seconds for _, seconds in gathers)
        delay = gather_wait(gathers, kernels.contention, gather_head_start(run, memory, kernels, per_cell, stage))
        exposed = share * delay + (1 - share) * link
        if exposed > worst_exposed:
            worst_exposed, worst_link = exposed, link
    return worst_exposed, worst_link


def _parameter_gather_seconds(params: LayerParams, fp8: LayerParams, element_bytes: int, links: Links) -> float:
    """The distributed optimizer's all-gather of a bucket's parameters: its FP8 parameters' 1-byte data
    (`--fp8-param-gather` under per-tensor or blockwise scaling, memory/frameworks/te_fp8.py: DDP's buffers are
    grouped by dtype; MXFP8's go in bf16, `_param_gather`), the rest at
    *element_bytes*; non-expert ones over dp·cp, experts over their group."""
    seconds = 0.0
    for whole, quantized, group in ((params.non_expert, fp8.non_expert, "dp"), (params.expert, fp8.expert, "edp")):
        if whole:
            payload = (whole - quantized) * element_bytes + quantized
            seconds += collective_seconds(Collective(ALL_GATHER, group, payload, "dp"), links)
    return seconds


def gather_wait(gathers: Sequence[tuple[float, float]], contention: float = 0.0, head_start: float = 0.0) -> float:
    """Seconds a stage's forwards wait for parameter all-gathers (first use, seconds) in forward order,
    run back to back on one stream from *head_start* seconds before the forward: the most any bucket's
    gathers-so-far run past its first use, plus *contention* of the gathers' time beside compute (the
    SMs they take)."""
    done, waited = -head_start, 0.0
    for use, seconds in gathers:
        done += seconds
        waited = max(waited, done - use)
    link = sum(seconds for _, seconds in gathers)
    return waited + contention * max(0.0, link - waited)


def embedding_sync_stages(run: RunConfig, placed: Sequence[Layer], model_name: str) -> list[int]:
    """The pipeline stages whose word-embedding gradients Megatron all-reduces after the pipeline:
    Megatron-LM d98e8a64 pretrain_gpt.py `get_embedding_ranks` takes the first stage, the last one when
    the output layer is tied to the embedding, and every stage that builds MTP layers
    (multi_token_prediction.py `get_mtp_ranks`: the last stage without a layout, else each stage whose
    layout holds an `m`), tied or not, since the MTP chunk builds its own embedding (gpt_model.py
    `GPTModel.__init__`, `pre_process or mtp_process`). ppb's HEAD is on the first stage and its loss
    on the last (a layout's `E` first and `L` last); a standalone MTP part sits in its own cell.
    Other frameworks: the tied pair only."""
    spec = run.spec(model_name)
    stages = {0}
    if spec.tied_embeddings:
        stages.add(run.parallel.pp - 1)
    tails = [layer for layer in placed if layer.model_name == model_name and isinstance(layer.kind, TailKind)]
    if run.framework == "megatron" and any(tail.kind.mtp_layers for tail in tails):
        standalone = [tail.stage for tail in tails if tail.kind.part == MTP_PART]
        stages.update(standalone or [run.parallel.pp - 1])
    return sorted(stages)


def embedding_sync_bytes(run: RunConfig, memory: MemoryModel, model_name: str) -> float:
    """The word-embedding gradient one rank all-reduces: its vocab/tp × h shard (padded vocabulary) in
    the gradient's dtype (`main_grad`, finalize_model_grads.py `_allreduce_embedding_grad`); the whole
    table under MindFormers' `vocab_emb_dp` (`kinds.vocab_rows`)."""
    vocab, hidden = run.vocab_size(model_name), run.spec(model_name).hidden_size
    whole = run.framework == "mindformers" and run.parallel.vocab_emb_dp
    return (vocab if whole else per_rank(vocab, run.parallel.tp)) * hidden * memory.setup.grad_bytes


def _embedding_sync(run, memory, links, placed) -> float:
    """Seconds of the word-embedding gradient all-reduce between the stages that hold a copy
    (`embedding_sync_stages`). Megatron runs it in finalize_model_grads.py `finalize_model_grads`
    (`_allreduce_word_embedding_grads`, d98e8a64) after `finish_grad_sync` has waited for every
    data-parallel bucket, on the compute stream before the optimizer step: outside the DDP overlap,
    all of it exposed."""
    if run.parallel.pp < 2:
        return 0.0
    span = run.parallel.tp * run.parallel.cp * run.parallel.dp  # ranks from one stage to the next
    seconds = 0.0
    for name in run.model_names:
        if run.is_vision(name):
            continue
        stages = embedding_sync_stages(run, placed, name)
        if len(stages) < 2:
            continue
        group = Group(len(stages), span * (stages[-1] - stages[0] + 1))
        sync_links = replace(links, groups={**links.groups, "embedding": group})
        payload = embedding_sync_bytes(run, memory, name)
        seconds += collective_seconds(Collective(ALL_REDUCE, "embedding", payload, "dp"), sync_links)
    return seconds


def _cell_optimizer_traffic(run, memory, entries) -> float:
    """HBM bytes of the optimizer step over one cell's layers (`optimizer_traffic`)."""
    megatron = run.framework == "megatron"
    setup = memory.setup
    # torchtitan's AdamW over fp32 shards with its clipping (titan_step.optimizer_bytes_per_element)
    titan = run.framework == "torchtitan" and setup.optimizer in ("adam", "adamw") and not setup.state_bytes_stated
    implementation, decoupled = run.timing.optimizer_implementation, setup.optimizer == "adamw"
    per_element = optimizer_bytes_per_element(implementation, setup.grad_bytes, decoupled) if titan else 0
    traffic = 0.0
    for layer, _, _ in entries:
        static = memory.static_breakdown(layer)
        if titan:
            traffic += static.optimizer_states * per_element
            continue
        traffic += optimizer_traffic(
            static.optimizer_states,
            static.gradients,
            memory.parameters(layer).total,
            memory.setup,
            master_copy=megatron,
            loss_scaled=megatron and run.training.dtype == "fp16",
        )
    return traffic


def _optimizer_seconds(run, memory, kernels: Kernels, per_cell) -> float:
    """The slowest stage's optimizer step: per parameter whose states the device holds, read its gradient,
    read and write its states (master copy and moments), write the 16-bit parameter; then read every
    held gradient for the norm and zero the whole gradient buffer for the next iteration. torchtitan:
    its AdamW implementation's passes and its clipping over the fp32 shards, no zeroing
    (`titan_step.optimizer_bytes_per_element`)."""
    stages: dict[int, float] = {}
    for (_, stage), entries in per_cell.items():
        stages[stage] = stages.get(stage, 0.0) + kernels.memory_s(_cell_optimizer_traffic(run, memory, entries))
    if run.framework == "megatron" and memory.setup.optimizer == "muon":  # the Newton-Schulz steps (`timing.muon`)
        for stage, seconds in _muon_seconds(run, memory, kernels, per_cell).items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    return max(stages.values(), default=0.0)


def _muon_seconds(run, memory, kernels: Kernels, per_cell) -> dict[int, float]:
    """Each stage's Muon orthogonalizations (`timing.muon.step_seconds`): every matrix of its layers, at
    the share of the layer's parameters whose optimizer states the rank holds (the layer-wise
    distributed optimizer deals whole matrices, `memory.frameworks.muon`); Megatron's host launching
    each PyTorch op at `launches.PLAIN_OP_SHARE` of its measured launch time."""
    setup = memory.setup
    if setup.shard_level >= 1:  # as `memory.static.static_bytes` shards the optimizer states
        shares = {
            False: 1 / max(1, setup.data_group // setup.optimizer_instances),
            True: 1 / max(1, setup.expert_data_group // setup.optimizer_instances),
        }
    else:
        shares = {False: 1.0, True: 1.0}
    device = run.device.profile()
    plain = (
        (PLAIN_OP_SHARE if device.host_kernel_us else 1.0) * (device.host_kernel_us or run.timing.host_launch_us) * 1e-6
    )
    par = run.parallel
    stages: dict[int, list] = {}
    for (_, stage), entries in per_cell.items():
        for layer, _, _ in entries:
            for matrix in layer_matrices(layer.kind, par.tp, par.ep, par.expert_tp):
                stages.setdefault(stage, []).append((matrix, shares[matrix.expert]))
    return {stage: muon_step_seconds(matrices, kernels.gemm_s, plain) for stage, matrices in stages.items()}


def gather_head_start(run, memory, kernels: Kernels, per_cell, stage: int) -> float:
    """Seconds the first model chunk's parameter gathers run before the forward under Megatron's
    `--overlap-param-gather-with-optimizer-step` (`timing.overlap_param_gather_with_optimizer_step`):
    the first chunk has an optimizer of its own, stepped first, after which it launches every bucket's
    all-gather of that chunk (megatron/core/optimizer/optimizer.py `ChainedOptimizer._step`:
    `start_param_sync(force_dispatch=True)`; optimizer/__init__.py splits `model_chunks[0]` off,
    Megatron-LM d98e8a64) while the other chunks' steps run: their step's seconds on *stage*."""
    if not run.timing.overlap_param_gather_with_optimizer_step:
        return 0.0
    rest = sum(
        _cell_optimizer_traffic(run, memory, per_cell.get((chunk, stage), [])) for chunk in range(1, run.parallel.vpp)
    )
    return kernels.memory_s(rest)


def _bookkeeping_seconds(run, memory, kernels: Kernels, links: Links, per_cell) -> float:
    """Megatron's per-iteration statistics, scalar all-reduces and host syncs (`timing.reporting`), on
    the stage whose statistics passes are the largest; torchtitan's gradient-norm all-reduces
    (`titan_step.clip_norm_seconds`); MindFormers: none modelled."""
    if run.framework == "torchtitan":
        return clip_norm_seconds(run, links, memory.setup.data_group)
    if run.framework != "megatron":
        return 0.0
    setup = memory.setup
    stages: dict[int, float] = {}
    held: dict[int, float] = {}  # parameter elements a rank of each stage holds (the weight-hash check's)
    for (_, stage), entries in per_cell.items():
        for layer, _, _ in entries:
            static = memory.static_breakdown(layer)
            held[stage] = held.get(stage, 0.0) + static.parameters
            traffic = pass_bytes(
                static.optimizer_states,
                static.parameters,
                setup.grad_bytes,
                run.training.dtype,
                run,
                gradients_held=static.gradients,
            )
            stages[stage] = stages.get(stage, 0.0) + traffic
    moe = any(run.spec(name).is_moe for name in run.model_names if not run.is_vision(name))
    work = bookkeeping(
        run, max(stages.values(), default=0.0), run.training.micro_batches, moe, max(held.values(), default=0.0)
    )
    links = with_statistics_groups(run, links, setup.shard_level >= 1)
    host_ghz = run.device.profile().host_boost_ghz
    return bookkeeping_seconds(work, links, kernels.hbm_bytes_per_s, run.timing.host_launch_us, host_ghz)


def iteration_summary(iteration: Iteration, digits: int = 4) -> dict[str, Any]:
    """Rounded figures for people: seconds, tokens/s per device, MFU and HFU in percent."""
    return {
        "seconds": round(iteration.seconds, digits),
        "tokens_per_second_per_device": round(iteration.tokens_per_second_per_device, 1),
        "mfu_percent": round(100 * iteration.mfu, 2),
        "hfu_percent": round(100 * iteration.hfu, 2),
    }
