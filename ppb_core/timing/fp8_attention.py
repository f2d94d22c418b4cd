"""TransformerEngine's FP8 dot-product attention (Megatron's `fp8_dot_product_attention`, TE's recipe `fp8_dpa`):
how much faster cuDNN's FP8 flash kernels run than its BF16 ones, and the casts TE adds around them.

Rates. cuDNN's FP8 kernels measured beside its BF16 ones by NVIDIA/cudnn-frontend's attention benchmark
(benchmark/sdpa_benchmark_training, `data_type` bfloat16 / fp8 / mxfp8 in one run: the same heads, batch, lengths
and cuDNN), read as FP8 over BF16 at each length, pass and mask (`fp8_attention_factor`): a run's FP8 pass takes
its BF16 rate (`attention_rates`, the device's level) times that ratio. A ratio, not a rate, so the device's own
BF16 level stays what sets it; read on the part's die: sm100 (B200, GB200) from the GB200 run, sm103 (B300,
GB300) from the GB300 run, sm90 (H100, H200) from the H200 run.
- sm100: results/llama3.1/gb200/llama3.1_20260424_100750.csv (fb682ce, 2026-04-29; cuDNN 9.22, 64 query and 8
  KV heads of 128, batch 2, the non-deterministic backward), TFLOP/s at 2k, 4k, 8k, 16k, 32k:
  - BF16 forward no mask 1433, 1599, 1771, 1697, 1634; causal 1097, 1408, 1574, 1708, 1622; backward no mask
    1124, 1350, 1404, 1374, 1262; causal 885, 1148, 1332, 1328, 1226;
  - FP8 (per-tensor scales) forward no mask 1881, 2093, 2241, 2263, 2223; causal 1420, 1805, 2047, 2154, 2197;
    backward no mask 1214, 1577, 1772, 1836, 1825; causal 831, 1178, 1454, 1632, 1687;
  - MXFP8 forward no mask 1754, 1944, 2080, 2103, 2070; causal 1330, 1685, 1902, 1999, 2046; backward no mask
    1069, 1344, 1495, 1554, 1480; causal 745, 1054, 1287, 1436, 1425.
- sm103: results/llama3.1/gb300/llama3.1_20260424_100757.csv (fb682ce; the same setup on a GB300):
  - BF16 forward no mask 1805, 1900, 2017, 2014, 1836; causal 1373, 1703, 1856, 1915, 1953; backward no mask
    1213, 1429, 1531, 1536, 1427; causal 967, 1248, 1435, 1507, 1490;
  - FP8 forward no mask 2728, 2988, 3160, 3182, 3050; causal 1954, 2532, 2897, 3054, 3108; backward no mask
    1390, 1839, 2111, 2177, 2178; causal 944, 1396, 1781, 2035, 2128;
  - MXFP8 forward no mask 2443, 2693, 2870, 2889, 2814; causal 1751, 2272, 2570, 2727, 2785; backward no mask
    1164, 1469, 1636, 1689, 1654; causal 811, 1143, 1404, 1563, 1590.
- sm90: results/h200_919_only_cudnn/llama3.1_20260227_034703.csv (df73764, 2026-03-09; cuDNN 9.19.1 on an H200,
  the same heads, batch 1), milliseconds a call (forward, backward) at the same lengths, so the ratio is BF16's
  time over FP8's: BF16 no mask (0.217, 0.681), (0.819, 2.453), (3.182, 9.262), (12.524, 35.947), (50.769,
  153.841); causal (0.142, 0.464), (0.465, 1.450), (1.708, 5.083), (6.531, 19.002), (25.566, 75.688); FP8 no mask
  (0.158, 0.647), (0.565, 2.285), (2.149, 8.637), (8.335, 33.355), (33.120, 130.528); causal (0.098, 0.437),
  (0.322, 1.459), (1.141, 6.392), (4.357, 29.422), (16.884, 118.729). No MXFP8 on Hopper (TE refuses it there).
  Its causal FP8 backward runs slower than BF16's from 8k (0.80 at 8k, 0.65 at 16k): measured, taken as is.
- Sliding windows of at most `attention_rates.WINDOW_MEASURED` keys (GPT-OSS): the same benchmark's gpt_oss runs
  (results/gpt_oss/gb200/gpt_oss_20260424_100011.csv and gb300/gpt_oss_20260424_100022.csv, fb682ce; 128 heads of
  64, window 128, batch 2), TFLOP/s over the window's band at 2k-32k: GB200 BF16 forward 153, 161, 165, 167, 104,
  backward 176, 182, 187, 188, 186; FP8 forward 165, 173, 177, 179, 179, backward 78, 49, 28, 15, 8; MXFP8 forward
  153, 161, 164, 166, 168, backward 65, 41, 23, 12, 6. GB300 BF16 forward 160, 167, 172, 173, 108, backward 184,
  191, 198, 200, 199; FP8 forward 193, 203, 208, 211, 212, backward 89, 57, 33, 18, 9; MXFP8 forward 182, 194,
  200, 203, 204, backward 72, 45, 26, 14, 7. The FP8 backward halves with each doubling of the length: its
  time grows as a causal pass's over the whole sequence would (measured, taken as is). No sm90 window run in FP8.
Between measured lengths linear in log2 of the length, held outside 2k-32k; a pass reads its mask's ratio at the
length `attention_rates.sequence_factor` reads (the causal triangle's side, 2·mean keys − 1); a window pass at its
queries. Measured at head size 128 (64 for the window): other head sizes (MLA's 192) take the same ratio.

Which FP8 kernels run (TE v2.17.0, 2e559f062, Megatron-Bridge's pin for NeMo 26.06; attention/
dot_product_attention/dot_product_attention.py's recipe table and `init_fp8_metadata`, NVTE_DPA_FP8_RECIPE unset):
attention takes the linear layers' recipe, delayed scaling (FP8DS) and current scaling (FP8CS for Q, K, V, O, dO,
dQKV) per-tensor FP8, MXFP8 its block-scaled kernels; Float8BlockScaling has no FP8 attention (utils.py
`get_attention_backend`: "Disabling FusedAttention for Float8BlockScaling", and FP8 disables every other backend).

Casts (backends.py `FusedAttnFunc`, utils.py `combine_and_quantize` / `mxfp8_quantize_fast_path`, 2e559f062),
HBM bytes per element of a tensor, bc the 16-bit size (`cast_bytes`), with the kernels each takes:
- MXFP8: forward Q, K and V each quantized row- and column-wise in one pass (`get_attention_quantizers` sets both
  usages for QKV and dO; the fast path quantizes each tensor in its own layout): read bc, write 2 (scales, 1/32 a
  byte each, not counted); 3 quantize kernels, then the scales permuted to BHSD and swizzled, two batched kernels
  each (`multi_tensor_transpose_to_bhsd` row- and column-wise, `multi_tensor_swizzle_scales_for_gemm_unchecked_`
  twice): 7 launches. O comes out of cuDNN in 16 bits and is kept so; dQ, dK, dV too. Backward dO alike: 1
  quantize and 4 scale kernels.
- Per-tensor (delayed and current scaling): Megatron hands Q, K and V as three tensors (qkv_layout sbhd_sbhd_sbhd,
  `qkv_group` 3), which `combine_and_quantize` concatenates (`torch.cat`: read bc, write bc) and quantizes as one
  (read bc, write 1; current scaling reads it once more first for its amax, `Float8CurrentScalingQuantizer`).
  Delayed scaling's O comes out in FP8 and is dequantized for the output projection (read 1, write bc); its
  backward quantizes dO (read bc, write 1) and dequantizes dQ, dK, dV (`combine_and_dequantize`: their FP8 data
  concatenated, read 1, write 1, then dequantized, read 1, write bc). Current scaling keeps O and dQKV in 16 bits
  (NVTE_DPA_FP8CS_O_in_F16 defaults to 1) and quantizes dO with its amax first.
"""

