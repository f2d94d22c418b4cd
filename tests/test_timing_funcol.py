"""The chunk-and-cat copies of torchtitan's sequence-parallel collectives (`ppb_core.timing.funcol`),
against bytes derived by hand from torch/distributed/_functional_collectives.py (`all_gather_tensor`,
`reduce_scatter_tensor` with a non-zero dim, as DTensor's `Shard(1)` redistributions call them)."""

from __future__ import annotations

import itertools

import pytest
from small_models import LLAMA_8B_LAYER

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.comm import collective_seconds
from ppb_core.timing.flops import ALL_GATHER, REDUCE_SCATTER
from ppb_core.timing.funcol import sequence_copy_bytes
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.pricer import TimeModel


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
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
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
    # micro-batch 2, the same 33,554,432-byte tensors, a shard of 4,194,304 bytes. Fused
    # all-gather-matmul, each pass: the shard flattened (movedim, batch 2) and copied into the
    # symmetric buffer, 2·2·4,194,304; in the pass whose weight gradient reads the gathered input also
    # that input's strided rows copied, 2·33,554,432 (the backward's gradient gather; the forward
    # gather's rows land in the backward). Fused matmul-reduce-scatter: wo's input (4096 tokens × 4
    # heads of 128 on a rank, bf16: 4,194,304 bytes) moved and flattened, 2·that. Beside each, what its
    # matmuls lose run a shard at a time (`_chunked_s`, tested below), all capped at the plain
    # collective and its chunk-and-cat. The input gradient's reduce-scatter (a sum of matmuls) keeps the
    # plain chunk-and-cat, 2·33,554,432.
    model, layer = _model("torchtitan", tp_overlap=1.0)
    ops = {op.name: op for op in model.ops(layer)}
    rate = model.kernels.hbm_bytes_per_s
    shard_copies_s = 2 * 2 * 4_194_304 / rate
    rows_s = 2 * 33_554_432 / rate
    gather, reduce = ops["gather_attention"], ops["reduce_attention"]
    cases = (
        ("gather_attention", gather.forward_comm, False, False, shard_copies_s),
        ("reduce_attention", reduce.backward_comm, True, True, shard_copies_s + rows_s),
        ("reduce_attention", reduce.forward_comm, False, True, 2 * 4_194_304 / rate),
    )
    for name, collective, backward, rows, copies in cases:
        plain = collective_seconds(collective, model.links) + 2 * collective.payload_bytes / rate
        lost = model._chunked_s(name, collective, ops, backward)
        got = model._with_copy_s(name, collective, ops, 0.0, backward=backward, rows=rows)
        assert got == pytest.approx(min(copies + lost, plain))
    # the input gradient's plain reduce-scatter: exposure plus its chunk-and-cat, uncapped
    got = model._with_copy_s("gather_attention", gather.backward_comm, ops, 1.0, backward=True, rows=True)
    assert got == pytest.approx(1.0 + rows_s)
    # the forward gather's rows in the backward, up to what the fused forward saved (here all of it)
    assert model._gathered_rows_s(gather.forward_comm, ops, 0.0) == pytest.approx(rows_s)
    # never above the plain collective and its copy: an exposure of 1000 s is far above it
    plain = collective_seconds(gather.forward_comm, model.links) + rows_s
    got = model._with_copy_s("gather_attention", gather.forward_comm, ops, 1e3, backward=False, rows=False)
    assert got == pytest.approx(plain)
    megatron, mlayer = _model("megatron")
    mops = {op.name: op for op in megatron.ops(mlayer)}
    assert (
        megatron._with_copy_s("gather_attention", mops["gather_attention"].forward_comm, mops, 1.0, False, True) == 1.0
    )


def test_async_tp_runs_its_matmuls_a_shard_at_a_time():
    # the gathered attention input (2·2048 = 4096 rows, k 4096) feeds qk_proj and v_proj, which torchtitan runs as
    # its separate linears wq, wk, wv (model.py `Attention`: three nn.Linear; on a rank q 4096/8 = 512, k and v
    # 8·128/8 = 128 columns): each run as 8 GEMMs of 4096/8 = 512 rows; what they lose over the whole 4096 rows
    # = Σ_linears 8·t(512, n) − t(4096, n), each linear at its own time t = max(its GEMM g, its bytes' HBM time:
    # (rows + n)·k·2 read + rows·n·2 written), the op's own bytes not charged again
    model, layer = _model("torchtitan", tp_overlap=1.0)
    ops = {op.name: op for op in model.ops(layer)}
    k16 = model._kernels_16
    assert ops["qk_proj"].linears == (512, 128) and ops["v_proj"].linears == (128,)

    def t(rows: float, n: int) -> float:
        return max(k16.gemm_compute_s(rows, n, 4096, 1, 2), k16.memory_s((rows + n) * 4096 * 2 + rows * n * 2))

    lost = model._chunked_s("gather_attention", ops["gather_attention"].forward_comm, ops, backward=False)
    expected = sum(8 * t(512, n) - t(4096, n) for n in (512, 128, 128))
    assert lost == pytest.approx(expected)
    assert lost > 0


def test_more_async_tp_overlap_never_raises_the_iteration_with_the_copies():
    # micro-batch 2, where the fused ops copy their shards and strided rows: each share's iteration at
    # most the one before (the fused op capped at the plain collective and its chunk-and-cat)
    times = []
    for share in (0.0, 0.01, 0.5, 1.0):
        model, _ = _model("torchtitan", tp_overlap=share)
        times.append(run_iteration(model.run).seconds)
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in itertools.pairwise(times))
