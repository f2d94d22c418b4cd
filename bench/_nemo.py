"""NVIDIA's NeMo / Megatron-Bridge performance summary, 25.11 container: pre-training throughput of
Llama 3 and Qwen3 runs on DGX H100 and DGX B200, as run configs for bench/public_runs.py.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at 5776a6d90 (2025-12-10), section
"25.11 NeMo Container", tables "System: DGX-B200" and "System: DGX-H100" (and DGX-GB200's Llama 3 8B
row, whose recipe is the B200's, and its Qwen3 30B-A3B row, whose preset is the table's; the B200
and GB200 figures in parentheses, FP8-MX): per row the GPUs, precision,
GBS, MBS, sequence, FSDP, TP, PP, CP, VP, EP and tokens/s per GPU (seconds = GBS · sequence /
(tokens/s per GPU · GPUs)). The recipes are the release's, Megatron-Bridge v0.2.0 (7af9601c9, the
25.11 container's): scripts/performance/configs/<model>/workload_base_configs.py (what each row sets
beyond the table: recompute, CUDA graphs, dispatcher), <model>_llm_pretrain.py (TP communication
overlap, FSDP switches), utils/helpers.py `set_common_perf_overrides` (every run: rope fusion,
TransformerEngine's fused cross-entropy, no NaN checks), `set_user_overrides` (the parameter gather
overlapped with the optimizer step when DP, PP and VP all exceed 1), `get_precision_config`
("fp8_cs": BF16 with FP8 current scaling on every layer, first_last_layers_bf16 off; "fp8_mx":
MXFP8), and src/megatron/bridge/recipes/<model> (the distributed optimizer with
overlap_grad_reduce and overlap_param_gather; grad_reduce_in_fp32 off in the perf configs).
Where the table and the recipe differ the table's parallel sizes are taken (it is what ran), but for the
H100 Qwen3 30B-A3B row, whose MBS, VP and GA columns (2, 24, 32) are its 25.09 token-dropping row's while
its preset sets MBS 1 and VP 12, as the 26.02 table lists that preset (`_QWEN3_ROWS`).
"""

from __future__ import annotations

from typing import Any

from _public import LLAMA3_405B, LLAMA31_8B, LLAMA31_70B

NEMO = "NeMo 25.11 performance summary (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 5776a6d90)"
# 26.04: the 26.04.01 revision (21d102f5e, 2026-05-27), which revised the first 26.04 figures (74695a06d) and
# is what the archive (docs/performance-summary-archive.md) and the v0.4.2 docs
# (docs/fern/versions/0.4.2/pages/performance-summary.mdx) still publish at 067f987df
NEMO_2604 = "NeMo 26.04.01 performance summary (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 21d102f5e)"

# What every 25.11 Megatron-Bridge perf run sets (helpers.py set_common_perf_overrides; the recipes'
# DDP config): TE's fused cross-entropy, fused rotary, no NaN checks on loss or gradients, and the
# data-parallel gradient reduce-scatter and parameter all-gather overlapped (distributed optimizer).
_COMMON_TIMING: dict[str, Any] = {
    "cross_entropy_fusion": True,
    # utils/overrides.py (5776a6d90 l. 56; 0fbfe7d3e, 74695a06d likewise): `cross_entropy_fusion_impl = "te"`
    "cross_entropy_fusion_impl": "te",
    "rope_fusion": True,
    "check_for_nan_in_grad": False,
    "overlap": {"dp": 1.0, "param_gather": 1.0},
    # NeMo 2's data step (nemo/collections/llm/gpt/model/base.py `gpt_data_step`): every rank reads its own batch,
    # no tensor-parallel broadcast; its MockDataModule (gpt/data/mock.py) builds no attention mask where
    # Transformer Engine is installed (`create_attention_mask or not HAVE_TE`, default False)
    "batch_broadcast": False,
    "attention_mask_in_dataloader": False,
    # the 25.11 container's cuDNN (Megatron-Bridge docs/releases/software-versions.md at v0.2.0, "NeMo Framework
    # 25.11": cuDNN 9.13.1.26): its attention kernels on B200 and GB200 (ppb_core.timing.attention_rates)
    "cudnn_release": "9.13.1.26",
}
# the 26.04 container's (the same file at v0.4.2, "NeMo Framework 26.04": cuDNN 9.20.0.48-1)
CUDNN_2604 = "9.20.0.48"
# The releases each container ran (`framework_release`; the same file at v0.2.0 and v0.4.2). 25.11: PyTorch
# 2.9.0a0, Transformer Engine 2.9, Megatron Core "dev:0.15.0", the Megatron-LM commit Megatron-Bridge v0.2.0 pins
# (3rdparty/Megatron-LM at 0d8e0714cd, 2025-11-17). 26.04: PyTorch 2.11.0a0, Transformer Engine 2.14, Megatron
# Core 0.17.0.
RELEASES_2511 = {"megatron_core": "2025-11-17", "transformer_engine": "2.9", "pytorch": "2.9.0a0"}
RELEASES_2604 = {"megatron_core": "0.17.0", "transformer_engine": "2.14", "pytorch": "2.11.0a0"}
# Llama 3 8B's config.json: as 3.1's but its rope theta and 8192 positions (no bearing on time).
_LLAMA3_8B = {**LLAMA31_8B, "max_position_embeddings": 8192}


# The presets' FP8 recipes run every TE linear in FP8, which saves the input it multiplied quantized for the weight
# gradient (TE v2.14.1 module/linear.py `_Linear.forward`: `saved_inputmat = inputmat` with only its columnwise
# data kept; grouped_linear.py likewise per expert): ppb's `linear` cache, as `ppb import megatron` sets it for
# --fp8-format (ppb_core.balance.megatron_import).
_FP8_CACHE = "linear"


def _llama_run(
    name: str,
    spec: dict[str, Any],
    gpus: int,
    gbs: int,
    mbs: int,
    parallel: dict[str, int],
    device: str,
    *,
    recompute: dict[str, Any] | None = None,
    fsdp: bool = False,
    layout: str | None = None,
    fp8_recipe: str = "tensorwise",
    mx_gathers_apart: bool = False,
    gathers_overlapped: bool = True,
) -> dict[str, Any]:
    """A Llama 3 run at sequence 8192 in BF16 with FP8 GEMMs: current scaling (the table's FP8-CS) or,
    for the table's parenthesized figures on B200 and GB200, MXFP8 (FP8-MX) with the same recipe.
    *mx_gathers_apart*: the release keeps MXFP8 runs' parameter gathers off the optimizer step (26.04).
    *gathers_overlapped* False: the recipe turns `overlap_param_gather` off, so the distributed
    optimizer's parameter all-gathers run synchronously after the step (as `_qwen3_run`'s)."""
    tp, pp, cp, vp = (parallel.get(key, 1) for key in ("tp", "pp", "cp", "vp"))
    dp = gpus // (tp * pp * cp)
    with_step = gathers_with_optimizer_step(dp, pp, vp) and not (mx_gathers_apart and fp8_recipe == "mxfp8")
    with_step = with_step and gathers_overlapped
    sharding: dict[str, Any] = {"fsdp": True, "zero": 3} if fsdp else {"zero": 1}
    schedule: dict[str, Any] = {"vpp": vp, "schedule": "interleaved"} if vp > 1 else {}
    return {
        "name": name,
        "framework": "megatron",
        # should_pad_vocab: Megatron pads 128,256 to a multiple of 128 · TP
        "models": [{"name": "llm", "spec": spec, "pad_vocab_multiple": 128}],
        "parallel": {
            "dp": dp,
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "sequence_parallel": tp > 1,
            **sharding,
            **schedule,
            **({"layout": layout} if layout else {}),
        },
        "training": {
            "seq_length": 8192,
            "micro_batch_size": mbs,
            "micro_batches": gbs // (mbs * dp),
            "dtype": "bf16",
            "grad_bytes": 2,  # grad_reduce_in_fp32 = False (set_llama3_common_configs)
            "flash_attention": True,
            # FP8 training: TE's linears save their quantized input (`_FP8_CACHE`)
            "fp8_cache": _FP8_CACHE,
            **({"recompute": recompute} if recompute else {}),
        },
        "device": {"name": device},
        "timing": {
            **_COMMON_TIMING,
            "matmul_dtype": "fp8",
            # get_precision_config("fp8_cs"): bf16_with_fp8_current_scaling_mixed; "fp8_mx": bf16_with_mxfp8_mixed
            "fp8_recipe": fp8_recipe,
            # both presets set fp8_param_gather (mixed_precision.py, v0.2.0, v0.4.0, v0.4.2): bf16_with_mxfp8_mixed
            # the parameters MXFP8 (all-gathered in bf16 through the gradient buffer, reuse_grad_buf_for_mxfp8_
            # param_ag: ppb's `iteration._param_gather`), bf16_with_fp8_current_scaling_mixed FP8 (gathered in
            # FP8); MixedPrecisionConfig.__setattr__ makes fp8_param follow it, and get_precision_config("fp8_cs")
            # changes only first_last_layers_bf16
            "fp8_param_gather": True,
            # --tp-comm-overlap with the recipe's userbuffers config where TP > 1
            "overlap": {
                **_COMMON_TIMING["overlap"],
                "tp": 1.0 if tp > 1 else 0.0,
                "param_gather": 1.0 if gathers_overlapped else 0.0,
            },
            # the recipes' userbuffers configs where TP > 1 (Megatron-Bridge comm_overlap.py, v0.2.0 7af9601c9 and
            # v0.4.0 0fbfe7d3e: every FP8 Llama one, userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192,
            # ..._b200_h8192_tp2_..., ..._h100_h16384_tp8_cp2_..., ..._b200_h16384_tp4_cp2_...): proj_fprop and
            # fc2_fprop as RingExchangeOverlapCfg (TE's initialize_ub default: pipeline), the bulk GEMMs'
            # BulkOverlapCfg with set_sm_margin=False (no pipeline GEMM left to set it)
            **(
                {
                    "tp_comm_overlap_methods": {"proj_fprop": "ring_exchange", "fc2_fprop": "ring_exchange"},
                    "ub_sm_margin": False,
                }
                if tp > 1
                else {}
            ),
            # FSDP runs turn gradient accumulation fusion off (llama3_8b_h100_config)
            **({"gradient_accumulation_fusion": False} if fsdp else {}),
            "overlap_param_gather_with_optimizer_step": with_step,
        },
    }


