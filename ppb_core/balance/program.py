"""The balancer's integer program, solved with HiGHS (docs/balance.md writes it down in full).

Columns: y[s, j] = 1 when stage s runs its j-th listed choice (`choices.Catalogue`: layer counts
per cell and body type, and options, already known to fit the device and not dominated), the
cell times D[F|B, v, s] = Σ_j y[s, j]·(cell time of choice j) + head/tail, frontier binaries
g[b, p] that keep body types in pipeline order, and T.

Two objectives, solved in turn:

1. The closed form (`schedules.closed_form_time`): T ≥ a·Σ_cells D + b·Σ_v D[·, v, k] for
   every stage k (1F1B: a = 1, b = m − 1). Proven optimal quickly; its plan is the first answer.
2. The critical path (`exact=True`): T ≥ Σ over a path π of the schedule's dependency graph of
   the cell times π runs through. Every path bounds the iteration time from below for every
   plan, so a program with some paths is a relaxation. Paths are seeded from the schedule under
   many cell weightings, then added lazily: solve, run the schedule on the plan found, and while
   its critical path is longer than T add that path and solve again. A plan whose critical path
   equals T is optimal. The closed form's plan seeds the solver and bounds the listed choices.

Scaling: times are divided by the largest per-layer forward + backward (so T is at most about
m·V·N) and memory never enters the program (it is checked exactly in the listing), so HiGHS's
1e-9 tolerances are 1e-9 of a layer's time. Chosen plans are rebuilt from the integer columns
and evaluated again in the original units (`Plan`): that evaluation is what is reported.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ppb_core.balance import highs
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.choice_model import ChoiceModel, Path
from ppb_core.balance.choices import Catalogue, StageChoice
from ppb_core.balance.local import improve
from ppb_core.balance.memory_floor import memory_floor
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.schedules import simulate

SEED_WEIGHTINGS = 150  # random cell weightings whose critical paths seed the program
SEED_PLANS = 150  # random plans whose critical paths seed it too
MAX_ROUNDS = 200  # paths added before giving up on proving a plan optimal
NEARBY_PATHS = 20  # shaken copies of each round's plan whose critical paths are added with its own
CONSISTENCY = 1e-6  # relative: a plan's critical path this close to T is taken as equal to it
ROUND_SECONDS = 2.0  # the first rounds' time limit when paths are added lazily
LOCAL_SEARCH_SECONDS = 10.0  # at most this long improving the starting plan by local moves


@dataclass
class Solution:
    """What a solve found. Times in the descriptions' unit, memory in MB."""

    problem: BalanceInput
    status: str  # "optimal" | "time_limit" | "infeasible"
    objective_kind: str = "critical_path"  # or "closed_form"
    plan: Plan | None = None
    objective: float | None = None  # the plan's value of what was minimised
    bound: float | None = None  # a proven lower bound on the best value
    gap: float | None = None
    closed_form_optimum: float | None = None
    closed_form_status: str | None = None
    rounds: int = 0
    paths: int = 0
    choices: int = 0
    seconds: float = 0.0
    min_memory_mb: float | None = None
    message: str | None = None
    notes: list[str] = field(default_factory=list)


def _trace(text: str) -> None:
    if os.environ.get("PPB_BALANCE_TRACE"):
        print(text, file=sys.stderr)


def _time_unit(problem: BalanceInput) -> float:
    """The largest forward + backward of one body layer: times divided by it stay near m·V·N."""
    return max((b.forward_time + max(b.backward_time.values())) for b in problem.layers.bodies) or 1.0


def least_work(problem: BalanceInput) -> float:
    """Σ over the stages of their work per micro-batch in any plan, at least: every layer's forward and
    least backward, head and tail included."""
    bodies = problem.layers.bodies
    body_work = sum(b.nb_layer * (b.forward_time + min(b.backward_time.values())) for b in bodies)
    return body_work + sum(problem.fixed_work(stage) for stage in range(problem.stages))


def work_limit(problem: BalanceInput, value: float, closed_form: bool) -> float:
    """The most work per micro-batch Σ_v (F_v + B_v) a stage may have in a plan worth `value` or less.

    A stage is busy m times its work, so its work is at most value / m under any schedule. Under
    the closed forms, T ≥ (m − 1/V)·S_k + Σ_s S_s / V for every stage k (GPipe: m − 1 and Σ_s S_s,
    the same at V = 1), and Σ_s S_s is at least `least_work`: a tighter limit when m is large.
    """
    m, chunks = problem.micro_batches, problem.chunks
    limit = value / m
    if closed_form and m - 1 / chunks > 0:
        limit = min(limit, (value - least_work(problem) / chunks) / (m - 1 / chunks))
    return limit * (1 + 1e-9) if math.isfinite(limit) else limit


