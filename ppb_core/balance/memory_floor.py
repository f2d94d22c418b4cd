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
from dataclasses import dataclass

import numpy as np

from ppb_core.balance import highs
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.choice_model import ChoiceModel  # the same columns and rows as the balancer's
from ppb_core.balance.choices import Catalogue, CellChoice, StageChoice
from ppb_core.balance.highs import INF
from ppb_core.balance.plan import Plan
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.progress import Clock, Reporter
from ppb_core.model.switches import CELL_RANK, OPTIONS
from ppb_core.units import mb_words

GROUP_ROWS = 64  # undominated partial stages kept per kind (body types per cell, layers per type)
WATCH_EVERY_S = 1.0  # seconds between progress steps while the program runs (people only: no decision)


def _mb(value: float) -> str:
    """MB in words, or "none yet" before the search has a figure (HiGHS reports ±inf)."""
    return mb_words(value) if np.isfinite(value) and abs(value) < 1e300 else "none yet"


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


def _stage_choices(
    problem: BalanceInput, catalogue: Catalogue, stage: int, bound: float, clock: Clock
) -> tuple[list[StageChoice], bool]:
    """The stage's choices no heavier than *bound*, one per (body types of each cell, layers of each
    type), the lightest; and whether the listing is complete.

    Grown chunk by chunk as whole arrays: a partial stage is dropped when it is already over the
    bound, or when another with the same body types per cell and layers per type holds no more at
    every in-flight vector (whatever the later chunks add, the other stays as light). Past
    `GROUP_ROWS` undominated partials of one kind the lightest are kept, and the answer is no
    longer proven least."""
    most = problem.layers.nb_body_layers - (len(problem.cells) - len(problem.reserved_cells) - 1)
    per_chunk = []
    for v in range(problem.chunks):
        options = [catalogue.empty_cell()] if (v, stage) in problem.reserved_cells else []
        for types, counts in catalogue.compositions(most):
            if not catalogue.reachable((v, stage), types, counts):
                continue
            cell = _leanest(catalogue, types, counts)
            if cell.parameter_mb + problem.constant_memory_mb - problem.relief_mb(stage, types) <= bound:
                options.append(cell)
        per_chunk.append(options)
    vectors = problem.vectors[stage]
    in_flight = np.array(vectors, dtype=float).reshape(len(vectors), problem.chunks)
    limit = bound * (1 + 1e-9) + 1e-9
    n_bodies = len(problem.layers.bodies)
    complete = True
    index = np.zeros((1, 0), dtype=np.int64)
    kinds = np.zeros((1, 0), dtype=np.int64)  # per chunk, the code of its cell's body types
    totals = np.zeros((1, n_bodies), dtype=np.int64)
    # less the most relief a stage can have (of no body type): holding some only lowers it, and the
    # choices kept are priced exactly after (`Catalogue.stage_memory`)
    constant = problem.constant_memory_mb - problem.relief_row(stage)[0]
    held = np.array([[problem.head_stage_memory_mb(stage, v) + constant for v in vectors]])
    body_codes: dict[tuple[int, ...], int] = {}
    for chunk, options in enumerate(per_chunk):
        if not options or clock.out:
            return [], not options
        parameters = np.array([c.parameter_mb for c in options])
        activation = np.array([c.activation_mb for c in options])
        kind = np.array([body_codes.setdefault(c.bodies, len(body_codes)) for c in options], dtype=np.int64)
        per_body = np.array([[c.body_count(b) for b in range(n_bodies)] for c in options], dtype=np.int64)
        grown: list[tuple[np.ndarray, np.ndarray]] = []
        step = max(1, 2_000_000 // (len(options) * max(1, len(vectors))))
        for first in range(0, len(held), step):
            block = (
                held[first : first + step, None, :]
                + parameters[None, :, None]
                + activation[None, :, None] * in_flight[None, None, :, chunk]
            )
            rows, columns = np.nonzero(block.max(axis=2, initial=0.0) <= limit)
            grown.append((first + rows, columns, block[rows, columns]))
        rows = np.concatenate([g[0] for g in grown])
        columns = np.concatenate([g[1] for g in grown])
        held = np.concatenate([g[2] for g in grown])
        if not len(rows):
            return [], complete
        index = np.column_stack([index[rows], columns])
        kinds = np.column_stack([kinds[rows], kind[columns]])
        totals = totals[rows] + per_body[columns]
        kept, whole = _undominated_per_kind(np.column_stack([kinds, totals]), held)
        complete &= whole
        index, kinds, totals, held = index[kept], kinds[kept], totals[kept], held[kept]
    # the lightest of each kind: the first of its group (rows are sorted by peak within a kind)
    keys = np.column_stack([kinds, totals])
    firsts = np.ones(len(keys), dtype=bool)
    firsts[1:] = (keys[1:] != keys[:-1]).any(axis=1)
    return [
        StageChoice(tuple(per_chunk[chunk][int(j)] for chunk, j in enumerate(index[row])))
        for row in np.nonzero(firsts)[0]
    ], complete


def _undominated_per_kind(keys: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, bool]:
    """Rows to keep, grouped by key and sorted by peak within a group: those no other row of their
    group beats at every vector (the first of equals), at most `GROUP_ROWS` per group; and whether
    none was cut for the cap."""
    peak = held.max(axis=1, initial=0.0)
    order = np.lexsort((np.arange(len(keys)), held.sum(axis=1), peak, *keys.T[::-1]))
    keys, held = keys[order], held[order]
    starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)])
    ends = np.r_[starts[1:], len(keys)]
    kept: list[np.ndarray] = []
    whole = True
    for first, last in zip(starts, ends, strict=True):
        if last - first > 4 * GROUP_ROWS:
            last, whole = first + 4 * GROUP_ROWS, False
        group = held[first:last]
        # row i is dominated when an earlier row (lighter or as light) holds no more anywhere
        covers = (group[None, :, :] <= group[:, None, :]).all(axis=2)  # [i, j]: row j covers row i
        dominated = np.tril(covers, k=-1).any(axis=1)
        survivors = np.flatnonzero(~dominated)
        if len(survivors) > GROUP_ROWS:
            survivors, whole = survivors[:GROUP_ROWS], False
        kept.append(order[first + survivors])
    return np.concatenate(kept), whole


