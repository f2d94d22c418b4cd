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


def _assignment_lp(size: int = 60) -> highs.Solver:
    """An LP of *size* × *size* assignment columns with random costs (no integer column: HiGHS runs its
    simplex alone, no branch and bound), over a hundred simplex iterations."""
    rng = np.random.default_rng(0)
    solver = highs.new_solver()
    cells = [(i, j) for i in range(size) for j in range(size)]
    rows = [(1.0, 1.0, [k for k, (i, _) in enumerate(cells) if i == r], [1.0] * size) for r in range(size)]
    rows += [(1.0, 1.0, [k for k, (_, j) in enumerate(cells) if j == c], [1.0] * size) for c in range(size)]
    highs.load(solver, [(0.0, 1.0, False)] * len(cells), rows, list(rng.random(len(cells))))
    return solver


def _signal_at_first_iteration(solver: highs.Solver, signum: int) -> list[int]:
    """Sends *signum* to this process from the simplex's first iteration (HiGHS's simplex interrupt callback,
    as `highs.new_solver` starts it, wrapped); the kinds of callback heard are returned as they come."""
    heard: list[int] = []

    def first(kind: int, message: str, data: object, data_in: object, user: highs.Solver) -> None:
        if not heard:
            os.kill(os.getpid(), signum)
        heard.append(int(kind))
        highs._callback(kind, message, data, data_in, user)

    solver.setCallback(first, solver)  # which stops the callbacks `new_solver` started: started again
    for kind in highs.CALLBACKS:
        solver.startCallback(kind)
    return heard


def test_ctrl_c_ends_an_lp_at_its_next_simplex_iteration() -> None:
    """A program solved as an LP (the probing's relaxations) has no branch and bound, so no MIP callback: the
    simplex's own interrupt ends it (the LP solves to its optimum uninterrupted, in over a hundred iterations)."""
    whole = _assignment_lp()
    whole.run()
    assert whole.getModelStatus() == highspy.HighsModelStatus.kOptimal
    assert whole.getInfo().simplex_iteration_count > 50
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        solver = _assignment_lp()
        heard = _signal_at_first_iteration(solver, signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            solver.run()
        assert solver.getModelStatus() == highspy.HighsModelStatus.kInterrupt
        assert set(heard) == {int(highspy.cb.HighsCallbackType.kCallbackSimplexInterrupt)}
        assert solver.getInfo().simplex_iteration_count < whole.getInfo().simplex_iteration_count
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_simplex_callback_leaves_an_lp_as_it_was() -> None:
    """Not interrupted, the callback only reads: the same optimum in the same iterations as without it."""
    watched, bare = _assignment_lp(), _assignment_lp()
    bare.stopCallback(highspy.cb.HighsCallbackType.kCallbackSimplexInterrupt)
    watched.run()
    bare.run()
    assert watched.getInfo().simplex_iteration_count == bare.getInfo().simplex_iteration_count
    assert list(watched.getSolution().col_value) == list(bare.getSolution().col_value)
