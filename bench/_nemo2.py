"""NeMo 2's performance summaries of 25.02, 25.04 and 25.07 (the NeMo 2 recipes, before Megatron-Bridge): FP8
pre-training on DGX B200, DGX H100 and DGX GB200, as run configs for bench/public_runs.py (a group of its own).

Sources: NVIDIA's NeMo Framework user guide, docs.nvidia.com/nemo-framework/user-guide/latest/performance/
performance_summary.html ("Container: NeMo 25.02", "System: DGX-B200" and the first row of "DGX-H100": "the
pre-training performance of various models at FP8 precision (using NeMo 2.0)") and archive/25.04-performance-
summary.html and performance-summary.html ("Container: NeMo 25.04" / "NeMo 25.07", "System: DGX-GB200": "per-tensor
FP8 quantization, leveraging scaling factors computed in the current step"): per row the GPUs, GBS, MBS, sequence,
(FSDP,) TP, PP, CP, VP, EP, GA and tokens/s per GPU. Seconds = GBS · sequence / (tokens/s per GPU · GPUs).

Recipes: each container's NeMo (NVIDIA/NeMo v2.2.0 for 25.02, v2.3.0 for 25.04, v2.4.0 for 25.07):
scripts/llm/performance/pretrain_<model>.py (v2.2.0; scripts/performance/llm/ from v2.3.0) with utils.py /
helpers.py `set_primary_perf_configs` (sequence parallel where TP > 1; parameter gathers with the optimizer step
where DP, PP and VP exceed 1; from v2.3.0 TE's fused cross-entropy, `enable_cuda_graph` from the
recommended_model_configs csv, Megatron FSDP (`optim_grads_params`, no gradient accumulation fusion, no FP8
parameter gathers, no deferred embedding gradient); FP8: v2.2.0 `bf16_with_fp8_mixed` (delayed scaling, hybrid, amax
history 1024, FP8 parameters), v2.3.0/v2.4.0 `--fp8_recipe cs`: `bf16_with_fp8_current_scaling_mixed` with
first_last_layers_bf16 False; grad_reduce_in_fp32 False), nemo/collections/llm/recipes/<model>.py
`pretrain_performance_optimizations` (TP communication overlap with the script's userbuffers config,
`defer_embedding_wgrad_compute` and its deferral limit) and `trainer` (the distributed optimizer with overlapped
gradient reduce and parameter gather, check_for_nan_in_grad True, which v2.4.0's helpers.py turns off),
recipes/tp_overlap_configs/userbuffers.py (every B200 FP8 config used here: proj_fprop and fc2_fprop as
ring-exchange, the bulk methods with set_sm_margin False; v2.2.0's H100 GPT-3 one pipelines proj_fprop),
gpt/model/llama.py and gpt/model/base.py (the models). Releases: the Megatron-LM and TransformerEngine commits each
tag's requirements/manifest.json pins, taken as its container's, but 25.02's TE: v2.2.0's build installs no TE of
its own, so the PyTorch 25.01 base's (1.14; `_RELEASES`). Where the table's sizes differ from that release's csv
they are taken (they are what ran), as noted.
"""

from __future__ import annotations

from typing import Any

from _nemo import _405B_LAYOUT, _LLAMA3_8B, nvlink_domain
from _public import LLAMA3_405B, LLAMA31_70B, gpt_spec

NEMO2 = "NeMo 2 performance summaries 25.02 / 25.04 / 25.07 (docs.nvidia.com nemo-framework user guide)"

