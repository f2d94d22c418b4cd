"""torchtitan: its Llama blocks, activation checkpointing, FSDP2 and loss (torchtitan v0.2.2 at
73a0e697, on torch 2.13's torch.distributed.fsdp and torch.distributed.pipelining).

Each rule names the file and function it follows; docs/frameworks.md tabulates them, and
`ppb_core.census.torchtitan` measures the block rules on the CPU.

* **The block keeps more than a fused SwiGLU would** (torchtitan/models/llama3/model/model.py):
  `FeedForward.forward` is `w2(F.silu(w1(x)) * w3(x))`, unfused: the SiLU output is kept for the
  product's backward next to w1's and w3's outputs and the product (`mlp.silu_output`, under
  `ffAct`). `Attention.forward` hands `wo` `output.transpose(1, 2).contiguous()`, which is no copy:
  the flash kernels return their output as a transposed view of a (batch, sequence, heads, dim)
  buffer, so `wo` keeps the tensor the attention backward keeps (measured:
  tests/test_census_torchtitan.py). The norms are `nn.RMSNorm`, whose CUDA kernel
  (`aten._fused_rms_norm`) keeps its input and fp32 statistics (4 bytes a token, left out as the
  formulas leave norm statistics out); rotary keeps nothing (a product with the fixed `freqs_cis`).
* **Activation checkpointing** (torchtitan/distributed/activation_checkpoint.py): `full` wraps
  every block in `checkpoint_wrapper` (the block input is kept); `selective` with an integer N
  wraps every N-th block of the rank (`_apply_layer_sac`, a counter over the rank's blocks);
  `selective` with `op` (`_apply_op_sac`) keeps the block input and the outputs of the ops of
  torchtitan/models/llama3/infra/parallelize.py `_op_sac_save_list` (`aten.mm`, the SDPA kernels,
  `reduce_scatter_tensor`, ...), except every second `aten.mm` of the block
  (`meta[mm_count_key] % 2 == 0`), and recomputes everything else. A linear with a bias runs
  `aten.addmm`, which the policy neither saves nor counts. From 114151ad4 (2026-03-23, #2357; a run
  stating such a commit: `Geometry.central_save_list`) one central list replaces the models' (`_get_save_ops`):
  torch's compute-intensive ops (addmm saved, uncounted) and `all_to_all_single` for every model.
* **FSDP2** (torch/distributed/fsdp/_fully_shard, applied by parallelize.py `apply_fsdp`): every
  block, the embedding, and the final norm with the output layer are `fully_shard` units. The
  sharded parameters are fp32 (the model is built in fp32; `MixedPrecisionPolicy(param_dtype=
  bf16)` only casts what is gathered), gradients fp32, AdamW's two moments fp32 and no master
  copy: 4 + 4 + 8 bytes per parameter, over dp·cp. A block's backward holds its gathered bf16
  parameters and the next block's (prefetched, `FSDPParamGroup._backward_prefetch`), its bf16
  gradients, and the previous block's fp32 reduce-scatter input (`foreach_reduce` allocates it
  in the reduce dtype; `post_backward` keeps `reduce_scatter_max_input_buffers` = 1 of them
  until the next reduce-scatter): `(3·bc + 4)·P`. The embedding's (last in the backward,
  nothing to prefetch, resharded before its own reduce-scatter input is filled) `(bc + 4)·P`.
  The norm and output layer are not resharded after the forward (`reshard_after_forward=False`
  for that unit), so the loss runs next to their gathered weights.
* **FSDP2 units by version** (`timing.fsdp_units`, the time side's `timing/titan_step.py` rule): the
  above is `split` (from 83e694105, 2025-07-28; v0.2.2). Before it (`root`: 83e694105^
  models/llama3/infra/parallelize.py `apply_fsdp`) every block is a unit, the last one not resharded
  after the forward (`reshard_after_forward = int(layer_id) < len(model.layers) - 1`), and
  `fully_shard(model, reshard_after_forward=not pp_enabled)` makes the root a unit of the embedding,
  the final norm and the output layer. A stated `reshard_after_forward` is kept for the root (torch
  2.13 _fully_shard.py: `auto_reshard_after_forward = reshard_after_forward is None`; _fsdp_state.py
  `_lazy_init` drops the root's post-forward reshard only when auto), so without PP: the root is
  gathered through the model's forward and resharded when it returns, the loss runs next to the last
  block's gathered weights (not the output layer's). Before PyTorch 2.8 (`framework_release.
  pytorch`; pytorch/pytorch#154704, #155319) `_lazy_init` kept every root gathered after its
  forward: the loss also runs next to the gathered embedding, final norm and output layer. The
  logits' pre-backward hook gathers the root again, and it stays gathered with the output layer's
  and final norm's bf16 gradients to the final callback (`_root_post_backward_final_callback` runs
  its `post_backward`: the root's forward input, the token ids, needs no gradient), beside every
  block's working set; no block prefetches the embedding and none waits on the output layer's
  reduce-scatter; the embedding's backward forms its gradients next to the first block's fp32
  reduce-scatter input, then the root reshards and fills its own fp32 input (`(bc + 4)·(P_emb +
  P_out)`). Under PP the units stay gathered either way; `perform_reduce_grad` reduces the root (the
  stage's embedding or norm and output) first.
* **The sharded gradients exist from the backward to the next step** (torchtitan/train.py `train_step`
  calls `optimizers.zero_grad()` before the forward, at 9dec370 and v0.2.2; torch.optim's `zero_grad`
  sets `.grad` to None; FSDP2's `foreach_reduce` (_fsdp_collectives.py) allocates each unit's sharded
  gradients, the reduce-scatter output, in the backward): with one micro-batch, or under PP (where
  `perform_reduce_grad` forms them after the last micro-batch), the forward and the loss run without
  them; the optimizer step holds them. In the backward, the gradients formed belong to units whose
  activations are freed: at the i-th unit from the end, the stage holds the first units' activations
  and the last units' gradients, linear in i over like blocks, so the largest is at an end: as the
  backward starts (no gradient: the `backward` moment) or as it ends (every gradient, no activation:
  the `optimizer` moment's static memory). With gradient accumulation without PP (`micro_batches` > 1)
  the first micro-batch's backward forms them and the later forwards run beside them.
* **FSDP2 under pipeline parallelism**: `apply_fsdp` does not reshard after the forward when PP
  is on, and torch/distributed/pipelining/stage.py `backward_maybe_with_nosync` runs every
  micro-batch's backward with `set_requires_gradient_sync(False)` and
  `set_reshard_after_backward(False)`, reducing only in `perform_reduce_grad` after the last
  one: the stage holds its gathered bf16 parameters from its first forward to the reduction, and each
  chunk's fp32 unsharded gradient accumulators from that chunk's first backward of the step:
  `FSDPParamGroup.post_backward` (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py; the
  _composable/fsdp files of late 2024 alike) calls `FSDPParam.to_accumulated_grad_if_needed` when it
  does not reduce, which makes the fp32 copy of the unit's bf16 gradients (`unsharded_grad.to(
  self.reduce_dtype)`, torchtitan's `MixedPrecisionPolicy(reduce_dtype=float32)`) and drops them;
  later micro-batches add into it (`accumulate_unsharded_grad_if_needed`). A chunk whose backward has
  not run holds none (`first_backward_bytes`; `peak.stage_peaks` walks the stage's order).
* **The gradient reduction under PP is a moment of its own.** `perform_reduce_grad` runs, with no
  micro-batch in flight, `FSDPParamGroup.post_backward` for each unit of the stage in
  `named_modules()` pre-order (`FSDPStateContext.all_states`, _fsdp_state.py `_lazy_init`: the
  forward order): it reshards the unit (its bf16 parameters freed), then `foreach_reduce`
  (_fsdp_collectives.py) allocates the fp32 reduce-scatter input and copies the accumulators into
  it before freeing them; the previous unit's input is released first
  (`reduce_scatter_max_input_buffers` = 1), the sharded output is the gradient static memory
  counts at the step. At unit i, with P the units' parameters in order, g the reduce dtype's bytes
  and S_j unit j's sharded gradients (not yet formed for j > i): `Σ_{j≥i} (bc + g)·P_j − bc·P_i +
  g·P_i − Σ_{j>i} S_j` beyond the step's static memory, the largest over i.
  Without PP the reduce-scatters run inside the backward, unit by unit (`parameter_working_bytes`).
* **The loss** (torchtitan/components/loss.py `cross_entropy_loss`:
  `F.cross_entropy(pred.flatten(0, 1).float(), ...)`): the fp32 log-probabilities are kept (the
  TAIL's `logits_softmax`); the forward adds the fp32 copy and the 16-bit logits (6 bytes per
  logit), the backward the fp32 gradient of `nll_loss` and of `log_softmax` next to the kept
  log-probabilities (8 bytes per logit, measured on the CPU in tests/test_frameworks.py). Without
  PP, torchtitan/train.py `forward_backward_step` deletes the logits before the backward; the
  pipeline's last stage keeps them in its forward cache (stage.py `fwd_cache`) until then.
* **The loss under tensor parallelism** (torchtitan/train.py: `loss_parallel_enabled` when TP is
  on and `disable_loss_parallel` is not set; the output layer's `ColwiseParallel(output_layouts=
  Shard(-1))`): `loss_parallel()` routes the cross-entropy to torch/distributed/tensor/parallel/
  loss.py (torch 2.13), which works on the vocabulary shard with element-wise ops instead of the
  fused kernels. `_log_softmax` makes `shifted = x - max`, `exp(shifted)` and the result next to
  the fp32 copy; `_nll_loss_and_log_softmax_backward` returns `(grad_input + exp(x)) *
  grad_output` with `grad_input = zeros_like(x)`: zeros, the sum and the product (the exp freed
  before the product) next to the kept log-probabilities, 12 bytes a logit (measured on the CPU:
  tests/test_census_torchtitan.py), above the forward's 10 (bf16 logits, copy, shifted).
* **The loss's free hole** (what the caching allocator reserves beyond the allocated peak,
  `ppb_core.memory.reserved`): the eager loss's large buffers are laid out in the compute stream's segment
  in the order they are made, each past the last (no free block fits them: the allocator's best fit, then
  pages mapped after the segment's last block, c10/cuda/CUDACachingAllocator.cpp `get_free_block`,
  `find_expandable_block`): the 16-bit logits, their fp32 copy, the log-probabilities. train.py deletes the
  logits and the copy dies with `loss_fn`, leaving one free block of `(bc + 4)` bytes a logit below the kept
  log-probabilities. The backward's first fp32 buffer (`nll_loss`'s zeros) takes its start (a split block
  keeps its start), and the second (`log_softmax`'s gradient) fits neither the `bc` bytes a logit left nor
  the allocated block before the unmapped pages, so it is mapped past the log-probabilities: `bc` bytes a
  logit stay free and reserved at the allocated peak. Under TP's `loss_parallel` (torch 2.13
  distributed/tensor/parallel/loss.py `_log_softmax`, `_nll_loss_and_log_softmax_backward`) the same order
  leaves the same: `shifted` under the result (which takes `exp`'s freed block), a free block of `(bc + 8)`
  bytes a logit, the zeros and `exp(x)` taking 8 of it, their sum mapped on top. Under PP the pipeline keeps
  the logits, and the freed copy fits the first buffer exactly: nothing is left. Compiled, the loss keeps
  the logits: not derived, 0.
* **torch.compile** (`timing.torch_compile`: llama3/infra/parallelize.py `apply_compile`, each block
  `torch.compile(block, fullgraph=True)` after the AC wrapper; `timing.compiled_loss`: components/
  loss.py `build_cross_entropy_loss` when `compile.components` holds `loss`, v0.2.2's default):
  AOTAutograd's partitioner saves what the compiled backward reads. Measured on the CPU (Inductor,
  torch 2.13; `ppb_core.census.torchtitan.measure_block(compiled=True)`, tests/test_census_torchtitan.py):
  a dense block without AC keeps no SiLU output (the SiLU and the product fused, the SiLU recomputed); under
  `op` w2's output, MUST_SAVE but read by no backward (it feeds the residual add), is not kept
  (torch/_functorch/partitioners.py `get_recomputable_banned_nodes` keeps a MUST_SAVE node only at a
  finite `dist_from_bw`), nor, by the same rule, its reduce-scatter under SP; `full` keeps the input
  as eager. The compiled loss saves the bf16 logits and two fp32 statistics a token (max and
  log-sum-exp) and its backward allocates the bf16 gradient, `bc` a logit (without TP; under
  `loss_parallel` the eager rule). MoE blocks keep their eager rules (not measured compiled).
* **The output layer's backward runs without what the loss saved**: autograd releases a node's saved
  tensors once it has run (`retain_graph` unset), so when the output layer's backward forms the
  logits' 16-bit gradient, the log-probabilities (eager) or the logits (compiled) the loss saved are
  gone (checked on the CPU: a weak reference to the logits is dead at the output layer's weight
  gradient, eager and compiled). The TAIL's working set does not stand on them.
* **GEMM workspaces** (`workspaces.py`): PyTorch's two cuBLAS workspaces (forward thread, autograd
  thread), allocated once and kept on every stage.
* **Context parallelism** (torch 2.13's `context_parallel`, `ring.py`): the SDPA node keeps the local
  q, k, v, output and log-sum-exp only; the forward's gathered K, V and fp32 merges and the backward's
  second gather and fp32 dQ, dK, dV sums are workspaces of one layer's attention.
* **Pipeline receive buffers** (torch/distributed/pipelining/stage.py, torch 2.13, `PipelineStage.
  _setup_forward_recv_info` and `_create_grad_recv_info`): every pipeline stage but the first
  allocates one activation receive buffer per micro-batch, every stage but the last one output-
  gradient receive buffer per micro-batch, at the first step, and keeps them (`clear_runtime_states`
  only drops their `.grad`). A buffer is the boundary tensor, `whole_tokens·h·bc` (the block output,
  a sequence shard under TP). An activation buffer in flight is the chunk's first layer's kept input,
  counted there; the others, and every gradient buffer, are held besides. The input gradients
  are not kept (`stage_backward` sets `val.grad = None` once it has read it).
* **Pipeline outputs** (stage.py `forward_one_chunk`): a chunk that is not the last keeps each
  micro-batch's output (the boundary tensor its last block returns, which no block keeps) in
  `fwd_cache` until `backward_one_chunk` pops it: one per micro-batch in flight. Before PyTorch 2.8
  (`framework_release.pytorch`; pytorch/pytorch#153383) every stage also appended every output to
  `output_chunks`, cleared only as the next step starts: all `m` of them, at every moment and the step
  (exact where the stage's last forward runs at its most in flight, as 1F1B's steady state does). Before
  PyTorch 2.10 (#165822's `step(return_outputs=False)`), or before torchtitan passes it (e5ef99aab,
  `framework_release.torchtitan`), the last stage keeps every micro-batch's logits there: `m − in flight`
  beside those in flight.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ppb_core.memory.activations import STATS_BYTES, ActivationTerm, kept, routed_rows
from ppb_core.memory.buffers import BufferTerm, state_buffers
from ppb_core.memory.frameworks.base import FrameworkRules
from ppb_core.memory.frameworks.ring import framework_ring, torch_ring_terms
from ppb_core.memory.frameworks.workspaces import torch_training_workspace_bytes
from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import StaticBytes, _shard
from ppb_core.model.geometry import Geometry, kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, EncoderBodyKind, HeadKind, LayerKind, Mlp, Moe, TailKind
from ppb_core.model.params import LayerParams
from ppb_core.model.switches import LayerType

FP32_BYTES = 4
# The TAIL's terms the loss saves for its own backward, freed when that has run (`freed_before_backward_bytes`).
LOSS_SAVED = ("logits_softmax", "logits", "loss_statistics")
# Bytes per logit the cross-entropy adds beyond the kept fp32 log-probabilities: in the backward,
# nll_loss's gradient and log_softmax's (fp32 each); in the forward, the fp32 copy and the 16-bit
# logits (6 at bf16), less.
LOSS_BACKWARD_BYTES = 2 * FP32_BYTES
# Under loss parallelism (TP): the backward's zeros, their sum with exp(x) and the product, fp32 each.
LOSS_PARALLEL_BACKWARD_BYTES = 3 * FP32_BYTES


def _gated_extra(name: str, rows: float, width: int, bc: int) -> ActivationTerm:
    """The SiLU output `F.silu(w1(x)) * w3(x)` keeps for the product's backward."""
    return ActivationTerm(f"{name}.silu_output", "ffAct", rows * width, bc)


