"""The pipeline balance payload builder (PPB): layer descriptions for the SAPP balancer, and switch profiles.

For each layer of the walk, a *description*: its memory per recompute option in MB, per
micro-batch in flight, and once (`memory_parameter`); with a time model, its forward time and
each option's backward time. Identical layers merge into one description with a count
(`nb_layer`). Three pure post-processing steps follow, in this order, each a function of a
description list returning a new one: `combine` (bodies of several sub-models as one, from
`run.ppb.combined`), `withdraw` (selective options no body is better off with), `scale` (times in
units of the first body's forward time). `describe_run` does it all for a run config.

Memory comes from a `MemorySource` and times from a `TimeSource` (`ppb_core.sources`). The
switches a measurement runs reach the memory model through an `Evaluation`, the context of one
layer's measurement; the run config's switches are never changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ppb_core.config import RunConfig
from ppb_core.kinds import BodyKind
from ppb_core.model import BODY, HEAD, TAIL, Layer, walk
from ppb_core.profile import Cost, SwitchProfile
from ppb_core.sources import MemorySource, TimeSource
from ppb_core.switches import (
    HYPER_SELECTIVE_REC_OP,
    KEEP_ALL,
    MEMORY_KEY,
    OPTIONAL,
    OPTIONS,
    SELECTIVE_OPTIONS,
    SWITCHES,
    TIME_KEY,
    LayerType,
    normalized,
    recomputed,
    selective_switches,
)

MB = 2**20
_END_STATE = {HEAD: LayerType.EMBEDDING_LAYER, TAIL: LayerType.OUTPUT_LAYER}


def mb(value: float | Iterable[float]) -> int:
    """Bytes as whole MB, truncated toward zero as SAPP's payload builder does; a tuple is summed first."""
    total = sum(value) if isinstance(value, Iterable) else value
    return int(total / MB)


def many_in_flight(stages: int, micro_batches: int) -> int:
    """The most micro-batches a 1F1B stage keeps in flight, and at least 2, where the buffers are split."""
    return max(2, min(stages, micro_batches))


# --- measuring one layer -------------------------------------------------------------------------


class Split(NamedTuple):
    """A layer's memory with its buffers split by how they grow with the micro-batches in flight.

    Exact at one micro-batch in flight and at the `many` it was split at: buffers(k) =
    `once + k·per_micro_batch`, less `excess[i]` at `counts[i]`.
    """

    activation: float  # one micro-batch's activations
    per_micro_batch: float  # buffers that grow, per micro-batch in flight
    once: float  # buffers held once
    excess: tuple[float, ...]  # what the split over-charges at each count asked for


@dataclass(frozen=True)
class Evaluation:
    """One layer as the memory model is asked about it: its state and the switches that state runs.

    `configured` is the layer's own selective switches; `switches` overrides them while a
    measurement needs another setting (None: the layer's own). Each change gives a new
    context, so nothing a caller holds — least of all the run config — is changed.
    """

    memory: MemorySource
    layer: Layer
    configured: Mapping[str, int]
    state: LayerType = LayerType.NOT_REC_LAYER
    switches: Mapping[str, int] | None = None

    def at(self, state: LayerType) -> Evaluation:
        return dataclasses.replace(self, state=state, switches=None)

    def selective(self, switches: Mapping[str, int]) -> Evaluation:
        """The layer selective with *switches* over the ones it runs now."""
        stated = self.switches if self.switches is not None else self.configured
        return dataclasses.replace(self, state=LayerType.SEL_REC_LAYER, switches=normalized({**stated, **switches}))

    @property
    def running(self) -> dict[str, int] | None:
        """The switches handed to the memory model: a selective layer's in full, else None."""
        if self.state is not LayerType.SEL_REC_LAYER:
            return None
        return normalized(self.switches if self.switches is not None else self.configured)

    def dynamic(self, in_flight: int) -> tuple[float, float]:
        """(activations, buffers) with *in_flight* micro-batches in flight."""
        return self.memory.dynamic_bytes(self.layer, self.state, self.running, in_flight)

    def split(self, many: int, counts: Sequence[int] = ()) -> Split:
        """Activations at one micro-batch, and the buffers split linearly between 1 and *many* in flight."""
        at = [self.dynamic(count)[1] for count in counts]
        _, more = self.dynamic(many)
        activation, one = self.dynamic(1)
        per_micro_batch = (more - one) / (many - 1)
        excess = tuple(one + (count - 1) * per_micro_batch - kept for count, kept in zip(counts, at, strict=True))
        return Split(activation, per_micro_batch, one - per_micro_batch, excess)

    def working_extra(self, gathered: int, on_saved: bool) -> float:
        return self.memory.working_extra_bytes(self.layer, self.state, self.running, gathered, on_saved)

    def census_terms(self) -> tuple[float, float] | None:
        return self.memory.census_terms(self.layer, self.state, self.running)


