"""What Megatron's CUDA graphs hold beside the eager run (`timing.cuda_graph_impl: transformer_engine`).

Megatron-LM d98e8a64 (megatron/core/transformer/cuda_graphs.py `TECudaGraphHelper`; the same logic at
11debfa7b4, the CI golden values' commit) captures each graphable decoder layer (and MTP layer) with
TransformerEngine's `make_graphed_callables` (transformer_engine/pytorch/graph.py, d0067d0d):

- **Static inputs**, one set per (layer, micro-batch) sample (`_get_sample_arguments`), allocated by
  Megatron outside the graphs (`GraphableMegatronModule.get_layer_static_inputs`: the hidden states
  `torch.ones((s/cp/tp under SP, b, h), dtype=torch.bfloat16)`; `TransformerLayer.get_layer_static_inputs`
  adds, where the graph holds the attention, a boolean causal mask `(b, 1, s/cp, s)`) and held by the
  graphs for the run. A sample's buffers are reused by a later forward once the backward of the sample
  that had them was captured (the `consumed_sample_queue`, in the pipeline schedule's order
  `convert_schedule_table_to_order`; TE's `_reuse_graph_input_output_buffers` does the same), so the
  distinct sets are the most graphed layer-forwards in flight at once on the stage: the most over the
  schedule of Σ over chunks of (micro-batches in flight × graphed layers of the chunk). Without PP one
  micro-batch is captured (one set a graphed layer).
- **Static output gradients**: one buffer per output signature, reused by every backward graph
  (`static_grad_outputs_dict`); a graph's output is the hidden states: one `s/cp/tp·b·h` buffer.
- **The graph memory pool**: every capture shares one pool (`graph_pool_handle()` once, all graphs
  captured in the schedule's order `_order`), so the activations the graphs save for their backward
  occupy it as the eager run's would at the same moments: already the activation terms. The pool is
  kept for replays (PyTorch's allocator reports its blocks as free between captures, so
  `torch.cuda.max_memory_allocated` after capture omits the graphed activations; the device holds them).
  Static outputs and input gradients are the pool's own blocks (weak references once their backward
  was captured).

The local implementation (`CudaGraphManager`, one global pool, a runner per layer and micro-batch under
PP with its static inputs in the pool) and `full_iteration` (its inputs, the data batch) are not
modelled here: 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ppb_core.config.run import RunConfig
from ppb_core.model.kinds import BodyKind, LayerKind, Moe, TailKind

MASK_BYTES = 1  # torch.bool
HIDDEN_BYTES = 2  # torch.bfloat16, as get_layer_static_inputs allocates whatever the training dtype


def graphed(kind: BodyKind, modules: Sequence[str]) -> bool:
    """Whether Megatron graphs a decoder layer (cuda_graphs.py `_layer_is_graphable`): every layer
    with the whole layer or `attn`, dense layers with `mlp`, MoE layers with any MoE scope."""
    if not modules or "attn" in modules:
        return True
    if isinstance(kind.mlp, Moe):
        return any(module in modules for module in ("moe", "moe_router", "moe_preprocess"))
    return "mlp" in modules


def graphed_layers(kind: LayerKind, modules: Sequence[str]) -> int:
    """The graphed layers a layer kind stands for: a body 0 or 1, a TAIL its MTP layers."""
    if isinstance(kind, BodyKind):
        return int(graphed(kind, modules))
    if isinstance(kind, TailKind) and kind.has_mtp_modules and kind.mtp_body is not None:
        return kind.mtp_layers * int(graphed(kind.mtp_body, modules))
    return 0


def sample_bytes(run: RunConfig, hidden_size: int) -> float:
    """One static input set: the hidden states, and the causal mask where the graph holds the attention."""
    par, training = run.parallel, run.training
    s, b = training.seq_length, training.micro_batch_size
    hidden = s / par.cp / par.sp * b * hidden_size * HIDDEN_BYTES
    modules = run.timing.cuda_graph_modules
    mask = b * (s / par.cp) * s * MASK_BYTES if (not modules or "attn" in modules) else 0.0
    return hidden + mask


def graph_buffer_bytes(
    run: RunConfig, layers_per_chunk: Mapping[int, int], vectors: Sequence[Sequence[int]], hidden_size: int
) -> float:
    """The static buffers a stage's graphs hold for the run (module docstring): *layers_per_chunk*
    {chunk: graphed layers}, *vectors* the stage's per-chunk micro-batches in flight the schedule reaches."""
    if run.framework != "megatron" or run.timing.cuda_graph_impl != "transformer_engine":
        return 0.0
    samples = max((sum(v[c] * n for c, n in layers_per_chunk.items()) for v in vectors), default=0)
    if not samples:
        return 0.0
    par, training = run.parallel, run.training
    grad_output = training.seq_length / par.cp / par.sp * training.micro_batch_size * hidden_size * HIDDEN_BYTES
    return samples * sample_bytes(run, hidden_size) + grad_output
