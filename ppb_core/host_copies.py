"""Megatron-Core's fine-grained activation offloading in the schedule: each stage's device-to-host stream.

Megatron-LM (megatron/core/pipeline_parallel/fine_grained_activation_offload.py at 4e85d74ae9, the
commit that measured Megatron CI's offloading cases' memory; the same streams and waits at 93ebf8d72f,
which measured their seconds, and at d98e8a64: `max_inflight_offloads` is off by default) copies every offloaded
group on one device-to-host stream per rank (`PipelineOffloadManager._d2h_stream`): at a group's commit
(`on_group_commit_forward`) that stream waits for the compute stream, then queues the group's copies
(`bulk_offload_group`) and records the group's offload event. The stream runs its copies in the order
they were queued (a CUDA stream is FIFO), so the copies of a forward wait for those of every forward
the stage ran before it. A reload (`bulk_reload_group`) makes the host-to-device stream wait for its
group's offload event first. So a backward cannot use a reloaded group before the device-to-host
stream has copied everything the stage queued up to that group's copies, plus the reload itself: on
a stage whose copies take longer than its forwards, the backlog of the warm-up forwards' copies
delays the first backward (and any backlog left, the later ones).

`Streams` runs that stream alongside a schedule's timeline (`schedules.simulate`,
`pipeline_p2p.simulate_p2p`): a forward's layers queue their copies as each layer's forward ends;
a backward starts no earlier than its forward's copies are done plus what of its first reload
the cell's time does not already hold (`timing/offload.py` prices each layer's reload as running one
layer ahead of its backward: its wait beyond that window is in the cell's time). The stage's first
backward of a cell that copies keeps its last layer on the device (`post_warmup_callback`'s margin: that
layer's groups are neither copied nor reloaded), so its first reload is the layer before, behind the kept
layer's backward. Not modelled: the last stage's chunk whose backward follows at once keeping its last
layer (`should_bulk_offload`); the two directions slowing each other (no public bidirectional
host-link figure for H100/H200: `docs/timing.md`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HostLayer:
    """One layer of a cell as the offload streams see it, in seconds: its forward, its backward (with
    the reload wait `timing.offload.reload_wait_s` already in it), its copies one way (each direction
    moves the same bytes), and of the backward, that reload wait."""

    forward_s: float
    backward_s: float
    copy_s: float
    wait_s: float = 0.0


@dataclass(frozen=True)
class HostCopies:
    """Per cell `[chunk][stage]`, its layers in model order (`HostLayer`)."""

    layers: Sequence[Sequence[Sequence[HostLayer]]]

    def any(self) -> bool:
        return any(layer.copy_s > 0 for row in self.layers for cell in row for layer in cell)


class Streams:
    """Each stage's device-to-host stream while a schedule runs (module doc): `forward` queues a
    forward's copies, `ready` is the earliest start of a backward."""

    def __init__(self, copies: HostCopies, orders: Sequence[Sequence]) -> None:
        self.layers = copies.layers
        self.free = [0.0] * len(orders)  # when each stage's stream has done all it was given
        self.done: dict[tuple[int, int, int], float] = {}  # (stage, chunk, micro-batch): that forward's copies
        # each stage's first backward (chunk, micro-batch) of a cell that copies anything: its last copying layer
        # stays on the device (`post_warmup_callback` takes each group name's first backward chunk that has it)
        self.kept: list[tuple[int, int] | None] = []
        for stage, order in enumerate(orders):
            first = next((op for op in order if op.kind == "B" and _copies(self.layers[op.chunk][stage])), None)
            self.kept.append(None if first is None else (first.chunk, first.micro_batch))

    def forward(self, stage: int, op, start: float) -> None:
        """Queue the copies of *op*'s layers, each once its forward has ended (the kept layer's: none)."""
        layers = self.layers[op.chunk][stage]
        kept = _last_copied(layers) if self.kept[stage] == (op.chunk, op.micro_batch) else -1
        free, t = self.free[stage], start
        for index, layer in enumerate(layers):
            t += layer.forward_s
            if layer.copy_s > 0 and index != kept:
                free = (free if free > t else t) + layer.copy_s
        self.free[stage] = free
        self.done[(stage, op.chunk, op.micro_batch)] = free

    def ready(self, stage: int, op) -> float:
        """The earliest start of backward *op*: its forward's copies done, then its first reload, less
        what of that reload the cell's time holds (its wait) and the backward run before it needs it."""
        done = self.done.get((stage, op.chunk, op.micro_batch))
        if done is None:
            return 0.0
        layers = self.layers[op.chunk][stage]
        kept = _last_copied(layers) if self.kept[stage] == (op.chunk, op.micro_batch) else -1
        lead = 0.0
        for index in range(len(layers) - 1, -1, -1):  # the backward's order
            layer = layers[index]
            if layer.copy_s > 0 and index != kept:
                return done + layer.copy_s - layer.wait_s - lead
            lead += layer.backward_s
        return 0.0


def _copies(layers: Sequence[HostLayer]) -> bool:
    return any(layer.copy_s > 0 for layer in layers)


def _last_copied(layers: Sequence[HostLayer]) -> int:
    """The index of the cell's last layer that copies anything (-1: none)."""
    return max((index for index, layer in enumerate(layers) if layer.copy_s > 0), default=-1)
