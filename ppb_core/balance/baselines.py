"""The usual hand setting to compare a plan with: layers split evenly, one recompute option for all."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ppb_core.balance.outputs import cells
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import uniform_split

# MB a plan's fullest stage needs beyond its problem's memory (negative: every stage fits), from the problem's
# `describe()` and the plan's `outputs.cells`: a run config's memory model (`estimate.plan.plan_overrun_mb`)
Overrun = Callable[[Mapping[str, Any], Sequence[Sequence[Mapping[str, Any]]]], float]


def uniform_layer_counts(problem: BalanceInput) -> dict[tuple[int, int], int]:
    """Body layers per cell: N // cells each, the remainder one each to the cells without head or
    tail, earliest first (then to those with them); cells with the head or tail stay empty when
    there are fewer layers than cells; under torchtitan its own default split. The walk's rule
    (`model.walk.uniform_split`), so `ppb estimate` prices the split the baselines do."""
    p = problem
    if p.closed_cells:  # a standalone MTP: the same rule over the cells that may hold layers
        open_cells = [cell for cell in p.cells if cell not in p.closed_cells]
        base, extra = divmod(p.layers.nb_body_layers, len(open_cells))
        order = [c for c in open_cells if c not in p.reserved_cells] + [c for c in open_cells if c in p.reserved_cells]
        return {cell: (base + (cell in order[:extra]) if cell in open_cells else 0) for cell in p.cells}
    models = {model for body in p.layers.bodies for model in (body.models or ())}
    framework = p.framework if len(models) <= 1 else None  # torchtitan's own split for one model
    split = uniform_split(p.layers.nb_body_layers, p.stages, p.chunks, p.schedule_name, p.reserved_cells, framework)
    return {(chunk, stage): split[chunk][stage] for chunk, stage in p.cells}


def uniform_plan(problem: BalanceInput, option: str) -> Plan:
    """Every layer under `option`, body types filling the cells in pipeline order."""
    k = OPTIONS.index(option)
    counts = empty_counts(problem)
    remaining = [body.nb_layer for body in problem.layers.bodies]
    body = 0
    per_cell = uniform_layer_counts(problem)
    for chunk, stage in problem.cells:
        room = per_cell[(chunk, stage)]
        while room:
            while remaining[body] == 0:
                body += 1
            take = min(room, remaining[body])
            counts[body][chunk][stage][k] += take
            remaining[body] -= take
            room -= take
    return Plan(problem, freeze(counts))


@dataclass(frozen=True)
class Baseline:
    option: str
    plan: Plan
    # the memory model's overrun of the split (`Overrun`) where the caller holds plans to it, else None
    overrun_mb: float | None = None

    @property
    def feasible(self) -> bool:
        """Whether the split fits by what the plan is held to: the memory model's peak where the caller gave
        it (`balance.fitting` holds a run config's plan to it), else the balancer's own charge. By the charge
        alone a split could say "fits: no" beside a memory-model peak under the device, and the gain be
        stated over a slower split than the fastest one `ppb check` accepts."""
        return self.plan.fits if self.overrun_mb is None else self.overrun_mb <= 0

    @property
    def iteration_time(self) -> float:
        return self.plan.iteration_time

    def to_dict(self) -> dict[str, object]:
        return {
            "option": self.option,
            "feasible": self.feasible,
            "feasible_by": "charge" if self.overrun_mb is None else "peak",
            "iteration_time": self.iteration_time,
            "peak_memory_mb": self.plan.peak_memory_mb,
            "layers_per_cell": [
                [self.plan.cell_layers(c, s) for s in range(self.plan.problem.stages)]
                for c in range(self.plan.problem.chunks)
            ],
            "cells": cells(self.plan),
        }


def baselines(problem: BalanceInput, overrun: Overrun | None = None) -> list[Baseline]:
    """A uniform split under each option the descriptions consider, simulated; with *overrun*, each judged
    by it (`Baseline.feasible`)."""
    found = []
    for option in problem.options:
        plan = uniform_plan(problem, option)
        over = None if overrun is None else overrun(problem.describe(), cells(plan))
        found.append(Baseline(option, plan, over))
    return found


def best_feasible(found: list[Baseline]) -> Baseline | None:
    feasible = [b for b in found if b.feasible]
    return min(feasible, key=lambda b: b.iteration_time) if feasible else None
