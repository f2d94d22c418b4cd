"""Among plans as fast as the best one, the one a user would pick.

Many plans often share the optimum: a stage that is not on the critical path may recompute or
not without changing the iteration. The solver keeps the objective within 1e-6 (relative) of
the best plan's and then, one criterion after the other (each fixed before the next):

1. the least recompute time: Σ over layers of (backward under its option − its least backward), a
   backward faster than NONE's by at most TOLERANCE counted as NONE's (`choices.tied_times`: a
   saving that small is rounding, and NONE must not lose to it);
2. the fewest recomputed layers (an option that costs no time still changes the run);
3. the fewest stages that mix options (one setting per stage is easier to write and check);
4. the most memory headroom: the largest least free memory over the stages.

Each criterion is a sum (or, for 4, a minimum) over the stages' choices, so each is one more
program over the same columns; for the critical path the plans it finds are run through the
schedule and any path longer than the target is added as a row, until a plan keeps the target.
"""

from __future__ import annotations

from collections.abc import Callable

from ppb_core.balance import highs
from ppb_core.balance.choice_model import ChoiceModel
from ppb_core.balance.choices import TOLERANCE, Catalogue, StageChoice, tied_times
from ppb_core.balance.highs import INF
from ppb_core.balance.plan import Plan
from ppb_core.balance.progress import Clock, WorkLimits
from ppb_core.model.switches import OPTIONS
from ppb_core.units import TimedNote

ATTEMPTS = 8  # rounds of path rows per criterion before keeping the plan already held


def least_backward(catalogue: Catalogue) -> list[float]:
    """Per body type, its least backward time over the options considered (near-ties to NONE as NONE's)."""
    considered = catalogue.p.option_indices
    return [min(row[k] for k in considered) for row in catalogue.tied_s]


def _base_option(catalogue: Catalogue) -> int:
    considered = catalogue.p.option_indices
    return OPTIONS.index("NONE") if OPTIONS.index("NONE") in considered else considered[0]


def choice_recompute(catalogue: Catalogue, choice: StageChoice) -> float:
    base = least_backward(catalogue)
    return sum(
        n * (catalogue.tied_s[body][k] - base[body])
        for cell in choice.cells
        for body, row in zip(cell.bodies, cell.counts, strict=True)
        for k, n in enumerate(row)
        if n
    )


def choice_recomputed_layers(catalogue: Catalogue, choice: StageChoice) -> int:
    base = _base_option(catalogue)
    return sum(n for cell in choice.cells for row in cell.counts for k, n in enumerate(row) if k != base)


def choice_mixed(choice: StageChoice) -> int:
    used = {k for cell in choice.cells for row in cell.counts for k, n in enumerate(row) if n}
    return int(len(used) > 1)


def plan_recompute(plan: Plan) -> float:
    """The plan's recompute time: Σ over layers of backward under its option − the type's least
    (`choices.tied_times`: near-ties to NONE as NONE's, as `choice_recompute` counts them)."""
    p = plan.problem
    base = OPTIONS.index("NONE") if "NONE" in p.options else p.option_indices[0]
    total = 0.0
    for body_index, body in enumerate(p.layers.bodies):
        times = tied_times([body.backward_time.get(o, 0.0) for o in OPTIONS], base)
        least = min(times[k] for k in p.option_indices)
        for row in plan.counts[body_index]:
            for cell in row:
                total += sum(n * (times[k] - least) for k, n in enumerate(cell) if n)
    return total


def plan_recomputed_layers(plan: Plan) -> int:
    p = plan.problem
    base = OPTIONS.index("NONE") if "NONE" in p.options else p.option_indices[0]
    return sum(n for body in plan.counts for row in body for cell in row for k, n in enumerate(cell) if k != base)


def plan_mixed_stages(plan: Plan) -> int:
    p = plan.problem
    mixed = 0
    for s in range(p.stages):
        used = {k for v in range(p.chunks) for k, n in enumerate(plan.cell_options(v, s)) if n}
        mixed += len(used) > 1
    return mixed


def plan_headroom_mb(plan: Plan) -> float:
    """The least free memory over the stages."""
    return plan.problem.memory_mb - plan.peak_memory_mb


def tie_key(plan: Plan) -> tuple[float, int, int, float]:
    """What the tie-breaking orders by, smaller first."""
    return (plan_recompute(plan), plan_recomputed_layers(plan), plan_mixed_stages(plan), -plan_headroom_mb(plan))


