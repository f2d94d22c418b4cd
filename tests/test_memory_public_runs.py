"""Published memory peaks (bench/public_memory.py): the transcriptions, read by hand."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("public_memory")


def test_trainy_s_h200_rows_are_the_file_s_runs(bench):
    rows = {row.name: row for row in bench.measured_peaks() if row.source == bench.TRAINY}
    # llama3-8b_h200_202506_trainy-whitefiber.md: NUM_NODES 4 and 8 of 8 H200, 47.96 and 46.97 GiB,
    # local batch 2 of 8192 (llama3_8b.toml at e7c0cae), FSDP over every GPU, per-op checkpointing.
    assert sorted((bench.config(row).parallel.dp, row.measured_gib) for row in rows.values()) == [
        (32, 47.96),
        (64, 46.97),
    ]
    for row in rows.values():
        run = bench.config(row)
        assert (run.training.seq_length, run.training.micro_batch_size, run.training.micro_batches) == (8192, 2, 1)
        assert run.device.name == "h200" and run.timing.torch_compile and not row.allocated


def test_every_row_prices_a_stage(bench):
    for row in bench.measured_peaks():
        predicted, moment = bench.predicted_gib(row)
        assert predicted > 0 and moment
