"""A stage's peak memory: what it holds as its first backward runs, against the device.

Peak = static (every layer of the stage, HEAD and TAIL included)
     + activations × micro-batches in flight of each layer's chunk
     + buffers with that many in flight
     + the largest working set of one layer's backward (warm-up ends: FSDP holds two layers)
     + the device's reserved memory.

Micro-batches in flight come from `ppb_core.schedules` (owned by the balancer): where a stage runs
several chunks whose layers keep different amounts per micro-batch, its peak is the largest over
every per-chunk count vector the schedule reaches (`in_flight_vectors`), as the balancer charges
it. `stage_peaks` also takes the counts as plain numbers so tests can state them.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError
from ppb_core.memory.model import MemoryModel
from ppb_core.model.kinds import BodyKind
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import Layer, LayerWalk, walk
from ppb_core.schedules import in_flight_vectors, micro_batches_in_flight
from ppb_core.units import MB


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
    vectors: Sequence[Sequence[Sequence[int]]] | None = None,
) -> list[StagePeak]:
    """Each stage's peak with *in_flight* [chunk][stage] micro-batches in flight.

    *vectors*, per stage, lists every per-chunk count at which the stage may peak (default: the
    one of *in_flight*); the largest peak among them is the stage's. *option_of* gives a body
    layer's option (default: `configured_option`). Identical layers in one cell are evaluated once.
    """
    groups: Counter = Counter()
    for layer in layer_walk:
        option = None
        if isinstance(layer.kind, BodyKind):
            option = option_of(layer) if option_of is not None else configured_option(memory, layer.model_name)
        groups[(layer.stage, layer.chunk, layer.model_name, layer.node, layer.kind, option)] += 1
    chunks = len(in_flight)
    stages = layer_walk.stages
    if vectors is None:
        vectors = [[tuple(in_flight[chunk][stage] for chunk in range(chunks))] for stage in range(stages)]
    totals = {stage: {"static": 0.0, "work": 0.0, "body": 0} for stage in range(stages)}
    # activations and buffers at each candidate vector of the stage
    dynamic = {stage: [[0.0, 0.0] for _ in vectors[stage]] for stage in range(stages)}
    for (stage, chunk, model_name, node, kind, option), count in groups.items():
        layer = Layer(model_name, node, kind, 0, chunk, stage)
        state, switches = memory.option_state(layer, option or "NONE")  # HEAD and TAIL have one state
        for vector, sums in zip(vectors[stage], dynamic[stage], strict=True):
            activation, buffers = memory.dynamic_bytes(layer, state, switches, vector[chunk])
            sums[0] += count * activation
            sums[1] += count * buffers
        total = totals[stage]
        total["static"] += count * memory.static_bytes(layer)
        total["work"] = max(total["work"], memory.working_extra_bytes(layer, state, switches, 2, on_saved=True))
        if option is not None:
            total["body"] += count
    peaks = []
    for stage, total in totals.items():
        # the vector of the largest activations + buffers (on a tie, the first listed)
        index = max(range(len(vectors[stage])), key=lambda i: (sum(dynamic[stage][i]), -i))
        peaks.append(
            StagePeak(
                stage=stage,
                body_layers=total["body"],
                in_flight=tuple(vectors[stage][index]),
                static_bytes=total["static"],
                activation_bytes=dynamic[stage][index][0],
                buffer_bytes=dynamic[stage][index][1],
                working_bytes=total["work"],
                reserved_bytes=reserved_bytes,
                device_bytes=device_bytes,
            )
        )
    return peaks


@functools.lru_cache(maxsize=256)
def _in_flight(schedule: str, stages: int, chunks: int, micro_batches: int) -> tuple[tuple[int, ...], ...]:
    """The schedule's counts, once per size: simulating the op orders costs more than the layers' memory."""
    return tuple(tuple(row) for row in micro_batches_in_flight(schedule, stages, chunks, micro_batches))


def run_in_flight(run: RunConfig) -> list[list[int]]:
    """[chunk][stage] micro-batches in flight of the run's schedule."""
    par = run.parallel
    try:
        return [list(row) for row in _in_flight(par.schedule, par.pp, par.vpp, run.training.micro_batches)]
    except ValueError as err:
        raise InputError(run.source, "training.micro_batches", str(err)) from None


def run_in_flight_counts(run: RunConfig) -> list[int]:
    """Every count of micro-batches in flight a (chunk, stage) of the run's schedule keeps, ascending."""
    return sorted({count for row in run_in_flight(run) for count in row})


@functools.lru_cache(maxsize=256)
def _vectors(schedule: str, stages: int, chunks: int, micro_batches: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    return tuple(tuple(stage) for stage in in_flight_vectors(schedule, stages, chunks, micro_batches))


def run_in_flight_vectors(run: RunConfig) -> list[list[tuple[int, ...]]]:
    """Per stage, every per-chunk count of micro-batches in flight at which the stage may peak."""
    par = run.parallel
    try:
        return [list(stage) for stage in _vectors(par.schedule, par.pp, par.vpp, run.training.micro_batches)]
    except ValueError as err:
        raise InputError(run.source, "training.micro_batches", str(err)) from None


def run_working_set_bytes(
    run: RunConfig, memory: MemoryModel | None = None, layer_walk: LayerWalk | None = None
) -> float:
    """The most any one layer's backward holds beyond what its stage keeps, over every layer kind
    of the run and every recompute option: what a stage peak adds to its kept memory, whatever
    layers and options a plan gives it (each distinct kind evaluated once)."""
    memory = memory if memory is not None else MemoryModel(run)
    layer_walk = layer_walk if layer_walk is not None else walk(run)
    most = 0.0
    seen: set[tuple] = set()
    for layer in layer_walk:
        key = (layer.model_name, layer.node, layer.kind)
        if key in seen:
            continue
        seen.add(key)
        for option in OPTIONS if isinstance(layer.kind, BodyKind) else ("NONE",):
            state, switches = memory.option_state(layer, option)
            most = max(most, memory.working_extra_bytes(layer, state, switches, 2, on_saved=True))
    return most


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
        vectors=run_in_flight_vectors(run),
    )


__all__ = ["StagePeak", "configured_option", "run_in_flight", "run_stage_peaks", "stage_peaks"]
