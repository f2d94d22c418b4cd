"""The plan as a person would rather look at it: a chart of each stage's memory and time, and a summary.

`figure_png` and `summary_markdown` render a plan's stage table (`ppb_core.tables.report`) with
matplotlib's Agg backend into PNG bytes and markdown text, deterministically: the same table
gives the same bytes.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from ppb_core.pipeline_lockstep import lockstep_timeline
from ppb_core.schedules import simulate
from ppb_core.tables.report import PLAN_REPORT, stage_memory_mb
from ppb_core.tables.schema import Summarized

MEMORY_PARTS = (
    ("parameters_mb", "parameters", "#4C72B0"),
    ("activations_mb", "activations", "#DD8452"),
    ("buffers_mb", "buffers", "#55A868"),
)

TIME_PARTS = (("forward_ms", "forward", "#8172B3"), ("backward_ms", "backward", "#C44E52"))


def held_models(stages: pd.DataFrame) -> list[str] | None:
    """Each stage's sub-models (the `models` column) where the plan has more than one sub-model, else None."""
    held = [str(value) for value in stages["models"]]
    names = {part.split(" ")[0] for value in held for part in value.split(" · ") if part}
    return held if len(names) > 1 else None


def check_report_table(stages: pd.DataFrame) -> None:
    PLAN_REPORT.require(stages)
    if stages.empty:
        raise ValueError("the report table has no stage")