def gathers_with_optimizer_step(dp: int, pp: int, vp: int) -> bool:
    """helpers.py `set_user_overrides` (v0.2.0; overrides.py `set_post_overrides` at v0.4.0, which
    leaves out fp8_mx and nvfp4): `overlap_param_gather_with_optimizer_step` where DP, PP and VP all
    exceed 1."""
    return dp > 1 and pp > 1 and vp > 1


# Llama 3.1 405B's account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split
# (recipes/llama/llama3.py, llama31_405b_pretrain_config): the embedding and the loss each count as a
# layer, 126 + 2 = 128 over PP 8 × VP 8 = 64 virtual stages of two, so the first holds the embedding
# and one layer, the last one layer and the loss.
_405B_LAYOUT = "Et|" + "tt|" * 62 + "tL"

# (label, spec, GPUs, GBS, MBS, parallel, device, published tokens/s per GPU, options, assumptions)
_LLAMA_ROWS: tuple[tuple[Any, ...], ...] = (
    (
        "Llama 3 8B FP8 FSDP (8 H100)",
        _LLAMA3_8B, 8, 128, 1, {}, "h100-80gb", 14451.0,
        # LLAMA3_8B_H100_FP8_CS_BASE_CONFIG: recompute_num_layers=5 (full, block); the table's FSDP 8
        {"recompute": {"granularity": "full", "method": "block", "num_layers": 5}, "fsdp": True},
        ("the table's FSDP 8 as Megatron FSDP over all 8 (the recipe's FSDP branch)",),
    ),
    (
        "Llama 3 70B FP8 TP4 PP8 (64 H100)",
        LLAMA31_70B, 64, 128, 1, {"tp": 4, "pp": 8, "vp": 5}, "h100-80gb", 1602.0, {}, (),
    ),
    (
        "Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)",
        LLAMA3_405B, 1024, 512, 1, {"tp": 8, "pp": 8, "cp": 2, "vp": 8}, "h100-80gb", 292.0,
        {"layout": _405B_LAYOUT}, (),
    ),
    (
        "Llama 3 8B FP8 (8 B200)",
        _LLAMA3_8B, 8, 128, 2, {}, "b200", 30624.0, {},
        (),
    ),
    (
        "Llama 3.1 405B FP8 TP4 PP8 CP2 (128 B200)",
        LLAMA3_405B, 128, 64, 1, {"tp": 4, "pp": 8, "cp": 2, "vp": 8}, "b200", 661.0,
        {"layout": _405B_LAYOUT}, (),
    ),
    # The table's figures in parentheses: the same rows in MXFP8 ("FP8-CS (FP8-MX)"); the release's
    # FP8_MX configs are its FP8_CS ones (LLAMA3_8B_B200_FP8_MX_BASE_CONFIG =
    # LLAMA3_8B_B200_FP8_CS_BASE_CONFIG; LLAMA31_405B_B200_FP8_MX_BASE_CONFIG likewise).
    (
        "Llama 3 8B MXFP8 (8 B200)",
        _LLAMA3_8B, 8, 128, 2, {}, "b200", 29521.0, {"fp8_recipe": "mxfp8"}, (),
    ),
    (
        "Llama 3.1 405B MXFP8 TP4 PP8 CP2 (128 B200)",
        LLAMA3_405B, 128, 64, 1, {"tp": 4, "pp": 8, "cp": 2, "vp": 8}, "b200", 624.0,
        # llama31_llm_pretrain.py `llama31_405b_b200_config` (v0.2.0) turns the parameter gathers'
        # overlap off for fp8_mx ("keeping this eanbled causes NaN grad norm": comm_overlap, ddp and
        # optimizer overlap_param_gather False); the 8B recipes leave it on
        {"layout": _405B_LAYOUT, "fp8_recipe": "mxfp8", "gathers_overlapped": False}, (),
    ),
    # "System: DGX-GB200": LLAMA3_8B_GB200_FP8_CS_BASE_CONFIG (MBS 2, CUDA graphs over the full
    # iteration), its FP8_MX config the same; 8 GPUs of one NVLink domain.
    (
        "Llama 3 8B FP8 (8 GB200)",
        _LLAMA3_8B, 8, 128, 2, {}, "gb200", 31508.0, {}, (),
    ),
    (
        "Llama 3 8B MXFP8 (8 GB200)",
        _LLAMA3_8B, 8, 128, 2, {}, "gb200", 29789.0, {"fp8_recipe": "mxfp8"}, (),
    ),
)  # fmt: skip


# Qwen3 MoE (Megatron-Bridge v0.2.0 models/qwen/qwen_provider.py, Qwen3MoEModelProvider and its
# 30B_A3B / 235B_A22B subclasses; the HF config.json files agree): RMSNorm, SwiGLU, no biases, per-head
# q/k RMSNorm, head size 128, untied embeddings of 151,936, 128 experts, top 8, grouped GEMMs,
# the alltoall dispatcher with permute fusion.
_QWEN3 = {
    "vocab_size": 151936,
    "head_dim": 128,
    "qk_norm": True,
    "max_position_embeddings": 40960,
    "num_experts": 128,
    "experts_per_token": 8,
}
QWEN3_30B_A3B = {
    **_QWEN3,
    "hidden_size": 2048,
    "num_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
}
QWEN3_235B_A22B = {
    **_QWEN3,
    "hidden_size": 4096,
    "num_layers": 94,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
}


def _qwen3_run(
    name: str,
    spec: dict[str, Any],
    gpus: int,
    gbs: int,
    mbs: int,
    parallel: dict[str, int],
    device: str,
    *,
    a2a_overlap: bool,
    layout: str | None = None,
    fp8_recipe: str = "tensorwise",
    gathers_overlapped: bool = True,
    mx_gathers_apart: bool = False,
) -> dict[str, Any]:
    """A Qwen3 MoE run at sequence 4096 (set_qwen3_common_configs: no recompute, router fusion, forced
    load balancing for dropless routing, BF16 gradient reduction), ETP 1, FP8 GEMMs. *gathers_overlapped*
    False: the distributed optimizer's parameter all-gathers run synchronously after the step
    (`overlap_param_gather` off; distrib_optimizer.py `step_with_ready_grads` at Megatron-LM 0d8e0714cd,
    the 25.11 container's: every chunk's `start_param_sync` there, which `overlap_param_gather_with_
    optimizer_step` does not change). *mx_gathers_apart*: as `_llama_run`'s (26.04)."""
    tp, pp, vp, ep = (parallel.get(key, 1) for key in ("tp", "pp", "vp", "ep"))
    dp = gpus // (tp * pp)
    with_step = gathers_with_optimizer_step(dp, pp, vp) and gathers_overlapped
    with_step = with_step and not (mx_gathers_apart and fp8_recipe == "mxfp8")
    schedule: dict[str, Any] = {"vpp": vp, "schedule": "interleaved"} if vp > 1 and not layout else {}
    return {
        "name": name,
        "framework": "megatron",
        # Megatron-Bridge's GPTModelProvider leaves should_pad_vocab False unless the recipe sets it (Qwen3's
        # do not): 151,936 as it stands, a multiple of every TP here (pad_vocab_multiple 1: TP's multiple only)
        "models": [{"name": "llm", "spec": spec, "pad_vocab_multiple": 1}],
        "parallel": {
            "dp": dp,
            "tp": tp,
            "pp": pp,
            "ep": ep,
            "etp": 1,
            "sequence_parallel": tp > 1,
            "zero": 1,
            **schedule,
            **({"layout": layout} if layout else {}),
            # moe_a2a_overlap: overlap_moe_expert_parallel_comm and delay_wgrad_compute (helpers.py)
            **({"overlap_moe_expert_parallel_comm": True} if a2a_overlap else {}),
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": mbs,
            "micro_batches": gbs // (mbs * dp),
            "dtype": "bf16",
            "grad_bytes": 2,
            "flash_attention": True,
            "fp8_cache": _FP8_CACHE,
            # the router: TE's fused kernels and forced load balancing (set_qwen3_common_configs'
            # moe_router_fusion, moe_router_force_load_balancing) and the aux loss Megatron-Bridge's
            # Qwen3MoEBridge.provider_bridge sets (aux_loss at 1e-3, no pre-softmax)
            "moe": {
                "permute_fusion": True,
                "router": {"fusion": True, "aux_losses": ["aux_loss"], "force_balance": True},
            },
        },
        "device": {"name": device},
        "timing": {
            **_COMMON_TIMING,
            "matmul_dtype": "fp8",
            "fp8_recipe": fp8_recipe,  # "fp8_cs": tensorwise; "fp8_mx": bf16_with_mxfp8_mixed, mxfp8
            "fp8_param_gather": True,  # both presets' (`_llama_run`)
            # the H100 30B recipe asks for --tp-comm-overlap, which needs TP > 1; the 235B's sets it off
            "overlap": {**_COMMON_TIMING["overlap"], "tp": 0.0, "param_gather": 1.0 if gathers_overlapped else 0.0},
            "overlap_param_gather_with_optimizer_step": with_step,
            # moe_a2a_overlap's delay_wgrad_compute (helpers.py `set_moe_a2a_overlap_overrides`, v0.2.0),
            # which comm_overlap.py `CommOverlapConfig.setup` copies onto the model config (`_apply_cfgs`)
            "delay_wgrad_compute": a2a_overlap,
        },
    }


