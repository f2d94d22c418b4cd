"""The balancer times a torchtitan run's interleaved schedule as torch runs it: in lock step.

torch 2.6.0 `PipelineScheduleMulti._step_microbatches` (torch/distributed/pipelining/schedules.py) walks
`pipeline_order` one time step after another; at each step a rank runs its action, then batches its send
with the receives for what its neighbours do at that step and waits for the batch. So a step ends on a
rank when it and every neighbour it exchanges with have run that step's action (`ppb_core.pipeline_lockstep`).
The iteration prices it (protocol torch_looped); the balancer must search under the same schedule, or its
optimum (uneven chunks, fast under the op graph) is slow where it runs (session 27, docs/balance.md).
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ppb_core.balance.program as program
from ppb_core.balance.choices import Catalogue
from ppb_core.balance.megatron import Setting
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import _none_floor, _none_floor_reaches, solve
from ppb_core.balance.progress import Clock, Reporter, WorkLimits
from ppb_core.balance.torchtitan_settings import runnable
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set
from ppb_core.pipeline_lockstep import (
    lockstep_timeline,
    looped_steps,
    step_counts_many,
    step_longest_path,
    step_makespans,
)
from ppb_core.schedules import in_flight_vectors, makespan, simulate

FULL, NONE = OPTIONS.index("FULL"), OPTIONS.index("NONE")


def _body(count: int, forward: float = 1.0, none: float = 2.0, full: float = 3.0, mb: tuple = (10, 1)) -> dict:
    """A body type: forward, backward under NONE and FULL, MB a micro-batch in flight under NONE and FULL
    (the other options dearer in time than NONE, which torchtitan's settings never run anyway)."""
    return {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": count,
        "time": forward,
        "memory_parameter": 0,
        "memory_activation": mb[0],
        "memory_select_rec": mb[0],
        "memory_select_comm": mb[0],
        "memory_both_comm_select": mb[0],
        "memory_recompute": mb[1],
        "backward_time": none,
        "select_rec_time": none + 1,
        "select_comm_time": none + 1,
        "both_comm_select_time": none + 1,
        "recompute_time": full,
    }


def _problem(layers: int, memory: float = 1000.0, framework: str | None = "torchtitan", **body: float) -> BalanceInput:
    described = runnable(layer_set([_body(layers, **body)]), op=False)
    return BalanceInput(described, 2, 4, 2, memory, schedule="interleaved", framework=framework)


def _plan(problem: BalanceInput, split: dict[tuple[int, int], tuple[int, int]]) -> Plan:
    """A plan from (chunk, stage) → (NONE layers, FULL layers)."""
    counts = empty_counts(problem)
    for (v, s), (none, full) in split.items():
        counts[0][v][s][NONE], counts[0][v][s][FULL] = none, full
    return Plan(problem, freeze(counts))


def test_even_cells_by_hand_and_against_the_op_graph() -> None:
    # torch 2.6.0 ScheduleInterleaved1F1B, P = 2, V = 2, m = 4 (one round of n = 4): 8 blocks 2 | 2 | 2 | 2,
    # all NONE (forward 1, backward 2 a block): every cell f = 2, b = 4. `_get_1f1b_rank_ops`' table (rank 0:
    # 4 warm-up forwards, empty steps up to its first backward's step V·P + 2(P − 1) = 6; rank 1: one empty
    # step, 2 warm-up forwards, an empty step up to step 4), Fcm/Bcm chunk c micro-batch m:
    #   t   0   1   2   3   4   5   6   7   8   9   10  11  12  13  14  15  16  17  18  19  20  21
    #   r0  F00 F01 F10 F11 -   -   F02 B10 F03 B11 F12 B00 F13 B01 -   B12 -   B13 -   B02 -   B03
    #   r1  -   F00 F01 -   F10 B10 F11 B11 F02 B00 F03 B01 F12 B12 F13 B13 -   B02 -   B03
    # Sends: r0's chunk-0 forwards and chunk-1 backwards to r1, r1's chunk-0 forwards and chunk-1 backwards
    # to r0 (r1's chunk 1 is the last stage, r0's chunk 0 the first: their forward, backward send nothing).
    # A step ends for both at the later action's end where something crosses; each rank's clock after t:
    #   t0 2 2, t1 4 4, t2 6 6, t3 8 8, t4 8 10 (r1's F10 alone), t5 14 14 (B10 [10, 14] to r0), t6 16 16,
    #   t7 20, t8 22, t9 26, t10 28, t11 32, t12 34, t13 38, t14 38 40, t15 44 (r0 B12 [38, 42], r1 B13
    #   [40, 44]), t17 48, t19 52, t21 r0's B03 [52, 56]: 56.
    # Each op only after its stage's previous op and its input (the op graph, Megatron's order, which the
    # table keeps, empty steps aside): Σ_s S_s / V + (m − 1/V)·max_s S_s = 24/2 + 3.5·12 = 54.
    f, b, free = [[2.0, 2.0], [2.0, 2.0]], [[4.0, 4.0], [4.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]
    assert lockstep_timeline(f, b, 4, free).makespan == pytest.approx(56.0)
    assert step_longest_path(f, b, 4)[0] == pytest.approx(56.0)
    assert makespan("interleaved", f, b, 4) == pytest.approx(54.0)
    even = {cell: (2, 0) for cell in ((0, 0), (0, 1), (1, 0), (1, 1))}
    assert _plan(_problem(8), even).iteration_time == pytest.approx(56.0)
    assert _plan(_problem(8, framework=None), even).iteration_time == pytest.approx(54.0)  # SAPP's runs
    assert _plan(_problem(8, framework="megatron"), even).iteration_time == pytest.approx(54.0)


def test_a_full_block_in_each_chunk_1_cell_by_hand() -> None:
    # As above with one of chunk 1's two blocks FULL on each rank (every 3rd block of a rank: counts 1-2 in
    # chunk 0, 3-4 in chunk 1): chunk 1's backward 2 + 3 = 5. The same table, clocks after each step:
    #   t0-t4 as before (8, 10), t5 r1 B10 [10, 15]: 15, t6 17, t7 B10 B11 [17, 22]: 22, t8 24, t9 r0 B11
    #   [24, 29] with r1 B00 [24, 28]: 29, t10 31, t11 35, t12 37, t13 r1 B12 [37, 42]: 42, t14 42 44,
    #   t15 r0 B12 [42, 47], r1 B13 [44, 49]: 49, t17 r0 B13 [49, 54]: 54, t19 58, t21 r0 B03 [58, 62]: 62.
    # Its longest path: 62 = Σ of the cell times it runs (the program's path row holds with equality).
    f, b = [[2.0, 2.0], [2.0, 2.0]], [[4.0, 4.0], [5.0, 5.0]]
    longest, counts = step_longest_path(f, b, 4)
    assert longest == pytest.approx(62.0)
    times = {"F": f, "B": b}
    assert sum(n * times[kind][chunk][stage] for (kind, chunk, stage), n in counts.items()) == pytest.approx(62.0)
    split = {(0, 0): (2, 0), (0, 1): (2, 0), (1, 0): (1, 1), (1, 1): (1, 1)}
    plan = _plan(_problem(8), split)
    assert plan.iteration_time == pytest.approx(62.0) and plan.timeline.makespan == pytest.approx(62.0)
    assert plan.critical_path_counts == counts


def test_which_runs_the_balancer_times_in_lock_step() -> None:
    # as timing.iteration.framework_rules prices them: torch_looped for torchtitan's interleaved schedule
    layers = runnable(layer_set([_body(8)]), op=False)
    assert BalanceInput(layers, 2, 4, 2, schedule="interleaved", framework="torchtitan").lock_step
    assert not BalanceInput(layers, 2, 4, 1, schedule="1f1b", framework="torchtitan").lock_step  # Schedule1F1B
    assert not BalanceInput(layers, 2, 4, 2, schedule="interleaved", framework="megatron").lock_step
    assert not BalanceInput(layers, 2, 4, 2, schedule="interleaved").lock_step


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(2, 2, 2), (2, 2, 4), (2, 3, 4), (3, 2, 3), (3, 2, 6), (4, 2, 4), (4, 2, 8), (4, 3, 6)]),
    seed=st.integers(0, 10**6),
)
def test_the_step_graph_is_the_lockstep_timeline_with_free_links(shape: tuple[int, int, int], seed: int) -> None:
    # `step_longest_path`, `step_makespans` and `step_counts_many` time the table as `lockstep_timeline` runs
    # it (written apart, step by step with the transfers); the op graph is never slower where the orders agree
    stages, chunks, m = shape
    rng = random.Random(seed)
    weightings = []
    for _ in range(3):
        f = [[rng.choice((0.5, 1.0, 1.5, rng.uniform(0.1, 3))) for _ in range(stages)] for _ in range(chunks)]
        b = [[t * rng.uniform(1.5, 3.5) for t in row] for row in f]
        weightings.append((f, b))
    free = [[0.0] * stages for _ in range(chunks)]
    batch = step_makespans([f for f, _ in weightings], [b for _, b in weightings], m)
    many = step_counts_many(weightings, m)
    for (f, b), value, counts in zip(weightings, batch, many, strict=True):
        timeline = lockstep_timeline(f, b, m, free)
        longest, path = step_longest_path(f, b, m)
        assert longest == timeline.makespan == value  # the same max and sums: equal, not only close
        assert path == counts
        times = {"F": f, "B": b}
        length = sum(n * times[kind][chunk][stage] for (kind, chunk, stage), n in path.items())
        assert length == pytest.approx(longest, rel=1e-12)
        if m % stages == 0:
            assert makespan("interleaved", f, b, m) <= longest * (1 + 1e-12)


