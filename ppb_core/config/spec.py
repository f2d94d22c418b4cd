"""A model's architecture in ppb's own field names, whatever file it came from."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, Strict, model_validator

from ppb_core import limits

# quick_geglu: GPT-OSS's experts, (clamp(up) + 1) · g·sigmoid(1.702·g) of the clamped gate g (transformers
# 5.25 models/gpt_oss/modeling_gpt_oss.py `GptOssExperts._apply_gate`; Megatron-Core's `quick_gelu` with
# `glu_linear_offset` 1 and `activation_func_clamp_value` 7, as Megatron-Bridge's GPTOSSBridge sets them)
Activation = Literal["swiglu", "gelu", "relu", "silu", "quick_geglu"]
# Gated activations multiply two up-projections (three matrices in the MLP).
GATED_ACTIVATIONS: frozenset[str] = frozenset({"swiglu", "quick_geglu"})


class StrictModel(BaseModel):
    """Every config record: unknown fields are rejected, values are immutable, and types are strict
    (`dp: true` or `hidden_size: "4096"` is an error, not a 1 or a 4096)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# Sizes bounded by `ppb_core.limits`: a value no real model has is refused before any work.
Layers = Annotated[PositiveInt, limits.at_most(limits.LAYERS, "body layers")]
Width = Annotated[PositiveInt, limits.at_most(limits.HIDDEN)]
Rank = Annotated[NonNegativeInt, limits.at_most(limits.HIDDEN)]
FfnWidth = Annotated[PositiveInt, limits.at_most(limits.FFN)]
Heads = Annotated[PositiveInt, limits.at_most(limits.HEADS, "heads")]
Experts = Annotated[NonNegativeInt, limits.at_most(limits.EXPERTS, "experts")]
LayerCount = Annotated[NonNegativeInt, limits.at_most(limits.LAYERS, "layers")]