def _cell_cap(problem: BalanceInput, stage_work: float) -> int:
    """Most layers a cell holds in a plan whose stages each work at most `stage_work` per micro-batch."""
    most = problem.layers.nb_body_layers - (len(problem.cells) - len(problem.reserved_cells) - 1)
    cheapest = min(b.forward_time + min(b.backward_time.values()) for b in problem.layers.bodies)
    if math.isfinite(stage_work) and cheapest > 0:
        most = min(most, int(stage_work / cheapest * (1 + 1e-12)))
    return max(most, 1)


def _random_plan_times(problem: BalanceInput, rng: random.Random) -> tuple[list[list[float]], list[list[float]]]:
    """Cell times of a random plan: layers dealt to cells at random, each under a random option."""
    p = problem
    forward = [[0.0] * p.stages for _ in range(p.chunks)]
    backward = [[0.0] * p.stages for _ in range(p.chunks)]
    open_cells = [c for c in p.cells if c not in p.reserved_cells]
    layers = [body for body in p.layers.bodies for _ in range(body.nb_layer)]
    sizes = dict.fromkeys(p.cells, 0)
    for cell in open_cells:
        sizes[cell] = 1
    for _ in range(len(layers) - len(open_cells)):
        sizes[rng.choice(p.cells)] += 1
    index = 0
    for v, s in p.cells:
        for _ in range(sizes[(v, s)]):
            body = layers[index]
            index += 1
            forward[v][s] += body.forward_time
            backward[v][s] += body.backward_time[rng.choice(p.options)]
    return forward, backward


def _path_seeds(problem: BalanceInput, extra: Sequence[Plan] = ()) -> list[Path]:
    """Critical paths of the schedule under many weightings of its cells (a fixed random seed).

    Even cells; each stage heavy; random cell times; random plans; and the given plans. The paths
    that turn out critical for the plans the solver tries are mostly among these, saving rounds.
    """
    name, stages, chunks, m = problem.schedule_name, problem.stages, problem.chunks, problem.micro_batches
    seeds: list[Path] = []
    seen: set[tuple] = set()

    def add(forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]]) -> None:
        counts = simulate(name, forward, backward, m).path_counts()
        key = tuple(sorted(counts.items()))
        if key not in seen:
            seen.add(key)
            seeds.append(dict(counts))

    heavy = float(stages * chunks * m)
    for stage in (None, *range(stages)):
        add(
            [[heavy if s == stage else 1.0 for s in range(stages)] for _ in range(chunks)],
            [[2 * heavy if s == stage else 2.0 for s in range(stages)] for _ in range(chunks)],
        )
    rng = random.Random(0)
    for _ in range(SEED_WEIGHTINGS):
        spread = rng.choice((0.1, 0.3, 1.0, 3.0))
        forward = [[math.exp(spread * rng.uniform(-1, 1)) for _ in range(stages)] for _ in range(chunks)]
        add(forward, [[f * (2.0 + rng.random()) for f in row] for row in forward])
    for _ in range(SEED_PLANS):
        add(*_random_plan_times(problem, rng))
    for plan in extra:
        add(plan.cell_forward, plan.cell_backward)
    return seeds


def _nearby_paths(plan: Plan, rng: random.Random, count: int = NEARBY_PATHS) -> list[Path]:
    """Critical paths of the plan's schedule with every cell time scaled by a random factor in [0.9, 1.1]."""
    p = plan.problem
    found = []
    for _ in range(count):
        forward = [[t * rng.uniform(0.9, 1.1) for t in row] for row in plan.cell_forward]
        backward = [[t * rng.uniform(0.9, 1.1) for t in row] for row in plan.cell_backward]
        found.append(dict(simulate(p.schedule_name, forward, backward, p.micro_batches).path_counts()))
    return found


@dataclass
class _Run:
    status: str
    plan: Plan | None
    bound: float
    rounds: int
    paths: int


