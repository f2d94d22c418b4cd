"""The chunk-and-cat copies of torchtitan's sequence-parallel collectives (`ppb_core.timing.funcol`),
against bytes derived by hand from torch/distributed/_functional_collectives.py (`all_gather_tensor`,
`reduce_scatter_tensor` with a non-zero dim, as DTensor's `Shard(1)` redistributions call them)."""

from __future__ import annotations

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.comm import collective_seconds
from ppb_core.timing.flops import ALL_GATHER, REDUCE_SCATTER
from ppb_core.timing.funcol import sequence_copy_bytes
from ppb_core.timing.pricer import TimeModel

LAYER = {
    "vocab_size": 1024,
    "hidden_size": 4096,
    "num_layers": 2,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
}


def test_copy_bytes_per_collective():
    # reduce_scatter_tensor(scatter_dim=1): cat(chunk(x)) reads and writes the whole input, any batch;
    # all_gather_tensor(gather_dim=1): cat(chunk(res)) the whole gathered tensor, priced from batch 2
    # (a view from torch's #169404 at batch 1); nothing where async TP fuses the pattern.
    assert sequence_copy_bytes(REDUCE_SCATTER, 100.0, 1, fused=False) == 200.0
    assert sequence_copy_bytes(ALL_GATHER, 100.0, 2, fused=False) == 200.0
    assert sequence_copy_bytes(ALL_GATHER, 100.0, 1, fused=False) == 0.0
    assert sequence_copy_bytes(REDUCE_SCATTER, 100.0, 4, fused=True) == 0.0


def _model(framework: str, tp_overlap: float = 0.0) -> tuple[TimeModel, object]:
    timing = {"torch_compile": True, "overlap": {"tp": tp_overlap}} if framework == "torchtitan" else {}
    run = parse_run_config(
        {
            "name": "x",
            "framework": framework,
            "models": [{"name": "llm", "spec": LAYER}],
            "parallel": {"tp": 8, "dp": 1, "sequence_parallel": True},
            "training": {"seq_length": 2048, "micro_batch_size": 2, "flash_attention": True},
            "device": {"name": "h100-80gb"},
            "timing": timing,
        }
    )
    return TimeModel(run), next(layer for layer in walk(run) if layer.index == 0)


def test_torchtitan_s_vanilla_tp_pays_a_copy_beside_each_collective():
    # 2 sequences of 2048 tokens, hidden 4096, bf16: the gathered / scattered tensor is
    # 2·2048·4096·2 = 33,554,432 bytes, its copy 67,108,864 bytes at the H100's HBM rate.
    # Vanilla TP (overlap.tp 0, tp_async 0 under torchtitan): every collective fully exposed.
    model, layer = _model("torchtitan")
    ops = {op.name: op for op in model.ops(layer)}
    prices = model.op_prices(layer)
    copy_s = 2 * 33_554_432 / model.kernels.hbm_bytes_per_s
    gather = ops["gather_attention"]
    assert gather.forward_comm.payload_bytes == 33_554_432
    link_forward = collective_seconds(gather.forward_comm, model.links)
    link_backward = collective_seconds(gather.backward_comm, model.links)
    assert prices["gather_attention"].forward_ms == pytest.approx((link_forward + copy_s) * 1e3)
    assert prices["gather_attention"].backward_ms == pytest.approx((link_backward + copy_s) * 1e3)
    reduce = ops["reduce_attention"]
    assert prices["reduce_attention"].forward_ms == pytest.approx(
        (collective_seconds(reduce.forward_comm, model.links) + copy_s) * 1e3
    )


def test_async_tp_fuses_all_but_the_input_gradient_s_copy():
    # Async TP: the all-gathers feeding matmuls and the forward reduce-scatter a matmul feeds are
    # micro-pipelined (no cat); the input gradient's reduce-scatter keeps its copy; Megatron none.
    model, layer = _model("torchtitan", tp_overlap=1.0)
    ops = {op.name: op for op in model.ops(layer)}
    copy_s = 2 * 33_554_432 / model.kernels.hbm_bytes_per_s
    gather, reduce = ops["gather_attention"], ops["reduce_attention"]
    assert model._sequence_copy_s(gather.forward_comm, ops, backward=False) == 0.0
    assert model._sequence_copy_s(reduce.forward_comm, ops, backward=False) == 0.0
    assert model._sequence_copy_s(reduce.backward_comm, ops, backward=True) == 0.0
    assert model._sequence_copy_s(gather.backward_comm, ops, backward=True) == pytest.approx(copy_s)
    megatron, mlayer = _model("megatron")
    mops = {op.name: op for op in megatron.ops(mlayer)}
    assert megatron._sequence_copy_s(mops["gather_attention"].forward_comm, mops, backward=False) == 0.0
