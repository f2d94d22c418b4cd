"""The plan's report as a table: each stage re-evaluated by the memory and time models.

The summary holds what the rendered report says besides the rows: its `title`, its `headline`
(pairs of label and text) and the `image` file name the markdown links.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ppb_core.estimate.plan import StageEvaluation
from ppb_core.tables.schema import Column, Schema
from ppb_core.units import MB

PLAN_REPORT = Schema(
    "plan_report",
    "Each stage of the plan re-evaluated layer by layer by the memory and time models. Summary: "
    "the report's title, headline figures and image name.",
    (
        Column("stage", "int64", "the pipeline stage, from 0"),
        Column("layers", "int64", "body layers the stage holds, every chunk", "layers"),
        Column("options", "string", "the recompute options of those layers, e.g. 'NONE 6 · FULL 2'"),
        Column("parameters_mb", "float64", "parameters, gradients and optimizer states", "MB"),
        Column("activations_mb", "float64", "activations of the micro-batches in flight at the stage's peak", "MB"),
        Column("buffers_mb", "float64", "communication buffers and the backward's working set at the peak", "MB"),
        Column("working_mb", "float64", "of the buffers, the backward's working set (descriptions have none)", "MB"),
        Column(
            "peak_mb",
            "float64",
            "the stage's peak, its largest moment (backward, loss, gradient reduction, optimizer step), "
            "reserved memory excluded: the three parts above at the backward, other terms at the others",
            "MB",
        ),
        Column("moment", "string", "the moment that sets the peak: backward, loss, first_loss, reduction or optimizer"),
        Column(
            "allocator_mb",
            "float64",
            "what the fit counts beyond the peak: the caching allocator's reserve (torchtitan FSDP2) and async TP's "
            "symmetric workspace (torchtitan); else 0",
            "MB",
        ),
        Column("device_mb", "float64", "the memory the stage must fit in: the device's less reserved_mb", "MB"),
        Column("forward_ms", "float64", "forward of one micro-batch through the stage, every chunk", "ms"),
        Column("backward_ms", "float64", "backward of one micro-batch, recomputation included", "ms"),
        Column("planned_mb", "Float64", "the stage's memory as the balancer predicted it (null: none)", "MB"),
        Column("models", "string", "what the stage holds of each sub-model, e.g. 'vit HEAD + 7 · llm 7 + TAIL'"),
    ),
)


def report_to_frame(stages: Sequence[StageEvaluation], planned_mb: Sequence[float] | None = None) -> pd.DataFrame:
    """One row per stage; *planned_mb* the balancer's prediction of each."""
    return PLAN_REPORT.frame(
        {
            "stage": s.peak.stage,
            "layers": s.peak.body_layers,
            "options": " · ".join(f"{option} {n}" for option, n in s.options.items() if n),
            "parameters_mb": s.peak.static_bytes / MB,
            "activations_mb": s.peak.activation_bytes / MB,
            "buffers_mb": (s.peak.buffer_bytes + s.peak.working_bytes) / MB,
            "working_mb": s.peak.working_bytes / MB,
            "peak_mb": (s.peak.peak_bytes - s.peak.reserved_bytes) / MB,
            "moment": s.peak.moment,
            "allocator_mb": s.peak.allocator_bytes / MB,
            "device_mb": (s.peak.device_bytes - s.peak.reserved_bytes) / MB,
            "forward_ms": s.forward_ms,
            "backward_ms": s.backward_ms,
            "planned_mb": None if planned_mb is None else float(planned_mb[index]),
            "models": s.models,
        }
        for index, s in enumerate(stages)
    )


def stage_memory_mb(report: pd.DataFrame) -> pd.Series:
    """Each stage's memory by the memory model as its fit counts it: its peak, the largest moment (issue 11),
    which is parameters + activations + buffers only where the backward sets it (the loss's transient,
    torchtitan's fp32 logits, or the optimizer step can set it higher), and what the caching allocator
    reserves beyond it (`allocator_mb`: torchtitan FSDP2's stream pools and async TP's symmetric workspace,
    `StagePeak.allocator_bytes`)."""
    return report["peak_mb"] + report["allocator_mb"]
