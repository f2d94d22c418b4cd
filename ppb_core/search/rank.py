"""The search: screen every valid strategy, balance the promising ones, rank them by iteration time.

A strategy's result is its balanced plan's iteration as `run_iteration` prices it: the balancer
(`run_problem`, `balance`) splits the layers and picks their recompute options, and the plan's
cells are timed with the run's schedule, links, data-parallel communication and optimizer. The
ranking is by seconds, ties settled by the strategy's fields.

Branch and bound (docs/search.md). Every valid strategy gets a quick lower bound
(`bound.quick_bound`, no memory limit) and a quick memory verdict (`screen.fits_somewhere`).
Strategies wait in a queue ordered by their bound; the one with the least bound is taken: first its
bound is refined with the relaxed balancing program (`bound.lp_bound`, memory included; when the
program has no point no plan fits), then it is balanced and timed. The search stops when the queue's
least bound is above the `top`-th best time found: no strategy left can enter the ranking, since each
bound is proven below every plan's time (`ppb_core.search.bound`). So the ranking is the one an
exhaustive search (`exhaustive`: balance and time every valid strategy) gives, which the tests
check on small searches. Work goes out in waves to worker processes.

Shards (Dagster): `shard` splits the grid in groups of strategies that share layer times,
`search_points` runs the same search on one shard alone, and `merge` keeps the best `top` of the
shards' rankings: each shard's ranking holds every strategy of the shard that can be in the
overall ranking, so the merge is exact too.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import math
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ppb_core.balance import WorkLimits, report, solve
from ppb_core.balance.fitting import fitting_placement
from ppb_core.balance.megatron import selective_modules
from ppb_core.balance.mtp_apart import standalone_problem
from ppb_core.balance.problem import BalanceInput, run_problem
from ppb_core.config.run import RunConfig
from ppb_core.estimate.plan import plan_overrun_mb, plan_stages, time_unit_s
from ppb_core.estimate.seconds import in_seconds
from ppb_core.memory import MemoryModel
from ppb_core.payload.run import describe_run
from ppb_core.search.bound import lp_bound
from ppb_core.search.enumerate import Refusal, Strategy, enumerate_strategies, validate
from ppb_core.search.screen import (
    NO_ROOM,
    FigureCache,
    after_schedule_ms,
    blocking,
    fits_somewhere,
    placements,
    run_forms,
    schedule_floor_ms,
    screen,
    time_key,
)
from ppb_core.search.spec import SearchSpec
from ppb_core.timing.iteration import Iteration, run_iteration
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import MB

NO_STAGE_ROOM = "memory: no plan fits (whole layers: the stages' room cannot hold every layer)"
NO_RELAXED_PLAN = "memory: no plan fits (the relaxed balancing program has no point)"
NO_WHOLE_PLAN = "memory: no plan fits (the relaxed program with whole layers per cell has no point)"
BALANCER_NO_PLAN = "memory: the balancer finds no plan that fits"
# the balancer stopped by its work limits (or clock) before any plan: no proof that none fits (until December 2026
# counted under BALANCER_NO_PLAN, a memory verdict it is not)
BALANCER_STOPPED = "balance: no plan found within its work limits (search.balance_work)"
# the same, stopped by the opt-in clock: the knob to name is that one
BALANCER_CLOCK_STOPPED = "balance: no plan found within its time limit (search.balance_time_limit_s)"
BALANCER_TIMEOUT = "balancer: no answer within the search's evaluation timeout"
BALANCER_FAILED = "balancer: its process ended without an answer"
# The whole-layer program's branch-and-bound nodes (deterministic); past them its proven bound so far is
# taken. No clock: every bound, and so every pruning, is the same on any machine and load.
WHOLE_LAYERS_NODES = 200
OUT_OF_TIME = "budget: not examined within the search's budget (its bound is below the ranking's last)"
PRUNED = "bound: cannot beat the ranking's last (schedule bound)"
SLOWER = "ranking: balanced and timed, slower than the ranking's last"
# A bound and the time it bounds add the same terms in different orders, so a bound equal to a time can
# exceed it by rounding; a bound within this relative slack of the ranking's last is a tie, not a proof.
BOUND_SLACK = 1e-9

Progress = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Ranked:
    """A balanced strategy, timed: what `ppb search --json` lists under `ranked`."""

    strategy: Strategy
    seconds: float
    tokens_per_second_per_device: float
    mfu: float
    hfu: float
    breakdown: dict[str, float]
    peak_memory_mb: float  # the plan's busiest stage as the memory model gives it (`ppb estimate`, `ppb check`)
    memory_mb: float  # what a stage may use: the device less reserved_mb
    uniform_seconds: float | None  # the best uniform split with one option for every layer, if one fits
    plan: dict[str, Any]  # the balancer's JSON, times in seconds (`estimate.seconds.in_seconds`)
    bound_s: float  # the lower bound the search held when it balanced this strategy
    balancer_peak_memory_mb: float = 0.0  # the busiest stage as the balancer's descriptions charge it
    # each pipeline stage's peak as `peak_memory_mb` takes its busiest (the memory model's, reserved memory left out)
    stage_peaks_mb: tuple[float, ...] = ()
    # each stage's charge beyond its peak (`StagePeak.allocator_bytes`: torchtitan FSDP2's allocator pools, async
    # TP's symmetric-memory workspace; empty elsewhere): the fit and the headroom count it
    stage_allocator_mb: tuple[float, ...] = ()

    @property
    def stopped_by(self) -> str:
        """What ended the balance: "optimal", "work_limit" (deterministic) or "time_limit" (the clock)."""
        return str(self.plan.get("stopped_by", ""))

    @property
    def balance_gap(self) -> float | None:
        """The balancer's proven gap: how far its plan may be from the best plan of this strategy."""
        gap = self.plan.get("gap")
        return None if gap is None else float(gap)

    @property
    def gain(self) -> float | None:
        """The balanced plan's speed-up over its uniform split (>1: the plan is faster)."""
        return None if self.uniform_seconds is None else self.uniform_seconds / self.seconds

    @property
    def mtp(self) -> str | None:
        """Where the plan runs the MTP layers: "with_loss" or "apart" (`balance.mtp_apart`), None when the
        balancer had one place only (no MTP layers, PP 1, DualPipeV, not Megatron)."""
        rows = self.plan.get("mtp_placement") or []
        return next((str(row["mtp"]) for row in rows if row.get("chosen")), None)

    @property
    def headroom_mb(self) -> float:
        """What the fullest stage leaves of the usable memory, with what the allocator reserves beyond its peak."""
        if not self.stage_allocator_mb:
            return self.memory_mb - self.peak_memory_mb
        needed = (peak + beyond for peak, beyond in zip(self.stage_peaks_mb, self.stage_allocator_mb, strict=True))
        return self.memory_mb - max(needed)

    def key(self) -> tuple:
        return (self.seconds, self.strategy)

    def to_json(self, spec: SearchSpec, details: bool = False) -> dict[str, Any]:
        """The contract's entry (`ppb search --json`); with *details*, also its name, HFU, time breakdown,
        headroom, uniform split and bound (`search.json` of `-o DIR`)."""
        entry = {
            "parallel": self.strategy.parallel(spec),
            "training": self.strategy.training(spec),
            "tokens_per_second_per_device": self.tokens_per_second_per_device,
            "iteration_seconds": self.seconds,
            "mfu": self.mfu,
            "peak_memory_mb": self.peak_memory_mb,
            "plan": self.plan,
        }
        if details:
            entry = {
                "name": self.strategy.label(spec),
                **entry,
                "hfu": self.hfu,
                "breakdown": self.breakdown,
                "headroom_mb": self.headroom_mb,
                "uniform_iteration_seconds": self.uniform_seconds,
                "gain_over_uniform": self.gain,
                "bound_seconds": self.bound_s,
                "balancer_peak_memory_mb": self.balancer_peak_memory_mb,
                "stage_peak_memory_mb": list(self.stage_peaks_mb),
                **({"stage_allocator_mb": list(self.stage_allocator_mb)} if self.stage_allocator_mb else {}),
                "balance_stopped_by": self.stopped_by,
                "balance_gap": self.balance_gap,
                "mtp": self.mtp,
            }
        return entry


