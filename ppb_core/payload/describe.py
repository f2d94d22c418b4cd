"""Layer descriptions for the SAPP balancer: each layer's memory per recompute option in MB and its times.

For each layer of the walk, a *description*: its memory per recompute option in MB, per
micro-batch in flight, and once (`memory_parameter`); with a time model, its forward time and
each option's backward time. Identical layers merge into one description with a count
(`nb_layer`). `describe_run` describes a run config and post-processes the list
(`ppb_core.payload.postprocess`).

Memory comes from a `MemorySource` and times from a `TimeSource` (`ppb_core.payload.sources`). The
switches a measurement runs reach the memory model through an `Evaluation`, the context of one
layer's measurement; the run config's switches are never changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ppb_core.config.run import RunConfig
from ppb_core.model.kinds import TailKind, standalone_parts
from ppb_core.model.switches import (
    MEMORY_KEY,
    OPTIONS,
    TIME_KEY,
    LayerType,
    normalized,
    selective_switches,
)
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, walk
from ppb_core.payload.sources import MemorySource, TimeSource
from ppb_core.timing.batch import layer_broadcasts
from ppb_core.timing.comm import Links
from ppb_core.units import MB

_END_STATE = {HEAD: LayerType.EMBEDDING_LAYER, TAIL: LayerType.OUTPUT_LAYER}


def mb(value: float | Iterable[float]) -> int:
    """Bytes as whole MB, truncated toward zero as SAPP's payload builder does; a tuple is summed first."""
    total = sum(value) if isinstance(value, Iterable) else value
    return int(total / MB)


def many_in_flight(stages: int, micro_batches: int) -> int:
    """The most micro-batches a 1F1B stage keeps in flight, and at least 2, where the buffers are split."""
    return max(2, min(stages, micro_batches))


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


