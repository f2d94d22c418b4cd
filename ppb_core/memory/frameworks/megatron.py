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
* **Ring attention keeps one key/value chunk.** Transformer Engine's
  `AttnFuncWithCPAndKVP2P` (transformer_engine/pytorch/attention/dot_product_attention/
  context_parallel.py) saves q, the last chunk received (freeing the local one), out and the softmax
  statistics; its backward circulates the key/value chunks around the ring again. What its forward
  and backward hold meanwhile (every step's K, V and output; the dQ and K, V / dK, dV buffers) is
  `ring.py`'s.
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
  the experts keep their rows' probabilities (`moe.expert.probs`, one per routed row). The fused
  weighting is SwiGLU's (and quick GEGLU's) alone: a non-gated activation (GeLU) takes the unfused
  branch of `bias_act_func` (`TransformerConfig.__post_init__` refuses `bias_activation_fusion` for a
  bias-free GeLU, and `TEGroupedMLP` for any non-gated one, so such a run passes
  `--no-bias-gelu-fusion`), `intermediate = activation_func(fc1_output)` then `intermediate *
  permuted_probs`: the product saves the activation's output for the probabilities' gradient, and
  the down-projection saves the product, its input. The experts keep both
  (`moe.expert.unweighted_activation`, `[rows, ffn/etp]` in the training dtype, beside
  `moe.expert.activation_output`); `moe_act` recompute drops both. Before 2659630721 (2025-04-09,
  `framework_release`) the combine weighted the experts' outputs instead and saved them, SAPP's
  `moe.combined_tokens` (`combine_weighs`); the probabilities it saved are the same count.
* **Static memory** is SAPP's: bf16 parameters, the contiguous fp32 `main_grad` buffer
  (megatron/core/distributed/param_and_grad_buffer.py, `_ParamAndGradBuffer` and
  `group_params_for_buffers`: `grad_dtype = torch.float if grad_reduce_in_fp32`; the buffer is
  whole on every rank, the distributed optimizer reduce-scatters into its shard in place), the
  fp32 main parameters and Adam moments sharded by the distributed optimizer (ZeRO-1).
* **A 16-bit gradient buffer's fp32 main gradients are copies.** The buffer is fp32 where
  `accumulate_allreduce_grads_in_fp32` holds (`DistributedDataParallelConfig.grad_reduce_in_fp32`,
  training.py): bf16's default (arguments.py `validate_args`), not fp16's nor `--grad-reduce-in-bf16`'s
  nor `--main-grads-dtype bf16`'s (`training.grad_bytes: 2`). Then the mixed-precision optimizers'
  `_copy_model_grads_to_main_grads` (optimizer/optimizer.py `Float16OptimizerWithFloat16Params`,
  distrib_optimizer.py `DistributedOptimizer`) set each fp32 main parameter's `.grad` to
  `main_grad.float()`, a new fp32 tensor (the same tensor when the buffer is fp32), over the
  parameters whose optimizer states the rank holds; it lives from the step to the next iteration's
  `zero_grad` (set to None): 4 bytes a parameter at the optimizer moment (`step_only_bytes`).
* **The gradient reduction is no moment of its own.** `_ParamAndGradBucketGroup.start_grad_sync`
  (megatron/core/distributed/param_and_grad_buffer.py) reduce-scatters each bucket's `grad_data`
  into `local_data_view`, this rank's shard of that same buffer (`shard_buffer`), or all-reduces
  it in place without the distributed optimizer: it allocates nothing. Without
  `--overlap-grad-reduce` it runs from `finalize_model_grads` after the last backward, with what the
  optimizer step holds (static memory, each chunk's last input and its gradient, the dispatcher
  state): that moment's bytes + 0. With it, it runs inside the backward: that moment's + 0. So
  neither exceeds the moments already counted (`reduce_scatter_with_fp32_accumulation`, which
  stages an all-to-all output, is not modelled).
* **The loss** (megatron/core/tensor_parallel/cross_entropy.py `_VocabParallelCrossEntropy`, and
  the fused megatron/core/fusions/fused_cross_entropy.py): the logits are upcast to an fp32 copy
  that becomes, in place, the softmax saved for the backward (the TAIL's `logits_softmax`);
  while it is built, the 16-bit logits of the output layer are alive next to it, and in the
  backward the output layer casts the fp32 gradient (the softmax storage) to 16 bits again:
  either way `bc·T·⌈v/t⌉` beyond what the tail keeps. Under `--cross-entropy-loss-fusion` (the
  default `--cross-entropy-fusion-impl native`) the backward is `calculate_gradients`, a
  `jit_fuser` function, which is `torch.compile` from torch 2.2 on (megatron/core/jit.py
  `enable_jit_fuser`): its `grad_2d[arange_1d, masked_target_1d] -= softmax_update` on a view of
  the saved softmax stays a functional `index_put` after Inductor's reinplacing (the input is
  written again by the later `mul_`'s copy-back), so Inductor scatters into a fresh fp32 copy of
  the softmax and returns the 16-bit gradient beside it: `(4 + bc)·T·⌈v/t⌉` (post-grad graph and
  generated code read with torch 2.13 on the CPU; the buffers are the lowering's, not the
  device's). The plain path does both in place, eagerly.
* **Transformer Engine's fused loss** (`--cross-entropy-loss-fusion --cross-entropy-fusion-impl te`,
  models/common/language_module/language_module.py `compute_language_model_loss` → extensions/
  transformer_engine.py `te_parallel_cross_entropy`, core_v0.17.0; TE v2.14.1 pytorch/cross_entropy.py
  `CrossEntropyFunction.forward` and pytorch/triton/cross_entropy.py `cross_entropy_forward`): the Triton
  kernel reads the 16-bit logits and writes their gradient into that same tensor, which the function saves
  (`ctx.save_for_backward(inp.detach())`); the backward scales it in place. So the TAIL keeps the logits at
  the training dtype and no fp32 softmax, and the loss adds only its per-row fp32 buffers beside them: the
  loss (4 bytes a token), each row's max, sum and target logit (12), and under TP their all-gather over the
  group (12·t): `te_loss_row_bytes`; the data loader's mask as above.
* **The fused loss's first call under PyTorch before 2.6.** `jit_fuser` compiles with Inductor (PyTorch 2.2
  on, megatron/core/jit.py), and at a kernel's first call Inductor's `CachingAutotuner` benchmarks every
  config of a kernel that has several (a one-dimensional pointwise kernel has two unless
  `torch.use_deterministic_algorithms`, which `--deterministic-mode` sets: runtime/triton_heuristics.py
  `pointwise`, `disable_pointwise_autotuning`), each run on device clones of the arguments the kernel
  mutates (`CachingAutotuner.bench` → `clone_args`, PyTorch 2.5.0) inside Triton's `do_bench`, which holds a
  256e6-byte L2 flush buffer throughout (triton/testing.py, 3.1.0). `calculate_gradients`' last kernel
  writes the saved fp32 softmax in place: while the scatter copy and the 16-bit gradient are alive, its
  autotuning adds `4·T·⌈v/t⌉ + 256e6` bytes, once, in the first iteration, before the first optimizer
  step has made Adam's moments (`first_call_bytes`, the stage's `first_loss` moment). PyTorch 2.6
  (`framework_release.pytorch`) copies such arguments to the host where a clone would raise the peak
  (`copy_args_to_cpu_if_needed`), and later releases flush with an L2-sized buffer: not counted there.
  `torch.cuda.max_memory_allocated()`, which Megatron logs, keeps that first-iteration peak.
* **The data loader's causal mask.** With `--create-attention-mask-in-dataloader` (the default) each
  sample carries a bool `[1, s, s]` causal mask (megatron/core/datasets/gpt_dataset.py
  `_get_ltor_masks_and_position_ids`), which `pretrain_gpt.py` `get_batch` puts on the device of the
  first and last stages (`get_batch_on_this_tp_rank`; `get_batch_on_this_cp_rank` keeps this CP rank's
  queries, `b·(s/cp)·s` bytes) and `forward_step` holds through the micro-batch's forward, loss included:
  the Transformer Engine spec's causal attention reads none of it and keeps nothing of it, and it is freed
  when `forward_step` returns. So the loss's forward holds it beside the logits (`loss_bytes`).