def torchtitan_body_terms(
    kind: BodyKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], prefix: str = ""
) -> tuple:
    """The formulas' terms plus what torchtitan's unfused block keeps on top (module docstring)."""
    bc = setup.dtype_bytes
    extra: list[ActivationTerm] = []
    mlp = kind.mlp
    # compiled, Inductor fuses a dense block's silu and product and the backward recomputes the SiLU
    if isinstance(mlp, Mlp) and mlp.gated and not setup.compiled_blocks:
        extra.append(_gated_extra(f"{prefix}mlp", setup.tokens, per_rank(mlp.intermediate_size, setup.tp), bc))
    if isinstance(mlp, Moe) and mlp.gated:
        rows = next(t.elements for t in terms if t.op == f"{prefix}moe.expert.activation_output")
        extra.append(ActivationTerm(f"{prefix}moe.expert.silu_output", "ffAct", rows, bc))
        if mlp.shared_experts:
            width = mlp.shared_experts * per_rank(mlp.shared_intermediate_size, setup.tp)
            extra.append(_gated_extra(f"{prefix}moe.shared", setup.tokens, width, bc))
    return terms + tuple(extra)


# Marks where the attention kernel runs among a block's matmuls (`_block_ops`).
_SDPA = "attention.sdpa"


def _attention_ops(kind: BodyKind, setup: Geometry) -> list[tuple[str, float, bool]]:
    """The attention's matmuls and kernel in forward order: (name, output elements, with bias).

    GQA (llama3/qwen3 model.py `Attention.forward`): wq, wk, wv, the kernel, wo; the qk norms of
    Qwen3 run between them and are no matmuls. A commit with one wqkv (`Geometry.fused_qkv`): wqkv, the
    kernel, wo. MLA (deepseek_v3/model/model.py `Attention.forward`):
    wq_a then wq_b (or wq without a query LoRA), wkv_a, wkv_b, the kernel, wo. Under TP (torchtitan's
    DeepSeek-V3 plan) the down-projections wq_a and wkv_a are not sharded; the rest are by heads.
    """
    att, tokens = kind.attention, setup.tokens
    heads = per_rank(att.num_heads, setup.tp)
    out = ("attention.wo_output", tokens * kind.hidden_size, att.out_bias)
    if not att.is_mla and setup.fused_qkv:
        # torchtitan's main from 3396a4b37 (models/common/attention.py `FusedQKVLinear`): one wqkv linear
        kv = kv_heads_per_rank(att.num_kv_heads, setup.tp)
        return [
            ("attention.wqkv_output", tokens * (heads + 2 * kv) * att.head_dim, att.qkv_bias),
            (_SDPA, 0.0, False),
            out,
        ]
    if not att.is_mla:
        kv = kv_heads_per_rank(att.num_kv_heads, setup.tp)
        return [
            ("attention.wq_output", tokens * heads * att.head_dim, att.qkv_bias),
            ("attention.wk_output", tokens * kv * att.head_dim, att.qkv_bias),
            ("attention.wv_output", tokens * kv * att.head_dim, att.qkv_bias),
            (_SDPA, 0.0, False),
            out,
        ]
    found = []
    if att.q_lora_rank:
        found += [
            ("attention.wq_a_output", tokens * att.q_lora_rank, False),
            ("attention.wq_b_output", tokens * heads * att.q_head_dim, False),
        ]
    else:
        found.append(("attention.wq_output", tokens * heads * att.q_head_dim, False))
    found += [
        ("attention.wkv_a_output", tokens * (att.kv_lora_rank + att.qk_rope_head_dim), False),
        ("attention.wkv_b_output", tokens * heads * (att.qk_nope_head_dim + att.v_head_dim), False),
        (_SDPA, 0.0, False),
        out,
    ]
    return found


