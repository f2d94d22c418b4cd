"""bench/routing_imbalance.py: the natural-routing card rows at the busiest rank's share, by hand."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("routing_imbalance")


@pytest.fixture(scope="module")
def natural(bench):
    return {row.name: row for row in bench.natural_rows(bench.public_runs())}


def test_the_natural_routing_rows_and_their_bounds(bench, natural):
    # the card rows without --moe-router-force-load-balancing and with EP: the pretrain MoE entries (Qwen3 8B is
    # dense; the performance entries force balance). The routing's bound ep·min(k, E/ep)/k: Qwen3 30B-A3B 128
    # experts top 8 over 16: 16·8/8 = 16, over 8 (GB200): 8·8/8 = 8; GPT-OSS 120B 128 top 4 over 16: 16·4/4 = 16;
    # Moonlight 64 top 6 over 8: 8·6/6 = 8; GPT-OSS 20B 32 top 4 over 4: 4·4/4 = 4
    card = "Megatron-Bridge card "
    bounds = {name.removeprefix(card): bench.routing_bound(row) for name, row in natural.items()}
    assert bounds == {
        "Qwen3 30B-A3B BF16 EP16 HybridEP natural routing (16 H100)": 16.0,
        "GPT-OSS 120B BF16 TP2 PP4 EP16 natural routing (64 H100)": 16.0,
        "Moonlight 16B-A3B BF16 EP8 HybridEP EP-overlap natural routing (16 H100)": 8.0,
        "GPT-OSS 20B BF16 TP2 PP4 EP4 natural routing (16 H100)": 4.0,
        "Qwen3 30B-A3B MXFP8 EP8 HybridEP EP-overlap FP8 attention natural routing (8 GB200)": 8.0,
    }
    # the paper's Table 2 MaxVio_global figures (arXiv 2408.15664 v1 §4.2): 0.04 loss-free, 0.52 / 0.72 aux loss
    assert [vio for _, vio in bench.PAPER_MAX_VIO] == [0.04, 0.52, 0.72]


def test_a_share_moves_only_the_moe_layers(bench, natural):
    # GPT-OSS 20B at EP 4: the busiest rank at 1.5× its share costs more than balanced, and balanced is the row's
    # own price (dropless_imbalance 1.0 is today's default)
    row = natural["Megatron-Bridge card GPT-OSS 20B BF16 TP2 PP4 EP4 natural routing (16 H100)"]
    balanced = bench.seconds_at(row, 1.0)
    assert balanced == pytest.approx(bench.run_iteration(bench.run_config(row.raw, row.name)).seconds, rel=1e-12)
    assert bench.seconds_at(row, 1.5) > balanced