# requirements/manifest.json "vcs-dependencies" at each tag (megatron-lm, transformer_engine): v2.2.0 791b70e031
# (2025-02-24) and 7d576ed25 (2024-06-13); v2.3.0 3cdfd613e6 (2025-05-02, in core_v0.12.0) and bee4649c1 (2025-03-18,
# in v2.2); v2.4.0 03f7793114 (2025-06-27, in core_v0.13.0) and f05f12c97 (2025-06-29, in v2.5).
# 25.02's TE is not its manifest's: NVIDIA/NeMo a0e8ed197a ("build: Bump PyT to 25.01", 2025-02-22) set the manifest's
# "ngc-pytorch" to nvcr.io/nvidia/pytorch:25.01-py3 and dropped Dockerfile.ci's TE build (v2.2.0 reinstalls only
# `--library mcore` and `--library nemo`), so the container keeps the base's TE: 1.14 (NGC PyTorch release notes
# rel-25-01, as NVIDIA/bionemo-framework 67a869b3c cites them: "pytorch 25.01-py3 (default TE_TG=v1.14)"; 25.02-py3
# v2.0). 7d576ed25 (VERSION 1.8.0.dev0) is the 24.07 container's TE, left in the pin since (v2.0.0's Dockerfile.ci
# still names it where the 24.09 container, NeMo 2.0.0, shipped TE 1.10: user guide 24.09 softwarecomponentversions),
# and names no sm_100 target (CMake architectures 70 80 89 90) for these B200 rows; TE's release_v1.14 does (100 under
# CUDA 12.8). 1.14 holds #1083 (no FP8 scale-inverse copy) but not v2.0's 819a75219 (late transpose under SP).
_RELEASES = {
    "25.02": {"megatron_core": "2025-02-24", "transformer_engine": "1.14"},
    "25.04": {"megatron_core": "2025-05-02", "transformer_engine": "2025-03-18"},
    "25.07": {"megatron_core": "2025-06-27", "transformer_engine": "2025-06-29"},
}
_FP8 = {"25.02": "delayed", "25.04": "tensorwise", "25.07": "tensorwise"}
# cuDNN: the next container's, 25.09's 9.11.0.98 (Megatron-Bridge docs/releases/software-versions.md at v0.2.0, "NeMo
# Framework 25.09"), bounds these earlier ones' below 9.17, so their sm100 attention is 9.13's measured kernels
# (`attention_rates.cudnn_kernel`), whatever their exact release
_CUDNN_BOUND = "9.11.0.98"

# GPTConfig175B (gpt/model/base.py, v2.2.0 to v2.4.0): 96 layers of 12288, 96 heads, FFN 49152, no dropout,
# layernorm_zero_centered_gamma (LayerNorm's cost), GPTConfig's GeLU, biases, learned absolute positions, tied
# embeddings; the recipe's MockDataModule tokenizer (GPT-2 BPE, 50,257 tokens)
GPT3_175B = gpt_spec(12288, 96, 96, vocab_size=50257, dropout=0.0)

# The userbuffers methods of the B200 FP8 configs (and, from NVIDIA/NeMo 8f3e86df5a "ub fp8 h100 fixes", 2025-04-22,
# the H100 FP8 ones): proj_fprop and fc2_fprop RingExchangeOverlapCfg, the bulk GEMMs set_sm_margin False
_RING_FPROPS = {"proj_fprop": "ring_exchange", "fc2_fprop": "ring_exchange"}