@dataclass(frozen=True)
class LeastMemory:
    """The least-memory program's answer: its plan (None when it found none), whether the listing was
    complete and the program proven optimal, the MB every plan needs at least (its proven bound; 0 when
    nothing is proven), and the even split's least memory when the program was not built (the listing
    cut by the clock, or a stage with nothing to list), else None."""

    plan: Plan | None
    proven: bool
    bound_mb: float
    even_split_mb: float | None = None


def least_memory_plan(
    problem: BalanceInput, nodes: int, clock: Clock, report: Reporter | None = None, why: str = "no plan fits"
) -> LeastMemory:
    """The plan needing the least memory, from the program in the module docstring; *nodes* bounds the
    search, *clock* is the wall-clock safety bound. *report* hears each step ("least_memory", the first
    saying *why* the search runs), and the search's best and bound every `WATCH_EVERY_S`
    ("least_memory_search"): a hopeless model's program can run a minute (1,024 layers over P=64, V=2:
    100,000 nodes)."""
    say = report if report is not None else (lambda *_args, **_kwargs: None)
    catalogue = Catalogue(problem)
    bound = _even_split_floor(problem, catalogue)
    say("least_memory", f"{why}: finding the least memory a plan needs, even split {mb_words(bound)}")
    listed = []
    for s in range(problem.stages):
        say("least_memory_search", f"least memory: listing stage {s + 1} of {problem.stages}")
        listed.append(_stage_choices(problem, catalogue, s, bound, clock))
    choices = [stage for stage, _ in listed]
    complete = all(whole for _, whole in listed)
    if clock.out or not all(choices):
        return LeastMemory(None, False, 0.0, bound)
    mu = float(problem.memory_mb)
    model = ChoiceModel(problem, choices, 1.0)
    for s, stage in enumerate(choices):
        terms = {model.top: 1.0}
        for j, choice in enumerate(stage):
            terms[model.y[s][j]] = -catalogue.stage_memory(s, choice.cells) / mu
        model.rows.append((0.0, INF, list(terms), list(terms.values())))
    solver = highs.new_solver(clock.remaining, nodes)
    highs.load(solver, model.columns, model.rows, model.top)
    listed_choices = sum(len(stage) for stage in choices)
    say("least_memory", f"least memory: program over {listed_choices:,} stage choices, at most {nodes:,} nodes")
    if report is not None and report.hook is not None:  # progress only when somebody listens
        highs.watch(
            solver,
            WATCH_EVERY_S,
            lambda done, best, proven: say(
                "least_memory_search",
                f"least memory: {done:,} of {nodes:,} nodes, best plan {_mb(best * mu)}, at least {_mb(proven * mu)}",
            ),
        )
    solver.run()
    if not highs.has_solution(solver):
        return LeastMemory(None, False, 0.0)
    plan = model.plan(list(solver.getSolution().col_value))
    proven = complete and highs.status(solver) == "optimal"
    # the proven bound is over every plan only when the listing lost none (`complete`)
    floor = solver.getInfo().mip_dual_bound * mu if complete else 0.0
    return LeastMemory(plan, proven, floor if np.isfinite(floor) else 0.0)


def memory_floor(
    problem: BalanceInput, nodes: int, clock: Clock, report: Reporter | None = None
) -> tuple[float | None, bool]:
    """(MB the least-memory plan needs, whether that is proven least) when no plan fits
    (`least_memory_plan`). Cut short, the even split's least memory is the answer (a plan that needs it
    exists), not proven least."""
    found = least_memory_plan(problem, nodes, clock, report)
    if found.plan is None:
        return found.even_split_mb, False
    return found.plan.peak_memory_mb, found.proven