def _mlp_ops(kind: BodyKind, setup: Geometry) -> list[tuple[str, float, bool]]:
    """The MLP's matmuls in forward order. Dense (`FeedForward.forward`, `w2(silu(w1(x)) * w3(x))`):
    w1, w3, w2. MoE (moe/moe.py `MoE.forward`): the router's gate, then the routed experts, which run
    `torch._grouped_mm` (`use_grouped_mm`, the default; not `aten.mm`: neither saved nor counted),
    then the shared experts, a `FeedForward`."""
    mlp, tokens, h = kind.mlp, setup.tokens, kind.hidden_size

    def feed_forward(prefix: str, width: int, gated: bool, bias: bool) -> list[tuple[str, float, bool]]:
        if gated:
            return [
                (f"{prefix}.w1_output", tokens * width, bias),
                (f"{prefix}.w3_output", tokens * width, bias),
                (f"{prefix}.w2_output", tokens * h, bias),
            ]
        return [(f"{prefix}.fc1_output", tokens * width, bias), (f"{prefix}.fc2_output", tokens * h, bias)]

    if isinstance(mlp, Mlp):
        return feed_forward("mlp", per_rank(mlp.intermediate_size, setup.tp), mlp.gated, mlp.bias)
    found = [("moe.router_logits", tokens * mlp.num_experts, False)]
    if mlp.shared_experts:
        width = mlp.shared_experts * per_rank(mlp.shared_intermediate_size, setup.tp)
        found += feed_forward("moe.shared", width, mlp.gated, False)
    return found


