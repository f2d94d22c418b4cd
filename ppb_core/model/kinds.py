"""Layer kinds: everything the memory and time models need to know of a layer, hashable.

Two layers of one kind cost the same, so the chain evaluates each kind once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ppb_core.config.spec import ModelSpec, VisionSpec
from ppb_core.config.vision import VisionSequence
from ppb_core.model.geometry import per_rank

# Where a layer sits in its model: the embedding, a transformer layer, or the final norm, output and loss.
HEAD, BODY, TAIL = "HEAD", "BODY", "TAIL"
# The parts of a TAIL (`TailKind.part`): whole, or as Megatron-Core's standalone MTP places it.
WHOLE, NORM_PART, MTP_PART, OUTPUT_PART = "whole", "final_norm", "mtp", "output"
UNNORMED = "mtp_output"  # the MTP layers and the loss without the final norm (`norm_apart`)


@dataclass(frozen=True)
class Norm:
    kind: str  # "rmsnorm" | "layernorm"
    bias: bool

    @property
    def params_per_feature(self) -> int:
        return 2 if self.bias else 1


@dataclass(frozen=True)
class Attention:
    """Causal self-attention: multi-head, grouped-query, or latent (MLA, kv_lora_rank > 0)."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    qkv_bias: bool
    out_bias: bool
    qk_norm: bool
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    rope: bool = True  # rotary position embedding applied to queries and keys
    alibi: bool = False  # ALiBi's linear biases added to the scores (Press et al. 2021; BLOOM)
    latent_norms: bool = True  # MLA: norms of the compressed query and key/value before their up-projections
    # Sliding-window attention: each query attends to its `window` last keys, itself included (0: every
    # earlier key). GPT-OSS's odd layers (HF layer_types; Megatron-Core's window_size (w - 1, 0) skipped on
    # every window_attn_skip_freq-th layer, transformer_config.py, as Megatron-Bridge's GPTOSSBridge sets it).
    window: int = 0
    # Attention sinks: a learnable logit per head joining every softmax row (GPT-OSS's `sinks`; Megatron-Core's
    # softmax_type "learnable", a `softmax_offset` of one value per head).
    sinks: bool = False

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def q_head_dim(self) -> int:
        """Per-head width of queries and keys."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim


@dataclass(frozen=True)
class Mlp:
    """A dense feed-forward block; gated (SwiGLU: three matrices) or not (GeLU: two)."""

    hidden_size: int
    intermediate_size: int
    gated: bool
    bias: bool
    activation: str

    @property
    def matrices(self) -> int:
        return 3 if self.gated else 2


@dataclass(frozen=True)
class Moe:
    """Routed experts (top-k of num_experts), optional shared experts, and a router."""

    hidden_size: int
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    gated: bool
    activation: str
    shared_experts: int = 0
    shared_intermediate_size: int = 0  # width of each shared expert
    shared_expert_gate: bool = False
    groups: int = 0  # expert groups (n_group); 0: none
    group_limit: int = 0  # a token's experts from at most this many groups (topk_group); 0: no limit
    bias: bool = False  # biases on the routed experts' linears (GPT-OSS: gate_up_proj_bias, down_proj_bias)
    router_bias: bool = False  # a bias on the router's logits (GPT-OSS's GptOssTopKRouter)
    clamp: bool = False  # the gated activation's inputs clamped first (GPT-OSS's swiglu_limit)

    @property
    def matrices(self) -> int:
        return 3 if self.gated else 2


@dataclass(frozen=True)
class BodyKind:
    """A transformer layer: norm, attention, norm, MLP or MoE."""

    name: str
    attention: Attention
    mlp: Mlp | Moe
    norm: Norm
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    # FP8 training leaves this layer's GEMMs in 16 bits (Megatron's --first-last-layers-bf16)
    high_precision: bool = False

    @property
    def is_moe(self) -> bool:
        return isinstance(self.mlp, Moe)

    @property
    def hidden_size(self) -> int:
        return self.attention.hidden_size


@dataclass(frozen=True)
class HeadKind:
    """The embedding: token table, and learned positions where the model has them."""

    name: str
    vocab_size: int
    hidden_size: int
    learned_positions: int  # 0 with rotary or no positions
    tied: bool
    hidden_dropout: float = 0.0
    # MindFormers' `parallel_config.vocab_emb_dp`: the table whole on every TP rank (`vocab_rows`)
    vocab_replicated: bool = False


@dataclass(frozen=True)
class TailKind:
    """Final norm, output head and loss, and the multi-token-prediction modules where there are some."""

    name: str
    vocab_size: int
    hidden_size: int
    norm: Norm
    tied: bool
    mtp_layers: int = 0
    mtp_body: BodyKind | None = None
    # WHOLE: all of it in one cell. Megatron-Core's standalone MTP (a layout with `m` apart from `L`)
    # splits it (`standalone_parts`): NORM_PART, MTP_PART and OUTPUT_PART; with `mL` in a cell of no
    # decoder layer the final norm stays with the last one (`norm_apart`): NORM_PART and UNNORMED.
    part: str = WHOLE
    # MindFormers' `parallel_config.vocab_emb_dp`: the output head whole on every TP rank (`vocab_rows`)
    vocab_replicated: bool = False

    @property
    def whole_name(self) -> str:
        """The fused TAIL's name, whatever part this is (`tail_kind`): what a calibration row names."""
        return "output" + ("_mtp" if self.mtp_layers else "")

    @property
    def has_output(self) -> bool:
        """Whether this part holds the output layer and the losses (of every head)."""
        return self.part in (WHOLE, OUTPUT_PART, UNNORMED)

    @property
    def has_final_norm(self) -> bool:
        """Whether this part holds the model's final norm."""
        return self.part in (WHOLE, NORM_PART)

    @property
    def has_mtp_modules(self) -> bool:
        """Whether this part runs the MTP layers (their embedding, norms, projection, transformer layer)."""
        return self.part in (WHOLE, MTP_PART, UNNORMED) and self.mtp_body is not None and self.mtp_layers > 0


