"""Which Megatron-LM flags `megatron_import` carries into a run config, reads past, or refuses, and the
run config fields whose errors it says with the flag that sets them."""

from __future__ import annotations

# Flags with no bearing on a training iteration's memory or time: logging, checkpoints, data,
# the learning-rate schedule and optimizer hyper-parameters, evaluation, inference-only settings.
NO_BEARING = frozenset(
    {
        "--lr", "--min-lr", "--weight-decay", "--clip-grad", "--init-method-std", "--seed", "--split",
        "--train-iters", "--train-samples", "--exit-interval", "--vocab-file", "--merge-file",
        "--tokenizer-model", "--tiktoken-pattern", "--distributed-backend", "--timing-log-level",
        "--timing-log-option", "--use-mcore-models", "--load", "--save", "--finetune", "--no-load-optim",
        "--no-load-rng", "--async-save", "--use-persistent-ckpt-worker", "--verify-integrity",
        "--mock-data", "--num-workers", "--distributed-timeout-minutes", "--tensorboard-dir",
        "--no-mmap-bin-files", "--rotary-base", "--rotary-scaling-factor", "--mscale", "--mscale-all-dim",
        "--norm-epsilon", "--moe-router-bias-update-rate",
        "--logging-level", "--log-progress", "--no-record-throughput", "--profile", "--profile-step-start",
        "--profile-step-end", "--profile-ranks", "--override-opt_param-scheduler",
        "--rerun-mode", "--test-mode", "--output-path", "--te-rng-tracker", "--inference-rng-tracker",
        "--max-position-embeddings", "--tokenizer-type", "--vocab-size", "--make-vocab-size-divisible-by",
        "--dataloader-type", "--no-use-tokenizer-model-from-checkpoint-args", "--auto-detect-ckpt-format",
        "--use-tp-pp-dp-mapping", "--data-path", "--data-cache-path", "--mtp-loss-scaling-factor",
        "--apply-layernorm-1p", "--rotary-interleaved", "--disable-gloo-process-groups",
        # the FIM dataset (megatron/training/datasets/fim_dataset.py `GPTFIMDataset`, d98e8a64) rearranges
        # each sample's token ids in the data loader's workers into a sample of the same --seq-length: the
        # device sees the same batch shapes
        "--fim-data", "--fim-rate", "--fim-spm-rate", "--fim-split-sample", "--fim-fragment-rate",
        "--fim-no-prefix", "--fim-prefix-token", "--fim-middle-token", "--fim-suffix-token", "--fim-pad-token",
        "--fim-eod-token",
        # torchrun's own (the launcher's): the GPU count is read from them where --gpus is not given
        "--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--node-rank", "--master_addr",
        "--master-addr", "--master_port", "--master-port", "--rdzv_backend", "--rdzv-backend",
        "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_id", "--rdzv-id", "--standalone",
        # srun's / sbatch's own
        "--mpi", "--nodes", "--ntasks", "--ntasks-per-node", "--gpus-per-node", "--account", "--partition",
        "--job-name", "--time", "--output", "--error", "--exclusive", "--dependency", "--no-container-mount-home",
    }
)  # fmt: skip
# difflib's ratio above which an unknown flag is said as a likely typo: no flag of Megatron-LM's
# arguments.py (d98e8a64) that ppb does not carry comes this close to one it carries
TYPO_SIMILARITY = 0.9
# Megatron-LM's own flags (arguments.py and its config dataclasses' `argparse_meta` names, d98e8a64; every
# '--' name under megatron/ checked) that come within TYPO_SIMILARITY of a flag `ppb check --plan` reads:
# read past there, not refused as typos
NEAR_READ_FLAGS = frozenset({"--fp4-format", "--fp4-param-gather", "--megatron-fsdp-main-params-dtype"})
# Megatron-LM's flags of TE's fused grouped MLP (TransformerConfig's fields, which arguments.py's
# `ArgumentGroupFactory` makes flags, d98e8a64), read only where it runs (`megatron_import._op_fuser`): elsewhere
# said as not modelled, never as a typo (--moe-expert-rank-capacity-factor is 0.92 like --moe-expert-capacity-factor)
FUSED_EXPERT_FLAGS = frozenset(
    {
        "--moe-mlp-glu-interleave-size",
        "--moe-expert-rank-capacity-factor",
        "--moe-paged-stash",
        "--moe-paged-stash-buffer-size-factor-cuda",
        "--moe-paged-stash-buffer-size-factor-cpu",
    }
)
NO_BEARING_PREFIXES = (
    "--log-", "--save-", "--eval-", "--lr-", "--adam-", "--ckpt-", "--dist-ckpt-", "--wandb-",
    "--tensorboard-", "--use-checkpoint-", "--inference-", "--async-", "--no-ckpt-", "--decoupled-",
    "--muon-", "--rl-", "--grpo-", "--straggler-", "--container-",
)  # fmt: skip
# Fusions of a linear's bias with what follows it (megatron/core/fusions: fused_bias_gelu, fused_bias_swiglu,
# fused_bias_dropout): without biases (--disable-bias-linear) turning them off changes no kernel ppb prices.
BIAS_FUSIONS = frozenset({"--no-bias-gelu-fusion", "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion"})
# Flags given at the value that changes nothing ppb prices (--rotary-percent 1.0 rotates every channel).
# --outer-dp-sharding-strategy no_shard is arguments.py's default, and any value acts only under hybrid FSDP
# (an outer data-parallel dimension, which pretrain_gpt.py's launch sets with --num-distributed-optimizer-instances).
AT_DEFAULT = {"--rotary-percent": "1.0", "--outer-dp-sharding-strategy": "no_shard"}
# Flags that bear on a run but change nothing ppb prices, each with why (Megatron-LM d98e8a64).
NOTHING_PRICED = {
    # training.py `train`: gc.disable() and one gc.collect() before the loop; ppb prices no
    # garbage collection (the automatic collector's pauses are the host's, unmodelled either way)
    "--manual-gc": "Python's automatic garbage collector off: ppb prices no collection either way",
    # training.py `post_training_step_callbacks`: gc.collect() when iteration % interval == 0
    "--manual-gc-interval": "a full collection on one iteration in N: the typical iteration ppb prices runs none",
    # TE cpu_offload.py `OffloadableLayerState.start_offload` (d0067d0d): the host copies' pinned buffers kept
    # for the next iteration instead of allocated again (torch's caching host allocator reuses them anyway)
    "--cpu-offloading-retain-pinned-cpu-buffers": "host buffers kept between iterations: no device memory or time",
    # fused_bias_geglu.py `weighted_bias_quick_geglu_impl` (core_v0.17.0): the offset goes into the fused kernel
    # as a tensor (`torch.tensor(linear_offset, device=...)`, made whatever its value): no pass of its own
    "--glu-linear-offset": "added inside the fused quick-GEGLU kernel: no pass or tensor of its own",
    # moe_utils.py `apply_router_token_dropping` (d98e8a64): "probs" or "position" picks which tokens beyond an
    # expert's capacity drop, by one top-k over the probabilities or the routing map: the same count kept
    "--moe-token-drop-policy": "which tokens beyond the capacity drop: the same count kept, all ppb prices",
}
# Flags ppb carries into the run config (read below); the rest are noted or read past.
MODELLED = frozenset(
    {
        "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size", "--group-query-attention",
        "--num-query-groups", "--kv-channels", "--normalization", "--position-embedding-type",
        "--use-rotary-position-embeddings", "--disable-bias-linear", "--add-bias-linear", "--add-qkv-bias",
        "--qk-layernorm", "--attention-dropout", "--hidden-dropout", "--untie-embeddings-and-output-weights",
        "--swiglu", "--squared-relu", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
        "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-router-num-groups",
        "--moe-router-group-topk", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
        "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers", "--seq-length",
        "--micro-batch-size", "--global-batch-size", "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size", "--context-parallel-size", "--cp-comm-type",
        "--hierarchical-context-parallel-sizes",
        "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--sequence-parallel",
        "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
        "--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--use-distributed-optimizer", "--use-torch-fsdp2",
        "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--bf16", "--fp16", "--optimizer",
        "--attention-backend", "--use-flash-attn", "--transformer-impl", "--recompute-granularity",
        "--recompute-activations", "--recompute-method", "--recompute-num-layers", "--recompute-modules",
        "--no-rope-fusion", "--fp8-format", "--moe-router-dtype", "--moe-permute-fusion",
        "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity",
        "--moe-grouped-gemm", "--overlap-moe-expert-parallel-comm", "--moe-shared-expert-overlap",
        "--no-gradient-accumulation-fusion", "--deterministic-mode", "--cross-entropy-loss-fusion",
        "--cross-entropy-fusion-impl", "--no-check-for-nan-in-loss-and-grad", "--log-params-norm",
        "--log-num-zeros-in-grad", "--exit-duration-in-mins", "--check-weight-hash-across-dp-replicas-interval",
        "--overlap-grad-reduce", "--overlap-param-gather",
        "--tp-comm-overlap", "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend",
        "--main-grads-dtype", "--vocab-size", "--tokenizer-type", "--make-vocab-size-divisible-by",
        "--max-position-embeddings", "--defer-embedding-wgrad-compute", "--wgrad-deferral-limit",
        "--num-distributed-optimizer-instances", "--microbatch-group-size-per-virtual-pipeline-stage",
        "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16", "--loss-scale",
        "--no-masked-softmax-fusion", "--attention-softmax-in-fp32", "--apply-query-key-layer-scaling",
        "--fp8-recipe", "--fine-grained-activation-offloading", "--offload-modules", "--min-offloaded-tensor-size",
        "--cpu-offloading-num-layers", "--quick-geglu", "--window-size", "--window-attn-skip-freq", "--softmax-type",
        "--activation-func-clamp-value", "--no-bias-dropout-fusion", "--no-overlap-p2p-communication",
    }
)  # fmt: skip
# Model kinds pretrain_gpt.py builds that ppb does not: refused, with what they are.
NOT_PRICED = {
    "--hybrid-layer-pattern": "a hybrid Mamba model (pretrain_mamba.py)",
    "--hybrid-override-pattern": "a hybrid Mamba model (pretrain_mamba.py)",
    "--is-hybrid-model": "a hybrid Mamba model",
    "--encoder-num-layers": "an encoder-decoder model (T5)",
    "--spec": "a layer spec of its own (its layers are not the GPT decoder layer ppb prices)",
    "--heterogeneous-layers-config-path": "layers of different shapes",
    "--experimental-attention-variant": "an attention variant ppb does not price",
}
# Flags whose value Megatron-LM's parser takes from a list (d98e8a64: transformer_config.py's Literal
# fields, arguments.py's `choices=`): another value is a typo Megatron-LM refuses, not a run to price.
CHOICES = {
    "--fp8-format": ("e4m3", "hybrid"),  # transformer_config.py fp8
    "--recompute-method": ("uniform", "block"),  # transformer_config.py recompute_method
    "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),  # moe_token_dispatcher_type
    "--main-grads-dtype": ("fp32", "bf16"),  # arguments.py
    "--main-params-dtype": ("fp32", "fp16"),  # arguments.py
}
# Run config fields a validation error may name, and the flag that sets each.
FIELD_FLAGS = {
    "parallel.tp": "--tensor-model-parallel-size",
    "parallel.pp": "--pipeline-model-parallel-size",
    "parallel.cp": "--context-parallel-size",
    "parallel.cp_variant": "--cp-comm-type",
    "parallel.hierarchical_cp_sizes": "--hierarchical-context-parallel-sizes",
    "parallel.ep": "--expert-model-parallel-size",
    "parallel.etp": "--expert-tensor-parallel-size",
    "parallel.vpp": "--num-virtual-stages-per-pipeline-rank",
    "parallel.layout": "--pipeline-model-parallel-layout",
    "parallel.overlap_moe_expert_parallel_comm": "--overlap-moe-expert-parallel-comm",
    "parallel.microbatch_group_size_per_vp_stage": "--microbatch-group-size-per-virtual-pipeline-stage",
    "timing.overlap_p2p_comm_warmup_flush": "--overlap-p2p-communication-warmup-flush",
    "timing.overlap_p2p_comm": "--no-overlap-p2p-communication",
    "timing.te_attention_backend": "--attention-backend",
    "timing.moe_shared_expert_overlap": "--moe-shared-expert-overlap",
    "training.seq_length": "--seq-length",
    "training.micro_batches": "--global-batch-size",
    "training.recompute": "--recompute-granularity",
    "training.recompute.modules": "--recompute-modules",
    "models.0.num_attention_heads": "--num-attention-heads",
    "models.0.num_key_value_heads": "--num-query-groups",
    "models.0.vocab_size": "--vocab-size",
    "models.0.num_experts": "--num-experts",
    # the model spec's own fields (pydantic's errors name them under `spec`, ppb's limits among them)
    "models.0.spec.num_layers": "--num-layers",
    "models.0.spec.hidden_size": "--hidden-size",
    "models.0.spec.intermediate_size": "--ffn-hidden-size",
    "models.0.spec.num_attention_heads": "--num-attention-heads",
    "models.0.spec.num_key_value_heads": "--num-query-groups",
    "models.0.spec.num_experts": "--num-experts",
    "models.0.spec.experts_per_token": "--moe-router-topk",
    "models.0.spec.expert_groups": "--moe-router-num-groups",
    "models.0.spec.expert_group_limit": "--moe-router-group-topk",
    "models.0.spec.vocab_size": "--vocab-size",
    "models.0.spec.max_position_embeddings": "--max-position-embeddings",
    "training.micro_batch_size": "--micro-batch-size",
    "models.0.spec.sliding_window": "--window-size",
    "models.0.spec.activation_clamp": "--activation-func-clamp-value",
    "timing.matmul_dtype": "--fp8-format",
    "training.defer_embedding_wgrad_compute": "--defer-embedding-wgrad-compute",
    "training.wgrad_deferral_limit": "--wgrad-deferral-limit",
    "parallel.distributed_optimizer_instances": "--num-distributed-optimizer-instances",
    "training.offload_modules": "--offload-modules",
    "timing.fp8_param_gather": "--fp8-param-gather",
    "timing.tp_comm_overlap_methods": "--tp-comm-overlap-cfg",
    "timing.ub_sm_margin": "--tp-comm-overlap-cfg",
    "training.layer_wise_param_layout": "--no-use-layer-wise-param-layout",
    "timing.fp8_bf16_layers": "--first-last-layers-bf16",
    "training.min_offloaded_tensor_size": "--min-offloaded-tensor-size",
    "training.cpu_offloading_num_layers": "--cpu-offloading-num-layers",
    "device": "--device",
}
# RunParallel's checks across its fields (config/run.py), by how the problem starts, and the flag to name.
PARALLEL_PROBLEMS = (
    ("ep·etp", "--expert-model-parallel-size"),
    ("schedule interleaved needs pp > 1", "--pipeline-model-parallel-size"),
)


# The shell's reserved words and operators a launch script's branches leave among the words
# (`launch_script` reads both branches of an `if`): never a flag's value.
SHELL_WORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "for", "while", "until", "in", "function",
     "{", "}", "!", "[[", "]]", "[", "]", ";", ";;", "&&", "||", "|"}
)  # fmt: skip
