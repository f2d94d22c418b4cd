"""The share of HBM bandwidth PyTorch's eager element-wise kernels reach, recomputed by hand from Liger-Kernel's
published benchmark rows (linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv at ead96b6, column
y_value_50, the median of triton.testing.do_bench in ms), and how ppb prices an eager op with it."""

from __future__ import annotations

import dataclasses

import pytest

from ppb_core.config.devices import (
    DEVICE_CATALOG,
    EAGER_MEMORY_EFFICIENCY_A100,
    EAGER_MEMORY_EFFICIENCY_H100,
)
from ppb_core.timing.flops import softmax_row_rereads
from ppb_core.timing.kernels import EAGER_TRAFFIC, STRIDED_EAGER_SHARE, Kernels

# Bytes an element, op by op (aten ops under autograd's formulas; reads + writes of the full tensors):
# - Llama RMSNorm of benchmark_rms_norm.py at b5672a15 (x bf16, weight an fp32 nn.Parameter, so the output
#   and the benchmark's bf16 dy, cast to the output's fp32 by autograd, are fp32). Forward: x.to(fp32) 2+4,
#   pow 4+4, mean 4, h·rsqrt 4+4, .to(bf16) 4+2, weight·that 2+4 = 38. Backward: dy to fp32 2+4; dy·w 4+4,
#   its cast to bf16 4+2; dy·n 4+2+4 and its row sum 4 (the weight's gradient); the bf16→fp32 cast's
#   gradient back 2+4; g·rsqrt 4+4; g·h 4+4+4 and its row sum 4; mean's expand / H 4; pow's h.pow(1) 4+4,
#   ·2 4+4, ·grad 4+4+4; the two gradients of h summed 4+4+4; to bf16 4+2 = 114.
RMSNORM_FORWARD, RMSNORM_BACKWARD = 38, 114
# - relu² of benchmark_relu_squared.py at 39a1f454 (bf16): relu 2+2, square 2+2 = 8; backward r.pow(1)
#   2+2, ·2 2+2, ·grad 2+2+2, threshold_backward 2+2+2 = 20.
RELU2_FORWARD, RELU2_BACKWARD = 8, 20
# - add + RMSNorm of benchmark_fused_add_rms_norm.py at 1fdb668d (fp32; the .to casts are no-ops): x+r 12,
#   pow 8, mean 4, h·rsqrt 8, weight·that 8 = 40. Backward (both outputs' gradients): dy·w 8, dy·n 12 and
#   sum 4, g·rsqrt 8, g·h 12 and sum 4, expand / H 4, pow's 8 + 8 + 12, the three gradients of h summed
#   12 + 12, x's and r's gradient (one tensor, a copy for the second) 8 = 112.
ADD_RMSNORM_FORWARD, ADD_RMSNORM_BACKWARD = 40, 112

A100_BYTES_PER_S = 2039e9  # A100-SXM4-80GB datasheet
H100_BYTES_PER_S = 3350e9  # H100 SXM5 datasheet

# (bytes an element, elements, ms), transcribed from the CSV (row numbers at ead96b6)
A100_ROWS = [
    (RMSNORM_FORWARD, 2048 * 8192, 0.5190399885177612),  # row 293, huggingface forward, H 8192
    (RMSNORM_FORWARD, 2048 * 16384, 0.9856320023536682),  # row 294
    (RMSNORM_FORWARD, 2048 * 32768, 1.9190720319747925),  # row 295
    (RMSNORM_BACKWARD, 2048 * 8192, 1.3515520095825195),  # row 317, huggingface backward
    (RMSNORM_BACKWARD, 2048 * 16384, 2.569632053375244),  # row 318
    (RMSNORM_BACKWARD, 2048 * 32768, 5.0147199630737305),  # row 319
]
H100_ROWS = [
    (RELU2_FORWARD, 4096 * 8192, 0.0979200005531311),  # row 1900, torch forward, N 8192
    (RELU2_FORWARD, 4096 * 16384, 0.1855359971523285),  # row 1901
    (RELU2_BACKWARD, 4096 * 8192, 0.23548799753189087),  # row 1932
    (RELU2_BACKWARD, 4096 * 16384, 0.4526720046997070),  # row 1933
    (ADD_RMSNORM_FORWARD, 2048 * 8192, 0.2711359858512878),  # row 1959, huggingface forward, H 8192
    (ADD_RMSNORM_FORWARD, 2048 * 16384, 0.509184002876281),  # row 1960
    (ADD_RMSNORM_FORWARD, 2048 * 32768, 0.982847988605499),  # row 1961
    (ADD_RMSNORM_BACKWARD, 2048 * 8192, 0.720736026763916),  # row 1995
    (ADD_RMSNORM_BACKWARD, 2048 * 16384, 1.36684799194335),  # row 1996
    (ADD_RMSNORM_BACKWARD, 2048 * 32768, 2.65427207946777),  # row 1997
]


