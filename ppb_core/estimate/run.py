"""The estimate of a run as data: one row per distinct (model, node, kind), and one per pipeline stage.

`estimate(run)` evaluates each distinct kind once through `MemoryModel`; `Estimate.to_json()`
is the `ppb estimate --json` contract (README); `ppb_core.tables.estimate` holds its tables.

Every row states bytes on one device: `activation_bytes[option]` per micro-batch in flight,
and the buffers split as SAPP's payload builder splits them (`_dynamic_mem` of hyper-parallel's
`sapp_nd/memory_estimation/_ppb.py`) at the option NONE (`buffers_by_option` has the
split of every option). With a `TimeSource`, rows also carry `forward_ms` and `backward_ms` per
option; this module only asks the source, it prices nothing itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ppb_core.config.run import RunConfig, run_reserve
from ppb_core.memory import (
    MemoryModel,
    StagePeak,
    configured_option,
    configured_options,
    run_combined_steps,
    run_in_flight,
    run_in_flight_vectors,
    stage_peaks,
)
from ppb_core.memory.reserved import ReservedPools, reserved_pools
from ppb_core.model.kinds import LayerKind
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import Layer, LayerWalk, walk
from ppb_core.payload.sources import TimeSource
from ppb_core.units import MB


@dataclass(frozen=True)
class KindEstimate:
    """One distinct (model, node, kind) of the walk."""

    model_name: str
    node: str
    kind: str
    count: int
    parameters: int  # elements one device holds (after ZeRO-3 / FSDP sharding)
    static_bytes: float
    parameter_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    activation_bytes: dict[str, float]  # option -> bytes per micro-batch in flight
    buffer_bytes_one: float
    buffer_bytes_per_micro_batch: float
    buffer_bytes_once: float
    buffers_by_option: dict[str, dict[str, float]]  # option -> {one, per_micro_batch, once}
    layer_kind: LayerKind | None = field(default=None, compare=False)
    forward_ms: dict[str, float] | None = None
    backward_ms: dict[str, float] | None = None
    activations: str = field(default="formulas", compare=False)  # what priced them: formulas | census:<file>

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "model_name": self.model_name,
            "node": self.node,
            "kind": self.kind,
            "count": self.count,
            "parameters": self.parameters,
            "static_bytes": _number(self.static_bytes),
            "activation_bytes": {o: _number(self.activation_bytes[o]) for o in OPTIONS},
            "activations": self.activations,
            "buffer_bytes_one": _number(self.buffer_bytes_one),
            "buffer_bytes_per_micro_batch": _number(self.buffer_bytes_per_micro_batch),
            "buffer_bytes_once": _number(self.buffer_bytes_once),
            "parameter_bytes": _number(self.parameter_bytes),
            "gradient_bytes": _number(self.gradient_bytes),
            "optimizer_bytes": _number(self.optimizer_bytes),
            "buffers_by_option": {o: {k: _number(v) for k, v in self.buffers_by_option[o].items()} for o in OPTIONS},
        }
        if self.forward_ms is not None:
            data["forward_ms"] = dict(self.forward_ms)
        if self.backward_ms is not None:
            data["backward_ms"] = dict(self.backward_ms)
        return data


@dataclass(frozen=True)
class Estimate:
    run: dict[str, Any]
    layers: tuple[KindEstimate, ...]
    stages: tuple[StagePeak, ...] = ()
    iteration: dict[str, Any] | None = None  # `ppb_core.timing.iteration.Iteration.to_json()`
    stages_at_full: tuple[StagePeak, ...] = ()  # the same stages with every body layer fully recomputed
    # each stage's caching-allocator pools where ppb prices them (torchtitan under FSDP2), else empty
    reserved: tuple[ReservedPools | None, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = {
            "run": self.run,
            "layers": [row.to_json() for row in self.layers],
            "stages": [stage_json(p) for p in self.stages],
        }
        if self.iteration is not None:
            data["iteration"] = dict(self.iteration)
        if self.stages_at_full:
            data["stages_at_full"] = [stage_json(p) for p in self.stages_at_full]
        if self.reserved:
            data["allocator_reserved"] = [None if pools is None else reserved_json(pools) for pools in self.reserved]
        return data


def _number(value: float) -> int | float:
    """Bytes as an int where they are whole (they nearly always are), else the float."""
    return int(value) if float(value).is_integer() else float(value)


def stage_json(peak: StagePeak) -> dict[str, Any]:
    return {
        "stage": peak.stage,
        "body_layers": peak.body_layers,
        "in_flight": list(peak.in_flight),
        "static_bytes": _number(peak.static_bytes),
        "activation_bytes": _number(peak.activation_bytes),
        "buffer_bytes": _number(peak.buffer_bytes),
        "working_bytes": _number(peak.working_bytes),
        "loss_bytes": _number(peak.loss_bytes),
        "reserved_bytes": _number(peak.reserved_bytes),
        "peak_bytes": _number(peak.peak_bytes),
        "moment": peak.moment,
        "moments": {name: _number(value) for name, value in peak.moments.items()},
        "device_bytes": _number(peak.device_bytes),
        "allocator_bytes": _number(peak.allocator_bytes),
        "symm_workspace_bytes": _number(peak.symm_workspace_bytes),
        "fit_bytes": _number(peak.fit_bytes),
        "fits": peak.fits,
        "step_static_bytes": None if peak.step_static_bytes is None else _number(peak.step_static_bytes),
        "holds_tail": peak.holds_tail,
        "reduction_bytes": None if peak.reduction_bytes is None else _number(peak.reduction_bytes),
        "first_call_bytes": _number(peak.first_call_bytes),
        "first_step_bytes": _number(peak.first_step_bytes),
    }


def reserved_json(pools: ReservedPools) -> dict[str, Any]:
    """A stage's caching-allocator pools (`ppb_core.memory.reserved`), in bytes."""
    return {
        "reserved_bytes": _number(pools.total_bytes),
        "compute_bytes": _number(pools.compute_bytes),
        "loss_hole_bytes": _number(pools.loss_hole_bytes),
        "copy_in_bytes": _number(pools.copy_in_bytes),
        "reduce_scatter_bytes": _number(pools.reduce_scatter_bytes),
        "allocated_bytes": _number(pools.allocated_bytes),
    }


