"""The plan report: a deterministic PNG of memory and time per stage, and a markdown summary."""

from __future__ import annotations

import struct

import pandas as pd
import pytest
from matplotlib.figure import Figure

from ppb_core.estimate.plan import speedup_words
from ppb_core.report.render import console_summary, figure_png, summary_markdown, timeline_axes
from ppb_core.tables.report import PLAN_REPORT
from ppb_core.tables.schema import Summarized


@pytest.fixture
def stages() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "stage": [0, 1, 2, 3],
            "layers": [8, 8, 8, 8],
            "options": ["SLCT 8", "SLCT 8", "NONE 8", "NONE 8"],
            "parameters_mb": [30000.0, 27000.0, 27000.0, 35000.0],
            "activations_mb": [40000.0, 15000.0, 10000.0, 5000.0],
            "buffers_mb": [2500.0, 2000.0, 2000.0, 2000.0],
            "working_mb": [500.0] * 4,
            # stage 3's loss sets its peak: 35000 + 5000 + 1500 (buffers less the working set) + 3000 (loss)
            "peak_mb": [72500.0, 44000.0, 39000.0, 44500.0],
            "moment": ["backward", "backward", "backward", "loss"],
            "allocator_mb": [0.0] * 4,  # a Megatron plan: the fit is the peak's
            "device_mb": [76000.0] * 4,
            "forward_ms": [10.0, 9.0, 9.0, 12.0],
            "backward_ms": [20.5, 18.0, 18.0, 24.0],
            "planned_mb": pd.array([None] * 4, dtype="Float64"),
            "models": ["llm HEAD + 8", "llm 8", "llm 8", "llm 8 + TAIL"],
        }
    )


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_figure_is_a_png_of_the_declared_size_and_deterministic(stages: pd.DataFrame) -> None:
    first = figure_png(stages, "llama3-8b")
    assert first == figure_png(stages, "llama3-8b")
    # max(9, 1.4·4 + 3) × 4.4 inches at 100 dpi.
    assert png_size(first) == (900, 440)
    assert first != figure_png(stages.assign(backward_ms=stages["backward_ms"] * 2), "llama3-8b")


def test_summary_names_the_tightest_and_slowest_stage(stages: pd.DataFrame) -> None:
    text = summary_markdown(stages, "llama3-8b plan", {"status": "optimal"}, image="plan.png")
    # Stage 0 holds 30000 + 40000 + 2500 = 72500 MB of 76000: 3500 left, the least of all.
    assert "- **tightest stage**: 0 (72,500 of 76,000 MB usable at its backward, 3,500 MB left)" in text
    # Stage 3 takes 12 + 24 = 36 ms a micro-batch; stage 0 only 30.5.
    assert "- **slowest stage**: 3 (36.000 ms a micro-batch)" in text
    assert "- **status**: optimal" in text and "every stage fits: yes" in text
    assert "![memory and time per stage](plan.png)" in text


def test_a_torchtitan_stage_fits_with_what_the_allocator_reserves(stages: pd.DataFrame) -> None:
    # torchtitan FSDP2: stage 0's pools reserve 4000 MB beyond its 72500 MB peak, 76500 of 76000: over by 500
    charged = stages.assign(allocator_mb=[4000.0, 0.0, 0.0, 0.0])
    text = summary_markdown(charged, "titan plan")
    assert "every stage fits: NO" in text
    assert (
        "- **tightest stage**: 0 (76,500 of 76,000 MB usable at its backward, 4,000 MB of it outside the allocated "
        "peak (the caching allocator's reserve, async TP's workspace), -500 MB left)"
    ) in text
    assert "| 72,500.0 | backward |" in text  # the table's peak is the allocated one
    assert "| 0 | 8 | SLCT 8 | 30,000.0 | 40,000.0 | 2,500.0 | 72,500.0 | backward | 76,000 | 10.000 | 20.500 |" in text
    # stage 3's peak is its loss's, 44,500 MB, above the 42,000 its backward's parts add up to
    assert "| 3 | 8 | NONE 8 | 35,000.0 | 5,000.0 | 2,000.0 | 44,500.0 | loss | 76,000 | 12.000 | 24.000 |" in text


