"""The Llama 3 paper's 405B layouts are points of searches/llama3.1-405b-16384.yaml, valid, and the ones
bench/search.py places (no search here: enumeration and one validation are cheap)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bench_modules import load_bench

from ppb_core.config.run import RunConfig, parse_run_config
from ppb_core.model.walk import BODY, HEAD, TAIL, walk
from ppb_core.search.enumerate import Strategy, enumerate_strategies, validate
from ppb_core.search.spec import load_search_spec

ROOT = Path(__file__).parent.parent
SPEC = ROOT / "searches" / "llama3.1-405b-16384.yaml"

# arXiv 2407.21783, Table 4, the 8K row on 16,384 GPUs: TP8 CP1 PP16 DP128, 16 sequences per DP rank,
# 16M tokens per batch. By hand: 16,777,216 tokens / 8,192 = 2,048 sequences; 16,384 / (8·1·16) = 128
# data-parallel ranks; 2,048 / (128·1) = 16 micro-batches of one sequence (the table's 16 per DP rank).
# §3.3.2: an interleaved schedule (V = 8 by its layout, below; the grid's points at V = 2 and 4 here), optimizer
# states and gradients sharded (ZeRO-2). Dense model: expert tp follows tp (8); sequence parallelism with tp 8.
PAPER = [
    Strategy(
        tp=8,
        cp=1,
        pp=16,
        dp=128,
        vpp=vpp,
        schedule="interleaved",
        ep=1,
        etp=8,
        sequence_parallel=True,
        cp_variant="ring",
        zero=2,
        fsdp=False,
        micro_batch_size=1,
        micro_batches=16,
        recompute=0,
    )
    for vpp in (2, 4)
]


def test_the_spec_holds_the_papers_batch_and_devices() -> None:
    spec = load_search_spec(SPEC)
    assert spec.global_batch == 2048
    assert spec.seq_length == 8192
    assert spec.devices == 16384
    assert spec.specs["llm"].num_layers == 126


def test_the_papers_layout_is_enumerated_and_valid() -> None:
    spec = load_search_spec(SPEC)
    points = {point for point in enumerate_strategies(spec) if isinstance(point, Strategy)}
    for strategy in PAPER:
        assert strategy in points
        assert isinstance(validate(spec, strategy), RunConfig)


def bench_search():
    """bench/search.py as a module (bench/ is not a package)."""
    return load_bench("search")


def test_bench_places_that_strategy() -> None:
    bench = bench_search()
    spec = load_search_spec(SPEC)
    settings = bench.PUBLISHED[spec.name]
    assert "2407.21783" in settings[0][0]
    assert [bench.published(spec, fields) for _, fields in settings[1:]] == PAPER
    assert bench.DEFAULT_DEVICES[spec.name] == (16384,)


def test_bench_prices_the_papers_own_layout_as_published() -> None:
    # §3.3.2: "the first model chunk on the first stage has only the embedding, and the last model chunk on the
    # last stage has only output projection and loss calculation", one layer a chunk otherwise: 126 layers and
    # those two make 128 = 16 stages × V = 8 chunks (bench/public_runs.py's Llama 3 rows, layout E|(t|)*126L). No
    # point of the grid: 126 layers are fewer than the 128 cells the search fills with layers; the layout itself
    # is a valid run config, each stage's 8 chunks one layer but stage 0's first (the embedding alone) and stage
    # 15's last (the loss alone).
    bench = bench_search()
    spec = load_search_spec(SPEC)
    source, fields = bench.PUBLISHED[spec.name][0]
    strategy = bench.published(spec, fields)
    assert fields["layout"] == "E|(t|)*126L" and "V=8" in source
    assert strategy == dataclasses.replace(PAPER[0], vpp=8)
    assert "126 layers are fewer than pp·vpp = 128" in validate(spec, strategy).message
    raw = strategy.run_raw(spec)
    raw["parallel"]["layout"] = fields["layout"]
    run = parse_run_config(raw, spec.source, spec.base_dir)
    assert (run.parallel.pp, run.parallel.vpp, run.parallel.schedule) == (16, 8, "interleaved")
    cells = {}
    for layer in walk(run):
        cells.setdefault((layer.chunk, layer.stage), []).append(layer.node)
    assert len(cells) == 128
    assert cells[(0, 0)] == [HEAD] and cells[(7, 15)] == [TAIL]
    assert all(nodes == [BODY] for cell, nodes in cells.items() if cell not in ((0, 0), (7, 15)))
