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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, HeadKind, Mlp, Moe, TailKind
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
    element_bytes: int
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
        if att.q_lora_rank:
            terms += [
                ActivationTerm(f"{prefix}attention.q_latent", None, whole * att.q_lora_rank, bc),
                ActivationTerm(f"{prefix}attention.q_latent_norm", "attUp", whole * att.q_lora_rank, bc),
            ]
        terms += [
            ActivationTerm(f"{prefix}attention.kv_latent", None, whole * (att.kv_lora_rank + att.qk_rope_head_dim), bc),
            ActivationTerm(f"{prefix}attention.kv_latent_norm", "attUp", whole * att.kv_lora_rank, bc),
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


def moe_terms(kind: BodyKind, moe: Moe, setup: MemorySetup, prefix: str = "") -> list[ActivationTerm]:
    """Router, dispatched tokens, expert activations, combine and shared experts.

    Of the tokens the all-to-alls bring in, the share that stays on the device (1/ep) is an
    activation here; the share that crossed the network is an EP buffer, and the rows the
    expert-tensor-parallel all-gather adds ((etp − 1)/etp of them) a tp buffer under `gather`
    (`buffers.py`): the parts add up to the same bytes whatever ep and etp are.
    """
    h, bc, whole = kind.hidden_size, setup.dtype_bytes, setup.whole_tokens
    k, local = moe.experts_per_token, 1 / (setup.ep * setup.etp)
    rows = routed_rows(moe, setup)
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


def _loss_terms(prefix: str, kind: TailKind, setup: MemorySetup) -> list[ActivationTerm]:
    """Final norm, output projection and the vocabulary-parallel cross-entropy.

    The loss upcasts the logits and keeps their softmax in fp32 (Megatron-LM's
    vocab_parallel_cross_entropy); the 16-bit logits are not kept.
    """
    h, bc, whole = kind.hidden_size, setup.dtype_bytes, setup.whole_tokens
    return [
        ActivationTerm(f"{prefix}.norm_input", None, whole * h, bc),
        ActivationTerm(f"{prefix}.norm_output", None, whole * h, bc),
        ActivationTerm(
            f"{prefix}.logits_softmax", None, setup.tokens * per_rank(kind.vocab_size, setup.tp), STATS_BYTES
        ),
        ActivationTerm(f"{prefix}.labels", None, setup.tokens, INDEX_BYTES, False),
    ]


def tail_terms(kind: TailKind, setup: MemorySetup) -> list[ActivationTerm]:
    """Final norm and loss, then each multi-token-prediction module (DeepSeek-V3).

    An MTP module embeds the next tokens (its norm keeps the embedding), normalises them and the
    main model's hidden state (kept already as the final norm's input), projects the
    concatenation (2h kept), runs one transformer layer and the shared head and loss.
    """
    h, bc, whole = kind.hidden_size, setup.dtype_bytes, setup.whole_tokens
    terms = _loss_terms("output", kind, setup)
    if kind.mtp_body is None:
        return terms
    for index in range(kind.mtp_layers):
        name = f"mtp{index}"
        terms += [
            ActivationTerm(f"{name}.token_ids", None, setup.tokens, INDEX_BYTES, False),
            ActivationTerm(f"{name}.embedding_norm_input", None, whole * h, bc),
            ActivationTerm(f"{name}.projection_input", None, whole * 2 * h, bc),
            *body_terms(kind.mtp_body, setup, prefix=f"{name}."),
            *_loss_terms(f"{name}.output", kind, setup),
        ]
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

    def terms(self, kind: BodyKind | HeadKind | TailKind, setup: MemorySetup) -> tuple[ActivationTerm, ...]:
        if isinstance(kind, BodyKind):
            return tuple(body_terms(kind, setup))
        if isinstance(kind, HeadKind):
            return tuple(head_terms(kind, setup))
        return tuple(tail_terms(kind, setup))

    def full_terms(self, kind: BodyKind, setup: MemorySetup) -> tuple[ActivationTerm, ...]:
        return tuple(full_recompute_terms(kind, setup))

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