# 235B: the recipe's account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split
# (recipes/qwen/qwen3_moe.py): 94 + 2 = 96 layers over the virtual stages.
def _split_layout(stages: int, per_stage: int) -> str:
    """Megatron's layout when the embedding and the loss each count as a layer: *stages* virtual
    stages of *per_stage*, the first holding the embedding, the last the loss."""
    middle = ("t" * per_stage + "|") * (stages - 2)
    return "E" + "t" * (per_stage - 1) + "|" + middle + "t" * (per_stage - 1) + "L"


# qwen3_llm_pretrain.py `qwen3_235b_a22b_b200_config` (v0.2.0) turns the parameter gathers' overlap off
# for fp8_mx ("keeping this enabled causes NaN grad norm": comm_overlap, ddp and optimizer
# overlap_param_gather False); no other Qwen3 row's config touches it.
_GATHERS_APART = ("Qwen3 235B MXFP8 PP8 EP8 (64 B200)",)
# The H100 30B row at its preset's MBS 1 and VP 12, not the table's MBS 2, VP 24 and GA 32: those three are
# the 25.09 table's token-dropping row's (same file, "25.09 NeMo Container", DGX-H100), while the release's
# preset (configs/qwen3/workload_base_configs.py `QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG` at v0.2.0; renamed
# ..._PRETRAIN_CONFIG_... at 5776a6d90, unchanged) sets virtual_pipeline_model_parallel_size 12 and leaves
# WorkloadBaseConfig's micro_batch_size 1,
# which overrides.py `set_workload_base_configs` writes into the run; the 26.02 table (performance-summary.md
# at c0b9a0003, DGX-H100) lists the same preset, at GBS 1024, as MBS 1 and VP 12 at 5,113 tokens/s per GPU
# (25.11: 5,275). At MBS 2 and VP 24 ppb's memory puts stage 1's peak at 91,285 MiB against the H100's 81,559
# with no recompute (the combined 1F1B refuses full recompute); at MBS 1 and VP 12 at 63,628 (`ppb estimate`).
# (label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, moe_a2a_overlap, layout, assumptions)
_QWEN3_ROWS: tuple[tuple[Any, ...], ...] = (
    (
        "Qwen3 30B-A3B FP8 PP2 EP8 (16 H100)",
        QWEN3_30B_A3B, 16, 512, 1, {"pp": 2, "vp": 12, "ep": 8}, "h100-80gb", 5275.0, True, None,
        ("the recipe's MBS 1 and VP 12 (the table's 2 and 24: its 25.09 token-dropping row's)",),
    ),
    (
        "Qwen3 235B FP8 TP2 PP8 EP32 (256 H100)",
        QWEN3_235B_A22B, 256, 2048, 1, {"tp": 2, "pp": 8, "vp": 4, "ep": 32}, "h100-80gb", 1575.0, True,
        _split_layout(32, 3), (),
    ),
    (
        "Qwen3 30B-A3B MXFP8 EP8 (8 B200)",
        QWEN3_30B_A3B, 8, 512, 1, {"ep": 8}, "b200", 9299.0, False, None,
        (),
    ),
    (
        "Qwen3 235B MXFP8 PP8 EP8 (64 B200)",
        QWEN3_235B_A22B, 64, 1024, 1, {"pp": 8, "vp": 2, "ep": 8}, "b200", 3269.0, True, _split_layout(16, 6),
        ("the table's VP 2 (the recipe's 4)",),
    ),
    # "System: DGX-GB200": QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG (v0.2.0) is the table's row as it stands
    # (8 GPUs, MBS 4, GBS 512, EP 8), with HybridEP and TE graphs of moe_router and moe_preprocess (no attn,
    # unlike its FP8_CS sibling). The table's other GB200 MoE rows (235B BF16 on 256 GPUs, VP 3, EP 32;
    # DeepSeek-V3 w/o MTP, GBS 4096) differ from their release presets: not taken.
    (
        "Qwen3 30B-A3B MXFP8 EP8 (8 GB200)",
        QWEN3_30B_A3B, 8, 512, 4, {"ep": 8}, "gb200", 23766.0, False, None,
        (),
    ),
)  # fmt: skip


def nvlink_domain(gpus: int) -> int:
    """The NVLink domain of a GB200/GB300 job: scripts/performance/utils/executors.py `slurm_executor`
    (v0.4.2; v0.2.0 likewise beyond a rack) runs 4 GPUs a node (argument_parser.py NUM_GPUS_PER_NODE_MAP) in
    sbatch `--segment` blocks of the node count's largest divisor up to 18 (an NVL72 rack's 18 trays), all of
    them up to 18 nodes: 64 nodes of 256 GPUs in segments of 16, 64 GPUs a rack."""
    nodes = gpus // 4
    segment = nodes if nodes <= 18 else max(size for size in range(1, 19) if nodes % size == 0)
    return 4 * segment


def _row(label: str, raw: dict[str, Any], gpus: int, gbs: int, tps: float, assumptions: tuple[str, ...]):
    sequence = raw["training"]["seq_length"]
    if raw["device"]["name"] in ("gb200", "gb300"):  # one NVLink domain a rack's segment, not 8 GPUs
        raw["parallel"]["devices_per_node"] = nvlink_domain(gpus)
    return {
        "name": f"NeMo {label}",
        "source": NEMO,
        "raw": raw,
        "published": f"{tps:,.0f} tokens/s per GPU",
        "seconds": gbs * sequence / (tps * gpus),
        "assumptions": (
            f"{'MXFP8' if 'MXFP8' in label else 'FP8 current scaling'} as ppb's FP8 GEMMs with their casts",
            "attention in BF16 (TE's default for FP8 recipes)",
            # mixed_precision.py `bf16_with_mxfp8_mixed` (v0.2.0): reuse_grad_buf_for_mxfp8_param_ag's copies
            # of the gathered parameters out of the gradient buffer (param_and_grad_buffer.py) not modelled
            *(("MXFP8's gathered parameters not copied out of the gradient buffer",) if "MXFP8" in label else ()),
            *assumptions,
        ),
    }


# The 25.11 container's HybridEP gathers the routing maps with NCCL: deepseek-ai/DeepEP hybrid-ep before a484936
# (2026-01-20, "Add custom AG"; 3d4a884 of 2025-12-05 the last without it) calls
# `torch.distributed.all_gather_into_tensor` in deep_ep/hybrid_ep_buffer.py `dispatch`, and NeMo 25.11's stack
# (Megatron-Core 0d8e0714cd, 2025-11-17) predates that commit (`timing.hybridep_custom_allgather`).
HYBRIDEP_BEFORE_CUSTOM_ALLGATHER = {"hybridep_custom_allgather": False}

# The rows whose recipe sets CUDA graphs (workload_base_configs.py: LLAMA3_8B_B200_FP8_CS_BASE_CONFIG
# local + full_iteration; QWEN3_30B_A3B_B200_FP8_CS_BASE_CONFIG, = _FP8_MX, transformer_engine with
# ["moe_router", "moe_preprocess"]); the other rows' configs set none (WorkloadBaseConfig: None).
_GRAPHS: dict[str, dict[str, Any]] = {
    "Llama 3 8B FP8 (8 B200)": {"cuda_graph_impl": "full_iteration"},
    "Llama 3 8B MXFP8 (8 B200)": {"cuda_graph_impl": "full_iteration"},
    "Llama 3 8B FP8 (8 GB200)": {"cuda_graph_impl": "full_iteration"},
    "Llama 3 8B MXFP8 (8 GB200)": {"cuda_graph_impl": "full_iteration"},
    "Qwen3 30B-A3B MXFP8 EP8 (8 B200)": {
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_modules": ["moe_router", "moe_preprocess"],
    },
    # QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG; its flex dispatcher: moe_flex_dispatcher_backend "hybridep"
    # (qwen3_moe.py `_qwen3_moe_common` -> flex_dispatcher_backend.py `apply_flex_dispatcher_backend`: the flex
    # dispatcher type), on the 32 SMs helpers.py `set_common_perf_overrides` gives HybridEP
    # (`moe_hybridep_num_sms`, Megatron-LM 0d8e0714cd's name for the flex dispatcher's SM count)
    "Qwen3 30B-A3B MXFP8 EP8 (8 GB200)": {
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_modules": ["moe_router", "moe_preprocess"],
        "moe_dispatcher": "hybridep",
        "moe_flex_dispatcher_num_sms": 32,
        **HYBRIDEP_BEFORE_CUSTOM_ALLGATHER,
    },
}


