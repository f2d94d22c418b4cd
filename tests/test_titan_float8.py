"""torchtitan's Float8 casts by hand (torchao at eab345c, torchtitan 9dec370's pin): each linear input cast
once (compiled, the linears reading one tensor share it; under Float8 TP `PrepareFloat8ModuleInput` casts
the module's input on the sequence shard before the all-gather), output gradients cast, and the weight
gradient's operand copies (ppb_core.timing.pricer `TimeModel._titan_cast_bytes`)."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.pricer import TimeModel


def _gemms(tp: int, compiled: bool = True):
    raw = {
        "framework": "torchtitan",
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, "zero": 3, "fsdp": True, "tp": tp, "sequence_parallel": tp > 1},
        "training": {"seq_length": 2048, "micro_batch_size": 1},
        "device": ROUND_DEVICE,
        "timing": {"torch_compile": compiled, "matmul_dtype": "fp8", "fp8_recipe": "tensorwise"},
    }
    model = TimeModel(parse_run_config(raw))
    body = next(layer for layer in walk(model.run) if layer.node == "BODY")
    return model, {op.name: op for op in model.ops(body) if op.gemm is not None}


def test_casts_without_tp_by_hand():
    # bf16 (2 B): amax read 2, cast read 2 and write 1 = 5 B an element. wq, wk, wv read one input (ppb's
    # qk_proj and v_proj of one fused GEMM, q + k 1024 + 256 and v 256 of 1536 columns): one cast, shared
    # 1280/1536 and 256/1536
    model, ops = _gemms(1)
    forward = {name: model._cast_bytes(op, gradient=False) for name, op in ops.items()}
    assert forward["qk_proj"] == pytest.approx(5 * 1280 / 1536)
    assert forward["v_proj"] == pytest.approx(5 * 256 / 1536)
    assert forward["qk_proj"] + forward["v_proj"] == pytest.approx(5.0)
    assert forward["mlp_in"] == forward["out_proj"] == forward["mlp_out"] == 5.0
    assert all(model._cast_bytes(op, gradient=True) == 5.0 for op in ops.values())
    # the backward's copies, a byte read and written: the output gradient's transpose (2048 · 1280), the
    # shared fp8 input made column-major (2048 · 1024, its 1280/1536 share) and the fp8 weight (1280 · 1024)
    copies = 2 * (2048 * (1280 + 1024 * 1280 / 1536) + 1280 * 1024)
    assert model._titan_wgrad_copies(ops["qk_proj"]) == pytest.approx(copies)


def test_float8_tp_casts_on_the_sequence_shard_by_hand():
    # TP 2 with SP: the attention's and the feed-forward's inputs cast on the shard before the float8
    # all-gather (5/2 B a gathered element), the row-parallel outputs' gradients on the shard before the
    # backward's all-gather (5/2); the column-parallel gradients and the row-parallel inputs are local (5)
    model, ops = _gemms(2)
    assert model._cast_bytes(ops["qk_proj"], gradient=False) == pytest.approx(5 * 640 / 768 / 2)
    assert model._cast_bytes(ops["mlp_in"], gradient=False) == pytest.approx(2.5)
    assert model._cast_bytes(ops["out_proj"], gradient=False) == model._cast_bytes(ops["mlp_out"], gradient=False) == 5
    assert model._cast_bytes(ops["out_proj"], gradient=True) == model._cast_bytes(ops["mlp_out"], gradient=True) == 2.5
    assert model._cast_bytes(ops["qk_proj"], gradient=True) == model._cast_bytes(ops["mlp_in"], gradient=True) == 5


def test_eager_linears_cast_their_input_each():
    # without torch.compile nothing merges the casts: qk_proj and v_proj each pay the whole input's
    model, ops = _gemms(1, compiled=False)
    assert model._cast_bytes(ops["qk_proj"], gradient=False) == model._cast_bytes(ops["v_proj"], gradient=False) == 5
