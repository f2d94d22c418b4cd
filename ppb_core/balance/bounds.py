"""Lower bounds that see what the program's relaxation hides: whole layers, and the schedule's bubble.

The relaxation mixes stage choices, so it spreads layers evenly over the stages; a real plan
holds whole layers and some stage is busier than the average. And the iteration is longer than
the busiest stage's work: the pipeline fills and drains around it.

Both are caught by *path families*: for every stage k a path π_k of the schedule's dependency
graph (any path is at most the critical path, for every plan). Split each π_k into a part U
common to every family member (the least count of each cell outside stage k over the members
whose stage is another) and a rest. The rest on stage k depends on stage k's choice only, the
rest on other stages is at least its count times the least time those cells can take. So for
every plan

    T ≥ U·D + max_k H_k(choice of stage k),   H_k = (π_k − U)|_k · D + (π_k − U)|_{not k} · D_min,

and max_k H_k ≥ L*, the least such maximum over plans that place every layer: found by bisection
over the listed values of H, each step a feasibility program with the choices above the step
removed (a step its work limit cuts short counts as feasible, which keeps L* a lower bound).
The row T − U·D ≥ L* is then valid for every plan and the relaxation cannot spread it away.

Families (each checked against the simulator in tests/test_balance_bounds.py):

* busy: π_k = m times every op of stage k (a stage is busy m·S_k); U = 0, so L* = m·S*.
* drain: the first micro-batch's forward up to stage k, stage k's ops up to its last forward,
  then that micro-batch's forward to the last cell and its backward through every cell.
* nudged: the schedule's critical path when stage k's cells take 1.2 times the others'. For 1F1B
  it is Σ_{s<k} C_s + (m − P + 1 + k)·C_k + 2·Σ_{s>k} C_s: every stage's work at least once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from ppb_core.balance import highs
from ppb_core.balance.choice_model import ChoiceModel, Path, time_unit
from ppb_core.balance.choices import StageChoice
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.progress import Clock, WorkLimits
from ppb_core.schedules import cell_order, simulate, stage_orders

Cell = tuple[str, int, int]  # (kind, chunk, stage)
NUDGE = 1.2  # how much heavier stage k's cells are in the nudged family


def cell_keys(problem: BalanceInput) -> list[Cell]:
    return [(kind, v, s) for kind in ("F", "B") for v in range(problem.chunks) for s in range(problem.stages)]


def choice_time(problem: BalanceInput, stage: int, choice: StageChoice, key: Cell) -> float:
    """A cell's forward or backward time under a stage choice, head and tail included."""
    kind, chunk, _ = key
    cell = choice.cells[chunk]
    return (cell.forward if kind == "F" else cell.backward) + problem.fixed_time(kind, chunk, stage)


def busy_family(problem: BalanceInput) -> list[Path]:
    m = problem.micro_batches
    return [
        {(kind, v, k): float(m) for kind in ("F", "B") for v in range(problem.chunks)} for k in range(problem.stages)
    ]


def drain_family(problem: BalanceInput) -> list[Path]:
    """Per stage k: fill, stage k up to its last forward, then that micro-batch to the end and back."""
    name, P, V, m = problem.schedule_name, problem.stages, problem.chunks, problem.micro_batches
    orders = stage_orders(name, P, V, m, problem.group)
    cells = cell_order(name, P, V)
    position = {cell: i for i, cell in enumerate(cells)}
    family = []
    for k, order in enumerate(orders):
        counts: Counter[Cell] = Counter()
        for v, s in cells[: position[(order[0].chunk, k)]]:
            counts[("F", v, s)] += 1
        last_forward = max(i for i, op in enumerate(order) if op.kind == "F")
        for op in order[: last_forward + 1]:
            counts[(op.kind, op.chunk, k)] += 1
        for v, s in cells[position[(order[last_forward].chunk, k)] + 1 :]:
            counts[("F", v, s)] += 1
        for v, s in reversed(cells):
            counts[("B", v, s)] += 1
        family.append({key: float(n) for key, n in counts.items()})
    return family


def nudged_family(problem: BalanceInput, factor: float = NUDGE) -> list[Path]:
    """Per stage k: the critical path when stage k's cells take `factor` times the others' (F 1, B 2)."""
    name, P, V, m = problem.schedule_name, problem.stages, problem.chunks, problem.micro_batches
    family = []
    for k in range(P):
        forward = [[factor if s == k else 1.0 for s in range(P)] for _ in range(V)]
        backward = [[2.0 * f for f in row] for row in forward]
        timeline = simulate(name, forward, backward, m, group=problem.group)
        family.append({key: float(n) for key, n in timeline.path_counts().items()})
    return family


