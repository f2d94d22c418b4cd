"""bench/decompose.py: a published run's predicted seconds by op class, the classes' FLOPs and bytes by hand."""

from __future__ import annotations

import pytest
from bench_modules import load_bench
from test_memory_offload import ATTENTION, _offload
from test_memory_runs import DENSE, body

from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.pricer import TimeModel


@pytest.fixture(scope="module")
def bench():
    return load_bench("decompose")


@pytest.fixture(scope="module")
def gpt_1_7b(bench):
    (row,) = [row for row in bench.public_runs() if row.name.startswith("Megatron GPT 1.7B")]
    return row, *bench.decompose(row)


def test_the_classes_add_up_to_the_iteration(bench, gpt_1_7b):
    row, classes, seconds = gpt_1_7b
    assert sum(share.seconds for share in classes.values()) == pytest.approx(seconds, rel=1e-9)
    assert seconds == pytest.approx(bench.run_iteration(bench.config(row)).seconds, rel=1e-12)


def test_gemm_and_attention_flops_of_the_1_7b_row_by_hand(gpt_1_7b):
    _, classes, _ = gpt_1_7b
    # h 2048, 16 heads of 128, MLP 4h, n = 4096 tokens a micro-batch, 4 micro-batches, 24 layers.
    # A layer's forward matmuls: QKV 2·n·h·3h, projection 2·n·h·h, MLP 2·n·h·4h twice: 24·n·h²; with
    # the backward's two products each, 72·n·h² = 72·4096·2048² = 1.23695e12 a layer and micro-batch.
    # The logits: 6·n·h·V = 6·4096·2048·131072 a micro-batch.
    n, h, vocab = 4096, 2048, 131072
    assert classes["GEMMs"].flops == pytest.approx(4 * (24 * 72 * n * h * h + 6 * n * h * vocab), rel=1e-12)
    # Flash attention over the causal pairs s(s+1)/2 = 8,390,656 per head: QKᵀ and PV 4·pairs·heads·d
    # forward, 2.5 times that backward.
    pairs = 4096 * 4097 / 2
    assert classes["attention"].flops == pytest.approx(4 * 24 * 3.5 * 4 * pairs * 16 * 128, rel=1e-12)


def test_the_unfused_loss_moves_what_megatron_s_cross_entropy_moves(gpt_1_7b):
    _, classes, _ = gpt_1_7b
    # Megatron's vocab-parallel cross-entropy one op at a time: per logit 2 + 9·4 = 38 bytes forward,
    # 2 + 3·4 = 14 backward; 4 micro-batches of 4096 tokens × 131072 logits: 111,669,149,696 bytes, at
    # 0.8 of 3.35 TB/s (2.68e12 B/s) 41.67 ms; plus H100's fixed 1.6 µs a kernel (cudnn-frontend's H200 RMSNorm
    # sweep) over its kernels, 25 forward and 10 backward a micro-batch (launches.py: the upcast, max, shift, ...):
    # 4·35·1.6 µs = 0.224 ms.
    loss = classes["memory-bound: loss"]
    assert loss.bytes == pytest.approx(4 * 4096 * 131072 * 52, rel=1e-12)
    assert loss.seconds == pytest.approx(111_669_149_696 / 2.68e12 + 4 * 35 * 1.6e-6, rel=1e-9)


def test_ops_fall_in_their_classes(bench):
    classes = {
        op.name: bench.op_class(op)
        for layer in walk(bench.config(bench.public_runs()[0]))
        for op in bench.TimeModel(bench.config(bench.public_runs()[0])).ops(layer)
    }
    assert classes["mlp_in"] == "GEMMs" and classes["output.logits"] == "GEMMs"
    assert classes["flash_scores"] == "attention"
    assert classes["norm1"] == classes["output.final_norm"] == "memory-bound: norm"
    assert classes["mlp_act"] == "memory-bound: activation"
    assert classes["residual_mlp"] == "memory-bound: residual, bias, dropout"
    assert classes["rope"] == "memory-bound: rotary"
    assert classes["output.loss"] == "memory-bound: loss"
    assert classes["embedding.lookup"] == "memory-bound: embedding"