def standalone_parts(kind: TailKind) -> tuple[TailKind, TailKind, TailKind]:
    """The TAIL as Megatron-Core's standalone MTP places it (commit d98e8a64): the model's final norm
    with the last decoder layer (transformer_block.py `has_final_layernorm_in_this_stage`, where the
    model has MTP layers); the MTP chunk with an embedding copy and the MTP layers, sending
    (1 + mtp)·h per token on (gpt_model.py `GPTModel.__init__` builds the embedding where
    `mtp_process`; multi_token_prediction.py `MultiTokenPredictionBlock.forward`); the loss chunk with
    the output layer, computing every head's logits and loss (`GPTModel._postprocess`, `process_mtp_loss`)."""
    return (
        dataclasses.replace(kind, name="final_norm", part=NORM_PART),
        dataclasses.replace(kind, name="mtp", part=MTP_PART),
        dataclasses.replace(kind, name="output_heads", part=OUTPUT_PART),
    )


def norm_apart(kind: TailKind) -> tuple[TailKind, TailKind]:
    """A fused `mL` TAIL in a cell of no decoder layer, as Megatron-Core places it: with MTP layers the
    model's final norm is built in the chunk of the last decoder layer (transformer_block.py
    `TransformerBlock.has_final_layernorm_in_this_stage`, commit d98e8a64), the MTP layers, output
    layer and losses in the `mL` chunk (its name kept, `output_mtp`: what the two run is the TAIL's)."""
    return dataclasses.replace(kind, name="final_norm", part=NORM_PART), dataclasses.replace(kind, part=UNNORMED)


@dataclass(frozen=True)
class EncoderBodyKind(BodyKind):
    """A vision encoder block: bidirectional attention within each image (or window), on its own sequence.

    Its tokens are the tower's patches, not the language model's sequence: `tokens` per sample,
    attending in `sequences` separate images, frames, crops or windows that form `pairs`
    (query, key) pairs per head. Its activations follow transformers' module
    (`ppb_core.memory.activations.encoder_terms`): `fused_qkv` (one qkv projection whose output
    the value keeps whole), its attention's `rope` (rotated queries and keys), `chunked` (attention
    run image by image and concatenated, as Qwen's vision attention does outside flash-attention 2).
    """

    tokens: int = 0
    sequences: int = 1
    pairs: int = 0
    fused_qkv: bool = False
    chunked: bool = False


