"""Transformer Engine's cached dummy weight gradients under Megatron's gradient accumulation fusion.

With gradient accumulation fusion (Megatron's default; `--no-gradient-accumulation-fusion` turns it off,
`timing.gradient_accumulation_fusion`) a linear's backward adds its weight gradient into the fp32
`main_grad` inside the GEMM and hands autograd a placeholder instead, so that Megatron's DDP hook runs on
the backward's own thread. Where the parameter carries `grad_added_to_main_grad` (Megatron's
`DistributedDataParallel.__init__` sets it on every trainable parameter, distributed/
distributed_data_parallel.py at d98e8a64; Megatron-FSDP's `megatron_fsdp.py` too), that placeholder is
Transformer Engine's `get_dummy_wgrad(shape, dtype)` (transformer_engine/pytorch/module/base.py at
d0067d0d, since ba5dc5dde, 2025-04-08): one `torch.empty` per (shape, dtype), kept in the module-level
`_dummy_wgrads` dict for the life of the process and handed out again to every later layer, micro-batch
and iteration of that shape. TE's own linears take it (module/linear.py, layernorm_linear.py,
grouped_linear.py `_GroupedLinear.backward`: each expert's weight, one shape) and so do Megatron's
`ColumnParallelLinear`/`RowParallelLinear` (tensor_parallel/layers.py
`LinearWithGradAccumulationAndAsyncCommunication.backward`, "get_dummy_wgrad function in TE enables reuse
of single dummy wgrad buffer", since e7c55de99e, 2025-08-01), which build the output layer. The hook then
drops `param.grad`; the cached tensor stays. So a device holds, from its first backward on and at every
moment after (the optimizer step included), the weight's bytes once per distinct per-rank weight shape of
the linears it runs: a decoder layer's QKV (or MLA's down- and up-projections), output projection and the
MLP's two (or the routed experts' two and the shared experts' two), an MTP module's projection and layer, and the
output layer. Not the embedding (an `nn.Embedding`-style lookup whose gradient autograd accumulates) nor
the router (`RouterGatingLinearFunction`, moe/moe_utils.py, returns its own gradient). Under torch's FSDP2
(`--use-torch-fsdp2`) the parameters carry no `grad_added_to_main_grad` and TE returns no placeholder.

Older releases (`framework_release`, ppb_core.config.releases): each kind of linear took the cache at its own
commit, and before it handed out a `torch.empty` per backward that the DDP hook frees (nothing held after):
TE's Linear and LayerNormLinear from ba5dc5dde (2025-04-08, TE v2.3); TE's GroupedLinear, the experts of
TEGroupedMLP, from d2945c6a5 (2025-10-27, TE v2.10); Megatron's own linears from e7c55de99e (2025-08-01,
core_v0.14.0), and only where TE has `get_dummy_wgrad` (layers.py imports it beside `transformer_engine`
in one `try`: without it HAVE_TE is False and the `torch.empty` branch runs).
"""

from __future__ import annotations

from collections.abc import Collection

from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, EncoderBodyKind, LayerKind, Moe, TailKind

Shape = tuple[int, int]  # (output features, input features) of one rank's weight


def _megatron_cached(setup: MemorySetup) -> bool:
    """Whether Megatron's own linears take the cache (e7c55de99e, with a TE that has it)."""
    return setup.release.holds("megatron_dummy_wgrad") and setup.release.holds("te_dummy_wgrad")


def _dense_cached(setup: MemorySetup) -> bool:
    """Whether a decoder layer's dense linears take the cache: TE's (ba5dc5dde) under
    --transformer-impl transformer_engine, Megatron's own under local (module docstring)."""
    if setup.transformer_impl == "transformer_engine":
        return setup.release.holds("te_dummy_wgrad")
    return _megatron_cached(setup)


def _experts_cached(setup: MemorySetup) -> bool:
    """Whether the routed experts' linears take the cache: TE's GroupedLinear (d2945c6a5) under
    --moe-grouped-gemm, TE's Linear per expert (SequentialMLP) without it, Megatron's own under local."""
    if setup.transformer_impl == "transformer_engine" and setup.moe_grouped_gemm:
        return setup.release.holds("te_grouped_dummy_wgrad")
    return _dense_cached(setup)