def work_limits(share: float) -> WorkLimits:
    """The balancer's default work limits, each budget scaled by *share* (never above the defaults):
    deterministic limits (`WorkLimits.scaled`)."""
    return WorkLimits().scaled(min(1.0, share))


def payload_key(problem: BalanceInput) -> str:
    """The balancing problem's identity (every field the balancer reads, floats exactly): strategies whose
    problems are equal get the same plan, so one balance serves them all (DeepSeek-V3 at CP2 with one
    sequence per micro-batch and at CP4 with two, say, hold the same tokens per device)."""
    values = [getattr(problem, item.name) for item in fields(problem) if item.compare]
    return hashlib.sha256(repr(values).encode()).hexdigest()


@dataclass
class Pricer:
    """A strategy's plans priced by `run_iteration`, each once: what the ranking reads, and what the balance's
    report compares a plan with its best uniform split by (`balance.faster_uniform`)."""

    run: RunConfig
    times: TimeModel
    memory: MemoryModel
    done: dict[str, Iteration] = field(default_factory=dict)

    def iteration(self, cells: list[list[dict[str, int]]], mtp_cell: tuple[int, int] | None = None) -> Iteration:
        said = repr((cells, mtp_cell))
        if said not in self.done:
            self.done[said] = run_iteration(self.run, cells, self.times, self.memory, mtp_cell=mtp_cell)
        return self.done[said]

    def seconds(self, given: Mapping[str, Any], grid: Sequence[Sequence[Mapping[str, Any]]]) -> float:
        """`faster_uniform.PriceFn`: a plan's iteration from its problem's `describe()` and its cells."""
        apart = given.get("mtp_cell")
        at = None if apart is None else (int(apart[0]), int(apart[1]))
        return self.iteration([[dict(cell["options"]) for cell in row] for row in grid], at).seconds


