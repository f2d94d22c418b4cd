"""A balancer plan placed on the layers: which cell holds each layer, and which recompute option it runs.

A plan's cells are `[chunk][stage] -> {option: body layer count}` (the balancer's cells,
`ppb_core.balance.outputs.cells`). MindFormers applies a cell's counts along its layers from the
cell's first: full recompute first, then both selective kinds, then one, then none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.model.switches import ALONG_A_CELL
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, LayerWalk, final_norm_with_last_decoder, walk, walk_by_model
from ppb_core.schedules import cell_order

CellOptions = Sequence[Sequence[Mapping[str, int]]]


def cell_layers(cell_options: CellOptions) -> list[list[int]]:
    """[chunk][stage] body layers of a plan's cells."""
    return [[sum(int(n) for n in cell.values()) for cell in row] for row in cell_options]


def placed_walk(
    run: RunConfig, cell_layers: Sequence[Sequence[int]], mtp_cell: tuple[int, int] | None = None
) -> LayerWalk:
    """The run's layers with the plan's body layers per [chunk][stage], its ends where the balancer
    charges them (`ends_in_end_cells`); *mtp_cell*: the MTP layers apart from the loss there
    (Megatron-Core's standalone MTP, `walk`)."""
    return ends_in_end_cells(run, walk(run, cell_layers, mtp_cell))


def ends_in_end_cells(run: RunConfig, placed: LayerWalk) -> LayerWalk:
    """The first HEAD in the schedule's first cell and the last TAIL in its last, where the balancer
    charges them (and Megatron-Core's layout puts `E` and `L`), even when those cells hold no body
    layer: a plan may leave the last cell to the loss and the MTP layers ('Et|(tt|)*30,mL')."""
    par = run.parallel
    cells = cell_order(par.schedule, par.pp, par.vpp)
    layers = list(placed.layers)
    first_head = next(i for i, layer in enumerate(layers) if layer.node == HEAD)
    last_tail = max(i for i, layer in enumerate(layers) if layer.node == TAIL)
    layers[first_head] = replace(layers[first_head], chunk=cells[0][0], stage=cells[0][1])
    layers[last_tail] = replace(layers[last_tail], chunk=cells[-1][0], stage=cells[-1][1])
    layers = final_norm_with_last_decoder(run, layers)  # an `mL` cell of no decoder layer: the norm apart
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


def place_plan(
    run: RunConfig,
    cell_options: CellOptions,
    by_model: Mapping[str, CellOptions] | None = None,
    mtp_cell: tuple[int, int] | None = None,
) -> tuple[LayerWalk, dict[Layer, str]]:
    """The plan's layers in their cells, and each body layer's option.

    *by_model* (`model_cell_options`) places each sub-model along the cells on its own, as a plan
    whose body types stand for layers of several sub-models (combined bodies) needs. *mtp_cell*: the
    plan runs the MTP layers there, apart from the loss (a Megatron layout's standalone MTP).
    """
    if by_model is None:
        placed = placed_walk(run, cell_layers(cell_options), mtp_cell)
        return placed, options_along_cells(placed, cell_options)
    placed = ends_in_end_cells(
        run, walk_by_model(run, {model: cell_layers(cells) for model, cells in by_model.items()}, mtp_cell)
    )
    chosen: dict[Layer, str] = {}
    for model, cells in by_model.items():
        own = LayerWalk(placed.stages, placed.chunks, tuple(layer for layer in placed if layer.model_name == model))
        chosen.update(options_along_cells(own, cells))
    return placed, chosen


def model_cell_options(
    plan_cells: Sequence[Sequence[Mapping[str, Any]]], bodies: Sequence[Mapping[str, Any]]
) -> dict[str, list[list[dict[str, int]]]] | None:
    """[chunk][stage] option counts per sub-model, from a plan's cells (`layers`: body type -> option
    counts) and its bodies' sub-models (`models`: one per layer a body type's layer stands for).

    None when the bodies do not say their sub-models (a plan from a SAPP file of another tool).
    """
    models_of = {body["name"]: body.get("models") for body in bodies}
    if not models_of or any(not models for models in models_of.values()):
        return None
    names = list(dict.fromkeys(model for models in models_of.values() for model in models))
    result = {name: [[{} for _ in row] for row in plan_cells] for name in names}
    for chunk, row in enumerate(plan_cells):
        for stage, cell in enumerate(row):
            for body, options in cell.get("layers", {}).items():
                for model in models_of[body]:
                    counts = result[model][chunk][stage]
                    for option, n in options.items():
                        counts[option] = counts.get(option, 0) + int(n)
    return result