def _run(
    model: ChoiceModel, exact: bool, time_limit: float, started: float, start: Plan | None, seeds: Sequence[Path]
) -> _Run:
    """Solve, and with `exact` keep adding the found plan's critical path until it equals T."""
    tau = model.tau
    solver = highs.new_solver(time_limit - (time.perf_counter() - started))
    highs.load(solver, model.columns, model.rows, model.top)
    added: set[tuple] = set()
    for path in seeds:
        highs.add_row(solver, 0.0, model.path_terms(path))
        added.add(tuple(sorted(path.items())))
    best, bound, rounds, paths = None, 0.0, 0, len(seeds)

    def value(plan: Plan) -> float:
        return plan.iteration_time if exact else plan.closed_form_time

    rng = random.Random(1)
    incumbent = start
    # With lazy paths, short rounds first: a plan that exploits a missing path is caught early.
    budget = ROUND_SECONDS
    while True:
        rounds += 1
        remaining = time_limit - (time.perf_counter() - started)
        if remaining <= 0:
            return _Run("time_limit", best, bound, rounds, paths)
        solver.setOptionValue("time_limit", min(remaining, budget) if exact else remaining)
        if incumbent is not None:
            values = model.assignment(incumbent, value(incumbent) / tau)
            if values is not None:
                highs.seed(solver, values)
        tick = time.perf_counter()
        solver.run()
        outcome = highs.status(solver)
        if outcome.startswith("error"):
            # HiGHS rejects an optimum that sits exactly on its tolerance; presolve avoids it
            solver.setOptionValue("presolve", "on")
            solver.run()
            outcome = highs.status(solver)
            solver.setOptionValue("presolve", "off")
        info = solver.getInfo()
        _trace(
            f"{'exact' if exact else 'closed form'} round {rounds}: {outcome} {time.perf_counter() - tick:.2f}s "
            f"nodes {info.mip_node_count} T {info.objective_function_value * tau:.6g} "
            f"bound {info.mip_dual_bound * tau:.6g}"
        )
        if outcome == "infeasible":
            return _Run("infeasible" if best is None else "time_limit", best, bound, rounds, paths)
        if outcome.startswith("error"):
            if not highs.has_solution(solver):
                raise RuntimeError(f"HiGHS failed: {outcome}")
            outcome = "time_limit"  # a solution, but not a proven optimum
        bound = max(bound, info.mip_dual_bound * tau)
        if not highs.has_solution(solver):
            if exact and outcome == "time_limit" and time.perf_counter() - started < time_limit:
                budget *= 2  # a short round found no plan yet: give the next one longer
                continue
            return _Run("time_limit", best, bound, rounds, paths)
        values = list(solver.getSolution().col_value)
        plan = model.plan(values)
        if best is None or value(plan) < value(best):
            best = plan
        incumbent = best
        critical = plan.timeline.path_counts() if exact else {}
        key = tuple(sorted(critical.items()))
        # consistent: the plan's critical path is no longer than T (or is already a row, so only
        # the solver's tolerance separates them)
        consistent = plan.iteration_time <= values[model.top] * tau * (1 + CONSISTENCY) or key in added
        if outcome == "time_limit":
            if not exact or time.perf_counter() - started >= time_limit:
                return _Run("time_limit", best, bound, rounds, paths)
            if consistent:
                budget *= 2  # the relaxation holds for the plan found: give the proof more time
                continue
        elif not exact or consistent:
            return _Run("optimal", best, bound, rounds, paths)
        if rounds >= MAX_ROUNDS:
            return _Run("time_limit", best, bound, rounds, paths)
        # the plan's critical path, and those of the plan with its cell times shaken a little: the
        # paths the next plans (near this one) will run along
        for path in [critical, *_nearby_paths(plan, rng)]:
            path_key = tuple(sorted(path.items()))
            if path_key not in added:
                highs.add_row(solver, 0.0, model.path_terms(path))
                added.add(path_key)
                paths += 1


def _stage_work(problem: BalanceInput, stage: int, choice: StageChoice) -> float:
    """Forward + backward of one micro-batch through the stage's cells, head and tail included."""
    return sum(cell.forward + cell.backward for cell in choice.cells) + problem.fixed_work(stage)


