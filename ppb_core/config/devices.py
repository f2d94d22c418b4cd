"""The device catalog: memory, compute units, peak dense FLOPS per dtype, HBM and link bandwidths and latencies.

Every figure carries its public source in a comment. Memory is in MB of 2**20 bytes, as the
descriptions count it (what `nvidia-smi` reports as MiB). Rates are decimal: TFLOPS = 1e12
FLOP/s, GB/s = 1e9 B/s. Peak FLOPS are dense (no structured sparsity) 16-bit tensor-core
figures; `peak_flops(dtype)` gives the other dtypes (TF32 at half the 16-bit rate, FP8 at twice
it, as every datasheet below states). Link bandwidths are per device and per direction: the
intra-node figure is half the bidirectional NVLink/HCCS figure vendors quote, the inter-node one
a device's share of the node's scale-out NICs (one NIC per device on the systems below).

Achieved fractions are measured, not datasheet figures:
- `matmul_efficiency`: the best a large GEMM reaches, the Maximum Achievable Matmul FLOPS (MAMF)
  over peak, from Stas Bekman's ml-engineering "Maximum Achievable Matmul FLOPS comparison
  table" (compute/accelerator/README.md, BF16, torch 2.6-2.7): A100 SXM 271.2 of 312 (86.9%),
  H100 SXM 794.5 of 989 (80.3%, "H200 is the same"), B200 SXM 1745 of 2250 (77.6%). The GEMM
  model (`ppb_core.timing.kernels`) loses more to tile and wave quantization over `sm_count`.
  MAMF is measured warm (mamf-finder.py runs 30 s of matmuls before its sweep) on random data, so
  it carries the clock a GPU holds on GEMMs under its power limit; public H100 SXM training logs
  read 1920-1980 MHz (docs/timing-validation.md, Sustained clocks), so there is no separate sustained-clock figure.
- `attention_forward_efficiency` / `attention_backward_efficiency`: what a flash-attention kernel
  reaches at head size 128 and long sequences. A100: FlashAttention-2 (Dao 2023, "reaching up to
  230 TFLOPs/s" forward, 73%; its forward+backward benchmark without the mask at 16k, 203 TFLOPs/s,
  leaves the backward at 62.4%: `FLASH2_BACKWARD_A100`). H100/H200: the cuDNN kernels TransformerEngine runs on sm90, as
  FlashAttention-3's paper measured them on an H100 80GB SXM5 at head size 128, BF16, 16k tokens,
  without the causal mask (Shah et al. 2024, Fig. 5 and 6): forward 595 TFLOPS/s (0.602 of 989),
  backward 516 (0.522). (FlashAttention-3 itself: 648 and 561. Its "up to 740 TFLOPs/s" is head
  size 256; our head-size law does not raise 128's level, so 0.75 overstated every 128 head.)
  FlashAttention-2 (flash-attn 2, Dao-AILab's) in the same figures: 370 and 322 (0.374, 0.326); PyTorch
  SDPA's flash backend, aten's copy of its kernels, forward at `sdpa_flash2_forward_ratio` of it where the
  two were timed on one GPU (H100: 0.938; 1 elsewhere, unmeasured; backward unmeasured). B200: cuDNN
  9.22 on a GB200 in NVIDIA's cudnn-frontend benchmark (1697 and 1374 at head size 128, 16k, no
  mask), scaled by the two parts' MAMF: 0.722 and 0.585; its FlashAttention-2 and head-size-64
  figures at H100's. Ascend 910B: CANN's FlashAttentionScore forward as measured on a 910B2 (the
  profile's comment), its backward at A100's backward-over-forward ratio. `attention_head64_*` / `flash2_head64_*`: head
  size 64's rate over 128's in the same paper's figures (H100; 0 where unmeasured: the generic law).
  These are levels at 16k tokens without the mask; other lengths and the causal mask follow each
  kernel's measured curves (`ppb_core.timing.attention_rates`).
- `comm_efficiency`: NCCL's bus bandwidth over the link rate: nccl-tests all_reduce on 8 A100 SXM4
  reaches 230-250 GB/s of NVLink 3's 300 (0.8); NVLink SHARP all-reduce on 8 H100 more. Used for every
  collective but a measured all-gather / reduce-scatter / all-to-all (`nccl_gather_shares`: 8 H100 0.745;
  `nccl_alltoall_shares`: 8 H100 0.700). B200: 0.802,
  NCCL's own per-link figure for NVLink 5 (src/graph/topo.h SM100_NVLINK_BW, 40.1 of 50 GB/s).
- `nccl_gather_shares`: NCCL's all-gather / reduce-scatter bus bandwidth over the link rate inside one
  NVLink domain, by group size, where measured (nccl-tests in NVIDIA's aiconfigurator; `NCCL_GATHER_SHARES_*`):
  it grows with the group (8 B200: 0.683, 2: 0.473). Empty: `comm_efficiency`. All-reduce (NVLink SHARP),
  point-to-point and rings that leave the node keep `comm_efficiency`.
- `nccl_alltoall_shares`: the same for NCCL's all-to-all (nccl-tests alltoall_perf, the same collection;
  `NCCL_ALLTOALL_SHARES_*`: 8 B200 0.626, 2: 0.368), a group inside one NVLink domain. Empty: `comm_efficiency`.
- `nccl_small_all_reduce_us`: a few hundred bytes all-reduced inside one NVLink domain, by group size, where
  measured (the same collection; `NCCL_SMALL_ALL_REDUCE_US_*`: 8 H100 15.6 us): delayed scaling's amax
  reductions (`ppb_core.timing.fp8_amax`). Empty: 2(g-1) steps of `collective_latency_us`.
- `nic_efficiency`: the same over a scale-out NIC (0: `comm_efficiency`): NCCL's maintainers expect
  "46-48GB/s per NIC" from 400 Gb/s NDR InfiniBand in a ring (NVIDIA/nccl-tests issue #290, March
  2025): 0.94 of 50 GB/s on the NDR systems below. 200 Gb/s HDR (DGX A100): 0.96 of 25 GB/s, NVIDIA's
  nccl-tests all_reduce figures in its GTC 2024 talk S62129 ("Collective Communication Bandwidth", the slide
  stas00/ml-engineering network/benchmarks/README.md at 744d01e reproduces): one 200 Gb RDMA NIC 24 GB/s,
  DGX A100 nodes with eight 192 GB/s; nccl-tests issue #119 (2022, 3 nodes of 8 A100 SXM4, 4 HDR NICs a
  node) peaks at 96 of the 100 GB/s.
- `memory_efficiency`: the share of HBM bandwidth element-wise kernels reach (0.8; a stream copy
  reaches ~0.9, fused norms and activations less). An assumption, stated.
- `eager_memory_efficiency`: the same for PyTorch's eager element-wise and reduction kernels, one aten
  op each (torchtitan without torch.compile), where measured: Liger-Kernel's benchmarks of eager
  modules (0: `memory_efficiency`). A100 0.68, H100 0.82 (`EAGER_MEMORY_EFFICIENCY_*`).
- `elementwise_kernel_us`: the fixed GPU time of a memory-bound kernel beside its bytes at the element-wise
  rate, from NVIDIA's cuDNN RMSNorm benchmark at its smallest shapes (H200 1.6 us, GB200 and GB300 2.3;
  `ELEMENTWISE_KERNEL_US_*`); 0 where unmeasured (A100).
- `standard_attention_measured`: an unfused attention core's score-sized passes (its batched products,
  softmax and dropout over b·h·s² scores) at the HBM share PyTorch's standard attention reached in the
  FlashAttention-3 paper (H100 SXM5: forward 0.66, backward 0.60 of 3.35 TB/s at 4k keys and head size 128, lower below;
  `ppb_core.timing.attention_rates.score_fraction`); H100 and H800 (the same die and HBM3). Elsewhere
  `memory_efficiency`.

A run config may override every figure (`device:` in the run config, `ppb_core.config.run.Device`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

# Throughput of each dtype's tensor cores over the 16-bit rate (A100, H100, H200, B200 datasheets:
# TF32 is half of BF16/FP16, FP8 twice it; Ascend 910B runs FP32 matmuls through HF32 at half too).
DTYPE_RATE: dict[str, float] = {"bf16": 1.0, "fp16": 1.0, "fp32": 0.5, "fp8": 2.0}

# Megatron-LM's host time per kernel launch on Megatron CI's DGX H100 and DGX A100 systems
# (`DeviceProfile.host_kernel_us`): the median, over every host-bound dense functional-test case with
# golden values on the system (ppb's GPU work under half the measured seconds, every flag modelled), of
# the launch time that makes ppb give the case's measured seconds back (`PPB_MEGATRON_LM=DIR python
# bench/host_derive.py`, Megatron-LM d98e8a64): DGX H100 50 cases, quartiles 75.0-89.7; DGX A100 80
# cases, quartiles 103.0-122.4 (plain PyTorch ops at `launches.PLAIN_OP_SHARE` of a launch, unfused rotary
# computing its angles' cos and sin every call; TransformerEngine's unfused attention building its mask
# each forward, `flops.te_attention_mask`). The one 12-layer TP4 case that set them before gives 67.4 and
# 110.9 (71.6 and 117.9 counting every launch whole, without the mask).
HOST_KERNEL_US_DGX_H100 = 80.9
HOST_KERNEL_US_DGX_A100 = 112.3
# CANN's FlashAttentionScore on Ascend 910B (the ascend-910b profile's comment): the measured 42.60% of
# peak at 32768 tokens over the waves of its 256 query blocks on the 910B2's 24 cores (256/264) and
# FlashAttention-2's 32k-over-16k no-mask forward factor (0.988, `ppb_core.timing.attention_rates`);
# the backward at A100's backward-over-forward ratio (no public Ascend backward figure).
ASCEND_FLASH_FORWARD = 0.445
# FlashAttention-2's A100 backward at head size 128, 16k tokens, no mask (`flash2_backward_efficiency`): Dao-AILab/
# flash-attention's A100 benchmark (README "Performance", A100, assets/flash2_a100_fwd_bwd_benchmark.png at 0251105a,
# the FlashAttention-2 paper's figure; benchmarks/benchmark_flash_attention.py: hidden 2048, 16 heads of 128, batch
# 16k / length, FLOPs 4·b·s²·h·d forward, 2.5 times that backward, halved under the mask) reads forward + backward
# 203 TFLOP/s without the mask at 16k. A forward FLOP's pass pair took 3.5/203 of a time unit, the forward at the
# paper's 73% of 312 (227.8) 1/227.8 of it, so the backward's 2.5 FLOPs ran at 2.5 / (3.5/203 − 1/227.8) = 194.5
# TFLOP/s, 0.624 of 312 (the paper's "up to 63%" backward). Until session 32 ppb took 0.57 from the causal panel
# (189), then applied the causal curve on top (`attention_rates`) a second time. The other panels are held out
# (tests/test_timing_flash2_a100.py).
FLASH2_FORWARD_A100 = 0.73
FLASH2_BACKWARD_A100 = round(2.5 / (3.5 / 203 - 1 / (FLASH2_FORWARD_A100 * 312)) / 312, 3)  # 0.624
ASCEND_FLASH_BACKWARD = round(ASCEND_FLASH_FORWARD * FLASH2_BACKWARD_A100 / FLASH2_FORWARD_A100, 3)
# The same on Megatron CI's DGX GB200 (a Grace host): the median over its 50 host-bound dense cases with
# dgx_gb200 golden values, two 4-GPU trays of one NVL72 NVLink domain (the gb200 recipes' two-tray cases;
# most values of 93ebf8d72f), quartiles 85.6-106.8 (`PPB_MEGATRON_LM=DIR python bench/host_derive.py`,
# session 22). The 12-layer TP4 case alone, which set it before, gives 84.5 us ((0.30897 − 0.0004) / 3,652
# launches' worth, GPU work 0.022 s on the gb200 entry below), near the low quartile.
HOST_KERNEL_US_DGX_GB200 = 98.0
# DGX B200's host, no Megatron CI golden values on it: two Xeon Platinum 8570, 56 cores each at 2.1 GHz base,
# 4.0 GHz max boost (NVIDIA DGX B200 User Guide, "Introduction to NVIDIA DGX B200 Systems"), the successor
# (Emerald Rapids) of DGX H100's two Xeon Platinum 8480C, 56 cores at 2.0 / 3.8 GHz (DGX H100 datasheet),
# on the same platform. Megatron's launches are issued by one Python thread a rank: taken as DGX H100's
# median at the ratio of the two CPUs' max boost clocks, 80.9 · 3.8 / 4.0 = 76.9 us (an assumption: the
# same core design, the launch path bound by one core's clock).
HOST_KERNEL_US_DGX_B200 = round(HOST_KERNEL_US_DGX_H100 * 3.8 / 4.0, 1)

# The fixed time of a B200 GEMM kernel, the way H100's 5.3 us is found: XLA's measured matmul table
# (openxla/xla xla/service/gpu/model/default_matmul_perf_table.txtpb at 336bb15c, key "sm_100_B200",
# kernel times from CUPTI) times its smallest BF16 product, 256x256x256, at 4.96 us and the three of
# twice its work (256x512x256, 256x256x512, 512x256x256) at 4.95-5.33 us, whose tiles ppb's model
# (Blackwell's tile rule, `GEMM_FULL_INTENSITY_B200`) puts at 0.52-0.70 us: 4.24, 4.31, 4.44 and 4.63 us
# beyond them, median 4.4 (tests/test_timing_public_runs.py derives it by hand).
GEMM_KERNEL_US_B200 = 4.4
# H100's (and H200's) FP8 GEMM kernels pay the fixed time its BF16 ones do, 5.3 us (`fp8_gemm_kernel_us`). No
# CUPTI table times Hopper's FP8 kernels (XLA's sm_90 table holds BF16 and f32 products only), but NVIDIA's
# aiconfigurator times TensorRT-LLM's per-tensor FP8 Linear and its BF16 one on an H100 SXM in one harness
# (ai-dynamo/aiconfigurator 095f58a, systems/data/h100_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet, "collected":
# 3 warm-ups, 6 CUDA-graph replays) and the FP8 op's input cast alone (its quantize tables, computescale_perf +
# scale_matrix_perf): at its 18 smallest products (m 256 and 512, n and k 256-1024) the FP8 GEMM less its cast
# takes a median 3.80 us beyond ppb's FP8 tiles, the BF16 one 2.42 beyond its tiles (each shape's FP8 excess
# over BF16's 0.92-1.96 us): a small FP8 kernel takes no less than a BF16 one. On B200, where XLA's CUPTI table
# times both, FP8's fixed time is BF16's within 0.3 us (4.7 against 4.4) where the same harness reads 1.0 more:
# taken as sm_90's BF16 figure, the lower of what the two sources allow (tests/test_timing_public_runs.py). Before,
# 0: a small FP8 GEMM priced at a tenth of a BF16 one's time. H800's entry keeps 0 (its one FP8 row runs
# DeepGEMM's kernels, `fp8_tile_overhead_us`, whose measured H800 rates were read without a fixed time).
FP8_GEMM_KERNEL_US_HOPPER = 5.3
# The same for its FP8 GEMMs (`fp8_gemm_kernel_us`): the table's e4m3 x e4m3 -> bf16 products (per-tensor
# scales, cuBLASLt), 256x256x256 at 4.85 us, 256x512x256 at 5.41, 256x256x512 at 5.09, 512x256x256 at
# 5.22, against 0.35-0.53 us of FP8 tiles: 4.50, 5.04, 4.56, 4.85 beyond them, median 4.7.
FP8_GEMM_KERNEL_US_B200 = 4.7
# A full-rate tile's intensity on B200: H100's 64 times the per-SM 16-bit rate over H100's, with the
# shared memory bandwidth per SM unchanged: (2250/148) / (989/132) = 15.20 / 7.49 = 2.03, 64 · 2.03 = 130:
# a 2-SM 256×256 tile (128 a SM) runs at 128/130 of the ceiling, a 1-SM 128×128 one (64) at half.
GEMM_FULL_INTENSITY_B200 = round(64 * (2250 / 148) / (989 / 132))
# B200's flash attention over GB200's, the same kernel on both (`ATTENTION_FORWARD_B200`; session 29): NVIDIA's
# aiconfigurator times the context (prefill, causal) attention of one software stack on both parts in its
# power-sampling mode, every shape looped for at least a second (ai-dynamo/aiconfigurator 095f58a, aic-core/src/
# aiconfigurator_core/systems/data/{b200_sxm,gb200}/attention/vllm/0.22.0/context_attention_perf.parquet, the
# "power" column 800-1000 W on the B200, 1000-1170 W on the GB200; collector/helper.py `benchmark_with_power`).
# FlashInfer's kernels, BF16, head size 128, no window, 8k-16k tokens a sequence and 16k or more a call: the
# B200 runs at a median 0.918 of the GB200's rate over the 656 shapes both ran. TRT-LLM 1.3.0rc20's short
# tables (3 warm-up, 6 CUDA-graph replays; the same system directories) give 0.918 over the same shapes, its
# power-sampled 1.3.0rc15 (B200) and rc17 (GB200) tables 0.902. The MAMF ratio taken before (1745 / 1822 =
# 0.958) overstates the B200; the SMs times their maximum clocks read 148 · 1965 / (152 · 2062) = 0.928. No
# backward is timed (inference tables): taken for both passes.
B200_OVER_GB200_ATTENTION = 0.918
# cuDNN attention on B200 at head size 128, 16k tokens, no mask (the catalog entry derives them): NVIDIA's
# GB200 rates times that ratio, over B200's 16-bit peak.
ATTENTION_FORWARD_B200 = round(1697 * B200_OVER_GB200_ATTENTION / 2250, 3)  # 0.692
ATTENTION_BACKWARD_B200 = round(1374 * B200_OVER_GB200_ATTENTION / 2250, 3)  # 0.561
# What attention dropout adds to cuDNN's fused attention on sm_90 (`attention_dropout_cost`):
# NVIDIA/TransformerEngine issue #3312 (Aug 2026) times one DotProductAttention forward and backward,
# FusedAttention forced, BF16, sbhd (Megatron's layout), 4096 tokens in 4 sequences, 16 heads of 128,
# on an H200 with TE 2.15: 0.594 ms at dropout 0, 0.614 ms at 0.1: 0.614 / 0.594 - 1 = 3.4%. The kernel
# draws its mask from Philox inside, per score element, as its FLOPs go: taken as that share at any length.
ATTENTION_DROPOUT_COST_SM90 = round(0.614 / 0.594 - 1, 4)  # 0.0337
# MXFP8 GEMMs on Blackwell over per-tensor FP8 ones (`mxfp8_matmul_ratio`): TransformerEngine's GEMM
# profiling guide (NVIDIA/TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst at 1609c890e)
# times the 12 GEMMs of a hidden-4096, FFN-16384 layer at 15,872 tokens on a B300 with pre-quantized
# operands (benchmarks/gemm/benchmark_gemm.py `tex.generic_gemm`, the GEMM call alone with its scale
# swizzles): 6.812 ms a layer with current (per-tensor) scaling, 7.161 with MXFP8's 32-element blocks:
# 6.812 / 7.161 = 0.951. Taken for sm100's B200 and GB200 (B300 is Blackwell Ultra, sm103: the same
# block-scaled tensor-core path, an assumption).
MXFP8_MATMUL_RATIO_BLACKWELL = round(6.812 / 7.161, 3)  # 0.951
# TE's FP8 block scaling on Hopper (Float8BlockScaling, DeepSeek-style 1x128 activation and 128x128 weight
# scales; cuBLASLt's VEC128 / BLK128x128 scale modes) over per-tensor FP8 (`blockwise_matmul_ratio`): the same
# GEMM profiling guide (gemm_profiling.rst at 1609c890e, "Worked Example: 5B Model on H200", H200 NVL, the layer
# above at 31 x 512 = 15,872 tokens) times the 12 GEMMs in autocast mode (benchmark_gemm.py `benchmark_fp8_delayed`,
# `benchmark_fp8_block`: a te.Linear forward of each shape, quantizing the input and the weight every call): 18.978
# ms a layer with delayed scaling, 22.882 with block scaling (its pre-quantized mode skips block scaling, which
# Hopper's cuBLAS runs only 1D-by-2D). ppb's cast rule (`TimeModel._cast_bytes`) prices both recipes' quantization
# at the same bytes on Hopper: an input element 4 (delayed: read 2, write the byte and its transpose; blockwise:
# read 2, write a row-wise and a column-wise byte), a weight element 3 (row-wise only, the input wanting no
# gradient; the calls' elements as for the Blackwell quantize shares below): 8.944 GB at 0.8 of the H200's 4.8
# TB/s = 2.329 ms. The GEMMs themselves: (18.978 - 2.329) / (22.882 - 2.329) = 0.810 (0.829 with no cast time
# taken out). The guide's calls are all forward calls: block scaling accumulates in split mode in every pass (TE
# v2.10 recipe `Float8BlockScaling`), per-tensor FP8 only in dgrad and wgrad, so the ratio, taken for every pass,
# charges the backward if anything too much. Taken for the H100 SXM and the H200 (the same GH100 die, as
# `FP8_LAYER_GEMM_SHARE_H100`); the H800 row runs DeepGEMM's own rates, left at 1.
BLOCKWISE_MATMUL_RATIO_HOPPER = round((18.978 - 2.329) / (22.882 - 2.329), 3)  # 0.810
# Blackwell's GEMMs at a transformer layer's shapes, run back to back, over what its MAMF and ppb's tile
# model give them (`layer_gemm_share`, `fp8_layer_gemm_share`): the same guide's pre-quantized table on the
# B300 (100 timed iterations a shape after 10 warm-up, CUDA events) sums the 12 GEMMs of the hidden-4096,
# FFN-16384 layer at 15,872 tokens (4 forward, 4 dgrad, 4 wgrad) to 13.102 ms in BF16 and 6.812 ms in FP8
# with current (per-tensor) scaling. Ppb's tile model at B300's MAMF (ml-engineering's tables: 1769.0 BF16,
# 3353.3 FP8, both of 2250 / 4500 TFLOPS, B200's peaks) prices them at 11.403 and 6.044 ms: the measured
# loop runs at 0.870 and 0.887 of that (tests/test_timing_blackwell_layer_gemms.py). Taken as a share of
# each Blackwell part's own MAMF (B200 1745.0 / 3432.5, GB200 1822.0 / 3615.6): an assumption (B300 is
# Blackwell Ultra, sm103, on the same FP8 and BF16 tensor-core rates and the same 1000 W maximum TGP as
# B200, ml-engineering's power table; GB200's 1200 W may throttle less, unmeasured; its per-shape times show the big
# products slowest, QKV 15872x4096x12288 at 1491 TFLOP/s BF16 against the attention output's 4096x4096
# at 1735, so the share is a layer's mix, not a per-shape law). XLA's sm_100 table (single kernels, up
# to 4096^3) keeps setting the fixed times and the tile rule at the MAMF ceiling.
LAYER_GEMM_SHARE_BLACKWELL = round(11.403 / 13.102, 3)  # 0.870
FP8_LAYER_GEMM_SHARE_BLACKWELL = round(6.044 / 6.812, 3)  # 0.887
# The GB300's GEMMs over the B300's at that layer's shapes (`gb300` MAMF shares; session 28): NVIDIA's
# aiconfigurator times TensorRT-LLM's Linear on all four Blackwell parts with one software stack, TRT-LLM
# 1.3.0rc20 (ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/systems/data/{b300_sxm,gb300}/gemm/trtllm/
# 1.3.0rc20/gemm_perf.parquet at 095f58a, "provenance: collected"; collector/trtllm/collect_gemm.py: random BF16
# activations, 3 warm-up and 6 timed CUDA-graph replays, FP8 with its per-tensor activation cast). The guide's 12
# GEMMs at 16,384 tokens (the table's nearest to 15,872; wgrad as 4096 x N x 16384) sum to 12.3465 ms BF16 and
# 7.7926 ms FP8 on the "NVIDIA B300 SXM6 AC", 10.4916 and 6.9645 on the "NVIDIA GB300": 1.177 and 1.119 times
# the B300's rate (TRT-LLM 1.3.0rc10's tables: 1.147, 1.116; FP8 without its casts 1.148, below). The same die
# (sm_103, the catalog's 148 SMs and tile rule), 1400 W against 1100 W (the table's system files): the GB300 is
# priced at the B300's MAMF times that ratio, at the B300's layer shares.
GB300_OVER_B300_LAYER_GEMMS = round(12.3465 / 10.4916, 3)  # 1.177
# An FP8 row of those tables times TRT-LLM's `Linear` under dynamic per-tensor scaling: its FP8QDQLinearMethod.apply
# (tensorrt_llm/_torch/modules/linear.py) quantizes the input (`quantize_e4m3_per_tensor`: an amax pass and a cast)
# and then calls `cublas_scaled_mm`, so every FP8 latency holds its input's cast (collector/trtllm/collect_gemm.py:
# "the collected fp8 GEMM includes the compute-scale overhead"). The same collections time that cast alone on each
# part (systems/data/*/quantize/trtllm/1.3.0rc20/{computescale,scale_matrix}_perf.parquet; collector/trtllm/
# collect_computescale.py: `scale_matrix` the static cast, `compute_scale` the dynamic one's extra): the layer's 12
# casts (their m x k inputs) take 1.7250 ms on the B300, 1.7570 on the B200, 1.6956 on the GB200, 1.6779 on the
# GB300, 22% of the B300's FP8 layer. ppb prices TE's casts apart (`TimeModel._quantize_s`) and the B300's FP8 layer
# share comes from pre-quantized GEMMs, so the parts' FP8 GEMMs compare without them (session 29; session 28 took the
# latencies whole, the casts diluting the ratios): 7.7926 - 1.7250 = 6.0676 ms B300, 8.3149 - 1.7570 = 6.5579
# B200, 7.8183 - 1.6956 = 6.1227 GB200, 6.9645 - 1.6779 = 5.2866 GB300 (tests/test_timing_blackwell_layer_gemms.py).
FP8_LAYER_GEMMS_MS_B300 = 7.7926 - 1.7250
FP8_GB300_OVER_B300_LAYER_GEMMS = round(FP8_LAYER_GEMMS_MS_B300 / (6.9645 - 1.6779), 3)  # 1.148
# The same tables' FP8 layer against the B300's (`b200` and `gb200` FP8 MAMF shares; session 28, its casts out since
# session 29, above): 6.5579 ms on the "NVIDIA B200", 6.1227 on the "NVIDIA GB200", 6.0676 on the B300 (with the
# casts 8.3149, 7.8183, 7.7926: 0.937 and 0.997). ml-engineering's FP8 MAMF rows (B200 3432.5, torch 2.7.1+cu128;
# GB200 3615.6, 2.10.0.dev+cu130; B300 3353.3, 2.9.1+cu130) put them 1.024 and 1.078 times the B300's; one stack
# measures 0.925 and 0.991 (TRT-LLM 1.3.0rc10's tables: 0.873, 1.016). Both collections put both
# parts' FP8 GEMMs 6-12% under what the MAMF rows give at the B300's layer share, beyond their spread: a layer's FP8
# GEMMs on them run at the B300's (its FP8 MAMF at its layer share) times that ratio, their own MAMF rows kept for
# single kernels (XLA's sm_100 table bears B200's out), so their layer shares fall. A GB200 looped for a second or
# more a shape bears its level out: the same collector's power-sampled TRT-LLM 1.3.0rc17 tables (systems/data/gb200/
# {gemm,quantize}/trtllm/1.3.0rc17, 850-1170 W) time the layer's FP8 GEMMs at 8.9395 ms less 1.7053 of casts,
# 7.2342 ms, 1.4% over what the share below prices (7.13 ms). Their BF16 ratios (B200 0.971 /
# 0.961, GB200 1.001 / 1.033 at rc20 / rc10) agree with the MAMF rows' (0.986, 1.030) within the collections' own
# spread: BF16 stays ml-engineering's.
# (The GB200's 152 SMs against the B300's 148 change its tile quantization slightly: the ratio is taken whole.)
B200_OVER_B300_FP8_LAYER_GEMMS = round(FP8_LAYER_GEMMS_MS_B300 / (8.3149 - 1.7570), 3)  # 0.925
GB200_OVER_B300_FP8_LAYER_GEMMS = round(FP8_LAYER_GEMMS_MS_B300 / (7.8183 - 1.6956), 3)  # 0.991
_FP8_LAYER_B300_TFLOPS = 3353.3 * FP8_LAYER_GEMM_SHARE_BLACKWELL  # the B300's FP8 MAMF at its layer share
FP8_LAYER_GEMM_SHARE_B200 = round(_FP8_LAYER_B300_TFLOPS * B200_OVER_B300_FP8_LAYER_GEMMS / 3432.5, 3)  # 0.802
FP8_LAYER_GEMM_SHARE_GB200 = round(_FP8_LAYER_B300_TFLOPS * GB200_OVER_B300_FP8_LAYER_GEMMS / 3615.6, 3)  # 0.815
# cuDNN attention on B300 (the b300 entry derives them): NVIDIA's GB300 rates at head size 128, 16k tokens, no
# mask, at the B300's 16-bit tensor rate over the GB300's (that layer ratio), over B300's 16-bit peak.
ATTENTION_FORWARD_B300 = round(2014 / GB300_OVER_B300_LAYER_GEMMS / 2250, 3)  # 0.761
ATTENTION_BACKWARD_B300 = round(1536 / GB300_OVER_B300_LAYER_GEMMS / 2250, 3)  # 0.580
# TransformerEngine's FP8 quantize kernels on Blackwell, the share of HBM they reach (`mxfp8_quantize_efficiency`,
# `fp8_quantize_efficiency`, what ppb prices TE's casts at: `TimeModel._quantize_s`): the same guide times the same 12
# GEMMs a second way on the same B300, in autocast (benchmark_gemm.py `benchmark_fp8` / `benchmark_fp8_current`: a
# `te.Linear` forward under `te.autocast`, 100 calls back to back after 10 warm-up, CUDA events), each call quantizing
# its input and its weight before the GEMM (linear.py `_Linear.forward` at 1609c890e: the input row- and column-wise,
# `backward_needs_input` as the weight wants a gradient; the weight row-wise only, the input wanting none; re-quantized
# every call, `is_first_microbatch` None): 8.984 ms a layer with MXFP8, 9.147 with current scaling, against 7.161 and
# 6.812 pre-quantized. The difference is the quantization: 1.823 and 2.335 ms. The 12 calls (M, K, N as the guide's
# shapes: fprop, dgrad and wgrad each as a forward) quantize 1,495,269,376 input and 987,758,592 weight elements; ppb's
# cast rule (`TimeModel._cast_bytes`) counts 4 bytes an MXFP8 input element (read 2, write a row-wise and a
# column-wise byte; the 1/32-byte scales not counted) and 3 a weight element (row-wise only), 5 for current scaling's
# either (its amax pass reads 2, its cast reads 2 and writes 1; no transpose on Blackwell): 8.944 GB in 1.823 ms, 4.906
# TB/s, 0.640 of 7672 GB/s; 12.415 GB in 2.335 ms, 5.317 TB/s, 0.693 (tests/test_timing_quantize_rate.py). Against
# the 0.8 element-wise kernels are priced at (`memory_efficiency`). A B200 bears the MXFP8 one out: TE's MXFP8 cast
# alone, BF16 8192 x 8192 to both usages, in 52.34 us on a B200 (the "B200 (us)" column of ROCm/TransformerEngine
# pull request #598's CAST_ONLY table, May 2026), 4 x 67,108,864 B at 5.13 TB/s, 0.668. Taken for B200, GB200 and
# GB300 (the same 8 TB/s HBM3e label and TE's same quantize kernels, an assumption). Delayed scaling and blockwise:
# not measured.
MXFP8_QUANTIZE_SHARE_BLACKWELL = round((1495269376 * 4 + 987758592 * 3) / ((8.984 - 7.161) * 1e-3) / 7672e9, 3)
FP8_QUANTIZE_SHARE_BLACKWELL = round((1495269376 + 987758592) * 5 / ((9.147 - 6.812) * 1e-3) / 7672e9, 3)
# The same share on the 700 W H100 SXM (`layer_gemm_share`, `fp8_layer_gemm_share`), from TransformerEngine's
# getting-started benchmark (docs/getting_started/getting_started_pytorch.out at a97674070, "on an NVIDIA H100
# GPU": a hidden-4096, FFN-16384 layer at 8 x 2048 tokens, forward and backward, 100 iterations back to back,
# CUDA events): 35.709 ms in BF16 ("TE Unfused + TE Attention"), 23.406 ms with FP8 delayed scaling, the rest
# of the layer (cuDNN attention, norms, GeLU, dropout) the same in both. TE's GEMM profiling example times this
# layer's 12 GEMMs back to back, FP8 delayed scaling with its casts (autocast) at 18.978 / 32.014 = 0.593 of
# BF16 (gemm_profiling.rst at 1609c890e, H200 NVL, the same GH100 die): so the benchmark's BF16 GEMMs took
# (35.709 - 23.406) / (1 - 0.593) = 30.214 ms (655 TFLOP/s) and its FP8 ones 0.593 of that, 17.916 ms. Only
# the SXM part can run them so fast: the 600 W H200 NVL runs them at 599 TFLOP/s in that example, and the
# H100 NVL (350-400 W) and PCIe (300-350 W, 114 SMs) parts are held lower still (H100 datasheet). Ppb's tiles
# at H100's MAMF price the 12 GEMMs at 16,384 tokens at 25.585 ms (BF16) and 14.452 ms (FP8, beside which ppb
# prices TE's casts apart, 1.278 ms: `TimeModel._cast_bytes`, the FP8 GEMM ops' 1.578 ms beyond their tiles
# less the 0.300 of bias passes the BF16 ones carry too; each of the 12 kernels with its fixed time, 5.3 us,
# `FP8_GEMM_KERNEL_US_HOPPER`: 14.452 ms of tiles and 0.064 ms, 14.516 ms): the benchmark's loop runs at
# 25.585 / 30.214 = 0.847 and 14.516 / (17.916 - 1.278) = 0.872 of that (tests/test_timing_blackwell_layer_gemms.py;
# 0.869 while FP8 kernels carried no fixed time). MAMF
# (ml-engineering mamf-finder.py `benchmark_mm`, 744d01e) times each GEMM after a 256 MiB memset and an
# output copy, which at its best H100 shape (2048x2048x13312, 0.14 ms) take ~0.09 ms of each ~0.23 ms
# round: it runs at a lower GEMM duty, and power, than a layer's back-to-back GEMMs. Horace
# He ("Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data", 2024): "matmuls
# on the H100 are primarily not compute or bandwidth limited, they are power limited". H100 SXM training logs
# reading 1920-1980 MHz (docs/timing-validation.md, Sustained clocks) sample the clock at each log interval, not inside
# a GEMM phase. Taken for the H100 SXM and the H200 SXM: the same GH100 die (132 SMs, the same BF16 MAMF:
# ml-engineering's table, "H200 is the same") under the same 700 W limit, its HBM3e drawing more of it
# (Ujeniya et al., "Architectural Trade-offs in the Energy-Efficient Era: A Comparative Study of
# power-capping NVIDIA H100 and H200", arXiv 2604.11391, 2026: under power caps an H100 keeps a slight edge
# over the H200 on a compute-bound DGEMM); each at its own MAMF, as Blackwell's parts take the B300's share.
# The H800 left at 1 (its one row runs DeepGEMM at that kernel's own measured H800 rates, bench/public_runs.py).
LAYER_GEMM_SHARE_H100 = round(25.585 / 30.214, 3)  # 0.847
FP8_LAYER_GEMM_SHARE_H100 = round((14.452 + 12 * FP8_GEMM_KERNEL_US_HOPPER * 1e-3) / (17.916 - 1.278), 3)  # 0.872
# The same share on the 400 W A100 SXM (`layer_gemm_share`), from the one public loop of a large 16-bit GEMM
# on random data, 4.3 ms a call: Horace He, "Strangely, Matrix Multiplications on GPUs Run Faster When Given
# 'Predictable' Data" (thonking.ai, 2024; runs of 2022): cuBLAS at 8192x8192x8192 on an A100 reaches 258
# TFLOP/s, a CUTLASS kernel bound into the same script 257, randn inputs 257 against 295 with zeros (and
# CUTLASS's profiler, which fills its operands with integers, 288): two libraries meet at one rate that the
# data's bit flips, not the kernel, set, the 400 W limit (so a later cuBLAS does not lift it). Each such call
# takes 4.3 ms at that rate, so whatever the loop runs between calls (a flush, if any) is a small share of
# it. MAMF's A100 figure (271.2 at 1024x10240x5120, ml-engineering's table) is a
# 0.4 ms call between a 256 MiB memset and an output copy (mamf-finder.py `benchmark_mm` at 744d01e), a lower
# duty. Ppb's tiles at MAMF with Ampere's epilogue price 8192^3 at 4.146 ms, 265.2 TFLOP/s:
# 257 / 265.2 = 0.969 (tests/test_timing_a100_layer_gemms.py).
LAYER_GEMM_SHARE_A100 = round(257.0 / 265.2, 3)  # 0.969
# B200's attention back to back over its first iterations (`attention_back_to_back_share`): flashinfer-ai/
# flashinfer PR #2899 (Mar 2026) times FlashAttention-4 (BF16, batch 4, 8192 tokens, 16 heads of 128) 100
# times back to back on a B200: 1450 TFLOP/s at its peak (iterations 10-19), 1237 once throttled (70-79;
# SM clock 1965 -> ~1580 MHz, ~1000 W): 1237 / 1450 = 0.853. The catalog's cuDNN rates are single calls
# (cudnn-frontend benchmark_single_sdpa.py: an L2 flush and a synchronize before each, 10 iterations), as a
# training step's attention is not. GB200 too: its rates are the same single calls (the same table, on that
# part), and back to back its GEMMs hold no more of its MAMF than the 1000 W part's layer share gives
# (TransformerEngine's JAX dense example on a GB200, docs/examples/jax/dense.out at d0067d0da: 18.056 ms
# measured, 17.94 priced at `LAYER_GEMM_SHARE_BLACKWELL`; tests/test_timing_blackwell_layer_gemms.py): its
# 1200 W is not taken to keep its clock where a B200's drops (no back-to-back attention loop on a GB200).
ATTENTION_BACK_TO_BACK_SHARE_B200 = round(1237 / 1450, 3)  # 0.853
# PyTorch SDPA's flash backend (aten's own copy of flash-attn 2's kernels, torchtitan's attention until it
# selected cuDNN) against flash-attn 2 itself, forward, on one H100, one run (`sdpa_flash2_forward_ratio`):
# pytorch/benchmark pull request #2443 (Aug 2024) times tritonbench's flash_attention operator
# (torchbenchmark/operators/flash_attention/operator.py: `sdpa` under sdpa_kernel([SDPBackend.FLASH_ATTENTION]),
# `flash_v2` flash-attn's flash_attn_qkvpacked_func; BF16, 16 heads of 128, 16k tokens a batch, no mask, the
# FlashAttention-3 paper's setup), ms at 512 ... 16k: SDPA 0.245, 0.443, 0.846, 1.656, 3.279, 6.551; flash-attn 2
# 0.237, 0.420, 0.799, 1.559, 3.087, 6.142. At the catalog's reference length, 16k: 6.142 / 6.551 = 0.938 (336
# against 358 TFLOP/s); 0.941-0.947 from 1k to 8k. The catalog's FlashAttention-2 levels are flash-attn 2's (the
# FlashAttention-3 paper's series); no such pair is public for the backward (left at flash-attn 2's).
SDPA_FLASH2_FORWARD_RATIO = round(6.142 / 6.551, 3)  # 0.938


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    memory_mb: float
    peak_tflops: float  # dense 16-bit tensor-core peak
    hbm_bandwidth_gbs: float
    intra_node_bandwidth_gbs: float  # per direction
    inter_node_bandwidth_gbs: float  # per direction
    sm_count: int = 132  # streaming multiprocessors (NVIDIA) or AI cores (Ascend): the GEMM tiles' slots
    matmul_efficiency: float = 0.803  # MAMF / peak: the ceiling of a large GEMM
    # cuDNN's fused attention on H100 SXM5, head size 128, 16k tokens, no mask (Shah et al. 2024,
    # FlashAttention-3, Fig. 5c and 6b): 595 and 516 of 989 TFLOPS/s.
    attention_forward_efficiency: float = 0.602
    attention_backward_efficiency: float = 0.522
    # FlashAttention-2 (flash-attn 2) in the same figures: 370 and 322 TFLOPS/s.
    flash2_forward_efficiency: float = 0.374
    flash2_backward_efficiency: float = 0.326
    # PyTorch SDPA's FlashAttention-2 forward over flash-attn 2's on the same GPU (`SDPA_FLASH2_FORWARD_RATIO`,
    # measured on an H100; the parts that take H100's FlashAttention-2 figures take it too); 1: not measured.
    sdpa_flash2_forward_ratio: float = SDPA_FLASH2_FORWARD_RATIO
    # Head size 64's rate over head size 128's, where measured (0: the generic law of
    # `ppb_core.timing.kernels`, d/(d+16)). The same figures at head size 64, 16k tokens, no mask
    # (Shah et al. 2024, Fig. 5a and 6a): cuDNN forward 413 and backward 433 TFLOPS/s against 595 and
    # 516 at 128 (0.694, 0.839: far below the law's 0.90 forward); FlashAttention-2 324 and 291
    # against 370 and 322 (0.876, 0.904).
    attention_head64_forward: float = 0.694
    attention_head64_backward: float = 0.839
    flash2_head64_forward: float = 0.876
    flash2_head64_backward: float = 0.904
    # What attention dropout (> 0) adds to the fused attention kernel TransformerEngine runs (cuDNN),
    # forward and backward, as a share of its time, where measured (`ATTENTION_DROPOUT_COST_SM90`);
    # 0: not measured, priced as without dropout.
    attention_dropout_cost: float = 0.0
    # FP8 GEMMs (Hopper, Blackwell): MAMF over the FP8 peak (ml-engineering's float8_e4m3fn table:
    # H100 SXM 1402.6 of 1979, 70.9%; H200 1453.4, 73.4%; B200 3432.5 of 4500, 76.3%). 0: no FP8.
    fp8_matmul_efficiency: float = 0.709
    # MXFP8 GEMMs' rate over per-tensor FP8's on this device (`MXFP8_MATMUL_RATIO_BLACKWELL`); 1: as fast
    # (no measurement, or no MXFP8 tensor cores).
    mxfp8_matmul_ratio: float = 1.0
    # FP8 block-scaled GEMMs' (TE's blockwise recipe) rate over per-tensor FP8's (`BLOCKWISE_MATMUL_RATIO_HOPPER`);
    # 1: as fast (no measurement).
    blockwise_matmul_ratio: float = 1.0
    # A training step's GEMMs, back to back at a layer's shapes, over the tile model at the MAMF ceiling
    # (`LAYER_GEMM_SHARE_BLACKWELL`; FP8 ones `fp8_layer_gemm_share`); 1: no such measurement (ppb's
    # tiles at MAMF).
    layer_gemm_share: float = 1.0
    fp8_layer_gemm_share: float = 1.0
    # TransformerEngine's quantize kernels' share of HBM under MXFP8 and under current (tensorwise) scaling
    # (`MXFP8_QUANTIZE_SHARE_BLACKWELL`, `FP8_QUANTIZE_SHARE_BLACKWELL`); 0: not measured, `memory_efficiency`.
    mxfp8_quantize_efficiency: float = 0.0
    fp8_quantize_efficiency: float = 0.0
    # A training step's attention, back to back, over the single-call rates above
    # (`ATTENTION_BACK_TO_BACK_SHARE_B200`); 1: not measured.
    attention_back_to_back_share: float = 1.0
    # A fixed time an FP8 GEMM kernel spends per output tile beside its k loop (prologue, epilogue, scale
    # factors): 0 unless measured. DeepSeek's fine-grained-scaled FP8 kernels (DeepGEMM) show it: their
    # H800 rates fall with k at fixed m, n (deepseek-ai/DeepGEMM README, Feb 2025); a ceiling of 0.75 and
    # 4.2 us a tile reproduce its ten DeepSeek-V3 shapes within 7% (tests/test_timing_public_runs.py).
    fp8_tile_overhead_us: float = 0.0
    # A fixed time every 16-bit GEMM kernel spends beside its tiles' work (launch ramp, the first loads,
    # the last stores): XLA's measured sm_90 matmul table (tensorflow/tensorflow
    # third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h at 372d578b; kernel times from
    # CUPTI's tracer, xla/tools/matmul_perf_table_gen.cc) times its four smallest BF16 products, whose
    # work the tile model puts under 1 us, at 5.9-6.4 us: 5.2-5.6 us beyond it (median 5.3). B200: XLA's
    # measured sm_100 table (`GEMM_KERNEL_US_B200`). 0 where no such measurement is public (Ampere,
    # Ascend). FP8 kernels carry theirs per tile.
    gemm_kernel_us: float = 0.0
    # The same fixed time for an FP8 GEMM kernel, where measured: B200, XLA's sm_100 table
    # (`FP8_GEMM_KERNEL_US_B200`), per-tensor scales; MXFP8's block-scaled kernels are taken alike (no
    # public small-shape table); H100 and H200 their BF16 kernels' (`FP8_GEMM_KERNEL_US_HOPPER`). 0 elsewhere
    # (H800's DeepGEMM kernels carry `fp8_tile_overhead_us`).
    fp8_gemm_kernel_us: float = 0.0
    # Whether a GEMM tile's store overlaps the next tile's main loop: CUTLASS 3's warp-specialized
    # persistent kernels on Hopper and Blackwell (cuBLAS's sm90 kernels) do; Ampere's one-tile-per-CTA
    # kernels store after the loop (CUTLASS docs, "Efficient GEMM": epilogue after the mainloop).
    gemm_epilogue_overlapped: bool = True
    # Whether the device's cuBLAS GEMMs launch one CTA per SM with a static tile schedule (persistent),
    # so that a collective kernel holding some SMs pushes the CTAs that do not fit to after it
    # (`ppb_core.timing.kernels.Kernels.persistent_gemms`): H100 (pytorch/pytorch issue #143988, FSDP on
    # H100, "all the matmuls ... launch as many CUDA blocks as there are SMs on the GPU (i.e., 132)" and
    # take 2x as long beside a NCCL kernel; NVIDIA developer forum 337991, a 132-CTA GEMM beside a 24-CTA
    # all-gather nearly doubles on H100). Not Ampere (one CTA a tile, many waves). Not Blackwell: no public
    # measurement of its cuBLAS kernels beside a collective, and its cluster launch control hands tiles
    # out as CTAs start, not by a static schedule (CUTLASS's sm100 tile schedulers).
    persistent_gemms: bool = False
    # The operand intensity Tm·Tn/(Tm+Tn) a GEMM tile needs to run at the ceiling, its shared-memory
    # traffic against the tensor cores' rate: 64, a 128×128 tile, on Ampere and Hopper
    # (`ppb_core.timing.kernels.FULL_INTENSITY`). Blackwell doubled each SM's tensor rate but not its shared
    # memory bandwidth (FlashAttention-4's paper, Zadouri et al. 2026, §1: "tensor core throughput doubles
    # while ... shared memory bandwidth ... remain unchanged"), so its tiles need the intensity in
    # proportion to the per-SM rate (`GEMM_FULL_INTENSITY_B200`).
    gemm_full_intensity: float = 64.0
    memory_efficiency: float = 0.8
    # The share PyTorch's eager kernels reach (`EAGER_MEMORY_EFFICIENCY_A100`, `_H100`); 0: no public
    # measurement, `memory_efficiency`.
    eager_memory_efficiency: float = 0.0
    # The fixed GPU time of every memory-bound kernel beside its bytes (`ELEMENTWISE_KERNEL_US_*`); 0: not measured.
    elementwise_kernel_us: float = 0.0
    # Whether an unfused attention core's score-sized passes run at the HBM share standard attention was
    # measured at on this device (FlashAttention-3's paper, H100 SXM5: `attention_rates.score_fraction`);
    # False: `memory_efficiency`, as every element-wise pass.
    standard_attention_measured: bool = False
    comm_efficiency: float = 0.8
    nic_efficiency: float = 0.0  # NCCL's bus bandwidth over a NIC's rate; 0: comm_efficiency
    # (group size, share) pairs, sizes ascending: NCCL's all-gather / reduce-scatter bus bandwidth over
    # `intra_node_bandwidth_gbs` inside one NVLink domain (`gather_share`); (): `comm_efficiency`
    nccl_gather_shares: tuple[tuple[int, float], ...] = ()
    # the same for NCCL's all-to-all (`alltoall_share`, `NCCL_ALLTOALL_SHARES_*`); (): `comm_efficiency`
    nccl_alltoall_shares: tuple[tuple[int, float], ...] = ()
    # A few hundred bytes all-reduced inside one NVLink domain, by group size, in microseconds, where measured
    # (nccl-tests in NVIDIA's aiconfigurator; `NCCL_SMALL_ALL_REDUCE_US_*`): delayed scaling's amax reductions
    # (`ppb_core.timing.fp8_amax`); () : ppb's scalar rule, 2(g-1) steps of `collective_latency_us`.
    nccl_small_all_reduce_us: tuple[tuple[int, float], ...] = ()
    # How a node's devices reach each other: 0, through a switch (NVSwitch), each device reaching any
    # peer at its whole intra-node bandwidth; n, a full mesh of n point-to-point links a device (Ascend
    # 910B's 7 HCCS links), one link to each peer carrying 1/n of it, so a group of k ranks in the node
    # uses k-1 of them (`ppb_core.timing.comm`).
    intra_node_links: int = 0
    # Cost of one step of a collective inside a node (one hop of a ring, one peer of an all-to-all):
    # the alpha of an alpha-beta fit to nccl-tests' ring collectives on 8 NVLink GPUs, whose bus
    # bandwidth at a few MB is about half its peak (an 8 MB all_reduce ~120 us against ~60 us of pure
    # transfer, over 14 steps: ~5 us a step). Across nodes a step adds the NIC's and NCCL's proxy
    # (InfiniBand adapters are 1-2 us port to port): an assumption.
    collective_latency_us: float = 5.0
    inter_node_latency_us: float = 5.0
    # SMs a collective occupies while it runs beside compute, which the compute then lacks: NCCL runs
    # one thread block per channel, and TransformerEngine's userbuffers overlaps (Megatron's
    # --tp-comm-overlap) default to num_sm=16 for their bulk and pipelined methods
    # (transformer_engine/pytorch/module/base.py, initialize_ub). 16 taken for every collective.
    comm_sms: int = 16
    # CUDA compute capability (NVIDIA's CUDA GPUs table: A100 8.0, H100/H200/H800 9.0, B200 10.0);
    # 0 where the device is not a CUDA GPU (Ascend). Transformer Engine sizes its cuBLAS workspace by
    # it (ppb_core.memory.frameworks.workspaces).
    compute_capability: float = 9.0
    # Megatron-LM's host time per kernel launch on the device's system (Python, PyTorch's dispatcher,
    # TransformerEngine's wrappers, the launch), where the GPU waits for it (`ppb_core.timing.host`); 0:
    # no public measurement, the host taken to run ahead. Measured by Megatron CI's 12-layer, hidden-512
    # case gpt/gpt3_mcore_te_tp4_pp1_dist_optimizer_overlap_grad_reduce_param_gather (golden values of
    # adc69dba2d: 0.247 s an iteration on DGX H100, 0.406 s on DGX A100), whose GPU work ppb prices at
    # 0.028 / 0.043 s: what is left over the 3,436 launches an iteration of its busiest rank
    # (`ppb_core.timing.launches`; tests/test_timing_launches.py derives both by hand). Its other
    # per-iteration host work (data, optimizer, logging) is spread over those launches, so an upper bound.
    host_kernel_us: float = 0.0
    # The device's host CPU's max boost clock in GHz, the clock one Python thread a rank runs at (0: not
    # published for the system): DGX A100's two AMD EPYC 7742 (Zen 2) 2.25 GHz base, 3.4 GHz max boost
    # (NVIDIA DGX A100 datasheet); DGX H100's and DGX H200's two Xeon Platinum 8480C 2.0 / 3.8 GHz (DGX H100
    # datasheet); DGX B200's two Xeon Platinum 8570 2.1 / 4.0 GHz (DGX B200 User Guide). What Megatron
    # runs on the CPU itself (`ppb_core.timing.reporting.weight_hash_seconds`) takes its cycles at it.
    host_boost_ghz: float = 0.0
    # Pinned host memory <-> device copies, GB/s per direction, over the GPU's own host link (0: not
    # priced). H100 SXM5 and H200 SXM attach at PCIe Gen5 x16 (their datasheets: "PCIe Gen5: 128GB/s",
    # both directions); nvbandwidth's copy-engine tests on a node of 8x H200, each on its own Gen5 x16
    # link, measure 55.43 GB/s host-to-device and 55.06 device-to-host, 88% of the 63 GB/s spec
    # (stas00/ml-engineering network/README.md, "PCIe", at 744d01e): host-to-device, the direction whose
    # copies the compute waits for, 55.43. A100 SXM4 attaches at PCIe Gen4 x16 (datasheet "PCIe Gen4:
    # 64GB/s"): nvbandwidth v0.8's host_to_device_memcpy_ce on a node of 8x A100-SXM4-80GB (PCIe 4.0,
    # dual-socket DDR4) measures 24.81 GB/s on GPU 0, ~24.8 on each (NVIDIA/nvbandwidth issue #53,
    # 2025-11-21; the same run measures H2D ~11 and D2H ~24 with the other direction busy, not priced).
    # Megatron's fine-grained activation offloading and TE's CPU offloading copy at it
    # (`ppb_core.timing.offload`, `ppb_core.host_copies`).
    host_link_gbs: float = 0.0

    def replace(self, **changes: float) -> DeviceProfile:
        return dataclasses.replace(self, **changes)

    @property
    def inter_node_efficiency(self) -> float:
        """NCCL's share of a scale-out NIC's rate (`nic_efficiency`, else `comm_efficiency`)."""
        return self.nic_efficiency or self.comm_efficiency

    def gather_share(self, size: int) -> float:
        """NCCL's all-gather / reduce-scatter share of the link for a group of *size* ranks in one NVLink
        domain (`measured_share`; `comm_efficiency` where unmeasured)."""
        return measured_share(self.nccl_gather_shares, size) if self.nccl_gather_shares else self.comm_efficiency

    def alltoall_share(self, size: int) -> float:
        """NCCL's all-to-all share of the link for a group of *size* ranks in one NVLink domain (`measured_share`;
        `comm_efficiency` where unmeasured)."""
        return measured_share(self.nccl_alltoall_shares, size) if self.nccl_alltoall_shares else self.comm_efficiency

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense tensor-core FLOP/s for *dtype* (bf16, fp16, fp32 as TF32, fp8)."""
        return self.peak_tflops * 1e12 * DTYPE_RATE[dtype]