# --- descriptions --------------------------------------------------------------------------------


def describe_layer(
    layer: Layer,
    memory: MemorySource,
    times: TimeSource | None = None,
    *,
    many: int,
    configured: Mapping[str, int],
) -> dict[str, Any]:
    """One layer's description, before merging (no `nb_layer` or `name` yet).

    HEAD and TAIL: `memory_parameter` = MB(static) + MB(activations and buffers at one
    micro-batch). BODY: `memory_parameter` = MB(static) + MB(the largest buffers held once of
    any option), and per option MB(activations) + MB(buffers per micro-batch), each term
    truncated alone. COMM and BOTH, and every time, only with *times*; `time` is the forward
    time then (1 without times).
    """
    desc: dict[str, Any] = {"model_name": layer.model_name}
    context = Evaluation(memory, layer, normalized(configured))
    if layer.node in _END_STATE:
        one = context.at(_END_STATE[layer.node]).dynamic(1)
        desc["type"] = layer.node
        desc["memory_parameter"] = mb(memory.static_bytes(layer)) + mb(one)
        desc["time"] = 1
    else:
        _body_memory(desc, context, many, timed=times is not None)
    if times is not None:
        _body_or_end_times(desc, layer, times, configured)
    return desc


def _body_memory(desc: dict[str, Any], context: Evaluation, many: int, timed: bool) -> None:
    switches = selective_switches(context.configured)
    splits = {
        "NONE": context.at(LayerType.NOT_REC_LAYER).split(many),
        "SLCT": context.selective(switches["SLCT"]).split(many),
    }
    if timed:
        for name in ("COMM", "BOTH"):
            splits[name] = context.selective(switches[name]).split(many)
    splits["FULL"] = context.at(LayerType.FULL_REC_LAYER).split(many)
    desc["type"] = BODY
    desc["memory_parameter"] = mb(context.memory.static_bytes(context.layer)) + mb(
        max(split.once for split in splits.values())
    )
    for name in OPTIONS:
        if name in splits:
            desc[MEMORY_KEY[name]] = mb(splits[name].activation) + mb(splits[name].per_micro_batch)
    desc["time"] = 1


def _body_or_end_times(desc: dict[str, Any], layer: Layer, times: TimeSource, configured: Mapping[str, int]) -> None:
    if layer.node in _END_STATE:
        desc["forward_time"], desc["backward_time"] = times.layer_times(layer, _END_STATE[layer.node], None)
    else:
        desc["forward_time"], desc["backward_time"] = times.layer_times(layer, LayerType.NOT_REC_LAYER, None)
        for name, switches in selective_switches(configured).items():
            desc[TIME_KEY[name]] = times.layer_times(layer, LayerType.SEL_REC_LAYER, switches)[1]
        desc["recompute_time"] = times.layer_times(layer, LayerType.FULL_REC_LAYER, None)[1]
    desc["time"] = desc["forward_time"]