def describe_layer(
    layer: Layer,
    memory: MemorySource,
    times: TimeSource | None = None,
    *,
    many: int,
    configured: Mapping[str, int],
    loading_ms: float = 0.0,
) -> dict[str, Any]:
    """One layer's description, before merging (no `nb_layer` or `name` yet).

    HEAD and TAIL: `memory_parameter` = MB(static) + MB(activations and buffers at one micro-batch) + MB(the
    workspaces it adds to a stage of bodies, `end_workspace_bytes`). BODY: `memory_parameter` = MB(static) +
    MB(the largest buffers held once of any option), and per option MB(activations) + MB(buffers per
    micro-batch), each term truncated alone. COMM and BOTH, and every time, only with *times*; `time` is the
    forward time then (1 without times). *loading_ms*: what loading a micro-batch adds to the layer's forward
    (Megatron's `get_batch` broadcasts, `batch_loading_ms`).
    """
    desc: dict[str, Any] = {"model_name": layer.model_name}
    context = Evaluation(memory, layer, normalized(configured))
    if layer.node in _END_STATE:
        one = context.at(_END_STATE[layer.node]).dynamic(1)
        desc["type"] = layer.node
        desc["memory_parameter"] = mb(memory.static_bytes(layer)) + mb(one) + mb(memory.end_workspace_bytes(layer))
        desc["time"] = 1
    else:
        _body_memory(desc, context, many, timed=times is not None)
    if times is not None:
        _body_or_end_times(desc, layer, times, configured)
        if loading_ms:
            desc["forward_time"] += loading_ms
            desc["time"] = desc["forward_time"]
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

    A description equal, on every key of *desc*, to the last one listed adds 1 to its `nb_layer`;
    otherwise a copy is appended with `nb_layer` 1, named `BODY_<n>` (n: the bodies listed before
    it) or after its type. An empty *desc* counts nothing.

    Only the last: the balancer places body types in list order, so a layer equal to an earlier
    but not the last one (Qwen2.5-VL's window blocks after a full-attention block) starts a new
    description, and the list keeps the model's layer order. Counted in the earlier one (as
    `_ppb.py`'s `add_to_ppb_list` in mindspore-ai/hyper-parallel does), its layers would be placed
    after the layers between them, where the model does not have them.
    """
    if not desc:
        return
    last = descriptions[-1] if descriptions else None
    if last is not None and all(key in last and last[key] == value for key, value in desc.items()):
        last["nb_layer"] += 1
        return
    bodies = sum(1 for listed in descriptions if listed["type"] == BODY)
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
    loading_ms: Mapping[Layer, float] | None = None,
) -> list[dict[str, Any]]:
    """The merged descriptions of *layers* in order; each distinct (model, node, kind) is measured once.

    *switches_of(model_name)* gives a model's configured selective switches; *loading_ms* what loading a
    micro-batch adds to a data-reading layer's forward (a HEAD or TAIL: one layer of its kind).
    """
    measured: dict[tuple[str, str, Any], dict[str, Any]] = {}
    descriptions: list[dict[str, Any]] = []
    for layer in layers:
        key = (layer.model_name, layer.node, layer.kind)
        if key not in measured:
            measured[key] = describe_layer(
                layer,
                memory,
                times,
                many=many,
                configured=switches_of(layer.model_name),
                loading_ms=(loading_ms or {}).get(layer, 0.0),
            )
        add_to_list(descriptions, measured[key])
    return descriptions


def batch_loading_ms(
    run: RunConfig, layers: Sequence[Layer], times: TimeSource | None, cell_of: Callable[[Layer], Any] | None = None
) -> dict[Layer, float]:
    """Megatron's `get_batch` broadcasts over TP (`timing.batch_broadcast`), in ms a micro-batch, on the layers
    whose cells read the batch (`timing.batch.layer_broadcasts`): the iteration adds them to those cells'
    forwards (`timing.iteration.batch_loading`), so the descriptions carry them where the balancer places
    those layers, the first and last cells (the HEAD's and the TAIL's). None without times."""
    if times is None or run.framework != "megatron" or not run.timing.batch_broadcast:
        return {}
    links = Links.from_run(run, run.device.profile())
    return {layer: seconds * 1e3 for layer, seconds in layer_broadcasts(run, layers, links, cell_of).items()}


def describe(run: RunConfig, memory: MemorySource, times: TimeSource | None = None) -> list[dict[str, Any]]:
    """The run's layers described and merged, before any post-processing. One TAIL, the MTP layers
    with the loss, whatever the run's layout: the balancer's cells hold it whole (`BalanceInput.tail_cell`)."""
    layers = walk(run, fused_tail=True).layers
    return describe_layers(
        layers,
        memory,
        times,
        many=many_in_flight(run.parallel.pp, run.training.micro_batches),
        switches_of=run.switches,
        loading_ms=batch_loading_ms(run, layers, times),
    )


# The name of the TAIL descriptions that run apart from the loss under Megatron-Core's standalone MTP.
MTP_APART_NAME = "MTP"


def describe_mtp_apart(run: RunConfig, memory: MemorySource, times: TimeSource | None = None) -> list[dict[str, Any]]:
    """The run's descriptions with the TAIL split as Megatron-Core runs a standalone MTP (`m` on a rank
    before the loss's, `kinds.standalone_parts`): the TAIL is the output layer and every head's loss,
    and two TAIL entries named `MTP_APART_NAME` hold the MTP layers (with their embedding copy) and the
    model's final norm, which the balancer places in the MTP layers' cell (`BalanceInput.mtp_cell`).

    Those two keep their activations per micro-batch in flight (`memory_activation`): their chunk is
    not the last one, so it holds several, where the loss's TAIL holds one (its activations are
    charged once, as `describe_layer` does). The final norm runs in the last decoder layer's cell
    (transformer_block.py `has_final_layernorm_in_this_stage`, d98e8a64): the MTP cell when that
    holds a decoder layer, the cell before it otherwise; the balancer charges it to the MTP cell,
    one norm's parameters and input per micro-batch (`ppb check` prices the plan exactly). Each part
    carries what it adds to a stage of bodies' workspaces (`end_workspace_bytes`: the output layer's and
    the MTP projection's TE dummy weight gradients), as the one TAIL does."""
    many = many_in_flight(run.parallel.pp, run.training.micro_batches)
    layers: list[Layer] = []
    apart: list[Layer] = []
    for layer in walk(run, fused_tail=True):
        if layer.node == TAIL and isinstance(layer.kind, TailKind) and layer.kind.mtp_layers:
            norm, mtp, output = standalone_parts(layer.kind)
            apart += [dataclasses.replace(layer, kind=norm), dataclasses.replace(layer, kind=mtp)]
            layers.append(dataclasses.replace(layer, kind=output))
        else:
            layers.append(layer)
    loading = batch_loading_ms(run, layers, times)
    descriptions = describe_layers(layers, memory, times, many=many, switches_of=run.switches, loading_ms=loading)
    # the MTP layers read the batch in a cell of their own (the balancer's `mtp_cell`)
    apart_loading = batch_loading_ms(run, apart, times, cell_of=id)
    for layer in apart:
        desc = describe_layer(
            layer,
            memory,
            times,
            many=many,
            configured=run.switches(layer.model_name),
            loading_ms=apart_loading.get(layer, 0.0),
        )
        context = Evaluation(memory, layer, normalized(run.switches(layer.model_name)))
        split = context.at(LayerType.OUTPUT_LAYER).split(many)
        desc["memory_parameter"] = (
            mb(memory.static_bytes(layer)) + mb(split.once) + mb(memory.end_workspace_bytes(layer))
        )
        desc[MEMORY_KEY["NONE"]] = mb(split.activation) + mb(split.per_micro_batch)
        descriptions.append({**desc, "nb_layer": 1, "name": MTP_APART_NAME})
    return descriptions