@dataclass(frozen=True)
class PatchEmbedKind:
    """A vision tower's HEAD: the patch embedding, CLIP's class token, learned positions and CLIP's pre-norm."""

    name: str
    hidden_size: int
    patch_inputs: int  # pixels one patch spans: channels · frames · patch²
    patch_bias: bool
    class_token: bool
    positions: int  # rows of the learned position table (0 with rotary positions)
    pre_norm: Norm | None
    tokens: int  # encoder tokens per sample
    patches: int  # patches per sample (tokens less the class tokens)


@dataclass(frozen=True)
class ProjectorKind:
    """A vision tower's TAIL: what runs after its last block up to the language model's input.

    The post-norm (CLIP, SigLIP; in LLaVA it only normalises the unused pooled class token),
    SigLIP's attention-pooling head, and the projector: Qwen's patch merger (a norm over each
    patch, then an MLP over `merge` patches at a time) or LLaVA's (an MLP over the feature
    layers read), and LLaVA-NeXT's learned row separator.
    """

    name: str
    hidden_size: int  # the tower's width
    post_norm: Norm | None
    post_norm_tokens: int  # tokens per sample the post-norm's output is used on (0: unused)
    pooling_head: bool
    heads: int
    intermediate_size: int  # the pooling head's MLP width
    merge: int  # patches one projected token stands for
    merge_norm: Norm | None  # the merger's norm over each patch (ln_q)
    projector_inputs: int  # features of one projected token: width · merge (or · feature layers read)
    features_kept: int  # of them, what the projector keeps itself (several layers concatenated, or the
    # last block's output; a block's input is kept by that block)
    projector_hidden: int
    out_hidden: int
    projector_bias: bool
    tokens_in: int  # per sample
    tokens_out: int  # per sample
    newline: int  # LLaVA-NeXT's image_newline parameters


LayerKind = BodyKind | HeadKind | TailKind | PatchEmbedKind | ProjectorKind


def is_head(kind: LayerKind) -> bool:
    """Whether *kind* is a sub-model's HEAD: a token embedding or a patch embedding."""
    return isinstance(kind, HeadKind | PatchEmbedKind)


def _attention(spec: ModelSpec, index: int = 0) -> Attention:
    if spec.is_mla:
        return Attention(
            hidden_size=spec.hidden_size,
            num_heads=spec.num_attention_heads,
            num_kv_heads=spec.kv_heads,
            head_dim=spec.qk_nope_head_dim + spec.qk_rope_head_dim,
            qkv_bias=spec.attention_bias,
            out_bias=spec.attention_output_bias,
            qk_norm=False,
            q_lora_rank=spec.q_lora_rank,
            kv_lora_rank=spec.kv_lora_rank,
            qk_nope_head_dim=spec.qk_nope_head_dim,
            qk_rope_head_dim=spec.qk_rope_head_dim,
            v_head_dim=spec.v_head_dim,
            rope=spec.position_embedding == "rope",
            latent_norms=spec.mla_latent_norms,
        )
    return Attention(
        hidden_size=spec.hidden_size,
        num_heads=spec.num_attention_heads,
        num_kv_heads=spec.kv_heads,
        head_dim=spec.attention_head_dim,
        qkv_bias=spec.attention_bias,
        out_bias=spec.attention_output_bias,
        qk_norm=spec.qk_norm,
        rope=spec.position_embedding == "rope",
        alibi=spec.position_embedding == "alibi",
        window=spec.layer_window(index),
        sinks=spec.attention_sinks,
    )


def _norm(spec: ModelSpec) -> Norm:
    return Norm(spec.norm, spec.norm_bias)


