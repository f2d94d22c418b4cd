"""bench/search_public.py: a published run's job as a search spec, and its strategy as a point of the grid."""

from __future__ import annotations

import pytest
from bench_modules import load_bench

from ppb_core.search.enumerate import Strategy, enumerate_strategies, validate


@pytest.fixture(scope="module")
def bench():
    return load_bench("search_public")


@pytest.fixture(scope="module")
def rows(bench):
    return {row.name: row for row in bench.public_runs()}


def test_the_default_rows_exist(bench, rows):
    assert set(bench.DEFAULT_ROWS) <= set(rows)


def test_the_8b_fsdp_job_and_its_strategy(bench, rows):
    # NeMo 25.11 Llama 3 8B FP8 on 8 H100: GBS 128, MBS 1, FSDP over all 8 (bench/_nemo.py), sequence 8192:
    # the search's job is 8 devices and 128 sequences; the strategy TP1 CP1 PP1 DP8, FSDP (ZeRO-3), 1 × 16
    row = rows["NeMo Llama 3 8B FP8 FSDP (8 H100)"]
    spec = bench.spec_of(row, 10)
    assert (spec.devices, spec.global_batch, spec.seq_length) == (8, 128, 8192)
    assert spec.limits.fsdp == [False, True] and spec.search.balance_budget == 10
    strategy = bench.published_strategy(row)
    assert (strategy.tp, strategy.cp, strategy.pp, strategy.dp, strategy.vpp) == (1, 1, 1, 8, 1)
    assert strategy.fsdp and strategy.zero == 3 and (strategy.micro_batch_size, strategy.micro_batches) == (1, 16)
    assert strategy in {point for point in enumerate_strategies(spec) if isinstance(point, Strategy)}
    assert not hasattr(validate(spec, strategy), "reason")


def test_the_70b_jobs_grid_holds_its_five_virtual_stages_and_drops_per_layout_flags(bench, rows):
    # NeMo 25.11 Llama 3 70B FP8 on 64 H100: TP4 PP8 VP5, DP 64 / 32 = 2, GBS 128 = 1 · 64 · 2; the recipe's
    # --overlap-param-gather-with-optimizer-step (DP, PP, VP > 1) is not every strategy's: left out of the spec
    row = rows["NeMo Llama 3 70B FP8 TP4 PP8 (64 H100)"]
    assert row.raw["timing"]["overlap_param_gather_with_optimizer_step"]
    spec = bench.spec_of(row, 4)
    assert (spec.devices, spec.global_batch) == (64, 128)
    assert spec.limits.vpp == [1, 2, 4, 5] and not spec.timing.overlap_param_gather_with_optimizer_step
    strategy = bench.published_strategy(row)
    assert (strategy.tp, strategy.pp, strategy.vpp, strategy.schedule, strategy.dp) == (4, 8, 5, "interleaved", 2)
    assert strategy.sequence_parallel and strategy.zero == 1 and strategy.micro_batches == 64
    assert strategy in {point for point in enumerate_strategies(spec) if isinstance(point, Strategy)}


def test_virtual_stages_given_by_a_layout_alone_are_the_strategys(bench, rows):
    # NeMo 25.11 Qwen3 235B on 256 H100: TP2 PP8 EP32, VP 4 stated only by its layout of 32 virtual stages
    # (bench/_nemo.py `_split_layout(32, 3)`): 32 / 8 = 4 a rank; DP 256 / (2 · 8) = 16, GBS 2048 / 16 = 128
    row = rows["NeMo Qwen3 235B FP8 TP2 PP8 EP32 (256 H100)"]
    assert "vpp" not in row.raw["parallel"] and row.raw["parallel"]["layout"].count("|") == 31
    strategy = bench.published_strategy(row)
    assert (strategy.pp, strategy.vpp, strategy.schedule, strategy.dp, strategy.ep) == (8, 4, "interleaved", 16, 32)
    assert (strategy.etp, strategy.micro_batches) == (1, 128)
    assert 4 in bench.spec_of(row, 4).limits.vpp


def test_the_search_runs_the_releases_of_the_rows_container(bench, rows):
    """A NeMo row states the releases its container ran (bench/_nemo.py: 26.04 is Megatron Core 0.17.0,
    Transformer Engine 2.14, PyTorch 2.11.0a0); the search of its job prices every strategy under them, as
    the row's own time is priced. The spec dropped them, so each strategy ran the newest code ppb follows."""
    row = rows["NeMo 26.04 Qwen3 30B-A3B FP8 EP16 (16 H100)"]
    spec = bench.spec_of(row, 4)
    stated = spec.framework_release.model_dump(exclude_none=True)
    assert (stated["megatron_core"], stated["transformer_engine"], stated["pytorch"]) == ("0.17.0", "2.14", "2.11.0a0")
    run = validate(spec, bench.published_strategy(row))
    assert run.framework_release.model_dump(exclude_none=True) == stated


def test_the_search_runs_the_rows_cublas_workspace(bench, rows):
    # Megatron CI GPT 7B TP1 PP4 (H100) ran CUBLAS_WORKSPACE_CONFIG=:4096:8 (its row's memory section): the
    # search of its job prices every strategy with it, 4096 KiB · 8 = 32 MiB a handle
    row = rows["Megatron CI GPT 7B TP1 PP4 (H100)"]
    assert row.raw["memory"] == {"cublas_workspace_config": ":4096:8"}
    run = validate(bench.spec_of(row, 4), bench.published_strategy(row))
    assert run.memory.cublas_workspace_bytes == 32 * 1024 * 1024
