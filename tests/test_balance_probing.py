"""Probing (`balance.probing`) against an exhaustive search over every plan, on random small instances.

The search is `test_balance_optimality.exhaustive`, written from the rules alone. Probing claims
"no plan is faster than the value given" only when that is so: given a value above the optimum by
more than its margin it must not prove anything, and every bound it reports is at most the
optimum. Its separation is exact: with every stage held to one choice, the relaxation settles at
the plan's iteration time as the schedule simulator runs it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from test_balance_optimality import exhaustive, instances

from ppb_core.balance.bounds import least_max_work
from ppb_core.balance.choice_model import ChoiceModel, time_unit
from ppb_core.balance.choices import Catalogue
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.probing import MARGIN, PathRelaxation, probe
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import _cutoff_proven, choices_under, choices_within, solve, work_limit
from ppb_core.balance.progress import Clock
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import canonical, simulate


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_probing_never_proves_a_value_some_plan_beats(instance) -> None:
    descriptions, stages, chunks, micro_batches, memory = instance
    optimum = exhaustive(descriptions, stages, chunks, micro_batches, memory)
    if math.isinf(optimum):
        return
    problem = BalanceInput(layer_set(descriptions), stages, micro_batches, chunks, memory)
    above = optimum * 1.25 + 1.0  # a value some plan (the optimum) beats by far more than the margin
    choices = choices_within(problem, Catalogue(problem), above, closed_form=False)
    model = ChoiceModel(problem, choices, time_unit(problem))
    found = probe(problem, choices, model, above, 10_000, Clock(60))
    assert not found.proven
    assert found.bound <= optimum * (1 + 1e-9)
    # at the optimum itself: a bound never above it; when proven, its cut-off is within the margin
    model = ChoiceModel(problem, choices, time_unit(problem))
    at = probe(problem, choices, model, optimum, 10_000, Clock(60))
    event(f"P={stages} V={chunks}: optimum {'proven' if at.proven else at.stopped_by}")
    assert at.bound <= optimum * (1 + 1e-9)
    if at.proven:
        assert at.cutoff == pytest.approx(optimum * (1 - MARGIN), rel=1e-12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_a_cutoff_is_proven_over_the_choices_within_it_only_when_no_plan_beats_it(instance) -> None:
    """A solve with a setting to beat (`_megatron`, `_torchtitan`) first tries to prove that no plan beats it,
    over the choices listed for its start plan that a plan that fast can use (`choices_under`, session 30: the
    every N-th block settings of Llama-3.1-8B PP 2 × 4 chunks proved in ~10 relaxations where 1,600 were
    spent), those within its `work_limit`; a cutoff the exhaustive optimum beats is never proven."""
    descriptions, stages, chunks, micro_batches, memory = instance
    optimum = exhaustive(descriptions, stages, chunks, micro_batches, memory)
    if math.isinf(optimum):
        return
    problem = BalanceInput(layer_set(descriptions), stages, micro_batches, chunks, memory)
    start = optimum * 1.25 + 1.0  # a start plan's time: the choices listed for it
    listed = choices_within(problem, Catalogue(problem), start, closed_form=False)
    busiest = least_max_work(problem, listed, time_unit(problem), math.inf, 10**9, Clock(60))
    for value in (optimum * 1.02, optimum * 0.98):
        # each kept choice is one a plan worth *value* may use by `work_limit`; every choice dropped is not
        limit = work_limit(problem, value, closed_form=False)
        kept = choices_under(problem, listed, value)
        for s, (stage, within) in enumerate(zip(listed, kept, strict=True)):
            works = {id(c): problem.fixed_work(s) + sum(x.forward + x.backward for x in c.cells) for c in stage}
            assert all(works[id(c)] <= limit * (1 + 1e-9) for c in within)
            assert all(works[id(c)] > limit for c in stage if all(c is not k for k in within))
    # above the optimum (by more than the proof's margin): a plan beats it, never proven
    assert not _cutoff_proven(problem, listed, optimum * 1.02, busiest, (), 10_000, Clock(60))
    proven = _cutoff_proven(problem, listed, optimum * 0.98, busiest, (), 10_000, Clock(60))
    event(f"P={stages} V={chunks}: 2% below the optimum {'proven' if proven else 'not proven'}")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_relaxation_of_one_plan_settles_at_its_iteration_time(instance) -> None:
    descriptions, stages, chunks, micro_batches, memory = instance
    problem = BalanceInput(layer_set(descriptions), stages, micro_batches, chunks, memory)
    plan = solve(problem, time_limit=60).plan
    if plan is None:
        return
    choices = choices_within(problem, Catalogue(problem), math.inf, closed_form=False)
    model = ChoiceModel(problem, choices, time_unit(problem))
    values = model.assignment(plan, 0.0)
    event(f"P={stages} V={chunks}: {'listed' if values is not None else 'not listed'}")
    if values is None:
        return
    relaxation = PathRelaxation(problem, choices, model)
    relaxation.allow(np.array([values[c] > 0.5 for stage in model.y for c in stage]))
    value = relaxation.bound(math.inf, True, Clock(60), 10_000)
    expected = simulate(canonical("1f1b", chunks), plan.cell_forward, plan.cell_backward, micro_batches).makespan
    assert value == pytest.approx(expected, rel=1e-6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_first_pass_keeps_every_choice_of_an_equally_fast_plan(instance) -> None:
    """Every plan over the listed choices (all of them, run through the simulator) whose iteration
    is within the tie-breaking's tolerance of the optimum keeps each of its stage choices."""
    descriptions, stages, chunks, micro_batches, memory = instance
    optimum = exhaustive(descriptions, stages, chunks, micro_batches, memory)
    if math.isinf(optimum):
        return
    problem = BalanceInput(layer_set(descriptions), stages, micro_batches, chunks, memory)
    choices = choices_within(problem, Catalogue(problem), optimum * 1.1, closed_form=False)
    if math.prod(len(stage) for stage in choices) > 5_000:
        return
    model = ChoiceModel(problem, choices, time_unit(problem))
    ties = optimum * (1 + 1e-6)
    found = probe(problem, choices, model, optimum, 10_000, Clock(60), ties=ties)
    kept = 0
    for picked in itertools.product(*(range(len(stage)) for stage in choices)):
        counts = empty_counts(problem)
        for s, j in enumerate(picked):
            for v, cell in enumerate(choices[s][j].cells):
                for body, row in zip(cell.bodies, cell.counts, strict=True):
                    counts[body][v][s] = list(row)
        plan = Plan(problem, freeze(counts))
        if plan.problems() or plan.iteration_time > ties:
            continue
        kept += 1
        assert all(j in found.alive_ties[s] for s, j in enumerate(picked))
    event(f"equally fast plans checked: {'some' if kept else 'none'}")


def test_probing_is_repeatable() -> None:
    """The same input gives the same drops, rows and relaxations (no decision reads the clock)."""
    descriptions = [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 5},
        {
            "name": "BODY_0",
            "type": "BODY",
            "nb_layer": 9,
            "time": 3,
            "memory_parameter": 10,
            "memory_activation": 30,
            "memory_select_rec": 20,
            "memory_select_comm": 25,
            "memory_both_comm_select": 15,
            "memory_recompute": 2,
        },
        {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 2, "memory_parameter": 8},
    ]
    problem = BalanceInput(layer_set(descriptions), 3, 6, 2, 400.0)
    value = solve(problem, time_limit=60).objective
    runs = []
    for _ in range(2):
        choices = choices_within(problem, Catalogue(problem), value, closed_form=False)
        model = ChoiceModel(problem, choices, time_unit(problem))
        found = probe(problem, choices, model, value, 10_000, Clock(60), ties=value * (1 + 1e-6))
        runs.append((found.proven, found.alive, found.alive_ties, found.relaxations, found.paths, found.bound))
    assert runs[0] == runs[1]
    assert runs[0][3] > len(runs[0][1])  # more relaxations than stages: the probes ran
