"""When no plan fits: the least peak stage memory any plan needs, from a second integer program.

Per stage the same listing as the balancer's (layer counts per cell and body type), each cell
under its options of least activation memory (options never add parameters, so that is the
least the split can need); y[s, j] picks one per stage, the same placement and order rows hold,
and Z ≥ Σ_j y[s, j]·(peak MB of choice j) for every stage; minimise Z. Listing only splits no
heavier than the even split's own least memory loses nothing: a heavier stage cannot be in a
plan lighter than the even split. Memory is divided by the device memory, so HiGHS's tolerances
are relative; the answer is the plan found, re-evaluated exactly.
"""

from __future__ import annotations

import itertools

from ppb_core.balance import highs
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.choice_model import ChoiceModel  # the same columns and rows as the balancer's
from ppb_core.balance.choices import Catalogue, CellChoice, StageChoice
from ppb_core.balance.highs import INF
from ppb_core.balance.problem import BalanceInput
from ppb_core.model.switches import CELL_RANK, OPTIONS


def _leanest(catalogue: Catalogue, types: tuple[int, ...], counts: tuple[int, ...]) -> CellChoice:
    """The cell's yaml-sayable options of least activation: per body type one option for all its
    layers (the least-activation option allowed), over every way to order ranks along the cell."""
    problem = catalogue.p
    bodies = problem.layers.bodies
    ranks = sorted({CELL_RANK[OPTIONS[k]] for k in problem.option_indices})
    best: CellChoice | None = None
    for variant in catalogue.variants:
        for cuts in itertools.combinations_with_replacement(ranks, len(types) - 1):
            bounds = [ranks[0], *cuts, ranks[-1]]
            rows, activation, backward = [], 0.0, 0.0
            for i, (body, n) in enumerate(zip(types, counts, strict=True)):
                allowed = [k for k in variant if bounds[i] <= CELL_RANK[OPTIONS[k]] <= bounds[i + 1]]
                if not allowed:
                    break
                k = min(allowed, key=lambda k: catalogue.activation[body][k])
                row = [0] * len(OPTIONS)
                row[k] = n
                rows.append(tuple(row))
                activation += n * catalogue.activation[body][k]
                backward += n * catalogue.backward[body][k]
            else:
                if best is None or activation < best.activation_mb:
                    forward = sum(bodies[b].forward_time * n for b, n in zip(types, counts, strict=True))
                    parameters = sum(bodies[b].memory_parameter_mb * n for b, n in zip(types, counts, strict=True))
                    best = CellChoice(types, tuple(rows), forward, backward, activation, parameters)
    assert best is not None
    return best


def _even_split_floor(problem: BalanceInput, catalogue: Catalogue) -> float:
    even = uniform_plan(problem, problem.options[0])
    peak = 0.0
    for s in range(problem.stages):
        cells = []
        for v in range(problem.chunks):
            bodies = tuple(l for l in range(len(even.counts)) if even.body_layers(l, v, s))
            sizes = tuple(even.body_layers(l, v, s) for l in bodies)
            cells.append(_leanest(catalogue, bodies, sizes) if bodies else catalogue.empty_cell())
        peak = max(peak, catalogue.stage_memory(s, cells))
    return peak


def _stage_choices(problem: BalanceInput, catalogue: Catalogue, stage: int, bound: float) -> list[StageChoice]:
    most = problem.layers.nb_body_layers - (len(problem.cells) - len(problem.reserved_cells) - 1)
    per_chunk = []
    for v in range(problem.chunks):
        options = [catalogue.empty_cell()] if (v, stage) in problem.reserved_cells else []
        for types, counts in catalogue.compositions(most):
            cell = _leanest(catalogue, types, counts)
            if cell.parameter_mb + problem.constant_memory_mb <= bound:
                options.append(cell)
        per_chunk.append(options)
    kept: dict[tuple, tuple[float, StageChoice]] = {}
    for cells in itertools.product(*per_chunk):
        used = catalogue.stage_memory(stage, cells)
        if used > bound:
            continue
        totals = tuple(sum(c.body_count(b) for c in cells) for b in range(len(problem.layers.bodies)))
        key = (tuple(c.bodies for c in cells), totals)
        if key not in kept or used < kept[key][0]:
            kept[key] = (used, StageChoice(tuple(cells)))
    return [choice for _, choice in kept.values()]


def memory_floor(problem: BalanceInput, nodes: int, time_limit: float) -> tuple[float | None, bool]:
    """(MB the least-memory plan needs, whether that is proven least); *nodes* bounds the search,
    *time_limit* is the wall-clock safety bound."""
    catalogue = Catalogue(problem)
    bound = _even_split_floor(problem, catalogue)
    choices = [_stage_choices(problem, catalogue, s, bound) for s in range(problem.stages)]
    mu = float(problem.memory_mb)
    model = ChoiceModel(problem, choices, 1.0)
    for s, stage in enumerate(choices):
        terms = {model.top: 1.0}
        for j, choice in enumerate(stage):
            terms[model.y[s][j]] = -catalogue.stage_memory(s, choice.cells) / mu
        model.rows.append((0.0, INF, list(terms), list(terms.values())))
    solver = highs.new_solver(time_limit, nodes)
    highs.load(solver, model.columns, model.rows, model.top)
    solver.run()
    if not highs.has_solution(solver):
        return None, False
    plan = model.plan(list(solver.getSolution().col_value))
    return plan.peak_memory_mb, highs.status(solver) == "optimal"
