"""The bounds are below the time model's iteration: the schedule forms against the simulated schedule, and
the search's bounds against `run_iteration` on strategies and plans drawn at random."""

from __future__ import annotations

import functools
import random
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ppb_core.model.switches import OPTIONS
from ppb_core.schedules import check, simulate
from ppb_core.search.bound import Ends, Kind, _form_terms, _forms_terms, lp_bound, schedule_forms, stage_bound
from ppb_core.search.enumerate import Refusal, Strategy, enumerate_strategies, validate
from ppb_core.search.screen import (
    FigureCache,
    after_schedule_ms,
    blocking,
    run_forms,
    schedule_floor_ms,
    screen,
)
from ppb_core.search.spec import load_search_spec, parse_search_spec
from ppb_core.timing.iteration import run_iteration

DATA = Path(__file__).parent / "data" / "search"


def test_one_f_one_b_forms_by_hand() -> None:
    # P = 2, m = 2, stage 1 last: ops F0 B0 F1 B1. A_1 (its first backward B0): micro-batch 0 forward
    # through both cells, its backward at cell 1, then F1 and B1 of stage 1, then B1 back through
    # cell 0: F_0 + F_1 + B_1 + (F_1 + B_1) + B_0.
    forms = schedule_forms("1f1b", 2, 1, 2)
    a_last = forms.family("A")[1]
    assert a_last.forward == (1.0, 2.0)
    assert a_last.backward == (1.0, 2.0)
    # B_0 (stage 0 from its first forward): nothing before it, all its 2·(F_0 + B_0), nothing after.
    assert forms.family("B")[0].forward == (2.0, 0.0)
    assert forms.family("B")[0].backward == (2.0, 0.0)
    # even cells f = 1, b = 2: the makespan (m + P − 1)(f + b) = 9, which A_1 gives exactly
    assert forms.value([[1.0, 1.0]], [[2.0, 2.0]]) == 9.0 == simulate("1f1b", [[1.0, 1.0]], [[2.0, 2.0]], 2).makespan


@st.composite
def schedules_and_cells(draw):
    schedule = draw(st.sampled_from(["1f1b", "interleaved", "gpipe", "dualpipev"]))
    stages = draw(st.integers(1 if schedule == "1f1b" else 2, 6))
    chunks = {"1f1b": 1, "gpipe": 1, "dualpipev": 2}.get(schedule) or draw(st.integers(2, 3))
    micro_batches = draw(st.integers(1, 12))
    try:
        check(schedule, stages, chunks, micro_batches)
    except ValueError:
        micro_batches = 2 * stages * chunks
    times = st.floats(0.0, 5.0, allow_nan=False)
    forward = [[draw(times) for _ in range(stages)] for _ in range(chunks)]
    backward = [[draw(times) for _ in range(stages)] for _ in range(chunks)]
    transfer = draw(st.floats(0.0, 1.0, allow_nan=False))
    return schedule, stages, chunks, micro_batches, forward, backward, transfer, draw(st.booleans())


@given(schedules_and_cells())
@settings(max_examples=300, deadline=None)
def test_the_forms_never_exceed_the_simulated_schedule(case) -> None:
    schedule, stages, chunks, micro_batches, forward, backward, transfer, blocks = case
    forms = schedule_forms(schedule, stages, chunks, micro_batches)
    transfers = [[transfer] * stages for _ in range(chunks)]
    makespan = simulate(schedule, forward, backward, micro_batches, transfers, blocks).makespan
    assert forms.value(forward, backward, transfer, blocks) <= makespan * (1 + 1e-9) + 1e-12


@functools.cache
def _strategies(name: str) -> tuple:
    spec = load_search_spec(DATA / f"{name}.yaml")
    runs = []
    for point in enumerate_strategies(spec):
        if isinstance(point, Strategy):
            run = validate(spec, point)
            if not isinstance(run, Refusal):
                runs.append((point, run))
    return spec, runs


