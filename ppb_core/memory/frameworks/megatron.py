"""Megatron-Core: what its layers keep, buffer and free (Megatron-LM main at d98e8a64, with
Transformer Engine main at d0067d0d, the default `--transformer-impl transformer_engine`).

Each rule names the file and function it follows; docs/frameworks.md tabulates them.

* **Sequence-parallel inputs are not kept.** A column-parallel linear saves only its sequence
  shard and all-gathers it again in the backward: megatron/core/tensor_parallel/layers.py,
  `LinearWithGradAccumulationAndAsyncCommunication.forward` (`ctx.save_for_backward(input,
  weight)`, the gathered `total_input` taken from the global memory buffer) and `.backward`
  (all-gathers `input` again before the weight-gradient GEMM); Transformer Engine's
  `_LayerNormLinear.forward` (transformer_engine/pytorch/module/layernorm_linear.py) saves
  `ln_out`, frees `ln_out_total` after the forward GEMM and gathers again in the backward
  (`ctx.ln_out_needs_gather`). The gathered copy is a workspace of one linear at a time:
  `T·width·bc`, in the forward and again in the backward.
* **Ring attention keeps only the local key/value chunk.** Transformer Engine's
  `AttnFuncWithCPAndKVP2P` (transformer_engine/pytorch/attention/dot_product_attention/
  context_parallel.py) saves the local q, kv, out and softmax statistics; its backward
  circulates the key/value chunks around the ring again.
* **Workspaces are held once per stage.** All-to-all staging, ring buffers, gradient buckets and
  the gathered inputs above live while one layer's pass runs; they are the largest of a stage's
  layers in its working set, not a sum over its layers.
* **Selective recompute by module** (`--recompute-modules`, megatron/core/transformer/
  transformer_config.py and transformer_layer.py `TransformerLayer.__init__`): `core_attn`
  checkpoints the attention core (its inputs stay: the softmax statistics, scores and their
  dropout go); `layernorm` discards the output of a norm that is its own module and recomputes
  it (`CheckpointWithoutOutput`): the MLA layers' input norm and MoE layers' pre-MLP norm only,
  since the Transformer Engine spec fuses the other norms into `TELayerNormColumnParallelLinear`
  (gpt_layer_specs.py `get_gpt_layer_with_transformer_engine_submodules`: `input_layernorm` and
  dense `pre_mlp_layernorm` are `IdentityOp`, and `TransformerLayer.__init__` recomputes only a
  norm that is not); `mla_up_proj` the MLA up-projections and rotary; `mlp` checkpoints a dense
  MLP from its input (dense layers only); `moe_act` the routed experts' activation; `moe` the
  whole MoE block from its input (megatron/core/transformer/moe/moe_layer.py); `shared_experts`
  the shared experts.
* **The routed experts weight their own activations.** The all-to-all dispatcher sends each
  token's routing probability with it, the experts multiply the activation by it before the
  down-projection (megatron/core/transformer/moe/experts.py `TEGroupedMLP.forward`,
  `weighted_bias_swiglu_impl(intermediate, bias, permuted_probs)`), and the combine is a plain
  unpermute without probabilities (token_dispatcher.py `MoEAlltoAllTokenDispatcher.
  combine_postprocess`: `unpermute(...)` with no `probs`), which keeps nothing for its backward.
  So the combine keeps no expert outputs (SAPP's `moe.combined_tokens` and its remote part);
  the experts keep their rows' probabilities (`moe.expert.probs`, one per routed row).
* **Static memory** is SAPP's: bf16 parameters, the contiguous fp32 `main_grad` buffer
  (megatron/core/distributed/param_and_grad_buffer.py, `_ParamAndGradBuffer` and
  `group_params_for_buffers`: `grad_dtype = torch.float if grad_reduce_in_fp32`; the buffer is
  whole on every rank, the distributed optimizer reduce-scatters into its shard in place), the
  fp32 main parameters and Adam moments sharded by the distributed optimizer (ZeRO-1).
* **The loss** (megatron/core/tensor_parallel/cross_entropy.py `_VocabParallelCrossEntropy`, and
  the fused megatron/core/fusions/fused_cross_entropy.py): the logits are upcast to an fp32 copy
  that becomes, in place, the softmax saved for the backward (the TAIL's `logits_softmax`);
  while it is built, the 16-bit logits of the output layer are alive next to it, and in the
  backward the output layer casts the fp32 gradient (the softmax storage) to 16 bits again:
  either way `bc·T·⌈v/t⌉` beyond what the tail keeps.
* **GEMM workspaces** (`workspaces.py`): PyTorch's two cuBLAS workspaces (forward thread, autograd
  thread) and Transformer Engine's, allocated once and kept on every stage; on a stage that runs
  routed experts (`TEGroupedMLP`), TE's grouped GEMM's four more.
* **A pipeline chunk keeps its last received input and that input's gradient.** The schedules
  hand each micro-batch's received activation to the chunk with `set_input_tensor`
  (megatron/core/pipeline_parallel/schedules.py `forward_step`), which stores it on the chunk's
  `TransformerBlock.input_tensor` (megatron/core/transformer/transformer_block.py
  `set_input_tensor`) until the next micro-batch's replaces it; `backward_step` calls
  `retain_grad()` on it, so after its backward the tensor also carries its `.grad`. A chunk with
  none of its micro-batches in flight (and at the optimizer step every chunk that receives its
  input, all but the first stage's first) holds both: `2·whole_tokens·h·bc`. With micro-batches in
  flight the stored input is the latest one, which its first layer keeps anyway.
* **The output layer's gathered input is a persistent buffer.** The output layer is Megatron's own
  `ColumnParallelLinear` (gpt_model.py), whose `LinearWithGradAccumulationAndAsyncCommunication.
  forward` all-gathers a sequence-parallel input into `get_global_memory_buffer().get_tensor(...,
  "mpu")` (megatron/core/tensor_parallel/layers.py); `GlobalMemoryBuffer.get_tensor`
  (megatron/core/utils.py) allocates the largest size asked for and never frees it: `T·h·bc` held
  from then on by the stage holding the TAIL, under sequence parallelism.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ppb_core.memory.activations import ActivationTerm, kept, routed_rows
from ppb_core.memory.buffers import BufferTerm, state_buffers
from ppb_core.memory.frameworks.base import FULL_UNIT, FrameworkRules
from ppb_core.memory.frameworks.workspaces import (
    TE_COMPUTE_STREAMS,
    torch_training_workspace_bytes,
    transformer_engine_workspace_bytes,
)
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import per_rank
from ppb_core.model.kinds import BodyKind, HeadKind, LayerKind, Moe, TailKind
from ppb_core.model.params import LayerParams
from ppb_core.model.switches import LayerType

# The norms a `layernorm` recompute acts on under the Transformer Engine spec.
_OWN_NORM_OUTPUTS = {"moe.norm_output"}
_MLA_NORM_OUTPUT = "attention.norm_output"
# What a checkpointed block keeps of its own terms: its input (the norm output) and what lies outside it.
_MLP_KEEPS = {"mlp.norm_input", "mlp.norm_output", "mlp.dropout_mask"}
_MOE_KEEPS = {"moe.norm_input", "moe.norm_output", "moe.dropout_mask"}


def module_drops(term: ActivationTerm, modules: frozenset[str], kind: BodyKind) -> bool:
    """Whether one of Megatron's recompute *modules* drops *term* of a body layer of *kind*."""
    op = term.op.split(".", 1)[1] if term.op.startswith("mtp") else term.op
    if "core_attn" in modules and term.switch in ("softmax", "dropout", "headCast"):
        return True
    if "layernorm" in modules and (op in _OWN_NORM_OUTPUTS or (op == _MLA_NORM_OUTPUT and kind.attention.is_mla)):
        return True
    if "mla_up_proj" in modules and term.switch == "attUp":
        return True
    if "moe_act" in modules and op.startswith("moe.expert.") and term.switch == "ffAct":
        return True
    if "mlp" in modules and op.startswith("mlp.") and op not in _MLP_KEEPS:
        return True
    if "moe" in modules and op.startswith("moe.") and op not in _MOE_KEEPS:
        return True
    return "shared_experts" in modules and op.startswith("moe.shared")


