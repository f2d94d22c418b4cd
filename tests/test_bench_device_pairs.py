"""bench/device_pairs.py: each pair is one preset on two parts, its measured ratio by hand."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("device_pairs")


@pytest.fixture(scope="module")
def rows(bench):
    return {row.name: row for row in bench.public_runs()}


def test_each_pair_is_one_preset_on_two_parts(bench, rows):
    # Megatron-Bridge v0.4.2 (c81012934): llama3_70b_pretrain_config_gb200 and _gb300 differ in nothing; their
    # presets LLAMA3_70B_PRETRAIN_CONFIG_GB{200,300}_FP8_CS_V2 only in cpu_offloading_num_layers (40 / 20);
    # LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 is TP 4 PP 16 VP 4 where GB300's is TP 4 PP 8 VP 4 (256 GPUs
    # both: DP 4 against 8, so 1536 / DP micro-batches, and the layout over 64 cells against 32); the 25.11
    # 8B rows (LLAMA3_8B_GB200_FP8_CS_BASE_CONFIG, the GB300 row at the table's MBS 2) set nothing apart, and
    # the B200 row only leaves the node at its default 8 GPUs where a GB200 row states its NVLink segment (8).
    expected = {
        "NeMo Llama 3 8B FP8 (8 GB200)": [],
        "NeMo Llama 3 8B MXFP8 (8 GB200)": [],
        "NeMo 26.04 Llama 3 70B FP8 FSDP (64 GB200)": ["training.cpu_offloading_num_layers"],
        "NeMo 26.04 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)": [
            "parallel.dp",
            "parallel.layout",
            "parallel.pp",
            "training.micro_batches",
        ],
        "NeMo Llama 3 8B FP8 (8 B200)": ["parallel.devices_per_node"],
    }
    pairs = {pair.slow: pair for pair in bench.PAIRS}
    for slow, fields in expected.items():
        assert bench.apart(pairs[slow], rows) == fields
    for pair in bench.PAIRS:
        assert rows[pair.slow].raw["device"]["name"] != rows[pair.fast].raw["device"]["name"]


def test_measured_ratio_by_hand(bench, rows):
    # NeMo 25.11 (docs/performance-summary.md at 5776a6d90): Llama 3 8B FP8, GBS 128 of 8192 on 8 GPUs, 31,508
    # tokens/s a GB200, 37,556 a GB300: the GB200 takes 37,556 / 31,508 = 1.19195 of the GB300's seconds.
    pair = bench.PAIRS[0]
    assert (pair.slow, pair.fast) == ("NeMo Llama 3 8B FP8 (8 GB200)", "NeMo 25.11 Llama 3 8B FP8 (8 GB300)")
    got = bench.ratios(pair, rows)
    assert got.measured == pytest.approx(37556 / 31508, rel=1e-9)
    assert got.ppb == pytest.approx(bench.row_seconds(rows[pair.slow]) / bench.row_seconds(rows[pair.fast]))