def evaluate(
    spec: SearchSpec, strategy: Strategy, run: RunConfig | None = None, solved: dict[str, dict] | None = None
) -> Ranked | Refusal:
    """Balance the strategy and time its plan (and its best uniform split) with `run_iteration`.

    The balance is bounded by work (`search.balance_work`, a share of the balancer's limits), so the plan
    is the same on any machine; `search.balance_time_limit_s` (none unless the spec gives one) is only a
    safety net, and the plan's `stopped_by` says "time_limit" when it fired. *solved* holds balances already
    done, by `payload_key`: a problem found there is not balanced again, and one balanced here is added."""
    if run is None:
        checked = validate(spec, strategy)
        if isinstance(checked, Refusal):
            return checked
        run = checked
    memory, times = MemoryModel(run), TimeModel(run)
    problem = run_problem(run, describe_run(run, memory, times))
    # a Megatron run with MTP layers: also the MTP layers apart from the loss, as `ppb balance` tries them
    apart = standalone_problem(run, problem, memory=memory, times=times)
    # the `--recompute-modules` SLCT stands for, so the plan's flags say a selective plan as `ppb balance` does
    modules = selective_modules(run)
    key = f"{payload_key(problem)} {payload_key(apart) if apart is not None else ''} {modules}"
    pricer = Pricer(run, times, memory)  # each plan priced once: by the balance's choice, then here
    price, priced = pricer.seconds, pricer.iteration
    result = solved.get(key) if solved is not None else None
    cached = result is not None
    if result is None:
        # the plan Megatron-Core can say is left out (`megatron_settings`): it replaces the plan only when as
        # fast; `megatron_said` solves it for a ranked plan written out. The apart placement's solve is cut
        # off at the fused plan's time (`mtp_apart.faster_placement`): it costs a search only where it wins.
        limits = work_limits(spec.search.balance_work)
        overrun = plan_overrun_mb(run)
        result = fitting_placement(
            problem,
            apart,
            lambda placed, cutoff, megatron_cutoff: report(
                solve(placed, spec.search.balance_time_limit_s, limits=limits, megatron_settings=False, cutoff=cutoff),
                modules,
                price,  # the best uniform split replaces a plan it beats by the iteration (`faster_uniform`)
                overrun,  # the uniform splits fit as the plan must (`baselines.Baseline.feasible`)
            ),
            overrun,  # the plan fits as `ppb check` prices it (`balance.fitting`)
        )
        if solved is not None:
            solved[key] = result
    if result["status"] == "infeasible" or "cells" not in result:
        if result["status"] == "infeasible":
            reason = BALANCER_NO_PLAN
        else:
            reason = BALANCER_CLOCK_STOPPED if result.get("stopped_by") == "time_limit" else BALANCER_STOPPED
        return Refusal(strategy, reason, str(result.get("message", "no plan fits")))
    cells = [[dict(cell["options"]) for cell in row] for row in result["cells"]]
    mtp_cell = mtp_cell_of(result)
    iteration = priced(cells, mtp_cell)
    # the peak as the plan's run config gives it (`ppb estimate`, `ppb check`): the memory model's stage
    # peaks, with the backward's working set the balancer's descriptions leave out
    stages = plan_stages(run, cells, mtp_cell=mtp_cell)
    stage_peaks_mb = tuple((stage.peak.peak_bytes - stage.peak.reserved_bytes) / MB for stage in stages)
    allocator_mb = tuple(stage.peak.allocator_bytes / MB for stage in stages)
    peak_mb = max(stage_peaks_mb)
    plan = in_seconds(result, time_unit_s(run, problem.describe()))  # as `ppb balance RUN.yaml` gives it,
    plan["iteration"] = iteration.to_json()  # with the plan's iteration and its baseline's (`plan_iterations`)
    uniform = None
    if result.get("best_baseline"):
        best = result["best_baseline"]
        baseline = next(b for b in result["baselines"] if b["option"] == best)
        uniform_cells = [[{best: n} for n in row] for row in baseline["layers_per_cell"]]
        uniform_iteration = priced(uniform_cells)
        uniform = uniform_iteration.seconds
        plan["baseline_iteration"] = {"option": best, **uniform_iteration.to_json()}
        if cached and uniform < iteration.seconds:
            # balanced for another strategy with the same problem, whose iteration chose between the plan
            # and the uniform split (`faster_uniform`): this one's chooses again
            return evaluate(spec, strategy, run)
    return Ranked(
        strategy=strategy,
        seconds=iteration.seconds,
        tokens_per_second_per_device=iteration.tokens_per_second_per_device,
        mfu=iteration.mfu,
        hfu=iteration.hfu,
        breakdown=dict(iteration.breakdown),
        peak_memory_mb=peak_mb,
        balancer_peak_memory_mb=float(result["peak_memory_mb"]),
        stage_peaks_mb=stage_peaks_mb,
        stage_allocator_mb=allocator_mb if any(allocator_mb) else (),
        memory_mb=float(problem.memory_mb),
        uniform_seconds=uniform,
        plan=plan,
        bound_s=0.0,
    )


def megatron_said(spec: SearchSpec, entry: Ranked) -> dict[str, Any]:
    """The `megatron` section whose `flags` a ranked plan's Megatron-LM file takes: the plan's own when
    Megatron-Core can say it; else, for a plan mixing what Megatron-Core takes one setting for, the same
    balance (the search's work share) with Megatron-Core's settings solved beside it, as `ppb balance`
    gives them (`flags_of` "alternative": the fastest plan it can say; or "plan" when such a plan is as
    fast and replaced the plan)."""
    said = entry.plan.get("megatron", {})
    if said.get("flags") or not said.get("layout_only"):
        return said  # the plan's own flags, or none Megatron-LM takes under any setting (`note`)
    run = validate(spec, entry.strategy)
    assert not isinstance(run, Refusal)  # it was ranked
    problem = run_problem(run, describe_run(run))
    modules = selective_modules(run)
    limits = work_limits(spec.search.balance_work)
    overrun = plan_overrun_mb(run)
    result = fitting_placement(  # both MTP placements, as the ranked plan was balanced (`evaluate`)
        problem,
        standalone_problem(run, problem),
        lambda placed, **cuts: report(
            solve(placed, spec.search.balance_time_limit_s, limits=limits, selective_modules=modules, **cuts),
            modules,
            Pricer(run, TimeModel(run), MemoryModel(run)).seconds,
            overrun,
        ),
        overrun,
    )
    return in_seconds(result, time_unit_s(run, problem.describe()))["megatron"]