def megatron_buffers(buffers: tuple[BufferTerm, ...], setup: MemorySetup) -> tuple[BufferTerm, ...]:
    """SAPP's buffers as Megatron-Core holds them: gathered inputs and ring chunks are not kept."""
    out: list[BufferTerm] = []
    for buffer in buffers:
        if buffer.kept and buffer.group == "tp" and buffer.name.endswith("gathered_input"):
            # SAPP counts the gathered copy beyond the shard, (t-1)/t of it; the workspace is all of it.
            whole = buffer.bytes * setup.tp / (setup.tp - 1)
            out.append(BufferTerm("tp", buffer.name, whole, False))
        elif buffer.kept and buffer.name.endswith(("ring_received_kv", "combined_tokens_remote")):
            continue
        else:
            out.append(buffer)
    return tuple(out)


def megatron_body_terms(
    kind: BodyKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], prefix: str = ""
) -> tuple:
    """The formulas' terms with the MoE combine as Megatron-Core runs it (module docstring)."""
    if not isinstance(kind.mlp, Moe):
        return terms
    kept_terms = tuple(t for t in terms if t.op != f"{prefix}moe.combined_tokens")
    rows = routed_rows(kind.mlp, setup)
    probs = ActivationTerm(f"{prefix}moe.expert.probs", None, rows, setup.dtype_bytes, False)
    if not setup.combined_1f1b:
        return (*kept_terms, probs)
    # The combined 1F1B schedule's nodes keep what they detach until the layer's backward
    # (megatron/core/models/gpt/fine_grained_callables.py `submodule_pre_dispatch_forward`:
    # `node.detach(shared_expert_output)`; `submodule_dispatch_forward`: `node.detach(dispatched_probs)`;
    # models/common/utils.py `TransformerLayerNode.detach` holds both tensors, freed with the node):
    # the shared experts' output, which the plain MoE layer only adds, and the probabilities as the
    # all-to-all delivered them, before the experts sort them (what the experts keep is `probs`).
    detached = [ActivationTerm(f"{prefix}moe.dispatched_probs_detached", None, rows, setup.dtype_bytes, False)]
    if kind.mlp.shared_experts:
        whole = setup.whole_tokens * kind.hidden_size
        detached.append(ActivationTerm(f"{prefix}moe.detached_shared_output", None, whole, setup.dtype_bytes))
    return (*kept_terms, probs, *detached)