def body_kind(spec: ModelSpec, index: int, dropout: float | None = None) -> BodyKind:
    """The kind of body layer *index*; *dropout* (the run's override) replaces the model's rates."""
    attention = _attention(spec, index)
    mlp: Mlp | Moe
    moe = spec.layer_is_moe(index)
    if moe:
        assert spec.moe_intermediate_size is not None
        mlp = Moe(
            hidden_size=spec.hidden_size,
            num_experts=spec.num_experts,
            experts_per_token=spec.experts_per_token,
            expert_intermediate_size=spec.moe_intermediate_size,
            gated=spec.gated,
            activation=spec.activation,
            shared_experts=spec.shared_experts,
            shared_intermediate_size=(spec.shared_expert_intermediate_size or spec.moe_intermediate_size)
            if spec.shared_experts
            else 0,
            shared_expert_gate=spec.shared_expert_gate,
            groups=spec.expert_groups,
            group_limit=spec.expert_group_limit,
            bias=spec.expert_bias,
            router_bias=spec.router_bias,
            clamp=spec.activation_clamp > 0,
        )
    else:
        mlp = Mlp(spec.hidden_size, spec.intermediate_size, spec.gated, spec.mlp_bias, spec.activation)
    name = ("moe" if moe else "dense") + ("_mla" if spec.is_mla else "") + ("_swa" if attention.window else "")
    return BodyKind(
        name=name,
        attention=attention,
        mlp=mlp,
        norm=_norm(spec),
        attention_dropout=spec.attention_dropout if dropout is None else dropout,
        hidden_dropout=spec.hidden_dropout if dropout is None else dropout,
    )


def vocab_rows(kind: HeadKind | TailKind, tp: int) -> int:
    """Rows of the vocabulary table (embedding or output head) one TP rank holds and computes: the whole table
    under MindFormers' `vocab_emb_dp` (llama_layer.py `LlamaEmbedding.shard`: the Gather `((1, 1), (dp, cp))`;
    llama.py `LlamaForCausalLM` and research/deepseek2's `DeepseekV2ForCausalLM`: the lm_head MatMul
    `((dp·cp, 1), (1, 1))`, mindformers a4dfb8219 and 2388c729a), else 1/tp of it (vocabulary-parallel)."""
    return kind.vocab_size if kind.vocab_replicated else per_rank(kind.vocab_size, tp)


def head_kind(
    spec: ModelSpec, vocab_size: int, dropout: float | None = None, vocab_replicated: bool = False
) -> HeadKind:
    return HeadKind(
        name="embedding",
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        learned_positions=spec.max_position_embeddings if spec.position_embedding == "learned" else 0,
        tied=spec.tied_embeddings,
        hidden_dropout=spec.hidden_dropout if dropout is None else dropout,
        vocab_replicated=vocab_replicated,
    )


def tail_kind(
    spec: ModelSpec, vocab_size: int, dropout: float | None = None, vocab_replicated: bool = False
) -> TailKind:
    mtp_body = None
    if spec.mtp_layers:
        # An MTP module's transformer layer is one of the model's last (MoE, where there are experts).
        mtp_body = body_kind(spec, spec.num_layers - 1, dropout)
    return TailKind(
        name="output_mtp" if spec.mtp_layers else "output",
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        norm=_norm(spec),
        tied=spec.tied_embeddings,
        mtp_layers=spec.mtp_layers,
        mtp_body=mtp_body,
        vocab_replicated=vocab_replicated,
    )


