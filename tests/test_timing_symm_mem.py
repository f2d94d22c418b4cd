"""What async TP's fused symmetric-memory ops leave exposed of their transfers (`ppb_core.timing.symm_mem`),
against figures derived by hand from torch/distributed/_symmetric_memory (`_pipelined_multi_all_gather_and_
consume`, `_pipelined_produce_and_all2all`) and torch/_inductor/fx_passes/micro_pipeline_tp.py."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import BODY, walk
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.symm_mem import fused_exposed_s


def test_tp_minus_one_chunks_cover_the_transfers():
    # TP 8: the matmuls of 7 of 8 chunks run beside the transfers: 8 s of matmuls cover 7 s, so 10 s of
    # transfers leave 3 s; half of them overlappable (share 0.5): 5 s beside, all covered, 5 s left;
    # TP 2 with 30 s of matmuls: 15 s cover all 10 s
    assert fused_exposed_s(10.0, 1.0, 8.0, 8) == pytest.approx(3.0)
    assert fused_exposed_s(10.0, 0.5, 8.0, 8) == pytest.approx(5.0)
    assert fused_exposed_s(10.0, 1.0, 30.0, 2) == pytest.approx(0.0)
    assert fused_exposed_s(10.0, 0.0, 30.0, 2) == pytest.approx(10.0)


def _model(comm_sms: int = 0, tp_overlap: float = 1.0) -> tuple[TimeModel, dict]:
    run = parse_run_config(
        {
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
            "parallel": {"tp": 2, "sequence_parallel": True},
            "training": {"seq_length": 2048, "micro_batch_size": 1},
            "device": {**ROUND_DEVICE, "comm_sms": comm_sms},
            "timing": {"overlap": {"tp": tp_overlap}},
        }
    )
    model = TimeModel(run)
    body = next(layer for layer in walk(run) if layer.node == BODY)
    return model, {op.name: op for op in model.ops(body)}


# the attention's and the MLP's sequence-parallel tensors: 2048 tokens × hidden 1024 in bf16, 4,194,304
# bytes, half of it sent over TP 2 at ROUND_DEVICE's 100 GB/s × comm_efficiency 0.5: 41.943 us
TRANSFER_S = 4_194_304 / 2 / 50e9


def test_the_output_projection_s_first_chunk_runs_before_any_transfer():
    # wo on a rank: 2048 tokens × 8 of 16 heads of 64 (k 512) × hidden 1024, 2·2048·512·1024 FLOP at
    # 100 TFLOP/s × 0.5: 42.950 us (128 tiles of 128², two full waves of 64 SMs); the fused
    # matmul-reduce-scatter computes the chunk for the peer first and pulls while computing its own:
    # half of wo covers the transfers, 41.943 − 21.475 = 20.468 us exposed (a partner-only rule: 0)
    model, ops = _model()
    wo_s = 2 * 2048 * 512 * 1024 / 50e12
    exposed = model._exposed_s(ops["reduce_attention"].forward_comm, ops)
    assert exposed == pytest.approx(TRANSFER_S - wo_s / 2)
    assert exposed * 1e6 == pytest.approx(20.468, abs=1e-3)
    # its price: that, plus the pulled partials' sum (all 4,194,304 bytes read, half written, at
    # 1000 GB/s × 0.5), no copy at batch 1, no chunk loss (each chunk's 64 tiles one full wave)
    summed_s = 4_194_304 * 1.5 / 500e9
    body = next(layer for layer in walk(model.run) if layer.node == BODY)
    assert model.op_prices(body)["reduce_attention"].forward_ms == pytest.approx((exposed + summed_s) * 1e3)


def test_the_attention_gather_hides_behind_every_matmul_reading_it():
    # micro_pipeline_tp.py `_find_consumer_matmuls`: wq, wk and wv all read the gathered input and run
    # on every shard; half of them (TP 2) cover the transfers. Here q and k alone would leave some
    # exposed, q, k and v together none.
    model, ops = _model()
    qk_s = model._phase_s(ops["qk_proj"], "forward")
    v_s = model._phase_s(ops["v_proj"], "forward")
    assert qk_s / 2 < TRANSFER_S <= (qk_s + v_s) / 2
    assert model._exposed_s(ops["gather_attention"].forward_comm, ops) == pytest.approx(0.0)
    # the backward's gradient gather feeds wo's input gradient only: half of it covers the transfers
    dgrad_s = model._phase_s(ops["out_proj"], "dgrad")
    exposed = model._exposed_s(ops["reduce_attention"].backward_comm, ops)
    assert exposed == pytest.approx(max(0.0, TRANSFER_S - dgrad_s / 2))


def test_copy_engine_transfers_take_no_sms_from_the_matmuls():
    # w2 (2·2048·1408·1024 FLOP: 118.1 us, half of it 59.1 us) covers the MLP's reduce-scatter whole,
    # with NCCL's 16 of 64 SMs on the device or none: the copies are the copy engine's, nothing charged
    for comm_sms in (0, 16):
        model, ops = _model(comm_sms)
        assert model._exposed_s(ops["reduce_mlp"].forward_comm, ops) == pytest.approx(0.0)
    # vanilla TP's NCCL reduce-scatter is exposed whole either way
    model, ops = _model(16, tp_overlap=0.0)
    assert model._exposed_s(ops["reduce_mlp"].forward_comm, ops) == pytest.approx(TRANSFER_S)
