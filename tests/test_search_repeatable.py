"""`ppb search` is repeatable: no decision reads a clock unless the spec asks for one (issues 13 and 14)."""

from __future__ import annotations

import json
import math
import multiprocessing
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ppb_core.balance import highs
from ppb_core.search import bound, rank
from ppb_core.search.enumerate import Refusal, enumerate_strategies, validate
from ppb_core.search.rank import exhaustive, search
from ppb_core.search.spec import SearchOptions, load_search_spec

DATA = Path(__file__).parent / "data" / "search"
CLOCKS = ("balance_time_limit_s", "evaluation_timeout_s", "time_budget_s")


def _spin(stop: Any) -> None:
    """Keep a core busy until told to stop: the load another helper's work puts on the machine."""
    count = 0
    while not stop.is_set():
        count += 1


def test_the_default_settings_and_the_test_specs_carry_no_clock() -> None:
    defaults = SearchOptions()
    assert all(getattr(defaults, name) is None for name in CLOCKS)
    for path in sorted(DATA.glob("tiny-*.yaml")):
        options = load_search_spec(path).search
        assert all(getattr(options, name) is None for name in CLOCKS), path.name


def test_no_solver_of_the_search_gets_a_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # every HiGHS the bounds and the balances build, in this process (one worker): its time limit
    given: list[float | None] = []
    made = highs.new_solver

    def recorded(time_limit: float | None = None, nodes: int | None = None) -> Any:
        given.append(time_limit)
        return made(time_limit, nodes)

    monkeypatch.setattr(highs, "new_solver", recorded)
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    rank._start(spec)
    strategies = [p for p in enumerate_strategies(spec) if not isinstance(p, Refusal)][:3]
    for strategy in strategies:
        assert not isinstance(validate(spec, strategy), Refusal)
        rank._relax(strategy)
        rank._relax(strategy, whole_layers=True)
        rank.evaluate(spec, strategy)
    assert given and all(limit is None or math.isinf(limit) for limit in given)


def test_a_search_under_load_gives_the_same_json() -> None:
    # once on a quiet machine, once beside two processes spinning on the cores (more than this machine's two)
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    quiet = search(spec, workers=2).to_json(details=True)
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(2)]
    for spinner in spinners:
        spinner.start()
    try:
        loaded = search(spec, workers=2).to_json(details=True)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join(10)
    assert not quiet["clock_stopped"] and quiet["counts"]["clock_stopped"] == 0
    assert json.dumps(quiet) == json.dumps(loaded)


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-moe"])
def test_the_workers_do_not_change_the_result(name: str) -> None:
    # the waves are the spec's (`search.wave`), not the CPUs': one worker and three give the same counts,
    # the same strategies balanced, pruned and ranked; with a balance budget too
    spec = load_search_spec(DATA / f"{name}.yaml")
    budgeted = spec.model_copy(update={"search": spec.search.model_copy(update={"balance_budget": 5})})
    for searched in (spec, budgeted):
        one, three = (search(searched, workers=w).to_json(details=True) for w in (1, 3))
        assert json.dumps(one) == json.dumps(three)


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-tight"])
def test_each_reason_shows_one_instance_with_its_numbers(name: str) -> None:
    # the family writes numbers as N; its example is a strategy the reason rejected, with the line it got
    result = exhaustive(load_search_spec(DATA / f"{name}.yaml"))
    grid = {(p.strategy if isinstance(p, Refusal) else p).label(result.spec) for p in enumerate_strategies(result.spec)}
    assert result.reasons()
    numbered = 0
    for reason in result.reasons():
        label, _, line = result.example(reason).partition(": ")
        assert label in grid, reason
        if "N" in reason.split(": ", 1)[-1]:
            # the instance's line is the family's with the numbers kept (6 heads, tp 4: not N heads, tp N)
            assert re.sub(r"\d+(\.\d+)?", "N", line) in reason and re.search(r"\d", line)
            numbered += 1
    assert numbered or name == "tiny-tight"