def _random_plan(strategy: Strategy, layers: int, rng: random.Random) -> list[list[dict[str, int]]]:
    """Whole layers over the cells (each cell but the head's and the tail's non-empty), random options (not FULL
    under the combined 1F1B, which Megatron-Core refuses with it: transformer_config.py `__post_init__`)."""
    options = [option for option in OPTIONS if not (strategy.ep_overlap and option == "FULL")]
    forms = run_forms(strategy)
    cells = forms.cells
    counts = {cell: (0 if i in (0, len(cells) - 1) and len(cells) > 1 else 1) for i, cell in enumerate(cells)}
    for _ in range(layers - sum(counts.values())):
        counts[rng.choice(cells)] += 1
    plan = [[{} for _ in range(strategy.pp)] for _ in range(strategy.vpp)]
    for (chunk, stage), count in counts.items():
        for _ in range(count):
            option = rng.choice(options)
            plan[chunk][stage][option] = plan[chunk][stage].get(option, 0) + 1
    return plan


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-moe", "tiny-titan", "tiny-moe-overlap"])
@given(data=st.data())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_bounds_never_exceed_run_iteration_on_any_plan(name: str, data) -> None:
    _, runs = _strategies(name)
    strategy, run = data.draw(st.sampled_from(runs))
    rng = random.Random(data.draw(st.integers(0, 2**31)))
    plan = _random_plan(strategy, run.total_body_layers, rng)
    seconds = run_iteration(run, plan).seconds
    cache = FigureCache()
    # a random plan need not fit the device: the screen's bound is taken without memory (times alone)
    timing = cache.timing(strategy, run)
    quick = schedule_floor_ms(strategy, run, timing) + after_schedule_ms(strategy, timing)
    assert (quick + (timing.reduction_floor_ms or 0.0)) / 1e3 <= seconds * (1 + 1e-9)
    found = cache.of(strategy, run)
    # a random plan need not fit the device: the programs are asked without the memory rows' limit
    for whole in (False, True):
        relaxed = lp_bound(
            run_forms(strategy),
            found.kinds,
            found.ends,
            1e12,
            found.constant_mb,
            found.transfer_ms,
            blocking(run),
            whole,
            reduction_floor_ms=found.reduction_floor_ms,
        )
        assert (relaxed.value_ms + after_schedule_ms(strategy, found)) / 1e3 <= seconds * (1 + 1e-9)


