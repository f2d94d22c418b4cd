"""Which releases of Megatron-Core, Transformer Engine, PyTorch and torchtitan a run's rules follow
(`framework_release`).

ppb's Megatron rules read Megatron-LM at d98e8a64 (2026-08-22) and Transformer Engine at d0067d0d
(2026-08-22). A run of an older pinned release (or a measurement taken at an older commit, as most of
Megatron-LM's CI golden values were) holds what that code held, so the rules that changed between then and
now are gated here, each by the commit that introduced it, its date and the first release holding it
(`git tag --contains COMMIT` on the two repositories). A release is stated as a tag (Megatron-Core
`core_v0.13.0`, `core_r0.13.0` or `0.13`; Transformer Engine `v2.4`, `2.4` or `2.6.0.post1`, as a wheel
or uv.lock names it) or as the date of the commit run (`2025-07-05`, a commit of the main branch): a tag
holds a change from the first release that holds it, a date from the change's own date.
PyTorch is stated as its version only (`2.5`, `2.5.0`, or as a container names it, `2.5.0a0+e000cf0ad9`: a
pre-release of 2.5 is 2.5), never a date. Unstated: the newest code ppb follows.

torchtitan is stated as its tag (`v0.2.2`, `0.2`) or the date of the commit run (`2024-12-26` for 9dec370).
Unstated, it is v0.2.2 (73a0e697, 2026-02-20): ppb's torchtitan defaults follow that release (docs/frameworks.md,
torchtitan's version), so a change of torchtitan's main after it is priced only for a run stating a commit
that holds it.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

MEGATRON_CORE = "megatron_core"
TRANSFORMER_ENGINE = "transformer_engine"
PYTORCH = "pytorch"
TORCHTITAN = "torchtitan"
# the code ppb's rules read (the newest they follow): commit and date (PyTorch: the release read)
NEWEST = {
    MEGATRON_CORE: ("d98e8a64", "2026-08-22"),
    TRANSFORMER_ENGINE: ("d0067d0d", "2026-08-22"),
    PYTORCH: ("2.13", ""),
    TORCHTITAN: ("b5bcd76c6", "2026-08-21"),
}
# what an unstated release is where it is not the newest code (tag, commit and date): ppb's torchtitan
# defaults follow its v0.2.2
UNSTATED = {TORCHTITAN: ("v0.2.2", "73a0e697, 2026-02-20")}
# the (major, minor) releases each library tagged (NVIDIA/Megatron-LM tags core_v0.4.0 .. core_v0.19.0,
# core_r0.8.0 .. core_r0.11.0; NVIDIA/TransformerEngine tags v0.1 .. v2.18, and 1.14, never tagged: its branch
# release_v1.14 ("Code drop for version 1.14", 3b2a7b00f, VERSION 1.14.0), the TE of NGC's PyTorch 25.01 container)
KNOWN_RELEASES: dict[str, frozenset[tuple[int, int]]] = {
    MEGATRON_CORE: frozenset((0, minor) for minor in range(4, 20)),
    TRANSFORMER_ENGINE: frozenset(
        [(0, minor) for minor in range(1, 14)] + [(1, minor) for minor in range(15)] + [(2, m) for m in range(19)]
    ),
    # pytorch/pytorch tags v1.0 .. v1.13, v2.0 .. v2.13
    PYTORCH: frozenset([(1, minor) for minor in range(14)] + [(2, minor) for minor in range(14)]),
    # pytorch/torchtitan tags v0.1.0, v0.2.0, v0.2.1, v0.2.2
    TORCHTITAN: frozenset({(0, 1), (0, 2)}),
}
_TAG = {
    MEGATRON_CORE: re.compile(r"(?:core_[rv])?(\d+)\.(\d+)(?:\.\d+)?(?:rc\d+)?"),
    TRANSFORMER_ENGINE: re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:\.post\d+|rc\d+)?(?:\+[0-9a-f]+)?"),
    PYTORCH: re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:a\d+|rc\d+)?(?:\+[0-9a-z.]+)?"),
    TORCHTITAN: re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?"),
}
_SHOWN = {MEGATRON_CORE: "Megatron-Core", TRANSFORMER_ENGINE: "Transformer Engine", PYTORCH: "PyTorch",
          TORCHTITAN: "torchtitan"}  # fmt: skip
_EXAMPLE = {MEGATRON_CORE: "core_v0.13.0", TRANSFORMER_ENGINE: "v2.4", PYTORCH: "2.5 or 2.5.0a0+e000cf0ad9",
            TORCHTITAN: "v0.2.2"}  # fmt: skip


@dataclass(frozen=True)
class Change:
    """A rule of ppb's that one commit of one library introduced."""

    library: str  # MEGATRON_CORE | TRANSFORMER_ENGINE | PYTORCH | TORCHTITAN
    commit: str
    date: str  # the commit's date (YYYY-MM-DD)
    release: tuple[int, int]  # the first release that holds it
    what: str


