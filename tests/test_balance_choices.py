"""`Catalogue.reachable` drops only cell contents that no plan can have.

Every plan is listed here from the placement rules alone (docs/balance.md): the layers in pipeline
order (body types in order) cut into one run per cell along the model, every cell but the head's
and the tail's holding at least one layer. Every cell of every such plan must be reachable.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppb_core.balance.choices import Catalogue
from ppb_core.balance.problem import BalanceInput
from ppb_core.payload.sapp import layer_set


def _descriptions(counts: list[int], head: bool, tail: bool) -> list[dict]:
    bodies = [
        {
            "name": f"BODY_{i}",
            "type": "BODY",
            "nb_layer": n,
            "time": 1.0 + i,
            "memory_parameter": 1,
            "memory_activation": 1,
        }
        for i, n in enumerate(counts)
    ]
    ends = []
    if head:
        ends.append({"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 0.5, "memory_parameter": 1})
    body_list = ends + bodies
    if tail:
        body_list.append({"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 0.5, "memory_parameter": 1})
    return body_list


def _plans(types: list[int], cells: int, may_be_empty: list[bool]):
    """Every cut of the layer sequence into `cells` consecutive runs, empty only where allowed."""
    n = len(types)
    for cuts in itertools.combinations_with_replacement(range(n + 1), cells - 1):
        bounds = [0, *cuts, n]
        runs = [types[bounds[i] : bounds[i + 1]] for i in range(cells)]
        if all(run or empty for run, empty in zip(runs, may_be_empty, strict=True)):
            yield runs


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    stages=st.integers(1, 3),
    chunks=st.integers(1, 2),
    head=st.booleans(),
    tail=st.booleans(),
    dualpipe=st.booleans(),
)
def test_every_cell_of_every_plan_is_reachable(counts, stages, chunks, head, tail, dualpipe) -> None:
    schedule = "dualpipev" if dualpipe and chunks == 2 else "1f1b"
    if stages * chunks - head - tail > sum(counts):
        return  # too few layers for the cells: bad input
    problem = BalanceInput(layer_set(_descriptions(counts, head, tail)), stages, 2 * stages, chunks, schedule=schedule)
    catalogue = Catalogue(problem)
    types = [t for t, n in enumerate(counts) for _ in range(n)]
    may_be_empty = [cell in problem.reserved_cells for cell in problem.cells]
    for runs in _plans(types, len(problem.cells), may_be_empty):
        for cell, run in zip(problem.cells, runs, strict=True):
            if run:
                present = tuple(sorted(set(run)))
                assert catalogue.reachable(cell, present, tuple(run.count(t) for t in present)), (runs, cell)


def test_three_dense_layers_reach_the_first_four_cells_only() -> None:
    # DeepSeek-V3-like: 3 dense then 58 MoE layers, P=16, V=2, head on cell 0, tail on the last cell.
    # A dense layer in cell p needs the p − 1 open cells before it (cell 0 holds the head and may be
    # empty) to hold a dense layer each: p − 1 + 1 ≤ 3, so p ≤ 3; three dense layers in one cell
    # leave none for the cells before it: only cells 0 and 1.
    problem = BalanceInput(layer_set(_descriptions([3, 58], True, True)), 16, 64, 2, schedule="interleaved")
    catalogue = Catalogue(problem)
    one_dense = [p for p, cell in enumerate(problem.cells) if catalogue.reachable(cell, (0,), (1,))]
    three_dense = [p for p, cell in enumerate(problem.cells) if catalogue.reachable(cell, (0,), (3,))]
    assert one_dense == [0, 1, 2, 3]
    assert three_dense == [0, 1]
    # MoE layers reach every cell; 58 of them in one cell leave the 30 open cells after cell 1 empty
    assert all(catalogue.reachable(cell, (1,), (2,)) for cell in problem.cells)
    assert not catalogue.reachable(problem.cells[1], (1,), (58,))


@pytest.mark.parametrize("chunks", [1, 2])
def test_stage_choices_hold_only_reachable_cells(chunks: int) -> None:
    problem = BalanceInput(layer_set(_descriptions([2, 9], True, False)), 3, 6, chunks, 1e9)
    catalogue = Catalogue(problem)
    for s in range(problem.stages):
        for choice in catalogue.stage_choices(s, float("inf"), 6):
            for v, cell in enumerate(choice.cells):
                if cell.bodies:
                    assert catalogue.reachable((v, s), cell.bodies, tuple(sum(row) for row in cell.counts))
