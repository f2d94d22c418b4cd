"""A memory-bound kernel's fixed GPU time (`DeviceProfile.elementwise_kernel_us`): derived by hand from NVIDIA's
cuDNN RMSNorm benchmark, and priced once per kernel Megatron runs for a memory-bound op."""

from __future__ import annotations

import statistics

import pytest
from small_models import ROUND_DEVICE

from ppb_core.config.devices import (
    DEVICE_CATALOG,
    ELEMENTWISE_KERNEL_US_B200,
    ELEMENTWISE_KERNEL_US_B300,
    ELEMENTWISE_KERNEL_US_HOPPER,
)
from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel


def _forward_bytes(rows: int, width: int) -> int:
    """RMSNorm forward bytes as NVIDIA/cudnn-frontend benchmark/norms/benchmark_single_norm.py
    `compute_bandwidth_bytes` counts them (3929da2): read x and the weight, write y (bf16) and the fp32 rstd."""
    return (rows * width + width) * 2 + rows * width * 2 + rows * 4


# fwd_gbps of the cuDNN and torch.compile forwards at bf16 8192 x 128 and 16384 x 128, transcribed from
# benchmark/norms/results/{h200,gb200,gb300}/all_models_*.csv at 3929da2 (rows deepseek-v3-8192x128 and
# qwen3-30b-16384x128), with the HBM rate ppb's catalog states for the part (H200 4,800 GB/s, GB200 and
# GB300 7,672).
MEASURED_GBPS = {
    "h200": (
        4800.0,
        {(8192, "cudnn"): 1435.9, (8192, "compile"): 1738.2, (16384, "cudnn"): 1957.0, (16384, "compile"): 2446.3},
    ),
    "gb200": (
        7672.0,
        {(8192, "cudnn"): 1234.6, (8192, "compile"): 1672.2, (16384, "cudnn"): 1860.6, (16384, "compile"): 2565.0},
    ),
    "gb300": (
        7672.0,
        {(8192, "cudnn"): 1223.2, (8192, "compile"): 1672.2, (16384, "cudnn"): 1873.8, (16384, "compile"): 2642.0},
    ),
}


def test_the_fixed_times_are_the_cudnn_benchmark_s_small_norms_beyond_their_bytes():
    # 8192 x 128: (1,048,576 + 128)·2 + 1,048,576·2 + 8192·4 = 4,227,328 B; 16384 x 128: 8,454,400 B.
    assert _forward_bytes(8192, 128) == 4_227_328
    assert _forward_bytes(16384, 128) == 8_454_400
    # GB200's cuDNN at 8192 x 128: 4,227,328 B / 1234.6 GB/s = 3.424 us; at 0.8 of 7,672 GB/s 0.689 us:
    # 2.735 us beyond. Its four (2.735, 1.839, 3.166, 1.919) have the median (1.919 + 2.735) / 2 = 2.33;
    # H200's (1.843, 1.331, 2.118, 1.254) (1.331 + 1.843) / 2 = 1.59; GB300's (2.767, 1.839, 3.134, 1.823) 2.30.
    medians = {}
    for part, (hbm_gbs, rates) in MEASURED_GBPS.items():
        beyond = []
        for (rows, _), gbps in rates.items():
            moved = _forward_bytes(rows, 128)
            beyond.append(moved / gbps * 1e-3 - moved / (0.8 * hbm_gbs) * 1e-3)  # us
        medians[part] = statistics.median(beyond)
    assert medians["gb200"] == pytest.approx(2.33, abs=0.01)
    assert medians["h200"] == pytest.approx(1.59, abs=0.01)
    assert medians["gb300"] == pytest.approx(2.30, abs=0.01)
    assert ELEMENTWISE_KERNEL_US_B200 == round(medians["gb200"], 1) == 2.3
    assert ELEMENTWISE_KERNEL_US_HOPPER == round(medians["h200"], 1) == 1.6
    assert ELEMENTWISE_KERNEL_US_B300 == round(medians["gb300"], 1) == 2.3


def test_each_part_takes_its_die_s_measurement():
    # H100 and H800 take H200's (GH100), B200 GB200's (sm_100), B300 GB300's (sm_103); A100 none
    expected = {
        "h100-80gb": 1.6,
        "h200": 1.6,
        "h800": 1.6,
        "b200": 2.3,
        "gb200": 2.3,
        "b300": 2.3,
        "gb300": 2.3,
        "a100-80gb": 0.0,
    }
    for name, us in expected.items():
        assert DEVICE_CATALOG[name].elementwise_kernel_us == us, name
        assert Kernels.from_device(DEVICE_CATALOG[name]).elementwise_kernel_s == pytest.approx(us * 1e-6)