def break_ties(
    model: ChoiceModel,
    solver: object,
    catalogue: Catalogue,
    best: Plan,
    value: Callable[[Plan], float],
    path_of: Callable[[Plan], dict] | None,
    work: int,
    clock: Clock,
) -> tuple[Plan, list[str]]:
    """The plan that breaks the ties, and what each criterion did.

    *solver* holds *model* and its objective's rows (closed form, or the paths found so far);
    *value* is the objective of a plan; *path_of* its critical path (None for the closed form).
    """
    p = model.p
    tau = model.tau
    nodes = WorkLimits.nodes(work, solver.getNumCol() + solver.getNumRow())  # type: ignore[attr-defined]
    target = value(best) * (1 + TOLERANCE)
    notes: list[str] = []
    solver.changeColBounds(model.top, 0.0, target / tau)  # type: ignore[attr-defined]
    columns = [model.y[s][j] for s, stage in enumerate(model.choices) for j in range(len(stage))]
    zero = [0.0] * len(model.columns)
    criteria = [
        ("recompute time", [choice_recompute(catalogue, c) / tau for stage in model.choices for c in stage]),
        (
            "recomputed layers",
            [float(choice_recomputed_layers(catalogue, c)) for stage in model.choices for c in stage],
        ),
        ("stages mixing options", [float(choice_mixed(c)) for stage in model.choices for c in stage]),
    ]
    for name, costs in criteria:
        if clock.out:
            notes.append(f"tie-break stopped by the time limit before {name}")
            return best, notes
        _set_objective(solver, zero, dict(zip(columns, costs, strict=True)))
        best = _improve(model, solver, best, value, target, path_of, nodes, clock)
        chosen = _costs_of(model, best, columns, costs)
        if chosen is None:
            notes.append(f"tie-break: {name} not fixed (the plan is not among the listed choices)")
            continue
        highs.add_row_upper(solver, dict(zip(columns, costs, strict=True)), chosen + 1e-9 + 1e-9 * abs(chosen))
        if name == "recompute time":
            notes.append(TimedNote("tie-break: recompute time {}", chosen * tau))
        else:
            notes.append(f"tie-break: {name} {chosen:.6g}")
    # the most headroom: Z ≤ Σ_j y[s, j]·(M − memory of choice j)/M for every stage; maximise Z
    if not clock.out:
        z = solver.getNumCol()  # type: ignore[attr-defined]
        highs.add_column(solver, 0.0, INF)
        for s, stage in enumerate(model.choices):
            terms = {z: -1.0}
            for j, choice in enumerate(stage):
                terms[model.y[s][j]] = (p.memory_mb - catalogue.stage_memory(s, choice.cells)) / p.memory_mb
            highs.add_row(solver, 0.0, terms)
        _set_objective(solver, [*zero, 0.0], {z: -1.0})
        before = plan_headroom_mb(best)
        best = _improve(model, solver, best, value, target, path_of, nodes, clock, extra=[0.0])
        notes.append(f"tie-break: headroom {plan_headroom_mb(best):.6g} MB (was {before:.6g})")
    return best, notes


def _set_objective(solver: object, zero: list[float], costs: dict[int, float]) -> None:
    values = list(zero)
    for column, cost in costs.items():
        values[column] = cost
    solver.changeColsCost(len(values), list(range(len(values))), values)  # type: ignore[attr-defined]


def _costs_of(model: ChoiceModel, plan: Plan, columns: list[int], costs: list[float]) -> float | None:
    values = model.assignment(plan, 0.0)
    if values is None:
        return None
    return sum(cost for column, cost in zip(columns, costs, strict=True) if values[column] > 0.5)


def _improve(
    model: ChoiceModel,
    solver: object,
    best: Plan,
    value: Callable[[Plan], float],
    target: float,
    path_of: Callable[[Plan], dict] | None,
    nodes: int,
    clock: Clock,
    extra: list[float] | None = None,
) -> Plan:
    """Solve the current objective from *best*; keep the plan found if it keeps the target."""
    solver.setOptionValue("mip_max_nodes", nodes)  # type: ignore[attr-defined]
    for _ in range(ATTEMPTS):
        if clock.out:
            return best
        seed = model.assignment(best, min(value(best), target) / model.tau)
        if seed is not None:
            highs.seed(solver, [*seed, *(extra or [])])  # type: ignore[arg-type]
        solver.setOptionValue("time_limit", max(0.01, clock.remaining))  # type: ignore[attr-defined]
        solver.run()  # type: ignore[attr-defined]
        if not highs.has_solution(solver):  # type: ignore[arg-type]
            return best
        values = list(solver.getSolution().col_value)  # type: ignore[attr-defined]
        plan = model.plan(values)
        if plan.counts == best.counts:
            return best
        if value(plan) <= target and plan.fits and not plan.problems():
            return plan
        if path_of is None:
            return best
        highs.add_row(solver, 0.0, model.path_terms(path_of(plan)))  # type: ignore[arg-type]
    return best
