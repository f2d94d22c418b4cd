"""Flash-attention rates by mask and sequence length, as published measurements give them.

A device states each kernel's level: its rate at head size 128, 16k tokens, no mask
(`DeviceProfile.attention_*_efficiency`, `flash2_*`). What a pass reaches at another length or under
the causal mask is that level times the kernel's measured rate there over its measured 16k no-mask
rate (`sequence_factor`): the measured curves below, read at the pass's length (linear in log2 of the
length between measured points; held at the longest; below the shortest, carried down by the key-block
ramp w/(w + 1), w = length/128, the cost of loading Q and writing O once per walk). FLOPs count the
causal mask's unmasked half, as every source below does.

- `flash2`, FlashAttention-2 (PyTorch SDPA's flash backend; flash-attn 2 under TransformerEngine on
  A100): FlashAttention-3's paper (Shah et al. 2024, arXiv 2407.08608), H100 80GB SXM5, BF16, head
  size 128, 16k tokens a batch over 16 heads, TFLOPS/s at 512, 1k, 2k, 4k, 8k, 16k: Fig. 5c forward
  309, 350, 362, 368, 370, 370; Fig. 5d forward, causal, 191, 260, 298, 319, 333, 335; Fig. 6b backward,
  no mask, 214, 260, 291, 310, 318, 322. The paper has no causal backward panel and stops at 16k:
  PyTorch's own SDPA, measured by NVIDIA/cudnn-frontend's attention benchmark (benchmark/
  benchmark_results.csv at de355c7, Sept 2024: NGC PyTorch 24.07, `F.scaled_dot_product_attention`
  with flash enabled, on an H200 locked at 1980 MHz and 700 W; 16 heads of 128, 64k tokens a batch up to
  16k; causal FLOPs halved), TFLOP/s at 4k, 8k, 16k, 32k, 64k: forward 362.03, 364.03, 360.50, 356.15,
  360.62, causal 296.52, 321.94, 327.17, 345.64, 338.85; backward 290.47, 305.47, 317.34, 320.44,
  330.07, causal 245.18, 275.40, 305.19, 316.92, 323.98. Past 16k the no-mask curves follow its trend
  (the paper's 16k rate times its rate over its 16k one), the causal forward its causal ratio; the
  causal backward is the no-mask backward times its causal ratio at 4k-64k (held at 4k's, 0.844, below).
  (Dao-AILab/flash-attention pull request #1791, July 2025, flash-attn 2.8 on an H100 at 8k, loses less
  under the mask backward, 287.1 against 290.6, and more forward, 284.1 against 369.9: another build.)
- `cudnn_sm90`, cuDNN's fused attention on Hopper (TransformerEngine's FusedAttention): the same paper's
  cuDNN series: Fig. 5c forward 497, 574, 617, 609, 600, 595; Fig. 5d forward, causal, 315, 410, 484,
  518, 529, 539; Fig. 6b backward, no mask, 305, 408, 465, 499, 518, 516. Its causal backward, which the
  paper does not show, is that no-mask backward times cuDNN's own measured causal-over-no-mask backward
  ratio at each length: NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/
  h200_919_only_cudnn/llama3.1_20260227_034703.csv (df73764; cuDNN 9.19.1 on an H200, the same GH100
  die; BF16, Llama 3.1 405B's 64 query and 8 KV heads of 128, batch 1): backward top_left (causal)
  against no_mask TFLOP/s, 2k 370/504, 4k 474/560, 8k 541/594, 16k 579/612, 32k 581/572.
- Head size 64 (the paper's Fig. 5a, 5b, 6a: 32 heads of 64, the same tokens), FlashAttention-2 forward
  282, 306, 318, 321, 322, 324, causal 180, 229, 262, 284, 295, 299, backward 198, 238, 264, 279, 287,
  291; cuDNN forward 335, 373, 395, 408, 412, 413, causal 225, 288, 334, 363, 379, 388, backward 266,
  348, 395, 417, 432, 433 (their causal backward by the same ratios as at 128, PyTorch's for
  FlashAttention-2, 9.19's for cuDNN; past 16k held). The rate at 16k without the mask over 128's
  is the device's `*_head64_*` ratio; these curves give the shape below it.
- `cudnn_sm100`, cuDNN on Blackwell: NVIDIA/cudnn-frontend's GB200 measurement (results/llama3.1/gb200/
  llama3.1_20260424_100750.csv at fb682ce; cuDNN 9.22, the same heads, batch 2), TFLOP/s at 2k, 4k,
  8k, 16k, 32k: forward no mask 1433, 1599, 1771, 1697, 1634; causal 1097, 1408, 1574, 1708, 1622;
  backward no mask 1124, 1350, 1404, 1374, 1262; causal 885, 1148, 1332, 1328, 1226. MLA's unequal head
  sizes (192 / 128) from the same benchmark's DeepSeek-V3 run (`MLA_HEAD_DIM`): its backward 0.79-0.96 of these.
- `cudnn_sm100_913`, the same kernels as cuDNN 9.13 shipped them (NeMo 25.11's container: cuDNN 9.13.1.26,
  NVIDIA-NeMo/Megatron-Bridge docs/releases/software-versions.md at v0.2.0): NVIDIA/cudnn-frontend
  benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv at 0b1577c (Oct
  2025; sample_b200_bf16_run.txt: NGC PyTorch 25.09, `torch.backends.cudnn.version()` 91300), PyTorch SDPA's
  cuDNN backend on a B200, Llama 3.1 405B's 128 query and 8 KV heads of 128, batch 1, causal, single calls
  (benchmark_single_sdpa.py's delays against throttling), TFLOP/s at 2k, 4k, 8k, 16k, 32k: forward 478.9,
  855.7, 1171.3, 1332.4, 1419.0; backward 371.5, 701.3, 942.5, 1074.8, 1108.7 (causal FLOPs halved, the
  backward 2.5 times the forward's, as above), less PyTorch's per-call dispatch, which the harness times
  (its 512-token calls, 0.102 and 0.160 ms; `_CUDNN_913_B200_CALL_MS`): forward 743.0, 1017.3, 1238.6,
  1353.3, 1424.9; backward 449.2, 763.6, 969.1, 1083.2, 1110.9. Read against 9.22's level
  (`REFERENCE_KERNEL`): the table is B200's, the catalog's B200 level GB200's 9.22 rate times the parts'
  measured attention ratio 0.918 (`B200_OVER_GB200_ATTENTION`), so its causal curve is the table over 0.918 and
  a B200 pass runs at the table's rate. No
  no-mask series was measured: a no-mask pass over s keys takes 9.22's no-mask rate times 9.13's
  causal-over-9.22 ratio at the causal length whose queries walk as many keys on average, 2s - 1 (an
  assumption: at 16k without the mask, 32k's ratio, 0.878 forward, 0.906 backward). A release before 9.17
  reads this table (`cudnn_kernel`; the 9.10.2 run of June 2025, the same file at 87a1bcd, NGC PyTorch
  25.06, is within 3% of it at 8k: 1197 / 940 before the dispatch); 9.17 and later read 9.22's: NVIDIA's
  GB200 runs of cuDNN 9.17 (the same file's GB200 table at b372d39, 128 heads, batch 1), 9.18
  (results/gb200_918_only_cudnn at 9072c4e) and 9.19 (results/gb200_919_only_cudnn at afa9f7c; 64 heads,
  batch 1) read 1584, 1563 and 1598 forward at 8k causal against 9.22's 1574; their backward 1211, 1279 and
  1311 against 1332 (up to 9% slower: not modelled).

Unfused attention (the scores materialized: Megatron's and TransformerEngine's unfused cores, PyTorch ops
elsewhere) is priced by its bytes; where measured, its score-sized passes at the HBM share standard
attention reached (`score_fraction`). The same paper's "Standard attention" series (Fig. 5c forward, 6b
backward: H100 80GB SXM5, head size 128, 16 heads, 16k tokens a batch, no mask; out of memory at 16k),
TFLOP/s at 512, 1k, 2k, 4k, 8k: forward 74, 100, 119, 133, 139; backward 104, 131, 159, 174, 181. The
paper's setup is Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py's (hidden 2048, 16k
tokens, its FLOP count), whose `attention_pytorch` (unchanged since the FlashAttention-2 release but for
the methods list, e8c73447) is the standard attention taken here: forward `torch.baddbmm` writes the
scores S, `torch.softmax` reads S and writes P (its `F.dropout` at 0.0 returns P: no kernel), the einsum's
batched product reads P: 4 passes of 2 bytes over the b·h·s² scores; beside them q, k and v are
rearranged into batched layouts (a copy each: read and write) and the products read q, k, v and write
the output: 10 passes over a 16k × 2048 tensor of 2 bytes. Backward (autograd of the same ops): the
einsum's dP = dO·Vᵀ writes dP and dV = Pᵀ·dO reads P (dO read twice, V read, dV written: 4 tensor
passes), softmax's backward reads dP and P and writes dS, baddbmm's dQ = dS·K and dK = Qᵀ·dS read dS
each (K, Q read, dQ, dK written, then autograd's `maybe_multiply` by the scale reads and writes each: 8),
unbind's backward stacks dQ, dK, dV into the packed gradient (6): 7 score passes and 18 tensor passes.
A pass's seconds are its FLOPs (4·b·s²·h·d forward, 2.5 times that backward) over the rate; less the
tensor passes at the element-wise rate (`DeviceProfile.memory_efficiency` of HBM), the rest moved the
score passes: their bytes over it, over HBM's 3.35 TB/s, is the share (`score_fraction`): forward
0.47, 0.57, 0.62, 0.66, 0.67, backward 0.47, 0.52, 0.58, 0.60, 0.61 at 0.8 for the rest. Head size 64
(Fig. 5a / 6a, 32 heads): forward 52, 63, 67, 72, 73, backward 68, 76, 88, 92, 95 TFLOP/s, shares
0.60, 0.66, 0.67, 0.69, 0.69 and 0.54, 0.55, 0.61, 0.62, 0.63; linear between the two head sizes.
"""

