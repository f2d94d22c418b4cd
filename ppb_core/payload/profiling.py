"""Switch profiles measured through the memory and time models: each switch alone, per layer kind."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel
from ppb_core.model.kinds import BodyKind
from ppb_core.model.switches import (
    HYPER_SELECTIVE_REC_OP,
    KEEP_ALL,
    OPTIONAL,
    SWITCHES,
    LayerType,
    normalized,
    recomputed,
)
from ppb_core.model.walk import BODY, Layer, walk
from ppb_core.payload.describe import Evaluation, Split, SwitchesOf, many_in_flight
from ppb_core.payload.profile import Cost, SwitchProfile
from ppb_core.payload.sources import MemorySource, TimeSource
from ppb_core.timing.pricer import TimeModel


class _Measured(NamedTuple):
    split: Split
    working: float
    first_working: float
    terms: tuple[float, float] | None


def drops_any(layer: Layer, switch: str) -> bool:
    """Whether the layer keeps anything an optional switch drops: attUp acts only on MLA layers."""
    if switch != "attUp":
        return True
    kind = layer.kind
    return isinstance(kind, BodyKind) and kind.attention.is_mla


def _cost(measured: _Measured, backward: float, unclamp: bool = True) -> Cost:
    """Activations and growing buffers per micro-batch, the rest once.

    Where a census prices the layer, the working set is stated before the census clamp (what
    `SwitchProfile.selective` adds up), unless *unclamp* is false: the plain layer is no base
    for addition then, and is stated as measured so that recomputing nothing prices exactly.
    """
    split, working, first_working, terms = measured
    kept = 0.0
    if terms is not None:
        kept, held = terms
        if unclamp:
            working -= max(0.0, kept - held)
    return Cost(
        split.activation + split.per_micro_batch, split.once, backward, split.excess, working, first_working, kept
    )


def measure_profile(
    layer: Layer,
    memory: MemorySource,
    times: TimeSource,
    *,
    many: int,
    counts: Sequence[int] = (),
    configured: Mapping[str, int] | None = None,
    each_switch: bool = True,
    census: bool | None = None,
) -> SwitchProfile:
    """A body layer's switch profile: plain, each switch alone recomputed, full.

    The buffers are split between 1 and *many* micro-batches in flight, and the excess of the
    split stated at each of *counts* strictly between. Each switch alone is measured in full
    (split, working sets, census terms): the memory model may let any switch act on the buffers
    or the backward's working set. Where a census prices the layer (*census*; by default,
    whether the memory model states census terms for the plain layer), the selective layer
    keeping every op is the base the settings add up from, and HyperParallel's selective policy
    is measured whole, and the plain layer's working set is stated as measured (it is no base
    for addition then). A full recompute's backward runs the plain layer, so its working sets are
    the plain layer's (with a census: all it holds, none of it already kept).
    """
    counts = tuple(count for count in sorted(set(counts)) if 1 < count < many)
    context = Evaluation(memory, layer, normalized(configured))

    def measure(at: Evaluation) -> _Measured:
        split = at.split(many, counts)
        return _Measured(split, at.working_extra(2, True), at.working_extra(1, False), at.census_terms())

    plain_context = context.at(LayerType.NOT_REC_LAYER)
    plain = measure(plain_context)
    if census is None:
        census = plain.terms is not None
    full_working = plain_context.working_extra(2, False) if census else plain.working
    base = measure(context.selective(KEEP_ALL)) if census else plain
    forward, backward = times.layer_times(layer, LayerType.NOT_REC_LAYER, None)

    alone: dict[str, Cost] = {}
    if each_switch:
        for name in SWITCHES:
            if name in OPTIONAL and not drops_any(layer, name):
                continue
            switches = dict(KEEP_ALL, **{name: 0})
            alone[name] = _cost(
                measure(context.selective(switches)), times.layer_times(layer, LayerType.SEL_REC_LAYER, switches)[1]
            )
        base_cost = _cost(base, backward)
        alone.update({name: base_cost for name in OPTIONAL if name not in alone})

    whole: dict[frozenset[str], Cost] = {}
    if census:
        policy = context.selective(HYPER_SELECTIVE_REC_OP)
        whole[recomputed(policy.switches)] = _cost(
            measure(policy), times.layer_times(layer, LayerType.SEL_REC_LAYER, policy.switches)[1]
        )

    full_split = context.at(LayerType.FULL_REC_LAYER).split(many, counts)
    full = _cost(
        _Measured(full_split, full_working, plain.first_working, None),
        times.layer_times(layer, LayerType.FULL_REC_LAYER, None)[1],
    )
    return SwitchProfile(
        forward_time=forward,
        plain=_cost(plain, backward, unclamp=not census),
        alone=alone,
        full=full,
        counts=counts,
        selective_base=_cost(base, backward) if census else None,
        whole=whole,
        census_held=None if base.terms is None else base.terms[1],
    )


ProfileKey = tuple[str, Any]


def profile_layers(
    layers: Iterable[Layer],
    memory: MemorySource,
    times: TimeSource,
    *,
    many: int,
    counts: Sequence[int] = (),
    switches_of: SwitchesOf,
    each_switch: bool = True,
) -> dict[ProfileKey, SwitchProfile]:
    """One profile per (model, body kind), measured on the first body layer of it, in walk order."""
    profiles: dict[ProfileKey, SwitchProfile] = {}
    for layer in layers:
        key = (layer.model_name, layer.kind)
        if layer.node != BODY or key in profiles:
            continue
        profiles[key] = measure_profile(
            layer,
            memory,
            times,
            many=many,
            counts=counts,
            configured=switches_of(layer.model_name),
            each_switch=each_switch,
        )
    return profiles


def profile_run(
    run: RunConfig,
    memory: MemorySource | None = None,
    times: TimeSource | None = None,
    *,
    most_in_flight: int | None = None,
    in_flight: Sequence[int] = (),
    each_switch: bool = True,
) -> dict[ProfileKey, SwitchProfile]:
    """Every (model, body kind)'s switch profile for a run.

    The buffers are split at `max(2, most_in_flight)` micro-batches in flight, or where the
    descriptions split them without it; *in_flight* are the counts the stages keep, at which
    the profiles state the split's excess.
    """
    if memory is None:
        memory = MemoryModel(run)
    if times is None:
        times = TimeModel(run)
    many = max(2, most_in_flight) if most_in_flight else many_in_flight(run.parallel.pp, run.training.micro_batches)
    return profile_layers(
        walk(run, fused_tail=True),  # the balancer's descriptions hold one TAIL (`payload.describe.describe`)
        memory,
        times,
        many=many,
        counts=in_flight,
        switches_of=run.switches,
        each_switch=each_switch,
    )
