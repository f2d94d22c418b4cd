"""One call from a problem to everything `ppb balance` prints: the plan, its outputs, the baselines."""

from __future__ import annotations

import time
from typing import Any

from ppb_core.balance.baselines import baselines, best_feasible
from ppb_core.balance.outputs import cells, megatron, stage_rows, to_yaml
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import Solution, solve
from ppb_core.errors import InputError

MAX_INTERLEAVE = 4


def report(solution: Solution) -> dict[str, Any]:
    """The JSON of one solve (the `ppb balance --json` contract the README states)."""
    p = solution.problem
    found = baselines(p)
    best = best_feasible(found)
    out: dict[str, Any] = {
        "input": p.describe(),
        "status": solution.status,
        "objective": solution.objective,
        "objective_kind": solution.objective_kind,
        "bound": solution.bound,
        "gap": solution.gap,
        "seconds": solution.seconds,
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
        out["megatron"] = megatron(plan)
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


def balance(
    problem: BalanceInput, time_limit: float = 90.0, exact: bool = True, search_interleave: bool = False
) -> dict[str, Any]:
    """Solve one problem, or with `search_interleave` every V in 1..4 the sizes allow, keeping the fastest."""
    if not search_interleave:
        return report(solve(problem, time_limit, exact))
    started = time.perf_counter()
    candidates = []
    for chunks in range(1, MAX_INTERLEAVE + 1):
        try:
            candidates.append(problem.with_chunks(chunks))
        except InputError as err:
            candidates.append(err)
    runnable = [c for c in candidates if isinstance(c, BalanceInput)]
    if not runnable:
        raise next(c for c in candidates if isinstance(c, InputError))
    searched: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    for chunks, candidate in enumerate(candidates, start=1):
        if isinstance(candidate, InputError):
            searched.append({"interleave": chunks, "status": "skipped", "message": candidate.problem})
            continue
        share = max(1.0, (time_limit - (time.perf_counter() - started)) / max(1, len(runnable)))
        runnable = runnable[1:]
        result = report(solve(candidate, share, exact))
        searched.append(
            {
                "interleave": chunks,
                "status": result["status"],
                "objective": result["objective"],
                "bound": result["bound"],
                "gap": result["gap"],
                "seconds": result["seconds"],
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