def figure_png(
    stages: pd.DataFrame, title: str, time_unit: str = "ms", timeline: Mapping[str, Any] | None = None
) -> bytes:
    """Two panels: each stage's memory stacked (parameters, activations, buffers: the backward's)
    against the device limit, with a peak mark where another moment sets it higher, and each
    stage's forward + backward time of one micro-batch. With *timeline* (a balance result's
    `timeline` in seconds, `plan_in_seconds`: the plan's and the best uniform split's cell times),
    below them the iteration of each as a Gantt chart on one time axis."""
    check_report_table(stages)
    x = list(range(len(stages)))
    labels = [str(s) for s in stages["stage"]]
    held = held_models(stages)
    if held is not None:  # which sub-models each stage holds, under its number
        labels = [f"{label}\n" + value.replace(" · ", "\n") for label, value in zip(labels, held, strict=True)]
    runs = [(key, timeline[key]) for key in ("plan", "baseline") if timeline and timeline.get(key)]
    width = min(20.0, max(9.0, 1.4 * len(stages) + 3))
    height = 4.4 + sum(1.0 + 0.28 * len(run["forward_s"][0]) for _, run in runs)
    figure = Figure(figsize=(width, height), dpi=100)
    grid = figure.add_gridspec(
        1 + len(runs), 2, height_ratios=[4.4, *(1.0 + 0.28 * len(run["forward_s"][0]) for _, run in runs)]
    )
    memory_axes, time_axes = figure.add_subplot(grid[0, 0]), figure.add_subplot(grid[0, 1])
    if runs:
        longest = max(float(run["iteration_s"]) for _, run in runs)
        for row, (key, run) in enumerate(runs, start=1):
            label = "plan" if key == "plan" else f"best uniform split ({run.get('option', '')})"
            timeline_axes(figure.add_subplot(grid[row, :]), run, label, longest)

    bottom = [0.0] * len(stages)
    for column, label, color in MEMORY_PARTS:
        values = stages[column].astype(float).tolist()
        memory_axes.bar(x, values, bottom=bottom, label=label, color=color, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    limits = stages["device_mb"].astype(float).tolist()
    memory_axes.step(
        [i - 0.5 for i in x] + [x[-1] + 0.5],
        [*limits, limits[-1]],
        where="post",
        color="black",
        linestyle="--",
        linewidth=1.2,
        label="device limit",
    )
    peaks = stages["peak_mb"].astype(float).tolist()
    if any(peak > top + 0.5 for peak, top in zip(peaks, bottom, strict=True)):
        # a stage whose peak is another moment than the backward's (the loss, the optimizer step)
        memory_axes.plot(
            x, peaks, linestyle="none", marker="_", markersize=28, markeredgewidth=2, color="#C44E52", label="peak"
        )
    if stages["planned_mb"].notna().all():
        memory_axes.plot(
            x,
            stages["planned_mb"].astype(float).tolist(),
            linestyle="none",
            marker="D",
            markersize=5,
            color="black",
            label="balancer's estimate",
        )
    memory_axes.set_title("memory per stage")
    memory_axes.set_xlabel("stage")
    memory_axes.set_ylabel("MB")
    memory_axes.set_ylim(0, max(max(bottom), max(peaks), max(limits)) * 1.35)
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


TIMELINE_COLORS = {"F": "#8172B3", "B": "#C44E52", "R": "#E5AE38"}
# with interleaving (V > 1) each chunk's forward and backward in its own colour, so a reader tells
# the virtual stages' ops apart (chunk 0 keeps the colours a V = 1 chart uses); recompute stays one
CHUNK_COLORS = {
    "F": ("#8172B3", "#4C72B0", "#64B5CD", "#2A3F8F"),
    "B": ("#C44E52", "#7A1F3D", "#937860", "#DA8BC3"),
}
KIND_NAMES = {"F": "forward", "R": "recompute", "B": "backward"}


def timeline_style(kind: str, chunk: int, chunks: int) -> tuple[str, str]:
    """The colour and legend label of one chunk's forward or backward bars (recompute: one for all)."""
    if kind == "R" or chunks == 1:
        return TIMELINE_COLORS[kind], KIND_NAMES[kind]
    palette = CHUNK_COLORS[kind]
    return palette[chunk % len(palette)], f"{KIND_NAMES[kind]}, chunk {chunk}"


def timeline_axes(axes: Any, run: Mapping[str, Any], label: str, longest_s: float) -> None:
    """One schedule run as a Gantt chart in seconds: per stage a row, each forward, recompute (the
    start of a backward) and backward a bar, idle time blank (the bubbles); with V > 1 chunks each
    chunk's forward and backward in its own colour, one legend entry each."""
    forward, backward, recompute = run["forward_s"], run["backward_s"], run["recompute_s"]
    group = run.get("microbatch_group_size_per_vp_stage")
    if run.get("lock_step"):  # torchtitan's interleaved schedule, as the balancer timed it (`schedule_times`)
        free = [[0.0] * len(forward[0]) for _ in forward]
        timeline = lockstep_timeline(forward, backward, int(run["micro_batches"]), free)
    else:
        timeline = simulate(str(run["schedule"]), forward, backward, int(run["micro_batches"]), group=group)
    stages, chunks = len(timeline.orders), len(forward)
    # one collection per (kind, chunk, stage): a collection per bar made matplotlib rescale over
    # every bar drawn so far, quadratic in the bars (DeepSeek-V3's 24,000 took 8 minutes)
    bars: dict[tuple[str, int], list[list[tuple[float, float]]]] = {
        (kind, chunk): [[] for _ in range(stages)] for kind in "FRB" for chunk in range(chunks)
    }
    for stage, (order, starts, ends) in enumerate(zip(timeline.orders, timeline.starts, timeline.ends, strict=True)):
        for op, start, end in zip(order, starts, ends, strict=True):
            if op.kind == "F":
                bars["F", op.chunk][stage].append((start, end - start))
                continue
            again = min(float(recompute[op.chunk][stage]), end - start)
            if again > 0:
                bars["R", op.chunk][stage].append((start, again))
            bars["B", op.chunk][stage].append((start + again, end - start - again))
    labelled: set[str] = set()
    for kind in ("F", "R", "B"):
        for chunk in range(chunks):
            color, name = timeline_style(kind, chunk, chunks)
            for stage, ranges in enumerate(bars[kind, chunk]):
                if ranges:
                    # the first collection of a colour carries its legend label, the others none
                    tag = name if name not in labelled else "_nolegend_"
                    labelled.add(name)
                    axes.broken_barh(ranges, (stage - 0.4, 0.8), facecolors=color, label=tag)
    busy = sum(timeline.busy(stage) for stage in range(stages))
    idle = 1 - busy / (stages * timeline.makespan) if timeline.makespan > 0 else 0.0
    # the schedule of the layers' times alone: the iteration in the report adds P2P, the data-parallel
    # reduction and the optimizer step (timing.iteration), so "iteration" here named another figure
    axes.set_title(f"{label}: layers scheduled in {timeline.makespan:.4g} s, {idle:.1%} of the stages' time idle")
    axes.set_xlim(0, longest_s * 1.01 if longest_s > 0 else 1)
    axes.set_ylim(stages - 0.5, -0.5)
    axes.set_yticks(range(stages))
    axes.set_ylabel("stage")
    axes.set_xlabel("seconds")
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


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
    for key, value in headline.items() if isinstance(headline, Mapping) else headline:
        lines.append(f"- **{key}**: {value}")
    lines += [
        f"- **stages**: {len(stages)}; every stage fits: {'yes' if (headroom >= 0).all() else 'NO'}",
        f"- **tightest stage**: {stages['stage'][tightest]} ({_number(memory[tightest], 0)} of "
        f"{_number(stages['device_mb'][tightest], 0)} MB usable at its {stages['moment'][tightest]}, "
        + (
            f"{_number(stages['allocator_mb'][tightest], 0)} MB of it outside the allocated peak (the caching "
            "allocator's reserve, async TP's workspace), "
            if stages["allocator_mb"][tightest]
            else ""
        )
        + f"{_number(headroom[tightest], 0)} MB left)",
        f"- **slowest stage**: {stages['stage'][busiest]} "
        f"({_number(stages['forward_ms'][busiest] + stages['backward_ms'][busiest], 3)} {time_unit} a micro-batch)",
        "",
    ]
    if image:
        lines += [f"![memory and time per stage]({image})", ""]
    held = held_models(stages)
    models_header, models_rule = (" models |", "---|") if held is not None else ("", "")
    lines += [
        f"| stage | layers |{models_header} options | parameters MB | activations MB | buffers MB | peak MB "
        f"| moment | usable MB | forward {time_unit} | backward {time_unit} |",
        f"|---:|---:|{models_rule}---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for index, row in stages.iterrows():
        models = f" {held[index]} |" if held is not None else ""
        lines.append(
            f"| {row['stage']} | {row['layers']} |{models} {row['options']} | {_number(row['parameters_mb'])} "
            f"| {_number(row['activations_mb'])} | {_number(row['buffers_mb'])} | {_number(row['peak_mb'])} "
            f"| {row['moment']} | {_number(row['device_mb'], 0)} | {_number(row['forward_ms'], 3)} "
            f"| {_number(row['backward_ms'], 3)} |"
        )
    return "\n".join(lines) + "\n"


def report_files(report: Summarized) -> dict[str, bytes]:
    """The report's files from its table: `.png` the chart, `.md` the summary linking it.

    The title, the headline figures and the image's file name come from the table's summary
    (`title`, `headline` as pairs, `image`).
    """
    stages, about = report.frame, report.summary
    title = str(about.get("title", "plan"))
    png = figure_png(stages, title, timeline=about.get("timeline"))
    text = summary_markdown(stages, title, [tuple(pair) for pair in about.get("headline", [])], about.get("image"))
    return {".png": png, ".md": text.encode()}


def embedded_markdown(report: Summarized, files: Mapping[str, bytes] | None = None) -> str:
    """The report's summary with its chart inside (a PNG data URI): one text that shows it all."""
    files = files if files is not None else report_files(report)
    image = base64.b64encode(files[".png"]).decode()
    link = f"]({report.summary.get('image')})"
    return files[".md"].decode().replace(link, f"](data:image/png;base64,{image})")


def _gain(planned: float, uniform: float) -> str:
    """The ratio of two iterations, said the way it goes: a plan the balancer found faster by its layer
    times can come out slower by the whole time model (combined bodies)."""
    gain = f"{uniform / planned:.3f}× faster than" if uniform >= planned else f"{planned / uniform:.3f}× slower than"
    # "1.000×": the plan is the uniform split (configs/llama3.1-8b-torchtitan.yaml, PP 1)
    return "as fast as" if gain.startswith("1.000×") else gain


def console_summary(report: Summarized, report_path: str | Path) -> list[str]:
    """What a run says when it ends: whether each stage fits, the plan's iteration and gain, the report."""
    stages, about = report.frame, report.summary
    need = stage_memory_mb(stages)
    lines = [
        f"stage {stage}: {'fits' if used <= limit else 'DOES NOT FIT'}, {used / 1024:,.1f} of {limit / 1024:,.1f} GiB"
        for stage, used, limit in zip(stages["stage"], need, stages["device_mb"], strict=True)
    ]
    planned, uniform = about.get("iteration_s"), about.get("baseline_iteration_s")
    if planned and uniform:
        lines.append(
            f"plan: {planned:,.3f} s an iteration, {_gain(planned, uniform)} the best uniform split "
            f"({about.get('baseline')} everywhere, {uniform:,.3f} s)"
        )
        runnable = about.get("megatron_iteration_s")
        if runnable:  # the plan mixes recompute Megatron-Core cannot say: what the flags printed for it run
            lines.append(
                f"Megatron-LM's flags (the fastest plan it can say): {runnable:,.3f} s an iteration, "
                f"{_gain(runnable, uniform)} the best uniform split"
            )
    lines.append(f"report: {report_path}")
    return lines
