"""Probing (`balance.probing`) against an exhaustive search over every plan, on random small instances.

The search is `test_balance_optimality.exhaustive`, written from the rules alone. Probing claims
"no plan is faster than the value given" only when that is so: given a value above the optimum by
more than its margin it must not prove anything, and every bound it reports is at most the
optimum. Its separation is exact: with every stage held to one choice, the relaxation settles at
the plan's iteration time as the schedule simulator runs it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from test_balance_optimality import exhaustive, instances

from ppb_core.balance.choice_model import ChoiceModel, time_unit
from ppb_core.balance.choices import Catalogue
from ppb_core.balance.probing import MARGIN, PathRelaxation, probe
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import choices_within, solve
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