def _attention_shapes(kind: BodyKind, setup: MemorySetup) -> set[Shape]:
    """The per-rank weight shapes of a decoder layer's attention linears."""
    att, h = kind.attention, kind.hidden_size
    heads = per_rank(att.num_heads, setup.tp)
    if not att.is_mla:
        kv = kv_heads_per_rank(att.num_kv_heads, setup.tp)
        return {((heads + 2 * kv) * att.head_dim, h), (h, heads * att.head_dim)}
    # multi_latent_attention.py: the down-projections replicated, the up-projections column-parallel
    shapes: set[Shape] = {(att.kv_lora_rank + att.qk_rope_head_dim, h)}
    if att.q_lora_rank:
        shapes |= {(att.q_lora_rank, h), (heads * att.q_head_dim, att.q_lora_rank)}
    else:
        shapes.add((heads * att.q_head_dim, h))
    shapes.add((heads * (att.qk_nope_head_dim + att.v_head_dim), att.kv_lora_rank))
    shapes.add((h, heads * att.v_head_dim))
    return shapes


def _mlp_shapes(width: int, gated: bool, h: int) -> set[Shape]:
    """fc1 (both halves under a gated activation) and fc2 of an MLP *width* wide on this rank."""
    return {((2 if gated else 1) * width, h), (h, width)}


def body_shapes(kind: BodyKind, setup: MemorySetup) -> set[Shape]:
    """The per-rank weight shapes of a decoder layer's linears that take the cache (TE's
    `TELayerNormColumnParallelLinear`, `TERowParallelLinear`, `TEGroupedLinear`; Megatron-LM d98e8a64
    gpt_layer_specs.py), at the run's releases (module docstring)."""
    h, mlp = kind.hidden_size, kind.mlp
    dense = _dense_cached(setup)
    shapes = _attention_shapes(kind, setup) if dense else set()
    if isinstance(mlp, Moe):
        if per_rank(mlp.num_experts, setup.ep) and _experts_cached(setup):
            shapes |= _mlp_shapes(per_rank(mlp.expert_intermediate_size, setup.etp), mlp.gated, h)
        if mlp.shared_experts and dense:
            width = mlp.shared_experts * per_rank(mlp.shared_intermediate_size, setup.tp)
            shapes |= _mlp_shapes(width, mlp.gated, h)
    elif dense:
        shapes |= _mlp_shapes(per_rank(mlp.intermediate_size, setup.tp), mlp.gated, h)
    return shapes


def kind_shapes(kind: LayerKind, setup: MemorySetup) -> set[Shape]:
    """The per-rank weight shapes of the linears a layer kind runs (module docstring)."""
    if isinstance(kind, EncoderBodyKind):
        return set()
    if isinstance(kind, BodyKind):
        return body_shapes(kind, setup)
    if not isinstance(kind, TailKind):
        return set()
    shapes: set[Shape] = set()
    h = kind.hidden_size
    # gpt_model.py: `tensor_parallel.ColumnParallelLinear`, the tied weight too (Megatron's own linear)
    if kind.has_output and _megatron_cached(setup):
        shapes.add((per_rank(kind.vocab_size, setup.tp), h))
    if kind.has_mtp_modules and kind.mtp_body is not None:  # multi_token_prediction.py: eh_proj, 2h → h
        if _dense_cached(setup):  # a TE linear under the TE spec (`TEColumnParallelLinear`)
            shapes.add((per_rank(h, setup.tp), 2 * h))
        shapes |= body_shapes(kind.mtp_body, setup)
    return shapes


def dummy_wgrad_bytes(setup: MemorySetup, kinds: Collection[LayerKind]) -> float:
    """What TE's `_dummy_wgrads` cache holds on a device running layers of *kinds*: each distinct weight
    shape once, in the parameters' dtype (0 without gradient accumulation fusion)."""
    if not setup.wgrad_fusion_dummies:
        return 0.0
    shapes: set[Shape] = set()
    for kind in kinds:
        shapes |= kind_shapes(kind, setup)
    return float(sum(rows * cols for rows, cols in shapes) * setup.dtype_bytes)
