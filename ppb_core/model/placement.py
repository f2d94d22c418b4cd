"""A balancer plan placed on the layers: which cell holds each layer, and which recompute option it runs.

A plan's cells are `[chunk][stage] -> {option: body layer count}` (the balancer's cells,
`ppb_core.balance.outputs.cells`). MindFormers applies a cell's counts along its layers from the
cell's first: full recompute first, then both selective kinds, then one, then none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ppb_core.config.run import RunConfig
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, LayerWalk, walk
from ppb_core.schedules import cell_order

CellOptions = Sequence[Sequence[Mapping[str, int]]]

ALONG_A_CELL: tuple[str, ...] = ("FULL", "BOTH", "SLCT", "COMM", "NONE")


def cell_layers(cell_options: CellOptions) -> list[list[int]]:
    """[chunk][stage] body layers of a plan's cells."""
    return [[sum(int(n) for n in cell.values()) for cell in row] for row in cell_options]


def placed_walk(run: RunConfig, cell_layers: Sequence[Sequence[int]]) -> LayerWalk:
    """The run's layers with the plan's body layers per [chunk][stage]; the first HEAD and the last
    TAIL in the first and last cells, where the balancer charges them, even when those hold no body."""
    par = run.parallel
    placed = walk(run, cell_layers)
    cells = cell_order(par.schedule, par.pp, par.vpp)
    layers = list(placed.layers)
    first_head = next(i for i, layer in enumerate(layers) if layer.node == HEAD)
    last_tail = max(i for i, layer in enumerate(layers) if layer.node == TAIL)
    layers[first_head] = replace(layers[first_head], chunk=cells[0][0], stage=cells[0][1])
    layers[last_tail] = replace(layers[last_tail], chunk=cells[-1][0], stage=cells[-1][1])
    return LayerWalk(placed.stages, placed.chunks, tuple(layers), placed.cell_counts)


def options_along_cells(placed: LayerWalk, cell_options: CellOptions) -> dict[Layer, str]:
    """Each body layer's option: a cell's counts applied along its layers in MindFormers' order."""
    chosen: dict[Layer, str] = {}
    for chunk, row in enumerate(cell_options):
        for stage, counts in enumerate(row):
            sequence = [option for option in ALONG_A_CELL for _ in range(int(counts.get(option, 0)))]
            bodies = [layer for layer in placed.in_cell(chunk, stage) if layer.node == BODY]
            if len(bodies) != len(sequence):
                raise ValueError(
                    f"cell (chunk {chunk}, stage {stage}): {len(sequence)} options for {len(bodies)} body layers"
                )
            chosen.update(zip(bodies, sequence, strict=True))
    return chosen


def place_plan(run: RunConfig, cell_options: CellOptions) -> tuple[LayerWalk, dict[Layer, str]]:
    """The plan's layers in their cells, and each body layer's option."""
    placed = placed_walk(run, cell_layers(cell_options))
    return placed, options_along_cells(placed, cell_options)
