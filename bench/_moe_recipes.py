"""Megatron-LM's own MoE training recipes with their measured throughput, as run configs for bench/public_runs.py.

NVIDIA/Megatron-LM branch `dev`, examples/moe_recipes/ (added by 7b9593be8e, "[Dev] Add Qwen3 30B MoE recipes",
2026-05-28; the measured throughput in examples/moe_recipes/README.md's "Recipe Index" since e5ad09802d, "[Dev] Add
MoE recipe performance summary", 2026-06-15, unchanged at d48bd6be0a, 2026-08-21): one self-contained YAML a
recipe (`DEPENDENCIES` the container, `ENV_VARS`, `ARGS` Megatron-LM's pretrain_gpt.py arguments) and the index's
"Median TFLOP/s/GPU" (Megatron's logged throughput: `num_floating_point_operations` over the step time and the
GPUs, `qwen3_30b_flops` below). Priced: the four Qwen3-30B-A3B recipes ppb can state (`_ROWS`), the BF16 and FP8 /
MXFP8 pairs on 32 H100 and 16 GB200:

- qwen3_30b/h100/bf16_32GPU_TP1PP1EP8.yaml: TP 1, PP 1, EP 8, MBS 1, GBS 256, BF16, HybridEP (flex, its default
  SMs: no `moe_flex_dispatcher_num_sms`, below), distributed optimizer with the gradient reduce-scatters and parameter
  gathers overlapped, no CUDA graphs: 234.1 TFLOP/s/GPU;
- qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml: the same with FP8 blockwise (`fp8_recipe: blockwise`, FP8 parameter
  gathers), the precision-aware optimizer (BF16 moments, FP32 main gradients and parameters) and TE graphs of
  attn, moe_router and moe_preprocess: 232.4;
- qwen3_30b/gb200/bf16_16GPU_TP1PP1EP16.yaml: 16 GB200 (one NVL72 domain, HybridEP detecting its 16 accessible
  ranks: deep_ep/hybrid_ep_buffer.py `detect_accessible_ranks`), TP 1, PP 1, EP 16, MBS 4, GBS 512, BF16, the
  gradient reduce-scatters and parameter gathers not overlapped (the recipe sets neither), no graphs: 528;
- qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_partial_cg.yaml: the same with MXFP8 (`fp8_recipe: mxfp8`, no FP8
  parameter gathers) and TE graphs of attn, moe_router and moe_preprocess (`external_cuda_graph`): 514.

Every one: Qwen3-30B-A3B's shape (48 layers, hidden 2048, 32 heads of 128 over 4 query groups, q/k RMSNorm, 128
experts of 768, top 8, no shared expert, untied embeddings, the vocabulary of 151,936 padded to a multiple of
1187 · TP: unchanged), sequence 4096, forced load balancing (`moe_router_force_load_balancing`), the aux loss,
router fusion, permute fusion, grouped GEMMs, the router in FP32, TE's fused cross-entropy, no attention mask from
the data loader, `log_params_norm` and `log_num_zeros_in_grad`, the NaN check on (Megatron's default), an exit
duration (230 min). Containers: nvcr.io/nvidia/pytorch:26.03-py3 with Transformer Engine release_v2.14 (the
recipes' Dockerfiles); the branch's Megatron-Core at the index's commit (2026-06-15). HybridEP as the Dockerfiles
install it, deepseek-ai/DeepEP hybrid-ep 7febc6e, which Megatron constructs with no SM count and no all-gather
switch (fused_a2a.py `init_hybrid_ep_buffer` passes only what is set): deep_ep/hybrid_ep_buffer.py
`HybridEPBuffer.__init__` there takes 32 SMs for the dispatch and the combine inside one NVLink domain
(`32 if self.num_of_nodes == 1 else 8`; ppb's unset default is 94a9f8f's 24, config.cuh `Configurer`) and
`enable_custom_allgather=False`, so executor.cu `allgather_routing_map` gathers the routing maps with NCCL's
`all_gather_into_tensor` (`timing.hybridep_custom_allgather` false).

Also priced (`_paged_stash_row`): qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_paged_stash.yaml, 646.8: the MXFP8
recipe without its TE graphs, with the op fuser (`use_transformer_engine_op_fuser`, a 32-wide GLU interleave,
NVTE_CUTEDSL_FUSED_GROUPED_MLP=1: TE's fused grouped MLP, which release_v2.14 holds), the rank capacity 1.5, the
paged stash with a device buffer of 1.1 (`moe_paged_stash_buffer_size_factor_cuda`; no host buffer), full-iteration
graphs (`cuda_graph_impl: local`, `cuda_graph_scope: full_iteration`) and no NaN check
(`no_check_for_nan_in_loss_and_grad`).

Not priced (`SKIPPED_RECIPES`): the index's Qwen3-235B-A22B, DeepSeek-V3 and DeepSeek-V4 recipes (not transcribed).
"""

