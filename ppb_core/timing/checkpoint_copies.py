"""The copies Megatron-Core's `CheckpointWithoutOutput` makes when its recompute restores a discarded output.

Selective recompute's `layernorm`, `mla_up_proj` and `moe_act` modules run their function under
`tensor_parallel.CheckpointWithoutOutput` (megatron/core/tensor_parallel/random.py): the forward frees each
output's storage (`discard_output_and_register_recompute`: `untyped_storage().resize_(0)`) and the recompute,
a hook on the consumer's gradient, runs the function again. From its introduction (3b141a2471, 2025-04-05,
core_v0.13.0) until f54403492e (2026-03-11, core_v0.17.0) `_recompute` then resized each freed storage back and
copied the recomputed output into it (`output.untyped_storage().resize_(output_size)`;
`output.untyped_storage().copy_(recomputation_output.untyped_storage())`, read at c08d89bea0): one device copy
an output, its bytes read and written. From f54403492e on the outputs share the recomputed storage
("Zero-copy storage sharing", `_get_share_storage`, d98e8a64): no copy (`releases.CHANGES
["checkpoint_without_output_shares_storage"]`).

The outputs, as the modules return them (c08d89bea0 and d98e8a64):

- `layernorm`: the norm modules of their own (transformer_layer.py: `recompute_input_layernorm` and
  `recompute_pre_mlp_layernorm` unless the module is an `IdentityOp`, which a norm fused into the TE linear
  after it is): MLA's input norm (before the two down-projections, a `TENorm`) and an MoE layer's pre-MLP norm,
  each its local rows by the hidden size in the compute dtype;
- `mla_up_proj`: multi_latent_attention.py `qkv_up_proj_and_rope_apply` returns the query, key and value, each
  made `.contiguous()`: the gathered rows by the rank's heads by (2 · the query/key head size + the value's);
- `moe_act`: experts.py `TEGroupedMLP` checkpoints the activation (with the probabilities' product): the routed
  rows by the expert's FFN width on this rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ppb_core.model.geometry import per_rank
from ppb_core.model.kinds import BodyKind, Moe
from ppb_core.timing.flops import Op, OpGeometry

# The modules that run under `CheckpointWithoutOutput` (transformer_config.py: the rest, "core_attn", "mlp", "moe"
# and "shared_experts", use normal checkpointing, which keeps no output to restore).
WITHOUT_OUTPUT_MODULES = frozenset({"layernorm", "mla_up_proj", "moe_act"})


def storage_copies(
    kind: BodyKind,
    rerun: Iterable[str],
    ops: Mapping[str, Op],
    geo: OpGeometry,
    modules: Iterable[str],
) -> tuple[float, int]:
    """(bytes read and written, copies) of one layer's restored outputs in one backward, for the ops the layer
    reruns (*rerun*, unprefixed names) under Megatron's selective *modules*; (0, 0) where none applies."""
    chosen = set(modules) & WITHOUT_OUTPUT_MODULES
    again = set(rerun)
    bc = geo.dtype_bytes
    outputs: list[float] = []
    if "layernorm" in chosen:
        rows = geo.whole_tokens * kind.hidden_size * bc
        if kind.attention.is_mla and "norm1" in again:  # MLA's input norm is a TENorm of its own
            outputs.append(rows)
        if isinstance(kind.mlp, Moe) and "norm2" in again:  # an MoE layer's pre-MLP norm likewise
            outputs.append(rows)
    att = kind.attention
    if "mla_up_proj" in chosen and att.is_mla and "rope" in again:
        heads = per_rank(att.num_heads, geo.tp)
        per_head = (att.q_head_dim, att.q_head_dim, att.value_head_dim)  # query, key, value
        outputs += [geo.tokens * heads * width * bc for width in per_head]
    experts = ops.get("experts_in")
    if "moe_act" in chosen and "experts_act" in again and experts is not None and experts.gemm is not None:
        m, _, n, groups, _ = experts.gemm
        width = n / 2 if isinstance(kind.mlp, Moe) and kind.mlp.gated else n
        outputs.append(m * groups * width * bc)
    return 2.0 * sum(outputs), len(outputs)
