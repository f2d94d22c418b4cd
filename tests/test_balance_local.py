"""The searches that start the program: batched timing changes no result, exchanges only improve.

`makespans` times many plans at once; it must give exactly what running the schedule op by op
gives (`schedules.makespan`, which tests/test_schedules.py checks by hand). `improve` times its
neighbours in batches; it must take the same moves as trying them one by one, written out here.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from small_models import two_kind_bodies

from ppb_core.balance import local, program
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.choices import Catalogue
from ppb_core.balance.local import exchange, improve
from ppb_core.balance.makespans import makespans
from ppb_core.balance.megatron import Setting
from ppb_core.balance.plan import Plan
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import choices_within
from ppb_core.balance.torchtitan_settings import EveryNth
from ppb_core.model.switches import ALONG_A_CELL, OPTIONS
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


def _one_by_one(plan: Plan, max_moves: int, max_evaluations: int, setting: Setting | None = None) -> Plan:
    """`improve` as first written: each neighbour timed alone, the first that helps and fits taken;
    under a Megatron-Core setting every cell of every neighbour given its options again."""
    best, moves, evaluations, improved = plan, 0, 0, True
    while improved and moves < max_moves:
        improved = False
        for move in local._neighbours(best, setting is not None):
            evaluations += 1
            if evaluations > max_evaluations:
                return best
            counts = [[[list(cell) for cell in row] for row in body] for body in best.counts]
            for body, v, s, k, step in move:
                counts[body][v][s][k] += step
            if setting is not None:
                for v, s in plan.problem.cells:
                    sizes = [sum(counts[b][v][s]) for b in range(len(counts))]
                    along = [o for o in ALONG_A_CELL for _ in range(setting.cell_options(sum(sizes)).get(o, 0))]
                    for b in range(len(counts)):
                        before = sum(sizes[:b])
                        counts[b][v][s] = [along[before : before + sizes[b]].count(o) for o in OPTIONS]
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


@pytest.mark.parametrize("setting", [Setting("full"), Setting("block", 1), Setting("block", 2), Setting("none")])
def test_improve_under_a_setting_takes_the_moves_one_by_one_would(setting: Setting) -> None:
    """Under a Megatron-Core setting a move rewrites only its own cells' options (a cell's follow from
    its layers): the plans are those of giving every cell its options again, from the even split
    under the setting (19 layers over 8 cells: moves help under every setting) and from the even
    split under block 1, whose options are not those of the other settings."""
    problem = BalanceInput(layer_set(two_kind_bodies(17)), 4, 8, 2, 2000.0)
    reoption = program._reoption(setting)
    own, other = program.setting_plan(problem, setting), program.setting_plan(problem, Setting("block", 1))
    for start in (own, other):
        assert start.fits
        found = improve(start, 400, 10_000, reoption)
        assert found.counts == _one_by_one(start, 400, 10_000, setting).counts
        assert found.cell_backward == Plan(problem, found.counts).cell_backward
        assert found.iteration_time < start.iteration_time or start is other


def _counted_along(counts: list, problem: BalanceInput, every: int) -> None:
    """Every cell's options as torchtitan v0.2.2's `_apply_layer_sac` gives them, in place: one count per
    rank (stage) over its chunks in order, blocks whose count is a multiple of *every* FULL."""
    full, none = OPTIONS.index("FULL"), OPTIONS.index("NONE")
    for s in range(problem.stages):
        count = 0
        for v in range(problem.chunks):
            for b in range(len(counts)):
                layers = sum(counts[b][v][s])
                wrapped = sum((count + i + 1) % every == 0 for i in range(layers))
                counts[b][v][s] = [0] * len(OPTIONS)
                counts[b][v][s][full], counts[b][v][s][none] = wrapped, layers - wrapped
                count += layers


def test_improve_under_every_nth_gives_a_ranks_chunks_their_options_again() -> None:
    """Under torchtitan's every N-th block (counted across a rank's chunks) a move rewrites every cell
    of the stages it touches: the plans are those of giving every cell its options again by the rank's
    count (`_counted_along`) after each move, tried one by one."""
    problem = BalanceInput(layer_set(two_kind_bodies(19)), 4, 8, 2, 2000.0, framework="torchtitan")
    every = EveryNth("every", 3)
    start = program.setting_plan(problem, every)
    assert start.fits
    best, moves, improved = start, 0, True
    while improved and moves < 400:
        improved = False
        for move in local._neighbours(best, True):
            counts = [[[list(cell) for cell in row] for row in body] for body in best.counts]
            for body, v, s, k, step in move:
                counts[body][v][s][k] += step
            _counted_along(counts, problem, 3)
            candidate = Plan(problem, tuple(tuple(tuple(map(tuple, row)) for row in body) for body in counts))
            faster = candidate.iteration_time < best.iteration_time - 1e-12 * max(1.0, best.iteration_time)
            if faster and candidate.fits and not candidate.problems():
                best, moves, improved = candidate, moves + 1, True
                break
    found = improve(start, 400, 10**9, program._reoption(every))
    assert found.counts == best.counts and found.iteration_time < start.iteration_time
    assert found.cell_backward == Plan(problem, found.counts).cell_backward


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


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), chunks=st.integers(1, 3), nudge=st.sampled_from((-1e-7, 0.0, 1e-7, None)))
def test_a_stage_fits_as_its_exact_memory_says(seed: int, chunks: int, nudge: float | None) -> None:
    """`Plan.stage_fits` (floating point, exact only near the device) agrees with the exact peak, with
    the device set exactly at a stage's peak, a hair either side, or anywhere."""
    rng = random.Random(seed)
    bodies = two_kind_bodies(9)
    for body in bodies:  # memory in odd fractions of a MB, as a profiler writes them
        for key in [k for k in body if k.startswith("memory")]:
            body[key] = rng.uniform(0.1, 50.0)
    base = BalanceInput(layer_set(bodies), 3, 6, chunks, 1e6)
    counts = [[[[0] * 5 for _ in range(3)] for _ in range(chunks)] for _ in bodies]
    for index, body in enumerate(bodies):
        for _ in range(body["nb_layer"]):
            counts[index][rng.randrange(chunks)][rng.randrange(3)][rng.choice(base.option_indices)] += 1
    plan = Plan(base, tuple(tuple(tuple(map(tuple, row)) for row in body) for body in counts))
    peaks = [float(plan.exact_stage_memory(stage)) for stage in range(3)]
    peak = rng.choice([value for value in peaks if value > 0])
    memory = peak * (1 + nudge) if nudge is not None else rng.uniform(0.5, 1.5) * peak
    fitted = Plan(BalanceInput(layer_set(bodies), 3, 6, chunks, memory), plan.counts)
    for stage in range(3):
        assert fitted.stage_fits(stage) == (fitted.exact_stage_memory(stage) <= Fraction(memory))
