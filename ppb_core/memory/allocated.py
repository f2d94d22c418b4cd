"""What PyTorch's allocator counts where it is not what the device holds: Megatron's TE CUDA graphs.

`torch.cuda.max_memory_allocated()` (Megatron CI's `mem-max-allocated-bytes`) moves only when a block is
handed out or freed (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp, Note [Interaction with CUDA graph
capture]). Under `--cuda-graph-impl transformer_engine` (Megatron-LM d98e8a64 cuda_graphs.py
`TECudaGraphHelper`; TE graph.py `make_graphed_callables`, one private pool for every capture):

* **The warm-up iterations** (`--cuda-graph-warmup-steps`, `timing.cuda_graph_warmup_steps`, 3 by
  default) run eagerly: every activation counted, as ppb's moments (`StagePeak.moments`); the first one
  before the first optimizer step creates Adam's two fp32 moments (torch.optim / TE FusedAdam create a
  parameter's state at its first step).
* **The capture** (training.py: when `iteration - start_iteration == --cuda-graph-warmup-steps`; before the
  first step where that is 0) runs the graphed layers' forwards in the schedule's order, then their
  backwards: the activations a graphed forward saves are handed out of the pool, counted, until its
  backward is captured. The most at once: the static memory (without the moments at 0 warm-up steps),
  what the graphs save for the layer-forwards in flight at the stage's peak, and one backward's working
  set. Nothing that is not graphed runs during the capture.
* **Every iteration after it** replays the graphs, which hands out and frees nothing: the activations the
  graphs save live in their pool's blocks, reserved, never counted again. So the counted moments are ppb's
  (`StagePeak.moments`) without the graphed activations.

Which of a layer's kept terms a graph saves (transformer_layer.py at d98e8a64: `attn` the input norm and
attention, `attention.*`; `mlp` a dense layer's pre-MLP norm and MLP, `mlp.*`; `moe` the whole MoE part,
`moe.*`; `moe_router` in an MoE layer the pre-MLP norm, the router and the shared experts (not overlapped),
which the partial graph returns; `moe_preprocess` the dispatcher's permutation map; no scope: the whole
layer); an MTP layer's the same, under its prefix. What ppb prints stays what the device holds; this is the
counter the CI logs (bench/megatron_ci.py's graph rows). Not modelled: a resumed optimizer (the moments
exist from the start), the local implementation (`CudaGraphManager`), the pool blocks of a graph's outputs
that eager layers keep (a pre-MLP norm's input under `attn`).

**Memory the allocator never handed out** (`uncounted_bytes`): the flex dispatcher's registered buffers
(frameworks/flex_buffers.py) are the device's but not the counter's. HybridEP's `ExtendedMemoryAllocator`
maps them with `cuMemCreate` (fabric handles) or `cudaMalloc`, its RDMA and preprocessing buffers
`cudaMalloc` (deepseek-ai/DeepEP hybrid-ep 94a9f8f: csrc/hybrid_ep/allocator/allocator.cu `allocate`,
buffer/intranode.cu, buffer/internode_doca.cu); DeepEP's `Buffer` takes its NVLink buffer from its
`SharedMemoryAllocator` (`cuMemCreate` or `cudaMalloc`) and its RDMA one from NVSHMEM (csrc/deep_ep.cpp).
PyTorch's caching allocator sees none of them, so `torch.cuda.memory_allocated` leaves them out at every
moment. Megatron's DeepSeek-V3 proxy release runs (HybridEP) log 31.10 and 54.56 GiB after the step, where
ppb's moment with the buffers is +1.8% and +1.6% and without them −0.0% and −0.1%.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ppb_core.memory.frameworks.flex_buffers import flex_buffer_bytes
from ppb_core.memory.graphs import graphed_layers
from ppb_core.memory.model import MemoryModel
from ppb_core.memory.peak import ADAM_MOMENT_BYTES, StagePeak, configured_options
from ppb_core.model.kinds import BodyKind, LayerKind, Moe, TailKind
from ppb_core.model.walk import LayerWalk

_ROUTER = ("moe.norm_input", "moe.norm_output", "moe.router_", "moe.topk_", "moe.shared.")
_PREPROCESS = ("moe.row_map",)
_MTP = re.compile(r"^mtp\d+\.")


def graphed_op(op: str, kind: LayerKind, modules: Sequence[str]) -> bool:
    """Whether a graph of *modules* saves the kept term *op* of a layer of *kind* (module docstring)."""
    body = kind.mtp_body if isinstance(kind, TailKind) else kind
    if not isinstance(body, BodyKind):
        return False
    if isinstance(kind, TailKind):
        if not _MTP.match(op):
            return False  # the output layer and loss: never graphed
        op = _MTP.sub("", op)
    if not modules:
        return True
    moe = isinstance(body.mlp, Moe)
    return (
        ("attn" in modules and op.startswith("attention."))
        or ("mlp" in modules and not moe and op.startswith("mlp."))
        or ("moe" in modules and moe and op.startswith("moe."))
        or ("moe_router" in modules and moe and op.startswith(_ROUTER))
        or ("moe_preprocess" in modules and moe and op.startswith(_PREPROCESS))
    )


def graphed_bytes(memory: MemoryModel, layer_walk: LayerWalk, peak: StagePeak) -> float:
    """What the graphs save of the layer-forwards in flight at the stage's peak vector."""
    run = memory.run
    modules = tuple(run.timing.cuda_graph_modules)
    options = configured_options(run, layer_walk)
    found = 0.0
    for layer in layer_walk:
        if layer.stage != peak.stage or not graphed_layers(layer.kind, modules):
            continue
        state, switches = memory.option_state(layer, options.get(layer, "NONE"))
        saved = sum(
            t.bytes for t in memory.activation_terms(layer, state, switches) if graphed_op(t.op, layer.kind, modules)
        )
        found += saved * memory.correction.activations * peak.in_flight[layer.chunk]
    return found


