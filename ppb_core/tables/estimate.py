"""A run's estimate as tables: each distinct layer's memory and times, each stage's peak.

`layer_memory` stores `estimate_to_frame` (one row per distinct (model, node, kind)) with the
run's summary and each stage's peak as its summary (`Summarized`); `layer_times` stores the time
columns of the same rows (`times_frame`). `stages_to_frame` is the stage peaks as a table.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ppb_core.estimate.run import (
    Estimate,
    KindEstimate,
    peak_from_json,
    reserved_from_json,
    reserved_json,
    stage_json,
)
from ppb_core.memory import StagePeak
from ppb_core.model.kinds import kind_from_dict
from ppb_core.model.switches import OPTIONS
from ppb_core.tables.kinds import KIND_JSON, kind_json
from ppb_core.tables.schema import Column, Schema, Summarized

_LOWER = {option: option.lower() for option in OPTIONS}
_PARTS = {
    "one": "held for one micro-batch in flight",
    "per_micro_batch": "added per micro-batch in flight",
    "once": "held once whatever the micro-batches in flight",
}

KEY_COLUMNS: tuple[Column, ...] = (
    Column("model_name", "string", "the sub-model"),
    Column("node", "string", "HEAD, BODY or TAIL"),
    Column("kind", "string", "the layer kind's name"),
    KIND_JSON,
    Column("count", "int64", "layers of the walk of this (model, node, kind)", "layers"),
)

TIME_COLUMNS: tuple[Column, ...] = tuple(
    Column(
        f"{which}_ms_{_LOWER[o]}",
        "Float64",
        f"{which} of one micro-batch through one layer under {o}"
        + (", recomputation included" if which == "backward" else "")
        + "; null without a time model",
        "ms",
    )
    for which in ("forward", "backward")
    for o in OPTIONS
)

LAYER_MEMORY = Schema(
    "layer_memory",
    "Each distinct layer's bytes on one device under every recompute option. Summary: the run "
    "(`run`) and each stage's peak against the device (`stages`).",
    (
        *KEY_COLUMNS,
        Column("parameters", "int64", "parameter elements one device holds (after ZeRO-3/FSDP sharding)", "elements"),
        Column("static_bytes", "float64", "parameters, gradients and optimizer states on one device", "bytes"),
        Column("parameter_bytes", "float64", "parameters on one device", "bytes"),
        Column("gradient_bytes", "float64", "gradients on one device", "bytes"),
        Column("optimizer_bytes", "float64", "optimizer states (master copy and moments) on one device", "bytes"),
        *(
            Column(f"activation_bytes_{_LOWER[o]}", "float64", f"activations kept per micro-batch under {o}", "bytes")
            for o in OPTIONS
        ),
        *(
            Column(f"buffer_bytes_{part}", "float64", f"communication buffers {text}, under NONE", "bytes")
            for part, text in _PARTS.items()
        ),
        *(
            Column(f"buffer_bytes_{part}_{_LOWER[o]}", "float64", f"communication buffers {text}, under {o}", "bytes")
            for o in OPTIONS
            for part, text in _PARTS.items()
        ),
        *TIME_COLUMNS,
    ),
)

LAYER_TIMES = Schema(
    "layer_times",
    "Each distinct layer's forward and backward milliseconds under every recompute option.",
    (*KEY_COLUMNS, *TIME_COLUMNS),
)

STAGE_PEAKS = Schema(
    "stage_peaks",
    "Each pipeline stage's memory peak against the device: the run as configured, then at full recompute.",
    (
        Column(
            "recompute", "string", "configured: the stages as the run config asks; full: every body layer recomputed"
        ),
        Column("stage", "int64", "the pipeline stage, from 0"),
        Column("body_layers", "int64", "body layers the stage holds, every chunk", "layers"),
        Column("in_flight_json", "string", "micro-batches in flight of each chunk at the peak", "JSON"),
        Column("static_bytes", "float64", "parameters, gradients and optimizer states", "bytes"),
        Column("activation_bytes", "float64", "activations of the micro-batches in flight", "bytes"),
        Column("buffer_bytes", "float64", "communication buffers", "bytes"),
        Column("working_bytes", "float64", "the largest working set of one layer's backward", "bytes"),
        Column("loss_bytes", "float64", "what the loss holds beyond the TAIL's kept activations", "bytes"),
        Column("step_static_bytes", "float64", "static memory at the optimizer step", "bytes"),
        Column("holds_tail", "bool", "whether the stage holds a TAIL (and so the loss)"),
        Column(
            "reduction_bytes",
            "Float64",
            "what the gradient reduction holds beyond the step's static memory (null: no moment of its own)",
            "bytes",
        ),
        Column(
            "first_call_bytes",
            "float64",
            "what the loss's first call adds once, in the first iteration (a compiled loss autotuning)",
            "bytes",
        ),
        Column(
            "first_step_bytes",
            "float64",
            "static memory the first optimizer step creates (Adam's moments), where the first call adds any",
            "bytes",
        ),
        Column("reserved_bytes", "float64", "what the run config reserves (reserved_mb)", "bytes"),
        Column("device_bytes", "float64", "the device's memory", "bytes"),
        Column("peak_bytes", "float64", "the stage's peak: the largest of its moments", "bytes"),
        Column("moment", "string", "the moment that sets the peak: backward, loss, first_loss, reduction or optimizer"),
        Column(
            "allocator_bytes",
            "float64",
            "what the caching allocator reserves beyond the peak (torchtitan FSDP2's pools; else 0), and async TP's "
            "symmetric workspace",
            "bytes",
        ),
        Column(
            "symm_workspace_bytes",
            "float64",
            "of allocator_bytes, torchtitan async TP's symmetric-memory workspace, outside the caching allocator",
            "bytes",
        ),
        Column("fits", "bool", "whether the peak and allocator_bytes are within the device's memory"),
    ),
)


def estimate_to_frame(result: Estimate) -> Summarized:
    """One row per distinct kind; the run's summary and the stage peaks as the table's summary."""
    records = []
    for row in result.layers:
        record: dict[str, Any] = {
            "model_name": row.model_name,
            "node": row.node,
            "kind": row.kind,
            "kind_json": kind_json(row.layer_kind) if row.layer_kind else None,
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
            for part in _PARTS:
                record[f"buffer_bytes_{part}_{_LOWER[option]}"] = row.buffers_by_option[option][part]
            for which, values in (("forward", row.forward_ms), ("backward", row.backward_ms)):
                record[f"{which}_ms_{_LOWER[option]}"] = None if values is None else values[option]
        records.append(record)
    summary = {
        "run": result.run,
        "stages": [stage_json(peak) for peak in result.stages],
        "stages_at_full": [stage_json(peak) for peak in result.stages_at_full],
        "iteration": result.iteration,
        "allocator_reserved": [None if pools is None else reserved_json(pools) for pools in result.reserved],
    }
    return Summarized(LAYER_MEMORY.frame(records), json.loads(json.dumps(summary)))


def times_frame(layers: Summarized | pd.DataFrame) -> pd.DataFrame:
    """The time columns of an estimate's rows (the `layer_times` table)."""
    frame = layers.frame if isinstance(layers, Summarized) else layers
    return frame[LAYER_TIMES.names].reset_index(drop=True)


