"""A user's own plan checked against the device: each stage's peak, the iteration, the optimum beside it.

`check_plan(run, cell_options)` places each layer where the plan puts it, under the option its
position in its cell gets (as `estimate.plan` does), and evaluates every stage with the memory
model's stage peak (which stage runs out, by how much, at which moment) and the iteration by
running the schedule on each cell's forward and backward milliseconds from the time model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.estimate.plan import _options_along_cells, _placed_walk
from ppb_core.memory import MemoryModel, run_in_flight, run_in_flight_vectors, stage_peaks
from ppb_core.memory.peak import MB
from ppb_core.model.switches import OPTIONS
from ppb_core.schedules import canonical, simulate
from ppb_core.timing import TimeModel

# The moment a stage's peak comes at, when the memory model does not name it.
DEFAULT_MOMENT = "backward"


@dataclass(frozen=True)
class StageCheck:
    stage: int
    layers: int
    options: dict[str, int]
    peak_mb: float
    device_mb: float
    moment: str
    in_flight: tuple[int, ...]

    @property
    def free_mb(self) -> float:
        return self.device_mb - self.peak_mb

    @property
    def fits(self) -> bool:
        return self.peak_mb <= self.device_mb

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "layers": self.layers,
            "options": self.options,
            "peak_mb": self.peak_mb,
            "device_mb": self.device_mb,
            "free_mb": self.free_mb,
            "fits": self.fits,
            "moment": self.moment,
            "in_flight": list(self.in_flight),
        }


@dataclass(frozen=True)
class PlanCheck:
    stages: tuple[StageCheck, ...]
    iteration_s: float  # the pipeline's iteration: the schedule run on the cells' times
    cell_forward_ms: tuple[tuple[float, ...], ...]  # [chunk][stage]
    cell_backward_ms: tuple[tuple[float, ...], ...]

    @property
    def fits(self) -> bool:
        return all(stage.fits for stage in self.stages)

    @property
    def overflowing(self) -> list[StageCheck]:
        return [stage for stage in self.stages if not stage.fits]

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "iteration_s": self.iteration_s,
            "stages": [stage.to_json() for stage in self.stages],
        }


def check_plan(run: RunConfig, cell_options: Sequence[Sequence[Mapping[str, int]]]) -> PlanCheck:
    """The plan's stages against the device and its iteration. *cell_options*: [chunk][stage] → option →
    body layers, in the balancer's format."""
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
        option_of=lambda layer: chosen.get(layer, "NONE"),
        vectors=run_in_flight_vectors(run),
    )
    forward = [[0.0] * par.pp for _ in range(par.vpp)]
    backward = [[0.0] * par.pp for _ in range(par.vpp)]
    for layer in placed:
        state, switches = memory.option_state(layer, chosen.get(layer, "NONE"))
        f, b = times.layer_times(layer, state, switches)
        forward[layer.chunk][layer.stage] += f
        backward[layer.chunk][layer.stage] += b
    stages = []
    for peak in peaks:
        counts = {option: 0 for option in OPTIONS}
        for layer, option in chosen.items():
            if layer.stage == peak.stage:
                counts[option] += 1
        stages.append(
            StageCheck(
                stage=peak.stage,
                layers=peak.body_layers,
                options={option: n for option, n in counts.items() if n},
                # usable memory: the device less what the run config reserves, on both sides
                peak_mb=(peak.peak_bytes - peak.reserved_bytes) / MB,
                device_mb=(peak.device_bytes - peak.reserved_bytes) / MB,
                moment=str(getattr(peak, "moment", DEFAULT_MOMENT)),
                in_flight=tuple(peak.in_flight),
            )
        )
    schedule = canonical(par.schedule, par.vpp)
    makespan_ms = simulate(schedule, forward, backward, run.training.micro_batches).makespan
    return PlanCheck(
        tuple(stages),
        makespan_ms / 1000.0,
        tuple(tuple(row) for row in forward),
        tuple(tuple(row) for row in backward),
    )