from __future__ import annotations

import functools
import itertools
import math

from ppb_core.config.devices import B200_OVER_GB200_ATTENTION

ATTENTION_BLOCK = 128  # query and key rows per flash-attention block
REFERENCE_LENGTH = 16384  # the length a device's attention levels are measured at (no mask)
LENGTHS_H100 = (512, 1024, 2048, 4096, 8192, 16384)
LENGTHS_CUDNN_CSV = (2048, 4096, 8192, 16384, 32768)

# cuDNN 9.19's causal-over-no-mask backward ratio on the GH100 die (the module docstring's H200 file)
_CUDNN_SM90_CAUSAL_BACKWARD_RATIO = {
    2048: 370 / 504,
    4096: 474 / 560,
    8192: 541 / 594,
    16384: 579 / 612,
    32768: 581 / 572,
}


# PyTorch SDPA's FlashAttention-2 (the module docstring's de355c7 file): (no mask, causal) TFLOP/s
_SDPA_FORWARD = {
    4096: (362.03, 296.52),
    8192: (364.03, 321.94),
    16384: (360.50, 327.17),
    32768: (356.15, 345.64),
    65536: (360.62, 338.85),
}
_SDPA_BACKWARD = {
    4096: (290.47, 245.18),
    8192: (305.47, 275.40),
    16384: (317.34, 305.19),
    32768: (320.44, 316.92),
    65536: (330.07, 323.98),
}
_LONG = (32768, 65536)


