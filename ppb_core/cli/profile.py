"""`ppb profile RUN.yaml`: what each recompute switch costs each layer kind, and the settings worth offering.

Per model and body kind: the plain layer, each switch alone recomputed, and full recompute, in
MB (per micro-batch in flight, and once) and milliseconds (backward); then the front: the switch
settings no other beats in memory per micro-batch, memory once, backward time, memory at each
count of micro-batches in flight the schedule keeps, and the backward's working set.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from ppb_core.cli.console import table_console
from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError
from ppb_core.estimate.inputs import load_run
from ppb_core.memory import run_in_flight_counts
from ppb_core.model.switches import SWITCHES
from ppb_core.payload.describe import MB
from ppb_core.payload.front import LayerOption, build_front
from ppb_core.payload.profile import Cost, SwitchProfile
from ppb_core.payload.profiling import ProfileKey, profile_run
from ppb_core.units import counted


def _setting(recompute: frozenset[str] | None) -> list[str] | None:
    return None if recompute is None else [name for name in SWITCHES if name in recompute]


def _cost_json(role: str, recompute: frozenset[str] | None, cost: Cost) -> dict[str, Any]:
    return {
        "role": role,
        "recompute": _setting(recompute),
        "memory_per_micro_batch_bytes": cost.memory_per_micro_batch,
        "memory_once_bytes": cost.memory_once,
        "backward_ms": cost.backward_time,
        "excess_bytes": list(cost.excess),
        "working_bytes": cost.working,
        "first_working_bytes": cost.first_working,
        "census_kept_bytes": cost.census_kept,
    }


def _option_json(option: LayerOption) -> dict[str, Any]:
    return {
        "names": list(option.names),
        "recompute": _setting(option.recompute),
        "memory_per_micro_batch_bytes": option.memory_per_micro_batch,
        "memory_once_bytes": option.memory_once,
        "forward_ms": option.forward_time,
        "backward_ms": option.backward_time,
        "excess_bytes": [[count, amount] for count, amount in option.excess],
        "working_extra_bytes": option.working_extra,
        "first_working_extra_bytes": option.first_working_extra,
    }


def _rows(profile: SwitchProfile) -> list[tuple[str, frozenset[str] | None, Cost]]:
    rows: list[tuple[str, frozenset[str] | None, Cost]] = [("plain", frozenset(), profile.plain)]
    rows += [("alone", frozenset({name}), cost) for name, cost in profile.alone.items()]
    rows.append(("full", None, profile.full))
    if profile.selective_base is not None:
        rows.append(("selective_base", frozenset(), profile.selective_base))
    rows += [("whole", recompute, cost) for recompute, cost in profile.whole.items()]
    return rows


def profiles_json(
    run: RunConfig,
    many: int,
    profiles: Mapping[ProfileKey, SwitchProfile],
    fronts: Mapping[ProfileKey, Sequence[LayerOption]],
) -> dict[str, Any]:
    return {
        "run": run.name,
        "many": many,
        "profiles": [
            {
                "model_name": model_name,
                "kind": kind.name,
                "forward_ms": profile.forward_time,
                "counts": list(profile.counts),
                "acting": list(profile.acting()),
                "costs": [_cost_json(role, recompute, cost) for role, recompute, cost in _rows(profile)],
                "front": [_option_json(option) for option in fronts[(model_name, kind)]],
            }
            for (model_name, kind), profile in profiles.items()
        ],
    }


def _mb(value: float) -> str:
    return f"{value / MB:,.1f}"


def _print_tables(run: RunConfig, many: int, profiles, fronts) -> None:

    console = table_console()
    for (model_name, kind), profile in profiles.items():
        table = Table(
            title=f"{run.name} · {model_name} · {kind.name}: switch costs (forward {profile.forward_time:.3f} ms, "
            f"buffers split at {many} in flight)"
        )
        for column in (
            "setting",
            "MB per µ-batch",
            "MB once",
            f"MB at {many}",
            "backward ms",
            "Δ backward ms",
            "working MB",
        ):
            table.add_column(column, justify="left" if column == "setting" else "right")
        for role, recompute, cost in _rows(profile):
            label = {"plain": "plain", "full": "FULL", "selective_base": "selective, all kept"}.get(role)
            if label is None:  # a switch alone, or a setting measured whole
                label = ("" if role == "alone" else "whole: ") + "+".join(_setting(recompute) or [])
            at_many = many * cost.memory_per_micro_batch + cost.memory_once
            table.add_row(
                label,
                _mb(cost.memory_per_micro_batch),
                _mb(cost.memory_once),
                _mb(at_many),
                f"{cost.backward_time:.3f}",
                f"{cost.backward_time - profile.plain.backward_time:+.3f}",
                _mb(cost.working),
            )
        console.print(table)
        front = Table(
            title=f"{model_name} · {kind.name}: front ({counted(len(fronts[(model_name, kind)]), 'setting')})"
        )
        for column in ("option", "recomputes", "MB per µ-batch", "MB once", f"MB at {many}", "backward ms"):
            front.add_column(column, justify="left" if column in ("option", "recomputes") else "right")
        for option in fronts[(model_name, kind)]:
            recomputes = "everything" if option.recompute is None else ", ".join(_setting(option.recompute)) or "-"
            front.add_row(
                ",".join(option.names) or "-",
                recomputes,
                _mb(option.memory_per_micro_batch),
                _mb(option.memory_once),
                _mb(option.memory(many)),
                f"{option.backward_time:.3f}",
            )
        console.print(front)


def run(args: argparse.Namespace) -> int:
    config = load_run(args.run)
    counts = run_in_flight_counts(config)
    if args.most_in_flight is not None and args.most_in_flight < 1:
        raise InputError(None, "--most-in-flight", f"must be at least 1, got {args.most_in_flight}")
    most = args.most_in_flight or max(counts)
    many = max(2, most)  # where profile_run splits the buffers
    profiles = profile_run(config, most_in_flight=most, in_flight=counts)
    fronts = {key: build_front(profile, config.switches(key[0])) for key, profile in profiles.items()}
    if args.json:
        print(json.dumps(profiles_json(config, many, profiles, fronts), indent=2))
    else:
        _print_tables(config, many, profiles, fronts)
    return 0
