"""The searches that start the program: batched timing changes no result, exchanges only improve.

`makespans` times many plans at once; it must give exactly what running the schedule op by op
gives (`schedules.makespan`, which tests/test_schedules.py checks by hand). `improve` times its
neighbours in batches; it must take the same moves as trying them one by one, written out here.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from small_models import two_kind_bodies

from ppb_core.balance import local
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.choices import Catalogue
from ppb_core.balance.local import exchange, improve
from ppb_core.balance.makespans import makespans
from ppb_core.balance.plan import Plan
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import choices_within
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import check, makespan

SHAPES = [
    ("1f1b", 4, 1, 6),
    ("1f1b", 3, 1, 2),
    ("interleaved", 4, 2, 8),
    ("interleaved", 2, 3, 4),
    ("gpipe", 3, 2, 4),
    ("dualpipev", 4, 2, 8),
]


@settings(max_examples=40, deadline=None)
@given(shape=st.sampled_from(SHAPES), seed=st.integers(0, 10**6), plans=st.integers(1, 5))
def test_makespans_equal_the_schedule_run_op_by_op(shape, seed, plans) -> None:
    schedule, stages, chunks, m = shape
    name = check(schedule, stages, chunks, m)
    rng = random.Random(seed)
    forward = [[[rng.uniform(0, 5) for _ in range(stages)] for _ in range(chunks)] for _ in range(plans)]
    backward = [
        [[rng.choice((0.0, rng.uniform(0, 9))) for _ in range(stages)] for _ in range(chunks)] for _ in range(plans)
    ]
    expected = [makespan(name, f, b, m) for f, b in zip(forward, backward, strict=True)]
    assert makespans(name, forward, backward, m) == expected  # exactly: the same float arithmetic


def _one_by_one(plan: Plan, max_moves: int, max_evaluations: int) -> Plan:
    """`improve` as first written: each neighbour timed alone, the first that helps and fits taken."""
    best, moves, evaluations, improved = plan, 0, 0, True
    while improved and moves < max_moves:
        improved = False
        for move in local._neighbours(best, False):
            evaluations += 1
            if evaluations > max_evaluations:
                return best
            counts = [[[list(cell) for cell in row] for row in body] for body in best.counts]
            for body, v, s, k, step in move:
                counts[body][v][s][k] += step
            candidate = Plan(plan.problem, tuple(tuple(tuple(map(tuple, row)) for row in body) for body in counts))
            if candidate.iteration_time >= best.iteration_time - 1e-12 * max(1.0, best.iteration_time):
                continue
            if candidate.fits and not candidate.problems():
                best, moves, improved = candidate, moves + 1, True
                break
    return best


@pytest.mark.parametrize(
    ("stages", "chunks", "m", "memory", "evaluations"),
    [(4, 1, 8, 700.0, 10_000), (4, 2, 8, 700.0, 10_000), (4, 2, 8, 700.0, 37), (3, 1, 3, 400.0, 10_000)],
)
def test_improve_takes_the_moves_trying_them_one_by_one_would(stages, chunks, m, memory, evaluations) -> None:
    problem = BalanceInput(layer_set(two_kind_bodies(14)), stages, m, chunks, memory)
    start = next(plan for plan in (uniform_plan(problem, o) for o in reversed(problem.options)) if plan.fits)
    found = improve(start, 400, evaluations)
    assert found.counts == _one_by_one(start, 400, evaluations).counts
    assert found.iteration_time == Plan(problem, found.counts).iteration_time


@pytest.mark.parametrize("chunks", [1, 2])
def test_exchange_only_improves_and_keeps_plans_valid(chunks: int) -> None:
    problem = BalanceInput(layer_set(two_kind_bodies(14)), 4, 8, chunks, 700.0)
    start = next(plan for plan in (uniform_plan(problem, o) for o in reversed(problem.options)) if plan.fits)
    choices = choices_within(problem, Catalogue(problem), start.iteration_time, closed_form=False)
    found = exchange(start, choices, 10**9)
    assert found.iteration_time <= start.iteration_time
    assert found.fits and not found.problems()
    assert exchange(start, choices, 10**9).counts == found.counts  # repeatable
    # no single listed stage swap (same layers per type) improves the plan found
    for s, stage in enumerate(choices):
        held = [found.body_layers(b, v, s) for b in range(2) for v in range(chunks)]
        for choice in stage:
            if [cell.body_count(b) for b in range(2) for cell in choice.cells] != held:
                continue
            other = local._with_choices(found, [(s, stage.index(choice))], choices)
            if other.fits and not other.problems():
                assert other.iteration_time >= found.iteration_time - 1e-9