def test_a_pipelined_row_counts_its_busiest_stage_and_its_bubble(bench):
    (row,) = [row for row in bench.public_runs() if row.name.startswith("Megatron CI GPT 7B TP1 PP4 (H100)")]
    classes, _ = bench.decompose(row)  # asserts the classes add up to the iteration
    assert classes["bubble"].seconds > 0
    # 32 layers over 4 stages: the busiest stage is the last, 8 layers and the loss; 4 micro-batches
    # of one 8192-token sequence. A layer's matmuls at TP 1: QKV 2·n·h·(h + 2·1024), projection
    # 2·n·h·h, MLP 2·n·h·4h twice, and the backward twice that: 6·n·h·(10h + 2048); the logits
    # 6·n·h·V with V = 131073 padded to a multiple of 128: 131200.
    n, h = 8192, 4096
    layer = 6 * n * h * (10 * h + 2048)
    assert classes["GEMMs"].flops == pytest.approx(4 * (8 * layer + 6 * n * h * 131200), rel=1e-12)


def test_a_row_s_recompute_reruns_are_their_own_class(bench):
    # Korthikanti's GPT 175B on 64 A100: selective recompute of the attention core (Table 5), TP 8, PP 8:
    # the busiest stage's 96 / 8 = 12 layers, 64 micro-batches of one sequence of s = 2048, h = 12288.
    # The core's reruns: the scores Q·K^T and the context P·V, each 2·s²·h / tp FLOPs, the softmax and
    # dropout memory-bound: 64 · 12 · 4 · 2048² · 12288 / 8 = 19,791,209,299,968 FLOPs
    (row,) = [row for row in bench.public_runs() if row.name.startswith("Korthikanti GPT 175B")]
    classes, seconds = bench.decompose(row)
    assert classes[bench.RECOMPUTE_CLASS].flops == pytest.approx(64 * 12 * 4 * 2048**2 * 12288 / 8, rel=1e-12)
    assert sum(share.seconds for share in classes.values()) == pytest.approx(seconds, rel=1e-9)
    assert seconds == pytest.approx(bench.run_iteration(bench.config(row)).seconds, rel=1e-12)


def test_the_small_ci_case_s_seconds_are_the_median_of_its_logged_iterations(bench):
    # H100, iterations 2-50 (49 values): the 25th sorted is 0.24667. A100, iterations 5-50 every 5
    # (10 values): (0.40582 + 0.40585) / 2 = 0.405835.
    assert bench.SMALL_TP4_GOLDEN["h100"].median_s == pytest.approx(0.24667)
    assert bench.SMALL_TP4_GOLDEN["a100"].median_s == pytest.approx(0.405835)
    # GB200, iterations 2-50 (49 values, stalls included): the 25th sorted is 0.30897
    assert bench.SMALL_TP4_GOLDEN["gb200"].median_s == pytest.approx(0.30897)
    # 12 layers of hidden 512 over 4 micro-batches of 4096 tokens: ppb puts its GPU work at a few tens
    # of milliseconds, a tenth of what the harness measures; the rest is the host launching its kernels.
    # With the catalog's host time a launch (the median over every host-bound dense case, bench/
    # host_derive.py) ppb gives each off by the case's distance from the median over its 3,652 launches'
    # worth (tests/test_timing_launches.py): H100 3,652 × (80.9 − 67.4) us = 49 ms over 0.247 s, +20%;
    # A100 3,652 × (112.3 − 110.9) us = 5 ms, +1%; GB200 3,652 × (98.0 − 84.5) us = 49 ms over 0.309 s, +16%
    errors = {}
    for gpu, measured, gpu_only, ours in bench.small_case():
        assert gpu_only < measured / 5
        errors[gpu] = ours / measured - 1
    assert errors["h100"] == pytest.approx(3652 * (80.9 - 67.4) * 1e-6 / 0.24667, abs=0.01)
    assert errors["a100"] == pytest.approx(3652 * (112.3 - 110.9) * 1e-6 / 0.405835, abs=0.01)
    assert errors["gb200"] == pytest.approx(3652 * (98.0 - 84.5) * 1e-6 / 0.30897, abs=0.01)


def test_every_row_it_accepts_adds_up_to_its_iteration(bench):
    accepted = 0
    for row in bench.public_runs():
        try:
            classes, seconds = bench.decompose(row)  # asserts layers, compute and total add up
        except SystemExit:
            continue
        accepted += 1
        assert sum(share.seconds for share in classes.values()) == pytest.approx(seconds, rel=1e-9)
    assert accepted == len(bench.public_runs())  # recompute rows too (their reruns a class of their own)