def mtp_cell_of(result: dict[str, Any]) -> tuple[int, int] | None:
    """The (chunk, stage) a balance result runs the MTP layers in apart from the loss (None: with it)."""
    apart = result["input"].get("mtp_cell")
    return None if apart is None else (int(apart[0]), int(apart[1]))


# ---------------------------------------------------------------------------------------------
# Work done in worker processes: each keeps the spec and its own figure cache.

_spec: SearchSpec | None = None
_cache: FigureCache | None = None


def _start(spec: SearchSpec) -> None:
    global _spec, _cache
    _spec, _cache = spec, FigureCache()


def _start_worker(spec: SearchSpec) -> None:
    """A worker process's start: Ctrl-C is the search's to handle (it ends the workers, `_Workers.close`), not
    each worker's, which printed a traceback apiece. SIGTERM ends it, whatever it inherited: `Pool.terminate`
    ends workers by SIGTERM, and a process started with SIGINT ignored (a shell's background job) runs Dagster
    ignoring SIGTERM, which the forkserver and its workers inherit; terminate then waited on them forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _start(spec)


def _screen_points(points: Sequence[Strategy | Refusal]) -> list[tuple[str, Any]]:
    """("refused", Refusal) or ("screened", Screened) for each point, in order."""
    assert _spec is not None and _cache is not None
    out: list[tuple[str, Any]] = []
    for point in points:
        if isinstance(point, Refusal):
            out.append(("refused", point))
            continue
        run = validate(_spec, point)
        if isinstance(run, Refusal):
            out.append(("refused", run))
        else:
            out.append(("screened", screen(point, run, _cache)))
    return out


def _relax(strategy: Strategy, whole_layers: bool = False) -> float | str:
    """The relaxed program's bound in seconds, or why no plan fits; with *whole_layers*, each cell's
    layer counts are whole numbers (a small integer program)."""
    assert _spec is not None and _cache is not None
    run = validate(_spec, strategy)
    assert not isinstance(run, Refusal)
    found = _cache.of(strategy, run)
    forms = run_forms(strategy)
    # each place the balancer may run the MTP layers in (`screen.placements`): the least bound over them
    places = [place for place in placements(strategy, found) if fits_somewhere(forms, *place)]
    if not places:
        return NO_ROOM
    values = []
    for figures, _ in places:
        floor = schedule_floor_ms(strategy, run, figures, alone=True)
        if math.isinf(floor):
            continue
        relaxed = lp_bound(
            forms,
            figures.kinds,
            figures.ends,
            figures.memory_mb,
            figures.constant_mb,
            figures.transfer_ms,
            blocking(run),
            whole_layers,
            time_limit=None,
            nodes=WHOLE_LAYERS_NODES,
            reduction_floor_ms=figures.reduction_floor_ms,
            schedule_floor_ms=floor,
        )
        values.append(relaxed.value_ms)
    if not values:
        return NO_STAGE_ROOM
    if all(value is None for value in values):
        return NO_WHOLE_PLAN if whole_layers else NO_RELAXED_PLAN
    least = min(value for value in values if value is not None)
    return (least + after_schedule_ms(strategy, found)) / 1e3


def _evaluate(strategy: Strategy, solved: dict[str, dict] | None = None) -> Ranked | Refusal:
    assert _spec is not None
    return evaluate(_spec, strategy, solved=solved)


def _run_task(task: tuple[str, Any]) -> Any:
    kind, payload = task
    if kind == "screen":
        return _screen_points(payload)
    if kind == "relax":
        return [_relax(s) for s in payload]
    if kind == "whole":
        return [_relax(s, whole_layers=True) for s in payload]
    return [_evaluate(s) for s in payload]


def _evaluator(connection: Any, spec: SearchSpec) -> None:
    """Balance strategy after strategy as they come, until told to stop: each arrives with the balances
    done elsewhere since the last (so it sees every balance the search holds, as a fresh process given
    them would), and is answered with the balance it added, if any. The process stays, so the schedule's
    orders, graph and in-flight vectors of a size (`ppb_core.schedules`, cached per size) are built once
    for all the strategies it balances, not once each: the answers are the same, the work less."""
    _start_worker(spec)
    solved: dict[str, dict] = {}
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        strategy, added = message
        solved.update(added)
        known = set(solved)
        answer = _evaluate(strategy, solved)
        connection.send((answer, {key: result for key, result in solved.items() if key not in known}))


@dataclass
class _Evaluator:
    """A balancing process and the balances it holds (their keys)."""

    process: Any
    connection: Any
    holds: set[str] = field(default_factory=set)


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _context() -> Any:
    """Processes started from a clean server process: a fork of this one could inherit HiGHS's worker
    threads mid-use (a solve here, or in another asset of the same Dagster process) and hang on them."""
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ppb_core.search.rank"])
    return context


class _Workers:
    """Screening and bounds run in a pool of processes (or here, with one worker). Balancing runs in
    processes of its own, one strategy at a time each. With the opt-in `SearchOptions.evaluation_timeout_s`
    (none by default: every answer is awaited, so the ranking is the same on any machine and load), one
    still balancing past it is stopped and replaced by a fresh one for the next wave."""

    def __init__(self, spec: SearchSpec, workers: int) -> None:
        self.workers = workers
        self.timeout = spec.search.evaluation_timeout_s
        self.spec = spec
        self.pool = None
        self.solved: dict[
            str, dict
        ] = {}  # balances done, by payload_key: a later strategy with the same problem reuses one
        self.context = _context()
        self.evaluators: list[_Evaluator | None] = []
        _start(spec)
        # the pool's processes: no more than the CPUs (at least two, so a pool is a pool). The tasks, and so
        # the ranking, are the same for any number; more processes only start slower (`--workers 1000` on
        # 2 cores: 208 s for a search of 21 s, a thousand processes started)
        self.processes = min(workers, max(2, _cpus()))
        if workers > 1:
            self.pool = self.context.Pool(self.processes, initializer=_start_worker, initargs=(spec,))

    def map(self, tasks: list[tuple[str, Any]]) -> list[Any]:
        """Each task's answer, in order; evaluations run beside the pool's tasks."""
        evaluations = [i for i, (kind, _) in enumerate(tasks) if kind == "evaluate"]
        others = [i for i in range(len(tasks)) if i not in evaluations]
        pending = None
        if self.pool is not None and others:
            pending = self.pool.map_async(_run_task, [tasks[i] for i in others], chunksize=1)
        answers: list[Any] = [None] * len(tasks)
        for i, answer in zip(evaluations, self._evaluate([tasks[i][1] for i in evaluations]), strict=True):
            answers[i] = answer
        done = pending.get() if pending is not None else [_run_task(tasks[i]) for i in others]
        for i, answer in zip(others, done, strict=True):
            answers[i] = answer
        return answers

    def imap(self, tasks: list[tuple[str, Any]]) -> Iterable[Any]:
        """Each (pool) task's answer, in order, as it comes."""
        if self.pool is None:
            return (_run_task(task) for task in tasks)
        return self.pool.imap(_run_task, tasks, chunksize=1)

    def _evaluator(self, index: int) -> _Evaluator:
        """The index-th balancing process, started when there is none (or it was stopped)."""
        while len(self.evaluators) <= index:
            self.evaluators.append(None)
        found = self.evaluators[index]
        if found is None:
            here, there = self.context.Pipe(duplex=True)
            process = self.context.Process(target=_evaluator, args=(there, self.spec), daemon=False)
            process.start()
            there.close()
            found = self.evaluators[index] = _Evaluator(process, here)
        return found

    def _stop(self, index: int) -> None:
        found = self.evaluators[index]
        if found is not None:
            if found.process.is_alive():
                found.process.kill()
            found.process.join()
            found.connection.close()
            self.evaluators[index] = None

    def _evaluate(self, parts: list[list[Strategy]]) -> list[list[Ranked | Refusal]]:
        """A wave: every strategy balanced side by side, each by a process of its own, all given the balances
        held when the wave starts (a strategy's answer does not depend on which process balanced it)."""
        strategies = [strategy for part in parts for strategy in part]
        held = dict(self.solved)
        for index, strategy in enumerate(strategies):
            evaluator = self._evaluator(index)
            try:
                evaluator.connection.send((strategy, {k: v for k, v in held.items() if k not in evaluator.holds}))
            except OSError:  # it ended since its last answer: a fresh one
                self._stop(index)
                evaluator = self._evaluator(index)
                evaluator.connection.send((strategy, held))
            evaluator.holds |= held.keys()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        answers: dict[Strategy, Ranked | Refusal] = {}
        for index, strategy in enumerate(strategies):
            evaluator = self.evaluators[index]
            assert evaluator is not None
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if evaluator.connection.poll(wait):
                try:
                    answers[strategy], added = evaluator.connection.recv()
                    self.solved.update(added)
                    evaluator.holds |= added.keys()
                    continue
                except (EOFError, ConnectionResetError):  # the process ended mid-answer
                    answers[strategy] = Refusal(strategy, BALANCER_FAILED, "the balancing process ended without answer")
            else:
                answers[strategy] = Refusal(strategy, BALANCER_TIMEOUT, f"no answer within {self.timeout:g} s")
            self._stop(index)
        return [[answers[s] for s in part] for part in parts]

    def close(self, abandoned: bool = False) -> None:
        """Every process ended: the balancing ones told to stop, the pool's once its tasks are done. *abandoned*
        (the search ended by an exception, Ctrl-C among them): killed, and the pool's tasks dropped. Closed,
        `Pool.join` waited for every queued task: Ctrl-C on a 9,216-strategy screen left `ppb search` waiting
        on them (session 27)."""
        for index, evaluator in enumerate(self.evaluators):
            if evaluator is not None:
                if not abandoned:
                    with contextlib.suppress(OSError):  # it ended already
                        evaluator.connection.send(None)
                    evaluator.process.join(5.0)
                self._stop(index)
        if self.pool is not None:
            if abandoned:
                _terminate(self.pool)
            else:
                self.pool.close()
                self.pool.join()