from __future__ import annotations

from typing import Any

from _nemo import _BF16_MOMENTS, _ROUTER, CUDNN_2604, QWEN3_30B_A3B, _flex, _qwen3_run, _te_graphs

MOE_RECIPES = "Megatron-LM examples/moe_recipes (dev e5ad09802d, README Recipe Index)"
_RELEASES = {"megatron_core": "2026-06-15", "transformer_engine": "2.14", "pytorch": "2.11.0a0"}
_ASSUMPTIONS = (
    "routing balanced (forced)",
    "the 26.03 container's PyTorch and cuDNN as the 26.04 one's (2.11.0a0, cuDNN 9.20)",
)
# (label, recipe file, device, GPUs, EP, MBS, GBS, precision, TE graphs of attn and the router, TFLOP/s/GPU)
_ROWS: tuple[tuple[Any, ...], ...] = (
    ("Qwen3 30B-A3B BF16 EP8 HybridEP (32 H100)", "h100/bf16_32GPU_TP1PP1EP8", "h100-80gb", 32, 8, 1, 256, "bf16",
     False, 234.1),
    ("Qwen3 30B-A3B FP8 blockwise EP8 HybridEP graphs (32 H100)", "h100/fp8_32GPU_TP1PP1EP8", "h100-80gb", 32, 8, 1,
     256, "blockwise", True, 232.4),
    ("Qwen3 30B-A3B BF16 EP16 HybridEP (16 GB200)", "gb200/bf16_16GPU_TP1PP1EP16", "gb200", 16, 16, 4, 512, "bf16",
     False, 528.0),
    ("Qwen3 30B-A3B MXFP8 EP16 HybridEP graphs (16 GB200)", "gb200/mxfp8_16GPU_TP1PP1EP16_partial_cg", "gb200", 16,
     16, 4, 512, "mxfp8", True, 514.0),
)  # fmt: skip
SKIPPED_RECIPES: tuple[tuple[str, str], ...] = (
    (
        "Megatron-LM MoE recipes Qwen3-235B-A22B, DeepSeek-V3, DeepSeek-V4 (examples/moe_recipes)",
        "not transcribed (session 30)",
    ),
)


def qwen3_30b_flops(sequences: int, seq_length: int = 4096) -> float:
    """Megatron-LM's `num_floating_point_operations` (megatron/training/training.py `transformer_flops`, dev) for
    Qwen3-30B-A3B over *sequences* of *seq_length*: per token and layer 6·h·(q + 2·kv) + 6·q·h for the attention's
    linears (q = 32 · 128, kv = 4 · 128) and 6·h·768·8·3 for the routed experts (SwiGLU), 6·h·vocab for the
    logits, and 6·q per token pair of the causal core over s² pairs a sequence and layer."""
    h, layers, vocab = 2048, 48, 151936
    q, kv = 32 * 128, 4 * 128
    per_token = layers * (6 * h * (q + 2 * kv) + 6 * q * h + 6 * h * 768 * 8 * 3) + 6 * h * vocab
    return sequences * seq_length * per_token + sequences * seq_length**2 * layers * 6 * q