# DeepSeek-V3 (w/ MTP), FP8-MX, on 256 B200: the table's GBS 2048, MBS 1, PP 16, VP 1, EP 8; 2,139 tokens/s
# per GPU. The release's recipe (v0.2.0): configs/deepseek/workload_base_configs.py
# DEEPSEEK_V3_B200_BASE_CONFIG (= its FP8_MX config): PP 16, EP 8, GBS 2048, recompute_modules
# ["mla_up_proj"], no moe_a2a_overlap, no CUDA graphs, no flex dispatcher; deepseek_llm_pretrain.py
# `set_deepseek_v3_common_configs`: sequence 4096, router fusion, selective recompute, BF16 gradient
# reduction, forced load balancing; `deepseek_v3_b200_config`: overlap_grad_reduce. recipes/deepseek/
# deepseek_v3.py `pretrain_config`: MTP 1 layer, the (16, 1) layout (the embedding and 4 layers, 14 stages
# of 4, the last layer with the MTP layer and the loss), moe_permute_fusion, MBS 1. models/deepseek
# (DeepSeekModelProvider, DeepSeekV3Bridge): the alltoall dispatcher, grouped GEMM, pre-softmax, the router
# in fp32, seq_aux_loss at the HF config's aux_loss_alpha, sigmoid scores, expert bias, top-k scaling 2.5,
# vocabulary divisible by 1280 (129,280 as it is). helpers.py `set_common_perf_overrides`: rope fusion,
# TE's fused cross-entropy, no NaN checks.
def _deepseek_layout(stages: int, per_stage: int) -> str:
    """recipes/deepseek/deepseek_v3.py `set_deepseek_v3_pipeline_model_parallel_layout` (v0.2.0, v0.4.2):
    the embedding with *per_stage* layers, full stages of *per_stage*, and the last stage the rest of
    the 61 layers with the MTP layer and the loss."""
    last = 61 - per_stage * (stages - 1)
    return "E" + ("t" * per_stage + "|") * (stages - 1) + "t" * last + "mL"


def _deepseek_v3_run(
    name: str,
    gpus: int,
    gbs: int,
    mbs: int,
    parallel: dict[str, int],
    layout: str,
    device: str,
    recompute_modules: list[str],
    *,
    a2a_overlap: bool = False,
) -> dict[str, Any]:
    """A DeepSeek-V3 (w/ MTP) MXFP8 run at sequence 4096, TP 1, ETP 1 (the recipe above)."""
    pp, ep = parallel["pp"], parallel["ep"]
    dp = gpus // pp
    return {
        "name": name,
        "framework": "megatron",
        "models": [{"name": "llm", "config": "hf/deepseek-v3.json", "pad_vocab_multiple": 1280}],
        "parallel": {
            "dp": dp,
            "tp": 1,
            "pp": pp,
            "ep": ep,
            "etp": 1,
            "zero": 1,
            "layout": layout,
            # moe_a2a_overlap: overlap_moe_expert_parallel_comm and delay_wgrad_compute (overrides.py)
            **({"overlap_moe_expert_parallel_comm": True} if a2a_overlap else {}),
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": mbs,
            "micro_batches": gbs // (mbs * dp),
            "dtype": "bf16",
            "grad_bytes": 2,
            "flash_attention": True,
            "fp8_cache": _FP8_CACHE,
            "recompute": {"granularity": "selective", "modules": list(recompute_modules)},
            "moe": {
                "router_dtype": "fp32",
                "permute_fusion": True,
                "router": {
                    "score_function": "sigmoid",
                    "aux_losses": ["seq_aux_loss"],
                    "expert_bias": True,
                    "pre_softmax": True,
                    "topk_scaling": True,
                    "fusion": True,
                    "force_balance": True,
                },
            },
        },
        "device": {"name": device},
        "timing": {
            **_COMMON_TIMING,
            "matmul_dtype": "fp8",
            "fp8_recipe": "mxfp8",
            "fp8_param_gather": True,
            **({"delay_wgrad_compute": True} if a2a_overlap else {}),
        },
    }


_DEEPSEEK_ASSUMPTIONS = (
    "MXFP8 as ppb's FP8 GEMMs with their casts",
    "attention in BF16 (TE's default for FP8 recipes)",
    "MXFP8's gathered parameters not copied out of the gradient buffer",
    "routing balanced (forced)",
)
# the recipe's optimizer (deepseek_v3.py `deepseek_v3_pretrain_config`): exp_avg and exp_avg_sq in BF16
_BF16_MOMENTS = "the precision-aware optimizer's BF16 moments priced as FP32 ones"


def _deepseek_v3_b200() -> dict[str, Any]:
    gpus, gbs = 256, 2048
    label = "DeepSeekV3 MXFP8 PP16 EP8 (256 B200)"
    raw = _deepseek_v3_run(label, gpus, gbs, 1, {"pp": 16, "ep": 8}, _deepseek_layout(16, 4), "b200", ["mla_up_proj"])
    # models/deepseek/deepseek_provider.py (v0.2.0) `DeepSeekProvider.moe_shared_expert_overlap = True`, which only
    # the flex backends (training/flex_dispatcher_backend.py) and moe_a2a_overlap (utils/helpers.py) clear
    raw["timing"]["moe_shared_expert_overlap"] = True
    tps = 2139.0
    return {
        **_row(label, raw, gpus, gbs, tps, ()),
        "assumptions": (
            *_DEEPSEEK_ASSUMPTIONS,
            _BF16_MOMENTS,
        ),
    }


def nemo_rows() -> list[dict[str, Any]]:
    """Each row's fields for bench/public_runs.py's PublicRun."""
    rows = []
    for label, spec, gpus, gbs, mbs, parallel, device, tps, options, assumptions in _LLAMA_ROWS:
        raw = _llama_run(label, spec, gpus, gbs, mbs, parallel, device, **options)
        raw["timing"].update(_GRAPHS.get(label, {}))
        rows.append(_row(label, raw, gpus, gbs, tps, assumptions))
    for label, spec, gpus, gbs, mbs, parallel, device, tps, a2a, layout, assumptions in _QWEN3_ROWS:
        recipe = "mxfp8" if "MXFP8" in label else "tensorwise"
        raw = _qwen3_run(
            label,
            spec,
            gpus,
            gbs,
            mbs,
            parallel,
            device,
            a2a_overlap=a2a,
            layout=layout,
            fp8_recipe=recipe,
            gathers_overlapped=label not in _GATHERS_APART,
        )
        raw["timing"].update(_GRAPHS.get(label, {}))
        rows.append(_row(label, raw, gpus, gbs, tps, ("routing balanced (forced)", *assumptions)))
    rows.append(_deepseek_v3_b200())
    for row in rows:
        row["raw"]["framework_release"] = dict(RELEASES_2511)
    return rows


# NeMo 26.04 (docs/performance-summary.md, the 26.04.01 revision 21d102f5e, 2026-05-27, "26.04.01 NeMo
# Container"; it revised 74695a06d's figures by up to 4% and its DeepSeek-V3 B200 row's sizes), with the
# recipes of Megatron-Bridge v0.4.2 (c81012934, 2026-05-28; its perf presets for these rows are v0.4.1's, and
# v0.4.0's for the Llama ones): scripts/performance/configs/llama/
# llama3_workload_base_configs.py and llama31_workload_base_configs.py, the V2 presets (GBS 256 for
# the 70B, 256 GPUs and GBS 1536 for the 405B), llama3_llm_pretrain.py / llama31_llm_pretrain.py
# (userbuffers TP overlap, set_llama3_common_configs: BF16 gradient reduction), utils/overrides.py
# (`_set_common_perf_overrides`: TE's fused cross-entropy, rotary fusion, no NaN checks;
# `set_post_overrides`: parameter gathers with the optimizer step where DP, PP and VP exceed 1, but
# not for fp8_mx), utils/precision.py (fp8_cs: current scaling, no BF16 first/last layers). Dense
# Llama rows whose preset is not NVFP4 (ppb prices no NVFP4), on 1024 H100 or 256 GB200 or fewer.
# LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 keeps V1's VP 8: 16 · 8 = 128 virtual stages, one
# layer each with the embedding and the loss counted as layers.
_405B_ONE_A_STAGE = "E|" + "t|" * 126 + "L"

