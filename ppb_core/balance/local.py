"""Improve a plan by small moves judged by the schedule itself, to start the program from a good plan.

A move shifts one layer to the neighbouring cell along the model or to another chunk of its stage,
or changes one layer's option; it is kept when the plan stays valid, fits, and its simulated
iteration time drops. The search stops after a number of moves or evaluated plans, never on the
clock, so it finds the same plan on every machine. This only finds a good starting plan and a
tight bound for the listing; optimality is the program's job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ppb_core.balance.plan import Plan, freeze
from ppb_core.balance.progress import Clock

Counts = list[list[list[list[int]]]]


def _mutable(plan: Plan) -> Counts:
    return [[[list(cell) for cell in row] for row in body] for body in plan.counts]


def _neighbours(plan: Plan, options_fixed: bool) -> Iterator[Counts]:
    """Moves out of the busiest cells first: a layer to the neighbouring cell along the model or to
    another chunk of its stage (uneven chunks stall interleaved schedules), under any option; or a
    layer's option changed in place. With *options_fixed* only layers move."""
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
                    for k2 in [k] if options_fixed else considered:
                        counts = _mutable(plan)
                        counts[body][v][s][k] -= 1
                        counts[body][tv][ts][k2] += 1
                        yield counts
                if options_fixed:
                    continue
                for k2 in considered:
                    if k2 != k:
                        counts = _mutable(plan)
                        counts[body][v][s][k] -= 1
                        counts[body][v][s][k2] += 1
                        yield counts


def improve(
    plan: Plan,
    max_moves: int = 400,
    max_evaluations: int = 40_000,
    reoption: Callable[[Counts], Counts] | None = None,
    clock: Clock | None = None,
) -> Plan:
    """A plan no slower than `plan`, by first-improvement moves until none helps or a limit is reached.

    *reoption* gives the moved layers their options again (a Megatron setting fixes them by position);
    *clock*, when given, is the wall-clock safety bound.
    """
    best = plan
    moves = evaluations = 0
    improved = True
    while improved and moves < max_moves:
        improved = False
        for counts in _neighbours(best, reoption is not None):
            evaluations += 1
            if evaluations > max_evaluations or (clock is not None and clock.out):
                return best
            if reoption is not None:
                counts = reoption(counts)
            candidate = Plan(plan.problem, freeze(counts))
            if candidate.iteration_time >= best.iteration_time - 1e-12 * max(1.0, best.iteration_time):
                continue
            if candidate.fits and not candidate.problems():
                best = candidate
                moves += 1
                improved = True
                break
    return best
