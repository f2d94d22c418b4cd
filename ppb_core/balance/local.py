"""Improve a plan by moves judged by the schedule itself, to start the program from a good plan.

`improve`: a move shifts one layer to the neighbouring cell along the model or to another chunk of
its stage, or changes one layer's option; it is kept when the plan stays valid, fits, and its
simulated iteration time drops. `exchange`: a move gives one or two stages other listed stage
choices (`choices.Catalogue`), whole. The search stops after a number of moves or evaluated plans, never on the
clock, so it finds the same plan on every machine. This only finds a good starting plan and a
tight bound for the listing; optimality is the program's job.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ppb_core.balance import schedule_times
from ppb_core.balance.choices import StageChoice
from ppb_core.balance.plan import Counts as PlanCounts
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.progress import Clock

Counts = list[list[list[list[int]]]]


@dataclass(frozen=True)
class CellOptions:
    """A setting's options for a cell: per body type in the cell, its layers under each option, from
    the cell's layers of each type and *before*, the body layers its rank holds in earlier chunks."""

    given: Callable[[Sequence[int], int], list[list[int]]]
    # a cell's options depend on *before* (torchtitan's every N-th block counts across a rank's
    # chunks); a Megatron-Core setting's do not
    rank_wide: bool = False

    def __call__(self, sizes: Sequence[int], before: int = 0) -> list[list[int]]:
        return self.given(sizes, before)


FIRST_BATCH = 8  # neighbours timed together at first; doubled while none improves, up to LAST_BATCH
LAST_BATCH = 256
EXCHANGE_BATCH = 512  # stage exchanges timed together


Move = tuple[tuple[int, int, int, int, int], ...]  # (body, chunk, stage, option, ±1) per layer moved


def _mutable(counts: Sequence[Sequence[Sequence[Sequence[int]]]]) -> Counts:
    return [[[list(cell) for cell in row] for row in body] for body in counts]


def _neighbours(plan: Plan, options_fixed: bool) -> Iterator[Move]:
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
        targets = [target for target in targets if target not in p.closed_cells]
        for body in bodies:
            row = plan.counts[body][v][s]
            for k in considered:
                if not row[k]:
                    continue
                for tv, ts in targets:
                    for k2 in [k] if options_fixed else considered:
                        yield ((body, v, s, k, -1), (body, tv, ts, k2, 1))
                if options_fixed:
                    continue
                for k2 in considered:
                    if k2 != k:
                        yield ((body, v, s, k, -1), (body, v, s, k2, 1))


def reoptioned(
    problem: BalanceInput, counts: Sequence[Sequence[Sequence[Sequence[int]]]], reoption: CellOptions
) -> PlanCounts:
    """*counts* with every cell's options given again by *reoption* from its layers of each body type
    (and its rank's layers in earlier chunks: a stage's chunks in order)."""
    fresh = empty_counts(problem)
    for v, s in sorted(problem.cells, key=lambda cell: (cell[1], cell[0])):
        sizes = [sum(counts[b][v][s]) for b in range(len(counts))]
        before = sum(sum(counts[b][w][s]) for b in range(len(counts)) for w in range(v))
        for b, row in enumerate(reoption(sizes, before)):
            fresh[b][v][s] = row
    return freeze(fresh)


def _moved(plan: Plan, move: Move, reoption: CellOptions | None, whole: bool = False) -> Plan:
    """The plan after a move: only the moved cells change (under a rank-wide *reoption*, every cell
    of the moved cells' stages), their counts (given their options again by *reoption*, if any) and
    times written again (`Plan.cell_time`), the others shared with the plan. A cell's options under
    *reoption* follow from its stage's layers, so this is the whole plan given its options again when
    the plan already was; *whole* does that for a plan that was not."""
    if reoption is not None and whole:
        counts = _mutable(plan.counts)
        for body, v, s, k, step in move:
            counts[body][v][s][k] += step
        return Plan(plan.problem, reoptioned(plan.problem, freeze(counts), reoption))
    cells = {(body, v, s): list(plan.counts[body][v][s]) for body, v, s, _, _ in move}
    for body, v, s, k, step in move:
        cells[(body, v, s)][k] += step
    if reoption is not None:
        given = {(v, s) for _, v, s in cells}
        if reoption.rank_wide:  # a stage's later chunks count on from its earlier ones: all given again
            given = {(v, s) for _, s in given for v in range(plan.problem.chunks)}
        for s in sorted({s for _, s in given}):
            before = 0
            for v in range(plan.problem.chunks):
                sizes = [
                    sum(cells[(b, v, s)]) if (b, v, s) in cells else sum(plan.counts[b][v][s])
                    for b in range(len(plan.counts))
                ]
                if (v, s) in given:
                    for b, row in enumerate(reoption(sizes, before)):
                        cells[(b, v, s)] = row
                before += sum(sizes)
    bodies = [list(body) for body in plan.counts]
    for (body, v, s), cell in cells.items():
        row = list(bodies[body][v])
        row[s] = tuple(cell)
        bodies[body] = [*bodies[body][:v], tuple(row), *bodies[body][v + 1 :]]
    moved = Plan(plan.problem, tuple(tuple(body) for body in bodies))
    touched = {(v, s) for _, v, s in cells}
    for name, kind in (("cell_forward", "F"), ("cell_backward", "B")):
        times = [list(row) for row in getattr(plan, name)]
        for v, s in touched:
            times[v][s] = moved.cell_time(kind, v, s)
        moved.__dict__[name] = times  # the cached properties, as they would compute them
    return moved