def _ratio_at(points: dict[int, float], length: int) -> float:
    """The measured ratio at *length*, held at the nearest end outside the measured lengths."""
    return points[min(max(length, min(points)), max(points))]


# (backward, causal) → ((length, TFLOP/s), ...)
Curve = tuple[tuple[int, float], ...]
Curves = dict[tuple[bool, bool], Curve]


def _h100(*rates: float) -> Curve:
    return tuple(zip(LENGTHS_H100, rates, strict=True))


def _csv(*rates: float) -> Curve:
    return tuple(zip(LENGTHS_CUDNN_CSV, rates, strict=True))


def _cudnn_sm90_causal_backward(no_mask: Curve) -> Curve:
    """The paper's no-mask backward times cuDNN 9.19's measured causal ratio at each length (held at the
    nearest measured length outside 2k-32k); at 32k the no-mask 16k rate times the 32k ratio."""
    points = (*no_mask, (32768, no_mask[-1][1]))
    return tuple((s, rate * _ratio_at(_CUDNN_SM90_CAUSAL_BACKWARD_RATIO, s)) for s, rate in points)


def _sdpa_extended(paper: Curve, sdpa: dict[int, tuple[float, float]]) -> Curve:
    """The paper's no-mask curve to 16k, past it its 16k rate times PyTorch SDPA's trend."""
    return (*paper, *((s, paper[-1][1] * sdpa[s][0] / sdpa[16384][0]) for s in _LONG))


