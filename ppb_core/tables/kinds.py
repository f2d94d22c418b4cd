"""A layer kind as a table cell: the kind whole, as JSON, so a stored table rebuilds it exactly."""

from __future__ import annotations

import json

from ppb_core.model.kinds import LayerKind, kind_to_dict
from ppb_core.tables.schema import Column

KIND_JSON = Column("kind_json", "string", "the layer kind whole, as JSON: what rebuilds it exactly", "JSON")


def kind_json(kind: LayerKind) -> str:
    return json.dumps(kind_to_dict(kind), sort_keys=True)