TERMINATE_WAIT_S = 10.0


def _terminate(pool: Any) -> None:
    """`Pool.terminate`, which cannot hang the command. A signal to the whole process group (a scheduler's
    SIGTERM, `kill -- -PGID`) kills the workers with the pool's queue lock held mid-`get`; terminate's
    `_help_stuff_finish` then waits on that lock forever (CPython 3.11 multiprocessing/pool.py), and `ppb search`
    hung after a traceback of the pool's worker handler (found in user QA). Where terminate has not ended after
    TERMINATE_WAIT_S, every process this one started is killed (`multiprocessing.active_children`) and the
    command ends; the pool's finalizer has run (once) and is not run again at exit."""
    ending = threading.Thread(target=pool.terminate, daemon=True)
    ending.start()
    ending.join(TERMINATE_WAIT_S)
    if ending.is_alive():
        for child in multiprocessing.active_children():
            child.kill()
    else:
        pool.join()


# ---------------------------------------------------------------------------------------------
# The search


@dataclass
class SearchResult:
    spec: SearchSpec
    ranked: list[Ranked]
    rejected: Counter = field(default_factory=Counter)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0  # wall clock, shown to a person (progress, table), never in the JSON
    balanced: list[Ranked] = field(default_factory=list)  # every strategy balanced, ranked or not, fastest first
    proven: int | None = None  # leading places no strategy left unexamined can take (None: all of them)
    unexamined_bound_s: float | None = None  # the least bound left when the budget ran out
    clock_stopped: bool = False  # the wall-clock safety net (`time_budget_s`) ended the search: not repeatable
    # one concrete instance of each reason (its family writes numbers as N): the least strategy, with its line
    examples: dict[str, tuple[Strategy, str]] = field(default_factory=dict)

    @property
    def proven_gap(self) -> float | None:
        """How much faster than the ranking's first an unexamined strategy could at most be (0: none can be
        faster; None: nothing left unexamined): 1 − least bound left / first's seconds, at least 0."""
        if self.unexamined_bound_s is None or not self.ranked:
            return None
        return max(0.0, 1.0 - self.unexamined_bound_s / self.ranked[0].seconds)

    def reasons(self) -> dict[str, int]:
        """Why each strategy enumerated and not ranked is not, by reason, most frequent first: the refusals
        and bounds, and the strategies balanced but slower than the ranking's last."""
        reasons = Counter(self.rejected)
        if len(self.balanced) > len(self.ranked):
            reasons[SLOWER] += len(self.balanced) - len(self.ranked)
        return dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))

    def example(self, reason: str) -> str:
        """One strategy the reason rejected, numbers kept: its label and its own line."""
        found = self.examples.get(reason)
        if found is None and reason == SLOWER and len(self.balanced) > len(self.ranked):
            first = self.balanced[len(self.ranked)]
            found = (first.strategy, f"{first.seconds:.4g} s")
        if found is None:
            return ""
        strategy, line = found
        return f"{strategy.label(self.spec)}: {line}" if line else strategy.label(self.spec)

    def to_json(self, details: bool = False) -> dict[str, Any]:
        """The contract's result (`ppb search --json`): ranked, rejected by reason, the four counts; with
        *details*, every count, the places proven and the least bound left unexamined. Results only: the
        wall-clock `seconds` the search took are the progress's and the table's, so the same spec gives the
        same bytes on every run."""
        rejected = self.reasons()
        ranked = [entry.to_json(self.spec, details) for entry in self.ranked]
        examples = {reason: self.example(reason) for reason in rejected}
        if not details:
            return {
                "ranked": ranked,
                "rejected": rejected,
                "counts": {k: self.counts.get(k, 0) for k in CONTRACT_COUNTS},
            }
        return {
            "search": self.spec.name,
            "ranked": ranked,
            "rejected": rejected,
            "rejected_examples": examples,
            "counts": dict(self.counts),
            "proven": len(self.ranked) if self.proven is None else self.proven,
            "unexamined_bound_seconds": self.unexamined_bound_s,
            "proven_gap": self.proven_gap,
            "clock_stopped": self.clock_stopped,
        }