# (release, label, spec, GPUs, GBS, MBS, sequence, parallel, device, tokens/s, options, notes); options: "defer" (the
# recipe's wgrad_deferral_limit), "ub" (TP overlap; "ub_methods" / "ub_sm_margin" where the config's differ from
# `_RING_FPROPS`), "graphs" (the csv's cuda_graphs), "fsdp"
_ROWS: tuple[tuple[Any, ...], ...] = (
    # ---- 25.02, DGX-B200 (v2.2.0)
    ("25.02", "GPT3 175B FP8 TP4 PP4 VP6 MBS2 (512 B200)", GPT3_175B, 512, 2048, 2, 2048, {"tp": 4, "pp": 4, "vp": 6},
     "b200", 1600.0, {"defer": 50, "ub": True}, ("the table's 512 GPUs, VP 6, GBS 2048 (v2.2.0's csv: 128, 12, 256)",)),
    # llama3_8b: no TP overlap, no CUDA graphs (the script's `gpu in []`)
    ("25.02", "Llama 3 8B FP8 (8 B200)", _LLAMA3_8B, 8, 128, 2, 8192, {}, "b200", 26006.0, {}, ()),
    # llama3_70b: userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192, wgrad_deferral_limit 22
    ("25.02", "Llama 3 70B FP8 TP2 PP4 CP2 VP5 (64 B200)", LLAMA31_70B, 64, 128, 1, 8192,
     {"tp": 2, "pp": 4, "cp": 2, "vp": 5}, "b200", 3062.0, {"defer": 22, "ub": True}, ()),
    # llama31_405b: userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192, limit 50; the embedding and the loss counted
    ("25.02", "Llama 3.1 405B FP8 TP4 PP8 CP2 VP8 (128 B200)", LLAMA3_405B, 128, 64, 1, 8192,
     {"tp": 4, "pp": 8, "cp": 2, "vp": 8}, "b200", 625.0, {"defer": 50, "ub": True, "layout": _405B_LAYOUT},
     ("the table's 128 GPUs, PP 8, VP 8, GBS 64 (v2.2.0's csv: 144, 9, 7, 36)",)),
    # ---- 25.02, DGX-H100: the csv's row as it stands; userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048 (v2.2.0):
    # proj_fprop PipelineOverlapCfg (num_sm 24, 4 splits, set_sm_margin True), fc2_fprop RingExchangeOverlapCfg, the
    # bulk GEMMs set_sm_margin False: the pipeline's margin taken for both (ppb has one; as `ppb import megatron` does)
    ("25.02", "GPT3 175B FP8 TP4 PP8 VP6 MBS2 (512 H100)", GPT3_175B, 512, 2048, 2, 2048, {"tp": 4, "pp": 8, "vp": 6},
     "h100-80gb", 866.0, {"defer": 50, "ub": True, "ub_methods": {"fc2_fprop": "ring_exchange"}, "ub_sm_margin": True},
     ()),
    # ---- 25.04, DGX-GB200 (v2.3.0): the csv's rows, CUDA graphs where it sets them
    ("25.04", "GPT3 175B FP8 TP4 PP4 VP12 MBS2 (128 GB200)", GPT3_175B, 128, 256, 2, 2048,
     {"tp": 4, "pp": 4, "vp": 12}, "gb200", 1804.0, {"defer": 50, "ub": True, "graphs": True}, ()),
    ("25.04", "Llama 3 8B FP8 (8 GB200)", _LLAMA3_8B, 8, 128, 2, 8192, {}, "gb200", 33099.0, {"graphs": True},
     ("the table's MBS 2 (the csv's FP8 row: 4)",)),
    ("25.04", "Llama 3 70B FP8 FSDP (64 GB200)", LLAMA31_70B, 64, 128, 1, 8192, {}, "gb200", 4035.0, {"fsdp": True},
     ()),
    ("25.04", "Llama 3.1 405B FP8 TP4 PP8 CP2 VP8 (128 GB200)", LLAMA3_405B, 128, 64, 1, 8192,
     {"tp": 4, "pp": 8, "cp": 2, "vp": 8}, "gb200", 665.0, {"defer": 50, "ub": True, "layout": _405B_LAYOUT},
     ("the table's sizes (the csv's FP8 row: Megatron FSDP at TP 4; its BF16 row's sizes)",)),
    # ---- 25.07, DGX-GB200 (v2.4.0)
    ("25.07", "Llama 3 8B FP8 (8 GB200)", _LLAMA3_8B, 8, 128, 2, 8192, {}, "gb200", 31737.0, {"graphs": True},
     ("the table's MBS 2 (the csv's FP8 row: 4)",)),
    ("25.07", "Llama 3 70B FP8 FSDP (64 GB200)", LLAMA31_70B, 64, 128, 1, 8192, {}, "gb200", 4066.0, {"fsdp": True},
     ()),
)  # fmt: skip

SKIPPED_NEMO2: tuple[tuple[str, str], ...] = (
    ("25.02 / 25.04 Nemotron 15B / 340B", "squared-ReLU MLPs, an activation ppb does not describe"),
    ("25.02 / 25.04 Mixtral 8x7B / 8x22B, 25.07 Llama 4", "MoE recipes of NeMo 2 not transcribed"),
    (
        "25.07 Llama 3.1 405B FP8 FSDP TP2 (128 GB200)",
        "v2.4.0's csv runs it with 95 layers' activations offloaded at GBS 256, the table GBS 64: settings unknown",
    ),
    ("25.07 parenthesized rows", "the table does not say what the second figures ran (precision or settings)"),
)


