"""bench/moe_gpu.py: a MoE layer's GPU work by group, its experts' GEMMs pooled and one by one, by hand."""

from __future__ import annotations

import math

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("moe_gpu")


@pytest.fixture(scope="module")
def rows(bench):
    return {row.name: row for row in bench.public_runs()}


H100_ROW = "NeMo Qwen3 30B-A3B FP8 PP2 EP8 (16 H100)"
B200_ROW = "NeMo Qwen3 30B-A3B MXFP8 EP8 (8 B200)"


def test_the_token_dropping_runs_become_seconds(bench):
    # 25.09 table: GBS 512 sequences of 4096 tokens; 10,494 tokens/s on each of 16 H100, 18,066 on 8 B200.
    assert bench.TOKEN_DROP[H100_ROW].seconds == pytest.approx(512 * 4096 / (10494 * 16), rel=1e-12)
    assert bench.TOKEN_DROP[H100_ROW].seconds == pytest.approx(12.4902, abs=1e-4)
    assert bench.TOKEN_DROP[B200_ROW].seconds == pytest.approx(14.5104, abs=1e-4)


def test_each_local_expert_takes_every_ep_ranks_copies(bench, rows):
    # Qwen3 30B-A3B: 128 experts, top 8, hidden 2048, expert FFN 768 (gate and up: 1536 wide), EP 8 (16
    # local experts). Both rows MBS 1 (the H100 row its preset's, bench/_nemo.py): 4,096 tokens a rank,
    # 32,768 copies over 128 experts: 256 an expert from each of the 8 EP ranks, 2,048 rows.
    for name, m in ((H100_ROW, 2048), (B200_ROW, 2048)):
        shapes = {label: shape for label, shape, _, _ in bench.expert_gemms(rows[name])}
        assert shapes["experts_in forward"] == (m, 1536, 2048, 16)
        assert shapes["experts_out forward"] == (m, 2048, 768, 16)
        assert shapes["experts_in wgrad"] == (2048, 1536, m, 16)


def test_h100_expert_gemms_pooled_and_one_by_one_by_hand(bench, rows):
    # H100 FP8 (current scaling): twice 989 TFLOP/s at MAMF's 0.709, times the step's back-to-back share
    # 0.872 (`FP8_LAYER_GEMM_SHARE_H100`), over 132 SMs: 9.264e12 FLOP/s an SM; a 128x128 tile (intensity 64:
    # full rate) over k = 2048: 2·128·128·2048 / that = 7.244 us.
    per_sm = 2 * 989e12 * 0.709 * 0.872 / 132
    tile_us = 2 * 128 * 128 * 2048 / per_sm * 1e6
    # fc1 forward, 2048 x 1536 an expert (MBS 1): 16·12 = 192 tiles, 2 waves of 132 (256-wide tiles: 96,
    # one wave of twice the time, no better): 14.49 us; 16 experts one by one 231.8 us. Pooled: 3,072
    # tiles, ⌈23.3⌉ = 24 waves: 173.9 us.
    # fc1 weight gradient, 2048 x 1536 over k = 2048 rows: the same 192 tiles of 7.244 us, the same waves.
    found = {label: (pooled, serial) for label, _, pooled, serial in bench.expert_gemms(rows[H100_ROW])}
    for label in ("experts_in forward", "experts_in wgrad"):
        pooled, serial = found[label]
        assert pooled * 1e3 == pytest.approx(math.ceil(16 * 192 / 132) * tile_us, rel=1e-9)
        assert serial * 1e3 == pytest.approx(16 * 2 * tile_us, rel=1e-9)


def test_the_groups_hold_the_whole_layer(bench, rows):
    row = rows[H100_ROW]
    groups = bench.layer_groups(row)
    run = bench.config(row)
    times = bench.TimeModel(run)
    layer, state = bench.moe_layer(run, times)
    whole = sum(timed.ms for timed in times.breakdown(layer, *state))
    assert sum(groups.values()) == pytest.approx(whole, rel=1e-12)
    assert set(groups) == {label for label, _ in bench.GROUPS} | {bench.OTHER}


