"""The schedule the balancer times its plans by, one place for every search that runs it.

Most runs: each op waits for its stage's previous op and its input (`schedules`). A torchtitan run's
interleaved schedule instead walks torch's table of time steps in lock step (`pipeline_lockstep`: torch
2.6.0 `PipelineScheduleMulti._step_microbatches`, each step's sends and receives one batch waited for),
which the iteration prices (`timing.iteration`, protocol torch_looped): a plan the op graph finds fast,
its chunks uneven, can be slow there (session 27, docs/balance.md). Both are longest paths through a
graph whose shape the sizes fix, so the program's path rows (T ≥ the cell times a path runs through) hold
for either; here each search gets the one the problem runs (`BalanceInput.lock_step`), transfers free
as ever in the balancer.
"""

from __future__ import annotations

from collections.abc import Sequence

from ppb_core.balance.makespans import makespans as graph_makespans
from ppb_core.balance.problem import BalanceInput
from ppb_core.pipeline_lockstep import lockstep_timeline, step_counts_many, step_longest_path, step_makespans
from ppb_core.schedules import Timeline, critical_counts_many, longest_path, makespan, simulate

Times = Sequence[Sequence[float]]  # [chunk][stage]
Counts = dict[tuple[str, int, int], int]


def timeline(problem: BalanceInput, forward: Times, backward: Times) -> Timeline:
    """Every op's start and end."""
    p = problem
    if p.lock_step:
        free = [[0.0] * p.stages for _ in range(p.chunks)]
        return lockstep_timeline(forward, backward, p.micro_batches, free)
    return simulate(p.schedule_name, forward, backward, p.micro_batches, group=p.group)


def iteration_time(problem: BalanceInput, forward: Times, backward: Times) -> float:
    """The makespan: `timeline(...).makespan`, without the timeline."""
    p = problem
    if p.lock_step:
        return step_longest_path(forward, backward, p.micro_batches)[0]
    return makespan(p.schedule_name, forward, backward, p.micro_batches, p.group)


def path(problem: BalanceInput, forward: Times, backward: Times) -> tuple[float, Counts]:
    """The makespan and how many ops of each (kind, chunk, stage) a longest path runs."""
    p = problem
    if p.lock_step:
        return step_longest_path(forward, backward, p.micro_batches)
    return longest_path(p.schedule_name, forward, backward, p.micro_batches, p.group)


def paths(problem: BalanceInput, weightings: Sequence[tuple[Times, Times]]) -> list[Counts]:
    """`path`'s counts for each (forward, backward) weighting, computed together."""
    p = problem
    if p.lock_step:
        return step_counts_many(weightings, p.micro_batches)
    return critical_counts_many(p.schedule_name, weightings, p.micro_batches, p.group)


def iteration_times(problem: BalanceInput, forward: Sequence[Times], backward: Sequence[Times]) -> list[float]:
    """`iteration_time` of many plans at once, `forward[plan][chunk][stage]`, exactly its values."""
    p = problem
    if p.lock_step:
        return step_makespans(forward, backward, p.micro_batches)
    return graph_makespans(p.schedule_name, forward, backward, p.micro_batches, p.group)