def _wrapped(split: dict[tuple[int, int], int], stages: int, chunks: int, n: int) -> dict[tuple[int, int], int]:
    """FULL blocks per cell under torchtitan's settings (activation_checkpoint.py `_apply_layer_sac`, v0.2.2:
    one counter per rank over its chunks in order, a block FULL when the count is a multiple of n); n = 0
    none, n = 1 every block."""
    full = {}
    for s in range(stages):
        count = 0
        for v in range(chunks):
            full[(v, s)] = 0
            for _ in range(split[(v, s)]):
                count += 1
                full[(v, s)] += n > 0 and count % n == 0
    return full


def _exhaustive(layers: int, body: dict, memory: float, stages: int, chunks: int, m: int) -> float | None:
    """The fastest plan under torchtitan's settings that fits, found by listing every split of the blocks
    over the cells (each cell one at least) and every setting (none, every N-th, full), each timed by
    `lockstep_timeline` and its memory summed here: per stage the largest Σ_v (micro-batches of chunk v in
    flight) × (its cell's MB a micro-batch) over the schedule's in-flight vectors."""
    cells = [(v, s) for v in range(chunks) for s in range(stages)]
    vectors = in_flight_vectors("interleaved", stages, chunks, m)
    free = [[0.0] * stages for _ in range(chunks)]
    best = None
    for cut in itertools.combinations(range(1, layers), len(cells) - 1):
        parts = [b - a for a, b in zip((0, *cut), (*cut, layers), strict=True)]
        split = dict(zip(cells, parts, strict=True))
        for n in range(layers + 1):
            full = _wrapped(split, stages, chunks, n)
            none = {cell: split[cell] - full[cell] for cell in cells}
            held = [
                [
                    full[(v, s)] * body["memory_recompute"] + none[(v, s)] * body["memory_activation"]
                    for v in range(chunks)
                ]
                for s in range(stages)
            ]
            if any(
                sum(k * a for k, a in zip(vector, held[s], strict=True)) > memory
                for s in range(stages)
                for vector in vectors[s]
            ):
                continue
            f = [[split[(v, s)] * body["time"] for s in range(stages)] for v in range(chunks)]
            b = [
                [full[(v, s)] * body["recompute_time"] + none[(v, s)] * body["backward_time"] for s in range(stages)]
                for v in range(chunks)
            ]
            value = lockstep_timeline(f, b, m, free).makespan
            best = value if best is None else min(best, value)
    return best


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(2, 2, 2), (2, 2, 4), (3, 2, 3)]),
    layers=st.integers(6, 9),
    forward=st.sampled_from([1.0, 1.5, 2.0]),
    backward=st.sampled_from([1.5, 2.0, 2.5]),
    extra=st.sampled_from([0.5, 1.0, 2.0]),
    room=st.floats(0.0, 1.0),
)
# a case the program misses when its path rows come from the op graph instead of the lock step
@example(shape=(3, 2, 3), layers=8, forward=1.5, backward=2.5, extra=0.5, room=0.5)
def test_the_plan_is_the_fastest_in_lock_step_of_every_plan_torchtitan_runs(
    shape: tuple[int, int, int], layers: int, forward: float, backward: float, extra: float, room: float
) -> None:
    stages, chunks, m = shape
    # forward, backward under NONE and FULL drawn, 10 MB a block in flight under NONE and 1 under FULL; the
    # memory from where little fits to where NONE fits everywhere
    body = _body(layers, forward, backward, backward + extra, (10, 1))
    memory = 10.0 * layers * (0.3 + room)
    expected = _exhaustive(layers, body, memory, stages, chunks, m)
    problem = BalanceInput(
        runnable(layer_set([body]), op=False), stages, m, chunks, memory, schedule="interleaved", framework="torchtitan"
    )
    solution = solve(problem)
    if expected is None:
        assert solution.plan is None and solution.status == "infeasible"
        return
    assert solution.status == "optimal" and solution.plan is not None
    assert solution.objective == pytest.approx(expected, rel=1e-9)
    assert solution.plan.iteration_time == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("chunks", [2, 3])
