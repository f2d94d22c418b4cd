"""A user's own plan checked against the device: each stage's peak, the iteration, the optimum beside it.

`check_plan(run, plan_cells, bodies)` evaluates a plan in the balancer's cell format the way
`estimate.plan` evaluates the balancer's own: every stage's peak from the memory model
(`plan_stages`: which stage runs out, by how much, at the moment that sets it) and the iteration
in seconds from the time model (`timing.iteration.run_iteration`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.estimate.plan import StageEvaluation, plan_stages
from ppb_core.memory import MemoryModel
from ppb_core.model.placement import model_cell_options
from ppb_core.timing.iteration import Iteration, run_iteration
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import MB


@dataclass(frozen=True)
class StageCheck:
    """One stage of a plan against the device's usable memory (what the run config reserves left out). It fits
    where its peak and what the caching allocator reserves beyond it (`allocator_mb`: torchtitan FSDP2's stream
    pools, `memory.reserved`, and torchtitan async TP's symmetric workspace, `symm_workspace_mb` of it; 0 for
    Megatron and MindFormers) are within that memory."""

    stage: int
    layers: int
    options: dict[str, int]
    peak_mb: float
    device_mb: float
    moment: str  # the moment that sets the peak: backward, loss, first_loss, reduction or optimizer
    moments_mb: dict[str, float]
    in_flight: tuple[int, ...]
    allocator_mb: float = 0.0
    symm_workspace_mb: float = 0.0  # of allocator_mb, async TP's symmetric-memory workspace (`memory.symm_mem`)

    @classmethod
    def of(cls, evaluation: StageEvaluation) -> StageCheck:
        peak = evaluation.peak
        reserved = peak.reserved_bytes
        return cls(
            stage=peak.stage,
            layers=peak.body_layers,
            options={option: n for option, n in evaluation.options.items() if n},
            peak_mb=(peak.peak_bytes - reserved) / MB,
            device_mb=(peak.device_bytes - reserved) / MB,
            moment=peak.moment,
            moments_mb={name: (value - reserved) / MB for name, value in peak.moments.items()},
            in_flight=tuple(peak.in_flight),
            allocator_mb=peak.allocator_bytes / MB,
            symm_workspace_mb=peak.symm_workspace_bytes / MB,
        )

    @property
    def free_mb(self) -> float:
        return self.device_mb - self.peak_mb - self.allocator_mb

    @property
    def fits(self) -> bool:
        return self.peak_mb + self.allocator_mb <= self.device_mb

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "layers": self.layers,
            "options": self.options,
            "peak_mb": self.peak_mb,
            "device_mb": self.device_mb,
            "allocator_mb": self.allocator_mb,
            "symm_workspace_mb": self.symm_workspace_mb,
            "free_mb": self.free_mb,
            "fits": self.fits,
            "moment": self.moment,
            "moments_mb": self.moments_mb,
            "in_flight": list(self.in_flight),
        }


@dataclass(frozen=True)
class PlanCheck:
    stages: tuple[StageCheck, ...]
    iteration: Iteration

    @property
    def iteration_s(self) -> float:
        return self.iteration.seconds

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
            "iteration": self.iteration.to_json(),
            "stages": [stage.to_json() for stage in self.stages],
        }


def check_plan(
    run: RunConfig,
    plan_cells: Sequence[Sequence[Mapping[str, Any]]],
    bodies: Sequence[Mapping[str, Any]] = (),
    mtp_cell: tuple[int, int] | None = None,
) -> PlanCheck:
    """The plan's stages against the device and its iteration. *plan_cells*: [chunk][stage] cells as the
    balancer writes them (`options`: option → body layers; `layers`: per body type), *bodies* the
    plan's `input.bodies` (their sub-models place a combined body model by model), *mtp_cell* the
    [chunk][stage] where a Megatron layout runs the MTP layers apart from the loss (None: beside it)."""
    cells = [[dict(cell["options"]) for cell in row] for row in plan_cells]
    by_model = model_cell_options(plan_cells, bodies) if bodies else None
    evaluations = plan_stages(run, cells, by_model, mtp_cell)
    iteration = run_iteration(run, cells, TimeModel(run), MemoryModel(run), by_model, mtp_cell)
    return PlanCheck(tuple(StageCheck.of(e) for e in evaluations), iteration)