def estimate_from_frame(stored: Summarized | pd.DataFrame, run: Mapping[str, Any] | None = None) -> Estimate:
    """The estimate back from its table; *run* (the summary) defaults to the stored summary's, else {}."""
    frame, summary = (stored.frame, stored.summary) if isinstance(stored, Summarized) else (stored, {})
    LAYER_MEMORY.require(frame)
    run = dict(summary.get("run", {}) if run is None else run)
    rows = []
    for record in frame.to_dict("records"):
        times = {}
        for which in ("forward", "backward"):
            values = {o: record[f"{which}_ms_{_LOWER[o]}"] for o in OPTIONS}
            times[which] = (
                None if all(pd.isna(v) for v in values.values()) else {o: float(v) for o, v in values.items()}
            )
        kind_text = record["kind_json"]
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
                    o: {p: float(record[f"buffer_bytes_{p}_{_LOWER[o]}"]) for p in _PARTS} for o in OPTIONS
                },
                layer_kind=None if pd.isna(kind_text) else kind_from_dict(json.loads(kind_text)),
                forward_ms=times["forward"],
                backward_ms=times["backward"],
                activations=_activations_of(run, str(record["model_name"]), str(record["node"])),
            )
        )
    stages = tuple(peak_from_json(peak) for peak in summary.get("stages", []))
    at_full = tuple(peak_from_json(peak) for peak in summary.get("stages_at_full", []))
    reserved = tuple(
        None if pools is None else reserved_from_json(pools) for pools in summary.get("allocator_reserved", [])
    )
    return Estimate(run, tuple(rows), stages, summary.get("iteration"), at_full, reserved)


def _activations_of(run: Mapping[str, Any], model_name: str, node: str) -> str:
    """A row's pricing source, as the run summary states it (census files price body layers)."""
    stated = dict(run.get("activations", {})).get(model_name, {})
    return f"census:{stated['file']}" if node == "BODY" and stated.get("source") == "census" else "formulas"


def stages_to_frame(result: Estimate) -> pd.DataFrame:
    """One row per pipeline stage's peak as configured, then one per stage at full recompute."""
    return STAGE_PEAKS.frame(
        {
            **dataclasses.asdict(peak),
            "recompute": recompute,
            "in_flight_json": json.dumps(list(peak.in_flight)),
            "step_static_bytes": peak.static_bytes if peak.step_static_bytes is None else peak.step_static_bytes,
            "peak_bytes": peak.peak_bytes,
            "moment": peak.moment,
            "fits": peak.fits,
        }
        for recompute, peaks in (("configured", result.stages), ("full", result.stages_at_full))
        for peak in peaks
    )


def stages_from_frame(frame: pd.DataFrame, recompute: str = "configured") -> tuple[StagePeak, ...]:
    """The stages of *recompute* ("configured" or "full") back from their table."""
    STAGE_PEAKS.require(frame)
    fields = [f.name for f in dataclasses.fields(StagePeak)]

    def reduction(value: object) -> float | None:  # a nullable column: <NA> where no such moment
        return None if value is None or pd.isna(value) else float(value)  # type: ignore[arg-type]

    return tuple(
        peak_from_json(
            {
                **{k: r[k] for k in fields if k in r},
                "in_flight": json.loads(r["in_flight_json"]),
                "reduction_bytes": reduction(r.get("reduction_bytes")),
            }
        )
        for r in frame.to_dict("records")
        if r["recompute"] == recompute
    )