# Every change a stated release turns back, by name (docs/frameworks.md, "Older releases").
CHANGES: dict[str, Change] = {
    "te_dummy_wgrad": Change(
        TRANSFORMER_ENGINE,
        "ba5dc5dde",
        "2025-04-08",
        (2, 3),
        "TE's Linear and LayerNormLinear hand autograd one cached dummy weight gradient per (shape, dtype) "
        "under gradient accumulation fusion (module/base.py `get_dummy_wgrad`); before, a `torch.empty` per "
        "backward, freed by Megatron's DDP hook",
    ),
    "te_grouped_dummy_wgrad": Change(
        TRANSFORMER_ENGINE,
        "d2945c6a5",
        "2025-10-27",
        (2, 10),
        "TE's GroupedLinear (the experts of TEGroupedMLP) takes the same cache (module/grouped_linear.py "
        "`_GroupedLinear.backward`); before, a `torch.empty` per expert and backward",
    ),
    "te_grouped_wgrad_one_buffer": Change(
        TRANSFORMER_ENGINE,
        "cb59ef156",
        "2026-05-12",
        (2, 16),
        "TE's GroupedLinear allocates its experts' 16-bit weight gradients (no wgrad fusion) as one buffer "
        "(module/grouped_linear.py `_GroupedLinear.backward`: `tex.bulk_allocate`, then one `torch.empty`); "
        "before, a `torch.empty` per expert, each NaN-filled under deterministic mode",
    ),
    "te_fp8_scale_inv_with_data": Change(
        TRANSFORMER_ENGINE,
        "8e3561bf8",
        "2024-08-20",
        (1, 11),
        "TE's FP8 kernels update the scale-inverse with the FP8 data they write (#1083, \"Update FP8 "
        'scale-inverse in kernels with FP8 output"), so Linear and LayerNormLinear save no copy of it for the '
        'backward; before, each module\'s forward under FP8 saved `fp8_meta["scaling_fwd"].scale_inv.clone()` '
        "(module/linear.py `_Linear.forward`, layernorm_linear.py `_LayerNormLinear.forward`, v1.6 and v1.10): "
        "one more kernel a module a forward",
    ),
    "te_fp8_params_one_amax_buffer": Change(
        TRANSFORMER_ENGINE,
        "28aa41a3f",
        "2024-11-14",
        (1, 13),
        "TE keys delayed scaling's global amax buffer by direction and autocast alone (#1326, \"Remove special "
        'handling for FP8 params in FP8 recipe infrastructure": fp8.py `get_key_in_buffer`), so one reduction '
        "concatenates, all-reduces and updates every module's amaxes at once; before (v1.6, v1.10), modules with FP8 "
        "parameters (Float8Tensor weights: NeMo's fp8_params, Megatron's --fp8-param-gather) kept a buffer apart from "
        'those without (the DotProductAttention\'s), `f"{fwd_bwd_key}_{fp8_weights}_{autocast_key}"`, and '
        "`reduce_and_update_fp8_tensors` ran its torch.cat, all-reduce and fused update once for each",
    ),
    "te_fp8_input_transposed_in_forward": Change(
        TRANSFORMER_ENGINE,
        "819a75219",
        "2025-01-27",
        (2, 0),
        "TE's Linear quantizes its input with the column-wise copy the weight gradient reads in the forward, "
        "whatever sequence parallelism (module/linear.py `_Linear.forward`: `input_quantizer.set_usage(rowwise=True, "
        "columnwise=backward_needs_input)`; on Hopper one cast-transpose kernel); before, under SP a row-parallel "
        "`_Linear` cast its input alone (v1.6 to v1.13: `fp8_cast_transpose_fused` only `and not sequence_parallel`, "
        "else `cast_to_fp8`) and its backward transposed the saved FP8 input (`tex.fp8_transpose`)",
    ),
    "te_fp8_non_tn_gemm_sm100": Change(
        TRANSFORMER_ENGINE,
        "819a75219",
        "2025-01-27",
        (2, 0),
        "TE runs per-tensor FP8 GEMMs in every layout on compute capability 10.0 and up, so a quantized tensor's "
        'column-wise copy there is the data itself, no FP8 transpose ("TE 2.0 code drop": utils.py '
        "`non_tn_fp8_gemm_supported`, csrc/extensions/quantizer.cpp `create_transpose = columnwise_usage && "
        "!non_tn_fp8_gemm_supported()`); before, every GPU ran them TN only, Blackwell too (release_v1.14, the TE "
        "of NGC's PyTorch 25.01: linear.py `_Linear.forward` `fp8_cast_transpose_fused` whatever the device, the "
        "weight gradient reading `inputmat_t`), the transposes Hopper still makes",
    ),
    "te_cp2_p2p_unbatched": Change(
        TRANSFORMER_ENGINE,
        "ba5dc5dde",
        "2025-04-08",
        (2, 3),
        "TE's ring attention (`AttnFuncWithCPAndKVP2P`, forward and backward) exchanges a step's chunks as one "
        '`batch_isend_irecv` only under NVTE_BATCH_MHA_P2P_COMM ("Disable automatic use of batch_p2p_comm for '
        'CP2"); before, at every cp 2 too, whatever the GPU (`batch_p2p_comm = ... or (cp_size == 2)`: '
        "release_v1.14 and v2.2 attention.py)",
    ),
    "te_cp2_p2p_batched_before_sm100": Change(
        TRANSFORMER_ENGINE,
        "0828aa860",
        "2025-04-29",
        (2, 4),
        "TE's ring attention batches a cp 2 step's exchange again, below compute capability 10.0 only "
        "(context_parallel.py: `batch_p2p_comm = ... or (device_compute_capability < (10, 0) and cp_size == 2)`, "
        "#1722); between it and `te_cp2_p2p_unbatched` no cp 2 ring batched",
    ),
    "te_grouped_saves_weights": Change(
        TRANSFORMER_ENGINE,
        "b59d1d8b3",
        "2025-03-26",
        (2, 3),
        "TE's GroupedLinear saves each expert's original weight for the backward beside its input and its "
        "GEMM weight (module/grouped_linear.py `_GroupedLinear.forward`: `prepare_for_saving(*inputmats, "
        "*weights_fp8, *weights, *biases)`); before, the input and the GEMM weight only",
    ),
    "te_grouped_weights_unsaved": Change(
        TRANSFORMER_ENGINE,
        "f8bda5d0a",
        "2026-05-30",
        (2, 17),
        "TE's GroupedLinear saves the original weights only for a high-precision backward override "
        "(module/grouped_linear.py `_GroupedLinear.forward`: `saved_weights = [None] * num_gemms`); before, "
        "every expert's (`te_grouped_saves_weights`)",
    ),
    "te_mxfp8_activations_swizzled": Change(
        TRANSFORMER_ENGINE,
        "99df88106",
        "2026-01-16",
        (2, 12),
        "TE's Linear, LayerNormLinear and GroupedLinear quantize their MXFP8 inputs and output gradients with "
        "the scale factors already in the layout the GEMM reads (`_get_quantizers`: `optimize_for_gemm = True` "
        "but for an input all-gathered or an output gradient all-gathered under SP), and the GEMM swizzles only "
        "scales still compact (csrc/extensions/swizzle.cpp `swizzle_scales_for_gemm`): a call's weight; before, "
        "every operand's (util.cpp `swizzle_scaling_factors`)",
    ),
    "experts_weight_probs": Change(
        MEGATRON_CORE,
        "2659630721",
        "2025-04-09",
        (0, 13),
        "the routed experts weight their own activations by the routing probabilities (experts.py, "
        "moe_utils.py `permute(..., probs)`); before, the dispatcher's combine weighted the experts' "
        "outputs and saved them for the probabilities' gradient (token_dispatcher.py `unpermute(..., probs)`)",
    ),
    "deepep_permute_pads": Change(
        MEGATRON_CORE,
        "554ce493e3",
        "2026-02-07",
        (0, 17),
        "the DeepEP dispatcher's permutation pads each expert's rows to the FP8/FP4 GEMMs' alignment itself "
        "(token_dispatcher.py `_DeepepManager.get_permuted_hidden_states_by_experts`: `permute(..., "
        "align_size=...)`), so TEGroupedMLP's Fp8Padding finds its splits aligned; before, TEGroupedMLP padded "
        "them (experts.py `quantization_padding`, TE's `Fp8Padding`)",
    ),
    "megatron_dummy_wgrad": Change(
        MEGATRON_CORE,
        "e7c55de99e",
        "2025-08-01",
        (0, 14),
        "Megatron's own ColumnParallelLinear/RowParallelLinear (the output layer; every linear under "
        "--transformer-impl local) take TE's cache where TE has it (tensor_parallel/layers.py "
        "`LinearWithGradAccumulationAndAsyncCommunication.backward`); before, a `torch.empty` per backward",
    ),
    "tunable_schedule_sends": Change(
        MEGATRON_CORE,
        "4295be1a6c",
        "2024-11-01",
        (0, 10),
        "the overlapped interleaved schedule waits for a send once the next send of its kind is posted "
        "(schedules.py, the tunable schedule; `timing.interleaved_send_waits` core_r0.10); before, before the "
        "next op of the send's kind (core_r0.8)",
    ),
    "forward_send_waited_first": Change(
        MEGATRON_CORE,
        "260cba7133",
        "2026-04-16",
        (0, 18),
        "a forward's send is waited for before the next op, as `deallocate_pipeline_outputs` frees its buffer "
        "(schedules.py; `timing.interleaved_send_waits` core_v0.18); before, as core_r0.10",
    ),
    "fsdp_non_unit_kept": Change(
        MEGATRON_CORE,
        "378d81fbd3",
        "2026-05-30",
        (0, 18),
        "Megatron-FSDP's `AllGatherPipeline.reset(preserve_non_fsdp_units=True)` keeps the gathered copy of "
        "the modules outside its units across the iteration's end (param_and_grad_buffer.py); before, the "
        "reset in `finish_grad_sync` released it before the optimizer step",
    ),
    "fsdp_dtensor_load_states": Change(
        MEGATRON_CORE,
        "af28b5a559",
        "2025-08-21",
        (0, 15),
        "--ckpt-format fsdp_dtensor (Megatron-FSDP's checkpoints) with --load makes the optimizer's states before "
        "iteration 1, a checkpoint found or not (training/checkpointing.py `load_checkpoint`, optimizer/"
        "distrib_optimizer.py `_init_optimizer_states_with_dummy_values`); before, no such format",
    ),
    "proj_saves_original_input": Change(
        MEGATRON_CORE,
        "781e765818",
        "2025-08-19",
        (0, 15),
        "under FP8 recipes but delayed scaling the attention's output projection saves its original 16-bit input, "
        "which the core attention saves anyway (attention.py `Attention.__init__`: `set_save_original_input("
        "self.linear_proj)`); before, it kept its own quantized copy",
    ),
    "te_save_original_input": Change(
        TRANSFORMER_ENGINE,
        "07afda985",
        "2025-07-17",
        (2, 6),
        "TE's Linear and GroupedLinear take `save_original_input` (module/linear.py), which Megatron-Core sets "
        'only from this release on (`is_te_min_version("2.6.0dev0")`); before, no such option',
    ),
    "layer_wise_param_layout": Change(
        MEGATRON_CORE,
        "0044db1f20",
        "2026-05-20",
        (0, 18),
        "Muon's layer-wise distributed optimizer lays its parameters out precomputed, the non-Muon ones through a "
        "DistributedOptimizer of their own (optimizer/__init__.py, training.py; `--no-use-layer-wise-param-layout` "
        "keeps the old path); before, every parameter in one layer-wise buffer (the old path)",
    ),
    "checkpoint_without_output_shares_storage": Change(
        MEGATRON_CORE,
        "f54403492e",
        "2026-03-11",
        (0, 17),
        "`CheckpointWithoutOutput`'s recompute points each discarded output at the recomputed storage "
        '(tensor_parallel/random.py `_recompute`, `_get_share_storage`: "zero-copy storage sharing"); before, '
        "from 3b141a2471, it resized each output's storage back and copied the recomputed one into it "
        "(`untyped_storage().copy_`): a device copy an output of the layernorm, mla_up_proj and moe_act modules",
    ),
    "layout_holds_mtp": Change(
        MEGATRON_CORE,
        "d7bf5aaaa8",
        "2025-08-26",
        (0, 15),
        "--pipeline-model-parallel-layout places the MTP layers (`m`); before, a layout with `m` is refused and "
        "every MTP layer sits on the last pipeline stage (multi_token_prediction.py `get_mtp_num_layers_to_build`: "
        '"we only support put all of MTP layers on the last pipeline stage")',
    ),
    "mtp_loss_frees_logits": Change(
        MEGATRON_CORE,
        "9d71cb1cd2",
        "2026-02-04",
        (0, 17),
        "multi_token_prediction.py `process_mtp_loss` runs each MTP head's output layer and loss and returns, so "
        "its 16-bit logits are gone before the model's own output layer runs; before, from d7bf5aaaa8 "
        "(`layout_holds_mtp`), `GPTModel._postprocess` ran that loop itself and its local `mtp_logits` (the last "
        "head's) lived on through the main output layer and loss's forward, to the function's return (gpt_model.py "
        "at 11debfa7b4); before d7bf5aaaa8 `MultiTokenPredictionBlock.forward` computed the MTP loss and dropped "
        "its logits on return",
    ),
    "fsdp_grads_own_dtype": Change(
        MEGATRON_CORE,
        "adfe9e11d9",
        "2026-07-01",
        (0, 19),
        "Megatron-FSDP's main gradients take --megatron-fsdp-main-grads-dtype (auto: the parameters' dtype); "
        "before, DDP's grad_reduce_in_fp32 (on under --bf16 unless --grad-reduce-in-bf16) made them fp32 "
        "(mcore_fsdp_adapter.py, 'Grandfathered Argument')",
    ),
    "jit_fuser_compiles": Change(
        PYTORCH,
        "v2.2.0",
        "2024-01-30",
        (2, 2),
        "Megatron-Core's `jit_fuser` (its fused cross-entropy, bias-GeLU, SwiGLU functions) is `torch.compile` "
        'from PyTorch 2.2 on (megatron/core/jit.py `is_torch_min_version("2.2.0a0")`); before, torch.jit.script',
    ),
    "fsdp2_root_reshards": Change(
        PYTORCH,
        "v2.8.0",
        "2025-08-06",
        (2, 8),
        "FSDP2 honours a stated `reshard_after_forward=True` on the root module (pytorch/pytorch#154704 and "
        "#155319, June 2025: _fsdp_state.py `_lazy_init` drops the root's post-forward reshard only when "
        "`_auto_reshard_after_forward`, fully_shard left it unset); before, `_lazy_init` set the root's "
        "`post_forward_mesh_info = None` always: the root stayed gathered after the model's forward",
    ),
    "pp_output_chunks_last_only": Change(
        PYTORCH,
        "v2.8.0",
        "2025-05-13",
        (2, 8),
        "torch.distributed.pipelining keeps a stage's forward outputs for the step's merged output on the last "
        "stage only (pytorch/pytorch#153383: stage.py `forward_one_chunk` appends to `output_chunks` under "
        "`if self.is_last`); before, every stage kept every micro-batch's output in `output_chunks` until the next "
        "step's `clear_runtime_states`",
    ),
    "pp_step_return_outputs": Change(
        PYTORCH,
        "v2.10.0",
        "2025-10-22",
        (2, 10),
        "`PipelineSchedule.step(return_outputs=False)` (pytorch/pytorch#165822) keeps no output chunk on the last "
        "stage, and torchtitan passes it from e5ef99aab (2025-10-22, v0.2.1: train.py); before, the last stage "
        "kept every micro-batch's output (the logits) in `output_chunks` until the next step",
    ),
    "torchtitan_pp_return_outputs": Change(
        TORCHTITAN,
        "e5ef99aab",
        "2025-10-22",
        (0, 2),  # v0.2.1 on (v0.2.0, 2025-10-17, predates it; a tag states major.minor only)
        "torchtitan's train.py calls `pp_schedule.step(..., return_outputs=False)` (#1922), which PyTorch 2.10's "
        "pipelining takes to keep no output chunk on the last stage (`pp_step_return_outputs`); before, the "
        "default kept them",
    ),
    "inductor_autotune_host_copies": Change(
        PYTORCH,
        "v2.6.0",
        "2025-01-29",
        (2, 6),
        "Inductor's CachingAutotuner copies a kernel's mutated arguments to the host where cloning them on the "
        "device would raise the peak (_inductor/runtime/triton_heuristics.py `copy_args_to_cpu_if_needed`, in "
        "the v2.6.0 wheel, not the v2.5.0 one; proposed as pytorch/pytorch#136701); before, each benchmark run "
        "of a kernel with several configs cloned them on the device (`CachingAutotuner.bench` → `clone_args`) "
        "beside Triton's `do_bench` L2 flush buffer",
    ),
    "mcore_router_te_gemm": Change(
        MEGATRON_CORE,
        "0f058666a8",
        "2025-06-14",
        (0, 13),
        "Megatron-Core's router under --moe-router-dtype fp32 runs its gating GEMM as one TE GEMM of the 16-bit "
        "input writing fp32 logits, and casts the input to fp32 in the backward (!3387, moe_utils.py "
        "`RouterGatingLinearFunction`); before, router.py `TopKRouter.gating` cast the input to fp32 in the forward "
        "(`F.linear(input.to(router_dtype), ...)`), autograd casting its gradient back",
    ),
    "te_fused_grouped_mlp": Change(
        TRANSFORMER_ENGINE,
        "29a8c2fec",
        "2026-04-03",
        (2, 14),
        "TE's op fuser fuses a GroupedLinear, a scaled GLU and a GroupedLinear under MXFP8 into cuDNN frontend's "
        "CuTe DSL grouped-GEMM kernels (#2769 on main; the v2.14 tag holds it as ops/fused/forward_grouped_mlp.py and "
        "backward_grouped_mlp.py, their weight gradients cuBLAS's grouped-tensor GEMM; the joint op of grouped_mlp.py "
        "with the CuTe DSL weight-gradient kernel from 91bb9cfe4, 2026-06-11); before, the op fuser ran its basic ops",
    ),
    "mcore_fused_grouped_mlp": Change(
        MEGATRON_CORE,
        "6815c0fefe",
        "2026-05-15",
        (0, 18),
        "Megatron-Core's TEGroupedMLP runs its experts through TE's op fuser under use_transformer_engine_op_fuser "
        "(#4636, experts.py `TEGroupedMLP._fused_forward`); before, the op fuser built TE's ops for dense MLPs only",
    ),
    "mcore_paged_stash": Change(
        MEGATRON_CORE,
        "f007db77b9",
        "2026-05-22",
        (0, 18),
        "Megatron-Core's paged stash of the fused grouped MLP's saved tensors (#4247, moe/paged_stash.py) and the "
        "rank capacity that sizes HybridEP's buffers (moe_expert_rank_capacity_factor)",
    ),
    "torchtitan_config_registry": Change(
        TORCHTITAN,
        "9810191bb",
        "2026-02-23",
        (0, 3),  # after v0.2.2 (2026-02-20), the newest tag: the next minor release
        "torchtitan reads no job TOML: a job is a config_registry function (--module, --config) with CLI "
        "overrides (#2386, config/manager.py `ConfigManager`, tomllib gone); before, `--job.config_file` TOML",
    ),
    "torchtitan_replicate_composes": Change(
        TORCHTITAN,
        "e1847f439",
        "2026-03-09",
        (0, 3),
        "data-parallel replication composes with TP, PP and CP (#2458: `apply_replicate`, per-module "
        "torch.distributed._composable.replicate, in place of `apply_ddp`); before, replicating without FSDP "
        "ran DDP, which refused any other parallelism (models/llama3/infra/parallelize.py `parallelize_llama`: "
        '"DDP has not supported > 1D parallelism")',
    ),
    "torchtitan_op_sac_only": Change(
        TORCHTITAN,
        "114151ad4",
        "2026-03-23",
        (0, 3),
        "selective activation checkpointing is the per-op policy alone: `selective_ac_option` and "
        "`_layer_sac_count` gone (#2357, config/configs.py `ActivationCheckpointConfig`, "
        "distributed/activation_checkpoint.py), no every-N-th-block setting in its place; before, "
        "`selective_ac_option = N` checkpointed a rank's blocks N, 2N, ... (`_apply_layer_sac`)",
    ),
    "torchtitan_lm_head": Change(
        TORCHTITAN,
        "786e26f8e",
        "2026-04-27",
        (0, 3),
        "the decoder's output projection is the module `lm_head` (#2937, models/common/decoder.py; "
        "distributed/pipeline_parallel.py `_generate_llm_fqn_per_model_part` puts `norm`, `lm_head` last); "
        "before, `output`",
    ),
    "torchtitan_no_etp": Change(
        TORCHTITAN,
        "c4b409af2",
        "2026-04-30",
        (0, 3),
        "expert tensor parallelism is gone (#3167: the `etp` mesh axis and config/configs.py "
        "`expert_tensor_parallel_degree` removed), the experts of an expert-parallel run unsharded by TP; before, "
        "etp 1 or TP",
    ),
    "torchtitan_ac_policy_classes": Change(
        TORCHTITAN,
        "c5d93d109",
        "2026-06-15",
        (0, 3),
        "activation checkpointing is a policy class chosen by the config's type (#3674, "
        "distributed/activation_checkpoint.py: `Trainer.Config.activation_checkpoint` is `SelectiveAC.Config`, "
        "`FullAC.Config`, `MemoryBudgetAC.Config` or None); before, config/configs.py `ActivationCheckpointConfig` "
        "and its `mode`",
    ),
    "torchtitan_token_batch": Change(
        TORCHTITAN,
        "73aed7f6c",
        "2026-08-20",
        (0, 3),
        "the batch is counted in tokens (#4121, config/configs.py): `training.num_tokens_per_microbatch_per_dp_rank`, "
        "`num_tokens_per_train_step`, `max_context_length` and `parallelism.num_pp_microbatches` replace "
        "`local_batch_size`, `global_batch_size`, `seq_len` and `pipeline_parallel_microbatch_size`",
    ),
    "torchtitan_fused_qkv": Change(
        TORCHTITAN,
        "3396a4b37",
        "2026-06-24",
        (0, 3),  # in no tagged release: v0.2.2 (2026-02-20) is the newest tag, so the next minor release
        "Llama 3's, Qwen3's and gpt-oss's attention projects Q, K and V with one `wqkv` linear and splits its "
        "output into contiguous copies (models/common/attention.py `FusedQKVLinear`, from ad7a86533; made the "
        "default by models/llama3/__init__.py `fuse_qkv=True`); before, three linears wq, wk, wv "
        "(`QKVLinear`, models/llama3/model.py `Attention` at 9dec370 and v0.2.2)",
    ),
}


