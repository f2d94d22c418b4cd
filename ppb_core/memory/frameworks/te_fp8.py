"""Transformer Engine's FP8 weights under Megatron-Core (`--fp8-format`, `--fp8-param-gather`).

Megatron-LM d98e8a64 with Transformer Engine d0067d0d. Every linear of a decoder layer (attention's, MLA's
down- and up-projections, the MLP's, the shared and routed experts': `TELinear`, `TELayerNormColumnParallelLinear`,
`TEGroupedLinear`) runs its GEMMs in FP8 under the layer's fp8 autocast; the router's gating linear
(moe/moe_utils.py `router_gating_linear`), the shared experts' gate, the embedding and the output layer
(Megatron's own `ColumnParallelLinear`) are not Transformer Engine's and stay 16-bit. An MTP layer's projection
and transformer layer are built from the same specs.

* **Without `--fp8-param-gather`** the parameters are 16-bit and each module keeps the quantized copy of its
  weight it multiplies: Megatron hands Transformer Engine `is_first_microbatch` (extensions/
  transformer_engine.py `TELinear.forward` and the others: `None` only under
  `--disable-parameter-transpose-cache`), so TE caches the copy in the module's `_fp8_workspaces`
  (module/linear.py, layernorm_linear.py, grouped_linear.py: `cache_name = "weight"`, `weight{i}` per expert)
  and refreshes it in place on each iteration's first micro-batch (`quantize_weight(...,
  update_workspace=is_first_microbatch)`): held from the first forward on, at every moment, the optimizer step
  included. In training the weight quantizer makes rowwise and columnwise data (`set_usage(rowwise=True,
  columnwise=is_grad_enabled and inp.requires_grad)`): for delayed and tensorwise scaling (`Float8Tensor`) the
  1-byte data and its 1-byte transpose, but where the GPU runs non-TN FP8 GEMMs (capability 10.x, 11.x and
  13 on: utils.py `is_non_tn_fp8_gemm_supported`, float8_tensor_storage.py `update_usage`; TE v2.0 on) the data alone;
  for MXFP8 rowwise and columnwise data, a byte each, with one E8M0 scale per 32 elements each; for blockwise
  scaling the same with one fp32 scale per 128 × 128 block each (2D weight blocks). Not under ZeRO-3
  (Megatron-FSDP gathers the weights; not modelled).
* **With `--fp8-param-gather`** the parameters themselves are FP8 (`fp8_model_init`): base.py
  `quantize_weight` finds a `QuantizedTensor` and only updates its usages (the transpose made on Hopper), and
  keeps no workspace. The parameter is then these bytes in place of 2: on Hopper's delayed or tensorwise
  scaling the same 2 bytes. The distributed optimizer's parameter buffer holds the 1-byte data
  (param_and_grad_buffer.py groups parameters by dtype), which its all-gather moves (`fp8_gathered`).
"""

from __future__ import annotations

from ppb_core.config.run import FrameworkRelease
from ppb_core.memory.frameworks.muon import matrix_params
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import BodyKind, LayerKind, Moe, TailKind
from ppb_core.model.params import LayerParams

FP8_BYTES = 1
MXFP8_BLOCK = 32  # elements an E8M0 scale (1 byte) covers
BLOCKWISE_TILE = 128 * 128  # elements a 2D weight block's fp32 scale covers
FP32_BYTES = 4


def non_tn_fp8(capability: float, release: FrameworkRelease | None = None) -> bool:
    """Whether TE runs FP8 GEMMs in every layout on the GPU (TE utils.py `is_non_tn_fp8_gemm_supported`): from
    v2.0 (819a75219, `releases.CHANGES["te_fp8_non_tn_gemm_sm100"]`); TE 1.x kept FP8 transposes on every GPU
    (release_v1.14: `Float8Tensor` weights cast-transposed whatever the device)."""
    supported = 10 <= capability < 12 or capability >= 13
    return supported and (release is None or release.holds("te_fp8_non_tn_gemm_sm100"))


def weight_bytes_per_element(recipe: str, capability: float, release: FrameworkRelease | None = None) -> float:
    """Bytes a weight element takes quantized for training, rowwise and columnwise (module docstring)."""
    if recipe == "mxfp8":
        return 2 * (FP8_BYTES + 1 / MXFP8_BLOCK)
    if recipe == "blockwise":
        return 2 * (FP8_BYTES + FP32_BYTES / BLOCKWISE_TILE)
    return FP8_BYTES if non_tn_fp8(capability, release) else 2 * FP8_BYTES


def _router(moe: Moe) -> int:
    return moe.hidden_size * moe.num_experts + (moe.hidden_size if moe.shared_expert_gate else 0)


def fp8_weights(kind: LayerKind, setup: MemorySetup) -> LayerParams:
    """Elements (per TP/EP rank) of the layer's Transformer Engine linear weights, which FP8 training quantizes:
    a decoder layer's matrices but the router and the shared experts' gate; each MTP layer's projection and
    layer likewise; none of a HEAD, of the output layer, or of a layer left in 16 bits (`high_precision`:
    Megatron's --first-last-layers-bf16, fp8_utils.py `is_first_last_bf16_layer`)."""
    if isinstance(kind, BodyKind) and kind.high_precision:
        return LayerParams()
    found = matrix_params(kind, setup)
    if isinstance(kind, BodyKind) and isinstance(kind.mlp, Moe):
        return LayerParams(found.non_expert - _router(kind.mlp), found.expert)
    if isinstance(kind, TailKind) and kind.mtp_body is not None and isinstance(kind.mtp_body.mlp, Moe):
        return LayerParams(found.non_expert - kind.mtp_layers * _router(kind.mtp_body.mlp), found.expert)
    return found


def workspace_bytes(kind: LayerKind, setup: MemorySetup) -> float:
    """The quantized weight copies a layer's modules keep (module docstring); 0 unless Megatron's Transformer
    Engine layers train in FP8 without `--fp8-param-gather` and without ZeRO-3."""
    if not setup.fp8_recipe or setup.fp8_param_gather or setup.shard_level >= 3:
        return 0.0
    return fp8_weights(kind, setup).total * weight_bytes_per_element(
        setup.fp8_recipe, setup.compute_capability, setup.release
    )


def fp8_parameter_extra_bytes(kind: LayerKind, setup: MemorySetup) -> float:
    """What FP8 parameters (`--fp8-param-gather`) take beyond the 16-bit price of their elements: the quantized
    bytes (rowwise and columnwise) less the training dtype's; whole on each rank below ZeRO-3."""
    if not (setup.fp8_recipe and setup.fp8_param_gather) or setup.shard_level >= 3:
        return 0.0
    per_element = weight_bytes_per_element(setup.fp8_recipe, setup.compute_capability, setup.release)
    return fp8_weights(kind, setup).total * (per_element - setup.dtype_bytes)


def proj_saves_original(setup: MemorySetup) -> bool:
    """Whether Megatron's attention output projection saves its original 16-bit input rather than an FP8 copy:
    Transformer Engine's FP8 under any recipe but delayed scaling, Megatron-Core core_v0.15.0 and TE v2.6 on
    (attention.py `Attention.__init__` at core_v0.17.0: `set_save_original_input(self.linear_proj)` where
    `config.fp8_recipe != 'delayed' and is_te_min_version("2.6.0dev0")`; ppb_core.memory.precision)."""
    return (
        setup.framework == "megatron"
        and setup.transformer_impl == "transformer_engine"
        and setup.fp8_recipe not in ("", "delayed")
        and setup.release.holds("proj_saves_original_input")
        and setup.release.holds("te_save_original_input")
    )
