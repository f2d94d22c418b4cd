"""The iteration times of many plans of one problem at once, for searches that try many plans.

`schedules.makespan` runs the schedule's ops one by one in Python for one plan. Here the ops are
grouped in waves (an op's wave is one more than its two predecessors' latest), and each wave is
one numpy step over all its ops and all the plans: the same `max(predecessors) + duration` in the
same float64 arithmetic, so each plan's value is exactly `makespan`'s, at a fraction of its cost
(docs/balance.md, the local search).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ppb_core.schedules import op_graph


@lru_cache(maxsize=16)
def _waves(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> tuple[tuple[np.ndarray, ...], ...]:
    """Per wave: the ops' positions, their stage's previous op's, their input's (−1: none, read as
    the zero row at the end) and their cell's index in the flattened [kind][chunk][stage] times;
    then every stage's last op."""
    graph = op_graph(schedule, stages, chunks, micro_batches, group)
    wave = [0] * len(graph)
    last: dict[int, int] = {}
    for i, ((_, _, stage), previous, needed) in enumerate(graph):
        wave[i] = 1 + max((wave[j] for j in (previous, needed) if j >= 0), default=-1)
        last[stage] = i
    by_wave: list[list[int]] = [[] for _ in range(max(wave, default=-1) + 1)]
    for i, w in enumerate(wave):
        by_wave[w].append(i)
    none = len(graph)
    waves = []
    for ops in by_wave:
        position = np.array(ops, dtype=np.int64)
        previous = np.array([graph[i][1] if graph[i][1] >= 0 else none for i in ops], dtype=np.int64)
        needed = np.array([graph[i][2] if graph[i][2] >= 0 else none for i in ops], dtype=np.int64)
        kind, chunk, stage = zip(*(graph[i][0] for i in ops), strict=True)
        cell = (np.array(kind) == "B") * chunks * stages + np.array(chunk) * stages + np.array(stage)
        waves.append((position, previous, needed, cell.astype(np.int64)))
    return tuple(waves), (np.array(sorted(last.values()), dtype=np.int64),)


def makespans(
    schedule: str,
    forward: Sequence[Sequence[Sequence[float]]],
    backward: Sequence[Sequence[Sequence[float]]],
    micro_batches: int,
    group: int | None = None,
) -> list[float]:
    """`schedules.makespan` of each plan, `forward[plan][chunk][stage]` and `backward` alike."""
    if not len(forward):
        return []
    times = np.concatenate(
        [
            np.asarray(forward, dtype=float).reshape(len(forward), -1),
            np.asarray(backward, dtype=float).reshape(len(forward), -1),
        ],
        axis=1,
    ).T.copy()  # [cell, plan], rows contiguous
    chunks, stages = len(forward[0]), len(forward[0][0])
    waves, (last,) = _waves(schedule, stages, chunks, micro_batches, group)
    ends = np.zeros((sum(len(w[0]) for w in waves) + 1, len(forward)))  # the last row stays 0: "no op"
    for position, previous, needed, cell in waves:
        ends[position] = np.maximum(ends[previous], ends[needed]) + times[cell]
    return ends[last].max(axis=0).tolist()