def vision_kinds(
    spec: VisionSpec, sequence: VisionSequence
) -> tuple[PatchEmbedKind, list[EncoderBodyKind], ProjectorKind]:
    """The HEAD, each BODY layer's kind and the TAIL of a vision tower running *sequence* per sample."""
    h = spec.hidden_size
    norm = Norm(spec.norm, spec.norm == "layernorm")
    classes = sequence.sequences if spec.class_token else 0
    head = PatchEmbedKind(
        name="patch_embed",
        hidden_size=h,
        patch_inputs=spec.in_channels * spec.temporal_patch_size * spec.patch_size**2,
        patch_bias=spec.patch_bias,
        class_token=spec.class_token,
        positions=((spec.image_size or 0) // spec.patch_size) ** 2 + (1 if spec.class_token else 0)
        if spec.learned_positions
        else 0,
        pre_norm=Norm("layernorm", True) if spec.pre_norm else None,
        tokens=sequence.tokens,
        patches=sequence.tokens - classes,
    )
    attention = Attention(
        hidden_size=h,
        num_heads=spec.num_attention_heads,
        num_kv_heads=spec.num_attention_heads,
        head_dim=spec.head_dim,
        qkv_bias=True,
        out_bias=True,
        qk_norm=False,
        rope=spec.rope,
    )
    mlp = Mlp(h, spec.intermediate_size, spec.gated, True, spec.activation)
    bodies = []
    for index in range(spec.num_layers):
        window = spec.layer_has_window(index)
        bodies.append(
            EncoderBodyKind(
                name=("vit_window" if window else "vit_full") if spec.window_size else "vit",
                attention=attention,
                mlp=mlp,
                norm=norm,
                attention_dropout=spec.attention_dropout,
                tokens=sequence.tokens,
                sequences=sequence.sequences,
                pairs=sequence.window_pairs if window else sequence.full_pairs,
                fused_qkv=spec.fused_qkv,
                chunked=spec.fused_qkv,
            )
        )
    merge = spec.spatial_merge_size**2
    inputs = kept = 0
    if spec.projector == "merger":
        inputs = h * merge
    elif spec.projector == "mlp":
        inputs = h * len(spec.feature_layers)
        last = spec.feature_layers[0] in (-1, spec.num_layers)  # hidden_states[-1]: the last block's output
        kept = inputs if len(spec.feature_layers) > 1 or last else 0
    # The post-norm's output counts where something reads it: SigLIP alone pools every token; CLIP
    # normalises the class token it pools, which LLaVA never reads.
    post_tokens = sequence.tokens if spec.post_norm and spec.projector == "none" and spec.pooling_head else 0
    tail = ProjectorKind(
        name={"merger": "merger", "mlp": "projector"}.get(spec.projector, "post_norm"),
        hidden_size=h,
        post_norm=norm if spec.post_norm else None,
        post_norm_tokens=post_tokens,
        pooling_head=spec.pooling_head and spec.projector == "none",
        heads=spec.num_attention_heads,
        intermediate_size=spec.intermediate_size,
        merge=merge if spec.projector == "merger" else 1,
        merge_norm=norm if spec.projector == "merger" else None,
        projector_inputs=inputs,
        features_kept=kept,
        projector_hidden=spec.projector_hidden_size,
        out_hidden=spec.out_hidden_size,
        projector_bias=spec.projector_bias,
        tokens_in=sequence.tokens,
        tokens_out=sequence.merged_tokens,
        newline=spec.out_hidden_size if spec.image_newline else 0,
    )
    return head, bodies, tail


_KIND_TYPES: dict[str, type] = {
    "BodyKind": BodyKind,
    "HeadKind": HeadKind,
    "TailKind": TailKind,
    "EncoderBodyKind": EncoderBodyKind,
    "PatchEmbedKind": PatchEmbedKind,
    "ProjectorKind": ProjectorKind,
}


def kind_to_dict(kind: LayerKind) -> dict:
    """A kind as plain data, tagged with its type, so a stored table can rebuild it exactly."""
    data = {"type": type(kind).__name__}
    for f in dataclasses.fields(kind):
        value = getattr(kind, f.name)
        if dataclasses.is_dataclass(value):
            value = (
                kind_to_dict(value)
                if isinstance(value, BodyKind)
                else {"type": type(value).__name__, **dataclasses.asdict(value)}
            )
        data[f.name] = value
    return data


def kind_from_dict(data: dict) -> LayerKind:
    parts = {"Attention": Attention, "Mlp": Mlp, "Moe": Moe, "Norm": Norm, **_KIND_TYPES}
    fields = {}
    for key, value in data.items():
        if key == "type":
            continue
        if isinstance(value, dict):
            value = (
                kind_from_dict(value)
                if value["type"] in _KIND_TYPES
                else parts[value["type"]](**{k: v for k, v in value.items() if k != "type"})
            )
        fields[key] = value
    return _KIND_TYPES[data["type"]](**fields)
