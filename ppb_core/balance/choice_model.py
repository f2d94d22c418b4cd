"""The integer program's columns and rows, shared by every program the balancer solves.

Columns: y[s, j] = 1 when stage s runs its j-th listed choice (`choices.Catalogue`), the cell
times D[F|B, v, s] = Σ_j y[s, j]·(cell time of choice j) + head/tail (in units of τ), frontier
binaries g[b, p] that keep body types in pipeline order, and one objective column `top`. Rows:
one choice per stage, every body type's layers placed, the order. Objectives add their own rows
(`add_closed_form`, `path_terms`, `add_least_busiest`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ppb_core.balance import highs
from ppb_core.balance.choices import CellChoice, StageChoice
from ppb_core.balance.highs import INF
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.model.switches import OPTIONS
from ppb_core.schedules import op_graph

Path = dict[tuple[str, int, int], float]  # (kind, chunk, stage) → times a path runs that cell's op


def time_unit(problem: BalanceInput) -> float:
    """τ, the largest forward + backward of one body layer: times divided by it stay near m·V·N."""
    return max((b.forward_time + max(b.backward_time.values())) for b in problem.layers.bodies) or 1.0


def held_layers(choices: Sequence[Sequence[StageChoice]], bodies: int) -> list[np.ndarray]:
    """Per stage, [choice, body type]: the choice's layers of that type, every cell's counts added."""
    held = []
    for stage in choices:
        table = np.zeros((len(stage), bodies), dtype=np.int64)
        for j, choice in enumerate(stage):
            for cell in choice.cells:
                for body, row in zip(cell.bodies, cell.counts, strict=True):
                    table[j, body] += sum(row)
        held.append(table)
    return held


class ChoiceModel:
    """The integer program over listed stage choices: one binary y[s][j] per choice j of stage s,
    each cell's forward and backward durations, layer placement and body-type order; the
    objective column `top` (T) is bounded below by the rows a caller adds (paths, closed forms)."""

    def __init__(self, problem: BalanceInput, choices: list[list[StageChoice]], tau: float) -> None:
        self.p = problem
        self.choices = choices
        self.tau = tau
        self.columns: list[highs.Column] = []
        self.rows: list[highs.Row] = []
        self.y = [[self._column(0, 1, True) for _ in stage] for stage in choices]
        self.top = self._column(0, INF, False)
        self.g: dict[tuple[int, int], int] = {}
        self.duration: dict[tuple[str, int, int], int] = {}
        self._durations()
        self._placement()
        self._order()

    def _column(self, lower: float, upper: float, integer: bool) -> int:
        self.columns.append((lower, upper, integer))
        return len(self.columns) - 1

    def _row(self, lower: float, upper: float, terms: dict[int, float]) -> None:
        self.rows.append((lower, upper, list(terms), list(terms.values())))

    def _durations(self) -> None:
        """D[kind, v, s]: a cell's forward or backward per micro-batch, head and tail included."""
        p = self.p
        for v, s in p.cells:
            for kind in ("F", "B"):
                column = self.duration[(kind, v, s)] = self._column(0, INF, False)
                fixed = p.fixed_time(kind, v, s)
                terms = {column: 1.0}
                for j, choice in enumerate(self.choices[s]):
                    length = choice.cells[v].forward if kind == "F" else choice.cells[v].backward
                    if length:
                        terms[self.y[s][j]] = -length / self.tau
                self._row(fixed / self.tau, fixed / self.tau, terms)

    def _placement(self) -> None:
        """One choice per stage; every body type's layers placed."""
        for s, stage in enumerate(self.choices):
            self._row(1, 1, {self.y[s][j]: 1.0 for j in range(len(stage))})
        # per stage, [choice, body type]: the choice's layers of that type (a model whose kinds alternate
        # has a body type per layer: counted once here, not once per type)
        held = held_layers(self.choices, len(self.p.layers.bodies))
        for l, body in enumerate(self.p.layers.bodies):
            terms = {}
            for s, table in enumerate(held):
                for j in np.flatnonzero(table[:, l]).tolist():
                    terms[self.y[s][j]] = float(table[j, l])
            self._row(body.nb_layer, body.nb_layer, terms)

    def _order(self) -> None:
        """g[b, p] = 1 from the first cell holding a type after b on: later types only there, b only up to it."""
        p = self.p
        types = len(p.layers.bodies)
        # per cell position, the first and last body type each choice of its stage puts there
        first_type, last_type = [], []
        for v, s in p.cells:
            cells = [choice.cells[v] for choice in self.choices[s]]
            first_type.append(np.array([min(c.bodies, default=types) for c in cells], dtype=np.int64))
            last_type.append(np.array([max(c.bodies, default=-1) for c in cells], dtype=np.int64))
        for b in range(types - 1):
            for position, (_, s) in enumerate(p.cells):
                g = self.g[(b, position)] = self._column(0, 1, True)
                later = {self.y[s][j]: 1.0 for j in np.flatnonzero(last_type[position] > b).tolist()}
                self._row(-INF, 0, {**later, g: -1.0})
                if position:
                    previous = self.g[(b, position - 1)]
                    self._row(0, INF, {g: 1.0, previous: -1.0})
                    early = {self.y[s][j]: 1.0 for j in np.flatnonzero(first_type[position] <= b).tolist()}
                    self._row(-INF, 1, {**early, previous: 1.0})

    def path_terms(self, path: Path) -> dict[int, float]:
        """T − Σ_π D ≥ 0."""
        terms: dict[int, float] = {self.top: 1.0}
        for key, times in path.items():
            terms[self.duration[key]] = terms.get(self.duration[key], 0.0) - float(times)
        return terms

    def add_every_path(self) -> list[int]:
        """T at least every path of the schedule at once, without listing them: a column per op for
        when it ends, at least its stage's previous op's end or its input's end plus its cell's
        time, and T at least every stage's last end (`schedules.op_graph`). For fixed cell times
        the least T is the longest path, the iteration time itself; over the choices relaxed it
        is the best bound any set of path rows can give (docs/balance.md). Returns the end columns."""
        p = self.p
        graph = op_graph(p.schedule_name, p.stages, p.chunks, p.micro_batches, p.group)
        ends: list[int] = []
        last: dict[int, int] = {}
        for cell, previous, needed in graph:
            end = self._column(0, INF, False)
            before = [ends[i] for i in (previous, needed) if i >= 0]
            for other in before or [None]:
                terms = {end: 1.0, self.duration[cell]: -1.0}
                if other is not None:
                    terms[other] = -1.0
                self._row(0, INF, terms)
            ends.append(end)
            last[cell[2]] = end
        for end in last.values():
            self._row(0, INF, {self.top: 1.0, end: -1.0})
        return ends

    def admits(self, plan: Plan) -> bool:
        """Whether a plan read back from the program is one it may take (listed choices always fit)."""
        return True

    def add_lower_bound(self, value: float) -> None:
        """T at least a bound proven elsewhere (in the descriptions' unit)."""
        self._row(value / self.tau, INF, {self.top: 1.0})

    def add_closed_form(self) -> None:
        """T at least the closed form for each possible bottleneck stage."""
        p = self.p
        m, chunks = p.micro_batches, p.chunks
        if p.schedule_name == "gpipe":
            waves = {}
            for kind in ("F", "B"):
                wave = waves[kind] = self._column(0, INF, False)
                for k in range(p.stages):
                    terms = {wave: 1.0}
                    for v, s in p.cells:
                        terms[self.duration[(kind, v, s)]] = -(1.0 + (m - 1) * (s == k))
                    self._row(0, INF, terms)
            self._row(0, INF, {self.top: 1.0, waves["F"]: -1.0, waves["B"]: -1.0})
            return
        for k in range(p.stages):
            path = {
                (kind, v, s): 1.0 / chunks + (m - 1.0 / chunks) * (s == k) for v, s in p.cells for kind in ("F", "B")
            }
            self._row(0, INF, self.path_terms(path))

    def add_least_busiest(self, work: float, closed_form: bool) -> None:
        """T at least what a plan whose busiest stage works `work` per micro-batch takes: the closed
        form's a·Σ D + (m − 1/V)·work, or for the critical path m·work (that stage's busy time)."""
        p = self.p
        m, chunks = p.micro_batches, p.chunks
        if not closed_form:
            self._row(m * work / self.tau, INF, {self.top: 1.0})
            return
        terms = {self.top: 1.0}
        for column in self.duration.values():
            terms[column] = -1.0 / chunks
        self._row((m - 1.0 / chunks) * work / self.tau, INF, terms)

    def chosen(self, values: Sequence[float]) -> list[int]:
        """Per stage, the index of the choice the solution takes (its largest y)."""
        return [max(range(len(stage)), key=lambda j: values[self.y[s][j]]) for s, stage in enumerate(self.choices)]

    def plan(self, values: Sequence[float]) -> Plan:
        counts = empty_counts(self.p)
        for s, j in enumerate(self.chosen(values)):
            for v, cell in enumerate(self.choices[s][j].cells):
                for body, row in zip(cell.bodies, cell.counts, strict=True):
                    counts[body][v][s] = list(row)
        return Plan(self.p, freeze(counts))

    def assignment(self, plan: Plan, top: float) -> list[float] | None:
        """Every column's value for a plan, to seed the solver; None unless each of its stages is a
        listed choice or has one with the same layers per cell and no longer backward in any chunk
        (the listing keeps only such choices; the cell times and T then still bound every path)."""
        p = self.p
        values = [0.0] * len(self.columns)
        durations: dict[tuple[str, int, int], float] = {}
        for s, stage in enumerate(self.choices):
            layout = [[plan.body_layers(body, v, s) for body in range(len(plan.counts))] for v in range(p.chunks)]
            found = next(
                (
                    j
                    for j, choice in enumerate(stage)
                    if all(_cell_matches(plan, v, s, cell) for v, cell in enumerate(choice.cells))
                ),
                None,
            )
            if found is None:
                found = next(
                    (
                        j
                        for j, choice in enumerate(stage)
                        if all(
                            [cell.body_count(body) for body in range(len(plan.counts))] == layout[v]
                            and cell.backward <= _body_backward(plan, v, s) * (1 + 1e-12)
                            for v, cell in enumerate(choice.cells)
                        )
                    ),
                    None,
                )
            if found is None:
                return None
            values[self.y[s][found]] = 1.0
            for v, cell in enumerate(stage[found].cells):
                durations[("F", v, s)] = cell.forward
                durations[("B", v, s)] = cell.backward
        for (kind, v, s), column in self.duration.items():
            values[column] = (durations[(kind, v, s)] + p.fixed_time(kind, v, s)) / self.tau
        values[self.top] = top
        self._order_values(plan, values)
        return values

    def _order_values(self, plan: Plan, values: list[float]) -> None:
        """The body-order columns a plan sets: 1 from the first cell holding a later body on."""
        p = self.p
        for (b, position), column in self.g.items():
            later = [
                q
                for q, (v, s) in enumerate(p.cells)
                if any(plan.body_layers(l, v, s) for l in range(b + 1, len(p.layers.bodies)))
            ]
            values[column] = 1.0 if later and position >= later[0] else 0.0


def _body_backward(plan: Plan, chunk: int, stage: int) -> float:
    """A cell's backward over its body layers only (head and tail left out)."""
    bodies = plan.problem.layers.bodies
    return sum(
        n * bodies[body].backward_time[OPTIONS[k]]
        for body in range(len(plan.counts))
        for k, n in enumerate(plan.counts[body][chunk][stage])
        if n
    )


def _cell_matches(plan: Plan, chunk: int, stage: int, cell: CellChoice) -> bool:
    for body in range(len(plan.counts)):
        expected = cell.counts[cell.bodies.index(body)] if body in cell.bodies else (0,) * len(OPTIONS)
        if tuple(plan.counts[body][chunk][stage]) != tuple(expected):
            return False
    return True
