"""A program past `WorkLimits.program_nonzeros` is not searched by branch and bound: HiGHS's root alone can
run tens of minutes on one (1,024 layers at P=64, V=8), with no check inside. The plans found beside it stand
(the even splits, local moves, stage exchanges) with the bound proven beside it (probing), and the answer
says so: stopped by the work limit, its gap, and a note naming the program's size. Never a worse plan
silently: the bound it reports is below the optimum the full search proves, and its plan is no slower than
the best even split."""

from __future__ import annotations

import pytest

from ppb_core.balance import BalanceInput, solve
from ppb_core.balance.baselines import baselines, best_feasible
from ppb_core.balance.progress import Progress, WorkLimits
from ppb_core.payload.sapp import layer_set

# 12 body layers of one kind, NONE/SLCT/FULL, at P=4, V=2, m=8: memory binds NONE on the first stages
LAYERS = [
    {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 0.5, "memory_parameter": 400},
    {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": 12,
        "time": 1.0,
        "memory_parameter": 150,
        "memory_activation": 90,
        "memory_select_rec": 60,
        "memory_recompute": 4,
    },
    {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1.2, "memory_parameter": 500},
]


@pytest.fixture(scope="module")
def problem() -> BalanceInput:
    return BalanceInput(layer_set(LAYERS), 4, 8, 2, 2600.0)


@pytest.fixture(scope="module")
def full(problem: BalanceInput):
    return solve(problem)


def test_a_program_past_its_nonzeros_is_not_searched_and_says_so(problem: BalanceInput, full) -> None:
    steps: list[Progress] = []
    cut = solve(problem, progress=steps.append, limits=WorkLimits(program_nonzeros=10))
    assert full.stopped_by == "optimal"
    said = [note for note in cut.notes if "program not searched" in note]
    assert said and all("nonzeros: over the 10 a program searched by branch and bound may have" in n for n in said)
    assert any("program not searched" in step.message for step in steps if step.phase == "round")
    assert any(note.startswith("tie-breaking among equally fast plans: not run") for note in cut.notes)
    assert cut.plan is not None and cut.objective is not None and cut.bound is not None and cut.gap is not None
    # honest: what it reports bounds the optimum the full search proves, and the plan is a real one
    assert cut.bound <= full.objective * (1 + 1e-9) <= cut.objective * (1 + 1e-9)
    assert cut.gap == pytest.approx(max(0.0, (cut.objective - cut.bound) / cut.objective))
    if cut.gap > 1e-6:
        assert cut.stopped_by == "work_limit" and cut.status == "time_limit"
    best = best_feasible(baselines(problem))
    assert best is not None and cut.plan.iteration_time <= best.iteration_time * (1 + 1e-12)
    assert cut.plan.fits


def test_within_its_nonzeros_the_program_is_searched_as_before(problem: BalanceInput, full) -> None:
    """The default limit is far above this program: the same answer as with no limit at all."""
    unlimited = solve(problem, limits=WorkLimits(program_nonzeros=10**12))
    assert (unlimited.objective, unlimited.bound, unlimited.plan) == (full.objective, full.bound, full.plan)
    assert not any("not searched" in note for note in full.notes)


def test_past_its_ops_the_nudged_family_is_left_out_and_said() -> None:
    """At V = 1 the nudged path family runs the schedule once per stage (P=4, m=8: 4 × 64 ops); with no ops
    allowed only the drain family's row is added, said in the notes, and the answer still bounds the optimum."""
    problem = BalanceInput(layer_set(LAYERS), 4, 8, 1, 2600.0)
    full = solve(problem)
    lean = solve(problem, limits=WorkLimits(family_work=0))
    assert not any("nudged path family" in note for note in full.notes)
    assert "nudged path family: not added, its 4 schedules of 64 ops each are over the 0 ops it may run" in lean.notes
    assert lean.plan is not None and lean.objective is not None and lean.bound is not None
    assert full.objective is not None and full.stopped_by == "optimal"
    assert lean.bound <= full.objective * (1 + 1e-9) <= lean.objective * (1 + 1e-9)
