"""The balancer: an exact integer program over (chunk, stage) cells, plans users can paste, a schedule simulator.

`balance(problem)` solves and reports; `solve(problem)` returns the `Solution` alone; `Plan` is a
plan with its exact evaluation; `BalanceInput` the problem.
"""

from ppb_core.balance.plan import Plan
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import Solution, solve
from ppb_core.balance.progress import Progress, ProgressHook, WorkLimits, log_lines
from ppb_core.balance.result import balance, report

__all__ = [
    "BalanceInput",
    "Plan",
    "Progress",
    "ProgressHook",
    "Solution",
    "WorkLimits",
    "balance",
    "log_lines",
    "report",
    "solve",
]