def _mtp_checkpointed(op: str) -> bool:
    """Whether an MTP term lies inside `MultiTokenPredictionLayer._proj_and_transformer_layer`, which
    `--recompute-granularity full` checkpoints (`_checkpointed_forward`) from the hidden state and
    the embedding: the concatenation the projection keeps, the layer's terms, its final norm's input."""
    if not op.startswith("mtp"):
        return False
    inner = op.split(".", 1)[1]
    return inner.startswith(("attention.", "mlp.", "moe.")) or inner in ("projection_input", "output.norm_input")


def megatron_tail_terms(kind: TailKind, setup: MemorySetup, terms: tuple, modules: frozenset[str]) -> tuple:
    """The TAIL's terms (its MTP layers already as `megatron_body_terms` keeps them) as Megatron-Core
    runs its MTP block (module docstring): each MTP layer's hidden-state norm keeps its input apart
    from the concatenated copy the output layer keeps, the run's `--recompute-modules` act on the
    MTP layers' transformer layers as on the decoder's, and under `--recompute-granularity full`
    (`MultiTokenPredictionLayer.forward` → `_checkpointed_forward`) each MTP layer keeps only the
    inputs of its projection and transformer layer (the hidden state, the embedding) and what its
    loss keeps."""
    if kind.mtp_body is None:
        return terms
    if FULL_UNIT in modules:  # the projection, the layer and its final norm checkpointed from their inputs
        terms = tuple(t for t in terms if not _mtp_checkpointed(t.op))
    elif modules:
        terms = tuple(t for t in terms if not (t.op.startswith("mtp") and module_drops(t, modules, kind.mtp_body)))
    whole = setup.whole_tokens * kind.hidden_size
    norms = tuple(
        ActivationTerm(f"mtp{index}.hidden_norm_input", None, whole, setup.dtype_bytes)
        for index in range(kind.mtp_layers)
    )
    return (*terms, *norms)


def routes_experts(kind: LayerKind) -> bool:
    """Whether a layer runs routed experts: an MoE body, or a TAIL whose MTP layer is one."""
    if isinstance(kind, BodyKind):
        return isinstance(kind.mlp, Moe)
    return isinstance(kind, TailKind) and kind.mtp_body is not None and isinstance(kind.mtp_body.mlp, Moe)