def least_max_work(
    problem: BalanceInput, choices: list[list[StageChoice]], tau: float, upper: float, deadline: float
) -> float:
    """A lower bound on the busiest stage's work per micro-batch in every plan that fits: the least
    such work, found by bisection over the listed stage works with feasibility programs.

    Layers are whole, so the busiest stage of any plan works more than the average; this is what
    the closed form's LP relaxation misses (it mixes stage choices to even out the stages) and what
    makes its proof slow. A feasibility check the deadline cuts short counts as feasible, which
    keeps the result a lower bound.
    """
    works = [[_stage_work(problem, s, choice) for choice in stage] for s, stage in enumerate(choices)]
    lowest = least_work(problem) / problem.stages
    values = sorted({w for stage in works for w in stage if lowest * (1 - 1e-12) <= w <= upper * (1 + 1e-12)})
    if not values:
        return lowest
    low, high = 0, len(values) - 1  # values[high] is feasible (the upper bound is a plan's)
    while low < high:
        middle = (low + high) // 2
        limit = values[middle] * (1 + 1e-12)
        subset = [
            [c for c, w in zip(stage, stage_works, strict=True) if w <= limit]
            for stage, stage_works in zip(choices, works, strict=True)
        ]
        feasible = True
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        if all(subset):
            model = ChoiceModel(problem, subset, tau)
            solver = highs.new_solver(remaining)
            solver.setOptionValue("mip_max_improving_sols", 1)  # any plan proves feasibility
            highs.load(solver, model.columns, model.rows, model.top)
            solver.run()
            feasible = highs.status(solver) != "infeasible"
        else:
            feasible = False
        if feasible:
            high = middle
        else:
            low = middle + 1
    return values[low] if low == high else lowest


def even_split_best_options(problem: BalanceInput, catalogue: Catalogue) -> Plan | None:
    """The even split (as the baselines split), each stage under the options of least total backward
    time that fit: the usual hand plan done well, and a strong start for the program."""
    layout = uniform_plan(problem, problem.options[0])
    counts = empty_counts(problem)
    for s in range(problem.stages):
        per_chunk = []
        for v in range(problem.chunks):
            bodies = tuple(l for l in range(len(layout.counts)) if layout.body_layers(l, v, s))
            sizes = tuple(layout.body_layers(l, v, s) for l in bodies)
            per_chunk.append(catalogue.cell_choices(bodies, sizes) if bodies else [catalogue.empty_cell()])
        best = None
        for cells in itertools.product(*per_chunk):
            total = sum(cell.backward for cell in cells)
            if (best is None or total < best[0]) and catalogue.fits(s, cells):
                best = (total, cells)
        if best is None:
            return None
        for v, cell in enumerate(best[1]):
            for body, row in zip(cell.bodies, cell.counts, strict=True):
                counts[body][v][s] = list(row)
    return Plan(problem, freeze(counts))


def _choices(problem: BalanceInput, catalogue: Catalogue, value: float, closed_form: bool) -> list[list[StageChoice]]:
    """Every stage's choices that can be in a plan worth `value` or less."""
    limit = work_limit(problem, value, closed_form)
    cap = _cell_cap(problem, limit)
    reduce = "sum" if closed_form else "pareto"
    return [catalogue.stage_choices(s, limit, cap, reduce) for s in range(problem.stages)]