def test_where_pp_divides_m_the_lock_step_only_adds_waits_to_the_op_graph(stages: int, chunks: int) -> None:
    # Why the op graph's makespan bounds the lock step's at every op time (`program._none_floor_reaches`),
    # for m = P, 2P, 3P: (1) each rank runs torch's table in the op graph's order on it (Megatron's
    # interleaved order, groups of P: `schedules`), a rank's step never starting before its previous step
    # ended; (2) each op's input (a forward's from the model stage before, a backward's from the one after,
    # the last stage's backward from its own forward) comes from an op at an earlier step, whose end the
    # consumer's rank waits for at that step. So the lock step's starts satisfy every precedence of the
    # op graph, whose longest path is the least makespan doing so.
    for m in (stages, 2 * stages, 3 * stages):
        unit = [[1.0] * stages for _ in range(chunks)]
        orders = simulate("interleaved", unit, unit, m).orders
        grid = looped_steps(stages, chunks, m)
        for rank in range(stages):
            assert [op for op in grid[rank] if op is not None] == list(orders[rank])
        step = {
            (op.kind, op.chunk, rank, op.micro_batch): t
            for rank, row in enumerate(grid)
            for t, op in enumerate(row)
            if op
        }
        assert len(step) == 2 * chunks * stages * m
        last = chunks * stages - 1
        for (kind, chunk, rank, i), t in step.items():
            index = chunk * stages + rank  # the stage along the model
            if kind == "F" and index > 0:
                before = index - 1
                assert step[("F", before // stages, before % stages, i)] < t
            elif kind == "B" and index < last:
                after = index + 1
                assert step[("B", after // stages, after % stages, i)] < t
            elif kind == "B":
                assert step[("F", chunk, rank, i)] < t
    # where pp does not divide m torch runs one round of m in its own order: not the op graph's
    unit = [[1.0] * stages for _ in range(chunks)]
    grid = looped_steps(stages, chunks, 3 * stages // 2)
    orders = simulate("interleaved", unit, unit, 3 * stages // 2).orders
    assert any([op for op in grid[rank] if op is not None] != list(orders[rank]) for rank in range(stages))


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(2, 2, 2), (2, 2, 4), (3, 2, 3), (2, 3, 2), (2, 2, 3), (3, 2, 4)]),
    layers=st.integers(6, 9),
    forward=st.sampled_from([1.0, 1.5, 2.0]),
    backward=st.sampled_from([1.5, 2.0, 2.5]),
    extra=st.sampled_from([0.0, 0.5, 2.0]),
)
# pp 2 ∤ m = 3: torch runs one round of 3, not Megatron's order, and the op graph can be the slower: here
# its none floor is 46 (the even split, f = 2 and b = 4 a cell) against the lock step's fastest plan, 42;
# solving the op graph's floor there too fails this example
@example(shape=(2, 2, 3), layers=8, forward=1.0, backward=2.0, extra=0.0)
def test_the_none_floor_never_exceeds_the_fastest_plan_in_lock_step(
    shape: tuple[int, int, int], layers: int, forward: float, backward: float, extra: float
) -> None:
    # `_none_floor` bounds every plan whose layers each take at least NONE's backward: under torch's lock
    # step it is first solved on the op graph (which bounds the lock step only where pp divides m: each
    # rank runs Megatron's order there, and every input an op waits for was exchanged at an earlier step),
    # then on the lock step. The truth: every split × every setting torchtitan runs, memory unbounded (the
    # least any memory gives), each timed by `lockstep_timeline` (`_exhaustive`).
    stages, chunks, m = shape
    body = _body(layers, forward, backward, backward + extra, (10, 1))
    fastest = _exhaustive(layers, body, math.inf, stages, chunks, m)
    assert fastest is not None
    problem = BalanceInput(
        runnable(layer_set([body]), op=False), stages, m, chunks, 1e6, schedule="interleaved", framework="torchtitan"
    )
    assert problem.lock_step
    clock = Clock()
    report = Reporter(None, clock)
    free = replace(problem, memory_mb=1e15)
    floor = _none_floor(free, True, WorkLimits(), clock, report)
    assert floor <= fastest * (1 + 1e-9)
    if m % stages == 0:
        graph = replace(free, op_graph=True)
        assert not graph.lock_step
        floor = max(floor, _none_floor(graph, True, WorkLimits(), clock, report))
        assert floor <= fastest * (1 + 1e-9)
    # as tight as the larger of the two: it reaches that
    assert _none_floor_reaches(problem, floor, {}, [], True, WorkLimits(), clock, report)
    # nothing proves every plan slower than a time one of them runs in, whichever floor is solved
    floors: dict[bool, float] = {}
    assert not _none_floor_reaches(problem, fastest * (1 + 1e-9), floors, [], True, WorkLimits(), clock, report)
    assert all(floor <= fastest * (1 + 1e-9) for floor in floors.values())


@settings(max_examples=24, deadline=None)
@given(
    shape=st.sampled_from([(2, 2, 4), (2, 4, 4), (3, 2, 3)]),
    layers=st.integers(8, 12),  # a block a cell at least
    memory=st.floats(20.0, 400.0),
    work=st.floats(6.0, 40.0),
)
def test_a_listing_the_memory_refused_nothing_of_is_the_listing_with_memory_unbounded(
    shape: tuple[int, int, int], layers: int, memory: float, work: float
) -> None:
    # `Catalogue.memory_refused` (what lets the none setting's own proof stand for `_none_floor`): while it is
    # false, the stage choices listed at a work limit are the ones listed with memory unbounded; once a choice
    # the work limit kept did not fit, the unbounded listing has more
    stages, chunks, m = shape
    layers_set = runnable(layer_set([_body(layers)]), op=False)
    problem = BalanceInput(layers_set, stages, m, chunks, memory, schedule="interleaved", framework="torchtitan")
    free = replace(problem, memory_mb=1e15)
    held, unbounded = Catalogue(problem, Setting("none")), Catalogue(free, Setting("none"))
    listed = [held.stage_choices(s, work, layers) for s in range(stages)]
    everything = [unbounded.stage_choices(s, work, layers) for s in range(stages)]
    assert not unbounded.memory_refused
    assert (listed == everything) is not held.memory_refused


def test_the_none_settings_proof_is_the_none_floor_where_the_memory_refused_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # P = 2, V = 2, m = 4, 8 blocks (forward 1, backward 2 under NONE, 3 under FULL): the even split all NONE
    # takes 56 in lock step (test_even_cells_by_hand_and_against_the_op_graph). With 10 MB a block in flight and
    # 1,000,000 MB, the memory refuses no stage choice, so the none setting's proof, 56, is `_none_floor`'s on the
    # lock step: the every N-th settings are passed by it without solving the same program again with memory
    # unbounded (Llama-3.1-8B PP 2 × 4 chunks, no memory limit: 40 → 22 CPU s, the same plan)
    def unsolved(*args: object, **kwargs: object) -> float:
        raise AssertionError("the none floor was solved again")

    monkeypatch.setattr(program, "_none_floor", unsolved)
    solution = solve(_problem(8, memory=1e6))
    assert solution.status == "optimal" and solution.objective == pytest.approx(56.0)
    assert any("none faster than 56 (`_none_floor`)" in note for note in solution.notes)
    # where the memory refuses a choice the none setting's proof stands for that memory alone: at 64 MB an even
    # NONE stage (2 blocks a cell, 10 MB each a micro-batch, up to 4 micro-batches in flight) does not fit
    catalogue = Catalogue(_problem(8, memory=64.0), Setting("none"))
    assert all(catalogue.stage_choices(s, 40.0, 8) for s in range(2)) and catalogue.memory_refused