class MegatronRules(FrameworkRules):
    name = "megatron"
    transients_per_stage = True

    def body_terms(
        self, kind: BodyKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], prefix: str = ""
    ) -> tuple:
        return megatron_body_terms(kind, setup, terms, prefix)

    def tail_terms(self, kind: TailKind, setup: MemorySetup, modules: frozenset[str] = frozenset()) -> tuple:
        return megatron_tail_terms(kind, setup, super().tail_terms(kind, setup, modules), modules)

    def state(
        self,
        kind: LayerKind,
        setup: MemorySetup,
        state: LayerType,
        switches: Mapping[str, int] | None,
        modules: frozenset[str],
        terms: tuple[ActivationTerm, ...],
        buffers: tuple[BufferTerm, ...],
    ) -> tuple[tuple[ActivationTerm, ...], tuple[BufferTerm, ...]]:
        buffers = megatron_buffers(buffers, setup)
        if isinstance(kind, TailKind) and "moe" in modules:  # the MTP layers' MoE blocks are checkpointed too
            buffers = tuple(b for b in buffers if not (b.kept and ".moe." in f".{b.name}"))
        if state is LayerType.SEL_REC_LAYER and modules and isinstance(kind, BodyKind):
            terms = tuple(t for t in terms if not module_drops(t, modules, kind))
            if "moe" in modules:
                buffers = tuple(b for b in buffers if not (b.kept and ".moe." in f".{b.name}"))
            # BOTH adds the gather switch to the modules: it acts on the buffers (expert-TP rows)
            gather_only = {"gather": (switches or {}).get("gather", 1)}
            return terms, state_buffers(buffers, state, gather_only)
        if state is LayerType.SEL_REC_LAYER:
            terms = kept(terms, switches)
        return terms, state_buffers(buffers, state, switches)

    def workspace_bytes(self, setup: MemorySetup, kinds: Collection[LayerKind] = ()) -> float:
        """PyTorch's and Transformer Engine's cuBLAS workspaces, TE's grouped-GEMM ones where experts
        run, and the output layer's persistent all-gather buffer (module docstring)."""
        found = 0.0
        capability = setup.compute_capability
        if capability > 0:
            te_workspace = transformer_engine_workspace_bytes(capability)
            found += torch_training_workspace_bytes(capability) + te_workspace
            if any(routes_experts(kind) for kind in kinds):
                found += TE_COMPUTE_STREAMS * te_workspace
        if setup.sp > 1:
            tails = [kind.hidden_size for kind in kinds if isinstance(kind, TailKind)]
            if tails:
                found += setup.tokens * max(tails) * setup.dtype_bytes
        return found

    def pipeline_buffer_bytes(
        self, setup: MemorySetup, kinds: Collection[LayerKind], micro_batches: int, in_flight: int
    ) -> float:
        """A chunk that receives its input, with none of its micro-batches in flight, still holds the
        last one it received and that input's gradient (module docstring); in flight, that input is
        its first layer's kept input and its gradient is not yet made."""
        hidden = max((kind.hidden_size for kind in kinds if isinstance(kind, BodyKind)), default=0)
        if setup.pp == 1 or not hidden or in_flight > 0 or any(isinstance(kind, HeadKind) for kind in kinds):
            return 0.0
        return 2.0 * setup.whole_tokens * hidden * setup.dtype_bytes

    def loss_bytes(self, kind: TailKind, params: LayerParams, setup: MemorySetup) -> float:
        """The 16-bit logits next to the fp32 softmax (forward), or the 16-bit gradient (backward)."""
        return setup.dtype_bytes * setup.tokens * per_rank(kind.vocab_size, setup.tp)


# The nodes Megatron-Core's combined 1F1B schedule runs a layer as (--overlap-moe-expert-parallel-comm;
# models/common/model_chunk_schedule_plan.py `TransformerLayerSchedulePlan._build_callable_nodes`,
# models/gpt/fine_grained_callables.py `build_transformer_layer_callables`), and the chunk's own
# pre- and post-process (the embedding; the output layer and loss).
PRE_PROCESS, PRE_DISPATCH, MLP_NODE, MTP_POST_PROCESS, POST_PROCESS = (
    "pre_process",
    "pre_dispatch",
    "mlp",
    "mtp_post_process",
    "post_process",
)


def schedule_node(op: str) -> str:
    """The combined-1F1B node of a TAIL or body layer that keeps the tensor named *op*.

    `pre_dispatch_computation`: attention and, in an MoE layer, the pre-MLP norm, the shared
    experts, the router and the permutation; `moe_dispatch` (the probabilities it detaches) and
    `mlp`: the experts with the tokens they received (a dense layer's MLP with its norm, `_forward_mlp`),
    counted as one (they run back to back in both directions between the other micro-batch's nodes);
    an MTP layer's `mtp_post_process`: its output layer and loss; the chunk's `post_process`: the
    model's output layer and loss.
    """
    inner = op.split(".", 1)[1] if op.startswith("mtp") else op
    if inner.startswith("output."):
        return MTP_POST_PROCESS if op.startswith("mtp") else POST_PROCESS
    if inner.startswith(("mlp.", "moe.expert.", "moe.dispatched")):
        return MLP_NODE
    return PRE_DISPATCH
