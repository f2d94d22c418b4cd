"""Ties among equally fast plans are broken for the user (`balance/tiebreak.py`), through `balance`.

The hand-made descriptions: a heavy first layer H and three light layers L, P = 3, m = 4, 1F1B,
no head or tail, SAPP's fallbacks (forward = time, backward 2·time under NONE, (1 + 0.5)·2·time
under FULL, hyper-parallel sapp_ppb/utils/recompute.py DEFAULT_COEF):

- H: time 20 → f 20, b 40 (FULL 60); 0 MB parameters, 1 MB activation per micro-batch (FULL 1).
- L: time 2 → f 2, b 4 (FULL 6); 10 MB parameters, 40 MB (NONE) or 15 MB (FULL) per micro-batch.

Stage 0 must hold H (it comes first and every stage holds a layer). 1F1B keeps 3, 2, 1
micro-batches in flight on stages 0, 1, 2. Stage 0 busy without a wait runs
F1 F2 F3 B1 F4 B2 B3 B4 = 4·(20 + 40) = 240; it never waits when the light stages answer in
time: a round trip through stages 1 and 2 is at most (2 + 2)·2 (forward) + (6 + 6)·2 (backward,
FULL) = 32 < the 40 of B1's wait (F2, F3 run 20..60 while F1's answer is due), and later ones
have longer waits. So every plan with H alone on stage 0 under NONE is 240, whatever the light
stages do: a 1 | 1 | 2 or 1 | 2 | 1 split, NONE or FULL on any L. Putting an L on stage 0 or
recomputing H makes stage 0 longer, so 240 is the optimum and the ties are among those plans.
"""

from __future__ import annotations

import pytest

from ppb_core.balance import BalanceInput, balance
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import simulate

H = {"name": "H", "type": "BODY", "nb_layer": 1, "time": 20, "memory_parameter": 0}
H |= {"memory_activation": 1, "memory_recompute": 1}
L = {"name": "L", "type": "BODY", "nb_layer": 3, "time": 2, "memory_parameter": 10}
L |= {"memory_activation": 40, "memory_recompute": 15}


def _balance(memory_mb: float) -> dict:
    return balance(BalanceInput(layer_set([H, L]), 3, 4, 1, memory_mb), time_limit=60)


@pytest.mark.parametrize(
    ("forward", "backward"),
    [
        ([20, 2, 4], [40, 4, 8]),  # 1 | 1 | 2, NONE
        ([20, 4, 2], [40, 8, 4]),  # 1 | 2 | 1, NONE
        ([20, 2, 4], [40, 6, 12]),  # 1 | 1 | 2, every L under FULL
        ([20, 4, 2], [40, 12, 4]),  # 1 | 2 | 1, stage 1's two L under FULL
    ],
)
def test_the_plans_tie(forward: list[float], backward: list[float]) -> None:
    """The ties are real: the schedule's simulator gives each of them 240."""
    assert simulate("1f1b", [forward], [backward], 4).makespan == 240


def test_no_recompute_then_most_headroom_when_memory_is_ample() -> None:
    # 1000 MB. Least recompute: none at all (recompute time 0, no layer recomputed, no stage mixed).
    # Then the most headroom between the two splits under NONE (stage 0 holds 3·1 = 3 MB):
    #   1 | 1 | 2: stage 1 10 + 2·40 = 90, stage 2 2·10 + 1·2·40 = 100 → peak 100, headroom 900
    #   1 | 2 | 1: stage 1 2·10 + 2·2·40 = 180, stage 2 10 + 40 = 50   → peak 180, headroom 820
    result = _balance(1000)
    assert result["status"] == "optimal" and result["objective"] == 240
    assert [stage["layers"] for stage in result["stages"]] == [1, 1, 2]
    assert result["recompute"] == [0, 0, 0]
    assert result["stage_memory_mb"] == [3, 90, 100]
    assert result["ties"] == {
        "recompute_time": 0,
        "recomputed_layers": 0,
        "stages_mixing_options": 0,
        "headroom_mb": 900,
    }


def test_one_setting_per_stage_before_headroom() -> None:
    # 85 MB: each split must recompute two L.
    #   1 | 1 | 2: stage 1's L under NONE needs 10 + 2·40 = 90 > 85, under FULL 10 + 2·15 = 40;
    #     stage 2's two L need 20 + 80 = 100 under NONE, 20 + 40 + 15 = 75 with one FULL:
    #     2 FULL (recompute time 2·(6 − 4) = 4), stage 2 mixes NONE and FULL; peak 75, headroom 10.
    #   1 | 2 | 1: stage 1's two L need 20 + 2·(40 + 15) = 130 with one FULL, 20 + 2·30 = 80 with
    #     both; stage 2 10 + 40 = 50: 2 FULL (recompute time 4), no stage mixes; peak 80, headroom 5.
    # Equal recompute time and layers; one setting per stage comes before headroom: 1 | 2 | 1.
    result = _balance(85)
    assert result["status"] == "optimal" and result["objective"] == 240
    assert [stage["layers"] for stage in result["stages"]] == [1, 2, 1]
    assert result["recompute"] == [0, 2, 0]
    assert result["stage_memory_mb"] == [3, 80, 50]
    assert result["ties"] == {
        "recompute_time": 4,
        "recomputed_layers": 2,
        "stages_mixing_options": 0,
        "headroom_mb": 5,
    }


def test_megatron_takes_its_least_recompute_setting_when_as_fast() -> None:
    # The same layers, H's full recompute stated as free (recompute_time 40 = its backward), 85 MB,
    # a Megatron-Core run. The per-stage plan above (1 | 2 | 1, stage 1's L under FULL, H and stage
    # 2 under NONE) is 240 but Megatron-Core takes one setting for every layer (transformer_config.py
    # TransformerConfig.__post_init__), so the fastest settings it can say are solved:
    #   none: does not fit (1 | 1 | 2 stage 1: 90 > 85; 1 | 2 | 1 stage 1: 180).
    #   full (uniform): every layer FULL; 1 | 2 | 1 fits (3, 20 + 2·2·15 = 80, 10 + 15 = 25), 240;
    #     recompute time 0 (H) + 3·(6 − 4) = 6, 4 layers recomputed.
    #   block 1 (the first layer of every stage): 1 | 2 | 1 has stage 1 at 20 + 2·(15 + 40) = 130,
    #     too much; 1 | 1 | 2 fits (3, 10 + 2·15 = 40, 20 + 15 + 40 = 75), 240;
    #     recompute time 0 + 2 + 2 = 4, 3 layers recomputed (stage 2 mixes FULL and NONE).
    # (Block N runs below the most layers a stage holds, 2: block 1 only.) Both are as fast as the
    # per-stage plan; the least recompute is block 1, and it is taken.
    free_h = H | {"recompute_time": 40}
    problem = BalanceInput(layer_set([free_h, L]), 3, 4, 1, 85, framework="megatron")
    result = balance(problem, time_limit=60)
    assert result["status"] == "optimal" and result["objective"] == 240
    assert [stage["layers"] for stage in result["stages"]] == [1, 1, 2]
    assert result["megatron"]["recompute"] == [
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "block",
        "--recompute-num-layers",
        "1",
    ]
    assert result["stage_memory_mb"] == [3, 40, 75]
    assert result["ties"]["recompute_time"] == 4 and result["ties"]["recomputed_layers"] == 3
    assert "as fast: taken" in result["solver"]["notes"][-1]