def _mean_share(rows: list[tuple[int, int, float]], peak: float) -> float:
    return sum(b * n / (ms * 1e-3) / peak for b, n, ms in rows) / len(rows)


def test_a100_eager_share_is_the_mean_of_the_rmsnorm_rows():
    # e.g. row 295: 38 · 2048 · 32768 = 2.550 GB in 1.919 ms = 1.329 TB/s, 0.652 of 2.039
    share = RMSNORM_FORWARD * 2048 * 32768 / 1.9190720319747925e-3 / A100_BYTES_PER_S
    assert share == pytest.approx(0.6517, abs=1e-4)
    # the six: 0.602 0.635 0.652 / 0.694 0.730 0.748, mean 0.677
    assert _mean_share(A100_ROWS, A100_BYTES_PER_S) == pytest.approx(EAGER_MEMORY_EFFICIENCY_A100, abs=0.005)


def test_h100_eager_share_is_the_mean_of_the_relu2_and_add_rmsnorm_rows():
    # relu² 0.818 0.864 / 0.851 0.885; add + RMSNorm 0.739 0.787 0.815 / 0.778 0.821 0.845: mean 0.820
    assert _mean_share(H100_ROWS, H100_BYTES_PER_S) == pytest.approx(EAGER_MEMORY_EFFICIENCY_H100, abs=0.005)


def test_the_catalog_carries_the_measured_shares_and_falls_back_elsewhere():
    assert DEVICE_CATALOG["a100-80gb"].eager_memory_efficiency == EAGER_MEMORY_EFFICIENCY_A100
    assert DEVICE_CATALOG["h100-80gb"].eager_memory_efficiency == EAGER_MEMORY_EFFICIENCY_H100
    assert DEVICE_CATALOG["h800"].eager_memory_efficiency == EAGER_MEMORY_EFFICIENCY_H100
    assert DEVICE_CATALOG["b200"].eager_memory_efficiency == 0.0  # unmeasured: memory_efficiency


@pytest.mark.parametrize(
    ("framework", "compiled", "fused_norm", "norm_share"),
    [
        ("torchtitan", False, False, EAGER_MEMORY_EFFICIENCY_A100),  # eager: every op at the eager share
        ("torchtitan", False, True, 0.8),  # torchtitan's Triton RMSNorm: a fused kernel
        ("torchtitan", True, False, 0.8),  # torch.compile's kernels
        ("megatron", False, False, 0.8),  # fused kernels
    ],
)
def test_pricing_an_element_wise_op_on_a100(framework, compiled, fused_norm, norm_share):
    kernels = Kernels.from_device(
        DEVICE_CATALOG["a100-80gb"], framework=framework, compiled=compiled, fused_norm=fused_norm
    )
    eager = framework == "torchtitan" and not compiled
    traffic = 1e9
    # a norm's fused bytes, times 9 forward (36 / 4 bytes an element) when eager and not the Triton norm
    factor = EAGER_TRAFFIC["norm"][0] if eager and not fused_norm else 1.0
    assert factor in (1.0, 9.0)
    assert kernels.elementwise_s(traffic, "norm") == pytest.approx(traffic * factor / (2039e9 * norm_share))
    # an op with no eager factor (a residual gradient sum) is still one eager kernel when eager
    plain_share = EAGER_MEMORY_EFFICIENCY_A100 if eager else 0.8
    assert kernels.elementwise_s(traffic, None) == pytest.approx(traffic / (2039e9 * plain_share))


