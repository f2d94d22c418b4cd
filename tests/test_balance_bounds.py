"""The critical path as a maximum over path expressions, checked against the schedule simulator.

The balancer writes the iteration time as T ≥ Σ_π (times π runs a cell's op) × (cell time) for
paths π of the schedule's dependency graph (`program`, `bounds`), or all of them at once with a
column per op (`ChoiceModel.add_every_path`). These tests check each form against
`schedules.simulate`, whose op orders and figures tests/test_schedules.py checks by hand:

* exhaustively on small schedules: the dependency graph is built here from the rules alone (each
  stage runs its ops in `stage_orders`' order; a forward needs the previous cell's forward along
  the model, a backward the next cell's backward, the last cell's backward its own forward),
  every path's counts are listed, and the longest under random cell times is the iteration time;
* the critical path the simulator reports, as an expression, is the iteration time;
* every member of each path family (`bounds`) is at most the iteration time, for any cell times;
* the every-path program over one fixed choice per stage gives exactly the iteration time, and
  over listed choices a bound no higher than the proven optimum.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from small_models import two_kind_bodies

from ppb_core.balance import highs
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.bounds import busy_family, drain_family, every_path_bound, nudged_family
from ppb_core.balance.choice_model import ChoiceModel
from ppb_core.balance.choices import Catalogue, CellChoice, StageChoice
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import choices_within, solve
from ppb_core.balance.progress import Clock
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import (
    MANY_WEIGHTINGS,
    canonical,
    cell_order,
    critical_counts,
    critical_counts_many,
    makespan,
    simulate,
    stage_orders,
)

# (schedule, P, V, m) small enough to list every path of the graph
SMALL = [
    ("1f1b", 1, 1, 3),
    ("1f1b", 2, 1, 3),
    ("1f1b", 3, 1, 4),
    ("1f1b", 4, 1, 3),
    ("interleaved", 2, 2, 2),
    ("interleaved", 2, 2, 4),
    ("interleaved", 3, 2, 3),
    ("gpipe", 2, 2, 2),
    ("gpipe", 3, 1, 3),
    ("dualpipev", 2, 2, 4),
]


def _graph(schedule: str, stages: int, chunks: int, micro_batches: int) -> tuple[list, dict]:
    """The ops (kind, chunk, stage, micro-batch) and each op's predecessors, from the rules alone."""
    name = canonical(schedule, chunks)
    order = cell_order(name, stages, chunks)  # cells along the model's layers
    along = {cell: i for i, cell in enumerate(order)}
    orders = stage_orders(name, stages, chunks, micro_batches)
    ops, before = [], {}
    for stage, ops_of_stage in enumerate(orders):
        previous = None
        for op in ops_of_stage:
            here = (op.kind, op.chunk, stage, op.micro_batch)
            ops.append(here)
            position = along[(op.chunk, stage)]
            needs = [previous] if previous is not None else []
            if op.kind == "F" and position > 0:
                chunk, source = order[position - 1]
                needs.append(("F", chunk, source, op.micro_batch))
            if op.kind == "B":
                if position == len(order) - 1:
                    needs.append(("F", op.chunk, stage, op.micro_batch))
                else:
                    chunk, source = order[position + 1]
                    needs.append(("B", chunk, source, op.micro_batch))
            before[here] = needs
            previous = here
    return ops, before


def _every_path_counts(schedule: str, stages: int, chunks: int, micro_batches: int) -> list[dict]:
    """The cell counts of every path of the graph (from any op to any op), listed one by one."""
    ops, before = _graph(schedule, stages, chunks, micro_batches)
    paths_into: dict[tuple, set[tuple]] = {}

    def into(op: tuple) -> set[tuple]:
        if op not in paths_into:
            cell = (op[0], op[1], op[2])
            found: set[tuple] = set()
            starts = {()}.union(*(into(need) for need in before[op]))  # a path may start at any op
            for counts in starts:
                grown = dict(counts)
                grown[cell] = grown.get(cell, 0) + 1
                found.add(tuple(sorted(grown.items())))
            paths_into[op] = found
        return paths_into[op]

    for op in ops:  # the stage orders respect the dependencies of a schedule that runs: no deep recursion
        into(op)
    return [dict(counts) for counts in set().union(*(paths_into[op] for op in ops))]