def _sdpa_causal(no_mask: Curve, sdpa: dict[int, tuple[float, float]], measured: Curve = ()) -> Curve:
    """*measured* causal points where the paper has them, else the no-mask rate times PyTorch SDPA's
    causal ratio at that length (held at its shortest, 4k, below it)."""
    known = dict(measured)
    ratio = {s: causal / plain for s, (plain, causal) in sdpa.items()}
    return tuple((s, known.get(s, rate * _ratio_at(ratio, s))) for s, rate in no_mask)


_FLASH2_FORWARD = _sdpa_extended(_h100(309, 350, 362, 368, 370, 370), _SDPA_FORWARD)
_FLASH2_BACKWARD = _sdpa_extended(_h100(214, 260, 291, 310, 318, 322), _SDPA_BACKWARD)
_FLASH2_BACKWARD_64 = _h100(198, 238, 264, 279, 287, 291)


# MLA's query/key head size (DeepSeek-V3's and Kimi K2's 128 + 64; its values 128): on sm100 TransformerEngine runs
# these unequal head sizes only through cuDNN (TE v2.14 attention/dot_product_attention/utils.py
# `get_attention_backend`: "Disabling FlashAttention 2 as it does not support MLA", FlashAttention 3 only on sm90),
# measured there by NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/dsv3/gb200/
# dsv3_20260424_101009.csv (fb682ce; configs/dsv3.py: cuDNN 9.22 on a GB200, BF16, 128 heads of 192 / 128, batch 2,
# the non-deterministic backward), TFLOP/s at 2k-32k in ppb's FLOP count (the harness's backward counts
# 6·d_qk + 4·d_v a score, as `flops._core` does: 7.148 of its 4k no-mask TFLOP over the forward's 2.749 is 2.6):
# forward no mask 1492, 1666, 1759, 1812, 1584; causal 1072, 1406, 1585, 1678, 1743; backward no mask 1048, 1175,
# 1125, 1088, 1086; causal 846, 1057, 1193, 1134, 1076. The forward holds head 128's rate (within 8%), the backward
# runs 0.79-0.96 of it (Kimi K2's 64 heads, kimiK26_20260424_100953.csv: 1187, 1220, 1122 without the mask at 4k-16k;
# on a GB300, results/dsv3/gb300: 0.82-0.92 of that part's head-128 backward).
MLA_HEAD_DIM = 192