class ModelSpec(StrictModel):
    """A decoder-only transformer, dense or MoE, with multi-head, grouped or latent (MLA) attention.

    Field names are ppb's; `ppb_core.config.hf` maps each HuggingFace architecture onto them.
    """

    family: str = "generic"
    vocab_size: Annotated[PositiveInt, limits.at_most(limits.VOCABULARY)]
    hidden_size: Width
    num_layers: Layers
    num_attention_heads: Heads
    num_key_value_heads: Heads | None = None
    head_dim: Width | None = None
    intermediate_size: FfnWidth
    activation: Activation = "swiglu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    norm_bias: bool = False
    tied_embeddings: bool = False
    # alibi: ALiBi's per-head linear biases on the attention scores (BLOOM), no position table
    position_embedding: Literal["rope", "learned", "alibi", "none"] = "rope"
    max_position_embeddings: Annotated[PositiveInt, limits.at_most(limits.POSITIONS)] = 4096
    attention_bias: bool = Field(False, description="biases on the q, k and v projections")
    attention_output_bias: bool = Field(False, description="bias on the output projection")
    mlp_bias: bool = False
    qk_norm: bool = Field(False, description="per-head RMSNorm of queries and keys (Qwen3)")
    # Sliding-window attention (GPT-OSS): the layers in window_layers attend to their sliding_window last keys.
    sliding_window: Annotated[NonNegativeInt, limits.at_most(limits.POSITIONS)] = Field(
        0, description="keys a windowed layer's query attends to, itself included"
    )
    window_layers: Annotated[tuple[LayerCount, ...], Strict(False), Field(max_length=limits.LAYERS)] = Field(
        (), description="layers attending within sliding_window (HF layer_types 'sliding_attention')"
    )
    attention_sinks: bool = Field(False, description="a learnable per-head logit in every softmax (GPT-OSS sinks)")
    rope_yarn_factor: float = Field(
        0.0, ge=0.0, le=1e6, description="YaRN's rotary scaling factor (rope_scaling factor, GPT-OSS 32); 0: no YaRN"
    )
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    hidden_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    # Mixture of experts (num_experts 0: every layer dense).
    num_experts: Experts = 0
    experts_per_token: Experts = 0
    moe_intermediate_size: FfnWidth | None = None
    shared_experts: Experts = 0
    shared_expert_intermediate_size: FfnWidth | None = Field(
        None, description="width of each shared expert; defaults to moe_intermediate_size"
    )
    shared_expert_gate: bool = Field(False, description="a sigmoid gate on the shared expert (Qwen2-MoE)")
    expert_bias: bool = Field(False, description="biases on the routed experts' linears (GPT-OSS)")
    activation_clamp: float = Field(
        0.0, ge=0.0, le=1e6, description="gated activation inputs clamped at this (GPT-OSS swiglu_limit 7); 0: none"
    )
    router_bias: bool = Field(False, description="a bias on the router's logits (GPT-OSS)")
    expert_groups: Experts = Field(0, description="experts fall into this many groups (n_group)")
    expert_group_limit: Experts = Field(
        0, description="a token's experts come from at most this many groups (topk_group); 0: no limit"
    )
    first_dense_layers: LayerCount = Field(0, description="leading dense layers (first_k_dense_replace)")
    moe_layer_frequency: Layers = Field(1, description="every k-th layer is MoE (decoder_sparse_step)")
    dense_layers: Annotated[tuple[LayerCount, ...], Strict(False), Field(max_length=limits.LAYERS)] = Field(
        (), description="layers kept dense (mlp_only_layers)"
    )
    # Multi-head latent attention (kv_lora_rank 0: not MLA).
    q_lora_rank: Rank = 0
    kv_lora_rank: Rank = 0
    qk_nope_head_dim: Rank = 0
    qk_rope_head_dim: Rank = 0
    v_head_dim: Rank = 0
    mla_latent_norms: bool = Field(
        True, description="MLA's norms of the compressed query and key/value (DeepSeek-V3; Megatron's --qk-layernorm)"
    )
    # Multi-token prediction modules after the last layer (DeepSeek-V3).
    mtp_layers: LayerCount = 0

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        heads, kv = self.num_attention_heads, self.kv_heads
        if heads % kv:
            raise ValueError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
        if self.head_dim is None and not self.is_mla and self.hidden_size % heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {heads}; give head_dim"
            )
        if self.num_experts:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise ValueError(
                    f"experts_per_token {self.experts_per_token} must be between 1 and num_experts {self.num_experts}"
                )
            if self.moe_intermediate_size is None:
                raise ValueError("moe_intermediate_size is required when num_experts > 0")
            self._check_expert_groups()
        elif self.shared_experts:
            raise ValueError("shared_experts needs num_experts > 0")
        if not self.mla_latent_norms and not self.is_mla:
            raise ValueError("mla_latent_norms false needs an MLA model (kv_lora_rank > 0): the norms are MLA's")
        if self.is_mla and not (self.qk_nope_head_dim + self.qk_rope_head_dim and self.v_head_dim):
            raise ValueError("an MLA model (kv_lora_rank > 0) needs qk_nope_head_dim, qk_rope_head_dim, v_head_dim")
        outside = [index for index in self.dense_layers if index >= self.num_layers]
        if outside:
            raise ValueError(f"dense_layers: {outside[0]} is not a layer index (0 to {self.num_layers - 1})")
        outside = [index for index in self.window_layers if index >= self.num_layers]
        if outside:
            raise ValueError(f"window_layers: {outside[0]} is not a layer index (0 to {self.num_layers - 1})")
        if self.window_layers and not self.sliding_window:
            raise ValueError("window_layers needs sliding_window, the keys each of their queries attends to")
        if self.mtp_layers and not self.num_layers:
            raise ValueError("mtp_layers needs body layers")
        return self

    def _check_expert_groups(self) -> None:
        """Group-limited routing as Megatron-Core's `TransformerConfig.__post_init__` holds it (d98e8a64: a group
        top-k needs moe_router_num_groups, which divides the experts, and is at most that many groups) and
        transformers' DeepseekV3TopkRouter runs it (`view(-1, n_group, n_routed_experts // n_group)`, then
        `topk(k=topk_group)` over the groups): anything else is a crash at the model's first step. Without a group
        top-k Megatron-Core routes without groups (`if self.moe_router_group_topk:`), whatever their count, and
        so does ppb's pricing (`timing.router`, `timing.flex.ranks_reached`): that run is not refused."""
        groups, limit = self.expert_groups, self.expert_group_limit
        if limit and not groups:
            raise ValueError(f"expert_group_limit {limit} needs expert_groups, the groups it picks from")
        if limit and self.num_experts % groups:
            raise ValueError(f"expert_groups {groups} does not divide num_experts {self.num_experts}")
        if limit > groups:
            raise ValueError(f"expert_group_limit {limit} is more than expert_groups {groups}")

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    def layer_window(self, index: int) -> int:
        """Keys a query of body layer *index* attends to within its sliding window; 0: the whole causal prefix."""
        return self.sliding_window if index in self.window_layers else 0

    def layer_is_moe(self, index: int) -> bool:
        """Whether body layer *index* (0-based) routes to experts."""
        if not self.is_moe or index < self.first_dense_layers or index in self.dense_layers:
            return False
        return (index + 1) % self.moe_layer_frequency == 0


