"""Static memory: parameters, gradients and optimizer states one device holds for a layer.

Element counts come from `ppb_core.model.params` (tensor and expert parallel already applied); this
module only turns them into bytes under the data-parallel sharding of ZeRO / FSDP:

* level 1 shards the optimizer states, level 2 also the gradients, level 3 (or FSDP) also the
  parameters;
* non-expert parameters shard over the data-parallel group dp·cp (context-parallel ranks hold
  the same weights and reduce their gradients together);
* routed experts shard over the expert-data-parallel group dp·cp·tp/(ep·etp) instead.

A shard is rounded up to whole elements, as frameworks pad their flat buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import BodyKind, HeadKind, LayerKind, PatchEmbedKind, ProjectorKind, TailKind
from ppb_core.model.params import (
    LayerParams,
    body_params,
    float8_gathered_weights,
    head_params,
    patch_embed_params,
    projector_params,
    tail_params,
)


def layer_params(kind: LayerKind, setup: MemorySetup) -> LayerParams:
    """Elements of the layer one tensor-/expert-parallel rank holds, before data-parallel sharding."""
    if isinstance(kind, BodyKind):
        params = body_params(kind, setup.tp, setup.ep, setup.etp)
        if setup.fp8_fsdp_all_gather and setup.shard_level >= 3:
            params = replace(params, float8=float8_gathered_weights(kind, setup.tp)[0])
        return params
    if isinstance(kind, HeadKind):
        return head_params(kind, setup.tp)
    if isinstance(kind, TailKind):
        return tail_params(kind, setup.tp, setup.pp, setup.ep, setup.etp)
    if isinstance(kind, PatchEmbedKind):
        return patch_embed_params(kind)
    if isinstance(kind, ProjectorKind):
        return projector_params(kind, setup.tp)
    raise TypeError(f"not a layer kind: {kind!r}")


def _shard(elements: int, group: int, sharded: bool) -> int:
    return -(-elements // group) if sharded else elements


@dataclass(frozen=True)
class StaticBytes:
    """One layer's static memory on one device, and the element counts it comes from."""

    parameters: int  # elements the device holds (sharded under ZeRO-3 / FSDP)
    gradients: int  # gradient elements the device holds
    optimizer_states: int  # parameters whose optimizer states the device holds
    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    # held from the first forward to the gradient reduction, not at the optimizer step (torchtitan's
    # gathered parameters and unsharded gradient accumulators under pipeline parallelism)
    held_through_step_bytes: int = 0
    # what the layer's modules keep from their last forward at every moment, beyond their parameters
    # (Megatron's token dispatcher state, rotary tables: `FrameworkRules.module_state_bytes`)
    module_bytes: float = 0
    # kept from the last forward only while none of the layer's micro-batches is in flight (in flight,
    # the same tensor is the latest micro-batch's kept activation): counted at the optimizer step
    idle_bytes: float = 0
    # held at the optimizer step only (Megatron's fp32 main-gradient copies of a 16-bit gradient buffer,
    # alive from the step to the next iteration's zero_grad)
    step_only_bytes: float = 0
    # the gradients are formed in the backward and freed by the next step's zero_grad (set to None): not
    # held in the forward nor at the loss, held at the optimizer step (torchtitan's FSDP2 sharded gradients)
    gradients_from_backward: bool = False

    @property
    def total(self) -> float:
        """What the layer holds statically in the forward, at the loss and as the backward starts."""
        return (
            self.parameter_bytes
            + (0 if self.gradients_from_backward else self.gradient_bytes)
            + self.optimizer_bytes
            + self.held_through_step_bytes
            + self.module_bytes
        )

    @property
    def step_bytes(self) -> float:
        """What the layer holds statically at the optimizer step."""
        formed = self.gradient_bytes if self.gradients_from_backward else 0
        return self.total - self.held_through_step_bytes + self.idle_bytes + self.step_only_bytes + formed


def static_bytes(params: LayerParams, setup: MemorySetup) -> StaticBytes:
    """Bytes of parameters (`dtype_bytes`), gradients (`grad_bytes`) and optimizer states (`state_bytes`)."""
    level = setup.shard_level
    # Megatron's --num-distributed-optimizer-instances N: each instance shards over its dp·cp/N ranks
    # (parallel_state.py `initialize_model_parallel`, the intra-partial data-parallel groups, which
    # distributed_data_parallel.py hands the gradient buffers and the distributed optimizer)
    instances = setup.optimizer_instances

    def held(sharded: bool) -> int:
        return _shard(params.non_expert, setup.data_group // instances, sharded) + _shard(
            params.expert, max(1, setup.expert_data_group // instances), sharded
        )

    parameters, gradients, states = held(level >= 3), held(level >= 2), held(level >= 1)
    return StaticBytes(
        parameters=parameters,
        gradients=gradients,
        optimizer_states=states,
        parameter_bytes=parameters * setup.dtype_bytes,
        gradient_bytes=gradients * setup.grad_bytes,
        optimizer_bytes=states * setup.state_bytes,
    )


def gathered_parameter_bytes(params: LayerParams, setup: MemorySetup) -> int:
    """What gathering one layer's parameters adds under ZeRO-3 / FSDP: the shards of the other ranks."""
    if setup.shard_level < 3:
        return 0
    whole = params.non_expert + params.expert
    held = _shard(params.non_expert, setup.data_group, True) + _shard(params.expert, setup.expert_data_group, True)
    return (whole - held) * setup.dtype_bytes


def unsharded_gradient_bytes(params: LayerParams, setup: MemorySetup) -> int:
    """A layer's whole gradients (per TP/EP rank), as its bucket holds them before the reduce-scatter."""
    return (params.non_expert + params.expert) * setup.grad_bytes