def test_the_rule_carries_the_benchmark_s_mid_sized_norm():
    # A held-out shape of the same GB200 file: cuDNN's forward at 2048 x 4096, 33,570,816 B, measured at
    # 3773.7 GB/s (0.49 of 7,672). 0.8 of HBM alone: 33,570,816 / 6137.6 GB/s = 5.470 us, 0.80; with the
    # fixed 2.3 us, 7.770 us: 4.321 TB/s, 0.563 of HBM, nearer the measured 0.49 than 0.8 is.
    moved = _forward_bytes(2048, 4096)
    assert moved == 33_570_816
    gb200 = Kernels.from_device(DEVICE_CATALOG["gb200"])
    priced_us = moved / gb200.hbm_bytes_per_s * 1e6 + gb200.elementwise_kernel_s * 1e6
    assert priced_us == pytest.approx(7.770, abs=0.002)
    measured_us = moved / 3773.7e9 * 1e6
    assert abs(priced_us - measured_us) < abs(moved / gb200.hbm_bytes_per_s * 1e6 - measured_us)


SPEC = {
    "vocab_size": 4096,
    "hidden_size": 1024,
    "num_layers": 1,
    "num_attention_heads": 8,
    "intermediate_size": 4096,
    "activation": "swiglu",
}


def _prices(kernel_us: float, framework: str = "megatron", accumulation_fusion: bool = True):
    run = parse_run_config(
        {
            "name": "fixed",
            "framework": framework,
            "models": [{"name": "dense", "spec": SPEC}],
            "parallel": {},
            "training": {"seq_length": 4096},
            "timing": {"gradient_accumulation_fusion": accumulation_fusion},
            "device": dict(ROUND_DEVICE, elementwise_kernel_us=kernel_us),
        }
    )
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    return TimeModel(run).op_prices(layer)


def test_megatron_pays_the_fixed_time_once_per_kernel_of_a_memory_bound_op():
    # ROUND_DEVICE with a 10 us fixed time against none. Megatron's TE RMSNorm (launches.py `NORM`): one kernel
    # forward; backward its kernel, the finalize kernel summing the weight gradient's partials and DDP's
    # main-gradient add: 3, so +10 us forward and +30 us backward. The fused SwiGLU and the residual add: one
    # kernel each way, +10 us each. A GEMM keeps its own fixed time (`gemm_kernel_us`), not this one.
    with_fixed, without = _prices(10.0), _prices(0.0)
    for name in ("norm1", "norm2"):
        assert with_fixed[name].forward_ms - without[name].forward_ms == pytest.approx(0.010)
        assert with_fixed[name].backward_ms - without[name].backward_ms == pytest.approx(0.030)
    for name in ("mlp_act", "residual_attention", "residual_mlp"):
        assert with_fixed[name].forward_ms - without[name].forward_ms == pytest.approx(0.010)
        assert with_fixed[name].backward_ms - without[name].backward_ms == pytest.approx(0.010)
    # fused rotary (TE's `fused_apply_rotary_pos_emb`): Q's and K's kernels each way, +20 us
    assert with_fixed["rope"].forward_ms - without["rope"].forward_ms == pytest.approx(0.020)
    for name in ("qk_proj", "mlp_in", "mlp_out"):
        assert with_fixed[name].forward_ms == pytest.approx(without[name].forward_ms)
        assert with_fixed[name].backward_ms == pytest.approx(without[name].backward_ms)


def test_frameworks_whose_kernels_ppb_does_not_count_pay_none():
    # torchtitan's eager or compiled element-wise kernels are not counted kernel by kernel: no fixed time
    assert _prices(10.0, "torchtitan") == _prices(0.0, "torchtitan")


def test_without_accumulation_fusion_each_weight_s_main_gradient_add_pays_it():
    # --no-gradient-accumulation-fusion: DDP's hook adds each weight's 16-bit gradient into its main gradient
    # (`param.main_grad.add_`, distributed_data_parallel.py `_make_backward_post_hook`), one kernel a weight in
    # the backward: fc1 and fc2 +10 us each; the fused QKV GEMM's one add split over its parts by width
    # (`Op.gemm`'s fused n), so qk_proj and v_proj +10 us together. The forwards keep their GEMM times.
    with_fixed, without = _prices(10.0, accumulation_fusion=False), _prices(0.0, accumulation_fusion=False)
    for name in ("mlp_in", "mlp_out", "out_proj"):
        assert with_fixed[name].backward_ms - without[name].backward_ms == pytest.approx(0.010)
        assert with_fixed[name].forward_ms == pytest.approx(without[name].forward_ms)
    qkv = sum(with_fixed[name].backward_ms - without[name].backward_ms for name in ("qk_proj", "v_proj"))
    assert qkv == pytest.approx(0.010)
