"""The balancer's integer program, solved with HiGHS (docs/balance.md writes it down in full).

Columns and rows are `choice_model.ChoiceModel`'s: one listed choice per stage
(`choices.Catalogue`: layer counts per cell and body type, and options, already known to fit the
device and not dominated), every layer placed, body types in pipeline order, cell times D, T.

Two objectives, solved in turn:

1. The closed form (`schedules.closed_form_time`): T ≥ a·Σ_cells D + b·Σ_v D[·, v, k] for
   every stage k (1F1B: a = 1, b = m − 1). Proven optimal quickly; its plan is the first answer.
2. The critical path (`exact=True`): T ≥ Σ over a path π of the schedule's dependency graph of
   the cell times π runs through. Every path bounds the iteration time from below for every
   plan, so a program with some paths is a relaxation. Paths are seeded from the schedule under
   many cell weightings and from the path families of `bounds`, then added lazily: solve, run the
   schedule on the plan found, and while its critical path is longer than T add that path and
   solve again. A plan whose critical path equals T is optimal. `bounds` adds the rows that make
   the relaxation see whole layers and the bubble. Before the rounds, `probing` tries to prove
   the best known plan optimal by holding each stage choice against the relaxation.

Then `tiebreak` picks, among plans as fast, the least recompute, one option per stage, the most
headroom; and for a Megatron-Core run the fastest plan Megatron-Core can say is solved beside it
(`solve_setting`), and taken when it is as fast.

Repeatable: every search stops on work limits (`progress.WorkLimits`: HiGHS nodes, rounds, local
moves, relaxations), never on the clock; HiGHS runs single-threaded with a fixed seed
(`highs.DETERMINISTIC`). There is no wall-clock limit unless one is given (`time_limit`), and a
solve it stops says so (`stopped_by: "time_limit"`).

Scaling: times are divided by the largest per-layer forward + backward (τ, so T is at most about
m·V·N) and memory never enters the program (it is checked exactly in the listing), so HiGHS's
tolerances are of a layer's time. Chosen plans are rebuilt from the integer columns and
evaluated again in the original units (`Plan`): that evaluation is what is reported.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ppb_core.balance import highs, schedule_times
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.bounds import drain_family, family_row, least_max_work, nudged_family
from ppb_core.balance.cell_model import CellModel, cell_choices
from ppb_core.balance.choice_model import ChoiceModel, Path, held_layers, time_unit
from ppb_core.balance.choices import Catalogue, CellChoice, ListingBudget, ListingCut, StageChoice
from ppb_core.balance.local import CellOptions, exchange, improve, reoptioned
from ppb_core.balance.megatron import Setting, setting_of, settings
from ppb_core.balance.memory_floor import WATCH_EVERY_S, least_memory_plan, memory_floor
from ppb_core.balance.outputs import not_megatrons
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.probing import MARGIN as PROBE_MARGIN
from ppb_core.balance.probing import probe
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.progress import Clock, ProgressHook, Reporter, WorkLimits
from ppb_core.balance.stopped import stopped_words
from ppb_core.balance.tiebreak import TOLERANCE, break_ties, tie_key
from ppb_core.balance.torchtitan_settings import settings as torchtitan_settings
from ppb_core.model.switches import OPTIONS
from ppb_core.units import TimedNote, mb_words

SEED_WEIGHTINGS = 150  # random cell weightings whose critical paths seed the program (fixed seed)
SEED_PLANS = 150  # random plans whose critical paths seed it too
NEARBY_PATHS = 20  # shaken copies of each round's plan whose critical paths are added with its own
CONSISTENCY = 1e-6  # relative: a plan's critical path this close to T is taken as equal to it
GAP_TOLERANCE = 1e-6  # relative gap at which a plan counts as proven optimal


@dataclass
class Solution:
    """What a solve found. Times in the descriptions' unit, memory in MB."""

    problem: BalanceInput
    status: str  # "optimal" | "time_limit" (stopped before the proof; `stopped_by` says why) | "infeasible"
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
    # why the search ended: "optimal", "work_limit" (a deterministic limit), "time_limit" (the clock)
    stopped_by: str = "optimal"
    notes: list[str] = field(default_factory=list)
    # for a Megatron-Core run whose plan Megatron-Core cannot say: the fastest plan it can say
    megatron_plan: Plan | None = None
    megatron_setting: Setting | None = None
    megatron_objective: float | None = None
    megatron_status: str | None = None
    # for a torchtitan run: the one setting of torchtitan's the plan runs under (`_torchtitan`)
    setting: Setting | None = None
    # the device's memory refused no stage choice the work limits listed: `bound` holds for the same problem
    # with memory unbounded (`_none_floor_reaches`); false wherever the listing was cut short
    memory_free: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The solver's own figures (the plan's are `result.report`'s), less the wall-clock `seconds`."""
        return {
            "status": self.status,
            "stopped_by": self.stopped_by,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
        }


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
    dealt = [c for c in p.cells if c not in p.closed_cells]
    for _ in range(len(layers) - len(open_cells)):
        sizes[rng.choice(dealt)] += 1
    index = 0
    for v, s in p.cells:
        for _ in range(sizes[(v, s)]):
            body = layers[index]
            index += 1
            forward[v][s] += body.forward_time
            backward[v][s] += body.backward_time[rng.choice(p.options)]
    return forward, backward


def _path_seeds(problem: BalanceInput, extra: Sequence[Plan] = (), random_seeds: int = SEED_PLANS) -> list[Path]:
    """Critical paths of the schedule under many weightings of its cells (a fixed random seed).

    Even cells; each stage heavy; random cell times; random plans; and the given plans. The paths
    that turn out critical for the plans the solver tries are mostly among these, saving rounds.
    """
    stages, chunks, m = problem.stages, problem.chunks, problem.micro_batches
    weightings: list[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]] = []

    def add(forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]]) -> None:
        weightings.append((forward, backward))

    heavy = float(stages * chunks * m)
    for stage in (None, *range(stages)):
        add(
            [[heavy if s == stage else 1.0 for s in range(stages)] for _ in range(chunks)],
            [[2 * heavy if s == stage else 2.0 for s in range(stages)] for _ in range(chunks)],
        )
    rng = random.Random(0)
    for _ in range(min(SEED_WEIGHTINGS, random_seeds)):
        spread = rng.choice((0.1, 0.3, 1.0, 3.0))
        forward = [[math.exp(spread * rng.uniform(-1, 1)) for _ in range(stages)] for _ in range(chunks)]
        add(forward, [[f * (2.0 + rng.random()) for f in row] for row in forward])
    for _ in range(min(SEED_PLANS, random_seeds)):
        add(*_random_plan_times(problem, rng))
    for plan in extra:
        add(plan.cell_forward, plan.cell_backward)
    # all paths at once (`critical_counts_many`), then the distinct ones in the order of their weightings
    seeds: list[Path] = []
    seen: set[tuple] = set()
    for counts in schedule_times.paths(problem, weightings):
        key = tuple(sorted(counts.items()))
        if key not in seen:
            seen.add(key)
            seeds.append(dict(counts))
    return seeds


def _nearby_paths(plan: Plan, rng: random.Random, count: int = NEARBY_PATHS) -> list[Path]:
    """Critical paths of the plan's schedule with every cell time scaled by a random factor in [0.9, 1.1]."""
    p = plan.problem
    weightings = []
    for _ in range(count):
        forward = [[t * rng.uniform(0.9, 1.1) for t in row] for row in plan.cell_forward]
        backward = [[t * rng.uniform(0.9, 1.1) for t in row] for row in plan.cell_backward]
        weightings.append((forward, backward))
    return [dict(counts) for counts in schedule_times.paths(p, weightings)]


