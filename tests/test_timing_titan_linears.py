"""torchtitan's separate linears priced as its model code launches them, by hand: wq, wk, wv and w1, w3 are
`nn.Linear`s of their own (torchtitan/models/llama/model.py at 9dec370, `Attention` and `FeedForward`), each
its own GEMM forward, input gradient and weight gradient at its own width (ppb_core.timing.flops
`_separate_linears`, ppb_core.timing.pricer `TimeModel._gemm_pass_s`); Megatron's linear_qkv and
linear_fc1 stay one fused GEMM each part pays its share of."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.flops import op_policy_rerun
from ppb_core.timing.pricer import TimeModel

# ROUND_DEVICE: 100 TFLOP/s at matmul_efficiency 0.5 over 64 SMs, 0.78125 TFLOP/s an SM for a tile of
# intensity tm·tn/(tm + tn) >= 64 (128×128, 256×128), 2/3 of it for 128×64 (42.7/64); no kernel time.
SM_FLOPS = 100e12 * 0.5 / 64


def _model(framework: str, tp: int = 1, device: dict | None = None, timing: dict | None = None) -> TimeModel:
    titan = framework == "torchtitan"
    raw = {
        "framework": framework,
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, "tp": tp, "sequence_parallel": tp > 1, **({"zero": 3, "fsdp": True} if titan else {})},
        "training": {"seq_length": 2048, "micro_batch_size": 1},
        "device": device or ROUND_DEVICE,
        "timing": {**({"torch_compile": True} if titan else {}), **(timing or {})},
    }
    return TimeModel(parse_run_config(raw))


def _gemms(model: TimeModel) -> tuple[object, dict]:
    body = next(layer for layer in walk(model.run) if layer.node == "BODY")
    return body, {op.name: op for op in model.ops(body) if op.gemm is not None and op.weight_elements}


def test_torchtitan_s_ops_hold_their_linears_widths():
    # SMALL_GQA: h 1024, 16 heads of 64, 4 KV heads: wq 1024, wk and wv 256 columns; w1 and w3 2816 each
    _, ops = _gemms(_model("torchtitan"))
    assert ops["qk_proj"].linears == (1024, 256)
    assert ops["v_proj"].linears == (256,)
    assert ops["mlp_in"].linears == (2816, 2816)
    assert ops["out_proj"].linears == ops["mlp_out"].linears == ()
    # under TP 2 each is its own ColwiseParallel: 8 heads (512), 2 KV heads (128), 1408 of the MLP
    _, ops = _gemms(_model("torchtitan", tp=2))
    assert ops["qk_proj"].linears == (512, 128)
    assert ops["v_proj"].linears == (128,)
    assert ops["mlp_in"].linears == (1408, 1408)
    _, ops = _gemms(_model("megatron"))
    assert all(op.linears == () for op in ops.values())


def test_separate_forward_gemms_by_hand():
    # m 2048 rows, k 1024. wq (n 1024): 128×128 tiles, 16·8 = 128 on 64 SMs, 2 waves of
    # 2·128·128·1024/SM_FLOPS = 42.95 us: 85.90 us. wk (n 256): 128×128 gives 32 tiles, one wave at 42.95 us;
    # 128×64 gives 64 tiles, one wave of 2·128·64·1024/(2/3·SM_FLOPS) = 32.21 us (split-K adds its fp32
    # partials: 128×128 split 2, 21.47 + 2·2·2048·256·4 B/500 GB/s = 38.25 us): 32.21 us, 2/3 of wq's rate.
    wave = 2 * 128 * 128 * 1024 / SM_FLOPS
    narrow = 2 * 128 * 64 * 1024 / (SM_FLOPS * 2 / 3)
    model = _model("torchtitan")
    _, ops = _gemms(model)
    assert model._phase_s(ops["qk_proj"], "forward") == pytest.approx(2 * wave + narrow, rel=1e-9)
    assert model._phase_s(ops["v_proj"], "forward") == pytest.approx(narrow, rel=1e-9)
    # Megatron's one QKV GEMM of 1536 columns: 16·12 = 192 tiles, 3 full waves (128.85 us), split by columns
    megatron = _model("megatron")
    _, fused = _gemms(megatron)
    assert megatron._phase_s(fused["qk_proj"], "forward") == pytest.approx(3 * wave * 1280 / 1536, rel=1e-9)
    assert megatron._phase_s(fused["v_proj"], "forward") == pytest.approx(3 * wave * 256 / 1536, rel=1e-9)
    # w1 and w3 (n 2816 each): 16·22 = 352 128×128 tiles, 6 waves (5.5 rounded up) each: 12 waves; one
    # fused gate+up GEMM of 5632: 704 tiles, 11 full waves
    assert model._phase_s(ops["mlp_in"], "forward") == pytest.approx(12 * wave, rel=1e-9)
    assert megatron._phase_s(fused["mlp_in"], "forward") == pytest.approx(11 * wave, rel=1e-9)


def test_separate_backward_gemms_by_hand():
    # input gradients (2048 × 1024 out, inner = the linear's width): wq 2 waves of 128×128 at inner 1024
    # (85.90 us), wk 2 waves at inner 256 (2 · 10.74 us). Weight gradients (width × 1024 out, inner 2048):
    # wq 64 tiles, one wave of 2·128·128·2048/SM_FLOPS = 85.90 us; wk's 256 × 1024 best as 128×128
    # split-K 4 (32·4 = 64 slices, one wave of 2·128·128·512/SM_FLOPS = 21.47 us, plus its fp32 partials
    # 2·4·256·1024·4 B at 500 GB/s = 16.78 us). Each pass beside: autograd's sum of the two input
    # gradients under compile, one more read of 2048·1024 bf16 (4,194,304 B at 500 GB/s = 8.39 us) with
    # the weight gradient.
    wave = 2 * 128 * 128 * 1024 / SM_FLOPS
    summed = 2048 * 1024 * 2 / 500e9
    model = _model("torchtitan")
    _, ops = _gemms(model)
    wk_wgrad = 2 * 128 * 128 * 512 / SM_FLOPS + 2 * 4 * 256 * 1024 * 4 / 500e9
    assert model._phase_s(ops["qk_proj"], "dgrad") == pytest.approx(2 * wave + 2 * wave / 4, rel=1e-9)
    assert model._phase_s(ops["qk_proj"], "wgrad") == pytest.approx(2 * wave + wk_wgrad + summed, rel=1e-9)
    assert model._phase_s(ops["v_proj"], "wgrad") == pytest.approx(wk_wgrad + summed, rel=1e-9)


def test_the_op_policy_reruns_wk_and_w3_at_their_own_widths():
    # torchtitan's per-op SAC saves every second mm in forward order (wq, wv, w1, w2): the rerun holds
    # wk of qk_proj (256 of 1280 columns) and w3 of mlp_in (2816 of 5632), each its own GEMM
    model = _model("torchtitan")
    body, _ = _gemms(model)
    rerun = {op.name: op for op in op_policy_rerun(model.ops(body), body.kind, model._geometry)}
    assert rerun["qk_proj"].linears == (256,)
    assert rerun["mlp_in"].linears == (2816,)
    assert "v_proj" not in rerun
    narrow = 2 * 128 * 64 * 1024 / (SM_FLOPS * 2 / 3)
    assert model._phase_s(rerun["qk_proj"], "forward") == pytest.approx(narrow, rel=1e-9)


def test_each_separate_linear_reads_the_whole_input_at_its_hbm_floor():
    # ROUND_DEVICE at 100 GB/s of HBM (50 GB/s at memory_efficiency 0.5): each linear reads the 2048 × 1024
    # bf16 input and its weight and writes its output. wq: (2048·1024 + 1024·1024 + 2048·1024)·2 =
    # 10,485,760 B, 209.72 us (its tiles 85.90 us); wk and wv: (2048·1024 + 1024·256 + 2048·256)·2 =
    # 5,767,168 B, 115.34 us (tiles 32.21 us). Megatron's qk_proj, its 1280 of the fused GEMM: one read of
    # the input, (2048·1024 + 1024·1280 + 2048·1280)·2 = 12,058,624 B, 241.17 us.
    slow = {**ROUND_DEVICE, "hbm_bandwidth_gbs": 100.0}
    model = _model("torchtitan", device=slow)
    _, ops = _gemms(model)
    wq, wk = 10_485_760 / 50e9, 5_767_168 / 50e9
    assert model._phase_s(ops["qk_proj"], "forward") == pytest.approx(wq + wk, rel=1e-9)
    assert model._phase_s(ops["v_proj"], "forward") == pytest.approx(wk, rel=1e-9)
    megatron = _model("megatron", device=slow)
    _, fused = _gemms(megatron)
    assert megatron._phase_s(fused["qk_proj"], "forward") == pytest.approx(12_058_624 / 50e9, rel=1e-9)


def test_float8_linears_read_their_operands_at_a_byte():
    # torchao's Float8Linear casts the input and the weight before `torch._scaled_mm` (the casts priced
    # apart, `_titan_cast_bytes`): the GEMM reads fp8 operands and writes bf16. At 50 GB/s: wq
    # (2048·1024 + 1024·1024)·1 + 2048·1024·2 = 7,340,032 B; wk 2304·1024·1 + 2048·256·2 = 3,407,872 B.
    slow = {**ROUND_DEVICE, "hbm_bandwidth_gbs": 100.0}
    model = _model("torchtitan", device=slow, timing={"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"})
    _, ops = _gemms(model)
    qk = ops["qk_proj"]
    seconds = model._gemm_pass_s(qk, model._gemm_kernels(qk), "forward", 2048, 1, 2)
    assert seconds == pytest.approx((7_340_032 + 3_407_872) / 50e9, rel=1e-9)