def _random_times(rng: random.Random, stages: int, chunks: int) -> tuple[list[list[float]], list[list[float]]]:
    forward = [[rng.choice((0.0, rng.uniform(0.1, 5.0))) for _ in range(stages)] for _ in range(chunks)]
    backward = [[rng.uniform(0.0, 10.0) for _ in range(stages)] for _ in range(chunks)]
    return forward, backward


def _length(path: dict, forward: list[list[float]], backward: list[list[float]]) -> float:
    return sum(n * (forward if kind == "F" else backward)[v][s] for (kind, v, s), n in path.items())


@pytest.mark.parametrize(("schedule", "stages", "chunks", "micro_batches"), SMALL)
def test_the_longest_of_every_path_is_the_iteration_time(schedule, stages, chunks, micro_batches) -> None:
    paths = _every_path_counts(schedule, stages, chunks, micro_batches)
    rng = random.Random(f"{schedule}{stages}{chunks}{micro_batches}")
    for _ in range(40):
        forward, backward = _random_times(rng, stages, chunks)
        expected = simulate(schedule, forward, backward, micro_batches).makespan
        assert max(_length(path, forward, backward) for path in paths) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("schedule", "stages", "chunks", "micro_batches"), SMALL)
def test_the_simulators_critical_path_is_one_of_the_listed_paths(schedule, stages, chunks, micro_batches) -> None:
    paths = {tuple(sorted(path.items())) for path in _every_path_counts(schedule, stages, chunks, micro_batches)}
    rng = random.Random(7)
    for _ in range(20):
        forward, backward = _random_times(rng, stages, chunks)
        counts = critical_counts(schedule, forward, backward, micro_batches)
        assert tuple(sorted(counts.items())) in paths


@st.composite
def schedules_and_times(draw):
    schedule = draw(st.sampled_from(["1f1b", "interleaved", "gpipe", "dualpipev"]))
    stages = draw(st.integers(1, 6)) if schedule != "interleaved" else draw(st.integers(2, 5))
    chunks = {"1f1b": 1, "interleaved": draw(st.integers(2, 3)), "gpipe": draw(st.integers(1, 2)), "dualpipev": 2}[
        schedule
    ]
    if schedule == "dualpipev":
        stages = max(stages, 2)
    least = {"interleaved": stages, "dualpipev": 2 * stages}.get(schedule, 1)
    micro_batches = draw(st.integers(least, least + 8))
    if schedule == "interleaved":
        micro_batches = stages * draw(st.integers(1, 3))  # groups of P: never the deadlocking sizes
    times = st.floats(0.0, 10.0, allow_nan=False)
    forward = [[draw(times) for _ in range(stages)] for _ in range(chunks)]
    backward = [[draw(times) for _ in range(stages)] for _ in range(chunks)]
    return schedule, micro_batches, forward, backward


@settings(max_examples=150, deadline=None)
@given(case=schedules_and_times())
def test_the_critical_path_expression_is_the_iteration_time(case) -> None:
    schedule, micro_batches, forward, backward = case
    expected = simulate(schedule, forward, backward, micro_batches).makespan
    counts = critical_counts(schedule, forward, backward, micro_batches)
    assert _length(counts, forward, backward) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert makespan(schedule, forward, backward, micro_batches) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(case=schedules_and_times(), more=st.lists(st.integers(0, 10_000), min_size=MANY_WEIGHTINGS, max_size=12))
def test_many_weightings_at_once_give_the_simulators_paths(case, more) -> None:
    """`critical_counts_many` (a level of the graph at a time, every weighting side by side) gives, weighting by
    weighting, the path the op-by-op simulator walks back (`Timeline.path_counts`), ties included: the drawn
    times, even cells (every tie), and cells of few distinct values."""
    schedule, micro_batches, forward, backward = case
    weightings = [(forward, backward), ([[1.0] * len(row) for row in forward], [[2.0] * len(row) for row in forward])]
    for seed in more:
        rng = random.Random(seed)
        weightings.append(
            (
                [[rng.choice((0.0, 0.5, 1.0, 0.1)) for _ in row] for row in forward],
                [[rng.choice((1.0, 2.0, 0.3)) for _ in row] for row in forward],
            )
        )
    found = critical_counts_many(schedule, weightings, micro_batches)
    for (f, b), counts in zip(weightings, found, strict=True):
        assert counts == simulate(schedule, f, b, micro_batches).path_counts()