def _block_ops(kind: BodyKind, setup: Geometry) -> list[tuple[str, float, bool]]:
    """A block's matmuls and attention kernel in the order its forward runs them."""
    return _attention_ops(kind, setup) + _mlp_ops(kind, setup)


def op_policy_supported(kind: LayerKind) -> bool:
    """Whether the per-op policy applies op by op: every decoder block (torchtitan's Llama, Qwen3,
    DeepSeek-V3 and their MoE layers); not a vision encoder's."""
    return isinstance(kind, BodyKind) and not isinstance(kind, EncoderBodyKind)


def op_policy_saves(kind: BodyKind, geometry: Geometry) -> dict[str, bool]:
    """Each matmul of the block (by its `_block_ops` name, forward order) and whether `_apply_op_sac`
    takes its output from the forward: a bias-free matmul (`aten.mm`) is counted and the odd ones
    (1st, 3rd, ...) are saved (`meta[mm_count_key] % 2 == 0` recomputes the even ones); a matmul
    with a bias (`aten.addmm`) is not counted, and not saved by v0.2.2's per-model lists (no addmm in
    them) but saved by the central list from 114151ad4 (`Geometry.central_save_list`: `_get_save_ops`
    takes torch's `get_default_op_list().compute_intensive_ops`, which holds aten.addmm, as MUST_SAVE; only
    mm and linear alternate). The one rule both the memory model (`op_policy_terms`) and the time model
    (`ppb_core.timing.flops.op_policy_rerun`) follow."""
    saves: dict[str, bool] = {}
    count = 0
    for name, _elements, bias in _block_ops(kind, geometry):
        if name == _SDPA:
            continue
        if not bias:
            count += 1
        saves[name] = geometry.central_save_list if bias else count % 2 == 1
    return saves