@dataclass(frozen=True)
class Release:
    """One library's release as a run config states it: a (major, minor) tag or a commit date."""

    version: tuple[int, int] | None = None
    date: str | None = None  # YYYY-MM-DD

    def holds(self, change: Change) -> bool:
        """Whether this release's code has *change* (unstated: the newest code, which has every one)."""
        if self.version is not None:
            return self.version >= change.release
        if self.date is not None:
            return self.date >= change.date
        return True


def parse_release(library: str, value: str) -> Release:
    """*value* as a release of *library*; ValueError naming what is accepted where it is none."""
    text = value.strip()
    if library == PYTORCH and re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise ValueError(f"{text!r}: a PyTorch release is its version (e.g. {_EXAMPLE[PYTORCH]}), not a date")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        try:
            datetime.date.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a calendar date (YYYY-MM-DD)") from None
        return Release(date=text)
    match = _TAG[library].fullmatch(text)
    if match:
        version = (int(match.group(1)), int(match.group(2)))
        if version in KNOWN_RELEASES[library]:
            return Release(version=version)
    newest, day = UNSTATED.get(library, NEWEST[library])  # what an unstated release is, named in the refusal
    if library == PYTORCH:
        raise ValueError(f"{text[:40]!r} is no PyTorch release ppb knows: give its version (e.g. {_EXAMPLE[library]}; "
                         f"unset: {newest})")  # fmt: skip
    raise ValueError(
        f"{text[:40]!r} is no {_SHOWN[library]} release ppb knows: give its tag (e.g. {_EXAMPLE[library]}) "
        f"or the date of the commit run (YYYY-MM-DD; unset: {newest}, {day})"
    )


def send_waits_of(release: Release) -> str:
    """`timing.interleaved_send_waits` as a Megatron-Core release runs it (ppb_core.pipeline_p2p)."""
    if release.holds(CHANGES["forward_send_waited_first"]):
        return "core_v0.18"
    return "core_r0.10" if release.holds(CHANGES["tunable_schedule_sends"]) else "core_r0.8"
