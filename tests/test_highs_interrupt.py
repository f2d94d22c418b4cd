"""A Ctrl-C or SIGTERM during a HiGHS solve ends the solve at its next branch-and-bound check
(`highs.Solver.run`): the signal was held until the solve returned, minutes on a large balance.

The program: a 0-1 problem of 60 items under 30 random knapsack rows, which HiGHS (one thread, no
heuristics: `highs.new_solver`) solves to optimality in thousands of nodes, far more than the signal
sent at its first node leaves it (seconds, uninterrupted). Behaviour, not timing: the interrupted solve
says so (HiGHS's kInterrupt) instead of being proven optimal, and the signal's own handler then runs.
"""

from __future__ import annotations

import os
import signal

import highspy
import numpy as np
import pytest

from ppb_core.balance import highs


def _knapsacks() -> highs.Solver:
    rng = np.random.default_rng(0)
    items, rows = 60, 30
    solver = highs.new_solver()
    weights = [rng.integers(1, 100, items).astype(float) for _ in range(rows)]
    highs.load(
        solver,
        [(0.0, 1.0, True)] * items,
        [(-highs.INF, float(w.sum() / 2), list(range(items)), list(w)) for w in weights],
        list(-rng.integers(1, 100, items).astype(float)),
    )
    return solver


def _signal_at_first_node(solver: highs.Solver, signum: int) -> None:
    """Sends *signum* to this process from the solver's first node (the watcher runs in the callback)."""
    sent: list[int] = []

    def send(_nodes: int, _best: float, _bound: float) -> None:
        if not sent:
            sent.append(signum)
            os.kill(os.getpid(), signum)

    highs.watch(solver, 0.0, send)


def test_ctrl_c_ends_the_solve_then_raises_keyboard_interrupt() -> None:
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        solver = _knapsacks()
        _signal_at_first_node(solver, signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            solver.run()
        assert solver.getModelStatus() == highspy.HighsModelStatus.kInterrupt  # not solved on to its optimum
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's own handler is back
    finally:
        signal.signal(signal.SIGINT, before)


def test_sigterm_goes_to_the_handler_it_was_meant_for() -> None:
    class Stopped(Exception):
        pass

    def stop(_signum: int, _frame: object) -> None:
        raise Stopped

    before = signal.signal(signal.SIGTERM, stop)
    try:
        solver = _knapsacks()
        _signal_at_first_node(solver, signal.SIGTERM)
        with pytest.raises(Stopped):
            solver.run()
        assert solver.getModelStatus() == highspy.HighsModelStatus.kInterrupt
        assert signal.getsignal(signal.SIGTERM) is stop
    finally:
        signal.signal(signal.SIGTERM, before)
