"""Screening shares time and memory models between strategies that cannot differ in them: check that they
do not, against models built for each strategy alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ppb_core.memory import MemoryModel
from ppb_core.model.walk import walk
from ppb_core.search.enumerate import Refusal, Strategy, enumerate_strategies, validate
from ppb_core.search.screen import FigureCache, figures, fits_somewhere, run_forms
from ppb_core.search.spec import load_search_spec
from ppb_core.timing.pricer import TimeModel

DATA = Path(__file__).parent / "data" / "search"


# variants of the specs in DATA: (spec, [(text, its replacement)]), each once shared wrongly
VARIANTS = {
    # DualPipeV beside 1F1B: its paired micro-batches hide the expert all-to-alls (TimeModel._dualpipe_share),
    # so its layer times are not its 1F1B twin's, which the shared figures once gave it
    "tiny-moe-dualpipev": ("tiny-moe", [("limits: {", "limits: {schedules: [1f1b, dualpipev], ")]),
    # MindFormers over one micro-batch (PP 1, dp 8) and over two (PP 2, dp 4): only the second adds its weight
    # gradients into the accumulation buffer (TimeModel._accumulate_bytes)
    "tiny-dense-mindformers": (
        "tiny-dense",
        [("framework: megatron", "framework: mindformers"), ("global_batch: 24", "global_batch: 8")],
    ),
    # the global aux loss on 4 devices at TP 1: PP 4 leaves dp 1, whose loss launches no all-reduce (router._aux)
    "tiny-moe-global-aux": (
        "tiny-moe",
        [
            ("devices: 8\ndevices_per_node: 8", "devices: 4\ndevices_per_node: 4"),
            ("optimizer: adamw}", "optimizer: adamw, moe: {router: {aux_losses: [global_aux_loss]}}}"),
            ("tp: [1, 2], pp: [1, 2]", "tp: [1], pp: [1, 2, 4]"),
        ],
    ),
}


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-moe", "tiny-tight", "tiny-titan", *VARIANTS])
def test_shared_figures_equal_each_strategys_own(name: str, tmp_path: Path) -> None:
    if name in VARIANTS:
        base, replacements = VARIANTS[name]
        text = (DATA / f"{base}.yaml").read_text()
        for before, after in replacements:
            assert before in text
            text = text.replace(before, after)
        (tmp_path / f"{name}.yaml").write_text(text)
        spec = load_search_spec(tmp_path / f"{name}.yaml")
    else:
        spec = load_search_spec(DATA / f"{name}.yaml")
    points = [p for p in enumerate_strategies(spec) if isinstance(p, Strategy)]
    if name == "tiny-moe-dualpipev":
        assert any(p.schedule == "dualpipev" for p in points)
    if name == "tiny-dense-mindformers":  # strategies on both sides of the line the key draws
        assert {p.micro_batches > 1 for p in points} == {True, False}
    if name == "tiny-moe-global-aux":
        assert {p.dp > 1 for p in points} == {True, False}
    cache = FigureCache()
    checked = 0
    for point in points:
        run = validate(spec, point)
        if isinstance(run, Refusal):
            continue
        alone = figures(run, MemoryModel(run), TimeModel(run), walk(run).distinct())
        assert cache.of(point, run) == alone, point.label(spec)
        checked += 1
    assert len(cache.times) < checked  # the cache did share


def test_a_device_too_small_for_the_layers_fits_nowhere() -> None:
    spec = load_search_spec(DATA / "tiny-tight.yaml")
    cache = FigureCache()
    point = next(
        p
        for p in enumerate_strategies(spec)
        if isinstance(p, Strategy) and (p.tp, p.cp, p.pp, p.zero, p.micro_batch_size) == (1, 1, 1, 0, 1)
    )
    found = cache.of(point, validate(spec, point))
    kind = found.kinds[0]
    # One stage holds all 6 layers, each at least its parameters and, with 1 micro-batch in flight (pp 1),
    # its least activation (FULL keeps the layer's input alone), beside the head, the tail and the constant
    # working set: 6·(parameters + least activation) against what the device leaves.
    needed = 6 * (kind.parameter_mb + min(kind.activation_mb.values()))
    room = found.memory_mb - found.constant_mb - found.ends.head_mb - found.ends.tail_mb
    assert found.memory_mb == 1700 - 300
    assert needed > room
    assert not fits_somewhere(run_forms(point), found)
    # with ZeRO-1 the optimizer states shard over the 8 data-parallel ranks and the layers fit
    sharded = next(
        p
        for p in enumerate_strategies(spec)
        if isinstance(p, Strategy) and (p.tp, p.cp, p.pp, p.zero, p.micro_batch_size) == (1, 1, 1, 1, 1)
    )
    assert fits_somewhere(run_forms(sharded), cache.of(sharded, validate(spec, sharded)))


def test_the_combined_1f1b_s_layers_are_never_fully_recomputed() -> None:
    # Megatron-Core asserts recompute_granularity != 'full' under --overlap-moe-expert-parallel-comm
    # (transformer_config.py `TransformerConfig.__post_init__`, d98e8a64) and the balancer withdraws FULL there
    # (`problem.run_problem`): the screen's kinds offer it to the plain strategy alone. Before December 2026 they
    # offered it to both, and the relaxed program found room at FULL's few MB where no plan has any (the published
    # Qwen3 30B-A3B PP2 V24 EP8 layout: its balance stopped by its work limits, not refused).
    spec = load_search_spec(DATA / "tiny-moe-overlap.yaml")
    combined = next(p for p in enumerate_strategies(spec) if isinstance(p, Strategy) and p.ep_overlap)
    plain = replace(combined, ep_overlap=False)
    cache = FigureCache()
    for point, options in (
        (combined, {"NONE", "SLCT", "COMM", "BOTH"}),
        (plain, {"NONE", "SLCT", "COMM", "BOTH", "FULL"}),
    ):
        found = cache.of(point, validate(spec, point))
        for kind in found.kinds:
            if kind.count and len(kind.backward_ms) > 1:  # a body kind (a head or tail runs NONE)
                assert set(kind.backward_ms) == set(kind.activation_mb) == options
