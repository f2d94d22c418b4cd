"""Megatron-Core's Muon (`--optimizer muon`, `training.optimizer: muon`), as Megatron-LM d98e8a64 builds it.

`_get_megatron_emerging_optimizer` (megatron/core/optimizer/__init__.py) routes each parameter by
`emerging_optimizers.py` `_default_param_overrides_factory`: a parameter that is an embedding or output
parameter (`is_embedding_or_output_parameter`) or not a matrix (`_is_nonlinear_or_embedding`:
`len(param.shape) != 2`: norms, biases) runs `--muon-scalar-optimizer` (Adam by default), every other
one Muon (`TensorParallelMuon`, an `OrthogonalizedOptimizer` of the emerging-optimizers package, which
keeps one momentum buffer a parameter). Both run under `Float16OptimizerWithFloat16Params` in bf16
(the fp32 master copy). So a matrix element holds its master copy and one fp32 moment, 8 bytes, where
Adam holds 12: 4 bytes less (`MUON_SAVING_BYTES`). The matrices: a decoder layer's linears (the router
and the shared-expert gate too: 2-D weights), every routed expert's (Transformer Engine's grouped
linear keeps one 2-D weight an expert), an MTP module's projection and layer; not the embedding, the
output layer, norms or biases. With `--use-distributed-optimizer` Megatron-LM runs the layer-wise
distributed optimizer (arguments.py `validate_args`: `use_layer_wise_distributed_optimizer`), which
gives each data-parallel rank whole Muon parameters (`layer_wise_optimizer.py`) and, by default
(`--use-layer-wise-param-layout`), the rest to a byte-sharded `DistributedOptimizer`: priced as states
sharded over the data-parallel ranks, 1/dp of each (the rank's share of whole parameters is not
modelled); the legacy `--no-use-layer-wise-param-layout` path deals whole parameters (`layer_wise.py`).
"""

from __future__ import annotations

from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, LayerKind, Moe, TailKind
from ppb_core.model.params import LayerParams, body_params, norm_params

MUON_SAVING_BYTES = 4  # a matrix element's fp32 moment Muon does not keep (Adam's second)


def _vector_elements(kind: BodyKind, setup: MemorySetup) -> int:
    """A decoder layer's parameters that are not matrices, on one TP rank: its two norms (the norm
    fused into a TE linear is that linear's `layer_norm_weight`, one vector still), the QK or MLA latent
    norms and the biases (model/params.py's counts)."""
    att, h = kind.attention, kind.hidden_size
    count = 2 * norm_params(kind.norm, h)
    if att.is_mla:
        count += att.q_lora_rank + att.kv_lora_rank if att.latent_norms else 0  # the latent norms
        if att.qkv_bias:
            count += att.q_lora_rank + att.kv_lora_rank + att.qk_rope_head_dim
    else:
        heads, kv = per_rank(att.num_heads, setup.tp), kv_heads_per_rank(att.num_kv_heads, setup.tp)
        if att.qkv_bias:
            count += (heads + 2 * kv) * att.head_dim
        if att.qk_norm:
            count += 2 * att.head_dim
    if att.out_bias:
        count += h
    mlp = kind.mlp
    if not isinstance(mlp, Moe) and mlp.bias:
        count += (mlp.matrices - 1) * per_rank(mlp.intermediate_size, setup.tp) + h
    return count


def _body_matrices(kind: BodyKind, setup: MemorySetup) -> LayerParams:
    whole = body_params(kind, setup.tp, setup.ep, setup.etp)
    return LayerParams(non_expert=whole.non_expert - _vector_elements(kind, setup), expert=whole.expert)


def matrix_params(kind: LayerKind, setup: MemorySetup) -> LayerParams:
    """The elements of a layer kind Muon steps, on one TP/EP rank before data-parallel sharding (module
    docstring): a decoder layer's matrices, each MTP module's projection (2h → h) and layer; none of a
    HEAD's, a TAIL's tables and norms, or a vision tower's (priced as Adam's)."""
    if isinstance(kind, BodyKind):
        return _body_matrices(kind, setup)
    if isinstance(kind, TailKind) and kind.has_mtp_modules and kind.mtp_body is not None:
        h = kind.hidden_size
        one = _body_matrices(kind.mtp_body, setup) + LayerParams(non_expert=2 * h * per_rank(h, setup.tp))
        return LayerParams(non_expert=one.non_expert * kind.mtp_layers, expert=one.expert * kind.mtp_layers)
    return LayerParams()