# PyTorch's eager element-wise and reduction kernels (one aten op each, as torchtitan runs its norm,
# activation and rotary without torch.compile): bytes each op reads and writes (counted as
# `ppb_core.census.ops` counts, autograd's formulas included) over the measured time, from
# linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv at ead96b6 (the "huggingface" / "torch"
# providers, median of triton.testing.do_bench), at the sizes whose largest tensor (64 MiB and more)
# exceeds the device's L2 cache, as a training step's do:
# - A100-SXM4-80GB (2024-09-03, Liger 0.2.1; rows 293-295, 317-319): the Llama RMSNorm of
#   benchmark_rms_norm.py at b5672a15 (bf16 x, fp32 weight; 2048 rows, hidden 8192-32768), 38 bytes an
#   element forward, 114 backward: 0.60-0.65 forward, 0.69-0.75 backward, mean 0.68.
# - H100 80GB HBM3 (2026-03/04, Liger 0.7.0): relu² (rows 1900-1901, 1932-1933; bf16 4096 × 8192 and
#   16384; 8 / 20 bytes an element) 0.82-0.89, and the Llama add + RMSNorm of
#   benchmark_fused_add_rms_norm.py at 1fdb668d (rows 1959-1961, 1995-1997; fp32, 2048 × 8192-32768;
#   40 / 112 bytes an element, both outputs' gradients) 0.74-0.85: mean 0.82.
# Left out: eager SwiGLU over `torch.chunk` halves (megatron_swiglu "torch", H100: 0.52-0.54 / 0.45),
# whose strided inputs torchtitan's separate w1 and w3 outputs are not; fused kernels (Liger's Triton,
# PyTorch's native LayerNorm and RMSNorm), which stay at `memory_efficiency`. tests/test_eager_rate.py
# recomputes both means from the transcribed rows.
EAGER_MEMORY_EFFICIENCY_A100 = 0.68
EAGER_MEMORY_EFFICIENCY_H100 = 0.82
# The fixed GPU time of a memory-bound kernel beside its bytes at the element-wise rate (`elementwise_kernel_us`),
# as `GEMM_KERNEL_US_B200` is a GEMM's: what a kernel takes however few bytes it moves (its CTAs' first wave
# launched, the first loads' DRAM latency, the last wave's tail), which the wider HBM makes a larger share of a
# mid-sized kernel. NVIDIA/cudnn-frontend benchmark/norms/results/{h200,gb200,gb300}/all_models_*.csv at 3929da2
# time one RMSNorm forward at a time (kernel durations from the PyTorch profiler, the L2 flushed before each
# call): at its two smallest shapes, bf16 8192 x 128 and 16384 x 128 (4,227,328 and 8,454,400 bytes as its
# `compute_bandwidth_bytes` counts them: x and y, the weight, the fp32 rstd), cuDNN's kernel and torch.compile's
# one Triton kernel take (bytes / its fwd_gbps) beyond those bytes at 0.8 of HBM (`memory_efficiency`; H200
# 4,800 GB/s, GB200 and GB300 7,672):
# - H200: cuDNN 1435.9 / 1957.0 GB/s, 2.944 / 4.320 us, beyond 1.843 / 2.118; compile 1738.2 / 2446.3, 1.331 / 1.254
# - GB200: cuDNN 1234.6 / 1860.6, 3.424 / 4.544 us, beyond 2.735 / 3.166; compile 1672.2 / 2565.0, 1.839 / 1.919
# - GB300: cuDNN 1223.2 / 1873.8, 3.456 / 4.512 us, beyond 2.767 / 3.134; compile 1672.2 / 2642.0, 1.839 / 1.823
# Medians: H200 1.6, GB200 2.3, GB300 2.3 us. They carry the same files' larger shapes: GB200's cuDNN forward
# at 2048 x 4096 (34 MB) reaches 0.49 of HBM, 0.8's bytes plus 2.3 us 0.56; at 16384 x 4096 and 8192 x 8192 (268 MB)
# 0.78-0.84 against 0.76; H200's at 34 MB 0.67-0.70 against 0.68. H100 and H800 take H200's (the
# same GH100 die, an assumption for their HBM3), B200 GB200's (the same sm_100 die and HBM3e label); A100: no
# such measurement public, 0. tests/test_timing_elementwise_kernel.py re-derives the medians by hand.
ELEMENTWISE_KERNEL_US_HOPPER = 1.6
ELEMENTWISE_KERNEL_US_B200 = 2.3
ELEMENTWISE_KERNEL_US_B300 = 2.3
# `DeviceProfile.host_link_gbs`: PCIe Gen5 x16 host-to-device as measured (nvbandwidth, 8x H200), Gen4 x16
# as measured (nvbandwidth, 8x A100-SXM4-80GB; until 2026-12-06 its spec times Gen5's measured share, 27.28)
HOST_LINK_GBS_GEN5 = 55.43
HOST_LINK_GBS_GEN4 = 24.81
# `DeviceProfile.nccl_gather_shares`: nccl-tests' all_gather_perf and reduce_scatter_perf inside one NVLink
# domain as NVIDIA's aiconfigurator collected them (ai-dynamo/aiconfigurator 095f58a,
# aic-core/src/aiconfigurator_core/systems/data/PART/comm/nccl/VERSION/nccl_perf.parquet; collector
# collector/network/collect_nccl.py: `-d half`, out-of-place time, message_size = bytes / 2). At the largest
# size measured, 2^28 half elements (537 MB, the whole gathered tensor), the bus bandwidth
# 2·message_size/latency·(g−1)/g (nccl-tests' busbw, the bytes ppb's ring moves: `ppb_core.timing.comm`) of
# all-gather and reduce-scatter, their mean over the link's rate per direction. GB/s (AG, RS):
# - A100 SXM4, NCCL 2.27.3, over 300: g2 150.0, 166.5; g4 191.6, 203.1; g8 205.3, 212.8
# - H100 SXM, NCCL 2.29.2, over 450: g2 258.5, 249.0; g4 317.7, 309.8; g8 335.2, 335.7
# - H200 SXM, NCCL 2.29.2, over 450: g2 257.6, 247.8; g4 316.6, 311.1; g8 336.8, 337.1
# - B200, NCCL 2.29.2, over 900: g2 438.4, 412.3; g4 566.6, 552.5; g8 617.0, 612.9
# - B300, NCCL 2.29.2, over 900: g2 444.4, 416.4; g4 572.4, 557.6; g8 620.6, 614.2
# - GB200, NCCL 2.29.2, over 900: g2 436.8, 408.6; g4 563.6, 549.1 (no larger group measured)
# - GB300, NCCL 2.29.2, over 900: g2 448.1, 416.7; g4 571.7, 555.6 (none larger)
# GB200 and GB300 reach their B200's / B300's figures at 2 and 4 within 1% (the same NVLink 5 switch), so
# their 8 is the B200's / B300's; every part holds its 8's share for larger groups (an NVL72's 16-72: not
# measured). Smaller messages reach less (B200 g8 at 268 MB: 598); ppb keeps its per-step latency for that.
NCCL_GATHER_SHARES_A100 = ((2, 0.528), (4, 0.658), (8, 0.697))
NCCL_GATHER_SHARES_H100 = ((2, 0.564), (4, 0.697), (8, 0.745))
NCCL_GATHER_SHARES_H200 = ((2, 0.562), (4, 0.697), (8, 0.749))
NCCL_GATHER_SHARES_B200 = ((2, 0.473), (4, 0.622), (8, 0.683))
NCCL_GATHER_SHARES_B300 = ((2, 0.478), (4, 0.628), (8, 0.686))
NCCL_GATHER_SHARES_GB200 = ((2, 0.470), (4, 0.618), (8, 0.683))
NCCL_GATHER_SHARES_GB300 = ((2, 0.480), (4, 0.626), (8, 0.686))
# `DeviceProfile.nccl_small_all_reduce_us`: the same collection's all_reduce_perf (NCCL 2.29.2, `-d half`, the
# tuner's own algorithm and protocol) at its smallest message, 256 half elements (512 B; flat to 4096 elements
# within 1 us): H100 SXM g2 6.18, g4 9.46, g8 15.59 us; B200 g2 10.26, g4 15.09, g8 25.09 us. ppb's scalar rule
# (`reporting.scalar_all_reduce_seconds`: 2(g-1) steps of 5 us, for Megatron CI's NCCL_ALGO=Ring cases) gives
# 10, 30, 70 us.
NCCL_SMALL_ALL_REDUCE_US_H100 = ((2, 6.18), (4, 9.46), (8, 15.59))
NCCL_SMALL_ALL_REDUCE_US_B200 = ((2, 10.26), (4, 15.09), (8, 25.09))
# `DeviceProfile.nccl_alltoall_shares`: nccl-tests' alltoall_perf inside one NVLink domain, the same collection as
# `NCCL_GATHER_SHARES_*` (aiconfigurator 095f58a, nccl_perf.parquet, op_name alltoall; NCCL 2.29.2, A100 2.27.3;
# `-d half`, out-of-place time, message_size = bytes / 2). nccl-tests' alltoall sends size/g bytes to each of the g
# ranks, (g−1)/g of it to the others; its busbw = algbw·(g−1)/g (nccl-tests doc/PERFORMANCE.md; NCCL's maintainers:
# "the alltoall busBw bandwidth is simply computed by multiplying the AlgorithmBw by (n-1)/n", NVIDIA/nccl-tests
# issue #130), the bytes ppb's all-to-all moves to the others (`ppb_core.timing.comm`). At 2^28 half elements
# (537 MB), 2·message_size/latency·(g−1)/g over the link's rate per direction, GB/s (latency ms):
# - A100 SXM4, over 300: g2 164.2 (1.6353), g4 194.9 (2.0657), g8 203.1 (2.3135)
# - H100 SXM, over 450: g2 279.9 (0.95887), g4 288.2 (1.39704), g8 315.2 (1.49042)
# - H200 SXM, over 450: g2 297.7 (0.90169), g4 319.0 (1.26238), g8 311.1 (1.50991)
# - B200, over 900: g2 331.4 (0.81), g4 488.0 (0.82516), g8 563.1 (0.83417)
# - B300, over 900: g2 341.3 (0.78653), g4 502.1 (0.802), g8 580.0 (0.8099)
# - GB200, over 900: g2 332.4 (0.8076), g4 487.8 (0.82537) (none larger)
# - GB300, over 900: g2 349.7 (0.76764), g4 512.0 (0.78648) (none larger)
# NCCL runs an all-to-all as grouped sends and receives over its p2p channels (src/enqueue.cc
# `scheduleP2pTasksToPlan`, v2.29.3-1), not over NVLink SHARP or a ring: every part stays well under the 0.8 of
# `comm_efficiency` at 2 and 4 ranks and under it at 8. GB200 / GB300 match B200 / B300 at 2 and 4 ranks within 3%
# (the same NVLink 5 switch), so their 8 is B200's / B300's, and every part holds its 8's share for larger groups
# (an NVL72's 16-72: not measured), as `NCCL_GATHER_SHARES_*` do. Smaller messages reach less (B200 g8 at 134 MB:
# 0.551); ppb keeps its per-step latency for that.
NCCL_ALLTOALL_SHARES_A100 = ((2, 0.547), (4, 0.650), (8, 0.677))
NCCL_ALLTOALL_SHARES_H100 = ((2, 0.622), (4, 0.640), (8, 0.700))
NCCL_ALLTOALL_SHARES_H200 = ((2, 0.662), (4, 0.709), (8, 0.691))
NCCL_ALLTOALL_SHARES_B200 = ((2, 0.368), (4, 0.542), (8, 0.626))
NCCL_ALLTOALL_SHARES_B300 = ((2, 0.379), (4, 0.558), (8, 0.644))
NCCL_ALLTOALL_SHARES_GB200 = ((2, 0.369), (4, 0.542), (8, 0.626))
NCCL_ALLTOALL_SHARES_GB300 = ((2, 0.389), (4, 0.569), (8, 0.644))


