"""What a combined body stands for: the `combines` key of its description.

`payload.postprocess.combine` writes it ("vit BODY_0 + llm BODY_2": model and description name of
one layer of each part) and the balancer's reader (`payload.sapp`) reads it back to place a plan
sub-model by sub-model. Its own module so that reading it does not make the balancer run, nor its
code version digest, the post-processing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

COMBINES_KEY = "combines"
_PARTS = " + "


def combines_text(parts: Sequence[Mapping[str, Any]]) -> str:
    """The `combines` value of a body combining *parts* (descriptions): "vit BODY_0 + llm BODY_2"."""
    return _PARTS.join(f"{part['model_name']} {part['name']}" for part in parts)


def combined_parts(desc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(model, description name) of each layer one layer of *desc* stands for: its parts if it is combined."""
    stated = desc.get(COMBINES_KEY)
    if not isinstance(stated, str) or not stated:
        return [(str(desc.get("model_name")), str(desc.get("name")))]
    parts = []
    for part in stated.split(_PARTS):
        model, _, name = part.partition(" ")
        parts.append((model, name))
    return parts