def add_to_list(descriptions: list[dict[str, Any]], desc: Mapping[str, Any]) -> None:
    """Count *desc* in *descriptions* (the builder's own list, updated in place).

    A description equal, on every key of *desc*, to one already listed adds 1 to its `nb_layer`;
    otherwise a copy is appended with `nb_layer` 1, named `BODY_<n>` (n: the bodies listed before
    it) or after its type. An empty *desc* counts nothing.
    """
    if not desc:
        return
    matched = False
    bodies = 0
    for listed in descriptions:
        if all(key in listed and listed[key] == value for key, value in desc.items()):
            listed["nb_layer"] += 1
            matched = True
        if listed["type"] == BODY:
            bodies += 1
    if not matched:
        entry = dict(desc)
        entry["nb_layer"] = 1
        entry["name"] = f"BODY_{bodies}" if entry["type"] == BODY else entry["type"]
        descriptions.append(entry)


SwitchesOf = Callable[[str], Mapping[str, int]]


def describe_layers(
    layers: Iterable[Layer],
    memory: MemorySource,
    times: TimeSource | None,
    *,
    many: int,
    switches_of: SwitchesOf,
) -> list[dict[str, Any]]:
    """The merged descriptions of *layers* in order; each distinct (model, node, kind) is measured once.

    *switches_of(model_name)* gives a model's configured selective switches.
    """
    measured: dict[tuple[str, str, Any], dict[str, Any]] = {}
    descriptions: list[dict[str, Any]] = []
    for layer in layers:
        key = (layer.model_name, layer.node, layer.kind)
        if key not in measured:
            measured[key] = describe_layer(layer, memory, times, many=many, configured=switches_of(layer.model_name))
        add_to_list(descriptions, measured[key])
    return descriptions


def describe(run: RunConfig, memory: MemorySource, times: TimeSource | None = None) -> list[dict[str, Any]]:
    """The run's layers described and merged, before any post-processing."""
    return describe_layers(
        walk(run),
        memory,
        times,
        many=many_in_flight(run.parallel.pp, run.training.micro_batches),
        switches_of=run.switches,
    )


# --- post-processing -----------------------------------------------------------------------------


Groups = Sequence[Sequence[Sequence[str]]]


def combine(descriptions: Sequence[Mapping[str, Any]], groups: Groups) -> list[dict[str, Any]]:
    """Bodies of several sub-models described as one, for each group of (model name, node) pairs.

    For each group, the first description of each (model, node) is taken out of the list and
    summed into one BODY named `COMBINED_<their names>`, of model `combined_<their models>`: every
    memory key and every `*_time` adds up, `time` is the summed forward time (1 without times),
    and it counts 1 layer. It goes where the first of them was (first in the list if none was
    found). Without groups the list is returned as it is (copied).
    """
    result = [dict(desc) for desc in descriptions]
    for group in groups:
        combined: dict[str, Any] = {
            "model_name": "combined",
            "type": BODY,
            "memory_parameter": 0,
            "memory_activation": 0,
            "memory_recompute": 0,
            "time": 1,
            "nb_layer": 1,
            "name": "COMBINED",
        }
        index = -1
        for model_name, node in group:
            target = next(
                (desc for desc in result if desc.get("model_name") == model_name and desc["type"] == node.upper()), None
            )
            if target is None:
                continue
            combined["model_name"] += "_" + model_name
            combined["name"] += "_" + target["name"]
            for key, value in target.items():
                if key.startswith("memory") or key.endswith("_time"):
                    combined[key] = combined.get(key, 0) + value
            position = next(i for i, desc in enumerate(result) if desc is target)
            index = position if index < 0 else min(index, position)
            del result[position]
        if "forward_time" in combined:
            combined["time"] = combined["forward_time"]
        result.insert(max(index, 0), combined)
    return result


def _option_cost(desc: Mapping[str, Any], option: str) -> tuple[Any, Any] | None:
    memory, backward = desc.get(MEMORY_KEY[option]), desc.get(TIME_KEY[option])
    return None if memory is None or backward is None else (memory, backward)


