"""A stage's peak memory: what it holds as its first backward runs, against the device.

Peak = static (every layer of the stage, HEAD and TAIL included)
     + activations × micro-batches in flight of each layer's chunk
     + buffers with that many in flight
     + the largest working set of one layer's backward (warm-up ends: FSDP holds two layers)
     + the device's reserved memory.

Micro-batches in flight per (chunk, stage) come from `ppb_core.schedules.micro_batches_in_flight`
(owned by the balancer); `stage_peaks` also takes them as plain numbers so tests can state them.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ppb_core.config import RunConfig
from ppb_core.errors import InputError
from ppb_core.kinds import BodyKind
from ppb_core.memory.model import MemoryModel
from ppb_core.model import Layer, LayerWalk, walk

MB = 2**20


@dataclass(frozen=True)
class StagePeak:
    stage: int
    body_layers: int
    in_flight: tuple[int, ...]  # micro-batches in flight of each chunk
    static_bytes: float
    activation_bytes: float  # activations × micro-batches in flight
    buffer_bytes: float
    working_bytes: float
    reserved_bytes: float
    device_bytes: float

    @property
    def peak_bytes(self) -> float:
        return self.static_bytes + self.activation_bytes + self.buffer_bytes + self.working_bytes + self.reserved_bytes

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.device_bytes


def configured_option(memory: MemoryModel, model_name: str) -> str:
    """The option a run config asks of its body layers: SLCT when any switch recomputes, else NONE."""
    return "SLCT" if 0 in memory.configured_switches(model_name).values() else "NONE"


def stage_peaks(
    memory: MemoryModel,
    layer_walk: LayerWalk,
    in_flight: Sequence[Sequence[int]],
    device_bytes: float,
    reserved_bytes: float = 0.0,
    option_of: Callable[[Layer], str] | None = None,
) -> list[StagePeak]:
    """Each stage's peak with *in_flight* [chunk][stage] micro-batches in flight.

    *option_of* gives a body layer's option (default: `configured_option`). Identical layers in
    one cell are evaluated once.
    """
    groups: Counter = Counter()
    for layer in layer_walk:
        option = None
        if isinstance(layer.kind, BodyKind):
            option = option_of(layer) if option_of is not None else configured_option(memory, layer.model_name)
        groups[(layer.stage, layer.chunk, layer.model_name, layer.node, layer.kind, option)] += 1
    chunks = len(in_flight)
    totals = {
        stage: {"static": 0.0, "act": 0.0, "buf": 0.0, "work": 0.0, "body": 0} for stage in range(layer_walk.stages)
    }
    for (stage, chunk, model_name, node, kind, option), count in groups.items():
        layer = Layer(model_name, node, kind, 0, chunk, stage)
        state, switches = memory.option_state(layer, option or "NONE")  # HEAD and TAIL have one state
        flight = in_flight[chunk][stage]
        activation, buffers = memory.dynamic_bytes(layer, state, switches, flight)
        total = totals[stage]
        total["static"] += count * memory.static_bytes(layer)
        total["act"] += count * activation
        total["buf"] += count * buffers
        total["work"] = max(total["work"], memory.working_extra_bytes(layer, state, switches, 2, on_saved=True))
        if option is not None:
            total["body"] += count
    return [
        StagePeak(
            stage=stage,
            body_layers=total["body"],
            in_flight=tuple(in_flight[chunk][stage] for chunk in range(chunks)),
            static_bytes=total["static"],
            activation_bytes=total["act"],
            buffer_bytes=total["buf"],
            working_bytes=total["work"],
            reserved_bytes=reserved_bytes,
            device_bytes=device_bytes,
        )
        for stage, total in totals.items()
    ]


@functools.lru_cache(maxsize=256)
def _in_flight(schedule: str, stages: int, chunks: int, micro_batches: int) -> tuple[tuple[int, ...], ...]:
    """The schedule's counts, once per size: simulating the op orders costs more than the layers' memory."""
    from ppb_core.schedules import micro_batches_in_flight

    return tuple(tuple(row) for row in micro_batches_in_flight(schedule, stages, chunks, micro_batches))


def run_in_flight(run: RunConfig) -> list[list[int]]:
    """[chunk][stage] micro-batches in flight of the run's schedule."""
    par = run.parallel
    try:
        return [list(row) for row in _in_flight(par.schedule, par.pp, par.vpp, run.training.micro_batches)]
    except ValueError as err:
        raise InputError(run.source, "training.micro_batches", str(err)) from None


def run_stage_peaks(
    run: RunConfig,
    memory: MemoryModel | None = None,
    layer_walk: LayerWalk | None = None,
    option_of: Callable[[Layer], str] | None = None,
) -> list[StagePeak]:
    """The run's stages under its schedule, on its device (memory and reserved memory from the config)."""
    memory = memory if memory is not None else MemoryModel(run)
    layer_walk = layer_walk if layer_walk is not None else walk(run)
    device = run.device
    return stage_peaks(
        memory,
        layer_walk,
        run_in_flight(run),
        device_bytes=device.profile().memory_mb * MB,
        reserved_bytes=device.reserved_mb * MB,
        option_of=option_of,
    )


__all__ = ["MB", "StagePeak", "configured_option", "run_in_flight", "run_stage_peaks", "stage_peaks"]
