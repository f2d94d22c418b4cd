"""torchtitan's every N-th settings left unsearched at one chunk a rank (`program._torchtitan`) give the plan
that searching every setting gives, and the plan every split under every setting gives (the oracle below,
written from torchtitan v0.2.2's `_apply_layer_sac` and the schedule alone)."""

from __future__ import annotations

from typing import Any

import pytest

from ppb_core.balance import BalanceInput, program, solve
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.torchtitan_settings import runnable
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set

FULL, NONE = OPTIONS.index("FULL"), OPTIONS.index("NONE")


def _body(count: int) -> dict[str, Any]:
    # per block: forward 1, backward NONE 2 / FULL 3; MB per micro-batch in flight NONE 10, FULL 1
    return {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": count,
        "time": 1,
        "memory_parameter": 0,
        "memory_activation": 10,
        "memory_recompute": 1,
        "backward_time": 2,
        "recompute_time": 3,
    }


def _splits(total: int, parts: int) -> list[tuple[int, ...]]:
    """Every split of *total* blocks over *parts* ranks, each holding one at least."""
    if parts == 1:
        return [(total,)]
    return [(first, *rest) for first in range(1, total - parts + 2) for rest in _splits(total - first, parts - 1)]


def _fastest(problem: BalanceInput) -> float | None:
    """The least iteration time over every split and every setting torchtitan takes: none (n = 0), every
    n-th block of a rank for n = 2..blocks (counts n, 2n, ... FULL, `_apply_layer_sac`), full (n = 1)."""
    total = problem.layers.nb_body_layers
    best = None
    for split in _splits(total, problem.stages):
        for n in (0, *range(2, total + 1), 1):
            counts = empty_counts(problem)
            for s, k in enumerate(split):
                full = k if n == 1 else (k // n if n else 0)
                counts[0][0][s][FULL], counts[0][0][s][NONE] = full, k - full
            plan = Plan(problem, freeze(counts))
            if plan.fits and not plan.problems() and (best is None or plan.iteration_time < best):
                best = plan.iteration_time
    return best


def _searched(monkeypatch: pytest.MonkeyPatch, problem: BalanceInput) -> program.Solution:
    """The solve with every every-N-th setting searched: none of the proofs that skip one."""
    with monkeypatch.context() as patched:
        patched.setattr(program, "_more_blocks_hold_less", lambda problem: False)
        patched.setattr(program, "_every_nth_split", lambda *args: True)
        patched.setattr(program, "_rank_layers_floor", lambda *args: 0.0)
        patched.setattr(program, "_none_floor", lambda *args: 0.0)
        return solve(problem)


# 10 blocks at PP 2 (m 4, stage 0 holds 2 micro-batches, stage 1 one) and 9 at PP 3 (3, 2, 1): from memory
# where none fits (1000 MB) down to where only full fits, and below, where nothing does
@pytest.mark.parametrize(("blocks", "stages"), [(10, 2), (9, 3)])
@pytest.mark.parametrize("memory", [12.0, 20.0, 30.0, 45.0, 60.0, 75.0, 1000.0])
def test_unsearched_settings_at_one_chunk_a_rank_lose_nothing(
    blocks: int, stages: int, memory: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = runnable(layer_set([_body(blocks)]), op=False)
    problem = BalanceInput(layers, stages, 4, 1, memory, schedule="1f1b", framework="torchtitan")
    pruned = solve(problem)
    searched = _searched(monkeypatch, problem)
    best = _fastest(problem)
    if best is None:
        assert pruned.plan is None and searched.plan is None and pruned.status == searched.status == "infeasible"
        return
    assert pruned.plan is not None and searched.plan is not None
    assert pruned.objective == pytest.approx(best) and searched.objective == pytest.approx(best)
    assert pruned.setting == searched.setting and pruned.plan.counts == searched.plan.counts


def test_no_plan_under_every_nth_means_none_under_a_larger_n(monkeypatch: pytest.MonkeyPatch) -> None:
    # 10 blocks at PP 2 in 30 MB, stage 0 holding 2 micro-batches, stage 1 one. Under every 2nd block k blocks
    # keep (k − ⌊k/2⌋)·10 + ⌊k/2⌋ MB per micro-batch: stage 0 at most k = 2 (2·11 = 22; k = 3: 2·21 = 42),
    # stage 1 at most k = 4 (22; k = 5: 32, k = 6: 33), and 2 + 4 < 10: no plan fits. Under every 3rd and on,
    # the same k keep at least as much, so none fits either; under full 2·k·1 ≤ 30 holds for every k
    layers = runnable(layer_set([_body(10)]), op=False)
    problem = BalanceInput(layers, 2, 4, 1, 30.0, schedule="1f1b", framework="torchtitan")
    pruned = solve(problem)
    said = [note for note in pruned.notes if "fewer FULL blocks hold more" in note]
    assert len(said) == 1 and "N in 3..9 (7)" in said[0] and "at N = 2" in said[0], pruned.notes
    assert pruned.setting is not None and pruned.setting.name == "full"
    searched = _searched(monkeypatch, problem)
    assert searched.plan is not None and pruned.plan is not None and pruned.plan.counts == searched.plan.counts