# kernel → head size → curves; head size 64 where the paper measured it (Fig. 5a, 5b, 6a: 32 heads of 64)
ATTENTION_CURVES: dict[str, dict[int, Curves]] = {
    "flash2": {
        128: {
            (False, False): _FLASH2_FORWARD,
            (False, True): _sdpa_causal(_FLASH2_FORWARD, _SDPA_FORWARD, _h100(191, 260, 298, 319, 333, 335)),
            (True, False): _FLASH2_BACKWARD,
            (True, True): _sdpa_causal(_FLASH2_BACKWARD, _SDPA_BACKWARD),
        },
        64: {
            (False, False): _h100(282, 306, 318, 321, 322, 324),
            (False, True): _h100(180, 229, 262, 284, 295, 299),
            (True, False): _FLASH2_BACKWARD_64,
            (True, True): _sdpa_causal(_FLASH2_BACKWARD_64, _SDPA_BACKWARD),
        },
    },
    "cudnn_sm90": {
        128: {
            (False, False): _h100(497, 574, 617, 609, 600, 595),
            (False, True): _h100(315, 410, 484, 518, 529, 539),
            (True, False): _h100(305, 408, 465, 499, 518, 516),
            (True, True): _cudnn_sm90_causal_backward(_h100(305, 408, 465, 499, 518, 516)),
        },
        64: {
            (False, False): _h100(335, 373, 395, 408, 412, 413),
            (False, True): _h100(225, 288, 334, 363, 379, 388),
            (True, False): _h100(266, 348, 395, 417, 432, 433),
            (True, True): _cudnn_sm90_causal_backward(_h100(266, 348, 395, 417, 432, 433)),
        },
    },
    "cudnn_sm100": {
        128: {
            (False, False): _csv(1433, 1599, 1771, 1697, 1634),
            (False, True): _csv(1097, 1408, 1574, 1708, 1622),
            (True, False): _csv(1124, 1350, 1404, 1374, 1262),
            (True, True): _csv(885, 1148, 1332, 1328, 1226),
        },
        MLA_HEAD_DIM: {
            (False, False): _csv(1492, 1666, 1759, 1812, 1584),
            (False, True): _csv(1072, 1406, 1585, 1678, 1743),
            (True, False): _csv(1048, 1175, 1125, 1088, 1086),
            (True, True): _csv(846, 1057, 1193, 1134, 1076),
        },
    },
}
# cuDNN 9.13 on a B200 (module docstring), causal, at 2k-32k: (TFLOP/s, ms) forward and backward, and the
# same file's 512-token calls (0.102 and 0.160 ms), whose work is a few microseconds: PyTorch's dispatch of an
# SDPA call, which the harness's events time after a synchronize and a sleep (benchmark_single_sdpa.py at
# 0b1577c: `start_event.record()`, `sdpa_function(...)` or `output.backward(...)`, `end_event.record()`) and a
# training step hides behind the GPU's queue. Taken out of every length: rate x ms / (ms - the 512 call's).
_CUDNN_913_B200_MEASURED = {
    False: ((478.921, 0.287), (855.678, 0.642), (1171.278, 1.877), (1332.415, 6.602), (1419.000, 24.795)),
    True: ((371.486, 0.925), (701.265, 1.960), (942.509, 5.833), (1074.776, 20.460), (1108.688, 79.338)),
}
_CUDNN_913_B200_CALL_MS = {False: 0.102, True: 0.160}
_CUDNN_913_B200 = {
    backward: _csv(*(rate * ms / (ms - _CUDNN_913_B200_CALL_MS[backward]) for rate, ms in measured))
    for backward, measured in _CUDNN_913_B200_MEASURED.items()
}
# the catalog's B200 attention level is GB200's cuDNN 9.22 rate times the two parts' measured attention ratio
# (devices.py, `B200_OVER_GB200_ATTENTION`): a B200 measurement in GB200's terms is that over the ratio
_B200_TO_GB200 = 1.0 / B200_OVER_GB200_ATTENTION


def _older_release(newest: Curves, b200_causal: dict[bool, Curve]) -> Curves:
    """An older release's curves measured on a B200 under the causal mask only: its causal rates in GB200's
    terms; without the mask at s keys the newest no-mask rate times the older over newest causal ratio at
    the triangle whose queries walk s keys on average (side 2s - 1, as `_curves_factor` reads causal passes)."""
    curves: Curves = {}
    for backward in (False, True):
        causal = tuple((s, rate * _B200_TO_GB200) for s, rate in b200_causal[backward])
        curves[backward, True] = causal
        curves[backward, False] = tuple(
            (s, rate * curve_rate(causal, 2 * s - 1) / curve_rate(newest[backward, True], 2 * s - 1))
            for s, rate in newest[backward, False]
        )
    return curves


ATTENTION_KERNELS = (*ATTENTION_CURVES, "cudnn_sm100_913")
# an older release's curves are read against the level its newest release sets (the catalog's efficiencies)
REFERENCE_KERNEL = {"cudnn_sm100_913": "cudnn_sm100"}
# cuDNN releases whose sm100 kernels a run may state (`timing.cudnn_release`): before 9.17, 9.13's table
CUDNN_SM100_NEWER = (9, 17)

