"""Kernel launches per op: how much the host must do before the GPU can run a layer.

Megatron-LM drives every kernel from Python: a layer's forward is TransformerEngine modules, Megatron's
own fused or unfused PyTorch ops and NCCL calls, each launched one by one; its backward runs those
modules' autograd functions. The host's time per launch (`DeviceProfile.host_kernel_us`: Python,
PyTorch's dispatcher, TransformerEngine's wrappers, the launch itself) is spent whatever the kernel's
size, so a layer whose kernels are small takes the host's time, not the GPU's (`ppb_core.timing.host`).

Counts follow the code path of Megatron-Core with TransformerEngine (NVIDIA/Megatron-LM d98e8a64 and
the CI golden-value commits 11debfa7b4 / adc69dba2d; TransformerEngine d0067d0d), one per kernel:

- a linear layer (TE Linear / LayerNormLinear / GroupedLinear): one GEMM forward per weight (a grouped
  GEMM one per local expert: `general_grouped_gemm`), input and weight gradient backward; Megatron's
  fused QKV projection is one GEMM whose parts (`qk_proj`, `v_proj`) each carry their share; a bias
  added or reduced outside the GEMM (`Op.side_bytes`) one more; without gradient-accumulation fusion
  DDP's hook adds each weight's 16-bit gradient into its main gradient (`param.main_grad.add_`), one
  more backward (DeepSpeed's BF16_Optimizer two: `update_hp_grads` casts it to fp32 first); the same
  hook adds a bias's gradient (TE returns it, whatever the fusion), one backward for each of the routed
  experts' biases (GPT-OSS: fc1's and fc2's, one a local expert) and the router's bias (`Op.grad_adds`;
  the dense layers' own biases are inside the measured host medians, whose cases have them);
- Megatron's `SequentialMLP` (routed experts without `--moe-grouped-gemm`; experts.py
  `SequentialMLP.forward`): each local expert's MLP of TE linears in turn, so per expert its two
  GEMMs' kernels as above (the count a grouped GEMM has too), its activation's kernels and, under FP8,
  its own inputs' quantization (no fused multi-tensor cast); around the loop one `torch.cat` forward and
  the splits' two gradient cats backward (`flops._expert_outputs_cat`);
- a norm (TE's LayerNorm/RMSNorm): one forward; backward its kernel and the finalize kernel that sums
  the per-block weight-gradient partials (TE common/normalization `*_bwd_finalize*`), and DDP's hook
  adding the weight's gradient into its main gradient (TE's norms do not accumulate into it); the
  per-head query and key norms (`--qk-layernorm`, `qk_norm`) are two such modules called one after the
  other (attention.py `SelfAttention.get_query_key_value_tensors` at 0d8e0714cd, the NeMo 25.11
  container's, and d98e8a64: `self.q_layernorm(query)`, then `self.k_layernorm(key)`, each its own TENorm
  with its own weight): twice a norm's;
- attention: flash one forward; backward three (FlashAttention-2's `flash_bwd_dot_do_o_kernel`, the
  main kernel, `flash_bwd_convert_dq_kernel`: csrc/flash_attn/src/flash_bwd_launch_template.h; cuDNN's
  SDPA backward graph likewise preprocesses dO·O first); unfused, each BMM one (its backward two), the
  fused scale-mask-softmax one each way, the attention dropout one (`native_dropout` writes the output
  and the mask) each way; both cores' `baddbmm` scales dQ and dK in a kernel each backward, and
  TransformerEngine's (the TE spec's) builds its mask every forward (`flops.te_attention_mask`: 10);
  under ring context parallelism each of the cp ring steps one call (`ppb_core.timing.ring`),
  TransformerEngine's corrections and P2P exchanges as `flops._stepped_ring` counts them;
- rotary: fused one kernel for Q and one for K each way; unfused (`--no-rope-fusion`, rope_utils.py
  `_apply_rotary_pos_emb_bshd`, the steps `flops.UNFUSED_ROPE_*` counts in bytes) per tensor first the
  angles' `(torch.cos(freqs) * mscale).to(t.dtype)` and the same for sin, every call (6: the fp32
  `[s, 1, 1, d]` angles' cos, scale and cast to the 16-bit dtype, whatever the mscale; the same at the
  CI golden-value commits adc69dba2d, 11debfa7b4, 93ebf8d72f), then t·cos, `_rotate_half`'s negation
  and cat, ·sin, the sum and the final cat (6) forward; backward (the angles need no gradient) their
  gradients, the two gradients of t summed and the slice's zero-filled gradient (7); MLA
  (multi_latent_attention.py `qkv_up_proj_and_rope_apply`) the interleaving cat more (7 and 10), then Q
  and K concatenated and V copied out (3), the split gradients joined and the key part summed (3);
- element-wise ops (bias-GeLU, SwiGLU, bias-dropout-add, residual adds, embedding dropout): one each way;
  a routed expert's unfused activation weighted by the routing probabilities (`flops._weighted_by_probs`:
  GeLU, the product and its cast) as `Op.launches` counts them;
  Megatron's unfused scale-mask-softmax (`--no-masked-softmax-fusion` under `--transformer-impl
  local`: fused_softmax.py `forward_torch_softmax`) one per PyTorch op each way, the casts to and
  from fp32 (under `--attention-softmax-in-fp32`), the scale (under `--apply-query-key-layer-
  scaling`), the masked fill and the softmax (`Op.launches`, `flops._torch_softmax`);
- a collective: one NCCL kernel per call in each pass it runs (`Collective.calls`: Megatron's alltoall
  dispatcher's two all-to-alls, tokens and probabilities, and two expert-TP all-gathers; MLA's latents
  gathered by three calls); the loss's three all-reduces (max, target logit, sum of exponentials)
  three, two fused (`fused_cross_entropy.py` joins the last two);
- the loss: Megatron's `VocabParallelCrossEntropy` (cross_entropy.py) one PyTorch op at a time: the
  upcast, max, shift, the target mask (two compares and an or), the shifted target (clone, subtract,
  masked zero), the index of the target logits (arange, gather, copy, masked zero), exp, sum, log,
  subtract, divide, then pretrain_gpt.py `loss_func`'s masked sum (casts, multiply, two sums, cat):
  25 forward; backward arange, the one-hot update (cast, subtract, index_put), the scale and the cast
  back, the loss mask's gradient: 10. Fused (`--cross-entropy-loss-fusion`): its three kernels and
  the same target handling and `loss_func`: 16 and 8;
- the embedding: `VocabParallelEmbedding` under TP masks the ids (two compares, or, clone, subtract,
  masked zero), looks up and zeroes the rows outside its shard (8; 1 without TP); backward the dense
  embedding gradient (zero-fill, sort, segment offsets, sums, scatter: 6) and DDP's main-gradient add;
- the MoE router's gating GEMM (moe_utils.py `RouterGatingLinearFunction`, d98e8a64): one TE GEMM
  forward, which writes the router dtype itself; backward its two GEMMs, under `--moe-router-dtype`
  the weight and input cast to it and the two gradients cast back (4; before core_v0.13.0 the forward
  cast the input and the weight, the backward the two gradients: 2 and 2, fp32 over a 16-bit dtype counted
  as the op's side passes, `flops._router_cast_passes`), and DDP's hook adding the
  weight's gradient into its main gradient whatever the gradient-accumulation fusion (the function
  returns the gradient: `grad_added_to_main_grad` is never set); the routing after it (`router_topk`)
  by the router's settings, `ppb_core.timing.router` (`Op.launches`);
- the alltoall dispatcher (token_dispatcher.py `MoEAlltoAllTokenDispatcher`): the routing map's counts,
  their all-gather and reshapes, the device-to-host copies (13), the permutation (fused, TE
  `moe_permute_with_probs`: the row map's three Triton passes and the permute, 4; unfused 9) in
  `permute`; the chunks sorted by expert and back (with several local experts; fused a chunk map and a
  sort each, unfused the cats) and the unpermutation in `unpermute`, as `flops.alltoall_permute_launches`
  counts them (`Op.launches`); DeepEP's permutations as `PERMUTE` and `UNPERMUTE`;
- the allgather dispatcher (`MoEAllGatherTokenDispatcher`, Megatron's default): its three all-gathers
  (map, probabilities, tokens) and its reduce-scatter as collectives, its local permutation and
  unpermutation as `ppb_core.timing.flops.ALLGATHER_*` counts them (`Op.launches`);
- FP8 training (`timing.matmul_dtype: fp8`, `timing.fp8_recipe`, Megatron's --fp8-recipe): every FP8
  GEMM's input is quantized before it forward and its output gradient backward (TransformerEngine
  v2.9, the NeMo 25.11 container's, transformer_engine/pytorch/csrc). Delayed scaling casts in one
  kernel (cast-transpose), none where a TE norm writes FP8 itself (extensions/normalization.cpp:
  FULLY_FUSED for `Float8Quantizer`; only the norm of a LayerNormLinear, `Op.norm_input`), though on
  Hopper that norm's transpose is a kernel of its own (`norm_transpose_launches`); tensorwise (current)
  scaling runs four (quantizer.cpp `Float8CurrentScalingQuantizer::quantize_impl`: `nvte_compute_amax`, which zeroes the
  amax before its amax kernel (common/recipe/current_scaling.cu `launch_amax_kernel`:
  `zero_amax_kernel` from v2.8, a `cudaMemsetAsync` before), `nvte_compute_scale_from_amax`,
  `nvte_quantize_v2`), three where a TE norm computes the amax beside its BF16 output
  (FUSED_NORM_AMAX_FP8: `create_unquantized_tensor_with_amax` zeroes the amax, `amax.zero_()`, then
  `quantize_with_amax`); MXFP8 and blockwise one
  (their quantize kernel; the norm is unfused for MXFP8 without NVTE_NORM_FWD_USE_CUDNN). A grouped
  GEMM's per-expert inputs (`split_quantize`, extensions/cast.cpp `multi_tensor_quantize_impl`):
  one fused `nvte_multi_cast_transpose` for them all under delayed scaling ("only have fused kernel
  for FP8 delayed scaling"), else each expert's quantized on its own. The output gradients of
  Megatron's layers come from BF16 ops (residual, attention, Megatron's own SwiGLU): never fused.
  Weights are quantized on an iteration's first micro-batch only (TE's `is_first_microbatch`
  cache): not counted. The output layer and the router stay in 16 bits (`Op.fp8`). Under MXFP8 each
  GEMM call first rearranges both operands' scale factors into the layout cuBLASLt's block-scaled
  kernels read (TE v2.9 extensions/gemm.cpp: `te_general_gemm` calls util.cpp `swizzle_scaling_factors`
  for A and B, one `nvte_swizzle_scaling_factors` kernel each; `te_general_grouped_gemm` one
  `nvte_multi_tensor_swizzle_scaling_factors` kernel for all the experts' A and one for their B): two
  kernels a GEMM call, whatever its groups (the forward's one call, the backward's dgrad and wgrad: 2 and
  4; their GPU time is in `mxfp8_matmul_ratio`). From TE v2.12 (99df88106) the modules quantize their
  MXFP8 inputs and output gradients with the scales already swizzled (`_get_quantizers`:
  `optimize_for_gemm`, but not an input or output gradient all-gathered under SP) and the GEMM call
  swizzles the weight's only (extensions/swizzle.cpp `swizzle_scales_for_gemm`): 1 and 1 (`mxfp8_swizzles`,
  gate `releases.CHANGES["te_mxfp8_activations_swizzled"]`; v2.14, the NeMo 26.04 container's, likewise).

Where the host time is measured a plain PyTorch op (the loss, the embedding's masking, unfused rotary and
softmax, the router's routing, the dispatchers' permutations) counts `PLAIN_OP_SHARE` of a launch.

A grouped GEMM's experts are one call from Python: TEGroupedMLP's GroupedLinear calls
`general_grouped_gemm` once a GEMM (forward; backward its dgrad and its wgrad), and TransformerEngine's C++
(v2.9, the NeMo 25.11 container's: pytorch/csrc/extensions/gemm.cpp `te_general_grouped_gemm` ->
common/gemm/cublaslt_gemm.cu `multi_stream_cublas_gemm`) loops over the experts, one cuBLASLt GEMM each,
round-robin over its compute streams. Where the host time is measured, the call's first GEMM is a
launch like any other (it carries the module's Python), each expert's GEMM after it the C++ loop's time
a GEMM (`CPP_GEMM_US`, measured). The experts' FP8 quantization likewise: GroupedLinear quantizes its
input (forward) and its output gradient (backward) in one `tex.split_quantize` call each, whose C++
(extensions/cast.cpp `multi_tensor_quantize_impl`, v2.9; MXFP8 and current scaling unchanged at d0067d0d)
quantizes the experts one after another (`quantizer_cpp_list[i]->quantize`): the call's first kernel a
launch (it carries the call's Python), every further kernel of the call at the C++ loop's time a kernel, the
one figure measured for work TE issues from C++ (a quantization builds no cuBLASLt descriptors; not measured
on its own). A dense linear's quantization is such a call too, of one tensor (quantizer.cpp
`Float8CurrentScalingQuantizer::quantize_impl`, v2.9 and v2.14: amax zeroed, amax, scale and cast from one
`tex.quantize` call): its first kernel a launch, the other three at the C++ time; a TE norm's quantization
(extensions/normalization.cpp) and the MXFP8 swizzles (extensions/gemm.cpp, before the call's GEMM) are
issued from the C++ call whose Python the norm's or the GEMM's launch carries: at the C++ time each
(`fp8_quantize_launches`).
GroupedLinear's own Python also walks its experts one by one each call (module/grouped_linear.py
`_GroupedLinear`, read at TE v2.2, v2.9, v2.17 and d0067d0d, the path whose GEMMs are `general_grouped_gemm`'s
C++ loop): forward it
saves each expert's input and GEMM weight for the backward (`prepare_for_saving`, `save_for_backward`; from
TE v2.3 to v2.16 the original weight too, `releases.CHANGES["te_grouped_saves_weights"]`,
`["te_grouped_weights_unsaved"]`) and, under FP8, fetches each weight's FP8 workspace (`get_weight_workspace`,
`quantize_weight` from v2.17) and retargets each quantized input to its column-wise copy (`update_usage`);
backward it restores those tensors (`restore_from_saved`), retargets each FP8 weight for the dgrad GEMM
(`update_usage`), makes each expert's weight-gradient tensor (a `torch.empty`, a view of the bulk buffer
from v2.16, or with wgrad fusion Megatron's DDP dummy, a `torch.empty` before v2.10, `get_dummy_wgrad`
after) and releases each input (`clear_tensor_data`). Each such per-expert step after the call's first
expert (the first's are in its launch, as a dense TE linear's one of each) costs `PY_STEP_SHARE` of a
launch (`grouped_python_steps`); the quantizers' `set_usage` loops only set attributes and are not counted.

Only Megatron is counted (`framework == "megatron"`): other frameworks' host paths are not modelled
(0 launches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ppb_core.timing.flops import COMM, Op

# Named ops' (forward, backward) launches beside the generic rules (module docstring).
LOSS = (25, 10)
LOSS_FUSED = (16, 8)
PERMUTE = (16, 3)
UNPERMUTE = (3, 3)
ROPE_FUSED = (2, 2)
ROPE_UNFUSED = (24, 14)
ROPE_UNFUSED_MLA = (29, 23)
EMBEDDING_TP = (8, 7)
EMBEDDING = (1, 7)
NORM = (1, 3)
FLASH = (1, 3)
REDUCE_LOSS = 3
REDUCE_LOSS_FUSED = 2
ROUTER_CASTS = 4  # the gating GEMM's backward under --moe-router-dtype: weight, input, both gradients
# A plain PyTorch op Megatron's Python functions run one after another (the loss, the embedding's masking,
# unfused rotary and softmax, the MoE router's routing, the dispatchers' permutations, `Op.launches` ops)
# costs the host this share of a TE module's kernel launch where the host time is measured
# (`DeviceProfile.host_kernel_us`, the median of dense layers' launches, most of them TE modules'). From the
# Megatron CI pairs that differ only by --no-rope-fusion (and --rotary-interleaved), golden values of one
# commit each: a pass of a layer launches 38 plain ops instead of 2 + 2 TE kernels (`ROPE_UNFUSED`,
# `ROPE_FUSED`), 18 layer passes on the critical path (6 layers a stage, pp 2, 2 micro-batches: 3 slots),
# so 18 · host · (38 · share − 4) = the measured difference: 0.11836 → 0.13464 s on DGX H100 (93ebf8d72f,
# 16.28 ms at 80.9 us: 0.399), 0.15935 → 0.18463 and 0.14411 → 0.16355 s on DGX A100 (adc69dba2d, 25.28
# and 19.44 ms at 112.3 us: 0.434 and 0.358): mean 0.397, to one digit 0.4 (the host figures are
# bench/host_derive.py's medians at this share: a fixed point).
PLAIN_OP_SHARE = 0.4
PLAIN_OPS = ("loss", "router_topk", "permute", "unpermute", "lookup")
# The host's time of a grouped GEMM's expert GEMM after the call's first, issued by TransformerEngine's C++
# loop (module docstring), measured, not fitted: TE PR #3134 (NVIDIA/TransformerEngine, Jun 2026, SM100,
# `python benchmarks/linear/benchmark_grouped_linear.py --compare-nvfp4-grouped-gemm`, "pure": operands
# pre-swizzled, GEMMs only) times 8 experts of 128 tokens (N = K = 2048) at 0.267 ms through the per-expert
# multi-stream cuBLASLt loop against 0.069 ms for one CUTLASS kernel doing all 8, both a few microseconds of
# GPU work: (0.267 - 0.069) / 8 = 24.75, about 25 us an expert (`cublas_gemm` builds its cuBLASLt descriptors
# and queries the heuristic every GEMM, cublaslt_gemm.cu, v2.9 as there). One figure on every host (the
# measurement's CPU is not stated); a SequentialMLP's experts each call from Python, a launch each.
CPP_GEMM_US = 25.0
# TransformerEngine's per-tensor scaling recipes (Float8Quantizer, Float8CurrentScalingQuantizer): one scale a
# tensor, whose column-wise copy below Blackwell is an FP8 transpose (quantizer.cpp `create_tensor`: with_transpose
# where `nvte_is_non_tn_fp8_gemm_supported` is false, TE v2.9), and whose SP all-gathers move row-wise data only.
PER_TENSOR_RECIPES = ("delayed", "tensorwise")
# The host's time of one per-expert step of GroupedLinear's Python (module docstring), in launches: TE issue
# #2897 (NVIDIA/TransformerEngine, Apr 2026, timmoon10's profile of the fused grouped MLP ops on GB200, 64
# experts, hidden 128, CPU-bound) times its "wgrad tensor allocations" at 350 us, which at that code (the
# ops' backward_grouped_mlp.py at 58a008f11, `for idx in range(num_groups): w_list[idx] = torch.empty(...)`
# for FC1 and for FC2) are 2 x 64 per-expert `torch.empty`s: 2.73 us a step on a Grace host, over DGX
# GB200's measured launch (`devices.HOST_KERNEL_US_DGX_GB200`, 98.0 us) 0.0279, scaled to each host by its
# own launch figure. One figure for every step: a tensor made, saved, restored, retargeted or released from
# Python (an allocation the measured one; the others each touch one tensor as it does, not measured alone).
PY_STEP_SHARE = 350.0 / 128 / 98.0
# FP8 quantization kernels per quantized tensor: (plain, where a TE norm produced it) by recipe.
FP8_QUANTIZE = {"delayed": (1, 0), "tensorwise": (4, 3), "mxfp8": (1, 1), "blockwise": (1, 1)}
# MXFP8's scale-factor swizzles a GEMM call: one kernel for each operand (module docstring).
MXFP8_SWIZZLES = 2
# TE before v1.11 (`releases.CHANGES["te_fp8_scale_inv_with_data"]`): an FP8 Linear's or LayerNormLinear's
# forward saves `fp8_meta["scaling_fwd"].scale_inv.clone()` for its backward (v1.6 and v1.10 linear.py
# `_Linear.forward`, layernorm_linear.py `_LayerNormLinear.forward`), a copy kernel from Python a module.
SCALE_INV_CLONE = 1


def mxfp8_swizzles(activations_swizzled: bool, gathered: bool = False, scattered: bool = False) -> tuple[float, float]:
    """(forward, backward) scale-factor swizzle kernels of one MXFP8 GEMM call's operands (the forward GEMM;
    the backward's dgrad and wgrad): before TE v2.12 every operand's (2 and 4); from v2.12
    (*activations_swizzled*, `releases.CHANGES["te_mxfp8_activations_swizzled"]`) only the weight's, the
    activations quantized with their scales already swizzled (1 and 1: the wgrad reads two activations),
    but an input all-gathered under SP (*gathered*: its forward and its wgrad) or an output gradient
    all-gathered (*scattered*: its dgrad and its wgrad) keeps compact scales the GEMM swizzles."""
    if not activations_swizzled:
        return float(MXFP8_SWIZZLES), float(2 * MXFP8_SWIZZLES)
    gathered_n, scattered_n = float(gathered), float(scattered)
    return 1.0 + gathered_n, 1.0 + scattered_n + gathered_n + scattered_n


def fp8_quantize_launches(
    op: Op,
    recipe: str,
    norm_fed: bool,
    cpp_share: float = 1.0,
    swizzles: tuple[float, float] = (float(MXFP8_SWIZZLES), float(2 * MXFP8_SWIZZLES)),
) -> tuple[float, float]:
    """(forward, backward) quantization kernels of an FP8 GEMM op: its input and its output gradient
    (module docstring), in launches. Each quantization is one call from Python into TE's C++, which issues
    its kernels one after another (quantizer.cpp `Float8CurrentScalingQuantizer::quantize_impl`: amax zeroed,
    amax, scale, cast; extensions/cast.cpp `multi_tensor_quantize_impl`: a grouped GEMM's experts in turn):
    the call's first kernel a launch (it carries the call's Python), every further kernel of the call at
    *cpp_share* of one (`CPP_GEMM_US` over the measured time a launch, as `op_launches`'s *cpp_gemm_share*);
    where a TE norm writes the input (*norm_fed*) its kernels come from the norm's own C++ call
    (extensions/normalization.cpp), after the norm's kernel: all at *cpp_share*. A fused GEMM's parts each
    carry their share. Under MXFP8 *swizzles* (`mxfp8_swizzles`) are each GEMM call's scale swizzles,
    issued from the GEMM call's C++ (extensions/gemm.cpp) before its GEMM: at *cpp_share* each."""
    assert op.gemm is not None
    _, _, n, groups, fused = op.gemm
    plain, fed = FP8_QUANTIZE[recipe]
    # split_quantize: one fused kernel only when delayed; a SequentialMLP's experts each quantize their own
    # from Python (a call each); a grouped GEMM's experts in one call's C++ loop (extensions/cast.cpp
    # `multi_tensor_quantize_impl`, TE v2.9 and v2.14, unchanged for MXFP8 and current scaling at d0067d0d:
    # the experts' `quantizer_cpp_list[i]->quantize` one after another)
    tensors = 1.0 if recipe == "delayed" and not op.sequential else float(groups)
    calls = float(max(1, op.sequential))
    share = n / fused

    def priced(kernels: float, python_calls: float) -> float:
        return (python_calls + (kernels - python_calls) * cpp_share) if kernels else 0.0

    forward = (fed * tensors * cpp_share if norm_fed else priced(plain * tensors, calls)) * share
    backward = priced(plain * tensors, calls) * share
    if recipe == "mxfp8":  # each GEMM call's swizzles: a SequentialMLP's experts each make their own calls
        forward += swizzles[0] * calls * cpp_share * share
        backward += swizzles[1] * calls * cpp_share * share
    return forward, backward


def norm_transpose_launches(op: Op) -> float:
    """The forward FP8 transpose of a GEMM op whose TE norm wrote its input under delayed scaling on Hopper
    (no SP gather between them): the norm kernel writes the row-wise FP8 data itself, then
    `nvte_transpose` makes the column-wise copy, a kernel of its own (TE v2.9 common/normalization/
    rmsnorm/rmsnorm_api.cpp `rmsnorm_fwd`, layernorm/ln_api.cpp likewise: "Compute FP8 transpose if
    required"); a fused GEMM's parts each their share."""
    if not op.fp8 or op.gemm is None:
        return 0.0
    _, _, n, _, fused = op.gemm
    return n / fused


def ub_requantize(op: Op) -> float:
    """The backward's second quantization call of a row-parallel FP8 GEMM op under MXFP8 and userbuffers: TE
    quantizes the output gradient's shard row-wise for the dgrad GEMM's userbuffers all-gather, then again,
    column-wise, from the 16-bit shard for the weight gradient (linear.py `_Linear.backward`, v2.9 and v2.14:
    "we can't convert row-scaled MXFP8 to column-scaled"; `fill_userbuffers_buffer_for_all_gather` calls the
    quantizer): one more Python call into TE, whose kernel is a launch."""
    return 1.0 if op.fp8 and op.gemm is not None and op.weight_elements else 0.0


def grouped_python_steps(op: Op, fp8: bool, weights_saved: bool) -> tuple[float, float]:
    """(forward, backward) per-expert steps of GroupedLinear's Python for a grouped GEMM op's experts after
    its call's first (module docstring; 0 for anything else): forward the input and GEMM weight saved
    (*weights_saved*: the original weight too, TE v2.3 to v2.16), under *fp8* the weight's workspace fetched
    and the input retargeted; backward the saved tensors restored, under FP8 the weight retargeted, the
    weight gradient's tensor made and the input released. A fused GEMM's parts each carry their share."""
    if op.gemm is None or not op.weight_elements or op.sequential:
        return 0.0, 0.0
    _, _, n, groups, fused = op.gemm
    saved = 3.0 if weights_saved else 2.0
    forward = saved + (2.0 if fp8 else 0.0)
    backward = saved + (1.0 if fp8 else 0.0) + 2.0
    further = (groups - 1) * n / fused
    return forward * further, backward * further


def sp_transpose_launches(op: Op, gathered: bool, scattered: bool) -> float:
    """Backward FP8 transposes of a per-tensor FP8 GEMM op on Hopper under SP, beyond its quantization
    kernels: TE quantizes the sequence shard row-wise only and makes the transpose the weight gradient
    reads from the gathered FP8 data, a kernel of its own (TE v2.9 distributed.py `_all_gather_fp8`:
    `out._create_transpose()` for the output gradient; layernorm_linear.py / linear.py backward:
    `update_usage(columnwise_usage=True)` on the re-gathered input), where without SP one cast-transpose
    writes both. *gathered*: its input came by a TP all-gather (a fused GEMM's parts each their share of
    the one transpose); *scattered*: its output gradient is all-gathered."""
    if not op.fp8 or op.gemm is None:
        return 0.0
    _, _, n, _, fused = op.gemm
    return (n / fused if gathered else 0.0) + (1.0 if scattered else 0.0)


def op_launches(
    op: Op,
    *,
    tp: int,
    mla: bool,
    rope_fusion: bool,
    cross_entropy_fusion: bool,
    wgrad_fused: bool,
    fp8_recipe: str | None = None,
    norm_fed: bool = False,
    router_cast: bool = False,
    cpp_gemm_share: float = 1.0,
    accumulate_kernels: int = 1,
    python_step_share: float = 0.0,
    weights_saved: bool = False,
    swizzles: tuple[float, float] = (float(MXFP8_SWIZZLES), float(2 * MXFP8_SWIZZLES)),
    scale_inv_clone: bool = False,
) -> tuple[float, float]:
    """(forward, backward) kernel launches of one op under Megatron with TransformerEngine; with
    *fp8_recipe* (FP8 training) an FP8 GEMM's quantization kernels too, fewer when *norm_fed* (its
    input written by a TE norm); *router_cast*: the router's dtype is not the training dtype;
    *cpp_gemm_share*: a grouped GEMM's expert GEMM after its call's first, in launches (`CPP_GEMM_US`);
    *accumulate_kernels*: the kernels that add a weight's 16-bit gradient into its main gradient without
    fusion (Megatron's DDP hook one; DeepSpeed's BF16_Optimizer two, the fp32 cast and the add);
    *python_step_share*: a per-expert step of GroupedLinear's Python in launches (`PY_STEP_SHARE` under
    TE; 0: not counted), *weights_saved* as `grouped_python_steps`; *swizzles*: an MXFP8 GEMM call's
    scale swizzles (`mxfp8_swizzles`); *scale_inv_clone*: TE before v1.11 saves a copy of the module's
    FP8 scale-inverses each forward (`SCALE_INV_CLONE`)."""
    last = op.name.rsplit(".", 1)[-1]
    if op.launches is not None:  # several PyTorch ops priced as one (`Op.launches`)
        return op.launches
    if op.category == COMM:
        if last == "reduce_loss":
            return float(REDUCE_LOSS_FUSED if cross_entropy_fusion else REDUCE_LOSS), 0.0
        forward, backward = op.forward_comm, op.backward_comm  # one kernel per NCCL call (`Collective.calls`)
        return float(forward.calls if forward else 0), float(backward.calls if backward else 0)
    if op.attention is not None:
        # ring CP: each of its cp calls (`Op.ring`) one flash kernel's launches, the extra calls on the scores op
        # (all-gather CP: two calls a pass, `ring.all_gather_steps`)
        ring_calls = 2 if op.ring_steps == "all_gather" else max(1, op.ring)
        calls = ring_calls if last.endswith("flash_scores") else 1
        return float(FLASH[0] * calls), float(FLASH[1] * calls)
    if op.gemm is not None:
        _, _, n, groups, fused = op.gemm
        if op.weight_elements:
            kernels = groups * n / fused
            # a grouped GEMM's call: its first GEMM a launch, the C++ loop's further experts their share
            gemms = kernels if op.sequential else (1.0 + (groups - 1) * cpp_gemm_share) * n / fused
            forward, backward = gemms, 2 * gemms + (0.0 if wgrad_fused else accumulate_kernels * kernels)
            if last == "router":  # DDP's main-gradient add always; the casts under --moe-router-dtype
                # (where the op prices them as its side passes, `flops._router_cast_passes`, they count there)
                casts = ROUTER_CASTS if router_cast and not any(op.side_bytes) else 0
                backward = 2 * kernels + kernels + casts
            if fp8_recipe is not None and op.fp8:
                extra_forward, extra_backward = fp8_quantize_launches(
                    op, fp8_recipe, norm_fed, cpp_gemm_share, swizzles
                )
                forward, backward = forward + extra_forward, backward + extra_backward
                if scale_inv_clone:  # the module's `scale_inv.clone()`, a PyTorch op: its share of one launch
                    forward += SCALE_INV_CLONE * n / fused
            if python_step_share:
                steps = grouped_python_steps(op, fp8_recipe is not None and op.fp8, weights_saved)
                forward, backward = forward + python_step_share * steps[0], backward + python_step_share * steps[1]
        else:  # a batched product of two activations: one strided-batched GEMM
            forward, backward = 1.0, 2.0
        side_forward, side_backward = op.side_bytes
        kernels_forward, kernels_backward = op.side_kernels
        backward += op.grad_adds  # other parameters' main-gradient adds by DDP's hook (`Op.grad_adds`)
        return forward + kernels_forward * (side_forward > 0), backward + kernels_backward * (side_backward > 0)
    table = {
        "loss": LOSS_FUSED if cross_entropy_fusion else LOSS,
        "permute": PERMUTE,
        "unpermute": UNPERMUTE,
        "rope": ROPE_FUSED if rope_fusion else (ROPE_UNFUSED_MLA if mla else ROPE_UNFUSED),
        "lookup": EMBEDDING_TP if tp > 1 else EMBEDDING,
        "dropout_mask": (0, 0),  # written by the dropout kernel that applies it (`dropout_probs`)
        "norms": (2 * NORM[0], 2 * NORM[1]),  # an MTP module's two norms
        "qk_norm": (2 * NORM[0], 2 * NORM[1]),  # the query's and the key's norm modules (module docstring)
    }
    if last in table:
        forward, backward = table[last]
        return float(forward), float(backward)
    if "norm" in last:
        return float(NORM[0]), float(NORM[1])
    return 1.0, 1.0


def plain(op: Op, rope_fusion: bool) -> bool:
    """Whether the op's kernels are plain PyTorch ops in a row (`PLAIN_OP_SHARE`), not a TE module's or a
    collective's."""
    last = op.name.rsplit(".", 1)[-1]
    if op.category == COMM:
        return False
    return op.launches is not None or last in PLAIN_OPS or (last == "rope" and not rope_fusion)


def fill_launches(
    op: Op, fill: tuple[float, float], wgrad_fused: bool, wgrad_per_expert: bool = False
) -> tuple[float, float]:
    """The NaN-fill kernels PyTorch's deterministic mode runs for an op's TransformerEngine buffers
    (`ppb_core.timing.nan_fill`): one a buffer. Flash attention: O and the statistics forward, dQ, dK,
    dV backward; rotary: Q and K each way; a linear layer: its output forward, its input gradient (and
    its 16-bit weight gradient unfused) backward; a norm: its output and its input gradient.
    *wgrad_per_expert*: a grouped GEMM's unfused weight gradients are one buffer an expert (TE before
    `releases.CHANGES["te_grouped_wgrad_one_buffer"]`: `[torch.empty(w.size(), ...) for w in weights]` in
    `_GroupedLinear.backward`, v1.13 to v2.15), else one for them all."""
    forward, backward = fill
    last = op.name.rsplit(".", 1)[-1]
    if op.attention is not None:
        # the score op's only fill is cuDNN's deterministic dP workspace (Hopper), in the backward; that
        # path's dQ product replaces the plain path's dQ conversion kernel, so the backward's count stays
        counts = (0.0, 1.0) if last == "flash_scores" else (2.0, 3.0)
    elif last in ("rope", "qk_norm"):  # Q and K each: rotary's fused kernels, or the two norm modules' outputs
        counts = (2.0, 2.0)
    elif op.gemm is not None:  # a fused GEMM's one buffer shared by its parts; a SequentialMLP's per expert
        _, _, n, groups, fused = op.gemm
        each = max(1, op.sequential)
        wgrads = 0.0 if wgrad_fused else (groups if wgrad_per_expert and not op.sequential else 1.0)
        counts = (each * n / fused, each * (1.0 + wgrads) * n / fused)
    else:
        counts = (1.0, 1.0)
    return (counts[0] if forward > 0 else 0.0), (counts[1] if backward > 0 else 0.0)


def norm_fed(ops: Sequence[Op]) -> set[str]:
    """The GEMM ops whose TE linear runs the norm writing their input (`Op.norm_input`: TE's LayerNormLinear,
    directly or through the sequence-parallel all-gather after the norm), where a recipe's norm can quantize
    or take the amax; a norm module of its own (an MoE layer's, MLA's input norm, MTP's) writes 16 bits,
    which the linear after it quantizes."""
    return {op.name for op in ops if op.norm_input}


def layer_launches(
    ops: Sequence[Op],
    *,
    tp: int,
    rope_fusion: bool,
    cross_entropy_fusion: bool,
    wgrad_fused: bool,
    fills: Mapping[str, tuple[float, float]] | None = None,
    fp8_recipe: str | None = None,
    router_cast: bool = False,
    plain_share: float = 1.0,
    cpp_gemm_share: float = 1.0,
    accumulate_kernels: int = 1,
    wgrad_per_expert: bool = False,
    sp_transposes: tuple[set[str], set[str]] | None = None,
    python_step_share: float = 0.0,
    weights_saved: bool = False,
    activations_swizzled: bool = False,
    sp_ops: tuple[set[str], set[str]] = (set(), set()),
    mxfp8_userbuffers: bool = False,
    scale_inv_clone: bool = False,
    late_transposes: frozenset[str] | set[str] = frozenset(),
) -> dict[str, tuple[float, float]]:
    """{op name: (forward, backward) launches} of a layer's ops, with the NaN fills' kernels where
    *fills* (`nan_fill.deterministic_fill_bytes`) names them, and FP8 training's quantization kernels
    under *fp8_recipe*; *router_cast*: `--moe-router-dtype` differs from the training dtype;
    *plain_share*: a plain PyTorch op's launch in TE-module launches (`PLAIN_OP_SHARE` where measured);
    *cpp_gemm_share*: a grouped GEMM's expert GEMM after its call's first likewise (`CPP_GEMM_US` over the
    measured time a launch); *accumulate_kernels*: as `op_launches`; *wgrad_per_expert*: as `fill_launches`;
    *sp_transposes*: (ops fed by a TP all-gather, ops whose output gradient is all-gathered) where TE makes
    the FP8 transpose after the gather (`sp_transpose_launches`); *python_step_share*, *weights_saved*: as
    `op_launches` (GroupedLinear's per-expert Python); *activations_swizzled*: MXFP8 activations quantized
    with GEMM-swizzled scales (TE v2.12 on, `mxfp8_swizzles`), but for *sp_ops* (ops fed by a TP all-gather,
    ops whose output gradient is all-gathered); *mxfp8_userbuffers*: MXFP8 under Megatron's --tp-comm-overlap,
    where an op whose output gradient is all-gathered quantizes it twice, a Python call each (`ub_requantize`);
    *scale_inv_clone*: as `op_launches`; *late_transposes*: the ops whose backward transposes their saved FP8
    input, a kernel of its own (TE before v2.0, a row-parallel Linear under SP: `TimeModel._late_transpose`)."""
    mla = any(op.name.rsplit(".", 1)[-1] == "kv_up" for op in ops)
    fed = norm_fed(ops) if fp8_recipe is not None else set()
    counts = {}
    for op in ops:
        forward, backward = op_launches(
            op,
            tp=tp,
            mla=mla,
            rope_fusion=rope_fusion,
            cross_entropy_fusion=cross_entropy_fusion,
            wgrad_fused=wgrad_fused,
            fp8_recipe=fp8_recipe,
            norm_fed=op.name in fed,
            router_cast=router_cast,
            cpp_gemm_share=cpp_gemm_share,
            accumulate_kernels=accumulate_kernels,
            python_step_share=python_step_share,
            weights_saved=weights_saved,
            swizzles=mxfp8_swizzles(activations_swizzled, op.name in sp_ops[0], op.name in sp_ops[1]),
            scale_inv_clone=scale_inv_clone,
        )
        if mxfp8_userbuffers and op.name in sp_ops[1]:
            backward += ub_requantize(op)
        if op.sequential and op.gemm is None:  # a SequentialMLP's activation: each expert's own kernels
            forward, backward = op.sequential * forward, op.sequential * backward
        if plain_share != 1.0 and plain(op, rope_fusion):  # counted in TE-module launches' worth
            forward, backward = plain_share * forward, plain_share * backward
        if op.name in late_transposes and op.gemm is not None:  # `tex.fp8_transpose` of the saved input
            _, _, n, _, fused = op.gemm
            backward += n / fused
        if sp_transposes is not None:
            backward += sp_transpose_launches(op, op.name in sp_transposes[0], op.name in sp_transposes[1])
            if fp8_recipe == "delayed" and op.name in fed and op.name not in sp_transposes[0]:
                forward += norm_transpose_launches(op)
        if fills and op.name in fills:
            extra_forward, extra_backward = fill_launches(op, fills[op.name], wgrad_fused, wgrad_per_expert)
            forward, backward = forward + extra_forward, backward + extra_backward
        counts[op.name] = (forward, backward)
    return counts


def fsdp_unit_launches(ops: Sequence[Op], scaled: bool, plain_share: float = 1.0) -> tuple[float, float]:
    """Megatron-FSDP's own launches for one FSDP unit (a TransformerLayer) a micro-batch under
    `optim_grads_params`, (forward, backward), beside the layer's ops.

    The unit's parameters sit in one bucket per (dtype, expert or not, requires_grad)
    (param_and_grad_buffer.py `_get_parameter_groups`: custom_fsdp at 3806ec2754 and Megatron-FSDP's
    megatron_fsdp/ at 4e85d74ae9): one for a dense layer, two for a layer with routed experts (their
    parameters reduce over the expert data-parallel group). Each bucket a micro-batch:
    - forward, the pre-forward hook's all-gather (fully_sharded_data_parallel.py / megatron_fsdp.py
      `_pre_forward_param_unshard` -> `AllGatherPipeline.all_gather_bucket_and_set_items`:
      `all_gather_into_tensor`), released after the forward (`_post_forward`);
    - backward, the pre-backward hook's all-gather again (`_pre_backward`), then, once the bucket's
      gradients are in, `GradReducePipeline.mark_bucket_ready` (3806ec2754) /
      `_bucket_group_gradient_reduce` (4e85d74ae9): `gradient_reduce_preprocessing`'s `grad_data.mul_`
      unless the gradients go unscaled (*scaled* false: --calculate-per-token-loss gives no scaling factor,
      --ddp-average-in-collective NCCL's AVG), `reduce_scatter_tensor`, and `local_buffer += grad_shard`
      into the local main-gradient shard.
    A collective is a launch, the two element-wise ops plain PyTorch ops (*plain_share*). Under full recompute
    the rerun's pre-forward hook makes the backward's gather (the pricer takes one off the backward: the rerun's
    forward launches count it). The per-parameter
    main-gradient copy (`_grad_acc`: `main_grad.copy_(param.grad)`) is counted as DDP's add already
    (`op_launches`); the hooks' Python over each parameter (views, lookups) is not counted."""
    buckets = 2 if any(op.name.rsplit(".", 1)[-1].startswith("experts_") and op.gemm is not None for op in ops) else 1
    backward = 2.0 + plain_share * (2.0 if scaled else 1.0)
    return float(buckets), buckets * backward