# (label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, options, training words)
_LLAMA_2604_ROWS: tuple[tuple[Any, ...], ...] = (
    # LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V2: TP 4, PP 8, VP 5, GBS 256
    ("Llama 3 70B FP8 TP4 PP8 GBS256 (64 H100)", LLAMA31_70B, 64, 256, 1, {"tp": 4, "pp": 8, "vp": 5}, "h100-80gb",
     1664.0, {}, {}),
    # LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: TP 2, PP 4, VP 5, GBS 256
    ("Llama 3 70B MXFP8 TP2 PP4 (64 GB200)", LLAMA31_70B, 64, 256, 1, {"tp": 2, "pp": 4, "vp": 5}, "gb200",
     3712.0, {"fp8_recipe": "mxfp8"}, {}),
    # ..._GB200_FP8_CS_V2: Megatron FSDP over all 64, MBS 2, TransformerEngine's CPU offloading of 40 layers;
    # llama3_70b_pretrain_config_gb200 is llama3_70b_pretrain_config_gb300 line for line (fsdp_double_buffer,
    # gradient accumulation fusion off): the GB300 row's twin but for the offloaded layers (its 20)
    ("Llama 3 70B FP8 FSDP (64 GB200)", LLAMA31_70B, 64, 256, 2, {}, "gb200", 4224.0, {"fsdp": True},
     {"cpu_offloading_num_layers": 40}),
    # LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2: TP 4, PP 16, VP 4, no FSDP, GBS 1536
    ("Llama 3.1 405B FP8 TP4 PP16 (256 GB200)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 16, "vp": 4}, "gb200",
     864.0, {"layout": _405B_LAYOUT}, {}),
    ("Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 16, "vp": 8},
     "gb200", 800.0, {"layout": _405B_ONE_A_STAGE, "fp8_recipe": "mxfp8"}, {}),
    # LLAMA31_405B_PRETRAIN_CONFIG_H100_FP8_CS_V2 (new in 26.04.01): V1's TP 8, PP 8, CP 2, VP 8 on 1024 GPUs,
    # GBS 1536; llama31_405b_pretrain_config_h100: userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192. 64
    # virtual stages of two with the embedding and the loss counted (the 25.11 row's layout).
    ("Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)", LLAMA3_405B, 1024, 1536, 1, {"tp": 8, "pp": 8, "cp": 2, "vp": 8},
     "h100-80gb", 328.0, {"layout": _405B_LAYOUT}, {}),
)  # fmt: skip


def _flex(backend: str) -> dict[str, Any]:
    """The flex dispatcher's timing words: overrides.py `set_workload_base_configs` ->
    flex_dispatcher_backend.py `apply_flex_dispatcher_backend` (v0.4.2: flex on Hopper and Blackwell,
    the shared expert's overlap off), HybridEP on the 32 SMs `_set_common_perf_overrides` gives it."""
    return {"moe_dispatcher": backend, **({"moe_flex_dispatcher_num_sms": 32} if backend == "hybridep" else {})}


