"""Where the MTP layers run: with the loss (one TAIL), or apart on the rank before it (Megatron-Core's
standalone MTP), each solved and the faster plan kept.

Megatron-Core's layout places the MTP layers `m` in one virtual stage, a rank's last, after every
decoder layer, and the loss `L` last (`PipelineParallelLayerLayout.validate_layer_layout`, Megatron-LM
d98e8a64; `config.layout.validate_layout`). So `m` sits in the last chunk of some rank p: p = P − 1
is `mL` together (the balancer's one TAIL, its cell empty of decoder layers or not); p < P − 1 runs
standalone (`mtp_standalone`), and the last-chunk cells of ranks p + 1 .. P − 1 hold no decoder
layer. Only p = P − 2 is solved beside p = P − 1: DeepSeek-V3's own recipe (`...,m|L`), the loss
alone on the last rank. Below it a whole virtual stage between `m` and `L` runs nothing at all; those
placements are not searched (the JSON's `mtp_placement` says so).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from ppb_core.balance.outputs import not_megatrons
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.stage_workspace import stage_workspace
from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError
from ppb_core.payload.describe import MTP_APART_NAME
from ppb_core.payload.run import describe_run
from ppb_core.payload.sapp import layer_set
from ppb_core.payload.sources import MemorySource, TimeSource

NOT_SEARCHED = "m on a rank before P - 2 (a whole virtual stage between m and L holding no layer) is not searched"


def standalone_problem(
    run: RunConfig,
    problem: BalanceInput,
    withdrawing: bool = True,
    memory: MemorySource | None = None,
    times: TimeSource | None = None,
) -> BalanceInput | None:
    """*problem* (a run config's, one TAIL) with the MTP layers apart on rank P − 2's last chunk and
    the loss alone on rank P − 1's, or None where Megatron-Core cannot run that: no MTP layers, not
    Megatron, DualPipeV or several models, fewer than two stages, or too few layers for the cells.
    *withdrawing*, *memory*, *times*: as `describe_run` takes them (`ppb check` keeps every option;
    the search passes the models it priced the fused problem with)."""
    if not problem.mtp_layers or problem.framework != "megatron" or problem.stages < 2 or not_megatrons(problem):
        return None
    described = describe_run(run, memory, times, mtp_apart=True, withdrawing=withdrawing)
    layers = layer_set(described, run.source)
    apart = tuple(t for t in layers.tails if t.name == MTP_APART_NAME)
    kept = dataclasses.replace(layers, tails=tuple(t for t in layers.tails if t.name != MTP_APART_NAME))
    # the ends' workspaces as the split TAIL carries them (the user's constant, if given, stays the whole charge)
    workspace = None if problem.workspace is None else stage_workspace(run, kept.bodies, apart=True)
    try:
        return dataclasses.replace(
            problem,
            layers=kept,
            mtp_cell=(problem.chunks - 1, problem.stages - 2),
            mtp_apart=apart,
            workspace=workspace,
        )
    except InputError:
        return None


def _placement(result: dict[str, Any], apart: bool) -> dict[str, Any]:
    no_faster = result.get("stopped_by") == "cutoff"
    return {
        "mtp": "apart" if apart else "with_loss",
        "layout": None if no_faster else (result.get("megatron") or {}).get("layout"),
        "status": "no_faster" if no_faster else result["status"],
        "objective": None if no_faster else result.get("objective"),
        "bound": result.get("bound"),
        "gap": None if no_faster else result.get("gap"),
        "stopped_by": result.get("stopped_by"),
        **({"message": result["message"]} if "message" in result else {}),
    }


def _runnable(result: dict[str, Any]) -> tuple[float, dict[str, Any]] | None:
    """(objective, the fastest plan Megatron-LM can say as an `alternative` entry) of a result, or None."""
    said = result.get("megatron") or {}
    if said.get("flags_of") == "plan" and result.get("objective") is not None:
        return result["objective"], {
            "setting": said.get("setting"),
            "layout": said["layout"],
            "flags": said["flags"],
            "objective": result["objective"],
            "status": result["status"],
            "peak_memory_mb": result.get("peak_memory_mb"),
            "cells": result.get("cells"),
            "mtp_cell": result.get("input", {}).get("mtp_cell"),
        }
    alternative = said.get("alternative")
    if alternative is not None and alternative.get("objective") is not None:
        return alternative["objective"], dict(alternative)
    return None


def faster_placement(
    fused: BalanceInput, apart: BalanceInput | None, solve: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    """*solve* (`result.balance` with its options, taking `cutoff` and `megatron_cutoff`) on each
    placement; the faster plan's result, every placement listed under `mtp_placement`, with the
    uniform baselines of the run's own split (the fused problem's: the split `ppb estimate` prices).

    The apart placement's solve is cut off at the fused plan's time (a tie keeps the MTP layers
    with the loss) and its Megatron-Core settings at the fused placement's fastest plan Megatron-LM
    can say; the flags printed are the fastest plan Megatron-LM can say over both placements.
    When no plan fits with the loss, the apart one is solved in full and taken if a plan fits there.
    Without *apart* the fused result is returned as it is."""
    result = solve(fused, cutoff=math.inf, megatron_cutoff=math.inf)
    if apart is None:
        return result
    first = result.get("objective")  # None: no plan fits with the loss; apart may (another stage's memory)
    runnable = _runnable(result)
    other = solve(
        apart,
        cutoff=math.inf if first is None else first,
        megatron_cutoff=runnable[0] if runnable else math.inf,
    )
    better = (
        other.get("stopped_by") != "cutoff"
        and other.get("objective") is not None
        and (first is None or other["objective"] < first)
    )
    chosen, beside = (other, result) if better else (result, other)
    if better:
        for key in ("baselines", "best_baseline"):
            chosen[key] = result[key]
        baseline = (result.get("timeline") or {}).get("baseline")
        if baseline is not None and "timeline" in chosen:
            chosen["timeline"]["baseline"] = baseline
        best = next((b for b in result["baselines"] if b["option"] == result["best_baseline"]), None)
        simulated = chosen.get("simulated_time")
        chosen["speedup"] = best["iteration_time"] / simulated if best is not None and simulated else None
    _fastest_flags(chosen, beside)
    rows = [{**_placement(result, False), "chosen": not better}, {**_placement(other, True), "chosen": better}]
    chosen["mtp_placement"] = rows
    chosen["mtp_placement_note"] = NOT_SEARCHED
    chosen["mtp_placement_bound"], chosen["mtp_placement_gap"] = _bound_over(rows, first, chosen)
    return chosen


def _bound_over(
    rows: list[dict[str, Any]], first: float | None, chosen: dict[str, Any]
) -> tuple[float | None, float | None]:
    """The least iteration any plan of either placement can have, as proven, and the chosen plan's gap to
    it: the answer is proven optimal over both placements only when each solve proved its part (a
    placement cut off is proven no faster than *first*, the first placement's plan; one where no plan
    fits has none to be faster)."""
    proven = {"no_faster": first, "infeasible": math.inf}
    bounds = [proven.get(row["status"], row["bound"]) for row in rows]
    objective = chosen["objective"]
    if any(bound is None for bound in bounds) or not objective:
        return None, None
    bound = min(objective, *bounds)
    return bound, max(0.0, (objective - bound) / objective)


def _fastest_flags(chosen: dict[str, Any], beside: dict[str, Any]) -> None:
    """When the chosen plan's recompute is not Megatron's to say and the other placement has a faster
    plan Megatron-LM can say, that one becomes the `alternative` whose flags are printed first."""
    said = chosen.get("megatron") or {}
    if said.get("flags_of") == "plan" or beside.get("stopped_by") == "cutoff":
        return
    own, other = _runnable(chosen), _runnable(beside)
    if other is None or (own is not None and own[0] <= other[0]):
        return
    value, alternative = other
    plan_value = chosen.get("simulated_time") or chosen.get("objective")
    alternative["slower_by"] = value / plan_value - 1 if plan_value else None
    alternative["mtp"] = "with_loss" if chosen.get("input", {}).get("mtp_cell") else "apart"
    said["alternative"] = alternative
    said["flags"], said["flags_of"] = alternative["flags"], "alternative"
    said.pop("no_alternative", None)