def saves_all_to_all(kind: BodyKind, geometry: Geometry) -> bool:
    """Whether the save list holds `_c10d_functional.all_to_all_single` (the expert-parallel dispatch and
    combine): v0.2.2's DeepSeek-V3, Llama 4 and gpt-oss lists do (their infra/parallelize.py
    `_op_sac_save_list`), Qwen3's does not (ppb tells Qwen3, GQA with qk norms, from the others); from
    114151ad4 the one central list holds it for every model (activation_checkpoint.py `_get_save_ops`'s
    comm_ops, `Geometry.central_save_list`)."""
    return geometry.central_save_list or kind.attention.is_mla or not kind.attention.qk_norm


def op_policy_terms(kind: BodyKind, setup: MemorySetup) -> tuple[ActivationTerm, ...]:
    """What `_apply_op_sac` keeps of a block: its input and the outputs of the saved ops.

    Every bias-free matmul counts (`aten.mm`), attention and MLP alike, in forward order; the odd
    ones (1st, 3rd, ...) are saved (`_block_ops`). The SDPA kernel is saved with its outputs (flash:
    the output and the fp32 log-sum-exp; the math kernel: the output and the attention
    probabilities). Under expert parallelism the dispatch and combine all-to-alls' outputs are saved
    where the model's list holds them (`saves_all_to_all`): the rows this rank's experts receive and
    as many sent back (balanced routing). Under sequence parallelism the row-parallel outputs'
    reduce-scatters are saved (`reduce_scatter_tensor`): the attention's and the dense or shared MLP's.
    """
    bc, att, mlp = setup.dtype_bytes, kind.attention, kind.mlp
    heads = per_rank(att.num_heads, setup.tp)
    terms = [ActivationTerm("attention.norm_input", None, setup.whole_tokens * kind.hidden_size, bc)]
    saves = op_policy_saves(kind, setup)
    for name, elements, _bias in _block_ops(kind, setup):
        if name == _SDPA:  # the kernel runs after the projections
            terms.append(ActivationTerm("attention.core_output", None, setup.tokens * heads * att.value_head_dim, bc))
            if setup.flash_attention:
                terms.append(ActivationTerm("attention.softmax_lse", None, setup.tokens * heads, STATS_BYTES, False))
            else:
                scores = setup.tokens * heads * setup.seq_length
                terms.append(ActivationTerm("attention.softmax_output", None, scores, bc))
        elif saves[name]:
            terms.append(ActivationTerm(name, None, elements, bc))
    if isinstance(mlp, Moe) and setup.ep > 1 and saves_all_to_all(kind, setup):
        rows = routed_rows(mlp, setup)
        terms.append(ActivationTerm("moe.dispatched_tokens", None, rows * kind.hidden_size, bc))
        terms.append(ActivationTerm("moe.combined_tokens", None, rows * kind.hidden_size, bc))
    if setup.sp > 1:
        names = ["attention.reduce_scatter_output"]
        if isinstance(mlp, Mlp) or mlp.shared_experts:
            names.append("mlp.reduce_scatter_output")
        for name in names:
            terms.append(ActivationTerm(name, None, setup.whole_tokens * kind.hidden_size, bc))
    if setup.compiled_blocks and isinstance(mlp, Mlp):
        return tuple(t for t in terms if t.op not in COMPILED_UNREAD)
    return tuple(terms)