def _te_graphs(*modules: str) -> dict[str, Any]:
    """Transformer Engine's CUDA graphs of a preset's `cuda_graph_scope` (overrides.py `_set_cuda_graph_overrides`)."""
    return {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": list(modules)}


_ROUTER = ("moe_router", "moe_preprocess")

# The table's Qwen3 rows, each its v0.4.2 preset in configs/qwen/qwen3_workload_base_configs.py (30B: V1, the
# only one; 235B: V2, GBS 8192), qwen3_llm_pretrain.py (flex dispatcher unless the preset names none, then
# alltoall: set_workload_base_configs) and set_qwen3_common_configs (no recompute, router fusion, forced
# balance, BF16 gradient reduction). The 235B's recipe counts the embedding and the loss as layers.
# (label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, moe_a2a_overlap, layout, timing words)
_QWEN3_2604_ROWS: tuple[tuple[Any, ...], ...] = (
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: MBS 4, EP 8, hybridep, TE graphs of the router
    ("Qwen3 30B-A3B MXFP8 EP8 (8 GB200)", QWEN3_30B_A3B, 8, 512, 4, {"ep": 8}, "gb200", 26112.0, False, None,
     {**_flex("hybridep"), **_te_graphs(*_ROUTER)}),
    # ..._B200_FP8_MX_V1 = ..._B200_BF16_V1: MBS 4, EP 8, hybridep, TE graphs of attention and the router
    ("Qwen3 30B-A3B MXFP8 EP8 (8 B200)", QWEN3_30B_A3B, 8, 512, 4, {"ep": 8}, "b200", 27136.0, False, None,
     {**_flex("hybridep"), **_te_graphs("attn", *_ROUTER)}),
    # ..._H100_FP8_CS_V1: 16 GPUs, GBS 1024, EP 16, no moe_a2a_overlap, hybridep, no graphs
    ("Qwen3 30B-A3B FP8 EP16 (16 H100)", QWEN3_30B_A3B, 16, 1024, 1, {"ep": 16}, "h100-80gb", 8960.0, False, None,
     _flex("hybridep")),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: PP 8, VP 3, EP 32, hybridep, graphs of attention and router
    ("Qwen3 235B MXFP8 PP8 VP3 EP32 (256 GB200)", QWEN3_235B_A22B, 256, 8192, 1, {"pp": 8, "vp": 3, "ep": 32},
     "gb200", 5680.0, False, _split_layout(24, 4), {**_flex("hybridep"), **_te_graphs("attn", *_ROUTER)}),
    # ..._B200_FP8_MX_V2 = ..._FP8_CS_V2: PP 8, EP 8, no moe_a2a_overlap, alltoall (qwen3_235b_a22b_pretrain_config_
    # b200), no graphs
    ("Qwen3 235B MXFP8 PP8 EP8 (256 B200)", QWEN3_235B_A22B, 256, 8192, 1, {"pp": 8, "ep": 8}, "b200", 3776.0,
     False, _split_layout(8, 12), {}),
    # ..._H100_FP8_CS_V2: TP 2, PP 8, VP 4, EP 32, moe_a2a_overlap, alltoall (tp_comm_overlap off), no graphs
    ("Qwen3 235B FP8 TP2 PP8 VP4 EP32 (256 H100)", QWEN3_235B_A22B, 256, 8192, 1,
     {"tp": 2, "pp": 8, "vp": 4, "ep": 32}, "h100-80gb", 1712.0, True, _split_layout(32, 3), {}),
)  # fmt: skip

# The table's DeepSeek-V3 rows (GBS 4096, sequence 4096): configs/deepseek/deepseek_workload_base_configs.py
# V2 presets at v0.4.2 and deepseek_llm_pretrain.py (the layout: the preset's pp_layout on GB200/GB300, else
# `set_deepseek_v3_pipeline_model_parallel_layout` by (PP, VP); selective recompute of the preset's modules;
# overlap_grad_reduce; the 25.11 row's recipe otherwise).
# (label, GPUs, MBS, parallel, device, tokens/s per GPU, layout, recompute modules, moe_a2a_overlap, timing)
_DEEPSEEK_2604_ROWS: tuple[tuple[Any, ...], ...] = (
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V2 (= its FP8_MX): PP 4, VP 4, EP 64, hybridep, recompute mlp, TE graphs
    # of attention and the router; (4, 4) is the (16, 1) layout
    ("DeepSeekV3 MXFP8 PP4 VP4 EP64 (256 GB200)", 256, 1, {"pp": 4, "ep": 64}, "gb200", 4256.0,
     _deepseek_layout(16, 4), ["mlp"], False, {**_flex("hybridep"), **_te_graphs("attn", *_ROUTER)}),
    # ..._B200_FP8_MX_V2: PP 8, VP 2, EP 32, deepep, moe_a2a_overlap, TE graphs of attention and the router,
    # recompute mla_up_proj and mlp; deepseek_v3_pretrain_config_b200 ignores the preset's pp_layout and takes the
    # (8, 2) layout, the same 16 virtual stages
    ("DeepSeekV3 MXFP8 PP8 VP2 EP32 (256 B200)", 256, 1, {"pp": 8, "ep": 32}, "b200", 3328.0,
     _deepseek_layout(16, 4), ["mla_up_proj", "mlp"], True, {**_flex("deepep"), **_te_graphs("attn", *_ROUTER)}),
)  # fmt: skip

_NOTES_2604 = ("the 26.04.01 container's Megatron-Bridge taken as v0.4.2, its other releases as 26.04's",)


def _as_2604(label: str, raw: dict[str, Any], gpus: int, gbs: int, tps: float, notes: tuple[str, ...]):
    """A 26.04.01 row: the container's cuDNN and releases, the group's source."""
    raw["timing"]["cudnn_release"] = CUDNN_2604
    raw["framework_release"] = dict(RELEASES_2604)
    row = _row(label, raw, gpus, gbs, tps, (*_NOTES_2604, *notes))
    return {**row, "name": f"NeMo 26.04 {label}", "source": NEMO_2604}


def nemo_2604_rows() -> list[dict[str, Any]]:
    """The 26.04 rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for label, spec, gpus, gbs, mbs, parallel, device, tps, options, training in _LLAMA_2604_ROWS:
        raw = _llama_run(label, spec, gpus, gbs, mbs, parallel, device, mx_gathers_apart=True, **options)
        raw["training"].update(training)
        notes = () if "MXFP8" in label else ("the table's FP8 as the FP8_CS preset",)
        rows.append(_as_2604(label, raw, gpus, gbs, tps, notes))
    for label, spec, gpus, gbs, mbs, parallel, device, tps, a2a, layout, timing in _QWEN3_2604_ROWS:
        recipe = "mxfp8" if "MXFP8" in label else "tensorwise"
        raw = _qwen3_run(
            label, spec, gpus, gbs, mbs, parallel, device, a2a_overlap=a2a, layout=layout, fp8_recipe=recipe,
            mx_gathers_apart=True,
        )  # fmt: skip
        raw["timing"].update(timing)
        rows.append(_as_2604(label, raw, gpus, gbs, tps, ("routing balanced (forced)",)))
    for label, gpus, mbs, parallel, device, tps, layout, modules, a2a, timing in _DEEPSEEK_2604_ROWS:
        raw = _deepseek_v3_run(label, gpus, 4096, mbs, parallel, layout, device, modules, a2a_overlap=a2a)
        raw["timing"].update(timing)
        row = _as_2604(label, raw, gpus, 4096, tps, ())
        rows.append({**row, "assumptions": (*_NOTES_2604, *_DEEPSEEK_ASSUMPTIONS, _BF16_MOMENTS)})
    return rows


# GPT-OSS 120B, NeMo 26.04 (docs/performance-summary.md at 74695a06d, "Model: GPT OSS 120B": BF16, GBS 1280,
# sequence 4096, TP 1, CP 1), the rows of devices ppb has, with the release's V2 presets (Megatron-Bridge
# v0.4.0, 0fbfe7d3e: scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py, which the table's
# sizes match): H100 PP 4, EP 8, MBS 1; B200 EP 8, MBS 4, HybridEP; GB200 EP 64, MBS 4, HybridEP with
# moe_a2a_overlap (overlap_moe_expert_parallel_comm, delay_wgrad_compute: utils/overrides.py
# `_set_moe_a2a_overlap_overrides`); all three recompute ["layernorm", "moe_act"] (selective), no CUDA graphs.
# gpt_oss_llm_pretrain.py `set_gpt_oss_common_configs`: BF16 gradient reduction, router fusion, forced load
# balancing. recipes/gpt_oss/gpt_oss.py `gpt_oss_120b_pretrain_config`: the HF model through GPTOSSBridge
# (models/gpt_oss/gpt_oss_bridge.py: alltoall dispatcher, grouped GEMM, permute fusion, no load-balancing
# loss, quick-GEGLU with clamp, learnable softmax, window (127, 0) skipped every 2nd layer, biases on every
# linear), no pipeline split accounting, 9 layers a stage at PP 4; GPTModelProvider leaves the vocabulary
# unpadded (201,088). utils/overrides.py `_set_common_perf_overrides`: TE's fused cross-entropy, rope fusion,
# no NaN checks, HybridEP on 32 SMs.
# NeMo 25.11 (the same file at 5776a6d90, "System: DGX-B200" and "System: DGX-H100"): GBS 512, MBS 4,
# sequence 4096, EP 8 (H100 PP 4), with v0.2.0's recipe (7af9601c9: configs/gpt_oss/workload_base_configs.py
# GPT_OSS_120B_B200_BF16_BASE_CONFIG and ..._H100_..., recompute ["layernorm", "moe_act"], no flex dispatcher,
# no moe_a2a_overlap; gpt_oss_llm_pretrain.py `set_gpt_oss_common_configs` as 26.04's). B200: the preset's EP 64
# (GPT_OSS_120B_B200_BF16_BASE_CONFIG; helpers.py `set_workload_base_configs` writes it into the model), not the
# table's 8: the table's B200 and H100 rows carry the same GBS, MBS, EP and GA (the H100 row's MBS, below, is a copy
# too); the 26.02 table (the same file at f171d7d30, "26.02 NeMo Container", v0.3.x's preset, still EP 64) lists
# DGX-B200 at EP 64, MBS 4, GBS 1280: 8,047 tokens/s, within 2% of this row's 8,213, while v0.4.0's V2 preset,
# the first at EP 8, runs 13,045 (26.04). Across 8 DGX B200 nodes, EP 64's all-to-all leaves the NVLink domain.
# H100: the preset's MBS 1 (GA 32), not the table's MBS 4, as the H100 Qwen3 row (docs/timing-validation.md,
# session 25): the table's GA 2 fits neither (MBS 4 at DP 16 is GA 8), the row repeating the B200 row's MBS and GA; the
# preset leaves BASE_GPT_OSS_120B_CONFIG's micro_batch_size 1, as 26.04's H100 row states; and MBS 4 does not
# fit an H100 under ppb's memory (stage 0 at 99,626 MiB of 81,559; MBS 1: 53,589). Its GB200 row runs sequence
# 8192 at MBS 1 and GBS 1280 against the preset's 4096, 4 and 512: not taken.
# Attention sinks run in cuDNN's fused attention (TE's nvte_get_fused_attn_backend from cuDNN 9.13.1, every GPT-OSS
# row's container at or past it; cudnn-frontend scaled_dot_product_flash_attention.h: the sink's gradient beside the
# backward's dO·O reduction), at its rates without them: no cuDNN measurement with a sink token is public.
_SINKS_NOTE = "the attention sinks at cuDNN's fused attention rates without them (no measurement with sinks)"
NEMO_2604_GPT_OSS = f"{NEMO_2604}, GPT OSS 120B"
NEMO_2511_GPT_OSS = f"{NEMO}, GPT OSS 120B"

# (release, device, GPUs, GBS, MBS, PP, EP, tokens/s per GPU, options, assumptions)
_GPT_OSS_ROWS: tuple[tuple[Any, ...], ...] = (
    ("26.04", "h100-80gb", 64, 1280, 1, 4, 8, 5810.0, {}, ()),
    ("26.04", "b200", 64, 1280, 4, 1, 8, 13045.0, {"hybridep": True}, ()),
    ("26.04", "gb200", 64, 1280, 4, 1, 64, 15938.0, {"hybridep": True, "a2a_overlap": True}, ()),
    ("25.11", "h100-80gb", 64, 512, 1, 4, 8, 5630.0, {}, ("the preset's MBS 1 (the table's 4)",)),
    ("25.11", "b200", 64, 512, 4, 1, 64, 8213.0, {}, ("the preset's EP 64 (the table's 8)",)),
)  # fmt: skip


def _gpt_oss_run(
    name: str,
    release: str,
    device: str,
    gpus: int,
    gbs: int,
    mbs: int,
    pp: int,
    ep: int,
    *,
    hybridep: bool = False,
    a2a_overlap: bool = False,
    recompute: bool = True,
) -> dict[str, Any]:
    """*recompute*: the preset's recompute_modules ["layernorm", "moe_act"] (selective); False: none, the
    recipe's own `recompute_granularity = None` where the preset names no modules (GB300, B300).
    ppb's `devices_per_node` is the GPUs one NVLink fabric joins: a DGX B200 or H100's 8, a GB200 job's
    sbatch segment (`nvlink_domain`, as `_row` takes it: all 64 of the GB200 run, so EP 64's all-to-all stays on
    NVLink 5 as HybridEP runs it on "GB200, GB300 with NVL72": flex_dispatcher_backend.py
    `apply_flex_dispatcher_backend`)."""
    dp = gpus // pp
    fabric = nvlink_domain(gpus) if device in ("gb200", "gb300") else 8
    return {
        "name": name,
        "framework": "megatron",
        "models": [{"name": "llm", "config": "hf/gpt-oss-120b.json", "pad_vocab_multiple": 1}],
        "parallel": {
            "dp": dp,
            "tp": 1,
            "pp": pp,
            "ep": ep,
            "etp": 1,
            "zero": 1,
            "devices_per_node": fabric,
            **({"overlap_moe_expert_parallel_comm": True} if a2a_overlap else {}),
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": mbs,
            "micro_batches": gbs // (mbs * dp),
            "dtype": "bf16",
            "grad_bytes": 2,
            "flash_attention": True,
            **({"recompute": {"granularity": "selective", "modules": ["layernorm", "moe_act"]}} if recompute else {}),
            "moe": {"permute_fusion": True, "router": {"fusion": True, "aux_losses": [], "force_balance": True}},
        },
        "device": {"name": device},
        "timing": {
            **_COMMON_TIMING,
            **({"cudnn_release": CUDNN_2604} if release == "26.04" else {}),
            "delay_wgrad_compute": a2a_overlap,
            # GPTOSSBridge (v0.4.0) and v0.2.0's GPTOSSProvider: bias_dropout_fusion False
            "bias_dropout_fusion": False,
            **({"moe_dispatcher": "hybridep", "moe_flex_dispatcher_num_sms": 32} if hybridep else {}),
        },
        "framework_release": dict(RELEASES_2604 if release == "26.04" else RELEASES_2511),
    }


def nemo_gpt_oss_rows() -> list[dict[str, Any]]:
    """NeMo 25.11's and 26.04's GPT-OSS 120B rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for release, device, gpus, gbs, mbs, pp, ep, tps, options, assumptions in _GPT_OSS_ROWS:
        system = {"h100-80gb": "H100", "b200": "B200", "gb200": "GB200"}[device]
        label = f"GPT-OSS 120B BF16{f' PP{pp}' if pp > 1 else ''} EP{ep} GBS{gbs} ({gpus} {system})"
        raw = _gpt_oss_run(label, release, device, gpus, gbs, mbs, pp, ep, **options)
        rows.append(
            {
                "name": f"NeMo {release} {label}",
                "source": NEMO_2604_GPT_OSS if release == "26.04" else NEMO_2511_GPT_OSS,
                "raw": raw,
                "published": f"{tps:,.0f} tokens/s per GPU",
                "seconds": gbs * 4096 / (tps * gpus),
                "assumptions": (
                    "routing balanced (forced)",
                    _SINKS_NOTE,
                    "the window at cuDNN 9.22's measured GB200 window-128 rate (sm100), the causal rule on H100",
                    *assumptions,
                ),
            }
        )
    return rows


# NeMo's Blackwell Ultra rows: DGX-GB300 and DGX-B300 (the catalog's `gb300` and `b300` entries), a group of
# their own (bench/public_runs.py). 26.04.01: the tables at 21d102f5e ("26.04.01 NeMo Container"), each row its
# v0.4.2 preset (c81012934: configs/llama/llama3_workload_base_configs.py and llama31_..., qwen/qwen3_...,
# deepseek/deepseek_..., gpt_oss/gpt_oss_... `*_GB300_*_V2` / `*_B300_*_V2`; llama3_llm_pretrain.py /
# llama31_llm_pretrain.py `*_config_gb300` / `*_config_b300`: B200's userbuffers configs where TP > 1; the Qwen3,
# DeepSeek and GPT-OSS recipes as for GB200/B200 above, the flex dispatcher where the preset names a backend, else
# alltoall: overrides.py `set_workload_base_configs`). 25.11: the "System: DGX-GB300" table at 5776a6d90, with the
# recipes of v0.2.0 (7af9601c9), taken where the table's sizes are its preset's but for the micro-batch size.
NEMO_2604_ULTRA = f"{NEMO_2604}, DGX-GB300 / DGX-B300"
NEMO_2511_ULTRA = f"{NEMO}, DGX-GB300"
_ULTRA_NOTES = ("Blackwell Ultra's sm_103 kernels priced as sm_100's where no GB300/B300 figure is public",)

# (label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, options, training words)
_LLAMA_ULTRA_ROWS: tuple[tuple[Any, ...], ...] = (
    # LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2: PP 4, VP 5 (TP 1), GBS 256, MBS 1
    ("Llama 3 70B MXFP8 PP4 VP5 (64 GB300)", LLAMA31_70B, 64, 256, 1, {"pp": 4, "vp": 5}, "gb300", 4864.0,
     {"fp8_recipe": "mxfp8"}, {}),
    # ..._GB300_FP8_CS_V2: Megatron FSDP over all 64, MBS 2, Transformer Engine's CPU offloading of 20 layers;
    # llama3_70b_pretrain_config_gb300: fsdp_double_buffer, gradient accumulation fusion off
    ("Llama 3 70B FP8 FSDP (64 GB300)", LLAMA31_70B, 64, 256, 2, {}, "gb300", 5248.0, {"fsdp": True},
     {"cpu_offloading_num_layers": 20}),
    # LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V2: TP 4, PP 8, VP 4, no FSDP, GBS 1536; the embedding and the loss
    # counted as layers (llama31_405b_pretrain_config): 128 over 32 virtual stages of 4
    ("Llama 3.1 405B FP8 TP4 PP8 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 8, "vp": 4}, "gb300",
     1024.0, {"layout": _split_layout(32, 4)}, {}),
    # ..._GB300_FP8_MX_V2: V1's PP 8, CP 2, VP 4 at TP 2
    ("Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 2, "pp": 8, "cp": 2, "vp": 4}, "gb300", 960.0, {"layout": _split_layout(32, 4), "fp8_recipe": "mxfp8"}, {}),
)  # fmt: skip

# (label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, layout, timing words); no moe_a2a_overlap
_QWEN3_ULTRA_ROWS: tuple[tuple[Any, ...], ...] = (
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1 (= _FP8_CS_V1): MBS 8, EP 8, hybridep, TE graphs of the router
    ("Qwen3 30B-A3B MXFP8 EP8 (8 GB300)", QWEN3_30B_A3B, 8, 512, 8, {"ep": 8}, "gb300", 31744.0, None,
     {**_flex("hybridep"), **_te_graphs(*_ROUTER)}),
    # ..._B300_FP8_MX_V1: the same
    ("Qwen3 30B-A3B MXFP8 EP8 (8 B300)", QWEN3_30B_A3B, 8, 512, 8, {"ep": 8}, "b300", 30720.0, None,
     {**_flex("hybridep"), **_te_graphs(*_ROUTER)}),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2: PP 4, VP 12, EP 32, MBS 2, hybridep, graphs of attention and
    # the router; 96 counted layers over 48 virtual stages of 2
    ("Qwen3 235B MXFP8 PP4 VP12 EP32 (256 GB300)", QWEN3_235B_A22B, 256, 8192, 2, {"pp": 4, "vp": 12, "ep": 32},
     "gb300", 6944.0, _split_layout(48, 2), {**_flex("hybridep"), **_te_graphs("attn", *_ROUTER)}),
    # ..._B300_FP8_MX_V2 (= _FP8_CS_V2): PP 8, EP 8, MBS 2, hybridep, no graphs
    ("Qwen3 235B MXFP8 PP8 EP8 (256 B300)", QWEN3_235B_A22B, 256, 8192, 2, {"pp": 8, "ep": 8}, "b300", 5936.0,
     _split_layout(8, 12), _flex("hybridep")),
)  # fmt: skip

# (label, GPUs, MBS, parallel, device, tokens/s per GPU, layout, recompute modules, timing words); GBS 4096
_DEEPSEEK_ULTRA_ROWS: tuple[tuple[Any, ...], ...] = (
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V2 (= its FP8_MX): PP 2, VP 8, EP 32, MBS 2, hybridep, no graphs
    # (cuda_graph_scope []), recompute mla_up_proj, pp_layout "Et*4|(t*4|)*14tmL"
    ("DeepSeekV3 MXFP8 PP2 VP8 EP32 (256 GB300)", 256, 2, {"pp": 2, "ep": 32}, "gb300", 4992.0,
     _deepseek_layout(16, 4), ["mla_up_proj"], _flex("hybridep")),
    # ..._B300_V2: PP 8 (no VP), EP 8, MBS 2, hybridep, TE graphs of attention and the router, recompute
    # mla_up_proj; deepseek_v3_pretrain_config_b300 takes set_deepseek_v3_pipeline_model_parallel_layout's (8, 1)
    ("DeepSeekV3 MXFP8 PP8 EP8 (256 B300)", 256, 2, {"pp": 8, "ep": 8}, "b300", 3456.0, _deepseek_layout(8, 8),
     ["mla_up_proj"], {**_flex("hybridep"), **_te_graphs("attn", *_ROUTER)}),
)  # fmt: skip

# Kimi K2 (kimi_k2.py `kimi_k2_pretrain_config` at v0.4.2 loads moonshotai/Kimi-K2-Instruct's config.json through
# KimiK2Bridge: DeepSeek-V3's MLA and router (sigmoid scores, expert bias, top-k scaling, seq_aux_loss) at 64 heads,
# 384 routed experts of 2048 and one shared, top 8 in one group, the first layer dense, a 163,840 vocabulary (a
# multiple of 1280), no MTP layer.
KIMI_K2 = {
    "family": "deepseek_v3",
    "vocab_size": 163840,
    "hidden_size": 7168,
    "num_layers": 61,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "intermediate_size": 18432,
    "max_position_embeddings": 131072,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "num_experts": 384,
    "experts_per_token": 8,
    "moe_intermediate_size": 2048,
    "shared_experts": 1,
    "first_dense_layers": 1,
    "expert_groups": 1,
    "expert_group_limit": 1,
}
# KIMI_K2_PRETRAIN_CONFIG_GB300 (its FP8_MX; kimi_workload_base_configs.py, v0.4.2): PP 4, VP 4, EP 64, MBS 2, GBS
# 4096, hybridep, no graphs, recompute mla_up_proj; `_get_kimi_k2_pipeline_layout(4, 4)`: the embedding and 4 layers,
# 14 virtual stages of 4, the last layer with the loss. kimi_llm_pretrain.py: the recipe's Muon (`dist_muon`, Megatron's
# layer-wise distributed optimizer; its parameter gathers not overlapped), under MXFP8 without FP8 parameter gathers
# (`set_kimi_k2_common_configs`), BF16 gradient reduction, router fusion, forced balance, overlap_grad_reduce.
_KIMI_LABEL = "Kimi K2 MXFP8 PP4 VP4 EP64 (256 GB300)"


def _kimi_k2_gb300() -> dict[str, Any]:
    layout = _deepseek_layout(16, 4).removesuffix("mL") + "L"
    raw = _deepseek_v3_run(_KIMI_LABEL, 256, 4096, 2, {"pp": 4, "ep": 64}, layout, "gb300", ["mla_up_proj"])
    raw["models"] = [{"name": "llm", "spec": KIMI_K2, "pad_vocab_multiple": 1280}]
    raw["training"]["optimizer"] = "muon"
    raw["timing"].update(_flex("hybridep"), fp8_param_gather=False)
    raw["timing"]["overlap"] = {**_COMMON_TIMING["overlap"], "param_gather": 0.0}
    row = _ultra_row(_KIMI_LABEL, raw, 256, 4096, 5328.0, "26.04")
    # distributed_muon_with_cosine_annealing (optimizer_utils.py): Nesterov momentum, one more lerp_ a matrix
    muon = "Muon's Nesterov momentum (muon_use_nesterov) priced as plain momentum"
    return {**row, "assumptions": (*_ULTRA_NOTES, *_NOTES_2604, *_DEEPSEEK_ASSUMPTIONS, muon)}


# GPT-OSS 120B, BF16, GBS 1280, MBS 4 (GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V2: EP 64, no flex backend named,
# so alltoall; ..._B300_BF16_V2: EP 8, hybridep), both with TE graphs of attention and the router, and no
# recompute: their V1 presets (v0.4.0 and v0.4.2 gpt_oss_workload_base_configs.py) name no recompute_modules, unlike
# GB200's, B200's and H100's ["layernorm", "moe_act"], so overrides.py `_set_recompute_overrides` leaves the recipe's
# `recompute_granularity = None` (recipes/gpt_oss/gpt_oss.py `gpt_oss_120b_pretrain_config`).
# (label, device, EP, tokens/s per GPU, hybridep)
_GPT_OSS_ULTRA_ROWS: tuple[tuple[Any, ...], ...] = (
    ("GPT-OSS 120B BF16 EP64 GBS1280 (64 GB300)", "gb300", 64, 19200.0, False),
    ("GPT-OSS 120B BF16 EP8 GBS1280 (64 B300)", "b300", 8, 15232.0, True),
)

# 25.11 "System: DGX-GB300" (5776a6d90): LLAMA3_8B_GB300_FP8_CS_BASE_CONFIG (v0.2.0: local CUDA graphs of the full
# iteration; its FP8_MX the same) and QWEN3_30B_A3B_GB300_FP8_MX_BASE_CONFIG (hybridep, TE graphs of the router),
# each at the table's MBS (2 and 4, the table's GA 8 and 16 agreeing) where the presets set 4 and 8.
# (label, kind, GBS, MBS, tokens/s per GPU)
_ULTRA_2511_ROWS: tuple[tuple[Any, ...], ...] = (
    ("Llama 3 8B FP8 (8 GB300)", "llama", 128, 2, 37556.0),
    ("Llama 3 8B MXFP8 (8 GB300)", "llama", 128, 2, 36108.0),
    ("Qwen3 30B-A3B MXFP8 EP8 (8 GB300)", "qwen3", 512, 4, 28934.0),
)

# The tables' GB300/B300 rows of models ppb has that are not priced, and why (printed by bench/public_runs.py).
ULTRA_SKIPPED: tuple[tuple[str, str], ...] = (
    ("26.04.01 Llama 3 70B NVFP4 PP4 VP5 (64 GB300)", "NVFP4: ppb prices no NVFP4 GEMMs or casts"),
    ("26.04.01 Llama 3.1 405B NVFP4 TP4 PP8 VP4 (256 GB300)", "NVFP4: ppb prices no NVFP4 GEMMs or casts"),
    ("26.04.01 Nemotron 3 Nano / Super (GB300, B300)", "hybrid Mamba models, which ppb does not describe"),
    ("25.11 Llama 3 70B FP8 FSDP (64 GB300)", "the table's GBS 256, v0.2.0's preset 128 (BASE_LLAMA3_70B_CONFIG)"),
    (
        "25.11 Llama 3.1 405B FP8 TP2 PP8 CP2 VP4 (256 GB300)",
        "v0.2.0's FP8_CS preset is Megatron FSDP with CPU offloading on 128 GPUs at GBS 64: the run's settings unknown",
    ),
    (
        "25.11 DeepSeekV3 w/o MTP BF16 / FP8-MX (256 GB300)",
        "the table's PP 2, EP 32, GBS 4096 without MTP are not v0.2.0's preset (PP 4, VP 4, EP 64, GBS 2048)",
    ),
    ("25.11 GPT OSS 120B BF16 (64 GB300)", "sequence 8192 at MBS 2, GBS 1280 against v0.2.0's 4096, GBS 512"),
    (
        "25.11 Qwen3 235B BF16 PP4 VP12 EP16 (256 GB300)",
        "v0.2.0's preset is TP 2, EP 64 on 64 GPUs at GBS 1024: the run's other settings unknown",
    ),
)


def _ultra_row(label: str, raw: dict[str, Any], gpus: int, gbs: int, tps: float, release: str, notes: tuple = ()):
    """A GB300/B300 row: its container's cuDNN and releases, the Blackwell Ultra group's source."""
    if release == "26.04":
        raw["timing"]["cudnn_release"] = CUDNN_2604
    raw["framework_release"] = dict(RELEASES_2604 if release == "26.04" else RELEASES_2511)
    row = _row(label, raw, gpus, gbs, tps, (*_ULTRA_NOTES, *(_NOTES_2604 if release == "26.04" else ()), *notes))
    source = NEMO_2604_ULTRA if release == "26.04" else NEMO_2511_ULTRA
    return {**row, "name": f"NeMo {release} {label}", "source": source}


def nemo_ultra_rows() -> list[dict[str, Any]]:
    """NeMo's published DGX-GB300 / DGX-B300 rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for label, spec, gpus, gbs, mbs, parallel, device, tps, options, training in _LLAMA_ULTRA_ROWS:
        raw = _llama_run(label, spec, gpus, gbs, mbs, parallel, device, mx_gathers_apart=True, **options)
        raw["training"].update(training)
        notes = () if "MXFP8" in label else ("the table's FP8 as the FP8_CS preset",)
        rows.append(_ultra_row(label, raw, gpus, gbs, tps, "26.04", notes))
    for label, spec, gpus, gbs, mbs, parallel, device, tps, layout, timing in _QWEN3_ULTRA_ROWS:
        raw = _qwen3_run(
            label, spec, gpus, gbs, mbs, parallel, device, a2a_overlap=False, layout=layout, fp8_recipe="mxfp8",
            mx_gathers_apart=True,
        )  # fmt: skip
        raw["timing"].update(timing)
        rows.append(_ultra_row(label, raw, gpus, gbs, tps, "26.04", ("routing balanced (forced)",)))
    for label, gpus, mbs, parallel, device, tps, layout, modules, timing in _DEEPSEEK_ULTRA_ROWS:
        raw = _deepseek_v3_run(label, gpus, 4096, mbs, parallel, layout, device, modules)
        raw["timing"].update(timing)
        row = _ultra_row(label, raw, gpus, 4096, tps, "26.04")
        rows.append({**row, "assumptions": (*_ULTRA_NOTES, *_NOTES_2604, *_DEEPSEEK_ASSUMPTIONS, _BF16_MOMENTS)})
    rows.append(_kimi_k2_gb300())
    for label, device, ep, tps, hybridep in _GPT_OSS_ULTRA_ROWS:
        raw = _gpt_oss_run(label, "26.04", device, 64, 1280, 4, 1, ep, hybridep=hybridep, recompute=False)
        raw["timing"].update(_te_graphs("attn", *_ROUTER))
        row = _ultra_row(label, raw, 64, 1280, tps, "26.04")
        # BF16: none of `_row`'s FP8 assumptions; the GPT-OSS group's own (`nemo_gpt_oss_rows`)
        notes = ("routing balanced (forced)", _SINKS_NOTE)
        rows.append({**row, "assumptions": (*_ULTRA_NOTES, *_NOTES_2604, *notes)})
    for label, kind, gbs, mbs, tps in _ULTRA_2511_ROWS:
        recipe = "mxfp8" if "MXFP8" in label else "tensorwise"
        if kind == "llama":
            raw = _llama_run(label, _LLAMA3_8B, 8, gbs, mbs, {}, "gb300", fp8_recipe=recipe)
            raw["timing"]["cuda_graph_impl"] = "full_iteration"
        else:
            raw = _qwen3_run(
                label, QWEN3_30B_A3B, 8, gbs, mbs, {"ep": 8}, "gb300", a2a_overlap=False, fp8_recipe=recipe
            )
            raw["timing"].update({**_flex("hybridep"), **_te_graphs(*_ROUTER), **HYBRIDEP_BEFORE_CUSTOM_ALLGATHER})
        notes = (f"the table's MBS {mbs} (the preset's {4 if kind == 'llama' else 8})",)
        rows.append(_ultra_row(label, raw, 8, gbs, tps, "25.11", notes))
    return rows
