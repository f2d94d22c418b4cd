"""Pipeline schedules as the frameworks run them: op order per stage, micro-batches in flight, iteration time.

A schedule is, for each pipeline stage, the order in which it runs the forward (F) and
backward (B) of every (chunk, micro-batch). The orders here are those of the real
implementations:

* ``1f1b`` (Megatron-LM / PipeDream-flush, V = 1): stage s runs min(P − s − 1, m) warm-up
  forwards, then forward-then-backward pairs, then the remaining backwards.
* ``interleaved`` (Megatron-LM virtual pipeline, V > 1): forwards walk micro-batches in groups
  of g (P unless `--microbatch-group-size-per-virtual-pipeline-stage` says otherwise), chunk 0
  first; backwards walk the same groups with the chunks reversed; stage s runs
  2(P − s − 1) + (V − 1)·g warm-up forwards (clamped to m·V), then forward-then-backward pairs
  (megatron/core/pipeline_parallel/schedules.py `get_schedule_table`, `get_pp_rank_microbatches`,
  from 4295be1a6c "tunable schedule with overlapping", core_r0.10.0; d98e8a64 the same).
  It needs m ≥ P, and deadlocks (as Megatron-LM would hang) when the last group of
  micro-batches is too short; such sizes are refused. A group g is refused as Megatron refuses it
  (`forward_backward_pipelining_with_interleaving`): g outside [P, m], or a last group of
  0 < m mod g < P micro-batches.
* ``gpipe``: every forward (chunk by chunk), then every backward.
* ``dualpipev`` (DeepSeek DualPipeV, V = 2 in a V shape: chunk 0 runs stages 0 → P−1, chunk 1
  runs P−1 → 0): the eight steps of DeepSeek's implementation (deepseek-ai/DualPipe,
  dualpipe/dualpipev.py), with each overlapped forward-and-backward pair run forward first and the
  weight-gradient step folded into its backward (descriptions carry no split of the backward).
  It needs m ≥ 2P.

Micro-batches in flight follow from the order alone: on a stage, a forward of chunk v adds one
micro-batch of chunk-v activations and its backward frees it. Times follow from the order and
the dependencies (a forward needs the previous stage's forward of the same chunk and
micro-batch, a backward the next stage's backward) by running every op as early as possible,
which is the longest path through the schedule's graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter

import numpy as np

from ppb_core.dominance import undominated
from ppb_core.host_copies import HostCopies, Streams

SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved", "gpipe", "dualpipev")


@dataclass(frozen=True)
class Op:
    """One forward ("F") or backward ("B") of one chunk's layers for one micro-batch on one stage."""

    kind: str
    chunk: int
    micro_batch: int


def canonical(schedule: str, chunks: int) -> str:
    """The schedule that runs: Megatron-LM runs 1F1B interleaved whenever V > 1 and plain 1F1B at V = 1."""
    name = schedule.lower()
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if name == "1f1b" and chunks > 1:
        return "interleaved"
    if name == "interleaved" and chunks == 1:
        return "1f1b"
    return name


def group_of(name: str, stages: int, group: int | None) -> int | None:
    """The interleaved schedule's micro-batch group as the cached orders take it: None for Megatron's
    default (P, model_parallel_config.py `__post_init__`) and for the schedules that have none."""
    return None if name != "interleaved" or group is None or group == stages else group


def check(schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None) -> str:
    """The canonical schedule name, or ValueError when the schedule cannot run these sizes.

    *group*: the interleaved schedule's micro-batches a chunk runs at a time (Megatron's
    `microbatch_group_size_per_vp_stage`; None: P)."""
    if stages < 1 or chunks < 1 or micro_batches < 1:
        raise ValueError(f"stages, chunks and micro-batches must be positive, got {stages}, {chunks}, {micro_batches}")
    name = canonical(schedule, chunks)
    if name == "interleaved" and micro_batches < stages:
        raise ValueError(
            f"the interleaved schedule needs at least as many micro-batches as stages ({micro_batches} < {stages})"
        )
    if group is not None and name == "interleaved":
        # forward_backward_pipelining_with_interleaving (d98e8a64): the range's ValueError, the remainder's
        # RuntimeError ("introduces dependency bubbles")
        if not stages <= group <= micro_batches:
            raise ValueError(
                f"a micro-batch group of {group} is outside Megatron's range "
                f"[pp {stages}, micro-batches {micro_batches}]"
            )
        if 0 < micro_batches % group < stages:
            raise ValueError(
                f"{micro_batches} micro-batches in groups of {group} leave a last group of {micro_batches % group}, "
                f"fewer than pp {stages}: Megatron refuses it"
            )
    group = group_of(name, stages, group)
    if name == "interleaved" and micro_batches % stages and _deadlocks(name, stages, chunks, micro_batches, group):
        raise ValueError(
            f"Megatron-LM's interleaved schedule deadlocks with {micro_batches} micro-batches on {stages} "
            f"stages (its last group of {micro_batches % stages} is shorter than the pipeline)"
        )
    if name == "dualpipev":
        if chunks != 2:
            raise ValueError(f"DualPipeV runs exactly 2 chunks per stage, got {chunks}")
        if micro_batches < 2 * stages:
            raise ValueError(
                f"DualPipeV needs at least twice as many micro-batches as stages ({micro_batches} < {2 * stages})"
            )
    return name


