"""Proving a known plan optimal by probing each stage choice against the path relaxation.

The program's relaxation (stage choices mixed, every path of the schedule as a row) is far below
the optimum on interleaved schedules: fractional choices even out every cell, and the cycles that
make an integral plan slow disappear (docs/balance.md). Branching on HiGHS's side closes the gap
slowly. Here each listed stage choice is *probed* instead: the relaxation with that stage held to
that one choice. When its bound reaches the known plan's value (or it has no solution), no
faster plan uses that choice, and it is dropped for every later probe. Rounds repeat while
they drop something; each drop tightens the relaxation for the others. When some stage has no
choice left, no plan is faster than the known one: it is optimal. This is domain reduction by
probing; every step is a lower bound argument, so nothing faster is ever lost.

The relaxation is solved with its path rows added lazily, and separation is exact: the cell times
of a fractional solution are cell times like any other, so running the schedule on them
(`schedules.longest_path`) gives the longest path, and when that exceeds T it is the most violated
path row. Two early stops keep probes short, both sound: T at or above the cut-off (the
relaxation with some paths is already a lower bound: drop), or the schedule on the solution's
cell times already below it (the relaxation with every path has that solution, so its bound is
below the cut-off too: keep).

Repeatable: the probes run in listing order, HiGHS single-threaded, and the work is counted in
relaxations solved (`WorkLimits.probe_work` buys one per run of the schedule), never in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import highspy
import numpy as np

from ppb_core.balance import highs, schedule_times
from ppb_core.balance.choice_model import ChoiceModel, Path
from ppb_core.balance.choices import StageChoice
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.progress import Clock

# A choice is dropped when its probe's bound is at least the known value × (1 − MARGIN): half the
# reported gap tolerance (1e-6), the other half left for the LP's own tolerances (1e-7 of τ).
MARGIN = 5e-7
# Relaxations per listed choice at most: a probing that has not proven the plan by then rarely
# will, and the program's search needs the time (the instances: 2.6 and 5.7 per choice).
PER_CHOICE = 4
CONVERGED = 1e-7  # relative: the schedule on the solution's cell times this close to T ends separation
# a probing tells how far it is each time this many more relaxations are solved: thousands are seconds
# (Llama-3.1-8B PP 2 × 4 chunks: 5,292 in 13 CPU s) with no progress line otherwise
TELL_EVERY = 250


@dataclass
class Probing:
    """What the probes proved. Times in the descriptions' unit."""

    proven: bool  # no plan is faster than `cutoff`: the known plan is optimal
    cutoff: float  # the known plan's value × (1 − MARGIN)
    bound: float  # a lower bound on every plan's iteration time (≤ cutoff)
    alive: list[list[int]]  # per stage, the choices that may still be in a faster plan
    paths: list[Path] = field(default_factory=list)  # path rows found (each valid for every plan)
    relaxations: int = 0  # LPs solved
    rounds: int = 0
    stopped_by: str = "proven"  # proven | settled (a round dropped nothing) | work_limit | time_limit
    # per stage, the choices that may be in a plan at most `probe`'s `ties` (all alive without it)
    alive_ties: list[list[int]] = field(default_factory=list)


class PathRelaxation:
    """The program over listed stage choices with its integrality dropped and path rows added lazily."""

    def __init__(self, problem: BalanceInput, choices: list[list[StageChoice]], model: ChoiceModel) -> None:
        self.p = problem
        self.model = model
        self.tau = model.tau
        self.solver = highs.new_solver(highs.INF)
        highs.load(self.solver, [(lower, upper, False) for lower, upper, _ in model.columns], model.rows, model.top)
        self.columns = np.array([c for stage in model.y for c in stage], dtype=np.int32)
        self.stage_of = np.array([s for s, stage in enumerate(choices) for _ in stage], dtype=np.int64)
        self.paths: list[Path] = []
        self._seen: set[tuple] = set()
        self.solved = 0
        self._allowed = np.ones(len(self.columns), dtype=bool)  # every choice's upper bound as loaded: 1

    def add_path(self, path: Path) -> None:
        key = tuple(sorted(path.items()))
        if key not in self._seen:
            self._seen.add(key)
            self.paths.append(path)
            highs.add_row(self.solver, 0.0, self.model.path_terms(path))

    def allow(self, mask: np.ndarray) -> None:
        """Only the choices where *mask* is true may be taken (flat, in the model's order). Only the bounds that
        change are passed: a probe changes one stage's, and passing every column's took 18% of a Llama-3.1-8B
        PP 2 × 4 chunks balance (py-spy)."""
        changed = np.flatnonzero(mask != self._allowed)
        if len(changed):
            columns = self.columns[changed]
            self.solver.changeColsBounds(len(columns), columns, np.zeros(len(columns)), mask[changed].astype(float))
            self._allowed = mask.copy()

    def bound(self, cutoff: float, settle: bool, clock: Clock, budget: int) -> float | None:
        """A lower bound on T under the current mask: None when nothing is feasible; at least
        `cutoff` when the mask admits no plan faster than it. Without `settle` it stops as soon as
        the answer to "below cutoff?" is known; with it, it runs separation to the end (then the
        value is the relaxation's with every path), within `budget` relaxations."""
        p, model, tau = self.p, self.model, self.tau
        value = 0.0
        for _ in range(max(1, budget)):
            if clock.out:
                return value
            # the dual simplex stops once its objective (a lower bound on the optimum) reaches the cut-off
            self.solver.setOptionValue("objective_bound", cutoff / tau if math.isfinite(cutoff) else highs.INF)
            self.solver.run()  # no time limit of its own: HiGHS counts it over every run of the solver
            self.solved += 1
            status = self.solver.getModelStatus()
            if status == highspy.HighsModelStatus.kInfeasible:
                return None
            if status == highspy.HighsModelStatus.kObjectiveBound:
                return cutoff
            if status != highspy.HighsModelStatus.kOptimal:
                return value  # a limit: what was proven before it
            x = self.solver.getSolution().col_value
            value = x[model.top] * tau
            if value >= cutoff:
                return value
            forward = [[x[model.duration[("F", v, s)]] * tau for s in range(p.stages)] for v in range(p.chunks)]
            backward = [[x[model.duration[("B", v, s)]] * tau for s in range(p.stages)] for v in range(p.chunks)]
            longest, counts = schedule_times.path(p, forward, backward)
            if longest <= value * (1 + CONVERGED) or (longest < cutoff and not settle):
                return value
            self.add_path({key: float(n) for key, n in counts.items()})
        return value