def measured_share(shares: tuple[tuple[int, float], ...], size: int) -> float:
    """A share measured at a few group sizes (ascending) for *size*: linear in the group size between
    two measured sizes, held at the nearest one outside them."""
    if size <= shares[0][0]:
        return shares[0][1]
    for (low, low_share), (high, high_share) in itertools.pairwise(shares):
        if size <= high:
            return low_share + (high_share - low_share) * (size - low) / (high - low)
    return shares[-1][1]


DEVICE_CATALOG: dict[str, DeviceProfile] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4 80GB: 80GB HBM2e (81920 MiB in nvidia-smi),
    # 312 TFLOPS BF16/FP16 dense, 2,039 GB/s; NVLink 3 600 GB/s bidirectional (300 per direction);
    # DGX A100 user guide: eight 200 Gb/s HDR InfiniBand adapters, one per GPU (25 GB/s).
    # NVIDIA A100 whitepaper: 108 SMs. MAMF 271.2 TFLOPS (86.9%).
    "a100-80gb": DeviceProfile(
        "a100-80gb",
        81920,
        312.0,
        2039.0,
        300.0,
        25.0,
        sm_count=108,
        matmul_efficiency=0.869,
        attention_forward_efficiency=FLASH2_FORWARD_A100,
        attention_backward_efficiency=FLASH2_BACKWARD_A100,
        flash2_forward_efficiency=FLASH2_FORWARD_A100,
        flash2_backward_efficiency=FLASH2_BACKWARD_A100,
        sdpa_flash2_forward_ratio=1.0,  # not measured
        # no measured head-size-64 rates on A100: the generic law
        attention_head64_forward=0.0,
        attention_head64_backward=0.0,
        flash2_head64_forward=0.0,
        flash2_head64_backward=0.0,
        fp8_matmul_efficiency=0.0,
        gemm_epilogue_overlapped=False,
        layer_gemm_share=LAYER_GEMM_SHARE_A100,
        compute_capability=8.0,
        host_kernel_us=HOST_KERNEL_US_DGX_A100,
        host_boost_ghz=3.4,
        host_link_gbs=HOST_LINK_GBS_GEN4,
        eager_memory_efficiency=EAGER_MEMORY_EFFICIENCY_A100,
        # HDR InfiniBand at NCCL's measured 24 of 25 GB/s (module docstring, `nic_efficiency`): until session
        # 30 unset, so NVLink's 0.8 (`comm_efficiency`), 20 GB/s a NIC
        nic_efficiency=0.96,
        # NCCL on eight A100 SXM behind NVSwitch runs its collectives over 24 channels, one thread
        # block (SM) each ("Channel 23/24" in the NCCL log of NVIDIA/nccl-tests issue #100, HGX A100
        # 80GB, Dec 2021): the SMs a collective takes from the GEMM it hides behind.
        comm_sms=24,
        nccl_gather_shares=NCCL_GATHER_SHARES_A100,
        nccl_alltoall_shares=NCCL_ALLTOALL_SHARES_A100,
    ),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: 80GB HBM3 (81559 MiB in nvidia-smi), 989 TFLOPS
    # BF16 dense (1,979 with sparsity), 3.35 TB/s; NVLink 4 900 GB/s bidirectional; DGX H100:
    # eight 400 Gb/s ConnectX-7 NDR adapters, one per GPU (50 GB/s). H100 whitepaper: 132 SMs (SXM5).
    # MAMF 794.5 TFLOPS (80.3%).
    "h100-80gb": DeviceProfile(
        "h100-80gb",
        81559,
        989.0,
        3350.0,
        450.0,
        50.0,
        sm_count=132,
        elementwise_kernel_us=ELEMENTWISE_KERNEL_US_HOPPER,
        persistent_gemms=True,
        nic_efficiency=0.94,
        gemm_kernel_us=5.3,
        fp8_gemm_kernel_us=FP8_GEMM_KERNEL_US_HOPPER,
        layer_gemm_share=LAYER_GEMM_SHARE_H100,
        fp8_layer_gemm_share=FP8_LAYER_GEMM_SHARE_H100,
        blockwise_matmul_ratio=BLOCKWISE_MATMUL_RATIO_HOPPER,
        attention_dropout_cost=ATTENTION_DROPOUT_COST_SM90,
        host_kernel_us=HOST_KERNEL_US_DGX_H100,
        host_boost_ghz=3.8,
        host_link_gbs=HOST_LINK_GBS_GEN5,
        eager_memory_efficiency=EAGER_MEMORY_EFFICIENCY_H100,
        standard_attention_measured=True,
        nccl_gather_shares=NCCL_GATHER_SHARES_H100,
        nccl_alltoall_shares=NCCL_ALLTOALL_SHARES_H100,
        nccl_small_all_reduce_us=NCCL_SMALL_ALL_REDUCE_US_H100,
    ),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: 141GB HBM3e (143771 MiB in nvidia-smi), 989 TFLOPS
    # BF16 dense, 4.8 TB/s; NVLink 4 900 GB/s bidirectional; DGX H200: 400 Gb/s per GPU. The same
    # GH100 die as H100 SXM: 132 SMs, MAMF as H100's.
    "h200": DeviceProfile(
        "h200",
        143771,
        989.0,
        4800.0,
        450.0,
        50.0,
        sm_count=132,
        elementwise_kernel_us=ELEMENTWISE_KERNEL_US_HOPPER,
        persistent_gemms=True,
        fp8_matmul_efficiency=0.734,
        nic_efficiency=0.94,
        gemm_kernel_us=5.3,
        fp8_gemm_kernel_us=FP8_GEMM_KERNEL_US_HOPPER,
        # back to back at the H100 SXM's shares of the tiles at MAMF (`LAYER_GEMM_SHARE_H100`: same die, 700 W)
        layer_gemm_share=LAYER_GEMM_SHARE_H100,
        fp8_layer_gemm_share=FP8_LAYER_GEMM_SHARE_H100,
        blockwise_matmul_ratio=BLOCKWISE_MATMUL_RATIO_HOPPER,
        attention_dropout_cost=ATTENTION_DROPOUT_COST_SM90,
        # the host of DGX H100: NVIDIA's 8-GPU H200 system runs the same two Xeon Platinum 8480C
        # (mlcommons/inference_results_v4.1 closed/NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json;
        # DGX H100 datasheet: dual Xeon Platinum 8480C)
        host_kernel_us=HOST_KERNEL_US_DGX_H100,
        host_boost_ghz=3.8,
        host_link_gbs=HOST_LINK_GBS_GEN5,
        nccl_gather_shares=NCCL_GATHER_SHARES_H200,
        nccl_alltoall_shares=NCCL_ALLTOALL_SHARES_H200,
    ),
    # NVIDIA DGX B200 datasheet: 1,440 GB HBM3e over 8 GPUs (nvidia-smi shows 183359 MiB per GPU,
    # e.g. NVIDIA/TensorRT-LLM issue #10278), 2.25 PFLOPS dense BF16 per GPU (4.5 with sparsity;
    # also torchao's roofline table), NVLink 5 1.8 TB/s bidirectional, 400 Gb/s ConnectX-7 per GPU.
    # HBM: the datasheet says 8 TB/s; the driver's 7680-bit bus at 3996 MHz DDR gives 7.67 TB/s
    # (pytorch/ao pull request #4002), which is what kernels can approach, so we use that. Its share
    # element-wise kernels reach stays the catalog's 0.8 (`memory_efficiency`), which NVIDIA's cuDNN
    # RMSNorm measurement on a GB200 (the same 8 TB/s HBM3e; NVIDIA/cudnn-frontend benchmark/norms/
    # results/gb200/all_models_20260226_180237.csv at df73764) bears out for the forward: 5.99-6.42 TB/s
    # on the four Llama-sized norms, 0.78-0.84 of 7.67 (mean 6.13, 0.80); their backward, 4.79-6.19
    # (mean 5.28, 0.69), runs below it.
    # 148 SMs (NVIDIA Blackwell architecture technical brief: two dies of 74). MAMF 1745 (77.6%). A layer's FP8
    # GEMMs at the B300's times aiconfigurator's measured ratio (`FP8_LAYER_GEMM_SHARE_B200`: 0.802 of its MAMF).
    "b200": DeviceProfile(
        "b200",
        183359,
        2250.0,
        7672.0,
        900.0,
        50.0,
        sm_count=148,
        elementwise_kernel_us=ELEMENTWISE_KERNEL_US_B200,
        nic_efficiency=0.94,
        matmul_efficiency=0.776,
        fp8_matmul_efficiency=0.763,
        mxfp8_matmul_ratio=MXFP8_MATMUL_RATIO_BLACKWELL,
        layer_gemm_share=LAYER_GEMM_SHARE_BLACKWELL,
        fp8_layer_gemm_share=FP8_LAYER_GEMM_SHARE_B200,
        mxfp8_quantize_efficiency=MXFP8_QUANTIZE_SHARE_BLACKWELL,
        fp8_quantize_efficiency=FP8_QUANTIZE_SHARE_BLACKWELL,
        attention_back_to_back_share=ATTENTION_BACK_TO_BACK_SHARE_B200,
        compute_capability=10.0,
        gemm_kernel_us=GEMM_KERNEL_US_B200,
        fp8_gemm_kernel_us=FP8_GEMM_KERNEL_US_B200,
        gemm_full_intensity=GEMM_FULL_INTENSITY_B200,
        # NCCL's own model of an NVLink 5 link: SM100_NVLINK_BW 40.1 GB/s of its 50 per direction (NVIDIA/
        # nccl src/graph/topo.h, v2.27; 18 links: "maxBw 721.8" of 900 in a DGX B200's NCCL log, NVIDIA/nccl
        # issue #1807): 0.802, as H100's 20.6 of 25 (0.824) sits by the 0.8 measured there. (That issue's
        # all_reduce_perf on 8 B200 reaches 830 GB/s busbw: NVLink SHARP's in-switch reduction, not a ring.)
        comm_efficiency=0.802,
        # Attention: cuDNN, TransformerEngine's backend on sm100, measured by NVIDIA on a GB200 (the same
        # sm_100 GPU at a higher clock): NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/
        # llama3.1/gb200/llama3.1_20260424_100750.csv (fb682ce; cuDNN 9.22, frontend 1.21.1), BF16, head
        # size 128, 16k tokens, no mask (Llama 3.1 405B's 64 query and 8 KV heads), FLOPs counted as the
        # FlashAttention-3 figures above (backward 2.5x): forward 1697, backward 1374 TFLOP/s. On B200 at
        # the two parts' measured attention ratio (`B200_OVER_GB200_ATTENTION`, 0.918; session 29, before it
        # their MAMF ratio 1745/1822): 1697 · 0.918 = 1558 (0.692 of 2250), 1374 · 0.918 = 1261 (0.561).
        # (FlashAttention-4's paper, Zadouri et
        # al. 2026, arXiv 2603.05451, puts FA4's B200 forward at up to 1613 TFLOP/s, "up to 1.3x" cuDNN
        # 9.13, an older cuDNN.) No public head-size-64 rate without a sliding window on sm100 (that
        # table's GPT-OSS rows have one): the head-size-64 ratios stay H100's, and FlashAttention-2's
        # rates H100's fractions. Host: DGX B200's Xeons from DGX H100's (`HOST_KERNEL_US_DGX_B200`),
        # no DGX B200 case in Megatron CI's golden values (its Blackwell values are DGX GB200's, Grace).
        attention_forward_efficiency=ATTENTION_FORWARD_B200,
        attention_backward_efficiency=ATTENTION_BACKWARD_B200,
        host_kernel_us=HOST_KERNEL_US_DGX_B200,
        host_boost_ghz=4.0,
        nccl_gather_shares=NCCL_GATHER_SHARES_B200,
        nccl_alltoall_shares=NCCL_ALLTOALL_SHARES_B200,
        nccl_small_all_reduce_us=NCCL_SMALL_ALL_REDUCE_US_B200,
    ),
    # NVIDIA GB200 (one of a Grace Blackwell superchip's two GPUs, as in an NVL72 rack's 4-GPU compute
    # trays, Megatron CI's dgx_gb200): the B200's sm_100 GPU run faster. ml-engineering's tables
    # (compute/accelerator/README.md): 2,500 TFLOPS dense BF16 per GPU, 186 GB HBM3e at 8.00 TB/s, a
    # device-reported maximum SM clock of 2062 MHz (B200 1965), MAMF 1822.0 BF16 (72.9%) and 3615.6 FP8
    # of 5000 (72.3%; a layer's FP8 GEMMs at the B300's times aiconfigurator's measured ratio,
    # `FP8_LAYER_GEMM_SHARE_GB200`: 0.815 of it). Memory: the 186 GB label read as GiB (B200's 180
    # GB label is 183,359 MiB in nvidia-smi), 190,464 MiB, an approximation. HBM, NVLink 5 (900 GB/s a direction,
    # all 72 GPUs of the rack on it), NCCL's NVLink figure, the GEMM kernels' fixed times: B200's (the same HBM3e
    # label, links and sm_100 kernels). SMs: 152, the count GB200's GPU reports (PyTorch's device properties,
    # e.g. Inductor's generated kernels for compute capability 10.0 record multi_processor_count=152, and
    # kernel benchmarks on GB200 state "152 SMs" beside B300's 148); NVIDIA's MIG profiles bear it out, its
    # 1g.47gb and 2g.47gb instances 32 and 38 SMs against B200's 1g.45gb and 2g.45gb 30 and 36 (`nvidia-smi
    # mig -lgip` in NVIDIA/gpu-operator pull requests #1303, HGX GB200, and #1242, B200). A
    # ConnectX-7 400 Gb/s NIC per GPU out of the rack (50 GB/s). Attention: NVIDIA's cuDNN 9.22 rates
    # measured on this GPU (the B200 entry's source), 1697 and 1374 of 2500 TFLOP/s, single calls run back
    # to back at B200's share (`ATTENTION_BACK_TO_BACK_SHARE_B200`). Host: Grace
    # (Arm Neoverse V2), measured by Megatron CI's host-bound dense cases (`HOST_KERNEL_US_DGX_GB200`).
    "gb200": DeviceProfile(
        "gb200",
        190464,
        2500.0,
        7672.0,
        900.0,
        50.0,
        sm_count=152,
        elementwise_kernel_us=ELEMENTWISE_KERNEL_US_B200,
        nic_efficiency=0.94,
        matmul_efficiency=0.729,
        fp8_matmul_efficiency=0.723,
        mxfp8_matmul_ratio=MXFP8_MATMUL_RATIO_BLACKWELL,
        layer_gemm_share=LAYER_GEMM_SHARE_BLACKWELL,
        fp8_layer_gemm_share=FP8_LAYER_GEMM_SHARE_GB200,
        mxfp8_quantize_efficiency=MXFP8_QUANTIZE_SHARE_BLACKWELL,
        fp8_quantize_efficiency=FP8_QUANTIZE_SHARE_BLACKWELL,
        attention_back_to_back_share=ATTENTION_BACK_TO_BACK_SHARE_B200,
        compute_capability=10.0,
        gemm_kernel_us=GEMM_KERNEL_US_B200,
        fp8_gemm_kernel_us=FP8_GEMM_KERNEL_US_B200,
        comm_efficiency=0.802,
        # B200's: GB200's higher rate is 4 more of the same SM on a faster clock (2500 = 152 SMs · 8192 FLOP a
        # clock · 2.01 GHz, under its device-reported maximum SM clock 2062 MHz; B200 2250 = 148 · 8192 · 1.86
        # GHz, 1965 MHz max), each SM doing the same work a clock, and shared memory, whose bandwidth a clock
        # the rule holds fixed, runs on that clock: the intensity a tile needs is B200's
        # (`GEMM_FULL_INTENSITY_B200`; taking the per-SM FLOP/s ratio, 64 · (2500/152) / (989/132) = 140,
        # counted the clock as more work a clock)
        gemm_full_intensity=GEMM_FULL_INTENSITY_B200,
        attention_forward_efficiency=round(1697 / 2500, 3),
        attention_backward_efficiency=round(1374 / 2500, 3),
        host_kernel_us=HOST_KERNEL_US_DGX_GB200,
        nccl_gather_shares=NCCL_GATHER_SHARES_GB200,
        nccl_alltoall_shares=NCCL_ALLTOALL_SHARES_GB200,
    ),
    # NVIDIA B300 (Blackwell Ultra, sm_103) in DGX B300 / HGX B300, 8 GPUs of one NVLink 5 switch. Datasheet
    # figures as stas00/ml-engineering compute/accelerator/README.md at 744d01e tabulates them from the DGX B300
    # datasheet: 2,250 TFLOPS dense BF16 and 4,500 dense FP8 per GPU (B200's; its dense NVFP4, 15,000, has no
    # catalog field: ppb prices no NVFP4), 288 GB HBM3e at 8.00 TB/s, 1000 W maximum TGP (DGX B300 power
    # capping guide; public nvidia-smi logs of "NVIDIA B300 SXM6 AC" read a 1100 W limit). Memory: nvidia-smi
    # reads 275040 MiB ("NVIDIA B300 SXM6 AC, 275040 MiB" in public device inventories; 288.4e9 bytes, the
    # datasheet's 288 GB), as the B200 entry takes its 183359. SMs: 148 (device readings: public B300 kernel
    # notes state "148 SMs", a 2032 MHz maximum SM clock; NVIDIA's Blackwell Ultra blog gives only the full
    # die's 160), so 2250 = 148 · 8192 FLOP a clock · 1.86 GHz, B200's SM at B200's clock. HGX B300 and
    # the NVIDIA Blackwell Ultra blog: NVLink 5 1.8 TB/s bidirectional (900 a direction); one ConnectX-8
    # SuperNIC of 800 Gb/s per GPU (100 GB/s). MAMF (the same README): 1769.0 BF16 (78.6%), 3353.3 FP8
    # (74.5%), torch 2.9.1+cu130. The layer GEMM shares and MXFP8's ratio were measured on this part
    # (`LAYER_GEMM_SHARE_BLACKWELL`, `MXFP8_MATMUL_RATIO_BLACKWELL`: TE's GEMM profiling guide, B300).
    # Inherited, no B300 measurement public: HBM at B200's 7672 GB/s and 0.8 (the same 8 TB/s HBM3e label;
    # cuDNN's RMSNorm on a GB300, NVIDIA/cudnn-frontend benchmark/norms/results/gb300/all_models_20260226_
    # 190305.csv at 3929da2, runs the four Llama norms' forward at 5.96-6.46 TB/s, mean 6.12, GB200's 6.13);
    # NCCL's NVLink 5 share, the XLA sm_100 GEMM fixed times and tile rule, attention's back-to-back share
    # (B200's: the same SM and die family, sm_103 running sm_100's instruction set plus its additions);
    # NDR's NIC share for the 800 Gb/s XDR NIC. Attention: cuDNN 9.22 measured on a GB300 (the gb300 entry),
    # scaled as B200's from GB200's by the two parts' tensor rates, here the GEMM ratio aiconfigurator measured
    # between them (`GB300_OVER_B300_LAYER_GEMMS`, 1.177; session 28): 2014 / 1.177 = 1711 (0.761 of 2250),
    # 1536 / 1.177 = 1305 (0.580). Host: DGX B300's two Xeon 6776P (Granite Rapids, 64 cores, 2.3 GHz base,
    # 4.6 GHz Priority Core Turbo on 8 cores: Intel's Xeon 6 launch, May 2025); no Megatron CI values on it, so DGX
    # B200's launch time is kept (`HOST_KERNEL_US_DGX_B200`, itself an assumption), not re-scaled to another core.
    "b300": DeviceProfile(
        "b300",
        275040,
        2250.0,
        7672.0,
        900.0,
        100.0,
        sm_count=148,
        elementwise_kernel_us=ELEMENTWISE_KERNEL_US_B300,
        nic_efficiency=0.94,
        matmul_efficiency=round(1769.0 / 2250, 3),
        fp8_matmul_efficiency=round(3353.3 / 4500, 3),
        mxfp8_matmul_ratio=MXFP8_MATMUL_RATIO_BLACKWELL,
        layer_gemm_share=LAYER_GEMM_SHARE_BLACKWELL,
        fp8_layer_gemm_share=FP8_LAYER_GEMM_SHARE_BLACKWELL,
        mxfp8_quantize_efficiency=MXFP8_QUANTIZE_SHARE_BLACKWELL,
        fp8_quantize_efficiency=FP8_QUANTIZE_SHARE_BLACKWELL,
        attention_back_to_back_share=ATTENTION_BACK_TO_BACK_SHARE_B200,
        compute_capability=10.3,
        gemm_kernel_us=GEMM_KERNEL_US_B200,
        fp8_gemm_kernel_us=FP8_GEMM_KERNEL_US_B200,
        gemm_full_intensity=GEMM_FULL_INTENSITY_B200,
        comm_efficiency=0.802,
        attention_forward_efficiency=ATTENTION_FORWARD_B300,
        attention_backward_efficiency=ATTENTION_BACKWARD_B300,
        host_kernel_us=HOST_KERNEL_US_DGX_B200,
        host_boost_ghz=4.6,
        nccl_gather_shares=NCCL_GATHER_SHARES_B300,
        nccl_alltoall_shares=NCCL_ALLTOALL_SHARES_B300,
    ),
    # NVIDIA GB300 (a Grace Blackwell Ultra superchip's GPU, 4 a compute tray, 72 a GB300 NVL72 rack's NVLink
    # domain). NVIDIA GB300 NVL72 specifications as ml-engineering's README (above) tabulates them: 2,500 TFLOPS
    # dense BF16 and 5,000 dense FP8 per GPU (NVFP4 15,000 dense, no catalog field), per-GPU maximum power 1400 W
    # (NVIDIA Mission Control power FAQ); the rack's 576 TB/s of HBM3e over 72 GPUs, 8 TB/s each; 130 TB/s of
    # NVLink 5 over 72, 1.8 TB/s bidirectional each (900 a direction); 72 ConnectX-8 SuperNICs, one of 800 Gb/s
    # a GPU (100 GB/s). Memory: nvidia-smi reads 284208 MiB ("NVIDIA GB300, 284208 MiB" in public device
    # inventories of GB300 trays; 72 of them 21.5e12 bytes, the rack's "up to 21 TB"). SMs: 148 (device
    # readings: public GB300 kernel tuning notes, "GB300 (148 SMs)"), so 2500 = 148 · 8192 · 2.06 GHz. Attention:
    # NVIDIA's cuDNN 9.22 on this GPU (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1/
    # gb300/llama3.1_20260424_100757.csv at 3929da2; the B200 entry's GB200 file's twin: BF16, 64 query and 8 KV
    # heads of 128, batch 2, 16k tokens, no mask): forward 2014, backward 1536 TFLOP/s (GB200 1697, 1374: Blackwell
    # Ultra's doubled SFU exponentials show in the forward); the curves over length and mask stay GB200's
    # (`attention_rates`). GEMMs: no public GB300 MAMF; the B300's (1769.0 / 3353.3) times what aiconfigurator
    # measured between the two parts at a layer's shapes (`GB300_OVER_B300_LAYER_GEMMS`, 1.177; FP8 without its
    # casts 1.148): 2082 of 2500 (0.833), 3850 of 5000 (0.770). Inherited from GB200, no GB300 measurement public:
    # HBM 7672 GB/s at 0.8 (its RMSNorm forward measures as GB200's: the b300 entry); the Grace host's launch time
    # (`HOST_KERNEL_US_DGX_GB200`: Neoverse V2 both); NCCL's NVLink 5 share, the GEMM fixed times and tile rule, the
    # layer GEMM shares, MXFP8's ratio and attention's back-to-back share (B200's / B300's, as GB200 takes them);
    # NDR's NIC share for the 800 Gb/s NIC.
    "gb300": DeviceProfile(
        "gb300",
        284208,
        2500.0,
        7672.0,
        900.0,
        100.0,
        sm_count=148,
        elementwise_kernel_us=ELEMENTWISE_KERNEL_US_B300,
        nic_efficiency=0.94,
        matmul_efficiency=round(1769.0 * GB300_OVER_B300_LAYER_GEMMS / 2500, 3),  # 0.833
        fp8_matmul_efficiency=round(3353.3 * FP8_GB300_OVER_B300_LAYER_GEMMS / 5000, 3),  # 0.770
        mxfp8_matmul_ratio=MXFP8_MATMUL_RATIO_BLACKWELL,
        layer_gemm_share=LAYER_GEMM_SHARE_BLACKWELL,
        fp8_layer_gemm_share=FP8_LAYER_GEMM_SHARE_BLACKWELL,
        mxfp8_quantize_efficiency=MXFP8_QUANTIZE_SHARE_BLACKWELL,
        fp8_quantize_efficiency=FP8_QUANTIZE_SHARE_BLACKWELL,
        attention_back_to_back_share=ATTENTION_BACK_TO_BACK_SHARE_B200,
        compute_capability=10.3,
        gemm_kernel_us=GEMM_KERNEL_US_B200,
        fp8_gemm_kernel_us=FP8_GEMM_KERNEL_US_B200,
        comm_efficiency=0.802,
        gemm_full_intensity=GEMM_FULL_INTENSITY_B200,
        attention_forward_efficiency=round(2014 / 2500, 3),
        attention_backward_efficiency=round(1536 / 2500, 3),
        host_kernel_us=HOST_KERNEL_US_DGX_GB200,
        nccl_gather_shares=NCCL_GATHER_SHARES_GB300,
        nccl_alltoall_shares=NCCL_ALLTOALL_SHARES_GB300,
    ),
    # Huawei Ascend 910B (Atlas 800T A2 training server) public specifications: 64 GB HBM2e
    # (65536 MiB), 1.6 TB/s; about 313 TFLOPS FP16 for the 910B3 (the 910B2 measures ~315 TFLOPS
    # on 4096^3 FP16/BF16 GEMMs, zzc0721/torch-performance-test-data issue #109, so its peak is
    # higher: set peak_tflops for that part); HCCS 392 GB/s within the node (7 links of 56 GB/s,
    # bidirectional), 200 Gb/s RoCE per NPU. 20 AI cores (Da Vinci cube units) on the 910B3.
    # The 8 NPUs are a full mesh, no switch: each has one HCCS link to each of the others (`npu-smi info
    # -t topo` lists HCCS between every pair), and HCCL runs collectives inside the server with its Mesh
    # algorithm over those links (CANN HCCL user guide, "Mesh"; Ascend C `SetAlgConfig`: "only the
    # FullMesh algorithm is supported" on Atlas A2): `intra_node_links` 7, one link 28 GB/s a direction.
    # No public MAMF: A100's GEMM fraction assumed; it prices the 910B2's measured BF16 GEMMs (4096^3
    # 315.4, 8192^3 301.2, 10240^3 300.9 TFLOPS, issue #109 above) within 4% at the 353.9 TFLOPS and 24
    # AI cores its FlashAttention table below counts against (tests/test_timing_public_runs.py).
    # Flash attention: CANN's FlashAttentionScore kernel (what MindSpore's ops.FlashAttentionScore, which
    # MindFormers' FlashAttention cell runs, and torch_npu's npu_fusion_attention both call), measured by
    # hw-native-sys/pto-isa (kernels/manual/common/flash_atten/README.md at 9e0503520, "910B2 Multi-Core
    # Comparison", torch_npu baseline): one (sequence, head) pair, head size 128, no mask, forward, at
    # 32768 tokens 3646.173 us, 42.60% of the part's peak; `ASCEND_FLASH_FORWARD` is that level read
    # through our attention model (tests/test_timing_public_runs.py). No public backward figure:
    # A100's backward-over-forward ratio (`FLASH2_BACKWARD_A100` / `FLASH2_FORWARD_A100`) assumed.
    "ascend-910b": DeviceProfile(
        "ascend-910b",
        65536,
        313.0,
        1600.0,
        196.0,
        25.0,
        sm_count=20,
        matmul_efficiency=0.869,
        attention_forward_efficiency=ASCEND_FLASH_FORWARD,
        attention_backward_efficiency=ASCEND_FLASH_BACKWARD,
        flash2_forward_efficiency=ASCEND_FLASH_FORWARD,
        flash2_backward_efficiency=ASCEND_FLASH_BACKWARD,
        sdpa_flash2_forward_ratio=1.0,  # not measured
        attention_head64_forward=0.0,
        attention_head64_backward=0.0,
        flash2_head64_forward=0.0,
        flash2_head64_backward=0.0,
        fp8_matmul_efficiency=0.0,
        gemm_epilogue_overlapped=False,
        compute_capability=0.0,
        intra_node_links=7,
    ),
    # NVIDIA H800 SXM (the export H100): H100's die, memory and FP8/BF16 peaks, NVLink cut to 400 GB/s
    # bidirectional (200 per direction); DeepSeek-V3's report (§3.1): "NVLink ... 160 GB/s" achieved
    # and 8 InfiniBand NICs of 400 Gb/s per node, one per GPU (50 GB/s).
    "h800": DeviceProfile(
        "h800",
        81559,
        989.0,
        3350.0,
        200.0,
        50.0,
        sm_count=132,
        elementwise_kernel_us=ELEMENTWISE_KERNEL_US_HOPPER,
        persistent_gemms=True,
        nic_efficiency=0.94,
        gemm_kernel_us=5.3,
        attention_dropout_cost=ATTENTION_DROPOUT_COST_SM90,
        eager_memory_efficiency=EAGER_MEMORY_EFFICIENCY_H100,  # H100's die and HBM3
        standard_attention_measured=True,  # the same
    ),
    # Fallback when a run config states only memory_mb: H100-like rates.
    "generic": DeviceProfile("generic", 81559, 989.0, 3350.0, 450.0, 50.0, sm_count=132, gemm_kernel_us=5.3),
}


def attention_die(compute_capability: float) -> str | None:
    """The die whose measured FP8 attention a part runs at (`ppb_core.timing.fp8_attention`): sm90 (H100, H200),
    sm100 (B200, GB200), sm103 (B300, GB300); None where none was measured."""
    if 9.0 <= compute_capability < 10.0:
        return "sm90"
    if math.isclose(compute_capability, 10.0):
        return "sm100"
    if math.isclose(compute_capability, 10.3):
        return "sm103"
    return None