def _run(
    release: str,
    label: str,
    spec: dict[str, Any],
    gpus: int,
    gbs: int,
    mbs: int,
    sequence: int,
    parallel: dict[str, int],
    device: str,
    options: dict[str, Any],
) -> dict[str, Any]:
    """A NeMo 2 performance-recipe run (module docstring)."""
    tp, pp, cp, vp = (parallel.get(key, 1) for key in ("tp", "pp", "cp", "vp"))
    dp = gpus // (tp * pp * cp)
    fsdp = options.get("fsdp", False)
    with_step = dp > 1 and pp > 1 and vp > 1
    schedule: dict[str, Any] = {"vpp": vp, "schedule": "interleaved"} if vp > 1 else {}
    defer = options.get("defer", 0) if not fsdp else 0
    raw: dict[str, Any] = {
        "name": label,
        "framework": "megatron",
        "models": [{"name": "llm", "spec": spec, "pad_vocab_multiple": 128}],  # make_vocab_size_divisible_by 128
        "parallel": {
            "dp": dp,
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "sequence_parallel": tp > 1,
            **({"fsdp": True, "zero": 3} if fsdp else {"zero": 1}),
            **schedule,
            **({"layout": options["layout"]} if "layout" in options else {}),
            **({"devices_per_node": nvlink_domain(gpus)} if device == "gb200" else {}),
        },
        "training": {
            "seq_length": sequence,
            "micro_batch_size": mbs,
            "micro_batches": gbs // (mbs * dp),
            "dtype": "bf16",
            "grad_bytes": 2,
            "flash_attention": True,
            "fp8_cache": "linear",
            **({"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": defer} if defer else {}),
        },
        "device": {"name": device},
        "framework_release": dict(_RELEASES[release]),
        "timing": {
            "matmul_dtype": "fp8",
            "fp8_recipe": _FP8[release],
            "cudnn_release": _CUDNN_BOUND,
            # bf16_with_fp8_mixed's fp8_params, bf16_with_fp8_current_scaling_mixed's fp8_param_gather; not under FSDP
            "fp8_param_gather": not fsdp,
            "cross_entropy_fusion": True,  # GPTConfig cross_entropy_loss_fusion
            **({"cross_entropy_fusion_impl": "te"} if release != "25.02" else {}),
            "rope_fusion": spec.get("position_embedding", "rope") == "rope",
            # the recipes' DDP config sets it; v2.4.0's helpers.py `set_perf_optimization_configs` turns it off
            # (NVIDIA/NeMo 26320a72ac, "Disable local gradient checker in performance scripts", 2025-05-30)
            "check_for_nan_in_grad": release != "25.07",
            # gpt_data_step: every rank reads its own batch; MockDataModule builds no mask under TE
            "batch_broadcast": False,
            "attention_mask_in_dataloader": False,
            "overlap": {"dp": 1.0, "param_gather": 1.0, "tp": 1.0 if options.get("ub") else 0.0},
            **(
                {
                    "tp_comm_overlap_methods": options.get("ub_methods", _RING_FPROPS),
                    "ub_sm_margin": options.get("ub_sm_margin", False),
                }
                if options.get("ub")
                else {}
            ),
            "overlap_param_gather_with_optimizer_step": with_step and not fsdp,
            **({"gradient_accumulation_fusion": False} if fsdp else {}),
            **({"cuda_graph_impl": "local"} if options.get("graphs") and not fsdp else {}),
        },
    }
    return raw


def nemo2_rows() -> list[dict[str, Any]]:
    """The NeMo 2 rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for release, label, spec, gpus, gbs, mbs, sequence, parallel, device, tps, options, notes in _ROWS:
        raw = _run(release, label, spec, gpus, gbs, mbs, sequence, parallel, device, options)
        recipe = "FP8 delayed scaling (bf16_with_fp8_mixed)" if release == "25.02" else "FP8 current scaling"
        rows.append(
            {
                "name": f"NeMo {release} {label}",
                "source": f"{NEMO2}, {release}",
                "raw": raw,
                "published": f"{tps:,.0f} tokens/s per GPU",
                "seconds": gbs * sequence / (tps * gpus),
                "assumptions": (
                    "the container's Megatron-LM and TransformerEngine as the tag's requirements/manifest.json pins"
                    + (" (TE: the PyTorch 25.01 base's 1.14)" if release == "25.02" else ""),
                    "cuDNN below 9.17 (25.09's 9.11 bounds it): 9.13's sm100 attention kernels",
                    f"{recipe} as ppb's FP8 GEMMs with their casts; attention in BF16",
                    *notes,
                ),
            }
        )
    return rows
