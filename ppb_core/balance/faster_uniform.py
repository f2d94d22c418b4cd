"""The plan is never slower, by the whole iteration, than the uniform split it is compared with.

The balancer minimises the pipeline schedule of the layers; the iteration priced after it
(`timing.iteration.run_iteration`) adds terms that depend on the split too: the optimizer step of the
busiest stage, the data-parallel reduction of the stage holding the head, FSDP's gathers per cell. Where
the schedule does not tell splits apart, the tie-breaking (least recompute, then most headroom,
`tiebreak`) may pick one those terms make slower: a torchtitan PP2 run with one micro-batch, whose
makespan is every stage's work end to end whatever the split, took 17|15 layers for headroom and priced
0.772 s against the uniform 16|16's 0.771 s (the uniform's stage 0 holds one layer less to step).

So when the caller can price a plan's iteration (a run config's `price`), the best feasible uniform
split (`baselines.best_feasible`, the one `ppb balance` prints the gain over) replaces the plan when it
is faster by that price: then the plan printed is the split the gain is stated against, at 1.000×.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ppb_core.balance.baselines import Overrun, baselines, best_feasible
from ppb_core.balance.megatron import Setting
from ppb_core.balance.outputs import cells
from ppb_core.balance.plan import Plan
from ppb_core.balance.program import Solution
from ppb_core.units import TimedNote

# torchtitan's setting that runs every layer under one ppb option (`torchtitan_settings`)
TORCHTITAN_SETTING = {"NONE": "none", "SLCT": "selective", "FULL": "full"}

# a plan's iteration in seconds from its problem's `describe()` and its `outputs.cells`
PriceFn = Callable[[Mapping[str, Any], Sequence[Sequence[Mapping[str, Any]]]], float]


def priced(price: PriceFn, plan: Plan) -> float:
    return price(plan.problem.describe(), cells(plan))


def prefer_uniform(solution: Solution, price: PriceFn, overrun: Overrun | None = None) -> Solution:
    """*solution*, or the same with its plan replaced by the best feasible uniform split when *price*
    (an iteration in seconds) says the uniform split is faster; the note says by how much. *overrun*: what
    the splits' fit is judged by, as `report` judges them (`baselines.Baseline.feasible`)."""
    plan, problem = solution.plan, solution.problem
    if plan is None or solution.stopped_by == "cutoff" or problem.mtp_cell is not None:
        # MTP apart: the uniform split it is compared with is the fused problem's (`mtp_apart`), whose
        # own report made this choice
        return solution
    best = best_feasible(baselines(problem, overrun))
    if best is None or best.plan.counts == plan.counts:
        return solution
    setting = solution.setting
    if problem.framework == "torchtitan":
        if best.option not in TORCHTITAN_SETTING:
            return solution  # not one of torchtitan's settings: it cannot run it
        setting = Setting(TORCHTITAN_SETTING[best.option])
    ours, theirs = priced(price, plan), priced(price, best.plan)
    if not theirs < ours:
        return solution
    value = best.plan.iteration_time if solution.objective_kind == "critical_path" else best.plan.closed_form_time
    bound = solution.bound if solution.bound is not None else value
    note = TimedNote(
        f"the uniform split ({best.option}) is faster by the iteration: {theirs:.6g} s against the plan's "
        f"{ours:.6g} s (schedule {{}} against {{}}); it is the plan",
        value,
        solution.objective,
    )
    return dataclasses.replace(
        solution,
        plan=best.plan,
        objective=value,
        bound=min(bound, value),
        gap=max(0.0, 1 - min(bound, value) / value) if value > 0 else 0.0,
        setting=setting,
        notes=[*solution.notes, note],
    )