CONTRACT_COUNTS: tuple[str, ...] = ("enumerated", "valid", "screened", "balanced")
COUNTS: tuple[str, ...] = (
    "enumerated",
    "valid",
    "screened",
    "relaxed",
    "whole_layers",
    "balanced",
    "pruned",
    "unexamined",
    "clock_stopped",
)


def shard(points: Iterable[Strategy | Refusal], shards: int) -> list[list[Strategy | Refusal]]:
    """The points in *shards* groups, whole groups of strategies sharing layer times dealt in turn."""
    groups: dict[tuple, list[Strategy | Refusal]] = {}
    for point in points:
        strategy = point.strategy if isinstance(point, Refusal) else point
        groups.setdefault(time_key(strategy), []).append(point)
    out: list[list[Strategy | Refusal]] = [[] for _ in range(max(1, shards))]
    for index, members in enumerate(groups.values()):
        out[index % len(out)].extend(members)
    return [members for members in out if members]


def _by_schedule(points: Sequence[Strategy | Refusal], parts: int) -> list[list[Strategy | Refusal]]:
    """The points in about *parts* chunks, each schedule shape (schedule, pp, vpp) whole in one: a worker
    then builds the bound forms of its shapes alone (they cost more to build than a strategy to screen)."""
    shapes: dict[tuple, list[Strategy | Refusal]] = {}
    for point in points:
        s = point.strategy if isinstance(point, Refusal) else point
        shapes.setdefault((s.schedule, s.pp, s.vpp), []).append(point)
    ordered = sorted(shapes.values(), key=len, reverse=True)
    out: list[list[Strategy | Refusal]] = [[] for _ in range(min(parts, len(ordered)) or 1)]
    for members in ordered:  # the largest shapes first, each to the lightest chunk
        min(out, key=len).extend(members)
    return out


