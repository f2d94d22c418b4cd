"""The plan as a person would rather look at it: a chart of each stage's memory and time, and a summary.

`plan_stages` re-evaluates a balancer plan with the memory and time models (each layer placed
and recomputed as the plan says), giving a per-stage table (`REPORT_COLUMNS`, one row per
pipeline stage). `figure_png` and `summary_markdown` render such a table with matplotlib's Agg
backend into PNG bytes and markdown text, deterministically: the same table gives the same bytes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pandas as pd

from ppb_core.config import RunConfig
from ppb_core.memory import MemoryModel, run_in_flight, run_in_flight_vectors, stage_peaks
from ppb_core.model import BODY, HEAD, TAIL, Layer, LayerWalk, walk
from ppb_core.schedules import cell_order
from ppb_core.switches import OPTIONS
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
# Where MindFormers applies a cell's options along its layers (the yaml counts from the cell's
# first layer): full recompute first, then both selective kinds, then one, then none.
ALONG_A_CELL: tuple[str, ...] = ("FULL", "BOTH", "SLCT", "COMM", "NONE")
MEMORY_PARTS = (("parameters_mb", "parameters", "#4C72B0"), ("activations_mb", "activations", "#DD8452"),
                ("buffers_mb", "buffers", "#55A868"))
TIME_PARTS = (("forward_ms", "forward", "#8172B3"), ("backward_ms", "backward", "#C44E52"))


def check_report_table(stages: pd.DataFrame) -> None:
    missing = [c for c in REPORT_COLUMNS if c not in stages.columns]
    if missing:
        raise ValueError(f"the report table lacks {', '.join(missing)}")
    if stages.empty:
        raise ValueError("the report table has no stage")


def stage_memory_mb(stages: pd.DataFrame) -> pd.Series:
    return stages["parameters_mb"] + stages["activations_mb"] + stages["buffers_mb"]


def figure_png(stages: pd.DataFrame, title: str, time_unit: str = "ms") -> bytes:
    """Two panels: each stage's memory stacked (parameters, activations, buffers) against the
    device limit, and each stage's forward + backward time of one micro-batch."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    check_report_table(stages)
    x = list(range(len(stages)))
    labels = [str(s) for s in stages["stage"]]
    figure = Figure(figsize=(min(20.0, max(9.0, 1.4 * len(stages) + 3)), 4.4), dpi=100)
    memory_axes, time_axes = figure.subplots(1, 2)

    bottom = [0.0] * len(stages)
    for column, label, color in MEMORY_PARTS:
        values = stages[column].astype(float).tolist()
        memory_axes.bar(x, values, bottom=bottom, label=label, color=color, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    limits = stages["device_mb"].astype(float).tolist()
    memory_axes.step([i - 0.5 for i in x] + [x[-1] + 0.5], [*limits, limits[-1]], where="post",
                     color="black", linestyle="--", linewidth=1.2, label="device limit")
    if PLANNED_COLUMN in stages.columns:
        memory_axes.plot(x, stages[PLANNED_COLUMN].astype(float).tolist(), linestyle="none", marker="D",
                         markersize=5, color="black", label="balancer's estimate")
    memory_axes.set_title("memory per stage")
    memory_axes.set_xlabel("stage")
    memory_axes.set_ylabel("MB")
    memory_axes.set_ylim(0, max(max(bottom), max(limits)) * 1.35)
    memory_axes.legend(loc="upper center", fontsize=8, ncols=2)

    bottom = [0.0] * len(stages)
    for column, label, color in TIME_PARTS:
        values = stages[column].astype(float).tolist()
        time_axes.bar(x, values, bottom=bottom, label=label, color=color, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    time_axes.set_title("time of one micro-batch per stage")
    time_axes.set_xlabel("stage")
    time_axes.set_ylabel(time_unit)
    time_axes.set_ylim(0, max(bottom) * 1.25 if max(bottom) > 0 else 1)
    time_axes.legend(loc="upper center", fontsize=8, ncols=2)

    for axes in (memory_axes, time_axes):
        axes.set_xticks(x, labels)
        axes.grid(axis="y", alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _number(value: object, digits: int = 1) -> str:
    return f"{float(value):,.{digits}f}"


def summary_markdown(
    stages: pd.DataFrame,
    title: str,
    headline: Mapping[str, object] | Sequence[tuple[str, object]] = (),
    image: str | None = None,
    time_unit: str = "ms",
) -> str:
    """The plan in words: its headline figures, then one row per stage, the tightest stage named."""
    check_report_table(stages)
    memory = stage_memory_mb(stages)
    headroom = stages["device_mb"] - memory
    tightest = int(headroom.idxmin())
    busiest = int((stages["forward_ms"] + stages["backward_ms"]).idxmax())
    lines = [f"# {title}", ""]
    for key, value in (headline.items() if isinstance(headline, Mapping) else headline):
        lines.append(f"- **{key}**: {value}")
    lines += [
        f"- **stages**: {len(stages)}; every stage fits: {'yes' if (headroom >= 0).all() else 'NO'}",
        f"- **tightest stage**: {stages['stage'][tightest]} ({_number(memory[tightest], 0)} of "
        f"{_number(stages['device_mb'][tightest], 0)} MB, {_number(headroom[tightest], 0)} MB left)",
        f"- **slowest stage**: {stages['stage'][busiest]} "
        f"({_number(stages['forward_ms'][busiest] + stages['backward_ms'][busiest], 3)} {time_unit} a micro-batch)",
        "",
    ]
    if image:
        lines += [f"![memory and time per stage]({image})", ""]
    lines += [
        f"| stage | layers | options | parameters MB | activations MB | buffers MB | total MB | device MB "
        f"| forward {time_unit} | backward {time_unit} |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for index, row in stages.iterrows():
        lines.append(
            f"| {row['stage']} | {row['layers']} | {row['options']} | {_number(row['parameters_mb'])} "
            f"| {_number(row['activations_mb'])} | {_number(row['buffers_mb'])} | {_number(memory[index])} "
            f"| {_number(row['device_mb'], 0)} | {_number(row['forward_ms'], 3)} | {_number(row['backward_ms'], 3)} |"
        )
    return "\n".join(lines) + "\n"


# --- a plan, re-evaluated ---------------------------------------------------------------------------


def _placed_walk(run: RunConfig, cell_layers: Sequence[Sequence[int]]) -> LayerWalk:
    """The run's layers with the plan's body layers per [chunk][stage]; the first HEAD and the last
    TAIL in the first and last cells, where the balancer charges them, even when those hold no body."""
    par = run.parallel
    placed = walk(run, cell_layers)
    cells = cell_order(par.schedule, par.pp, par.vpp)
    layers = list(placed.layers)
    first_head = next(i for i, layer in enumerate(layers) if layer.node == HEAD)
    last_tail = max(i for i, layer in enumerate(layers) if layer.node == TAIL)
    layers[first_head] = replace(layers[first_head], chunk=cells[0][0], stage=cells[0][1])
    layers[last_tail] = replace(layers[last_tail], chunk=cells[-1][0], stage=cells[-1][1])
    return LayerWalk(placed.stages, placed.chunks, tuple(layers), placed.cell_counts)


def _options_along_cells(placed: LayerWalk, cell_options: Sequence[Sequence[Mapping[str, int]]]) -> dict[Layer, str]:
    """Each body layer's option: a cell's counts applied along its layers in MindFormers' order."""
    chosen: dict[Layer, str] = {}
    for chunk, row in enumerate(cell_options):
        for stage, counts in enumerate(row):
            sequence = [option for option in ALONG_A_CELL for _ in range(int(counts.get(option, 0)))]
            bodies = [layer for layer in placed.in_cell(chunk, stage) if layer.node == BODY]
            if len(bodies) != len(sequence):
                raise ValueError(
                    f"cell (chunk {chunk}, stage {stage}): {len(sequence)} options for {len(bodies)} body layers"
                )
            chosen.update(zip(bodies, sequence, strict=True))
    return chosen


def plan_stages(run: RunConfig, cell_options: Sequence[Sequence[Mapping[str, int]]],
                planned_mb: Sequence[float] | None = None) -> pd.DataFrame:
    """Each stage of a plan as the memory and time models see it (`REPORT_COLUMNS`).

    *cell_options* [chunk][stage] maps options to body layer counts (the balancer's cells). Each
    layer is evaluated where the plan puts it, under the option its position in the cell gets;
    memory is the memory model's stage peak (parameters are the static bytes; buffers include the
    backward's working set, also given alone as `working_mb`, which SAPP's descriptions do not
    count; the device limit is its memory less what the run config reserves).
    """
    par = run.parallel
    cell_layers = [[sum(int(n) for n in cell.values()) for cell in row] for row in cell_options]
    placed = _placed_walk(run, cell_layers)
    chosen = _options_along_cells(placed, cell_options)
    memory, times = MemoryModel(run), TimeModel(run)
    device = run.device
    peaks = stage_peaks(memory, placed, run_in_flight(run), device.profile().memory_mb * MB, device.reserved_mb * MB,
                        option_of=lambda layer: chosen[layer], vectors=run_in_flight_vectors(run))
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
        rows.append({
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
        })
    frame = pd.DataFrame(rows, columns=[*REPORT_COLUMNS, WORKING_COLUMN])
    if planned_mb is not None:
        frame[PLANNED_COLUMN] = [float(v) for v in planned_mb]
    return frame.astype({"stage": "int64", "layers": "int64", "options": "string"})


def report_files(stages: pd.DataFrame) -> dict[str, bytes]:
    """The report's files from its table: `.png` the chart, `.md` the summary linking it.

    The title, the headline figures and the image's file name come from the table's attrs
    (`title`, `headline` as JSON pairs, `image`).
    """
    title = str(stages.attrs.get("title", "plan"))
    headline = json.loads(stages.attrs.get("headline", "[]"))
    png = figure_png(stages, title)
    text = summary_markdown(stages, title, [tuple(pair) for pair in headline], image=stages.attrs.get("image"))
    return {".png": png, ".md": text.encode()}
