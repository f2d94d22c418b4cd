"""PPB's results as tables (pandas DataFrames) and back, losslessly, so any stage can rerun from stored Parquet.

Three tables, their schemas documented in docs/ppb.md:

* descriptions (`descriptions_to_frame`): one row a layer description, in list order. Every key
  SAPP knows has its own typed column (absent: null); any other key becomes a string column
  holding the value as JSON. `key_order` (the keys in order) and `integer_keys` (those holding
  integers) make the way back exact: the same keys, in the same order, with the same types.
* profiles (`profiles_to_frame`): one row a (model, kind, switch setting) cost: the plain
  layer, each switch alone, full recompute, and the selective base and settings measured whole
  where a census prices the layer. Profile-wide figures repeat on each row. Numbers come back as
  floats.
* fronts (`fronts_to_frame`): one row a setting on a (model, kind)'s recompute front.

Nested figures (excess per count, counts) are JSON text: pandas' list columns do not survive a
Parquet round trip with their dtype.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ppb_core.model.kinds import kind_from_dict
from ppb_core.model.switches import COEF_KEY, MEMORY_KEY, OPTIONS, SWITCHES, TIME_KEY
from ppb_core.payload.front import LayerOption
from ppb_core.payload.profile import Cost, SwitchProfile
from ppb_core.tables.kinds import KIND_JSON, kind_json
from ppb_core.tables.schema import Column, Schema

# --- descriptions --------------------------------------------------------------------------------

STRING_KEYS: tuple[str, ...] = ("model_name", "type", "name")
COUNT_KEYS: tuple[str, ...] = ("nb_layer",)
_MEMORY_TEXT = "memory per micro-batch in flight under {o} (MB, truncated as SAPP's payload builder does)"
_TIME_TEXT = "backward of one micro-batch under {o}, recomputation included (ms; scaled: the first body's forward)"
_COEF_TEXT = "the balancer's backward-time coefficient under {o}, where no time is stated"
KNOWN_KEYS: tuple[Column, ...] = (
    Column("model_name", "string", "the sub-model the description belongs to"),
    Column("type", "string", "HEAD, BODY or TAIL"),
    Column("name", "string", "the description's name (the layer kind, or a combined body's)"),
    Column("nb_layer", "Int64", "identical layers this description stands for", "layers"),
    Column(
        "memory_parameter", "Float64", "memory held whatever the micro-batches in flight: parameters, states (MB)", "MB"
    ),
    *(Column(MEMORY_KEY[o], "Float64", _MEMORY_TEXT.format(o=o), "MB") for o in OPTIONS),
    Column("time", "Float64", "the layer's forward time, as SAPP's older files name it (ms or scaled)"),
    Column("forward_time", "Float64", "forward of one micro-batch (ms; scaled: 1 for the first body)"),
    *(Column(TIME_KEY[o], "Float64", _TIME_TEXT.format(o=o)) for o in OPTIONS),
    *(Column(COEF_KEY[o], "Float64", _COEF_TEXT.format(o=o)) for o in OPTIONS),
)
KEY_ORDER, INTEGER_KEYS = "key_order", "integer_keys"
DESCRIPTIONS = Schema(
    "descriptions",
    "The SAPP layer descriptions, one row each in list order: what the balancer reads.",
    (
        *KNOWN_KEYS,
        Column(KEY_ORDER, "string", "the description's keys in order, to give it back exactly", "JSON"),
        Column(INTEGER_KEYS, "string", "the keys that hold integers, to give them back as integers", "JSON"),
    ),
    more="a description key SAPP does not know, its value as JSON",
)
DESCRIPTION_COLUMNS: dict[str, str] = {c.name: c.dtype for c in KNOWN_KEYS}
NUMBER_KEYS: tuple[str, ...] = tuple(name for name in DESCRIPTION_COLUMNS if name not in (*STRING_KEYS, *COUNT_KEYS))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def descriptions_to_frame(descriptions: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per description; see the module docstring and docs/ppb.md for the columns."""
    extra: list[str] = []
    for desc in descriptions:
        for key in desc:
            if key in (KEY_ORDER, INTEGER_KEYS):
                raise ValueError(f"a description key may not be named {key!r} (the table's own column)")
            if key not in DESCRIPTION_COLUMNS and key not in extra:
                extra.append(key)
    columns: dict[str, list[Any]] = {name: [] for name in (*DESCRIPTION_COLUMNS, *extra, KEY_ORDER, INTEGER_KEYS)}
    for desc in descriptions:
        for name in DESCRIPTION_COLUMNS:
            value = desc.get(name)
            if value is not None and name in STRING_KEYS and not isinstance(value, str):
                raise ValueError(f"description key {name!r} must be a string, got {value!r}")
            if value is not None and name not in STRING_KEYS and not _is_number(value):
                raise ValueError(f"description key {name!r} must be a number, got {value!r}")
            if value is not None and name in COUNT_KEYS and value != int(value):
                raise ValueError(f"description key {name!r} must be a whole number, got {value!r}")
            columns[name].append(value)
        for name in extra:
            columns[name].append(json.dumps(desc[name]) if name in desc else None)
        columns[KEY_ORDER].append(json.dumps(list(desc)))
        columns[INTEGER_KEYS].append(json.dumps([key for key, value in desc.items() if _is_int(value)]))
    dtypes = {**DESCRIPTION_COLUMNS, **dict.fromkeys((*extra, KEY_ORDER, INTEGER_KEYS), "string")}
    return pd.DataFrame({name: pd.array(values, dtype=dtypes[name]) for name, values in columns.items()})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _cell(value: Any) -> Any:
    return None if value is pd.NA or (isinstance(value, float) and math.isnan(value)) else value