from __future__ import annotations

import itertools
import math

from ppb_core.timing.attention_rates import WINDOW_MEASURED

FP8_ATTENTION_LENGTHS = (2048, 4096, 8192, 16384, 32768)

# die → precision → (backward, causal) → FP8 TFLOP/s over BF16 TFLOP/s at FP8_ATTENTION_LENGTHS (module docstring)
Ratios = dict[tuple[bool, bool], tuple[float, ...]]


def _over(fp8: tuple[float, ...], bf16: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(a / b for a, b in zip(fp8, bf16, strict=True))


_GB200_BF16 = {
    (False, False): (1433, 1599, 1771, 1697, 1634),
    (False, True): (1097, 1408, 1574, 1708, 1622),
    (True, False): (1124, 1350, 1404, 1374, 1262),
    (True, True): (885, 1148, 1332, 1328, 1226),
}
_GB200 = {
    "fp8": {
        (False, False): (1881, 2093, 2241, 2263, 2223),
        (False, True): (1420, 1805, 2047, 2154, 2197),
        (True, False): (1214, 1577, 1772, 1836, 1825),
        (True, True): (831, 1178, 1454, 1632, 1687),
    },
    "mxfp8": {
        (False, False): (1754, 1944, 2080, 2103, 2070),
        (False, True): (1330, 1685, 1902, 1999, 2046),
        (True, False): (1069, 1344, 1495, 1554, 1480),
        (True, True): (745, 1054, 1287, 1436, 1425),
    },
}
_GB300_BF16 = {
    (False, False): (1805, 1900, 2017, 2014, 1836),
    (False, True): (1373, 1703, 1856, 1915, 1953),
    (True, False): (1213, 1429, 1531, 1536, 1427),
    (True, True): (967, 1248, 1435, 1507, 1490),
}
_GB300 = {
    "fp8": {
        (False, False): (2728, 2988, 3160, 3182, 3050),
        (False, True): (1954, 2532, 2897, 3054, 3108),
        (True, False): (1390, 1839, 2111, 2177, 2178),
        (True, True): (944, 1396, 1781, 2035, 2128),
    },
    "mxfp8": {
        (False, False): (2443, 2693, 2870, 2889, 2814),
        (False, True): (1751, 2272, 2570, 2727, 2785),
        (True, False): (1164, 1469, 1636, 1689, 1654),
        (True, True): (811, 1143, 1404, 1563, 1590),
    },
}
# H200 milliseconds a call: (causal) → ((forward, backward) at each length); the ratio is BF16's time over FP8's
_H200_BF16_MS = {
    False: ((0.217, 0.681), (0.819, 2.453), (3.182, 9.262), (12.524, 35.947), (50.769, 153.841)),
    True: ((0.142, 0.464), (0.465, 1.450), (1.708, 5.083), (6.531, 19.002), (25.566, 75.688)),
}
_H200_FP8_MS = {
    False: ((0.158, 0.647), (0.565, 2.285), (2.149, 8.637), (8.335, 33.355), (33.120, 130.528)),
    True: ((0.098, 0.437), (0.322, 1.459), (1.141, 6.392), (4.357, 29.422), (16.884, 118.729)),
}


def _h200_ratios() -> Ratios:
    ratios: Ratios = {}
    for causal, backward in itertools.product((False, True), (False, True)):
        bf16 = tuple(times[backward] for times in _H200_BF16_MS[causal])
        fp8 = tuple(times[backward] for times in _H200_FP8_MS[causal])
        ratios[backward, causal] = _over(bf16, fp8)  # times: BF16's over FP8's is FP8's rate over BF16's
    return ratios


FP8_ATTENTION_RATIOS: dict[str, dict[str, Ratios]] = {
    "sm100": {p: {key: _over(rates, _GB200_BF16[key]) for key, rates in by.items()} for p, by in _GB200.items()},
    "sm103": {p: {key: _over(rates, _GB300_BF16[key]) for key, rates in by.items()} for p, by in _GB300.items()},
    "sm90": {"fp8": _h200_ratios()},
}

# window 128 (module docstring): die → precision → backward → FP8 over BF16 at FP8_ATTENTION_LENGTHS queries
_WINDOW_BF16 = {
    "sm100": {False: (153, 161, 165, 167, 104), True: (176, 182, 187, 188, 186)},
    "sm103": {False: (160, 167, 172, 173, 108), True: (184, 191, 198, 200, 199)},
}
_WINDOW_FP8 = {
    "sm100": {
        "fp8": {False: (165, 173, 177, 179, 179), True: (78, 49, 28, 15, 8)},
        "mxfp8": {False: (153, 161, 164, 166, 168), True: (65, 41, 23, 12, 6)},
    },
    "sm103": {
        "fp8": {False: (193, 203, 208, 211, 212), True: (89, 57, 33, 18, 9)},
        "mxfp8": {False: (182, 194, 200, 203, 204), True: (72, 45, 26, 14, 7)},
    },
}
FP8_WINDOW_RATIOS: dict[str, dict[str, dict[bool, tuple[float, ...]]]] = {
    die: {p: {b: _over(rates, _WINDOW_BF16[die][b]) for b, rates in by.items()} for p, by in precisions.items()}
    for die, precisions in _WINDOW_FP8.items()
}


def _read(ratios: tuple[float, ...], length: float) -> float:
    """Linear in log2(length) between the measured lengths, held outside them."""
    points = tuple(zip(FP8_ATTENTION_LENGTHS, ratios, strict=True))
    length = min(max(length, points[0][0]), points[-1][0])
    for (low, low_ratio), (high, high_ratio) in itertools.pairwise(points):
        if length <= high:
            share = (math.log2(length) - math.log2(low)) / (math.log2(high) - math.log2(low))
            return low_ratio + (high_ratio - low_ratio) * share
    return points[-1][1]


def fp8_attention_factor(
    die: str, precision: str, backward: bool, causal: bool, mean_keys: float, window: int = 0, queries: float = 0.0
) -> float:
    """A pass's FP8 rate over its BF16 rate (module docstring): a window of at most `WINDOW_MEASURED` keys at its
    *queries* where measured on the die; else the mask's ratio at the causal triangle's side (2·*mean_keys* − 1)
    or, without the mask, at *mean_keys*."""
    if window and 0 < window <= WINDOW_MEASURED and precision in FP8_WINDOW_RATIOS.get(die, {}):
        return _read(FP8_WINDOW_RATIOS[die][precision][backward], queries)
    ratios = FP8_ATTENTION_RATIOS[die][precision][backward, causal]
    return _read(ratios, 2 * mean_keys - 1 if causal else mean_keys)


# the kernel precision each TE recipe's FP8 attention runs (module docstring); blockwise has none
RECIPE_PRECISION = {"delayed": "fp8", "tensorwise": "fp8", "mxfp8": "mxfp8"}


def cast_bytes(recipe: str, bc: int) -> tuple[float, float, float, float]:
    """HBM bytes per element TE's FP8 attention adds under *recipe* (module docstring), bc the 16-bit size:
    (forward over Q, K and V; forward over O; backward over dO; backward over dQ, dK and dV)."""
    if recipe == "mxfp8":  # each tensor read once, written row- and column-wise
        return bc + 2.0, 0.0, bc + 2.0, 0.0
    if recipe == "tensorwise":  # the concatenation, the amax read, the cast; dO's amax and cast
        return 2.0 * bc + bc + bc + 1.0, 0.0, bc + bc + 1.0, 0.0
    # delayed: the concatenation and the cast, O dequantized; dO cast, dQKV's FP8 data concatenated and dequantized
    return 2.0 * bc + bc + 1.0, 1.0 + bc, bc + 1.0, 2.0 + 1.0 + bc


# kernels launched (forward, backward) by recipe (module docstring): MXFP8 3 quantizations and 4 scale kernels,
# dO's 1 and 4; current scaling the concatenation and a quantization of 4 kernels (amax, its reduction, the
# scale, the cast: `launches.FP8_QUANTIZE`), dO's 4; delayed the concatenation, the cast and O's dequantization,
# dO's cast and dQKV's concatenation and dequantization
CAST_LAUNCHES = {"mxfp8": (7.0, 5.0), "tensorwise": (5.0, 4.0), "delayed": (3.0, 3.0)}
