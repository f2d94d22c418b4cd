"""The chunk-and-cat copies of torchtitan's sequence-parallel collectives (`ppb_core.timing.funcol`),
against bytes derived by hand from torch/distributed/_functional_collectives.py (`all_gather_tensor`,
`reduce_scatter_tensor` with a non-zero dim, as DTensor's `Shard(1)` redistributions call them)."""

from __future__ import annotations

import itertools

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.comm import collective_seconds
from ppb_core.timing.flops import ALL_GATHER, REDUCE_SCATTER
from ppb_core.timing.funcol import sequence_copy_bytes
from ppb_core.timing.iteration import run_iteration
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


def test_async_tp_s_fused_ops_copy_less():
    # Async TP (overlap.tp 1.0), TP 8, the copies beside a hidden collective (exposed 0 s),
    # micro-batch 2, the same 33,554,432-byte tensors, a shard of
    # 4,194,304 bytes. Fused all-gather-matmul, each pass: the shard flattened (movedim, batch 2) and
    # copied into the symmetric buffer, 2·2·4,194,304; in the pass whose weight gradient reads the
    # gathered input also that input's strided rows copied, 2·33,554,432 (the backward's gradient
    # gather; the forward gather's rows land in the backward). Fused matmul-reduce-scatter: wo's input
    # (4096 tokens × 4 heads of 128 on a rank, bf16: 4,194,304 bytes) moved and flattened, 2·that. The
    # input gradient's reduce-scatter (a sum of matmuls) keeps the plain chunk-and-cat, 2·33,554,432.
    model, layer = _model("torchtitan", tp_overlap=1.0)
    ops = {op.name: op for op in model.ops(layer)}
    rate = model.kernels.hbm_bytes_per_s
    shard_copies_s = 2 * 2 * 4_194_304 / rate
    rows_s = 2 * 33_554_432 / rate
    gather, reduce = ops["gather_attention"], ops["reduce_attention"]
    assert model._with_copy_s(gather.forward_comm, ops, 0.0, backward=False, rows=False) == pytest.approx(
        shard_copies_s
    )
    assert model._with_copy_s(reduce.backward_comm, ops, 0.0, backward=True, rows=True) == pytest.approx(
        shard_copies_s + rows_s
    )
    assert model._with_copy_s(reduce.forward_comm, ops, 0.0, backward=False, rows=True) == pytest.approx(
        2 * 4_194_304 / rate
    )
    assert model._with_copy_s(gather.backward_comm, ops, 1.0, backward=True, rows=True) == pytest.approx(1.0 + rows_s)
    # the forward gather's rows in the backward, up to what the fused forward saved (here all of it)
    assert model._gathered_rows_s(gather.forward_comm, ops, 0.0) == pytest.approx(rows_s)
    # never above the plain collective and its copy: an exposure of 1000 s is far above it
    plain = collective_seconds(gather.forward_comm, model.links) + rows_s
    assert model._with_copy_s(gather.forward_comm, ops, 1e3, backward=False, rows=False) == pytest.approx(plain)
    megatron, mlayer = _model("megatron")
    mops = {op.name: op for op in megatron.ops(mlayer)}
    assert megatron._with_copy_s(mops["gather_attention"].forward_comm, mops, 1.0, False, rows=True) == 1.0


def test_more_async_tp_overlap_never_raises_the_iteration_with_the_copies():
    # micro-batch 2, where the fused ops copy their shards and strided rows: each share's iteration at
    # most the one before (the fused op capped at the plain collective and its chunk-and-cat)
    times = []
    for share in (0.0, 0.01, 0.5, 1.0):
        model, _ = _model("torchtitan", tp_overlap=share)
        times.append(run_iteration(model.run).seconds)
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in itertools.pairwise(times))
