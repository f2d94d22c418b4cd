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

    A combined body stands for one layer of each of its parts: a part is the first description of
    its (model, node) and every later one of that model equal to it but for its name and count
    (the same layers, split by others in model order: Qwen2.5-VL's window blocks between its
    full-attention ones). The parts are taken out of the list, and BODYs named `COMBINED_<their
    names>`, of model `combined_<their models>`, take the places of the part listed first, one per
    description of it with its count: the k-th combined layer is the k-th layer of each part, so
    every sub-model's layers stay in model order along the pipeline (`model.placement` places them
    so). Every memory key and every `*_time` is the sum of one layer of each part, `time` the
    summed forward time (1 without times). The parts must have as many layers each, or the
    combination would lose (or invent) layers, which is refused. Its `combines` key says what it
    stands for ("vit BODY_0 + llm BODY_2"). A part that names nothing listed is refused too.
    Without groups the list is returned as it is (copied).

    The seed (`ppb_combine_bodies`) counts a combined body once whatever its parts count, so two
    32-layer bodies became one layer; with parts of one layer each the two agree.
    """
    result = [dict(desc) for desc in descriptions]
    for group in groups:
        parts: list[list[dict[str, Any]]] = []  # each part's descriptions, in list order
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
            if any(desc is target for part in parts for desc in part):
                raise InputError(source, "ppb.combined", f"{model_name} {node} is named twice in one group")
            parts.append([desc for desc in result if desc is target or _same_layers(desc, target)])
        firsts = [part[0] for part in parts]
        counts = [sum(int(desc["nb_layer"]) for desc in part) for part in parts]
        if len(set(counts)) > 1:
            stated = " and ".join(f"{p['model_name']} {p['name']} has {n}" for p, n in zip(firsts, counts, strict=True))
            lost = sum(counts) - min(counts) * len(parts)
            raise InputError(
                source,
                "ppb.combined",
                f"a combined body stands for one layer of each part, but {stated} layers: {lost} would be lost; "
                "combine parts with as many layers each",
            )
        combined: dict[str, Any] = {
            "model_name": "combined",
            "type": BODY,
            "memory_parameter": 0,
            "memory_activation": 0,
            "memory_recompute": 0,
            "time": 1,
            "nb_layer": 1,
        }
        for first in firsts:
            combined["model_name"] += "_" + first["model_name"]
            for key, value in first.items():
                if key.startswith("memory") or key.endswith("_time"):
                    combined[key] = combined.get(key, 0) + value
        if "forward_time" in combined:
            combined["time"] = combined["forward_time"]
        position = {id(desc): i for i, desc in enumerate(result)}
        anchor = min(range(len(parts)), key=lambda k: position[id(firsts[k])])
        placed: dict[int, dict[str, Any]] = {}
        for desc in parts[anchor]:
            named = [desc if k == anchor else first for k, first in enumerate(firsts)]
            placed[id(desc)] = dict(
                combined,
                name="COMBINED_" + "_".join(part["name"] for part in named),
                nb_layer=int(desc["nb_layer"]),
                **{COMBINES_KEY: combines_text(named)},
            )
        taken = {id(desc) for part in parts for desc in part}
        result = [placed.get(id(desc), desc) for desc in result if id(desc) in placed or id(desc) not in taken]
    return result


def _same_layers(desc: Mapping[str, Any], first: Mapping[str, Any]) -> bool:
    """Whether *desc* describes the layers *first* does (of its model), but for its name and count."""
    ignored = ("name", "nb_layer")
    return desc.get("model_name") == first.get("model_name") and {
        k: v for k, v in desc.items() if k not in ignored
    } == {k: v for k, v in first.items() if k not in ignored}


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
    descriptions: Sequence[Mapping[str, Any]], groups: Groups = (), source: str | None = None
) -> list[dict[str, Any]]:
    """Combine, then withdraw on the bodies the balancer will see, then scale."""
    return scale(withdraw(combine(descriptions, groups, source)))
