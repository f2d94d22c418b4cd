"""One call from a problem to everything `ppb balance` prints: the plan, its outputs, the baselines."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ppb_core.balance.baselines import Overrun, baselines, best_feasible
from ppb_core.balance.faster_uniform import PriceFn, prefer_uniform
from ppb_core.balance.megatron import quoted
from ppb_core.balance.outputs import cells, group_flags, megatron, stage_rows, to_yaml, virtual_stages
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import Solution, solve
from ppb_core.balance.progress import Clock, ProgressHook, WorkLimits
from ppb_core.balance.tiebreak import plan_headroom_mb, plan_mixed_stages, plan_recompute, plan_recomputed_layers
from ppb_core.config.layout import format_layout
from ppb_core.errors import InputError
from ppb_core.units import TimedNote

MAX_INTERLEAVE = 4


def report(
    solution: Solution,
    modules: Sequence[str] | None = None,
    price: PriceFn | None = None,
    overrun: Overrun | None = None,
) -> dict[str, Any]:
    """The JSON of one solve (the `ppb balance --json` contract the README states, extended).

    *price*: a plan's iteration in seconds (a run config's, `estimate.plan.iteration_price`); with it the
    best uniform split replaces a plan it beats by the iteration (`faster_uniform.prefer_uniform`).
    *overrun*: the memory model's overrun (`estimate.plan.plan_overrun_mb`) the plan is held to
    (`balance.fitting`); with it the uniform splits fit by it too, the best of them chosen among those.

    Results only: the wall-clock seconds the solve took (`solution.seconds`) are not among them, so the
    same input gives the same bytes on every run; a person reads them in the progress on stderr and in
    `ppb balance`'s text summary."""
    if price is not None:
        solution = prefer_uniform(solution, price, overrun)
    p = solution.problem
    found = baselines(p, overrun)
    best = best_feasible(found)
    out: dict[str, Any] = {
        "input": p.describe(),
        "status": solution.status,
        "stopped_by": solution.stopped_by,
        "objective": solution.objective,
        "objective_kind": solution.objective_kind,
        "bound": solution.bound,
        "gap": solution.gap,
    }
    if solution.message:
        out["message"] = solution.message
    if solution.min_memory_mb is not None:
        out["min_memory_mb"] = solution.min_memory_mb
    plan = solution.plan
    if plan is not None:
        out["simulated_time"] = plan.iteration_time
        out["closed_form"] = {
            "value": plan.closed_form_time,
            "optimum": solution.closed_form_optimum,
            "status": solution.closed_form_status,
        }
        out["cells"] = cells(plan)
        out.update(to_yaml(plan))
        rows = stage_rows(plan)
        out["stages"] = rows
        out["stage_memory_mb"] = [row["memory_mb"] for row in rows]
        out["stage_time"] = [row["time"] for row in rows]
        out["peak_memory_mb"] = plan.peak_memory_mb
        out["ties"] = {
            "recompute_time": plan_recompute(plan),
            "recomputed_layers": plan_recomputed_layers(plan),
            "stages_mixing_options": plan_mixed_stages(plan),
            "headroom_mb": plan_headroom_mb(plan),
        }
        out["megatron"] = megatron(plan, modules)
        if solution.setting is not None:  # the framework's one setting the plan runs under (torchtitan's)
            out["recompute_setting"] = {
                "name": solution.setting.name,
                "num_layers": solution.setting.num_layers,
                "description": solution.setting.describe(),
            }
        if solution.megatron_plan is not None and solution.megatron_setting is not None:
            alternative = solution.megatron_plan
            layout = format_layout(virtual_stages(alternative))
            value = solution.megatron_objective or alternative.iteration_time
            out["megatron"]["alternative"] = {
                "setting": solution.megatron_setting.describe(),
                "layout": layout,
                "flags": quoted(
                    [
                        "--pipeline-model-parallel-layout",
                        layout,
                        *group_flags(p),  # the group it was timed at, as the plan's own flags say it
                        *solution.megatron_setting.flags(modules),
                    ]
                ),
                "objective": value,
                "status": solution.megatron_status,
                "slower_by": value / plan.iteration_time - 1 if plan.iteration_time > 0 else None,
                "peak_memory_mb": alternative.peak_memory_mb,
                # its cells, so a run config's check and balance price what Megatron-LM runs in seconds
                "cells": cells(alternative),
                "mtp_cell": out["input"].get("mtp_cell"),
            }
        said = out["megatron"]
        if said.get("flags"):
            said["flags_of"] = "plan"
        elif "alternative" in said:
            # what a user pastes comes first and runs as it stands: the fastest plan Megatron-Core can
            # say, whole (layout and recompute); the plan's own layout alone (`layout_only`) runs no
            # recompute and may not fit
            said["flags"], said["flags_of"] = said["alternative"]["flags"], "alternative"
        if said.get("layout") and not said.get("recompute_expressible") and "alternative" not in said:
            # why no plan Megatron-Core can say stands beside it: its flags carry the layout alone
            why = [_after(note, ": ") for note in solution.notes if note.startswith("Megatron-Core's settings:")]
            if why:
                said["no_alternative"] = why[-1]
    if plan is not None:
        out["timeline"] = {"plan": plan.timeline_json()}
        if best is not None:
            out["timeline"]["baseline"] = {**best.plan.timeline_json(), "option": best.option}
    out["baselines"] = [b.to_dict() for b in found]
    out["best_baseline"] = best.option if best else None
    out["speedup"] = (
        best.iteration_time / plan.iteration_time
        if best is not None and plan is not None and plan.iteration_time > 0
        else None
    )
    out["solver"] = {
        "rounds": solution.rounds,
        "paths": solution.paths,
        "stage_choices": solution.choices,
        "notes": solution.notes,
    }
    return out