def even_split_best_options(
    problem: BalanceInput, catalogue: Catalogue, clock: Clock | None = None, nodes: int = 10_000
) -> Plan | None:
    """The even split (as the baselines split), each stage under the options of least total backward
    time that fit: the usual hand plan done well, and a strong start for the program.

    Per stage this is a small multiple-choice knapsack (one option assignment per chunk, a memory
    row per in-flight vector), solved as a program rather than by listing every combination of
    chunks, whose number grows as choices^chunks; stages with the same cells and memory rows are
    solved once."""
    layout = uniform_plan(problem, problem.options[0])
    counts = empty_counts(problem)
    solved: dict[tuple, tuple[CellChoice, ...] | None] = {}
    for s in range(problem.stages):
        per_chunk = []
        for v in range(problem.chunks):
            bodies = tuple(l for l in range(len(layout.counts)) if layout.body_layers(l, v, s))
            sizes = tuple(layout.body_layers(l, v, s) for l in bodies)
            per_chunk.append(catalogue.cell_choices(bodies, sizes) if bodies else [catalogue.empty_cell()])
        key = (
            tuple(tuple(cells) for cells in per_chunk),
            tuple(problem.vectors[s]),
            tuple(problem.head_stage_memory_mb(s, vector) for vector in problem.vectors[s]),
            problem.relief_row(s),
        )
        if key not in solved:
            solved[key] = _least_backward_cells(catalogue, s, per_chunk, clock, nodes)
        best = solved[key]
        if best is None:
            return None
        for v, cell in enumerate(best):
            for body, row in zip(cell.bodies, cell.counts, strict=True):
                counts[body][v][s] = list(row)
    return Plan(problem, freeze(counts))


def _least_backward_cells(
    catalogue: Catalogue, stage: int, per_chunk: list[list[CellChoice]], clock: Clock | None, nodes: int
) -> tuple[CellChoice, ...] | None:
    """One cell choice per chunk: the least total backward time whose stage fits (None if none does,
    or none is found within *nodes* branch-and-bound nodes or the clock)."""
    p = catalogue.p
    leanest = tuple(min(cells, key=lambda c: (c.activation_mb, c.parameter_mb, c.backward)) for cells in per_chunk)
    if not catalogue.fits(stage, leanest):
        return None  # every vector's memory is least under the leanest cells: nothing fits
    quickest = tuple(min(cells, key=lambda c: (c.backward, c.activation_mb)) for cells in per_chunk)
    if catalogue.fits(stage, quickest):
        return quickest
    columns: list[highs.Column] = []
    cost: list[float] = []
    where: list[tuple[int, int]] = []
    for v, cells in enumerate(per_chunk):
        for j, cell in enumerate(cells):
            columns.append((0.0, 1.0, True))
            cost.append(cell.backward)
            where.append((v, j))
    one_each: list[highs.Row] = []
    first = 0
    for cells in per_chunk:
        one_each.append((1.0, 1.0, list(range(first, first + len(cells))), [1.0] * len(cells)))
        first += len(cells)
    # every chunk's choices hold the same body types (the even split's): the stage's relief is known
    room = p.memory_mb - p.constant_memory_mb + p.relief_mb(stage, {b for cells in per_chunk for b in cells[0].bodies})
    memory = [
        (
            room - p.head_stage_memory_mb(stage, vector),
            [per_chunk[v][j].parameter_mb + vector[v] * per_chunk[v][j].activation_mb for v, j in where],
        )
        for vector in p.vectors[stage]
    ]
    everything = list(range(len(where)))
    for shrink in (0.0, 1e-6):  # once more a hair inside the device when floating point let one too close in
        solver = highs.new_solver(clock.remaining if clock is not None else highs.INF, nodes)
        rows = one_each + [(-highs.INF, upper - shrink * room, everything, values) for upper, values in memory]
        highs.load(solver, columns, rows, cost)
        solver.run()
        if not highs.has_solution(solver):
            return None
        values = solver.getSolution().col_value
        chosen = [None] * len(per_chunk)
        for (v, j), value in zip(where, values, strict=True):
            if value > 0.5:
                chosen[v] = per_chunk[v][j]
        cells = tuple(chosen)
        if all(c is not None for c in cells) and catalogue.fits(stage, cells):
            return cells
    return None


def choices_within(
    problem: BalanceInput, catalogue: Catalogue, value: float, closed_form: bool, most: int | None = None
) -> list[list[StageChoice]]:
    """Every stage's choices that can be in a plan worth `value` or less; past *most* in all, the
    listing is cut (`ListingCut("work_limit")`): the program over them would be too large to search."""
    limit = work_limit(problem, value, closed_form)
    cap = _cell_cap(problem, limit)
    reduce = "sum" if closed_form else "pareto"
    choices: list[list[StageChoice]] = []
    for s in range(problem.stages):
        choices.append(catalogue.stage_choices(s, limit, cap, reduce))
        if most is not None and sum(len(stage) for stage in choices) > most:
            raise ListingCut("work_limit")  # as soon as it is known: the stages left would only add
    # the closed form's listing is left whole: its program is small, and its optimum (reported beside the plan)
    # stays the plan it was among ties
    return choices if closed_form else placeable(problem, choices)


def placeable(problem: BalanceInput, choices: list[list[StageChoice]]) -> list[list[StageChoice]]:
    """Of the listed stage choices, those some plan over the listing may use: every body type's layers are
    placed, so a stage's count of a type plus the least the other stages' choices hold of it must not pass
    the type's layers, nor with their most fall short of them; repeated until nothing drops (the same fixed
    point whatever the order). Exact: a choice dropped is in no plan over the choices left, each drop only
    narrowing the others' ranges. Without it the probing held each such choice against the relaxation to find
    it infeasible: Llama-3.1-8B PP 2 × 8 chunks at 55000 MB (torchtitan) listed 6,699 and 4,584 choices on
    its two ranks under none, of 7 to 15 and 7 to 17 blocks (the work limit): 32 blocks leave 15 | 17 alone,
    and 9,689 of its 11,292 relaxations (61 CPU s) found that one choice at a time."""
    types = len(problem.layers.bodies)
    need = np.array([body.nb_layer for body in problem.layers.bodies], dtype=np.int64)
    held = held_layers(choices, types)
    alive = [np.ones(len(stage), dtype=bool) for stage in choices]
    while all(keep.any() for keep in alive):
        least = [table[keep].min(axis=0) for table, keep in zip(held, alive, strict=True)]
        most = [table[keep].max(axis=0) for table, keep in zip(held, alive, strict=True)]
        low, high = sum(least), sum(most)
        changed = False
        for s, table in enumerate(held):
            fits = ((table + (low - least[s]) <= need) & (table + (high - most[s]) >= need)).all(axis=1)
            kept = alive[s] & fits
            if kept.sum() < alive[s].sum():
                alive[s], changed = kept, True
        if not changed:
            break
    if all(keep.all() for keep in alive):
        return choices
    return [[choice for choice, keep in zip(stage, alive[s], strict=True) if keep] for s, stage in enumerate(choices)]


@dataclass
class _Run:
    status: str  # optimal | work_limit | time_limit | infeasible
    plan: Plan | None
    bound: float
    rounds: int
    paths: int
    solver: Any = None
    note: str | None = None  # why the program was not searched (`_too_large`), for the solve's notes


def _nonzeros(model: ChoiceModel | CellModel, paths: Sequence[Path] = ()) -> int:
    """The program's nonzeros: its rows' and those of the path rows given (T and one column per cell on the path)."""
    return sum(len(row[2]) for row in model.rows) + sum(len(path) + 1 for path in paths)


def _too_large(model: ChoiceModel | CellModel, paths: Sequence[Path], limits: WorkLimits) -> str | None:
    """Why the program is not searched by branch and bound (`WorkLimits.program_nonzeros`), or None."""
    nonzeros = _nonzeros(model, paths)
    if nonzeros <= limits.program_nonzeros:
        return None
    return (
        f"{len(model.columns):,} columns, {len(model.rows) + len(paths):,} rows, {nonzeros:,} nonzeros: over the "
        f"{limits.program_nonzeros:,} a program searched by branch and bound may have"
    )


def _solve_round(solver: Any) -> str:
    solver.run()
    outcome = highs.status(solver)
    if outcome.startswith("error"):
        # HiGHS rejects an optimum that sits exactly on its tolerance; presolve avoids it
        solver.setOptionValue("presolve", "on")
        solver.run()
        outcome = highs.status(solver)
        solver.setOptionValue("presolve", "off")
    return outcome