def beaten(desc: Mapping[str, Any], option: str) -> bool:
    """Whether another option of *desc* needs no more memory and no more backward time than *option*.

    Of two options that tie, the one first in OPTIONS wins. An option the description does not
    offer (no memory or no backward time) counts as beaten: there is nothing of it to keep.
    """
    mine = _option_cost(desc, option)
    if mine is None:
        return True
    for other in OPTIONS:
        theirs = _option_cost(desc, other)
        if other == option or theirs is None:
            continue
        earlier = OPTIONS.index(other) < OPTIONS.index(option)
        if theirs[0] <= mine[0] and theirs[1] <= mine[1] and (theirs != mine or earlier):
            return True
    return False


def withdraw(descriptions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The selective options no body is better off with, withdrawn from every body.

    SLCT, COMM or BOTH goes when, in each body, another option needs no more memory and no more
    backward time; NONE and FULL always stay. Every body keeps the same options, as the
    balancer takes them from the first body. Without bodies, or with a body without times, the
    list is returned as it is (copied).
    """
    result = [dict(desc) for desc in descriptions]
    bodies = [desc for desc in result if desc["type"] == BODY]
    if not bodies or any("backward_time" not in desc for desc in bodies):
        return result
    withdrawn = [name for name in SELECTIVE_OPTIONS if all(beaten(desc, name) for desc in bodies)]
    for desc in bodies:
        for name in withdrawn:
            desc.pop(MEMORY_KEY[name], None)
            desc.pop(TIME_KEY[name], None)
    return result


def scale(descriptions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Times in units of the first body's forward time (the first body that has a non-zero one).

    `time` and every `*_time`, in every description, HEAD and TAIL too. The balancer only
    compares times with one another, and a MILP solver handles numbers near 1 best. Without a
    timed body the list is returned as it is (copied).
    """
    result = [dict(desc) for desc in descriptions]
    unit = next((desc["forward_time"] for desc in result if desc["type"] == BODY and desc.get("forward_time")), None)
    if not unit:
        return result
    for desc in result:
        for key in desc:
            if (key == "time" or key.endswith("_time")) and desc[key] is not None:
                desc[key] = desc[key] / unit
    return result


def postprocess(descriptions: Sequence[Mapping[str, Any]], groups: Groups = ()) -> list[dict[str, Any]]:
    """Combine, then withdraw on the bodies the balancer will see, then scale."""
    return scale(withdraw(combine(descriptions, groups)))


def describe_run(
    run: RunConfig,
    memory: MemorySource | None = None,
    times: TimeSource | None = None,
    *,
    timed: bool = True,
) -> list[dict[str, Any]]:
    """The descriptions the balancer reads for a run: described, combined, withdrawn, scaled.

    *memory* defaults to `ppb_core.memory.MemoryModel(run)`, and with *timed*, *times* to
    `ppb_core.timing.TimeModel(run)`; `timed=False` gives the untimed descriptions (NONE, SLCT
    and FULL only, `time` 1).
    """
    if memory is None:
        from ppb_core.memory import MemoryModel

        memory = MemoryModel(run)
    if not timed:
        times = None
    elif times is None:
        from ppb_core.timing import TimeModel

        times = TimeModel(run)
    return postprocess(describe(run, memory, times), run.ppb.combined)


# --- switch profiles -----------------------------------------------------------------------------


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
    full = _cost(_Measured(full_split, full_working, plain.first_working, None),
                 times.layer_times(layer, LayerType.FULL_REC_LAYER, None)[1])
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
            layer, memory, times, many=many, counts=counts, configured=switches_of(layer.model_name),
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
        from ppb_core.memory import MemoryModel

        memory = MemoryModel(run)
    if times is None:
        from ppb_core.timing import TimeModel

        times = TimeModel(run)
    many = max(2, most_in_flight) if most_in_flight else many_in_flight(run.parallel.pp, run.training.micro_batches)
    return profile_layers(walk(run), memory, times, many=many, counts=in_flight, switches_of=run.switches,
                          each_switch=each_switch)


__all__ = [
    "Evaluation",
    "Split",
    "add_to_list",
    "beaten",
    "combine",
    "describe",
    "describe_layer",
    "describe_layers",
    "describe_run",
    "drops_any",
    "many_in_flight",
    "mb",
    "measure_profile",
    "postprocess",
    "profile_layers",
    "profile_run",
    "scale",
    "withdraw",
]
