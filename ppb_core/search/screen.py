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
  time model's `Geometry` and `Links`), not on dp, pp, vpp, the schedule, the micro-batch count or
  ZeRO: one `TimeModel` per `time_key`;
* layer memory depends on all of those and dp, pp, ZeRO/FSDP and the micro-batch count, not on vpp
  or the schedule: one `MemoryModel` per `memory_key`.

tests/test_search_screen.py checks both on strategies drawn at random against models built for
each strategy alone. The verdicts: `quick_bound` (`ppb_core.search.bound`) and `fits_somewhere`,
a necessary condition for any plan to fit (each stage can hold its ends and at least one layer
per cell, and the stages together can hold every layer at its least memory).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel, run_working_set_bytes
from ppb_core.memory.peak import MB
from ppb_core.model.switches import MEMORY_KEY, OPTIONS
from ppb_core.model.walk import BODY, HEAD, TAIL, KindSlot, Layer, LayerWalk, walk
from ppb_core.payload.describe import describe_layer, many_in_flight
from ppb_core.search.bound import Ends, Kind, ScheduleForms, quick_bound, schedule_forms
from ppb_core.search.enumerate import Strategy
from ppb_core.timing import TimeModel


def time_key(strategy: Strategy) -> tuple:
    """What the layer times of a strategy depend on (beside the spec)."""
    s = strategy
    return (s.tp, s.sequence_parallel, s.cp, s.cp_variant, s.ep, s.etp, s.micro_batch_size, s.recompute)


def memory_key(strategy: Strategy) -> tuple:
    """What the layer memory of a strategy depends on (beside the spec): all but vpp and the schedule."""
    s = strategy
    return (*time_key(s), s.dp, s.pp, s.zero, s.fsdp, s.micro_batches)


@dataclass(frozen=True)
class Figures:
    """A strategy's layers for the bounds: body kinds, the ends, and the memory the balancer allows."""

    kinds: tuple[Kind, ...]  # body kinds, plus any head or tail that is not the first head or last tail
    ends: Ends
    constant_mb: float  # every stage holds this besides its layers (run_problem's constant memory)
    memory_mb: float  # the device memory less reserved_mb


@dataclass
class FigureCache:
    """Time and memory models shared by the strategies that cannot differ in them (module docstring)."""

    times: dict[tuple, TimeModel] = field(default_factory=dict)
    figures: dict[tuple, Figures] = field(default_factory=dict)
    slots: dict[tuple, list[KindSlot]] = field(default_factory=dict)

    def kinds(self, run: RunConfig) -> list[KindSlot]:
        """The run's distinct (model, node, kind) with counts; they change only with the vocabulary padding."""
        key = tuple(run.vocab_size(name) for name in run.model_names)
        if key not in self.slots:
            self.slots[key] = walk(run).distinct()
        return self.slots[key]

    def of(self, strategy: Strategy, run: RunConfig) -> Figures:
        key = memory_key(strategy)
        found = self.figures.get(key)
        if found is None:
            times = self.times.get(time_key(strategy))
            if times is None:
                times = self.times[time_key(strategy)] = TimeModel(run)
            found = self.figures[key] = figures(run, MemoryModel(run), times, self.kinds(run))
        return found


def _layer(slot: KindSlot, index: int) -> Layer:
    return Layer(slot.model_name, slot.node, slot.kind, index, 0, 0)


