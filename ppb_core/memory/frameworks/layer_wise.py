"""Megatron's layer-wise distributed optimizer on its legacy path (`--no-use-layer-wise-param-layout`).

Megatron-LM d98e8a64. Under Muon, `--use-distributed-optimizer` (or `dist_muon`) runs the layer-wise
distributed optimizer (arguments.py `validate_args`: `use_layer_wise_distributed_optimizer`). By default
(`--use-layer-wise-param-layout`) the Muon matrices are laid out shard by shard and the other parameters go
to a byte-sharded `DistributedOptimizer`: ppb prices 1/dp of every state (`muon.py`). With
`--no-use-layer-wise-param-layout` no layout is computed (training.py `wrap_model_chunks_with_ddp`) and
`LayerWiseDistributedOptimizer._shard_params_ping_pong` (optimizer/layer_wise_optimizer.py) hands out whole
parameters: every parameter of the rank's model (Muon's matrices and Adam's embeddings, norms and biases
alike) sorted by size (a stable sort), then dealt in a ping-pong order over the data-parallel ranks, 0, 1, …,
dp−1, dp−1, …, 0, 0, 1, …; expert parameters likewise over the expert-data-parallel ranks. A rank keeps the
optimizer states (the fp32 master copy under bf16, `Float16OptimizerWithFloat16Params` wrapping after the
sharding, and Muon's momentum or Adam's moments) of its own parameters only: the rank dealt the largest
parameter (the embedding) holds far more than 1/dp. ppb prices the worst data-parallel rank of each stage:
its share of the stage's states beyond the 1/dp each layer carries (`extra_state_bytes`).

The parameters are the Transformer Engine spec's (gpt_layer_specs.py): the input norm fused into the QKV
projection (`TELayerNormColumnParallelLinear`: weight, and bias under LayerNorm) or its own module under MLA,
the projections' weights and biases, the QK norms, MLA's down- and up-projections with the latent norms fused
into the up-projections, the dense MLP's fused norm, fc1 (gate and up as one weight) and fc2, an MoE layer's
own pre-MLP norm, router and shared experts, each routed expert's two weights (`TEGroupedLinear`: `weight{i}`);
the word and learned position embeddings; the final norm and the output layer where the stage holds one; each
MTP layer's two norms, projection, transformer layer and final norm.
"""

from __future__ import annotations

from collections.abc import Iterable

from ppb_core.memory.frameworks.muon import MUON_SAVING_BYTES
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, HeadKind, LayerKind, Moe, Norm, TailKind
from ppb_core.model.params import tail_params

# (elements on this TP/EP rank, an expert parameter, a Muon matrix)
Tensor = tuple[int, bool, bool]


def _norm(norm: Norm, features: int) -> list[Tensor]:
    return [(features, False, False)] * norm.params_per_feature


def _linear(rows: int, columns: int, bias: bool, expert: bool = False) -> list[Tensor]:
    found = [(rows * columns, expert, True)]
    return [*found, (rows, expert, False)] if bias else found


def _attention(kind: BodyKind, setup: MemorySetup) -> list[Tensor]:
    att, h, norm = kind.attention, kind.hidden_size, kind.norm
    heads = per_rank(att.num_heads, setup.tp)
    if att.is_mla:
        found = _norm(norm, h)  # the input norm, its own module under MLA
        if att.q_lora_rank:
            found += _linear(att.q_lora_rank, h, att.qkv_bias)
            found += _norm(norm, att.q_lora_rank) if att.latent_norms else []
            found += _linear(heads * att.q_head_dim, att.q_lora_rank, False)
        else:
            found += _linear(heads * att.q_head_dim, h, False)
        found += _linear(att.kv_lora_rank + att.qk_rope_head_dim, h, att.qkv_bias)
        found += _norm(norm, att.kv_lora_rank) if att.latent_norms else []
        found += _linear(heads * (att.qk_nope_head_dim + att.v_head_dim), att.kv_lora_rank, False)
        return found + _linear(h, heads * att.v_head_dim, att.out_bias)
    kv = kv_heads_per_rank(att.num_kv_heads, setup.tp)
    found = _norm(norm, h) + _linear((heads + 2 * kv) * att.head_dim, h, att.qkv_bias)
    if att.qk_norm:
        found += _norm(norm, att.head_dim) * 2
    return found + _linear(h, heads * att.head_dim, att.out_bias)


