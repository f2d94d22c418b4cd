"""Near-ties: an option faster than NONE by less than the tie tolerance does not knock NONE out (issue 13).

Hand-made description (SAPP keys, `model.switches.TIME_KEY`/`MEMORY_KEY`): one body type B of four
layers, time 5 → forward 5, backward 10 under NONE (30 MB per micro-batch), FULL 15 (10 MB), COMM
10·(1 − δ) (20 MB); 1 MB parameters each. P = 2, m = 4, 1F1B, no head or tail.

δ = 1e-7 is below the tie tolerance (1e-6, relative; `balance/tiebreak.py`): a COMM layer saves 1e-6
of backward time, which the tie-break counts as no saving. With 1000 MB every plan fits (the worst,
3 | 1 under NONE, holds 3·1 + 2·3·30 = 183 MB on stage 0). 2 | 2 under NONE runs
(m + P − 1)·(F + B) = 5·(10 + 20) = 150; with COMM on every layer each B is 20·(1 − 1e-7), so no
plan beats 150 by more than 1e-7 relative: NONE everywhere ties the best, and the least recompute is
none, 0 recomputed layers. Before, the listing dropped NONE for COMM (faster by 1e-6, leaner) and the
plan recomputed all four layers.

The exhaustive test checks every plan of the same family at several δ and memory sizes: the plan's
objective is the least over every plan that fits (within 1e-6), and among the plans within 1e-6 of it
the plan has the least recompute time and then the fewest recomputed layers. The reference is written
from the rules (docs/balance.md, "Listing what a stage may run"; balance/tiebreak.py's criteria) and
shares only the schedule simulator with the program (tests/test_schedules.py checks it by hand).
"""

from __future__ import annotations

import itertools
import math

import pytest

from ppb_core.balance import BalanceInput, balance
from ppb_core.balance.choices import NONE, _ranked_fronts, tie_units
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import simulate

TOLERANCE = 1e-6  # docs/balance.md: plans (and layer backward times) this close count as equally fast
LAYERS, STAGES, MICRO_BATCHES = 4, 2, 4
FORWARD = 5.0
BACKWARD = {"NONE": 10.0, "FULL": 15.0}  # SAPP fallback: FULL = (1 + 0.5)·backward
ACTIVATION = {"NONE": 30.0, "FULL": 10.0, "COMM": 20.0}
PARAMETERS = 1.0


def _description(delta: float) -> dict:
    body = {"name": "B", "type": "BODY", "nb_layer": LAYERS, "time": FORWARD, "memory_parameter": PARAMETERS}
    body |= {"backward_time": BACKWARD["NONE"], "memory_activation": ACTIVATION["NONE"]}
    body |= {"recompute_time": BACKWARD["FULL"], "memory_recompute": ACTIVATION["FULL"]}
    body |= {"select_comm_time": BACKWARD["NONE"] * (1 - delta), "memory_select_comm": ACTIVATION["COMM"]}
    return body


def _recompute(option: str, delta: float) -> float:
    """A layer's recompute time: its backward minus the least, a backward below NONE's by at most the
    tolerance (relative) counted as NONE's (docs/balance.md, "Listing what a stage may run")."""
    times = {**BACKWARD, "COMM": BACKWARD["NONE"] * (1 - delta)}
    if times["COMM"] < times["NONE"] <= times["COMM"] * (1 + TOLERANCE):
        times["COMM"] = times["NONE"]
    return times[option] - min(times.values())


def _plans(delta: float, memory_mb: float):
    """(iteration, recompute time, recomputed layers) of every plan that fits: every split with a layer
    per stage, every multiset of options per stage. 1F1B keeps P − s micro-batches in flight on stage s."""
    comm = BACKWARD["NONE"] * (1 - delta)
    times = {**BACKWARD, "COMM": comm}
    for first in range(1, LAYERS):
        split = (first, LAYERS - first)
        per_stage = [list(itertools.combinations_with_replacement(("NONE", "COMM", "FULL"), n)) for n in split]
        for options in itertools.product(*per_stage):
            memory = [
                n * PARAMETERS + (STAGES - s) * sum(ACTIVATION[o] for o in stage)
                for s, (n, stage) in enumerate(zip(split, options, strict=True))
            ]
            if max(memory) > memory_mb:
                continue
            forward = [[n * FORWARD for n in split]]
            backward = [[sum(times[o] for o in stage) for stage in options]]
            iteration = simulate("1f1b", forward, backward, MICRO_BATCHES).makespan
            layers = [o for stage in options for o in stage]
            yield iteration, sum(_recompute(o, delta) for o in layers), sum(o != "NONE" for o in layers)


def test_a_near_tie_keeps_none() -> None:
    result = balance(BalanceInput(layer_set([_description(1e-7)]), STAGES, MICRO_BATCHES, 1, 1000), time_limit=60)
    assert result["status"] == "optimal"
    assert result["ties"]["recomputed_layers"] == 0
    assert result["ties"]["recompute_time"] == 0


@pytest.mark.parametrize("delta", [0.0, 1e-7, 9e-7, 1e-3])
@pytest.mark.parametrize("memory_mb", [1000.0, 100.0, 70.0])
def test_the_plan_is_the_exhaustive_least_recompute_one(delta: float, memory_mb: float) -> None:
    plans = list(_plans(delta, memory_mb))
    best = min(iteration for iteration, _, _ in plans)
    tied = [(recompute, layers) for iteration, recompute, layers in plans if iteration <= best * (1 + TOLERANCE)]
    least_recompute = min(recompute for recompute, _ in tied)
    fewest = min(layers for recompute, layers in tied if recompute <= least_recompute + 1e-9)
    problem = BalanceInput(layer_set([_description(delta)]), STAGES, MICRO_BATCHES, 1, memory_mb)
    result = balance(problem, time_limit=60)
    assert result["status"] == "optimal"
    assert best <= result["objective"] <= best * (1 + TOLERANCE)
    assert math.isclose(result["ties"]["recompute_time"], least_recompute, abs_tol=1e-9)
    assert result["ties"]["recomputed_layers"] == fewest


def test_the_front_keeps_none_beside_a_near_tie() -> None:
    """Two layers, NONE (b 10, a 30) and COMM (b 10·(1 − 1e-7), a 20): in tie units COMM's backward is
    NONE's, so as with an exact tie (tests/test_balance_free_recompute.py) NONE×2 (a 60, 0 recomputed),
    NONE+COMM (50, 1) and COMM×2 (40, 2) all stay; compared as raw times COMM×2 beats both."""
    comm = OPTIONS.index("COMM")
    backward = [0.0] * len(OPTIONS)
    activation = [0.0] * len(OPTIONS)
    backward[NONE], backward[comm] = 10.0, 10.0 * (1 - 1e-7)
    activation[NONE], activation[comm] = 30.0, 20.0
    rank = tie_units([backward], NONE)[0]
    assert rank[comm] == rank[NONE]
    front = _ranked_fronts(2, (NONE, comm), backward, activation, rank)[2]
    assert sorted(a for _, a, _, _ in front) == [40.0, 50.0, 60.0]
    raw = _ranked_fronts(2, (NONE, comm), backward, activation, backward)[2]
    assert [a for _, a, _, _ in raw] == [40.0]