def test_a_device_without_a_measurement_prices_eager_ops_at_memory_efficiency():
    device = DEVICE_CATALOG["b200"]
    kernels = Kernels.from_device(device, framework="torchtitan")
    assert kernels.elementwise_s(1e9, None) == pytest.approx(1e9 / (7672e9 * 0.8))


# Megatron's SwiGLU without its fusion, `F.silu(y_1) * y_2` over `torch.chunk(y, 2, -1)` of a bf16 [2048, 4, 2F]
# tensor (benchmark_megatron_swiglu.py at 2120862b, provider "torch", H100 80GB HBM3, Liger 0.8.1, rows 2367-2371
# forward and 2391-2395 backward at ead96b6): (F, forward ms, backward ms), the "backward" rows timing the
# forward, the output's sum and the backward together.
STRIDED_SWIGLU_H100 = [
    (2048, 0.10529599711298943, 0.317984014749527),
    (4096, 0.19763199985027313, 0.6032639741897583),
    (8192, 0.38304001092910767, 1.1695040464401245),
    (16384, 0.7503359913825989, 2.2973440885543823),
    (32768, 1.4952960014343262, 4.572864055633545),
]


def test_eager_kernels_over_chunk_halves_reach_the_measured_share():
    # a half is 2048 · 4 · F · 2 bytes; forward 5 halves (silu: read 1, write 1; the product: read 2, write 1);
    # backward 12 (the sum reads 1; the product's gradients read a saved half and write, twice: 4; silu_backward
    # 3; the chunk's gradient cat 4), its ms the row's less the forward's. At F 32768: 5 · 536.9 MB = 2.684 GB
    # in 1.495 ms = 1.795 TB/s, 0.536 of 3.35; 12 · 536.9 MB = 6.442 GB in 3.078 ms = 2.093 TB/s, 0.625.
    half = [2048 * 4 * f * 2 for f, _, _ in STRIDED_SWIGLU_H100]
    forward = [5 * h / (ms * 1e-3) / H100_BYTES_PER_S for h, (_, ms, _) in zip(half, STRIDED_SWIGLU_H100, strict=True)]
    backward = [
        12 * h / ((full - ms) * 1e-3) / H100_BYTES_PER_S
        for h, (_, ms, full) in zip(half, STRIDED_SWIGLU_H100, strict=True)
    ]
    assert forward[-1] == pytest.approx(0.5359, abs=1e-4) and backward[-1] == pytest.approx(0.6249, abs=1e-4)
    # 0.476 0.507 0.523 0.534 0.536, mean 0.515; 0.565 0.593 0.611 0.622 0.625, mean 0.603
    means = (sum(forward) / 5, sum(backward) / 5)
    assert means == pytest.approx(STRIDED_EAGER_SHARE, abs=5e-4)


# Held out (session 30): Liger-Kernel's TorchJSD forward on a B200 (benchmark_jsd.py at ace042ec, Liger 0.8.0,
# 2026-05-27; all_benchmark_data.csv rows 2198-2201, provider "torch", forward): fp32 log-probabilities [BT, V],
# V 128,256. Its aten ops, contiguous, one kernel each (KLDivLoss with log_target is `exp(target) * (target -
# input)`, aten Loss.cpp `kl_div`): two exp (4+4 each), lerp (4+4+4), log (4+4), kl (exp 8, sub 12, mul 12), log
# again (8), the second kl (32), two row sums (4 each): 116 bytes an element. (BT, ms); every tensor 0.5-4.2 GB,
# past the B200's 126 MB L2.
JSD_TORCH_FORWARD_B200 = [
    (1024, 2.2900800704956055),
    (2048, 4.97105598449707),
    (4096, 9.907423973083496),
    (8192, 20.02751922607422),
]


