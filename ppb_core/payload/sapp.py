"""The SAPP balancer's layer-description files, read and written, and the balancer's typed records.

A description file is `{"layers_description": [...]}`, as mindspore-ai/hyper-parallel's balancer
reads it (`hyper_parallel/auto_parallel/sapp_ppb/utils/layer.py`). Any tool may have
written it, so reading validates every entry and names the file and the entry's field on bad
input. The balancer then works on `LayerRecord`s built with SAPP's fallbacks (`generate_layers_list`): a forward
time defaults to `time`, a considered option's backward time defaults to `(1 + coef)·2·time`,
and an option is considered exactly when its memory key is present.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppb_core import limits
from ppb_core.errors import InputError, shown, shown_key
from ppb_core.io import atomic_write_text, read_json, refuse_foreign
from ppb_core.model.switches import COEF_KEY, DEFAULT_COEF, MEMORY_KEY, OPTIONS, TIME_KEY
from ppb_core.payload.combines import combined_parts

TOP_KEY = "layers_description"
TYPES: tuple[str, ...] = ("HEAD", "BODY", "TAIL")
REQUIRED: tuple[str, ...] = ("name", "type", "nb_layer", "time")
# SAPP's backward time is this multiple of `time` before an option's coefficient applies.
BACKWARD_DEFAULT_RATIO = 2.0

# Keys whose value must be a number when present; null means "absent" (SAPP reads None).
TIME_KEYS: tuple[str, ...] = ("time", "forward_time", *TIME_KEY.values())
MEMORY_KEYS: tuple[str, ...] = ("memory_parameter", *MEMORY_KEY.values())
COEF_KEYS: tuple[str, ...] = tuple(COEF_KEY.values())
NUMBER_KEYS: tuple[str, ...] = (*TIME_KEYS, *MEMORY_KEYS, *COEF_KEYS)
# Every key SAPP reads from an entry (reference §5.1). Other keys are kept as other tools' notes,
# but one that looks like a misspelling of these (`coef_select_rec`) is refused: SAPP would ignore
# it silently and run with the fallback it was meant to override.
KEYS: frozenset[str] = frozenset((*REQUIRED, "model_name", *NUMBER_KEYS))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def misspelt_key(key: str) -> str | None:
    """The key SAPP reads that *key* most likely misspells: the same words in another order or
    case, or a close spelling (difflib's ratio 0.8 or more); None for a key of its own."""
    if len(key) > 64 or key in KEYS:
        return None
    words = sorted(key.lower().replace("-", "_").split("_"))
    same = [known for known in sorted(KEYS) if sorted(known.split("_")) == words]
    if same:
        return same[0]
    near = difflib.get_close_matches(key.lower(), sorted(KEYS), n=1, cutoff=0.8)
    return near[0] if near else None


def validate_descriptions(descriptions: object, source: str | Path | None) -> list[dict[str, Any]]:
    """The entries of a `layers_description` list, each checked; raises InputError naming the field."""
    if not isinstance(descriptions, list):
        raise InputError(source, TOP_KEY, f"must be a list of layer descriptions, got {type(descriptions).__name__}")
    if not descriptions:
        raise InputError(source, TOP_KEY, "is empty: at least one BODY description is needed")
    if len(descriptions) > limits.DESCRIPTIONS:
        raise InputError(source, TOP_KEY, limits.over(len(descriptions), limits.DESCRIPTIONS, "descriptions"))
    checked: list[dict[str, Any]] = []
    for index, entry in enumerate(descriptions):
        where = f"{TOP_KEY}[{index}]"
        if not isinstance(entry, Mapping):
            raise InputError(source, where, f"must be an object, got {shown(entry)}")
        for key in entry:
            if not isinstance(key, str) or key != key.strip() or not key:
                raise InputError(source, f"{where}.{shown(key)}", "key has stray whitespace (or is empty)")
            meant = misspelt_key(key)
            if meant is not None:
                raise InputError(source, f"{where}.{shown_key(key)}", f"unknown key: did you mean {meant}?")
        for key in REQUIRED:
            if key not in entry or entry[key] is None:
                raise InputError(source, f"{where}.{key}", "is required")
        if not isinstance(entry["name"], str) or not entry["name"].strip() or len(entry["name"]) > 256:
            raise InputError(source, f"{where}.name", "must be a non-empty string of at most 256 characters")
        if entry["type"] not in TYPES:
            raise InputError(source, f"{where}.type", f"must be one of {', '.join(TYPES)}, got {shown(entry['type'])}")
        count = entry["nb_layer"]
        if not _is_number(count) or count != int(count) or count < 1:
            raise InputError(source, f"{where}.nb_layer", f"must be a positive integer, got {shown(count)}")
        if count > limits.LAYERS:
            raise InputError(source, f"{where}.nb_layer", limits.over(count, limits.LAYERS, "layers"))
        for key in NUMBER_KEYS:
            if key not in entry or entry[key] is None:
                continue
            value = entry[key]
            if not _is_number(value):
                raise InputError(source, f"{where}.{key}", f"must be a finite number, got {shown(value)}")
            if key in COEF_KEYS:
                if not -1 <= value <= limits.FACTOR:
                    raise InputError(source, f"{where}.{key}", f"must be between -1 and {limits.FACTOR:g}, got {value}")
            elif value < 0:
                raise InputError(source, f"{where}.{key}", f"must not be negative, got {value}")
            elif value > limits.SAPP_NUMBER:
                raise InputError(source, f"{where}.{key}", limits.over(value, limits.SAPP_NUMBER))
        model_name = entry.get("model_name")
        if model_name is not None and (not isinstance(model_name, str) or len(model_name) > 256):
            raise InputError(source, f"{where}.model_name", f"must be a string, got {shown(model_name)}")
        checked.append(dict(entry))
    if not any(entry["type"] == "BODY" for entry in checked):
        raise InputError(source, TOP_KEY, "has no BODY description: there is nothing to balance")
    for node in TYPES:
        layers = sum(int(entry["nb_layer"]) for entry in checked if entry["type"] == node)
        if layers > limits.LAYERS:
            raise InputError(source, TOP_KEY, f"{node} layers in all: " + limits.over(layers, limits.LAYERS, "layers"))
    # Body names identify body types; every sub-model's HEAD and TAIL share theirs (`_ppb.py`'s add_to_ppb_list).
    seen: set[str] = set()
    for index, entry in enumerate(checked):
        if entry["type"] != "BODY":
            continue
        if entry["name"] in seen:
            raise InputError(source, f"{TOP_KEY}[{index}].name", f"{shown(entry['name'])} is used by an earlier BODY")
        seen.add(entry["name"])
    return checked


def read_layers_description(path: str | Path) -> list[dict[str, Any]]:
    """The validated descriptions of a SAPP JSON file (`read_sapp_file` also reads its constant memory)."""
    return read_sapp_file(path)[0]


STAGE_CONST_MEM = "stage_const_mem"


def read_sapp_file(path: str | Path) -> tuple[list[dict[str, Any]], float]:
    """(the validated descriptions, `stage_const_mem`) of a SAPP JSON file.

    `stage_const_mem` is the MB every stage holds besides its layers, written by MindFormers' own
    description builder and read by its balancer as the constant memory of every stage
    (mindspore-lab/mindformers, toolkit/pipeline_balance/utils/config.py `get_stage_const_mem`,
    used by run_pipeline_balance.py as `constant_memory`); 0 when absent. Other top-level keys
    (`name`, `pre_defined_layer`, `auto_partition_layer`) are ignored, as SAPP ignores them.
    """
    document = _read_document(path)
    constant = document.get(STAGE_CONST_MEM, 0)
    if constant is None:
        constant = 0
    if not _is_number(constant) or constant < 0:
        raise InputError(path, STAGE_CONST_MEM, f"must be a non-negative number of MB, got {constant!r}")
    return validate_descriptions(document[TOP_KEY], path), float(constant)


def _read_document(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    refuse_foreign(path, "a run config (.yaml) nor a layers.json")
    document = read_json(path, "is a directory, not a layers description")
    if not isinstance(document, dict):
        raise InputError(path, None, f"must hold a JSON object, got {shown(document)}")
    if TOP_KEY not in document:
        raise InputError(path, TOP_KEY, "is missing")
    return document


def write_layers_description(path: str | Path, descriptions: Sequence[Mapping[str, Any]]) -> None:
    """Write `{"layers_description": [...]}` atomically, each entry's keys in the order given.

    The entries are validated first, so a bad list raises InputError and writes nothing.
    """
    checked = validate_descriptions(list(descriptions), path)
    atomic_write_text(path, json.dumps({TOP_KEY: checked}, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# The balancer's records


@dataclass(frozen=True)
class LayerRecord:
    """One description as the balancer charges it: times and MB per option it may choose.

    `memory_mb[option]` is charged once per micro-batch in flight, `memory_parameter_mb` once
    per layer. `options` holds the considered options only, in OPTIONS order.
    """

    name: str
    type: str
    nb_layer: int
    forward_time: float
    memory_parameter_mb: float
    memory_mb: Mapping[str, float] = field(default_factory=dict)
    backward_time: Mapping[str, float] = field(default_factory=dict)
    model_name: str | None = None
    # The sub-models one of its layers holds a layer of: its own, or a combined body's parts'.
    models: tuple[str, ...] = ()

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(option for option in OPTIONS if option in self.memory_mb)


@dataclass(frozen=True)
class LayerSet:
    """Heads, bodies in pipeline order, tails, and the options every body offers."""

    heads: tuple[LayerRecord, ...]
    bodies: tuple[LayerRecord, ...]
    tails: tuple[LayerRecord, ...]
    options: tuple[str, ...]

    @property
    def nb_body_layers(self) -> int:
        return sum(body.nb_layer for body in self.bodies)

    def head_forward(self) -> float:
        return sum(head.forward_time * head.nb_layer for head in self.heads)

    def head_backward(self) -> float:
        return sum(head.backward_time["NONE"] * head.nb_layer for head in self.heads)

    def tail_forward(self) -> float:
        return sum(tail.forward_time * tail.nb_layer for tail in self.tails)

    def tail_backward(self) -> float:
        return sum(tail.backward_time["NONE"] * tail.nb_layer for tail in self.tails)

    def head_memory_mb(self, in_flight: int) -> float:
        """Head parameters once, and any head activation stated once per micro-batch in flight."""
        return sum((h.memory_parameter_mb + in_flight * h.memory_mb.get("NONE", 0.0)) * h.nb_layer for h in self.heads)

    def tail_memory_mb(self, in_flight: int) -> float:
        return sum((t.memory_parameter_mb + in_flight * t.memory_mb.get("NONE", 0.0)) * t.nb_layer for t in self.tails)


def keep_options(layers: LayerSet, options: Sequence[str]) -> LayerSet:
    """*layers* with every body's options outside *options* withdrawn (what a framework cannot run);
    HEAD and TAIL keep theirs."""
    kept = tuple(option for option in layers.options if option in options)
    if kept == layers.options:
        return layers

    def only(record: LayerRecord) -> LayerRecord:
        return dataclasses.replace(
            record,
            memory_mb={o: v for o, v in record.memory_mb.items() if o in kept},
            backward_time={o: v for o, v in record.backward_time.items() if o in kept},
        )

    return LayerSet(heads=layers.heads, bodies=tuple(only(b) for b in layers.bodies), tails=layers.tails, options=kept)


def _record(entry: Mapping[str, Any], options: Sequence[str]) -> LayerRecord:
    time = float(entry["time"])
    forward = entry.get("forward_time")
    forward_time = time if forward is None else float(forward)
    base_backward = BACKWARD_DEFAULT_RATIO * time
    memory: dict[str, float] = {}
    backward: dict[str, float] = {}
    for option in options:
        stated = entry.get(MEMORY_KEY[option])
        if stated is not None:  # always for a BODY's considered options
            memory[option] = float(stated)
        stated_time = entry.get(TIME_KEY[option])
        if stated_time is None or stated_time == 0:
            coef = entry.get(COEF_KEY[option])
            coef = DEFAULT_COEF[option] if coef is None else float(coef)
            backward[option] = (1.0 + coef) * base_backward
        else:
            backward[option] = float(stated_time)
    return LayerRecord(
        name=entry["name"],
        type=entry["type"],
        nb_layer=int(entry["nb_layer"]),
        forward_time=forward_time,
        memory_parameter_mb=float(entry.get("memory_parameter") or 0.0),
        memory_mb=memory,
        backward_time=backward,
        model_name=entry.get("model_name"),
        models=tuple(model for model, _ in combined_parts(entry)) if entry.get("model_name") is not None else (),
    )


def considered_options(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """The options a description offers: exactly those whose memory key is present (not null)."""
    return tuple(option for option in OPTIONS if entry.get(MEMORY_KEY[option]) is not None)


def layer_set(descriptions: Sequence[Mapping[str, Any]], source: str | Path | None = None) -> LayerSet:
    """The balancer's records, from validated descriptions.

    The options come from the first BODY, and every BODY must offer the same ones (a body
    without an option's memory cannot be charged for it). HEAD and TAIL always run NONE: only
    their `memory_activation`, if stated, is charged per micro-batch in flight, and their
    backward is the stated `backward_time` or twice `time`.
    """
    checked = validate_descriptions(list(descriptions), source)
    bodies_entries = [(i, e) for i, e in enumerate(checked) if e["type"] == "BODY"]
    first_index, first = bodies_entries[0]
    options = considered_options(first)
    if not options:
        raise InputError(
            source,
            f"{TOP_KEY}[{first_index}]",
            f"the first BODY considers no option: no memory key ({', '.join(MEMORY_KEY.values())}) is present",
        )
    for index, entry in bodies_entries[1:]:
        own = considered_options(entry)
        if own != options:
            raise InputError(
                source,
                f"{TOP_KEY}[{index}]",
                f"BODY {shown(entry['name'])} considers {', '.join(own) or 'no option'} "
                f"but the first BODY considers {', '.join(options)}; every BODY must share them",
            )
    heads = tuple(_record(e, ("NONE",)) for e in checked if e["type"] == "HEAD")
    bodies = tuple(_record(e, options) for _, e in bodies_entries)
    tails = tuple(_record(e, ("NONE",)) for e in checked if e["type"] == "TAIL")
    return LayerSet(heads=heads, bodies=bodies, tails=tails, options=options)


def read_layer_set(path: str | Path) -> LayerSet:
    return layer_set(read_layers_description(path), path)