def _problem(schedule: str, stages: int, chunks: int, micro_batches: int, layers: int) -> BalanceInput:
    body = {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": layers,
        "time": 1.0,
        "memory_parameter": 1,
        "memory_activation": 4,
        "memory_select_rec": 3,
        "memory_select_comm": 3,
        "memory_both_comm_select": 2,
        "memory_recompute": 1,
    }
    return BalanceInput(layer_set([body]), stages, micro_batches, chunks, 1e9, schedule=schedule)


@settings(max_examples=100, deadline=None)
@given(case=schedules_and_times())
def test_path_families_never_exceed_the_iteration_time(case) -> None:
    schedule, micro_batches, forward, backward = case
    stages, chunks = len(forward[0]), len(forward)
    problem = _problem(schedule, stages, chunks, micro_batches, stages * chunks)
    expected = simulate(schedule, forward, backward, micro_batches).makespan
    for family in (busy_family(problem), drain_family(problem), nudged_family(problem)):
        for path in family:
            assert _length(path, forward, backward) <= expected * (1 + 1e-12) + 1e-9


@settings(max_examples=40, deadline=None)
@given(case=schedules_and_times(), seed=st.integers(0, 10**6))
def test_every_path_rows_over_fixed_cells_give_the_iteration_time(case, seed) -> None:
    """One listed choice per stage, with the cell times drawn: the program's least T is the
    simulator's iteration time (head and tail times added to their cells by the program)."""
    schedule, micro_batches, forward, backward = case
    stages, chunks = len(forward[0]), len(forward)
    problem = _problem(schedule, stages, chunks, micro_batches, stages * chunks + seed % 3)
    layout = uniform_plan(problem, "NONE")
    choices = []
    for s in range(stages):
        cells = []
        for v in range(chunks):
            n = layout.cell_layers(v, s)
            counts = ((n, 0, 0, 0, 0),) if n else ()
            cells.append(CellChoice((0,) if n else (), counts, forward[v][s], backward[v][s], 0.0, 0.0))
        choices.append([StageChoice(tuple(cells))])
    model = ChoiceModel(problem, choices, 1.0)
    model.add_every_path()
    solver = highs.new_solver(60)
    highs.load(solver, model.columns, model.rows, model.top)
    solver.run()
    assert highs.status(solver) == "optimal"
    with_fixed = [[forward[v][s] + problem.fixed_time("F", v, s) for s in range(stages)] for v in range(chunks)]
    backward_fixed = [[backward[v][s] + problem.fixed_time("B", v, s) for s in range(stages)] for v in range(chunks)]
    expected = simulate(schedule, with_fixed, backward_fixed, micro_batches).makespan
    # HiGHS meets each row to its primal feasibility tolerance (1e-7 absolute), and a path chains one
    # end-time row per op (2·m·V ops per stage, P stages): the least T may sit that many tolerances low.
    slack = 1e-7 * (2 * micro_batches * chunks * stages + 1)
    assert solver.getInfo().objective_function_value == pytest.approx(expected, rel=1e-7, abs=slack)


@pytest.mark.parametrize(("stages", "chunks", "micro_batches"), [(2, 1, 4), (3, 1, 5), (2, 2, 4)])
def test_the_every_path_bound_is_at_most_the_proven_optimum(stages, chunks, micro_batches) -> None:
    """Layers of two sizes, memory that forces recompute on early stages: the relaxation with every
    path bounds the proven optimum from below (and is a real bound: above the busiest-stage floor)."""
    descriptions = two_kind_bodies(stages * chunks + 1)
    problem = BalanceInput(layer_set(descriptions), stages, micro_batches, chunks, 600.0)
    solution = solve(problem, time_limit=60)
    assert solution.status == "optimal"
    catalogue = Catalogue(problem)
    bound = every_path_bound(
        problem, choices_within(problem, catalogue, solution.objective, closed_form=False), Clock(60)
    )
    assert bound is not None and math.isfinite(bound)
    assert bound <= solution.objective * (1 + 1e-7)
    # every stage works m times its own ops: the bound sees at least the even share of the least work
    least = sum(d["nb_layer"] * 3 * d["time"] for d in descriptions)  # forward + NONE backward = 3·forward
    assert bound >= micro_batches * least / stages * (1 - 1e-9)
