"""torch.distributed.pipelining's looped schedules as they run: one time step after another, in lock step.

torchtitan runs its interleaved schedule as `ScheduleInterleaved1F1B` (torch/distributed/pipelining/
schedules.py in torch 2.6.0, the release cut 2024-12-12 from main, eleven days before the 2024-12
benchmark's torch 1963fc8). Every rank computes the same
table of time steps, `pipeline_order`, one action or none per step (`_get_1f1b_rank_ops`):

- rank r starts with r empty steps, then its warm-up forwards, (V − 1)·n + 2(P − 1 − r) of them (n the
  micro-batches of a round, `microbatches_per_round` = m // max(1, m // P)), capped at V·m;
- after the last warm-up forward, empty steps up to the time step of its first backward,
  V·P + 2(P − 1 − r) (`post_warmup_ops`);
- then a forward and a backward for each remaining forward, then, for each remaining backward, an
  empty step and the backward ("steps to align with 1f1b happening in other ranks").

A forward's chunk is (k // n) mod V for its k-th op, a backward's V − 1 − ((k − warm-up) // n) mod V,
and each chunk's micro-batches count up: Megatron-LM's interleaved order (`schedules._interleaved`, groups
of P) wherever P divides m, the sizes ppb accepts.

`PipelineScheduleMulti._step_microbatches` then walks the table: at each step the rank runs its action,
then puts into one `batch_isend_irecv` the send of that action's output (or input gradient) and a receive
for each neighbour whose action at the same step sends to it, and waits for the batch (`.wait()`: the
compute stream waits for NCCL). A send completes only while its receiver's matching receive runs, which
the receiver posts after its own action at that step: so a step ends on a rank when it and every
neighbour it exchanges with have ended that step's action, plus the transfer. Where nothing crosses, the
rank goes on at once. A rank that would go ahead of its neighbours by a step waits for them instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ppb_core.schedules import Op, Timeline

Step = Op | None


def looped_steps(stages: int, chunks: int, micro_batches: int) -> list[list[Step]]:
    """Each rank's time steps (module docstring): its op at each step, or None for an empty one."""
    rounds = max(1, micro_batches // stages)
    per_round = micro_batches // rounds
    return [_rank_steps(rank, stages, chunks, micro_batches, per_round) for rank in range(stages)]


def _rank_steps(rank: int, stages: int, chunks: int, micro_batches: int, per_round: int) -> list[Step]:
    """One rank's row of `looped_steps`: the k-th forward and backward take their chunk from k."""
    total = chunks * micro_batches
    warmup = min((chunks - 1) * per_round + 2 * (stages - 1 - rank), total)
    first_backward = chunks * stages + 2 * (stages - 1 - rank)
    seen = {"F": [0] * chunks, "B": [0] * chunks}

    def op(kind: str, chunk: int) -> Op:
        seen[kind][chunk] += 1
        return Op(kind, chunk, seen[kind][chunk] - 1)

    forwards = [op("F", (k // per_round) % chunks) for k in range(total)]
    backwards = [op("B", chunks - 1 - ((k - warmup) // per_round) % chunks) for k in range(warmup, total + warmup)]
    row: list[Step] = [None] * rank + list(forwards[:warmup])
    row += [None] * max(0, first_backward - (warmup + rank))
    for k in range(warmup, total):
        row += [forwards[k], backwards[k - warmup]]
    for k in range(total, total + warmup):
        row += [None, backwards[k - warmup]]
    return row


def lockstep_timeline(
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
    transfer: Sequence[Sequence[float]],
) -> Timeline:
    """The looped schedule's timeline (module docstring); *forward*, *backward*, *transfer* `[chunk][stage]`
    as `pipeline_p2p.simulate_p2p` takes them: a forward's send carries its cell's output, a backward's the
    gradient of its input, the size of the cell before it along the model."""
    chunks, stages = len(forward), len(forward[0])
    grid = looped_steps(stages, chunks, micro_batches)
    orders: list[list[Op]] = [[op for op in row if op is not None] for row in grid]
    starts: list[list[float]] = [[] for _ in range(stages)]
    ends: list[list[float]] = [[] for _ in range(stages)]
    binding: list[list[tuple[int, int] | None]] = [[] for _ in range(stages)]
    clock = [0.0] * stages
    bound: list[tuple[int, int] | None] = [None] * stages  # the op whose end each rank's clock is

    for step in range(max(len(row) for row in grid)):
        ops = [row[step] if step < len(row) else None for row in grid]
        posted = list(clock)  # when each rank posts this step's batch: after its action
        poster = list(bound)
        for rank, op in enumerate(ops):
            if op is None:
                continue
            seconds = (forward if op.kind == "F" else backward)[op.chunk][rank]
            starts[rank].append(clock[rank])
            binding[rank].append(bound[rank])
            posted[rank] = clock[rank] + seconds
            ends[rank].append(posted[rank])
            poster[rank] = (rank, len(ends[rank]) - 1)
        exchanges: list[list[tuple[int, float]]] = [[] for _ in range(stages)]
        for rank, op in enumerate(ops):
            sent = _sent(op, rank, stages, chunks)
            if sent is not None:
                peer, (chunk, stage) = sent
                seconds = transfer[chunk][stage]
                exchanges[rank].append((peer, seconds))
                exchanges[peer].append((rank, seconds))
        for rank in range(stages):
            clock[rank], bound[rank] = posted[rank], poster[rank]
            for peer, seconds in exchanges[rank]:
                meet = max(posted[rank], posted[peer])
                if meet + seconds > clock[rank]:
                    clock[rank] = meet + seconds
                    bound[rank] = poster[peer] if posted[peer] > posted[rank] else poster[rank]
    return Timeline(orders=orders, starts=starts, ends=ends, binding=binding)


def _sent(op: Step, rank: int, stages: int, chunks: int) -> tuple[int, tuple[int, int]] | None:
    """(receiving rank, the (chunk, stage) cell whose output size it carries) of what *op* on *rank*
    sends, if anything: a forward its cell's output, a backward the gradient of its input, the size of
    the cell before it along the model."""
    if op is None:
        return None
    index = op.chunk * stages + rank  # the stage along the model
    if op.kind == "F" and index < chunks * stages - 1:
        return (rank + 1) % stages, (op.chunk, rank)
    if op.kind == "B" and index > 0:
        before = index - 1
        return (rank - 1) % stages, (before // stages, before % stages)
    return None


# -- the same steps with free transfers, as the balancer times its plans ---------------------------------


@dataclass(frozen=True)
class StepGraph:
    """`looped_steps` as a graph over (step, rank), transfers free (the balancer's plans carry no
    transfer times): a rank's step ends at the latest end, at the step before, of the rank itself and of
    every neighbour it exchanged with there, plus its action's time (0 for an empty step), as
    `lockstep_timeline` runs it. Each step is one level: every rank's end at a step reads only the step
    before, so many plans are timed a step at a time (`step_ends_many`).

    `cells[step][rank]`: the action's cell, numbered as `schedules` numbers them (kind·V·P + chunk·P +
    stage), `empty` (2·V·P) for an empty step; `feeds[step][rank]`: the three ranks whose ends at the step
    before it waits for, itself first (repeated to fill)."""

    stages: int
    chunks: int
    cells: tuple[tuple[int, ...], ...]
    feeds: tuple[tuple[tuple[int, int, int], ...], ...]

    @property
    def empty(self) -> int:
        return 2 * self.chunks * self.stages

    def key(self, cell: int) -> tuple[str, int, int]:
        """(kind, chunk, stage) of a cell number."""
        per_kind = self.chunks * self.stages
        return ("F" if cell < per_kind else "B", (cell % per_kind) // self.stages, cell % self.stages)

    @property
    def cell_array(self) -> np.ndarray:
        return np.array(self.cells, dtype=np.intp)

    @property
    def feed_array(self) -> np.ndarray:
        return np.array(self.feeds, dtype=np.intp)


@lru_cache(maxsize=32)
def step_graph(stages: int, chunks: int, micro_batches: int) -> StepGraph:
    """The lock-step graph of the looped schedule at these sizes (`StepGraph`), built once."""
    grid = looped_steps(stages, chunks, micro_batches)
    steps = max(len(row) for row in grid)
    empty = 2 * chunks * stages
    cells: list[tuple[int, ...]] = []
    feeds: list[tuple[tuple[int, int, int], ...]] = [tuple((rank, rank, rank) for rank in range(stages))]
    for step in range(steps):
        row = [empty] * stages
        peers: list[list[int]] = [[] for _ in range(stages)]
        for rank, ops in enumerate(grid):
            op = ops[step] if step < len(ops) else None
            if op is None:
                continue
            row[rank] = (0 if op.kind == "F" else chunks * stages) + op.chunk * stages + rank
            sent = _sent(op, rank, stages, chunks)
            if sent is not None and sent[0] != rank:
                peers[rank].append(sent[0])
                peers[sent[0]].append(rank)
        cells.append(tuple(row))
        waits = []
        for rank in range(stages):
            distinct = list(dict.fromkeys(peers[rank]))  # its two neighbours at most
            waits.append(tuple([rank, *distinct, *[rank] * (2 - len(distinct))][:3]))
        feeds.append(tuple(waits))  # read at the next step
    return StepGraph(stages, chunks, tuple(cells), tuple(feeds[:steps]))


def _cell_times(forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]]) -> list[float]:
    """Cell times in `StepGraph` numbering, then 0 for an empty step."""
    return [t for row in forward for t in row] + [t for row in backward for t in row] + [0.0]


def step_ends(
    forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]], micro_batches: int
) -> list[list[float]]:
    """Every (step, rank)'s end for one plan's cell times `[chunk][stage]`: the same values
    `lockstep_timeline` gives with free transfers (max of the waits, plus the action)."""
    graph = step_graph(len(forward[0]), len(forward), micro_batches)
    times = _cell_times(forward, backward)
    previous = [0.0] * graph.stages
    rows = []
    for cells, feeds in zip(graph.cells, graph.feeds, strict=True):
        row = []
        for cell, (a, b, c) in zip(cells, feeds, strict=True):
            start = previous[a] if previous[a] >= previous[b] else previous[b]
            start = start if start >= previous[c] else previous[c]
            row.append(start + times[cell])
        rows.append(row)
        previous = row
    return rows


def step_longest_path(
    forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]], micro_batches: int
) -> tuple[float, dict[tuple[str, int, int], int]]:
    """The makespan and how many ops of each (kind, chunk, stage) a longest path runs: walked back from
    the rank ending last (the first among equals), at each step to the wait that ended latest (the rank
    itself among equals)."""
    graph = step_graph(len(forward[0]), len(forward), micro_batches)
    rows = step_ends(forward, backward, micro_batches)
    last = rows[-1]
    rank = max(range(graph.stages), key=last.__getitem__)
    counts: dict[tuple[str, int, int], int] = {}
    for step in range(len(rows) - 1, -1, -1):
        cell = graph.cells[step][rank]
        if cell != graph.empty:
            key = graph.key(cell)
            counts[key] = counts.get(key, 0) + 1
        if step:
            before = rows[step - 1]
            _, b, c = graph.feeds[step][rank]
            best = rank
            for peer in (b, c):
                if before[peer] > before[best]:
                    best = peer
            rank = best
    return max(last), counts


def step_ends_many(
    forward: Sequence[Sequence[Sequence[float]]], backward: Sequence[Sequence[Sequence[float]]], micro_batches: int
) -> np.ndarray:
    """`step_ends` of many plans at once, `forward[plan][chunk][stage]`: [step, rank, plan], a step at a
    time in numpy (the same max and sum in float64, so each plan's values are `step_ends`')."""
    plans = len(forward)
    chunks, stages = len(forward[0]), len(forward[0][0])
    graph = step_graph(stages, chunks, micro_batches)
    times = np.concatenate(
        [
            np.asarray(forward, dtype=float).reshape(plans, -1),
            np.asarray(backward, dtype=float).reshape(plans, -1),
            np.zeros((plans, 1)),
        ],
        axis=1,
    ).T.copy()  # [cell, plan]
    cells, feeds = graph.cell_array, graph.feed_array
    ends = np.zeros((len(cells), stages, plans))
    previous = np.zeros((stages, plans))
    for step in range(len(cells)):
        wait = feeds[step]
        start = np.maximum(np.maximum(previous[wait[:, 0]], previous[wait[:, 1]]), previous[wait[:, 2]])
        ends[step] = start + times[cells[step]]
        previous = ends[step]
    return ends


def step_makespans(
    forward: Sequence[Sequence[Sequence[float]]], backward: Sequence[Sequence[Sequence[float]]], micro_batches: int
) -> list[float]:
    """The makespan of each plan (`step_ends_many`)."""
    if not len(forward):
        return []
    return step_ends_many(forward, backward, micro_batches)[-1].max(axis=0).tolist()


def step_counts_many(
    weightings: Sequence[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]], micro_batches: int
) -> list[dict[tuple[str, int, int], int]]:
    """`step_longest_path`'s counts for each (forward, backward) weighting, walked back for all at once."""
    if not weightings:
        return []
    chunks, stages = len(weightings[0][0]), len(weightings[0][0][0])
    graph = step_graph(stages, chunks, micro_batches)
    ends = step_ends_many([f for f, _ in weightings], [b for _, b in weightings], micro_batches)
    cells, feeds = graph.cell_array, graph.feed_array
    width = len(weightings)
    columns = np.arange(width)
    rank = np.argmax(ends[-1], axis=0)  # the first among equals
    counts = np.zeros((graph.empty + 1, width), dtype=np.int64)
    for step in range(len(cells) - 1, -1, -1):
        counts[cells[step][rank], columns] += 1
        if step:
            waits = feeds[step][rank]  # [plan, 3], the rank itself first
            latest = np.argmax(ends[step - 1][waits, columns[:, None]], axis=1)  # the first among equals
            rank = waits[columns, latest]
    return [
        {graph.key(cell): int(counts[cell, column]) for cell in np.flatnonzero(counts[: graph.empty, column])}
        for column in columns
    ]
