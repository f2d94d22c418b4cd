"""A run config's plan held to the memory model: re-solved while a stage it fills to the last MB overruns.

The balancer charges each stage its descriptions' memory, every term truncated to whole MB as SAPP's
payload builder does (`payload.describe.mb`), and the constant C (`problem.run_problem`). Where the
memory model's peak has no slack beside them (the loss's stage, whose moment is the loss's own working
set, C's largest), a plan filled to the last MB can need a few MB more than the balancer counted, and
`ppb check` would refuse the plan `ppb balance` printed. `fitting_placement` re-evaluates the chosen plan
(*overrun*: `estimate.plan.plan_overrun_mb`, the memory model's stage peaks as `ppb check` prices them)
and, while its fullest stage overruns, charges every stage that many whole MB more and solves again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from ppb_core.balance.baselines import Overrun
from ppb_core.balance.mtp_apart import faster_placement
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.progress import Clock, ProgressHook, Reporter

# Each round adds at least the overrun found, so a few suffice; past them the plan is kept and says so.
ROUNDS = 4


def fitting_placement(
    fused: BalanceInput,
    apart: BalanceInput | None,
    solve: Callable[..., dict[str, Any]],
    overrun: Overrun | None,
    progress: ProgressHook | None = None,
) -> dict[str, Any]:
    """`faster_placement(fused, apart, solve)`, solved again with the constant memory raised by the MB
    the memory model finds the plan's fullest stage over the problem's memory (*overrun* of the result's
    `input` and `cells`), until it fits or `ROUNDS` have run. The MB added are `memory_margin_mb`; a plan
    still over after them carries `overrun_mb`. Without *overrun* (a layers.json, or a constant the user
    gave) the result is `faster_placement`'s.

    Each solve again is a whole solve, its progress from "start" to "done" as the first's: *progress* hears a
    "memory_refit" step before it saying why (a balance of 1,024 layers over P=64, V=8 printed "done" after
    eleven minutes and started again with no word, its plan 1 MB over on one stage)."""
    report = Reporter(progress, Clock())
    result = faster_placement(fused, apart, solve)
    if overrun is None:
        return result
    margin = 0
    for _ in range(ROUNDS + 1):
        cells = result.get("cells")
        if not cells:
            break  # no plan fits: nothing to re-evaluate
        over = overrun(result["input"], cells)
        if over <= 0:
            break
        if _ == ROUNDS:
            result["overrun_mb"] = over
            break
        step = max(1, math.ceil(over))
        margin += step
        report(
            "memory_refit",
            f"the plan's fullest stage needs {over:,.1f} MB more than the balancer counted (the memory model, as "
            f"`ppb check` prices it): solving again with every stage charged {margin:,} MB more (solve {_ + 2} of "
            f"at most {ROUNDS + 1})",
        )
        fused = dataclasses.replace(fused, constant_memory_mb=fused.constant_memory_mb + step)
        if apart is not None:
            apart = dataclasses.replace(apart, constant_memory_mb=apart.constant_memory_mb + step)
        result = faster_placement(fused, apart, solve)
    if margin:
        result["memory_margin_mb"] = margin
    return result
