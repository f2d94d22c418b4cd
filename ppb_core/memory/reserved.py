"""What PyTorch's caching allocator reserves for a torchtitan stage under FSDP2: its pools, stream by stream.

torchtitan logs `reserved_bytes.all.peak` (9dec370 torchtitan/metrics.py `DeviceMemoryMonitor.get_peak_stats`,
train.py's `memory:` line), with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (run_llama_train.sh). The
allocator's rules (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp, the header comment and Note [Expandable
Segments]): a freed block is reused only by the stream that allocated it; each stream has its own segment that
grows; its pages go back to CUDA only on `empty_cache` or an allocation that would fail (torchtitan calls
neither in its loop, and `reset_peak_stats` sets the peak to the current reserved bytes, which only grow). So the
reserved peak is at least the sum, over streams, of each stream's own high-water mark. FSDP2 (torch 2.13
torch/distributed/fsdp/_fully_shard; the same in the torch/distributed/_composable/fsdp files of late 2024) uses
three pools:

* **the compute stream**: every moment ppb prices (`StagePeak.moments`), less the sharded gradients where a moment
  holds them, which live in the reduce-scatter pool; and at the loss, what the eager loss leaves free below its
  fp32 buffers (`TorchtitanRules.loss_hole_bytes`): that memory is reserved beside the allocated peak;
* **the all-gather copy-in stream** (_fsdp_collectives.py `foreach_all_gather` allocates the unit's bf16 shard
  copy and the all-gather output there): in the forward, `FSDPParamGroup.wait_for_unshard` keeps a unit's output
  in `comm_ctx.all_gather_state` until the next unit's `wait_for_unshard`, which runs after that unit's
  `unshard` allocated its own: two consecutive units' outputs, and the second's shard copy, at once;
* **the reduce-scatter stream** (`foreach_reduce` allocates each unit's reduce-scatter output there; it becomes
  the sharded gradient and is freed by the next `zero_grad`, so its blocks stay that stream's): every sharded
  gradient of the stage.

What this leaves out is any other fragmentation: holes among the activations that a later, larger request does
not fit (the allocator's best fit splits a free block from its start; a request no free block fits maps pages
after the segment's last block), and the small pool's 2 MiB pages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from ppb_core.memory.frameworks.torchtitan import TorchtitanRules, fsdp
from ppb_core.model.kinds import TailKind
from ppb_core.model.params import LayerParams
from ppb_core.model.walk import Layer

if TYPE_CHECKING:  # `peak.stage_peaks` charges each stage these pools: the model and the peak are built above
    from ppb_core.memory.model import MemoryModel
    from ppb_core.memory.peak import StagePeak

# the moments at which a stage holds its sharded gradients whatever the micro-batches (frameworks/torchtitan.py)
_WITH_GRADIENTS = ("optimizer", "reduction")


@dataclass(frozen=True)
class ReservedPools:
    """A stage's reserved bytes by the stream that holds them (module docstring), device reserve excluded."""

    compute_bytes: float  # the compute stream's high-water mark, the loss's free hole included
    loss_hole_bytes: float  # of which free below the loss's fp32 buffers at its backward
    copy_in_bytes: float  # the all-gather copy-in stream's
    reduce_scatter_bytes: float  # the reduce-scatter stream's: the sharded gradients
    allocated_bytes: float  # ppb's allocated peak of the stage, for comparison

    @property
    def total_bytes(self) -> float:
        return self.compute_bytes + self.copy_in_bytes + self.reduce_scatter_bytes

    @property
    def beyond_allocated_bytes(self) -> float:
        """What the pools reserve beyond the allocated peak: what a fit verdict charges the stage on top of it
        (`StagePeak.allocator_bytes`). Never negative: the compute pool holds each moment less the gradients,
        which the reduce-scatter pool holds whole, and the copy-in pool is on top."""
        return max(0.0, self.total_bytes - self.allocated_bytes)


