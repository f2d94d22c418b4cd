"""What torch's caching allocator reserves beyond a torchtitan FSDP2 stage's allocated peak, as the balancer charges it.

A torchtitan run goes out of memory when the allocator's reserved bytes reach the device, not its allocated
bytes: a freed block serves only the stream that allocated it (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp,
its header comment), and torchtitan's training loop never calls `torch.cuda.empty_cache()` (9dec370 and v0.2.2
train.py `train_step`/`train`). `memory.reserved` prices a stage's pools once its layers are known, and the fit
verdicts charge what they reserve beyond the peak (`StagePeak.allocator_bytes`). The balancer charges the same
before it knows a stage's layers:

* each layer's sharded gradients in its record's `memory_parameter`: the reduce-scatter pool holds every one of
  the stage's, where the moments the balancer prices (the forward, the loss, the backward) hold none
  (`StaticBytes.gradients_from_backward`; with gradient accumulation and no PP the static memory already holds
  them, and nothing is added);
* in the constant every stage holds, the most the copy-in pool holds of two body units
  (`reserved.copy_in_bound_bytes`), and in a HEAD's or TAIL's record what its unit adds to that;
* in the TAIL's record, what the eager loss leaves free below its fp32 buffers (`reserved.loss_hole_bytes`);
* in the constant, under torchtitan's async TP (with or without FSDP2), torch's symmetric-memory workspace a block
  asks (`memory.symm_mem`), outside the caching allocator but in the fit verdicts' `allocator_bytes` too.

Each charge is rounded up to whole MB. Where the stage's own pools need more (a stage holding both ends under
torchtitan's root unit), `balance.fitting` re-solves the plan the memory model finds over.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel
from ppb_core.memory.reserved import copy_in_bound_bytes, loss_hole_bytes, priced
from ppb_core.memory.symm_mem import async_tp, workspace_bytes
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, walk
from ppb_core.payload.sapp import LayerRecord, LayerSet
from ppb_core.units import MB


def _charged(records: Sequence[LayerRecord], layers: Sequence[Layer], charge: Callable[[Layer], float]) -> list[float]:
    """Bytes a layer of each record is charged: the most of the layers it stands for, matched in order (the
    descriptions list them so, `payload.describe.describe_layers`); where the counts do not match (combined
    bodies), the most of any."""
    if sum(record.nb_layer for record in records) != len(layers):
        most = max(map(charge, layers), default=0.0)
        return [most] * len(records)
    found, start = [], 0
    for record in records:
        found.append(max(map(charge, layers[start : start + record.nb_layer]), default=0.0))
        start += record.nb_layer
    return found


def _add(records: Sequence[LayerRecord], charges: Sequence[float]) -> tuple[LayerRecord, ...]:
    return tuple(
        dataclasses.replace(record, memory_parameter_mb=record.memory_parameter_mb + math.ceil(charge / MB))
        if charge > 0
        else record
        for record, charge in zip(records, charges, strict=True)
    )


def allocator_pools(run: RunConfig, layers: LayerSet, memory: MemoryModel) -> tuple[LayerSet, float]:
    """The problem's records charged what the allocator's pools reserve beyond the allocated peak, and the
    MB (whole, rounded up) the constant adds for the copy-in pool and async TP's workspace (module docstring);
    unchanged, 0, but for torchtitan with FSDP2 sharding or async TP."""
    if not priced(memory) and not async_tp(memory):
        return layers, 0.0
    fused = list(walk(run, fused_tail=True))
    bodies = [layer for layer in fused if layer.node == BODY]
    workspace_mb = math.ceil(workspace_bytes(memory, bodies) / MB)  # 0 without async TP
    if not priced(memory):
        return layers, float(workspace_mb)
    bound = copy_in_bound_bytes(memory, bodies)

    def gradients(layer: Layer) -> float:
        static = memory.static_breakdown(layer)
        return float(static.gradient_bytes) if static.gradients_from_backward else 0.0

    def end(layer: Layer) -> float:
        beyond = max(0.0, copy_in_bound_bytes(memory, [*bodies, layer]) - bound)
        hole = loss_hole_bytes(memory, [layer]) if layer.node == TAIL else 0.0
        return gradients(layer) + beyond + hole

    charged = LayerSet(
        heads=_add(layers.heads, _charged(layers.heads, [layer for layer in fused if layer.node == HEAD], end)),
        bodies=_add(layers.bodies, _charged(layers.bodies, bodies, gradients)),
        tails=_add(layers.tails, _charged(layers.tails, [layer for layer in fused if layer.node == TAIL], end)),
        options=layers.options,
    )
    return charged, float(math.ceil(bound / MB) + workspace_mb)


__all__ = ["allocator_pools"]
