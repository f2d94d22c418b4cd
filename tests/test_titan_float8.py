"""torchtitan's Float8 casts by hand (torchao at eab345c, torchtitan 9dec370's pin): each linear input cast
once (compiled, the linears reading one tensor share it; under Float8 TP `PrepareFloat8ModuleInput` casts
the module's input on the sequence shard before the all-gather), output gradients cast, and the weight
gradient's operand copies (ppb_core.timing.pricer `TimeModel._titan_cast_bytes`); under Float8 TP the scalar
all-reduce of each DTensor cast's amax (ppb_core.timing.flops `_titan_amax_reductions`)."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.flops import op_policy_rerun
from ppb_core.timing.pricer import TimeModel


def _model(tp: int, compiled: bool = True, timing: dict | None = None, device: dict | None = None) -> TimeModel:
    raw = {
        "framework": "torchtitan",
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, "zero": 3, "fsdp": True, "tp": tp, "sequence_parallel": tp > 1},
        "training": {"seq_length": 2048, "micro_batch_size": 1},
        "device": device or ROUND_DEVICE,
        "timing": {"torch_compile": compiled, "matmul_dtype": "fp8", "fp8_recipe": "tensorwise", **(timing or {})},
    }
    return TimeModel(parse_run_config(raw))


def _body(model: TimeModel):
    return next(layer for layer in walk(model.run) if layer.node == "BODY")


def _gemms(tp: int, compiled: bool = True):
    model = _model(tp, compiled)
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
    # without torch.compile nothing merges the casts: each of wq, wk, wv (and w1, w3) casts the whole input,
    # `Float8Linear.forward` a module each: qk_proj holds wq and wk (two casts), v_proj wv (one)
    model, ops = _gemms(1, compiled=False)
    assert model._cast_bytes(ops["qk_proj"], gradient=False) == model._cast_bytes(ops["mlp_in"], gradient=False) == 10
    assert model._cast_bytes(ops["v_proj"], gradient=False) == 5


def test_float8_tp_all_reduces_each_cast_s_amax_by_hand():
    # TP 2 in a node, 5 us a ring step, 100 GB/s at comm_efficiency 0.5: 50 GB/s. An all-reduce of P bytes
    # in c calls: 2·P·(2−1)/2 / 50e9 + 2·(2−1) steps · 5 us · c; each call a 4-byte scalar (P = 4c).
    # Attention: the shard's cast before the all-gather, wo's input on Shard(-1), the weights of wq, wk, wv
    # and wo (four DTensors): 6 in the forward; the output gradients of wq, wk, wv and wo: 4 in the backward.
    # The gated MLP: input, w2's input, w1, w3, w2: 5; gradients of w1, w3, w2: 3.
    def seconds(calls: int) -> float:
        return 2 * 4 * calls * 0.5 / 50e9 + 2 * 5e-6 * calls

    device = {**ROUND_DEVICE, "collective_latency_us": 5.0}
    model = _model(2, device=device)
    prices = model.op_prices(_body(model))
    for name, forward, backward in (("amax_attention", 6, 4), ("amax_mlp", 5, 3)):
        assert prices[name].forward_ms == pytest.approx(seconds(forward) * 1e3, rel=1e-9)
        assert prices[name].backward_ms == pytest.approx(seconds(backward) * 1e3, rel=1e-9)
        assert prices[name].recompute_ms == prices[name].forward_ms  # a rerun forward all-reduces again
    # FSDP's Float8 all-gather hands the linears float8 weights: no weight casts, 2 forward calls a region
    gathered = _model(2, timing={"fp8_fsdp_all_gather": True}, device=device)
    prices = gathered.op_prices(_body(gathered))
    assert prices["amax_attention"].forward_ms == prices["amax_mlp"].forward_ms == pytest.approx(seconds(2) * 1e3)
    assert prices["amax_attention"].backward_ms == pytest.approx(seconds(4) * 1e3)
    # no TP: the amax of a plain tensor needs no collective
    plain = _model(1, device=device)
    assert not any(op.name.startswith("amax_") for op in plain.ops(_body(plain)))


def test_float8_tp_amax_all_reduces_rerun_under_the_per_op_policy():
    # torchtitan's save list holds aten.max, not the all-reduce after it: the per-op policy reruns them
    model = _model(2)
    body = _body(model)
    rerun = {op.name for op in op_policy_rerun(model.ops(body), body.kind, model._geometry)}
    assert {"amax_attention", "amax_mlp"} <= rerun