# Sliding-window attention (a query attends to its last w keys: GPT-OSS's odd layers) on cuDNN's sm100
# kernels, measured: NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/gpt_oss/gb200/
# gpt_oss_20260424_100011.csv (fb682ce; configs/gpt_oss.py: cuDNN 9.22 on a GB200, BF16, 128 heads of 64,
# window 128, batch 2, "top_left" causal, FLOPs over the window's band), TFLOP/s at 2k, 4k, 8k, 16k, 32k, the
# non-deterministic backward: forward 153, 161, 165, 167, 104; backward 176, 182, 187, 188, 186. Far below a
# causal pass as short as the window (the kernel walks two key blocks a query block: its fixed costs a block
# dominate). No other window is measured on sm100: a window of at most 128 keys reads this curve at the pass's
# queries, a longer one the causal rule (`_curves_factor`: the triangle of the keys it walks). On sm90 the
# rule holds where measured: NVIDIA's H200 run of the same benchmark at window 1024 (results/
# h200_919_only_cudnn/gpt_oss_20260227_034819.csv, df73764; cuDNN 9.19, 64 query and 8 KV heads of 64)
# reads 336 forward and 289 backward TFLOP/s at 4k (tests/test_timing_attention_window.py).
WINDOW_MEASURED = 128
WINDOW_HEAD_DIM = 64
WINDOW_CURVES: dict[str, dict[bool, Curve]] = {
    "cudnn_sm100": {
        False: tuple(zip(LENGTHS_CUDNN_CSV, (153.0, 161.0, 165.0, 167.0, 104.0), strict=True)),
        True: tuple(zip(LENGTHS_CUDNN_CSV, (176.0, 182.0, 187.0, 188.0, 186.0), strict=True)),
    },
}


def window_factor(kernel: str, backward: bool, window: int, queries: float) -> float | None:
    """A sliding-window pass's rate at head size 64 over the kernel family's 16k no-mask rate at 128 (the
    device's level), where measured (`WINDOW_CURVES`, windows of at most `WINDOW_MEASURED` keys); else None."""
    family = REFERENCE_KERNEL.get(kernel, kernel)
    if family not in WINDOW_CURVES or not 0 < window <= WINDOW_MEASURED:
        return None
    reference = curve_rate(ATTENTION_CURVES[family][128][backward, False], REFERENCE_LENGTH)
    return curve_rate(WINDOW_CURVES[family][backward], queries) / reference


# Standard (unfused) attention on the H100 SXM5 (module docstring): the paper's lengths and, by head size,
# (forward, backward) TFLOP/s
STANDARD_LENGTHS = (512, 1024, 2048, 4096, 8192)
STANDARD_TFLOPS = {
    128: ((74.0, 100.0, 119.0, 133.0, 139.0), (104.0, 131.0, 159.0, 174.0, 181.0)),
    64: ((52.0, 63.0, 67.0, 72.0, 73.0), (68.0, 76.0, 88.0, 92.0, 95.0)),
}
STANDARD_HBM_BYTES_PER_S = 3.35e12  # the H100 SXM5's HBM3
STANDARD_TOKENS = 16384  # a batch's tokens
STANDARD_HIDDEN = 2048  # heads × head size
# passes over the scores and over a tokens × hidden tensor, each of 2 bytes an element, (forward, backward)
STANDARD_SCORE_PASSES = (4, 7)
STANDARD_TENSOR_PASSES = (10, 18)


@functools.cache
def _score_points(backward: bool, head_dim: int, rest_efficiency: float) -> tuple[tuple[int, float], ...]:
    """(length, share of HBM's peak) at each measured length at a measured head size (`score_fraction`)."""
    points = []
    heads = STANDARD_HIDDEN // head_dim
    for s, rate in zip(STANDARD_LENGTHS, STANDARD_TFLOPS[head_dim][backward], strict=True):
        flops = 4 * STANDARD_TOKENS * s * STANDARD_HIDDEN * (2.5 if backward else 1.0)
        scores = STANDARD_SCORE_PASSES[backward] * 2 * STANDARD_TOKENS * heads * s
        rest = STANDARD_TENSOR_PASSES[backward] * 2 * STANDARD_TOKENS * STANDARD_HIDDEN
        seconds = flops / (rate * 1e12) - rest / (rest_efficiency * STANDARD_HBM_BYTES_PER_S)
        points.append((s, scores / seconds / STANDARD_HBM_BYTES_PER_S))
    return tuple(points)


def _read(points: tuple[tuple[int, float], ...], length: float) -> float:
    """Linear in log2(length) between the points, held outside them."""
    length = min(max(length, points[0][0]), points[-1][0])
    for (low, low_value), (high, high_value) in itertools.pairwise(points):
        if length <= high:
            share = (math.log2(length) - math.log2(low)) / (math.log2(high) - math.log2(low))
            return low_value + (high_value - low_value) * share
    return points[-1][1]