def _run(
    model: ChoiceModel,
    exact: bool,
    limits: WorkLimits,
    clock: Clock,
    start: Plan | None,
    seeds: Sequence[Path],
    report: Reporter,
    cutoff: float = math.inf,
    known: float = math.inf,
) -> _Run:
    """Solve, and with `exact` keep adding the found plan's critical path until it equals T.

    Rounds stop on node limits, doubled while a round's plan already agrees with its T, within one
    budget of nodes for the whole loop (`WorkLimits.node_work`): the same rounds, rows and plans on
    every machine. Only the clock's safety bound can end it otherwise, or a proven bound above
    *cutoff* while every plan known (*known*: found beside the program) is too (status "cutoff":
    no plan of this solve beats a plan found elsewhere).
    """
    tau = model.tau
    distinct = list({tuple(sorted(path.items())): path for path in seeds}.values())
    too_large = _too_large(model, distinct, limits)
    if too_large is not None:
        # its root alone can run an hour with no check (`WorkLimits.program_nonzeros`): the plans found beside it
        # stand, with the bounds proven beside it
        said = "" if exact else "closed form, "
        report("round", f"{said}program not searched: {too_large}", value_of(start, exact) if start else None)
        return _Run("work_limit", start, 0.0, 0, 0, note=f"{said}program not searched: {too_large}")
    size = len(model.columns) + len(model.rows) + len(seeds)
    budget = WorkLimits.nodes(limits.node_work, size) if exact else limits.closed_nodes
    nodes = max(20, budget // limits.first_round_share) if exact else budget
    solver = highs.new_solver(clock.remaining, nodes)
    highs.load(solver, model.columns, model.rows, model.top)
    if report.hook is not None:  # a round of a large program runs minutes: its nodes shown as they go
        said = "" if exact else "closed form, "
        highs.watch(
            solver,
            WATCH_EVERY_S,
            lambda done, best, proven: report(
                "round_search",
                f"{said}round {rounds}: {done:,} of {nodes:,} branch-and-bound nodes this round",
                best * tau if math.isfinite(best) else None,
                proven * tau if math.isfinite(proven) else None,
            ),
        )
    added: set[tuple] = set()
    for path in seeds:
        key = tuple(sorted(path.items()))
        if key not in added:
            highs.add_row(solver, 0.0, model.path_terms(path))
            added.add(key)
    best, bound, rounds, paths, used = start, 0.0, 0, len(added), 0

    rng = random.Random(1)
    while True:
        rounds += 1
        if clock.out:
            return _Run("time_limit", best, bound, rounds, paths, solver)
        nodes = min(nodes, budget - used)
        if nodes <= 0:
            return _Run("work_limit", best, bound, rounds, paths, solver)
        solver.setOptionValue("time_limit", max(0.01, clock.remaining))
        solver.setOptionValue("mip_max_nodes", nodes)
        if best is not None:
            values = model.assignment(best, value_of(best, exact) / tau)
            if values is not None:
                highs.seed(solver, values)
        outcome = _solve_round(solver)
        info = solver.getInfo()
        used += max(1, info.mip_node_count)
        if outcome == "infeasible":
            return _Run("infeasible" if best is None else "optimal", best, bound, rounds, paths, solver)
        if outcome.startswith("error"):
            if not highs.has_solution(solver):
                raise RuntimeError(f"HiGHS failed: {outcome}")
            outcome = "work_limit"  # a solution, but not a proven optimum
        bound = max(bound, info.mip_dual_bound * tau)
        # every plan of this program is at least the bound; the plans known beside it (*known*, and
        # the start, which may use choices the program was not given) count too
        least = min(bound, known, value_of(best, exact) if best is not None else math.inf)
        if least >= cutoff * (1 + GAP_TOLERANCE):
            return _Run("cutoff", best, bound, rounds, paths, solver)
        if not highs.has_solution(solver):
            if outcome == "work_limit" and exact and rounds < limits.rounds:
                nodes *= 2  # a short round found no plan yet: give the next one more nodes
                continue
            return _Run(outcome, best, bound, rounds, paths, solver)
        values = list(solver.getSolution().col_value)
        plan = model.plan(values)
        if not model.admits(plan):
            # a plan the program's floating-point rows let in but that does not fit exactly
            return _Run("work_limit", best, bound, rounds, paths, solver)
        if best is None or value_of(plan, exact) < value_of(best, exact) - 1e-12 * abs(value_of(best, exact)):
            best = plan
        incumbent = value_of(best, exact)
        shown = min(incumbent, known)  # the best plan the solve knows, for progress (*known*: found beside)
        report(
            "round",
            # the closed form's rounds price plans by its formula, not the schedule: said, as its figures differ
            f"{'' if exact else 'closed form, '}round {rounds}: {paths} path rows, {used:,} of {budget:,} "
            "branch-and-bound nodes",
            shown,
            min(bound, shown),
        )
        if incumbent <= bound * (1 + GAP_TOLERANCE):
            return _Run("optimal", best, bound, rounds, paths, solver)
        critical = plan.critical_path_counts if exact else {}
        key = tuple(sorted(critical.items()))
        # consistent: the plan's critical path is no longer than T (or is already a row, so only
        # the solver's tolerance separates them)
        consistent = plan.iteration_time <= values[model.top] * tau * (1 + CONSISTENCY) or key in added
        if outcome in ("work_limit", "time_limit"):
            if not exact or outcome == "time_limit":
                return _Run(outcome, best, bound, rounds, paths, solver)
            if consistent:
                if rounds >= limits.rounds:
                    return _Run("work_limit", best, bound, rounds, paths, solver)
                nodes *= 2  # the relaxation holds for the plan found: give the proof more nodes
                continue
        elif not exact or consistent:
            return _Run("optimal", best, bound, rounds, paths, solver)
        if rounds >= limits.rounds:
            return _Run("work_limit", best, bound, rounds, paths, solver)
        # the plan's critical path, and those of the plan with its cell times shaken a little: the
        # paths the next plans (near this one) will run along
        for path in [critical, *_nearby_paths(plan, rng)]:
            path_key = tuple(sorted(path.items()))
            if path_key not in added:
                highs.add_row(solver, 0.0, model.path_terms(path))
                added.add(path_key)
                paths += 1


def value_of(plan: Plan, exact: bool) -> float:
    """What the program minimises, of a plan: its iteration time (the critical path), or the closed form's."""
    return plan.iteration_time if exact else plan.closed_form_time


def _loaded(model: ChoiceModel, paths: Sequence[Path], clock: Clock) -> Any:
    """A HiGHS solver holding the program and the path rows given (each once)."""
    solver = highs.new_solver(clock.remaining)
    highs.load(solver, model.columns, model.rows, model.top)
    added: set[tuple] = set()
    for path in paths:
        key = tuple(sorted(path.items()))
        if key not in added:
            added.add(key)
            highs.add_row(solver, 0.0, model.path_terms(path))
    return solver


def _add_family_row(model: ChoiceModel, common: dict, level: float) -> None:
    """T − U·D ≥ L* (`bounds.family_row`) in the model's columns."""
    terms = {model.top: 1.0}
    for key, count in common.items():
        terms[model.duration[key]] = terms.get(model.duration[key], 0.0) - count
    model._row(level / model.tau, highs.INF, terms)


def _reoption(setting: Setting) -> CellOptions:
    """A cell's options given again by the setting (from the cell's first layer): per body type in the
    cell, its layers under each option, from its layers (and its rank's layers in earlier chunks)."""

    def apply(sizes: Sequence[int], before: int) -> list[list[int]]:
        along = [OPTIONS.index(o) for o in setting.along(sum(sizes), before)]
        rows = [[0] * len(OPTIONS) for _ in sizes]
        start = 0
        for b, n in enumerate(sizes):
            for k in along[start : start + n]:
                rows[b][k] += 1
            start += n
        return rows

    return CellOptions(apply, setting.rank_wide)


def setting_plan(problem: BalanceInput, setting: Setting) -> Plan:
    """The even split (as the baselines split) under a Megatron-Core setting."""
    plan = uniform_plan(problem, problem.options[0])
    return Plan(problem, reoptioned(problem, plan.counts, _reoption(setting)))


def solve(
    problem: BalanceInput,
    time_limit: float | None = None,
    exact: bool = True,
    progress: ProgressHook | None = None,
    limits: WorkLimits | None = None,
    selective_modules: Sequence[str] | None = None,
    *,
    megatron_settings: bool = True,
    cutoff: float = math.inf,
    megatron_cutoff: float = math.inf,
) -> Solution:
    """The plan that fits with the least iteration time, proven optimal unless a limit stops it, the
    ties among equally fast plans broken for the user (`tiebreak`).

    `exact=False` stops after the closed form. With `exact`, the answer's objective is its
    critical path and the closed form's optimum is reported beside it. For a Megatron-Core run
    (`problem.framework == "megatron"`) the fastest plan Megatron-Core can say is solved too
    (`selective_modules`: what SLCT stands for in `--recompute-modules`, when the run says so),
    and taken when it is as fast; `megatron_settings=False` skips that (the strategy search ranks by the
    plan's time, which that plan never beats). A finite *cutoff* ends the search once it proves no
    plan beats it (`stopped_by: "cutoff"`), and *megatron_cutoff* the settings' likewise: another
    placement of the MTP layers already has a plan that fast (`mtp_apart.faster_placement`).
    """
    clock = Clock(time_limit)
    report = Reporter(progress, clock)
    limits = limits or WorkLimits()
    report(
        "start",
        f"P={problem.stages} V={problem.chunks} m={problem.micro_batches} {problem.schedule_name}, "
        f"{problem.layers.nb_body_layers} layers, {mb_words(problem.memory_mb)}",
    )
    if problem.framework == "torchtitan":
        solution = _torchtitan(problem, exact, limits, clock, report, cutoff)
    else:
        catalogue = Catalogue(problem, budget=ListingBudget(limits.listing_work, clock, _listing_progress(report)))
        solution = _solve(problem, catalogue, exact, limits, clock, report, tie_break=True, cutoff=cutoff)
    if (
        problem.framework == "megatron"
        and megatron_settings
        and exact is not None
        and solution.plan is not None
        and solution.stopped_by != "cutoff"
        and not_megatrons(problem) is None  # DualPipeV or a second model: no setting is Megatron's to say
    ):
        _megatron(problem, solution, exact, limits, clock, report, selective_modules, megatron_cutoff)
    solution.seconds = clock.elapsed
    reason = stopped_words(solution.stopped_by, solution.status, time_limit)
    report("done", reason, solution.objective, solution.bound)
    return solution


def _told(report: Reporter) -> Callable[[str], None] | None:
    """A probing's progress as a step ("probing"; None when nobody listens)."""
    if report.hook is None:
        return None
    return lambda message: report("probing", message)


def _listing_progress(
    report: Reporter, what: str = "stage choices", unit: str = "elements of work"
) -> Callable[[int, int], None] | None:
    """A listing's progress as a step ("listing_work"; None when nobody listens)."""
    if report.hook is None:
        return None
    return lambda spent, budget: report("listing_work", f"listing {what}: {spent:,} of {budget:,} {unit} (its budget)")


def _megatron(
    problem: BalanceInput,
    solution: Solution,
    exact: bool,
    limits: WorkLimits,
    clock: Clock,
    report: Reporter,
    modules: Sequence[str] | None,
    beat: float = math.inf,
) -> None:
    """The fastest plan Megatron-Core can say, beside the plan; it replaces the plan when as fast.
    Settings proven no faster than *beat* are not searched further (none may be taken then)."""
    plan = solution.plan
    assert plan is not None
    cells = [{OPTIONS[k]: n for k, n in enumerate(plan.cell_options(v, s)) if n} for v, s in problem.cells]
    if setting_of(cells, modules is not None) is not None:
        return
    most = max(plan.cell_layers(v, s) for v, s in problem.cells)
    candidates = settings(problem.options, most, modules is not None)
    # the settings' solves share one solve's work budgets: their plans are repeatable, and the
    # clock (the safety bound) does not decide which settings are tried
    shared = limits.scaled(1 / max(1, len(candidates)))
    best: tuple[float, int, Solution, Setting] | None = None
    stopped = cut = False
    # Full recompute last: it is rarely the fastest, and then its search stops as soon as it is proven
    # no faster than a setting before it. Ties go to the setting listed first, whatever the order.
    for number, index in enumerate(sorted(range(len(candidates)), key=lambda i: candidates[i].name == "full"), 1):
        setting = candidates[index]
        at = report.within(f"Megatron-Core setting {number} of {len(candidates)}, {setting.describe()}")
        # a setting proven no faster than the best so far is not searched further: it would not be taken
        cutoff = best[0] if best is not None else beat
        if clock.out:
            solution.notes.append("Megatron-Core's settings: stopped by the time limit")
            stopped = True
            break
        at("setting_start")
        found = _solve(
            problem,
            Catalogue(problem, setting, ListingBudget(shared.listing_work, clock)),
            exact,
            shared,
            clock,
            at,
            tie_break=True,
            setting=setting,
            cutoff=cutoff,
        )
        if found.stopped_by == "cutoff":
            cut = True
            report("megatron", f"{setting.describe()}: {stopped_words('cutoff')}", figures=(("to beat", cutoff),))
            continue
        if found.plan is None or found.objective is None:
            continue
        report(
            "megatron",
            f"{setting.describe()}: {stopped_words(found.stopped_by, found.status)}",
            found.objective,
            found.bound,
        )
        # faster, or as fast and first by the tie-breaking's order; then the setting listed first
        if best is None or _before(found, best[2]) or (index < best[1] and not _before(best[2], found)):
            best = (found.objective, index, found, setting)
    if best is None:
        if cut and not stopped:
            note = TimedNote("Megatron-Core's settings: none faster than {}, another MTP placement's", beat)
            solution.notes.append(note)
        elif not stopped:  # cut short, it tried too few settings to say none fits
            solution.notes.append("Megatron-Core's settings: no plan fits under one setting for every layer")
        return
    value, _, found, setting = best
    solution.megatron_plan, solution.megatron_setting = found.plan, setting
    solution.megatron_objective, solution.megatron_status = value, found.status
    if solution.objective is not None and value <= solution.objective * (1 + GAP_TOLERANCE):
        # as fast: the plan Megatron-Core can say is the plan
        solution.notes.append(f"Megatron-Core's {setting.describe()} is as fast: taken")
        solution.plan, solution.objective = found.plan, value


def _torchtitan(
    problem: BalanceInput, exact: bool, limits: WorkLimits, clock: Clock, report: Reporter, cutoff: float
) -> Solution:
    """A torchtitan run's plan: the fastest under one of torchtitan's settings
    (`torchtitan_settings.settings`; a plan mixing options per block otherwise is not torchtitan's to
    run), solved as `_megatron` solves Megatron-Core's: the settings share one solve's work budgets,
    each proven no faster than the best so far is not searched further, ties go to the setting listed
    first. The plan carries its setting (`Solution.setting`).

    With several chunks a rank, every N-th block (whose count runs across a rank's chunks) is solved
    beside the settings a cell's own layers give (none, op, full), which keep the shares they have
    without it: so the plan is never slower than theirs for want of budget (at an equal share each,
    `searches/torchtitan-llama3.1-8b-128.yaml`'s second strategy, PP 2 × 4 chunks under FSDP, balanced
    slower and fell below the fifth place), and each every N-th setting takes the share it has at one
    chunk a rank. Not solved, as no plan under them beats the best so far: those whose forced blocks leave no
    split of the layers over the ranks within it (`_every_nth_split`), and those whose N layers on one rank
    take longer, whose faster plans recompute no block (`_rank_layers_floor`)."""
    candidates = torchtitan_settings(problem.options, _rank_cap(problem), problem.every_nth)
    own = [setting for setting in candidates if not (setting.rank_wide and problem.chunks > 1)]
    best: tuple[Solution, Setting] | None = None
    notes: list[str] = []
    cut = False
    floors: dict[bool, float] = {}  # `_none_floor` by op graph or not, each solved once where it could prune
    passed: list[int] = []
    as_none: list[int] = []  # every N-th settings whose plans that could win recompute nothing
    no_split: list[int] = []  # every N-th settings whose plans all lose (`_every_nth_split`)
    unfit: list[int] = []  # every N-th settings above one proven to fit no plan (`_more_blocks_hold_less`)
    unfit_from: int | None = None  # the least N proven to fit no plan, where fewer FULL blocks hold more
    monotone = _more_blocks_hold_less(problem)
    # the none setting's search settled (proven optimal, or no plan fits): every plan of it is known to lose
    none_settled = False
    for number, setting in enumerate(candidates, start=1):
        if clock.out:
            notes.append("torchtitan's settings: stopped by the time limit")
            break
        if setting.rank_wide and unfit_from is not None and setting.num_layers > unfit_from:
            unfit.append(setting.num_layers)
            continue
        # which setting the solve is at, for the spinner (and a piped log's next line): a torchtitan run can try
        # 30 settings, several seconds each (Llama-3.1-8B PP 2 × 4 chunks at 55000 MB)
        at = report.within(f"torchtitan setting {number} of {len(candidates)}, {setting.describe()}")
        at("setting_start")
        shared = limits.scaled(1 / max(1, len(own if setting in own else candidates)))
        catalogue = Catalogue(problem, setting, ListingBudget(shared.listing_work, clock))
        bar = best[0].objective if best is not None and best[0].objective is not None else cutoff
        if setting.rank_wide and math.isfinite(bar):
            # proofs that no plan under it is taken (at one chunk a rank too: session 32, where 254 settings were
            # each searched for a 256-layer model at PP 2)
            if not _every_nth_split(problem, setting.num_layers, bar * (1 + TOLERANCE)):
                no_split.append(setting.num_layers)
                cut = True
                continue
            # the plans that could win are the none setting's: searched before at a larger share (several chunks
            # a rank), or at the same share and settled (one chunk a rank, where the shares are equal and a
            # work-limited search of the same plans could end elsewhere)
            if (
                best is not None
                and (setting not in own or none_settled)
                and _rank_layers_floor(problem, setting.num_layers) >= bar * (1 + TOLERANCE)
            ):
                as_none.append(setting.num_layers)
                cut = True
                continue
            # no plan under it beats the best so far, nor ties it with less recompute than the none
            # setting's plan (none): not listed
            level = 1 - TOLERANCE if best is not None and best[1].name == "none" else 1 + TOLERANCE
            known = [best[0].plan] if best is not None and best[1].name == "none" and best[0].plan else []
            if _none_floor_reaches(problem, bar * level, floors, known, exact, shared, clock, at):
                passed.append(setting.num_layers)
                cut = True
                continue
        found = _solve(problem, catalogue, exact, shared, clock, at, tie_break=True, setting=setting, cutoff=bar)
        if found.plan is None and found.status == "infeasible":  # proven: no plan fits under it
            none_settled |= setting.name == "none"
            if monotone and setting.rank_wide:
                unfit_from = setting.num_layers if unfit_from is None else min(unfit_from, setting.num_layers)
            continue
        if setting.name == "none" and found.stopped_by == "optimal":
            none_settled = True
        if found.stopped_by == "cutoff":
            cut = True
            report("torchtitan", f"{setting.describe()}: {stopped_words('cutoff')}", figures=(("to beat", bar),))
            continue
        if setting.name == "none" and found.memory_free and found.bound is not None:
            # the memory refused none of the stage choices its proof listed: its bound is `_none_floor`'s on
            # the problem's own graph, which need not be solved again with memory unbounded (Llama-3.1-8B
            # PP 2 × 4 chunks with no memory limit solved the same program twice)
            floors.setdefault(False, found.bound)
        if found.plan is None or found.objective is None:
            continue
        report(
            "torchtitan",
            f"{setting.describe()}: {stopped_words(found.stopped_by, found.status)}",
            found.objective,
            found.bound,
        )
        if best is None or _before(found, best[0]):
            best = (found, setting)
    if best is None:
        if cut:  # every setting proven no faster than *cutoff* (another MTP placement's plan)
            return Solution(problem, "time_limit", stopped_by="cutoff", notes=notes)
        if clock.out:
            message = f"no plan found in {clock.elapsed:.1f} s"
            return Solution(problem, "time_limit", message=message, stopped_by="time_limit", notes=notes)
        return _infeasible(problem, limits, clock, notes, report)
    solution, setting = best
    solution.setting = setting
    if no_split:
        notes.append(
            TimedNote(
                f"torchtitan's settings: every N-th for N in {_runs(no_split)} not searched: no split "
                "of the layers over the ranks runs each rank's blocks within {}",
                bar_seen(best, cutoff),
            )
        )
    if unfit:
        notes.append(
            f"torchtitan's settings: every N-th for N in {unfit[0]}..{unfit[-1]} ({len(unfit)}) not searched: no plan "
            f"fits at N = {unfit_from}, and at one chunk a rank fewer FULL blocks hold more"
        )
    if as_none:
        notes.append(
            f"torchtitan's settings: every N-th for N in {as_none[0]}..{as_none[-1]} ({len(as_none)}) not searched: "
            "N layers on a rank take longer than the best plan, so a faster plan under them recomputes no block, "
            "the none setting's"
        )
    if passed:
        notes.append(
            TimedNote(
                f"torchtitan's settings: every N-th for N in {passed[0]}..{passed[-1]} ({len(passed)}) not searched, "
                "none faster than {} (`_none_floor`)",
                max(floors.values()),
            )
        )
    solution.notes += [*notes, f"torchtitan's settings: {setting.describe()}, the fastest of {len(candidates)}"]
    return solution


def _runs(values: Sequence[int]) -> str:
    """Ascending whole numbers as runs: 2..32 for thirty-one of them (a note at one chunk a rank listed each N)."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}" for run in runs)


def bar_seen(best: tuple[Solution, Setting] | None, cutoff: float) -> float:
    """The time the settings had to beat: the best plan's, else the cutoff."""
    return best[0].objective if best is not None and best[0].objective is not None else cutoff


def _block_costs(problem: BalanceInput) -> tuple[float, float]:
    """(the least forward + backward of a body layer, the least a fully recomputed one costs over it): each
    body type taken once, whatever its count."""
    bodies = problem.layers.bodies
    least = [min(body.backward_time.get(o, math.inf) for o in problem.options) for body in bodies]
    per_layer = min(body.forward_time + b for body, b in zip(bodies, least, strict=True))
    extra = min(max(0.0, body.backward_time.get("FULL", math.inf) - b) for body, b in zip(bodies, least, strict=True))
    return per_layer, extra


def _every_nth_split(problem: BalanceInput, n: int, limit: float) -> bool:
    """Whether the body layers can be split over the ranks with each rank's work, m × (its layers' least
    forward + backward, each N-th block's recompute, its head and tail), below *limit*: a rank runs each of
    its ops for each micro-batch one after another, so T is at least that; when no split does, no plan under
    every N-th block beats *limit*. Each rank's most layers found by walking up its count (the work grows
    with it), the ranks' sum against the layers."""
    per_layer, extra = _block_costs(problem)
    m, total = problem.micro_batches, problem.layers.nb_body_layers
    held = 0
    for stage in range(problem.stages):
        fixed = problem.fixed_work(stage)
        most = 0
        while most < total and m * ((most + 1) * per_layer + (most + 1) // n * extra + fixed) < limit:
            most += 1
        held += most
        if held >= total:
            return True
    return False


def _more_blocks_hold_less(problem: BalanceInput) -> bool:
    """Whether no plan fitting under every N-th block means none fits under any larger N (nor none): at one
    chunk a rank, a cell of k blocks recomputes ⌊k/N⌋ of them whole, fewer as N grows, and with one body type
    whose FULL keeps no more per micro-batch than NONE a plan's counts under a larger N hold at least as much
    on every stage (parameters and head and tail the same). With several chunks a rank the FULL blocks move
    between chunks, which keep different micro-batches in flight; with several body types between types."""
    bodies = problem.layers.bodies
    if problem.chunks != 1 or len(bodies) != 1:
        return False
    memory = bodies[0].memory_mb
    return "FULL" in memory and "NONE" in memory and memory["FULL"] <= memory["NONE"]


def _rank_layers_floor(problem: BalanceInput, layers: int) -> float:
    """A proven lower bound on every plan with *layers* body layers (or more) on one rank, one of them fully
    recomputed (every N-th block at N = *layers*): the rank runs each of its ops for each micro-batch one
    after another, so T ≥ m × its layers' least forward + backward, the recomputed one's extra at least the
    least FULL costs over the least backward (0 when FULL is not above it). Under every N-th block a plan
    below it holds fewer than N layers on every rank, recomputes no block and is a plan of the none setting,
    solved before with a larger share: solving it again would only re-search the none setting's plans."""
    per_layer, extra = _block_costs(problem)
    return problem.micro_batches * (layers * per_layer + extra)


def _none_floor_reaches(
    problem: BalanceInput,
    target: float,
    floors: dict[bool, float],
    known: Sequence[Plan],
    exact: bool,
    limits: WorkLimits,
    clock: Clock,
    report: Reporter,
) -> bool:
    """Whether `_none_floor` proves every plan whose layers each take at least NONE's backward no faster
    than *target*. Under torch's lock step with pp dividing m, first the op graph's floor, the cheaper solve
    (session 27: Llama-3.1-8B PP 2 × 4 chunks, the lock step's solve 16.9 CPU s, the op graph's 7.7): the
    lock step only adds waits to its precedences there (each rank runs the op graph's order, every input
    exchanged at an earlier step), so it bounds the lock step too; the lock step's own, the tighter, where
    the op graph's falls short. A floor is solved once (*floors*, keyed by op graph), and only where it could reach
    *target*: it is at most the time of any none plan, so not while the even split's, or one of *known*
    (none plans), runs below it there."""
    bodies = problem.layers.bodies
    if any(body.backward_time.get("FULL", math.inf) < body.backward_time.get("NONE", math.inf) for body in bodies):
        return False
    # the op graph's order is torch's table's with groups of pp (tests/test_balance_lockstep.py)
    lock_step = (
        problem.lock_step and problem.micro_batches % problem.stages == 0 and problem.group in (None, problem.stages)
    )
    if any(floor >= target for floor in floors.values()):  # a floor already known (the none setting's own)
        return True
    for op_graph in (True, False) if lock_step else (False,):
        free = replace(problem, memory_mb=1e15, op_graph=op_graph)
        if op_graph not in floors:
            witnesses = [setting_plan(free, Setting("none")), *(Plan(free, plan.counts) for plan in known)]
            if any(not plan.problems() and plan.iteration_time < target for plan in witnesses):
                continue
            floors[op_graph] = _none_floor(free, exact, limits, clock, report)
        if floors[op_graph] >= target:
            return True
    return False


def _none_floor(free: BalanceInput, exact: bool, limits: WorkLimits, clock: Clock, report: Reporter) -> float:
    """A proven lower bound on every plan whose layers each take at least NONE's backward, *free* the
    problem with the device's memory unbounded: the bound of its plans with every layer NONE (a schedule's
    makespan grows with its ops' times, its op orders being fixed)."""
    none = Setting("none")
    found = _solve(
        free,
        Catalogue(free, none, ListingBudget(limits.listing_work, clock)),
        exact,
        limits,
        clock,
        report,
        False,
        none,
    )
    return found.bound if found.bound is not None else 0.0


def _before(found: Solution, best: Solution) -> bool:
    """Whether one Megatron-Core setting's plan goes before another: faster, or as fast (the tie
    tolerance) and first by the tie-breaking's order (least recompute, ..., most headroom)."""
    assert found.objective is not None and best.objective is not None
    assert found.plan is not None and best.plan is not None
    if found.objective < best.objective * (1 - TOLERANCE):
        return True
    return found.objective <= best.objective * (1 + TOLERANCE) and tie_key(found.plan) < tie_key(best.plan)


def choices_under(problem: BalanceInput, choices: list[list[StageChoice]], value: float) -> list[list[StageChoice]]:
    """Of stage choices listed for a larger value (`choices_within`, not the closed form's), those that can be in a
    plan worth *value* or less: each stage's work per micro-batch within `work_limit` (a stage is busy m times
    its work). A plan that fast uses no other of the listed ones."""
    limit = work_limit(problem, value, closed_form=False) * (1 + 1e-12)
    return [
        [c for c in stage if problem.fixed_work(s) + sum(cell.forward + cell.backward for cell in c.cells) <= limit]
        for s, stage in enumerate(choices)
    ]


def _cutoff_proven(
    problem: BalanceInput,
    choices: list[list[StageChoice]],
    cutoff: float,
    busiest: float,
    family_rows: Sequence[tuple[dict, float]],
    work: int,
    clock: Clock,
    told: Callable[[str], None] | None = None,
) -> bool:
    """Whether probing proves that no plan beats *cutoff*, probing a hair above it (a proof holds below
    value·(1 − MARGIN)), over the listed stage choices a plan that fast can use: a stage is busy m times
    its work (`work_limit`), so a faster plan uses none of the others and the proof over these holds for
    every plan. Until session 30 it probed every choice listed for the start plan's time: Llama-3.1-8B
    PP 2 × 4 chunks at 55000 MB (torchtitan, full AC imported) proved every 10th to 15th block no faster
    than every 4th in 1,560 to 1,640 relaxations each; over the choices within the cutoff, in 8 to 14."""
    target = cutoff * (1 + 4 * PROBE_MARGIN)
    kept = choices_under(problem, choices, target)
    if not all(kept):
        return True  # some stage has no choice within it: no plan that fast
    model = ChoiceModel(problem, kept, time_unit(problem))
    model.add_least_busiest(busiest, closed_form=False)
    for common, level in family_rows:
        _add_family_row(model, common, level)
    return probe(problem, kept, model, target, work, clock, told=told).proven


def _start_plans(problem: BalanceInput, catalogue: Catalogue, setting: Setting | None) -> list[Plan]:
    """Plans that fit without a program: each uniform split, the even split with each stage's
    least-backward options that fit (for a setting: the even split under it)."""
    if setting is not None:
        plan = setting_plan(problem, setting)
        return [plan] if plan.fits and not plan.problems() else []
    fitting = [plan for plan in (uniform_plan(problem, option) for option in problem.options) if plan.fits]
    even = even_split_best_options(problem, catalogue)
    if even is not None:
        fitting.append(even)
    return fitting


def _solve(
    problem: BalanceInput,
    catalogue: Catalogue,
    exact: bool,
    limits: WorkLimits,
    clock: Clock,
    report: Reporter,
    tie_break: bool,
    setting: Setting | None = None,
    cutoff: float = math.inf,
) -> Solution:
    """The plan (under *setting*, if given); with a finite *cutoff* the search ends once it proves
    that no plan beats *cutoff* (`stopped_by: "cutoff"`, the plan found so far, if any)."""
    tau = time_unit(problem)
    notes: list[str] = []
    fitting = _start_plans(problem, catalogue, setting)

    def cut_short(cut: ListingCut) -> Solution:
        """The listing was cut: the best plan so far, with the cell program where it can be built."""
        return _cut_short(
            problem,
            fitting,
            cut.reason,
            _work_bound(problem),
            limits,
            clock,
            notes,
            report,
            setting is not None,
            catalogue,
        )

    # 1. The closed form, over choices reduced by stage totals.
    bound = min((plan.closed_form_time for plan in fitting), default=math.inf)
    if not math.isfinite(bound):
        # No even split fits: find some plan with few layers per cell first, to bound the listing.
        cells = max(1, len(problem.cells) - len(problem.reserved_cells))
        cap = 2 * math.ceil(problem.layers.nb_body_layers / cells) + 1
        try:
            choices = [catalogue.stage_choices(s, math.inf, cap, "sum") for s in range(problem.stages)]
        except ListingCut as cut:
            return cut_short(cut)
        if all(choices):
            model = ChoiceModel(problem, choices, tau)
            model.add_closed_form()
            first = _run(model, False, limits, clock, None, (), report)
            if first.plan is not None:
                bound = first.plan.closed_form_time
    try:
        choices = choices_within(problem, catalogue, bound, closed_form=True, most=limits.stage_choices)
    except ListingCut as cut:
        return cut_short(cut)
    if not all(choices):
        return (
            _infeasible(problem, limits, clock, notes, report) if setting is None else Solution(problem, "infeasible")
        )
    report("listing", f"closed form: {sum(len(stage) for stage in choices)} stage choices listed")
    start = min(fitting, key=lambda plan: plan.closed_form_time, default=None)
    upper = max(start.stage_time(s) for s in range(problem.stages)) if start is not None else math.inf
    busiest = least_max_work(problem, choices, tau, upper, limits.check_work, clock)
    model = ChoiceModel(problem, choices, tau)
    model.add_closed_form()
    model.add_least_busiest(busiest, closed_form=True)
    closed = _run(model, False, limits, clock, start, (), report)
    listed = sum(len(stage) for stage in choices)
    notes.append(TimedNote(f"closed form: {listed} stage choices, {closed.status}, least busiest stage {{}}", busiest))
    if closed.note is not None:
        notes.append(closed.note)
    if closed.plan is None:
        if closed.status == "infeasible":
            return (
                _infeasible(problem, limits, clock, notes, report)
                if setting is None
                else Solution(problem, "infeasible")
            )
        return Solution(
            problem,
            "time_limit",
            "closed_form",
            message=f"no plan found in {clock.elapsed:.1f} s",
            stopped_by=closed.status,
            notes=notes,
        )
    closed_plan = closed.plan
    report("closed_form", f"closed form {closed.status}", closed_plan.closed_form_time, closed.bound)
    if not exact:
        best = closed_plan
        if tie_break and closed.status == "optimal" and not clock.out:
            best, tie_notes = break_ties(
                model, closed.solver, catalogue, best, lambda plan: plan.closed_form_time, None, limits.tie_work, clock
            )
            notes += tie_notes
        ties_cut = _ties_cut(tie_break and closed.status == "optimal", clock, notes)
        objective = best.closed_form_time
        bound_value = objective if closed.status == "optimal" else min(closed.bound, objective)
        return Solution(
            problem,
            "optimal" if closed.status == "optimal" else "time_limit",
            "closed_form",
            best,
            objective,
            bound_value,
            _gap(objective, bound_value),
            objective if closed.status == "optimal" else None,
            closed.status,
            closed.rounds,
            0,
            listed,
            clock.elapsed,
            stopped_by="time_limit" if ties_cut else closed.status,
            notes=notes,
            memory_free=not catalogue.memory_refused,
        )

    if exact and problem.micro_batches * busiest >= cutoff * (1 + GAP_TOLERANCE):
        # the busiest stage alone takes longer than the plan to beat: T ≥ m·S*
        notes.append(TimedNote("critical path: not searched, T ≥ m·S* = {}", problem.micro_batches * busiest))
        return Solution(problem, "time_limit", "critical_path", stopped_by="cutoff", notes=notes)

    # 2. The critical path, over choices Pareto-reduced per cell, bounded by the best plan so far.
    incumbents = [closed_plan, *fitting]
    # The closed form does not see how a stage splits its work between chunks, nor the schedule's
    # fill and drain: moves judged by the schedule itself give the program a far better start.
    # They stop in local optima, so from two starts: the closed form's optimum and the best other.
    others = [plan for plan in fitting if plan.counts != closed_plan.counts]
    starts = [closed_plan, *([min(others, key=lambda plan: plan.iteration_time)] if others else [])]
    reoption = _reoption(setting) if setting is not None else None
    ops = 2 * problem.micro_batches * problem.chunks * problem.stages
    incumbents += [
        improve(plan, limits.local_moves, limits.local_work // ops // len(starts), reoption, clock) for plan in starts
    ]
    start = min(incumbents, key=lambda plan: plan.iteration_time)
    try:
        choices = choices_within(problem, catalogue, start.iteration_time, closed_form=False, most=limits.stage_choices)
    except ListingCut as cut:
        lower = max(_work_bound(problem), problem.micro_batches * busiest)
        return _cut_short(
            problem, incumbents, cut.reason, lower, limits, clock, notes, report, improved=True, catalogue=catalogue
        )
    # Whole stages swapped for listed choices reach plans the layer moves cannot. The program still
    # starts from the plan above: it collects its path rows from the plans it finds on its way down,
    # and a start that is already (near) optimal leaves it too few to prove anything (DeepSeek-V3's
    # run config: proven optimal from the local moves' start, not within its work limits from the
    # exchanges'). The exchanged plan is taken at the end when the program found none as fast.
    exchanges: list[Plan] = []

    def exchanged_to(plan: Plan) -> None:
        exchanges.append(plan)
        report("exchange", f"stage exchange {len(exchanges)}", plan.iteration_time)

    exchanged = exchange(start, choices, limits.exchange_work, clock, exchanged_to)
    report(
        "start_plan",
        f"best of the even splits, the closed form's optimum and local moves; {len(exchanges)} stage "
        "exchange(s) from it beside it",
        min(start.iteration_time, exchanged.iteration_time),
        figures=(("before the exchanges", start.iteration_time),),
    )
    report("listing", f"critical path: {sum(len(stage) for stage in choices)} stage choices listed")
    model = ChoiceModel(problem, choices, tau)
    model.add_least_busiest(busiest, closed_form=False)
    seeds = _path_seeds(problem, incumbents, max(10, limits.seed_work // ops // 2))
    family_rows: list[tuple[dict, float]] = []  # (U, L*): T − U·D ≥ L*, valid for every plan
    if problem.chunks == 1 and not clock.out:
        # families that pay off where a stage is a cell (V = 1); for V > 1 the bisection costs more
        # than the rows gain (docs/balance.md)
        # the nudged family runs the schedule once per stage (2·m·P ops each): past `family_work` only the drain
        families = [drain_family(problem)]
        if ops * problem.stages <= limits.family_work:
            families.append(nudged_family(problem))
        else:
            notes.append(
                f"nudged path family: not added, its {problem.stages} schedules of {ops:,} ops each are over the "
                f"{limits.family_work:,} ops it may run"
            )
        for family in families:
            common, level = family_row(problem, choices, family, tau, limits.check_work, clock)
            family_rows.append((common, level))
            _add_family_row(model, common, level)
            seeds += family
            report(
                "bound",
                f"{len(family)} paths as one row: T ≥ their common part + level",
                start.iteration_time,
                figures=(("level", level),),
            )
    # Probing (`probing`): each stage choice held against the path relaxation; when none can be in
    # a plan faster than the best known, that plan is proven optimal without the program's search.
    known = min(start, exchanged, key=lambda plan: plan.iteration_time)
    # to be taken a plan must beat *cutoff* (`_megatron`, `_torchtitan`): first try to prove that none does
    # (`_cutoff_proven`); the search below is left as it would be without a cutoff, so the plans found do not
    # depend on it
    if known.iteration_time >= cutoff * (1 + GAP_TOLERANCE) and _cutoff_proven(
        problem, choices, cutoff, busiest, family_rows, limits.probe_work // ops, clock, _told(report)
    ):
        notes.append(TimedNote("critical path: not searched, no plan faster than {} (probing)", cutoff))
        return Solution(problem, "time_limit", "critical_path", stopped_by="cutoff", notes=notes)
    ties = known.iteration_time * (1 + TOLERANCE) if tie_break else None
    probed = probe(
        problem, choices, model, known.iteration_time, limits.probe_work // ops, clock, ties=ties, told=_told(report)
    )
    report(
        "bound",
        f"probing: {probed.relaxations} relaxations, {probed.rounds} rounds, {probed.stopped_by}",
        known.iteration_time,
        known.iteration_time if probed.proven else probed.bound,
    )
    notes.append(
        TimedNote(
            f"probing: {probed.relaxations} relaxations, {probed.rounds} rounds, {probed.stopped_by}, bound {{}}",
            probed.bound,
        )
    )

    def program_over(kept: list[list[int]]) -> ChoiceModel:
        """The program over the choices probing kept (every stage keeps one), with the same rows."""
        sub = ChoiceModel(problem, [[stage[j] for j in js] for stage, js in zip(choices, kept, strict=True)], tau)
        sub.add_least_busiest(busiest, closed_form=False)
        for common, level in family_rows:
            _add_family_row(sub, common, level)
        return sub

    paths = [*seeds, *probed.paths]
    if probed.proven:
        critical = _Run("optimal", known, known.iteration_time, probed.rounds, len(probed.paths))
    else:
        # a faster plan, if any, uses only the choices left: the program searches them alone, and
        # its bound (over them) holds for every plan up to the probing's cut-off
        critical = _run(
            program_over(probed.alive), True, limits, clock, start, paths, report, cutoff, known.iteration_time
        )
        critical.bound = max(min(critical.bound, probed.cutoff), probed.bound)
    # the tie-breaking needs only the choices a plan as fast as the best may use (probing's first phase)
    if all(probed.alive_ties):
        model = program_over(probed.alive_ties)
    listed = sum(len(stage) for stage in choices)
    notes.append(
        f"critical path: {listed} stage choices, {critical.paths} paths, {critical.rounds} rounds, {critical.status}"
    )
    if critical.note is not None:
        notes.append(f"critical path: {critical.note}")
    best = min(
        [plan for plan in (start, critical.plan, exchanged) if plan is not None], key=lambda plan: plan.iteration_time
    )
    objective = best.iteration_time
    proven = critical.status == "optimal"
    bound_value = objective if proven else min(critical.bound, objective)
    too_large = _too_large(model, paths, limits) if tie_break else None
    if too_large is not None:
        notes.append(f"tie-breaking among equally fast plans: not run, {too_large}")
    elif tie_break and not clock.out:
        report("tie_break", "least recompute, one option per stage, most headroom", objective, bound_value)
        tied, tie_notes = break_ties(
            model,
            _loaded(model, [*paths, best.critical_path_counts], clock),
            catalogue,
            best,
            lambda plan: plan.iteration_time,
            lambda plan: plan.critical_path_counts,
            limits.tie_work,
            clock,
        )
        notes += tie_notes
        if tied.iteration_time <= objective * (1 + CONSISTENCY):
            best = tied
    return Solution(
        problem,
        "optimal" if proven else "time_limit",
        "critical_path",
        best,
        best.iteration_time,
        bound_value,
        _gap(best.iteration_time, bound_value),
        closed_plan.closed_form_time if closed.status == "optimal" else None,
        closed.status,
        critical.rounds,
        critical.paths,
        listed,
        clock.elapsed,
        stopped_by="time_limit"
        if _ties_cut(tie_break, clock, notes)
        else ("optimal" if proven else ("infeasible" if critical.status == "infeasible" else critical.status)),
        notes=notes,
        memory_free=not catalogue.memory_refused,
    )


def _rank_cap(problem: BalanceInput) -> int:
    """Most body layers one rank (a stage's chunks) holds: every open cell of the other ranks holds one."""
    open_cells = [s for v, s in problem.cells if (v, s) not in problem.reserved_cells]
    fewest_elsewhere = min(len(open_cells) - open_cells.count(stage) for stage in range(problem.stages))
    return max(problem.layers.nb_body_layers - fewest_elsewhere, 1)


def _work_bound(problem: BalanceInput) -> float:
    """T ≥ m × (least work of one micro-batch) / P: some stage works at least the average, m times."""
    layers = problem.layers
    least = sum(
        body.nb_layer * (body.forward_time + min(body.backward_time.get(o, math.inf) for o in problem.options))
        for body in layers.bodies
    )
    fixed = layers.head_forward() + layers.head_backward() + layers.tail_forward() + layers.tail_backward()
    return problem.micro_batches * (least + fixed) / problem.stages


def _cell_program(
    problem: BalanceInput,
    catalogue: Catalogue,
    value: float,
    start: Plan | None,
    bound: float,
    limits: WorkLimits,
    clock: Clock,
    notes: list[str],
    report: Reporter,
    plans: Sequence[Plan] = (),
) -> _Run | None:
    """The program over cell choices, which lists no product of chunks, for plans worth *value* or
    less (from *start*, if any); None when it cannot be built."""
    fresh = Catalogue(
        problem,
        catalogue.setting,
        ListingBudget(limits.cell_choices, clock, _listing_progress(report, "cell choices", "cell choices")),
    )
    limit = work_limit(problem, value, closed_form=False)
    try:
        cells = cell_choices(problem, fresh, limit, _cell_cap(problem, limit))
    except ListingCut as cut:
        reason = f"more than {limits.cell_choices} cell choices" if cut.reason == "work_limit" else "the time limit"
        notes.append(f"cell program: not built ({reason})")
        return None
    listed = sum(len(options) for options in cells.values())
    if not (cells and all(cells.values())):
        return None
    model = CellModel(problem, cells, time_unit(problem))
    if math.isfinite(bound):
        model.add_lower_bound(bound)
    report("listing", f"cell program: {listed} cell choices listed")
    ops = 2 * problem.micro_batches * problem.chunks * problem.stages
    known = [*plans, *([start] if start is not None else [])]
    seeds = _path_seeds(problem, known, max(10, limits.seed_work // ops // 2))
    run = _run(model, True, limits, clock, start, seeds, report)
    notes.append(f"cell program: {run.paths} paths, {run.rounds} rounds, {run.status}")
    if run.note is not None:
        notes.append(f"cell program: {run.note}")
    return run


def _cut_short(
    problem: BalanceInput,
    plans: Sequence[Plan],
    reason: str,
    bound: float,
    limits: WorkLimits,
    clock: Clock,
    notes: list[str],
    report: Reporter,
    improved: bool = False,
    catalogue: Catalogue | None = None,
) -> Solution:
    """The listing of stage choices ran past its budget: the best plan known (improved by local
    moves unless it already was) with a simple proven bound, or no plan. With the catalogue, the
    program over cell choices (`cell_model`) then searches from that plan within the work limits,
    and may prove it optimal."""
    notes.append(f"stage listing stopped by the {reason.replace('_', ' ')}")
    # Under a setting (a Megatron-Core alternative beside the plan, or one of torchtitan's settings) no
    # plan known is left at that: torchtitan's every N-th block settings meet it at every balance, and
    # searching each from none cost a search's balance up to 3.7 times its CPU (torchtitan-llama3.1-8b-8,
    # PP2 VP4 FSDP: 9.4 → 34.3 CPU-s, for a plan 0.5 % faster).
    searched = not plans and catalogue is not None and catalogue.setting is None and not clock.out
    if searched:
        # no even split fits, so no plan is known: the least-memory program (lists one leanest cell per
        # split, far fewer) proves none fits, or its plan fits and starts the search (bounding the cell
        # choices below by its time). The demo's 96 layers at P=4 V=7: "no plan found" after 8 CPU-s,
        # more than 30,000 cell choices; the least plan needs 92,070 MB of 56,000, proven in 0.1 s.
        least = least_memory_plan(
            problem, limits.closed_nodes, clock, report, "the stage listing stopped before any plan"
        )
        if least.proven and least.bound_mb > problem.memory_mb * (1 + 1e-9):
            assert least.plan is not None
            return _infeasible(problem, limits, clock, notes, report, (least.plan.peak_memory_mb, True))
        if least.plan is not None and least.plan.fits and not least.plan.problems():
            notes.append(f"least-memory plan: {mb_words(least.plan.peak_memory_mb)}, the start")
            plans = [least.plan]
    if searched and not plans and not clock.out:
        # no plan known still: the program over cell choices may still find one (or prove none fits),
        # where the stage listing could not
        assert catalogue is not None
        first = _cell_program(problem, catalogue, math.inf, None, bound, limits, clock, notes, report)
        if first is not None and first.status == "infeasible":
            return _infeasible(problem, limits, clock, notes, report)
        if first is not None and first.plan is not None:
            plans = [first.plan]
    if not plans:
        return Solution(
            problem,
            "time_limit",
            message=f"no plan found in {clock.elapsed:.1f} s",
            stopped_by=reason,
            seconds=clock.elapsed,
            notes=notes,
        )
    best = min(plans, key=lambda plan: plan.iteration_time)
    ops = 2 * problem.micro_batches * problem.chunks * problem.stages
    if not improved:
        best = improve(best, limits.local_moves, limits.local_work // ops, clock=clock)
    bound = min(bound, best.iteration_time)
    report("stopped", f"stage listing stopped by the {reason.replace('_', ' ')}", best.iteration_time, bound)
    stopped_by = reason
    if catalogue is not None and not clock.out:
        run = _cell_program(problem, catalogue, best.iteration_time, best, bound, limits, clock, notes, report, plans)
        if run is not None:
            if run.plan is not None and run.plan.iteration_time < best.iteration_time:
                best = run.plan
            if run.status == "optimal":
                bound, stopped_by = best.iteration_time, "optimal"
            elif run.status in ("work_limit", "time_limit"):
                bound, stopped_by = min(max(bound, run.bound), best.iteration_time), run.status
    return Solution(
        problem,
        "optimal" if stopped_by == "optimal" else "time_limit",
        "critical_path",
        best,
        best.iteration_time,
        bound,
        _gap(best.iteration_time, bound),
        stopped_by=stopped_by,
        seconds=clock.elapsed,
        notes=notes,
    )


def _ties_cut(tried: bool, clock: Clock, notes: list[str]) -> bool:
    """Whether the clock ran out before the tie-breaking among equally fast plans was done: another
    run may then pick another of them, and the result must not claim to be repeatable."""
    if tried and clock.out:
        notes.append("the time limit cut the tie-breaking short: another run may pick another equally fast plan")
        return True
    return False


def _gap(objective: float, bound: float) -> float:
    return 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective)


def _infeasible(
    problem: BalanceInput,
    limits: WorkLimits,
    clock: Clock,
    notes: list[str],
    report: Reporter | None = None,
    floor: tuple[float | None, bool] | None = None,
) -> Solution:
    """No plan fits: say how much memory the least-memory plan needs (*floor*, when already found)."""
    needed, proven = floor if floor is not None else memory_floor(problem, limits.closed_nodes, clock, report)
    if needed is None:
        message = f"no plan fits in {mb_words(problem.memory_mb)} per device"
    else:
        message = (
            f"no plan fits in {mb_words(problem.memory_mb)} per device: the least-memory plan needs "
            f"{mb_words(needed)}{'' if proven else ' (the least found within the limits)'}"
        )
    return Solution(
        problem,
        "infeasible",
        min_memory_mb=needed,
        message=message,
        seconds=clock.elapsed,
        stopped_by="infeasible",
        notes=notes,
    )
