"""The A100 SXM's GEMMs in a step, against the one public loop of a large GEMM on random data (Horace He, 2024)."""

import pytest

from ppb_core.config.devices import DEVICE_CATALOG, LAYER_GEMM_SHARE_A100
from ppb_core.config.run import parse_run_config
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel
from tests.test_timing_pricer import gelu_run

N = 8192


def test_ppb_s_tiles_price_8192_cubed_by_hand():
    # A100: 312 TFLOPS, MAMF 0.869, 108 SMs, HBM 2039 GB/s at 0.8, Ampere's epilogue after the main loop.
    # 256x128 tiles: 32 x 64 = 2048 tiles, ceil(2048 / 108) = 19 waves; a tile 2·256·128·8192 FLOP =
    # 536,870,912 at 312e12 · 0.869 / 108 = 2.5104e12 FLOP/s a SM (its intensity 256·128/384 = 85.3 >= 64:
    # full rate): 0.213858 ms, x 19 = 4.063 ms; the epilogue stores 2048 · 256 · 128 · 2 B = 134.2 MB at
    # 1631.2 GB/s: 0.0823 ms. 4.1456 ms: 2 · 8192^3 / 4.1456e-3 = 265.2 TFLOP/s.
    per_sm = 312e12 * 0.869 / 108
    tile = 2 * 256 * 128 * N / per_sm
    epilogue = 2048 * 256 * 128 * 2 / (2039e9 * 0.8)
    by_hand = 19 * tile + epilogue
    assert by_hand == pytest.approx(4.1456e-3, rel=1e-4)
    kernels = Kernels.from_device(DEVICE_CATALOG["a100-80gb"], "bf16")
    assert kernels.gemm_compute_s(N, N, N, 1, 2) == pytest.approx(by_hand, rel=1e-6)
    assert 2 * N**3 / by_hand / 1e12 == pytest.approx(265.2, abs=0.05)


def test_the_share_is_the_measured_loop_over_the_tiles_at_mamf():
    # thonking.ai (Horace He): cuBLAS 258, CUTLASS bound into the same script 257, randn inputs 257 TFLOP/s
    # at 8192^3 on an A100 (zeros 295): 257 / 265.2 = 0.9691
    tiles_tflops = 2 * N**3 / (19 * 2 * 256 * 128 * N / (312e12 * 0.869 / 108) + 2048 * 256 * 128 * 2 / 1631.2e9) / 1e12
    assert round(257.0 / tiles_tflops, 3) == 0.969
    assert LAYER_GEMM_SHARE_A100 == 0.969


def test_a_training_step_on_a100_prices_its_gemms_at_the_share():
    raw = gelu_run(device={"name": "a100-80gb"}).model_dump(mode="json", exclude_none=True)
    assert TimeModel(parse_run_config(raw)).kernels.gemm_ceiling == pytest.approx(0.869 * 0.969, rel=1e-12)
    # the single-kernel model keeps MAMF; a run config may set the share (the catalog's figures are defaults)
    assert Kernels.from_device(DEVICE_CATALOG["a100-80gb"], "bf16").gemm_ceiling == pytest.approx(0.869)
    raw = gelu_run(device={"name": "a100-80gb", "layer_gemm_share": 1.0}).model_dump(mode="json", exclude_none=True)
    assert TimeModel(parse_run_config(raw)).kernels.gemm_ceiling == pytest.approx(0.869)
