"""`program.placeable` drops only stage choices no plan over the listing uses (every body type's layers placed)."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from ppb_core.balance import BalanceInput
from ppb_core.balance.choices import CellChoice, StageChoice
from ppb_core.balance.program import placeable
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set

NONE = OPTIONS.index("NONE")


def _body(name: str, count: int) -> dict[str, Any]:
    return {"name": name, "type": "BODY", "nb_layer": count, "time": 1, "memory_parameter": 0, "memory_activation": 1}


def _choice(cells: list[dict[int, int]]) -> StageChoice:
    """A stage choice from per-chunk {body type: layers}, every layer NONE (times and memory do not matter here)."""
    made = []
    for cell in cells:
        bodies = tuple(sorted(cell))
        rows = tuple(tuple(cell[b] if k == NONE else 0 for k in range(len(OPTIONS))) for b in bodies)
        made.append(CellChoice(bodies, rows, 0.0, 0.0, 0.0, 0.0))
    return StageChoice(tuple(made))


def test_two_ranks_of_seven_to_fifteen_and_seventeen_blocks_keep_fifteen_and_seventeen() -> None:
    # 32 blocks over 2 ranks of one chunk: rank 0 listed with 7..15 blocks, rank 1 with 7..17. Rank 0 holds at
    # most 15, so rank 1 at least 32 − 15 = 17: only its 17; then rank 0 exactly 32 − 17 = 15
    problem = BalanceInput(layer_set([_body("BODY_0", 32)]), 2, 8, 1, 1e9)
    choices = [[_choice([{0: k}]) for k in range(7, 16)], [_choice([{0: k}]) for k in range(7, 18)]]
    kept = placeable(problem, choices)
    assert [[c.cells[0].layers for c in stage] for stage in kept] == [[15], [17]]


def test_nothing_placeable_leaves_a_stage_empty() -> None:
    problem = BalanceInput(layer_set([_body("BODY_0", 32)]), 2, 8, 1, 1e9)
    choices = [[_choice([{0: k}]) for k in range(7, 15)], [_choice([{0: k}]) for k in range(7, 18)]]
    assert not all(placeable(problem, choices))  # 14 + 17 < 32


@pytest.mark.parametrize("seed", range(12))
def test_every_choice_some_plan_uses_is_kept(seed: int) -> None:
    # random listings of 2 body types over 3 stages of 2 chunks: every combination of one choice a stage is
    # tried, and each choice in a combination placing every type's layers must be kept
    rng = random.Random(seed)
    need = (rng.randint(3, 7), rng.randint(3, 7))
    problem = BalanceInput(layer_set([_body("BODY_0", need[0]), _body("BODY_1", need[1])]), 3, 6, 2, 1e9)
    choices = []
    for _ in range(problem.stages):
        stage = []
        for _ in range(rng.randint(1, 6)):
            cells = []
            for _ in range(problem.chunks):
                cell = {b: rng.randint(1, 3) for b in (0, 1) if rng.random() < 0.6}
                cells.append(cell or {0: 1})
            stage.append(_choice(cells))
        choices.append(stage)

    def held(choice: StageChoice, body: int) -> int:
        return sum(cell.body_count(body) for cell in choice.cells)

    used = {
        id(choice)
        for combination in itertools.product(*choices)
        if all(sum(held(c, b) for c in combination) == need[b] for b in (0, 1))
        for choice in combination
    }
    kept = {id(choice) for stage in placeable(problem, choices) for choice in stage}
    assert used <= kept
