"""Options of nearly equal memory (SLCT 1 MB below NONE per micro-batch, as `--recompute-modules
core_attn` with flash attention frees almost nothing) once made the stage listing run out of work
on a model that cannot fit: each cell of k layers has k + 1 option mixes, none dominated, and the
partial stages multiplied chunk by chunk until the work budget ended the listing, where the last
chunk would have refused every one of them (Qwen3 30B-A3B, PP2 VP24 EP8 with the combined 1F1B).
The listing now drops a partial stage that the later chunks' least memory already breaks.

Checked against searches that share no code with the listing: every split of the layers
(memory), and `test_balance_optimality.exhaustive` (memory and time) on small instances.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_balance_optimality import _assert_solves_as_exhaustive_search, _compositions

from ppb_core.balance import BalanceInput, program, solve
from ppb_core.balance.choices import Catalogue, ListingBudget
from ppb_core.balance.megatron import Setting
from ppb_core.balance.progress import Clock, Reporter, WorkLimits
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import canonical, cell_order, in_flight_vectors

PARAMETER_MB, NONE_MB, SLCT_MB = 1435, 899, 898  # the Qwen3 30B-A3B layer's figures (session 24)


def _near_body(layers: int) -> dict:
    """A body whose SLCT saves 1 MB per micro-batch for 5 % more backward; COMM, BOTH and FULL as
    heavy as NONE and slower, so never chosen."""
    return {
        "name": "BODY",
        "type": "BODY",
        "nb_layer": layers,
        "time": 10,
        "memory_parameter": PARAMETER_MB,
        "memory_activation": NONE_MB,
        "memory_select_rec": SLCT_MB,
        "memory_select_comm": NONE_MB,
        "memory_both_comm_select": NONE_MB,
        "memory_recompute": NONE_MB,
        "backward_time": 20,
        "select_rec_time": 21,
        "select_comm_time": 40,
        "both_comm_select_time": 40,
        "recompute_time": 40,
    }


def _least_memory_by_splits(layers: int, stages: int, chunks: int, micro_batches: int) -> float:
    """The least peak any plan needs, over every split of the layers over the cells (one layer at
    least in each): options add no parameters, so every layer under its leanest option (SLCT), and
    a stage holds its layers' parameters plus, at each in-flight vector of the schedule, each
    chunk's layers' activations times that chunk's micro-batches in flight."""
    schedule = canonical("1f1b", chunks)
    cells = cell_order(schedule, stages, chunks)
    vectors = in_flight_vectors(schedule, stages, chunks, micro_batches)
    best = math.inf
    for split in _compositions(layers, len(cells), [1] * len(cells)):
        held = dict(zip(cells, split, strict=True))
        peak = 0.0
        for s in range(stages):
            parameters = PARAMETER_MB * sum(held[(v, s)] for v in range(chunks))
            for vector in vectors[s]:
                activations = SLCT_MB * sum(n * held[(v, s)] for v, n in enumerate(vector))
                peak = max(peak, parameters + activations)
        best = min(best, peak)
    return best


def test_a_model_that_cannot_fit_with_near_equal_options_is_proven_so() -> None:
    """26 layers over P=2, V=12 (m=16): the least-memory plan needs what every split says; a
    listing budget 100 times smaller than the default's proves it (it ran out before)."""
    layers, stages, chunks, micro_batches = 26, 2, 12, 16
    least = _least_memory_by_splits(layers, stages, chunks, micro_batches)
    limits = WorkLimits(listing_work=3_000_000)
    problem = BalanceInput(layer_set([_near_body(layers)]), stages, micro_batches, chunks, 40_000.0)
    solution = solve(problem, limits=limits)
    assert solution.status == "infeasible" and solution.stopped_by == "infeasible"
    assert solution.min_memory_mb == pytest.approx(least)
    # and that much memory is enough (with the default limits): the floor is a plan's, not only a bound
    enough = BalanceInput(layer_set([_near_body(layers)]), stages, micro_batches, chunks, least)
    assert solve(enough).status == "optimal"