def descriptions_from_frame(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The descriptions a `descriptions_to_frame` table holds: same keys, order, values and types."""
    DESCRIPTIONS.require(frame)
    descriptions = []
    for row in frame.to_dict("records"):
        integers = set(json.loads(row[INTEGER_KEYS]))
        desc: dict[str, Any] = {}
        for key in json.loads(row[KEY_ORDER]):
            value = _cell(row[key])
            if key not in DESCRIPTION_COLUMNS:
                value = None if value is None else json.loads(value)
            elif value is not None and key not in STRING_KEYS:
                value = int(value) if key in integers else float(value)
            desc[key] = value
        descriptions.append(desc)
    return descriptions


# --- profiles ------------------------------------------------------------------------------------

_KIND_COLUMNS: tuple[Column, ...] = (
    Column("model_name", "string", "the sub-model"),
    Column("kind", "string", "the layer kind's name, for reading; kind_json rebuilds it exactly"),
    KIND_JSON,
)
PROFILES = Schema(
    "switch_profiles",
    "Per model and body kind, what each recompute switch alone saves and costs: one row per "
    "switch setting priced (the plain layer, each switch alone, full recompute, and settings a "
    "census measured whole). Profile-wide figures repeat on each row.",
    (
        *_KIND_COLUMNS,
        Column("role", "string", "plain | alone (one switch recomputed) | full | selective_base | whole"),
        Column("recompute", "string", "the switches recomputed, comma-separated; null for full recompute"),
        Column("memory_per_micro_batch_bytes", "Float64", "activations kept per micro-batch in flight", "bytes"),
        Column("memory_once_bytes", "Float64", "buffers held once whatever the micro-batches in flight", "bytes"),
        Column("backward_ms", "Float64", "backward of one micro-batch, recomputation included", "ms"),
        Column("excess_bytes", "string", "per count in `counts`, what the linear split over-charges", "JSON"),
        Column("working_bytes", "Float64", "the backward's working set beyond what the stage counts", "bytes"),
        Column("first_working_bytes", "Float64", "the same for the first micro-batch's backward", "bytes"),
        Column("census_kept_bytes", "Float64", "what the layer keeps of a census's parts (0 without one)", "bytes"),
        Column("forward_ms", "Float64", "forward of one micro-batch (the profile's, on every row)", "ms"),
        Column("counts", "string", "the counts of micro-batches in flight the excess is stated at", "JSON"),
        Column("census_held_bytes", "Float64", "what the census says the backward holds at most (null: none)", "bytes"),
    ),
)
PROFILE_COLUMNS: dict[str, str] = PROFILES.dtypes
ROLES: tuple[str, ...] = ("plain", "alone", "full", "selective_base", "whole")


def _setting(recompute: frozenset[str] | None) -> str | None:
    return None if recompute is None else ",".join(name for name in SWITCHES if name in recompute)


def _recompute(text: Any) -> frozenset[str] | None:
    text = _cell(text)
    return None if text is None else frozenset(name for name in text.split(",") if name)


ProfileKey = tuple[str, Any]


def profiles_to_frame(profiles: Mapping[ProfileKey, SwitchProfile]) -> pd.DataFrame:
    """One row per (model, kind, switch setting) cost, profiles in order, each plain, alone…, full, base, whole…."""
    rows: list[dict[str, Any]] = []
    for (model_name, kind), profile in profiles.items():
        shared = {
            "model_name": model_name,
            "kind": kind.name,
            "kind_json": kind_json(kind),
            "forward_ms": profile.forward_time,
            "counts": json.dumps(list(profile.counts)),
            "census_held_bytes": profile.census_held,
        }
        entries: list[tuple[str, frozenset[str] | None, Cost]] = [("plain", frozenset(), profile.plain)]
        entries += [("alone", frozenset({name}), cost) for name, cost in profile.alone.items()]
        entries.append(("full", None, profile.full))
        if profile.selective_base is not None:
            entries.append(("selective_base", frozenset(), profile.selective_base))
        entries += [("whole", recompute, cost) for recompute, cost in profile.whole.items()]
        for role, recompute, cost in entries:
            rows.append(
                {
                    **shared,
                    "role": role,
                    "recompute": _setting(recompute),
                    "memory_per_micro_batch_bytes": cost.memory_per_micro_batch,
                    "memory_once_bytes": cost.memory_once,
                    "backward_ms": cost.backward_time,
                    "excess_bytes": json.dumps([float(x) for x in cost.excess]),
                    "working_bytes": cost.working,
                    "first_working_bytes": cost.first_working,
                    "census_kept_bytes": cost.census_kept,
                }
            )
    return PROFILES.frame(rows)


def _float(value: Any) -> float | None:
    value = _cell(value)
    return None if value is None else float(value)


def profiles_from_frame(frame: pd.DataFrame) -> dict[ProfileKey, SwitchProfile]:
    """The profiles a `profiles_to_frame` table holds, keyed by (model name, kind), in order."""
    PROFILES.require(frame)
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in frame.to_dict("records"):
        grouped.setdefault((row["model_name"], row["kind_json"]), []).append(row)
    kinds: dict[str, Any] = {}
    profiles: dict[ProfileKey, SwitchProfile] = {}
    for (model_name, kind_text), rows in grouped.items():
        kind = kinds.setdefault(kind_text, kind_from_dict(json.loads(kind_text)))
        costs: dict[str, list[tuple[frozenset[str] | None, Cost]]] = {role: [] for role in ROLES}
        for row in rows:
            if row["role"] not in costs:
                raise ValueError(f"unknown profile row role {row['role']!r} (roles: {', '.join(ROLES)})")
            cost = Cost(
                float(row["memory_per_micro_batch_bytes"]),
                float(row["memory_once_bytes"]),
                float(row["backward_ms"]),
                tuple(float(x) for x in json.loads(row["excess_bytes"])),
                float(row["working_bytes"]),
                float(row["first_working_bytes"]),
                float(row["census_kept_bytes"]),
            )
            costs[row["role"]].append((_recompute(row["recompute"]), cost))
        first = rows[0]
        profiles[(model_name, kind)] = SwitchProfile(
            forward_time=float(first["forward_ms"]),
            plain=costs["plain"][0][1],
            alone={next(iter(recompute)): cost for recompute, cost in costs["alone"]},
            full=costs["full"][0][1],
            counts=tuple(int(c) for c in json.loads(first["counts"])),
            selective_base=costs["selective_base"][0][1] if costs["selective_base"] else None,
            whole={recompute: cost for recompute, cost in costs["whole"]},
            census_held=_float(first["census_held_bytes"]),
        )
    return profiles


# --- fronts --------------------------------------------------------------------------------------

FRONTS = Schema(
    "fronts",
    "Per model and body kind, the recompute settings no other beats, one row each in front order.",
    (
        *_KIND_COLUMNS,
        Column("names", "string", "the balancer options the setting is, comma-separated (often none)"),
        Column("recompute", "string", "the switches recomputed, comma-separated; null for full recompute"),
        Column("memory_per_micro_batch_bytes", "Float64", "activations kept per micro-batch in flight", "bytes"),
        Column("memory_once_bytes", "Float64", "buffers held once whatever the micro-batches in flight", "bytes"),
        Column("forward_ms", "Float64", "forward of one micro-batch", "ms"),
        Column("backward_ms", "Float64", "backward of one micro-batch, recomputation included", "ms"),
        Column("excess_bytes", "string", "[count, bytes] where the linear split over-charges", "JSON"),
        Column("working_extra_bytes", "Float64", "the backward's working set beyond what the stage counts", "bytes"),
        Column("first_working_extra_bytes", "Float64", "the same for the first micro-batch's backward", "bytes"),
    ),
)
FRONT_COLUMNS: dict[str, str] = FRONTS.dtypes


def fronts_to_frame(fronts: Mapping[ProfileKey, Sequence[LayerOption]]) -> pd.DataFrame:
    """One row per setting on each (model, kind)'s front, in front order."""
    rows = [
        {
            "model_name": model_name,
            "kind": kind.name,
            "kind_json": kind_json(kind),
            "names": ",".join(option.names),
            "recompute": _setting(option.recompute),
            "memory_per_micro_batch_bytes": option.memory_per_micro_batch,
            "memory_once_bytes": option.memory_once,
            "forward_ms": option.forward_time,
            "backward_ms": option.backward_time,
            "excess_bytes": json.dumps([[count, float(amount)] for count, amount in option.excess]),
            "working_extra_bytes": option.working_extra,
            "first_working_extra_bytes": option.first_working_extra,
        }
        for (model_name, kind), options in fronts.items()
        for option in options
    ]
    return FRONTS.frame(rows)


def fronts_from_frame(frame: pd.DataFrame) -> dict[ProfileKey, list[LayerOption]]:
    FRONTS.require(frame)
    kinds: dict[str, Any] = {}
    fronts: dict[ProfileKey, list[LayerOption]] = {}
    for row in frame.to_dict("records"):
        kind = kinds.setdefault(row["kind_json"], kind_from_dict(json.loads(row["kind_json"])))
        fronts.setdefault((row["model_name"], kind), []).append(
            LayerOption(
                recompute=_recompute(row["recompute"]),
                memory_per_micro_batch=float(row["memory_per_micro_batch_bytes"]),
                memory_once=float(row["memory_once_bytes"]),
                forward_time=float(row["forward_ms"]),
                backward_time=float(row["backward_ms"]),
                names=tuple(name for name in row["names"].split(",") if name),
                excess=tuple((int(count), float(amount)) for count, amount in json.loads(row["excess_bytes"])),
                working_extra=float(row["working_extra_bytes"]),
                first_working_extra=float(row["first_working_extra_bytes"]),
            )
        )
    return fronts


__all__ = [
    "DESCRIPTIONS",
    "DESCRIPTION_COLUMNS",
    "FRONTS",
    "FRONT_COLUMNS",
    "PROFILES",
    "PROFILE_COLUMNS",
    "descriptions_from_frame",
    "descriptions_to_frame",
    "fronts_from_frame",
    "fronts_to_frame",
    "profiles_from_frame",
    "profiles_to_frame",
]