def _after(note: str, separator: str) -> str:
    """A note from the first *separator* on, its times kept apart where it has any (`TimedNote.after`)."""
    return note.after(separator) if isinstance(note, TimedNote) else note.split(separator, 1)[1]


def balance(
    problem: BalanceInput,
    time_limit: float | None = None,
    exact: bool = True,
    search_interleave: bool = False,
    progress: ProgressHook | None = None,
    modules: Sequence[str] | None = None,
    limits: WorkLimits | None = None,
    cutoff: float = math.inf,
    megatron_cutoff: float = math.inf,
    price: PriceFn | None = None,
    overrun: Overrun | None = None,
) -> dict[str, Any]:
    """Solve one problem, or with `search_interleave` every V in 1..4 the sizes allow, keeping the fastest.

    Every V gets the same work limits and what is left of the time limit, so which V wins does
    not depend on the clock unless the clock stops a solve (its `stopped_by` then says so).
    *cutoff* and *megatron_cutoff*: as `program.solve` takes them; *price* and *overrun*: as `report` takes them.
    """
    cuts = {"cutoff": cutoff, "megatron_cutoff": megatron_cutoff}
    if not search_interleave:
        return report(solve(problem, time_limit, exact, progress, limits, modules, **cuts), modules, price, overrun)
    clock = Clock(time_limit)
    candidates = []
    for chunks in range(1, MAX_INTERLEAVE + 1):
        try:
            candidates.append(problem.with_chunks(chunks))
        except InputError as err:
            candidates.append(err)
    if not any(isinstance(c, BalanceInput) for c in candidates):
        raise next(c for c in candidates if isinstance(c, InputError))
    searched: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    for chunks, candidate in enumerate(candidates, start=1):
        if isinstance(candidate, InputError):
            searched.append({"interleave": chunks, "status": "skipped", "message": candidate.problem})
            continue
        if clock.out:
            searched.append({"interleave": chunks, "status": "skipped", "message": "the time limit ran out"})
            continue
        result = report(
            solve(candidate, clock.remaining, exact, progress, limits, modules, **cuts), modules, price, overrun
        )
        searched.append(
            {
                "interleave": chunks,
                # proven no faster than *cutoff* (another MTP placement's plan, `mtp_apart`)
                "status": "no_faster" if result["stopped_by"] == "cutoff" else result["status"],
                "stopped_by": result["stopped_by"],
                "objective": result["objective"],
                "bound": result["bound"],
                "gap": result["gap"],
                "speedup": result["speedup"],
                **({"message": result["message"]} if "message" in result else {}),
            }
        )
        better = result["objective"] is not None and (
            best is None or best["objective"] is None or result["objective"] < best["objective"]
        )
        if best is None or better:
            best = result
    assert best is not None
    best["interleave_search"] = searched
    return best
