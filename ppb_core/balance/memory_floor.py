"""When no plan fits: the least peak stage memory any plan needs, from a second integer program.

Variables x[l, r, v, s] (layers of body type l under option r in cell (v, s)) and Z, the peak;
the same placement, order and yaml rules as the balancer's program; for every stage and every
in-flight vector of its schedule, Z ≥ Σ x·(W_l + n_v·A_{l,r}) + head/tail + constant. Memory is
divided by the device memory so HiGHS's tolerances are relative; the answer is re-evaluated
exactly on the plan found.
"""

from __future__ import annotations

import time

from ppb_core.balance import highs
from ppb_core.balance.highs import INF
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import RANK, BalanceInput
from ppb_core.switches import OPTIONS


class _FloorModel:
    def __init__(self, problem: BalanceInput) -> None:
        self.p = problem
        self.mu = float(problem.memory_mb)
        self.columns: list[highs.Column] = []
        self.rows: list[highs.Row] = []
        self.x: dict[tuple[int, int, int, int], int] = {}
        for l, body in enumerate(problem.layers.bodies):
            for k in problem.option_indices:
                for v, s in problem.cells:
                    self.x[(l, k, v, s)] = self._column(0, body.nb_layer, True)
        self.peak = self._column(0, INF, False)
        self._placement()
        self._order()
        self._memory()

    def _column(self, lower: float, upper: float, integer: bool) -> int:
        self.columns.append((lower, upper, integer))
        return len(self.columns) - 1

    def _row(self, lower: float, upper: float, terms: dict[int, float]) -> None:
        self.rows.append((lower, upper, list(terms), list(terms.values())))

    def _placement(self) -> None:
        p = self.p
        for l, body in enumerate(p.layers.bodies):
            self._row(body.nb_layer, body.nb_layer, {self.x[(l, k, v, s)]: 1.0 for k in p.option_indices
                                                     for v, s in p.cells})
        for v, s in p.cells:
            if (v, s) not in p.reserved_cells:
                self._row(1, INF, {self.x[(l, k, v, s)]: 1.0 for l in range(len(p.layers.bodies))
                                   for k in p.option_indices})

    def _order(self) -> None:
        p = self.p
        bodies = p.layers.bodies
        n_total = float(p.layers.nb_body_layers)
        slct, comm = OPTIONS.index("SLCT"), OPTIONS.index("COMM")
        if slct in p.option_indices and comm in p.option_indices:
            for v, s in p.cells:
                u = self._column(0, 1, True)
                self._row(-INF, 0, {**{self.x[(l, slct, v, s)]: 1.0 for l in range(len(bodies))}, u: -n_total})
                self._row(-INF, n_total, {**{self.x[(l, comm, v, s)]: 1.0 for l in range(len(bodies))}, u: n_total})
        ranks = sorted({RANK[OPTIONS[k]] for k in p.option_indices})
        for b in range(len(bodies) - 1):
            before, after = float(bodies[b].nb_layer), float(bodies[b + 1].nb_layer)
            previous = None
            for v, s in p.cells:
                g = self._column(0, 1, True)
                self._row(-INF, 0, {**{self.x[(b + 1, k, v, s)]: 1.0 for k in p.option_indices}, g: -after})
                if previous is not None:
                    self._row(0, INF, {g: 1.0, previous: -1.0})
                    self._row(-INF, before, {**{self.x[(b, k, v, s)]: 1.0 for k in p.option_indices},
                                             previous: before})
                previous = g
                for threshold in ranks[1:]:
                    e = self._column(0, 1, True)
                    high = {self.x[(b, k, v, s)]: 1.0 for k in p.option_indices if RANK[OPTIONS[k]] >= threshold}
                    low = {self.x[(b + 1, k, v, s)]: 1.0 for k in p.option_indices if RANK[OPTIONS[k]] < threshold}
                    self._row(-INF, 0, {**high, e: -before})
                    self._row(-INF, after, {**low, e: after})

    def _memory(self) -> None:
        p = self.p
        for s in range(p.stages):
            for vector in p.vectors[s]:
                terms: dict[int, float] = {self.peak: -1.0}
                for l, body in enumerate(p.layers.bodies):
                    for k in p.option_indices:
                        for v in range(p.chunks):
                            mb = body.memory_parameter_mb + vector[v] * body.memory_mb[OPTIONS[k]]
                            if mb:
                                terms[self.x[(l, k, v, s)]] = mb / self.mu
                fixed = (p.constant_memory_mb + p.head_stage_memory_mb(s, vector)) / self.mu
                self._row(-INF, -fixed, terms)

    def plan(self, values: list[float]) -> Plan:
        counts = empty_counts(self.p)
        for (l, k, v, s), column in self.x.items():
            counts[l][v][s][k] = round(values[column])
        return Plan(self.p, freeze(counts))


def memory_floor(problem: BalanceInput, time_limit: float) -> tuple[float | None, bool, float]:
    """(MB the least-memory plan needs, whether that is proven least, seconds)."""
    started = time.perf_counter()
    model = _FloorModel(problem)
    solver = highs.new_solver(time_limit)
    highs.load(solver, model.columns, model.rows, model.peak)
    solver.run()
    if not highs.has_solution(solver):
        return None, False, time.perf_counter() - started
    plan = model.plan(list(solver.getSolution().col_value))
    return plan.peak_memory_mb, highs.status(solver) == "optimal", time.perf_counter() - started