def _fits(candidate: Plan, reference: Plan, reference_fits: bool) -> bool:
    """`candidate.fits`, checking only the stages whose cells differ from a reference known to fit
    (a stage's memory depends on its own cells only)."""
    if not reference_fits:
        return candidate.fits
    changed = {
        s
        for body, reference_body in zip(candidate.counts, reference.counts, strict=True)
        for row, reference_row in zip(body, reference_body, strict=True)
        for s, (cell, reference_cell) in enumerate(zip(row, reference_row, strict=True))
        if cell != reference_cell
    }
    return all(candidate.stage_fits(s) for s in sorted(changed))


def improve(
    plan: Plan,
    max_moves: int = 400,
    max_evaluations: int = 40_000,
    reoption: CellOptions | None = None,
    clock: Clock | None = None,
) -> Plan:
    """A plan no slower than `plan`, by first-improvement moves until none helps or a limit is reached.

    *reoption* gives the moved layers their options again (a Megatron setting fixes them by position);
    *clock*, when given, is the wall-clock safety bound. Neighbours are timed in batches
    (`makespans`, exactly `Plan.iteration_time`) and taken in the order they are met, so the moves,
    the count of evaluations and the plan found are those of trying them one by one.
    """
    best = plan
    best_fits = best.fits
    # whether the plan's options are already the setting's (then a move rewrites its own cells only)
    given = reoption is None or reoptioned(plan.problem, plan.counts, reoption) == plan.counts
    moves = evaluations = 0
    batch = FIRST_BATCH
    improved = True
    while improved and moves < max_moves:
        improved = False
        neighbours = _neighbours(best, reoption is not None)
        while not improved:
            if clock is not None and clock.out:
                return best
            room = max_evaluations - evaluations
            candidates = []
            for move in itertools.islice(neighbours, min(batch, room)):
                candidates.append(_moved(best, move, reoption, whole=not given))
            if not candidates:
                return best  # no neighbour left, or the evaluation limit reached
            p = plan.problem
            times = schedule_times.iteration_times(
                p, [c.cell_forward for c in candidates], [c.cell_backward for c in candidates]
            )
            threshold = best.iteration_time - 1e-12 * max(1.0, best.iteration_time)
            for index, (candidate, time) in enumerate(zip(candidates, times, strict=True)):
                if time < threshold and _fits(candidate, best, best_fits) and not candidate.problems():
                    candidate.__dict__["iteration_time"] = time  # the cached property, computed already
                    best, best_fits, given = candidate, True, True
                    evaluations += index + 1
                    moves += 1
                    improved = True
                    break
            else:
                evaluations += len(candidates)
                if evaluations >= max_evaluations:
                    return best
                batch = min(2 * batch, LAST_BATCH)
        batch = FIRST_BATCH
    return best


