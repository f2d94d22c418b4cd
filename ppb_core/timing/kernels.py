"""How long a kernel runs on a device: GEMMs by shape, flash attention by sequence and head size, memory-bound ops.

GEMM (m×k by k×n, `groups` independent products of that shape, as a grouped GEMM over experts or a
batched one over heads): the output is cut into tiles of `TILES`; each tile runs on one SM (or AI
core) and the device runs `sm_count` tiles at a time, so a GEMM takes ⌈tiles / sm_count⌉ waves of
one tile's time (wave quantization), and a tile past the edge of the output computes in full
(tile quantization). A tile computes at the device's large-GEMM ceiling (`matmul_efficiency`, the
measured MAMF over peak) when it is at least 128×128, plus, where the device states one for its FP8
kernels (`fp8_tile_overhead_us`), a fixed time per tile beside its k loop (a short k pays it
relatively more); smaller tiles reuse each operand less and
are held back in proportion to their arithmetic intensity Tm·Tn/(Tm+Tn) (a 64×64 tile reaches
half of a 128×128's). On Blackwell the full-rate intensity is the device's (`gemm_full_intensity`:
its SMs' tensor rate doubled, their shared memory did not) and a pair of SMs may share one 256-wide
tile (`PAIR_TILES`, the 2-SM MMA), each loading half of its operands. When the output has fewer
tiles than SMs, the k loop may be split over
`SPLIT_K` slices (cuBLAS's split-K), each writing fp32 partial sums that a last pass reduces
(their bytes at the HBM rate). On devices whose GEMM kernels store a tile's output after its main
loop before the SM takes the next tile (Ampere's cuBLAS/CUTLASS 2 kernels, unlike Hopper's
warp-specialized persistent ones that store while the next tile computes), the padded output's
bytes (a weight gradient accumulated in fp32 reads and writes 8 a element) add at the HBM rate.
A skinny product (fewer than 64 output rows or columns) runs as a
GEMV-like kernel, untiled: its FLOPs at the ceiling, in practice its bytes. The fastest tiling is
taken, as cuBLAS's heuristics pick one, and the result is never below the HBM roofline: bytes /
achieved bandwidth.

Flash attention: FLOPs over the device's measured flash efficiency for the pass (forward,
backward) at head size 128, 16k tokens and no mask, scaled by
- head size: between 64 and 128, linearly from the kernel's measured head-64 rate over its head-128
  rate (where the device states one: Hopper's cuDNN forward 0.694, far below the generic law) to 1;
  below 64 that times the generic law's d/(d+16) relative to 64's; elsewhere, and above 128, the
  generic law d/(d+16) relative to 128's, at most 1 (smaller heads do less work per byte of Q, K, V
  loaded);
- mask and sequence: the kernel's measured rate at the pass's length, causal or not, over its 16k
  no-mask rate (`ppb_core.timing.attention_rates`: FlashAttention-2 and Hopper's cuDNN from
  FlashAttention-3's paper, FlashAttention-2 past 16k and its causal backward from PyTorch SDPA's,
  cuDNN's causal backward and Blackwell's from NVIDIA's cudnn-frontend measurements). Causal kernels
  lose rate on the diagonal tiles and at short sequences: cuDNN's forward on H100 at 2k runs at 484
  TFLOPS/s causal against 617 without the mask, FlashAttention-2's at 16k at 335 against 370;
- waves: query blocks of every (sequence, head) over the SMs, as for GEMM tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppb_core.config.devices import DeviceProfile, attention_die
from ppb_core.memory.frameworks.workspaces import CUDNN_DETERMINISTIC_CAPABILITIES, cudnn_dp_workspace_bytes
from ppb_core.memory.setup import te_flash_attention
from ppb_core.timing.attention_rates import (
    ATTENTION_BLOCK,
    WINDOW_HEAD_DIM,
    cudnn_kernel,
    score_fraction,
    sequence_factor,
    window_factor,
)
from ppb_core.timing.fp8_attention import FP8_ATTENTION_RATIOS, RECIPE_PRECISION, fp8_attention_factor

# Output tiles cuBLAS/CUTLASS choose from on Ampere and Hopper (bf16/fp16 tensor-core kernels).
TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
FULL_INTENSITY = 128 * 128 / (128 + 128)  # the smallest tile that keeps the tensor cores fed
SPLIT_K: tuple[int, ...] = (1, 2, 4, 8, 16)
# Blackwell's (sm_100) 2-SM tiles, one per CTA pair: tcgen05.mma with cta_group::2 takes M = 256 across
# the pair (CUTLASS docs, "Blackwell SM100 GEMMs"; the PTX ISA's tcgen05.mma), N up to 256.
PAIR_TILES: tuple[tuple[int, int], ...] = ((256, 256), (256, 128))
SKINNY = 64  # fewer output rows or columns than this: a GEMV-like kernel, bound by its bytes, not tiled
SPLIT_K_PARTIAL_BYTES = 4  # fp32 partial sums of a split-K slice
REFERENCE_HEAD_DIM = 128  # the head size the device's flash efficiencies are measured at
HEAD_DIM_HALF = 16
MEASURED_SMALL_HEAD = 64  # the smaller head size a device's `*_head64_*` ratios are measured at
DQ_ACCUM_BYTES = 4  # flash-attn 2 accumulates dQ in fp32
DP_BYTES = 2  # dS stored in the 16-bit I/O type

# Bytes an op moves as PyTorch's eager kernels over what one fused kernel moves, (forward, backward):
# torchtitan's model code without torch.compile, at the commit of its published H100 runs
# (pytorch/torchtitan 9dec370, benchmarks/llama3_h100_202412_torchtitan.md); Megatron-LM runs
# TransformerEngine's / Apex's fused kernels, MindSpore fuses in graph mode. Per element, bf16
# activations and weights (FSDP2's param_dtype), fp32 where the code upcasts; the backward is
# autograd's formulas for each op (PyTorch tools/autograd/derivatives.yaml, FunctionsManual.cpp):
# - RMSNorm (torchtitan/models/norms.py `RMSNorm`: `(x.float() * rsqrt(x.pow(2).mean(-1) + eps))
#   .type_as(x) * weight`): forward float (read 2, write 4), pow (4, 4), mean (read 4), mul by the
#   row's rsqrt (4, 4), type_as (4, 2), mul by the weight (2, 2): 36 bytes against the fused
#   kernel's 4 (read x, write y). Backward: the weight's mul (g·w: 2, 2; g·a summed over the rows:
#   4, 2 then 2), type_as's (2, 4), the rsqrt mul's (g·r: 4, 4; g·x summed over the row: 8, 4 then
#   4), mean's (`grad.expand / n`: write 4), pow's (`pow_backward`: x.pow(1) 4, 4; times 2: 4, 4;
#   times g: 8, 4), the two paths' sum (8, 4), float's (4, 2): 92 bytes against 6 (read x and dy,
#   write dx).
# - SwiGLU (`w2(F.silu(w1(x)) * w3(x))`): forward silu (read 2, write 2) and the product (read 4,
#   write 2): 10 bytes against 6 (read gate and up, write); backward the product's two gradients
#   (read 4, write 2 each) and `silu_backward` (read 4, write 2): 18 against 10 (read dy, gate,
#   up; write both gradients). GeLU is one kernel either way.
# - Rotary embedding (`apply_rotary_emb`): upcast (read 2, write 4), complex product (read 4, write
#   4), downcast (read 4, write 2): 20 bytes against 4; its backward the same three: 20 against 4.
EAGER_TRAFFIC: dict[str, tuple[float, float]] = {
    "norm": (36 / 4, 92 / 6),
    "activation": (10 / 6, 18 / 10),
    "rope": (20 / 4, 20 / 4),
}
# The share of HBM's peak PyTorch's eager element-wise kernels reach over `torch.chunk` halves of a row, views
# that are not contiguous (`Op.strided`), (forward, backward): linkedin/Liger-Kernel benchmark/data/
# all_benchmark_data.csv at ead96b6 (benchmark_megatron_swiglu.py at 2120862b, Liger 0.8.1, H100 80GB HBM3,
# 2026-07-26), provider "torch": `F.silu(y_1) * y_2` over `torch.chunk(y, 2, -1)` of a bf16 [2048, 4, 2F]
# tensor, Megatron's SwiGLU without its fusion; the median ms at F 2048-32768 (the input 64 MiB and more, past
# the L2 cache). Forward 5 halves of bytes (silu reads one half and writes, the product reads two and
# writes): 0.476-0.536 of 3.35 TB/s, mean 0.515. Backward (its "backward" rows run the forward too, less the
# "forward" rows): the output's `sum` reads a half, the product's two gradients read a saved half each and
# write (the sum's gradient an expanded scalar, no bytes), `silu_backward` reads two and writes, the chunk's
# gradient cat reads two and writes two: 12 halves, 0.565-0.625, mean 0.603. The same shapes' fused Triton
# kernel (provider "liger") reads and writes them at 0.91 forward: the halves' views, not the ops, cost it.
# Measured on H100 only: taken on every device (an assumption), never above its `memory_efficiency`.
STRIDED_EAGER_SHARE = (0.515, 0.603)


@dataclass(frozen=True)
class Kernels:
    """One device at one dtype: what its kernels reach."""

    flops_per_s: float  # dense tensor-core peak for the dtype (attention)
    gemm_ceiling: float
    sms: int
    hbm_bytes_per_s: float  # achieved
    attention_forward: float
    attention_backward: float
    fused: bool = True  # element-wise ops as one fused kernel each (else `EAGER_TRAFFIC`)
    # torchtitan's `norm_type = "fused_rmsnorm"` (torchtitan/models/norms.py at 1ea476e9f, `FusedRMSNorm`):
    # RMSNorm as one Triton kernel each way, eager or not (`_rms_norm_fwd_kernel` reads x and the weight
    # and writes y and the row's rstd; `_rms_norm_bwd_kernel_sm` reads x, dy and rstd and writes dx, the
    # weight's gradient as one fp32 partial row an SM, summed after): a fused norm's bytes; so too
    # v0.2.2's nn.RMSNorm, PyTorch's fused CUDA kernel (`timing.norm_type` nn_rmsnorm)
    fused_norm: bool = False
    comm_sms: int = 0  # SMs a collective running beside compute takes from it
    # GEMMs launched as one CTA per SM with a static tile schedule (`DeviceProfile.persistent_gemms`) and no
    # SM target of their own: beside a collective they run as `persistent_added_s` says, not at `contention`
    persistent_gemms: bool = False
    gemm_flops_per_s: float = 0.0  # the GEMMs' peak when they run in another dtype (FP8); 0: flops_per_s
    epilogue_overlapped: bool = True  # a tile's store overlaps the next tile's main loop (Hopper on)
    tile_overhead_s: float = 0.0  # a fixed time per output tile beside its k loop (FP8 kernels that state it)
    kernel_s: float = 0.0  # a fixed time every GEMM kernel spends beside its tiles (where the device states it)
    # FlashAttention-2's deterministic backward (`deterministic_splits`) instead of one block per key block
    deterministic_backward: bool = False
    # the flash kernel's head-64 rate over its head-128 rate, per pass (0: the generic law)
    attention_head64_forward: float = 0.0
    attention_head64_backward: float = 0.0
    # cuDNN's deterministic backward on Hopper and sm100: the dP-workspace decomposition (`dp_workspace_bytes`)
    dp_workspace: bool = False
    # a tile's operand intensity Tm·Tn/(Tm+Tn) from which it runs at the ceiling (`gemm_full_intensity`)
    full_intensity: float = FULL_INTENSITY
    # Blackwell's 2-SM MMA (tcgen05.mma cta_group::2): a CTA pair computes one tile, each SM loading half of
    # each operand, so a pair's 256×256 tile feeds each SM at that tile's intensity (`PAIR_TILES`)
    pair_tiles: bool = False
    # what attention dropout adds to a flash pass (TransformerEngine's cuDNN attention, where measured)
    attention_dropout_cost: float = 0.0
    # what PyTorch's eager element-wise kernels achieve (`DeviceProfile.eager_memory_efficiency`); 0: the
    # fused rate (`hbm_bytes_per_s`)
    eager_hbm_bytes_per_s: float = 0.0
    # whose measured rates by mask and length the flash passes follow (`attention_rates.ATTENTION_CURVES`)
    attention_kernel: str = "flash2"
    # HBM's peak where an unfused core's score passes follow standard attention's measured share
    # (`DeviceProfile.standard_attention_measured`, `score_memory_s`); 0: the element-wise rate
    score_peak_bytes_per_s: float = 0.0
    memory_efficiency: float = 0.8  # the element-wise share of HBM (`DeviceProfile.memory_efficiency`)
    # a memory-bound kernel's fixed GPU time beside its bytes (`DeviceProfile.elementwise_kernel_us`)
    elementwise_kernel_s: float = 0.0
    # TransformerEngine's FP8 attention (`timing.fp8_dot_product_attention`): the (die, kernel precision) whose
    # measured FP8-over-BF16 ratios its passes take (`fp8_attention.fp8_attention_factor`); None: 16-bit passes
    fp8_attention: tuple[str, str] | None = None

    @property
    def contention(self) -> float:
        """The share of compute a concurrent collective takes: its SMs over the device's."""
        return min(1.0, self.comm_sms / self.sms)

    @classmethod
    def from_device(
        cls,
        device: DeviceProfile,
        dtype: str = "bf16",
        framework: str = "megatron",
        compiled: bool = False,
        matmul_dtype: str | None = None,
        deterministic: bool = False,
        transformer_engine: bool = True,
        fused_norm: bool = False,
        sdpa_backend: str = "flash",
        te_attention_backend: str = "auto",
        cudnn_release: tuple[int, int] | None = None,
        fp8_attention_recipe: str | None = None,
    ) -> Kernels:
        """The kernels *framework* runs: Megatron-LM and MindFormers their fused kernels and the device's
        best flash attention (TransformerEngine's cuDNN attention); torchtitan PyTorch's SDPA
        (*sdpa_backend*: FlashAttention-2, or cuDNN attention) and eager element-wise kernels unless
        torch.compile fuses them. With
        *matmul_dtype* fp8 the GEMMs run on the FP8 tensor cores at their own measured ceiling
        (attention stays in *dtype*). *deterministic* (TransformerEngine's deterministic attention:
        NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 or Megatron's --deterministic-mode, `TimingOptions.
        attention_deterministic`; torchtitan's debug.deterministic): TransformerEngine's
        `get_attention_backend` drops its cuDNN attention in training below compute capability 9.0
        ("Disabling FusedAttention for determinism reasons", transformer_engine/pytorch attention utils)
        and runs flash-attn 2 with `deterministic`;
        on Hopper (compute capability 9.x) and Blackwell's sm100 (10.x) it keeps cuDNN attention, whose
        deterministic backward is the dP-workspace decomposition (`dp_workspace_bytes`), TransformerEngine's
        (*transformer_engine*). Blackwell (`CUDNN_DETERMINISTIC_CAPABILITIES`): TE release 2.18 (e7c550c5,
        Megatron CI's pin for its GB200 golden values, 7e6a045a2a) keeps sub-backend 1 for a deterministic
        training backward on sm_arch >= 100 from cuDNN 9.18.1 (common/fused_attn/fused_attn.cpp
        `nvte_get_fused_attn_backend`, "determinism on Blackwell"; its NGC PyTorch 26.06 base ships a later
        cuDNN), and cudnn-frontend forces the dP workspace for any deterministic backward, whatever the arch
        (scaled_dot_product_flash_attention.h, v1.23.0, "Force dP workspace implementation"). SM120 gets no
        deterministic fused backend (the same function): not modelled.
        *te_attention_backend* (Megatron's --attention-backend, `timing.te_attention_backend`): under
        TransformerEngine the memory side's choice (`memory.setup.te_flash_attention`): `flash` runs flash-attn
        on any GPU from sm80, Hopper included, at FlashAttention-2's rates (deterministic: its deterministic
        backward; no cuDNN dP workspace, no cuDNN dropout cost). flash-attn 3 (TE's FlashAttention 3 on sm90)
        runs only where `flash_attn_3` is installed from flash-attention's hopper/ directory
        (`FlashAttentionUtils.v3_installation_steps`, utils.py d0067d0d), which neither Megatron-LM's CI image
        (docker/Dockerfile.ci.dev, pyproject.toml and uv.lock at d98e8a64 install none) nor the NeMo recipes ask
        for: not modelled. `fused` on sm80 runs cuDNN's kernels, unmeasured there: FlashAttention-2's rates.
        *cudnn_release* (major, minor; `timing.cudnn_release`): the cuDNN whose sm100 kernels run
        (`attention_kernel`). *fp8_attention_recipe* (the FP8 recipe under `timing.fp8_dot_product_attention`):
        cuDNN's FP8 kernels of that recipe's precision at their measured ratio to its BF16 ones on the part's die
        (`fp8_attention`; the run config refuses what TE cannot run)."""
        titan = framework == "torchtitan"
        fp8 = matmul_dtype == "fp8"
        # torchtitan's SDPA: FlashAttention-2, or cuDNN attention (`timing.sdpa_backend`) at the device's
        # rates; PyTorch refuses cuDNN under deterministic algorithms (sdp_utils.cpp `check_cudnn_deterministic`)
        # Megatron under TE: flash-attn by --attention-backend and the GPU (the memory side's `te_flash`)
        te_flash = framework == "megatron" and transformer_engine
        te_flash = te_flash and te_flash_attention(device.compute_capability, te_attention_backend)
        flash2 = (
            (titan and (sdpa_backend == "flash" or deterministic))
            or (deterministic and framework == "megatron" and device.compute_capability < 9.0)
            or te_flash
        )
        cudnn_det = int(device.compute_capability) in CUDNN_DETERMINISTIC_CAPABILITIES
        # torchtitan's FlashAttention-2 is PyTorch SDPA's, aten's copy of flash-attn 2's kernels: its forward at
        # the device's measured share of flash-attn 2's (`DeviceProfile.sdpa_flash2_forward_ratio`)
        sdpa_forward = device.sdpa_flash2_forward_ratio if titan else 1.0
        die = attention_die(device.compute_capability)
        precision = RECIPE_PRECISION.get(fp8_attention_recipe or "", "")
        return cls(
            fp8_attention=(die, precision) if precision in FP8_ATTENTION_RATIOS.get(die or "", {}) else None,
            attention_kernel=attention_kernel(device, flash2, cudnn_release),
            flops_per_s=device.peak_flops(dtype),
            gemm_ceiling=device.fp8_matmul_efficiency if fp8 else device.matmul_efficiency,
            gemm_flops_per_s=device.peak_flops(matmul_dtype) if matmul_dtype else 0.0,
            sms=device.sm_count,
            hbm_bytes_per_s=device.hbm_bandwidth_gbs * 1e9 * device.memory_efficiency,
            score_peak_bytes_per_s=device.hbm_bandwidth_gbs * 1e9 if device.standard_attention_measured else 0.0,
            memory_efficiency=device.memory_efficiency,
            elementwise_kernel_s=device.elementwise_kernel_us * 1e-6,
            eager_hbm_bytes_per_s=device.hbm_bandwidth_gbs * 1e9 * device.eager_memory_efficiency,
            attention_forward=(
                device.flash2_forward_efficiency * sdpa_forward if flash2 else device.attention_forward_efficiency
            ),
            attention_backward=device.flash2_backward_efficiency if flash2 else device.attention_backward_efficiency,
            fused=compiled or not titan,
            fused_norm=fused_norm,
            comm_sms=device.comm_sms,
            persistent_gemms=device.persistent_gemms,
            epilogue_overlapped=device.gemm_epilogue_overlapped,
            tile_overhead_s=device.fp8_tile_overhead_us * 1e-6 if fp8 else 0.0,
            kernel_s=(device.fp8_gemm_kernel_us if fp8 else device.gemm_kernel_us) * 1e-6,
            deterministic_backward=flash2 and deterministic and not titan,
            attention_head64_forward=device.flash2_head64_forward if flash2 else device.attention_head64_forward,
            attention_head64_backward=device.flash2_head64_backward if flash2 else device.attention_head64_backward,
            dp_workspace=deterministic and framework == "megatron" and transformer_engine and cudnn_det and not flash2,
            full_intensity=device.gemm_full_intensity,
            pair_tiles=device.compute_capability >= 10.0,
            attention_dropout_cost=(
                device.attention_dropout_cost if framework == "megatron" and transformer_engine and not flash2 else 0.0
            ),
        )

    def memory_s(self, traffic: float) -> float:
        return traffic / self.hbm_bytes_per_s

    def score_memory_s(self, traffic: float, keys: float, backward: bool, head_dim: float = 128) -> float:
        """An unfused attention core's pass over its scores (`Op.score_keys`: *keys* a row, the scores'
        *head_dim*): at the HBM share standard attention's score passes reached at that length and head
        size where measured (`attention_rates.score_fraction`), else as any memory-bound pass."""
        if not self.score_peak_bytes_per_s:
            return self.memory_s(traffic)
        fraction = score_fraction(backward, keys, self.memory_efficiency, head_dim)
        return traffic / (self.score_peak_bytes_per_s * fraction)

    def elementwise_s(self, traffic: float, fusion: str | None, backward: bool = False, strided: bool = False) -> float:
        """A memory-bound op's seconds; eager frameworks move `EAGER_TRAFFIC` times its fused bytes,
        at the rate eager kernels reach (`eager_hbm_bytes_per_s`), every eager op alike (residual adds,
        gradient sums, loss), bar torchtitan's fused norms (`fused_norm`). Eager kernels over a row's
        `chunk` halves (*strided*, `Op.strided`) at `STRIDED_EAGER_SHARE` of HBM's peak, whatever the framework."""
        if strided:
            share = min(STRIDED_EAGER_SHARE[backward], self.memory_efficiency)
            return traffic / (self.hbm_bytes_per_s / self.memory_efficiency * share)
        triton_norm = fusion == "norm" and self.fused_norm
        if self.fused or triton_norm:
            return self.memory_s(traffic)
        factor = 1.0 if fusion is None else EAGER_TRAFFIC[fusion][backward]
        return traffic * factor / (self.eager_hbm_bytes_per_s or self.hbm_bytes_per_s)

    def gemm_compute_s(self, m: float, n: float, k: float, groups: int = 1, output_bytes: float = 0.0) -> float:
        """Seconds of one GEMM kernel: the best tiling's waves (no HBM roofline), plus, where the
        device's kernels store each tile after its main loop (`epilogue_overlapped` False: Ampere's
        and Ascend's), the tiles' *output_bytes* per element at the HBM rate, plus the kernel's fixed
        time (`kernel_s`)."""
        if m <= 0 or n <= 0 or k <= 0 or groups <= 0:
            return 0.0
        return self._tiles_s(m, n, k, groups, output_bytes) + self.kernel_s

    def _tiles_s(self, m: float, n: float, k: float, groups: int, output_bytes: float) -> float:
        peak = self.gemm_flops_per_s or self.flops_per_s
        if min(m, n) < SKINNY:
            return 2 * m * n * k * groups / (peak * self.gemm_ceiling)
        per_sm = peak * self.gemm_ceiling / self.sms
        best = math.inf
        shapes = [(tm, tn, 1) for tm, tn in TILES] + ([(tm, tn, 2) for tm, tn in PAIR_TILES] if self.pair_tiles else [])
        for tm, tn, width in shapes:
            tiles = groups * math.ceil(m / tm) * math.ceil(n / tn)
            # a tile's SMs together (a pair splits its operands' loads, so each SM sees the tile's intensity)
            rate = width * per_sm * min(1.0, tm * tn / (tm + tn) / self.full_intensity)
            for split in SPLIT_K:
                if split > 1 and tiles * split * width > 2 * self.sms:
                    break
                waves = math.ceil(tiles * split * width / self.sms)
                # split-K writes each slice's fp32 partial sums and reads them back to reduce them
                reduction = self.memory_s(2 * split * m * n * groups * SPLIT_K_PARTIAL_BYTES) if split > 1 else 0.0
                epilogue = 0.0 if self.epilogue_overlapped else self.memory_s(tiles * tm * tn * output_bytes)
                tile = 2 * tm * tn * math.ceil(k / split) / rate + self.tile_overhead_s
                best = min(best, waves * tile + reduction + epilogue)
        return best

    def gemm_s(self, m: float, n: float, k: float, groups: int = 1, traffic: float = 0.0) -> float:
        """One GEMM (or *groups* of that shape): the best tiling, or its bytes if those take longer."""
        return max(self.gemm_compute_s(m, n, k, groups), self.memory_s(traffic))

    def attention_efficiency(
        self,
        backward: bool,
        sequences: float,
        s_q: float,
        mean_keys: float,
        head_dim: float,
        causal: float = 0.0,
        window: int = 0,
    ) -> float:
        """The fraction of peak a flash-attention pass reaches (see the module's docstring); *mean_keys*
        is the keys one query attends to on average ((s + 1)/2 under the causal mask over s keys). A
        sliding *window* reads the kernel's measured windowed rate where there is one (`window_factor`,
        at head size 64: other sizes by the head-size factors' ratio), else the causal rule at its keys."""
        base = self.attention_backward if backward else self.attention_forward
        head64 = self.attention_head64_backward if backward else self.attention_head64_forward
        size = self.head_size_factor(head_dim, head64)
        query_blocks = math.ceil(s_q / ATTENTION_BLOCK)
        windowed = window_factor(self.attention_kernel, backward, window, s_q) if window else None
        if windowed is not None:
            shape, size = windowed, size / self.head_size_factor(WINDOW_HEAD_DIM, head64)
        else:
            shape = sequence_factor(self.attention_kernel, backward, bool(causal), mean_keys, head_dim)
        if self.fp8_attention is not None:
            die, precision = self.fp8_attention
            shape *= fp8_attention_factor(die, precision, backward, bool(causal), mean_keys, window, s_q)
        tiles = max(1, math.ceil(sequences)) * query_blocks
        if backward and self.deterministic_backward:
            tiles = self.deterministic_splits(sequences) * max(1, math.ceil(sequences))
        waves = tiles / (math.ceil(tiles / self.sms) * self.sms)
        return base * size * shape * waves

    @staticmethod
    def head_size_factor(head_dim: float, head64: float = 0.0) -> float:
        """A flash kernel's rate at *head_dim* over its rate at head size 128: the generic law
        d/(d+16) relative to 128's (at most 1), or, below 128 where the kernel's head-64 ratio
        *head64* is measured, linear from it at 64 to 1 at 128, and that times the law below 64."""

        def law(d: float) -> float:
            return d / (d + HEAD_DIM_HALF)

        if head_dim >= REFERENCE_HEAD_DIM or not head64:
            return min(1.0, law(head_dim) / law(REFERENCE_HEAD_DIM))
        if head_dim >= MEASURED_SMALL_HEAD:
            share = (head_dim - MEASURED_SMALL_HEAD) / (REFERENCE_HEAD_DIM - MEASURED_SMALL_HEAD)
            return head64 + (1.0 - head64) * share
        return head64 * law(head_dim) / law(MEASURED_SMALL_HEAD)

    def deterministic_splits(self, sequences: float) -> int:
        """FlashAttention-2's deterministic backward (csrc/flash_attn/flash_api.cpp `mha_bwd`,
        src/flash_bwd_launch_template.h `run_flash_bwd_seqk_parallel`): one block per (sequence, head)
        pair and split, ⌈SMs / pairs⌉ splits, each walking its share of the key blocks in turn and
        adding into its own fp32 dQ slice; a last kernel sums the slices (`convert_dQ`)."""
        pairs = max(1, math.ceil(sequences))
        return -(-self.sms // pairs)

    def attention_s(
        self,
        flops: float,
        traffic: float,
        backward: bool,
        sequences: float,
        s_q: float,
        mean_keys: float,
        head_dim: float,
        causal: float = 0.0,
        carries_dq: bool = False,
        window: int = 0,
    ) -> float:
        """One flash-attention pass of *flops* over *sequences* (sequence, head) pairs of *s_q* queries:
        compute at the kernel's efficiency, or its bytes if those take longer. *carries_dq*: the pass's
        FLOPs hold the backward's dQ = dS·K product, which the dP-workspace decomposition
        (`dp_workspace`) takes out of the fused kernel into a GEMM of its own (`dq_product_s`). The
        fused kernel keeps its measured rate, which includes the plain path's fp32 dQ accumulation and
        its conversion kernel, gone on this path (6 bytes a dQ element: ~0.08 ms of a 7B layer at TP 1)."""
        if flops <= 0:
            return self.memory_s(traffic)
        if backward and carries_dq and self.dp_workspace:
            stored = dp_stored_bytes(sequences, s_q, mean_keys)
            fused = self.attention_s(
                flops - 2 * sequences * s_q * mean_keys * head_dim,
                traffic + stored,
                backward,
                sequences,
                s_q,
                mean_keys,
                head_dim,
                causal,
                window=window,
            )
            return fused + self.dq_product_s(sequences, s_q, mean_keys, head_dim, causal)
        rate = self.flops_per_s * self.attention_efficiency(
            backward, sequences, s_q, mean_keys, head_dim, causal, window
        )
        seconds = max(flops / rate, self.memory_s(traffic))
        if backward and self.deterministic_backward:
            # the splits' fp32 dQ slices beyond the one a plain backward keeps: zeroed, then read to be summed
            extra = self.deterministic_splits(sequences) - 1
            seconds += self.memory_s(2 * extra * sequences * s_q * head_dim * DQ_ACCUM_BYTES)
        return seconds

    def dq_product_s(self, sequences: float, s_q: float, mean_keys: float, head_dim: float, causal: float) -> float:
        """The dP-workspace decomposition's second kernel: dQ = dS·K per (sequence, head), an
        s_q × head_dim product over the *mean_keys* stored key columns of each query row, reading the
        stored dS (`dp_stored_bytes`) and the sequence's K once, writing dQ once; its bytes bind at head
        size 128 (about 128 FLOPs a byte of dS against Hopper's ~300 at the ridge)."""
        groups = max(1, math.ceil(sequences))
        operands = sequences * (dp_keys(mean_keys, causal) + s_q) * head_dim * DP_BYTES
        traffic = dp_stored_bytes(sequences, s_q, mean_keys) + operands
        return self.gemm_s(s_q, head_dim, mean_keys, groups, traffic)


def persistent_added_s(gemm_s: float, comm_s: float) -> float:
    """What a persistent GEMM of *gemm_s* (one CTA per SM, each with a fixed share of the tiles) adds to the
    wall time when it starts beside *comm_s* of a collective kernel that holds some SMs: a NCCL CTA does not
    share its SM (NVIDIA/nccl issue #689, sjeaugey), so the GEMM CTAs that find no SM wait for the first one
    to free, at the collective's end or the resident CTAs' end, then run their share: the GEMM ends at
    min(comm, gemm) + gemm, the collective at comm. What this gives over the GEMM alone is
    max(comm, min(comm, gemm) + gemm) − gemm: a collective no longer than the GEMM is not hidden at all,
    a longer one lets the GEMM take twice its time. Measured on H100: matmuls "take 2x as long" beside a
    NCCL kernel (pytorch/pytorch issue #143988); a 132-CTA GEMM beside a 24-CTA all-gather "nearly doubles"
    (NVIDIA developer forum 337991). Hence PyTorch's `_set_sm_carveout_experimental` (pull request #147966)
    and TransformerEngine's SM margins, which launch the GEMM for fewer SMs."""
    if gemm_s <= 0 or comm_s <= 0:
        return max(0.0, comm_s)
    return max(comm_s, min(comm_s, gemm_s) + gemm_s) - gemm_s


def attention_kernel(device: DeviceProfile, flash2: bool, cudnn_release: tuple[int, int] | None = None) -> str:
    """The kernel family whose measured curves a run's flash passes follow: FlashAttention-2 where it
    runs (torchtitan's SDPA flash backend; flash-attn 2 under TransformerEngine with Megatron's
    `--attention-backend flash` on any GPU, or below Hopper, where
    `get_attention_backend` keeps FlashAttention when both it and cuDNN's FusedAttention qualify and drops
    it for FusedAttention from compute capability 9.0 on, FlashAttention 3 included: "Select
    FusedAttention for performance", transformer_engine/pytorch/attention/dot_product_attention/utils.py
    at d0067d0d; Ascend's kernel, unmeasured, taken alike), else cuDNN's Hopper or Blackwell kernels by
    compute capability; on sm100 as the run's cuDNN release shipped them (*cudnn_release*, `attention_rates.
    cudnn_kernel`: 9.13's measured kernels before 9.17; unstated, the newest measured). Hopper's curves are one
    set whatever the release (no two releases measured on sm90 at these shapes)."""
    capability = device.compute_capability
    if flash2 or capability < 9.0:
        return "flash2"
    return cudnn_kernel(cudnn_release) if capability >= 10.0 else "cudnn_sm90"


def dp_keys(mean_keys: float, causal: float) -> float:
    """Keys per sequence: a causal mask's mean keys per query are (s_kv + 1)/2, so s_kv = 2·mean − 1;
    without one every query sees all *mean_keys*."""
    return 2 * mean_keys - 1 if causal else mean_keys


def dp_stored_bytes(sequences: float, s_q: float, mean_keys: float) -> float:
    """dS bytes the fused backward stores and the dQ product reads back: one 16-bit element per
    (query, key) pair it computes (the unmasked pairs, as FLOPs count them)."""
    return sequences * s_q * mean_keys * DP_BYTES


def dp_workspace_bytes(sequences: float, s_q: float, mean_keys: float, causal: float) -> float:
    """The workspace of cuDNN's deterministic SDPA backward on Hopper and sm100 (`memory.frameworks.workspaces.
    cudnn_dp_workspace_bytes`, which cites TransformerEngine's and cudnn-frontend's code) for a pass's
    (sequence, head) pairs: the same size the memory model holds. TransformerEngine allocates it with
    `at::empty` (pytorch/csrc/extensions/attention.cpp `fused_attn_bwd`), which PyTorch's deterministic
    mode fills (uint8: 0xFF) before the kernels run (`ppb_core.timing.nan_fill`). s_kv: `dp_keys`."""
    return cudnn_dp_workspace_bytes(sequences, s_q, dp_keys(mean_keys, causal))