def test_relaxations_cut_short_by_their_iterations_keep_the_ranking_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # no simplex iteration at all: every relaxation presolve does not end is cut short, gives no bound
    # ("iteration_limit", 0), and the strategy keeps its schedule bound; pruning stays sound, so the ranking
    # is still the exhaustive one (one worker: the relaxations run in this process, under the patch)
    monkeypatch.setattr(bound, "LP_ITERATIONS_PER_ROW", 0)
    statuses: list[str] = []
    solve = bound._solve

    def recorded(*args: Any, **kwargs: Any) -> bound.Relaxation:
        answer = solve(*args, **kwargs)
        statuses.append(answer.status)
        return answer

    monkeypatch.setattr(bound, "_solve", recorded)
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    searched, every = search(spec, workers=1), exhaustive(spec)
    assert "iteration_limit" in statuses
    assert [(e.strategy, e.seconds) for e in searched.ranked] == [(e.strategy, e.seconds) for e in every.ranked]


def test_more_workers_than_cpus_start_no_more_pool_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    # `--workers 1000` on 2 cores started a thousand pool processes (208 s for a search of 21 s); the tasks
    # are the same for any number (the test above), so the pool holds at most the CPUs, two at least
    monkeypatch.setattr(rank, "_cpus", lambda: 2)
    workers = rank._Workers(load_search_spec(DATA / "tiny-dense.yaml"), 1000)
    try:
        assert workers.processes == 2 and workers.pool is not None and len(workers.pool._pool) == 2
    finally:
        workers.close()
    monkeypatch.setattr(rank, "_cpus", lambda: 1)
    workers = rank._Workers(load_search_spec(DATA / "tiny-dense.yaml"), 3)
    try:
        assert workers.processes == 2  # asked for more than one: a pool still, of two
    finally:
        workers.close()


def test_a_search_ended_by_ctrl_c_drops_its_pools_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (KeyboardInterrupt) mid-screen closed the pool and `Pool.join` waited for every queued task: on a
    9,216-strategy DeepSeek-V3 spec `ppb search` went on after it (session 27). Now the pool is terminated, its
    tasks dropped, and the interrupt goes on up."""
    made: list[rank._Workers] = []
    original = rank._Workers.__init__

    def keep(self: rank._Workers, *args: Any) -> None:
        original(self, *args)
        made.append(self)

    def interrupt(event: str, figures: dict[str, Any]) -> None:
        if event == "screened":
            raise KeyboardInterrupt

    monkeypatch.setattr(rank._Workers, "__init__", keep)
    with pytest.raises(KeyboardInterrupt):
        search(load_search_spec(DATA / "tiny-dense.yaml"), workers=2, progress=interrupt)
    assert made and made[0].pool is not None and made[0].pool._state == "TERMINATE"


def test_a_pool_worker_ends_on_sigterm_though_its_parent_ignored_it() -> None:
    """`Pool.terminate` ends workers by SIGTERM; a forkserver started from a process ignoring SIGTERM (Dagster
    does, under a shell's background job's ignored SIGINT) passes SIG_IGN on, and terminate waited forever on
    workers blocked on the task queue's lock (the suite hung in the Ctrl-C test above). A worker's start puts
    SIGTERM back to its default, and ignores SIGINT."""
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # what such a worker inherits
    try:
        rank._start_worker(load_search_spec(DATA / "tiny-dense.yaml"))
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_a_pool_whose_terminate_hangs_does_not_hang_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM to the whole process group (a scheduler's, `kill -- -PGID`) killed the pool's workers with its
    queue lock held: `Pool.terminate` waited on that lock forever and `ppb search` hung (user QA, reproduced on
    searches/llama3-8b-64.yaml). A terminate that has not ended within the wait kills what the search started."""

    class Stuck:
        def terminate(self) -> None:
            threading.Event().wait()  # the lock a killed worker holds, never released

        def join(self) -> None:
            raise AssertionError("joined a pool whose terminate never ended")

    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    child.start()
    monkeypatch.setattr(rank, "TERMINATE_WAIT_S", 0.5)
    started = time.monotonic()
    rank._terminate(Stuck())
    child.join(5.0)
    assert time.monotonic() - started < 5.0 and child.exitcode is not None  # killed, not left to sleep 60 s