# What a compiled dense block saves although the policy says MUST_SAVE: the MLP's last matmul output
# (and its reduce-scatter under SP) only feeds the residual add, whose backward reads nothing. torch
# 2.13 torch/_functorch/partitioners.py `get_recomputable_banned_nodes` keeps a MUST_SAVE node only
# where the backward needs it (`dist_from_bw`); measured: tests/test_census_torchtitan.py.
COMPILED_UNREAD = frozenset({"mlp.w2_output", "mlp.fc2_output", "mlp.reduce_scatter_output"})


def compiled_loss(setup: MemorySetup) -> bool:
    """Whether the loss runs compiled as measured: `compile.components` holds loss, without TP (under
    `loss_parallel` the DTensor cross-entropy is not measured compiled; its eager rule applies)."""
    return setup.compiled_loss and setup.tp == 1


def fsdp(setup: MemorySetup) -> bool:
    """Whether FSDP2 shards this run's parameters (a data-parallel group of more than one rank)."""
    return setup.shard_level >= 3 and setup.data_group * setup.expert_data_group > 1


class TorchtitanRules(FrameworkRules):
    name = "torchtitan"
    transients_per_stage = True

    def body_terms(
        self, kind: BodyKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], prefix: str = ""
    ) -> tuple:
        return torchtitan_body_terms(kind, setup, terms, prefix)

    def tail_terms(self, kind: TailKind, setup: MemorySetup, modules: frozenset[str] = frozenset()) -> tuple:
        """The formulas' TAIL; under the compiled loss (`compiled_loss_kept`) its 16-bit logits and two fp32
        statistics a token instead of the fp32 log-probabilities (module docstring)."""
        terms = super().tail_terms(kind, setup, modules)
        if not compiled_loss(setup):
            return terms
        found: list[ActivationTerm] = []
        for term in terms:
            if term.op.endswith("logits_softmax"):
                prefix = term.op.removesuffix("logits_softmax")
                found.append(ActivationTerm(f"{prefix}logits", None, term.elements, setup.dtype_bytes))
                found.append(ActivationTerm(f"{prefix}loss_statistics", None, 2 * setup.tokens, FP32_BYTES, False))
            else:
                found.append(term)
        return tuple(found)

    def freed_before_backward_bytes(
        self, kind: LayerKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...]
    ) -> float:
        """On the TAIL, what the loss saved (the log-probabilities eager, the logits and their statistics
        compiled): autograd releases a node's saved tensors once it has run, so the output layer's
        backward holds the logits' gradient without them (module docstring); under PP the logits stay,
        the stage's output that `backward_one_chunk` holds (`held_after_loss_bytes`)."""
        if not isinstance(kind, TailKind):
            return 0.0
        saved = LOSS_SAVED if setup.pp == 1 else tuple(name for name in LOSS_SAVED if name != "logits")
        return sum(t.bytes for t in terms if t.op.endswith(saved))

    def held_after_loss_bytes(
        self, kind: TailKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], micro_batches: int
    ) -> float | None:
        """Without PP nothing of the TAIL's micro-batch (train.py `forward_backward_step` deletes the
        logits before `loss.backward()`); under PP its 16-bit logits, the stage output that
        `PipelineStage.backward_one_chunk` pops from `fwd_cache` and holds through the stage's whole
        backward (module docstring)."""
        if setup.pp == 1 or not kind.has_output:
            return 0.0
        return setup.dtype_bytes * setup.tokens * per_rank(kind.vocab_size, setup.tp)

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
        # FSDP2's gradient reduce-scatter is in parameter_working_bytes, not a per-layer bucket.
        buffers = tuple(b for b in buffers if b.name != "dp.gradient_bucket")
        buffers = framework_ring(buffers, kind, setup, torch_ring_terms)  # nothing received is kept
        if state is LayerType.SEL_REC_LAYER and "op" in modules and op_policy_supported(kind):
            # the all-gathers are not in the save list: the gathered inputs are rebuilt in the backward
            return op_policy_terms(kind, setup), tuple(b for b in buffers if not b.kept)  # type: ignore[arg-type]
        if state is LayerType.SEL_REC_LAYER:
            terms = kept(terms, switches)
        return terms, state_buffers(buffers, state, switches)

    def static(self, params: LayerParams, setup: MemorySetup, kind: LayerKind | None = None) -> StaticBytes:
        """fp32 parameters, fp32 gradients and optimizer moments without a master copy, sharded by
        FSDP2 over dp·cp (experts over their own group); under PP also the gathered bf16 parameters
        and fp32 gradient accumulators the stage holds through the step (module docstring)."""
        sharded = fsdp(setup)

        def held(group_ok: bool) -> int:
            return _shard(params.non_expert, setup.data_group, group_ok) + _shard(
                params.expert, setup.expert_data_group, group_ok
            )

        elements = held(sharded)
        states = setup.state_bytes if setup.state_bytes_stated else setup.state_bytes - FP32_BYTES
        unsharded = 0
        if sharded and setup.pp > 1:
            unsharded = params.gathered_bytes(setup.dtype_bytes) + params.total * setup.grad_bytes
        return StaticBytes(
            gradients_from_backward=sharded and (setup.pp > 1 or setup.micro_batches == 1),
            parameters=elements,
            gradients=elements,
            optimizer_states=elements,
            parameter_bytes=elements * FP32_BYTES,
            gradient_bytes=elements * setup.grad_bytes,
            optimizer_bytes=elements * states,
            held_through_step_bytes=unsharded,
        )

    def first_backward_bytes(self, params: LayerParams, setup: MemorySetup) -> float:
        """Under PP, the layer's fp32 unsharded gradient accumulators (module docstring, **FSDP2 under
        pipeline parallelism**): part of `static`'s `held_through_step_bytes`, made by its chunk's first
        backward of the step."""
        if not (fsdp(setup) and setup.pp > 1):
            return 0.0
        return float(params.total * setup.grad_bytes)

    def uses_neighbours(self, setup: MemorySetup) -> bool:
        return fsdp(setup) and setup.pp == 1

    def parameter_working_bytes(
        self,
        params: LayerParams,
        setup: MemorySetup,
        node: str,
        gathered: int,
        before: LayerParams | None,
        after: LayerParams | None,
        kind: LayerKind | None = None,
        beside: tuple[str | None, str | None] = (None, None),
    ) -> float:
        """FSDP2's backward of unit U, with V the unit before it (prefetched) and W the one after
        (whose reduce-scatter input is still held): at the end of U's gradient computation
        `2·bc·P_U + bc·P_V + 4·P_W` (U gathered, its bf16 gradients, V gathered, W's fp32
        reduce-scatter input); in U's `post_backward`, U resharded and W's input released, U's own
        fp32 input filled from its gradients: `(bc + 4)·P_U + bc·P_V`. The larger of the two.
        Under PP the parameters stay gathered (static): U's bf16 gradients as they form. A gathered
        unit is `LayerParams.gathered_bytes`: its Float8 linear weights at a byte under the float8
        all-gather (torchao float8/fsdp_utils.py `fsdp_post_all_gather` keeps the gathered float8 data
        as the unsharded weight); their gradients stay bf16. Under `root` units see `_root_working`."""
        if not fsdp(setup):
            return 0.0  # replicate (DDP): gradients live in its buckets, counted as static
        bc, reduce = setup.dtype_bytes, setup.grad_bytes
        own = params.total
        if setup.pp > 1:
            return bc * own
        root = _root_units(setup)
        if root is not None:
            return _root_working(setup, root, params, node, before, after, beside)
        gathered = params.gathered_bytes(bc)
        prefetched = before.gathered_bytes(bc) if before is not None else 0
        reducing = after.total if after is not None else 0
        computing = gathered + bc * own + prefetched + reduce * reducing
        reducing_own = (bc + reduce) * own + prefetched  # U resharded: its bf16 gradients and fp32 input
        return max(computing, reducing_own)

    def workspace_bytes(self, setup: MemorySetup, kinds: Collection[LayerKind] = ()) -> float:
        """PyTorch's cuBLAS workspaces (module docstring)."""
        return float(torch_training_workspace_bytes(setup.compute_capability, setup.cublas_workspace_bytes))

    def pipeline_buffer_bytes(
        self, setup: MemorySetup, kinds: Collection[LayerKind], micro_batches: int, in_flight: int
    ) -> float:
        """The receive buffers of a pipeline chunk beyond its in-flight inputs (module docstring)."""
        hidden = max((kind.hidden_size for kind in kinds if isinstance(kind, BodyKind)), default=0)
        if setup.pp == 1 or not hidden:
            return 0.0
        boundary = setup.whole_tokens * hidden * setup.dtype_bytes
        found = 0.0
        if not any(isinstance(kind, HeadKind) for kind in kinds):  # not the first stage: activations come in
            found += (micro_batches - in_flight) * boundary
        tails = [kind for kind in kinds if isinstance(kind, TailKind)]
        if not tails:  # not the last: output gradients come in, and its outputs wait for their backward
            found += micro_batches * boundary
            kept = in_flight if setup.release.holds("pp_output_chunks_last_only") else micro_batches
            found += kept * boundary
        elif not (
            setup.release.holds("pp_step_return_outputs") and setup.release.holds("torchtitan_pp_return_outputs")
        ):
            # the last stage: every micro-batch's logits to the next step
            vocab = max((kind.vocab_size for kind in tails if kind.has_output), default=0)
            found += (micro_batches - in_flight) * setup.dtype_bytes * setup.tokens * per_rank(vocab, setup.tp)
        return found

    def reduction_bytes(
        self, setup: MemorySetup, units: Sequence[LayerParams], nodes: Sequence[str] = ()
    ) -> float | None:
        """FSDP2's `perform_reduce_grad` under PP, unit by unit (module docstring); None otherwise. Under
        `root` units the stage's embedding, final norm and output layer are one unit, the root's state
        first in `all_states` (pre-order), then the blocks."""
        if not fsdp(setup) or setup.pp == 1 or not units:
            return None
        if setup.fsdp_units == "root" and len(nodes) == len(units):
            rooted = [unit for unit, node in zip(units, nodes, strict=True) if node in ("HEAD", "TAIL")]
            blocks = [unit for unit, node in zip(units, nodes, strict=True) if node not in ("HEAD", "TAIL")]
            units = [sum(rooted, LayerParams()), *blocks] if rooted else blocks
        bc, reduce = setup.dtype_bytes, setup.grad_bytes
        held = sum((bc + reduce) * unit.total for unit in units)  # gathered + accumulators of units not yet reduced
        # the step's static memory holds every unit's sharded gradients; a unit's reduce-scatter forms its own
        sharded = [self.static(unit, setup).gradient_bytes for unit in units]
        unformed = sum(sharded)
        found = 0.0
        for unit, gradients in zip(units, sharded, strict=True):
            unformed -= gradients
            found = max(found, held - bc * unit.total + reduce * unit.total - unformed)
            held -= (bc + reduce) * unit.total
        return found

    def loss_bytes(
        self, kind: TailKind, params: LayerParams, setup: MemorySetup, before: LayerParams | None = None
    ) -> float:
        logits = setup.tokens * per_rank(kind.vocab_size, setup.tp)
        if compiled_loss(setup):
            # the compiled backward's one allocation a logit: the 16-bit gradient (and fp32 a token);
            # the logits the pipeline's forward cache keeps are the ones the TAIL keeps already
            extra = setup.dtype_bytes * logits + FP32_BYTES * setup.tokens
        else:
            extra = (LOSS_PARALLEL_BACKWARD_BYTES if setup.tp > 1 else LOSS_BACKWARD_BYTES) * logits
            if setup.pp > 1:
                extra += setup.dtype_bytes * logits  # the pipeline keeps the logits for the backward
        if setup.pp > 1:
            return extra
        root = _root_units(setup)
        if root is not None:  # the root resharded after the model's forward, the last block not
            extra += root[2].gathered_bytes(setup.dtype_bytes)
            if not setup.release.holds("fsdp2_root_reshards"):  # before PyTorch 2.8 the root stays gathered
                extra += (root[0] + root[1]).gathered_bytes(setup.dtype_bytes)
            return extra
        if fsdp(setup):
            extra += setup.dtype_bytes * params.total  # norm and output layer gathered, not resharded
        return extra

    def loss_hole_bytes(self, kind: TailKind, setup: MemorySetup) -> float:
        """What the eager loss without PP leaves free, but reserved, below its fp32 buffers as its backward
        peaks: the 16-bit logits' bytes (module docstring, **The loss's free hole**); 0 compiled or under PP."""
        if setup.pp > 1 or compiled_loss(setup) or not kind.has_output:
            return 0.0
        return setup.dtype_bytes * setup.tokens * per_rank(kind.vocab_size, setup.tp)


