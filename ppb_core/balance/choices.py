"""Everything a stage may run, reduced exactly to what can be optimal.

A stage's choice fixes, for each of its chunks, how many layers of each body type the cell holds
and under which options. Two facts make the set small without losing any optimum:

* Memory is per stage: a stage's peak depends on its own cells only.
* The iteration time (the longest path through the schedule) never decreases when a cell's
  backward time grows, and the forward time of a cell does not depend on options.

So among choices with the same layer counts per cell, only those whose vector of per-chunk
backward times is not dominated by another choice that fits can be optimal. Dominance compares
backward times as the tie-break does (`tie_units`): a layer's backward under an option faster than
NONE's by at most `TOLERANCE` (relative) counts as NONE's, so NONE is not dropped for a saving the
tie-break would call a tie; the plan stays within `TOLERANCE` of the optimum. Per cell, option
multisets dominated in (backward time, activation per micro-batch) are dropped first, since the
stage's memory grows with every chunk's activation. And a stage whose work per micro-batch
Σ_v (F_v + B_v) is above what a known plan's value allows (`program.work_limit`) cannot be in a
better plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from ppb_core.balance.megatron import Setting
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.progress import Clock
from ppb_core.dominance import undominated_in_order
from ppb_core.model.switches import CELL_RANK, OPTIONS

# One cell's options: per body type in the cell, layers under each option (OPTIONS order).
CellCounts = tuple[tuple[int, ...], ...]
NONE = OPTIONS.index("NONE")  # the option that recomputes nothing (`tiebreak._base_option`)
TOLERANCE = 1e-6  # relative: plans (and layer times) this close count as equally fast
UNITS = 1e12  # tie units per largest layer backward: sums of them stay exact integers in float64


def tied_times(times: Sequence[float], base: int) -> list[float]:
    """A body's backward time per option, one faster than the base option's (NONE) by at most
    `TOLERANCE` (relative) counted as the base's: such a saving is rounding, not a reason to recompute."""
    return [times[base] if t < times[base] <= t * (1 + TOLERANCE) else t for t in times]


def tie_units(backward: Sequence[Sequence[float]], base: int) -> list[list[float]]:
    """Per body type and option, `tied_times` as whole numbers of one unit (the largest time / `UNITS`).
    Sums of whole numbers below 2**53 are exact, so mixes and stages that tie compare equal whatever
    the order of their sums (with raw times, 3·t + t and 4·t may differ in the last bit)."""
    unit = tie_unit(backward)
    return [[float(round(t / unit)) for t in tied_times(row, base)] for row in backward]


def tie_unit(backward: Sequence[Sequence[float]]) -> float:
    """One tie unit in the times' own unit: the largest time / `UNITS` (1 when every time is 0)."""
    largest = max((t for row in backward for t in row), default=0.0)
    return largest / UNITS if largest > 0 else 1.0