def _notify(progress: Progress | None, event: str, **figures: Any) -> None:
    if progress is not None:
        progress(event, figures)


def search_points(
    spec: SearchSpec,
    points: Sequence[Strategy | Refusal],
    workers: int = 1,
    progress: Progress | None = None,
) -> SearchResult:
    """The ranking of *points* (a grid or a shard of it): screen, then branch and bound."""
    started = time.perf_counter()
    top = spec.search.top
    rejected: Counter = Counter()
    examples: dict[str, tuple[Strategy, str]] = {}
    counts = dict.fromkeys(COUNTS, 0)
    counts["enumerated"] = len(points)
    clock_stopped = False
    pool = _Workers(spec, workers)
    try:
        chunks = _by_schedule(points, max(1, workers * 4))
        queue: list[tuple[float, Strategy, int]] = []  # (bound, strategy, level: 1 quick, 2 relaxed)
        examined = 0  # points screened or refused so far, for the progress
        for results in pool.imap([("screen", chunk) for chunk in chunks]):
            for kind, item in results:
                if kind == "refused":
                    rejected[item.reason] += 1
                    _note(examples, item.reason, item.strategy, item.message)
                    continue
                counts["valid"] += 1
                counts["screened"] += 1
                queue.append((item.bound_s, item.strategy, 1))
            examined += len(results)
            _notify(progress, "screened", screened=counts["screened"], examined=examined, total=len(points))
        heapq.heapify(queue)
        limit = spec.search.balance_budget
        _notify(
            progress,
            "screening done",
            screened=counts["screened"],
            total=len(points),
            seconds=time.perf_counter() - started,
            # the balances ahead: one a ranked place (a strategy refused by its bound or its balance fills
            # none), within the balance budget and the grid
            to_fill=min(top, counts["screened"], counts["screened"] if limit is None else limit),
            most_balances=counts["screened"] if limit is None else min(limit, counts["screened"]),
        )
        ranked: list[Ranked] = []

        def beaten(bound: float, strategy: Strategy) -> bool:
            return len(ranked) >= top and (bound * (1 - BOUND_SLACK), strategy) > ranked[top - 1].key()

        budget = spec.search.time_budget_s

        wave = spec.search.wave

        def room() -> int:
            """Strategies a wave may balance: the spec's `search.wave` (4 by default: two per core of a
            2-core machine, where balances of different lengths keep both busy), within the balance budget.
            Not the worker count: which strategies are balanced, and so the counts and a budgeted ranking,
            would then depend on the machine's CPUs."""
            return wave if limit is None else max(0, min(wave, limit - counts["balanced"]))

        while queue and not beaten(queue[0][0], queue[0][1]):
            if budget is not None and time.perf_counter() - started > budget:
                clock_stopped = True
                break
            if room() == 0:
                break
            # a wave: the least bounds first; refine many at once, balance two per worker
            taken: dict[int, list[tuple[float, Strategy]]] = {1: [], 2: [], 3: []}
            while queue and len(taken[3]) < room() and len(taken[1]) + len(taken[2]) < 32 * wave:
                bound, strategy, level = queue[0]
                if beaten(bound, strategy):
                    break
                heapq.heappop(queue)
                taken[level].append((bound, strategy))
            tasks: list[tuple[str, Any]] = []
            # the whole-layer program for one chunk per stage only: it tightens 1F1B's bound by several
            # per cent in tens of milliseconds, but costs seconds on interleaved grids for little
            direct = [(b, s) for b, s in taken[2] if s.vpp > 1]
            for bound, strategy in direct:
                heapq.heappush(queue, (bound, strategy, 3))
            taken[2] = [(b, s) for b, s in taken[2] if s.vpp == 1]
            for level, kind in ((1, "relax"), (2, "whole")):
                tasks += [(kind, part) for part in _deal([s for _, s in taken[level]], workers)]
            tasks += [("evaluate", [s]) for _, s in taken[3]]
            bounds = {strategy: bound for level in taken.values() for bound, strategy in level}
            for (kind, part), answers in zip(tasks, pool.map(tasks), strict=True):
                for strategy, answer in zip(part, answers, strict=True):
                    if kind in ("relax", "whole"):
                        counts["relaxed" if kind == "relax" else "whole_layers"] += 1
                        if isinstance(answer, str):
                            rejected[answer] += 1
                            _note(examples, answer, strategy, "")
                        else:
                            level = 2 if kind == "relax" else 3
                            heapq.heappush(queue, (max(bounds[strategy], answer), strategy, level))
                        continue
                    counts["balanced"] += 1
                    if isinstance(answer, Refusal):
                        rejected[answer.reason] += 1
                        _note(examples, answer.reason, strategy, answer.message)
                    else:
                        counts["clock_stopped"] += answer.stopped_by == "time_limit"
                        ranked.append(_with_bound(answer, bounds[strategy]))
            ranked.sort(key=Ranked.key)
            if taken[3]:
                _notify(
                    progress,
                    "balanced",
                    balanced=counts["balanced"],
                    relaxed=counts["relaxed"],
                    waiting=len(queue),
                    best=ranked[0] if ranked else None,
                    # the balances ahead to fill the ranking: one a place not yet filled, as far as the queue
                    # and the budget reach
                    to_fill=min(
                        max(0, top - len(ranked)),
                        len(queue),
                        len(queue) if limit is None else max(0, limit - counts["balanced"]),
                    ),
                    # the most balances still ahead: the strategies waiting that the ranking does not yet beat,
                    # within the budget (the bounds prune more as the ranking tightens: an upper bound)
                    contenders=min(
                        sum(1 for bound, strategy, _ in queue if not beaten(bound, strategy)),
                        len(queue) if limit is None else max(0, limit - counts["balanced"]),
                    ),
                )
        waiting = [(bound, strategy) for bound, strategy, _ in queue if not beaten(bound, strategy)]
        counts["pruned"] = len(queue) - len(waiting)
        counts["unexamined"] = len(waiting)
        last = ranked[top - 1].seconds if len(ranked) >= top else None
        for bound, strategy, _ in queue:
            if last is not None and beaten(bound, strategy):
                _note(examples, PRUNED, strategy, f"bound {bound:.4g} s > the ranking's last {last:.4g} s")
            else:
                _note(examples, OUT_OF_TIME, strategy, f"bound {bound:.4g} s")
        if counts["pruned"]:
            rejected[PRUNED] += counts["pruned"]
        if waiting:
            rejected[OUT_OF_TIME] += len(waiting)
        least = min(waiting, default=None)
        # a ranked place is proven when no strategy left unexamined can come before it
        proven = sum(1 for entry in ranked[:top] if least is None or entry.key() <= least)
    except BaseException:
        pool.close(abandoned=True)
        raise
    pool.close()
    result = SearchResult(spec, ranked[:top], rejected, counts, time.perf_counter() - started, ranked)
    result.proven = proven
    result.unexamined_bound_s = None if least is None else least[0]
    result.clock_stopped = clock_stopped
    result.examples = examples
    return result


