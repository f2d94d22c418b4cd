"""torchtitan's step outside the layers, by hand: FSDP2's units (which collectives run where) and the
AdamW step with its gradient clipping (ppb_core.timing.titan_step)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.walk import BODY, HEAD, TAIL, walk
from ppb_core.schedules import Op, Timeline
from ppb_core.timing.iteration import _fsdp_exposed, _post_reduce_end, framework_rules, run_iteration
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.titan_step import (
    fsdp2_units,
    optimizer_bytes_per_element,
    pipelined_grad_bytes,
    post_backward_reduce_end,
)

NODES = [HEAD, BODY, BODY, TAIL]
LAST = [False, False, True, False]
GATHERS = [1.0, 2.0, 2.0, 3.0]
REDUCES = [10.0, 20.0, 20.0, 30.0]
LAYERS = [(1.0, 2.0), (10.0, 20.0), (10.0, 20.0), (5.0, 10.0)]  # (forward, backward) seconds


def _run(units="split", implementation="fused", framework="torchtitan", pp=1):
    timing = {"fsdp_units": units, "optimizer_implementation": implementation}
    return parse_run_config(
        {
            "framework": framework,
            "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
            "parallel": {"dp": 2, "zero": 3, "pp": pp, **({"fsdp": True} if framework == "torchtitan" else {})},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": pp, "optimizer": "adamw"},
            "device": ROUND_DEVICE,
            "timing": timing if framework == "torchtitan" else {},
        }
    )


def test_optimizer_bytes_by_hand():
    # fp32 parameter p, moments m and gradient g, 4 bytes each. Clipping: foreach norm (read g) and
    # foreach_mul_ (read and write g): 12. Fused AdamW: read p, g, m, v, write p, m, v: 28.
    assert optimizer_bytes_per_element("fused") == 12 + 28
    # foreach: mul_(p) 8, lerp_(m, g) 12, mul_(v) 8, addcmul_(v, g, g) 12, sqrt(v) -> s 8,
    # div_(s) 8, add_(s) 8, addcdiv_(p, m, s) 16: 80
    assert optimizer_bytes_per_element("foreach") == 12 + 80
    assert optimizer_bytes_per_element("for-loop") == 12 + 80
    # Adam's decay: _foreach_add(grads, params) reads g and p and writes a new g (12) for mul_'s 8
    assert optimizer_bytes_per_element("foreach", decoupled=False) == 12 + 84
    assert optimizer_bytes_per_element("fused", decoupled=False) == 12 + 28
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimizer_bytes_per_element("adafactor")


def test_root_unit_gathers_first_regathers_at_the_logits_and_reduces_last():
    units = fsdp2_units(NODES, LAST, GATHERS, REDUCES, "root", reshard=True)
    # root = embedding 1 + output 3: gathered before the first forward, again when the backward
    # reaches the logits (the last layer's backward comes first), reduced after the embedding's backward
    assert units.forward == (4.0, 2.0, 2.0, 0.0)
    assert units.backward == (0.0, 2.0, 0.0, 4.0)  # the last block is not resharded
    assert units.reduces == (40.0, 20.0, 20.0, 0.0)
    assert units.regathered == (True, True, False, True)


def test_split_units_keep_norm_and_output_gathered():
    units = fsdp2_units(NODES, LAST, GATHERS, REDUCES, "split", reshard=True)
    assert units.forward == tuple(GATHERS)
    assert units.backward == (1.0, 2.0, 2.0, 0.0)  # [norm, output] not resharded after the forward
    assert units.reduces == tuple(REDUCES)
    assert units.regathered == (True, True, True, False)


def test_root_unit_under_a_pipeline_stage():
    # the last stage: two blocks and the output layer, nothing resharded (PP): the root's gather runs
    # before the stage's first block, its reduce-scatter after the stage's whole backward
    units = fsdp2_units([BODY, BODY, TAIL], [False, True, False], [2.0, 2.0, 3.0], [20.0, 20.0, 30.0], "root", False)
    assert units.forward == (5.0, 2.0, 0.0)
    assert units.backward == (0.0, 0.0, 0.0)
    assert units.reduces == (50.0, 20.0, 0.0)


def test_exposed_fsdp_time_by_hand():
    rules = framework_rules(_run())
    root = fsdp2_units(NODES, LAST, GATHERS, REDUCES, "root", reshard=True)
    fe, be, *_ = _fsdp_exposed(LAYERS, list(root.forward), list(root.reduces), rules, 0.0, list(root.backward))
    # forward: 4 exposed, then 2 behind the embedding's 1 (1 exposed), the rest hidden: 5
    assert fe == pytest.approx(5.0)
    # backward, last layer first: the root's gather again 4 exposed; the last block nothing (its
    # reduce 20 pending); block 1 its gather 2 + 20 behind 20: 2; the embedding 20 behind 20: 0;
    # the root's reduce-scatter 40 after it all: 4 + 2 + 40
    assert be == pytest.approx(46.0)
    split = fsdp2_units(NODES, LAST, GATHERS, REDUCES, "split", reshard=True)
    fe, be, *_ = _fsdp_exposed(LAYERS, list(split.forward), list(split.reduces), rules, 0.0, list(split.backward))
    # forward 1 + (2 - 1); backward: output nothing (30 pending), last block 2 + 30 behind 10: 22,
    # block 1 2 + 20 behind 20: 2, embedding 1 + 20 behind 20: 1, its 10 after: 35
    assert fe == pytest.approx(2.0)
    assert be == pytest.approx(35.0)


def test_torchtitan_optimizer_step_seconds_by_hand():
    # SMALL_GQA: embedding and output 4096·1024 each, 4 blocks of 2·1024² + 2·1024·256 + 3·1024·2816
    # + 2·1024, the final norm 1024; half of each on a rank (dp 2)
    block = 2 * 1024**2 + 2 * 1024 * 256 + 3 * 1024 * 2816 + 2 * 1024
    held = (2 * 4096 * 1024 + 4 * block + 1024) / 2
    hbm = 1000e9 * 0.5  # ROUND_DEVICE
    for implementation, per_element in (("fused", 40), ("foreach", 92)):
        seconds = run_iteration(_run(implementation=implementation)).breakdown["optimizer"]
        assert seconds == pytest.approx(held * per_element / hbm)


def test_root_units_expose_more_than_split_ones():
    split, root = (run_iteration(_run(units)).breakdown["fsdp_communication"] for units in ("split", "root"))
    assert root > split


def test_torchtitan_version_settings_are_refused_under_megatron():
    with pytest.raises(InputError, match=r"timing\.fsdp_units"):
        parse_run_config(
            {
                "framework": "megatron",
                "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
                "training": {"seq_length": 2048},
                "device": ROUND_DEVICE,
                "timing": {"fsdp_units": "root"},
            }
        )


def _tp_run(framework="torchtitan", overlap=None):
    return parse_run_config(
        {
            "framework": framework,
            "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
            "parallel": {"tp": 2, "sequence_parallel": True},
            "training": {"seq_length": 2048, "micro_batch_size": 1},
            "device": ROUND_DEVICE,
            "timing": {"overlap": overlap or {}},
        }
    )


def _prices(run):
    body = next(layer for layer in walk(run) if layer.node == BODY)
    return TimeModel(run).op_prices(body)


def test_torchtitan_s_backward_tp_reduce_scatter_is_exposed_with_or_without_async_tp():
    # the attention input's gradient reduce-scattered over TP 2: 2048 tokens × h 1024 in bf16 =
    # 4,194,304 bytes, half of it sent, at ROUND_DEVICE's 100 GB/s × comm_efficiency 0.5 (no latency)
    exposed_ms = 4_194_304 / 2 / 50e9 * 1e3
    # beside it `reduce_scatter_tensor(scatter_dim=1)`'s chunk-and-cat copy of the whole input
    # (`ppb_core.timing.funcol`): 2 · 4,194,304 bytes at 1000 GB/s × 0.5
    copy_ms = 2 * 4_194_304 / 500e9 * 1e3
    for overlap in ({}, {"tp": 1.0}):  # vanilla and async TP (a sum of matmuls is not fused)
        backward_ms = _prices(_tp_run(overlap=overlap))["gather_attention"].backward_ms
        assert backward_ms == pytest.approx(exposed_ms + copy_ms)
    # Megatron hides it behind the consumer's weight gradient (tp_async 1.0 by default), and so does a
    # torchtitan run that states tp_async
    for run in (_tp_run("megatron"), _tp_run(overlap={"tp_async": 1.0})):
        assert _prices(run)["gather_attention"].backward_ms < exposed_ms


def test_async_tp_sums_the_pulled_partial_products_after_the_last_chunk():
    # w2's output (2048 × 1024 bf16, 4,194,304 bytes) reduce-scattered by the fused matmul-reduce-scatter:
    # torch.sum over [2, 1024, 1024] reads all 4,194,304 bytes and writes half, at ROUND_DEVICE's
    # 1000 GB/s × memory_efficiency 0.5; the transfers (2,097,152 bytes at 50 GB/s: 41.9 us) hide
    # behind the chunk of w2 computed beside them (`ppb_core.timing.symm_mem`: 1 of TP 2's chunks, half
    # of 2·2048·1408·1024 FLOP at 100 TFLOP/s × 0.5: 59.1 us), no SMs taken (copy-engine copies)
    summed_ms = 4_194_304 * 1.5 / 500e9 * 1e3
    assert _prices(_tp_run(overlap={"tp": 1.0}))["reduce_mlp"].forward_ms == pytest.approx(summed_ms)
    # vanilla TP: NCCL's reduce-scatter, exposed whole, no sum kernel, but the chunk-and-cat copy of
    # its input before it (`ppb_core.timing.funcol`; the fused op above matches that pattern away):
    # 2 · 4,194,304 bytes at 500 GB/s
    vanilla_ms = (4_194_304 / 2 / 50e9 + 2 * 4_194_304 / 500e9) * 1e3
    assert _prices(_tp_run())["reduce_mlp"].forward_ms == pytest.approx(vanilla_ms)


@pytest.mark.parametrize("hbm_gbs", [1000.0, 10.0])  # 10 GB/s: the partials' sum outlasts the reduce-scatter
def test_more_async_tp_overlap_never_raises_torchtitan_s_iteration(hbm_gbs):
    times = []
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        run = _tp_run(overlap={"tp": share})
        run = run.model_copy(update={"device": run.device.model_copy(update={"hbm_bandwidth_gbs": hbm_gbs})})
        times.append(run_iteration(run).seconds)
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in pairwise(times))


@pytest.mark.parametrize(("pp", "steps"), [(1, 4), (2, 6)])
def test_the_clip_norm_all_reduces_by_hand(pp, steps):
    # one scalar all-reduce a mesh dimension: FSDP's dp 2 and TP 2, and the stages under PP; all in one
    # node of 8, each 2·(2 − 1) steps of 5 us
    raw = {
        "framework": "torchtitan",
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, "tp": 2, "pp": pp, "sequence_parallel": True},
        "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": pp},
        "device": {**ROUND_DEVICE, "collective_latency_us": 5.0},
    }
    assert run_iteration(parse_run_config(raw)).breakdown["bookkeeping"] == pytest.approx(steps * 5e-6)


def test_pipelined_fp32_gradient_accumulation_bytes_by_hand():
    # FSDP2 under torch.distributed.pipelining's no-sync backward (FSDPParam.to_accumulated_grad_if_needed,
    # accumulate_unsharded_grad_if_needed): bf16 gradients (2 B), fp32 reduce dtype (4 B). Micro-batch 1
    # casts (read 2, write 4: 6), each later one adds (read 4 + 2, write 4: 10); 8 micro-batches average
    # (6 + 7·10)/8 = 9.5 B an element; the reduce-scatter copy-in reads the fp32 accumulator: 4 + 4 = 8
    assert pipelined_grad_bytes(8, 2, 4) == (pytest.approx(9.5), 8)
    assert pipelined_grad_bytes(1, 2, 4) == (pytest.approx(6.0), 8)
    # gradients already in the reduce dtype: no accumulator, the copy-in of the plain step (2 + 2)
    assert pipelined_grad_bytes(8, 2, 2) == (0.0, 4)


def test_pipelined_torchtitan_pays_the_fp32_accumulation_each_micro_batch():
    # 8 micro-batches against 4 of the same size, pp 2: the bf16-reduced run's difference is their compute
    # (FSDP2 keeps no accumulator); the fp32-reduced run's adds, on the last stage's path through every
    # micro-batch's backward, the accumulator's added bytes: 6 + 7·10 − (6 + 3·10) = 40 B an element of
    # the stage's 26,743,808 unsharded parameters (2 blocks of 11,274,240, the norm 1,024 and the output
    # 4,096·1,024; SMALL_GQA over 2 stages, torchtitan's split 2 and 2 blocks), at 1000 GB/s · 0.5
    def seconds(m, grad_bytes):
        raw = {
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
            "parallel": {"dp": 2, "zero": 3, "pp": 2, "fsdp": True},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": m, "grad_bytes": grad_bytes},
            "device": ROUND_DEVICE,
        }
        return run_iteration(parse_run_config(raw)).seconds

    added = (seconds(8, 4) - seconds(4, 4)) - (seconds(8, 2) - seconds(4, 2))
    assert added >= 40 * 26_743_808 / (1000e9 * 0.5)


def test_post_backward_reduce_scatters_queue_after_each_chunks_last_backward():
    # stage.py `backward_maybe_with_nosync` (torch 2.6.0): a chunk's post_backward runs once its last
    # backward has returned. Chunks ending at 5 s and 10 s with queues of 4 s and 3 s: the first runs
    # 5 → 9, the second waits for its backward, 10 → 13; with queues of 6 s and 1 s the second waits for
    # the first instead: 5 → 11 → 12. One chunk: its end plus its queue.
    assert post_backward_reduce_end([(10.0, 3.0), (5.0, 4.0)]) == pytest.approx(13.0)
    assert post_backward_reduce_end([(5.0, 6.0), (8.0, 1.0)]) == pytest.approx(12.0)
    assert post_backward_reduce_end([(7.0, 2.5)]) == pytest.approx(9.5)


def test_the_latest_rank_queue_reads_each_chunks_last_backward_off_the_timeline():
    # Two ranks of two chunks. Rank 0's chunk 1 ends its last backward at 6, chunk 0 at 9; queues of 4
    # and 2: 6 → 10, then chunk 0 waits for chunk 1's queue: 10 → 12. Rank 1's chunk 1 at 5, chunk 0 at 7,
    # queues of 1 each: 5 → 6, 7 → 8. The latest: rank 0's 12.
    f0, f1, b0, b1 = Op("F", 0, 0), Op("F", 1, 0), Op("B", 0, 0), Op("B", 1, 0)
    timeline = Timeline(
        orders=[[f0, f1, b1, b0], [f0, f1, b1, b0]],
        starts=[[0.0, 1.0, 4.0, 7.0], [1.0, 2.0, 3.0, 5.0]],
        ends=[[1.0, 2.0, 6.0, 9.0], [2.0, 3.0, 5.0, 7.0]],
        binding=[[None] * 4, [None] * 4],
    )
    queues = {(0, 0): 2.0, (1, 0): 4.0, (0, 1): 1.0, (1, 1): 1.0}
    assert _post_reduce_end(timeline, queues, 2, 2) == pytest.approx(12.0)