def test_get_batch_broadcasts_are_their_own_class(bench):
    (row,) = [row for row in bench.public_runs() if row.name.startswith("Megatron CI GPT 7B TP4 PP1 (H100)")]
    classes, _ = bench.decompose(row)
    # One stage reads the whole batch: get_batch_on_this_tp_rank broadcasts over TP 4 tokens, position ids
    # and labels (int64) and the loss mask (fp32), b·s = 2·8192 = 16,384 each, and the data loader's bool
    # causal mask b·s·s = 134,217,728 bytes (pretrain_gpt.py get_batch, megatron/core/utils.py, d98e8a64):
    # 16,384·(3·8 + 4) + 134,217,728 = 134,676,480 bytes. NCCL's ring broadcast at ppb's H100 NVLink rate
    # (450 GB/s a direction at comm_efficiency 0.8: 360 GB/s) plus 3 steps of 5 us latency a tensor:
    # 134,676,480 / 360e9 + 5·15e-6 = 449.10 us a micro-batch; 2 micro-batches.
    expected = 2 * (134_676_480 / 360e9 + 5 * 3 * 5e-6)
    assert classes["get_batch broadcasts"].seconds == pytest.approx(expected, rel=1e-9)


def test_the_strong_scaling_steady_state_is_a_row_it_decomposes(bench):
    (row,) = [row for row in bench.strong_scaling_runs() if "(96 H100" in row.name]
    # Megatron-LM core_r0.8.0 README: the 177B model (h 12288, 96 layers, vocabulary 131072, s 4096) at batch
    # 1152 on 96 H100 at 47% MFU. r0.8.0's count, 12·B·s·L·h²·((1 + 1 + s/h) + 4 + V/(2·L·h)) =
    # 5.24388e18 FLOPs, over 96 · 0.47 · 989e12 FLOP/s: 117.513 s.
    flops = 12 * 1152 * 4096 * 96 * 12288**2 * ((2 + 4096 / 12288) + 4 + 131072 / (2 * 96 * 12288))
    assert row.seconds == pytest.approx(flops / (96 * 0.47 * 989e12), rel=1e-12)
    assert row.seconds == pytest.approx(117.513, abs=1e-3)
    classes, seconds = bench.decompose(row)  # asserts they add up
    # 1152 sequences over DP 2: 576 micro-batches a pipeline, so the bubble is a sliver of the iteration
    assert classes["bubble"].seconds < 0.001 * seconds


def test_a_megatron_run_s_layers_state_their_launches(bench):
    # Megatron CI's 12-layer TP4 case with no measured host time (host_kernel_us 0: every kernel one
    # launch, no plain-op share): a dense layer launches 33 kernels forward and 46 backward, the count
    # tests/test_timing_launches.py makes by hand (`test_a_dense_layer_s_launches_by_hand`); all 12 layers
    # on the one stage.
    run = bench.run_config(bench.small_tp4_run("h100", 0.0), "small-h100")
    dense = {kind: rest for kind, *rest in bench.layer_hosts(run)}[
        next(layer.kind.name for layer in walk(run).layers if layer.node == "BODY")
    ]
    count, _, _, launches_forward, launches_backward = dense
    assert count == 12
    assert (launches_forward, launches_backward) == pytest.approx((33, 46))


def test_alone_factors_split_the_reruns_by_kind_and_scale_the_bubble(bench, gpt_1_7b):
    # A row without recompute or pipeline (Megatron GPT 1.7B): the GEMMs and attention are the classes
    # themselves, and the factor is (class + gap) / class, the table's "x to close".
    row, classes, seconds = gpt_1_7b
    gemms, attention = bench.kernel_seconds(bench.config(row))
    assert gemms == pytest.approx(classes["GEMMs"].seconds, rel=1e-12)
    assert attention == pytest.approx(classes["attention"].seconds, rel=1e-12)
    gap, x_gemms, x_attention = bench.alone_factors(bench.config(row), row.seconds)
    assert gap == pytest.approx(row.seconds - seconds, rel=1e-12)
    assert x_gemms == pytest.approx((gemms + gap) / gemms, rel=1e-12)
    assert x_attention == pytest.approx((attention + gap) / attention, rel=1e-12)
    # Korthikanti's 175B (selective recompute of the unfused core, PP 8): the reruns' scores and context
    # batched products count with the GEMMs (the rerun class holds them and the softmax's and dropout's
    # memory-bound passes), and the class's seconds are scaled by (compute + bubble) / compute, the other
    # stages' idle time
    (row,) = [row for row in bench.public_runs() if row.name.startswith("Korthikanti GPT 175B")]
    classes, _ = bench.decompose(row)
    gemms, attention = bench.kernel_seconds(bench.config(row))
    assert attention == 0 and "attention" not in classes  # no flash attention
    reruns = gemms - classes["GEMMs"].seconds
    assert 0 < reruns < classes[bench.RECOMPUTE_CLASS].seconds
    iteration = bench.run_iteration(bench.config(row))
    scale = (iteration.breakdown["compute"] + iteration.breakdown["bubble"]) / iteration.breakdown["compute"]
    assert scale > 1
    gap, x_gemms, _ = bench.alone_factors(bench.config(row), row.seconds)
    assert x_gemms == pytest.approx(1 + gap / (gemms * scale), rel=1e-12)


