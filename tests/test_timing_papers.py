"""The 2021 A100 papers' rows (bench/_papers.py): published figures in seconds, the settings their code sets."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def public():
    return load_bench("public_runs")


@pytest.fixture(scope="module")
def rows(public):
    return {row.name: row for row in public.public_runs() if row.source in public.PAPERS}


def test_narayanan_rows_turn_table_1_s_tflops_into_seconds(rows):
    # four one-stage rows of Table 1 and MT-NLG's three
    assert len(rows) == 7
    # 1.7B: 96·512·2048·24·2304² = 12,824,703,626,379,264 FLOPs times (1 + 2048/13824 + 51200/884736) =
    # 1.206019: 1.54668e16, over 32 GPUs at 137 TFLOP/s (4.384e15 a second): 3.5280 s
    assert rows["Narayanan GPT 1.7B (32 A100, TP1 DP32)"].seconds == pytest.approx(3.5280, rel=1e-4)


def test_mt_nlg_s_seconds_agree_with_its_own_tflops(rows):
    # §2.4 states both: 60.1 s on 2240 GPUs and 126 TFLOP/s. Eq. 3 at h 20480, 105 layers, batch 1920,
    # vocabulary 51200: 96·1920·2048·105·20480² · (1 + 2048/122880 + 51200/34406400) = 1.6926e19 FLOPs;
    # / (2240 · 60.1 s) = 125.7 TFLOP/s, the paper's 126 rounded
    row = rows["MT-NLG 530B (2240 A100, TP8 PP35 DP8)"]
    assert row.seconds == 60.1
    assert 1.6926e19 / (2240 * row.seconds) / 1e12 == pytest.approx(126, abs=0.5)


def test_narayanan_rows_run_megatron_lm_of_april_2021(public, rows):
    run = public.config(rows["Narayanan GPT 7.5B (128 A100, TP4 DP32)"])
    # 128 GPUs / TP 4: DP 32; batch 512 / 32 = 16 micro-batches of one sequence
    assert (run.parallel.tp, run.parallel.dp, run.training.micro_batches) == (4, 32, 16)
    # --DDP-impl local (arguments.py at 50a4b5fa02): the gradient all-reduce after the backward, not hidden;
    # no distributed optimizer in 2021
    assert run.timing.overlap.dp == 0
    assert run.parallel.zero == 0
    assert run.training.dtype == "fp16"
    # no --accumulate-allreduce-grads-in-fp32 (off by default): LocalDDP all-reduces the fp16 `param.grad`s
    assert run.training.grad_bytes == 2
