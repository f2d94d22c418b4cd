"""Proven lower bounds on a strategy's iteration time, whatever plan the balancer gives it.

`ppb_core.timing.iteration.run_iteration` prices a plan as the schedule run op by op with every
cell's forward and backward (its layers' times, head and tail included): `compute + bubble` is
that schedule's makespan, and every other term of its breakdown (FSDP gathers, P2P, data-parallel
communication, the optimizer) is a time the critical path spends on top, never below zero. So a
lower bound on the makespan of the plain schedule, over every plan, is a lower bound on the
iteration time of the plan the balancer returns.

The schedule bound. Every op on a stage runs after the previous one, and an op waits for its input
(`ppb_core.schedules.simulate`). For a stage s take its first backward o₁ (micro-batch j) and its
last op oₗ (a backward, micro-batch l). o₁ cannot end before micro-batch j's forward has run
through every cell along the model and its backward has come back to o₁'s cell; the ops the stage
runs after o₁ follow one by one; and after oₗ, micro-batch l's backward still runs through every
cell before oₗ's along the model:

    A_s:  T ≥ Σ_c F_c + Σ_{c ≥ o₁} B_c + Σ_{ops of s after o₁} duration + Σ_{c < oₗ} B_c.

Likewise the stage's first op waits for its micro-batch's forward through the cells before it, the
stage then runs all its m·Σ_v (F_v,s + B_v,s) of work, and micro-batch l's backward still goes back:

    B_s:  T ≥ Σ_{c < first} F_c + m·Σ_v (F_v,s + B_v,s) + Σ_{c < oₗ} B_c.

No op is counted twice: an op of stage s on one of these chains would have to run before the
stage's first backward or after its last op. Both forms are linear in the cells' times, and a cell's
time is the sum of its layers' times at their options. (For even 1F1B cells A_{P−1} is exactly the
makespan (m + P − 1)(f + b).)

Over every plan. A plan puts each body layer in a cell under an option (`ppb_core.balance`), so:

* `quick_bound` (every strategy): any average of the forms of one family is a bound; writing it
  per layer, each layer contributes at least its least coefficient over the cells times its forward
  plus its least backward over the options. No memory limit.
* `lp_bound` (the promising ones): the linear-programming relaxation of the balancer's own problem
  — layers of each kind split fractionally over cells and options, every cell not holding the head
  or tail non-empty, every stage within the device at every in-flight vector of its schedule
  (the balancer's memory rows, with the descriptions' MB) — minimising the largest form. Any plan
  the balancer can return is a point of this program, so its optimum bounds the plan's makespan;
  and when the program has no point, no plan fits the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import highspy
import numpy as np

from ppb_core.balance import highs
from ppb_core.schedules import (
    _steady_backwards,
    cell_order,
    check,
    combined_in_flight_vectors,
    group_of,
    in_flight_vectors,
    stage_orders,
)

# The relative slack given to the program's answer and its memory rows, above HiGHS's tolerances, so
# that neither its optimum nor its infeasibility is claimed where exact arithmetic would differ.
LP_MARGIN = 1e-6
# The relaxed program's work limit (deterministic, no clock): simplex iterations per row and column. The
# dual simplex ends these programs in about one iteration per row; past the limit its objective is not a
# proven bound (phase 1 is not dual feasible), so the answer is "unknown" and the strategy keeps the bound
# it had (the schedule bound, proven without the program).
LP_ITERATIONS_PER_ROW = 50


@dataclass(frozen=True)
class Form:
    """T ≥ Σ_c forward[c]·F_c + backward[c]·B_c + t·(links + [blocking]·sends) over the cells in layer order
    (`ScheduleForms.cells`), t the time of one pipeline transfer."""

    stage: int
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    links: int  # transfers between stages along the form's chains
    sends: int  # the stage's own sends among the ops counted, which last as long with blocking P2P
    # Megatron-Core's combined 1F1B (`schedule_forms`): per cell, how many of the form's backwards run in a step
    # with a forward of that cell (their forward slack off) and how many of them are that cell's (their backward
    # slack off); empty elsewhere (no slack)
    forward_paired: tuple[float, ...] = ()
    backward_paired: tuple[float, ...] = ()

    def transfers(self, blocking: bool) -> int:
        return self.links + (self.sends if blocking else 0)


@dataclass(frozen=True)
class ScheduleForms:
    """A schedule's bound forms at given sizes: A_s then B_s for every stage, the cells in layer order
    and each stage's in-flight vectors (micro-batches held per chunk at which its memory may peak)."""

    schedule: str
    stages: int
    chunks: int
    micro_batches: int
    cells: tuple[tuple[int, int], ...]  # (chunk, stage) in layer order
    forms: tuple[Form, ...]
    families: int = 0  # how many of the forms are A forms (the rest are B forms)
    # the interleaved schedule's micro-batch group (`schedules.check`; None: Megatron's default, P)
    group: int | None = None
    combined: bool = False  # Megatron-Core's combined 1F1B (`schedule_forms`)

    @property
    def vectors(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """Per stage, the in-flight vectors (micro-batches per chunk) at which its memory may peak."""
        return _vectors(self.schedule, self.stages, self.chunks, self.micro_batches, self.group, self.combined)

    def family(self, name: str) -> tuple[Form, ...]:
        """The A forms (chains to a backward) or the B forms (chains to a forward)."""
        return self.forms[: self.families] if name == "A" else self.forms[self.families :]

    def value(
        self,
        forward: Sequence[Sequence[float]],
        backward: Sequence[Sequence[float]],
        transfer: float = 0.0,
        blocking: bool = True,
        forward_slack: Sequence[Sequence[float]] | None = None,
        backward_slack: Sequence[Sequence[float]] | None = None,
    ) -> float:
        """The bound for given cell times `[chunk][stage]` and one transfer's time: the largest form (under the
        combined 1F1B, *forward_slack* and *backward_slack* `[chunk][stage]`: what a step may save of each cell's
        forward and backward, `schedule_forms`)."""
        f = [forward[c][s] for c, s in self.cells]
        b = [backward[c][s] for c, s in self.cells]
        sf = [forward_slack[c][s] for c, s in self.cells] if forward_slack is not None else [0.0] * len(f)
        sb = [backward_slack[c][s] for c, s in self.cells] if backward_slack is not None else [0.0] * len(b)
        found = []
        for form in self.forms:
            total = float(np.dot(form.forward, f) + np.dot(form.backward, b)) + transfer * form.transfers(blocking)
            if form.forward_paired:
                total -= float(np.dot(form.forward_paired, sf) + np.dot(form.backward_paired, sb))
            found.append(total)
        return max(found)


@lru_cache(maxsize=512)
def schedule_forms(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None, combined: bool = False
) -> ScheduleForms:
    """The forms A_s and B_s of every stage (module docstring), from the schedule's own op orders
    (*group*: the interleaved schedule's micro-batch group, `schedules.check`).

    *combined*: Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`), whose orders have one
    more warm-up forward and whose steady backwards run shorter by their step's saving (`schedules.simulate`:
    a backward right after a forward of another micro-batch, `_steady_backwards`; the warm-up forwards and the
    cool-down backwards run alone, megatron/core/pipeline_parallel/schedules.py
    `forward_backward_pipelining_with_interleaving` at d98e8a64 calls `combined_1f1b_schedule_for_interleaved_
    pipelining` for the steady steps only). A step saves at most its forward cell's forward slack and its
    backward cell's backward slack (`screen.combined_slack_ms`), so every counted backward that runs in a step
    takes off both: `backward_paired` at its own cell, `forward_paired` at its forward's, whichever chain counts
    it (the A forms' chain down to the stage's first backward and every form's chain after the stage's last op
    as much as the stage's own ops). Forwards and the backwards run alone keep their time."""
    name = check(schedule, stages, chunks, micro_batches, group)
    group = group_of(name, stages, group)
    orders = stage_orders(name, stages, chunks, micro_batches, group, combined)
    cells = tuple(cell_order(name, stages, chunks))
    position = {cell: i for i, cell in enumerate(cells)}
    count = len(cells)
    stage_of = np.array([cell[1] for cell in cells])
    # crossing[i]: 1 when cells i and i + 1 sit on different stages (a transfer between them); its prefix
    # sums count the transfers along any stretch of the model
    crossing = (stage_of[1:] != stage_of[:-1]).astype(np.int64)
    crossed = np.concatenate(([0], np.cumsum(crossing)))
    # under the combined 1F1B: per stage, each backward run in a step, (chunk, micro-batch) -> its forward's cell
    # under the combined 1F1B: per stage, the indices of its backwards run in a step and their (chunk, micro-batch)
    steadies: list[list[int]] = []
    stepped: list[set[tuple[int, int]]] = []
    if combined:
        for order in orders:
            steadies.append(sorted(_steady_backwards(order, stages > 1)))
            stepped.append({(order[i].chunk, order[i].micro_batch) for i in steadies[-1]})

    def stepped_on(micro_batch: int, q: int) -> bool:
        """Whether the micro-batch's backward through the cell at position *q* runs in a combined step."""
        chunk, stage = cells[q]
        return combined and (chunk, micro_batch) in stepped[stage]

    def form(
        stage: int, order: list, at: np.ndarray, forward_op: np.ndarray, sends: np.ndarray, k: int, suffix: dict
    ) -> Form | None:
        """T ≥ the chain that brings op k of the stage its input, the stage's ops from it on, and the
        chain the stage's last op starts; an op a chain runs on this stage is never one counted after k.
        *at*: each op's cell position; *forward_op*: whether it is a forward; *sends*: whether it sends;
        *suffix*: per op index i, the forwards and backwards per cell of the stage's ops from i on.
        Under the combined 1F1B the chain after the last op stops before its first backward run in a step (its
        forward's slack would land on a cell whose forward the form does not count), and a chain down to a
        first backward through such a step is no form (None)."""
        p, pl = int(at[k]), int(at[-1])
        if not forward_op[k]:  # its micro-batch's forward through every cell, then its backward down to op
            if any(stepped_on(order[k].micro_batch, q) for q in range(p, count)):
                return None
            forward = np.ones(count)
            backward = np.zeros(count)
            backward[p:] += 1.0
            links = int(crossed[-1]) + int(crossed[-1] - crossed[p])
            first = k + 1
        else:  # its micro-batch's forward up to op
            forward = np.zeros(count)
            forward[:p] += 1.0
            backward = np.zeros(count)
            links = int(crossed[p])
            first = k
        later_forwards, later_backwards = suffix[first]
        forward += later_forwards
        backward += later_backwards
        # the backward chain after the stage's last op, down to cell `stop` (under the combined 1F1B, to just
        # above its first backward run in a step)
        stop = 0
        for q in range(pl - 1, -1, -1):
            if stepped_on(order[-1].micro_batch, q):
                stop = q + 1
                break
        backward[stop:pl] += 1.0
        links += int(crossed[pl] - crossed[stop]) if stop < pl else 0
        paired_f: tuple[float, ...] = ()
        paired_b: tuple[float, ...] = ()
        if combined:  # the stage's own steps from op `first` on: each backward with the forward before it
            own = np.array([i for i in steadies[stage] if i >= first], dtype=np.int64)
            paired_f = tuple(np.bincount(at[own - 1], minlength=count).astype(float).tolist())
            paired_b = tuple(np.bincount(at[own], minlength=count).astype(float).tolist())
        # with blocking P2P every op counted lasts as long as its send; the last op's send is the trailing chain's first
        return Form(
            stage,
            tuple(forward.tolist()),
            tuple(backward.tolist()),
            links,
            int(sends[k:-1].sum()),
            paired_f,
            paired_b,
        )

    a_forms, b_forms = [], []
    for stage, order in enumerate(orders):
        at_chunk = np.array([position[(chunk, stage)] for chunk in range(chunks)])
        op_chunk = np.array([op.chunk for op in order], dtype=np.int64)
        at = at_chunk[op_chunk]
        forward_op = np.array([op.kind == "F" for op in order], dtype=bool)
        # an op sends when the next cell along its direction (up for a forward, down for a backward) is on another stage
        up = np.concatenate((crossing, [0]))[at]
        down = np.concatenate(([0], crossing))[at]
        sends = np.where(forward_op, up, down)
        # for each chunk the stage's first backward (A) and first forward (B): A_s and B_s of the docstring,
        # and the same chains taken from the other chunks' first ops (np.unique: each key's first index)
        _, first_of = np.unique(op_chunk * 2 + forward_op, return_index=True)
        firsts = {(bool(forward_op[i]), int(i)) for i in first_of}
        # the counts per cell of the ops from each form's start on, summed segment by segment from the end
        # (integers, so the same floats as counting each suffix alone)
        starts = sorted({k if is_forward else k + 1 for is_forward, k in firsts}, reverse=True)
        suffix: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        forwards, backwards, end = np.zeros(count), np.zeros(count), len(order)
        for start in starts:
            segment, segment_forward = at[start:end], forward_op[start:end]
            forwards = forwards + np.bincount(segment[segment_forward], minlength=count)
            backwards = backwards + np.bincount(segment[~segment_forward], minlength=count)
            suffix[start], end = (forwards, backwards), start
        for is_forward, forms_list in ((False, a_forms), (True, b_forms)):
            for index in sorted(k for kind, k in firsts if kind == is_forward):
                found = form(stage, order, at, forward_op, sends, index, suffix)
                if found is not None:
                    forms_list.append(found)
    forms = tuple(a_forms + b_forms)
    return ScheduleForms(name, stages, chunks, micro_batches, cells, forms, len(a_forms), group, combined)


@lru_cache(maxsize=512)
def _vectors(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None, combined: bool = False
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    if combined:  # between the combined 1F1B's steps, as the balancer's memory rows (`run_in_flight_vectors`)
        found = combined_in_flight_vectors(stages, chunks, micro_batches, schedule, group)
    else:
        found = in_flight_vectors(schedule, stages, chunks, micro_batches, group)
    return tuple(tuple(v) for v in found)


@dataclass(frozen=True)
class Kind:
    """One distinct body layer kind: how many layers, their times (ms) and the balancer's MB per option."""

    name: str
    count: int
    forward_ms: dict[str, float]  # option -> forward of one micro-batch
    backward_ms: dict[str, float]  # option -> backward (recompute included)
    parameter_mb: float  # the description's memory_parameter: held once per layer
    activation_mb: dict[str, float]  # option -> MB per micro-batch in flight
    reduce_ms: float = 0.0  # its gradients' data-parallel reduction, bandwidth part (no per-bucket latency)
    # under Megatron-Core's combined 1F1B, option -> what a step may save of its forward and of its backward
    # (`screen.combined_slack_ms`; empty: nothing)
    forward_slack_ms: dict[str, float] = field(default_factory=dict)
    backward_slack_ms: dict[str, float] = field(default_factory=dict)

    def slack(self, option: str) -> tuple[float, float]:
        """(forward, backward) slack of one option (0 outside the combined 1F1B)."""
        return self.forward_slack_ms.get(option, 0.0), self.backward_slack_ms.get(option, 0.0)


@dataclass(frozen=True)
class Ends:
    """The head (in the first cell along the model) and the tail (in the last): times and MB held."""

    head_forward_ms: float
    head_backward_ms: float
    head_mb: float
    tail_forward_ms: float
    tail_backward_ms: float
    tail_mb: float
    head_reduce_ms: float = 0.0
    tail_reduce_ms: float = 0.0
    cell_forward_ms: float = 0.0  # what every cell's forward takes beyond its layers (exposed FSDP gathers)
    cell_backward_ms: float = 0.0
    tail_forward_slack_ms: float = 0.0  # what a combined 1F1B step may save of the tail (its MTP layers)
    tail_backward_slack_ms: float = 0.0


def quick_bound(
    forms: ScheduleForms, kinds: Sequence[Kind], ends: Ends, transfer_ms: float = 0.0, blocking: bool = True
) -> float:
    """Milliseconds no plan's schedule beats: the best of the two families' uniform averages, each
    layer at its cheapest cell and option (module docstring). No memory limit."""
    best = 0.0
    head, tail = 0, len(forms.cells) - 1
    for family in ("A", "B"):
        if not forms.family(family):
            continue  # the combined 1F1B has no A forms
        forward, backward, links, sends, paired_f, paired_b = _averages(
            forms.schedule, forms.stages, forms.chunks, forms.micro_batches, family, forms.group, forms.combined
        )
        total = transfer_ms * (links + (sends if blocking else 0.0))
        total += forward[head] * ends.head_forward_ms + backward[head] * ends.head_backward_ms
        total += forward[tail] * ends.tail_forward_ms + backward[tail] * ends.tail_backward_ms
        total -= paired_f[tail] * ends.tail_forward_slack_ms + paired_b[tail] * ends.tail_backward_slack_ms
        total += float(np.sum(forward)) * ends.cell_forward_ms + float(np.sum(backward)) * ends.cell_backward_ms
        for kind in kinds:
            if kind.forward_slack_ms or kind.backward_slack_ms:  # each option's slack goes with its times
                total += kind.count * min(
                    float(
                        np.min(
                            forward * kind.forward_ms[o]
                            + backward * t
                            - paired_f * kind.slack(o)[0]
                            - paired_b * kind.slack(o)[1]
                        )
                    )
                    for o, t in kind.backward_ms.items()
                )
                continue
            least_backward = min(kind.backward_ms.values())
            least_forward = min(kind.forward_ms.values())
            total += kind.count * float(np.min(forward * least_forward + backward * least_backward))
        best = max(best, float(total))
    return best


def stage_bound(
    forms: ScheduleForms,
    kinds: Sequence[Kind],
    ends: Ends,
    transfer_ms: float = 0.0,
    blocking: bool = True,
    room_mb: Sequence[float] | None = None,
    layer_mb: Sequence[Sequence[float]] | None = None,
) -> float:
    """Milliseconds no plan's schedule beats, layers being whole: each stage's own work comes in whole layers.

    Take for every stage s its form that counts all its own ops (its first forward's B form). Under any
    plan that form is at least a constant C_s — the transfers, the head and tail where they sit, and one
    layer at its cheapest in every cell on its chains that must hold one (every cell but the head's and the
    tail's) — plus, for every layer the stage holds, that layer's least coefficient-weighted time over the
    stage's cells and options, c_{s,k}. So T ≥ max_s (C_s + Σ_{layers on s} c_{s,k}). For a kind j, the
    layers whose c_{s,k} ≥ c_{s,j} on every stage (N_j of them) each take at least c_{s,j} of a stage;
    stage s has room for n of them only once T ≥ C_s + n·c_{s,j}, so T is at least the N_j-th smallest of
    those values over s and n ≥ 1. The largest over j is the bound.

    With *room_mb* (per stage, what its layers may use) and *layer_mb* (per stage and kind, the least a
    layer of the kind holds there), stage s has room for at most room_s / (the lightest of those layers)
    of them, so n stops there; when all stages together cannot hold the N_j, no plan fits (infinity).
    """
    if not kinds:
        return 0.0
    chosen = _stage_forms(forms.schedule, forms.stages, forms.chunks, forms.micro_batches, forms.group, forms.combined)
    a, b, own, chain = chosen.forward, chosen.backward, chosen.own, chosen.chain  # [stage, cell]
    pa, pb = chosen.forward_paired, chosen.backward_paired
    count = len(forms.cells)
    options = list(kinds[0].backward_ms)
    if any(list(kind.backward_ms) != options for kind in kinds):  # kinds with other options (a head or tail)
        options = sorted({o for kind in kinds for o in kind.backward_ms})
    # an option a kind lacks (a head or tail runs NONE) counts as its slowest: the least over options stays
    forward = np.array([[kind.forward_ms.get(o, max(kind.forward_ms.values())) for o in options] for kind in kinds])
    backward = np.array([[kind.backward_ms.get(o, max(kind.backward_ms.values())) for o in options] for kind in kinds])
    # the combined 1F1B's slack goes with its option's times (an option a kind lacks: its slowest's, no slack)
    slack_f = np.array([[kind.slack(o)[0] if o in kind.backward_ms else 0.0 for o in options] for kind in kinds])
    slack_b = np.array([[kind.slack(o)[1] if o in kind.backward_ms else 0.0 for o in options] for kind in kinds])
    fixed_f = np.full(count, ends.cell_forward_ms)
    fixed_b = np.full(count, ends.cell_backward_ms)
    fixed_f[0] += ends.head_forward_ms
    fixed_b[0] += ends.head_backward_ms
    fixed_f[-1] += ends.tail_forward_ms
    fixed_b[-1] += ends.tail_backward_ms
    # [stage, cell, kind]: one layer's least time in the stage's form over its options
    timed = a[:, :, None, None] * forward + b[:, :, None, None] * backward
    if forms.combined:
        timed = timed - pa[:, :, None, None] * slack_f - pb[:, :, None, None] * slack_b
    cheapest = np.min(timed, axis=3)
    constant = transfer_ms * chosen.transfers(blocking) + a @ fixed_f + b @ fixed_b
    constant -= pa[:, -1] * ends.tail_forward_slack_ms + pb[:, -1] * ends.tail_backward_slack_ms
    least = np.min(cheapest, axis=2)  # [stage, cell]: the least layer
    if forms.combined and np.any(cheapest < 0):
        # a layer the combined 1F1B's slack takes below zero (slack above its times) may sit in any cell: each
        # layer off the stage adds at least its least over the other cells, if below zero, and a chain cell
        # counts its one layer only where no layer there is below zero
        off = np.min(np.where(own[:, :, None], np.inf, np.minimum(cheapest, 0.0)), axis=1)  # [stage, kind]
        constant += off @ np.array([kind.count for kind in kinds], dtype=float)
        least = np.where(least < 0, 0.0, least)
    constant += np.where(chain, least, 0.0).sum(axis=1)
    cost = np.min(np.where(own[:, :, None], cheapest, np.inf), axis=1)  # [stage, kind]
    counts = np.array([kind.count for kind in kinds])
    if forms.combined and np.any(cost < 0):  # likewise on the stage: every layer's part below zero, at most all
        constant += np.minimum(cost, 0.0) @ counts.astype(float)
        cost = np.maximum(cost, 0.0)
    mb = None if room_mb is None or layer_mb is None else np.asarray(layer_mb, dtype=float)
    best = 0.0
    for j in range(len(kinds)):
        size = cost[:, j]
        if not np.all(size > 0):
            continue
        heavier = np.all(cost >= size[:, None], axis=0)
        needed = int(counts[heavier].sum())
        # the needed-th smallest of C_s + n·size_s over stages s and n = 1..needed (..room, with memory)
        layers = np.arange(1, needed + 1)[None, :]
        values = constant[:, None] + size[:, None] * layers
        if mb is not None:
            lightest = np.min(mb[:, heavier], axis=1)
            if np.all(lightest > 0):
                room = np.floor(np.maximum(np.asarray(room_mb, dtype=float), 0.0) / lightest * (1 + 1e-9))
                values = np.where(layers <= room[:, None], values, np.inf)
        best = max(best, float(np.partition(values.ravel(), needed - 1)[needed - 1]))
    return best


@dataclass(frozen=True)
class _StageForms:
    """Per stage, its B form counting the most of its own ops, as arrays [stage, cell]; which cells are the
    stage's own, and which others its chains pass that must hold a layer (all but the head's and tail's)."""

    forward: np.ndarray
    backward: np.ndarray
    own: np.ndarray
    chain: np.ndarray
    links: np.ndarray
    sends: np.ndarray
    forward_paired: np.ndarray  # the combined 1F1B's steps along the forms (`Form.forward_paired`; zeros elsewhere)
    backward_paired: np.ndarray

    def transfers(self, blocking: bool) -> np.ndarray:
        return self.links + (self.sends if blocking else 0)


@lru_cache(maxsize=512)
def _stage_forms(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None, combined: bool = False
) -> _StageForms:
    forms = schedule_forms(schedule, stages, chunks, micro_batches, group, combined)
    count = len(forms.cells)
    own = np.array([[cell_stage == stage for _, cell_stage in forms.cells] for stage in range(stages)])
    chosen = []
    for stage in range(stages):
        candidates = [form for form in forms.family("B") if form.stage == stage]
        chosen.append(
            max(candidates, key=lambda f: float(np.sum((np.array(f.forward) + np.array(f.backward))[own[stage]])))
        )
    forward = np.array([form.forward for form in chosen])
    backward = np.array([form.backward for form in chosen])
    must = np.ones(count, dtype=bool)
    must[0] = must[-1] = False  # the head's and the tail's cells may hold no body layer
    chain = must[None, :] & ~own & ((forward > 0) | (backward > 0))
    links = np.array([form.links for form in chosen], dtype=float)
    sends = np.array([form.sends for form in chosen], dtype=float)
    paired_f = np.array([form.forward_paired or np.zeros(count) for form in chosen], dtype=float)
    paired_b = np.array([form.backward_paired or np.zeros(count) for form in chosen], dtype=float)
    return _StageForms(forward, backward, own, chain, links, sends, paired_f, paired_b)


@lru_cache(maxsize=1024)
def _averages(
    schedule: str,
    stages: int,
    chunks: int,
    micro_batches: int,
    family: str,
    group: int | None = None,
    combined: bool = False,
) -> tuple[np.ndarray, np.ndarray, float, float, np.ndarray, np.ndarray]:
    """The family's forms averaged: coefficients per cell, links and sends, the combined 1F1B's paired counts."""
    chosen = schedule_forms(schedule, stages, chunks, micro_batches, group, combined).family(family)
    count = len(chosen[0].forward)
    return (
        np.mean([form.forward for form in chosen], axis=0),
        np.mean([form.backward for form in chosen], axis=0),
        float(np.mean([form.links for form in chosen])),
        float(np.mean([form.sends for form in chosen])),
        np.mean([form.forward_paired or np.zeros(count) for form in chosen], axis=0),
        np.mean([form.backward_paired or np.zeros(count) for form in chosen], axis=0),
    )


@dataclass(frozen=True)
class Relaxation:
    """The relaxed balancing program's answer: "optimal" (or "node_limit", the integer program's proven
    bound so far) with its value (ms), "infeasible", or "unknown" / "iteration_limit" when HiGHS gave no
    answer to trust (value 0: no bound beyond the one the strategy had)."""

    status: str
    value_ms: float | None


def lp_bound(
    forms: ScheduleForms,
    kinds: Sequence[Kind],
    ends: Ends,
    memory_mb: float,
    constant_mb: float,
    transfer_ms: float = 0.0,
    blocking: bool = True,
    whole_layers: bool = False,
    time_limit: float | None = None,
    reduction_floor_ms: float | None = None,
    whole_stages: bool = False,
    nodes: int | None = None,
    schedule_floor_ms: float = 0.0,
) -> Relaxation:
    """The linear relaxation of the balancer's program under the schedule forms (module docstring).

    Columns: x[k, o, c] layers of kind k under option o in cell c; per cell its forward F_c and
    backward B_c; prefix sums of F and B along the cells; T. Rows: F_c and B_c as their layers' times
    (head and tail included), the prefix sums, T ≥ every form, every stage's memory at every
    in-flight vector, every kind's layers placed, every cell without head or tail non-empty.
    """
    cells = forms.cells
    count = len(cells)
    position = {cell: i for i, cell in enumerate(cells)}
    columns: list[tuple[float, float]] = []

    def column(lower: float = 0.0, upper: float = highs.INF) -> int:
        columns.append((lower, upper))
        return len(columns) - 1

    x: dict[tuple[int, str, int], int] = {}
    for k, kind in enumerate(kinds):
        for option in kind.backward_ms:
            for c in range(count):
                x[(k, option, c)] = column()
    forward = [column() for _ in range(count)]
    backward = [column() for _ in range(count)]
    forward_prefix = [column() for _ in range(count + 1)]
    backward_prefix = [column() for _ in range(count + 1)]
    schedule_top = column(
        schedule_floor_ms
    )  # a bound proven otherwise (`stage_bound`): any plan's schedule is above it
    rows: list[tuple[float, float, dict[int, float]]] = []
    fixed_forward = [ends.cell_forward_ms] * count
    fixed_backward = [ends.cell_backward_ms] * count
    fixed_forward[0] += ends.head_forward_ms
    fixed_backward[0] += ends.head_backward_ms
    fixed_forward[-1] += ends.tail_forward_ms
    fixed_backward[-1] += ends.tail_backward_ms
    for c in range(count):
        f_terms = {forward[c]: 1.0}
        b_terms = {backward[c]: 1.0}
        for k, kind in enumerate(kinds):
            for option in kind.backward_ms:
                f_terms[x[(k, option, c)]] = -kind.forward_ms[option]
                b_terms[x[(k, option, c)]] = -kind.backward_ms[option]
        rows.append((fixed_forward[c], fixed_forward[c], f_terms))
        rows.append((fixed_backward[c], fixed_backward[c], b_terms))
    rows.append((0.0, 0.0, {forward_prefix[0]: 1.0}))
    rows.append((0.0, 0.0, {backward_prefix[0]: 1.0}))
    for i in range(count):
        rows.append((0.0, 0.0, {forward_prefix[i + 1]: 1.0, forward_prefix[i]: -1.0, forward[i]: -1.0}))
        rows.append((0.0, 0.0, {backward_prefix[i + 1]: 1.0, backward_prefix[i]: -1.0, backward[i]: -1.0}))
    assert backward[0] == forward[-1] + 1 and schedule_top == forward[0] + 4 * count + 2  # `_forms_terms`'s layout
    slack_f: list[int] = []  # under the combined 1F1B, what a step may save of each cell's forward and backward
    slack_b: list[int] = []
    if forms.combined:
        slack_f = [column() for _ in range(count)]
        slack_b = [column() for _ in range(count)]
        for c, (fixed_sf, fixed_sb) in enumerate(
            [(0.0, 0.0)] * (count - 1) + [(ends.tail_forward_slack_ms, ends.tail_backward_slack_ms)]
        ):
            f_terms = {slack_f[c]: 1.0}
            b_terms = {slack_b[c]: 1.0}
            for k, kind in enumerate(kinds):
                for option in kind.backward_ms:
                    f_terms[x[(k, option, c)]] = -kind.slack(option)[0]
                    b_terms[x[(k, option, c)]] = -kind.slack(option)[1]
            rows.append((fixed_sf, fixed_sf, f_terms))
            rows.append((fixed_sb, fixed_sb, b_terms))
    for form, terms in zip(forms.forms, _forms_terms(forms, forward[0]), strict=True):
        row = dict(terms)
        if forms.combined:  # T − form ≥ …: the form's slack taken off comes back with a plus
            for c in range(count):
                if form.forward_paired[c]:
                    row[slack_f[c]] = form.forward_paired[c]
                if form.backward_paired[c]:
                    row[slack_b[c]] = form.backward_paired[c]
        rows.append((transfer_ms * form.transfers(blocking), highs.INF, row))
    head_stage, tail_stage = cells[0][1], cells[-1][1]
    for stage in range(forms.stages):
        held = (
            constant_mb
            + (ends.head_mb if stage == head_stage else 0.0)
            + (ends.tail_mb if stage == tail_stage else 0.0)
        )
        for vector in forms.vectors[stage]:
            terms: dict[int, float] = {}
            for chunk, in_flight in enumerate(vector):
                c = position[(chunk, stage)]
                for k, kind in enumerate(kinds):
                    for option in kind.backward_ms:
                        # in units of the device, as the balancer writes its rows, for HiGHS's tolerances
                        terms[x[(k, option, c)]] = (
                            kind.parameter_mb + in_flight * kind.activation_mb[option]
                        ) / memory_mb
            rows.append((-highs.INF, (1 + LP_MARGIN) - held / memory_mb, terms))
    for k, kind in enumerate(kinds):
        placed = {x[(k, option, c)]: 1.0 for option in kind.backward_ms for c in range(count)}
        rows.append((float(kind.count), float(kind.count), placed))
    for c in range(1, count - 1):
        rows.append(
            (1.0, highs.INF, {x[(k, option, c)]: 1.0 for k, kind in enumerate(kinds) for option in kind.backward_ms})
        )
    integers: list[int] = []
    if whole_layers:  # each cell holds whole layers of each kind (their options may still mix)
        for k, kind in enumerate(kinds):
            for c in range(count):
                whole = column()
                integers.append(whole)
                terms = {x[(k, option, c)]: 1.0 for option in kind.backward_ms}
                terms[whole] = -1.0
                rows.append((0.0, 0.0, terms))
    elif whole_stages:  # each stage holds whole layers of each kind (any plan does): a few integers, not one per cell
        for k, kind in enumerate(kinds):
            for stage in range(forms.stages):
                whole = column()
                integers.append(whole)
                terms = {
                    x[(k, option, c)]: 1.0
                    for c, (_, on) in enumerate(cells)
                    if on == stage
                    for option in kind.backward_ms
                }
                terms[whole] = -1.0
                rows.append((0.0, 0.0, terms))
    top = column()
    if reduction_floor_ms is None:
        rows.append((0.0, 0.0, {top: 1.0, schedule_top: -1.0}))
    else:
        # The gradient reduction's tail after the schedule (`reduction_tail`): at least the floor given
        # (the head's whole reduction), and at least the first stage's reductions less its last backward.
        tail = column(reduction_floor_ms)
        rows.append((0.0, 0.0, {top: 1.0, schedule_top: -1.0, tail: -1.0}))
        first_stage = [c for c, (_, stage) in enumerate(cells) if stage == 0]
        terms = {tail: 1.0}
        for c in first_stage:
            for k, kind in enumerate(kinds):
                for option in kind.backward_ms:
                    terms[x[(k, option, c)]] = -(kind.reduce_ms - kind.backward_ms[option])
        held = ends.head_reduce_ms - ends.head_backward_ms
        if cells[-1][1] == 0:
            held += ends.tail_reduce_ms - ends.tail_backward_ms
        rows.append((held, highs.INF, terms))
    return _solve(columns, rows, top, integers, time_limit, nodes)


# `_forms_terms`'s rows, by the forms (held, so that their id is not reused) and the first cell column
_FORMS_TERMS: dict[tuple[int, int], tuple[ScheduleForms, tuple[dict[int, float], ...]]] = {}
_FORMS_TERMS_HELD = 64


def _forms_terms(forms: ScheduleForms, first: int) -> tuple[dict[int, float], ...]:
    """Every form's row terms (`_form_terms`) where the cells' columns start at *first*: `lp_bound` lays out
    forward, backward, their prefix sums and the schedule's top one after another from there, so the rows
    depend on the forms and *first* alone. Built once per shape and layout; each strategy copies them (every
    strategy of a spec has the same kinds' options, so the same *first*): the same rows, in the same order."""
    key = (id(forms), first)
    held = _FORMS_TERMS.get(key)
    if held is not None and held[0] is forms:
        return held[1]
    count = len(forms.cells)
    forward = list(range(first, first + count))
    backward = list(range(first + count, first + 2 * count))
    forward_prefix = list(range(first + 2 * count, first + 3 * count + 1))
    backward_prefix = list(range(first + 3 * count + 1, first + 4 * count + 2))
    top = first + 4 * count + 2
    terms = tuple(_form_terms(form, forward, backward, forward_prefix, backward_prefix, top) for form in forms.forms)
    if len(_FORMS_TERMS) >= _FORMS_TERMS_HELD:
        _FORMS_TERMS.pop(next(iter(_FORMS_TERMS)))
    _FORMS_TERMS[key] = (forms, terms)
    return terms


def _form_terms(form: Form, forward, backward, forward_prefix, backward_prefix, top) -> dict[int, float]:
    """T − (the form) ≥ 0, with the form's runs of ones along the cells written as prefix sums."""
    terms: dict[int, float] = {top: 1.0}
    count = len(forward)

    def add(index: int, value: float) -> None:
        terms[index] = terms.get(index, 0.0) + value

    for coefficients, cell_columns, prefix in (
        (form.forward, forward, forward_prefix),
        (form.backward, backward, backward_prefix),
    ):
        ones = [1.0 if value >= 1.0 else 0.0 for value in coefficients]  # the chains' runs
        # a run of ones from i to j−1 is prefix[j] − prefix[i]
        i = 0
        while i < count:
            if ones[i]:
                j = i
                while j < count and ones[j]:
                    j += 1
                add(prefix[j], -1.0)
                add(prefix[i], 1.0)
                i = j
            else:
                i += 1
        for c, value in enumerate(coefficients):
            rest = value - ones[c]
            if rest:
                add(cell_columns[c], -rest)
    return {index: value for index, value in terms.items() if value}


def _solve(
    columns: list[tuple[float, float]],
    rows: list[tuple[float, float, dict[int, float]]],
    top: int,
    integers: Sequence[int] = (),
    time_limit: float | None = None,
    nodes: int | None = None,
) -> Relaxation:
    solver = highs.new_solver(time_limit, nodes)
    solver.setOptionValue("presolve", "on")
    n = len(columns)
    cost = np.zeros(n)
    cost[top] = 1.0
    lower = np.array([c[0] for c in columns], dtype=float)
    upper = np.array([c[1] for c in columns], dtype=float)
    empty = np.array([], dtype=np.int32)
    solver.addCols(n, cost, lower, upper, 0, empty, empty, np.array([], dtype=float))
    starts, indices, values, row_lower, row_upper = [], [], [], [], []
    for low, high, terms in rows:
        starts.append(len(indices))
        indices.extend(terms)
        values.extend(terms.values())
        row_lower.append(low)
        row_upper.append(high)
    solver.addRows(
        len(rows),
        np.array(row_lower, dtype=float),
        np.array(row_upper, dtype=float),
        len(indices),
        np.array(starts, dtype=np.int32),
        np.array(indices, dtype=np.int32),
        np.array(values, dtype=float),
    )
    if integers:
        solver.changeColsIntegrality(
            len(integers),
            np.array(integers, dtype=np.int32),
            np.array([highspy.HighsVarType.kInteger] * len(integers)),
        )
    if not integers:  # the relaxation ends on its iterations; the integer program on its nodes
        iterations = LP_ITERATIONS_PER_ROW * (n + len(rows))
        solver.setOptionValue("simplex_iteration_limit", iterations)
        solver.setOptionValue("ipm_iteration_limit", iterations)
    solver.run()
    status = solver.getModelStatus()
    if status == highspy.HighsModelStatus.kIterationLimit:
        # cut short: the simplex's objective there bounds nothing; the strategy keeps its proven bound
        return Relaxation("iteration_limit", 0.0)
    if status not in _ANSWERS:  # a numerical failure: try once more from an interior point
        solver.setOptionValue("solver", "ipm")
        solver.clearSolver()
        solver.run()
        status = solver.getModelStatus()
    if integers and status in _CUT_SHORT:  # the proven bound so far
        return Relaxation("node_limit", float(solver.getInfo().mip_dual_bound) * (1 - LP_MARGIN))
    if status == highspy.HighsModelStatus.kOptimal:
        # HiGHS stops within its tolerances (1e-7): give that much back so the bound stays below
        return Relaxation("optimal", float(solver.getInfo().objective_function_value) * (1 - LP_MARGIN))
    if status == highspy.HighsModelStatus.kInfeasible:
        return Relaxation("infeasible", None)
    # no answer to trust: the bound stays as it was (0 adds nothing), and nothing is claimed infeasible
    return Relaxation("unknown", 0.0)


# an integer program stopped by its node limit (or an opt-in wall-clock limit): its dual bound holds
_CUT_SHORT = (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kSolutionLimit)
_ANSWERS = (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kInfeasible, *_CUT_SHORT)