def probe(
    problem: BalanceInput,
    choices: list[list[StageChoice]],
    model: ChoiceModel,
    value: float,
    work: int,
    clock: Clock,
    seeds: Sequence[Path] = (),
    ties: float | None = None,
    told: Callable[[str], None] | None = None,
) -> Probing:
    """Try to prove that no plan over `choices` is faster than `value` (module docstring).

    `model` is the program over `choices` (its rows, such as the least busiest stage's, are kept);
    `work` bounds the relaxations solved. With `ties` (at least `value`), the probes first drop
    the choices no plan at most `ties` uses (`Probing.alive_ties`: what the tie-breaking among
    equally fast plans needs), then go on towards the proof. *told* hears how far it is, every `TELL_EVERY`
    relaxations (nothing depends on it)."""
    cutoff = value * (1 - MARGIN)
    work = min(work, PER_CHOICE * sum(len(stage) for stage in choices))
    relaxation = PathRelaxation(problem, choices, model)
    for path in seeds:
        relaxation.add_path(path)
    stage_of = relaxation.stage_of
    alive = np.ones(len(stage_of), dtype=bool)
    alive_ties: np.ndarray | None = None

    def per_stage(mask: np.ndarray) -> list[list[int]]:
        return [[j for j, i in enumerate(np.flatnonzero(stage_of == s)) if mask[i]] for s in range(len(choices))]

    def result(proven: bool, bound: float, stopped_by: str) -> Probing:
        return Probing(
            proven,
            cutoff,
            cutoff if proven else min(bound, cutoff),
            per_stage(alive),
            relaxation.paths,
            relaxation.solved,
            rounds,
            stopped_by,
            per_stage(alive_ties if alive_ties is not None else alive),
        )

    # probes of whole layouts (a stage's layers per cell, options free) first, then of single choices
    keys = [
        (s, tuple((c.bodies, tuple(sum(r) for r in c.counts)) for c in choice.cells))
        for s, stage in enumerate(choices)
        for choice in stage
    ]
    code = {key: n for n, key in enumerate(dict.fromkeys(keys))}
    layout_of = np.array([code[key] for key in keys], dtype=np.int64)
    levels = [
        [np.flatnonzero(layout_of == n) for n in range(len(code))],
        [np.array([i]) for i in range(len(stage_of))],
    ]
    rounds = 0
    last_told = 0

    def tell() -> None:
        nonlocal last_told
        if told is not None and relaxation.solved - last_told >= TELL_EVERY:
            last_told = relaxation.solved
            left = int(alive.sum())
            told(
                f"{relaxation.solved:,} of at most {work:,} relaxations, round {rounds}, "
                f"{left:,} of {len(alive):,} stage choices left"
            )

    phases = ([(ties * (1 + MARGIN), False)] if ties is not None else []) + [(cutoff, True)]
    for level_cut, final in phases:
        level = 0
        while True:
            rounds += 1
            relaxation.allow(alive)
            root = relaxation.bound(level_cut, True, clock, work - relaxation.solved)
            if root is None or root >= level_cut:
                if final:
                    return result(True, cutoff, "proven")
                break  # no plan at most `ties`: nothing for the tie-breaking to keep
            dropped = False
            for members in levels[level]:
                members = members[alive[members]]
                if not len(members):
                    continue
                if relaxation.solved >= work or clock.out:
                    relaxation.allow(alive)
                    return result(False, root, "time_limit" if clock.out else "work_limit")
                stage = stage_of[members[0]]
                trial = alive.copy()
                trial[stage_of == stage] = False
                trial[members] = True
                relaxation.allow(trial)
                found = relaxation.bound(level_cut, False, clock, work - relaxation.solved)
                tell()
                if found is None or found >= level_cut:
                    alive[members] = False
                    dropped = True
                    if not alive[stage_of == stage].any():
                        if final:
                            return result(True, cutoff, "proven")
                        break
            if not dropped and level == len(levels) - 1:
                if final:
                    return result(False, root, "settled")
                break
            level = 0 if dropped else level + 1
        if not final:
            alive_ties = alive.copy()
    raise AssertionError("the last phase returns")
