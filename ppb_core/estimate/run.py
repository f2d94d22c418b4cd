"""The estimate of a run as data: one row per distinct (model, node, kind), and one per pipeline stage.

`estimate(run)` evaluates each distinct kind once through `MemoryModel`; `Estimate.to_json()`
is the `ppb estimate --json` contract (overview.md); `estimate_to_frame` / `estimate_from_frame`
(and the `stages_*` pair) are the tables the `layer_memory` asset stores.

Every row states bytes on one device: `activation_bytes[option]` per micro-batch in flight,
and the buffers split as seed §2.8 splits them at the option NONE (`buffers_by_option` has the
split of every option). With a `TimeSource`, rows also carry `forward_ms` and `backward_ms` per
option; this module only asks the source, it prices nothing itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel, StagePeak, configured_option, run_in_flight, run_in_flight_vectors, stage_peaks
from ppb_core.memory.peak import MB
from ppb_core.model.kinds import LayerKind, kind_from_dict, kind_to_dict
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import Layer, LayerWalk, walk
from ppb_core.payload.sources import TimeSource


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

    def to_json(self) -> dict[str, Any]:
        data = {
            "run": self.run,
            "layers": [row.to_json() for row in self.layers],
            "stages": [_stage_json(p) for p in self.stages],
        }
        if self.iteration is not None:
            data["iteration"] = dict(self.iteration)
        if self.stages_at_full:
            data["stages_at_full"] = [_stage_json(p) for p in self.stages_at_full]
        return data


def _number(value: float) -> int | float:
    """Bytes as an int where they are whole (they nearly always are), else the float."""
    return int(value) if float(value).is_integer() else float(value)


def _stage_json(peak: StagePeak) -> dict[str, Any]:
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
        "fits": peak.fits,
    }


def run_summary(run: RunConfig, in_flight: list[list[int]] | None = None) -> dict[str, Any]:
    par, train, device = run.parallel, run.training, run.device
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
        "device": {"name": device.name, "memory_mb": device.profile().memory_mb, "reserved_mb": device.reserved_mb},
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
    if in_flight is not None:
        device = run.device
        sizes = (in_flight, device.profile().memory_mb * MB, device.reserved_mb * MB)
        vectors = run_in_flight_vectors(run)
        peaks = tuple(stage_peaks(memory, layer_walk, *sizes, vectors=vectors))
        at_full = tuple(stage_peaks(memory, layer_walk, *sizes, option_of=_full, vectors=vectors))
    summary = run_summary(run, in_flight)
    summary["stage_options"] = {name: configured_option(memory, name) for name in run.model_names}
    summary["activations"] = memory.activation_sources()
    if memory.fit is not None:
        summary["memory_calibration"] = memory.fit.to_json()
    return Estimate(summary, rows, peaks, stages_at_full=at_full)


def _full(layer: Layer) -> str:
    return "FULL"


# --- tables -------------------------------------------------------------------------------------

_LOWER = {option: option.lower() for option in OPTIONS}
LAYER_COLUMNS: tuple[str, ...] = (
    "model_name",
    "node",
    "kind",
    "kind_json",
    "count",
    "parameters",
    "static_bytes",
    "parameter_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    *(f"activation_bytes_{_LOWER[o]}" for o in OPTIONS),
    "buffer_bytes_one",
    "buffer_bytes_per_micro_batch",
    "buffer_bytes_once",
    *(f"buffer_bytes_{part}_{_LOWER[o]}" for o in OPTIONS for part in ("one", "per_micro_batch", "once")),
    *(f"{which}_ms_{_LOWER[o]}" for which in ("forward", "backward") for o in OPTIONS),
)
STAGE_COLUMNS: tuple[str, ...] = (
    "recompute",  # "configured": as the run config asks; "full": every body layer fully recomputed
    "stage",
    "body_layers",
    "in_flight_json",
    "static_bytes",
    "activation_bytes",
    "buffer_bytes",
    "working_bytes",
    "loss_bytes",
    "step_static_bytes",
    "holds_tail",
    "reserved_bytes",
    "device_bytes",
    "peak_bytes",
    "moment",
    "fits",
)


def estimate_to_frame(result: Estimate):  # -> pd.DataFrame
    """One row per distinct kind (the `layer_memory` asset's table); bytes as float64, times nullable."""
    import pandas as pd

    records = []
    for row in result.layers:
        record: dict[str, Any] = {
            "model_name": row.model_name,
            "node": row.node,
            "kind": row.kind,
            "kind_json": json.dumps(kind_to_dict(row.layer_kind), sort_keys=True) if row.layer_kind else None,
            "count": row.count,
            "parameters": row.parameters,
            "static_bytes": row.static_bytes,
            "parameter_bytes": row.parameter_bytes,
            "gradient_bytes": row.gradient_bytes,
            "optimizer_bytes": row.optimizer_bytes,
            "buffer_bytes_one": row.buffer_bytes_one,
            "buffer_bytes_per_micro_batch": row.buffer_bytes_per_micro_batch,
            "buffer_bytes_once": row.buffer_bytes_once,
        }
        for option in OPTIONS:
            record[f"activation_bytes_{_LOWER[option]}"] = row.activation_bytes[option]
            for part in ("one", "per_micro_batch", "once"):
                record[f"buffer_bytes_{part}_{_LOWER[option]}"] = row.buffers_by_option[option][part]
            for which, values in (("forward", row.forward_ms), ("backward", row.backward_ms)):
                record[f"{which}_ms_{_LOWER[option]}"] = None if values is None else values[option]
        records.append(record)
    frame = pd.DataFrame.from_records(records, columns=list(LAYER_COLUMNS))
    dtypes: dict[str, str] = {c: "float64" for c in LAYER_COLUMNS if c.endswith("_bytes") or "_bytes_" in c}
    dtypes.update({c: "Float64" for c in LAYER_COLUMNS if "_ms_" in c})
    dtypes.update(
        {
            "count": "int64",
            "parameters": "int64",
            "model_name": "string",
            "node": "string",
            "kind": "string",
            "kind_json": "string",
        }
    )
    frame = frame.astype(dtypes)
    frame.attrs["run"] = json.dumps(result.run, sort_keys=True)
    return frame


def estimate_from_frame(frame, stages_frame=None, run: Mapping[str, Any] | None = None) -> Estimate:
    """The estimate back from its tables; *run* (the summary) defaults to the frame's attrs, else {}."""
    import pandas as pd

    if run is None:
        stored = frame.attrs.get("run")
        run = json.loads(stored) if stored else {}
    rows = []
    for record in frame.to_dict("records"):
        times = {}
        for which in ("forward", "backward"):
            values = {o: record[f"{which}_ms_{_LOWER[o]}"] for o in OPTIONS}
            times[which] = (
                None if all(pd.isna(v) for v in values.values()) else {o: float(v) for o, v in values.items()}
            )
        kind_json = record["kind_json"]
        rows.append(
            KindEstimate(
                model_name=str(record["model_name"]),
                node=str(record["node"]),
                kind=str(record["kind"]),
                count=int(record["count"]),
                parameters=int(record["parameters"]),
                static_bytes=float(record["static_bytes"]),
                parameter_bytes=float(record["parameter_bytes"]),
                gradient_bytes=float(record["gradient_bytes"]),
                optimizer_bytes=float(record["optimizer_bytes"]),
                activation_bytes={o: float(record[f"activation_bytes_{_LOWER[o]}"]) for o in OPTIONS},
                buffer_bytes_one=float(record["buffer_bytes_one"]),
                buffer_bytes_per_micro_batch=float(record["buffer_bytes_per_micro_batch"]),
                buffer_bytes_once=float(record["buffer_bytes_once"]),
                buffers_by_option={
                    o: {p: float(record[f"buffer_bytes_{p}_{_LOWER[o]}"]) for p in ("one", "per_micro_batch", "once")}
                    for o in OPTIONS
                },
                layer_kind=None if pd.isna(kind_json) else kind_from_dict(json.loads(kind_json)),
                forward_ms=times["forward"],
                backward_ms=times["backward"],
                activations=_activations_of(run, str(record["model_name"]), str(record["node"])),
            )
        )
    stages = stages_from_frame(stages_frame) if stages_frame is not None else ()
    at_full = stages_from_frame(stages_frame, "full") if stages_frame is not None else ()
    return Estimate(dict(run), tuple(rows), stages, stages_at_full=at_full)


def _activations_of(run: Mapping[str, Any], model_name: str, node: str) -> str:
    """A row's pricing source, as the run summary states it (census files price body layers)."""
    stated = dict(run.get("activations", {})).get(model_name, {})
    return f"census:{stated['file']}" if node == "BODY" and stated.get("source") == "census" else "formulas"


def stages_to_frame(result: Estimate):  # -> pd.DataFrame
    """One row per pipeline stage of the estimate's summary, then one per stage at full recompute."""
    import pandas as pd

    records = [
        {
            "recompute": recompute,
            "stage": p.stage,
            "body_layers": p.body_layers,
            "in_flight_json": json.dumps(list(p.in_flight)),
            "static_bytes": p.static_bytes,
            "activation_bytes": p.activation_bytes,
            "buffer_bytes": p.buffer_bytes,
            "working_bytes": p.working_bytes,
            "loss_bytes": p.loss_bytes,
            "step_static_bytes": p.step_static_bytes if p.step_static_bytes is not None else p.static_bytes,
            "holds_tail": p.holds_tail,
            "reserved_bytes": p.reserved_bytes,
            "device_bytes": p.device_bytes,
            "peak_bytes": p.peak_bytes,
            "moment": p.moment,
            "fits": p.fits,
        }
        for recompute, peaks in (("configured", result.stages), ("full", result.stages_at_full))
        for p in peaks
    ]
    frame = pd.DataFrame.from_records(records, columns=list(STAGE_COLUMNS))
    return frame.astype(
        {
            "recompute": "string",
            "stage": "int64",
            "body_layers": "int64",
            "in_flight_json": "string",
            "static_bytes": "float64",
            "activation_bytes": "float64",
            "buffer_bytes": "float64",
            "working_bytes": "float64",
            "loss_bytes": "float64",
            "step_static_bytes": "float64",
            "holds_tail": "bool",
            "reserved_bytes": "float64",
            "device_bytes": "float64",
            "peak_bytes": "float64",
            "moment": "string",
            "fits": "bool",
        }
    )


def stages_from_frame(frame, recompute: str = "configured") -> tuple[StagePeak, ...]:
    """The stages of *recompute* ("configured" or "full") back from their table."""
    return tuple(
        StagePeak(
            stage=int(r["stage"]),
            body_layers=int(r["body_layers"]),
            in_flight=tuple(json.loads(r["in_flight_json"])),
            static_bytes=float(r["static_bytes"]),
            activation_bytes=float(r["activation_bytes"]),
            buffer_bytes=float(r["buffer_bytes"]),
            working_bytes=float(r["working_bytes"]),
            reserved_bytes=float(r["reserved_bytes"]),
            device_bytes=float(r["device_bytes"]),
            loss_bytes=float(r["loss_bytes"]),
            step_static_bytes=float(r["step_static_bytes"]),
            holds_tail=bool(r["holds_tail"]),
        )
        for r in frame.to_dict("records")
        if r.get("recompute", "configured") == recompute
    )


__all__ = [
    "LAYER_COLUMNS",
    "STAGE_COLUMNS",
    "Estimate",
    "KindEstimate",
    "estimate",
    "estimate_from_frame",
    "estimate_to_frame",
    "kind_estimate",
    "run_summary",
    "stages_from_frame",
    "stages_to_frame",
]