def score_fraction(backward: bool, length: float, rest_efficiency: float, head_dim: float = 128) -> float:
    """The share of HBM's peak standard attention's score-sized passes reached at *length* keys a row
    (module docstring): derived at each measured length with the rest of its traffic at
    *rest_efficiency*, linear in log2(length) between them, held outside 512-8k; between head sizes 64
    and 128 linear between theirs, 64's below, 128's above (MLA's 192)."""
    wide = _read(_score_points(backward, 128, rest_efficiency), length)
    if head_dim >= 128:
        return wide
    narrow = _read(_score_points(backward, 64, rest_efficiency), length)
    return wide + (narrow - wide) * min(1.0, (128 - head_dim) / 64)


def block_ramp(length: float) -> float:
    """w/(w + 1) for w = *length*/128 key blocks: one block's worth of loading Q and writing O a walk."""
    walked = length / ATTENTION_BLOCK
    return walked / (walked + 1)


def curve_rate(curve: Curve, length: float) -> float:
    """The curve's TFLOP/s at *length*: linear in log2(length) between measured points, held past the
    longest, carried down by `block_ramp` below the shortest."""
    first, first_rate = curve[0]
    if length <= first:
        return first_rate * block_ramp(max(length, 1.0)) / block_ramp(first)
    for (low, low_rate), (high, high_rate) in itertools.pairwise(curve):
        if length <= high:
            share = (math.log2(length) - math.log2(low)) / (math.log2(high) - math.log2(low))
            return low_rate + (high_rate - low_rate) * share
    return curve[-1][1]


def _curves_factor(
    curves: Curves, backward: bool, causal: bool, mean_keys: float, level: Curves | None = None
) -> float:
    """*level*: the curves whose 16k no-mask rate the device's efficiency is (else *curves* themselves)."""
    reference = curve_rate((level or curves)[backward, False], REFERENCE_LENGTH)
    if causal:
        return curve_rate(curves[backward, True], 2 * mean_keys - 1) / reference
    return curve_rate(curves[backward, False], mean_keys) / reference


def sequence_factor(kernel: str, backward: bool, causal: bool, mean_keys: float, head_dim: float = 128) -> float:
    """A pass's rate over the kernel's 16k no-mask rate at its head size: the measured curve for its mask
    read at the keys a query walks (*mean_keys*) without the mask, at the triangle's side (2·mean_keys − 1)
    under it. Between head
    sizes 64 and 128, where both are measured, linear between their factors; below 64 64's; above 128 toward
    MLA's measured 192 / 128 pair where the kernel has it (`MLA_HEAD_DIM`, held above it), else 128's."""
    if kernel in REFERENCE_KERNEL:
        newest = ATTENTION_CURVES[REFERENCE_KERNEL[kernel]][128]
        return _curves_factor(_older_curves(kernel), backward, causal, mean_keys, newest)
    by_head = ATTENTION_CURVES[kernel]
    wide = _curves_factor(by_head[128], backward, causal, mean_keys)
    if head_dim > 128 and MLA_HEAD_DIM in by_head:  # MLA's measured pair, against 128's level
        latent = _curves_factor(by_head[MLA_HEAD_DIM], backward, causal, mean_keys, by_head[128])
        return wide + (latent - wide) * min(1.0, (head_dim - 128) / (MLA_HEAD_DIM - 128))
    if 64 not in by_head or head_dim >= 128:
        return wide
    narrow = _curves_factor(by_head[64], backward, causal, mean_keys)
    share = min(1.0, (128 - head_dim) / 64)
    return wide + (narrow - wide) * share


@functools.cache
def _older_curves(kernel: str) -> Curves:
    """An older release's curves (`REFERENCE_KERNEL`), built once."""
    return _older_release(ATTENTION_CURVES[REFERENCE_KERNEL[kernel]][128], _CUDNN_913_B200)


def cudnn_kernel(release: tuple[int, int] | None) -> str:
    """The sm100 cuDNN family a stated release runs (module docstring): 9.13's table before 9.17, else the
    newest measured (unstated: the newest)."""
    return "cudnn_sm100_913" if release is not None and release < CUDNN_SM100_NEWER else "cudnn_sm100"
