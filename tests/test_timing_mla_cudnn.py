"""MLA's unequal head sizes (queries and keys 192, values 128) on cuDNN's sm100 kernels: their measured rates."""

import pytest

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.timing.attention_rates import sequence_factor
from ppb_core.timing.kernels import Kernels

B200 = DEVICE_CATALOG["b200"]


def _tflops(kernels: Kernels, backward: bool, length: int, head_dim: int, causal: bool = True) -> float:
    """B200's TFLOP/s for one pass of 148 (sequence, head) pairs of one 128-query block (148 SMs: one wave), at
    the keys a query of a *length*-token causal sequence walks (or *length* without the mask)."""
    keys = (length + 1) / 2 if causal else length
    return kernels.attention_efficiency(backward, 148, 128, keys, head_dim, 1.0 if causal else 0.0) * 2250


def test_mla_backward_runs_at_cudnn_s_measured_dsv3_rate():
    # NVIDIA/cudnn-frontend results/dsv3/gb200/dsv3_20260424_101009.csv (cuDNN 9.22, GB200, 128 heads of 192 / 128,
    # batch 2, non-deterministic): backward 4k no mask 1175, causal 1057; 8k 1125 / 1193 TFLOP/s. The catalog's
    # B200 level is GB200's 9.22 rate x 0.918 (the two parts' measured attention ratio, the catalog's
    # `B200_OVER_GB200_ATTENTION`), read against head 128's 16k no-mask 1374, so a B200 pass at head 192 runs the
    # GB200 figure x 0.918.
    b200 = Kernels.from_device(B200)
    scale = 0.918
    assert _tflops(b200, True, 4096, 192, causal=False) == pytest.approx(1175 * scale, rel=1e-3)
    assert _tflops(b200, True, 4096, 192) == pytest.approx(1057 * scale, rel=1e-3)
    assert _tflops(b200, True, 8192, 192, causal=False) == pytest.approx(1125 * scale, rel=1e-3)
    assert _tflops(b200, True, 8192, 192) == pytest.approx(1193 * scale, rel=1e-3)
    # the same file's forward: 4k no mask 1666, causal 1406
    assert _tflops(b200, False, 4096, 192, causal=False) == pytest.approx(1666 * scale, rel=1e-3)
    assert _tflops(b200, False, 4096, 192) == pytest.approx(1406 * scale, rel=1e-3)
    # head 128 keeps the Llama 3.1 file's curve: 4k backward no mask 1350, causal 1148
    assert _tflops(b200, True, 4096, 128, causal=False) == pytest.approx(1350 * scale, rel=1e-3)
    assert _tflops(b200, True, 4096, 128) == pytest.approx(1148 * scale, rel=1e-3)


def test_between_128_and_192_the_factor_is_linear_and_held_above():
    # at head 160, halfway: (1350 + 1175) / 2 = 1262.5 over 128's 16k no-mask backward 1374
    assert sequence_factor("cudnn_sm100", True, False, 4096, 160) == pytest.approx(1262.5 / 1374, rel=1e-6)
    assert sequence_factor("cudnn_sm100", True, False, 4096, 256) == pytest.approx(1175 / 1374, rel=1e-6)


def test_kernels_without_an_mla_measurement_keep_head_128_s_curves():
    # cuDNN 9.13 on sm100 (no MLA run of that release), cuDNN on sm90 and FlashAttention-2: head 192 as 128
    for kernel in ("cudnn_sm100_913", "cudnn_sm90", "flash2"):
        for backward in (False, True):
            assert sequence_factor(kernel, backward, True, 2048.5, 192) == sequence_factor(
                kernel, backward, True, 2048.5, 128
            )
