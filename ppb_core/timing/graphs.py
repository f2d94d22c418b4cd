"""Megatron's CUDA graphs: what a graphed layer launches on the host.

A CUDA graph replays the kernels it captured with one `cudaGraphLaunch`, so the host's per-kernel time
(`ppb_core.timing.host`) is spent once per graph, not once per kernel (NVIDIA/Megatron-LM d98e8a64,
NVIDIA/TransformerEngine d0067d0d):

- `cuda_graph_impl: transformer_engine` (megatron/core/transformer/cuda_graphs.py `TECudaGraphHelper`,
  TE's `make_graphed_callables`) and `local` (`CudaGraphManager`) graph each decoder layer (and each MTP
  layer's transformer layer) that `_layer_is_graphable` accepts, one graph a layer, its forward and its
  backward. The scope (`cuda_graph_modules`, transformer_layer.py `_get_submodules_under_cudagraphs` and
  `_te_cuda_graph_capture`): `attn` the input norm, the attention and its residual
  (`_forward_attention`); `mlp` a dense layer's pre-MLP norm, MLP and residual (`_forward_mlp`); `moe`
  a MoE layer's whole `_forward_mlp`; `moe_router` the pre-MLP norm, the router and, not overlapped
  (`moe_shared_expert_overlap`), the shared experts; `moe_preprocess` with it the dispatcher's
  preprocessing up to the permutation (MoELayer.preprocess; HybridEP's is only `setup_metadata`'s reshapes: its
  probabilities' fp32 cast, metadata scan and permutation run in `_HybridEPManager.dispatch`, eagerly); empty,
  the whole layer. What the graph
  does not cover runs eagerly, kernel by kernel, as before: the embedding, the output layer and the loss
  always; the routed experts and the token dispatcher's all-to-alls under `moe_router`.
- A replay (TE graph.py `Graphed.forward` / `Graphed.backward`; Megatron's `_CudagraphReplayNode`
  likewise) copies the incoming tensor into the graph's static input (forward: the hidden states;
  backward: the output gradient), then replays: two launches each way, whatever the graph's size (CUDA
  12.6 launches a straight-line graph in constant time: NVIDIA technical blog "Constant Time Launch for
  Straight-Line CUDA Graphs and Other Performance Enhancements", 2024; the local implementation may skip
  the copy where the previous graph's output buffer is the input, `can_skip_replay_copy`: still
  counted). The captured parameters'
  gradients come out of the graph as its static outputs and Megatron's DDP hook
  (distributed_data_parallel.py `_make_backward_post_hook`) adds each into its main gradient after it,
  eagerly: a norm's weight always, a linear layer's without gradient-accumulation fusion (with it the
  GEMM wrote `main_grad` inside the graph).
- `full_iteration` (megatron/core/full_cuda_graph.py `FullCudaGraphWrapper`) captures the whole
  forward-backward of all micro-batches: one launch an iteration, none per layer.

A graph holds no host synchronization: with the alltoall dispatcher's device-to-host copy of the
routing counts, Megatron keeps the copy's wait outside the graph (token_dispatcher.py
`MoEAlltoAllTokenDispatcher`: `cuda_dtoh_point` "before_ep_alltoall" under `moe_preprocess`), so the
wait after it stays, with fewer launches to catch up on; the copy then comes after the graph's permutation
and the wait outlasts it, so nothing is left on the GPU when the host resumes (`host.dispatcher_wait_s`'s
`copy_after_permute`); where the graph holds the whole dispatch
(`moe`, a whole layer, full_iteration) there is no such wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ppb_core.timing.flops import COMM, Op

# Launches of one replay each way: the static input's (output gradient's) copy, then the graph.
REPLAY = (2.0, 2.0)
# The MoE router's ops and the shared experts' (moe_router); the dispatcher's preprocessing (moe_preprocess).
ROUTER_OPS = ("norm2", "router", "router_topk")
PREPROCESS_OPS = ("permute",)
# Dispatchers whose `permute` op runs outside `MoELayer.preprocess`, so outside a moe_preprocess graph: HybridEP's
# `dispatch_preprocess` only reshapes (token_dispatcher.py `MoEFlexTokenDispatcher.dispatch_preprocess` ->
# `_HybridEPManager.setup_metadata`, Megatron-LM 2edffadb52 and b1c2006cf4); the probabilities' `.float()`, the
# metadata scan (`metadata_preprocessing`) and the permutation (`dispatch_with_permute`'s permute kernel) are
# launched from `_HybridEPManager.dispatch` (`token_dispatch`), after the graph (fused_a2a.py
# `hybrid_ep_dispatch`; deepseek-ai/DeepEP hybrid-ep 7febc6e csrc/hybrid_ep/executor/executor.cu
# `dispatch_postprocess`).
PREPROCESS_OUTSIDE = ("hybridep",)


def captured(op: Op, modules: Sequence[str], shared_overlap: bool = False, dispatcher: str = "alltoall") -> bool:
    """Whether a decoder layer's op is inside its graph under *modules* (empty: the whole layer), its MoE
    layer's token dispatcher *dispatcher* (`PREPROCESS_OUTSIDE`)."""
    if not modules:
        return True
    last = op.name.rsplit(".", 1)[-1]
    block = op.block.rsplit(".", 1)[-1]  # an MTP layer's ops carry their module's prefix
    if block == "attention":
        return "attn" in modules
    if block == "mlp":
        return "mlp" in modules
    if block != "moe":
        return False
    if "moe" in modules:
        return True
    if "moe_router" not in modules:
        return False
    if last in ROUTER_OPS or (not shared_overlap and "shared" in last):
        return True
    return "moe_preprocess" in modules and last in PREPROCESS_OPS and dispatcher not in PREPROCESS_OUTSIDE


