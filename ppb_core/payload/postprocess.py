"""The three pure steps after describing, in this order: combine, withdraw, scale.

Each is a function of a description list returning a new one: `combine` (bodies of several
sub-models as one, from `run.ppb.combined`), `withdraw` (selective options no body is better off
with), `scale` (times in units of the first body's forward time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ppb_core.dominance import undominated
from ppb_core.errors import InputError
from ppb_core.model.kinds import BODY
from ppb_core.model.switches import (
    MEMORY_KEY,
    OPTIONS,
    SELECTIVE_OPTIONS,
    TIME_KEY,
)
from ppb_core.payload.combines import COMBINES_KEY, combines_text

Groups = Sequence[Sequence[Sequence[str]]]


def combine(
    descriptions: Sequence[Mapping[str, Any]], groups: Groups, source: str | None = None
) -> list[dict[str, Any]]:
    """Bodies of several sub-models described as one, for each group of (model name, node) pairs.

    A combined body stands for one layer of each of its parts: for each group, the first
    description of each (model, node) is taken out of the list, and one BODY named
    `COMBINED_<their names>`, of model `combined_<their models>`, takes the place of the first of
    them. Every memory key and every `*_time` is the sum of one layer of each part, `time` the
    summed forward time (1 without times), and it counts as many layers as each part has: the
    parts must have as many layers each, or the combination would lose (or invent) layers, which
    is refused. Its `combines` key says what it stands for ("vit BODY_0 + llm BODY_2"). A part
    that names nothing listed is refused too. Without groups the list is returned as it is (copied).

    The seed (`ppb_combine_bodies`) counts a combined body once whatever its parts count, so two
    32-layer bodies became one layer; with parts of one layer each the two agree.
    """
    result = [dict(desc) for desc in descriptions]
    for group in groups:
        combined: dict[str, Any] = {
            "model_name": "combined",
            "type": BODY,
            "memory_parameter": 0,
            "memory_activation": 0,
            "memory_recompute": 0,
            "time": 1,
            "nb_layer": 1,
            "name": "COMBINED",
        }
        parts: list[dict[str, Any]] = []
        for model_name, node in group:
            target = next(
                (desc for desc in result if desc.get("model_name") == model_name and desc["type"] == node.upper()), None
            )
            if target is None:
                listed = sorted({f"{d.get('model_name')} {d['type'].lower()}" for d in result})
                raise InputError(
                    source,
                    "ppb.combined",
                    f"nothing to combine as {model_name} {node} (described: {', '.join(listed)})",
                )
            if any(part is target for part in parts):
                raise InputError(source, "ppb.combined", f"{model_name} {node} is named twice in one group")
            parts.append(target)
        counts = {int(part["nb_layer"]) for part in parts}
        if len(counts) > 1:
            stated = " and ".join(f"{p['model_name']} {p['name']} has {p['nb_layer']}" for p in parts)
            lost = sum(int(p["nb_layer"]) for p in parts) - min(counts) * len(parts)
            raise InputError(
                source,
                "ppb.combined",
                f"a combined body stands for one layer of each part, but {stated} layers: {lost} would be lost; "
                "combine parts with as many layers each",
            )
        index = min(next(i for i, desc in enumerate(result) if desc is part) for part in parts)
        for part in parts:
            combined["model_name"] += "_" + part["model_name"]
            combined["name"] += "_" + part["name"]
            for key, value in part.items():
                if key.startswith("memory") or key.endswith("_time"):
                    combined[key] = combined.get(key, 0) + value
        if "forward_time" in combined:
            combined["time"] = combined["forward_time"]
        combined["nb_layer"] = counts.pop()
        combined[COMBINES_KEY] = combines_text(parts)
        result = [desc for desc in result if not any(desc is part for part in parts)]
        result.insert(index, combined)
    return result


def _option_cost(desc: Mapping[str, Any], option: str) -> tuple[Any, Any] | None:
    memory, backward = desc.get(MEMORY_KEY[option]), desc.get(TIME_KEY[option])
    return None if memory is None or backward is None else (memory, backward)


def beaten(desc: Mapping[str, Any], option: str) -> bool:
    """Whether another option of *desc* needs no more memory and no more backward time than *option*.

    Of two options that tie, the one first in OPTIONS wins. An option the description does not
    offer (no memory or no backward time) counts as beaten: there is nothing of it to keep.
    """
    offered = [(other, cost) for other in OPTIONS if (cost := _option_cost(desc, other)) is not None]
    names = [other for other, _ in offered]
    if option not in names:
        return True
    return names.index(option) not in undominated([cost for _, cost in offered])


def withdraw(descriptions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The selective options no body is better off with, withdrawn from every body.

    SLCT, COMM or BOTH goes when, in each body, another option needs no more memory and no more
    backward time; NONE and FULL always stay. Every body keeps the same options, as the
    balancer takes them from the first body. Without bodies, or with a body without times, the
    list is returned as it is (copied).
    """
    result = [dict(desc) for desc in descriptions]
    bodies = [desc for desc in result if desc["type"] == BODY]
    if not bodies or any("backward_time" not in desc for desc in bodies):
        return result
    withdrawn = [name for name in SELECTIVE_OPTIONS if all(beaten(desc, name) for desc in bodies)]
    for desc in bodies:
        for name in withdrawn:
            desc.pop(MEMORY_KEY[name], None)
            desc.pop(TIME_KEY[name], None)
    return result


def time_unit(descriptions: Sequence[Mapping[str, Any]]) -> float | None:
    """What `scale` divides every time by: the forward time of the first body with a non-zero one
    (after `combine`, a combined body's summed forward time), None without a timed body."""
    return next(
        (desc["forward_time"] for desc in descriptions if desc["type"] == BODY and desc.get("forward_time")), None
    )


def scale(descriptions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Times in units of the first body's forward time (the first body that has a non-zero one).

    `time` and every `*_time`, in every description, HEAD and TAIL too. The balancer only
    compares times with one another, and a MILP solver handles numbers near 1 best. Without a
    timed body the list is returned as it is (copied).
    """
    result = [dict(desc) for desc in descriptions]
    unit = time_unit(result)
    if not unit:
        return result
    for desc in result:
        for key in desc:
            if (key == "time" or key.endswith("_time")) and desc[key] is not None:
                desc[key] = desc[key] / unit
    return result


def postprocess(
    descriptions: Sequence[Mapping[str, Any]],
    groups: Groups = (),
    source: str | None = None,
    *,
    withdrawing: bool = True,
) -> list[dict[str, Any]]:
    """Combine, then withdraw on the bodies the balancer will see, then scale. `withdrawing=False`
    keeps every option: a user's plan may use one the balancer would never choose (`ppb check`)."""
    combined = combine(descriptions, groups, source)
    return scale(withdraw(combined) if withdrawing else combined)