class ListingCut(Exception):
    """The listing of stage choices ran past its work budget ("work_limit") or the clock ("time_limit")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


LISTING_STEPS = 20  # the listing's progress is told each time another 1/20 of its budget is spent


class ListingBudget:
    """What the listing may spend: array elements grown (deterministic) and the wall clock (safety).
    *report* hears (spent, budget) each time another 1/`LISTING_STEPS` of the budget is spent: a listing
    cut at its budget ran 8 CPU-s (the demo's 96 layers at P=4, V=7) with no progress line."""

    def __init__(
        self, elements: int, clock: Clock | None = None, report: Callable[[int, int], None] | None = None
    ) -> None:
        self.elements = elements
        self.total = elements
        self.clock = clock
        self.report = report
        self.told = 0  # elements spent when progress was last told

    def spend(self, elements: int) -> None:
        self.elements -= elements
        if self.elements < 0:
            raise ListingCut("work_limit")
        if self.clock is not None and self.clock.out:
            raise ListingCut("time_limit")
        spent = self.total - self.elements
        if self.report is not None and spent - self.told >= self.total / LISTING_STEPS:
            self.told = spent
            self.report(spent, self.total)


@dataclass(frozen=True)
class CellChoice:
    """A cell's layers and options. `bodies` are the body type indices present, in order."""

    bodies: tuple[int, ...]
    counts: CellCounts  # one row per entry of `bodies`
    forward: float  # body layers only; head and tail times are added by the cell
    backward: float
    activation_mb: float  # per micro-batch in flight
    parameter_mb: float
    tied: float | None = None  # backward in tie units (`tie_units`), what dominance compares
    # under a rank-wide setting (torchtitan's every N-th block): for each count mod its period of the
    # body layers the rank holds in earlier chunks, whether these options are the setting's; None: any
    residues: tuple[bool, ...] | None = None

    @property
    def rank(self) -> float:
        """What dominance compares: the backward in tie units, or the backward itself when not given."""
        return self.backward if self.tied is None else self.tied

    @property
    def layers(self) -> int:
        return sum(sum(row) for row in self.counts)

    def body_count(self, body: int) -> int:
        return sum(self.counts[self.bodies.index(body)]) if body in self.bodies else 0


@dataclass(frozen=True)
class StageChoice:
    cells: tuple[CellChoice, ...]  # one per chunk


Point = tuple[float, float, tuple, float]  # (backward, activation, per-option counts, backward in tie units)


def _pareto(points: list[Point], base: int = NONE) -> list[Point]:
    """Points not beaten (`_kept`) in (tie units, activation, recompute), the first of equal ones kept.
    A point's third element holds one row of per-option counts per body type."""
    rows = [tuple(map(sum, zip(*counts, strict=True))) if counts else () for _, _, counts, _ in points]
    layers = [sum(n for k, n in enumerate(row) if k != base) for row in rows]
    masks = [sum(1 << k for k, n in enumerate(row) if n) for row in rows]
    keep = _kept(
        np.array([r for _, _, _, r in points]),
        np.array([a for _, a, _, _ in points]),
        np.array(layers),
        np.array(masks),
    )
    return [points[i] for i in keep]


def _kept(backward: np.ndarray, activation: np.ndarray, layers: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Positions of the option mixes that can be in a plan the tie-break (`tiebreak.py`) picks, by backward.

    *backward* is in tie units (`tie_units`) where the catalogue gives them, so near-ties are ties.
    Mix j beats mix i (same layers) when it is no slower and no larger (B_j ≤ B_i, A_j ≤ A_i) and no
    worse for the tie-break: faster (B_j < B_i, so less recompute time), or as fast with fewer layers
    recomputed, or as fast and as many with only options i uses (a stage with j mixes no more options).
    Dropping i for j then never costs time, memory or any tie-break criterion. B and A alone would drop
    NONE beside an option as fast and leaner that still recomputes (issue 13's needless recompute)."""
    if not len(backward):
        return np.zeros(0, dtype=np.int64)
    popcount = np.array([bin(int(m)).count("1") for m in masks])
    order = np.lexsort((np.arange(len(backward)), popcount, activation, layers, backward))
    b, a, n, m = backward[order], activation[order], layers[order], masks[order]
    starts = np.r_[True, (b[1:] != b[:-1]) | (n[1:] != n[:-1])]  # first of each (B, layers) group
    group = np.cumsum(starts) - 1
    group_least = np.minimum.reduceat(a, np.flatnonzero(starts))
    before = np.r_[np.inf, np.minimum.accumulate(group_least)[:-1]]  # least A of the earlier groups
    alive = a < before[group]
    for first in np.flatnonzero(starts):  # within a group (same B, layers; A ascending): option subsets
        last = first + 1
        while last < len(b) and not starts[last]:
            last += 1
        for i in range(first + 1, last):
            if alive[i] and any((m[j] & ~m[i]) == 0 for j in range(first, i)):
                alive[i] = False
    return order[alive]


def _option_front(
    count: int, options: Sequence[int], backward: Sequence[float], activation: Sequence[float], base: int = NONE
):
    """(B, A, per-option counts) of `count` layers of one type under the given options, reduced by `_kept`."""
    return _option_fronts(count, options, backward, activation, base)[count]


def _option_fronts(
    most: int, options: Sequence[int], backward: Sequence[float], activation: Sequence[float], base: int = NONE
):
    """`_option_front` of 0, 1, …, `most` layers, all from one pass, backward times compared in tie units
    (`tie_units`, as the catalogue compares them): raw float sums make 5·t + 2·t and 7·t differ."""
    fronts = _ranked_fronts(most, options, backward, activation, tie_units([backward], base)[0], base)
    return [[(b, a, counts) for b, a, counts, _ in front] for front in fronts]


def _ranked_fronts(
    most: int,
    options: Sequence[int],
    backward: Sequence[float],
    activation: Sequence[float],
    rank: Sequence[float],
    base: int = NONE,
) -> list[list[Point]]:
    """(B, A, per-option counts, Σ rank) fronts of 0, 1, …, `most` layers, dominance on *rank* (per option:
    the backward in tie units, or the backward itself).

    Options are added one at a time: the front of t layers under the first options is, over the layers u
    the new option takes, the front of t − u layers before it with u of the new one added, Pareto-reduced
    (`_pareto`'s rule: the first of equal points stays, in the order used = 0, 1, …, each front in its
    order). Each total's candidates are whole arrays."""
    width = len(OPTIONS)
    Front = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    fronts: dict[int, Front] = {0: (np.zeros(1), np.zeros(1), np.zeros((1, width), dtype=np.int64), np.zeros(1))}
    for k in options:
        grown: dict[int, Front] = {}
        for total in range(most + 1):
            parts = [(used, fronts[total - used]) for used in range(total + 1) if total - used in fronts]
            b = np.concatenate([front[0] + used * backward[k] if used else front[0] for used, front in parts])
            a = np.concatenate([front[1] + used * activation[k] if used else front[1] for used, front in parts])
            r = np.concatenate([front[3] + used * rank[k] if used else front[3] for used, front in parts])
            counts = np.concatenate([front[2] for _, front in parts])
            counts[:, k] += np.repeat(np.array([used for used, _ in parts]), [len(front[0]) for _, front in parts])
            layers = counts.sum(axis=1) - counts[:, base]
            masks = ((counts > 0) * (1 << np.arange(width))).sum(axis=1)
            keep = _kept(r, a, layers, masks)
            grown[total] = (b[keep], a[keep], counts[keep], r[keep])
        fronts = grown
    return [
        list(
            zip(
                fronts[t][0].tolist(),
                fronts[t][1].tolist(),
                map(tuple, fronts[t][2].tolist()),
                fronts[t][3].tolist(),
                strict=True,
            )
        )
        if t in fronts
        else []
        for t in range(most + 1)
    ]


class Catalogue:
    """Per-cell and per-stage choices for one problem, built lazily and cached."""

    def __init__(self, problem: BalanceInput, setting: Setting | None = None, budget: ListingBudget | None = None):
        self.p = problem
        self.budget = budget if budget is not None else ListingBudget(10**18)
        self.setting = setting  # a Megatron-Core setting fixes each cell's options by position
        # whether the device's memory refused a choice the work limit kept: while it has not, the plans listed
        # are the plans of the same problem with memory unbounded (`program._none_floor_reaches`)
        self.memory_refused = False
        bodies = problem.layers.bodies
        self.backward = [[body.backward_time.get(o, 0.0) for o in OPTIONS] for body in bodies]
        self.activation = [[body.memory_mb.get(o, 0.0) for o in OPTIONS] for body in bodies]
        self._cell_cache: dict[tuple[tuple[int, ...], tuple[int, ...]], list[CellChoice]] = {}
        self._front_cache: dict[tuple[int, tuple[int, ...]], list[list[Point]]] = {}
        self._prefix_cache: dict[tuple, dict[int, list[Point]]] = {}
        self._ranks = sorted({CELL_RANK[OPTIONS[k]] for k in problem.option_indices})
        slct, comm = OPTIONS.index("SLCT"), OPTIONS.index("COMM")
        considered = problem.option_indices
        self.base = NONE if NONE in considered else considered[0]  # as `tiebreak._base_option`
        self.tied_s = [tied_times(row, self.base) for row in self.backward]  # near-ties to NONE equal
        self.tied = tie_units(self.backward, self.base)  # the same in whole units: what dominance compares
        self.unit = tie_unit(self.backward)
        # per cell: how many cells that must hold a layer come before it and after it along the model
        open_cells = [cell not in problem.reserved_cells for cell in problem.cells]
        self._around = {
            cell: (sum(open_cells[:position]), sum(open_cells[position + 1 :]))
            for position, cell in enumerate(problem.cells)
        }
        if slct in considered and comm in considered:
            self.variants = [tuple(k for k in considered if k != comm), tuple(k for k in considered if k != slct)]
        else:
            self.variants = [tuple(considered)]

    def reachable(self, cell: tuple[int, int], types: tuple[int, ...], counts: tuple[int, ...]) -> bool:
        """Whether some plan can put this composition in this cell, by counting alone.

        Body types run in pipeline order and every cell but the head's and the tail's holds a
        layer, so the cells before this one hold only types up to its first, at least one layer
        each, and the cells after it only types from its last on. A cell whose first type's layers
        (with one per earlier cell) outnumber that type and every earlier one, or likewise at the
        other end, is in no plan: DeepSeek-V3-like 3 dense + 58 MoE layers can have dense layers
        in the first four cells only, which drops nine in ten of its stage choices."""
        if cell in self.p.closed_cells:  # after a standalone MTP's cell: no body layer (Megatron-Core)
            return False
        before, after = self._around[cell]
        nb = [body.nb_layer for body in self.p.layers.bodies]
        return before + counts[0] <= sum(nb[: types[0] + 1]) and after + counts[-1] <= sum(nb[types[-1] :])

    def compositions(self, k_max: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(body types, counts) a cell may hold with 1..k_max layers: contiguous types in order."""
        nb = [body.nb_layer for body in self.p.layers.bodies]
        found: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        for first in range(len(nb)):
            for last in range(first, len(nb)):
                middle = sum(nb[first + 1 : last])
                if last == first:
                    found += [((first,), (n,)) for n in range(1, min(nb[first], k_max) + 1)]
                    continue
                for n_first in range(1, nb[first] + 1):
                    for n_last in range(1, nb[last] + 1):
                        if n_first + middle + n_last <= k_max:
                            types = tuple(range(first, last + 1))
                            found.append((types, (n_first, *nb[first + 1 : last], n_last)))
        return found

    def cell_choices(self, types: tuple[int, ...], counts: tuple[int, ...]) -> list[CellChoice]:
        """The cell's option assignments MindFormers' yaml can say, Pareto-reduced in (B, A)."""
        key = (types, counts)
        if key in self._cell_cache:
            return self._cell_cache[key]
        if self.setting is not None:
            self._cell_cache[key] = self._forced(types, counts)
            return self._cell_cache[key]
        bodies = self.p.layers.bodies
        candidates: list[Point] = []
        for variant in self.variants:
            # Along the cell, ranks never go back: body i uses ranks within [t_i, t_{i+1}], the last up to
            # the last rank. The prefix's fronts per t_{i+1} (`_prefix`) are shared by every cell that
            # starts the same way.
            last = self._ranks[-1]
            for rank, partial in self._prefix(variant, types[:-1], counts[:-1]).items():
                front = self._front(types[-1], counts[-1], self._allowed(variant, rank, last))
                candidates += _pareto(
                    [(b0 + b1, a0 + a1, (*c0, c1), r0 + r1) for b0, a0, c0, r0 in partial for b1, a1, c1, r1 in front],
                    self.base,
                )
        forward = sum(bodies[body].forward_time * n for body, n in zip(types, counts, strict=True))
        parameters = sum(bodies[body].memory_parameter_mb * n for body, n in zip(types, counts, strict=True))
        kept = _pareto(candidates, self.base)
        choices = [CellChoice(types, counts_, forward, b, a, parameters, r) for b, a, counts_, r in kept]
        self._cell_cache[key] = choices
        return choices

    def _allowed(self, variant: tuple[int, ...], low: int, high: int) -> tuple[int, ...]:
        return tuple(k for k in variant if low <= CELL_RANK[OPTIONS[k]] <= high)

    def _prefix(
        self, variant: tuple[int, ...], types: tuple[int, ...], counts: tuple[int, ...]
    ) -> dict[int, list[Point]]:
        """The first body types of a cell under the variant's options, ranks never going back: per rank r
        the next body may start from, the front of the assignments whose last body uses ranks up to r.

        One step per body type (a dynamic programme over the rank reached), where listing every
        sequence of rank cuts grows as C(ranks + types, types): a cell of 12 alternating dense and MoE
        layers, each its own body type, had 78 cut sequences per variant, each a chain of fronts.
        Dropping a dominated prefix within one rank is exact: every completion adds the same backward
        (and tie units), activation, recomputed layers and options to both (`_kept`'s rule survives the
        addition)."""
        key = (variant, types, counts)
        known = self._prefix_cache.get(key)
        if known is not None:
            return known
        if not types:
            states = {self._ranks[0]: [(0.0, 0.0, (), 0.0)]}
        else:
            grown: dict[int, list[Point]] = {}
            for rank, partial in self._prefix(variant, types[:-1], counts[:-1]).items():
                for reach in self._ranks:
                    if reach < rank:
                        continue
                    front = self._front(types[-1], counts[-1], self._allowed(variant, rank, reach))
                    grown.setdefault(reach, []).extend(
                        (b0 + b1, a0 + a1, (*c0, c1), r0 + r1) for b0, a0, c0, r0 in partial for b1, a1, c1, r1 in front
                    )
            states = {rank: kept for rank, points in grown.items() if (kept := _pareto(points, self.base))}
        self._prefix_cache[key] = states
        return states

    def _forced(self, types: tuple[int, ...], counts: tuple[int, ...]) -> list[CellChoice]:
        """The one assignment the setting gives the cell: its options from the cell's first layer on
        (`Setting.along`), body types in pipeline order; none if it needs an option not considered.
        Under a rank-wide setting with several chunks, one per distinct assignment over the counts of
        the rank's earlier layers (mod `Setting.period`), each with the counts it holds at (`residues`):
        the stage listing pairs them with its earlier chunks (`_combine`)."""
        assert self.setting is not None
        period = self.period
        if period == 1:
            return self._forced_at(types, counts, 0)
        found: dict[tuple, CellChoice] = {}
        held: dict[tuple, list[bool]] = {}
        for before in range(period):
            along = self.setting.along(sum(counts), before)
            start, rows = 0, []
            for n in counts:  # the assignment's rows, priced only when new (a few of the period's)
                rows.append(tuple(along[start : start + n].count(o) for o in OPTIONS))
                start += n
            key = tuple(rows)
            if key not in held:
                held[key] = [False] * period
                for choice in self._forced_at(types, counts, before):
                    found[key] = choice
            held[key][before] = True
        return [replace(choice, residues=tuple(held[key])) for key, choice in found.items()]

    @property
    def period(self) -> int:
        """How many counts of a rank's earlier layers the setting tells apart (1 unless rank-wide with
        several chunks)."""
        if self.setting is None or not self.setting.rank_wide or self.p.chunks == 1:
            return 1
        return self.setting.period

    def _forced_at(self, types: tuple[int, ...], counts: tuple[int, ...], before: int) -> list[CellChoice]:
        assert self.setting is not None
        along = [OPTIONS.index(o) for o in self.setting.along(sum(counts), before)]
        if any(k not in self.p.option_indices for k in along):
            return []
        rows, backward, activation, tied, start = [], 0.0, 0.0, 0.0, 0
        for body, n in zip(types, counts, strict=True):
            row = [0] * len(OPTIONS)
            for k in along[start : start + n]:
                row[k] += 1
                backward += self.backward[body][k]
                activation += self.activation[body][k]
                tied += self.tied[body][k]
            start += n
            rows.append(tuple(row))
        bodies = self.p.layers.bodies
        forward = sum(bodies[b].forward_time * n for b, n in zip(types, counts, strict=True))
        parameters = sum(bodies[b].memory_parameter_mb * n for b, n in zip(types, counts, strict=True))
        return [CellChoice(types, tuple(rows), forward, backward, activation, parameters, tied)]

    def _front(self, body: int, count: int, allowed: tuple[int, ...]) -> list[Point]:
        """`_option_front` of `count` layers of one body type. The fronts of every count up to some most are
        one pass (`_option_fronts`), kept per (type, options); asked for more, the most at least doubles
        (a pipeline of one stage asks for 1, 2, …, 80 layers of a type: one pass, not 80)."""
        key = (body, allowed)
        known = self._front_cache.get(key)
        if known is None or count >= len(known):
            most = max(count, 2 * (len(known) - 1) if known else count)
            most = min(most, max(count, self.p.layers.bodies[body].nb_layer))
            known = _ranked_fronts(
                most, allowed, self.backward[body], self.activation[body], self.tied[body], self.base
            )
            self._front_cache[key] = known
        return known[count]

    def empty_cell(self) -> CellChoice:
        return CellChoice((), (), 0.0, 0.0, 0.0, 0.0, 0.0)

    def stage_choices(self, stage: int, work_limit: float, k_max: int, reduce: str = "pareto") -> list[StageChoice]:
        """Every choice for a stage that fits and is not dominated, each cell holding at most k_max layers
        and the stage at most `work_limit` of forward + backward per micro-batch (head and tail included).

        `reduce="pareto"` keeps, per layer counts of each cell, the choices whose per-chunk
        backward times no other beats everywhere (exact for any objective that grows with each
        cell's time). `reduce="sum"` keeps one choice per (body types present in each cell, layers
        of each type on the stage): the least total backward, then the most even chunks (exact for
        objectives that see a stage's total time only, such as the closed forms).
        """
        p = self.p
        layers = p.layers
        fixed_work = p.fixed_work(stage)
        vectors = p.vectors[stage]
        # A lower bound on what the stage holds besides its body layers' parameters (less the relief of a
        # stage holding only the cell's body types: holding more only shrinks it, `BalanceInput.relief_mb`).
        fixed_memory = p.constant_memory_mb + max((p.head_stage_memory_mb(stage, v) for v in vectors), default=0.0)
        compositions = self.compositions(k_max)
        bodies = layers.bodies
        least_activation = [min(self.activation[b][k] for k in p.option_indices) for b in range(len(bodies))]
        per_chunk: list[list[CellChoice]] = []
        for chunk in range(p.chunks):
            options = [self.empty_cell()] if (chunk, stage) in p.reserved_cells else []
            fewest = min((vector[chunk] for vector in vectors), default=0)
            for types, counts in compositions:
                if not self.reachable((chunk, stage), types, counts):
                    continue
                # what the cell needs whatever its options: parameters, and its leanest activations
                least = sum(
                    n * (bodies[b].memory_parameter_mb + fewest * least_activation[b])
                    for b, n in zip(types, counts, strict=True)
                )
                room = p.memory_mb + p.relief_mb(stage, types)
                if least + fixed_memory > room:
                    if not self.memory_refused:  # the cell's choices priced only while it may tell
                        self.memory_refused = any(
                            choice.forward + choice.backward + fixed_work <= work_limit
                            for choice in self.cell_choices(types, counts)
                        )
                    continue
                for choice in self.cell_choices(types, counts):
                    work = choice.forward + choice.backward + fixed_work
                    if work <= work_limit:
                        if choice.parameter_mb + fixed_memory <= room:
                            options.append(choice)
                        else:
                            self.memory_refused = True
            per_chunk.append(options)
        return self._combine(stage, per_chunk, fixed_work, work_limit, reduce)

    def _combine(
        self, stage: int, per_chunk: list[list[CellChoice]], fixed_work: float, work_limit: float, reduce: str
    ) -> list[StageChoice]:
        """The stage's choices: the product of its chunks' cell choices, grown chunk by chunk (whole
        arrays at a time), partial products that already break memory or time dropped, then reduced."""
        p = self.p
        vectors = p.vectors[stage]
        counts = np.array(vectors, dtype=float).reshape(len(vectors), p.chunks)  # [vector, chunk]
        # Pruning only saves work: a slack keeps borderline partials for the exact check below. A partial's
        # relief (by the body types it holds so far) bounds its completions' (`BalanceInput.relief_mb`).
        memory_limit = (p.memory_mb - p.constant_memory_mb) * (1 + 1e-9) + 1e-9
        relief = np.array(p.relief_row(stage))
        masks = np.zeros(1, dtype=np.int64)  # per partial, `body_mask` of the body types it holds
        work_cap = work_limit * (1 + 1e-12) if math.isfinite(work_limit) else math.inf
        index = np.zeros((1, 0), dtype=np.int64)
        stage_work = np.array([fixed_work])
        held = np.zeros((1, len(vectors)))  # parameters + Σ activations × in flight, per vector
        period = self.period
        before = np.zeros(1, dtype=np.int64)  # the body layers of the chunks so far, mod the period
        if not all(per_chunk):
            return []
        later_work, later_held = _least_after(per_chunk, counts)
        for chunk, options in enumerate(per_chunk):
            work = np.array([c.forward + c.backward for c in options])
            parameters = np.array([c.parameter_mb for c in options])
            activation = np.array([c.activation_mb for c in options])
            layers = np.array([c.layers for c in options], dtype=np.int64)
            # [count mod period, option]: whether the option is the setting's after that many layers
            holds = np.array([[c.residues is None or c.residues[r] for c in options] for r in range(period)])
            cell_masks = np.array([p.body_mask(c.bodies) for c in options], dtype=np.int64)
            kept_index, kept_work, kept_held, kept_before, kept_masks = [], [], [], [], []
            step = max(1, 2_000_000 // (len(options) * max(1, len(vectors))))
            for first in range(0, len(stage_work), step):
                self.budget.spend(min(step, len(stage_work) - first) * len(options) * max(1, len(vectors)))
                grown_work = stage_work[first : first + step, None] + work[None, :]
                grown_held = (
                    held[first : first + step, None, :]
                    + parameters[None, :, None]
                    + activation[None, :, None] * counts[None, None, :, chunk]
                )
                grown_masks = masks[first : first + step, None] | cell_masks[None, :]
                # what the later chunks add at least: a partial already over with it can never fit
                ok = grown_work + later_work[chunk] <= work_cap
                if period > 1:  # the rank's count runs on from its earlier chunks (`_forced`)
                    ok &= holds[before[first : first + step]]
                room = (grown_held + later_held[None, None, :, chunk]).max(
                    axis=2, initial=0.0
                ) <= memory_limit + relief[grown_masks]
                self.memory_refused |= bool((ok & ~room).any())
                ok &= room
                rows, columns = np.nonzero(ok)
                kept_index.append(np.column_stack([index[first + rows], columns]))
                kept_work.append(grown_work[rows, columns])
                kept_held.append(grown_held[rows, columns])
                kept_before.append((before[first + rows] + layers[columns]) % period)
                kept_masks.append(grown_masks[rows, columns])
            index = np.concatenate(kept_index)
            stage_work = np.concatenate(kept_work)
            held = np.concatenate(kept_held)
            before = np.concatenate(kept_before)
            masks = np.concatenate(kept_masks)
            if not len(index):
                return []
        # The stage's memory with head and tail, as `stage_memory` sums it; exact where too close to call.
        head_tail = np.array([p.head_stage_memory_mb(stage, v) for v in vectors])
        used = (held + head_tail[None, :]).max(axis=1, initial=0.0) + p.constant_memory_mb - relief[masks]
        close = np.abs(used - p.memory_mb) <= 1e-6 * max(1.0, p.memory_mb)
        fits = used <= p.memory_mb
        for row in np.nonzero(close)[0]:
            fits[row] = self.exact_memory(stage, self._cells(per_chunk, index[row])) <= Fraction(p.memory_mb)
        self.memory_refused |= not fits.all()
        index, used = index[fits], used[fits]
        # backward in tie units (`tie_units`: near-ties equal), as the tie-break's recompute time counts it
        backward = _per_chunk(per_chunk, index, "rank")
        # Among equal backward times (so equal recompute time, the layouts being equal) the tie-break's
        # order (`tiebreak.py`): the fewest recomputed layers, one option on the whole stage, the least
        # memory. A faster vector means less recompute time, so keeping the first is exact for it.
        used_options = np.zeros(len(index), dtype=np.int64)  # a bit per option any cell uses
        recomputed = np.zeros(len(index), dtype=np.int64)
        for chunk, options in enumerate(per_chunk):
            bits = [sum(1 << k for row in c.counts for k, n in enumerate(row) if n) for c in options]
            used_options |= np.array(bits, dtype=np.int64)[index[:, chunk]]
            layers = [sum(n for row in c.counts for k, n in enumerate(row) if k != self.base) for c in options]
            recomputed += np.array(layers, dtype=np.int64)[index[:, chunk]]
        mixed = ((used_options & (used_options - 1)) != 0).astype(float)
        if reduce == "sum":
            bodies = len(p.layers.bodies)
            key_columns = []
            for chunk, options in enumerate(per_chunk):
                codes = {bodies_: n for n, bodies_ in enumerate(dict.fromkeys(c.bodies for c in options))}
                key_columns.append(np.array([codes[c.bodies] for c in options])[index[:, chunk]])
            totals = np.zeros((len(index), bodies), dtype=np.int64)
            for chunk, options in enumerate(per_chunk):
                per_body = np.array([[c.body_count(b) for b in range(bodies)] for c in options], dtype=np.int64)
                totals += per_body[index[:, chunk]]
            keys = np.column_stack([*key_columns, totals]) if len(index) else np.zeros((0, 1))
            chunk_time = _per_chunk(per_chunk, index, "forward") + backward * self.unit
            # least total backward (tie units), then the most even chunks (seconds), then as above, then
            # the first listed
            order = np.lexsort(
                (
                    np.arange(len(index)),
                    used,
                    mixed,
                    recomputed,
                    chunk_time.max(axis=1),
                    backward.sum(axis=1),
                    *keys.T[::-1],
                )
            )
            ordered = keys[order]
            starts = np.ones(len(order), dtype=bool)  # the first row of each key
            starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
            chosen = order[starts]
            return [StageChoice(self._cells(per_chunk, index[row])) for row in chosen]
        layout_columns = []
        for chunk, options in enumerate(per_chunk):
            layouts = [(c.bodies, tuple(sum(r) for r in c.counts)) for c in options]
            codes = {layout: n for n, layout in enumerate(dict.fromkeys(layouts))}
            layout_columns.append(np.array([codes[layout] for layout in layouts])[index[:, chunk]])
        # scan order per layout: Σ backward, the backward vector, recomputed, mixed, memory, listing order
        order = np.lexsort(
            (
                np.arange(len(index)),
                used,
                mixed,
                recomputed,
                *backward.T[::-1],
                backward.sum(axis=1),
                *layout_columns[::-1],
            )
        )
        layout = np.column_stack(layout_columns)[order] if layout_columns else np.zeros((len(order), 0))
        starts = np.flatnonzero(np.r_[True, (layout[1:] != layout[:-1]).any(axis=1)]) if len(order) else []
        ends = np.r_[starts[1:], len(order)] if len(order) else []
        groups = [order[first:last] for first, last in zip(starts, ends, strict=True)]
        groups.sort(key=lambda rows: rows.min())  # layouts in the order the listing meets them
        result: list[StageChoice] = []
        for rows in groups:
            self.budget.spend(len(rows) * max(1, p.chunks))
            for row in rows[undominated_in_order(backward[rows])]:
                result.append(StageChoice(self._cells(per_chunk, index[row])))
        return result

    @staticmethod
    def _cells(per_chunk: list[list[CellChoice]], row: Sequence[int]) -> tuple[CellChoice, ...]:
        return tuple(per_chunk[chunk][int(j)] for chunk, j in enumerate(row))

    def stage_memory(self, stage: int, cells: Sequence[CellChoice]) -> float:
        p = self.p
        parameters = sum(c.parameter_mb for c in cells)
        peak = 0.0
        for vector in p.vectors[stage]:
            total = parameters + sum(n * c.activation_mb for n, c in zip(vector, cells, strict=True))
            peak = max(peak, total + p.head_stage_memory_mb(stage, vector))
        return peak + p.constant_memory_mb - p.relief_mb(stage, _held_bodies(cells))

    def fits(self, stage: int, cells: Sequence[CellChoice]) -> bool:
        """Memory within the device, exactly where floating point is too close to call."""
        p = self.p
        used = self.stage_memory(stage, cells)
        if abs(used - p.memory_mb) > 1e-6 * max(1.0, p.memory_mb):
            return used <= p.memory_mb
        return self.exact_memory(stage, cells) <= Fraction(p.memory_mb)

    def exact_memory(self, stage: int, cells: Sequence[CellChoice]) -> Fraction:
        p = self.p
        bodies = p.layers.bodies
        parameters = Fraction(0)
        activations = []
        for cell in cells:
            activation = Fraction(0)
            for body, row in zip(cell.bodies, cell.counts, strict=True):
                parameters += sum(row) * Fraction(bodies[body].memory_parameter_mb)
                for k, n in enumerate(row):
                    if n:
                        activation += n * Fraction(bodies[body].memory_mb[OPTIONS[k]])
            activations.append(activation)
        peak = Fraction(0)
        for vector in p.vectors[stage]:
            total = parameters + sum(n * a for n, a in zip(vector, activations, strict=True))
            peak = max(peak, total + Fraction(p.head_stage_memory_mb(stage, vector)))
        return peak + Fraction(p.constant_memory_mb) - Fraction(p.relief_mb(stage, _held_bodies(cells)))


def _held_bodies(cells: Sequence[CellChoice]) -> set[int]:
    """The body types a stage of these cells holds layers of."""
    return {body for cell in cells for body, row in zip(cell.bodies, cell.counts, strict=True) if sum(row)}


def _least_after(per_chunk: list[list[CellChoice]], counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk, the least the chunks after it add whatever their choices: work per micro-batch
    ([chunk]) and memory at each in-flight vector (*counts* [vector, chunk] → [vector, chunk]).

    A partial stage that breaks the work or memory limit once these are added breaks it in every
    completion, so the listing drops it at once. Without this, a cell whose options barely differ
    (SLCT 1 MB below NONE per micro-batch) multiplied the partials of a stage that cannot fit at all
    until the work budget ran out, where the last chunk would have refused every one of them."""
    chunks = len(per_chunk)
    work = np.zeros(chunks + 1)
    held = np.zeros((counts.shape[0], chunks + 1))
    for chunk in range(chunks - 1, -1, -1):
        options = per_chunk[chunk]
        work[chunk] = work[chunk + 1] + min(c.forward + c.backward for c in options)
        parameters = np.array([c.parameter_mb for c in options])
        activation = np.array([c.activation_mb for c in options])
        least = (parameters[None, :] + activation[None, :] * counts[:, chunk, None]).min(axis=1)
        held[:, chunk] = held[:, chunk + 1] + least
    return work[1:], held[:, 1:]


def _per_chunk(per_chunk: list[list[CellChoice]], index: np.ndarray, field: str) -> np.ndarray:
    """[row, chunk]: the field of the cell choice each listed stage choice takes in each chunk."""
    columns = [np.array([getattr(c, field) for c in options])[index[:, v]] for v, options in enumerate(per_chunk)]
    return np.column_stack(columns) if columns else np.zeros((len(index), 0))
