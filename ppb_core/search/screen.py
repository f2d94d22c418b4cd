"""Screening: each valid strategy's layers as the balancer and the time model see them, a quick bound on
its iteration and a quick memory verdict.

For every distinct layer kind of a strategy the screen takes what the balancer would read — the
description's MB (`ppb_core.payload.describe.describe_layer`: parameters held once, activations
per micro-batch in flight under each option) and the constant MB every stage is charged (the
largest backward working set, `ppb_core.memory.run_working_set_bytes`, as `run_problem` charges
it) — and what `run_iteration` would price, each option's forward and backward milliseconds from
`ppb_core.timing.TimeModel`. Both models are evaluated once per distinct kind, and shared between
strategies that cannot differ in them:

* layer times depend on tp, sp, cp, ep, etp, the micro-batch size and the recompute setting (the
  time model's `Geometry` and `Links`), on whether the schedule is DualPipeV (its paired
  micro-batches hide the expert all-to-alls), on Megatron-FSDP, and on whether dp and the micro-batch
  count pass 1, not on pp, vpp, another schedule or ZeRO: one `TimeModel` per `time_key`;
* layer memory depends on all of those and dp, pp, ZeRO/FSDP and the micro-batch count, not on vpp
  or the schedule: one `MemoryModel` per `memory_key`.

tests/test_search_screen.py checks both on strategies drawn at random against models built for
each strategy alone. The verdicts: `quick_bound` (`ppb_core.search.bound`, from the times alone) and `fits_somewhere`,
a necessary condition for any plan to fit (each stage can hold its ends and at least one layer
per cell, and the stages together can hold every layer at its least memory).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel, run_working_set_bytes
from ppb_core.model.kinds import TailKind, standalone_parts
from ppb_core.model.switches import MEMORY_KEY, OPTIONS, LayerType, option_state
from ppb_core.model.walk import BODY, HEAD, TAIL, KindSlot, Layer, LayerWalk, walk
from ppb_core.payload.describe import describe_layer, many_in_flight
from ppb_core.search.bound import Ends, Kind, ScheduleForms, quick_bound, schedule_forms, stage_bound
from ppb_core.search.enumerate import Strategy
from ppb_core.timing.combined import Segments, layer_segments, mtp_segments
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from ppb_core.timing.iteration import (  # the terms run_iteration charges, taken from it, never restated
    _data_links,
    _dp_collective,
    _embedding_sync,
    _optimizer_seconds,
    framework_rules,
    p2p_seconds,
)
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import MB

NO_ROOM = "memory: no plan fits (a stage cannot hold its ends and a layer per cell, or all stages every layer)"


def time_key(strategy: Strategy) -> tuple:
    """What the layer times of a strategy depend on (beside the spec): under DualPipeV each expert
    collective (over ep·etp > 1) hides behind the paired micro-batch's compute (`TimeModel._dualpipe_share`),
    so its layer times are its own (shared with 1F1B they made a DualPipeV strategy's bound its 1F1B
    twin's, above its own time); under the combined 1F1B the figures charge each backward less its slack
    (`combined_slack_ms`); under Megatron-FSDP each unit's gathers and reductions are host launches of the
    layer's (`launches.fsdp_unit_launches`), so FSDP's layer times are not its ZeRO twin's. Two things read
    of dp and the micro-batch count whether they pass 1: the router's global aux loss launches its
    all-reduce where tp·dp·cp > 1 (`router._aux`), and MindFormers adds each weight gradient into its
    accumulation buffer over more than one micro-batch (`TimeModel._accumulate_bytes`)."""
    s = strategy
    dualpipe = s.schedule == "dualpipev" and s.ep * s.etp > 1
    return (
        s.tp,
        s.sequence_parallel,
        s.cp,
        s.cp_variant,
        s.ep,
        s.etp,
        s.micro_batch_size,
        s.recompute,
        dualpipe,
        s.ep_overlap,
        s.fsdp,
        s.dp > 1,
        s.micro_batches > 1,
    )


def memory_key(strategy: Strategy) -> tuple:
    """What the layer memory of a strategy depends on (beside the spec): all but vpp and the schedule."""
    s = strategy
    return (*time_key(s), s.dp, s.pp, s.zero, s.micro_batches)


@dataclass(frozen=True)
class Figures:
    """A strategy's layers for the bounds: body kinds, the ends, and the memory the balancer allows."""

    kinds: tuple[Kind, ...]  # body kinds, plus any head or tail that is not the first head or last tail
    ends: Ends
    constant_mb: float  # every stage holds this besides its layers (run_problem's constant memory)
    memory_mb: float  # the device memory less reserved_mb
    transfer_ms: float  # one pipeline transfer (P2P) between two stages, the least of the models'
    beyond_ms: float  # what every plan pays after its schedule (`beyond_schedule_ms`)
    reduction_floor_ms: float | None  # the least exposed gradient reduction (None: no reduction to wait for)
    per_cell_ms: float = 0.0  # paid once per (chunk, stage) cell (FSDP gathering once per iteration)
    with_memory: bool = True  # False: times alone, the MB left at 0 (what the quick bound reads)
    # Megatron-Core's standalone MTP (`balance.mtp_apart`): the figures of the MTP layers apart from the loss
    # (`apart_figures`); its last `free_kinds` kinds are no body layer and fill no cell of their own
    apart: Figures | None = None
    free_kinds: int = 0


@dataclass
class FigureCache:
    """Time and memory models shared by the strategies that cannot differ in them (module docstring)."""

    times: dict[tuple, TimeModel] = field(default_factory=dict)
    memories: dict[tuple, MemoryModel] = field(default_factory=dict)
    figures: dict[tuple, Figures] = field(default_factory=dict)
    timings: dict[tuple, Figures] = field(default_factory=dict)
    slots: dict[tuple, list[KindSlot]] = field(default_factory=dict)

    def kinds(self, run: RunConfig) -> list[KindSlot]:
        """The run's distinct (model, node, kind) with counts; they change only with the vocabulary padding."""
        key = tuple(run.vocab_size(name) for name in run.model_names)
        if key not in self.slots:
            self.slots[key] = walk(run, fused_tail=True).distinct()  # as the balancer describes them
        return self.slots[key]

    def models(self, strategy: Strategy, run: RunConfig) -> tuple[MemoryModel, TimeModel]:
        times = self.times.get(time_key(strategy))
        if times is None:
            times = self.times[time_key(strategy)] = TimeModel(run)
        memory = self.memories.get(memory_key(strategy))
        if memory is None:
            memory = self.memories[memory_key(strategy)] = MemoryModel(run)
        return memory, times

    def of(self, strategy: Strategy, run: RunConfig) -> Figures:
        """The strategy's figures, memory included."""
        key = memory_key(strategy)
        found = self.figures.get(key)
        if found is None:
            found = self.figures[key] = figures(run, *self.models(strategy, run), self.kinds(run))
        return found

    def timing(self, strategy: Strategy, run: RunConfig) -> Figures:
        """The strategy's figures without the descriptions' memory: what the quick bound needs."""
        key = memory_key(strategy)
        found = self.figures.get(key) or self.timings.get(key)
        if found is None:
            found = self.timings[key] = figures(run, *self.models(strategy, run), self.kinds(run), with_memory=False)
        return found


def _layer(slot: KindSlot, index: int) -> Layer:
    return Layer(slot.model_name, slot.node, slot.kind, index, 0, 0)


def figures(
    run: RunConfig, memory: MemoryModel, times: TimeModel, slots: Sequence[KindSlot], with_memory: bool = True
) -> Figures:
    """A run's kinds as the balancer's descriptions state their memory and the time model their times
    (without *with_memory*, the times alone: the memory model's activations are the costly part)."""
    many = many_in_flight(run.parallel.pp, run.training.micro_batches)
    links = _data_links(run, times.links, memory)
    heads = [slot for slot in slots if slot.node == HEAD]
    tails = [slot for slot in slots if slot.node == TAIL]
    kinds: list[Kind] = []
    held = {HEAD: 0.0, TAIL: 0.0}
    ends: dict[str, tuple[float, float, float]] = {}
    combined = run.parallel.overlap_moe_expert_parallel_comm
    # the options a plan may give a body layer: not FULL under the combined 1F1B, which Megatron-Core refuses
    # (transformer_config.py `__post_init__`, d98e8a64) and the balancer withdraws (`problem.run_problem`); with
    # it the relaxed program placed layers at FULL's few MB where no plan can, and found room where none is
    options = tuple(o for o in OPTIONS if not (combined and o == "FULL"))
    # per kind name: what a combined step may save of its forward and backward (`combined_slack_ms`)
    slack: dict[str, Slack] = {}
    if combined:
        slack = _chosen_slack(
            run,
            slots,
            {
                f"{slot.model_name}:{slot.kind.name}": combined_slack_ms(run, memory, times, _layer(slot, 0))
                for slot in slots
            },
        )
    for slot in slots:
        layer = _layer(slot, 0)
        desc = (
            describe_layer(layer, memory, times, many=many, configured=run.switches(slot.model_name))
            if with_memory
            else dict.fromkeys(("memory_parameter", *MEMORY_KEY.values()), 0)
        )
        option_times = times.option_times(layer)
        reduce_ms = 1e3 * reduction_bandwidth_s(run, memory, links, layer)
        name = f"{slot.model_name}:{slot.kind.name}"
        if slot.node == BODY:
            kinds.append(
                Kind(
                    name=name,
                    count=slot.count,
                    forward_ms={o: option_times[o][0] for o in options},
                    backward_ms={o: option_times[o][1] for o in options},
                    parameter_mb=float(desc["memory_parameter"]),
                    activation_mb={o: float(desc[MEMORY_KEY[o]]) for o in options},
                    reduce_ms=reduce_ms,
                )
            )
            continue
        # the balancer charges every head on the head's stage and every tail on the tail's
        held[slot.node] += desc["memory_parameter"] * slot.count
        forward, backward = option_times["NONE"]
        others = slot.count
        if slot is (heads[0] if slot.node == HEAD else tails[-1]):  # the first head, the last tail
            ends[slot.node] = (forward, backward, reduce_ms)
            others -= 1
        if others:  # another sub-model's head or tail: its time lands in whichever cell the plan gives it
            kinds.append(Kind(name, others, {"NONE": forward}, {"NONE": backward}, 0.0, {"NONE": 0.0}, reduce_ms))
    distinct = LayerWalk(run.parallel.pp, run.parallel.vpp, tuple(_layer(slot, 0) for slot in slots))
    constant_mb = math.ceil(run_working_set_bytes(run, memory, distinct) / MB) if with_memory else 0
    transfer_ms = 0.0
    if run.parallel.pp > 1:
        transfer_ms = 1e3 * min(p2p_seconds(run, links, _layer(slot, 0)) for slot in slots)
    head = ends.get(HEAD, (0.0, 0.0, 0.0))
    tail = ends.get(TAIL, (0.0, 0.0, 0.0))
    cell_forward, cell_backward, per_cell = fsdp_floor_s(run, memory, links, slots)
    # ZeRO-3 / FSDP: each layer's collectives wait behind the previous layer's compute, so a cell of L layers
    # takes at least w + Σ_{l<L} max(t_l, w) + t_L ≥ Σ_l max(t_l, w) + min(t_L, w), w the least collective
    # every layer waits for (`fsdp_floor_s`) and t its forward (backward): each body layer's time is at
    # least w, the cell's extra min(t, w) (in the backward the last reduce-scatter makes up for the first
    # layer's, which has none before it).
    if cell_forward > 0.0 or cell_backward > 0.0:
        wait_f, wait_b = 1e3 * cell_forward, 1e3 * cell_backward
        least_f = min([*(min(kind.forward_ms.values()) for kind in kinds), *(end[0] for end in ends.values())])
        least_b = min([*(min(kind.backward_ms.values()) for kind in kinds), *(end[1] for end in ends.values())])
        kinds = [
            replace(
                kind,
                forward_ms={o: max(t, wait_f) for o, t in kind.forward_ms.items()},
                backward_ms={o: max(t, wait_b) for o, t in kind.backward_ms.items()},
            )
            for kind in kinds
        ]
        cell_forward, cell_backward = min(least_f, wait_f) / 1e3, min(least_b, wait_b) / 1e3
    tail_slack = (0.0, 0.0)
    if combined:  # beside the FSDP floor, which holds of the times the combined step then shortens
        kinds = [_with_slack(kind, slack[kind.name]) for kind in kinds]
        if tails:
            forward, backward = slack[f"{tails[-1].model_name}:{tails[-1].kind.name}"]
            tail_slack = (forward["NONE"], backward["NONE"])
    fused = Figures(
        kinds=tuple(kinds),
        ends=Ends(
            head[0],
            head[1],
            held[HEAD],
            tail[0],
            tail[1],
            held[TAIL],
            head[2],
            tail[2],
            1e3 * cell_forward,
            1e3 * cell_backward,
            *tail_slack,
        ),
        constant_mb=float(constant_mb),
        memory_mb=float(run.device.usable_mb),
        transfer_ms=transfer_ms,
        beyond_ms=beyond_schedule_ms(run, memory, times, slots),
        per_cell_ms=1e3 * per_cell,
        reduction_floor_ms=reduction_floor_ms(run, memory, links, _layer(heads[0], -1)),
        with_memory=with_memory,
    )
    tail_slot = tails[-1] if tails else None
    if tail_slot is None or not _apart_runs(run, tail_slot):
        return fused
    apart = apart_figures(run, fused, tail_slot, memory, times, links, many, with_memory)
    if combined:  # the MTP layers apart keep their slack (the output layer alone has none)
        free = _with_slack(apart.kinds[-1], ({"NONE": tail_slack[0]}, {"NONE": tail_slack[1]}))
        apart = replace(
            apart,
            kinds=(*apart.kinds[:-1], free),
            ends=replace(apart.ends, tail_forward_slack_ms=0.0, tail_backward_slack_ms=0.0),
        )
    return replace(fused, apart=apart)


# what a combined step may save of a layer: option -> forward slack, option -> backward slack (ms)
Slack = tuple[dict[str, float], dict[str, float]]
NO_SLACK: Slack = (dict.fromkeys(OPTIONS, 0.0), dict.fromkeys(OPTIONS, 0.0))


def _with_slack(kind: Kind, slack: Slack) -> Kind:
    forward, backward = slack
    return replace(
        kind,
        forward_slack_ms={o: forward.get(o, forward["NONE"]) for o in kind.backward_ms},
        backward_slack_ms={o: backward.get(o, backward["NONE"]) for o in kind.backward_ms},
    )


def _chosen_slack(
    run: RunConfig, slots: Sequence[KindSlot], slacks: dict[str, dict[str, Slack | None]]
) -> dict[str, Slack]:
    """Each kind's slack (`combined_slack_ms`) under one of its bounds of a step's saving, for every layer alike:
    a step saves at most its layers' slack beyond the compute stream, at most their slack beyond the comm stream,
    and at most their times beyond the host's launches of them (`iteration._combined_savings`), so the least in
    total of the three holds, taken for all (not layer by layer: the least of sums is not the sum of the
    leasts). The launches' needs every body layer launched by the host and no waits for offloaded reloads
    beyond the option times (which the step's times count, the screen's do not)."""
    if not slacks:
        return {}

    def total(family: str) -> float:
        found = 0.0
        for slot in slots:
            slack = slacks[f"{slot.model_name}:{slot.kind.name}"][family]
            found += slot.count * (slack[0]["NONE"] + slack[1]["NONE"]) if slack is not None else math.inf
        return found

    families = ["compute", "communication"]
    if not run.training.offload_modules:
        families.append("launch")
    best = min(families, key=total)
    return {name: found[best] or NO_SLACK for name, found in slacks.items()}


def combined_slack_ms(run: RunConfig, memory: MemoryModel, times: TimeModel, layer: Layer) -> dict[str, Slack | None]:
    """Per bound of a step's saving, the most Megatron-Core's combined 1F1B may save of the layer's forward and of its
    backward in a step, per option (ms). A step's saving is its layers' time alone less the step
    (`combined.step_saving`), plus the paired forwards' dispatcher waits, and the step is at least each of its two
    streams' work and the host's launches (`iteration._combined_savings`); so a step saves at most, summed over its
    forward layers and its backward layers:

    * "compute": what each part's time alone takes beyond its compute-stream work (the all-to-alls and host waits);
    * "communication": what it takes beyond its comm-stream work, the all-to-alls at their link time (when the
      all-to-alls outlast the compute, the comm stream holds the step: its layers save at most their compute);
    * "launch": what its times take beyond the host's launches of its kernels (None where the layer has none: a
      step of unlaunched layers is not held by the host).

    A TAIL's MTP layers are cut likewise (`combined.mtp_segments`); the launch cap counts body layers only, so a
    step of MTP layers alone saves up to their compute bound, which the TAIL keeps there. A HEAD runs alone."""
    delay = run.timing.delay_wgrad_compute

    def streams(segments: Segments) -> tuple[tuple[float, float], tuple[float, float]]:
        """(forward, backward) beyond the compute stream, and beyond the comm stream (seconds)."""
        computing_f = segments.pre_forward + segments.mlp_forward
        computing_b = segments.mlp_backward + segments.mlp_backward_dw + segments.pre_backward
        computing_b += segments.pre_backward_dw
        sending_f = segments.dispatch_forward + segments.combine_forward
        sending_b = segments.dispatch_backward + segments.combine_backward
        forward, backward = segments.forward_alone, segments.backward_alone
        return (
            (max(0.0, forward - computing_f), max(0.0, backward - computing_b)),
            (max(0.0, forward - sending_f), max(0.0, backward - sending_b)),
        )

    if layer.node == HEAD:
        return dict.fromkeys(("compute", "communication", "launch"), NO_SLACK)
    if layer.node == TAIL:
        parts = [streams(part) for part in mtp_segments(times, layer, LayerType.OUTPUT_LAYER, delay)]

        def tail(which: int) -> Slack:
            forward = 1e3 * sum(part[which][0] for part in parts)
            backward = 1e3 * sum(part[which][1] for part in parts)
            return dict.fromkeys(OPTIONS, forward), dict.fromkeys(OPTIONS, backward)

        return {"compute": tail(0), "communication": tail(1), "launch": tail(0)}
    found: dict[str, Slack] = {family: ({}, {}) for family in ("compute", "communication", "launch")}
    option_times = times.option_times(layer)
    launched = True
    for option in OPTIONS:
        state, switches = option_state(option, memory.configured_switches(layer.model_name))
        segments = layer_segments(times, layer, state, switches, delay_wgrad=delay)
        host = times.host(layer, state, switches)
        beyond_compute, beyond_comm = streams(segments)
        for family, (forward, backward) in (("compute", beyond_compute), ("communication", beyond_comm)):
            found[family][0][option] = 1e3 * (forward + host.dispatcher)
            found[family][1][option] = 1e3 * backward
        forward_ms, backward_ms = option_times[option]
        found["launch"][0][option] = max(0.0, forward_ms - 1e3 * host.launch_forward)
        found["launch"][1][option] = max(0.0, backward_ms - 1e3 * host.launch_backward)
        # a step's paired layers are capped by their launches only when some are launched (`_combined_savings`):
        # every layer launching both its forward and its backward keeps every step's pairs launched
        launched = launched and host.launch_forward > 0 and host.launch_backward > 0
    return {**found, "launch": found["launch"] if launched else None}


def _apart_runs(run: RunConfig, tail: KindSlot) -> bool:
    """Whether the balancer also solves the MTP layers apart from the loss (`mtp_apart.standalone_problem`:
    Megatron, MTP layers, PP ≥ 2, one model; DualPipeV is the strategy's, `placements` leaves it out)."""
    kind = tail.kind
    return (
        run.framework == "megatron"
        and run.parallel.pp >= 2
        and len(run.model_names) == 1
        and isinstance(kind, TailKind)
        and kind.mtp_layers > 0
    )


def apart_figures(
    run: RunConfig,
    fused: Figures,
    tail: KindSlot,
    memory: MemoryModel,
    times: TimeModel,
    links: Any,
    many: int,
    with_memory: bool,
) -> Figures:
    """The figures that bound every plan with the MTP layers apart from the loss (`balance.mtp_apart`): the
    tail is the loss's part (`kinds.standalone_parts`: output layer and every head's loss, its times and
    MB as `describe_mtp_apart` gives them), and the final norm and the MTP chunk one more kind placed in
    any cell at their times and reduction, with no MB and no cell of their own (the balancer's MTP cell
    may hold no body layer). The program over these can place them in the MTP cell among others: a
    relaxation of every apart plan, so its optimum bounds them. (Moving them off the last stage adds a
    stage to the embedding all-reduce, `iteration._embedding_sync`: the fused figures' `beyond_ms`
    stays below.)"""
    assert isinstance(tail.kind, TailKind)
    norm, mtp, output = (Layer(tail.model_name, TAIL, part, 0, 0, 0) for part in standalone_parts(tail.kind))
    out_forward, out_backward = times.option_times(output)["NONE"]
    parts = [times.option_times(layer)["NONE"] for layer in (norm, mtp)]
    held = 0.0
    if with_memory:
        described = describe_layer(output, memory, times, many=many, configured=run.switches(output.model_name))
        held = float(described["memory_parameter"]) * tail.count
    free = Kind(
        f"{tail.model_name}:mtp apart",
        1,
        {"NONE": sum(forward for forward, _ in parts)},
        {"NONE": sum(backward for _, backward in parts)},
        0.0,
        {"NONE": 0.0},
        1e3 * sum(reduction_bandwidth_s(run, memory, links, layer) for layer in (norm, mtp)),
    )
    ends = replace(
        fused.ends,
        tail_forward_ms=out_forward,
        tail_backward_ms=out_backward,
        tail_mb=held,
        tail_reduce_ms=1e3 * reduction_bandwidth_s(run, memory, links, output),
    )
    return replace(fused, kinds=(*fused.kinds, free), ends=ends, free_kinds=1)


def placements(strategy: Strategy, found: Figures) -> list[tuple[Figures, bool]]:
    """The figures of each place the balancer may run the MTP layers in (with the loss; apart, unless the
    strategy runs DualPipeV, which `mtp_apart.standalone_problem` leaves out), each with whether apart."""
    if found.apart is None or strategy.schedule == "dualpipev":
        return [(found, False)]
    return [(found, False), (found.apart, True)]


def _reduction_kind(memory: MemoryModel) -> str | None:
    """The data-parallel gradient reduction `run_iteration` charges after the backward (None: none,
    under FSDP or without data parallelism): reduce-scatter with a distributed optimizer, else all-reduce."""
    setup = memory.setup
    if setup.shard_level >= 3 or (setup.data_group <= 1 and setup.expert_data_group <= 1):
        return None
    return REDUCE_SCATTER if setup.shard_level >= 1 else ALL_REDUCE


def reduction_bandwidth_s(run: RunConfig, memory: MemoryModel, links: Any, layer: Layer) -> float:
    """A layer's share of its bucket's reduction: the collective's time is affine in its bytes, so twice
    the layer less the layer alone is its bandwidth part, what it adds to any bucket it joins."""
    kind = _reduction_kind(memory)
    if kind is None:
        return 0.0
    params, grad = memory.parameters(layer), memory.setup.grad_bytes
    return _dp_collective(kind, params + params, grad, links) - _dp_collective(kind, params, grad, links)


def reduction_floor_ms(run: RunConfig, memory: MemoryModel, links: Any, head: Layer) -> float | None:
    """The least exposed tail of the gradient reduction: the first stage's last bucket holds the first head
    and is ready only as the schedule ends, so its whole reduction is exposed (None: no reduction)."""
    kind = _reduction_kind(memory)
    if kind is None:
        return None
    return 1e3 * _dp_collective(kind, memory.parameters(head), memory.setup.grad_bytes, links)


def fsdp_floor_s(
    run: RunConfig, memory: MemoryModel, links: Any, slots: Sequence[KindSlot]
) -> tuple[float, float, float]:
    """Under ZeRO-3 / FSDP, the least each cell's forward and backward wait for parameters and gradients
    per micro-batch, and the least paid once per cell and iteration (seconds), whatever the plan.

    `run_iteration` prefetches each layer's gather behind the previous layer's compute, so a cell's first
    layer waits for its whole gather; walking back, a resharding framework gathers its last layer again
    before its backward, and one reducing every micro-batch exposes its first layer's reduce-scatter.
    Every cell holds a layer (the head, the tail, or a body layer), at least the one of least
    collective. A framework gathering once per iteration pays those first gathers once per cell, and one
    reducing once (torchtitan under a pipeline) reduce-scatters each layer behind the next one's backward
    in the last micro-batch, each cell's first layer's exposed: at least the least reduce-scatter per cell.
    """
    if memory.setup.shard_level < 3:
        return 0.0, 0.0, 0.0
    rules = framework_rules(run)
    grad, dtype = memory.setup.grad_bytes, run.training.dtype_bytes
    gathers, reduces = [], []
    for slot in slots:
        params = memory.parameters(_layer(slot, 0))
        gathers.append(_dp_collective(ALL_GATHER, params, dtype, links, gathered=True))
        reduces.append(_dp_collective(REDUCE_SCATTER, params, grad, links))
    least_gather, least_reduce = min(gathers), min(reduces)
    forward = least_gather if rules.fsdp_gather_every_micro_batch else 0.0
    backward = (least_gather if rules.fsdp_reshard_after_forward else 0.0) + (
        least_reduce if rules.fsdp_reduce_every_micro_batch else 0.0
    )
    per_cell = (0.0 if rules.fsdp_gather_every_micro_batch else least_gather) + (
        0.0 if rules.fsdp_reduce_every_micro_batch else least_reduce
    )
    return forward, backward, per_cell


def beyond_schedule_ms(run: RunConfig, memory: MemoryModel, times: TimeModel, slots: Sequence[KindSlot]) -> float:
    """Milliseconds every plan's iteration spends after its schedule besides the gradient reduction's
    tail (`reduction_floor_ms`), whatever the plan (docs/search.md).

    `run_iteration` adds to the schedule's makespan its data-parallel terms and the optimizer, each
    computed from the plan's stages. Whatever the plan, the first stage holds the first head, so:

    * the distributed optimizer's parameter all-gather waits at least for the first bucket of the
      first stage, which holds the head: at least the head's gather;
    * the word-embedding gradient all-reduce (tied embeddings, MTP layers) between the first and last
      stage is the same for any plan (the screen walks the fused TAIL);
    * the optimizer step takes the slowest stage's bytes at HBM speed: at least the average stage's.
    """
    setup = memory.setup
    links = _data_links(run, times.links, memory)
    heads = [slot for slot in slots if slot.node == HEAD]
    head = _layer(heads[0], -1)
    seconds = 0.0
    if setup.shard_level < 3 and setup.shard_level >= 1 and setup.data_group > 1:
        seconds += _dp_collective(ALL_GATHER, memory.parameters(head), run.training.dtype_bytes, links)
    seconds += _embedding_sync(run, memory, links, [_layer(slot, 0) for slot in slots])
    kernels = Kernels.from_device(times.device, run.training.dtype)
    total = sum(
        slot.count * _optimizer_seconds(run, memory, kernels, {(0, 0): [(_layer(slot, 0), 0.0, 0.0)]}) for slot in slots
    )
    return 1e3 * (seconds + total / run.parallel.pp)


def blocking(run: RunConfig) -> bool:
    """Whether the run's pipeline sends last as long as the op that sends them (its framework and schedule:
    not shared between strategies, unlike the figures)."""
    return framework_rules(run).p2p_blocking


def run_forms(strategy: Strategy) -> ScheduleForms:
    s = strategy
    return schedule_forms(s.schedule, s.pp, s.vpp, s.micro_batches, s.group or None, s.ep_overlap)


def stage_room(forms: ScheduleForms, figures: Figures) -> tuple[list[float], list[list[float]]]:
    """Per stage, the MB its layers may use (the device less the constant and the ends it holds), and per
    stage and kind, the least MB a layer of the kind holds there: its parameters and, at the in-flight
    vector keeping the most micro-batches in every chunk at once, that many micro-batches' activations
    under its lightest option (the balancer's memory rows at that vector)."""
    kinds, ends = figures.kinds, figures.ends
    cells = forms.cells
    head_stage, tail_stage = cells[0][1], cells[-1][1]
    held = _held(forms.schedule, forms.stages, forms.chunks, forms.micro_batches, forms.group, forms.combined)
    free = figures.memory_mb - figures.constant_mb
    room = [
        free - (ends.head_mb if stage == head_stage else 0.0) - (ends.tail_mb if stage == tail_stage else 0.0)
        for stage in range(forms.stages)
    ]
    lightest = [(kind.parameter_mb, min(kind.activation_mb.values())) for kind in kinds]
    layer = [[parameter + in_flight * activation for parameter, activation in lightest] for in_flight in held]
    return room, layer


@lru_cache(maxsize=1024)
def _held(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None, combined: bool = False
) -> tuple[int, ...]:
    """Per stage, the most micro-batches every chunk holds at once at one of its in-flight vectors."""
    vectors = schedule_forms(schedule, stages, chunks, micro_batches, group, combined).vectors
    return tuple(max(min(vector) for vector in vectors[stage]) for stage in range(stages))


def fits_somewhere(forms: ScheduleForms, figures: Figures, apart: bool = False) -> bool:
    """A necessary condition for any plan to fit (module docstring); False proves that none does. *apart*:
    *figures* are `apart_figures`, whose MTP cell (rank P − 2's last chunk) needs no body layer."""
    cells = forms.cells
    room, layer = stage_room(forms, figures)
    exempt = {cells[0], cells[-1], *([(forms.chunks - 1, forms.stages - 2)] if apart else [])}
    bodies = len(figures.kinds) - figures.free_kinds
    for stage in range(forms.stages):
        needed = sum(1 for chunk in range(forms.chunks) if (chunk, stage) not in exempt)
        if room[stage] < needed * min(layer[stage][:bodies]):
            return False
    least_total = sum(
        kind.count * min(layer[stage][k] for stage in range(forms.stages)) for k, kind in enumerate(figures.kinds)
    )
    return least_total <= sum(room)


@dataclass(frozen=True)
class Screened:
    """A valid strategy after the screen: its quick bound (seconds)."""

    strategy: Strategy
    bound_s: float


def screen(strategy: Strategy, run: RunConfig, cache: FigureCache) -> Screened:
    """The quick bound in seconds: the schedule's (`schedule_floor_ms`, from the times alone: the memory
    descriptions cost more than the rest of the screen) and what every plan pays after it."""
    found = cache.timing(strategy, run)
    quick = schedule_floor_ms(strategy, run, found)
    return Screened(strategy, (quick + after_schedule_ms(strategy, found) + (found.reduction_floor_ms or 0.0)) / 1e3)


def schedule_floor_ms(strategy: Strategy, run: RunConfig, found: Figures, alone: bool = False) -> float:
    """The least schedule makespan of any plan: the per-layer average of the forms (`quick_bound`, memory
    aside) or whole layers per stage within each stage's room (`stage_bound`), whichever is higher; with
    the MTP layers apart as well (`placements`), the lower of the two places'."""
    forms, blocks = run_forms(strategy), blocking(run)
    floors = []
    # the least over the MTP layers' places (*alone*: the figures of one place only)
    for figures, _ in [(found, False)] if alone else placements(strategy, found):
        room, layer = stage_room(forms, figures) if figures.with_memory else (None, None)
        floors.append(
            max(
                quick_bound(forms, figures.kinds, figures.ends, figures.transfer_ms, blocks),
                stage_bound(forms, figures.kinds, figures.ends, figures.transfer_ms, blocks, room, layer),
            )
        )
    return min(floors)


def after_schedule_ms(strategy: Strategy, found: Figures) -> float:
    """What every plan of the strategy pays after its schedule, the reduction's tail aside."""
    return found.beyond_ms + found.per_cell_ms * strategy.pp * strategy.vpp


def describe_figures(found: Figures) -> dict[str, Any]:
    """The figures as plain data (for the bench and for tests that print what was screened)."""
    return {
        "kinds": [
            {"name": k.name, "count": k.count, "parameter_mb": k.parameter_mb, "activation_mb": k.activation_mb}
            for k in found.kinds
        ],
        "constant_mb": found.constant_mb,
        "memory_mb": found.memory_mb,
    }
