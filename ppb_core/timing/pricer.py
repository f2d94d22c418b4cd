"""`TimeModel`: forward and backward milliseconds of a layer under each recompute state, on one device.

Each op of the layer's table (`ppb_core.timing.flops`) is priced on the run's device:
- matmuls by their shape (`ppb_core.timing.kernels`: tiles and waves over the SMs at the device's
  large-GEMM ceiling, never below the HBM roofline), flash attention by sequence and head size,
  at the dtype's peak (fp32 as TF32, half the 16-bit rate);
- element-wise ops by bytes / (HBM · memory_efficiency);
- collectives by `ppb_core.timing.comm`, less what the run's `timing.overlap` hides behind the
  compute of one partner op in the same pass: hidden = min(overlap · c, partner), the partner losing
  the SMs the collective runs on while they overlap (`Kernels.contention`), exposed =
  c − overlap · c + max(overlap · c − partner, contention · hidden) (the slowed partner or the collective
  beside it, whichever ends later); a persistent GEMM with no SM target instead waits for them
  (`kernels.persistent_added_s`, `TimeModel._late_ctas`).
The forward is the sum of the ops' forwards and the backward the sum of their backwards, plus
what the state runs again: under SEL the ops of `recompute_set` (each at its forward price; a
re-sent all-gather may instead hide behind its consumer's input gradient, never costing more
than in the forward), under FULL the whole forward. A calibration (`calibration.py`) then
scales the three terms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppb_core.config.run import DTYPE_BYTES, Overlap, RunConfig
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.torchtitan import op_policy_supported
from ppb_core.model.kinds import BodyKind, LayerKind, TailKind
from ppb_core.model.switches import OPTIONS, SELECTIVE_OPTIONS, LayerType, normalized, option_state
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, walk
from ppb_core.timing.calibration import Calibration, Measurement, fit_calibration, fit_report, read_calibration
from ppb_core.timing.checkpoint_copies import storage_copies
from ppb_core.timing.comm import Links, collective_seconds, hop_seconds, one_shot_seconds
from ppb_core.timing.flops import (
    ALL_GATHER,
    COMM,
    MATMUL,
    MEMORY,
    REDUCE_SCATTER,
    Collective,
    Op,
    OpGeometry,
    early_stop_tail,
    layer_ops,
    main_grad_passes,
    op_policy_rerun,
    rerun_ops,
)
from ppb_core.timing.funcol import fused_gather_bytes, fused_scatter_bytes, sequence_copy_bytes
from ppb_core.timing.graphs import dispatch_captured, graphed_launches
from ppb_core.timing.host import HostWaits, layer_host_waits
from ppb_core.timing.kernels import Kernels, persistent_added_s
from ppb_core.timing.launches import (
    CPP_GEMM_US,
    PER_TENSOR_RECIPES,
    PLAIN_OP_SHARE,
    PY_STEP_SHARE,
    fsdp_unit_launches,
    layer_launches,
    norm_fed,
    op_launches,
)
from ppb_core.timing.nan_fill import deterministic_fill_bytes
from ppb_core.timing.ring import exposed_exchanges_s, ring_attention_s
from ppb_core.timing.shared_overlap import beside
from ppb_core.timing.symm_mem import fused_exposed_s
from ppb_core.timing.userbuffers import (
    PIPELINE,
    PIPELINE_SPLITS,
    RING_EXCHANGE,
    pipeline_s,
    ring_exchange_s,
    rs_reduce_s,
)

# The ops of the modules Megatron-Core's `recompute_modules` checkpoint whole with normal (reentrant)
# checkpointing (megatron/core/transformer/transformer_config.py: '"core_attn", "mlp", "moe", and
# "shared_experts" use normal checkpointing'; transformer_layer.py checkpoints `self.mlp` or the MoE
# layer, attention.py `self.core_attention`): the unfused core's QKᵀ, softmax, dropout and PV product
# with its copies, or the flash kernel; the MLP's GEMMs, activation and tensor-parallel collectives;
# the MoE layer's router, permutation, dispatch, experts, combine and shared experts; the shared
# experts alone.
_SHARED = ("gather_shared", "amax_shared", "shared_in", "shared_act", "shared_out", "reduce_shared")
MEGATRON_REPLAYS: dict[str, tuple[str, ...]] = {
    "core_attn": ("scores", "softmax", "dropout_mask", "dropout_probs", "context", "flash_scores", "flash_context"),
    "mlp": ("gather_mlp", "amax_mlp", "mlp_in", "mlp_act", "mlp_out", "reduce_mlp"),
    "moe": (
        "router",
        "router_topk",
        "permute",
        "dispatch_map",  # the allgather dispatcher's (flops._allgather_dispatch)
        "dispatch_probs",
        "dispatch",
        "local_permute",
        "gather_experts",
        "experts_pad",  # TEGroupedMLP's FP8 padding (flops.expert_fp8_pads)
        "experts_pad_probs",
        "experts_in",
        "experts_clamp",  # GPT-OSS's (flops._glu_clamp) and its per-expert fc2 bias (flops._expert_output_bias)
        "experts_act",
        "experts_out",
        "experts_bias",
        "experts_cat",
        "experts_unpad",
        "reduce_experts",
        "local_unpermute",
        "combine",
        "combine_cast",
        "unpermute",
        *_SHARED,
    ),
    "shared_experts": _SHARED,
    # `CheckpointWithoutOutput` replays `qkv_up_proj_and_rope_apply` whole, the TE column-parallel up-projections'
    # all-gathers of their latent shards under SP too (multi_latent_attention.py, c08d89bea0 and d98e8a64): the
    # gather's `recompute_comm` (flops._projections); the norms, up-projections and rotary it reruns by `attUp`.
    "mla_up_proj": ("gather_latents",),
}
# The activation each Megatron module recomputes, by op: ppb's `ffAct` switch is one for a layer's every
# activation, Megatron's modules are not. "mlp" checkpoints a dense layer's MLP only (transformer_layer.py
# `TransformerLayer.__init__`: `if not self.is_moe_layer: self.recompute_mlp = True`), "moe_act" the routed
# experts' activation only (moe/experts.py `activation_recompute`; the shared experts are an `MLP`, which
# reads no recompute module), "moe" the MoE layer whole, "shared_experts" the shared experts (the same at
# Megatron-LM 0d8e0714cd, NeMo 25.11's, 2edffadb52, NeMo 26.04.01's, and d98e8a64). An MTP layer's
# transformer layer is built from the same spec and config: its ops (prefix `mtpN.`) are matched alike.
# GPT-OSS's clamp (`flops._glu_clamp`) runs inside the checkpointed function: `TEGroupedMLP.bias_act_func` calls
# fused_bias_geglu.py `weighted_bias_quick_geglu_impl`, which clamps before its fused kernel (2edffadb52,
# 0d8e0714cd), so "moe_act" reruns it with the activation.
MEGATRON_ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "mlp": ("mlp_act",),
    "moe_act": ("experts_clamp", "experts_act"),
    "moe": ("experts_clamp", "experts_act", "shared_act"),
    "shared_experts": ("shared_act",),
}


def unprefixed(name: str) -> str:
    """An op's name without its MTP layer's prefix (`mtp0.experts_act` -> `experts_act`)."""
    return name.rsplit(".", 1)[-1]


_STATES: dict[str, tuple[LayerType, ...]] = {
    HEAD: (LayerType.EMBEDDING_LAYER,),
    TAIL: (LayerType.OUTPUT_LAYER,),
    BODY: (LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER),
}


def calibrated_name(kind: LayerKind) -> str:
    """The kind a calibration row names for a layer of *kind*: its own name, or for a part of a split
    TAIL (Megatron's standalone MTP, or the final norm apart from `mL`) the whole TAIL's (`output_mtp`).
    The row measures the whole TAIL on one device, as the balancer describes it; each part takes its
    factors, so the parts, which partition the TAIL's ops, add up to the measurement."""
    return kind.whole_name if isinstance(kind, TailKind) else kind.name


@dataclass(frozen=True)
class OpPrice:
    """One op's milliseconds: its forward, its backward, and its price when the backward runs it again."""

    forward_ms: float
    backward_ms: float
    recompute_ms: float


@dataclass(frozen=True)
class LayerParts:
    """The model's terms of a layer in a state, before calibration."""

    forward_ms: float
    backward_ms: float  # the plain backward
    recompute_ms: float  # what the state runs again in the backward

    @property
    def total_backward_ms(self) -> float:
        return self.backward_ms + self.recompute_ms


@dataclass(frozen=True)
class OpTime:
    """A row of the per-op breakdown; `phase` is forward, backward or recompute (run again in the backward)."""

    name: str
    block: str
    category: str
    switch: str | None
    phase: str
    flops: float
    bytes: float
    comm_bytes: float
    ms: float


# the breakdown's row for `CheckpointWithoutOutput`'s restore copies (`TimeModel._restored`), no op of the table
RESTORE_COPIES = "checkpoint_restore_copies"

# TransformerEngine's compute streams for a grouped GEMM's per-expert GEMMs (`TimeModel._grouped_rounds`).
TE_COMPUTE_STREAMS = 4


def float8_weight_cast_bytes(run: RunConfig) -> int:
    """HBM bytes per weight element torchtitan's Float8 linears move to quantize their weight in each
    forward (and each rerun of it) when FSDP does not gather it in float8: torchao's `Float8Linear.forward`
    (torchao float8/float8_linear.py at eab345c, torchtitan 9dec370's pin; the same in later releases)
    takes the unsharded bf16 weight's scale (`get_weight_scale`: `tensor_to_scale`, an amax over it, read
    bc) and casts it (`cast_weight_to_float8_t`: read bc, write a byte) unless it arrives as float8
    (`tensor_already_casted_to_fp8`, FSDP's Float8 all-gather, `timing.fp8_fsdp_all_gather`). The fp8
    copy is saved for the backward (`manual_float8_matmul_with_args_in_float8`): no cast there."""
    timing = run.timing
    if run.framework != "torchtitan" or timing.matmul_dtype != "fp8" or timing.fp8_fsdp_all_gather:
        return 0
    return 2 * run.training.dtype_bytes + 1


def torchtitan_overlap(run: RunConfig) -> Overlap:
    """The run's overlap shares; under torchtitan nothing hides the backward's input-gradient
    reduce-scatters (`tp_async` 0) unless the run states `tp_async`.

    `tp_async` is Megatron-LM's: `LinearWithGradAccumulationAndAsyncCommunication` launches the
    input gradient's reduction and then computes the weight gradient behind it. torchtitan's TP is
    DTensor redistribution (torch/distributed/tensor/parallel/style.py: its plan's
    `PrepareModuleInput` all-gathers the sequence shard for wq/wk/wv and w1/w3, `redistribute`
    without `async_op`): the backward runs the reverse reduce-scatter in `Redistribute.backward`
    (torch/distributed/tensor/_redistribute.py) once autograd has summed the shared input's gradient
    over its consumers' `MmBackward`s, their weight gradients already computed, so nothing of theirs
    is left to hide it; under compile Inductor keeps that order (`reorder_for_compute_comm_overlap`
    off by default). Async TP does not change it: Inductor's micro-pipelining fuses a reduce-scatter
    only when a matmul produces its input (fx_passes/micro_pipeline_tp.py `_find_producer_matmul`:
    mm, or reshape-mm-reshape), and this one reduces a sum of matmuls. The all-gathers a backward
    reruns (recompute) keep the forward's share (`tp`), fused as in the forward under async TP.

    Ring attention under torch.compile: `cp_ring` 0 unless stated. torchtitan compiles each block with
    `fullgraph=True` (9dec370 parallelize_llama.py `apply_compile`), so the ring is traced into the
    block's graph (`ring.compiled_titan_merge_bytes`), and a functional collective traced returns its
    result already waited for (torch/distributed/_functional_collectives.py `_maybe_wrap_tensor`:
    `wait_tensor(self)` when `_are_we_tracing()`, instead of the AsyncCollectiveTensor eager code waits
    on at the next step): the K, V all-gather waits before step 0's flash call, and each dK, dV
    exchange (`permute_tensor`) before the next step's; Inductor keeps that order (`reorder_for_
    compute_comm_overlap` off by default). Eager runs keep the stated share (one step's cover)."""
    overlap = run.timing.overlap
    if run.framework != "torchtitan":
        return overlap
    update: dict[str, float] = {}
    if "tp_async" not in overlap.model_fields_set:
        update["tp_async"] = 0.0
    if run.timing.torch_compile and "cp_ring" not in overlap.model_fields_set:
        update["cp_ring"] = 0.0
    return overlap.model_copy(update=update) if update else overlap


def _te_sp_ops(ops: tuple[Op, ...]) -> tuple[set[str], set[str]]:
    """(GEMMs whose input a TP all-gather brings, GEMMs whose output a TP reduce-scatter takes) under
    sequence parallelism: TransformerEngine's column-parallel linears quantize the input's sequence shard
    and all-gather it in FP8 (layernorm_linear.py `_LayerNormLinear.forward`, linear.py `_Linear.forward`:
    `gather_along_first_dim(..., quantizer=...)`, distributed.py `_all_gather_fp8` / `_all_gather_mxfp8` /
    `_all_gather_fp8_blockwise` quantize the local tensor before `all_gather_into_tensor`; TE v2.9 and
    d0067d0d; v1.13 cast before the gather too); the row-parallel ones quantize their output gradient's
    shard before its backward all-gather likewise (base.py `grad_output_preprocess`, `gather_grad_output`).
    Delayed, current scaling, blockwise and MXFP8 alike."""
    gathers = {
        op.name
        for op in ops
        if op.forward_comm and op.forward_comm.kind == ALL_GATHER and op.forward_comm.group == "tp"
    }
    gathered = {op.name for op in ops if op.gemm is not None and op.weight_elements and set(op.inputs) & gathers}
    scattered = {
        name
        for op in ops
        if op.forward_comm
        and op.forward_comm.kind == REDUCE_SCATTER
        and op.forward_comm.group == "tp"
        and op.backward_comm
        and op.backward_comm.kind == ALL_GATHER
        for name in op.inputs
    }
    return gathered, scattered


class TimeModel:
    """Prices the layers of one run config; implements `ppb_core.payload.sources.TimeSource`.

    *calibration* is a CSV path, parsed `Measurement`s, or None for the run config's
    `timing.calibration` (no calibration if that is unset too).
    """

    def __init__(self, run: RunConfig, calibration: str | Path | tuple[Measurement, ...] | None = None) -> None:
        self.run = run
        self.device = run.device.profile()
        self.overlap = torchtitan_overlap(run)
        self.links = Links.from_run(run, self.device)
        # Megatron-LM accumulates weight gradients in fp32 inside the GEMM (gradient_accumulation_fusion:
        # read and write the fp32 main_grad); torchtitan writes them; MindFormers below.
        # Megatron with --no-gradient-accumulation-fusion: TransformerEngine's GEMM writes a 16-bit
        # gradient (fuse_wgrad_accumulation=False) and the DDP hook runs `param.main_grad.add_(param.grad)`
        # (megatron/core/distributed/distributed_data_parallel.py `_make_backward_post_hook`): each
        # weight element's main gradient read and written and the 16-bit one read, once per micro-batch.
        framework = run.framework
        fused = framework != "torchtitan" and run.timing.gradient_accumulation_fusion
        self._wgrad_bytes = 2 * run.training.grad_bytes if fused else run.training.dtype_bytes
        # DeepSpeed's BF16_Optimizer (`timing.deepspeed_bf16_optimizer`, Megatron-DeepSpeed) casts the 16-bit
        # gradient to fp32 before adding it: two more passes over fp32 elements (`flops.main_grad_passes`).
        unfused_megatron = framework == "megatron" and not run.timing.gradient_accumulation_fusion
        passes = main_grad_passes(run.timing.deepspeed_bf16_optimizer)
        accumulate = passes * run.training.grad_bytes + run.training.dtype_bytes
        self._accumulate_bytes = accumulate if unfused_megatron else 0
        # MindFormers (mindformers/modules/layers.py `Linear.construct`, a4dfb8219): the weight-gradient
        # GEMM writes its output in the compute dtype; with the weights kept in another dtype
        # (`timing.param_dtype`, model_config.param_init_type) the Linear casts its weight each forward
        # (`self.cast(self.weight, self.dtype)`: read it, write the compute copy) and the cast's gradient
        # casts the weight gradient back (read it, write the param dtype); over more than one micro-batch
        # (a pipeline's micro_batch_num or gradient accumulation) MindSpore adds each into an accumulation
        # buffer of the parameters' dtype (read both, write one). In place of the fused fp32 accumulation.
        self._weight_cast_bytes = 0
        if framework == "mindformers":
            compute_bytes = run.training.dtype_bytes
            param = run.timing.param_dtype or run.training.dtype
            param_bytes = DTYPE_BYTES[param]
            cast = param_bytes + compute_bytes if param != run.training.dtype else 0
            self._weight_cast_bytes = cast
            self._wgrad_bytes = compute_bytes
            self._accumulate_bytes = cast + (3 * param_bytes if run.training.micro_batches > 1 else 0)
        # Megatron's --deterministic-mode turns on PyTorch's NaN fill of what TransformerEngine allocates
        # (`ppb_core.timing.nan_fill`): one more write of those outputs before the kernels that produce them.
        self._nan_fill = (
            framework == "megatron" and run.timing.deterministic and run.timing.transformer_impl == "transformer_engine"
        )
        self.kernels = Kernels.from_device(
            self.device,
            run.training.dtype,
            framework,
            run.timing.torch_compile,
            run.timing.matmul_dtype,
            run.timing.attention_deterministic,  # what TE reads: the env var or --deterministic-mode
            run.timing.transformer_impl == "transformer_engine",
            fused_norm=run.timing.norm_type != "rmsnorm",
            sdpa_backend=run.timing.sdpa_backend,
            te_attention_backend=run.te_attention_backend_run,
            cudnn_release=run.timing.cudnn_version,
            fp8_attention_recipe=run.timing.fp8_recipe if run.timing.fp8_dot_product_attention else None,
        )
        # The GEMMs FP8 training leaves in 16 bits (`Op.fp8`: the output layer, the router) run on these.
        self._kernels_16 = (
            Kernels.from_device(
                self.device,
                run.training.dtype,
                framework,
                run.timing.torch_compile,
                None,
                run.timing.attention_deterministic,
                fused_norm=run.timing.norm_type != "rmsnorm",
                sdpa_backend=run.timing.sdpa_backend,
                te_attention_backend=run.te_attention_backend_run,
                cudnn_release=run.timing.cudnn_version,
            )
            if run.timing.matmul_dtype == "fp8"
            else self.kernels
        )
        # A step's GEMMs run back to back at a layer's shapes: where measured so (Blackwell, TE's GEMM
        # profiling loop, `LAYER_GEMM_SHARE_BLACKWELL`), at that share of the tiles' MAMF price; the
        # single-kernel tables (XLA's) that set the tile rule and fixed times stay at MAMF (`Kernels`).
        fp8 = run.timing.matmul_dtype == "fp8"
        ceiling = self.kernels.gemm_ceiling * (
            self.device.fp8_layer_gemm_share if fp8 else self.device.layer_gemm_share
        )
        if fp8 and run.timing.fp8_recipe == "mxfp8":
            # MXFP8's block-scaled GEMMs, with the scale swizzles TE runs before each (`mxfp8_matmul_ratio`)
            ceiling *= self.device.mxfp8_matmul_ratio
        if fp8 and run.timing.fp8_recipe == "blockwise":
            # TE's block-scaled FP8 GEMMs on Hopper at their measured rate over per-tensor FP8's
            # (`DeviceProfile.blockwise_matmul_ratio`)
            ceiling *= self.device.blockwise_matmul_ratio
        # attention back to back as well (`ATTENTION_BACK_TO_BACK_SHARE_B200`): the catalog's rates are single calls
        sustained = self.device.attention_back_to_back_share
        self.kernels = dataclasses.replace(
            self.kernels,
            gemm_ceiling=ceiling,
            attention_forward=self.kernels.attention_forward * sustained,
            attention_backward=self.kernels.attention_backward * sustained,
        )
        # the attention of layers outside the FP8 context (`Op.fp8` false: timing.fp8_bf16_layers) in 16 bits
        self._attention_16 = dataclasses.replace(self.kernels, fp8_attention=None)
        ceiling_16 = self._kernels_16.gemm_ceiling * self.device.layer_gemm_share
        self._kernels_16 = dataclasses.replace(self._kernels_16, gemm_ceiling=ceiling_16) if fp8 else self.kernels
        self._geometry = OpGeometry.from_run(run)
        self._fp8_recipe = run.timing.fp8_recipe if run.timing.matmul_dtype == "fp8" else None
        # TransformerEngine's quantize kernels run at their own measured share of HBM where stated
        # (`DeviceProfile.mxfp8_quantize_efficiency`, `fp8_quantize_efficiency`; `_quantize_s`)
        quantize_share = {
            "mxfp8": self.device.mxfp8_quantize_efficiency,
            "tensorwise": self.device.fp8_quantize_efficiency,
        }.get(self._fp8_recipe or "", 0.0)
        te_casts = framework != "torchtitan" and quantize_share > 0
        self._quantize_bytes_per_s = self.device.hbm_bandwidth_gbs * 1e9 * quantize_share if te_casts else 0.0
        self._norm_fed: set[str] = set()  # FP8 GEMMs fed by a TE norm (tensorwise scaling's fused amax)
        # torchtitan's GEMMs fed by a float8 TP all-gather, and those whose output a TP reduce-scatter takes
        self._float8_gathered: set[str] = set()
        self._float8_scattered: set[str] = set()
        # TransformerEngine's linears under SP that quantize their input's sequence shard before the FP8
        # all-gather, and those whose output gradient's shard they quantize before its gather (`_te_sp_ops`)
        self._te_gathered: set[str] = set()
        self._te_scattered: set[str] = set()
        # TE before v2.0 under SP: a row-parallel Linear casts its input alone forward and transposes the saved FP8
        # copy backward (`releases.CHANGES["te_fp8_input_transposed_in_forward"]`; `_cast_bytes`)
        self._te_late_transpose = (
            framework == "megatron"
            and run.timing.transformer_impl == "transformer_engine"
            and not run.framework_release.holds("te_fp8_input_transposed_in_forward")
        )
        # per-tensor FP8 GEMMs TN only, so the column-wise copy an FP8 transpose: below Blackwell, and on Blackwell
        # under TE before v2.0 (`releases.CHANGES["te_fp8_non_tn_gemm_sm100"]`; `_cast_bytes`)
        capability = self.device.compute_capability
        self._tn_only_fp8 = 9.0 <= capability < 10.0 or (
            capability >= 10.0 and not run.framework_release.holds("te_fp8_non_tn_gemm_sm100")
        )
        # MLA's unfused RoPE kernels (`launches.op_launches`' *mla*), for the fixed kernel time (`_memory_kernels`)
        self._mla = any(getattr(spec, "is_mla", False) for spec in run.specs.values())
        self._fp8_weight_bytes = float8_weight_cast_bytes(run)
        self._configured = {name: normalized(run.switches(name)) for name in run.model_names}
        self._prices: dict[tuple[str, LayerKind], dict[str, OpPrice]] = {}
        self._parts: dict[tuple, LayerParts] = {}
        self._links: dict[tuple, tuple[float, float, float, float]] = {}
        self._times: dict[tuple, tuple[float, float]] = {}
        self._host: dict[tuple, HostWaits] = {}
        self._options: dict[tuple, dict[str, tuple[float, float]]] = {}
        self._option_states = {
            name: {option: option_state(option, configured) for option in OPTIONS}
            for name, configured in self._configured.items()
        }
        self.calibration: Calibration | None = None
        self._calibrated_layers: dict[tuple[str, str, str], Layer] = {}  # the run's kinds a row may name
        if calibration is None and run.timing.calibration is not None:
            calibration = Path(run.base_dir) / run.timing.calibration
        if calibration is not None:
            self.calibration = self._calibrate(calibration)

    # The op table and its prices ------------------------------------------------------------------

    def ops(self, layer: Layer) -> tuple[Op, ...]:
        ops = layer_ops(layer.kind, self._geometry)
        if self._fp8_recipe in PER_TENSOR_RECIPES and self.run.framework != "torchtitan":
            self._norm_fed |= norm_fed(ops)
        if self._geometry.float8_tp:  # torchtitan's GEMMs reading the block's float8 TP all-gather
            comms = {op.name for op in ops if op.category == COMM}
            self._float8_gathered |= {op.name for op in ops if op.inputs and set(op.inputs) <= comms}
            self._float8_scattered |= {name for op in ops if op.category == COMM for name in op.inputs}
        if self._fp8_recipe is not None and self.run.framework != "torchtitan":
            gathered, scattered = _te_sp_ops(ops)
            self._te_gathered |= gathered
            self._te_scattered |= scattered
        return ops

    def _titan_cast_bytes(self, op: Op, gradient: bool) -> float:
        """torchtitan's `_cast_bytes` (torchao Float8Linear, tensorwise dynamic scaling; torchao at eab345c,
        torchtitan 9dec370's pin), per element of the GEMM's input (*gradient*: its output gradient):

        - input: `hp_tensor_to_float8_dynamic` takes the amax itself (`tensor_to_scale`: read bc; no norm
          computes it beside its output) and casts (read bc, write a byte). Linears reading one tensor
          (torchtitan's wq, wk, wv: ppb's qk_proj and v_proj of one fused GEMM) share its cast: compiled,
          AOTAutograd's CSE merges the identical casts; under Float8 TP `PrepareFloat8ModuleInput` casts
          the attention's and the feed-forward's input once (float8_tensor_parallel.py). So each op pays
          its share of the fused GEMM's columns (eager, without Float8 TP, its own cast), and under
          Float8 TP the cast runs on the sequence shard before the all-gather: 1/tp of the gathered rows.
        - output gradient: `NoopFwToFloat8BwDynamic` takes its amax and casts (2·bc + 1); under Float8 TP a
          row-parallel linear's after the output's redistribute, so on the sequence shard before the
          backward's all-gather (`Float8RowwiseParallel._prepare_output_fn`): 1/tp of the rows.
        Not per element here: the weight gradient's `torch._scaled_mm` takes a row-major and a
        column-major operand (float8_ops.py `preprocess_addmm`), so the output gradient's transpose and
        the saved fp8 input are copied (read and write a byte: `_titan_wgrad_copies`)."""
        if self.run.timing.matmul_dtype != "fp8" or not op.fp8 or op.gemm is None:
            return 0.0
        read = self.run.training.dtype_bytes
        quantize = 2 * read + 1.0
        # fed by a float8 TP all-gather (its input) or feeding a reduce-scatter (its gradient): on the shard
        tp = self.run.parallel.tp
        if gradient:
            return quantize / (tp if op.name in self._float8_scattered else 1)
        return quantize * self._titan_input_share(op) / (tp if op.name in self._float8_gathered else 1)

    def _titan_input_share(self, op: Op) -> float:
        """The op's share of its input's Float8 cast and copy: its columns of the fused GEMM where the linears
        reading one tensor share them (compiled: CSE; Float8 TP: `PrepareFloat8ModuleInput`) or one linear
        holds them (torchtitan main's wqkv, `OpGeometry.fused_qkv`: one `Float8Linear`), else its own, one for
        each separate linear it holds (`Op.linears`: eager, wq and wk each cast the input, `Float8Linear.forward`
        a module each)."""
        _, _, n, _, fused = op.gemm
        shared = self.run.timing.torch_compile or op.name in self._float8_gathered or not op.linears
        return n / fused if shared else float(max(1, len(op.linears)))

    def _titan_wgrad_copies(self, op: Op) -> float:
        """HBM bytes of the weight gradient's operand copies under torchtitan's Float8 (`_titan_cast_bytes`):
        `preprocess_addmm` makes the transposed output gradient row-major (`a_data.contiguous()`) and the
        saved fp8 input column-major (`b.t().contiguous().t()`), a byte read and written per element; the
        input's copy shared by the linears reading it (CSE), like its cast. The input gradient's
        `torch.mm(grad_output, weight_fp8_t.t())` copies the fp8 weight column-major likewise."""
        if self.run.framework != "torchtitan" or self.run.timing.matmul_dtype != "fp8" or not op.fp8:
            return 0.0
        if op.gemm is None:
            return 0.0
        m, k, n, groups, _ = op.gemm
        return 2.0 * (m * groups * (n + k * self._titan_input_share(op)) + op.weight_elements)

    def _cast_bytes(self, op: Op, gradient: bool) -> float:
        """HBM bytes per element of quantizing an FP8 GEMM's input (*gradient*: its output gradient),
        TransformerEngine v2.9 (NeMo 25.11's). Under delayed scaling one pass: read in the compute dtype,
        write a byte; after a TE norm in its linear (`norm_fed`) none, the norm kernel writing the FP8 itself
        (normalization.cpp FULLY_FUSED for `Float8Quantizer`; the norm op writes a byte: `OpGeometry.te_norm_fp8_out`).
        Tensorwise (current) scaling reads the tensor once more for its amax first (quantizer.cpp
        `Float8CurrentScalingQuantizer::quantize_impl`: `nvte_compute_amax`, then the cast), but after such
        a norm, which takes the amax beside its output (FUSED_NORM_AMAX_FP8); MXFP8 and blockwise write a
        row-wise and a column-wise copy in their one pass (the weight gradient's operand: quantizer.cpp
        `Float8BlockQuantizer::create_tensor` allocates the column-wise data wherever the usage asks for it;
        the scales, 1/32 a byte, not counted). Per-tensor FP8 (delayed, current scaling) on Hopper also
        writes the transpose the weight-gradient GEMM reads: cuBLASLt runs only TN FP8 GEMMs below Blackwell
        (common/transformer_engine.cpp `nvte_is_non_tn_fp8_gemm_supported`: compute capability 10.x or 13+;
        quantizer.cpp `Float8Quantizer::create_tensor` and the current-scaling one: `with_transpose`), in the
        cast-transpose's one pass, or after a delayed-scaling norm by `nvte_transpose` (rmsnorm_api.cpp
        `rmsnorm_fwd`: read and write a byte). TE before v2.0 ran them TN only on Blackwell too (`_tn_only_fp8`).

        Per element of the op's own GEMM operand: a fused GEMM's input (Megatron's linear_qkv, ppb's
        qk_proj and v_proj) is one tensor quantized once (layernorm_linear.py `_LayerNormLinear.forward`,
        v2.9), so each part pays its columns' share of it. Under SP, TE quantizes the sequence shard and
        all-gathers it in FP8 (`_te_sp_ops`): the pass runs on 1/tp of the rows, and a per-tensor
        transpose is made after the gather from the FP8 data (`_create_transpose` / `update_usage`: read
        and write a byte) over all of them."""
        if self.run.timing.matmul_dtype != "fp8" or not op.fp8 or op.prequantized[gradient]:
            return 0.0  # (prequantized: the kernel before wrote it quantized, `ppb_core.timing.fused_experts`)
        if self.run.framework == "torchtitan":
            return self._titan_cast_bytes(op, gradient)
        read = self.run.training.dtype_bytes
        recipe = self._fp8_recipe
        fed = not gradient and op.name in self._norm_fed
        transpose = 1.0 if recipe in PER_TENSOR_RECIPES and self._tn_only_fp8 else 0.0
        if recipe in ("mxfp8", "blockwise"):
            quantize = read + 2.0
        elif recipe == "tensorwise":
            amax = 0.0 if fed else read
            quantize = amax + read + 1.0
        elif fed:  # delayed: the norm wrote the FP8 itself, its transpose a kernel of its own (read, write)
            quantize, transpose = 0.0, 2.0 * transpose
        else:
            quantize = read + 1.0
        share = 1.0
        if not gradient and op.gemm is not None:
            _, _, n, _, fused = op.gemm
            share = n / fused
        if gradient and op.name in self._te_scattered:
            if recipe == "mxfp8" and self._userbuffers_on():
                # under userbuffers the row-wise copy and the column-wise one are two quantizations, each reading
                # the 16-bit shard (linear.py `_Linear.backward`, v2.9 and v2.14: `set_usage(columnwise=False)`
                # for the dgrad's userbuffers gather, then the wgrad's `fill_userbuffers_buffer_for_all_gather`)
                quantize += read
            return quantize / self.run.parallel.tp + 2.0 * transpose
        if not gradient and op.name in self._te_gathered:  # its transpose in the backward (`_te_sp_transpose_bytes`)
            return share * quantize / self.run.parallel.tp
        if not gradient and self._late_transpose(op):  # TE before v2.0: the transpose in the backward
            return share * quantize
        return share * (quantize + transpose)

    def _late_transpose(self, op: Op) -> bool:
        """Whether a per-tensor FP8 GEMM op on Hopper transposes its saved input in the backward, as TE before
        v2.0 did for a row-parallel Linear under SP (v1.10 linear.py `_Linear.forward`: `cast_to_fp8` unless
        `not sequence_parallel`; `_Linear.backward`: `tex.fp8_transpose(inputmat_total, ...)`), where the newer
        code's forward cast-transpose writes both copies in one kernel."""
        return (
            self._te_late_transpose
            and op.gemm is not None
            and op.gemm[3] == 1
            and not op.sequential
            and self._fp8_recipe in PER_TENSOR_RECIPES
            and op.name in self._te_scattered
            and op.name not in self._te_gathered
            and op.name not in self._norm_fed
            and self._tn_only_fp8
        )

    def _te_sp_transpose_bytes(self, op: Op) -> float:
        """HBM bytes per input element of the transpose a per-tensor FP8 GEMM fed by TE's FP8 all-gather
        makes on Hopper in its backward (`_cast_bytes`): layernorm_linear.py `_LayerNormLinear.backward`
        (v2.9) re-gathers the saved FP8 shard row-wise and calls `update_usage(columnwise_usage=True)`
        for the weight gradient, an FP8 transpose (read and write a byte) of its share of the rows."""
        if op.gemm is not None and op.fp8 and self._late_transpose(op):  # TE before v2.0 (`_late_transpose`)
            _, _, n, _, fused = op.gemm
            return 2.0 * n / fused
        if op.name not in self._te_gathered or self._fp8_recipe not in PER_TENSOR_RECIPES or op.gemm is None:
            return 0.0
        if not self._tn_only_fp8:
            return 0.0
        _, _, n, _, fused = op.gemm
        return 2.0 * n / fused

    def _phase_s(self, op: Op, phase: str, chunks: frozenset[str] = frozenset()) -> float:
        """Compute seconds of an op's phase: forward, backward, or a half of the backward (dgrad, wgrad).
        *chunks*: the passes (forward, dgrad) whose GEMM async TP runs a TP shard of rows at a time
        (`_chunked_s`)."""
        if op.category == COMM:
            return 0.0
        kernels = self.kernels
        if op.attention is not None:
            kernels = kernels if op.fp8 else self._attention_16
            backward = phase != "forward"
            flops, traffic = (op.backward_flops, op.backward_bytes) if backward else (op.flops, op.bytes)
            carries_dq = op.name.endswith("flash_scores")  # its backward FLOPs hold dQ = dS·K
            if op.ring > 1:  # the ring's calls, each at its shape (`ppb_core.timing.ring`)
                seconds = ring_attention_s(
                    kernels, flops, traffic, backward, op.attention, op.ring, carries_dq, op.ring_steps
                )
            else:
                seconds = kernels.attention_s(
                    flops, traffic, backward, *op.attention, carries_dq=carries_dq, window=op.attention_window
                )
            if op.attention_dropout:
                seconds *= 1 + kernels.attention_dropout_cost
            return seconds if phase in ("forward", "backward") else seconds / 2
        if op.gemm is not None:
            m, k, n, groups, fused = op.gemm
            share = n / fused
            out = self.run.training.dtype_bytes
            kernels = self._gemm_kernels(op)
            # a SequentialMLP's experts: `groups` separate GEMMs, each with its own waves and fixed time
            groups, each = (1, groups) if op.sequential else (groups, 1)
            # FP8 GEMMs: each input is quantized first (`_cast_bytes`): the activations in the forward,
            # the output gradient in the backward (TransformerEngine's casts).
            side_forward, side_backward = op.side_bytes
            # TE's grouped GEMM runs one cuBLAS GEMM per expert, expert i on compute stream i % 4 (its
            # tiles share the SMs as the pooled waves price them): a stream's GEMMs one after another
            # each pay the kernel's fixed time (`_grouped_rounds`)
            rounds = self._grouped_rounds(op, groups) * kernels.kernel_s * share
            tp = self.links.groups["tp"].size if chunks else 1
            if phase == "forward":
                cast = self._cast_bytes(op, gradient=False)
                c = tp if "forward" in chunks else 1
                compute = each * c * self._gemm_pass_s(op, kernels, "forward", m / c, groups, out) + rounds
                weight_cast = self._weight_cast_bytes + (self._fp8_weight_bytes if op.fp8 else 0)
                cast_bytes = weight_cast * op.weight_elements
                # separate linears: each GEMM at its own bytes (`_gemm_pass_s`), FP8 operands at a byte
                moved = (
                    kernels.score_memory_s(op.bytes, op.score_keys, False, op.score_head_dim)
                    if op.score_keys
                    else kernels.memory_s(0.0 if op.linears else op.bytes)
                )
                quantized = self._quantize_s(cast * m * k * groups * each, kernels)
                passes = self._side_kernels(op)[0] * kernels.elementwise_kernel_s
                return max(compute, moved) + kernels.memory_s(cast_bytes + side_forward) + quantized + passes
            half = (
                kernels.score_memory_s(op.backward_bytes / 2, op.score_keys, True, op.score_head_dim)
                if op.score_keys
                else kernels.memory_s(0.0 if op.linears else op.backward_bytes / 2)
            )
            c = tp if "dgrad" in chunks else 1
            dgrad = max(each * c * self._gemm_pass_s(op, kernels, "dgrad", m / c, groups, out) + rounds, half)
            dgrad += self._quantize_s(self._cast_bytes(op, gradient=True) * m * n * groups * each, kernels)
            # a bias gradient reduced in its own kernel runs after the weight gradient (`_bias_passes`)
            wgrad_s = self._gemm_pass_s(op, kernels, "wgrad", m, groups, self._wgrad_bytes)
            wgrad = max(each * wgrad_s + rounds, half)
            wgrad += kernels.memory_s(
                side_backward
                + self._accumulate_bytes * op.weight_elements
                + self._titan_wgrad_copies(op) * each
                + self._te_sp_transpose_bytes(op) * m * k * groups * each
            )
            wgrad += self._side_kernels(op)[1] * kernels.elementwise_kernel_s
            return {"backward": dgrad + wgrad, "dgrad": dgrad, "wgrad": wgrad}[phase]
        traffic = op.bytes if phase == "forward" else op.backward_bytes
        if op.te_quantize:
            seconds = self._quantize_s(traffic, kernels)
        elif op.score_keys:  # an unfused attention core's pass over its scores
            seconds = kernels.score_memory_s(traffic, op.score_keys, phase != "forward", op.score_head_dim)
        else:
            backward = phase != "forward"
            # the bytes PyTorch runs on its non-contiguous path (`Op.strided_bytes`) at that path's share
            legacy = 0.0 if op.strided else op.strided_bytes[backward]
            seconds = kernels.elementwise_s(traffic - legacy, op.fusion, backward=backward, strided=op.strided)
            if legacy > 0:
                seconds += kernels.elementwise_s(legacy, None, backward=backward, strided=True)
            seconds += self._memory_kernels(op)[backward] * kernels.elementwise_kernel_s
        return seconds if phase in ("forward", "backward") else seconds / 2

    def _memory_kernels(self, op: Op) -> tuple[float, float]:
        """(forward, backward) GPU kernels of a memory-bound op, each paying the device's fixed kernel time
        (`Kernels.elementwise_kernel_s`): under Megatron the kernels `launches.op_launches` counts from its code
        (a SequentialMLP's activation once per local expert), whatever CUDA graphs do to their launches; other
        frameworks' kernels (torchtitan's eager or compiled ops, MindSpore's graphs) are not counted: none."""
        if self.run.framework != "megatron" or not self.kernels.elementwise_kernel_s:
            return 0.0, 0.0
        forward, backward = op_launches(
            op,
            tp=self.run.parallel.tp,
            mla=self._mla,
            rope_fusion=self.run.rope_fused,
            cross_entropy_fusion=self.run.timing.cross_entropy_fusion,
            wgrad_fused=self.run.timing.gradient_accumulation_fusion,
        )
        each = max(1, op.sequential)
        return each * forward, each * backward

    def _side_kernels(self, op: Op) -> tuple[float, float]:
        """(forward, backward) memory-bound kernels a GEMM op runs beside its GEMMs under Megatron, each paying
        the fixed kernel time as `_memory_kernels`' do: its bias passes (`Op.side_kernels` where it has such
        bytes), DDP's main-gradient adds of other parameters (`Op.grad_adds`) and, without gradient-accumulation
        fusion, of its weight's (one a weight, `launches.op_launches`). TE's quantize kernels are left out: their
        measured share (`_quantize_s`) holds their time whole."""
        if self.run.framework != "megatron" or not self.kernels.elementwise_kernel_s:
            return 0.0, 0.0
        side_forward, side_backward = op.side_bytes
        kernels_forward, kernels_backward = op.side_kernels
        _, _, n, groups, fused = op.gemm
        unfused = op.weight_elements and not self.run.timing.gradient_accumulation_fusion
        accumulate = groups * n / fused if unfused else 0.0
        if self.run.timing.deepspeed_bf16_optimizer:
            accumulate *= 2  # BF16_Optimizer's fp32 cast before the add
        backward = kernels_backward * (side_backward > 0) + op.grad_adds + accumulate
        return kernels_forward * (side_forward > 0), backward

    def _gemm_pass_s(self, op: Op, kernels: Kernels, phase: str, rows: float, groups: int, out: float) -> float:
        """Seconds of a matmul op's GEMM kernels in one pass over *rows* rows a group: the forward (rows × k by
        k × n), the input gradient ("dgrad": rows × n by n × k) or the weight gradient ("wgrad": k × rows by
        rows × n), *out* bytes an output element. Where the framework runs the op's columns as separate
        linears (`Op.linears`: torchtitan's wq, wk, wv, w1, w3) each is its own GEMM at its own width, with its
        own waves and fixed time, and its own HBM floor (`Kernels.gemm_s`): each reads the whole input (a
        narrow one, wk or wv at n = 128 under TP 8, moves ~2 bytes of input per 2·n FLOPs, below Hopper's
        ridge); else the op's share n / fused n of the one GEMM it is part of (Megatron's linear_qkv,
        linear_fc1), its bytes the op's (`_phase_s`)."""
        assert op.gemm is not None
        _, k, n, _, fused = op.gemm
        shapes = {
            "forward": lambda width: (rows, width, k),
            "dgrad": lambda width: (rows, k, width),
            "wgrad": lambda width: (k, width, rows),
        }[phase]
        if not op.linears:
            return n / fused * kernels.gemm_compute_s(*shapes(fused), groups, out)
        operand = 1.0 if self.run.timing.matmul_dtype == "fp8" and op.fp8 else self.run.training.dtype_bytes
        seconds = 0.0
        for width in op.linears:
            a, b, inner = shapes(width)
            traffic = groups * ((a + b) * inner * operand + a * b * out)  # two operands read, the output written
            seconds += max(kernels.gemm_compute_s(a, b, inner, groups, out), kernels.memory_s(traffic))
        return seconds

    def _quantize_s(self, traffic: float, kernels: Kernels) -> float:
        """Seconds of an FP8 GEMM operand's quantization (`_cast_bytes`'s HBM bytes): TransformerEngine's
        quantize kernels at their measured share of HBM where the device states one for the run's recipe
        (`MXFP8_QUANTIZE_SHARE_BLACKWELL`, `FP8_QUANTIZE_SHARE_BLACKWELL`), else as any memory-bound pass;
        torchtitan's casts (torchao's, compiled or eager) keep the element-wise rate."""
        if self._quantize_bytes_per_s > 0:
            return traffic / self._quantize_bytes_per_s
        return kernels.memory_s(traffic)

    def _grouped_rounds(self, op: Op, groups: int) -> int:
        """The GEMM kernels beyond the first that one of TransformerEngine's compute streams runs in turn
        for a grouped linear layer (Megatron's TEGroupedMLP): `nvte_multi_stream_cublas_gemm` puts GEMM i
        on stream i % `TE_COMPUTE_STREAMS` (TE d0067d0d common/gemm/cublaslt_gemm.cu; util/
        multi_stream.cpp `get_num_compute_streams`: 4), so ceil(groups / 4) − 1 more fixed times: the
        default path (`general_grouped_gemm`; TE's cuBLASLt grouped-tensor GEMM, f8bda5d0a of May 2026,
        runs only under Megatron's `moe_use_grouped_tensor`). A batched product of activations (no
        weights) is one strided-batched kernel; TE's fused grouped MLP one persistent kernel over every
        expert (`Op.persistent_grouped`): no rounds either."""
        te = self.run.framework == "megatron" and self.run.timing.transformer_impl == "transformer_engine"
        if not te or op.sequential or op.persistent_grouped or not op.weight_elements or groups <= 1:
            return 0
        return -(-groups // TE_COMPUTE_STREAMS) - 1

    def _gemm_kernels(self, op: Op) -> Kernels:
        """The kernels an op's GEMM runs on: FP8 ones under FP8 training unless the framework keeps it
        in 16 bits (`Op.fp8`)."""
        return self.kernels if op.fp8 else self._kernels_16

    def _exposed_s(
        self,
        collective: Collective | None,
        by_name: Mapping[str, Op],
        overlap: float | None = None,
        paired: float | None = None,
    ) -> float:
        """A collective's exposed seconds. *paired*: the compute of another micro-batch it hides behind
        instead of its partner op (DualPipe's expert all-to-alls)."""
        if collective is None:
            return 0.0
        if collective.method is not None and self.overlap.tp > 0 and collective.partner is not None:
            return self._userbuffers_s(collective, by_name[collective.partner[0]], collective.partner[1])
        seconds = collective_seconds(collective, self.links)
        share = getattr(self.overlap, collective.overlap) if overlap is None else overlap
        if self._titan_fused(collective, by_name):  # async TP's fused op (`ppb_core.timing.symm_mem`)
            tp = self.links.groups["tp"].size
            return fused_exposed_s(seconds, share, self._fused_matmuls_s(collective, by_name), tp)
        partner = 0.0
        if paired is not None and collective.overlap == "ep":
            share, partner = 1.0, paired
        elif collective.partner is not None and collective.partner[0] in by_name:
            partner = self._phase_s(by_name[collective.partner[0]], collective.partner[1])
        if collective.exchanges and collective.partner is not None and collective.partner[0] in by_name:
            # each exchange beside one ring step: the attention core's time over its cp calls
            scores = by_name[collective.partner[0]]
            context = by_name.get(collective.partner[0].replace("flash_scores", "flash_context"))
            core = partner + (self._phase_s(context, collective.partner[1]) if context is not None else 0.0)
            step = core / max(1, scores.ring)
            return exposed_exchanges_s(seconds, collective.exchanges, step, share, self.kernels.contention)
        if self._late_ctas(collective, by_name, paired):
            beside = share * seconds
            return seconds - beside + persistent_added_s(partner, beside)
        if self._interleaved_halves(collective, by_name):
            # MindFormers' fine_grain_interleave 2 (mindformers/models/llama/llama_interleave.py
            # `LLamaDecodeLayerInterleave`, a4dfb8219: the projections, norms, residual adds and MLP of each layer
            # as two sequence halves A and B, attention whole). MindSpore orders the halves' collectives, forward
            # and backward alike, A0, B0, A1, B1, ... and makes A's compute after its collective i wait for B's
            # compute before B's collective i, B's after collective i for A's before collective i + 1
            # (frontend/parallel/pass/micro_interleaved_order_control.cc `InsertInterleavedNodesDepend`,
            # `InsertDependBetweenInterleavedNodes`): A's half of a collective runs beside B's compute before it,
            # B's half beside A's compute after it. One side of each is its GEMM's segment (forward: the output
            # projection before its reduce-scatter, the MLP before and after its reduce-scatter and all-gather, the
            # Q, K, V projections after the attention's all-gather; backward: the same ops' backward after the
            # all-gather of their output gradient: `_half_segment_s`), the other the residual add and norm between
            # two collectives, taken as nothing: half the collective exposed, the other half beside half the segment
            half = seconds / 2
            return half + self._beside_s(half, share, self._half_segment_s(collective, by_name), collective)
        return self._beside_s(seconds, share, partner, collective)

    def _interleaved_halves(self, collective: Collective, by_name: Mapping[str, Op]) -> bool:
        """Whether a collective is a TP collective of a layer on the critical path under MindFormers'
        fine_grain_interleave 2 (`timing.fine_grain_interleave`): an entry all-gather or exit reduce-scatter paired
        with its GEMM's forward, or the exit's backward all-gather with the producer's input gradient. (The entry's
        backward reduce-scatter runs beside the consumer's weight gradient, `tp_async`, as priced without it.)"""
        return (
            self.run.framework == "mindformers"
            and self.run.timing.fine_grain_interleave == 2
            and collective.overlap == "tp"
            and collective.partner is not None
            and collective.partner[1] in ("forward", "dgrad")
            and collective.partner[0] in by_name
            and by_name[collective.partner[0]].category == MATMUL
        )

    def _half_segment_s(self, collective: Collective, by_name: Mapping[str, Op]) -> float:
        """One half's compute between an interleaved collective and the next one on its GEMM's side: from the
        paired GEMM on through the block's ops (an entry all-gather's readers on, an exit reduce-scatter's producer
        back; in the backward, from the producer back) up to the block's next collective or its attention core,
        which runs whole (llama_interleave.py: `linear_layer1`, `linear_layer2` sliced, `cal_attn` not); half of
        the layer's."""
        assert collective.partner is not None
        ops = list(by_name.values())
        start = ops.index(by_name[collective.partner[0]])
        forward = collective.partner[1] == "forward"
        step = 1 if forward and collective.kind == ALL_GATHER else -1
        block = ops[start].block
        seconds, index = 0.0, start
        while 0 <= index < len(ops):
            op = ops[index]
            if op.category == COMM or op.attention is not None or op.block != block:
                break
            seconds += self._phase_s(op, "forward" if forward else "backward")
            index += step
        return seconds / 2

    def _beside_s(self, seconds: float, share: float, partner: float, collective: Collective) -> float:
        """The exposed seconds of a collective of *seconds* whose *share* runs beside *partner* seconds of compute."""
        # the partner, slowed by the SMs the collective takes while they overlap, ends no later than the part of
        # the collective beside it when that part is the longer: the pair's wall is max(beside, partner + k·hidden)
        beside = share * seconds
        hidden = min(beside, partner)
        # a flex dispatcher backend's kernels take the SMs it is given (`Collective.sms`), not NCCL's
        contention = min(1.0, collective.sms / self.kernels.sms) if collective.sms else self.kernels.contention
        return seconds - beside + max(beside - partner, contention * hidden)

    def _late_ctas(self, collective: Collective, by_name: Mapping[str, Op], paired: float | None = None) -> bool:
        """Whether the GEMM a TP collective hides behind is persistent with no SM target of its own, so that
        its CTAs wait for the collective's SMs (`kernels.persistent_added_s`): on a device whose GEMMs are
        persistent, beside a NCCL collective (Megatron's asynchronous input-gradient reduction beside the
        weight gradient: TransformerEngine launches its GEMMs for the whole device unless NVTE_EXT_MARGIN_SM
        is set, cpp_extensions/gemm.py at d0067d0d, which Megatron-LM does not set) and beside userbuffers'
        bulk kernels unless `timing.ub_sm_margin`. Not torchtitan's async TP (symmetric-memory copies, not
        NCCL kernels), not DualPipe's paired all-to-alls (DeepSeek-V3's report §3.2.2: their kernels keep 20
        SMs for communication), not what hides behind attention or the experts' GEMMs (TransformerEngine runs
        those on 4 streams at once, `TE_COMPUTE_STREAMS`): these keep the SMs' share."""
        if not self.kernels.persistent_gemms or paired is not None or collective.overlap not in ("tp", "tp_async"):
            return False
        partner = by_name.get(collective.partner[0]) if collective.partner is not None else None
        if partner is None or partner.category != MATMUL or self.run.framework == "torchtitan":
            return False
        return not (self._userbuffers_on() and self.run.timing.ub_sm_margin)

    def _userbuffers_on(self) -> bool:
        """Megatron's --tp-comm-overlap: TransformerEngine's userbuffers carry the layer GEMMs' TP collectives."""
        te = self.run.framework == "megatron" and self.run.timing.transformer_impl == "transformer_engine"
        return te and self.overlap.tp > 0

    def _with_copy_s(
        self,
        name: str,
        collective: Collective | None,
        by_name: Mapping[str, Op],
        exposed: float,
        backward: bool,
        rows: bool,
    ) -> float:
        """*exposed* seconds of a torchtitan DTensor sequence-parallel collective with the copies around it
        (`ppb_core.timing.funcol`): the chunk-and-cat of every plain one; where async TP fuses it with its
        matmul (`_fused_tp`) the fused op's own copies, *rows*: with the gathered input's copy for the
        weight gradient (the backward's gradient gather, whose matmuls run in the same pass), and what
        its matmuls lose run a shard at a time (`_chunked_s`). A fused op never costs more than the
        plain collective and its copy (share 0), so more overlap never raises the iteration: async TP
        slower than vanilla is not modelled. *name*: the collective's op."""
        if collective is None or self.run.framework != "torchtitan" or collective.group != "tp":
            return exposed
        if not self._fused_tp(collective, by_name, backward):
            return exposed + self._plain_copy_s(collective)
        batch = self.run.training.micro_batch_size
        if collective.kind == ALL_GATHER:
            tp = self.links.groups["tp"].size
            copy = fused_gather_bytes(collective.payload_bytes, tp, batch, feeds_weight_gradient=rows)
        else:  # the fused matmul-reduce-scatter's input: the producer's m × k, FP8 under Float8
            producer = by_name[collective.partner[0]] if collective.partner is not None else None
            assert producer is not None and producer.gemm is not None
            m, k = producer.gemm[0], producer.gemm[1]
            fp8 = self.run.timing.matmul_dtype == "fp8" and producer.fp8
            copy = fused_scatter_bytes(m * k * (1 if fp8 else self.run.training.dtype_bytes), batch)
        plain = collective_seconds(collective, self.links) + self._plain_copy_s(collective)
        return min(exposed + self.kernels.memory_s(copy) + self._chunked_s(name, collective, by_name, backward), plain)

    def _chunked_s(self, name: str, collective: Collective, by_name: Mapping[str, Op], backward: bool) -> float:
        """What a fused collective's matmuls lose run a shard of rows at a time: `_fused_all_gather_matmul_impl`
        calls each reader's matmul once a gathered shard arrives (`shard_consumer`: tp matmuls of m/tp rows;
        the forward of every matmul reading the gathered input, the dgrad of the one whose output gradient
        the backward gathers); `_fused_matmul_reduce_scatter_impl` computes its producer a destination's
        rows at a time (`chunk_producer`)."""
        if collective.kind == ALL_GATHER and not backward:
            readers = [(op, "forward") for op in by_name.values() if op.category == MATMUL and name in op.inputs]
        elif collective.partner is not None:
            readers = [(by_name[collective.partner[0]], "dgrad" if backward else "forward")]
        else:
            readers = []
        lost = 0.0
        for op, phase in readers:
            if op.gemm is not None:
                lost += self._phase_s(op, phase, frozenset({phase})) - self._phase_s(op, phase)
        return lost

    def _fused_tp(self, collective: Collective, by_name: Mapping[str, Op], backward: bool) -> bool:
        """Async TP fuses the collective with its matmul: an all-gather feeding one, a forward
        reduce-scatter fed by one (the backward's input-gradient reduce-scatter reduces a sum of
        matmuls and stays plain)."""
        partner = by_name.get(collective.partner[0]) if collective.partner is not None else None
        by_matmul = partner is not None and partner.category == MATMUL
        return self.overlap.tp > 0 and by_matmul and (collective.kind == ALL_GATHER or not backward)

    def _titan_fused(self, collective: Collective, by_name: Mapping[str, Op]) -> bool:
        """Whether torchtitan's async TP runs a TP collective as a fused symmetric-memory op (`_fused_tp`;
        a collective paired with a backward phase is the backward's)."""
        if self.run.framework != "torchtitan" or collective.group != "tp" or collective.partner is None:
            return False
        return self._fused_tp(collective, by_name, backward=collective.partner[1] != "forward")

    def _fused_matmuls_s(self, collective: Collective, by_name: Mapping[str, Op]) -> float:
        """The matmul seconds a fused op runs: a forward all-gather's, every matmul reading the gathered
        input (micro_pipeline_tp.py `_find_consumer_matmuls`: wq, wk and wv alike); otherwise its partner
        phase (the row-parallel output projection's forward before a reduce-scatter, its input gradient
        after the backward's gradient all-gather)."""
        assert collective.partner is not None
        if collective.kind == ALL_GATHER and collective.partner[1] == "forward":
            names = {op.name for op in by_name.values() if collective in (op.forward_comm, op.recompute_comm)}
            readers = [op for op in by_name.values() if op.category == MATMUL and names & set(op.inputs)]
            return sum(self._phase_s(op, "forward") for op in readers)
        return self._phase_s(by_name[collective.partner[0]], collective.partner[1])

    def _plain_copy_s(self, collective: Collective) -> float:
        batch = self.run.training.micro_batch_size
        return self.kernels.memory_s(sequence_copy_bytes(collective.kind, collective.payload_bytes, batch, False))

    def _gathered_rows_s(self, collective: Collective | None, by_name: Mapping[str, Op], forward_s: float) -> float:
        """Async TP: the weight gradient's copy of a fused forward all-gather's strided gathered input
        (`ppb_core.timing.funcol`), in the backward whether the input was kept or gathered again, up to
        what the fused forward saved against the plain one (*forward_s*: its priced seconds)."""
        if collective is None or collective.kind != ALL_GATHER or self.run.framework != "torchtitan":
            return 0.0
        if collective.group != "tp" or not self._fused_tp(collective, by_name, backward=False):
            return 0.0
        with_rows = fused_gather_bytes(collective.payload_bytes, 1, self.run.training.micro_batch_size, True)
        without = fused_gather_bytes(collective.payload_bytes, 1, self.run.training.micro_batch_size, False)
        plain = collective_seconds(collective, self.links) + self._plain_copy_s(collective)
        return min(self.kernels.memory_s(with_rows - without), max(0.0, plain - forward_s))

    def _fused_reduction_s(self, collective: Collective | None, by_name: Mapping[str, Op]) -> float:
        """torchtitan's async TP: a reduce-scatter a matmul feeds runs as Inductor's fused
        matmul-reduce-scatter (fx_passes/micro_pipeline_tp.py), torch/distributed/_symmetric_memory
        `_fused_matmul_reduce_scatter_impl`: every rank's partial products of each rank's rows are
        pulled into one [tp, m/tp, n] buffer (`_pipelined_produce_and_all2all`, behind the next
        chunk's matmul) and only then summed over the first dimension (`torch.sum(dim=0)`): a
        kernel after the last chunk that reads all m·n partials and writes the m/tp·n result,
        which NCCL's reduce-scatter does inside its transfers. None without async TP (`overlap.tp`
        0) or under other frameworks. The caller caps the fused op at the plain reduce-scatter's
        time (share 0), so more overlap never costs more: an async TP slower than vanilla is not
        modelled."""
        if (
            collective is None
            or self.run.framework != "torchtitan"
            or self.overlap.tp <= 0
            or collective.kind != REDUCE_SCATTER
            or collective.group != "tp"
            or collective.partner is None
            or collective.partner[0] not in by_name
            or by_name[collective.partner[0]].category != MATMUL
        ):
            return 0.0
        tp = self.links.groups["tp"].size
        return self.kernels.memory_s(collective.payload_bytes * (1 + 1 / tp))

    def _userbuffers_s(self, collective: Collective, partner: Op, phase: str) -> float:
        """What TransformerEngine's userbuffers overlap (Megatron's --tp-comm-overlap) adds to its
        partner GEMM: the method's time less the plain GEMM's (`ppb_core.timing.userbuffers`). The
        GEMM is the whole (fused) product: its forward m×k by k×n, its input gradient m×n by n×k."""
        assert partner.gemm is not None
        m, k, _, groups, fused = partner.gemm
        rows, out, inner = (m, fused, k) if phase == "forward" else (m, k, fused)
        kernels = self._gemm_kernels(partner)
        plain = kernels.gemm_compute_s(rows, out, inner, groups)
        if collective.method == RING_EXCHANGE:
            tp = self.links.groups[collective.group].size
            seconds = ring_exchange_s(kernels, rows, out, inner, tp, hop_seconds(collective, self.links))
            if collective.kind == REDUCE_SCATTER:  # the received partial chunks summed into the shard
                seconds += rs_reduce_s(kernels, collective.payload_bytes, tp)
        elif collective.method == PIPELINE:
            chunk = dataclasses.replace(collective, payload_bytes=collective.payload_bytes / PIPELINE_SPLITS)
            late = kernels.persistent_gemms and not self.run.timing.ub_sm_margin
            seconds = pipeline_s(kernels, rows, out, inner, one_shot_seconds(chunk, self.links), late_ctas=late)
        else:
            raise ValueError(f"unknown userbuffers method {collective.method!r}")
        return max(0.0, seconds - plain)

    def _dualpipe_share(self, ops: tuple[Op, ...]) -> float | None:
        """Under DualPipeV (DeepSeek-V3) a forward chunk of one micro-batch runs beside a backward chunk
        of another, each one's expert all-to-alls hidden behind the other's compute (DeepSeek-V3
        report, §3.2.1): each all-to-all gets an equal share of the layer's forward and backward
        compute to hide behind. None under other schedules."""
        if self.run.parallel.schedule != "dualpipev":
            return None
        count = sum(
            1
            for op in ops
            for collective in (op.forward_comm, op.backward_comm)
            if collective is not None and collective.overlap == "ep"
        )
        if not count:
            return None
        compute = sum(self._phase_s(op, "forward") + self._phase_s(op, "backward") for op in ops)
        return compute / count

    def op_prices(self, layer: Layer) -> dict[str, OpPrice]:
        """Every op's prices, by name (memoized per model and kind)."""
        key = (layer.model_name, layer.kind)
        prices = self._prices.get(key)
        if prices is None:
            ops = self.ops(layer)
            by_name = {op.name: op for op in ops}
            paired = self._dualpipe_share(ops)
            fills = (
                deterministic_fill_bytes(
                    ops,
                    self.run.training.dtype_bytes,
                    self.run.timing.gradient_accumulation_fusion,
                    self.kernels.dp_workspace,
                )
                if self._nan_fill
                else {}
            )
            prices = {}
            for op in ops:
                if op.category == COMM:
                    forward = self._exposed_s(op.forward_comm, by_name, paired=paired)
                    summed = self._fused_reduction_s(op.forward_comm, by_name)
                    if summed > 0:  # never above NCCL's plain reduce-scatter (share 0)
                        forward = min(collective_seconds(op.forward_comm, self.links), forward + summed)
                    backward = self._exposed_s(op.backward_comm, by_name, paired=paired)
                    again = forward
                    if op.recompute_comm is not None:
                        share = max(
                            getattr(self.overlap, op.recompute_comm.overlap),
                            getattr(self.overlap, op.forward_comm.overlap) if op.forward_comm else 0.0,
                        )
                        again = min(forward, self._exposed_s(op.recompute_comm, by_name, share))
                    rerun = op.recompute_comm or op.forward_comm
                    again = self._with_copy_s(op.name, rerun, by_name, again, backward=False, rows=False)
                    forward = self._with_copy_s(op.name, op.forward_comm, by_name, forward, backward=False, rows=False)
                    backward = self._with_copy_s(op.name, op.backward_comm, by_name, backward, backward=True, rows=True)
                    backward += self._gathered_rows_s(op.forward_comm, by_name, forward)
                else:
                    fill_forward, fill_backward = fills.get(op.name, (0.0, 0.0))
                    forward = again = self._phase_s(op, "forward") + self.kernels.memory_s(fill_forward)
                    backward = self._phase_s(op, "backward") + self.kernels.memory_s(fill_backward)
                prices[op.name] = OpPrice(forward * 1e3, backward * 1e3, again * 1e3)
            if self.run.framework == "megatron" and self.run.timing.moe_shared_expert_overlap:
                self._shared_beside(by_name, prices)
            self._prices[key] = prices
        return prices

    def _shared_beside(self, by_name: Mapping[str, Op], prices: dict[str, OpPrice]) -> None:
        """Megatron's --moe-shared-expert-overlap (`ppb_core.timing.shared_overlap`): each expert all-to-all's
        priced (exposed) seconds run beside its side of the shared experts, each way, as any collective beside
        compute (`_beside_s`, its whole beside): the all-to-all keeps max(0, its seconds − the side's) and the
        contention's share of the part hidden; the shared ops keep their prices. A recomputed forward reruns
        both (Megatron refuses the shared_experts module with the flag; full and moe recompute rerun the
        whole MoE layer): it saves what the forward does."""
        for name, side in beside(by_name.values()).items():
            op, price = by_name[name], prices[name]
            forward, backward = price.forward_ms / 1e3, price.backward_ms / 1e3
            if op.forward_comm is not None:
                partner = sum(prices[other].forward_ms for other in side) / 1e3
                forward = self._beside_s(forward, 1.0, partner, op.forward_comm)
            if op.backward_comm is not None:
                partner = sum(prices[other].backward_ms for other in side) / 1e3
                backward = self._beside_s(backward, 1.0, partner, op.backward_comm)
            again = max(0.0, price.recompute_ms - (price.forward_ms - forward * 1e3))
            prices[name] = OpPrice(forward * 1e3, backward * 1e3, again)

    # States and switches -------------------------------------------------------------------------

    def _check(self, layer: Layer, state: LayerType) -> None:
        if state not in _STATES[layer.node]:
            allowed = ", ".join(s.name for s in _STATES[layer.node])
            raise ValueError(f"a {layer.node} layer is priced at {allowed}, not {state.name}")

    def _switches(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None) -> dict[str, int] | None:
        if state is not LayerType.SEL_REC_LAYER:
            return None
        return self._configured[layer.model_name] if switches is None else normalized(switches)

    def _rerun(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None) -> tuple[Op, ...]:
        """What the backward runs again. A selective setting that is the run's own (SLCT, or BOTH: it
        and the gathers) follows the framework's selective units where ppb models them op by op
        (torchtitan's per-op policy: `op_policy_rerun`); any other setting is ppb's switches alone."""
        ops = self.ops(layer)
        stated = self._switches(layer, state, switches)
        modules = self.run.recompute.modules
        own = state is LayerType.SEL_REC_LAYER and (
            switches is None
            or stated in (self._configured[layer.model_name], {**self._configured[layer.model_name], "gather": 0})
        )
        if own and "op" in modules and op_policy_supported(layer.kind):
            return self._early_stopped(ops, op_policy_rerun(ops, layer.kind, self._geometry))  # type: ignore[arg-type]
        rerun = rerun_ops(ops, state, stated)
        if state is LayerType.FULL_REC_LAYER:
            rerun = self._early_stopped(ops, rerun)
        if own and self.run.framework == "megatron" and modules:
            # An activation no module of this layer recomputes keeps its output (`MEGATRON_ACTIVATIONS`).
            acts = {name for module in modules for name in MEGATRON_ACTIVATIONS.get(module, ())}
            kept = tuple(
                op if op.switch != "ffAct" or unprefixed(op.name) in acts else dataclasses.replace(op, switch=None)
                for op in ops
            )
            again = {op.name for op in rerun_ops(kept, state, stated)}
            # Megatron checkpoints a module whole (tensor_parallel.checkpoint, reentrant): the backward
            # replays its forward, every op of it, kept outputs or not (`MEGATRON_REPLAYS`).
            replays = {name for module in modules for name in MEGATRON_REPLAYS.get(module, ())}
            rerun = tuple(op for op in ops if op.name in again or unprefixed(op.name) in replays)
        return rerun

    def _early_stopped(self, ops: tuple[Op, ...], rerun: tuple[Op, ...]) -> tuple[Op, ...]:
        """*rerun* less what torchtitan's checkpoint never replays with early stop (`early_stop_tail`)."""
        if self.run.framework != "torchtitan" or not self.run.recompute.early_stop:
            return rerun
        tail = early_stop_tail(ops)
        return tuple(op for op in rerun if op.name not in tail)

    def _key(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None) -> tuple:
        self._check(layer, state)
        stated = self._switches(layer, state, switches)
        return layer.model_name, layer.node, layer.kind, state, tuple(sorted(stated.items())) if stated else None

    def parts(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None = None) -> LayerParts:
        """The model's forward, plain backward and recompute terms (uncalibrated), memoized per distinct
        (model, kind, state, switches)."""
        key = self._key(layer, state, switches)
        parts = self._parts.get(key)
        if parts is None:
            ops, prices = self.ops(layer), self.op_prices(layer)
            full = state is LayerType.FULL_REC_LAYER
            rerun = self._rerun(layer, state, switches)
            parts = LayerParts(
                sum(prices[op.name].forward_ms for op in ops),
                sum(prices[op.name].backward_ms for op in ops),
                sum(self._again_ms(op, layer, full) for op in rerun) + self._restored_ms(layer, state, switches, rerun),
            )
            self._parts[key] = parts
        return parts

    def _rerun_launches(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None) -> float:
        """Launches the rerun issues beyond its ops' forward counts: a collective re-sent in other calls than
        the forward's (`Op.recompute_comm`: MLA's latents gathered in two, not three), and the restore copies
        of `CheckpointWithoutOutput` before f54403492e (`_restored`), each a plain PyTorch op from Python."""
        if state is not LayerType.SEL_REC_LAYER:
            return 0.0
        rerun = self._rerun(layer, state, switches)
        calls = sum(
            op.recompute_comm.calls - op.forward_comm.calls
            for op in rerun
            if op.category == COMM and op.recompute_comm is not None and op.forward_comm is not None
        )
        plain = PLAIN_OP_SHARE if self.device.host_kernel_us else 1.0
        return calls + plain * self._restored(layer, state, switches, rerun)[1]

    def _restored(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None, rerun: tuple[Op, ...]
    ) -> tuple[float, int]:
        """(bytes read and written, copies) of Megatron's `CheckpointWithoutOutput` copying each recomputed output
        back into the storage the forward freed, before f54403492e (`checkpoint_copies.storage_copies`): the run's
        own selective modules only."""
        run = self.run
        own = switches is None or self._switches(layer, state, switches) == self._configured[layer.model_name]
        if (
            run.framework != "megatron"
            or state is not LayerType.SEL_REC_LAYER
            or not own
            or not isinstance(layer.kind, BodyKind)
            or run.framework_release.holds("checkpoint_without_output_shares_storage")
        ):
            return 0.0, 0
        ops = {unprefixed(op.name): op for op in self.ops(layer)}
        return storage_copies(
            layer.kind, (unprefixed(op.name) for op in rerun), ops, self._geometry, run.recompute.modules
        )

    def _restored_ms(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None, rerun: tuple[Op, ...]
    ) -> float:
        """The restore copies' GPU time (`_restored`): each copy its bytes at the achieved HBM rate and a kernel's
        fixed time."""
        traffic, copies = self._restored(layer, state, switches, rerun)
        return (self.kernels.memory_s(traffic) + copies * self.kernels.elementwise_kernel_s) * 1e3

    def _again_ms(self, op: Op, layer: Layer, full: bool) -> float:
        """An op's price when the backward runs it again; a part of an op (`flops.scaled`) at its own."""
        price = self.op_prices(layer)[op.name]
        if op.category != COMM and op not in self.ops(layer):
            return self._phase_s(op, "forward") * 1e3
        return price.forward_ms if full else price.recompute_ms

    def layer_times(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None = None
    ) -> tuple[float, float]:
        """(forward_ms, backward_ms) of one micro-batch through the layer on one device."""
        key = self._key(layer, state, switches)
        times = self._times.get(key)
        if times is None:
            parts = self.parts(layer, state, switches)
            if self.calibration is None:
                host = self.host(layer, state, switches)
                times = (parts.forward_ms + host.forward * 1e3, parts.total_backward_ms + host.backward * 1e3)
            else:
                factors = self.calibration.factors(layer.model_name, layer.node, calibrated_name(layer.kind))
                option = self._measured_option(layer, state, switches)
                recomputes = state in (LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER)
                times = factors.times(option, parts.forward_ms, parts.backward_ms, parts.recompute_ms, recomputes)
            self._times[key] = times
        return times

    def launch_s(self) -> float:
        """The host's seconds per kernel launch under Megatron: the device's measured figure
        (`DeviceProfile.host_kernel_us`, Megatron CI's systems), else `timing.host_launch_us` (the low
        end of a launch's CPU time, Holistic Trace Analysis)."""
        return (self.device.host_kernel_us or self.run.timing.host_launch_us) * 1e-6

    def launches(self, layer: Layer) -> dict[str, tuple[float, float]]:
        """Each op's (forward, backward) kernel launches from Megatron's host (`ppb_core.timing.launches`), as
        the run's CUDA graphs leave them (`ppb_core.timing.graphs`): what `host` sets against the GPU's work."""
        run, ops = self.run, self.ops(layer)
        fills = (
            deterministic_fill_bytes(
                ops,
                run.training.dtype_bytes,
                run.timing.gradient_accumulation_fusion,
                self.kernels.dp_workspace,
            )
            if self._nan_fill
            else None
        )
        launches = layer_launches(
            ops,
            tp=run.parallel.tp,
            rope_fusion=run.rope_fused,
            cross_entropy_fusion=run.timing.cross_entropy_fusion,
            wgrad_fused=run.timing.gradient_accumulation_fusion,
            fills=fills,
            fp8_recipe=run.timing.fp8_recipe if run.timing.matmul_dtype == "fp8" else None,
            router_cast=self._geometry.router_bytes != run.training.dtype_bytes,
            plain_share=PLAIN_OP_SHARE if self.device.host_kernel_us else 1.0,
            # a kernel issued from C++ never costs the host more than one issued from Python
            cpp_gemm_share=min(1.0, CPP_GEMM_US / self.device.host_kernel_us) if self.device.host_kernel_us else 1.0,
            accumulate_kernels=2 if run.timing.deepspeed_bf16_optimizer else 1,
            wgrad_per_expert=not run.framework_release.holds("te_grouped_wgrad_one_buffer"),
            # GroupedLinear's per-expert Python (TE's, `launches.grouped_python_steps`)
            python_step_share=PY_STEP_SHARE if run.timing.transformer_impl == "transformer_engine" else 0.0,
            weights_saved=run.framework_release.holds("te_grouped_saves_weights")
            and not run.framework_release.holds("te_grouped_weights_unsaved"),
            # MXFP8 activations quantized with GEMM-swizzled scales (TE v2.12 on), but after SP gathers
            activations_swizzled=run.framework_release.holds("te_mxfp8_activations_swizzled"),
            sp_ops=(self._te_gathered, self._te_scattered),
            mxfp8_userbuffers=self._fp8_recipe == "mxfp8" and self._userbuffers_on(),
            # TE before v1.11 copies each FP8 module's scale-inverses every forward (`SCALE_INV_CLONE`)
            late_transposes={op.name for op in ops if op.fp8 and self._late_transpose(op)},
            scale_inv_clone=self._fp8_recipe is not None
            and run.timing.transformer_impl == "transformer_engine"
            and not run.framework_release.holds("te_fp8_scale_inv_with_data"),
            # per-tensor FP8 on Hopper: the transposes after TE's SP all-gathers (`_te_sp_ops`)
            sp_transposes=(self._te_gathered, self._te_scattered)
            if self._fp8_recipe in PER_TENSOR_RECIPES and self._tn_only_fp8
            else None,
        )
        graphs, modules = run.timing.cuda_graph_impl, run.timing.cuda_graph_modules
        if graphs != "none":  # `ppb_core.timing.graphs`
            launches = graphed_launches(
                ops,
                launches,
                modules,
                run.timing.gradient_accumulation_fusion,
                shared_overlap=run.timing.moe_shared_expert_overlap,
                dispatcher=run.timing.moe_dispatcher,
            )
        return dict(launches)

    def host(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None = None) -> HostWaits:
        """The layer's waits for Megatron's host to launch its kernels (`ppb_core.timing.host`), part of
        `layer_times`, not of `parts` or `breakdown` (the GPU's work). None under other frameworks or
        with a calibration (measured layer times hold their own waits). Memoized."""
        key = self._key(layer, state, switches)
        waits = self._host.get(key)
        if waits is None:
            waits = HostWaits()
            graphed_iteration = self.run.timing.cuda_graph_impl == "full_iteration"  # one launch an iteration
            if self.run.framework == "megatron" and self.calibration is None and not graphed_iteration:
                run, ops = self.run, self.ops(layer)
                launches = self.launches(layer)
                graphs, modules = run.timing.cuda_graph_impl, run.timing.cuda_graph_modules
                if run.megatron_fsdp and layer.node == BODY and ops:  # the unit's hooks (`fsdp_unit_launches`)
                    timing = run.timing
                    extra = fsdp_unit_launches(
                        ops,
                        scaled=not (timing.calculate_per_token_loss or timing.ddp_average_in_collective),
                        plain_share=PLAIN_OP_SHARE if self.device.host_kernel_us else 1.0,
                    )
                    first = ops[0].name  # the pre-forward hook runs before it, the post-backward after its backward
                    # full recompute reruns the layer's forward through its module call, hooks and all: the rerun's
                    # pre-forward hook gathers the bucket the forward released, `_pre_backward` then finds it whole
                    # (selective recompute reruns ops inside the layer, no hook)
                    again = extra[0] if state == LayerType.FULL_REC_LAYER else 0.0
                    forward, backward = launches.get(first, (0.0, 0.0))
                    launches[first] = (forward + extra[0], backward + extra[1] - again)
                parts = self.parts(layer, state, switches)
                waits = layer_host_waits(
                    ops,
                    {name: price.forward_ms / 1e3 for name, price in self.op_prices(layer).items()},
                    launches,
                    [op.name for op in self._rerun(layer, state, switches)],
                    (parts.forward_ms / 1e3, parts.backward_ms / 1e3, parts.recompute_ms / 1e3),
                    self.launch_s(),
                    dispatcher=run.timing.moe_dispatcher
                    if layer.node == BODY and not (graphs != "none" and dispatch_captured(ops, modules, graphs))
                    else None,
                    dropless=run.training.moe.dropless,
                    # transformer_engine graphs holding moe_preprocess move the alltoall dispatcher's count
                    # copy after the permutation (token_dispatcher.py `MoEAlltoAllTokenDispatcher.__init__`,
                    # 0d8e0714cd and d98e8a64: `cuda_dtoh_point = "before_ep_alltoall"`; the graph holds no copy)
                    copy_after_permute=graphs == "transformer_engine"
                    and "moe_preprocess" in modules
                    and run.timing.moe_dispatcher == "alltoall",
                    backward_s={name: price.backward_ms / 1e3 for name, price in self.op_prices(layer).items()},
                    rerun_launches=self._rerun_launches(layer, state, switches),
                )
            self._host[key] = waits
        return waits

    def option_times(self, layer: Layer) -> dict[str, tuple[float, float]]:
        """{option: (forward_ms, backward_ms)} for NONE, SLCT, COMM, BOTH, FULL. A HEAD or TAIL is never
        recomputed: every option gives its one pair."""
        key = (layer.model_name, layer.node, layer.kind)
        result = self._options.get(key)
        if result is None:
            if layer.node != BODY:
                result = dict.fromkeys(OPTIONS, self.layer_times(layer, _STATES[layer.node][0]))
            else:
                states = self._option_states[layer.model_name]
                result = {option: self.layer_times(layer, *states[option]) for option in OPTIONS}
            self._options[key] = result
        return dict(result)

    def link_ms(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None = None
    ) -> tuple[float, float, float, float]:
        """The layer's collectives in one micro-batch: (link ms, exposed ms) of the forward and plain
        backward, then (link ms, exposed ms) of what recompute sends again. Link ms is the time on the
        link; what the overlap hides behind compute is the difference (memoized, uncalibrated)."""
        key = self._key(layer, state, switches)
        cached = self._links.get(key)
        if cached is None:
            ops, prices = self.ops(layer), self.op_prices(layer)
            rerun = {op.name for op in self._rerun(layer, state, switches)}
            full = state is LayerType.FULL_REC_LAYER
            link = exposed = again_link = again_exposed = 0.0
            for op in ops:
                if op.category != COMM:
                    continue
                price = prices[op.name]
                for collective, ms in ((op.forward_comm, price.forward_ms), (op.backward_comm, price.backward_ms)):
                    if collective is not None:
                        link += collective_seconds(collective, self.links) * 1e3
                        exposed += ms
                if op.name in rerun:
                    again = op.forward_comm if full or op.recompute_comm is None else op.recompute_comm
                    if again is not None:
                        again_link += collective_seconds(again, self.links) * 1e3
                        again_exposed += price.forward_ms if full else price.recompute_ms
            cached = (link, exposed, again_link, again_exposed)
            self._links[key] = cached
        return cached

    def breakdown(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None = None) -> list[OpTime]:
        """Every op's FLOPs, bytes and ms in the forward, the backward and (what the state reruns) the
        recompute; uncalibrated."""
        self._check(layer, state)
        ops, prices = self.ops(layer), self.op_prices(layer)
        reran = self._rerun(layer, state, switches)
        rerun = {op.name: op for op in reran}
        full = state is LayerType.FULL_REC_LAYER
        rows = []
        for op in ops:
            price = prices[op.name]
            forward_comm = op.forward_comm.payload_bytes if op.forward_comm else 0.0
            backward_comm = op.backward_comm.payload_bytes if op.backward_comm else 0.0
            rows.append(
                OpTime(
                    op.name,
                    op.block,
                    op.category,
                    op.switch,
                    "forward",
                    op.flops,
                    op.bytes,
                    forward_comm,
                    price.forward_ms,
                )
            )
            rows.append(
                OpTime(
                    op.name,
                    op.block,
                    op.category,
                    op.switch,
                    "backward",
                    op.backward_flops,
                    op.backward_bytes,
                    backward_comm,
                    price.backward_ms,
                )
            )
            again = rerun.get(op.name)
            if again is not None:
                again_comm = op.recompute_comm if op.recompute_comm is not None and not full else op.forward_comm
                rows.append(
                    OpTime(
                        op.name,
                        op.block,
                        op.category,
                        op.switch,
                        "recompute",
                        again.flops,
                        again.bytes,
                        again_comm.payload_bytes if again_comm else 0.0,
                        self._again_ms(again, layer, full),
                    )
                )
        restored_ms = self._restored_ms(layer, state, switches, reran)
        if restored_ms > 0:  # the rerun's restore copies, part of `layer_times`' backward (`_restored`)
            traffic, _ = self._restored(layer, state, switches, reran)
            rows.append(OpTime(RESTORE_COPIES, "recompute", MEMORY, None, "recompute", 0.0, traffic, 0.0, restored_ms))
        return rows

    # Calibration -----------------------------------------------------------------------------------

    def _measured_option(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None) -> str | None:
        """The measured option whose setting the state runs, if any (of several alike, the first measured)."""
        assert self.calibration is not None
        measured = self.calibration.measured(layer.model_name, layer.node, calibrated_name(layer.kind))
        if state is not LayerType.SEL_REC_LAYER:
            option = {LayerType.FULL_REC_LAYER: "FULL"}.get(state, "NONE")
            return option if option in measured else None
        stated = self._switches(layer, state, switches)
        configured = self._configured[layer.model_name]
        for option in SELECTIVE_OPTIONS:
            if option in measured and option_state(option, configured)[1] == stated:
                return option
        return None

    def _calibrate(self, source: str | Path | tuple[Measurement, ...]) -> Calibration:
        where = "<calibration>" if isinstance(source, tuple) else str(source)
        measurements = source if isinstance(source, tuple) else read_calibration(source)
        layers: dict[tuple[str, str, str], Layer] = {}
        for layer in walk(self.run, fused_tail=True):  # a TAIL row measures the whole TAIL (`calibrated_name`)
            layers.setdefault((layer.model_name, layer.node, layer.kind.name), layer)
        self._calibrated_layers = layers
        for m in measurements:
            if m.model_name not in self._configured:
                raise InputError(
                    where,
                    f"line {m.line}: model_name",
                    f"no model {m.model_name!r} in the run (models: {', '.join(self._configured)})",
                )
            if m.key not in layers:
                names = sorted({k for (model, node, k) in layers if model == m.model_name and node == m.node})
                part = " (a TAIL row measures the whole TAIL; its parts take its factors)" if m.node == TAIL else ""
                raise InputError(
                    where,
                    f"line {m.line}: kind",
                    f"{m.model_name} has no {m.node} kind {m.kind!r} (kinds: {', '.join(names)}){part}",
                )
        self._check_alike(measurements, where)

        def modelled(m: Measurement) -> tuple[float, float, float]:
            parts = self.parts(*self._measured_state(m))
            return parts.forward_ms, parts.backward_ms, parts.recompute_ms

        return fit_calibration(measurements, modelled, where)

    def _measured_state(self, m: Measurement) -> tuple[Layer, LayerType, Mapping[str, int] | None]:
        """The layer, state and switches a calibration row measures."""
        layer = self._calibrated_layers[m.key]
        if m.node != BODY:
            return layer, _STATES[m.node][0], None
        state, switches = option_state(m.option, self._configured[m.model_name])
        return layer, state, switches

    def calibration_json(self) -> dict[str, Any] | None:
        """Which time calibration this model applies (`calibration.fit_report`): its file, rows, the run's
        kinds it measures and those left at the global factors, and each row's residual, the calibrated
        model's time of the measured layer (`layer_times`, the path every price takes) less the measurement."""
        if self.calibration is None:
            return None
        return fit_report(
            self.calibration,
            sorted(self._calibrated_layers),
            lambda m: self.layer_times(*self._measured_state(m)),
        )

    def _check_alike(self, measurements: tuple[Measurement, ...], where: str) -> None:
        """Two selective options of one kind that run the same switches must be measured alike."""
        seen: dict[tuple, Measurement] = {}
        for m in measurements:
            if m.option not in SELECTIVE_OPTIONS:
                continue
            setting = tuple(sorted(option_state(m.option, self._configured[m.model_name])[1].items()))
            other = seen.setdefault((m.key, setting), m)
            if other is not m and (other.forward_ms, other.backward_ms) != (m.forward_ms, m.backward_ms):
                raise InputError(
                    where,
                    f"line {m.line}",
                    f"{m.option} runs the same switches as {other.option} (line {other.line}) "
                    "but was measured differently",
                )