def _root_units(setup: MemorySetup) -> tuple[LayerParams, LayerParams, LayerParams] | None:
    """(embedding, final norm with output layer, last block) under `root` FSDP2 units without PP."""
    if setup.fsdp_units != "root" or setup.pp > 1 or not fsdp(setup):
        return None
    return setup.fsdp_root


def _root_working(
    setup: MemorySetup,
    root: tuple[LayerParams, LayerParams, LayerParams],
    params: LayerParams,
    node: str,
    before: LayerParams | None,
    after: LayerParams | None,
    beside: tuple[str | None, str | None],
) -> float:
    """A backward's parameters and gradients under `root` units without PP (module docstring, **FSDP2
    units by version**): the root gathered again at the logits' backward and its output layer's and
    final norm's bf16 gradients, held to the final callback, beside every unit's own working set; no
    block prefetches the embedding (in the root) and the last block waits on no reduce-scatter of the
    output layer (the root reduces last). The embedding's backward forms its bf16 gradients next to
    the first block's fp32 reduce-scatter input; the final callback then reshards the root and fills
    its fp32 reduce-scatter input from its gradients."""
    bc, reduce = setup.dtype_bytes, setup.grad_bytes
    head, tail, _last = root
    held = head.gathered_bytes(bc) + tail.gathered_bytes(bc) + bc * tail.total
    prefetched = before.gathered_bytes(bc) if before is not None and beside[0] != "HEAD" else 0
    if node == "TAIL":  # the last block, not resharded after the forward, is still gathered
        return held + prefetched
    if node == "HEAD":
        forming = held + bc * head.total + (reduce * after.total if after is not None else 0)
        return max(forming, (bc + reduce) * (head.total + tail.total))
    own = params.total
    reducing = after.total if after is not None and beside[1] != "TAIL" else 0
    computing = params.gathered_bytes(bc) + bc * own + prefetched + reduce * reducing
    return held + max(computing, (bc + reduce) * own + prefetched)


__all__ = ["TorchtitanRules", "op_policy_saves", "op_policy_supported", "op_policy_terms", "torchtitan_body_terms"]
