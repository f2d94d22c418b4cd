"""torch.distributed.pipelining's looped schedules as they run: one time step after another, in lock step.

torchtitan runs its interleaved schedule as `ScheduleInterleaved1F1B` (torch 2.6.0, the release of the
2024-12 benchmark's torch 1963fc8: torch/distributed/pipelining/schedules.py). Every rank computes the same
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
    last = chunks * stages - 1
    grid = looped_steps(stages, chunks, micro_batches)
    orders: list[list[Op]] = [[op for op in row if op is not None] for row in grid]
    starts: list[list[float]] = [[] for _ in range(stages)]
    ends: list[list[float]] = [[] for _ in range(stages)]
    binding: list[list[tuple[int, int] | None]] = [[] for _ in range(stages)]
    clock = [0.0] * stages
    bound: list[tuple[int, int] | None] = [None] * stages  # the op whose end each rank's clock is

    def sends(rank: int, op: Step) -> tuple[int, float] | None:
        """(receiving rank, transfer seconds) of what *op* on *rank* sends, if anything."""
        if op is None:
            return None
        index = op.chunk * stages + rank  # the stage along the model
        if op.kind == "F" and index < last:
            return (rank + 1) % stages, transfer[op.chunk][rank]
        if op.kind == "B" and index > 0:
            before = index - 1
            return (rank - 1) % stages, transfer[before // stages][before % stages]
        return None

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
            sent = sends(rank, op)
            if sent is not None:
                peer, seconds = sent
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