def test_b200_s_contiguous_eager_kernels_reach_the_catalog_s_element_wise_share():
    # BT 8192: 116 · 8192 · 128256 = 121.88 GB in 20.03 ms = 6.086 TB/s, 0.793 of 7.672; 4096 0.802, 2048 0.799,
    # 1024 0.867 (part of each op's output still in L2 for the next): mean 0.815. PyTorch's vectorized path on
    # Blackwell keeps its share of the wider HBM (H100 0.82): what ppb prices Megatron's eager contiguous ops
    # at (`memory_efficiency` 0.8). Its non-contiguous path (`STRIDED_EAGER_SHARE`) has no such measurement.
    b200 = DEVICE_CATALOG["b200"]
    shares = [116 * bt * 128256 / (ms * 1e-3) / (b200.hbm_bandwidth_gbs * 1e9) for bt, ms in JSD_TORCH_FORWARD_B200]
    assert shares[-1] == pytest.approx(0.793, abs=1e-3)
    assert sum(shares) / len(shares) == pytest.approx(0.815, abs=1e-3)
    assert min(shares) == pytest.approx(b200.memory_efficiency, abs=0.01)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_a_strided_op_runs_at_the_strided_share_on_any_device(framework):
    # B200 (7,672 GB/s): 1 GB at 0.515 forward, 0.603 backward of the peak, fused or eager framework alike
    kernels = Kernels.from_device(DEVICE_CATALOG["b200"], framework=framework)
    assert kernels.elementwise_s(1e9, None, strided=True) == pytest.approx(1e9 / (7672e9 * 0.515))
    assert kernels.elementwise_s(1e9, None, backward=True, strided=True) == pytest.approx(1e9 / (7672e9 * 0.603))
    # never faster than the device's own element-wise share (a device whose memory_efficiency is lower)
    slow = Kernels.from_device(dataclasses.replace(DEVICE_CATALOG["b200"], memory_efficiency=0.5), framework="megatron")
    assert slow.elementwise_s(1e9, None, strided=True) == pytest.approx(1e9 / (7672e9 * 0.5))


# torch.nn.CrossEntropyLoss on fp32 logits, 8 x 2048 = 16,384 rows (benchmark_cross_entropy.py at b5672a15,
# provider "huggingface", A100-SXM4-80GB, 2024-09-03; all_benchmark_data.csv rows 11-13 forward, 23-25 full):
# (vocabulary, forward ms, full ms). "full" runs fwd + backward with no grad_to_none, so the input's gradient
# accumulates into .grad from the second call on.
CROSS_ENTROPY_A100 = [
    (32768, 5.316768169403076, 15.486032485961914),
    (65536, 10.615103721618652, 30.778079986572266),
    (131072, 20.72643280029297, 60.43830490112305),
]


@pytest.mark.parametrize(("vocab", "forward_ms", "full_ms"), CROSS_ENTROPY_A100)
def test_pytorch_s_cross_entropy_rereads_its_rows_as_measured(vocab, forward_ms, full_ms):
    # forward: _log_softmax writes 4 and reads its row 1 + 2 (the re-reads) times: 16 bytes a logit; at
    # 131,072: 16 x 16,384 x 131,072 = 34.36 GB in 20.73 ms = 1.658 TB/s, 0.81 of 2.039 TB/s (one read,
    # 8 bytes, would be 0.41: no streaming kernel runs that slowly). Backward: nll_loss_backward's zeros 4,
    # _log_softmax_backward_data reads the gradient 1 + 1 times and the output once and writes: 16, the
    # gradient accumulated into .grad 4 + 4 + 4: 32; full = 48 bytes a logit, 0.82-0.84.
    forward_again, backward_again = softmax_row_rereads(vocab)
    logits = 8 * 2048 * vocab
    forward = (4 + 4 + 4 * forward_again) * logits
    full = forward + (4 + 12 + 4 * backward_again + 12) * logits
    assert forward / (forward_ms * 1e-3) / A100_BYTES_PER_S == pytest.approx(0.8, abs=0.03)
    assert full / (full_ms * 1e-3) / A100_BYTES_PER_S == pytest.approx(0.83, abs=0.03)
    assert 8 * logits / (forward_ms * 1e-3) / A100_BYTES_PER_S < 0.45