def uncounted_bytes(memory: MemoryModel, layer_walk: LayerWalk, stage: int) -> float:
    """What *stage*'s device holds that PyTorch's allocator never handed out (module docstring): the flex
    dispatcher's buffers, sized as `MegatronRules.workspace_bytes` sizes them for the stage's layer kinds."""
    if memory.run.framework != "megatron":
        return 0.0
    kinds = {layer.kind for layer in layer_walk if layer.stage == stage}
    return flex_buffer_bytes(memory.setup, kinds)


def allocated_peak_bytes(memory: MemoryModel, layer_walk: LayerWalk, peak: StagePeak) -> float | None:
    """The most `torch.cuda.max_memory_allocated` reaches on *peak*'s stage: under Megatron's TE CUDA graphs
    the capture's or a later iteration's, and never the memory the allocator did not hand out (module
    docstring); None where it is the peak."""
    run = memory.run
    uncounted = uncounted_bytes(memory, layer_walk, peak.stage)
    if run.framework != "megatron" or run.timing.cuda_graph_impl != "transformer_engine":
        return peak.peak_bytes - uncounted if uncounted else None
    graphed = graphed_bytes(memory, layer_walk, peak)
    # none made at the first step where they exist before it (`Training.optimizer_states_at_start`)
    moments = 0.0
    if not run.training.optimizer_states_at_start:
        held_states = (
            memory.static_breakdown(layer).optimizer_states for layer in layer_walk if layer.stage == peak.stage
        )
        moments = ADAM_MOMENT_BYTES * sum(held_states)
    warmup = run.timing.cuda_graph_warmup_steps
    held = peak.moments
    found = []
    if warmup >= 2:  # an eager iteration after the first step: ppb's moments as they are
        found.append(max(held.values()))
    elif warmup == 1:  # the first iteration, eager, its moments created only at its step
        found.append(max(b - (moments if name in ("backward", "loss") else 0.0) for name, b in held.items()))
    found.append(peak.static_bytes - (moments if warmup == 0 else 0.0) + graphed + peak.working_bytes)
    found[-1] += peak.reserved_bytes
    found.append(max(b - (graphed if name in ("backward", "loss", "first_loss") else 0.0) for name, b in held.items()))
    return max(found) - uncounted


__all__ = ["allocated_peak_bytes", "graphed_bytes", "graphed_op", "uncounted_bytes"]
