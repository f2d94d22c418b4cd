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


def test_the_december_2024_rows_are_the_file_s_tables(bench):
    # llama3_h100_202412_torchtitan.md Tables 1 (8 GPUs) and 3 (128): FSDP, + torch.compile, + Float8,
    # local batch 2, selective (per-op) AC; torchtitan 9dec370 compiles the blocks, not the loss
    rows = [row for row in bench.measured_peaks() if row.name.startswith("torchtitan Llama 3.1 8B FSDP")]
    found = sorted((bench.config(r).parallel.dp, r.measured_gib, bench.config(r).timing.torch_compile) for r in rows)
    assert found == [
        (8, 76.8, True), (8, 77.0, True), (8, 82.4, False),
        (128, 61.8, True), (128, 62.0, True), (128, 67.0, False),
    ]  # fmt: skip
    for row in rows:
        run = bench.config(row)
        assert not run.timing.compiled_loss and not row.allocated
        assert (run.training.recompute.mode, run.training.recompute.option) == ("selective", "op")


def test_no_torchtitan_row_is_priced_above_its_reserved_bound(bench):
    # the caching allocator's reserved peak is at least the allocated peak ppb prices
    for row in bench.measured_peaks():
        if not row.allocated:
            assert bench.predicted_gib(row)[0] <= row.measured_gib, row.name


def test_torchao_s_rows_are_the_readme_s_tables(bench):
    # pytorch/ao 8c81863ba torchao/float8/README.md (8 H100: bf16 47.65, tensorwise with float8 all-gather 47.77)
    # and d8bb51f63 torchao/prototype/mx_formats/README.md (8 B200: 33.71, 33.38; bf16 leaves matmul_dtype unset):
    # Llama3-8b, batch 1 of 8192, FSDP2 over the 8, per-op SAC, --training.compile; the rowwise and MX rows have
    # no ppb recipe
    rows = [row for row in bench.measured_peaks() if row.name.startswith("torchao")]
    found = sorted((bench.config(r).device.name, r.measured_gib, bench.config(r).timing.matmul_dtype) for r in rows)
    assert found == [("b200", 33.38, "fp8"), ("b200", 33.71, None), ("h100-80gb", 47.65, None),
                     ("h100-80gb", 47.77, "fp8")]  # fmt: skip
    for row in rows:
        run = bench.config(row)
        assert (run.parallel.dp, run.training.seq_length, run.training.micro_batch_size) == (8, 8192, 1)
        assert (run.training.recompute.mode, run.training.recompute.option) == ("selective", "op")
        assert run.timing.torch_compile and not row.allocated
        h100 = run.device.name == "h100-80gb"
        # March 2025's torchtitan: the loss eager (bbb1b616e compiled it), 9dec370's root unit, torch 2.7.0a0
        assert run.timing.compiled_loss is not h100 and (run.timing.fsdp_units == "root") is h100
        assert run.framework_release.pytorch == ("2.7" if h100 else "2.9")


def test_the_stream_pools_of_the_8_gpu_december_row(bench):
    # Llama 3.1 8B, FSDP over 8: the sharded fp32 gradients, 8,030,261,248 / 8 · 4 = 4,015,130,624 bytes (the peak,
    # the loss, runs without them), and the root unit's all-gather output, the embedding and output layer
    # (2 · 128256 · 4096) and the final norm (4096) at bf16: 2,101,354,496; 6,116,485,120 bytes in all
    row = next(r for r in bench.measured_peaks() if r.name == "torchtitan Llama 3.1 8B FSDP 8 (reserved)")
    assert bench.predicted_gib(row)[1] == "loss"
    assert bench.stream_pools_gib(row) == pytest.approx(6_116_485_120 / 2**30, rel=1e-12)
    assert all(bench.stream_pools_gib(r) is None for r in bench.measured_peaks() if r.allocated)


def test_the_15b_release_rows_are_the_golden_files(bench):
    # gpt3_15b_8t_release_sm golden_values_dev_dgx_h100.json / _lts_dgx_a100.json (iteration 12715) and
    # gpt3_15b_8t_release_sm_gb200 golden_values_dev_dgx_gb200.json (iteration 13000): mem-max-allocated-bytes,
    # mem-allocated-bytes, iteration 1's mem-max-allocated-bytes; micro-batch 4 of a global 384 over dp
    rows = [row for row in bench.measured_peaks() if row.name.startswith("Megatron 15B release")]
    found = sorted(
        (
            bench.config(r).device.name,
            round(r.measured_gib * 2**30),
            r.after_step_bytes,
            r.first_iteration_bytes,
            (bench.config(r).parallel.tp, bench.config(r).parallel.pp, bench.config(r).parallel.dp),
            bench.config(r).training.micro_batches,
        )
        for r in rows
    )
    assert found == [
        ("a100-80gb", 28391712768, 12698492928, 27893811200, (8, 1, 32), 3),  # 384 / (4 · 32)
        ("gb200", 42639351808, 14700898304, 41662402560, (4, 2, 16), 6),  # 384 / (4 · 16)
        ("h100-80gb", 28160194560, 13269043200, 27658764288, (8, 1, 32), 3),
    ]
    for row in rows:
        run = bench.config(row)
        spec = run.models[0].spec
        assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads) == (
            32, 6144, 48, 8,
        )  # fmt: skip
        assert (spec.vocab_size, spec.tied_embeddings, run.training.seq_length) == (256000, False, 4096)
        assert run.parallel.zero == 1 and run.parallel.sequence_parallel and row.stage == run.parallel.pp - 1