def _recipe_run(label: str, device: str, gpus: int, ep: int, mbs: int, gbs: int, precision: str, graphs: bool):
    """The recipe's run: the NeMo presets' Qwen3 run (`_qwen3_run`) with the recipe's own settings where they
    differ (module docstring)."""
    raw = _qwen3_run(
        label,
        QWEN3_30B_A3B,
        gpus,
        gbs,
        mbs,
        {"ep": ep},
        device,
        a2a_overlap=False,
        fp8_recipe="tensorwise" if precision == "bf16" else precision,
    )
    timing = raw["timing"]
    timing.update(_flex("hybridep"))
    # the recipes set no SM count: HybridEP's own default at their DeepEP, hybrid-ep 7febc6e (module docstring),
    # 32 inside one NVLink domain (every recipe's EP group is: 8 H100s of a node, 16 GB200s of one NVL72), and
    # its default all-gather, NCCL's
    timing.update(moe_flex_dispatcher_num_sms=32, hybridep_custom_allgather=False)
    if graphs:
        timing.update(_te_graphs("attn", *_ROUTER))
    overlapped = device != "gb200"  # the GB200 recipes set neither overlap_grad_reduce nor overlap_param_gather
    timing["overlap"] = {**timing["overlap"], "dp": float(overlapped), "param_gather": float(overlapped)}
    timing.update(
        overlap_param_gather_with_optimizer_step=False,
        check_for_nan_in_grad=True,
        log_params_norm=True,
        log_num_zeros_in_grad=True,
        exit_duration_in_mins=230.0,
        cudnn_release=CUDNN_2604,
        fp8_param_gather=precision == "blockwise",
    )
    if precision == "bf16":
        timing.update(matmul_dtype="bf16")
        timing.pop("fp8_recipe")
        raw["training"].pop("fp8_cache")
    # every recipe's `moe_router_dtype: fp32`: the router's GEMM writes fp32 logits and its backward runs in fp32
    # (Megatron-LM moe_utils.py `RouterGatingLinearFunction`, the casts of the input and the gradients included)
    raw["training"]["moe"]["router_dtype"] = "fp32"
    if device == "gb200":
        raw["parallel"]["devices_per_node"] = gpus  # one NVL72 domain
    raw["framework_release"] = dict(_RELEASES)
    return raw


def _paged_stash_row() -> dict[str, Any]:
    """qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_paged_stash.yaml (module docstring): 16 GB200, EP 16, MBS 4, GBS 512."""
    label = "Qwen3 30B-A3B MXFP8 EP16 HybridEP paged stash full-iteration graphs (16 GB200)"
    raw = _recipe_run(label, "gb200", 16, 16, 4, 512, "mxfp8", graphs=False)
    raw["timing"].update(
        cuda_graph_impl="full_iteration",
        use_transformer_engine_op_fuser=True,
        moe_mlp_glu_interleave_size=32,
        moe_expert_rank_capacity_factor=1.5,
        moe_paged_stash=True,
        moe_paged_stash_buffer_size_factor_cuda=1.1,
        check_for_nan_in_grad=False,
    )
    return {
        "name": f"Megatron-LM recipe {label}",
        "source": MOE_RECIPES,
        "raw": raw,
        "published": "646.8 TFLOP/s per GPU (qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_paged_stash.yaml)",
        "seconds": qwen3_30b_flops(512) / (16 * 646.8e12),
        "assumptions": (*_ASSUMPTIONS, "the paged stash's copies on their side stream hidden (not priced)"),
    }


def moe_recipe_rows() -> list[dict[str, Any]]:
    """The recipes' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for label, recipe, device, gpus, ep, mbs, gbs, precision, graphs, tflops in _ROWS:
        raw = _recipe_run(label, device, gpus, ep, mbs, gbs, precision, graphs)
        notes = (_BF16_MOMENTS,) if precision == "blockwise" else ()
        rows.append(
            {
                "name": f"Megatron-LM recipe {label}",
                "source": MOE_RECIPES,
                "raw": raw,
                "published": f"{tflops} TFLOP/s per GPU (qwen3_30b/{recipe}.yaml)",
                "seconds": qwen3_30b_flops(gbs) / (gpus * tflops * 1e12),
                "assumptions": (*_ASSUMPTIONS, *notes),
            }
        )
    return [*rows, _paged_stash_row()]
