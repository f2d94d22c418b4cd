"""The balancer end to end: SAPP's examples, exactness against the simulator, infeasible inputs."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from ppb_core.balance import BalanceInput, balance, solve
from ppb_core.balance.baselines import uniform_layer_counts, uniform_plan
from ppb_core.balance.bounds import least_max_work
from ppb_core.balance.choices import Catalogue
from ppb_core.balance.outputs import plan_from_yaml, to_yaml
from ppb_core.balance.program import choices_within
from ppb_core.balance.progress import Clock
from ppb_core.errors import InputError
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set, read_layer_set
from ppb_core.schedules import in_flight_vectors, simulate

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def llama() -> object:
    return read_layer_set(DATA / "llama2_70b.json")


@pytest.fixture(scope="session")
def llama_v1(llama):
    """SAPP's example llama2_70b.json (sapp_ppb/layers) at P=16, m=32, 56000 MB, without interleave."""
    return solve(BalanceInput(llama, 16, 32, 1, 56000.0), time_limit=120)


def _independent_stage_memory(problem: BalanceInput, plan, stage: int) -> Fraction:
    """Parameters once per layer, activations once per micro-batch in flight, at every vector the
    schedule reaches, head on the first stage, tail on the last; no code shared with Plan."""
    bodies = problem.layers.bodies
    peak = Fraction(0)
    vectors = in_flight_vectors(problem.schedule_name, problem.stages, problem.chunks, problem.micro_batches)
    for vector in vectors[stage]:
        total = Fraction(0)
        for l, body in enumerate(bodies):
            for v in range(problem.chunks):
                for k, n in enumerate(plan.counts[l][v][stage]):
                    activation = Fraction(body.memory_mb.get(OPTIONS[k], 0))
                    total += n * (Fraction(body.memory_parameter_mb) + vector[v] * activation)
        if stage == 0:
            total += sum(Fraction(h.memory_parameter_mb) for h in problem.layers.heads)
        if stage == problem.stages - 1:
            total += sum(Fraction(t.memory_parameter_mb) for t in problem.layers.tails)
        peak = max(peak, total)
    return peak


def test_llama_without_interleave_is_optimal_and_fits(llama_v1) -> None:
    solution = llama_v1
    plan = solution.plan
    assert solution.status == "optimal" and solution.gap == 0
    assert not plan.problems()
    # the objective is the plan's critical path, run here again from its cell times
    assert solution.objective == simulate("1f1b", plan.cell_forward, plan.cell_backward, 32).makespan
    for stage in range(16):
        exact = _independent_stage_memory(solution.problem, plan, stage)
        assert exact <= 56000
        assert plan.stage_memory_mb[stage] == float(exact)
        # the memory as the schedule runs, op by op, peaks at the same figure
        assert max(mb for _, mb in plan.memory_over_time(stage)) == pytest.approx(float(exact))


def test_llama_beats_every_uniform_split(llama_v1) -> None:
    solution = llama_v1
    # Only FULL fits evenly: stage 0 with NONE holds 9236 (head) + 6·1710 + 16·6·994 = 114920 MB.
    none = uniform_plan(solution.problem, "NONE")
    assert none.stage_memory_mb[0] == 114920 and not none.fits
    full = uniform_plan(solution.problem, "FULL")
    assert full.fits
    assert solution.objective < full.iteration_time


def test_plan_yaml_round_trips(llama_v1) -> None:
    plan = llama_v1.plan
    assert plan_from_yaml(plan.problem, to_yaml(plan)).counts == plan.counts


def test_reference_interleaved_example(llama) -> None:
    # SAPP's README example: P=16, m=32, V=2, 56000 MB. SAPP printed offset [[0×14, 1, 1], [0×15, −2]] and
    # recompute [[3, 1, 1, 1, 1, 0×11], [0×16]] (select_recompute not printed).
    problem = BalanceInput(llama, 16, 32, 2, 56000.0)
    solution = solve(problem, time_limit=60, exact=False)
    assert solution.status == "optimal" and solution.objective_kind == "closed_form"
    assert solution.plan.fits and not solution.plan.problems()
    reference = plan_from_yaml(
        problem, {"offset": [[0] * 14 + [1, 1], [0] * 15 + [-2]], "recompute": [[3, 1, 1, 1, 1] + [0] * 11, [0] * 16]}
    )
    # With only its full recomputes (the other layers NONE) SAPP's split does not fit: stage 1
    # holds 3 layers of chunk 0 (one FULL) and 3 of chunk 1, and Megatron-LM's order reaches (29, 16)
    # micro-batches in flight there: 6·1710 + 29·(2·994 + 32) + 16·3·994 = 10260 + 58580 + 47712
    # = 116552 MB.
    assert reference.stage_memory_mb[1] == 116552
    assert not reference.fits
    # Whatever options SAPP gave its other layers, the program's optimum is no worse on
    # the objective it minimises, since the program saw every plan that fits.
    assert solution.objective <= reference.closed_form_time