def test_a_stage_whose_loss_sets_its_peak_is_judged_by_it(stages: pd.DataFrame) -> None:
    """A stage fits by its peak, the largest moment, not the backward's parts (issue 11): stage 3's
    backward holds 35000 + 5000 + 2000 = 42000 MB, its loss 44500; on a device of 43000 MB it does not fit."""
    tight = stages.assign(device_mb=[76000.0, 76000.0, 76000.0, 43000.0])
    text = summary_markdown(tight, "t")
    assert "every stage fits: NO" in text
    assert "- **tightest stage**: 3 (44,500 of 43,000 MB usable at its loss, -1,500 MB left)" in text
    lines = console_summary(Summarized(tight, {}), "r.md")
    assert lines[3] == "stage 3: DOES NOT FIT, 43.5 of 42.0 GiB"  # 44500 / 1024, 43000 / 1024


def test_summary_says_when_a_stage_does_not_fit(stages: pd.DataFrame) -> None:
    over = stages.assign(device_mb=[70000.0] * 4)
    assert "every stage fits: NO" in summary_markdown(over, "t")
    assert "-2,500 MB left" in summary_markdown(over, "t")


def test_a_table_without_a_column_is_refused(stages: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="buffers_mb"):
        figure_png(stages.drop(columns="buffers_mb"), "t")
    assert set(PLAN_REPORT.names) == set(stages.columns)


@pytest.mark.parametrize(
    ("planned", "uniform", "said"),
    [
        (3.265, 3.597, "1.102× faster than"),  # 3.597 / 3.265 = 1.1017
        # qwen2.5-vl-7b's plan: faster by the balancer's layer times, slower by the whole time model;
        # it read "1.00× faster" (3.680 / 3.693 = 0.9965 rounded up)
        (3.693, 3.680, "1.004× slower than"),  # 3.693 / 3.680 = 1.0035
        # configs/llama3.1-8b-torchtitan.yaml (PP 1): its plan is the uniform split, which read "1.000× faster"
        (0.877, 0.877, "as fast as"),
        (0.8772, 0.8770, "as fast as"),  # 0.8770 / 0.8772 = 0.99977, "1.000× slower" before
    ],
)
def test_the_closing_line_says_which_way_the_plan_goes(planned: float, uniform: float, said: str) -> None:
    frame = pd.DataFrame({"stage": [0], "peak_mb": [1024.0], "allocator_mb": [0.0], "device_mb": [2048.0]})
    summary = {"iteration_s": planned, "baseline_iteration_s": uniform, "baseline": "NONE"}
    lines = console_summary(Summarized(frame, summary), "r.md")
    assert lines == [
        "stage 0: fits, 1.0 of 2.0 GiB",
        f"plan: {planned:.3f} s an iteration, {said} the best uniform split (NONE everywhere, {uniform:.3f} s)",
        "report: r.md",
    ]


def test_the_closing_lines_say_what_megatrons_flags_run_where_the_plan_is_not_theirs() -> None:
    """A Megatron plan whose recompute differs layer by layer is not Megatron-Core's to say; the flags printed
    are the fastest plan it can say (`megatron_iteration_s`, `plan_iterations`' `megatron_iteration`). The
    a user-QA run (Llama 3 70B, TP4 PP4 VPP5): plan 15.971 s, its flags 16.640 s, uniform FULL 20.460 s:
    20.460 / 15.971 = 1.281, 20.460 / 16.640 = 1.2296."""
    frame = pd.DataFrame({"stage": [0], "peak_mb": [1024.0], "allocator_mb": [0.0], "device_mb": [2048.0]})
    summary = {
        "iteration_s": 15.971,
        "baseline_iteration_s": 20.460,
        "baseline": "FULL",
        "megatron_iteration_s": 16.640,
    }
    assert console_summary(Summarized(frame, summary), "r.md")[1:] == [
        "plan: 15.971 s an iteration, 1.281× faster than the best uniform split (FULL everywhere, 20.460 s)",
        "Megatron-LM's flags (the fastest plan it can say): 16.640 s an iteration, 1.230× faster than the best "
        "uniform split",
        "report: r.md",
    ]


