"""What coexists in a step of Megatron-Core's combined 1F1B schedule (`--overlap-moe-expert-parallel-comm`).

With the flag, each steady step of the pipeline schedule runs one micro-batch's forward beside
another's backward, layer beside layer, so that one's expert all-to-alls hide behind the other's
computation (megatron/core/pipeline_parallel/combined_1f1b.py `combined_forward_backward_step`,
at Megatron-LM d98e8a64). `TransformerModelChunkSchedulePlan.run`
(megatron/core/models/common/model_chunk_schedule_plan.py) orders a step so:

1. the forward chunk's pre-process (the embedding); the backward chunk's post-process (output
   layer and loss) backward;
2. forward layer i beside backward layer n−1−i (`TransformerLayerSchedulePlan.run`): the backward
   MTP post-process, the forward pre-dispatch node (attention, pre-MLP norm, shared experts,
   router), the backward experts, the forward dispatch and experts, the forward combine, the
   backward pre-dispatch node, the forward MTP post-process; each backward node frees what its
   forward kept as it runs (autograd without retain_graph, `ScheduleNode.default_backward_func`);
3. the backward chunk's remaining layers, then the forward chunk's remaining layers;
4. the forward chunk's post-process; the backward chunk's pre-process backward.

(`ModelParallelConfig.ep_overlap_early_attn_memory_release`, off by default, runs the backward pre-dispatch node
before the forward's experts; not modelled.)

Which node keeps which tensor is the framework's rule (`frameworks.megatron.schedule_node`). The
step starts with the backward's micro-batch still held and the forward's not yet: its peak is
the kept memory as it starts plus the largest running sum of what the forward has added less
what the backward has freed (`step_extra_bytes`); the working set of the backward's own layer
is charged as at every backward (`peak.stage_peaks`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ppb_core.memory.frameworks.megatron import (
    MLP_NODE,
    MTP_POST_PROCESS,
    POST_PROCESS,
    PRE_DISPATCH,
    schedule_node,
)


@dataclass(frozen=True)
class LayerNodes:
    """One layer's kept bytes of one micro-batch, by the node that keeps them."""

    pre_dispatch: float = 0.0
    mlp: float = 0.0
    mtp_post_process: float = 0.0


@dataclass(frozen=True)
class ChunkNodes:
    """A chunk of one stage in forward order: its pre-process (the HEAD), its layers (bodies, then the
    TAIL's MTP layers as one), its post-process (the TAIL's output layer and loss)."""

    pre_process: float
    layers: tuple[LayerNodes, ...]
    post_process: float


def node_bytes(named: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Bytes of (name, bytes) pairs of a body or TAIL layer summed by the node that keeps them."""
    sums = dict.fromkeys((PRE_DISPATCH, MLP_NODE, MTP_POST_PROCESS, POST_PROCESS), 0.0)
    for name, size in named:
        sums[schedule_node(name)] += size
    return sums


def step_extra_bytes(forward: ChunkNodes, backward: ChunkNodes) -> float:
    """The most a combined step holds beyond what its stage held as it started (module docstring)."""
    level = peak = 0.0

    def add(size: float) -> None:
        nonlocal level, peak
        level += size
        peak = max(peak, level)

    def free(size: float) -> None:
        nonlocal level
        level -= size

    add(forward.pre_process)
    free(backward.post_process)
    ahead, behind = forward.layers, tuple(reversed(backward.layers))
    pairs = min(len(ahead), len(behind))
    for f, b in zip(ahead[:pairs], behind[:pairs], strict=True):
        free(b.mtp_post_process)
        add(f.pre_dispatch)
        free(b.mlp)
        add(f.mlp)
        free(b.pre_dispatch)
        add(f.mtp_post_process)
    for b in behind[pairs:]:
        free(b.mtp_post_process + b.mlp + b.pre_dispatch)
    for f in ahead[pairs:]:
        add(f.pre_dispatch)
        add(f.mlp)
        add(f.mtp_post_process)
    add(forward.post_process)
    free(backward.pre_process)
    return peak


def chunk_nodes(head: float, bodies: Sequence[dict[str, float]], tail: dict[str, float] | None) -> ChunkNodes:
    """A chunk's nodes from its HEAD's bytes (0 where it has none), its bodies' and its TAIL's node sums."""
    layers = [LayerNodes(b[PRE_DISPATCH], b[MLP_NODE], b[MTP_POST_PROCESS]) for b in bodies]
    post = 0.0
    if tail is not None:
        mtp = LayerNodes(tail[PRE_DISPATCH], tail[MLP_NODE], tail[MTP_POST_PROCESS])
        if mtp.pre_dispatch or mtp.mlp or mtp.mtp_post_process:
            layers.append(mtp)
        post = tail[POST_PROCESS]
    return ChunkNodes(head, tuple(layers), post)
