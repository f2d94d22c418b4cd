"""The 2021 A100 papers' rows (bench/_papers.py): published figures in seconds, the settings their code sets."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def public():
    return load_bench("public_runs")


@pytest.fixture(scope="module")
def rows(public):
    return {row.name: row for row in public.public_runs() if row.source in (public.NARAYANAN, public.MTNLG)}


def test_narayanan_rows_turn_table_1_s_tflops_into_seconds(rows):
    # Table 1's ten rows and MT-NLG's three
    assert len(rows) == 13
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


def test_narayanan_rows_run_the_paper_s_sc21_scripts(public, rows):
    # examples/sc21/run_table_1.sh (de7dc40f88), 7.5B: TP 4, MBS 16, GBS 512, --DDP-impl torch, 16 nodes: 128 GPUs,
    # DP 32, 512 / 32 = 16 sequences a replica, one micro-batch of 16
    run = public.config(rows["Narayanan GPT 7.5B (128 A100, TP4 DP32)"])
    assert (run.parallel.tp, run.parallel.dp) == (4, 32)
    assert (run.training.micro_batch_size, run.training.micro_batches) == (16, 1)
    # PyTorch DDP's all-reduce behind the last backward; no distributed optimizer in 2021; no
    # --accumulate-allreduce-grads-in-fp32 (off by default): the fp16 `param.grad`s reduced themselves
    assert run.timing.overlap.dp == 1
    assert (run.parallel.zero, run.training.dtype, run.training.grad_bytes) == (0, "fp16", 2)
    # 76B: PP 4 of 60 layers, 15 a stage, --num-layers-per-virtual-pipeline-stage 5: 3 chunks; --DDP-impl local;
    # 128 nodes = 1024 GPUs, DP 1024 / 32 = 32, GBS 1792 / 32 = 56 sequences in micro-batches of 2: 28
    run = public.config(rows["Narayanan GPT 76B (1024 A100, TP8 PP4 DP32)"])
    assert (run.parallel.vpp, run.training.micro_batch_size, run.training.micro_batches) == (3, 2, 28)
    assert run.timing.overlap.dp == 0
    # 2021's interleaved schedule: one blocking call a step; the scatter/gather of sends on by default
    assert run.timing.overlap_p2p_comm is False
    assert run.timing.pipe_partitioned is True