def ddp_adds(op: Op, wgrad_fused: bool) -> float:
    """The main-gradient adds DDP's hook runs after a graph for one captured op's weights."""
    last = op.name.rsplit(".", 1)[-1]
    if op.category == COMM:
        return 0.0
    if op.gemm is None:  # a norm's weight (as `launches.op_launches` counts norms; an MTP module's two, and
        # the query's and the key's norm modules)
        return 2.0 if last in ("norms", "qk_norm") else 1.0 if "norm" in last else 0.0
    if not op.weight_elements:
        return 0.0
    _, _, n, groups, fused = op.gemm
    return 0.0 if wgrad_fused else groups * n / fused


def graphed_launches(
    ops: Sequence[Op],
    launches: Mapping[str, tuple[float, float]],
    modules: Sequence[str],
    wgrad_fused: bool,
    shared_overlap: bool = False,
    dispatcher: str = "alltoall",
) -> dict[str, tuple[float, float]]:
    """A decoder layer's {op: (forward, backward) launches} when its captured ops replay as one graph:
    those ops launch nothing but the DDP hook's adds backward; the first of them carries the replay's
    launches (`REPLAY`), so a wait counted launch by launch (the dispatcher's) sees them where the graph
    starts."""
    counts = dict(launches)
    first = True
    for op in ops:
        if op.name not in counts or not captured(op, modules, shared_overlap, dispatcher):
            continue
        forward, backward = REPLAY if first else (0.0, 0.0)
        counts[op.name] = (forward, backward + ddp_adds(op, wgrad_fused))
        first = False
    return counts


def dispatch_captured(ops: Sequence[Op], modules: Sequence[str], impl: str) -> bool:
    """Whether the graph holds the alltoall dispatch itself (no host synchronization left around it)."""
    if impl == "full_iteration":
        return True
    dispatch = next((op for op in ops if op.name.rsplit(".", 1)[-1] == "dispatch"), None)
    return dispatch is not None and captured(dispatch, modules)
