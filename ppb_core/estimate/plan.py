"""A balancer plan re-evaluated by the memory and time models, one evaluation per pipeline stage.

`plan_stages` places each layer and recomputes it as the plan says; `ppb_core.tables.report`
makes the report's table of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel, StagePeak, run_in_flight, run_in_flight_vectors, stage_peaks
from ppb_core.model.switches import ALONG_A_CELL, OPTIONS
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, LayerWalk, walk
from ppb_core.schedules import cell_order
from ppb_core.timing import TimeModel
from ppb_core.units import MB


@dataclass(frozen=True)
class StageEvaluation:
    """One stage of a plan as the memory and time models see it."""

    peak: StagePeak  # the memory model's peak (the backward's working set included)
    options: dict[str, int]  # body layers under each option
    forward_ms: float  # one micro-batch through the stage, every chunk
    backward_ms: float  # recomputation included


def _placed_walk(run: RunConfig, cell_layers: Sequence[Sequence[int]]) -> LayerWalk:
    """The run's layers with the plan's body layers per [chunk][stage]; the first HEAD and the last
    TAIL in the first and last cells, where the balancer charges them, even when those hold no body."""
    par = run.parallel
    placed = walk(run, cell_layers)
    cells = cell_order(par.schedule, par.pp, par.vpp)
    layers = list(placed.layers)
    first_head = next(i for i, layer in enumerate(layers) if layer.node == HEAD)
    last_tail = max(i for i, layer in enumerate(layers) if layer.node == TAIL)
    layers[first_head] = replace(layers[first_head], chunk=cells[0][0], stage=cells[0][1])
    layers[last_tail] = replace(layers[last_tail], chunk=cells[-1][0], stage=cells[-1][1])
    return LayerWalk(placed.stages, placed.chunks, tuple(layers), placed.cell_counts)


def _options_along_cells(placed: LayerWalk, cell_options: Sequence[Sequence[Mapping[str, int]]]) -> dict[Layer, str]:
    """Each body layer's option: a cell's counts applied along its layers in MindFormers' order."""
    chosen: dict[Layer, str] = {}
    for chunk, row in enumerate(cell_options):
        for stage, counts in enumerate(row):
            sequence = [option for option in ALONG_A_CELL for _ in range(int(counts.get(option, 0)))]
            bodies = [layer for layer in placed.in_cell(chunk, stage) if layer.node == BODY]
            if len(bodies) != len(sequence):
                raise ValueError(
                    f"cell (chunk {chunk}, stage {stage}): {len(sequence)} options for {len(bodies)} body layers"
                )
            chosen.update(zip(bodies, sequence, strict=True))
    return chosen


def plan_stages(run: RunConfig, cell_options: Sequence[Sequence[Mapping[str, int]]]) -> list[StageEvaluation]:
    """Each stage of a plan as the memory and time models see it.

    *cell_options* [chunk][stage] maps options to body layer counts (the balancer's cells). Each
    layer is evaluated where the plan puts it, under the option its position in the cell gets;
    memory is the memory model's stage peak (with the backward's working set, which SAPP's
    descriptions do not count; the device limit is its memory less what the run config reserves).
    """
    par = run.parallel
    cell_layers = [[sum(int(n) for n in cell.values()) for cell in row] for row in cell_options]
    placed = _placed_walk(run, cell_layers)
    chosen = _options_along_cells(placed, cell_options)
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