def least_level(
    problem: BalanceInput,
    choices: list[list[StageChoice]],
    values: list[list[float]],
    tau: float,
    check_work: int,
    clock: Clock,
    upper: float = math.inf,
) -> float:
    """The least λ such that some plan places every layer with every stage's value at most λ
    (`values[s][j]` for stage s's choice j), or a lower bound on it.

    Bisection over the listed values, each step a feasibility program over the choices at most
    the step; a step that its node limit (or the clock) cuts short counts as feasible.
    """
    lowest = max(min(row) for row in values)
    levels = sorted({x for row in values for x in row if lowest * (1 - 1e-12) <= x <= upper * (1 + 1e-12)})
    if not levels:
        return lowest
    low, high = 0, len(levels) - 1  # levels[high] is taken as feasible: the caller's upper bound is a plan's
    if not math.isfinite(upper):
        high = len(levels) - 1
    while low < high:
        middle = (low + high) // 2
        limit = levels[middle] * (1 + 1e-12)
        subset = [
            [c for c, x in zip(stage, row, strict=True) if x <= limit]
            for stage, row in zip(choices, values, strict=True)
        ]
        feasible = True
        if not all(subset):
            feasible = False
        elif clock.remaining > 0:
            model = ChoiceModel(problem, subset, tau)
            solver = highs.new_solver(
                clock.remaining, WorkLimits.nodes(check_work, len(model.columns) + len(model.rows))
            )
            solver.setOptionValue("mip_max_improving_sols", 1)  # any plan proves feasibility
            highs.load(solver, model.columns, model.rows, model.top)
            solver.run()
            feasible = highs.status(solver) != "infeasible"
        if feasible:
            high = middle
        else:
            low = middle + 1
    return levels[low]


def family_row(
    problem: BalanceInput,
    choices: list[list[StageChoice]],
    family: Sequence[Path],
    tau: float,
    check_work: int,
    clock: Clock,
) -> tuple[dict[Cell, float], float]:
    """(U, L*): the row T − U·D ≥ L* that the family proves for every plan (module docstring)."""
    keys = cell_keys(problem)
    stage_of = {key: key[2] for key in keys}
    common = {
        key: min((path.get(key, 0.0) for k, path in enumerate(family) if k != stage_of[key]), default=0.0)
        for key in keys
    }
    least_time = {key: min(choice_time(problem, key[2], choice, key) for choice in choices[key[2]]) for key in keys}
    values = []
    for k, path in enumerate(family):
        elsewhere = sum((path.get(key, 0.0) - common[key]) * least_time[key] for key in keys if stage_of[key] != k)
        own = [key for key in keys if stage_of[key] == k]
        values.append(
            [
                elsewhere + sum((path.get(key, 0.0) - common[key]) * choice_time(problem, k, c, key) for key in own)
                for c in choices[k]
            ]
        )
    return {key: u for key, u in common.items() if u}, least_level(problem, choices, values, tau, check_work, clock)


def stage_work(problem: BalanceInput, stage: int, choice: StageChoice) -> float:
    """Forward + backward of one micro-batch through the stage's cells, head and tail included."""
    return sum(cell.forward + cell.backward for cell in choice.cells) + problem.fixed_work(stage)


def least_max_work(
    problem: BalanceInput,
    choices: list[list[StageChoice]],
    tau: float,
    upper: float,
    check_work: int,
    clock: Clock,
) -> float:
    """A lower bound on the busiest stage's work per micro-batch in every plan that fits (the busy
    family's L* divided by m): layers are whole, so the busiest stage works more than the average."""
    values = [[stage_work(problem, s, c) for c in stage] for s, stage in enumerate(choices)]
    return least_level(problem, choices, values, tau, check_work, clock, upper)


def every_path_bound(problem: BalanceInput, choices: list[list[StageChoice]], clock: Clock) -> float | None:
    """The least T of the program's relaxation (stage choices mixed) with every path of the schedule
    as a row (`ChoiceModel.add_every_path`): no set of path rows, families included, proves more
    without branching. None when the clock ends the solve first. In the descriptions' time unit."""
    tau = time_unit(problem)
    model = ChoiceModel(problem, choices, tau)
    model.add_every_path()
    solver = highs.new_solver(clock.remaining)
    highs.load(solver, [(lower, upper, False) for lower, upper, _ in model.columns], model.rows, model.top)
    solver.run()
    if highs.status(solver) != "optimal":
        return None
    return solver.getInfo().objective_function_value * tau
