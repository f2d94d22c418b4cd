"""TransformerEngine's FP8 quantize kernels on Blackwell at the HBM share TE's GEMM profiling guide implies."""

from __future__ import annotations

import pytest
from test_timing_pricer import body, gelu_run

from ppb_core.config.devices import (
    DEVICE_CATALOG,
    FP8_QUANTIZE_SHARE_BLACKWELL,
    MXFP8_QUANTIZE_SHARE_BLACKWELL,
)
from ppb_core.config.run import parse_run_config
from ppb_core.timing.pricer import TimeModel

# The guide's layer (gemm_profiling.rst at 1609c890e, B300): M = 31 x 512 = 15,872 tokens, hidden 4096, FFN
# 16,384, QKV 12,288 columns; each of its 12 shapes (M, K, N) timed as a te.Linear forward.
M, H, I, QKV = 15872, 4096, 16384, 12288


def test_the_guide_s_shapes_quantize_these_elements():
    # fprop (M, K, N): QKV (M, H, QKV), proj (M, H, H), up (M, H, I), down (M, I, H); dgrad (M, N, K) of each;
    # wgrad (K, M, N) of each. Inputs M·K: fprop 15872·(3·4096 + 16384) = 15872·28672 = 455,081,984; dgrad
    # 15872·(12288 + 4096 + 16384 + 4096) = 15872·36864 = 585,105,408; wgrad (4096·3 + 16384)·15872 = 455,081,984:
    # 1,495,269,376. Weights N·K: fprop 4096·(12288 + 4096 + 16384 + 16384) = 201,326,592, dgrad the same,
    # wgrad 15872·36864 = 585,105,408: 987,758,592.
    fprop = [(M, H, QKV), (M, H, H), (M, H, I), (M, I, H)]
    dgrad = [(m, n, k) for m, k, n in fprop]
    wgrad = [(k, m, n) for m, k, n in fprop]
    shapes = fprop + dgrad + wgrad
    assert sum(m * k for m, k, _ in shapes) == 1_495_269_376
    assert sum(n * k for _, k, n in shapes) == 987_758_592


def test_the_quantize_shares_follow_the_guide_s_autocast_minus_pre_quantized_times():
    # MXFP8: 8.984 ms a layer in autocast, 7.161 pre-quantized: 1.823 ms of quantization. ppb's cast bytes: 4 an
    # input element (read 2, a row-wise and a column-wise byte), 3 a weight element (row-wise only):
    # 1,495,269,376·4 + 987,758,592·3 = 5,981,077,504 + 2,963,275,776 = 8,944,353,280 B; / 1.823e-3 s =
    # 4.9064e12 B/s; / 7672e9 = 0.6395 -> 0.640.
    assert round(8_944_353_280 / 1.823e-3 / 7672e9, 3) == MXFP8_QUANTIZE_SHARE_BLACKWELL == 0.640
    # Current scaling: 9.147 against 6.812: 2.335 ms; 5 bytes an element either way (amax read 2, cast read 2 and
    # write 1): 2,483,027,968·5 = 12,415,139,840 B; / 2.335e-3 = 5.3170e12; / 7672e9 = 0.6930 -> 0.693.
    assert round(12_415_139_840 / 2.335e-3 / 7672e9, 3) == FP8_QUANTIZE_SHARE_BLACKWELL == 0.693
    for name in ("b200", "gb200", "b300", "gb300"):
        assert DEVICE_CATALOG[name].mxfp8_quantize_efficiency == MXFP8_QUANTIZE_SHARE_BLACKWELL
        assert DEVICE_CATALOG[name].fp8_quantize_efficiency == FP8_QUANTIZE_SHARE_BLACKWELL
    assert DEVICE_CATALOG["h100-80gb"].mxfp8_quantize_efficiency == 0.0


def _forward_ms(recipe: str, op: str, framework: str = "megatron", **device) -> float:
    raw = gelu_run(device={"name": "b300", **device}, framework=framework).model_dump(mode="json", exclude_none=True)
    if framework == "torchtitan":  # FSDP2 (its default), not the dumped ZeRO-1
        raw["parallel"].pop("zero")
    run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe}})
    return TimeModel(run).op_prices(body(run))[op].forward_ms


def test_te_s_casts_run_at_the_quantize_share_on_blackwell():
    # mlp_out's input, 2048 x 4096 after the activation, quantized in its forward: MXFP8 4 bytes an element,
    # 33,554,432 B. On the B300 (HBM 7672 GB/s) at 0.640 instead of the element-wise 0.8:
    # 33,554,432 / (7672e9·0.640) − 33,554,432 / (7672e9·0.8) = 6.8339 us − 5.4671 us = 1.3668 us more.
    elements = 2048 * 4096
    slower_ms = (4 * elements / (7672e9 * 0.640) - 4 * elements / (7672e9 * 0.8)) * 1e3
    assert slower_ms == pytest.approx(1.3668e-3, rel=1e-3)
    unmeasured = _forward_ms("mxfp8", "mlp_out", mxfp8_quantize_efficiency=0.0)
    assert _forward_ms("mxfp8", "mlp_out") - unmeasured == pytest.approx(slower_ms, rel=1e-9)
    # Current scaling, 5 bytes (no transpose on Blackwell) at 0.693
    slower_ms = (5 * elements / (7672e9 * 0.693) - 5 * elements / (7672e9 * 0.8)) * 1e3
    unmeasured = _forward_ms("tensorwise", "mlp_out", fp8_quantize_efficiency=0.0)
    assert _forward_ms("tensorwise", "mlp_out") - unmeasured == pytest.approx(slower_ms, rel=1e-9)


def test_delayed_scaling_and_torchtitan_keep_the_element_wise_rate():
    # Delayed scaling: the guide's autocast row runs it in autocast both ways, so no quantize time is measured.
    assert _forward_ms("delayed", "mlp_out") == pytest.approx(
        _forward_ms("delayed", "mlp_out", fp8_quantize_efficiency=0.0, mxfp8_quantize_efficiency=0.0), rel=1e-12
    )
    # torchtitan quantizes with torchao's casts (eager or compiled), not TE's kernels.
    titan = _forward_ms("tensorwise", "mlp_out", framework="torchtitan")
    assert titan == pytest.approx(
        _forward_ms("tensorwise", "mlp_out", framework="torchtitan", fp8_quantize_efficiency=0.0), rel=1e-12
    )