def _mlp(kind: BodyKind, setup: MemorySetup) -> list[Tensor]:
    h, mlp = kind.hidden_size, kind.mlp
    if not isinstance(mlp, Moe):
        width = per_rank(mlp.intermediate_size, setup.tp)
        up = mlp.matrices - 1
        return _norm(kind.norm, h) + _linear(up * width, h, mlp.bias) + _linear(h, width, mlp.bias)
    found = [*_norm(kind.norm, h), (mlp.num_experts * h, False, True)]  # its own pre-MLP norm, the router
    up = mlp.matrices - 1
    if mlp.shared_experts:
        width = per_rank(mlp.shared_experts * mlp.shared_intermediate_size, setup.tp)
        found += _linear(up * width, h, False) + _linear(h, width, False)
        found += [(h, False, True)] if mlp.shared_expert_gate else []
    width = per_rank(mlp.expert_intermediate_size, setup.etp)
    for _ in range(per_rank(mlp.num_experts, setup.ep)):
        found += _linear(up * width, h, False, expert=True) + _linear(h, width, False, expert=True)
    return found


def body_tensors(kind: BodyKind, setup: MemorySetup) -> list[Tensor]:
    return _attention(kind, setup) + _mlp(kind, setup)


def tensors(kind: LayerKind, setup: MemorySetup) -> list[Tensor]:
    """The layer's parameters as Megatron builds them (module docstring), on this TP/EP rank."""
    if isinstance(kind, BodyKind):
        return body_tensors(kind, setup)
    if isinstance(kind, HeadKind):
        table = [(per_rank(kind.vocab_size, setup.tp) * kind.hidden_size, False, False)]
        return table + ([(kind.learned_positions * kind.hidden_size, False, False)] if kind.learned_positions else [])
    if not isinstance(kind, TailKind):
        return []
    h, table = kind.hidden_size, per_rank(kind.vocab_size, setup.tp) * kind.hidden_size
    found: list[Tensor] = _norm(kind.norm, h) if kind.has_final_norm else []
    for _ in range(kind.mtp_layers):
        assert kind.mtp_body is not None
        found += _norm(kind.norm, h) * 2 + [(h * per_rank(h, setup.tp) * 2, False, True)]  # enorm, hnorm, eh_proj
        found += body_tensors(kind.mtp_body, setup) + _norm(kind.norm, h)
    counted = sum(count for count, _, _ in found)
    tables = (tail_params(kind, setup.tp, setup.pp, setup.ep, setup.etp).total - counted) // max(1, table)
    return found + [(table, False, False)] * tables  # the output layer, an MTP embedding where held


def _state_bytes(tensor: Tensor, setup: MemorySetup) -> int:
    muon = setup.optimizer == "muon" and tensor[2]
    return tensor[0] * (setup.state_bytes - (MUON_SAVING_BYTES if muon else 0))


def ping_pong(sizes: list[tuple[int, int]], ranks: int) -> list[int]:
    """Bytes each of *ranks* holds of (elements, state bytes) parameters dealt as
    `_shard_params_ping_pong` deals them: sorted by elements (stable), ranks 0…n−1 then n−1…0, repeated."""
    order = [*range(ranks), *reversed(range(ranks))]
    held = [0] * ranks
    for index, (_, state) in enumerate(sorted(sizes, key=lambda size: size[0])):
        held[order[index % len(order)]] += state
    return held


def extra_state_bytes(layers: Iterable[tuple[LayerKind, int]], setup: MemorySetup) -> float:
    """What the stage's worst data-parallel rank holds of optimizer states beyond 1/dp of each (module
    docstring), for the legacy layer-wise layout; 0 elsewhere. *layers*: (kind, count) of the stage."""
    if setup.layer_wise_param_layout or setup.optimizer != "muon" or setup.shard_level < 1:
        return 0.0
    plain: list[tuple[int, int]] = []
    expert: list[tuple[int, int]] = []
    for kind, count in layers:
        for tensor in tensors(kind, setup):
            (expert if tensor[1] else plain).extend([(tensor[0], _state_bytes(tensor, setup))] * count)
    dp, edp = setup.data_group, max(1, setup.expert_data_group)
    worst = max(ping_pong(plain, dp)) + (max(ping_pong(expert, edp)) if expert else 0)
    even = sum(state for _, state in plain) / dp + sum(state for _, state in expert) / edp
    return worst - even
