"""A balancer plan re-evaluated by the memory and time models, one row per pipeline stage.

`plan_stages` places each layer and recomputes it as the plan says, giving a per-stage table
(`REPORT_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel, run_in_flight, run_in_flight_vectors, stage_peaks
from ppb_core.model.placement import place_plan
from ppb_core.model.switches import OPTIONS
from ppb_core.timing import TimeModel

REPORT_COLUMNS: tuple[str, ...] = (
    "stage",  # pipeline stage, from 0
    "layers",  # body layers the stage holds, every chunk
    "options",  # the recompute options of those layers, e.g. "NONE 6 · FULL 2"
    "parameters_mb",  # parameters, gradients and optimizer states (with what is held once per layer)
    "activations_mb",  # activations of the micro-batches in flight at the stage's peak
    "buffers_mb",  # communication buffers and everything else the stage's peak holds
    "device_mb",  # the device memory the stage must fit in
    "forward_ms",  # forward of one micro-batch through the stage (every chunk)
    "backward_ms",  # backward of one micro-batch, recomputation included
)

# Optional: the stage memory the balancer predicted from the descriptions, drawn as a marker.
PLANNED_COLUMN = "planned_mb"

# Optional: the part of buffers_mb that is the backward's working set (descriptions have none).
WORKING_COLUMN = "working_mb"

MB = 2**20


def plan_stages(
    run: RunConfig, cell_options: Sequence[Sequence[Mapping[str, int]]], planned_mb: Sequence[float] | None = None
) -> pd.DataFrame:
    """Each stage of a plan as the memory and time models see it (`REPORT_COLUMNS`).

    *cell_options* [chunk][stage] maps options to body layer counts (the balancer's cells). Each
    layer is evaluated where the plan puts it, under the option its position in the cell gets;
    memory is the memory model's stage peak (parameters are the static bytes; buffers include the
    backward's working set, also given alone as `working_mb`, which SAPP's descriptions do not
    count; the device limit is its memory less what the run config reserves).
    """
    par = run.parallel
    placed, chosen = place_plan(run, cell_options)
    memory, times = MemoryModel(run), TimeModel(run)
    device = run.device
    peaks = stage_peaks(
        memory,
        placed,
        run_in_flight(run),
        device.profile().memory_mb * MB,
        device.reserved_mb * MB,
        option_of=lambda layer: chosen[layer],
        vectors=run_in_flight_vectors(run),
    )
    forward = [0.0] * par.pp
    backward = [0.0] * par.pp
    for layer in placed:
        state, switches = memory.option_state(layer, chosen.get(layer, "NONE"))
        f, b = times.layer_times(layer, state, switches)
        forward[layer.stage] += f
        backward[layer.stage] += b
    rows = []
    for peak in peaks:
        counts = {option: 0 for option in OPTIONS}
        for layer, option in chosen.items():
            if layer.stage == peak.stage:
                counts[option] += 1
        rows.append(
            {
                "stage": peak.stage,
                "layers": peak.body_layers,
                "options": " · ".join(f"{option} {n}" for option, n in counts.items() if n),
                "parameters_mb": peak.static_bytes / MB,
                "activations_mb": peak.activation_bytes / MB,
                "buffers_mb": (peak.buffer_bytes + peak.working_bytes) / MB,
                WORKING_COLUMN: peak.working_bytes / MB,
                "device_mb": (peak.device_bytes - peak.reserved_bytes) / MB,
                "forward_ms": forward[peak.stage],
                "backward_ms": backward[peak.stage],
            }
        )
    frame = pd.DataFrame(rows, columns=[*REPORT_COLUMNS, WORKING_COLUMN])
    if planned_mb is not None:
        frame[PLANNED_COLUMN] = [float(v) for v in planned_mb]
    return frame.astype({"stage": "int64", "layers": "int64", "options": "string"})