@st.composite
def near_instances(draw):
    """Small pipelines (P ≤ 2, V ≤ 3) of one body type whose SLCT is 1 MB below NONE, memory from
    below the least plan's to above the even split's under NONE."""
    stages = draw(st.integers(1, 2))
    chunks = draw(st.integers(1, 3)) if stages > 1 else 1
    cells = stages * chunks
    micro_batches = stages * draw(st.integers(1, 2)) if chunks > 1 else draw(st.integers(1, 2 * stages))
    layers = draw(st.integers(cells, cells + 2))
    activation = draw(st.integers(2, 40))
    parameter = draw(st.integers(1, 30))
    forward = draw(st.integers(1, 10))
    body = {
        "name": "BODY",
        "type": "BODY",
        "nb_layer": layers,
        "time": forward,
        "memory_parameter": parameter,
        "memory_activation": activation,
        "memory_select_rec": activation - 1,
        "memory_select_comm": activation,
        "memory_both_comm_select": activation,
        "memory_recompute": activation,
        "backward_time": 2 * forward,
        "select_rec_time": 2 * forward + draw(st.integers(0, 3)),
        "select_comm_time": 2 * forward + 5,
        "both_comm_select_time": 2 * forward + 5,
        "recompute_time": 2 * forward + 5,
    }
    ceiling = (layers // cells + 2) * (parameter + micro_batches * chunks * activation)
    memory = draw(st.integers(ceiling // 4, ceiling))
    return [body], stages, chunks, micro_batches, float(memory)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=near_instances())
def test_near_equal_options_solve_as_the_exhaustive_search(instance) -> None:
    _assert_solves_as_exhaustive_search(instance)


def test_a_cut_listing_with_no_even_split_that_fits_still_finds_the_optimum() -> None:
    """No even split fits, so no plan was known when the listing ran out of work, and the answer was
    "no plan found": the program over cell choices now searches from nothing and proves the optimum
    the full listing proves (26 layers, P=2, V=12, at the least-memory plan's own memory)."""
    layers, stages, chunks, micro_batches = 26, 2, 12, 16
    least = _least_memory_by_splits(layers, stages, chunks, micro_batches)
    problem = BalanceInput(layer_set([_near_body(layers)]), stages, micro_batches, chunks, least)
    cut = solve(problem, limits=WorkLimits(listing_work=3_000_000))
    assert "stage listing stopped by the work limit" in cut.notes
    assert cut.status == "optimal" and cut.plan is not None and cut.plan.fits
    assert cut.objective == pytest.approx(solve(problem).objective, rel=1e-9)


def test_a_settings_cut_listing_with_no_plan_known_is_left_at_that() -> None:
    """Under one setting (Megatron-Core's none here: every layer NONE, 1 MB a micro-batch above SLCT, at the
    least-memory plan's own memory, where nothing fits under it) with the stage listing cut at once, the
    setting's solve says "no plan found" as before: neither the least-memory program nor the program over
    cell choices runs for a setting (torchtitan's every N-th block settings meet this at every balance, and
    searching each cost a search's balance up to 3.7 times its CPU)."""
    layers, stages, chunks, micro_batches = 26, 2, 12, 16
    least = _least_memory_by_splits(layers, stages, chunks, micro_batches)
    problem = BalanceInput(layer_set([_near_body(layers)]), stages, micro_batches, chunks, least, framework="megatron")
    phases: list[str] = []
    clock = Clock()
    none = Setting("none")
    catalogue = Catalogue(problem, none, ListingBudget(1, clock))
    found = program._solve(
        problem, catalogue, True, WorkLimits(), clock, Reporter(lambda p: phases.append(p.phase), clock), True, none
    )
    assert found.notes == ["stage listing stopped by the work limit"]
    assert found.plan is None and found.status == "time_limit" and found.stopped_by == "work_limit"
    assert found.message.startswith("no plan found in") and "least_memory" not in phases


def test_a_cut_listing_with_no_plan_known_and_no_cell_program_proves_none_fits() -> None:
    """The stage listing cut at once, and the program over cell choices not built (past its cap): the
    least-memory program still proves that no plan fits, with what every split of the layers says the
    least plan needs (it said "no plan found")."""
    layers, stages, chunks, micro_batches = 26, 2, 12, 16
    least = _least_memory_by_splits(layers, stages, chunks, micro_batches)
    problem = BalanceInput(layer_set([_near_body(layers)]), stages, micro_batches, chunks, 40_000.0)
    solution = solve(problem, limits=WorkLimits(listing_work=1, cell_choices=1))
    assert "stage listing stopped by the work limit" in solution.notes
    assert solution.status == "infeasible" and solution.min_memory_mb == pytest.approx(least)


def test_a_cut_listing_with_no_plan_known_starts_from_the_least_memory_plan() -> None:
    """As above at the least plan's own memory: that plan fits, so the answer is a plan (it was "no plan
    found"), no faster than the optimum the full listing proves."""
    layers, stages, chunks, micro_batches = 26, 2, 12, 16
    least = _least_memory_by_splits(layers, stages, chunks, micro_batches)
    problem = BalanceInput(layer_set([_near_body(layers)]), stages, micro_batches, chunks, least)
    solution = solve(problem, limits=WorkLimits(listing_work=1, cell_choices=1))
    assert "stage listing stopped by the work limit" in solution.notes
    assert solution.plan is not None and solution.plan.fits and not solution.plan.problems()
    assert solution.plan.peak_memory_mb <= least
    assert solution.objective >= solve(problem).objective * (1 - 1e-9)
