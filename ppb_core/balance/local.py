"""Improve a plan by small moves judged by the schedule itself, to start the program from a good plan.

A move shifts one layer to the neighbouring cell along the model or to another chunk of its stage,
or changes one layer's option;
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
    """Moves out of the busiest cells first: a layer to the neighbouring cell along the model or to
    another chunk of its stage (uneven chunks stall interleaved schedules), under any option; or a
    layer's option changed in place."""
    p = plan.problem
    considered = p.option_indices
    cells = p.cells
    position_of = {cell: position for position, cell in enumerate(cells)}
    bodies = range(len(p.layers.bodies))
    busiest = sorted(cells, key=lambda c: -(plan.cell_forward[c[0]][c[1]] + plan.cell_backward[c[0]][c[1]]))
    for v, s in busiest:
        position = position_of[(v, s)]
        targets = [cells[position + step] for step in (1, -1) if 0 <= position + step < len(cells)]
        targets += [(other, s) for other in range(p.chunks) if other != v and (other, s) not in targets]
        for body in bodies:
            row = plan.counts[body][v][s]
            for k in considered:
                if not row[k]:
                    continue
                for tv, ts in targets:
                    for k2 in considered:
                        counts = _mutable(plan)
                        counts[body][v][s][k] -= 1
                        counts[body][tv][ts][k2] += 1
                        yield Plan(p, freeze(counts))
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