def test_the_timeline_draws_a_collection_per_stage_and_kind_not_per_bar() -> None:
    """4 stages of 1F1B over 64 micro-batches: each stage runs 64 forwards and 64 backwards, the first
    0.1 of each backward recomputation, so 4 · 64 bars of each kind (768), drawn as 3 collections a
    stage (12). A collection a bar made matplotlib rescale over all bars drawn so far: DeepSeek-V3's
    report (24,000 bars) took 8 minutes to draw."""
    axes = Figure().subplots()  # matplotlib's Agg canvas, as the report draws (no pyplot state)
    run = {
        "schedule": "1f1b",
        "micro_batches": 64,
        "forward_s": [[1.0] * 4],
        "backward_s": [[2.0] * 4],
        "recompute_s": [[0.1] * 4],
    }
    timeline_axes(axes, run, "plan", longest_s=1000.0)
    bars = [collection for collection in axes.collections if len(collection.get_paths())]
    assert len(bars) == 3 * 4
    assert sum(len(collection.get_paths()) for collection in bars) == 3 * 4 * 64


def test_the_timeline_tells_interleaved_chunks_apart() -> None:
    """V = 2 (interleaved, P = 2, m = 4): each chunk's forward and backward one labelled artist of its
    own colour, recompute one. The bars of a colour hold that chunk's ops and no other: per chunk
    m · Σ_stages of its forward (4 · (1 + 1) = 8 s, 4 · (1.5 + 1.5) = 12 s) and of its backward less
    the recompute drawn apart (4 · (2 + 2) = 16 s, 4 · (2.5 + 2.5) = 20 s); recompute 4 · (0.5 + 0.5) = 4 s."""
    axes = Figure().subplots()
    run = {
        "schedule": "interleaved",
        "micro_batches": 4,
        "forward_s": [[1.0, 1.0], [1.5, 1.5]],
        "backward_s": [[2.0, 2.0], [3.0, 3.0]],
        "recompute_s": [[0.0, 0.0], [0.5, 0.5]],
    }
    timeline_axes(axes, run, "plan", longest_s=100.0)
    handles, labels = axes.get_legend_handles_labels()
    assert labels == ["forward, chunk 0", "forward, chunk 1", "recompute", "backward, chunk 0", "backward, chunk 1"]
    colors = [tuple(handle.get_facecolor()[0]) for handle in handles]
    assert len(set(colors)) == len(colors)  # one colour each
    drawn = dict.fromkeys(colors, 0.0)
    for collection in axes.collections:
        for path in collection.get_paths():
            drawn[tuple(collection.get_facecolor()[0])] += path.get_extents().width
    assert [round(drawn[color], 9) for color in colors] == [8.0, 12.0, 4.0, 16.0, 20.0]
    assert axes.get_legend() is not None and len(axes.get_legend().get_texts()) == 5


def test_the_timeline_title_names_the_layers_schedule_not_the_iteration() -> None:
    """The Gantt chart runs the layers' times alone: 1F1B with P = 2, m = 2, F = 1 s and B = 2 s ends
    at (P − 1)·F + m·(F + B) + (P − 1)·B = 1 + 6 + 2 = 9 s. The report's iteration adds P2P, the DP
    reduction and the optimizer step; the chart titled its 9 s "iteration" beside the text's larger one."""
    axes = Figure().subplots()
    run = {
        "schedule": "1f1b",
        "micro_batches": 2,
        "forward_s": [[1.0] * 2],
        "backward_s": [[2.0] * 2],
        "recompute_s": [[0.0] * 2],
    }
    timeline_axes(axes, run, "plan", longest_s=9.0)
    title = axes.get_title()
    assert title.startswith("plan: layers scheduled in 9 s, ") and "iteration" not in title, title


def test_the_speedup_line_agrees_with_the_iterations_above_it() -> None:
    """llama3-8b's report gave 1.160× (the layers' schedule, 3.749 / 3.232 s) under iterations of
    3.303 s and 3.798 s; the line now leads with 3.798 / 3.303 = 1.150× and names the other."""
    plan = {
        "speedup": 3.749 / 3.232,
        "best_baseline": "NONE",
        "iteration": {"seconds": 3.303},
        "baseline_iteration": {"seconds": 3.798, "option": "NONE"},
    }
    assert speedup_words(plan) == "1.150× by the iteration (NONE); 1.160× by the layers' schedule alone"
    assert speedup_words({"speedup": 1.5, "best_baseline": "FULL"}) == "1.500× (FULL)"  # from a layers.json
    assert speedup_words({"speedup": None}) == "none"