def figures(run: RunConfig, memory: MemoryModel, times: TimeModel, slots: Sequence[KindSlot]) -> Figures:
    """A run's kinds as the balancer's descriptions state their memory and the time model their times."""
    many = many_in_flight(run.parallel.pp, run.training.micro_batches)
    heads = [slot for slot in slots if slot.node == HEAD]
    tails = [slot for slot in slots if slot.node == TAIL]
    kinds: list[Kind] = []
    head_mb = tail_mb = 0.0
    ends: dict[str, tuple[float, float]] = {}
    for slot in slots:
        layer = _layer(slot, 0)
        desc = describe_layer(layer, memory, times, many=many, configured=run.switches(slot.model_name))
        option_times = times.option_times(layer)
        if slot.node == BODY:
            kinds.append(
                Kind(
                    name=f"{slot.model_name}:{slot.kind.name}",
                    count=slot.count,
                    forward_ms={o: option_times[o][0] for o in OPTIONS},
                    backward_ms={o: option_times[o][1] for o in OPTIONS},
                    parameter_mb=float(desc["memory_parameter"]),
                    activation_mb={o: float(desc[MEMORY_KEY[o]]) for o in OPTIONS},
                )
            )
            continue
        # the balancer charges every head on the head's stage and every tail on the tail's
        if slot.node == HEAD:
            head_mb += desc["memory_parameter"] * slot.count
        else:
            tail_mb += desc["memory_parameter"] * slot.count
        forward, backward = option_times["NONE"]
        first = (slot is heads[0]) if slot.node == HEAD else (slot is tails[-1])
        if first and slot.count == 1:
            ends[slot.node] = (forward, backward)
        else:  # another sub-model's head or tail: its time lands in whichever cell the plan gives it
            count = slot.count - 1 if first else slot.count
            if first:
                ends[slot.node] = (forward, backward)
            kinds.append(
                Kind(
                    f"{slot.model_name}:{slot.kind.name}",
                    count,
                    {"NONE": forward},
                    {"NONE": backward},
                    0.0,
                    {"NONE": 0.0},
                )
            )
    distinct = LayerWalk(run.parallel.pp, run.parallel.vpp, tuple(_layer(slot, 0) for slot in slots))
    constant_mb = math.ceil(run_working_set_bytes(run, memory, distinct) / MB)
    return Figures(
        kinds=tuple(kinds),
        ends=Ends(*ends.get(HEAD, (0.0, 0.0)), head_mb, *ends.get(TAIL, (0.0, 0.0)), tail_mb),
        constant_mb=float(constant_mb),
        memory_mb=float(run.device.usable_mb),
    )


def run_forms(strategy: Strategy) -> ScheduleForms:
    return schedule_forms(strategy.schedule, strategy.pp, strategy.vpp, strategy.micro_batches)


def fits_somewhere(forms: ScheduleForms, figures: Figures) -> bool:
    """A necessary condition for any plan to fit (module docstring); False proves that none does."""
    kinds, ends = figures.kinds, figures.ends
    cells = forms.cells
    head_stage, tail_stage = cells[0][1], cells[-1][1]
    # per stage, the in-flight vector keeping the most micro-batches in every chunk at once: at it,
    # each layer of the stage holds at least its parameters and that many micro-batches' activations
    held = [max(min(vector) for vector in forms.vectors[stage]) for stage in range(forms.stages)]
    free_total = 0.0
    for stage in range(forms.stages):
        room = figures.memory_mb - figures.constant_mb
        room -= (ends.head_mb if stage == head_stage else 0.0) + (ends.tail_mb if stage == tail_stage else 0.0)
        lightest = min(kind.parameter_mb + held[stage] * min(kind.activation_mb.values()) for kind in kinds)
        needed = sum(1 for chunk in range(forms.chunks) if (chunk, stage) not in (cells[0], cells[-1]))
        if room < needed * lightest:
            return False
        free_total += room
    least_total = sum(
        kind.count * min(kind.parameter_mb + h * min(kind.activation_mb.values()) for h in held) for kind in kinds
    )
    return least_total <= free_total


@dataclass(frozen=True)
class Screened:
    """A valid strategy after the screen: its quick bound (seconds) and whether any plan may fit."""

    strategy: Strategy
    bound_s: float
    may_fit: bool


def screen(strategy: Strategy, run: RunConfig, cache: FigureCache) -> Screened:
    forms = run_forms(strategy)
    found = cache.of(strategy, run)
    return Screened(strategy, quick_bound(forms, found.kinds, found.ends) / 1e3, fits_somewhere(forms, found))


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