def reserved_from_json(data: Mapping[str, Any]) -> ReservedPools:
    """A stage's pools back from their `reserved_json` (the total left aside: it is derived)."""
    return ReservedPools(
        compute_bytes=data["compute_bytes"],
        loss_hole_bytes=data["loss_hole_bytes"],
        copy_in_bytes=data["copy_in_bytes"],
        reduce_scatter_bytes=data["reduce_scatter_bytes"],
        allocated_bytes=data["allocated_bytes"],
    )


def peak_from_json(data: Mapping[str, Any]) -> StagePeak:
    """A stage peak back from its `stage_json` (what it derives, the peak, moments and fit, left aside)."""
    fields = {f.name for f in dataclasses.fields(StagePeak)}
    return StagePeak(**{**{k: v for k, v in data.items() if k in fields}, "in_flight": tuple(data["in_flight"])})


def reserved_from(run: RunConfig) -> str:
    """`auto` (derived for the layout), `stated` (a number in the run config) or `unset` (0)."""
    if run.reserve is not None:
        return "auto"
    return "stated" if "reserved_mb" in run.device.model_fields_set else "unset"


def device_summary(run: RunConfig) -> dict[str, Any]:
    """The device as the run holds it: its memory, what it holds back, where that came from (auto, stated,
    unset: 0) and what the runtime takes outside the allocator on this layout (`config.runtime_reserve`)."""
    device = run.device
    return {
        "name": device.name,
        "memory_mb": device.profile().memory_mb,
        "reserved_mb": device.reserved,
        "reserved_from": reserved_from(run),
        "runtime_reserve": (run.reserve or run_reserve(run)).to_json(),
    }


def run_summary(run: RunConfig, in_flight: list[list[int]] | None = None) -> dict[str, Any]:
    par, train = run.parallel, run.training
    summary: dict[str, Any] = {
        "name": run.name,
        "source": run.source,
        "framework": run.framework,
        "models": run.model_names,
        "parallel": par.model_dump(mode="json"),
        "training": {
            "seq_length": train.seq_length,
            "micro_batch_size": train.micro_batch_size,
            "micro_batches": train.micro_batches,
            "dtype": train.dtype,
            "flash_attention": train.flash_attention,
        },
        "device": device_summary(run),
        "switches": {name: run.switches(name) for name in run.model_names},
    }
    if in_flight is not None:
        summary["micro_batches_in_flight"] = in_flight
    return summary


