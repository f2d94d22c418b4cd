"""Parameter counts of each layer kind, whole and as one tensor-/expert-parallel rank holds them.

At tp = ep = etp = 1 the counts equal what HuggingFace `transformers` instantiates (the oracle
tests check this). Under TP, column-parallel weights and their biases split over the ranks,
row-parallel weights split and their biases are replicated, and norms, routers and MLA's
down-projections are replicated, as Megatron-LM lays them out. Grouped key/value heads fewer
than the TP ranks are replicated, one head per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import (
    MTP_PART,
    NORM_PART,
    OUTPUT_PART,
    Attention,
    BodyKind,
    HeadKind,
    Mlp,
    Moe,
    Norm,
    PatchEmbedKind,
    ProjectorKind,
    TailKind,
    vocab_rows,
)


@dataclass(frozen=True)
class LayerParams:
    """Elements one device holds of a layer before any data-parallel sharding."""

    non_expert: int = 0
    expert: int = 0  # routed experts: sharded over the expert-data-parallel group instead
    float8: int = 0  # of non_expert: the weights FSDP all-gathers in float8 (`float8_gathered_weights`)

    @property
    def total(self) -> int:
        return self.non_expert + self.expert

    def gathered_bytes(self, dtype_bytes: int) -> int:
        """Bytes of the whole unit as FSDP gathers it: float8 weights at a byte, the rest at *dtype_bytes*."""
        return (self.total - self.float8) * dtype_bytes + self.float8

    def __add__(self, other: LayerParams) -> LayerParams:
        return LayerParams(self.non_expert + other.non_expert, self.expert + other.expert, self.float8 + other.float8)


def norm_params(norm: Norm, features: int) -> int:
    return norm.params_per_feature * features


def attention_params(att: Attention, tp: int = 1) -> int:
    h = att.hidden_size
    heads = per_rank(att.num_heads, tp)
    if att.is_mla:
        count = 0
        q_width = heads * att.q_head_dim
        if att.q_lora_rank:
            # q_a_proj and its norm are replicated; q_b_proj is column-parallel.
            count += h * att.q_lora_rank + (att.q_lora_rank if att.qkv_bias else 0)
            count += att.q_lora_rank if att.latent_norms else 0
            count += att.q_lora_rank * q_width
        else:
            count += h * q_width
        # kv_a_proj_with_mqa (compressed kv + shared rope key) and its norm are replicated.
        count += h * (att.kv_lora_rank + att.qk_rope_head_dim) + (
            att.kv_lora_rank + att.qk_rope_head_dim if att.qkv_bias else 0
        )
        count += att.kv_lora_rank if att.latent_norms else 0
        count += att.kv_lora_rank * heads * (att.qk_nope_head_dim + att.v_head_dim)
        count += heads * att.v_head_dim * h + (h if att.out_bias else 0)
        return count
    kv_heads = kv_heads_per_rank(att.num_kv_heads, tp)
    d = att.head_dim
    q, kv = heads * d, kv_heads * d
    count = h * (q + 2 * kv) + ((q + 2 * kv) if att.qkv_bias else 0)
    count += q * h + (h if att.out_bias else 0)
    if att.qk_norm:
        count += 2 * d
    if att.sinks:  # one learnable logit per query head, split with the heads (Megatron's `softmax_offset`)
        count += heads
    return count


def mlp_params(mlp: Mlp, tp: int = 1) -> int:
    ff = per_rank(mlp.intermediate_size, tp)
    h = mlp.hidden_size
    count = mlp.matrices * h * ff
    if mlp.bias:
        count += (mlp.matrices - 1) * ff + h
    return count


def moe_params(moe: Moe, tp: int = 1, ep: int = 1, etp: int = 1) -> LayerParams:
    """The router (with GPT-OSS's logit bias), shared experts and routed experts. Routed experts' biases
    (GPT-OSS: `gate_up_proj_bias` of 2·ffn and `down_proj_bias` of h per expert) split as a dense MLP's:
    fc1's with its columns over ETP, fc2's whole on every rank (Megatron-Core's TEGroupedMLP)."""
    h = moe.hidden_size
    router = h * moe.num_experts + (h if moe.shared_expert_gate else 0) + (moe.num_experts if moe.router_bias else 0)
    shared = moe.shared_experts * moe.matrices * h * per_rank(moe.shared_intermediate_size, tp)
    ff = per_rank(moe.expert_intermediate_size, etp)
    routed = per_rank(moe.num_experts, ep) * (moe.matrices * h * ff + ((moe.matrices - 1) * ff + h if moe.bias else 0))
    return LayerParams(non_expert=router + shared, expert=routed)


def body_params(kind: BodyKind, tp: int = 1, ep: int = 1, etp: int = 1) -> LayerParams:
    base = attention_params(kind.attention, tp) + 2 * norm_params(kind.norm, kind.hidden_size)
    if isinstance(kind.mlp, Moe):
        return LayerParams(non_expert=base) + moe_params(kind.mlp, tp, ep, etp)
    return LayerParams(non_expert=base + mlp_params(kind.mlp, tp))


def float8_gathered_weights(kind: BodyKind, tp: int = 1) -> tuple[int, int]:
    """(elements, tensors) of a dense block's linear weights that FSDP2 gathers in float8 under
    torchtitan's Float8 with `enable_fsdp_float8_all_gather`: every `nn.Linear` of the block is a
    torchao Float8Linear (torchtitan v0.2.2 components/quantization/float8.py `Float8LinearConverter`),
    whose weight is a `WeightWithDynamicFloat8CastTensor`; its `fsdp_pre_all_gather` casts the shard
    to float8 and gathers the 1-byte data, the per-tensor scale passed as metadata (torchao
    float8/fsdp_utils.py, 36027d82d). Biases and norms stay in the compute dtype. Multi-latent
    attention and MoE blocks (grouped experts are not Float8Linear) are not counted: (0, 0)."""
    att, mlp = kind.attention, kind.mlp
    if att.is_mla or isinstance(mlp, Moe):
        return 0, 0
    h, d = att.hidden_size, att.head_dim
    q, kv = per_rank(att.num_heads, tp) * d, kv_heads_per_rank(att.num_kv_heads, tp) * d
    attention = h * (q + 2 * kv) + q * h  # wq, wk, wv, wo
    return attention + mlp.matrices * h * per_rank(mlp.intermediate_size, tp), 4 + mlp.matrices


def head_params(kind: HeadKind, tp: int = 1) -> LayerParams:
    table = vocab_rows(kind, tp) * kind.hidden_size
    return LayerParams(non_expert=table + kind.learned_positions * kind.hidden_size)


def mtp_module_params(kind: TailKind, tp: int = 1, ep: int = 1, etp: int = 1) -> LayerParams:
    """One multi-token-prediction module without the tables it shares: its norms, projection and layer.

    DeepSeek-V3: enorm and hnorm on the embedding and the hidden state, eh_proj (2h -> h),
    one transformer layer, and the shared head's own final norm.
    """
    assert kind.mtp_body is not None
    h = kind.hidden_size
    own = 3 * norm_params(kind.norm, h) + 2 * h * per_rank(h, tp)
    return LayerParams(non_expert=own) + body_params(kind.mtp_body, tp, ep, etp)


def tail_params(kind: TailKind, tp: int = 1, pp: int = 1, ep: int = 1, etp: int = 1) -> LayerParams:
    """Final norm, output head and MTP modules on the last stage.

    A tied output head is the embedding table: on a single stage the HEAD holds it; across
    stages the last one keeps its own copy. MTP modules embed tokens too, so across stages the
    last one also holds the embedding table when the head is untied.

    Megatron-Core's standalone MTP splits them (`TailKind.part`, `kinds.standalone_parts`; gpt_model.py
    `GPTModel.__init__`, commit d98e8a64): the final norm goes with the last decoder layer; the MTP
    chunk builds its own embedding (`pre_process or mtp_process`) beside the MTP modules, tied or not
    (another chunk than the first, whose table it cannot share); the loss chunk builds the output
    layer (`post_process`).
    """
    table = vocab_rows(kind, tp) * kind.hidden_size
    if kind.part == NORM_PART:
        return LayerParams(non_expert=norm_params(kind.norm, kind.hidden_size))
    if kind.part == OUTPUT_PART:
        return LayerParams(non_expert=table)
    if kind.part == MTP_PART:
        params = LayerParams(non_expert=table)
        for _ in range(kind.mtp_layers):
            params = params + mtp_module_params(kind, tp, ep, etp)
        return params
    count = norm_params(kind.norm, kind.hidden_size) if kind.has_final_norm else 0  # UNNORMED: with the decoder
    if not kind.tied or pp > 1:
        count += table
    params = LayerParams(non_expert=count)
    for _ in range(kind.mtp_layers):
        params = params + mtp_module_params(kind, tp, ep, etp)
    if kind.mtp_layers and pp > 1 and not kind.tied:
        params = params + LayerParams(non_expert=table)
    return params


def patch_embed_params(kind: PatchEmbedKind) -> LayerParams:
    """The patch embedding (a convolution, with its bias where there is one), the class token, the
    learned positions and CLIP's pre-norm; replicated over tensor-parallel ranks."""
    h = kind.hidden_size
    count = kind.patch_inputs * h + (h if kind.patch_bias else 0)
    count += (h if kind.class_token else 0) + kind.positions * h
    if kind.pre_norm is not None:
        count += norm_params(kind.pre_norm, h)
    return LayerParams(non_expert=count)


def projector_params(kind: ProjectorKind, tp: int = 1) -> LayerParams:
    """The post-norm, SigLIP's pooling head, and the projector's MLP (its first matrix column-parallel,
    its second row-parallel, as an MLP splits), LLaVA-NeXT's newline.

    SigLIP's head (`SiglipMultiheadAttentionPoolingHead`): a probe token, `nn.MultiheadAttention`
    (in_proj 3h×h with bias, out_proj h×h with bias), a LayerNorm and an fc1/fc2 MLP, replicated.
    """
    h = kind.hidden_size
    count = norm_params(kind.post_norm, h) if kind.post_norm is not None else 0
    if kind.pooling_head:
        count += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h
        count += 2 * h * kind.intermediate_size + kind.intermediate_size + h
    if kind.merge_norm is not None:
        count += norm_params(kind.merge_norm, h)
    if kind.projector_inputs:
        hidden = per_rank(kind.projector_hidden, tp)
        count += kind.projector_inputs * hidden + hidden * kind.out_hidden
        if kind.projector_bias:
            count += hidden + kind.out_hidden
    return LayerParams(non_expert=count + kind.newline)
