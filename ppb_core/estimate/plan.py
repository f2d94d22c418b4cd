"""A balancer plan re-evaluated by the memory and time models, one evaluation per pipeline stage.

`plan_stages` places each layer and recomputes it as the plan says; `ppb_core.tables.report`
makes the report's table of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel, StagePeak, run_in_flight, run_in_flight_vectors, stage_peaks
from ppb_core.model.placement import place_plan
from ppb_core.model.switches import OPTIONS
from ppb_core.timing import TimeModel
from ppb_core.units import MB


@dataclass(frozen=True)
class StageEvaluation:
    """One stage of a plan as the memory and time models see it."""

    peak: StagePeak  # the memory model's peak (the backward's working set included)
    options: dict[str, int]  # body layers under each option
    forward_ms: float  # one micro-batch through the stage, every chunk
    backward_ms: float  # recomputation included


def plan_stages(run: RunConfig, cell_options: Sequence[Sequence[Mapping[str, int]]]) -> list[StageEvaluation]:
    """Each stage of a plan as the memory and time models see it.

    *cell_options* [chunk][stage] maps options to body layer counts (the balancer's cells). Each
    layer is evaluated where the plan puts it, under the option its position in the cell gets;
    memory is the memory model's stage peak (with the backward's working set, which SAPP's
    descriptions do not count; the device limit is its memory less what the run config reserves).
    """
    par = run.parallel
    placed, chosen = place_plan(run, cell_options)
    memory, times = MemoryModel(run), TimeModel(run)
    device = run.device
    peaks = stage_peaks(
        memory,
        placed,
        run_in_flight(run),
        device.profile().memory_mb * MB,
        device.reserved_mb * MB,
        option_of=lambda layer: chosen[layer],
        vectors=run_in_flight_vectors(run),
    )
    forward = [0.0] * par.pp
    backward = [0.0] * par.pp
    for layer in placed:
        state, switches = memory.option_state(layer, chosen.get(layer, "NONE"))
        f, b = times.layer_times(layer, state, switches)
        forward[layer.stage] += f
        backward[layer.stage] += b
    evaluations = []
    for peak in peaks:
        counts = dict.fromkeys(OPTIONS, 0)
        for layer, option in chosen.items():
            if layer.stage == peak.stage:
                counts[option] += 1
        evaluations.append(StageEvaluation(peak, counts, forward[peak.stage], backward[peak.stage]))
    return evaluations