def _forward_units(memory: MemoryModel, layers: list[Layer]) -> list[tuple[LayerParams, float]]:
    """The stage's FSDP2 units in forward order, each with the share of it a rank holds. Under `root` units
    torchtitan's `fully_shard(model)` makes the stage's embedding, final norm and output layer one unit, the
    root, whose pre-forward gathers it first (frameworks/torchtitan.py, **FSDP2 units by version**); under
    `split` they are units of their own, in model order."""
    setup = memory.setup
    ordered = sorted(layers, key=lambda layer: (layer.chunk, layer.index))
    params = [memory.parameters(layer) for layer in ordered]
    if setup.fsdp_units == "root":
        ends = [p for layer, p in zip(ordered, params, strict=True) if layer.node in ("HEAD", "TAIL")]
        blocks = [p for layer, p in zip(ordered, params, strict=True) if layer.node == "BODY"]
        params = ([sum(ends, LayerParams())] if ends else []) + blocks

    def share(unit: LayerParams) -> float:
        if not unit.total:
            return 0.0
        return (unit.non_expert / setup.data_group + unit.expert / setup.expert_data_group) / unit.total

    return [(unit, share(unit)) for unit in params]


def copy_in_bytes(memory: MemoryModel, layers: list[Layer]) -> float:
    """The copy-in stream's high-water mark: the largest of a unit's all-gather output beside the next unit's
    output and its bf16 (or float8) shard copy (module docstring); one unit's where the stage has one."""
    bc = memory.setup.dtype_bytes
    units = [(unit.gathered_bytes(bc), share) for unit, share in _forward_units(memory, layers)]
    most = max((gathered * (1 + share) for gathered, share in units), default=0.0)
    for (before, _), (after, share) in pairwise(units):
        most = max(most, before + after * (1 + share))
    return most


def copy_in_bound_bytes(memory: MemoryModel, layers: Iterable[Layer]) -> float:
    """The most the copy-in stream can hold on a stage whose units are some of *layers*' in any order: the
    largest unit's all-gather output with its shard copy, or any unit's output beside another's output and its
    shard copy (`copy_in_bytes` takes the stage's consecutive pairs). What the balancer charges before it
    knows a stage's layers (`balance.allocator_pools`)."""
    bc = memory.setup.dtype_bytes
    counted: dict[tuple[float, float], int] = {}
    for unit, share in _forward_units(memory, list(layers)):
        key = (float(unit.gathered_bytes(bc)), share)
        counted[key] = counted.get(key, 0) + 1
    most = max((gathered * (1 + share) for gathered, share in counted), default=0.0)
    for before in counted:
        for after, share in counted:
            if before != (after, share) or counted[before] > 1:
                most = max(most, before[0] + after * (1 + share))
    return most


def loss_hole_bytes(memory: MemoryModel, layers: list[Layer]) -> float:
    """What the stage's eager loss leaves free below its fp32 buffers (`TorchtitanRules.loss_hole_bytes`),
    scaled as the loss's working set is."""
    rules = memory.rules
    if not isinstance(rules, TorchtitanRules):
        return 0.0
    tails = [layer.kind for layer in layers if isinstance(layer.kind, TailKind)]
    return sum(rules.loss_hole_bytes(kind, memory.setup) for kind in tails) * memory.correction.working


def priced(memory: MemoryModel) -> bool:
    """Whether the run's stages have pools priced here: torchtitan with FSDP2 sharding."""
    return memory.run.framework == "torchtitan" and fsdp(memory.setup)


def reserved_pools(memory: MemoryModel, layer_walk: Iterable[Layer], peak: StagePeak) -> ReservedPools | None:
    """The stage's reserved bytes by stream (module docstring); None but for torchtitan with FSDP2 sharding.
    *layer_walk* may hold other stages' layers: the stage's are taken."""
    if not priced(memory):
        return None
    layers = [layer for layer in layer_walk if layer.stage == peak.stage]
    statics = [memory.static_breakdown(layer) for layer in layers]
    gradients = sum(s.gradient_bytes for s in statics)
    from_backward = all(s.gradients_from_backward for s in statics)
    hole = loss_hole_bytes(memory, layers) if peak.holds_tail else 0.0
    compute = 0.0
    for name, bytes_ in peak.moments.items():
        on_compute = bytes_ - peak.reserved_bytes
        if name in _WITH_GRADIENTS or not from_backward:
            on_compute -= gradients
        if name in ("loss", "first_loss"):
            on_compute += hole
        compute = max(compute, on_compute)
    return ReservedPools(
        compute_bytes=compute,
        loss_hole_bytes=hole,
        copy_in_bytes=copy_in_bytes(memory, layers),
        reduce_scatter_bytes=gradients,
        allocated_bytes=peak.peak_bytes - peak.reserved_bytes,
    )


__all__ = ["ReservedPools", "copy_in_bound_bytes", "copy_in_bytes", "loss_hole_bytes", "priced", "reserved_pools"]