def test_infeasible_says_how_much_memory_the_least_plan_needs() -> None:
    # 4 layers on P=2, m=2 (1F1B: stage 0 holds 2 micro-batches, stage 1 holds 1). All FULL is the
    # leanest: a layers on stage 0 need 10a + 2·2a = 14a MB, the rest (4 − a)·(10 + 2) = 12(4 − a):
    # a = 1: 36, a = 2: max(28, 24) = 28, a = 3: 42. So 28 MB, and 27 MB fits nothing.
    descriptions = [
        {
            "name": "BODY_0",
            "type": "BODY",
            "nb_layer": 4,
            "time": 1,
            "memory_parameter": 10,
            "memory_activation": 8,
            "memory_recompute": 2,
        }
    ]
    solution = solve(BalanceInput(layer_set(descriptions), 2, 2, 1, 27.0), time_limit=30)
    assert solution.status == "infeasible"
    assert solution.min_memory_mb == 28
    assert "needs 28 MB" in solution.message
    fits = solve(BalanceInput(layer_set(descriptions), 2, 2, 1, 28.0), time_limit=30)
    assert fits.status == "optimal" and fits.plan.peak_memory_mb == 28


def test_even_split_counts() -> None:
    # 10 layers over P=2, V=2 with a head and a tail: 10 // 4 = 2 each, and the 2 left over go to the
    # cells holding neither, first in model order: (0, 1) and (1, 0).
    descriptions = [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1},
        {"name": "BODY_0", "type": "BODY", "nb_layer": 10, "time": 1, "memory_activation": 1},
        {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1},
    ]
    problem = BalanceInput(layer_set(descriptions), 2, 4, 2, 1e6)
    assert uniform_layer_counts(problem) == {(0, 0): 2, (0, 1): 3, (1, 0): 3, (1, 1): 2}


def test_too_few_layers_is_bad_input() -> None:
    descriptions = [{"name": "BODY_0", "type": "BODY", "nb_layer": 3, "time": 1, "memory_activation": 1}]
    with pytest.raises(InputError, match="cannot fill"):
        BalanceInput(layer_set(descriptions), 4, 4, 1, 1e6)


def test_interleave_search_reports_each_chunk_count() -> None:
    descriptions = [
        {
            "name": "BODY_0",
            "type": "BODY",
            "nb_layer": 6,
            "time": 1,
            "memory_parameter": 1,
            "memory_activation": 1,
            "memory_recompute": 1,
        }
    ]
    result = balance(BalanceInput(layer_set(descriptions), 2, 4, 1, 1e6), time_limit=60, search_interleave=True)
    searched = {entry["interleave"]: entry for entry in result["interleave_search"]}
    # 6 layers fill 2·V cells for V ≤ 3; V = 4 needs 8.
    assert [searched[v]["status"] for v in (1, 2, 3)] == ["optimal"] * 3
    assert searched[4]["status"] == "skipped"
    best = min((searched[v]["objective"], v) for v in (1, 2, 3))
    assert result["objective"] == best[0] and result["input"]["interleave"] == best[1]


def test_the_busiest_stage_bound_is_the_least_busiest_stage_that_fits() -> None:
    # 6 layers, F = 1, B = 2 (NONE only), P = 2, m = 2: stage 0 holds 2 micro-batches, stage 1 one.
    # 45 MB and 10 MB per layer per micro-batch: stage 0 takes at most 2 layers (2·10·2 = 40), stage 1
    # at most 4 (40). So the split is (2, 4) and the busiest stage works 4·3 = 12 (an even split, 9,
    # does not fit). Closed form: Σ_s S_s + (m − 1)·max_s S_s = (6 + 12) + 12 = 30.
    descriptions = [
        {
            "name": "BODY_0",
            "type": "BODY",
            "nb_layer": 6,
            "time": 1,
            "backward_time": 2,
            "memory_parameter": 0,
            "memory_activation": 10,
        }
    ]
    problem = BalanceInput(layer_set(descriptions), 2, 2, 1, 45.0)
    choices = choices_within(problem, Catalogue(problem), float("inf"), closed_form=True)
    assert least_max_work(problem, choices, 1.0, float("inf"), 100_000, Clock(30)) == 12
    solution = solve(problem, time_limit=30, exact=False)
    assert solution.status == "optimal" and solution.objective == 30
    assert [solution.plan.cell_layers(0, s) for s in (0, 1)] == [2, 4]
