"""Pipeline sends and receives as the frameworks post and wait for them: the schedule's timeline with transfers.

A transfer between two stages is NCCL point-to-point: a send of more than NCCL's buffer completes only
while the receiver's matching receive runs, so it starts when both are posted, the sender's op done and
the receiver's receive issued, and ends a transfer time later. The sender waits for it at some later op,
the receiver before the op that reads it. Where each side posts and waits is the framework's code:

* ``megatron_sync`` (Megatron-LM's 1F1B, core_r0.8.0 and d98e8a64:
  megatron/core/pipeline_parallel/schedules.py `forward_backward_pipelining_without_interleaving`; its
  p2p_communication.py `_communicate` with `batch_p2p_comm`, which arguments.py sets whenever
  `--overlap-p2p-communication` is off, as it is forced off without interleaving): after each op one
  batched call (`batch_isend_irecv`) sends its output and receives the next op's input, and waits for
  both (`req.wait()`, then `torch.cuda.synchronize()` under the default `batch_p2p_sync`). In the steady
  state the send after a forward is batched with the receive of the backward after it
  (`send_forward_recv_backward`), the send after a backward with the next forward's receive
  (`send_backward_recv_forward`); in the warm-up (forward after forward) and the cool-down (backward
  after backward) the send waits alone and the next receive is posted only then (`send_forward` then
  `recv_forward`; `recv_backward` ... `send_backward`). So: a receive is posted when the stage's previous
  op ended, or when that op's own send completed where the two ops are of one kind; the stage's next op
  waits for the send.
* ``megatron_overlap_r0.8`` (Megatron-LM's interleaved 1F1B with `--overlap-p2p-communication`, the
  default there; core_r0.8.0 and r0.9.0 `forward_backward_pipelining_with_interleaving`, `_p2p_ops`,
  `wait_on_reqs=False`): after each forward `send_forward_recv_forward` posts its send and the receive of
  the next forward's input; the handles (`fwd_wait_handles`) are waited for before the next forward;
  after each backward `send_backward_recv_backward` likewise, waited for before the next backward
  (`bwd_wait_handles`; the first backward's receive is posted after the last warm-up forward, before
  the first steady forward; the cool-down's calls wait at once, before the next backward too). So: a
  receive is posted when the stage's previous op of its kind ended (its first backward's: the last
  warm-up forward's end); a send is waited for before the stage's next op of its kind. The receives
  across the model chunks' wrap (the last stage's chunk c to the first stage's chunk c + 1, and back)
  are posted ahead, micro-batches before they are needed ("First stage is ahead of last stage by
  (pipeline_parallel_size - 1)"): those wait only for the sender. With `--overlap-p2p-communication-warmup-flush`
  (`warmup_flush`; d98e8a64 `forward_backward_pipelining_with_interleaving`, `overlap_p2p_comm_warmup_flush`)
  every stage but the first posts each warm-up forward's receive before the forward ahead of it runs ("Prefetch
  recv for iteration k+1 for non-first ranks"), and every stage but the last each cool-down backward's receive
  before the backward ahead of it: one op earlier than the posts above (the first forward's, and the first
  cool-down backward's, where they were).
* ``megatron_overlap_r0.10`` (core_r0.10.0 to core_v0.17, from 4295be1a6c "tunable schedule with
  overlapping"): the receives as above; a send's handle (`send_next_wait_handle`, `send_prev_wait_handle`)
  is waited for once the stage's next send of its kind is posted, so by the op after that one.
* ``megatron_overlap`` (core_v0.18.0 on, d98e8a64; 260cba7133 "wait for async P2P send before
  deallocating output tensor"): the same, but a forward's send is waited for at once, before the stage's
  next op, under `deallocate_pipeline_outputs`, which Megatron-LM's training always sets
  (argument_utils.py `core_transformer_config_from_args`).
* ``megatron_batched`` (Megatron's interleaved 1F1B without `--overlap-p2p-communication`: Megatron-LM of
  2022, which had no such flag, megatron/schedules.py `forward_backward_pipelining_with_interleaving` and
  p2p_communication.py `_communicate` at d898a8991d, the sequence_parallel merge; Megatron-Core core_r0.8.0's
  `not config.overlap_p2p_comm` branches of the same function): one blocking call (`batch_isend_irecv`, every
  request waited for, then `torch.cuda.synchronize()`) after each warm-up forward
  (`send_forward_recv_forward`), after the last warm-up forward and after each steady forward-backward pair
  (`send_forward_backward_recv_forward_backward`: the pair's forward output and backward gradient sent, the
  next forward's input and the next backward's gradient received) and after each cool-down backward
  (`send_backward_recv_backward`). So: a steady forward's output leaves only after the backward beside it; a
  receive is posted at the stage's last call before the op that reads it (across the chunks' wrap too: the
  first stage receives at step k the input of its next forward, "ahead of last stage by (p - 1)"); the op
  after a call waits for all of that call's transfers, the next backward's gradient included.
* ``torch_1f1b`` (torch.distributed.pipelining's `Schedule1F1B._step_microbatches`, torch 2.13 as
  torchtitan runs it with one stage a rank; the same structure since torch 2.4): in the warm-up each
  forward's receive is posted and waited for right before it, its send fired after it and waited for
  after the next forward ("Clear previous chunk's forward sends"); the last warm-up forward's send is
  batched with the first backward's receive (`fwd_send_bwd_recv`), and in the steady state each
  backward's send with the next forward's receive (`bwd_send_fwd_recv`), each batch waited for before
  the op after it; the cool-down mirrors the warm-up. Its warm-up count, P − s forwards before the first
  backward, gives Megatron's op order. So: a receive is posted when the previous op ended (and, in the
  warm-up and cool-down, once the send before it completed); a send is waited for before the next op
  when batched with its receive, else before the op after that.

* ``deepspeed`` (DeepSpeed's pipeline engine, as Megatron-DeepSpeed runs it: deepspeed/runtime/pipe/
  schedule.py `TrainSchedule` at 93e9307d, its 2·(m + P − 1) steps giving each stage Megatron's 1F1B op
  order, and p2p.py's blocking `dist.send`/`dist.recv`, one call after another): before a forward the
  stage receives its input (`RecvActivation`) and only then sends the gradient of the backward before
  it (`SendGrad`); before a backward it sends the output of the forward before it (`SendActivation`)
  and only then receives its gradient (`RecvGrad`); the op waits for both. So: a forward's receive is
  posted when the previous op ended, and the previous op's send waits for that receive to complete; a
  backward's receive, and any receive after an op of its own kind, is posted once the previous op's
  send has completed; the stage's next op waits for its sends. With free transfers the steps time as
  1F1B; each step's two transfers run one after the other.

* ``torch_looped`` (torch.distributed.pipelining's `PipelineScheduleMulti._step_microbatches`, torch
  2.6.0, as torchtitan runs its interleaved schedule): a table of time steps every rank walks in lock
  step, each step's sends and receives one batch waited for before the next step
  (`ppb_core.pipeline_lockstep`).

`schedules.simulate` keeps the simpler models for the other schedules: the sender's op lasting its send
(MindFormers).

The waits are the GPU's: `req.wait()` on an NCCL work makes the compute stream wait for the NCCL
stream, and each NCCL call starts after the work queued before it on the compute stream. Both directions
of a link are taken to carry a transfer at once (full duplex).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from ppb_core.host_copies import HostCopies, Streams
from ppb_core.pipeline_lockstep import lockstep_timeline
from ppb_core.schedules import Op, Timeline, _orders, _position, _steady_backwards, check, group_of

PROTOCOLS: tuple[str, ...] = (
    "deepspeed",
    "megatron_batched",
    "megatron_sync",
    "megatron_overlap",
    "megatron_overlap_r0.10",
    "megatron_overlap_r0.8",
    "torch_1f1b",
    "torch_looped",
)
# Megatron-Core's releases (`timing.interleaved_send_waits`) and the protocol their interleaved schedule runs
OVERLAP_BY_RELEASE = {
    "core_r0.8": "megatron_overlap_r0.8",
    "core_r0.10": "megatron_overlap_r0.10",
    "core_v0.18": "megatron_overlap",
}
NONE = -1


@lru_cache(maxsize=32)
def _graph(
    protocol: str,
    name: str,
    stages: int,
    chunks: int,
    micro_batches: int,
    extra: int,
    group: int | None = None,
    warmup_flush: bool = False,
) -> tuple:
    """The ops and transfers as nodes, and an order of them that respects every wait.

    Nodes 0 … n−1 are the ops (stage by stage, in schedule order), n … the transfers (one per input
    that crosses stages). Returns (orders, n, the nodes in that order, each node's time index, the nodes
    whose ends each starts after, its stage's previous op first): an op's time index is
    kind·V·P + chunk·P + stage (as `schedules._flat`), a transfer's the chunk·P + stage of the cell whose
    output size it carries."""
    orders = _orders(name, stages, chunks, micro_batches, extra, group)
    cell_at = {_position(name, stages, c, s): (c, s) for c in range(chunks) for s in range(stages)}
    last = stages * chunks - 1
    # a node per op: stage by stage; where[(kind, chunk, stage)][micro-batch] = its index on its stage
    offset = [0] * (stages + 1)
    where: dict[tuple[str, int, int], list[int]] = {}
    for stage, order in enumerate(orders):
        offset[stage + 1] = offset[stage] + len(order)
        for index, op in enumerate(order):
            slots = where.get((op.kind, op.chunk, stage))
            if slots is None:  # made once a cell and kind: `setdefault`'s default was m entries an op (quadratic in m)
                slots = where[(op.kind, op.chunk, stage)] = [0] * micro_batches
            slots[op.micro_batch] = index
    n = offset[-1]
    feeds = {key: _producer(name, stages, cell_at, last, key) for key in where}
    per_kind = chunks * stages
    # per stage, each op's previous and next op of its kind (-1: none)
    previous_of_kind, next_of_kind = [], []
    for order in orders:
        before, seen = [-1] * len(order), {"F": -1, "B": -1}
        for index, op in enumerate(order):
            before[index], seen[op.kind] = seen[op.kind], index
        later, seen = [-1] * len(order), {"F": -1, "B": -1}
        for index in range(len(order) - 1, -1, -1):
            later[index], seen[order[index].kind] = seen[order[index].kind], index
        previous_of_kind.append(before)
        next_of_kind.append(later)
    times: list[int] = []
    after: list[list[int]] = []
    for stage, order in enumerate(orders):
        base = offset[stage]
        for index, op in enumerate(order):
            times.append((0 if op.kind == "F" else per_kind) + op.chunk * stages + stage)
            after.append([base + index - 1] if index else [])
    calls_of = [_batched_calls(order) for order in orders] if protocol == "megatron_batched" else []
    sends: dict[int, list[int]] = {}  # op node -> the transfers carrying its output
    receives: dict[int, list[int]] = {}  # op node -> the transfers carrying its input
    posts: list[tuple[int, tuple[int, int], int | None]] = []  # transfer: (receiver node, receiver place, post)
    for stage, order in enumerate(orders):
        base, befores = offset[stage], previous_of_kind[stage]
        for index, op in enumerate(order):
            fed, size = feeds[(op.kind, op.chunk, stage)]
            if fed is None:
                continue
            source = (fed[2], where[fed][op.micro_batch])
            sender = offset[source[0]] + source[1]
            if source[0] == stage:  # within a stage: no transfer
                after[base + index].append(sender)
                continue
            transfer = len(times)
            times.append(size)
            after.append([sender])
            sends.setdefault(sender, []).append(transfer)
            receives.setdefault(base + index, []).append(transfer)
            here_calls = calls_of[stage] if calls_of else None
            post = _post(protocol, name, stages, order, stage, index, source, befores[index], warmup_flush, here_calls)
            if post is not None:
                posts.append((transfer, base, post))
            after[base + index].append(transfer)
            sender_calls = calls_of[source[0]] if calls_of else None
            wait_at = _release(protocol, orders[source[0]], source[1], next_of_kind[source[0]][source[1]], sender_calls)
            if wait_at is not None:
                after[offset[source[0]] + wait_at].append(transfer)
            if protocol == "megatron_batched":
                sent_at = _batched_send(calls_of[source[0]], source[1])
                if sent_at != source[1]:  # a steady forward's output leaves in the call after its backward
                    after[transfer].append(offset[source[0]] + sent_at)
                if post is not None and post[0] + 1 != index:  # the op after the posting call waits for it too
                    after[base + post[0] + 1].append(transfer)
    for transfer, base, (index, sent) in posts:
        after[transfer].append(base + index)
        if sent is not None:  # the receive is posted once that op's send has completed
            after[transfer] += sends.get(base + sent, [])
    if protocol == "deepspeed":  # a forward's receive first, then the previous backward's send
        for stage, order in enumerate(orders):
            base = offset[stage]
            for index in range(1, len(order)):
                if order[index].kind == "F" and order[index - 1].kind == "B":
                    for transfer in sends.get(base + index - 1, []):
                        after[transfer] += receives.get(base + index, [])
    # Kahn's order over ops and transfers (a wait named twice is counted twice, and met twice)
    users: list[list[int]] = [[] for _ in times]
    waiting = [len(deps) for deps in after]
    for here, deps in enumerate(after):
        for dep in deps:
            users[dep].append(here)
    ready = [i for i in range(len(times)) if not waiting[i]]
    topo: list[int] = []
    while ready:
        here = ready.pop()
        topo.append(here)
        for user in users[here]:
            waiting[user] -= 1
            if not waiting[user]:
                ready.append(user)
    if len(topo) != len(times):
        raise RuntimeError(f"{protocol} sends and receives deadlock at P={stages}, V={chunks}, m={micro_batches}")
    return orders, n, topo, times, after


def _producer(name, stages, cell_at, last, key: tuple[str, int, int]) -> tuple[tuple[str, int, int] | None, int]:
    """The (kind, chunk, stage) of the ops whose output the ops of *key* read, micro-batch for micro-batch
    (None: the model's input), and the chunk·P + stage of the cell whose output size a transfer carries."""
    kind, chunk, stage = key
    position = _position(name, stages, chunk, stage)
    if kind == "F":
        if position == 0:
            return None, 0
        c, s = cell_at[position - 1]
        return ("F", c, s), c * stages + s
    if position == last:
        return ("F", chunk, stage), 0
    c, s = cell_at[position + 1]
    return ("B", c, s), chunk * stages + stage


def _post(
    protocol: str,
    name: str,
    stages: int,
    order: Sequence[Op],
    stage: int,
    index: int,
    source: tuple[int, int],
    previous_of_kind: int,
    warmup_flush: bool = False,
    calls: Sequence[bool] | None = None,
) -> tuple[int, int | None] | None:
    """(index of the receiver's op whose end posts this op's receive, index of the op whose send must have
    completed first, or None), or None: posted from the start. *previous_of_kind*: the index of the
    stage's previous op of this op's kind (-1: none); *warmup_flush*: the interleaved schedule's
    `--overlap-p2p-communication-warmup-flush` prefetches (module doc); *calls*: the stage's `_batched_calls`
    (`megatron_batched`; computed when not given)."""
    if index == 0:
        return None
    op = order[index]
    alone = order[index - 1].kind == op.kind  # warm-up or cool-down: the sends are not batched with it
    if protocol == "megatron_sync":
        return index - 1, (index - 1 if alone else None)
    if protocol == "megatron_batched":  # the stage's last call before the op
        calls = calls if calls is not None else _batched_calls(order)
        return (index - 1 if calls[index - 1] else index - 2), None
    if protocol == "torch_1f1b":
        return index - 1, (index - 2 if alone and index >= 2 else None)
    if protocol == "deepspeed":  # only a forward after a backward receives before that backward's send
        return index - 1, (None if op.kind == "F" and not alone else index - 1)
    wraps = (op.kind == "F" and stage == 0 and source[0] == stages - 1) or (
        op.kind == "B" and stage == stages - 1 and source[0] == 0
    )
    if name == "interleaved" and wraps:
        return None  # posted micro-batches ahead across the chunks' wrap
    if warmup_flush and name == "interleaved" and index >= 2 and order[index - 1].kind == op.kind:
        # prefetched before the op ahead of it runs, where that op is a warm-up or cool-down iteration: a
        # forward after warm-up forwards only, on a stage past the first; a backward after a cool-down
        # backward (one after another backward, or after the forwards of a stage that has no steady state),
        # on a stage before the last
        warm = op.kind == "F" and stage > 0 and all(o.kind == "F" for o in order[:index])
        no_steady = all(o.kind == "F" for o in order[: len(order) // 2])
        cool = op.kind == "B" and stage < stages - 1 and (order[index - 2].kind == "B" or no_steady)
        if warm or cool:
            return index - 2, None
    if warmup_flush and name == "interleaved" and index == 1 and op.kind == "F" and stage > 0:
        return None  # the second forward's receive, prefetched before the first forward runs
    if previous_of_kind >= 0:
        return previous_of_kind, None
    # a stage's first backward: its receive is posted after the last warm-up forward, the op before the
    # first steady forward (the op before it), unless every forward is a warm-up one
    steady = op.kind == "B" and 2 <= index < len(order) // 2
    return (index - 2 if steady else index - 1), None


def _release(
    protocol: str, order: Sequence[Op], index: int, next_of_kind: int, calls: Sequence[bool] | None = None
) -> int | None:
    """The index of the sender's op that waits for the send of the op at *index* (None: none does);
    *next_of_kind*: the index of the stage's next op of its kind (-1: none); *calls*: the stage's
    `_batched_calls` (`megatron_batched`; computed when not given)."""
    if protocol in ("megatron_sync", "deepspeed"):
        return index + 1 if index + 1 < len(order) else None
    if protocol == "megatron_batched":  # the op after the call that sends it
        after_call = _batched_send(calls if calls is not None else _batched_calls(order), index) + 1
        return after_call if after_call < len(order) else None
    if protocol == "torch_1f1b":  # batched with the next op's receive, else waited for after the next op
        later = index + 1 if index + 1 < len(order) and order[index + 1].kind != order[index].kind else index + 2
        return later if later < len(order) else None
    if protocol == "megatron_overlap_r0.8":
        return next_of_kind if next_of_kind >= 0 else None
    if protocol == "megatron_overlap" and order[index].kind == "F":  # at once (deallocate_pipeline_outputs)
        return index + 1 if index + 1 < len(order) else None
    # waited for once the next send of its kind is posted: by the op after that one
    return next_of_kind + 1 if 0 <= next_of_kind < len(order) - 1 else None


def _batched_calls(order: Sequence[Op]) -> tuple[bool, ...]:
    """For each op of a stage, whether `megatron_batched`'s blocking call runs after it: after every op but a
    steady forward (a forward followed by its backward), unless the stage runs every forward first (schedules.py
    `all_warmup_microbatches`, where each forward sends at once)."""
    first_backward = next((i for i, op in enumerate(order) if op.kind == "B"), len(order))
    every_forward_first = all(op.kind == "B" for op in order[first_backward:])
    return tuple(
        every_forward_first or not (op.kind == "F" and i + 1 < len(order) and order[i + 1].kind == "B")
        for i, op in enumerate(order)
    )


def _batched_send(calls: Sequence[bool], index: int) -> int:
    """The index of the op after which `megatron_batched` sends the output of the op at *index* (*calls*: the
    stage's `_batched_calls`): its own, or, for a steady forward, the backward's beside it."""
    return index if calls[index] else index + 1


def simulate_p2p(
    protocol: str,
    schedule: str,
    forward: Sequence[Sequence[float]],
    backward: Sequence[Sequence[float]],
    micro_batches: int,
    transfer: Sequence[Sequence[float]],
    shorter: Sequence[Sequence[Sequence[float]]] | None = None,
    group: int | None = None,
    warmup_flush: bool = False,
    host: HostCopies | None = None,
) -> Timeline:
    """The schedule's timeline with its transfers posted and waited for as *protocol* says (module doc).

    *transfer* `[chunk][stage]`: the time a cell's output (or the gradient of it, the same size) takes to
    reach the next stage. *shorter*: Megatron's combined 1F1B savings as `schedules.simulate` takes them.
    *group*: the interleaved schedule's micro-batch group (`schedules.check`); *warmup_flush*: its warm-up and
    cool-down receives prefetched (`--overlap-p2p-communication-warmup-flush`, module doc); *host*: each
    stage's device-to-host stream of Megatron's fine-grained offloading (`schedules.simulate`)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown p2p protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    chunks, stages = len(forward), len(forward[0])
    name = check(schedule, stages, chunks, micro_batches, group)
    if name not in ("1f1b", "interleaved"):
        raise ValueError(f"the {protocol} protocol is for the 1F1B and interleaved schedules, not {name}")
    if protocol in ("torch_1f1b", "deepspeed") and name != "1f1b":
        raise ValueError(f"{protocol} runs the 1F1B schedule alone: one stage a rank")
    if protocol == "torch_looped":
        if name != "interleaved" or shorter is not None or host is not None:
            raise ValueError("torch_looped runs the interleaved schedule alone, without combined steps or copies")
        return lockstep_timeline(forward, backward, micro_batches, transfer)
    if protocol == "megatron_batched" and name != "interleaved":
        raise ValueError("megatron_batched is the interleaved schedule's (Megatron's 1F1B is megatron_sync)")
    extra = 0 if shorter is None else 1
    flush = warmup_flush and protocol.startswith("megatron_overlap")
    orders, n, topo, times, after = _graph(
        protocol, name, stages, chunks, micro_batches, extra, group_of(name, stages, group), flush
    )
    op_times = [t for row in forward for t in row] + [t for row in backward for t in row]
    link_times = [t for row in transfer for t in row]
    saving = _savings(orders, shorter, stages) if shorter is not None else {}
    ends = [0.0] * len(times)
    starts = [0.0] * n
    binding: list[int] = [NONE] * len(times)
    streams = Streams(host, orders) if host is not None else None
    place = [(stage, index) for stage, order in enumerate(orders) for index in range(len(order))] if streams else []
    for here in topo:
        time, deps = times[here], after[here]
        start, by = 0.0, NONE
        for dep in deps:  # the first of equal ends binds: the stage's previous op, numbered first
            if by == NONE or ends[dep] > start:
                start, by = ends[dep], dep
        if here < n and streams is not None:  # the stage's own copies: a wait binds to its previous op
            stage, index = place[here]
            op = orders[stage][index]
            if op.kind == "F":
                streams.forward(stage, op, start)
            elif (copied := streams.ready(stage, op)) > start:
                start, by = copied, here - 1
        if here < n:
            starts[here] = start
            ends[here] = start + op_times[time] - saving.get(here, 0.0)
        else:
            ends[here] = start + link_times[time]
        binding[here] = by
    return _timeline(orders, n, starts, ends, binding)


def _savings(orders, shorter, stages) -> dict[int, float]:
    """Node → what a combined 1F1B step saves on its backward (`schedules._steady_backwards`)."""
    found: dict[int, float] = {}
    node = 0
    for stage, order in enumerate(orders):
        steady = _steady_backwards(order, stages > 1)
        for index in range(len(order)):
            if index in steady:
                found[node + index] = shorter[order[index - 1].chunk][order[index].chunk][stage]
        node += len(order)
    return found


def _timeline(orders, n: int, starts: list[float], ends: list[float], binding: list[int]) -> Timeline:
    """A `Timeline` of the ops (a transfer an op waited for binds it to the transfer's sender)."""
    place: list[tuple[int, int]] = [(stage, index) for stage, order in enumerate(orders) for index in range(len(order))]
    op_starts, op_ends, op_binding = [], [], []
    node = 0
    for order in orders:
        op_starts.append(starts[node : node + len(order)])
        op_ends.append(ends[node : node + len(order)])
        op_binding.append([_op_of(binding, b, n, place) for b in binding[node : node + len(order)]])
        node += len(order)
    return Timeline(orders=orders, starts=op_starts, ends=op_ends, binding=op_binding)


def _op_of(binding: list[int], here: int, n: int, place: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The op a node's wait leads back to: itself, or through transfers to the op they waited for."""
    while here >= n:
        here = binding[here]
    return None if here == NONE else place[here]
