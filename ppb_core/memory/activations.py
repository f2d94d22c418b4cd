"""Activations: the tensors a layer keeps for its backward, op by op, with the switch that governs each.

Every term is a tensor of one micro-batch on one device. `switch` names the recompute switch
whose 0 drops the tensor (it is rebuilt in the backward); None means the layer always keeps it
(the residual stream, projection outputs, dropout masks after the output projection and MLP,
router state). The full derivation, and where it departs from hyper-parallel's MemEst activation
formulas (sapp_nd/memory_estimation/evaluators/layer_block.py), is in
docs/memory.md.

`ActivationFormulas` prices a layer kind with these formulas. It is the seam a census takes:
an object with the same three methods (for instance one priced from measured
`KindActivations`) can replace it for one model in `MemoryModel`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import (
    MTP_PART,
    NORM_PART,
    OUTPUT_PART,
    BodyKind,
    EncoderBodyKind,
    HeadKind,
    LayerKind,
    Mlp,
    Moe,
    Norm,
    PatchEmbedKind,
    ProjectorKind,
    TailKind,
)
from ppb_core.model.switches import LayerType

INDEX_BYTES = 8  # int64 token ids, labels and top-k indices
MASK_BYTES = 1  # dropout masks: one byte per element
STATS_BYTES = 4  # fp32 softmax statistics and loss softmax


@dataclass(frozen=True)
class ActivationTerm:
    """One tensor kept for the backward: *elements* of *element_bytes* each."""

    op: str
    switch: str | None
    elements: float
    element_bytes: float  # whole for the training dtypes; FP8 caches add their scales' share
    gradient: bool = True  # masks, indices and statistics carry no gradient of their own

    @property
    def bytes(self) -> float:
        return self.elements * self.element_bytes


def attention_terms(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[ActivationTerm]:
    """Norm, projections, the attention core (flash or not) and what the output projection keeps."""
    att, h, bc = kind.attention, kind.hidden_size, setup.dtype_bytes
    tokens, whole = setup.tokens, setup.whole_tokens
    heads = per_rank(att.num_heads, setup.tp)
    terms = [
        ActivationTerm(f"{prefix}attention.norm_input", None, whole * h, bc),
        ActivationTerm(f"{prefix}attention.norm_output", "normOp", whole * h, bc),
    ]
    if att.is_mla:
        d_qk, d_v = att.q_head_dim, att.value_head_dim
        # the latents are the norms' inputs; without the norms (Megatron without --qk-layernorm) the
        # up-projections' inputs, kept either way
        if att.q_lora_rank:
            terms.append(ActivationTerm(f"{prefix}attention.q_latent", None, whole * att.q_lora_rank, bc))
            if att.latent_norms:
                terms.append(ActivationTerm(f"{prefix}attention.q_latent_norm", "attUp", whole * att.q_lora_rank, bc))
        terms.append(
            ActivationTerm(f"{prefix}attention.kv_latent", None, whole * (att.kv_lora_rank + att.qk_rope_head_dim), bc)
        )
        if att.latent_norms:
            terms.append(ActivationTerm(f"{prefix}attention.kv_latent_norm", "attUp", whole * att.kv_lora_rank, bc))
        terms += [
            ActivationTerm(f"{prefix}attention.query", "attUp", tokens * heads * d_qk, bc),
            ActivationTerm(f"{prefix}attention.key", "attUp", tokens * heads * d_qk, bc),
            ActivationTerm(f"{prefix}attention.value", "attUp", tokens * heads * d_v, bc),
        ]
    else:
        d_qk = d_v = att.head_dim
        kv = kv_heads_per_rank(att.num_kv_heads, setup.tp)
        if att.qk_norm:
            terms.append(ActivationTerm(f"{prefix}attention.qk_norm_input", "normOp", tokens * (heads + kv) * d_qk, bc))
        if not setup.flash_attention:
            core_kv = heads  # the batched matmuls run on key/value heads expanded to every query head
        elif setup.cp > 1 and setup.cp_variant == "ulysses":
            core_kv = max(kv, setup.cp)  # the all-to-all hands a rank kv/cp heads of the whole sequence, at least 1
        else:
            core_kv = kv
        terms += [
            ActivationTerm(f"{prefix}attention.query", "attBMM", tokens * heads * d_qk, bc),
            ActivationTerm(f"{prefix}attention.key", "attBMM", tokens * core_kv * d_qk, bc),
            ActivationTerm(f"{prefix}attention.value", "attBMM", tokens * core_kv * d_v, bc),
        ]
    if setup.flash_attention:
        terms.append(ActivationTerm(f"{prefix}attention.softmax_lse", "softmax", tokens * heads, STATS_BYTES, False))
    else:
        # Local queries against every key of the sequence: (s/cp)·s per head (ring), or s·s per
        # head over heads/cp (Ulysses); the same count either way.
        scores = tokens * heads * setup.seq_length
        terms.append(ActivationTerm(f"{prefix}attention.softmax_output", "softmax", scores, bc))
        if kind.attention_dropout > 0:
            terms += [
                ActivationTerm(f"{prefix}attention.dropout_mask", "dropout", scores, MASK_BYTES, False),
                ActivationTerm(f"{prefix}attention.dropout_output", "headCast", scores, bc),
            ]
    terms.append(ActivationTerm(f"{prefix}attention.core_output", None, tokens * heads * d_v, bc))
    if kind.hidden_dropout > 0:
        terms.append(
            ActivationTerm(f"{prefix}attention.dropout_mask_after_projection", None, whole * h, MASK_BYTES, False)
        )
    return terms


def _ffn_terms(name: str, rows: float, width: int, gated: bool, bc: int) -> list[ActivationTerm]:
    """A feed-forward's first projection output and its activation's output over *rows* tokens."""
    if gated:  # SwiGLU keeps its input (gate and up) and its output
        return [
            ActivationTerm(f"{name}.gate_up_output", None, rows * 2 * width, bc),
            ActivationTerm(f"{name}.activation_output", "ffAct", rows * width, bc),
        ]
    return [
        ActivationTerm(f"{name}.fc1_output", None, rows * width, bc),
        ActivationTerm(f"{name}.activation_output", "ffAct", rows * width, bc),
    ]


def mlp_terms(kind: BodyKind, mlp: Mlp, setup: MemorySetup, prefix: str = "") -> list[ActivationTerm]:
    h, bc = kind.hidden_size, setup.dtype_bytes
    terms = [
        ActivationTerm(f"{prefix}mlp.norm_input", None, setup.whole_tokens * h, bc),
        ActivationTerm(f"{prefix}mlp.norm_output", "normOp", setup.whole_tokens * h, bc),
        *_ffn_terms(f"{prefix}mlp", setup.tokens, per_rank(mlp.intermediate_size, setup.tp), mlp.gated, bc),
    ]
    if kind.hidden_dropout > 0:
        terms.append(ActivationTerm(f"{prefix}mlp.dropout_mask", None, setup.whole_tokens * h, MASK_BYTES, False))
    return terms


def routed_rows(moe: Moe, setup: MemorySetup) -> float:
    """Token copies one device's experts process: s·b·k·etp/(cp·t), times the capacity factor or imbalance.

    The dp·s·b tokens of a step, k copies each, spread over the dp·cp·tp/(ep·etp) expert groups
    and the ep ranks of each; the etp ranks of an expert see the same rows. Capacity mode pads
    every expert to its capacity; dropless routing gives the busiest rank its imbalance.
    """
    return setup.tokens * moe.experts_per_token * setup.etp / setup.tp * setup.routing_factor


def stashed_rows(moe: Moe, setup: MemorySetup) -> float:
    """The rows the fused grouped MLP's saved tensors take a layer in flight: `routed_rows`, or under Megatron's
    paged stash its device buffer's share. megatron/core/transformer/moe/paged_stash.py (d98e8a64) copies the
    saved tensors' routed rows into pages after the forward (`paged_stash_copy_kernel`) and frees the originals;
    `allocate_stash_buffers` sizes the pages once, at `moe_paged_stash_buffer_size_factor_cuda` (positive) times
    the most balanced rows in flight over the schedule (`max_avg_tokens_across_vp_stages`, each layer's
    `avg_num_tokens` its capacity buffer's rows over the rank capacity: `TEGroupedMLP._fused_forward`), whatever
    the routing: at the peak, where the most layers are in flight, the factor times a layer's balanced rows each."""
    if not setup.paged_stash_factor:
        return routed_rows(moe, setup)
    return setup.tokens * moe.experts_per_token * setup.etp / setup.tp * setup.paged_stash_factor


def moe_terms(kind: BodyKind, moe: Moe, setup: MemorySetup, prefix: str = "") -> list[ActivationTerm]:
    """Router, dispatched tokens, expert activations, combine and shared experts.

    Of the tokens the all-to-alls bring in, the share that stays on the device (1/ep) is an
    activation here; the share that crossed the network is an EP buffer, and the rows the
    expert-tensor-parallel all-gather adds ((etp − 1)/etp of them) a tp buffer under `gather`
    (`buffers.py`): the parts add up to the same bytes whatever ep and etp are.
    """
    h, bc, whole = kind.hidden_size, setup.dtype_bytes, setup.whole_tokens
    k, local = moe.experts_per_token, 1 / (setup.ep * setup.etp)
    rows = stashed_rows(moe, setup)  # the experts' saved tensors (the stash's under --moe-paged-stash)
    terms = [
        ActivationTerm(f"{prefix}moe.norm_input", None, whole * h, bc),
        ActivationTerm(f"{prefix}moe.norm_output", "normOp", whole * h, bc),
        ActivationTerm(f"{prefix}moe.router_scores", None, whole * moe.num_experts, bc),
        ActivationTerm(f"{prefix}moe.topk_probabilities", None, whole * k, bc),
        ActivationTerm(f"{prefix}moe.topk_indices", None, whole * k, INDEX_BYTES, False),
        ActivationTerm(f"{prefix}moe.dispatched_tokens", None, rows * h * local, bc),
        *_ffn_terms(f"{prefix}moe.expert", rows, per_rank(moe.expert_intermediate_size, setup.etp), moe.gated, bc),
        ActivationTerm(f"{prefix}moe.combined_tokens", None, whole * k * h / setup.ep, bc),
    ]
    if moe.shared_experts:
        width = moe.shared_experts * per_rank(moe.shared_intermediate_size, setup.tp)
        terms += _ffn_terms(f"{prefix}moe.shared", setup.tokens, width, moe.gated, bc)
        if moe.shared_expert_gate:
            terms += [
                ActivationTerm(f"{prefix}moe.shared_gate", None, whole, bc),
                ActivationTerm(f"{prefix}moe.shared_output", None, whole * h, bc),
            ]
    if kind.hidden_dropout > 0:
        terms.append(ActivationTerm(f"{prefix}moe.dropout_mask", None, whole * h, MASK_BYTES, False))
    return terms


def body_terms(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[ActivationTerm]:
    """Every tensor a body layer keeps when it recomputes nothing."""
    terms = attention_terms(kind, setup, prefix)
    if isinstance(kind.mlp, Moe):
        return terms + moe_terms(kind, kind.mlp, setup, prefix)
    return terms + mlp_terms(kind, kind.mlp, setup, prefix)


# What a body layer keeps, given its kind, the setup and a name prefix (`body_terms`'s signature).
BodyTerms = Callable[[BodyKind, MemorySetup, str], Sequence[ActivationTerm]]


def full_recompute_terms(kind: BodyKind, setup: MemorySetup) -> list[ActivationTerm]:
    """A fully recomputed layer keeps its input, sequence-sharded under SP as Megatron-LM stores it."""
    return [ActivationTerm("layer.input", None, setup.whole_tokens * kind.hidden_size, setup.dtype_bytes)]


def head_terms(kind: HeadKind, setup: MemorySetup) -> list[ActivationTerm]:
    """The embedding keeps the token ids for its backward; its output is the first layer's input."""
    terms = [ActivationTerm("embedding.token_ids", None, setup.tokens, INDEX_BYTES, False)]
    if kind.learned_positions:
        terms.append(ActivationTerm("embedding.position_ids", None, setup.tokens, INDEX_BYTES, False))
    if kind.hidden_dropout > 0:
        terms.append(
            ActivationTerm("embedding.dropout_mask", None, setup.whole_tokens * kind.hidden_size, MASK_BYTES, False)
        )
    return terms


def _loss_terms(prefix: str, kind: TailKind, setup: MemorySetup, with_norm: bool = True) -> list[ActivationTerm]:
    """Final norm, output projection and the vocabulary-parallel cross-entropy.

    The loss upcasts the logits and keeps their softmax in fp32 (Megatron-LM's
    vocab_parallel_cross_entropy); the 16-bit logits are not kept. Without *with_norm* (an MTP head
    on a standalone MTP's loss chunk) the output layer keeps its input as it came.
    """
    h, bc, whole = kind.hidden_size, setup.dtype_bytes, setup.whole_tokens
    return [
        *([ActivationTerm(f"{prefix}.norm_input", None, whole * h, bc)] if with_norm else []),
        ActivationTerm(f"{prefix}.norm_output", None, whole * h, bc),
        ActivationTerm(
            f"{prefix}.logits_softmax", None, setup.tokens * per_rank(kind.vocab_size, setup.tp), STATS_BYTES
        ),
        ActivationTerm(f"{prefix}.labels", None, setup.tokens, INDEX_BYTES, False),
    ]


def tail_terms(kind: TailKind, setup: MemorySetup, body: BodyTerms | None = None) -> list[ActivationTerm]:
    """Final norm and loss, then each multi-token-prediction module (DeepSeek-V3).

    An MTP module embeds the next tokens (its norm keeps the embedding), normalises them and the
    main model's hidden state (kept already as the final norm's input), projects the
    concatenation (2h kept), runs one transformer layer and the shared head and loss. *body*
    gives what that transformer layer keeps (default: `body_terms`; a framework passes its own
    rules, `FrameworkRules.tail_terms`).

    A standalone MTP's parts (`TailKind.part`): the final norm keeps its input beside the last decoder
    layer; the MTP chunk each module's terms up to its final norm's input, and the hidden-state norm's
    input; the loss chunk each head's output-layer input, softmax and labels (what a chunk of no
    decoder layer received besides: `MegatronRules.pipeline_buffer_bytes`).
    """
    body = body if body is not None else body_terms
    h, bc, whole = kind.hidden_size, setup.dtype_bytes, setup.whole_tokens
    if kind.part == NORM_PART:
        return [ActivationTerm("output.norm_input", None, whole * h, bc)]
    terms = _loss_terms("output", kind, setup, with_norm=kind.has_final_norm) if kind.has_output else []
    if kind.mtp_body is None:
        return terms
    for index in range(kind.mtp_layers):
        name = f"mtp{index}"
        if kind.part == OUTPUT_PART:
            terms += _loss_terms(f"{name}.output", kind, setup, with_norm=False)
            continue
        terms += [
            ActivationTerm(f"{name}.token_ids", None, setup.tokens, INDEX_BYTES, False),
            ActivationTerm(f"{name}.embedding_norm_input", None, whole * h, bc),
            *([ActivationTerm(f"{name}.hidden_norm_input", None, whole * h, bc)] if kind.part == MTP_PART else []),
            ActivationTerm(f"{name}.projection_input", None, whole * 2 * h, bc),
            *body(kind.mtp_body, setup, f"{name}."),
        ]
        if kind.part == MTP_PART:
            terms.append(ActivationTerm(f"{name}.output.norm_input", None, whole * h, bc))
        else:
            terms += _loss_terms(f"{name}.output", kind, setup)
    return terms


def kept(terms: Iterable[ActivationTerm], switches: Mapping[str, int] | None) -> tuple[ActivationTerm, ...]:
    """The terms a layer keeps under *switches* (None keeps every term)."""
    if switches is None:
        return tuple(terms)
    return tuple(t for t in terms if t.switch is None or switches.get(t.switch, 1))


class ActivationFormulas:
    """Prices a layer kind's activations with the formulas above.

    `terms` lists what the layer keeps recomputing nothing, `full_terms` what a fully
    recomputed layer keeps. A census replaces this object for its model (same methods).
    """

    def terms(self, kind: LayerKind, setup: MemorySetup) -> tuple[ActivationTerm, ...]:
        if isinstance(kind, EncoderBodyKind):
            return tuple(encoder_terms(kind, encoder_setup(kind, setup)))
        if isinstance(kind, BodyKind):
            return tuple(body_terms(kind, setup))
        if isinstance(kind, HeadKind):
            return tuple(head_terms(kind, setup))
        if isinstance(kind, PatchEmbedKind):
            return tuple(patch_embed_terms(kind, setup))
        if isinstance(kind, ProjectorKind):
            return tuple(projector_terms(kind, setup))
        return tuple(tail_terms(kind, setup))

    def full_terms(self, kind: BodyKind, setup: MemorySetup) -> tuple[ActivationTerm, ...]:
        return tuple(full_recompute_terms(kind, encoder_setup(kind, setup)))

    def state_terms(
        self,
        kind: BodyKind | HeadKind | TailKind,
        setup: MemorySetup,
        state: LayerType,
        switches: Mapping[str, int] | None,
    ) -> tuple[ActivationTerm, ...]:
        """What the layer keeps in *state*; *switches* act only on SEL_REC_LAYER."""
        if state is LayerType.FULL_REC_LAYER:
            return self.full_terms(kind, setup)  # type: ignore[arg-type]
        all_terms = self.terms(kind, setup)
        return kept(all_terms, switches) if state is LayerType.SEL_REC_LAYER else all_terms


# ---------------------------------------------------------------------------------------------
# Vision towers: what transformers' modules keep (Megatron-Bridge and ms-swift run these modules
# as they are inside Megatron: megatron/bridge/models/qwen_vl/modeling_qwen25_vl.py builds
# `Qwen2_5_VisionTransformerPretrainedModel`), op by op as `ppb_core.census` measures them. The
# switches are the census attribution's (docs/census.md): what a norm module computes is
# `normOp`, rotary and the attention kernel `attBMM`, eager scores and softmax `softmax`, the
# probabilities' cast `headCast`, the MLP's activation and gating `ffAct`.

LAYER_NORM_STATS_BYTES = 8  # native_layer_norm's fp32 mean and 1/std per token (CUDA keeps them in fp32)


def encoder_setup(kind: LayerKind, setup: MemorySetup) -> MemorySetup:
    """The setup a vision encoder block runs at: its own tokens per sample, whole on every
    context-parallel rank (the tower is not split by the language model's sequence)."""
    if not isinstance(kind, EncoderBodyKind):
        return setup
    return replace(setup, seq_length=kind.tokens, cp=1, cp_variant="ring", cp_a2a=1)


def _norm_terms(name: str, norm: Norm, whole: float, h: int, bc: int, input_counted: bool) -> list[ActivationTerm]:
    """A vision norm module: LayerNorm keeps its input, its statistics and its output (read by the next
    projection); HF's RMSNorm keeps an fp32 copy of its input instead of the input (`hidden.to(float32)`),
    the normalised value cast back, 1/rms and its output. *input_counted*: the input is counted already
    (the layer's input). Where it is not, it is kept whatever normOp says (a recomputed norm needs it),
    and the fp32 copy's excess over it goes with normOp."""
    terms = []
    if norm.kind == "layernorm":
        if not input_counted:
            terms.append(ActivationTerm(f"{name}.input", None, whole * h, bc))
        terms.append(ActivationTerm(f"{name}.statistics", "normOp", whole, LAYER_NORM_STATS_BYTES, False))
    else:
        upcast = 4 * h if bc < 4 else 0  # at fp32 the cast is the input itself
        if input_counted:
            terms.append(ActivationTerm(f"{name}.fp32_input", "normOp", whole * upcast, 1))
        else:
            terms += [
                ActivationTerm(f"{name}.input", None, whole * h, bc),
                ActivationTerm(f"{name}.fp32_input_beyond_input", "normOp", whole * max(0, upcast - bc * h), 1),
            ]
        terms += [
            ActivationTerm(f"{name}.normalized", "normOp", whole * h, bc),
            ActivationTerm(f"{name}.inverse_rms", "normOp", whole, STATS_BYTES, False),
        ]
    terms.append(ActivationTerm(f"{name}.output", "normOp", whole * h, bc))
    return terms


def _vision_mlp_terms(name: str, mlp: Mlp, rows: float, width: int, bc: int) -> list[ActivationTerm]:
    """Gated (Qwen2.5-VL): gate, up, SiLU's output and the product. quick_gelu (x·sigmoid(1.702x), unfused):
    fc1's output, the sigmoid and the product. GELU: fc1's output and GELU's."""
    if mlp.gated:
        return [
            ActivationTerm(f"{name}.gate_output", None, rows * width, bc),
            ActivationTerm(f"{name}.up_output", None, rows * width, bc),
            ActivationTerm(f"{name}.activation_output", "ffAct", rows * width, bc),
            ActivationTerm(f"{name}.product", "ffAct", rows * width, bc),
        ]
    terms = [ActivationTerm(f"{name}.fc1_output", None, rows * width, bc)]
    if mlp.activation == "quick_gelu":
        terms.append(ActivationTerm(f"{name}.sigmoid_output", "ffAct", rows * width, bc))
    terms.append(ActivationTerm(f"{name}.activation_output", "ffAct", rows * width, bc))
    return terms


def encoder_terms(kind: EncoderBodyKind, setup: MemorySetup) -> list[ActivationTerm]:
    """Every tensor a vision encoder block keeps when it recomputes nothing, at the block's own setup.

    Per token: the input; the first norm; the projections' outputs (a fused qkv's whole, which the
    value, a view of it, pins); rotated queries and keys; the attention's output and log-sum-exp
    (flash) or the fp32 probabilities and their cast (eager, over each token's keys in its image or
    window); the concatenation of the images' outputs (Qwen) or eager's transposed copy; the
    residual sum and the second norm; the MLP. Heads and the MLP's width split over TP; the rest
    over SP.
    """
    att, h, bc = kind.attention, kind.hidden_size, setup.dtype_bytes
    tokens, whole = setup.tokens, setup.whole_tokens
    heads = per_rank(att.num_heads, setup.tp)
    width = heads * att.head_dim
    keys = kind.pairs / kind.tokens if kind.tokens else 0.0  # keys per query, averaged over the blocks
    terms = [ActivationTerm("attention.input", None, whole * h, bc)]
    terms += _norm_terms("attention.norm", kind.norm, whole, h, bc, input_counted=True)
    if kind.fused_qkv:
        terms.append(ActivationTerm("attention.qkv", None, tokens * 3 * width, bc))
    else:
        terms += [ActivationTerm(f"attention.{n}", None, tokens * width, bc) for n in ("query", "key", "value")]
    if kind.attention.rope:
        terms.append(ActivationTerm("attention.rotated_query_key", "attBMM", tokens * 2 * width, bc))
    if setup.flash_attention:
        terms += [
            ActivationTerm("attention.core_output", "attBMM", tokens * width, bc),
            ActivationTerm("attention.softmax_lse", "attBMM", tokens * heads, STATS_BYTES, False),
        ]
        if kind.chunked:
            terms.append(ActivationTerm("attention.concatenated_output", None, tokens * width, bc))
    else:
        scores = tokens * heads * keys
        terms.append(ActivationTerm("attention.softmax_output", "softmax", scores, STATS_BYTES))
        if bc < STATS_BYTES:
            terms.append(ActivationTerm("attention.probabilities", "headCast", scores, bc))
        terms.append(ActivationTerm("attention.core_output", None, tokens * width, bc))
    terms += _norm_terms("mlp.norm", kind.norm, whole, h, bc, input_counted=False)
    assert isinstance(kind.mlp, Mlp)
    terms += _vision_mlp_terms("mlp", kind.mlp, tokens, per_rank(kind.mlp.intermediate_size, setup.tp), bc)
    return terms


def patch_embed_terms(kind: PatchEmbedKind, setup: MemorySetup) -> list[ActivationTerm]:
    """The convolution keeps its input (the pixels in the compute dtype); CLIP's pre-norm its input and
    statistics (its output is the first block's input). Replicated over TP ranks."""
    b, bc, h = setup.micro_batch_size, setup.dtype_bytes, kind.hidden_size
    terms = [ActivationTerm("patch_embed.pixels", None, b * kind.patches * kind.patch_inputs, bc, False)]
    if kind.pre_norm is not None:
        terms += [
            ActivationTerm("patch_embed.pre_norm_input", None, b * kind.tokens * h, bc),
            ActivationTerm("patch_embed.pre_norm_statistics", None, b * kind.tokens, LAYER_NORM_STATS_BYTES, False),
        ]
    return terms


def projector_terms(kind: ProjectorKind, setup: MemorySetup) -> list[ActivationTerm]:
    """After the last block: SigLIP's post-norm and pooling head where they are used, then the projector.

    Qwen's merger normalises each patch (`ln_q`), then runs Linear – GELU – Linear over 2×2 patches:
    it keeps the norm's tensors, the first linear's output and GELU's. LLaVA's projector reads the
    feature layers (one is a block's output kept already, unless it is the last block's; several
    are concatenated) and keeps the same two. Under TP the projector's width splits as an MLP's.
    """
    b, bc, h = setup.micro_batch_size, setup.dtype_bytes, kind.hidden_size
    tokens_in, tokens_out = b * kind.tokens_in, b * kind.tokens_out
    terms: list[ActivationTerm] = []
    if kind.post_norm is not None and kind.post_norm_tokens:
        rows = b * kind.post_norm_tokens
        terms += _norm_terms("post_norm", kind.post_norm, rows, h, bc, input_counted=False)
        if kind.pooling_head:  # the head's keys and values over every token
            terms.append(ActivationTerm("pooling_head.key_value", None, rows * 2 * h, bc))
    if kind.merge_norm is not None:
        terms += _norm_terms("merger.norm", kind.merge_norm, tokens_in, h, bc, input_counted=False)
    elif kind.features_kept > h:  # several feature layers, concatenated (the tokens selected)
        terms.append(ActivationTerm("projector.features", None, tokens_out * kind.features_kept, bc))
    elif kind.features_kept:  # the last block's output, which no block keeps (every token, sliced)
        terms.append(ActivationTerm("projector.features", None, tokens_in * kind.features_kept, bc))
    if kind.projector_inputs:
        width = per_rank(kind.projector_hidden, setup.tp)
        terms += [
            ActivationTerm("projector.fc1_output", None, tokens_out * width, bc),
            ActivationTerm("projector.activation_output", None, tokens_out * width, bc),
        ]
    return terms