def exchange(
    plan: Plan,
    choices: Sequence[Sequence[StageChoice]],
    max_work: int,
    clock: Clock | None = None,
    taken: Callable[[Plan], None] | None = None,
) -> Plan:
    """A plan no slower than `plan`, by swapping whole stages for listed stage choices (*taken*
    hears each plan a move reaches, for progress).

    A move gives one stage another of its listed choices with the same layers of each body type
    (its chunks split or its options set otherwise), or gives two stages choices that move one
    layer between them. Such moves reach plans the layer moves of `improve` cannot: a stage that
    trades a layer of chunk 0 for one of chunk 1 under other options to stay within memory, or the
    dense layers gathered on the first cell (DeepSeek-V3-like 61 layers at P=16, V=2 went from
    2534.3 to 2334.7). Every move is timed (`makespans`, in batches) and the fastest that improves
    and keeps the body types in order is taken, then the moves from it, until none improves or
    *max_work* schedule ops have been run (never the clock, which is only the safety bound): the
    same plan on every machine.
    """
    p = plan.problem
    bodies = len(p.layers.bodies)
    ops = 2 * p.micro_batches * p.chunks * p.stages
    budget = max_work // ops
    totals = [
        [tuple(sum(c.body_count(b) for c in choice.cells) for b in range(bodies)) for choice in stage]
        for stage in choices
    ]
    by_totals: list[dict[tuple[int, ...], list[int]]] = []
    for stage_totals in totals:
        groups: dict[tuple[int, ...], list[int]] = {}
        for j, key in enumerate(stage_totals):
            groups.setdefault(key, []).append(j)
        by_totals.append(groups)
    times = {
        kind: [
            np.array([[c.forward if kind == "F" else c.backward for c in choice.cells] for choice in stage]).reshape(
                len(stage), p.chunks
            )
            + np.array([p.fixed_time(kind, v, s) for v in range(p.chunks)])[None, :]
            for s, stage in enumerate(choices)
        ]
        for kind in ("F", "B")
    }
    best = plan
    while budget > 0:
        if clock is not None and clock.out:
            return best
        held = [
            tuple(sum(best.body_layers(b, v, s) for v in range(p.chunks)) for b in range(bodies))
            for s in range(p.stages)
        ]
        moves = _exchanges(held, by_totals, bodies)[:budget]
        budget -= len(moves)
        base = {"F": np.array(best.cell_forward), "B": np.array(best.cell_backward)}
        values: list[float] = []
        for first in range(0, len(moves), EXCHANGE_BATCH):
            batch = moves[first : first + EXCHANGE_BATCH]
            arrays = {}
            for kind in ("F", "B"):
                array = np.repeat(base[kind][None, :, :], len(batch), axis=0)
                for index, move in enumerate(batch):
                    for s, j in move:
                        array[index, :, s] = times[kind][s][j]
                arrays[kind] = array
            values += schedule_times.iteration_times(p, arrays["F"], arrays["B"])
        threshold = best.iteration_time - 1e-12 * max(1.0, best.iteration_time)
        found = None
        for _, index in sorted((value, index) for index, value in enumerate(values) if value < threshold):
            candidate = _with_choices(best, moves[index], choices)
            if candidate.iteration_time < threshold and not candidate.problems() and _fits(candidate, best, True):
                found = candidate
                break
        if found is None:
            return best
        best = found
        if taken is not None:
            taken(best)
    return best


def _exchanges(
    held: Sequence[tuple[int, ...]], by_totals: Sequence[dict[tuple[int, ...], list[int]]], bodies: int
) -> list[tuple[tuple[int, int], ...]]:
    """Every move of `exchange`, as (stage, listed choice) pairs: one stage with its layers of each
    type kept, then two stages with one layer moved between them, stages in order."""
    moves: list[tuple[tuple[int, int], ...]] = [
        ((s, j),) for s, key in enumerate(held) for j in by_totals[s].get(key, ())
    ]
    for s in range(len(held)):
        for t in range(s + 1, len(held)):
            for body in range(bodies):
                for step in (1, -1):
                    more = tuple(n + step * (b == body) for b, n in enumerate(held[s]))
                    less = tuple(n - step * (b == body) for b, n in enumerate(held[t]))
                    for js in by_totals[s].get(more, ()):
                        moves += [((s, js), (t, jt)) for jt in by_totals[t].get(less, ())]
    return moves


def _with_choices(plan: Plan, move: Sequence[tuple[int, int]], choices: Sequence[Sequence[StageChoice]]) -> Plan:
    """The plan with the given stages running the given listed choices."""
    counts = _mutable(plan.counts)
    for s, j in move:
        for body in range(len(counts)):
            for v in range(plan.problem.chunks):
                counts[body][v][s] = [0] * len(counts[body][v][s])
        for v, cell in enumerate(choices[s][j].cells):
            for body, row in zip(cell.bodies, cell.counts, strict=True):
                counts[body][v][s] = list(row)
    return Plan(plan.problem, freeze(counts))
