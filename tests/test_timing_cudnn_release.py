"""A run's cuDNN release on Blackwell: cuDNN 9.13's measured attention kernels before 9.17, the newest after."""

import pytest

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.timing.attention_rates import cudnn_kernel
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel
from tests.test_timing_pricer import gelu_run

B200 = DEVICE_CATALOG["b200"]


def _tflops(kernels: Kernels, backward: bool, length: int, causal: bool = True) -> float:
    """B200's TFLOP/s for one pass of 148 (sequence, head) pairs of one 128-query block (148 SMs: one
    wave), at the keys a query of a *length*-token causal sequence walks (or *length* without the mask)."""
    keys = (length + 1) / 2 if causal else length
    return kernels.attention_efficiency(backward, 148, 128, keys, 128, 1.0 if causal else 0.0) * 2250


def test_the_release_picks_the_kernels():
    assert cudnn_kernel(None) == "cudnn_sm100"  # unstated: the newest measured (9.22)
    assert cudnn_kernel((9, 13)) == cudnn_kernel((9, 16)) == "cudnn_sm100_913"
    assert cudnn_kernel((9, 17)) == cudnn_kernel((9, 20)) == cudnn_kernel((10, 0)) == "cudnn_sm100"
    # Hopper keeps its one measured set whatever the release
    assert Kernels.from_device(DEVICE_CATALOG["h100-80gb"], cudnn_release=(9, 13)).attention_kernel == "cudnn_sm90"


def test_a_b200_pass_on_cudnn_9_13_runs_at_nvidia_s_b200_table_less_pytorch_s_dispatch():
    # NVIDIA/cudnn-frontend sdpa_bf16_benchmark_results_NVIDIA_B200.csv at 0b1577c (cuDNN 9.13.0, NGC PyTorch
    # 25.09, causal, single calls): 8k forward 1171.278 TFLOP/s in 1.877 ms, backward 942.509 in 5.833; 4k
    # 855.678 in 0.642, 701.265 in 1.960; its 512-token calls 0.102 and 0.160 ms (PyTorch's dispatch, timed):
    # 8k 1171.278 x 1.877 / 1.775 = 1238.6 and 942.509 x 5.833 / 5.673 = 969.1; 4k 855.678 x 0.642 / 0.540 =
    # 1017.3 and 701.265 x 1.960 / 1.800 = 763.6. The catalog's B200 level is GB200's 9.22 rate x 0.918 (the
    # parts' measured attention ratio) and the 9.13 curve the B200 table / 0.918 over it: the B200 pass gets the
    # table's own rate (one
    # full wave: no wave loss).
    old = Kernels.from_device(B200, cudnn_release=(9, 13))
    assert _tflops(old, False, 8192) == pytest.approx(1238.6, rel=1e-3)
    assert _tflops(old, True, 8192) == pytest.approx(969.1, rel=1e-3)
    assert _tflops(old, False, 4096) == pytest.approx(1017.3, rel=1e-3)
    assert _tflops(old, True, 4096) == pytest.approx(763.6, rel=1e-3)
    # 9.22 on the same pass: GB200's 1574 / 1332 at 8k x 0.918 = 1444.9 / 1222.8
    new = Kernels.from_device(B200)
    assert _tflops(new, False, 8192) == pytest.approx(1574 * 0.918, rel=1e-3)
    assert _tflops(new, True, 8192) == pytest.approx(1332 * 0.918, rel=1e-3)


def test_without_the_mask_9_13_takes_its_causal_ratio_over_9_22_at_as_many_keys():
    # unmeasured without the mask: 9.22's no-mask rate x (9.13 over 9.22 causal) at the causal length whose
    # queries walk as many keys, 2s - 1. At 16k keys: 32767 ~ 32k, where 9.13 reads 1419.0 forward in 24.795
    # ms and 1108.688 backward in 79.338 ms (B200; less the 512 calls' 0.102 / 0.160 ms: 1424.9 and 1110.9),
    # 9.22 1622 and 1226 (GB200); in GB200's terms 9.13 is / 0.918, so on B200 (x 0.918 again)
    # 1697 x 1424.9 / 1622 = 1490.7 and 1374 x 1110.9 / 1226 = 1245.0 TFLOP/s.
    old = Kernels.from_device(B200, cudnn_release=(9, 13))
    assert _tflops(old, False, 16384, causal=False) == pytest.approx(1697 * 1424.9 / 1622, rel=2e-3)
    assert _tflops(old, True, 16384, causal=False) == pytest.approx(1374 * 1110.9 / 1226, rel=2e-3)


def test_a_run_states_its_release_and_the_pricer_reads_it():
    raw = gelu_run(device={"name": "b200"}).model_dump(mode="json", exclude_none=True)
    run = parse_run_config({**raw, "timing": {**raw["timing"], "cudnn_release": "9.13.1.26"}})
    assert run.timing.cudnn_version == (9, 13)
    assert TimeModel(run).kernels.attention_kernel == "cudnn_sm100_913"
    assert TimeModel(parse_run_config(raw)).kernels.attention_kernel == "cudnn_sm100"


def test_a_release_that_is_no_version_is_refused():
    raw = gelu_run(device={"name": "b200"}).model_dump(mode="json", exclude_none=True)
    with pytest.raises(InputError, match="cudnn_release"):
        parse_run_config({**raw, "timing": {**raw["timing"], "cudnn_release": "latest"}})


def test_mindformers_states_no_cudnn():
    raw = gelu_run(device={"name": "b200"}).model_dump(mode="json", exclude_none=True)
    raw = {**raw, "framework": "mindformers", "timing": {**raw["timing"], "cudnn_release": "9.13"}}
    with pytest.raises(InputError, match=r"timing\.cudnn_release"):
        parse_run_config(raw)