def _note(examples: dict[str, tuple[Strategy, str]], reason: str, strategy: Strategy, line: str) -> None:
    """Keep the least strategy of each reason as its example (the same whatever order answers come in)."""
    held = examples.get(reason)
    if held is None or strategy < held[0]:
        examples[reason] = (strategy, line)


def _deal(items: list[Strategy], hands: int) -> list[list[Strategy]]:
    """*items* dealt into at most *hands* non-empty parts."""
    return [part for part in (items[i::hands] for i in range(hands)) if part]


def _with_bound(entry: Ranked, bound: float) -> Ranked:
    return replace(entry, bound_s=bound)


def search(spec: SearchSpec, workers: int | None = None, progress: Progress | None = None) -> SearchResult:
    """The search of a spec: every strategy of its grid, ranked."""
    started = time.perf_counter()
    workers = workers or spec.search.workers or os.cpu_count() or 1
    points = list(enumerate_strategies(spec))
    _notify(progress, "enumerated", enumerated=len(points))
    result = search_points(spec, points, workers, progress)
    result.seconds = time.perf_counter() - started
    return result


def merge(spec: SearchSpec, results: Sequence[SearchResult]) -> SearchResult:
    """The shards' rankings as one: the best `top` of all, counts and refusals added up."""
    ranked = sorted((entry for result in results for entry in result.ranked), key=Ranked.key)
    rejected: Counter = Counter()
    examples: dict[str, tuple[Strategy, str]] = {}
    counts = dict.fromkeys(COUNTS, 0)
    for result in results:
        rejected.update(result.rejected)
        for reason, (strategy, line) in result.examples.items():
            _note(examples, reason, strategy, line)
        for key, value in result.counts.items():
            counts[key] = counts.get(key, 0) + value
    balanced = sorted((entry for result in results for entry in result.balanced), key=Ranked.key)
    seconds = max((r.seconds for r in results), default=0.0)
    merged = SearchResult(spec, ranked[: spec.search.top], rejected, counts, seconds, balanced)
    left = [r.unexamined_bound_s for r in results if r.unexamined_bound_s is not None]
    merged.unexamined_bound_s = min(left, default=None)
    if merged.unexamined_bound_s is not None:
        merged.proven = sum(1 for entry in merged.ranked if entry.seconds < merged.unexamined_bound_s)
    merged.clock_stopped = any(result.clock_stopped for result in results)
    merged.examples = examples
    return merged


def exhaustive(spec: SearchSpec) -> SearchResult:
    """Every valid strategy balanced and timed, no bound used: what the search must equal (tests)."""
    started = time.perf_counter()
    ranked: list[Ranked] = []
    rejected: Counter = Counter()
    examples: dict[str, tuple[Strategy, str]] = {}
    counts = dict.fromkeys(COUNTS, 0)
    for point in enumerate_strategies(spec):
        counts["enumerated"] += 1
        if isinstance(point, Refusal):
            rejected[point.reason] += 1
            _note(examples, point.reason, point.strategy, point.message)
            continue
        run = validate(spec, point)
        if isinstance(run, Refusal):
            rejected[run.reason] += 1
            _note(examples, run.reason, run.strategy, run.message)
            continue
        counts["valid"] += 1
        counts["balanced"] += 1
        entry = evaluate(spec, point, run)
        if isinstance(entry, Refusal):
            rejected[entry.reason] += 1
            _note(examples, entry.reason, entry.strategy, entry.message)
        else:
            ranked.append(entry)
    ranked.sort(key=Ranked.key)
    result = SearchResult(spec, ranked[: spec.search.top], rejected, counts, time.perf_counter() - started, ranked)
    result.examples = examples
    return result


__all__ = [
    "Ranked",
    "SearchResult",
    "evaluate",
    "exhaustive",
    "merge",
    "search",
    "search_points",
    "shard",
]