def _one_f_one_b(stages: int, micro_batches: int, extra_warmup: int = 0) -> list[list[Op]]:
    """Every stage's 1F1B order (the ops built once and shared: they are immutable); *extra_warmup*
    more warm-up forwards where Megatron's combined 1F1B runs them (`combined_steps`)."""
    forwards = [Op("F", 0, i) for i in range(micro_batches)]
    backwards = [Op("B", 0, i) for i in range(micro_batches)]
    orders = []
    for stage in range(stages):
        warmup = min(stages - stage - 1 + extra_warmup, micro_batches)
        order = forwards[:warmup]
        for i in range(micro_batches - warmup):
            order += [forwards[warmup + i], backwards[i]]
        order += backwards[micro_batches - warmup :]
        orders.append(order)
    return orders


def _interleaved_table(chunks: int, micro_batches: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each forward slot: groups of *group* micro-batches (the last the rest),
    chunk by chunk (schedules.py `get_schedule_table`)."""
    table: list[tuple[int, int]] = []
    for first in range(0, micro_batches, group):
        members = range(first, min(first + group, micro_batches))
        table += [(mb, chunk) for chunk in range(chunks) for mb in members]
    return table


def _interleaved(
    stages: int, chunks: int, micro_batches: int, extra_warmup: int = 0, group: int | None = None
) -> list[list[Op]]:
    """Every stage's interleaved order: the same forward and backward slots (built once, ops are immutable),
    each stage warming up with fewer forwards the later it sits: 2(P − s − 1) + (V − 1)·g
    (`get_pp_rank_microbatches`); a backward takes its chunk's oldest micro-batch (`input_tensors[chunk].pop(0)`)."""
    size = stages if group is None else group
    table = _interleaved_table(chunks, micro_batches, size)
    total = len(table)
    forwards = [Op("F", chunk, mb) for mb, chunk in table]
    backwards = [Op("B", chunks - 1 - chunk, mb) for mb, chunk in table]
    orders = []
    for stage in range(stages):
        warmup = min(2 * (stages - stage - 1) + (chunks - 1) * size + extra_warmup, total)
        order = forwards[:warmup]
        for i in range(total - warmup):
            order += [forwards[warmup + i], backwards[i]]
        order += backwards[total - warmup :]
        orders.append(order)
    return orders


def _gpipe(chunks: int, micro_batches: int) -> list[Op]:
    forwards = [Op("F", chunk, mb) for chunk in range(chunks) for mb in range(micro_batches)]
    backwards = [Op("B", chunk, mb) for chunk in reversed(range(chunks)) for mb in range(micro_batches)]
    return forwards + backwards


def _dualpipev(stages: int, micro_batches: int) -> list[list[Op]]:
    """Every rank's DualPipeV order (the ops built once and shared between the ranks: they are immutable)."""
    made = {(kind, chunk): [Op(kind, chunk, i) for i in range(micro_batches)] for kind in "FB" for chunk in (0, 1)}
    return [_dualpipev_rank(stages, micro_batches, rank, made) for rank in range(stages)]


def _dualpipev_rank(stages: int, micro_batches: int, rank: int, made: dict[tuple[str, int], list[Op]]) -> list[Op]:
    """DualPipeV's eight steps on one rank; W (weight gradients) folded into B, overlapped pairs run F first."""
    count = dict.fromkeys(made, 0)
    order: list[Op] = []

    def run(kind: str, chunk: int) -> None:
        key = (kind, chunk)
        order.append(made[key][count[key]])
        count[key] += 1

    ranks = stages
    for _ in range((ranks - rank - 1) * 2):  # step 1: nF0
        run("F", 0)
    for _ in range(rank + 1):  # step 2: nF0F1
        run("F", 0)
        run("F", 1)
    for _ in range(ranks - rank - 1):  # step 3: nB1W1F1
        run("B", 1)
        run("F", 1)
    for _ in range(micro_batches - ranks * 2 + rank + 1):  # step 4: nF0B1F1B0
        run("F", 0)
        run("B", 1)
        run("F", 1)
        run("B", 0)
    for _ in range(ranks - rank - 1):  # step 5: nB1F1B0
        run("B", 1)
        run("F", 1)
        run("B", 0)
    for _ in range(rank + 1):  # step 6: nB1B0
        run("B", 1)
        run("B", 0)
    for _ in range(ranks - rank - 1):  # step 7: nWB0
        run("B", 0)
    return order


@lru_cache(maxsize=64)
def _orders(
    name: str, stages: int, chunks: int, micro_batches: int, extra_warmup: int = 0, group: int | None = None
) -> tuple[tuple[Op, ...], ...]:
    """Every stage's order, once per size (a balance asks for them several times; at m = 960 and P = 16
    building them costs a second)."""
    if name == "1f1b":
        orders = _one_f_one_b(stages, micro_batches, extra_warmup)
    elif name == "interleaved":
        orders = _interleaved(stages, chunks, micro_batches, extra_warmup, group)
    elif name == "gpipe":
        orders = [_gpipe(chunks, micro_batches)] * stages
    else:
        orders = _dualpipev(stages, micro_batches)
    return tuple(tuple(order) for order in orders)


def stage_orders(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None, combined: bool = False
) -> list[list[Op]]:
    """Every stage's ops, in the order the schedule runs them (*combined*: as Megatron-Core's combined 1F1B
    runs them, one more warm-up forward, `combined_steps`)."""
    name = check(schedule, stages, chunks, micro_batches, group)
    extra = 1 if combined else 0
    return [list(order) for order in _orders(name, stages, chunks, micro_batches, extra, group_of(name, stages, group))]


# ---------------------------------------------------------------------------------------------
# Micro-batches in flight


def in_flight_vectors(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> list[list[tuple[int, ...]]]:
    """Per stage, the Pareto-maximal vectors (micro-batches held per chunk) over the iteration.

    A stage's activation memory peaks at one of these vectors whatever each chunk keeps per
    micro-batch, so charging every one of them is exact where one per-chunk count is not.
    """
    name = check(schedule, stages, chunks, micro_batches, group)
    return [
        list(stage) for stage in _in_flight_vectors(name, stages, chunks, micro_batches, group_of(name, stages, group))
    ]


@lru_cache(maxsize=64)
def _in_flight_vectors(
    name: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    vectors: list[tuple[tuple[int, ...], ...]] = []
    for order in _orders(name, stages, chunks, micro_batches, 0, group):
        held = [0] * chunks
        seen: set[tuple[int, ...]] = set()
        for op in order:
            if op.kind == "F":
                held[op.chunk] += 1
                seen.add(tuple(held))
            else:
                held[op.chunk] -= 1
        held_vectors = sorted(seen)
        maximal = [held_vectors[i] for i in undominated([[-n for n in v] for v in held_vectors])]
        vectors.append(tuple(sorted(maximal, reverse=True)))
    return tuple(vectors)


def backward_vectors(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> list[list[tuple[tuple[int, ...], int]]]:
    """Per stage, the micro-batches held per chunk as each backward starts (its own micro-batch still
    held) and that backward's chunk: for each chunk, the Pareto-maximal such vectors. What is alive
    while one chunk's backward runs, where a chunk's working set matters more than the peak vector's."""
    name = check(schedule, stages, chunks, micro_batches, group)
    return [
        list(stage) for stage in _backward_vectors(name, stages, chunks, micro_batches, group_of(name, stages, group))
    ]


@lru_cache(maxsize=64)
def _backward_vectors(
    name: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> tuple[tuple[tuple[tuple[int, ...], int], ...], ...]:
    found: list[tuple[tuple[tuple[int, ...], int], ...]] = []
    for order in _orders(name, stages, chunks, micro_batches, 0, group):
        held = [0] * chunks
        seen: dict[int, set[tuple[int, ...]]] = {}
        for op in order:
            if op.kind == "F":
                held[op.chunk] += 1
            else:
                seen.setdefault(op.chunk, set()).add(tuple(held))
                held[op.chunk] -= 1
        stage: list[tuple[tuple[int, ...], int]] = []
        for chunk in sorted(seen):
            vectors = sorted(seen[chunk])
            maximal = [vectors[i] for i in undominated([[-n for n in v] for v in vectors])]
            stage += [(vector, chunk) for vector in sorted(maximal, reverse=True)]
        found.append(tuple(stage))
    return tuple(found)


def combined_steps(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> list[list[tuple[tuple[int, ...], int, int]]]:
    """Per stage, the steps of Megatron-Core's combined 1F1B schedule (`--overlap-moe-expert-parallel-comm`):
    (micro-batches held per chunk as the step starts, the chunk of its forward, the chunk of its backward).

    The order is the schedule's own with one more warm-up forward
    (megatron/core/pipeline_parallel/schedules.py `get_pp_rank_microbatches`: "we schedule one extra
    micro-batch forward step before the 1f1b stages"; without pipelining,
    combined_1f1b.py `combined_1f1b_schedule_for_no_pipelining` runs the first forward alone); each
    steady forward-and-backward pair then runs as one step, layer beside layer
    (`combined_forward_backward_step`). Before and after the steps the orders are the schedule's.
    """
    name = check(schedule, stages, chunks, micro_batches, group)
    if name not in ("1f1b", "interleaved") or (name == "1f1b" and stages > 1):
        raise ValueError(
            f"Megatron-Core runs the combined 1F1B schedule only interleaved or without pipelining, not {name}"
        )
    steps: list[list[tuple[tuple[int, ...], int, int]]] = []
    for order in _orders(name, stages, chunks, micro_batches, 1, group_of(name, stages, group)):
        held = [0] * chunks
        found = []
        for index, op in enumerate(order):
            if _pairs(order, index):
                found.append((tuple(held), op.chunk, order[index + 1].chunk))
            held[op.chunk] += 1 if op.kind == "F" else -1
        steps.append(found)
    return steps


def _pairs(order: Sequence[Op], index: int) -> bool:
    """Whether the forward at *index* runs beside the backward after it as one combined step: a backward
    of another micro-batch (or chunk). A micro-batch's own backward never runs beside its forward: without
    pipelining the first forward runs alone and the last backward too (combined_1f1b.py
    `combined_1f1b_schedule_for_no_pipelining`), so a lone micro-batch's are apart."""
    if index + 1 >= len(order):
        return False
    op, following = order[index], order[index + 1]
    own = (op.chunk, op.micro_batch) == (following.chunk, following.micro_batch)
    return op.kind == "F" and following.kind == "B" and not own


def combined_pairs(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> list[list[tuple[int, int]]]:
    """Per stage, the (forward chunk, backward chunk) of each step of Megatron-Core's combined 1F1B that
    runs a forward beside a backward (`_steady_backwards`), in order."""
    name = check(schedule, stages, chunks, micro_batches, group)
    return [
        [(order[i - 1].chunk, order[i].chunk) for i in sorted(_steady_backwards(order, stages > 1))]
        for order in _orders(name, stages, chunks, micro_batches, 1, group_of(name, stages, group))
    ]


def combined_in_flight_vectors(
    stages: int, chunks: int, micro_batches: int, schedule: str, group: int | None = None
) -> list[list[tuple[int, ...]]]:
    """Per stage, the Pareto-maximal per-chunk counts the combined 1F1B schedule holds between its steps
    (after each warm-up forward and as each step starts; within a step see `combined_steps`)."""
    name = check(schedule, stages, chunks, micro_batches, group)
    vectors: list[list[tuple[int, ...]]] = []
    for order, steps in zip(
        _orders(name, stages, chunks, micro_batches, 1, group_of(name, stages, group)),
        combined_steps(schedule, stages, chunks, micro_batches, group),
        strict=True,
    ):
        held = [0] * chunks
        seen = {step[0] for step in steps}
        for index, op in enumerate(order):
            in_step = _pairs(order, index)
            held[op.chunk] += 1 if op.kind == "F" else -1
            if not in_step:  # a step's forward runs beside its backward (`combined_steps`)
                seen.add(tuple(held))
        held_vectors = sorted(seen)
        maximal = [held_vectors[i] for i in undominated([[-n for n in v] for v in held_vectors])]
        vectors.append(sorted(maximal, reverse=True))
    return vectors


def micro_batches_in_flight(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> list[list[int]]:
    """[chunk][stage]: micro-batches of each chunk a stage holds when it holds the most micro-batches.

    With the same activation per micro-batch in every chunk this is the stage's peak exactly.
    Where chunks differ, `in_flight_vectors` gives every candidate peak (the balancer uses it).
    At the peak count the earliest vector in the schedule is taken: for 1F1B interleaved that
    is the first forward of the steady state, where chunk 0 holds the most.
    """
    result = [[0] * stages for _ in range(chunks)]
    name = check(schedule, stages, chunks, micro_batches, group)
    for stage, order in enumerate(_orders(name, stages, chunks, micro_batches, 0, group_of(name, stages, group))):
        held = [0] * chunks
        best: list[int] | None = None
        for op in order:
            held[op.chunk] += 1 if op.kind == "F" else -1
            if op.kind == "F" and (best is None or sum(held) > sum(best)):
                best = list(held)
        for chunk in range(chunks):
            result[chunk][stage] = best[chunk] if best else 0
    return result


# ---------------------------------------------------------------------------------------------
# Time


@dataclass(frozen=True)
class Timeline:
    """Start and end of every op, stage by stage, in schedule order; `makespan` is the iteration time.

    `binding[stage][i]` is the (stage, index) of the op whose end op i started at (its stage's
    previous op or its input), or None for an op that started at 0: following it back from the
    last op to end walks the critical path.
    """

    orders: Sequence[Sequence[Op]]
    starts: list[list[float]]
    ends: list[list[float]]
    binding: list[list[tuple[int, int] | None]]

    @property
    def makespan(self) -> float:
        return max((ends[-1] for ends in self.ends if ends), default=0.0)

    def busy(self, stage: int) -> float:
        return sum(e - s for s, e in zip(self.starts[stage], self.ends[stage], strict=True))

    def critical_path(self) -> list[tuple[int, int]]:
        """(stage, index) of the ops along a longest path, first to last."""
        stage = max(range(len(self.ends)), key=lambda s: self.ends[s][-1] if self.ends[s] else 0.0)
        here: tuple[int, int] | None = (stage, len(self.ends[stage]) - 1)
        path: list[tuple[int, int]] = []
        while here is not None:
            path.append(here)
            here = self.binding[here[0]][here[1]]
        return path[::-1]

    def path_counts(self) -> dict[tuple[str, int, int], int]:
        """How many forwards and backwards of each (kind, chunk, stage) the critical path runs."""
        counts: dict[tuple[str, int, int], int] = {}
        for stage, index in self.critical_path():
            op = self.orders[stage][index]
            key = (op.kind, op.chunk, stage)
            counts[key] = counts.get(key, 0) + 1
        return counts


def _position(name: str, stages: int, chunk: int, stage: int) -> int:
    """Where a (chunk, stage) cell sits along the model's layers."""
    if name == "dualpipev":
        return stage if chunk == 0 else 2 * stages - 1 - stage
    return chunk * stages + stage


def cell_order(schedule: str, stages: int, chunks: int) -> list[tuple[int, int]]:
    """The (chunk, stage) cells in the order the model's layers run through them."""
    name = canonical(schedule, chunks)
    cells = [(c, s) for c in range(chunks) for s in range(stages)]
    return sorted(cells, key=lambda cell: _position(name, stages, *cell))


@lru_cache(maxsize=64)
def _structure(
    name: str, stages: int, chunks: int, micro_batches: int, extra_warmup: int = 0, group: int | None = None
) -> tuple:
    """The ops in an order that respects every dependency, with each op's input; None if it deadlocks.

    The stages are visited in turn, each running as many of its ops as have their input, until every op
    has run (or none can: a deadlock). Ops are numbered ((kind·V + chunk)·P + stage)·m + micro-batch."""
    orders = _orders(name, stages, chunks, micro_batches, extra_warmup, group)
    m = micro_batches
    cell_at = {_position(name, stages, c, s): (c, s) for c in range(chunks) for s in range(stages)}
    last = stages * chunks - 1

    def number(kind: int, chunk: int, stage: int) -> int:
        return ((kind * chunks + chunk) * stages + stage) * m

    # per stage, each op's own number and its input's (-1 for none)
    own: list[list[int]] = []
    needs: list[list[int]] = []
    for stage, order in enumerate(orders):
        bases = {}
        for kind, k in (("F", 0), ("B", 1)):
            for chunk in range(chunks):
                position = _position(name, stages, chunk, stage)
                if kind == "F":
                    need = -1 if position == 0 else number(0, *cell_at[position - 1])
                else:
                    need = number(0, chunk, stage) if position == last else number(1, *cell_at[position + 1])
                bases[(kind, chunk)] = (number(k, chunk, stage), need)
        own.append([bases[(op.kind, op.chunk)][0] + op.micro_batch for op in order])
        needs.append([-1 if (need := bases[(op.kind, op.chunk)][1]) < 0 else need + op.micro_batch for op in order])
    placed: list[tuple[int, int] | None] = [None] * (2 * chunks * stages * m)
    topo: list[tuple[int, int, tuple[int, int] | None]] = []
    cursor = [0] * stages
    remaining = sum(len(order) for order in orders)
    while remaining:
        progressed = False
        for stage in range(stages):
            here, size, ops, inputs = cursor[stage], len(orders[stage]), own[stage], needs[stage]
            start = here
            while here < size:
                need = inputs[here]
                where = None
                if need >= 0:
                    where = placed[need]
                    if where is None:
                        break
                placed[ops[here]] = (stage, here)
                topo.append((stage, here, where))
                here += 1
            if here > start:
                remaining -= here - start
                progressed = True
                cursor[stage] = here
        if not progressed:
            return orders, None
    return orders, topo


def _deadlocks(name: str, stages: int, chunks: int, micro_batches: int, group: int | None = None) -> bool:
    return _structure(name, stages, chunks, micro_batches, 0, group)[1] is None


def simulate(
    schedule: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
    transfer: Sequence[Sequence[float]] | None = None,
    blocking: bool = True,
    combined: Sequence[Sequence[Sequence[float]]] | None = None,
    group: int | None = None,
    host: HostCopies | None = None,
) -> Timeline:
    """Run the schedule with per-cell times `forward[chunk][stage]`, `backward[chunk][stage]`.

    Each op starts when its stage has finished the previous op and its input is ready: the
    forward of the cell before it along the model for the same micro-batch, or the backward of
    the cell after it (the last cell's backward waits for its own forward). The cell times
    include any head or tail the cell runs.

    *transfer* `[chunk][stage]` is the time a cell's output takes to reach the next cell along
    the model (its activations after a forward; the gradient coming back after a backward has
    the same size). None: communication is free. With *blocking* the sender waits until its
    send completes (Megatron-LM's 1F1B, whose sends and receives are synchronous), so the op
    lasts that much longer; otherwise the send runs in the background and only the receiver
    waits for it (interleaved 1F1B with overlapped P2P, torch.distributed.pipelining's isend).
    A transfer between two cells of one stage (DualPipeV's turn) costs nothing.

    *combined* `[forward chunk][backward chunk][stage]`: Megatron-Core's combined 1F1B
    (`--overlap-moe-expert-parallel-comm`, `combined_steps`): one more warm-up forward, and each steady
    forward-and-backward pair runs as one step, the backward that much shorter than alone (the pair's
    overlap, `ppb_core.timing.combined`). The step's backward starts when its forward ends here (in
    Megatron both wait for their inputs at the step's start).

    *group*: the interleaved schedule's micro-batch group (`check`).

    *host*: Megatron's fine-grained activation offloading, each stage's device-to-host stream run beside
    the ops (`ppb_core.host_copies`): a backward waits for its forward's copies and its first reload.
    """
    chunks, stages = len(forward), len(forward[0])
    name = check(schedule, stages, chunks, micro_batches, group)
    group = group_of(name, stages, group)
    extra = 0 if combined is None else 1
    orders, topo = _structure(name, stages, chunks, micro_batches, extra, group)
    if topo is None:
        raise RuntimeError(f"schedule {name} deadlocks at P={stages}, V={chunks}, m={micro_batches}")
    last = stages * chunks - 1
    cell_at = {_position(name, stages, c, s): (c, s) for c in range(chunks) for s in range(stages)}

    # What each cell's forward (its activations to the next cell) and backward (the gradient to the
    # previous cell) sends; nothing to a cell of the same stage or past either end.
    send_forward = [[0.0] * stages for _ in range(chunks)]
    send_backward = [[0.0] * stages for _ in range(chunks)]
    if transfer is not None:
        for chunk in range(chunks):
            for stage in range(stages):
                position = _position(name, stages, chunk, stage)
                if position < last and cell_at[position + 1][1] != stage:
                    send_forward[chunk][stage] = transfer[chunk][stage]
                if position > 0 and cell_at[position - 1][1] != stage:
                    before = cell_at[position - 1]
                    send_backward[chunk][stage] = transfer[before[0]][before[1]]

    # per op in dependency order (`_flat`): its time and what it sends (cells laid out kind·V·P + chunk·P + stage)
    cells = [t for row in forward for t in row] + [t for row in backward for t in row]
    sends = [t for row in send_forward for t in row] + [t for row in send_backward for t in row]
    durations, previous, needed = _columns(name, stages, chunks, micro_batches, extra, group)
    places, crossing = _places(name, stages, chunks, micro_batches, extra, group)
    times, ready_after = list(durations(cells)), None
    if combined is not None:
        steady = [_steady_backwards(order, stages > 1) for order in orders]
        for i, (stage, index) in enumerate(places):
            if index in steady[stage]:
                times[i] -= combined[orders[stage][index - 1].chunk][orders[stage][index].chunk][stage]
    if blocking:  # the sender waits for its send
        times = [t + sent for t, sent in zip(times, durations(sends), strict=True)]
    else:  # the receiver waits for it when it comes from another stage
        ready_after = durations(sends)
    n = len(previous)
    flat_starts = [0.0] * n
    flat_ends = [0.0] * (n + 1)  # [-1] = 0: "no op"
    flat_binding: list[int] = [-1] * n
    streams = Streams(host, orders) if host is not None else None
    for i, (p, q, duration) in enumerate(zip(previous, needed, times, strict=True)):
        start, by = flat_ends[p], p
        if q >= 0:
            ready = flat_ends[q]
            if ready_after is not None and crossing[i]:
                ready += ready_after[q]
            if ready > start:
                start, by = ready, q
        if streams is not None:  # the stage's own copies: a wait on its stream binds to its previous op
            stage, index = places[i]
            op = orders[stage][index]
            if op.kind == "F":
                streams.forward(stage, op, start)
            elif (copied := streams.ready(stage, op)) > start:
                start, by = copied, p
        flat_starts[i] = start
        flat_ends[i] = start + duration
        flat_binding[i] = by
    at = [[0] * len(order) for order in orders]
    for i, (stage, index) in enumerate(places):
        at[stage][index] = i
    starts = [[flat_starts[i] for i in row] for row in at]
    ends = [[flat_ends[i] for i in row] for row in at]
    binding = [[places[flat_binding[i]] if flat_binding[i] >= 0 else None for i in row] for row in at]
    return Timeline(orders=orders, starts=starts, ends=ends, binding=binding)


def _steady_backwards(order: Sequence[Op], pipelined: bool = True) -> set[int]:
    """Indices of the backwards a stage runs right after a forward in its steady phase (each pair one step
    of the combined 1F1B). A stage whose forwards all come first has no steady phase: its last warm-up
    forward and first backward run apart (combined_1f1b.py: the first forward and the last backward
    alone). Without pipelining (*pipelined* false) every backward after another micro-batch's forward is one:
    `combined_1f1b_schedule_for_no_pipelining` (d98e8a64) runs micro-batch i's backward beside micro-batch
    i + 1's forward for every i < m − 1 ("Phases 1: 1st microbatch backward + 2nd microbatch forward"), two
    micro-batches included, which this left apart until December 2026."""
    if not pipelined:
        return {i for i in range(1, len(order)) if _pairs(order, i - 1)}
    forwards = sum(1 for op in order if op.kind == "F")
    if all(op.kind == "F" for op in order[:forwards]):
        return set()
    return {i for i in range(1, len(order)) if order[i].kind == "B" and order[i - 1].kind == "F"}


@lru_cache(maxsize=64)
def _flat(
    name: str, stages: int, chunks: int, micro_batches: int, extra_warmup: int = 0, group: int | None = None
) -> tuple[tuple[int, int, int], ...]:
    """The ops in dependency order as (duration index, previous op's position, input's position),
    positions in this same order, -1 for none; duration index kind·V·P + chunk·P + stage."""
    orders, topo = _structure(name, stages, chunks, micro_batches, extra_warmup, group)
    if topo is None:
        raise RuntimeError(f"schedule {name} deadlocks at P={stages}, V={chunks}, m={micro_batches}")
    position = [[0] * len(order) for order in orders]
    for i, (stage, index, _) in enumerate(topo):
        position[stage][index] = i
    durations = [
        [(0 if op.kind == "F" else chunks * stages) + op.chunk * stages + stage for op in order]
        for stage, order in enumerate(orders)
    ]
    return tuple(
        (
            durations[stage][index],
            position[stage][index - 1] if index else -1,
            position[needed[0]][needed[1]] if needed is not None else -1,
        )
        for stage, index, needed in topo
    )


def op_graph(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> tuple[tuple[tuple[str, int, int], int, int], ...]:
    """Every op of the schedule in an order that respects its dependencies, as ((kind, chunk, stage)
    of the cell whose time it takes, position of the stage's previous op, position of its input),
    positions in this same order and -1 for none. Each op ends at max(its two predecessors' ends) +
    its cell's time, so the iteration is the longest path through this graph; the balancer's
    every-path relaxation (`ChoiceModel.add_every_path`) is written from it."""
    name = check(schedule, stages, chunks, micro_batches, group)
    per_kind = chunks * stages
    return tuple(
        (("F" if duration < per_kind else "B", (duration % per_kind) // stages, duration % stages), previous, needed)
        for duration, previous, needed in _flat(name, stages, chunks, micro_batches, 0, group_of(name, stages, group))
    )


@lru_cache(maxsize=64)
def _places(
    name: str, stages: int, chunks: int, micro_batches: int, extra_warmup: int = 0, group: int | None = None
) -> tuple[list[tuple[int, int]], list[bool]]:
    """Per op in `_flat`'s order: its (stage, index in the stage's order), and whether its input comes from
    another stage (a transfer over a link)."""
    _, topo = _structure(name, stages, chunks, micro_batches, extra_warmup, group)
    assert topo is not None
    places = [(stage, index) for stage, index, _ in topo]
    crossing = [needed is not None and needed[0] != stage for stage, _, needed in topo]
    return places, crossing


@lru_cache(maxsize=64)
def _columns(
    name: str, stages: int, chunks: int, micro_batches: int, extra_warmup: int = 0, group: int | None = None
) -> tuple:
    """`_flat` as columns: each op's duration (a getter over the cell durations), previous op and input."""
    flat = _flat(name, stages, chunks, micro_batches, extra_warmup, group)
    durations = itemgetter(*(duration for duration, _, _ in flat))
    return durations, [previous for _, previous, _ in flat], [needed for _, _, needed in flat]


def _ends(
    name: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    m: int,
    group: int | None = None,
) -> list[float]:
    """Every op's end in `_flat`'s order, then a 0 for "no op": max(its two predecessors' ends) + its time."""
    chunks, stages = len(forward), len(forward[0])
    durations, previous, needed = _columns(name, stages, chunks, m, 0, group)
    ends = [0.0] * (len(previous) + 1)
    cells = [t for row in forward for t in row] + [t for row in backward for t in row]
    for i, (duration, p, q) in enumerate(zip(durations(cells), previous, needed, strict=True)):
        a, b = ends[p], ends[q]
        ends[i] = (a if a > b else b) + duration
    return ends


def makespan(
    schedule: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
    group: int | None = None,
) -> float:
    """`simulate(...).makespan` without the timeline: the same longest path, several times faster."""
    stages = len(forward[0])
    name = check(schedule, stages, len(forward), micro_batches, group)
    return max(_ends(name, forward, backward, micro_batches, group_of(name, stages, group)))


@lru_cache(maxsize=64)
def _last_ops(name: str, stages: int, chunks: int, micro_batches: int, group: int | None = None) -> tuple[int, ...]:
    """Each stage's last op's position in `_flat`'s order, stage by stage."""
    last: dict[int, int] = {}
    for i, (duration, _, _) in enumerate(_flat(name, stages, chunks, micro_batches, 0, group)):
        last[duration % stages] = i
    return tuple(last[stage] for stage in sorted(last))


def critical_counts(
    schedule: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
    group: int | None = None,
) -> dict[tuple[str, int, int], int]:
    """`simulate(...).path_counts()` without the timeline: how many ops of each (kind, chunk, stage)
    a longest path runs (ties broken as `simulate` breaks them: the stage's previous op first)."""
    chunks, stages = len(forward), len(forward[0])
    name = check(schedule, stages, chunks, micro_batches, group)
    group = group_of(name, stages, group)
    ends = _ends(name, forward, backward, micro_batches, group)
    return _path_counts(name, stages, chunks, micro_batches, ends, group)


def longest_path(
    schedule: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
    group: int | None = None,
) -> tuple[float, dict[tuple[str, int, int], int]]:
    """`makespan` and `critical_counts` from one run of the ops (a separation step needs both)."""
    chunks, stages = len(forward), len(forward[0])
    name = check(schedule, stages, chunks, micro_batches, group)
    group = group_of(name, stages, group)
    ends = _ends(name, forward, backward, micro_batches, group)
    return max(ends), _path_counts(name, stages, chunks, micro_batches, ends, group)


def _path_counts(
    name: str, stages: int, chunks: int, micro_batches: int, ends: Sequence[float], group: int | None = None
) -> dict[tuple[str, int, int], int]:
    """The counts of the longest path the ends (in `_flat`'s order, then 0) give, walked back from the last
    op to end (the first stage's among equals)."""
    flat = _flat(name, stages, chunks, micro_batches, 0, group)
    here = max(_last_ops(name, stages, chunks, micro_batches, group), key=ends.__getitem__)
    counts: dict[tuple[str, int, int], int] = {}
    per_kind = chunks * stages
    while here >= 0:
        duration, previous, needed = flat[here]
        key = ("F" if duration < per_kind else "B", (duration % per_kind) // stages, duration % stages)
        counts[key] = counts.get(key, 0) + 1
        # the op started at its input's end only when that came strictly later (ties: the previous op)
        here = needed if needed >= 0 and ends[needed] > ends[previous] else previous
    return counts


# Below this many weightings, running the ops one by one (`_ends`) is as quick as a level at a time.
MANY_WEIGHTINGS = 8


def critical_counts_many(
    schedule: str,
    weightings: Sequence[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]],
    micro_batches: int,
    group: int | None = None,
) -> list[dict[tuple[str, int, int], int]]:
    """`critical_counts` of each (forward, backward) weighting: the same counts, computed for many
    weightings at once a level of the schedule's graph at a time (`_levels`), several times faster."""
    if not weightings:
        return []
    chunks, stages = len(weightings[0][0]), len(weightings[0][0][0])
    name = check(schedule, stages, chunks, micro_batches, group)
    group = group_of(name, stages, group)
    if len(weightings) < MANY_WEIGHTINGS:
        return [
            _path_counts(name, stages, chunks, micro_batches, _ends(name, f, b, micro_batches, group), group)
            for f, b in weightings
        ]
    graph = _levels(name, stages, chunks, micro_batches, group)
    cells = np.array(
        [[t for row in forward for t in row] + [t for row in backward for t in row] for forward, backward in weightings]
    ).T
    ends = np.zeros((graph.none + 1, len(weightings)))
    op_times = cells[graph.duration[:-1]]
    for lo, hi, previous, needed in graph.spans:
        # each op: max(its predecessors' ends) + its time, the very operations `_ends` runs, so the same numbers
        here = ends[lo:hi]
        np.maximum(ends[previous], ends[needed], out=here)
        here += op_times[lo:hi]
    return _walk_back(graph, ends, stages, chunks)


def _walk_back(graph: _Levels, ends: np.ndarray, stages: int, chunks: int) -> list[dict[tuple[str, int, int], int]]:
    """`_path_counts` for every column of *ends* at once: from each column's last op to end (the first stage's
    among equals), back to its input when that ended strictly later, else to the stage's previous op; each
    path's counts in the order `_path_counts` first meets them."""
    width = ends.shape[1]
    columns = np.arange(width)
    here = graph.last[np.argmax(ends[graph.last], axis=0)]  # argmax: the first of equal ends
    per_kind = 2 * chunks * stages
    flat_ends = ends.ravel()  # [op · width + column]
    counts = np.zeros((per_kind + 1) * width, dtype=np.int64)  # [kind · width + column]; the last kind: done
    first = np.full((per_kind + 1) * width, np.iinfo(np.int64).max)
    duration, previous_of, needed_of, none = graph.duration, graph.previous, graph.needed, graph.none
    step = 0
    while (here != none).any():
        at = duration[here] * width + columns
        counts[at] += 1
        first[at] = np.minimum(first[at], step)
        previous, needed = previous_of[here], needed_of[here]
        later = (needed != none) & (flat_ends[needed * width + columns] > flat_ends[previous * width + columns])
        here = np.where(later, needed, previous)
        step += 1
    counts = counts.reshape(per_kind + 1, width)
    first = first.reshape(per_kind + 1, width)
    keys = [("F" if d < per_kind // 2 else "B", (d % (per_kind // 2)) // stages, d % stages) for d in range(per_kind)]
    found = []
    for column in columns:
        met = sorted((int(first[d, column]), d) for d in np.flatnonzero(counts[:per_kind, column]))
        found.append({keys[d]: int(counts[d, column]) for _, d in met})
    return found


@dataclass(frozen=True)
class _Levels:
    """`_flat`'s ops numbered level by level (an op's level: one more than its predecessors' highest), so
    that a whole level is computed at once. `none` (the number of ops) stands for no op; `duration`,
    `previous`, `needed` per op in that numbering, with one more entry for `none` (a duration index past
    the cells', and `none` itself as its predecessors); `spans` each level's range with its predecessors;
    `last` each stage's last op, stage by stage."""

    none: int
    duration: np.ndarray
    previous: np.ndarray
    needed: np.ndarray
    spans: tuple[tuple[int, int, np.ndarray, np.ndarray], ...]
    last: np.ndarray


@lru_cache(maxsize=16)
def _levels(name: str, stages: int, chunks: int, micro_batches: int, group: int | None = None) -> _Levels:
    flat = _flat(name, stages, chunks, micro_batches, 0, group)
    n = len(flat)
    level = [0] * (n + 1)  # level[-1] = 0: "no op"
    for i, (_, previous, needed) in enumerate(flat):
        a, b = level[previous], level[needed]
        level[i] = (a if a > b else b) + 1
    order = sorted(range(n), key=level.__getitem__)  # stable: `_flat`'s order within a level
    number = [0] * (n + 1)
    for new, old in enumerate(order):
        number[old] = new
    number[-1] = n
    previous = np.array([number[flat[old][1]] for old in order] + [n], dtype=np.intp)
    needed = np.array([number[flat[old][2]] for old in order] + [n], dtype=np.intp)
    spans = []
    lo = 0
    while lo < n:
        hi = lo
        while hi < n and level[order[hi]] == level[order[lo]]:
            hi += 1
        spans.append((lo, hi, previous[lo:hi], needed[lo:hi]))
        lo = hi
    duration = np.array([flat[old][0] for old in order] + [2 * chunks * stages], dtype=np.intp)
    last = np.array([number[i] for i in _last_ops(name, stages, chunks, micro_batches, group)], dtype=np.intp)
    return _Levels(n, duration, previous, needed, tuple(spans), last)


def iteration_time(
    schedule: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
    group: int | None = None,
) -> float:
    """The iteration time of the schedule for uneven cells: its critical path, found by running it."""
    return simulate(schedule, forward, backward, micro_batches, group=group).makespan


def closed_form_time(
    schedule: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
) -> float:
    """The textbook iteration time for uneven stages, with S_s = Σ_v (F_v,s + B_v,s) a stage's work:

    * 1F1B: Σ_s S_s + (m − 1)·max_s S_s;
    * interleaved and DualPipeV: Σ_s S_s / V + (m − 1/V)·max_s S_s, which is (mV + P − 1)·(f + b)
      for even cells, Narayanan et al.'s figure (it does not see how a stage's work is split
      between its chunks, which matters: uneven chunks stall the schedule);
    * GPipe: a forward wave Σ_s F_s + (m − 1)·max_s F_s, then a backward wave alike.

    For even cells these equal the schedules run op by op; for uneven ones they are estimates
    (see `iteration_time` for the critical path itself).
    """
    chunks, stages = len(forward), len(forward[0])
    name = canonical(schedule, chunks)
    m = micro_batches
    if name == "gpipe":
        f = [sum(forward[c][s] for c in range(chunks)) for s in range(stages)]
        b = [sum(backward[c][s] for c in range(chunks)) for s in range(stages)]
        return sum(f) + (m - 1) * max(f) + sum(b) + (m - 1) * max(b)
    work = [sum(forward[c][s] + backward[c][s] for c in range(chunks)) for s in range(stages)]
    return sum(work) / chunks + (m - 1 / chunks) * max(work)


def one_f_one_b_time(forward: Sequence[float], backward: Sequence[float], micro_batches: int) -> float:
    """1F1B's closed form for uneven stages: Σ_s (F_s + B_s) + (m − 1)·max_s (F_s + B_s)."""
    costs = [f + b for f, b in zip(forward, backward, strict=True)]
    return sum(costs) + (micro_batches - 1) * max(costs)