* **An MTP head's logits through the model's loss (Megatron-Core 0.15 and 0.16).** From d7bf5aaaa8
  (2025-08-26) `GPTModel._postprocess` runs each MTP head's output layer and cross-entropy in its own loop,
  and its local `mtp_logits` (the last head's 16-bit logits, which the loss does not save) stays alive
  through the model's own output layer and loss's forward until the function returns (gpt_model.py at
  11debfa7b4, the golden values of the CI's MoE-MLA memory_speed case); 9d71cb1cd2 (2026-02-04,
  core_v0.17.0) moved the loop into multi_token_prediction.py `process_mtp_loss`, whose return frees them,
  and before d7bf5aaaa8 `MultiTokenPredictionBlock.forward` dropped them on its return. So in between the
  loss's forward holds `bc·T·⌈v/t⌉` more (`loss_bytes`; `releases.CHANGES["mtp_loss_frees_logits"]`), not
  under TE's loss, whose MTP heads save their logits anyway. The measured case holds no more at its peak:
  its fused loss's backward, with the scatter copy, is the larger.
* **The loss's stage after the loss.** Both cross-entropies save the fp32 softmax, the target mask and
  the masked target index (`ctx.save_for_backward`); their backward returns the softmax storage as
  the gradient, which autograd casts to the 16-bit logits' dtype (the fp32 one then dropped) and
  releases the saved tensors (`retain_graph` unset). The output layer
  (`LinearWithGradAccumulationAndAsyncCommunication`) saves its input and weight, the final norm its
  input; both go as their backwards run. The logits themselves are saved by nothing (gpt_model.py
  `_postprocess` hands them to `compute_language_model_loss` and returns the loss), and on the last
  stage the schedule holds only that loss (pipeline_parallel/schedules.py `forward_step`,
  `backward_step`'s `custom_backward` of it). So the output layer's backward runs without the softmax
  (`freed_before_backward_bytes`), and the blocks under the TAIL run that micro-batch's backward
  without any of the TAIL's kept tensors (`held_after_loss_bytes` 0; under the deferral below, that
  micro-batch's output-layer input and logits' gradient where it is deferred too).
* **Deferred output-layer weight gradients.** Under `--defer-embedding-wgrad-compute` the output
  layer (`ColumnParallelLinear` with `embedding_activation_buffer` and `grad_output_buffer`,
  gpt_model.py) appends its input in the forward (`ColumnParallelLinear.forward`) and its output's
  gradient, the 16-bit logits' gradient `[T, ⌈v/t⌉]`, in the backward
  (`LinearWithGradAccumulationAndAsyncCommunication.backward`, skipping the weight-gradient GEMM) for
  the first `--wgrad-deferral-limit` micro-batches (0: every one), megatron/core/tensor_parallel/
  layers.py; `finish_embedding_wgrad_compute` (pipeline_parallel/schedules.py) runs them at the
  pipeline's flush (utils.py `drain_embedding_wgrad_compute`), before the step. On the stage of the
  loss, the last micro-batch's loss and backward run beside min(limit, m − 1) of them:
  `(T·⌈v/t⌉ + T/sp·h)·bc` each (`deferred_bytes`; an MTP head's pass through the same output layer
  would count against the limit too, not modelled). Under sequence parallelism the flush gathers each
  deferred input into Megatron's global buffers "mpu_0" and "mpu_1" (utils.py `drain_embedding_wgrad_compute`),
  `T·h·bc` each, kept from then on (`drain_buffer_bytes`, among the stage's workspaces).
* **GEMM workspaces** (`workspaces.py`): PyTorch's two cuBLAS workspaces (forward thread, autograd
  thread) and Transformer Engine's, allocated once and kept on every stage; under `--tp-comm-overlap`
  (userbuffers: sequence parallelism, `timing.overlap.tp` above 0) TE's three more for the overlapped
  GEMMs; on a stage that runs
  routed experts as one `TEGroupedMLP` (`--moe-grouped-gemm`, `training.moe.grouped_gemm`), TE's
  grouped GEMM's four more; without it (Megatron's default) the experts are a `SequentialMLP` of
  TE linears, on TE's one workspace (extensions/transformer_engine_spec_provider.py
  `grouped_mlp_modules`). Under `--transformer-impl local` an MoE stage still holds TE's workspace
  where Transformer Engine is installed (as in Megatron's containers): the router's
  `RouterGatingLinearFunction` (moe/moe_utils.py) runs `te_general_gemm`, which takes TE's
  `get_workspace()` (extensions/transformer_engine.py).
* **cuDNN's deterministic attention backward takes a dS workspace** (`workspaces.
  cudnn_dp_workspace_bytes`): under `--deterministic-mode` with NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 on
  Hopper and sm100 (`CUDNN_DETERMINISTIC_CAPABILITIES`), Transformer Engine's cuDNN backward runs the
  dP-workspace path and allocates its workspace, b·heads·s²·2 bytes, from PyTorch's caching allocator
  for the kernel's duration (pytorch/csrc/extensions/attention.cpp `fused_attn_bwd`). It is held while one body layer's
  attention backward runs: on the stage holding the loss, the first backward reaches it after the
  loss's backward has freed the TAIL's kept activations of that micro-batch (`stage_peaks`).
* **A pipeline chunk keeps its last received input and that input's gradient.** The schedules
  hand each micro-batch's received activation to the chunk with `set_input_tensor`
  (megatron/core/pipeline_parallel/schedules.py `forward_step`), which stores it on the chunk's
  `TransformerBlock.input_tensor` (megatron/core/transformer/transformer_block.py
  `set_input_tensor`) until the next micro-batch's replaces it; `backward_step` calls
  `retain_grad()` on it, so after its backward the tensor also carries its `.grad`. A chunk with
  none of its micro-batches in flight (and at the optimizer step every chunk that receives its
  input, all but the first stage's first) holds both: `2·whole_tokens·h·bc`. With micro-batches in
  flight the stored input is the latest one, which its first layer keeps anyway.
* **The router computes in `--moe-router-dtype`** (moe/router.py `TopKRouter.gating`:
  `router_gating_linear(..., router_dtype)`; moe_utils.py `topk_routing_with_score_function` keeps
  the scores and probabilities in the logits' dtype): the router's kept scores and top-k
  probabilities are in it.
* **The token dispatcher keeps its last micro-batch's routing.** `MoEAlltoAllTokenDispatcher.
  dispatch_preprocess` (megatron/core/transformer/moe/token_dispatcher.py) stores the router's
  `probs` and `routing_map` (`[tokens, experts]`, the probabilities in the router's dtype,
  `--moe-router-dtype`: moe_utils.py `topk_routing_with_score_function` scatters them into a dense
  tensor `type_as(logits)`; the map bool) and `permute`'s reverse mapping
  (`reversed_local_input_permutation_mapping`) on the dispatcher until the layer's next forward
  replaces them: held at every moment, the optimizer step included. The mapping is what the
  permutation saves for its backward, one per micro-batch in flight (`moe.row_map`): with
  `--moe-permute-fusion` Transformer Engine's `row_id_map`, `[tokens, 2·experts + 1]` int32
  (transformer_engine/pytorch/triton/permutation.py `make_row_id_map`, saved by
  pytorch/permutation.py `_moe_permute_mask_map_setup_context`), unfused the sorted indices, one
  int64 per routed copy (moe_utils.py `permute`, `index_select`). Tokens are the layer's sequence
  shard (the dispatcher gathers over TP after its all-to-all). DeepEP's `MoEFlexTokenDispatcher`
  keeps other tensors (`_DeepepManager`: top-k probabilities and indices, the received tokens'
  routing map and mapping), not counted.
* **The all-gather token dispatcher** (`--moe-token-dispatcher-type allgather`, Megatron's default;
  `timing.moe_dispatcher: allgather`), token_dispatcher.py `MoEAllGatherTokenDispatcher`:
  `token_dispatch` all-gathers the layer's tokens over the expert-tensor × expert-parallel group
  into Megatron's global "mpu" buffer (`gather_from_sequence_parallel_region(...,
  use_global_buffer=True)`, tensor_parallel/mappings.py `_gather_along_first_dim`), which is never
  freed: `whole_tokens·etp·ep·h·bc` among the buffer's requests (**The output layer's gathered input**
  below); the experts' rows are permuted out of it (the same kept rows as the all-to-all brings). Its
  module state is its own (`dispatch_postprocess`: `local_map`, the local experts' columns of the
  gathered map, `local_probs`, one per row, and the reverse mapping over the gathered rows:
  `allgather_state_bytes`), and each micro-batch in flight keeps that mapping and `masked_select`'s
  mask `[local experts, T]` (`allgather_row_map`, `moe.local_map`). `token_combine`
  reduce-scatters the unpermuted outputs cast to the probabilities' dtype
  (`hidden_states.to(self.local_probs.dtype)`), so its backward all-gathers the gradient in that dtype
  and casts it back: `whole_tokens·etp·ep·h·(pb + bc)` is the layer's expert-parallel workspace, in
  place of the all-to-all's staging.
* **The local implementation's softmax in fp32.** `--transformer-impl local` with unfused attention
  runs `FusedScaleMaskSoftmax` (megatron/core/fusions/fused_softmax.py): its fused kernel where
  `is_kernel_available` (the fusion on, `16 < s ≤ 4096`, `s % 4 == 0`, `b·heads/t % 4 == 0`), which
  keeps a 16-bit output; otherwise `forward_torch_softmax`, which upcasts the scores to fp32 under
  `attention_softmax_in_fp32` (`--attention-softmax-in-fp32`, or `--apply-query-key-layer-scaling`:
  `TransformerConfig.__post_init__`) and runs `torch.nn.Softmax`, whose fp32 output its backward
  keeps before the 16-bit cast the dropout and the `bmm` take: `attention.softmax_output` in 4 bytes.
* **Unfused rotary embedding keeps its cos and sin.** Under `--no-rope-fusion` (or where the fused
  kernel does not apply) `apply_rotary_pos_emb` runs `_apply_rotary_pos_emb_bshd` (megatron/core/
  models/common/embeddings/rope_utils.py), which builds `cos_ = (cos(freqs)·mscale).to(t.dtype)` and
  `sin_` afresh, `[s/cp, 1, 1, d]`, for each call, and `t·cos_ + rotate_half(t)·sin_` keeps both for
  the backward (the products' gradient with respect to `t`); a layer calls it for the query and the
  key (transformer/attention.py `Attention.forward`; MLA's `get_query_key_value_tensors`, on the
  rotary part `qk_pos_emb_head_dim`): `4·(s/cp)·d·bc` a layer and micro-batch, whatever the
  micro-batch size. MLA runs it inside the `mla_up_proj` checkpoint. With rope fusion the fused
  kernels keep the cached tables only.
* **Flash-attn 2 keeps its own output.** Below sm90 Transformer Engine runs flash-attn 2
  (`MegatronRules.attention_workspace_bytes`). TE's `FlashAttention.forward` (transformer_engine/
  pytorch/attention/dot_product_attention/backends.py, d0067d0d; attention.py at v1.12 and v2.2 alike) hands
  it bshd q, k, v and returns `output.view(b, s, -1).transpose(0, 1)` made `.contiguous()`, a fresh sbhd copy
  the output projection saves as its input, while flash-attn's `FlashAttnFunc.forward` (Dao-AILab/
  flash-attention flash_attn/flash_attn_interface.py, 00530025) saves its own bshd `out_padded`. cuDNN's
  `FusedAttention` (sm90 on) returns a view of the output it saved. So on sm80 a layer keeps the attention's
  output twice (`flash2_output_terms`), but for a micro-batch of one sequence: `[1, s, hd]` transposed to
  `[s, 1, hd]` is contiguous (PyTorch's contiguity check skips size-1 dimensions, c10 TensorImpl
  `compute_contiguous`), so `.contiguous()` returns flash-attn's own output and the projection saves that
  one. Under ring CP the same: `attn_forward_func_with_cp` is called with
  `qkv_format="bshd"`, `AttnFuncWithCPAndKVP2P` saves the bshd `out_f16` it returns (context_parallel.py),
  and TE makes the same sbhd copy. Not under Ulysses CP. Under MLA (`head_dim_qk != head_dim_v`) TE's
  `DotProductAttention.forward` (dot_product_attention.py, d0067d0d) runs flash-attn 2 (`get_attention_backend`,
  utils.py, keeps it where the padded dimension `max(qk, v)` is a multiple of 8 and at most 256, on sm80 and
  sm90 alike) through `_pad_qkv_head_dim`: `F.pad` widens v (or q and k) to `max(qk, v)`, and flash-attn saves
  those padded bshd copies and a bshd output of that width; `_trim_output` slices TE's sbhd copy back to
  `v` and `.reshape` copies it (the output projection's input, `attention.core_output`), the wide sbhd copy
  is freed. So a DeepSeek layer (192, 128) keeps `T·(a/t)·192` of output and `T·(a/t)·64` of v's zeros more.
* **Flash-attn's backward transients.** On that path (`MegatronRules.attention_backward_gradient_bytes`,
  no CP) the backward's gradients reach flash-attn through views: TE's `.contiguous()` sbhd output and the
  bshd `.transpose(0, 1)` are undone by views whose last dimension stays contiguous, so flash-attn's
  `maybe_contiguous` copies no dout (flash_attn_interface.py `_flash_attn_backward`, 0251105a).
  `FlashAttnFunc.backward` allocates bshd `dq, dk, dv` (`torch.empty_like`) and `mha_bwd` its workspace
  (`attention_workspace_bytes`) while the output projection's dgrad and the gradient arriving at the layer
  are alive; the dgrad is freed when the node returns, then Megatron's `SplitAlongDim` (TE utils.py
  `SplitAlongDim.backward`: separate tensors, no no-op view) `torch.cat`s dq, dk, dv into a fresh sbhd dQKV
  (`_PrepareQKVForFA.backward`'s `fa_prepare_bwd` makes the same copy where TE ran it). The attention
  backward's moment is the larger of the two, in place of the layer's largest gradient with the workspace on
  top (`MemoryModel.attention_backward_bytes`). Under MLA the kernel's, at the padded width, only.
* **MLA's YaRN rotary tables.** `MultiLatentAttention.__init__` (megatron/core/transformer/
  multi_latent_attention.py) builds a `YarnRotaryEmbedding` per layer (`rope_type` "yarn", the MLA
  default: transformer_config.py `MLATransformerConfig`), which registers cos and sin buffers of
  `original_max_position_embeddings` (4096, no training flag sets it) × the rotary dimension,
  this CP rank's rows (models/common/embeddings/yarn_rotary_pos_embedding.py `_set_cos_sin_cache`),
  cast to the training dtype with the model (module.py `Float16Module`,
  `convert_module_to_dtype_except_fp32_marked` casts buffers too). Without rope fusion the layer's
  forward calls `YarnRotaryEmbedding.forward`, an `lru_cache` (32 entries a process) that keeps the
  fp32 frequencies `[s/cp, 1, 1, d]` it returned; with rope fusion (the default)
  `get_cached_cos_sin` rebuilds the tables at the sequence length in the activations' dtype
  (through the same cached `forward`) where the dtype or the length differs from the init's.
* **Fine-grained activation offloading** (`--fine-grained-activation-offloading --offload-modules`,
  `training.offload_modules`): what each group moves to host memory and what stays on the device,
  `offload.py` (`MegatronRules.offload_split`).
* **The output layer's gathered input is a persistent buffer.** The output layer is Megatron's own
  `ColumnParallelLinear` (gpt_model.py), whose `LinearWithGradAccumulationAndAsyncCommunication.
  forward` all-gathers a sequence-parallel input into `get_global_memory_buffer().get_tensor(...,
  "mpu")` (megatron/core/tensor_parallel/layers.py); `GlobalMemoryBuffer.get_tensor`
  (megatron/core/utils.py) allocates the largest size asked for and never frees it: `T·h·bc` held
  from then on by the stage holding the TAIL, under sequence parallelism. Under
  `--transformer-impl local` every layer's linears are Megatron's own (the same gather into the
  same buffer), and its unfused `DotProductAttention.forward` (megatron/core/transformer/
  dot_product_attention.py) takes the `baddbmm` input `[b·heads/t, s, s]` from it too: the buffer
  is the largest of these requests. The local implementation runs no Transformer Engine GEMM, so
  it holds no TE workspace.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from ppb_core.memory.activations import INDEX_BYTES, STATS_BYTES, ActivationTerm, kept, routed_rows
from ppb_core.memory.buffers import BufferTerm, state_buffers
from ppb_core.memory.frameworks.base import FULL_UNIT, FrameworkRules
from ppb_core.memory.frameworks.dummy_wgrad import dummy_wgrad_bytes
from ppb_core.memory.frameworks.flex_buffers import flex_buffer_bytes
from ppb_core.memory.frameworks.layer_wise import extra_state_bytes
from ppb_core.memory.frameworks.megatron_fsdp import backward_working_bytes, preserved_bytes
from ppb_core.memory.frameworks.muon import MUON_SAVING_BYTES, matrix_params
from ppb_core.memory.frameworks.offload import forward_held_bytes, offload_split
from ppb_core.memory.frameworks.ring import framework_ring, te_ring_terms
from ppb_core.memory.frameworks.te_fp8 import fp8_parameter_extra_bytes, workspace_bytes
from ppb_core.memory.frameworks.workspaces import (
    CUDNN_DETERMINISTIC_CAPABILITIES,
    TE_COMPUTE_STREAMS,
    TE_UB_STREAMS,
    cudnn_dp_workspace_bytes,
    flash2_backward_workspace_bytes,
    torch_training_workspace_bytes,
    transformer_engine_workspace_bytes,
)
from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import StaticBytes, static_bytes
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import MTP_PART, OUTPUT_PART, BodyKind, EncoderBodyKind, HeadKind, LayerKind, Moe, TailKind
from ppb_core.model.params import LayerParams
from ppb_core.model.switches import LayerType

# triton/testing.py `do_bench` (Triton 3.1.0, PyTorch 2.5.0's pin): `torch.empty(int(256e6 // 4), dtype=torch.int)`,
# the L2 flush buffer held while Inductor benchmarks a kernel (`fast_flush=True`)
TRITON_FLUSH_BYTES = 256_000_000

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


def clamp_terms(moe: Moe, setup: MemorySetup, prefix: str = "") -> tuple[ActivationTerm, ...]:
    """What GPT-OSS's clamp keeps beside fc1's output in the grouped experts (`TEGroupedMLP`).

    `weighted_bias_quick_geglu_impl` (megatron/core/fusions/fused_bias_geglu.py, core_v0.17.0 and 0d8e0714cd)
    clamps the two halves of fc1's output eagerly and `torch.cat`s them: each `clamp` saves its input, a view of
    fc1's output (`clamp_backward` needs it: nothing new), and the fused quick-GEGLU saves its own input, the
    cat's output, `[rows, 2·ffn/etp]` in the training dtype: a copy beside fc1's output
    (`moe.expert.gate_up_output`). Under `moe_act` recompute the activation runs in `CheckpointWithoutOutput`,
    which keeps only its input: the copy is an `ffAct` term. A SequentialMLP's experts are not priced with it."""
    if not moe.clamp or not moe.gated or moe.activation != "quick_geglu" or not setup.moe_grouped_gemm:
        return ()
    width = per_rank(moe.expert_intermediate_size, setup.etp)
    rows = routed_rows(moe, setup)
    return (ActivationTerm(f"{prefix}moe.expert.clamped_input", "ffAct", rows * 2 * width, setup.dtype_bytes),)


def allgathered_rows(setup: MemorySetup) -> float:
    """Tokens `MoEAllGatherTokenDispatcher.token_dispatch` gathers over the expert-tensor × expert-parallel
    group (the layer's sequence shard from each of its etp·ep ranks), 0 where that group is one rank."""
    group = setup.etp * setup.ep
    return setup.whole_tokens * group if group > 1 else 0.0


def combine_weighs(setup: MemorySetup, *dispatchers: str) -> bool:
    """Whether the token dispatcher's combine weights the experts' outputs by their probabilities, as
    Megatron-Core did before 2659630721 (2025-04-09, core_v0.13.0, "Memory efficient token permutation";
    `framework_release`): the all-to-all dispatcher's `unpermute(..., probs=self.probs)` and the all-gather
    dispatcher's `hidden_states * permuted_probs` (token_dispatcher.py and moe_utils.py at cb12e3dea4) save
    the expert outputs for the probabilities' gradient, and the experts keep no probabilities and weight
    nothing (experts.py there). From that commit the experts weight their own activations (module
    docstring). The other dispatchers are priced as d98e8a64 runs them (*dispatchers*: these only)."""
    among = dispatchers or ("alltoall", "allgather")
    return setup.moe_dispatcher in among and not setup.release.holds("experts_weight_probs")


def megatron_buffers(buffers: tuple[BufferTerm, ...], setup: MemorySetup, hidden: int) -> tuple[BufferTerm, ...]:
    """SAPP's buffers as Megatron-Core holds them: gathered inputs and ring chunks are not kept; under
    the all-gather dispatcher its combine's gradient (rows of width *hidden*) is the expert-parallel
    workspace in place of the all-to-all's staging (module docstring)."""
    out: list[BufferTerm] = []
    for buffer in buffers:
        if setup.moe_dispatcher == "allgather" and buffer.name.endswith("moe.all_to_all_staging"):
            gathered = allgathered_rows(setup) * hidden
            name = buffer.name.replace("all_to_all_staging", "allgather_combine_gradient")
            out.append(BufferTerm("ep", name, gathered * (setup.router_element_bytes + setup.dtype_bytes), False))
        elif buffer.kept and buffer.group == "tp" and buffer.name.endswith("gathered_input"):
            # SAPP counts the gathered copy beyond the shard, (t-1)/t of it; the workspace is all of it.
            whole = buffer.bytes * setup.tp / (setup.tp - 1)
            out.append(BufferTerm("tp", buffer.name, whole, False))
        elif buffer.kept and buffer.name.endswith(("ring_received_kv", "combined_tokens_remote")):
            # the combined rows' remote part stays where the all-to-all's combine weighs them (`combine_weighs`)
            if buffer.name.endswith("combined_tokens_remote") and combine_weighs(setup, "alltoall"):
                out.append(buffer)
        else:
            out.append(buffer)
    return tuple(out)


# MLATransformerConfig.original_max_position_embeddings (transformer_config.py): the YaRN tables' length
YARN_ORIGINAL_POSITIONS = 4096
ROTARY_FREQUENCY_BYTES = 4  # YaRN's frequencies are fp32 (`inv_freq_extra`, not a buffer: never cast)
ROW_ID_BYTES = 4  # Transformer Engine's row_id_map is int32
BOOL_BYTES = 1


def row_map(moe: Moe, setup: MemorySetup) -> tuple[float, float]:
    """The permutation's reverse mapping of one micro-batch as (elements, bytes each): Transformer
    Engine's row_id_map `[tokens, 2·experts + 1]` int32 under --moe-permute-fusion, else one int64
    sorted index per routed copy (tokens·k, dropless; a capacity keeps at most as many)."""
    if setup.permute_fusion:
        return setup.whole_tokens * (2 * moe.num_experts + 1), ROW_ID_BYTES
    return setup.whole_tokens * moe.experts_per_token, INDEX_BYTES


def dispatcher_state_bytes(moe: Moe, setup: MemorySetup) -> tuple[float, float]:
    """What `MoEAlltoAllTokenDispatcher` keeps of its last micro-batch (module docstring): the dense
    probabilities and the routing map at every moment; the reverse mapping, which is that micro-batch's
    kept `moe.row_map` while it is in flight, held beyond the activations only when none is."""
    cells = setup.whole_tokens * moe.num_experts
    elements, element_bytes = row_map(moe, setup)
    return cells * (setup.router_element_bytes + BOOL_BYTES), elements * element_bytes


def allgather_row_map(moe: Moe, setup: MemorySetup) -> tuple[float, float]:
    """Megatron's allgather dispatcher's reverse mapping of one micro-batch, (elements, bytes each):
    `permute` runs on the local experts' columns of the group's gathered map (token_dispatcher.py
    `MoEAllGatherTokenDispatcher.dispatch_postprocess`, d98e8a64), so Transformer Engine's row map is
    `[T, 2·local experts + 1]` int32 with T = (s·b/cp/t)·etp·ep the gathered tokens, and the unfused
    sorted indices one int64 per row this rank's experts compute."""
    if setup.permute_fusion:
        gathered = setup.tokens / setup.tp * setup.ep * setup.etp
        return gathered * (2 * per_rank(moe.num_experts, setup.ep) + 1), ROW_ID_BYTES
    return routed_rows(moe, setup), INDEX_BYTES


def allgather_state_bytes(moe: Moe, setup: MemorySetup) -> tuple[float, float]:
    """What `MoEAllGatherTokenDispatcher` keeps of its last micro-batch until the layer's next forward
    (`dispatch_postprocess`: `self.local_map`, the local experts' columns of the gathered map, bool
    `[T, local experts]`; `self.local_probs`, one probability per row in the router's dtype; the reverse
    mapping, held beyond the activations only when no micro-batch is in flight; `self.routing_map` is
    dropped): (held at every moment, held when idle)."""
    gathered = setup.tokens / setup.tp * setup.ep * setup.etp
    local = per_rank(moe.num_experts, setup.ep)
    elements, element_bytes = allgather_row_map(moe, setup)
    held = gathered * local * BOOL_BYTES + routed_rows(moe, setup) * setup.router_element_bytes
    return held, elements * element_bytes


def yarn_table_bytes(kind: BodyKind, setup: MemorySetup) -> float:
    """What an MLA layer's `YarnRotaryEmbedding` holds (module docstring): cos and sin tables in the
    training dtype, and the fp32 frequencies its cached `forward` keeps, each of this CP rank's rows.
    The cache holds 32 entries a process: a rank of more than 32 MLA layers keeps 32 frequency
    tables, where this counts one a layer (over by (n − 32)·s/cp·d·4 bytes)."""
    attention = kind.attention
    if not (attention.is_mla and attention.rope):
        return 0.0
    dim = attention.qk_rope_head_dim
    rows = setup.seq_length / setup.cp
    original = YARN_ORIGINAL_POSITIONS / setup.cp
    if setup.rope_fusion:
        # get_cached_cos_sin rebuilds (through forward) unless the init's fp32 tables of 4096 rows serve
        rebuilt = setup.dtype_bytes != ROTARY_FREQUENCY_BYTES or setup.seq_length > YARN_ORIGINAL_POSITIONS
        tables, cached = (rows, rows) if rebuilt else (original, 0.0)
    else:  # the init's tables, cast with the model; the forward's frequencies cached
        tables, cached = original, rows
    return 2 * tables * dim * setup.dtype_bytes + cached * dim * ROTARY_FREQUENCY_BYTES


def body_module_state(kind: BodyKind, setup: MemorySetup) -> tuple[float, float]:
    """A body layer's module state (`MegatronRules.module_state_bytes`)."""
    always, idle = yarn_table_bytes(kind, setup), 0.0
    if isinstance(kind.mlp, Moe) and setup.moe_dispatcher == "alltoall":
        held, idle = dispatcher_state_bytes(kind.mlp, setup)
        always += held
    elif isinstance(kind.mlp, Moe) and setup.moe_dispatcher == "allgather":
        held, idle = allgather_state_bytes(kind.mlp, setup)
        always += held
    return always, idle


def rotary_terms(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> tuple[ActivationTerm, ...]:
    """What unfused rotary embedding keeps (module docstring): cos and sin of the query's call and of the
    key's, `[s/cp, 1, 1, d]` each in the activations' dtype, `d` MLA's rotary part or the head dimension.
    Under MLA they lie inside `mla_up_proj`'s checkpoint; without MLA outside the core's."""
    attention = kind.attention
    if setup.rope_fusion or not attention.rope or isinstance(kind, EncoderBodyKind):
        return ()
    dim = attention.qk_rope_head_dim if attention.is_mla else attention.head_dim
    switch = "attUp" if attention.is_mla else None
    elements = 4 * setup.seq_length / setup.cp * dim
    return (ActivationTerm(f"{prefix}attention.rotary_cos_sin", switch, elements, setup.dtype_bytes, False),)


def flash2_output_terms(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> tuple[ActivationTerm, ...]:
    """The second copy of the attention's output that flash-attn 2 keeps under Transformer Engine on sm80
    (module docstring, **Flash-attn 2 keeps its own output**): `[b, s, heads/t, d]` in the activations'
    dtype, beside the sbhd copy the output projection keeps (`attention.core_output`); none at micro-batch 1,
    where that copy is flash-attn's output itself (but under MLA's trim or hierarchical CP); under ring CP the ring
    saves its bshd output and TE copies it the same way (this rank's s/cp queries). Not under Ulysses CP (its
    all-to-all hands back another tensor). Under MLA flash-attn runs at the padded head dimension (module
    docstring): its output is that wide, and the zeros padding q, k or v are kept too
    (`attention.flash_padding`)."""
    # the ring under hierarchical CP saves its own output too (TE d0067d0d `AttnFuncWithCPAndKVP2P` saves
    # `out_part`, the ring's, and returns the all-to-all's), all-gather CP the output it returns
    if not setup.te_flash or (setup.cp > 1 and setup.cp_variant == "ulysses"):
        return ()
    if isinstance(kind, EncoderBodyKind):
        return ()
    att = kind.attention
    rows = setup.tokens * per_rank(att.num_heads, setup.tp)
    padded = max(att.q_head_dim, att.value_head_dim)
    # One sequence a micro-batch: `output.view(1, s, -1).transpose(0, 1)` is already contiguous (PyTorch's
    # contiguity check skips size-1 dimensions), so TE's `.contiguous()` hands the projection flash-attn's own
    # output (module docstring): no second copy, unless `_trim_output` narrows a padded one (MLA) or the ring
    # saved another tensor than it returned (hierarchical CP).
    one_tensor = (
        setup.micro_batch_size == 1
        and padded == att.value_head_dim
        and not (setup.cp > 1 and setup.cp_variant == "hierarchical")
    )
    terms: tuple[ActivationTerm, ...] = ()
    if not one_tensor:
        terms = (ActivationTerm(f"{prefix}attention.flash_output", "softmax", rows * padded, setup.dtype_bytes),)
    pad = 2 * (padded - att.q_head_dim) + padded - att.value_head_dim  # q and k, v; MLA's heads are not grouped
    if pad:
        terms += (ActivationTerm(f"{prefix}attention.flash_padding", "softmax", rows * pad, setup.dtype_bytes),)
    return terms


def torch_softmax_in_fp32(kind: BodyKind, setup: MemorySetup) -> bool:
    """Whether the local implementation's unfused attention runs PyTorch's softmax in fp32 (module
    docstring): the fused kernel off or outside its shapes, and `attention_softmax_in_fp32`."""
    if setup.transformer_impl != "local" or setup.flash_attention or not setup.softmax_in_fp32:
        return False
    if isinstance(kind, EncoderBodyKind):
        return False
    s, batches = setup.seq_length, setup.micro_batch_size * per_rank(kind.attention.num_heads, setup.tp)
    fused = setup.masked_softmax_fusion and 16 < s <= 4096 and s % 4 == 0 and batches % 4 == 0
    return setup.dtype_bytes < STATS_BYTES and not fused


def megatron_body_terms(
    kind: BodyKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], prefix: str = ""
) -> tuple:
    """The formulas' terms with the MoE combine as Megatron-Core runs it, and the permutation's reverse
    mapping it saves, and what unfused rotary embedding keeps (module docstring)."""
    terms = (*terms, *rotary_terms(kind, setup, prefix), *flash2_output_terms(kind, setup, prefix))
    if torch_softmax_in_fp32(kind, setup):
        softmax = f"{prefix}attention.softmax_output"
        output = next(t for t in terms if t.op == softmax)
        terms = tuple(replace(t, element_bytes=STATS_BYTES) if t.op == softmax else t for t in terms)
        if kind.attention_dropout == 0:  # no dropout copy: the cast back to 16 bits is what the bmm keeps
            terms = (*terms, replace(output, op=f"{prefix}attention.probabilities", switch="headCast"))
    if not isinstance(kind.mlp, Moe):
        return terms
    combine_weights = combine_weighs(setup)
    if not combine_weights:
        kept_terms = tuple(t for t in terms if t.op != f"{prefix}moe.combined_tokens")
    elif setup.moe_dispatcher == "allgather":  # the local experts' output rows, which the product saves
        output = routed_rows(kind.mlp, setup) * kind.hidden_size
        kept_terms = tuple(t for t in terms if t.op != f"{prefix}moe.combined_tokens")
        kept_terms = (
            *kept_terms,
            ActivationTerm(f"{prefix}moe.combine.expert_output", None, output, setup.dtype_bytes),
        )
    else:  # the all-to-all's combined rows, SAPP's term (and its remote part, `megatron_buffers`)
        kept_terms = terms
    if setup.router_bytes:  # --moe-router-dtype: the router's logits, scores and probabilities in it
        routed = (f"{prefix}moe.router_scores", f"{prefix}moe.topk_probabilities")
        kept_terms = tuple(
            replace(t, element_bytes=setup.router_element_bytes) if t.op in routed else t for t in kept_terms
        )
    rows = routed_rows(kind.mlp, setup)
    probs = ActivationTerm(f"{prefix}moe.expert.probs", None, rows, setup.dtype_bytes, False)
    if not kind.mlp.gated and not combine_weights:  # the unfused weighting keeps the activation's output too
        output = next(t for t in kept_terms if t.op == f"{prefix}moe.expert.activation_output")
        kept_terms = (*kept_terms, replace(output, op=f"{prefix}moe.expert.unweighted_activation"))
    kept_terms = (*kept_terms, *clamp_terms(kind.mlp, setup, prefix))
    if setup.moe_dispatcher == "alltoall":
        kept_terms = (*kept_terms, ActivationTerm(f"{prefix}moe.row_map", None, *row_map(kind.mlp, setup), False))
    elif setup.moe_dispatcher == "allgather":  # its map, and masked_select's saved mask `[local experts, T]`
        mask = setup.tokens / setup.tp * setup.ep * setup.etp * per_rank(kind.mlp.num_experts, setup.ep)
        kept_terms = (
            *kept_terms,
            ActivationTerm(f"{prefix}moe.row_map", None, *allgather_row_map(kind.mlp, setup), False),
            ActivationTerm(f"{prefix}moe.local_map", None, mask, BOOL_BYTES, False),
        )
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
    if not kind.has_mtp_modules:  # no MTP layer (a standalone MTP's loss chunk runs only their heads)
        return terms
    if FULL_UNIT in modules:  # the projection, the layer and its final norm checkpointed from their inputs
        terms = tuple(t for t in terms if not _mtp_checkpointed(t.op))
    elif modules:
        terms = tuple(t for t in terms if not (t.op.startswith("mtp") and module_drops(t, modules, kind.mtp_body)))
    if kind.part == MTP_PART:  # the received hidden state is the norm's own input there (`tail_terms`)
        return terms
    whole = setup.whole_tokens * kind.hidden_size
    norms = tuple(
        ActivationTerm(f"mtp{index}.hidden_norm_input", None, whole, setup.dtype_bytes)
        for index in range(kind.mtp_layers)
    )
    return (*terms, *norms)


def rope_cache_bytes(setup: MemorySetup, kinds: Collection[LayerKind]) -> float:
    """The rotary frequencies a pipeline chunk's model keeps: `GPTModel.__init__` (megatron/core/models/
    gpt/gpt_model.py) builds one `RotaryEmbedding` for a rope model without MLA, and `_preprocess` calls
    its `forward` every micro-batch, an `lru_cache` (models/common/embeddings/rotary_pos_embedding.py, 32
    entries a process) that keeps the fp32 frequencies `[s/cp, 1, 1, d]` it returned (`inv_freq` is a
    plain fp32 attribute, never cast; d the head dimension at --rotary-percent 1). Counted for a chunk
    of rotary body layers (a chunk of only the embedding or the loss holds one too, not counted); MLA
    layers hold their own (`yarn_table_bytes`)."""
    dims = [
        kind.attention.head_dim
        for kind in kinds
        if isinstance(kind, BodyKind) and not isinstance(kind, EncoderBodyKind)
        if kind.attention.rope and not kind.attention.is_mla
    ]
    return setup.seq_length / setup.cp * max(dims) * ROTARY_FREQUENCY_BYTES if dims else 0.0


def global_buffer_bytes(setup: MemorySetup, kinds: Collection[LayerKind]) -> float:
    """Megatron's global "mpu" buffer on a stage running layers of *kinds* (module docstring): the
    largest request, `T·h` for a sequence-parallel gather by Megatron's own column-parallel linears (the
    output layer's; under --transformer-impl local every layer's), and under the local implementation
    the unfused attention's score buffer `b·(heads/t)·s·s`."""
    local = setup.transformer_impl == "local"
    requests = [0.0]
    if setup.sp > 1:
        gathers = [
            kind
            for kind in kinds
            if (isinstance(kind, TailKind) and kind.has_output) or (local and isinstance(kind, BodyKind))
        ]
        requests += [setup.tokens * kind.hidden_size for kind in gathers]
    if setup.moe_dispatcher == "allgather":  # token_dispatch gathers the tokens into it (use_global_buffer)
        requests += [allgathered_rows(setup) * kind.hidden_size for kind in kinds if routes_experts(kind)]
    if local and not setup.flash_attention:
        b, s = setup.micro_batch_size, setup.seq_length
        bodies = [kind for kind in kinds if isinstance(kind, BodyKind)]
        requests += [b * per_rank(kind.attention.num_heads, setup.tp) * s * s for kind in bodies]
    return max(requests) * setup.dtype_bytes + drain_buffer_bytes(setup, kinds)


def drain_buffer_bytes(setup: MemorySetup, kinds: Collection[LayerKind]) -> float:
    """Under `--defer-embedding-wgrad-compute` with sequence parallelism the flush's
    `drain_embedding_wgrad_compute` (megatron/core/utils.py, d98e8a64) all-gathers each deferred input into
    Megatron's global buffers "mpu_0" and "mpu_1" (double-buffered: the first deferred micro-batch's gather into
    "mpu_0", the i-th further one's into "mpu_{(i+1) % 2}"), `T·h` each, which `GlobalMemoryBuffer.get_tensor`
    keeps from then on: on the stage of the output layer, one buffer with one deferred micro-batch, two with
    more; none without sequence parallelism (the input is used as it is)."""
    if not (setup.defer_embedding_wgrad and setup.sp > 1):
        return 0.0
    tails = [kind for kind in kinds if isinstance(kind, TailKind) and kind.has_output]
    if not tails:
        return 0.0
    deferred = min(setup.wgrad_deferral_limit or setup.micro_batches, setup.micro_batches)
    return min(2, deferred) * setup.tokens * max(kind.hidden_size for kind in tails) * setup.dtype_bytes


def received_width(kind: TailKind) -> int:
    """Features per token a chunk starting with this TAIL part receives: h, or (1 + mtp)·h on a
    standalone MTP's loss chunk (multi_token_prediction.py `MultiTokenPredictionBlock.forward`,
    `torch.cat(hidden_states_list, dim=0)`, commit d98e8a64)."""
    return kind.hidden_size * (1 + kind.mtp_layers if kind.part == OUTPUT_PART else 1)


def routes_experts(kind: LayerKind) -> bool:
    """Whether a layer runs routed experts: an MoE body, or a TAIL whose MTP layer is one."""
    if isinstance(kind, BodyKind):
        return isinstance(kind.mlp, Moe)
    return isinstance(kind, TailKind) and kind.has_mtp_modules and isinstance(kind.mtp_body.mlp, Moe)


def te_loss(setup: MemorySetup) -> bool:
    """Whether the loss is Transformer Engine's fused cross-entropy (module docstring)."""
    return setup.cross_entropy_fusion and setup.cross_entropy_impl == "te"


def te_loss_row_bytes(setup: MemorySetup) -> float:
    """TE's fused loss's fp32 buffers a token (pytorch/triton/cross_entropy.py `cross_entropy_forward`, v2.14.1):
    `loss_1d` (1), `m_d_X_y` (3) and, under TP, `m_d_X_y_gathered` (3 · t)."""
    per_token = 1 + 3 + (3 * setup.tp if setup.tp > 1 else 0)
    return STATS_BYTES * per_token * setup.tokens


def dataloader_mask_bytes(setup: MemorySetup) -> float:
    """The micro-batch's bool causal mask the data loader builds (module docstring), this CP rank's
    queries against every key; 0 where it builds none."""
    if not setup.dataloader_mask:
        return 0.0
    return setup.micro_batch_size * setup.seq_length / setup.cp * setup.seq_length


def mtp_logits_held_bytes(kind: TailKind, setup: MemorySetup) -> float:
    """The last MTP head's 16-bit logits, alive through the model's loss's forward under Megatron-Core 0.15 and
    0.16 (module docstring, "An MTP head's logits"): `bc·T·⌈v/t⌉` where the TAIL holds MTP heads and the loss,
    else 0 (`te_loss` keeps them as the MTP loss's saved tensor, counted in the TAIL)."""
    release = setup.release
    if not (kind.mtp_layers and kind.has_output) or te_loss(setup):
        return 0.0
    if not release.holds("layout_holds_mtp") or release.holds("mtp_loss_frees_logits"):
        return 0.0
    return setup.dtype_bytes * setup.tokens * per_rank(kind.vocab_size, setup.tp)


# The TAIL's terms each cross-entropy saves for its backward (`freed_before_backward_bytes`).
LOSS_SAVED = ("logits_softmax", "labels")


class MegatronRules(FrameworkRules):
    name = "megatron"
    transients_per_stage = True

    def body_terms(
        self, kind: BodyKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], prefix: str = ""
    ) -> tuple:
        return megatron_body_terms(kind, setup, terms, prefix)

    def tail_terms(self, kind: TailKind, setup: MemorySetup, modules: frozenset[str] = frozenset()) -> tuple:
        terms = megatron_tail_terms(kind, setup, super().tail_terms(kind, setup, modules), modules)
        if te_loss(setup):  # the logits hold their own gradient in the training dtype (module docstring)
            terms = tuple(
                replace(t, element_bytes=setup.dtype_bytes) if t.op.endswith("logits_softmax") else t for t in terms
            )
        return terms

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
        buffers = megatron_buffers(buffers, setup, getattr(kind, "hidden_size", 0))
        buffers = framework_ring(buffers, kind, setup, te_ring_terms)
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

    def offload_split(
        self, kind: LayerKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], buffers: tuple[BufferTerm, ...]
    ) -> tuple[tuple[ActivationTerm, ...], tuple[BufferTerm, ...], tuple[ActivationTerm, ...], tuple[BufferTerm, ...]]:
        """Fine-grained activation offloading's groups (`offload.py`), on a body layer and a TAIL's MTP layers."""
        if not setup.offload_modules or not isinstance(kind, BodyKind | TailKind):
            return terms, buffers, (), ()
        return offload_split(kind, setup, terms, buffers)

    def offload_forward_bytes(self, kind: LayerKind, setup: MemorySetup, moved: tuple[ActivationTerm, ...]) -> float:
        """Fine-grained offloading's groups as the forward holds them before each commit (`offload.py`)."""
        if not moved or not isinstance(kind, BodyKind | TailKind):
            return 0.0
        return forward_held_bytes(kind, setup, moved)

    def static(self, params: LayerParams, setup: MemorySetup, kind: LayerKind | None = None) -> StaticBytes:
        """SAPP's static memory, and the fp32 main-gradient copies a 16-bit gradient buffer makes at the
        step (module docstring); under Muon one moment fewer for the matrices it steps (`muon.py`); under
        Megatron-FSDP the whole copy of the modules outside its units (`megatron_fsdp.py`)."""
        found = super().static(params, setup)
        if kind is not None and (preserved := preserved_bytes(kind, setup)):  # Megatron-FSDP's non-unit copy
            if setup.release.holds("fsdp_non_unit_kept"):
                found = replace(found, parameter_bytes=found.parameter_bytes + preserved)
            else:  # before 378d81fbd3 the reset in finish_grad_sync released it before the step
                found = replace(found, held_through_step_bytes=found.held_through_step_bytes + preserved)
        if kind is not None and (fp8 := fp8_parameter_extra_bytes(kind, setup)):  # FP8 parameters (te_fp8.py)
            found = replace(found, parameter_bytes=found.parameter_bytes + fp8)
        if setup.optimizer == "muon" and kind is not None and not setup.state_bytes_stated:
            matrices = static_bytes(matrix_params(kind, setup), setup).optimizer_states  # sharded as the states
            found = replace(found, optimizer_bytes=found.optimizer_bytes - MUON_SAVING_BYTES * matrices)
        if setup.grad_bytes < STATS_BYTES and setup.dtype_bytes < STATS_BYTES:
            return replace(found, step_only_bytes=STATS_BYTES * found.optimizer_states)
        return found

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
        """SAPP's gathered parameters; under Megatron-FSDP the whole buckets of the layer's FSDP units (the
        modules outside them are gathered at every moment already, counted in `static`) and the layer's whole
        gradient bucket (`megatron_fsdp.py`)."""
        if kind is None or not setup.megatron_fsdp or setup.shard_level < 3:
            return super().parameter_working_bytes(params, setup, node, gathered, before, after, kind)
        return backward_working_bytes(params, kind, setup, gathered)

    def module_state_bytes(self, kind: LayerKind, setup: MemorySetup) -> tuple[float, float]:
        """The token dispatcher's last routing and MLA's YaRN tables, per layer and per MTP layer, and
        Transformer Engine's cached FP8 weight copies (`te_fp8.py`)."""
        cached = workspace_bytes(kind, setup)
        if isinstance(kind, BodyKind):
            always, idle = body_module_state(kind, setup)
            return always + cached, idle
        if isinstance(kind, TailKind) and kind.has_mtp_modules:
            assert kind.mtp_body is not None
            always, idle = body_module_state(kind.mtp_body, setup)
            return kind.mtp_layers * always + cached, kind.mtp_layers * idle
        return 0.0, 0.0

    def workspace_bytes(self, setup: MemorySetup, kinds: Collection[LayerKind] = ()) -> float:
        """PyTorch's and (under --transformer-impl transformer_engine) Transformer Engine's cuBLAS
        workspaces, TE's grouped-GEMM ones where experts run, TE's cached dummy weight gradients under gradient
        accumulation fusion (`dummy_wgrad.py`), Megatron's persistent global buffer (module docstring) and the
        flex dispatcher's registered buffers (`flex_buffers.py`)."""
        found = 0.0
        capability = setup.compute_capability
        if capability > 0:
            found += torch_training_workspace_bytes(capability, setup.cublas_workspace_bytes)
            te_workspace = transformer_engine_workspace_bytes(capability)
            experts = any(routes_experts(kind) for kind in kinds)
            if setup.transformer_impl == "transformer_engine":
                found += te_workspace
                if setup.moe_grouped_gemm and experts:
                    found += TE_COMPUTE_STREAMS * te_workspace
                if setup.userbuffers and any(isinstance(kind, BodyKind) for kind in kinds):
                    found += TE_UB_STREAMS * te_workspace  # the userbuffers GEMMs' own (workspaces.py)
            elif experts:  # the router's GEMM runs on TE wherever TE is installed (module docstring)
                found += te_workspace
            found += dummy_wgrad_bytes(setup, kinds)  # TE's cached dummy wgrads (dummy_wgrad.py)
        return found + global_buffer_bytes(setup, kinds) + flex_buffer_bytes(setup, kinds)

    def stage_static_bytes(self, setup: MemorySetup, layers: Collection[tuple[LayerKind, int]]) -> float:
        """The layer-wise distributed optimizer's legacy ping-pong of whole parameters (`layer_wise.py`): the
        stage's worst data-parallel rank's states beyond 1/dp of each."""
        return extra_state_bytes(layers, setup)

    def attention_workspace_bytes(self, kind: LayerKind, setup: MemorySetup) -> float:
        """cuDNN's deterministic backward's dS workspace on Hopper and sm100 (module docstring), for a body layer's
        flash attention under Transformer Engine with deterministic attention (--deterministic-mode or
        NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, `setup.deterministic`): b·heads·s_q·s_kv·2 bytes of a
        kernel call (ring CP: a step's s/cp queries against s/cp keys; Ulysses: heads/cp, all s). Where TE runs
        flash-attn (`setup.te_flash`: sm80, or `--attention-backend flash`), its backward allocates its fp32 dQ
        accumulator and softmax sums (`workspaces.flash2_backward_workspace_bytes`), nsplits of the accumulator
        when deterministic; under `--attention-backend fused` below sm90 no cuDNN deterministic backward."""
        engine = setup.transformer_impl == "transformer_engine" and setup.flash_attention
        if not engine or not isinstance(kind, BodyKind) or isinstance(kind, EncoderBodyKind):
            return 0.0
        heads = per_rank(kind.attention.num_heads, setup.tp)
        s, b = setup.seq_length, setup.micro_batch_size
        if setup.te_flash:
            kv = kv_heads_per_rank(kind.attention.num_kv_heads, setup.tp)
            if setup.cp_variant == "ulysses":
                heads, kv, queries = heads / setup.cp, max(kv / setup.cp, 1), s
            elif setup.cp_variant == "all_gather":  # a call's s/(2cp) queries (`ring.all_gather_steps`)
                queries = s / (2 * setup.cp)
            else:  # hierarchical: heads/cp_a2a on the ring's s/cp_ring queries
                heads, kv, queries = heads / setup.cp_a2a, kv / setup.cp_a2a, s / setup.cp_ring
            dim = kind.attention.q_head_dim
            deterministic = setup.deterministic
            return flash2_backward_workspace_bytes(
                b, heads, queries, dim, setup.sm_count, deterministic, kv, setup.dtype_bytes
            )
        cudnn = int(setup.compute_capability) in CUDNN_DETERMINISTIC_CAPABILITIES
        if not (setup.deterministic and cudnn):
            return 0.0
        if setup.cp_variant == "ulysses":
            return cudnn_dp_workspace_bytes(b * heads / setup.cp, s, s)
        if setup.cp_variant == "all_gather":  # rank 0's second call: s/(2cp) queries against every key
            return cudnn_dp_workspace_bytes(b * heads, s / (2 * setup.cp), s)
        ring = setup.cp_ring
        return cudnn_dp_workspace_bytes(b * heads / setup.cp_a2a, s / ring, s / ring)

    def attention_backward_gradient_bytes(self, kind: LayerKind, setup: MemorySetup) -> tuple[float, float] | None:
        """The gradients alive while a body layer's attention backward runs on Transformer Engine's flash-attn
        path without context parallelism (module docstring, **Flash-attn's backward transients**): at the
        kernel the gradient arriving at the layer, the output projection's dgrad and flash-attn's fresh bshd
        dq, dk, dv; after it, the arriving gradient, dq, dk, dv and the sbhd dQKV they are copied into. Under
        MLA the kernel's, at the padded width, only. None elsewhere (ring CP: `ring.py`'s workspaces)."""
        if not setup.te_flash or setup.cp > 1 or not isinstance(kind, BodyKind) or isinstance(kind, EncoderBodyKind):
            return None
        att, tokens, bc = kind.attention, setup.tokens, setup.dtype_bytes
        heads = per_rank(att.num_heads, setup.tp)
        arriving = setup.whole_tokens * kind.hidden_size * bc
        if att.is_mla:  # `_pad_qkv_head_dim`: q, k, v and the output's gradient at max(qk, v)
            padded = tokens * heads * max(att.q_head_dim, att.value_head_dim) * bc
            return arriving + 4 * padded, 0.0
        query = tokens * heads * att.head_dim * bc
        keys_values = 2 * tokens * kv_heads_per_rank(att.num_kv_heads, setup.tp) * att.head_dim * bc
        return arriving + 2 * query + keys_values, arriving + 2 * (query + keys_values)

    def pipeline_buffer_bytes(
        self, setup: MemorySetup, kinds: Collection[LayerKind], micro_batches: int, in_flight: int
    ) -> float:
        """A chunk that receives its input, with none of its micro-batches in flight, still holds the
        last one it received and that input's gradient (module docstring); in flight, that input is
        its first layer's kept input and its gradient is not yet made. A chunk of a TAIL with MTP
        layers and no decoder layer (the MTP or loss chunk of a standalone MTP, or `mL` alone) runs an
        empty block without the final norm, which clones its input (transformer_block.py
        `TransformerBlock.forward`, commit d98e8a64): its layers keep the clone, so each micro-batch
        in flight holds what it received too, h per token, or (1 + mtp)·h on a standalone MTP's loss
        chunk (`received_width`). Every chunk of rotary layers holds its model's cached rotary
        frequencies (`rope_cache_bytes`)."""
        found = rope_cache_bytes(setup, kinds)
        hidden = max((kind.hidden_size for kind in kinds if isinstance(kind, BodyKind)), default=0)
        clones = False
        if not hidden:  # a chunk of the TAIL alone receives the hidden state too
            tails = [kind for kind in kinds if isinstance(kind, TailKind)]
            hidden = max((received_width(kind) for kind in tails), default=0)
            clones = any(kind.mtp_layers for kind in tails)
        if setup.pp == 1 or not hidden or any(isinstance(kind, HeadKind) for kind in kinds):
            return found
        if in_flight > 0:
            return found + (in_flight * setup.whole_tokens * hidden * setup.dtype_bytes if clones else 0.0)
        return found + 2.0 * setup.whole_tokens * hidden * setup.dtype_bytes

    def deferred_bytes(self, kind: TailKind, setup: MemorySetup, micro_batches: int) -> float:
        """`--defer-embedding-wgrad-compute`: the output layer's inputs and logits' gradients of the first
        `--wgrad-deferral-limit` micro-batches (0: all), held to the pipeline's flush (module docstring);
        at the last micro-batch's loss and backward, min(limit, m − 1) of them."""
        if not setup.defer_embedding_wgrad or not kind.has_output:
            return 0.0
        held = min(setup.wgrad_deferral_limit or micro_batches, micro_batches - 1)
        gradient = setup.tokens * per_rank(kind.vocab_size, setup.tp)
        return held * setup.dtype_bytes * (gradient + setup.whole_tokens * kind.hidden_size)

    def freed_before_backward_bytes(
        self, kind: LayerKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...]
    ) -> float:
        """On the TAIL, what each cross-entropy saved (its fp32 softmax and the labels' mask and index):
        autograd releases them once the loss's backward has run (module docstring, **The loss's stage
        after the loss**)."""
        if not isinstance(kind, TailKind):
            return 0.0
        return sum(t.bytes for t in terms if t.op.endswith(LOSS_SAVED))

    def held_after_loss_bytes(
        self, kind: TailKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], micro_batches: int
    ) -> float | None:
        """Nothing of the TAIL's micro-batch once its backward has run (module docstring), but under
        `--defer-embedding-wgrad-compute` where that micro-batch is deferred too (the last one is, with
        no limit or one of m or more): its output-layer input and 16-bit logits' gradient, in the
        buffers to the flush."""
        limit = setup.wgrad_deferral_limit
        if not setup.defer_embedding_wgrad or not kind.has_output or 0 < limit < micro_batches:
            return 0.0
        gradient = setup.tokens * per_rank(kind.vocab_size, setup.tp)
        return setup.dtype_bytes * (gradient + setup.whole_tokens * kind.hidden_size)

    def loss_bytes(
        self, kind: TailKind, params: LayerParams, setup: MemorySetup, before: LayerParams | None = None
    ) -> float:
        """The 16-bit logits next to the fp32 softmax and the micro-batch's causal mask (forward), or the
        16-bit gradient with the fused loss's fp32 scatter copy beside it (backward), the larger (module
        docstring); the forward also the last MTP head's logits under Megatron-Core 0.15 and 0.16
        (`mtp_logits_held_bytes`); none on a standalone MTP's MTP chunk (no output layer)."""
        if not kind.has_output:
            return 0.0
        if te_loss(setup):  # in place on the kept logits: the per-row buffers beside the mask
            return te_loss_row_bytes(setup) + dataloader_mask_bytes(setup)
        logits = setup.tokens * per_rank(kind.vocab_size, setup.tp)
        scatter_copy = STATS_BYTES * logits if setup.cross_entropy_fusion else 0.0
        forward = dataloader_mask_bytes(setup) + mtp_logits_held_bytes(kind, setup)
        return setup.dtype_bytes * logits + max(forward, scatter_copy)

    def first_call_bytes(self, kind: TailKind, params: LayerParams, setup: MemorySetup) -> float:
        """The fused loss's compiled backward autotuning at its first call under PyTorch before 2.6: a device
        clone of the softmax it writes in place, beside Triton's 256e6-byte L2 flush (module docstring)."""
        fused = setup.cross_entropy_fusion and setup.cross_entropy_impl == "native" and kind.has_output
        release = setup.release
        if not fused or setup.torch_deterministic or not release.holds("jit_fuser_compiles"):
            return 0.0
        if release.holds("inductor_autotune_host_copies"):
            return 0.0
        return STATS_BYTES * setup.tokens * per_rank(kind.vocab_size, setup.tp) + TRITON_FLUSH_BYTES


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
    an MTP layer's `mtp_post_process`: its own final norm (common/fine_grained_callables.py
    `build_mtp_layer_callables`: `submodule_mtp_postprocess_forward` runs
    `MultiTokenPredictionLayer._postprocess`, d98e8a64); the chunk's `post_process`: the model's output
    layer and loss and every MTP head's (common/utils.py `PostProcessNode.forward_impl` calls
    `GPTModel._postprocess`, whose `process_mtp_loss` runs each head's output layer and loss), on the
    loss chunk whether the MTP layers run there or in a chunk of their own.
    """
    inner = op.split(".", 1)[1] if op.startswith("mtp") else op
    if inner == "output.norm_input" and op.startswith("mtp"):
        return MTP_POST_PROCESS
    if inner.startswith("output."):
        return POST_PROCESS
    if inner.startswith(("mlp.", "moe.expert.", "moe.dispatched")):
        return MLP_NODE
    return PRE_DISPATCH