VisionActivation = Literal["quick_gelu", "gelu", "gelu_tanh", "swiglu"]


class VisionSpec(StrictModel):
    """A vision tower (ViT) and what projects its patches into a language model, in ppb's field names.

    `ppb_core.config.hf_vision` maps each HuggingFace vision-language architecture onto it:
    the patch embedding (HEAD), the encoder blocks (BODY; window or full attention where the model
    has both), and everything after the last block (TAIL: post-norm, pooling head, patch merger
    or multi-modal projector).
    """

    family: Literal["qwen2_vl", "qwen2_5_vl", "clip", "siglip"]
    hidden_size: PositiveInt
    num_layers: PositiveInt
    num_attention_heads: PositiveInt
    intermediate_size: PositiveInt
    activation: VisionActivation
    norm: Literal["rmsnorm", "layernorm"] = "layernorm"
    fused_qkv: bool = Field(False, description="one qkv projection (Qwen) instead of q, k, v (CLIP, SigLIP)")
    rope: bool = Field(False, description="2D rotary positions on queries and keys (Qwen)")
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    # Patch embedding.
    in_channels: PositiveInt = 3
    patch_size: PositiveInt
    temporal_patch_size: PositiveInt = Field(1, description="frames one patch spans (Qwen: 2, an image repeated)")
    patch_bias: bool = False
    image_size: PositiveInt | None = Field(None, description="the resolution a learned position table is for")
    class_token: bool = False
    learned_positions: bool = False
    pre_norm: bool = Field(False, description="a norm after the embedding (CLIP's pre_layrnorm)")
    post_norm: bool = Field(False, description="a norm after the last block (CLIP, SigLIP)")
    pooling_head: bool = Field(False, description="SigLIP's attention-pooling head")
    # Qwen: patches merged spatial_merge_size² at a time; window attention but in full_attention_layers.
    spatial_merge_size: PositiveInt = 1
    window_size: NonNegativeInt = Field(0, description="window side in pixels; 0: every block attends in full")
    full_attention_layers: Annotated[tuple[NonNegativeInt, ...], Strict(False)] = ()
    # What feeds the language model.
    projector: Literal["merger", "mlp", "none"] = "none"
    projector_hidden_size: NonNegativeInt = 0
    out_hidden_size: NonNegativeInt = Field(0, description="the width the projector hands the language model")
    projector_bias: bool = True
    feature_layers: Annotated[tuple[int, ...], Strict(False)] = Field(
        (), description="encoder outputs the projector reads (LLaVA's vision_feature_layer)"
    )
    keep_class_token: bool = Field(False, description="LLaVA's vision_feature_select_strategy 'full'")
    image_newline: bool = Field(False, description="LLaVA-NeXT's learned row separator")
    grid_pinpoints: Annotated[tuple[Annotated[tuple[PositiveInt, PositiveInt], Strict(False)], ...], Strict(False)] = (
        Field((), description="LLaVA-NeXT's any-resolution crops, (height, width)")
    )

    @model_validator(mode="after")
    def _consistent(self) -> VisionSpec:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )
        bad = [i for i in self.full_attention_layers if i >= self.num_layers]
        if bad:
            raise ValueError(f"full_attention_layers names layer {bad[0]} of {self.num_layers}")
        if self.learned_positions and self.image_size is None:
            raise ValueError("a learned position table needs image_size")
        if self.projector != "none" and not (self.projector_hidden_size and self.out_hidden_size):
            raise ValueError(f"a {self.projector} projector needs projector_hidden_size and out_hidden_size")
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def position_embedding(self) -> str:
        return "rope" if self.rope else ("learned" if self.learned_positions else "none")

    @property
    def gated(self) -> bool:
        return self.activation == "swiglu"

    def layer_has_window(self, index: int) -> bool:
        """Whether block *index* attends within windows (Qwen2.5-VL) rather than over each whole image."""
        return bool(self.window_size) and index not in self.full_attention_layers