def solve(problem: BalanceInput, time_limit: float = 90.0, exact: bool = True) -> Solution:
    """The plan that fits with the least iteration time, proven optimal unless the time limit stops it.

    `exact=False` stops after the closed form. With `exact`, the answer's objective is its
    critical path and the closed form's optimum is reported beside it.
    """
    started = time.perf_counter()
    catalogue = Catalogue(problem)
    tau = _time_unit(problem)
    notes: list[str] = []
    fitting = [plan for plan in (uniform_plan(problem, option) for option in problem.options) if plan.fits]
    even = even_split_best_options(problem, catalogue)
    if even is not None:
        fitting.append(even)

    # 1. The closed form, over choices reduced by stage totals.
    bound = min((plan.closed_form_time for plan in fitting), default=math.inf)
    if not math.isfinite(bound):
        # No even split fits: find some plan with few layers per cell first, to bound the listing.
        cells = max(1, len(problem.cells) - len(problem.reserved_cells))
        cap = 2 * math.ceil(problem.layers.nb_body_layers / cells) + 1
        choices = [catalogue.stage_choices(s, math.inf, cap, "sum") for s in range(problem.stages)]
        if all(choices):
            model = ChoiceModel(problem, choices, tau)
            model.add_closed_form()
            first = _run(model, False, time_limit, started, None, ())
            if first.plan is not None:
                bound = first.plan.closed_form_time
    choices = _choices(problem, catalogue, bound, closed_form=True)
    if not all(choices):
        return _infeasible(problem, time_limit, started, notes)
    start = min(fitting, key=lambda plan: plan.closed_form_time, default=None)
    upper = max(start.stage_time(s) for s in range(problem.stages)) if start is not None else math.inf
    busiest = least_max_work(problem, choices, tau, upper, started + time_limit / 4)
    model = ChoiceModel(problem, choices, tau)
    model.add_closed_form()
    model.add_least_busiest(busiest, closed_form=True)
    closed = _run(model, False, time_limit, started, None, ())
    listed = sum(len(stage) for stage in choices)
    notes.append(f"closed form: {listed} stage choices, {closed.status} in {time.perf_counter() - started:.2f}s")
    if closed.plan is None:
        if closed.status == "infeasible":
            return _infeasible(problem, time_limit, started, notes)
        return Solution(
            problem,
            "time_limit",
            "closed_form",
            seconds=time.perf_counter() - started,
            message="no plan found within the time limit",
            notes=notes,
        )
    closed_plan = closed.plan
    if not exact:
        objective = closed_plan.closed_form_time
        bound_value = objective if closed.status == "optimal" else min(closed.bound, objective)
        return Solution(
            problem,
            closed.status,
            "closed_form",
            closed_plan,
            objective,
            bound_value,
            _gap(objective, bound_value),
            objective if closed.status == "optimal" else None,
            closed.status,
            closed.rounds,
            0,
            listed,
            time.perf_counter() - started,
            notes=notes,
        )

    # 2. The critical path, over choices Pareto-reduced per cell, bounded by the best plan so far.
    incumbents = [closed_plan, *fitting]
    # The closed form does not see how a stage splits its work between chunks, nor the schedule's
    # fill and drain: moves judged by the schedule itself give the program a far better start.
    # They stop in local optima, so from two starts: the closed form's optimum and the best other.
    polish = min(LOCAL_SEARCH_SECONDS, max(0.0, (time_limit - (time.perf_counter() - started)) / 6))
    others = [plan for plan in fitting if plan.counts != closed_plan.counts]
    starts = [closed_plan, *([min(others, key=lambda plan: plan.iteration_time)] if others else [])]
    improved = [improve(plan, polish / len(starts), max_moves=10_000) for plan in starts]
    incumbents += improved
    start = min(incumbents, key=lambda plan: plan.iteration_time)
    notes.append(f"start: {start.iteration_time:.6g} after local moves")
    choices = _choices(problem, catalogue, start.iteration_time, closed_form=False)
    seeds = _path_seeds(problem, incumbents)
    model = ChoiceModel(problem, choices, tau)
    model.add_least_busiest(busiest, closed_form=False)
    critical = _run(model, True, time_limit, started, start, seeds)
    listed = sum(len(stage) for stage in choices)
    notes.append(
        f"critical path: {listed} stage choices, {critical.paths} paths, {critical.rounds} rounds, {critical.status}"
    )
    best = start if critical.plan is None or start.iteration_time <= critical.plan.iteration_time else critical.plan
    objective = best.iteration_time
    status = critical.status if critical.status != "infeasible" else "time_limit"
    bound_value = objective if status == "optimal" else min(critical.bound, objective)
    return Solution(
        problem,
        status,
        "critical_path",
        best,
        objective,
        bound_value,
        _gap(objective, bound_value),
        closed_plan.closed_form_time if closed.status == "optimal" else None,
        closed.status,
        critical.rounds,
        critical.paths,
        listed,
        time.perf_counter() - started,
        notes=notes,
    )


def _gap(objective: float, bound: float) -> float:
    return 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective)


def _infeasible(problem: BalanceInput, time_limit: float, started: float, notes: list[str]) -> Solution:
    """No plan fits: say how much memory the least-memory plan needs."""
    needed, proven, _ = memory_floor(problem, max(5.0, time_limit - (time.perf_counter() - started)))
    if needed is None:
        message = f"no plan fits in {problem.memory_mb:g} MB per device"
    else:
        message = (
            f"no plan fits in {problem.memory_mb:g} MB per device: the least-memory plan needs "
            f"{needed:.1f} MB{'' if proven else ' (the least found within the time limit)'}"
        )
    return Solution(
        problem, "infeasible", min_memory_mb=needed, message=message, seconds=time.perf_counter() - started, notes=notes
    )