def kind_estimate(memory: MemoryModel, layer: Layer, count: int, times: TimeSource | None = None) -> KindEstimate:
    """The row of one distinct layer."""
    static = memory.static_breakdown(layer)
    splits = {}
    for option in OPTIONS:
        state, switches = memory.option_state(layer, option)
        one, per_mb, once = memory.buffers(layer, state, switches).split(memory.many)
        splits[option] = {"one": one, "per_micro_batch": per_mb, "once": once}
    forward_ms = backward_ms = None
    if times is not None:
        forward_ms, backward_ms = {}, {}
        for option in OPTIONS:
            forward_ms[option], backward_ms[option] = times.layer_times(layer, *memory.option_state(layer, option))
    return KindEstimate(
        model_name=layer.model_name,
        node=layer.node,
        kind=layer.kind.name,
        count=count,
        parameters=static.parameters,
        static_bytes=static.total,
        parameter_bytes=static.parameter_bytes,
        gradient_bytes=static.gradient_bytes,
        optimizer_bytes=static.optimizer_bytes,
        activation_bytes=memory.option_activation_bytes(layer),
        buffer_bytes_one=splits["NONE"]["one"],
        buffer_bytes_per_micro_batch=splits["NONE"]["per_micro_batch"],
        buffer_bytes_once=splits["NONE"]["once"],
        buffers_by_option=splits,
        layer_kind=layer.kind,
        forward_ms=forward_ms,
        backward_ms=backward_ms,
        activations=memory.activation_source(layer.model_name) if layer.node == "BODY" else "formulas",
    )


def estimate(
    run: RunConfig,
    memory: MemoryModel | None = None,
    times: TimeSource | None = None,
    layer_walk: LayerWalk | None = None,
    stages: bool = True,
) -> Estimate:
    """Every distinct layer kind of the run, evaluated once, and (with *stages*) each stage's peak.

    The stage summary runs each body layer at the option its run config's recompute asks for
    (`ppb_core.memory.configured_options`), and again with every body layer fully recomputed.
    """
    memory = memory if memory is not None else MemoryModel(run)
    layer_walk = layer_walk if layer_walk is not None else walk(run)
    first: dict[tuple[str, str, LayerKind], Layer] = {}
    counts: dict[tuple[str, str, LayerKind], int] = {}
    for layer in layer_walk:
        key = (layer.model_name, layer.node, layer.kind)
        if key not in first:
            first[key], counts[key] = layer, 0
        counts[key] += 1
    rows = tuple(kind_estimate(memory, first[key], counts[key], times) for key in first)
    in_flight = run_in_flight(run) if stages else None
    peaks: tuple[StagePeak, ...] = ()
    at_full: tuple[StagePeak, ...] = ()
    reserved: tuple[ReservedPools | None, ...] = ()
    if in_flight is not None:
        device = run.device
        sizes = (in_flight, device.profile().memory_mb * MB, device.reserved * MB)
        vectors, steps = run_in_flight_vectors(run), run_combined_steps(run)
        peaks = tuple(stage_peaks(memory, layer_walk, *sizes, vectors=vectors, steps=steps))
        at_full = tuple(stage_peaks(memory, layer_walk, *sizes, option_of=_full, vectors=vectors, steps=steps))
        pools = tuple(reserved_pools(memory, layer_walk, peak) for peak in peaks)
        reserved = pools if any(found is not None for found in pools) else ()
    summary = run_summary(run, in_flight)
    summary["stage_options"] = {name: configured_option(memory, name) for name in run.model_names}
    # each model's body layers per option as the run's recompute places them: Megatron's block method
    # and torchtitan's every N-th block mix FULL with the rest, which `stage_options` (the most) hides
    counted: dict[str, dict[str, int]] = {name: {} for name in run.model_names}
    for layer, option in configured_options(run, layer_walk).items():
        counted[layer.model_name][option] = counted[layer.model_name].get(option, 0) + 1
    summary["layer_options"] = {name: {o: counted[name][o] for o in OPTIONS if o in counted[name]} for name in counted}
    summary["activations"] = memory.activation_sources()
    if memory.fit is not None:
        summary["memory_calibration"] = memory.fit.to_json()
    # the time model says which calibration it applied (`TimeModel.calibration_json`); other time sources
    # carry none. Read by name so that the memory stage, which runs this without times, does not import
    # the time model (the chain's code versions follow imports).
    describe_calibration = getattr(times, "calibration_json", None)
    if describe_calibration is not None and (applied := describe_calibration()) is not None:
        summary["time_calibration"] = applied
    return Estimate(summary, rows, peaks, stages_at_full=at_full, reserved=reserved)


def _full(layer: Layer) -> str:
    return "FULL"


__all__ = [
    "Estimate",
    "KindEstimate",
    "device_summary",
    "estimate",
    "kind_estimate",
    "peak_from_json",
    "run_summary",
    "stage_json",
]
