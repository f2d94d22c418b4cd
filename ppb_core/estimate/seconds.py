"""A balancer result in seconds: what `ppb balance RUN.yaml`, the chain's plan and the search give.

The balancer works in its descriptions' unit (the first body layer's forward time once scaled);
a person reads seconds. From a run config that unit is known (`plan.time_unit_s`), so every
time of the result is given in seconds under a `_s` key, and only the SAPP descriptions (and
`objective`, which the `ppb balance --json` contract states in their unit) keep the relative unit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.estimate.plan import plan_iterations, time_unit_s
from ppb_core.units import note_in_seconds

# Every time a result carries, in the descriptions' unit: the key, and where it sits.
# `in_seconds` renames each to `<key>_s`; `objective` stays as well (the `ppb balance --json`
# contract states it in the descriptions' unit), `objective_s` beside it.
TOP_TIMES: tuple[str, ...] = ("bound", "simulated_time", "stage_time", "mtp_placement_bound")
NESTED_TIMES: dict[str, tuple[str, ...]] = {
    "closed_form": ("value", "optimum"),
    "ties": ("recompute_time",),
}
ROW_TIMES: dict[str, tuple[str, ...]] = {
    "stages": ("time",),
    "baselines": ("iteration_time",),
    "interleave_search": ("objective", "bound"),
    "mtp_placement": ("objective", "bound"),
}
TIMELINE_TIMES: tuple[str, ...] = ("forward", "backward", "recompute", "iteration")


def _scaled(value: Any, unit_s: float) -> Any:
    """A time, or lists of times, in seconds; None stays None."""
    if isinstance(value, list):
        return [_scaled(v, unit_s) for v in value]
    return None if value is None else float(value) * unit_s


def _renamed(entry: dict[str, Any], keys: Sequence[str], unit_s: float) -> dict[str, Any]:
    """*entry* with each of *keys* as `<key>_s` in seconds, in its place."""
    return {f"{k}_s" if k in keys else k: _scaled(v, unit_s) if k in keys else v for k, v in entry.items()}


def in_seconds(result: dict[str, Any], unit_s: float) -> dict[str, Any]:
    """A `balance` result with every time in seconds, the unit in the key (`stages[].time_s`,
    `simulated_time_s`, ...), for a run whose descriptions' unit (the first body's forward time)
    is *unit_s* seconds. Only `objective` keeps the descriptions' unit (with `objective_s` beside
    it); `time_unit_s` relates it, and the SAPP descriptions the plan was solved from, to seconds.
    """
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key in TOP_TIMES:
            out[f"{key}_s"] = _scaled(value, unit_s)
        elif key in NESTED_TIMES:
            out[key] = _renamed(value, NESTED_TIMES[key], unit_s)
        elif key in ROW_TIMES:
            out[key] = [_renamed(row, ROW_TIMES[key], unit_s) for row in value]
        elif key == "timeline":
            out[key] = {name: _renamed(run, TIMELINE_TIMES, unit_s) for name, run in value.items()}
        elif key in ("megatron", "torchtitan") and ("alternative" in value or "no_alternative" in value):
            out[key] = dict(value)
            if "alternative" in value:
                out[key]["alternative"] = _renamed(value["alternative"], ("objective",), unit_s)
            if "no_alternative" in value:
                out[key]["no_alternative"] = note_in_seconds(value["no_alternative"], unit_s)
        elif key == "solver" and value.get("notes"):
            # the solver's notes with their times in seconds (`units.TimedNote`): "bound 2.1596 s", not
            # "bound 466.17", the balancer's relative unit (until session 30)
            out[key] = {**value, "notes": [note_in_seconds(note, unit_s) for note in value["notes"]]}
        else:
            out[key] = value
        if key == "objective":
            out["objective_s"] = _scaled(value, unit_s)
    out["time_unit_s"] = unit_s
    return out


def plan_in_seconds(run: RunConfig, result: Mapping[str, Any]) -> dict[str, Any]:
    """A `balance` result for *run* as people read it: every time in seconds (`in_seconds`, the
    descriptions' unit from `time_unit_s`) and, when a plan was found, its iteration and its best
    uniform split's priced by the time model (`plan_iterations`)."""
    out = in_seconds(dict(result), time_unit_s(run, result.get("input", {})))
    if result.get("status") != "infeasible":
        out.update(plan_iterations(run, result))
    return out
