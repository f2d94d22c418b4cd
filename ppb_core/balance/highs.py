"""A HiGHS solver set up the balancer's way: quiet, exact gaps, tight tolerances on a scaled program."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import highspy
import numpy as np

from ppb_core.io import silenced

TOLERANCE = 1e-7  # primal and integer feasibility on the scaled program (HiGHS's primal default)
INF = highspy.kHighsInf

Column = tuple[float, float, bool]  # (lower, upper, integer)
Row = tuple[float, float, list[int], list[float]]  # (lower, upper, columns, coefficients)


# What makes HiGHS give the same answer on any machine and load: one thread (the serial dual simplex,
# no parallel search), a fixed seed, and no restart. Its MIP solver reads the clock only for
# `time_limit` and for its logs (ERGO-Code/HiGHS 73cac48, highs/mip/HighsMipSolver.cpp,
# HighsMipSolverData.cpp, HighsSearch.cpp: every `timer_.read()` outside the logs is compared with
# `time_limit`), so a search ended by `mip_max_nodes` is the same search on every run; HiGHS's
# maintainers name `mip_max_nodes` as the deterministic limit (ERGO-Code/HiGHS issue #3133).
DETERMINISTIC: dict[str, object] = {
    "threads": 1,
    "parallel": "off",
    "simplex_strategy": 1,  # the dual simplex, serial
    "random_seed": 0,
    "mip_allow_restart": False,
}


class Solver(highspy.Highs):
    """A HiGHS solver that a Ctrl-C or SIGTERM ends at its branch and bound's next check, not when it is done.

    Python runs a signal's handler only between its own instructions, so one solve of a large program
    (1,024 layers on 64 stages, or 512 stages: minutes of strong branching in one round) held Ctrl-C and SIGTERM
    until it returned, on a loaded machine for over fifteen minutes. During `run` the two signals are noted
    instead; HiGHS's interrupt callbacks (`_callback`) then ask it to stop (`user_interrupt`), and once it
    has returned the signal goes to the handler it was meant for (KeyboardInterrupt, the CLI's Terminated).
    Two callbacks: the MIP's, at its branch and bound's checks, and the simplex's, at every iteration of a
    program solved as an LP (the probing's relaxations, `probing.PathRelaxation`: 114 of them ran ten minutes
    on 512 stages with no check at all; HiGHS 73cac48 `highs/simplex/HEkk.cpp`, `HEkk::bailout`, asks it
    once an iteration). A search ended by its node limit runs as before: the callbacks only read."""

    caught: list[int] | None = None
    watcher: tuple[float, Callable[[int, float, float], None], list[float]] | None = None

    def run(self) -> Any:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            return super().run()
        caught: list[int] = []
        # a handler installed from C (getsignal: None) cannot be put back from Python: such a signal is left as is
        stops = [sig for sig in _STOPS if signal.getsignal(sig) is not None]
        previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in stops}
        self.caught = caught
        try:
            status = super().run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.caught = None
        if caught:
            handler = previous[caught[0]]
            if callable(handler):
                handler(caught[0], None)  # raises KeyboardInterrupt (Python's SIGINT handler) or the CLI's Terminated
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), caught[0])
        return status


_STOPS = (signal.SIGINT, signal.SIGTERM)
_MIP_INTERRUPT = int(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)
# The callbacks every solver starts (`_callback`): the MIP's, at its branch and bound's checks; the simplex's, at
# every iteration (HEkk::bailout), which a MIP's own LPs never ask (HiGHS solves them with another solver,
# HighsLpRelaxation's), so it reaches the programs solved as LPs only
CALLBACKS = (highspy.cb.HighsCallbackType.kCallbackMipInterrupt, highspy.cb.HighsCallbackType.kCallbackSimplexInterrupt)


def _callback(kind: int, _message: str, data: Any, data_in: Any, solver: Solver) -> None:
    if solver.caught:
        data_in.user_interrupt = True
        return
    if solver.watcher is not None and kind == _MIP_INTERRUPT:
        every_s, show, last = solver.watcher
        now = time.perf_counter()
        if now - last[0] >= every_s:
            last[0] = now
            show(int(data.mip_node_count), float(data.mip_primal_bound), float(data.mip_dual_bound))


def new_solver(time_limit: float | None = None, nodes: int | None = None) -> Solver:
    """Gap 0 (optimality is proven, not estimated); the root's heavy heuristics off, they cost more
    than they save on these small programs. Tighter feasibility tolerances than 1e-7 make HiGHS
    reject its own optima ("claims optimality, but with ... infeasibilities").

    Repeatable: `DETERMINISTIC`, and *nodes* (branch-and-bound nodes) as the limit that ends a
    search; *time_limit* (none unless the user gives one) is only the wall-clock safety net."""
    with silenced(1):  # HiGHS prints a banner on stdout when the first solver is made
        solver = Solver()
    for name, value in (
        ("output_flag", False),
        *DETERMINISTIC.items(),
        ("mip_heuristic_effort", 0.0),
        ("presolve", "off"),
        # sub-MIP heuristics can run presolve for minutes past the time limit
        ("mip_heuristic_run_rens", False),
        ("mip_heuristic_run_rins", False),
        # and the root reduced-cost sub-MIP, seeded with a start, can run on without end (HiGHS 1.16)
        ("mip_heuristic_run_root_reduced_cost", False),
        ("mip_rel_gap", 0.0),
        ("mip_abs_gap", 1e-7),
        ("mip_feasibility_tolerance", TOLERANCE),
        ("primal_feasibility_tolerance", TOLERANCE),
        ("time_limit", INF if time_limit is None else max(0.01, time_limit)),
        ("mip_max_nodes", nodes if nodes is not None else highspy.kHighsIInf),
    ):
        solver.setOptionValue(name, value)
    solver.setCallback(_callback, solver)
    for kind in CALLBACKS:
        solver.startCallback(kind)
    return solver


def load(
    solver: highspy.Highs, columns: Sequence[Column], rows: Sequence[Row], objective: int | Sequence[float]
) -> None:
    """Columns, integrality and rows into the solver; minimise one column, or Σ cost × column."""
    lower = np.array([c[0] for c in columns], dtype=float)
    upper = np.array([c[1] for c in columns], dtype=float)
    if isinstance(objective, int):
        cost = np.zeros(len(columns))
        cost[objective] = 1.0
    else:
        cost = np.array(objective, dtype=float)
    empty_int = np.array([], dtype=np.int32)
    solver.addCols(len(columns), cost, lower, upper, 0, empty_int, empty_int, np.array([], dtype=float))
    integer = np.array([i for i, c in enumerate(columns) if c[2]], dtype=np.int32)
    if len(integer):
        solver.changeColsIntegrality(len(integer), integer, np.array([highspy.HighsVarType.kInteger] * len(integer)))
    if rows:
        # in one call: row by row, a program of 1,500 rows over 70,000 choices took seconds to load
        starts = np.cumsum([0] + [len(row[2]) for row in rows[:-1]], dtype=np.int32)
        solver.addRows(
            len(rows),
            np.array([row[0] for row in rows], dtype=float),
            np.array([row[1] for row in rows], dtype=float),
            int(sum(len(row[2]) for row in rows)),
            starts,
            np.fromiter((i for row in rows for i in row[2]), dtype=np.int32),
            np.fromiter((x for row in rows for x in row[3]), dtype=float),
        )


def add_row(solver: highspy.Highs, lower: float, terms: dict[int, float]) -> None:
    solver.addRow(
        lower, INF, len(terms), np.array(list(terms), dtype=np.int32), np.array(list(terms.values()), dtype=float)
    )


def status(solver: highspy.Highs) -> str:
    """ "optimal", "infeasible", "work_limit" (a node or iteration limit), "time_limit" or "error: ..."."""
    model_status = solver.getModelStatus()
    if model_status == highspy.HighsModelStatus.kOptimal:
        return "optimal"
    if model_status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
        return "infeasible"
    if model_status in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt):
        return "time_limit"
    if model_status in (highspy.HighsModelStatus.kSolutionLimit, highspy.HighsModelStatus.kIterationLimit):
        return "work_limit"
    return f"error: {solver.modelStatusToString(model_status)}"


def has_solution(solver: highspy.Highs) -> bool:
    return solver.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible


def seed(solver: highspy.Highs, values: Sequence[float]) -> None:
    """Give the solver a known solution to start from."""
    solution = highspy.HighsSolution()
    solution.col_value = list(values)
    solver.setSolution(solution)


def add_row_upper(solver: highspy.Highs, terms: dict[int, float], upper: float) -> None:
    solver.addRow(
        -INF, upper, len(terms), np.array(list(terms), dtype=np.int32), np.array(list(terms.values()), dtype=float)
    )


def add_column(solver: highspy.Highs, lower: float, upper: float) -> None:
    """One more continuous column, in no row and costing nothing."""
    empty_int = np.array([], dtype=np.int32)
    solver.addCols(1, np.array([0.0]), np.array([lower]), np.array([upper]), 0, empty_int, empty_int, np.array([]))


def watch(solver: Solver, every_s: float, show: Callable[[int, float, float], None]) -> None:
    """Call *show*(nodes, best objective, proven bound) at most every *every_s* seconds while the
    branch and bound runs (HiGHS's MIP interrupt callback, read only: the search is the same)."""
    solver.watcher = (every_s, show, [time.perf_counter()])
