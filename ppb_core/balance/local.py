"""Improve a plan by small moves judged by the schedule itself, to start the program from a good plan.

A move shifts one layer to the neighbouring cell along the model or changes one layer's option;
it is kept when the plan stays valid, fits, and its simulated iteration time drops. This only
finds a good starting plan and a tight bound for the listing; optimality is the program's job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from ppb_core.balance.plan import Plan, freeze


def _mutable(plan: Plan) -> list[list[list[list[int]]]]:
    return [[[list(cell) for cell in row] for row in body] for body in plan.counts]


def _neighbours(plan: Plan) -> Iterator[Plan]:
    p = plan.problem
    considered = p.option_indices
    cells = p.cells
    bodies = range(len(p.layers.bodies))
    for position, (v, s) in enumerate(cells):
        for body in bodies:
            row = plan.counts[body][v][s]
            for k in considered:
                if not row[k]:
                    continue
                # the layer under option k moves to the next or previous cell, under any option
                for step in (1, -1):
                    target = position + step
                    if not 0 <= target < len(cells):
                        continue
                    tv, ts = cells[target]
                    for k2 in considered:
                        counts = _mutable(plan)
                        counts[body][v][s][k] -= 1
                        counts[body][tv][ts][k2] += 1
                        yield Plan(p, freeze(counts))
                # or changes option in place
                for k2 in considered:
                    if k2 != k:
                        counts = _mutable(plan)
                        counts[body][v][s][k] -= 1
                        counts[body][v][s][k2] += 1
                        yield Plan(p, freeze(counts))


def improve(plan: Plan, time_limit: float = 2.0, max_moves: int = 200) -> Plan:
    """A plan no slower than `plan`, by first-improvement moves until none helps or time runs out."""
    started = time.perf_counter()
    best = plan
    moves = 0
    improved = True
    while improved and moves < max_moves:
        improved = False
        for candidate in _neighbours(best):
            if time.perf_counter() - started > time_limit:
                return best
            if candidate.iteration_time >= best.iteration_time - 1e-12 * max(1.0, best.iteration_time):
                continue
            if candidate.fits and not candidate.problems():
                best = candidate
                moves += 1
                improved = True
                break
    return best