def test_offloaded_layers_reload_waits_are_their_own_class(bench):
    # test_timing_offload's slow link: DENSE (4 body layers) with the attention groups offloaded moves
    # 50,176 bytes a layer and micro-batch; at 1e-6 GB/s (1000 B/s) each reload takes c = 50.176 s, and a
    # layer's backward waits c - b beyond its own backward b (timing/offload.py `reload_wait_s`, no
    # combined 1F1B: the window is the backward alone). pp 1, 2 micro-batches, 4 body layers: 8 waits.
    slow = _offload(DENSE, ATTENTION, micro_batches=2)
    slow = slow.model_copy(update={"device": slow.device.model_copy(update={"host_link_gbs": 1e-6})})
    _, backward_ms = TimeModel(slow).layer_times(body(slow), LayerType.NOT_REC_LAYER)
    classes, seconds = bench.decompose_run(slow, "slow link")  # asserts layers, compute and total add up
    assert classes["offload reloads (waits)"].seconds == pytest.approx(2 * 4 * (50.176 - backward_ms / 1e3), rel=1e-9)
    assert sum(share.seconds for share in classes.values()) == pytest.approx(seconds, rel=1e-9)


def test_growth_per_cp_by_hand(bench):
    # columns (cp, classes, ppb, measured); a class absent from a column counts 0 there:
    # cp 1 -> 2: a (3 − 1)/1 = 2, b (0 − 2)/1 = −2, ppb (5 − 3) = 2, measured (7 − 4) = 3;
    # cp 2 -> 4: a 0, c (1 − 0)/2 = 0.5, ppb (6 − 5)/2 = 0.5, measured (13 − 7)/2 = 3;
    # cp 4 -> 4 (same cp): per row, a (5 − 3)/1 = 2
    columns = [
        (1, {"a": 1.0, "b": 2.0}, 3.0, 4.0),
        (2, {"a": 3.0}, 5.0, 7.0),
        (4, {"a": 3.0, "c": 1.0}, 6.0, 13.0),
        (4, {"a": 5.0, "c": 1.0}, 6.0, 13.0),
    ]
    first, second, third = bench.growth_per_cp(columns)
    assert first == {"a": 2.0, "b": -2.0, "ppb": 2.0, "measured": 3.0}
    assert second == {"a": 0.0, "c": 0.5, "ppb": 0.5, "measured": 3.0}
    assert third == {"a": 2.0, "c": 0.0, "ppb": 0.0, "measured": 0.0}


def test_table_2_attention_grows_by_one_ring_step_a_unit_of_cp(bench):
    # torchtitan's Table 2 keeps 32768 tokens a rank (s = 32768·cp): each ring step PyTorch adds
    # (`_templated_ring_attention`, torch 2.6.0 and 2.13: i <= rank, L × L/2; i > rank, L/2 × L) is
    # L²/2 (query, key) pairs, the CP1 row's causal L × L call's, at flat rates (16k-32k keys), so
    # ppb's attention at cp is cp times CP1's (within the rates' 1%) and grows by CP1's a unit of cp
    rows = {row.name: row for row in bench.public_runs() if row.name.startswith("torchtitan 8B FSDP")}
    cp1, cp4, cp8 = (
        rows[f"torchtitan 8B {label} (8 H100)"]
        for label in ("FSDP8 CP1 s32768", "FSDP2 CP4 s131072", "FSDP1 CP8 s262144")
    )
    columns = []
    for row, cp in ((cp1, 1), (cp4, 4), (cp8, 8)):
        classes, seconds = bench.decompose(row)
        columns.append((cp, {name: share.seconds for name, share in classes.items()}, seconds, row.seconds))
    one = columns[0][1]["attention"]
    for grown in bench.growth_per_cp(columns):
        assert grown["attention"] == pytest.approx(one, rel=0.01)
        assert grown["GEMMs"] == pytest.approx(0.0, abs=1e-9)  # the same 32768 tokens a rank at every cp