def test_the_stage_bound_by_hand() -> None:
    # 1F1B, P = 2, m = 2, three layers of f = 1, b = 2, no head or tail time. Stage 0's own-work form is
    # 2·(F_0 + B_0) and stage 1's F_0 + B_0 + 2·(F_1 + B_1), so a layer costs 2·1 + 2·2 = 6 on either
    # stage, and the chains pass only the head's cell (which may be empty): no constant. Three whole
    # layers over two stages put two on one: T ≥ 12.
    forms = schedule_forms("1f1b", 2, 1, 2)
    layer = Kind("llm:dense", 3, {"NONE": 1.0}, {"NONE": 2.0}, 1.0, {"NONE": 1.0})
    ends = Ends(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert stage_bound(forms, [layer], ends) == 12.0
    # every split of the three layers, simulated: the best is 2 + 1 layers and no better than the bound
    best = min(simulate("1f1b", [[1.0 * n, 1.0 * (3 - n)]], [[2.0 * n, 2.0 * (3 - n)]], 2).makespan for n in range(4))
    assert best >= 12.0
    # with room for one layer per stage (10 MB, 6 MB a layer) no plan fits; room for two on stage 0 gives 12
    assert stage_bound(forms, [layer], ends, room_mb=[10.0, 10.0], layer_mb=[[6.0], [6.0]]) == float("inf")
    assert stage_bound(forms, [layer], ends, room_mb=[12.0, 10.0], layer_mb=[[6.0], [6.0]]) == 12.0


@pytest.mark.parametrize(
    ("schedule", "stages", "chunks", "micro_batches", "group"),
    [
        ("1f1b", 4, 1, 8, None),
        ("interleaved", 2, 2, 5, 3),
        ("interleaved", 4, 2, 8, None),
        ("dualpipev", 2, 2, 4, None),
    ],
)
def test_the_forms_rows_built_once_are_the_rows_built_each_time(schedule, stages, chunks, micro_batches, group) -> None:
    """`bound._forms_terms` (the relaxed program's form rows, built once per shape and column layout) gives
    each form's row as `_form_terms` writes it for that layout: the same terms in the same order, a copy each
    time (`lp_bound` keeps its own)."""
    forms = schedule_forms(schedule, stages, chunks, micro_batches, group)
    count = len(forms.cells)
    for first in (0, 7, 3 * count):
        forward = list(range(first, first + count))
        backward = list(range(first + count, first + 2 * count))
        forward_prefix = list(range(first + 2 * count, first + 3 * count + 1))
        backward_prefix = list(range(first + 3 * count + 1, first + 4 * count + 2))
        top = first + 4 * count + 2
        direct = [_form_terms(f, forward, backward, forward_prefix, backward_prefix, top) for f in forms.forms]
        once = _forms_terms(forms, first)
        assert [list(t.items()) for t in once] == [list(t.items()) for t in direct]
        assert _forms_terms(forms, first) is once


@st.composite
def combined_cases(draw):
    """Megatron-Core's combined 1F1B runs without pipelining or interleaved (`schedules.combined_steps`)."""
    interleaved = draw(st.booleans())
    stages = draw(st.integers(2, 5)) if interleaved else 1
    chunks = draw(st.integers(2, 3)) if interleaved else 1
    micro_batches = draw(st.integers(1, 12))
    schedule = "interleaved" if interleaved else "1f1b"
    try:
        check(schedule, stages, chunks, micro_batches)
    except ValueError:
        micro_batches = 2 * stages
    times = st.floats(0.0, 5.0, allow_nan=False)
    shares = st.floats(0.0, 1.0, allow_nan=False)
    forward = [[draw(times) for _ in range(stages)] for _ in range(chunks)]
    backward = [[draw(times) for _ in range(stages)] for _ in range(chunks)]
    # each cell's slack: what its all-to-alls may save of its forward and of its backward, up to beyond their
    # times (the slack is the uncalibrated segments', the cells' times calibrated)
    over = st.floats(0.0, 1.5, allow_nan=False)
    slack_f = [[f * draw(over) for f in row] for row in forward]
    slack_b = [[b * draw(over) for b in row] for row in backward]
    # a step saves at most its forward cell's slack and its backward cell's (`combined.step_saving`)
    saved = [
        [[draw(shares) * (slack_f[f][s] + slack_b[b][s]) for s in range(stages)] for b in range(chunks)]
        for f in range(chunks)
    ]
    transfer = draw(st.floats(0.0, 1.0, allow_nan=False))
    return (
        schedule,
        stages,
        chunks,
        micro_batches,
        forward,
        backward,
        slack_f,
        slack_b,
        saved,
        transfer,
        draw(st.booleans()),
    )


@given(combined_cases())
@settings(max_examples=300, deadline=None)
def test_the_combined_forms_never_exceed_the_simulated_combined_schedule(case) -> None:
    # The combined 1F1B shortens each steady backward by its step's saving (`schedules.simulate`), at most its
    # forward cell's forward slack and its backward cell's backward slack: the forms of its orders, each backward
    # run in a step less both slacks and the warm-up forwards and cool-down backwards at their whole times, stay
    # below the simulated makespan, whatever the savings within the slack
    schedule, stages, chunks, micro_batches, forward, backward, slack_f, slack_b, saved, transfer, blocks = case
    forms = schedule_forms(schedule, stages, chunks, micro_batches, combined=True)
    assert forms.family("B")
    transfers = [[transfer] * stages for _ in range(chunks)]
    makespan = simulate(schedule, forward, backward, micro_batches, transfers, blocks, combined=saved).makespan
    found = forms.value(forward, backward, transfer, blocks, slack_f, slack_b)
    assert found <= makespan * (1 + 1e-9) + 1e-12


@st.composite
def unpipelined_combined_cases(draw):
    """The combined 1F1B without pipelining, each step saving at most its backward (drawn so, not filtered: a
    filter on `combined_cases` keeps too few for Hypothesis's health check)."""
    micro_batches = draw(st.integers(1, 12))
    forward = draw(st.floats(0.0, 5.0, allow_nan=False))
    backward = draw(st.floats(0.0, 5.0, allow_nan=False))
    slack_b = backward * draw(st.floats(0.0, 1.0, allow_nan=False))
    slack_f = draw(st.floats(0.0, min(1.5 * forward, backward - slack_b), allow_nan=False))
    return ("1f1b", 1, 1, micro_batches, [[forward]], [[backward]], [[slack_f]], [[slack_b]], None, 0.0, True)


@given(unpipelined_combined_cases())
@settings(max_examples=100, deadline=None)
def test_the_combined_forms_count_the_steps_run_alone(case) -> None:
    # With every step saving all its slack, the bound is tight where the schedule is: without pipelining (one cell)
    # the B form counts each op once, a step's forward and backward at their times less the two slacks, the first
    # forward and the last backward whole, and nothing runs beside them, so it is the makespan exactly (it was
    # m·(F + B − slacks) until the forms counted the ops run alone: below it by one step's slack). A step saving
    # more than its backward would end before it starts, which no schedule runs: left out.
    schedule, stages, chunks, micro_batches, forward, backward, slack_f, slack_b, _, _, _ = case
    full = [[[slack_f[f][0] + slack_b[b][0]] for b in range(chunks)] for f in range(chunks)]
    makespan = simulate(schedule, forward, backward, micro_batches, combined=full).makespan
    forms = schedule_forms(schedule, stages, chunks, micro_batches, combined=True)
    assert forms.value(forward, backward, 0.0, True, slack_f, slack_b) == pytest.approx(makespan, rel=1e-12, abs=1e-12)


def test_a_step_saves_nothing_the_hosts_launches_hold_up_and_the_bound_says_so() -> None:
    # tiny-moe's layers take less than the host's time to launch their kernels, so a combined step saves nothing
    # (iteration._combined_savings: at most the paired layers' times beyond their launches) and the combined 1F1B
    # runs as long as 1F1B does without pipelining: the combined strategy's bound is its plain twin's, both forms
    # being its stage's own work (m·(F + B)), not the all-to-alls' slack below it (0.029 s against 0.045 s until
    # the launches bounded the slack)
    raw = yaml.safe_load((DATA / "tiny-moe.yaml").read_text())
    raw["limits"]["ep_overlap"] = [False, True]
    spec = parse_search_spec(raw, DATA / "tiny-moe.yaml", DATA)
    plain = next(
        point
        for point in enumerate_strategies(spec)
        if isinstance(point, Strategy) and point.pp == 1 and point.ep == 4 and not point.fsdp
    )
    combined = replace(plain, ep_overlap=True)
    found = {point: validate(spec, point) for point in (plain, combined)}
    # equal to rounding: the saving is a difference of the paired layers' times and their launches, 0 up to
    # a few ulps (-3.5e-18 s once the all-to-all's share by group size entered both)
    assert run_iteration(found[combined]).seconds == pytest.approx(run_iteration(found[plain]).seconds, rel=1e-12)
    cache = FigureCache()
    bounds = [screen(point, found[point], cache).bound_s for point in (plain, combined)]
    assert bounds[1] == pytest.approx(bounds[0], rel=1e-12)
