"""The layer walk as a table: one row per layer, its kind stored whole (the `layer_walk` asset's)."""

from __future__ import annotations

import json

import pandas as pd

from ppb_core.model.kinds import LayerKind, kind_from_dict
from ppb_core.model.walk import BODY, Layer, LayerWalk
from ppb_core.tables.kinds import KIND_JSON, kind_json
from ppb_core.tables.schema import Column, Schema

LAYER_WALK = Schema(
    "layer_walk",
    "Every layer of the run in pipeline order, with the (chunk, stage) cell it sits in.",
    (
        Column("model_name", "string", "the sub-model the layer belongs to"),
        Column("node", "string", "HEAD (embedding), BODY (a transformer layer) or TAIL (final norm, output, loss)"),
        Column("kind", "string", "the layer kind's name: layers of one kind are priced once"),
        KIND_JSON,
        Column("index", "int64", "body layer index within its model; -1 for the HEAD, num_layers for the TAIL"),
        Column("chunk", "int64", "the virtual pipeline chunk (0 without interleaving)"),
        Column("stage", "int64", "the pipeline stage, from 0"),
    ),
)


def walk_to_frame(layer_walk: LayerWalk) -> pd.DataFrame:
    """One row per layer; each distinct kind serialized once."""
    cache: dict[LayerKind, str] = {}
    records = []
    for layer in layer_walk:
        if layer.kind not in cache:
            cache[layer.kind] = kind_json(layer.kind)
        records.append(
            {
                "model_name": layer.model_name,
                "node": layer.node,
                "kind": layer.kind.name,
                "kind_json": cache[layer.kind],
                "index": layer.index,
                "chunk": layer.chunk,
                "stage": layer.stage,
            }
        )
    return LAYER_WALK.frame(records)


def walk_from_frame(frame: pd.DataFrame, stages: int, chunks: int) -> LayerWalk:
    LAYER_WALK.require(frame)
    kinds: dict[str, LayerKind] = {}
    layers = []
    counts = [[0] * stages for _ in range(chunks)]
    for row in frame.itertuples(index=False):
        kind = kinds.get(row.kind_json)
        if kind is None:
            kind = kinds[row.kind_json] = kind_from_dict(json.loads(row.kind_json))
        layers.append(Layer(row.model_name, row.node, kind, int(row.index), int(row.chunk), int(row.stage)))
        if row.node == BODY:
            counts[int(row.chunk)][int(row.stage)] += 1
    return LayerWalk(stages, chunks, tuple(layers), tuple(tuple(r) for r in counts))
