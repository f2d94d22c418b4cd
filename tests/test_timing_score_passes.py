"""An unfused attention core's passes over its materialized scores at standard attention's measured HBM share.

Source (ppb_core.timing.attention_rates docstring): FlashAttention-3's paper, Fig. 5c / 6b "Standard
attention" on the H100 SXM5, head size 128, 16 heads, 16k tokens a batch, no mask, TFLOP/s at 1k, 2k, 4k:
forward 100, 119, 133; backward 174 at 4k.
"""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, body, make_run

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.timing.attention_rates import score_fraction
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel


def test_standard_attention_share_at_4k_by_hand():
    # Forward at 4k: 4·16384·4096·2048 = 549,755,813,888 FLOPs at 133 TFLOP/s = 4.13350 ms. Beside the
    # scores, 10 passes over 16384 × 2048 elements of 2 bytes = 671,088,640 B at 0.8 of 3.35 TB/s: 0.25041 ms.
    # The scores' 4 passes: 4·2·16384·16·4096 = 8,589,934,592 B in 3.88309 ms = 2.21214 TB/s: 0.66034 of 3.35.
    assert score_fraction(False, 4096, 0.8) == pytest.approx(0.66034, abs=1e-5)
    # Backward: 2.5 times the FLOPs at 174: 7.89879 ms; 18 tensor passes 1,207,959,552 B: 0.45073 ms; 7 score
    # passes 15,032,385,536 B in 7.44806 ms = 2.01829 TB/s: 0.60248.
    assert score_fraction(True, 4096, 0.8) == pytest.approx(0.60248, abs=1e-5)
    # 1k forward: 137,438,953,472 FLOPs at 100 = 1.37439 ms, less 0.25041: 2,147,483,648 B in 1.12398 ms: 0.57033
    assert score_fraction(False, 1024, 0.8) == pytest.approx(0.57033, abs=1e-5)
    # 2k forward: 274,877,906,944 at 119 = 2.30990 ms, less 0.25041: 4,294,967,296 B in 2.05949 ms: 0.62252
    assert score_fraction(False, 2048, 0.8) == pytest.approx(0.62252, abs=1e-5)


def test_head_size_64_by_hand_and_the_blend_between():
    # Fig. 5a / 6a, 32 heads of 64: forward 72 TFLOP/s at 4k: 549,755,813,888 FLOPs in 7.63550 ms, less the
    # same 0.25041 ms: the scores' 4·2·16384·32·4096 = 17,179,869,184 B in 7.38509 ms = 2.32629 TB/s: 0.69441.
    assert score_fraction(False, 4096, 0.8, 64) == pytest.approx(0.69441, abs=1e-5)
    # backward 92: 14.93902 ms less 0.45073: 30,064,771,072 B in 14.48829 ms = 2.07510 TB/s: 0.61943
    assert score_fraction(True, 4096, 0.8, 64) == pytest.approx(0.61943, abs=1e-5)
    # head size 96: halfway between 128's and 64's; 192 (MLA's query and key) takes 128's; 32 takes 64's
    assert score_fraction(False, 4096, 0.8, 96) == pytest.approx((0.66034 + 0.69441) / 2, abs=1e-5)
    assert score_fraction(False, 4096, 0.8, 192) == score_fraction(False, 4096, 0.8, 128)
    assert score_fraction(True, 4096, 0.8, 32) == score_fraction(True, 4096, 0.8, 64)


def test_the_share_is_linear_in_log2_between_lengths_and_held_outside():
    midway = score_fraction(False, 2048 * 2**0.5, 0.8)
    assert midway == pytest.approx((0.62252 + 0.66034) / 2, abs=1e-5)
    assert score_fraction(False, 128, 0.8) == score_fraction(False, 512, 0.8)
    assert score_fraction(True, 65536, 0.8) == score_fraction(True, 8192, 0.8)


def test_score_passes_follow_the_share_where_it_was_measured():
    h100 = Kernels.from_device(DEVICE_CATALOG["h100-80gb"])
    a100 = Kernels.from_device(DEVICE_CATALOG["a100-80gb"])
    # H100: 1 GB of score passes forward at 4k keys take 1e9 / (3.35e12 · 0.66034) s
    assert h100.score_memory_s(1e9, 4096, False) == pytest.approx(1e9 / (3.35e12 * 0.66034), rel=1e-5)
    # A100, unmeasured: at the element-wise rate, 0.8 of 2.039 TB/s
    assert a100.score_memory_s(1e9, 4096, False) == pytest.approx(1e9 / (2.039e12 * 0.8), rel=1e-12)
    assert a100.score_memory_s(1e9, 4096, True) == a100.memory_s(1e9)


@pytest.mark.parametrize("device", ["h100-80gb", "a100-80gb"])
def test_an_unfused_core_prices_its_score_passes_by_the_device(device):
    run = make_run(
        DENSE, training={"seq_length": 4096, "flash_attention": False}, device={"name": device}, framework="megatron"
    )
    times = TimeModel(run)
    layer = body(run)
    ops = {op.name.rsplit(".", 1)[-1]: op for op in times.ops(layer)}
    for name in ("scores", "softmax", "context"):
        assert ops[name].score_keys == 4096  # a score row holds every key of the sequence
        assert ops[name].score_head_dim == 16
    assert ops["attention_mask"].score_keys == 0 and ops["norm1"].score_keys == 0
    prices = {name.rsplit(".", 1)[-1]: price for name, price in times.op_prices(layer).items()}
    spec = DEVICE_CATALOG[device]
    # DENSE: 4 heads of 16, below 64: head size 64's share (test_head_size_64_by_hand_and_the_blend_between)
    forward, backward = (
        (0.69441, 0.61943) if device == "h100-80gb" else (spec.memory_efficiency, spec.memory_efficiency)
    )
    peak = spec.hbm_bandwidth_gbs * 1e9
    softmax = ops["softmax"]
    assert prices["softmax"].forward_ms == pytest.approx(softmax.bytes / (peak * forward) * 1e3, rel=1e-5)
    assert prices["softmax"].backward_ms == pytest.approx(softmax.backward_bytes / (peak * backward) * 1e3, rel=1e-5)