def test_the_token_dropping_settings(bench, rows):
    raw = bench.token_drop_raw(rows[H100_ROW], "bf16")
    # the 25.09 H100 row's own MBS 2 and VP 24: GBS 512 over DP 8 (16 GPUs, PP 2) in 32 micro-batches of 2
    assert (raw["training"]["micro_batch_size"], raw["training"]["micro_batches"]) == (2, 32)
    assert raw["parallel"]["vpp"] == 24
    assert rows[H100_ROW].raw["training"]["micro_batch_size"] == 1
    assert raw["training"]["moe"]["capacity_factor"] == 1.0 and raw["training"]["moe"]["pad_to_capacity"]
    assert raw["device"]["host_kernel_us"] == 0.0
    assert raw["timing"]["matmul_dtype"] == "bf16"
    assert "overlap_moe_expert_parallel_comm" not in raw["parallel"]
    assert rows[H100_ROW].raw["parallel"]["overlap_moe_expert_parallel_comm"]  # the row itself untouched


def test_the_profiled_step_splits_by_hand(bench):
    # Megatron-Bridge skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md (067f987df), "HybridEP production-shape
    # validation", overlap off: step 24.7138 s; GPU-active union 22.821 s;
    # communication beside GEMMs or attention 9.079 ms, 0.11% of the communication time: 9.079e-3 / 0.0011
    # = 8.2536 s of communication, and 22.821 − 8.2536 + 0.0091 = 14.5765 s of computation.
    step = bench.HYBRIDEP_H100
    assert step.comm_s == pytest.approx(8.2536, abs=1e-4)
    assert step.compute_s == pytest.approx(14.5765, abs=1e-4)
    assert step.step_s == pytest.approx(24.7138)


def test_the_profiled_runs_config(bench, rows):
    # qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config: TP 1, PP 1, EP 16 on 16 GPUs (DP 16), MBS 1, GBS 1024:
    # 1024 / 16 = 64 micro-batches; BF16; TE graphs of moe_router and moe_preprocess.
    raw = bench.hybridep_h100_raw(rows, gpu_only=True)
    assert raw["parallel"]["dp"] == raw["parallel"]["ep"] == 16
    assert raw["training"]["micro_batches"] == 64 and raw["training"]["micro_batch_size"] == 1
    assert raw["timing"]["matmul_dtype"] == "bf16" and raw["timing"]["moe_dispatcher"] == "hybridep"
    assert raw["timing"]["moe_flex_dispatcher_num_sms"] == 32  # the recipe's moe_hybridep_num_sms
    assert raw["timing"]["cuda_graph_modules"] == ["moe_router", "moe_preprocess"]
    assert raw["device"]["host_kernel_us"] == 0.0
    assert "host_kernel_us" not in bench.hybridep_h100_raw(rows, gpu_only=False)["device"]


def test_the_gb200_card_runs_config(bench, rows):
    # qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config: EP 8 on 8 GPUs, GBS 512, MBS 4: 512 / (4 · 8) = 16
    # micro-batches; _enable_hybridep_full_iteration_mxfp8: full-iteration graphs, EP overlap with delayed
    # weight gradients. The card's step: 6501.120 ms.
    raw = bench.gb200_raw(rows)
    assert raw["device"] == {"name": "gb200"}
    assert raw["training"]["micro_batches"] == 16 and raw["training"]["micro_batch_size"] == 4
    assert raw["timing"]["cuda_graph_impl"] == "full_iteration" and raw["timing"]["delay_wgrad_compute"]
    assert raw["parallel"]["overlap_moe_expert_parallel_comm"] and raw["parallel"]["ep"] == 8
    step_s = bench.GB200_STEP_S
    assert step_s == pytest.approx(6501.120 / 1e3)
