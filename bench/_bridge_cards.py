"""Megatron-Bridge's own measured runs of its recipes, as run configs for bench/public_runs.py.

Two sources, one group ("Megatron-Bridge cards"). First, the model verification cards
(examples/model_verification_cards/*/card.yaml at 067f987df, 23 cards): every timed entry of a model ppb can state
(dense, GQA, MoE and MLA decoders) at its own bridge_commit's recipe, `bridge_verification_rows` below: the tuned
`pretrain_performance` entries and the bounded `pretrain` runs on real data. Not priced, and why (`SKIPPED_CARDS`,
printed by bench/public_runs.py): hybrid Mamba models (Nemotron 3 / 3.5); attention ppb does not describe
(DeepSeek-V4's compressed attention, GLM-5's DSA, Qwen3.5's Gated DeltaNet); NVFP4 (Nemotron 3 Super GB300); SFT and
PEFT entries (packed variable-length sequences, LoRA); vision-language cards (Gemma); checkpoint_resume entries
(their pretrain entry's recipe, priced once). Unstated settings are flagged in each row's assumptions (natural
routing priced balanced, the large-gradient check, unfused kernels ppb prices fused). The MXFP8 Blackwell entries
run the paged expert stash and TE's fused grouped MLP, both priced (`_mxfp8_blackwell_rows`).

Second, one matched pair: Megatron-Core's combined 1F1B (`overlap_moe_expert_parallel_comm`) off and on under the flex
dispatcher's HybridEP backend, Qwen3 30B-A3B in BF16 on 16 H100 (NVIDIA-NeMo/Megatron-Bridge 7ded17dae,
2026-07-25, "perf(recipe): overlap Qwen3 expert communication on H100"):
- on: examples/model_verification_cards/qwen3-30b-a3b/card.yaml, the H100 entry of the performance recipe
  (bridge_commit 8198fd9cd, `--recipe qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config`, 50 steps):
  `last_10_steps_step_time_ms_avg: 20992.030`;
- off: skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md, "HybridEP Production-Shape Benchmark", the
  reproduced baseline with only the overlap changed, iterations 5-20: 24.7138 s a step (its commit not stated:
  taken as the other's).

The recipe (8198fd9cd): src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py
`qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config` (BF16, forced load balance, the overlap on with
delay_wgrad_compute off, `_benchmark_common`: BF16 gradient reduction, HybridEP on 32 SMs, rope fusion) over
recipes/qwen/h100/qwen3_moe.py's 16-GPU config (TP 1, PP 1, EP 16, no SP, sequence 4096, GBS 1024, MBS 1, no
recompute, router fusion, permute fusion, grouped GEMMs, TE graphs of moe_router and moe_preprocess) and
recipes/common.py `_pretrain_common` (distributed optimizer, gradient reduction and parameter gathers
overlapped). `_benchmark_common` "must stay in sync with `_set_common_perf_overrides`" (perf_recipes/_common.py),
so bench/_nemo.py's `_qwen3_run` (the NeMo presets' common settings) is the run, in BF16. Releases: the
commit's 3rdparty/Megatron-LM submodule 6cd6ea530e (2026-07-23), pyproject.toml's Transformer Engine
2e559f062 (VERSION 2.17.0), docker/Dockerfile.ci's base nvcr.io/nvidia/pytorch:26.06-py3 (PyTorch 2.12.0a0
and cuDNN 9.21.1.3, as the NeMo 26.06 container on that base states them, bench/_nemo_releases.py).

The same skill's alltoall pair (41.25 against 31.31 s, "SFT", its sequence and recipe not stated) is not priced.
"""

from __future__ import annotations

from typing import Any

from _nemo import (
    _BF16_MOMENTS,
    _COMMON_TIMING,
    _ROUTER,
    _SINKS_NOTE,
    CUDNN_2604,
    KIMI_K2,
    QWEN3_30B_A3B,
    QWEN3_235B_A22B,
    _deepseek_layout,
    _deepseek_v3_run,
    _flex,
    _gpt_oss_run,
    _qwen3_run,
    _split_layout,
    _te_graphs,
    nvlink_domain,
)

BRIDGE_CARDS = (
    "Megatron-Bridge verification card and EP-overlap skill (NVIDIA-NeMo/Megatron-Bridge 7ded17dae, "
    "examples/model_verification_cards/qwen3-30b-a3b/card.yaml, skills/nemo-mbridge-perf-expert-parallel-overlap)"
)
_RELEASES = {"megatron_core": "2026-07-23", "transformer_engine": "2.17", "pytorch": "2.12.0a0"}
_CUDNN = "9.21.1.3"
# (label, combined 1F1B, seconds a step, what the source states)
_ROWS: tuple[tuple[str, bool, float, str], ...] = (
    ("Qwen3 30B-A3B BF16 EP16 HybridEP (16 H100)", False, 24.7138, "24.7138 s a step (iterations 5-20)"),
    ("Qwen3 30B-A3B BF16 EP16 HybridEP EP-overlap (16 H100)", True, 20.99203, "20,992.03 ms a step (steps 41-50)"),
)
SKIPPED_BRIDGE: tuple[tuple[str, str], ...] = (
    (
        "Megatron-Bridge Qwen3 30B-A3B BF16 EP16 alltoall, EP overlap off / on (16 H100)",
        "an SFT run whose sequence and recipe the skill does not state (41.25 / 31.31 s a step)",
    ),
)


def bridge_card_rows() -> list[dict[str, Any]]:
    """The pair's fields for bench/public_runs.py's PublicRun."""
    rows = []
    for label, overlap, seconds, published in _ROWS:
        raw = _qwen3_run(label, QWEN3_30B_A3B, 16, 1024, 1, {"ep": 16}, "h100-80gb", a2a_overlap=overlap)
        timing = raw["timing"]
        timing.update(matmul_dtype="bf16", fp8_param_gather=False, delay_wgrad_compute=False, cudnn_release=_CUDNN)
        timing.pop("fp8_recipe")
        timing.update({**_flex("hybridep"), **_te_graphs(*_ROUTER)})
        raw["training"].pop("fp8_cache")
        raw["framework_release"] = dict(_RELEASES)
        rows.append(
            {
                "name": f"Megatron-Bridge {label}",
                "source": BRIDGE_CARDS,
                "raw": raw,
                "published": published,
                "seconds": seconds,
                "assumptions": (
                    "routing balanced (forced)",
                    "the overlap-off run at the overlap-on run's commit and container",
                    "cuDNN as the NeMo 26.06 container on the same PyTorch base",
                ),
            }
        )
    return rows


# ---- The model verification cards at Megatron-Bridge 067f987df (2026-08-22): each card's `pretrain_performance`
# entries ppb can state, each at its bridge_commit (the item's, else the card's verification_environment's), the
# recipe as that commit's src/megatron/bridge/perf_recipes/<family>/<gpu>/<model>.py states it over
# perf_recipes/_common.py `_benchmark_common` (50 steps on mock data, no NaN or large-gradient checks, rope fusion,
# TE's fused cross-entropy, BF16 gradient reduction, HybridEP on 32 SMs) and the recipes/ config it starts from.
# The seconds are the card's `last_10_steps_step_time_ms_avg` / 1000 (steps 41-50 of 50). Releases: the commit's
# 3rdparty/Megatron-LM submodule (its commit date), uv.lock's transformer-engine, docker/Dockerfile.ci's base
# nvcr.io/nvidia/pytorch:26.06-py3 (PyTorch 2.12.0a0; cuDNN 9.21.1.3 as the NeMo 26.06 container on that base
# states it, bench/_nemo_releases.py).
BRIDGE_VERIFICATION = (
    "Megatron-Bridge model verification cards (NVIDIA-NeMo/Megatron-Bridge 067f987df, "
    "examples/model_verification_cards/*/card.yaml, pretrain_performance)"
)
_PYTORCH_2606 = "2.12.0a0"
# bridge commit -> (Megatron-LM submodule commit, its date), uv.lock's transformer-engine
_PINS: dict[str, tuple[str, str, str]] = {
    "79308d0d9": ("14346b65a2", "2026-08-12", "2.18"),  # uv.lock 2.18.0+e7c550c5
    "a8038f6d9": ("d12f6c8c9a", "2026-08-08", "2.17"),  # uv.lock 2.17.1
    "3a9559f01": ("cd4afffa64", "2026-07-25", "2.17"),  # uv.lock 2.17.0+2e559f06
    "5b9d9cf50": ("61f31145df", "2026-07-17", "2.17"),  # uv.lock 2.17.0+2e559f06
    "619cc20bd": ("adfb8ec792", "2026-07-20", "2.17"),  # uv.lock 2.17.0+2e559f06
    "411c6b1dc": ("58bf14e9e6", "2026-07-21", "2.17"),  # uv.lock 2.17.0+2e559f06
    "6799f0997": ("d12f6c8c9a", "2026-08-08", "2.17"),  # uv.lock 2.17.1
    "487f56398": ("6cd6ea530e", "2026-07-23", "2.17"),  # uv.lock 2.17.0+2e559f06
    "6e1b47893": ("6cd6ea530e", "2026-07-23", "2.17"),  # uv.lock 2.17.0+2e559f06
    "0480586879": ("2a75ac12c5", "2026-08-13", "2.18"),  # uv.lock 2.18.0+e7c550c5
    "fbb7570cf": ("2a75ac12c5", "2026-08-13", "2.18"),  # uv.lock 2.18.0+e7c550c5
}
# The cards whose verification_environment names a PyTorch container, not a NeMo one, ran that container's PyTorch:
# nvcr.io/nvidia/pytorch:26.04-py3, PyTorch 2.11.0a0 with cuDNN 9.20.0.48 (as NeMo 26.04, built on it, states them:
# bench/_nemo.py RELEASES_2604, CUDNN_2604).
_PYTORCH_2604 = ("2.11.0a0", CUDNN_2604)
_CARD_NOTES = ("cuDNN as the NeMo 26.06 container on the same PyTorch base",)


def _pinned(raw: dict[str, Any], commit: str, pytorch: tuple[str, str] = (_PYTORCH_2606, _CUDNN)) -> dict[str, Any]:
    """The run at *commit*'s releases in the container of *pytorch* (its PyTorch and cuDNN)."""
    _, date, te = _PINS[commit]
    raw["framework_release"] = {"megatron_core": date, "transformer_engine": te, "pytorch": pytorch[0]}
    raw["timing"]["cudnn_release"] = pytorch[1]
    return raw


def _bf16(raw: dict[str, Any]) -> dict[str, Any]:
    """`_perf_precision("bf16")` (bf16_mixed): BF16 GEMMs, no FP8 recipe, cache or parameter gathers."""
    raw["timing"].update(matmul_dtype="bf16", fp8_param_gather=False)
    raw["timing"].pop("fp8_recipe", None)
    raw["training"].pop("fp8_cache", None)
    return raw


def _deepseek_v3_h100() -> dict[str, Any]:
    """deepseek_v3_pretrain_1024gpu_h100_bf16_config (perf_recipes/deepseek/h100/deepseek_v3.py at 79308d0d9) over
    recipes/deepseek/h100/deepseek_v3.py's config of the same name: TP 2 with SP, PP 8, VP 4, EP 64, GBS 16384,
    MBS 1, selective recompute of mla_up_proj and mlp (`_deepseek_v3_common`: selective, router fusion, forced
    balance), overlap_grad_reduce off, the parameter gathers overlapped with the optimizer step
    (`_enable_overlap_param_gather_with_optimizer_step`), layout "Et|(tt|)*30mL", MTP 1 layer, HybridEP (the
    base's `apply_flex_dispatcher_backend(..., "hybridep")` on a Hopper: flex, the shared expert's overlap off),
    no TP communication overlap, no CUDA graphs (cuda_graph_impl "none"), BF16 moments."""
    label = "DeepSeekV3 BF16 TP2 PP8 VP4 EP64 (1024 H100)"
    layout = "Et|" + "tt|" * 30 + "mL"  # "Et|(tt|)*30mL": 32 virtual stages = PP 8 · VP 4
    raw = _deepseek_v3_run(label, 1024, 16384, 1, {"pp": 8, "ep": 64}, layout, "h100-80gb", ["mla_up_proj", "mlp"])
    raw["parallel"].update(tp=2, dp=1024 // (2 * 8), sequence_parallel=True)
    raw["training"]["micro_batches"] = 16384 // (1024 // 16)
    _bf16(raw)
    # `_pretrain_common`'s average_in_collective, which neither recipe changes
    raw["timing"].update(
        _flex("hybridep"), overlap_param_gather_with_optimizer_step=True, ddp_average_in_collective=True
    )
    raw["timing"]["overlap"] = {**_COMMON_TIMING["overlap"], "dp": 0.0}  # overlap_grad_reduce False
    return {
        "raw": _pinned(raw, "79308d0d9"),
        "label": label,
        "card": "deepseek-v3",
        "gpu": "H100",
        "commit": "79308d0d9",
        "ms": 61756.130,
        "notes": (
            "routing balanced (forced)",
            _BF16_MOMENTS,
            "the card's base container nemo:26.08.rc5 (no public release list): PyTorch from the commit's "
            "Dockerfile base",
        ),
    }


def _gpt_oss_120b_gb200() -> dict[str, Any]:
    """gpt_oss_120b_pretrain_64gpu_gb200_bf16_config (perf_recipes/gpt_oss/gb200/gpt_oss.py at a8038f6d9) over
    recipes/gpt_oss/h100/gpt_oss.py `gpt_oss_120b_pretrain_64gpu_h100_bf16_config` (the alltoall dispatcher: its
    flex backend is named but `apply_flex_dispatcher_backend` is not called; calculate_per_token_loss with
    average_in_collective off): EP 64, GBS 1280, MBS 4, selective recompute of layernorm and moe_act, router
    fusion, forced balance, the combined 1F1B with delay_wgrad_compute, no TP overlap, no CUDA graphs."""
    label = "GPT-OSS 120B BF16 EP64 (64 GB200)"
    raw = _gpt_oss_run(label, "26.04", "gb200", 64, 1280, 4, 1, 64, a2a_overlap=True)
    raw["timing"].update(calculate_per_token_loss=True, ddp_average_in_collective=False)
    return {
        "raw": _pinned(raw, "a8038f6d9"),
        "label": label,
        "card": "gpt-oss-120b",
        "gpu": "GB200",
        "commit": "a8038f6d9",
        "ms": 4995.630,
        "notes": (
            "routing balanced (forced)",
            _SINKS_NOTE,
            "the window at cuDNN 9.22's measured GB200 window-128 rate (sm100)",
        ),
    }


def _qwen3_30b_h100_tuned() -> dict[str, Any]:
    """qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config at 3a9559f01 ("tune Qwen3 BF16 HybridEP on H100"): the
    8198fd9cd recipe of the overlap-on row above plus moe_permute_fusion_into_hybridep (and HybridEP's combine
    chunk of 64 tokens and the layernorm SM margins of 10, environment only)."""
    label = "Qwen3 30B-A3B BF16 EP16 HybridEP EP-overlap permute-in-HybridEP (16 H100)"
    raw = _qwen3_run(label, QWEN3_30B_A3B, 16, 1024, 1, {"ep": 16}, "h100-80gb", a2a_overlap=True)
    _bf16(raw)
    raw["timing"].update(
        delay_wgrad_compute=False, moe_permute_fusion_into_hybridep=True, ddp_average_in_collective=True
    )
    raw["timing"].update({**_flex("hybridep"), **_te_graphs(*_ROUTER)})
    return {
        "raw": _pinned(raw, "3a9559f01"),
        "label": label,
        "card": "qwen3-30b-a3b",
        "gpu": "H100",
        "commit": "3a9559f01",
        "ms": 20147.290,
        "notes": ("routing balanced (forced)", "HybridEP's combine chunk size (an environment variable) not priced"),
    }


# ---- The cards' `pretrain` entries: bounded 100-step runs on real data (RP2 head_01, a SentencePiece tokenizer; the
# model's vocabulary kept: training/setup.py `_validate_and_set_vocab_size` keeps a preset vocabulary at least the
# tokenizer's), the recipe as recipes/<family>/h100/<model>.py states it at the entry's bridge_commit over
# recipes/common.py `_pretrain_common` (distributed optimizer, gradient reduce-scatter and parameter all-gathers
# overlapped, average_in_collective), with the card command's overrides: NaN checks on gradients and loss, the
# large-gradient check, natural routing (moe_router_force_load_balancing false). The card calls their timing a
# sanity check, not a tuned result; measured is measured, so they are priced as the perf entries are (steps 91-100).
_FUNCTIONAL = (
    "ddp.check_for_large_grads (a gradient-norm check beside the NaN check) not priced",
    "the step-50 and step-100 checkpoint saves outside the timed iterations",
)
_NATURAL = "natural routing (force_load_balancing false) priced balanced: the imbalance is not stated"
# Qwen/Qwen3-8B config.json: 36 layers of hidden 4096, 32 query and 8 key-value heads of 128 with q/k RMSNorm,
# SwiGLU 12288, untied embeddings of 151,936
QWEN3_8B = {
    "vocab_size": 151936,
    "hidden_size": 4096,
    "num_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "qk_norm": True,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
}


def _functional(raw: dict[str, Any]) -> dict[str, Any]:
    """The card command's checks and `_pretrain_common`'s DDP averaging on a BF16 run."""
    _bf16(raw)
    raw["timing"].update(check_for_nan_in_grad=True, ddp_average_in_collective=True)
    return raw


def _qwen3_8b_h100() -> dict[str, Any]:
    """qwen3_8b_pretrain_16gpu_h100_bf16_config (recipes/qwen/h100/qwen3.py at 619cc20bd) over its 4-GPU config: TP 1,
    PP 1, CP 1, DP 16, GBS 1024, MBS 1, bf16_mixed with BF16 gradient reduction, no recompute, TE, no CUDA graphs,
    TE's fused cross-entropy; rope fusion and bias_activation_fusion left at Megatron-Core's default (off)."""
    label = "Qwen3 8B BF16 DP16 (16 H100)"
    raw = _qwen3_run(label, QWEN3_30B_A3B, 16, 1024, 1, {}, "h100-80gb", a2a_overlap=False)
    raw["models"] = [{"name": "llm", "spec": QWEN3_8B, "pad_vocab_multiple": 1}]
    del raw["parallel"]["ep"], raw["parallel"]["etp"], raw["training"]["moe"]
    raw["timing"].update(rope_fusion=False, delay_wgrad_compute=False)
    return {
        "raw": _pinned(_functional(raw), "619cc20bd", _PYTORCH_2604),
        "label": label,
        "card": "qwen3-8b",
        "item": "pretrain",
        "gpu": "H100",
        "commit": "619cc20bd",
        "ms": 25070.320,
        "notes": (*_FUNCTIONAL, "SwiGLU unfused (bias_activation_fusion off) priced as the fused kernel"),
    }


def _qwen3_30b_h100_functional() -> dict[str, Any]:
    """recipes/qwen/h100/qwen3_moe.py `qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config` at 5b9d9cf50 (the card's
    `qwen3_30b_a3b_pretrain_config` alias): EP 16, DP 16, GBS 1024, MBS 1, BF16 gradient reduction, no recompute,
    rope, bias-activation and router fusion, HybridEP on 32 SMs, no combined 1F1B, TE graphs of the router."""
    label = "Qwen3 30B-A3B BF16 EP16 HybridEP natural routing (16 H100)"
    raw = _qwen3_run(label, QWEN3_30B_A3B, 16, 1024, 1, {"ep": 16}, "h100-80gb", a2a_overlap=False)
    raw["training"]["moe"]["router"]["force_balance"] = False
    raw["timing"].update({**_flex("hybridep"), **_te_graphs(*_ROUTER)})
    return {
        "raw": _pinned(_functional(raw), "5b9d9cf50"),
        "label": label,
        "card": "qwen3-30b-a3b",
        "item": "pretrain",
        "gpu": "H100",
        "commit": "5b9d9cf50",
        "ms": 30289.550,
        "notes": (_NATURAL, *_FUNCTIONAL),
    }


def _qwen3_30b_gb200_functional() -> dict[str, Any]:
    """recipes/qwen/gb200/qwen3_moe.py `qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config` at 487f56398 over
    recipes/qwen/h100/qwen3_moe.py's 16-GPU config (no recompute, rope, bias-activation and router fusion, HybridEP
    on 32 SMs, TE graphs of moe_router and moe_preprocess, the distributed optimizer's gathers and reductions
    overlapped): `bf16_with_mxfp8_mixed` (MXFP8 GEMMs and parameter gathers, BF16 gradient reduction, no
    precision-aware optimizer: fp32 moments), TP 1, PP 1, EP 8 on 8 GB200 (DP 8), GBS 512, MBS 4, natural routing,
    TE's FP8 attention (mixed_precision.fp8_dot_product_attention), the combined 1F1B with delay_wgrad_compute,
    the functional checks; its environment puts the 8 ranks in one NVLink domain (USE_MNNVL 1,
    NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN 8). The recipe also sets use_transformer_engine_op_fuser with
    moe_mlp_glu_interleave_size 32 and its environment NVTE_CUTEDSL_FUSED_GROUPED_MLP=1: the commit's Megatron-Core
    (6cd6ea530e experts.py `TEGroupedMLP.__init__`) asserts `_is_fused_impl_supported` (TE 2.17, no expert TP, SwiGLU,
    the variable set) and runs `_fused_forward`, which needs no rank capacity (its split sizes stay on the device;
    the HybridEP path skips the quantization padding, moe_utils.py `skip_routed_expert_padding`): TE's fused grouped
    MLP under MXFP8 on sm100, priced as the paged-stash rows price it (`ppb_core.timing.fused_experts`)."""
    label = "Qwen3 30B-A3B MXFP8 EP8 HybridEP EP-overlap FP8 attention natural routing (8 GB200)"
    raw = _qwen3_run(label, QWEN3_30B_A3B, 8, 512, 4, {"ep": 8}, "gb200", a2a_overlap=True, fp8_recipe="mxfp8")
    raw["parallel"]["devices_per_node"] = 8
    raw["training"]["moe"]["router"]["force_balance"] = False
    raw["timing"].update({**_flex("hybridep"), **_te_graphs(*_ROUTER)})
    raw["timing"].update(check_for_nan_in_grad=True, ddp_average_in_collective=True, fp8_dot_product_attention=True)
    raw["timing"].update(use_transformer_engine_op_fuser=True, moe_mlp_glu_interleave_size=32)
    return {
        "raw": _pinned(raw, "487f56398"),
        "label": label,
        "card": "qwen3-30b-a3b",
        "item": "pretrain",
        "gpu": "GB200",
        "commit": "487f56398",
        "ms": 12362.340,
        "notes": (
            _NATURAL,
            *_FUNCTIONAL,
            "MXFP8's gathered parameters not copied out of the gradient buffer",
            "the layernorm SM margins, HybridEP's combine chunk and the high-priority all-to-all stream (environment "
            "and stream settings) not priced",
        ),
    }


# ---- The MXFP8 Blackwell performance entries: `_enable_hybridep_full_iteration_mxfp8` (perf_recipes/qwen/common.py at
# 6e1b47893, 0480586879 and fbb7570cf, line for line): full-iteration CUDA graphs, the paged expert stash at a rank
# capacity of 1.5 (moe_paged_stash, moe_expert_rank_capacity_factor 1.5, stash buffers of 1.2 on the device and
# 1.0 on the host), TE's op fuser with a 32-wide GLU interleave (the fused grouped MLP; the recipe's environment
# sets NVTE_CUTEDSL_FUSED_GROUPED_MLP=1), HybridEP's preprocessing on 32 SMs, the high-priority all-to-all
# stream, TE's FP8 attention, the combined 1F1B with delay_wgrad_compute (tp_comm_overlap asked, off at TP 1).
_PAGED_STASH_NOTES = (
    "routing balanced (forced)",
    "HybridEP's preprocessing SMs (32), its combine chunk, the layernorm and cuDNN cluster SM margins and the "
    "high-priority all-to-all stream (environment and stream settings) not priced",
    "the paged stash's copies on their side stream hidden behind the next layer's work (not priced)",
)


def _paged_stash_mxfp8(raw: dict[str, Any]) -> dict[str, Any]:
    """`_enable_hybridep_full_iteration_mxfp8` over a Qwen3 MXFP8 perf recipe (`_benchmark_common`: BF16
    gradient reduction, average_in_collective, no NaN checks, HybridEP on 32 SMs)."""
    raw["timing"].update(
        _flex("hybridep"),
        cuda_graph_impl="full_iteration",
        use_transformer_engine_op_fuser=True,
        moe_mlp_glu_interleave_size=32,
        moe_expert_rank_capacity_factor=1.5,
        moe_paged_stash=True,
        moe_paged_stash_buffer_size_factor_cuda=1.2,
        moe_paged_stash_buffer_size_factor_cpu=1.0,
        fp8_dot_product_attention=True,
        ddp_average_in_collective=True,
    )
    return raw


def _qwen3_30b_mxfp8(device: str, gpus: int, gbs: int, mbs: int, commit: str, ms: float, item: str) -> dict:
    """`qwen3_30b_a3b_pretrain_8gpu_{gb200,gb300}_fp8mx_config` (perf_recipes/qwen/{gb200,gb300}/qwen3_moe.py at
    *commit*) over recipes/qwen/h100/qwen3_moe.py's 8-GPU config: `_perf_precision("fp8_mx")` (MXFP8 GEMMs and
    parameter gathers, fp32 moments), bias-activation and router fusion, no recompute, forced balance, sequence
    4096, TP 1, PP 1, EP 8, no SP, HybridEP, then `_enable_hybridep_full_iteration_mxfp8`. The card's command
    overrides the global batch only (the weak-scaling points: 64 sequences a GPU)."""
    point = " weak-scaling point" if item == "pretrain_weak_scaling" else ""
    label = (
        f"Qwen3 30B-A3B MXFP8 EP8 HybridEP paged stash full-iteration graphs MBS{mbs}{point} ({gpus} {device.upper()})"
    )
    raw = _qwen3_run(label, QWEN3_30B_A3B, gpus, gbs, mbs, {"ep": 8}, device, a2a_overlap=True, fp8_recipe="mxfp8")
    raw["parallel"]["devices_per_node"] = nvlink_domain(gpus)
    notes = _PAGED_STASH_NOTES
    if gpus > 8:
        notes = (*notes, "the NVLink domain as NeMo's sbatch segments (Megatron-Bridge's launcher sets none)")
    return {
        "raw": _pinned(_paged_stash_mxfp8(raw), commit),
        "label": label,
        "card": "qwen3-30b-a3b",
        "item": item,
        "gpu": device.upper() if item == "pretrain_performance" else f"{device.upper()} {gpus} GPUs",
        "commit": commit,
        "ms": ms,
        "notes": notes,
    }


# the card's pretrain_weak_scaling.GB300 points at fbb7570cf: (GPUs, GBS, last_10_steps_step_time_ms_avg)
_WEAK_SCALING_GB300 = ((8, 512, 5889.420), (32, 2048, 5814.290), (128, 8192, 5831.720), (256, 16384, 5818.620))


def _mxfp8_blackwell_rows() -> list[dict[str, Any]]:
    """The cards' MXFP8 Blackwell entries, every one over the paged stash and TE's fused grouped MLP: Qwen3
    30B-A3B's pretrain_performance GB200 (6e1b47893, MBS 4) and GB300 (0480586879, MBS 8) and its GB300
    weak-scaling points (fbb7570cf, MBS 8); Qwen3 235B-A22B's, GPT-OSS 120B's and DeepSeek-V3's."""
    rows = [
        _qwen3_30b_mxfp8("gb200", 8, 512, 4, "6e1b47893", 6501.120, "pretrain_performance"),
        _qwen3_30b_mxfp8("gb300", 8, 512, 8, "0480586879", 5854.910, "pretrain_performance"),
    ]
    for gpus, gbs, ms in _WEAK_SCALING_GB300:
        rows.append(_qwen3_30b_mxfp8("gb300", gpus, gbs, 8, "fbb7570cf", ms, "pretrain_weak_scaling"))
    # the Qwen3 235B-A22B card's pretrain_performance GB200 (0480586879: PP 8, VP 3, MBS 1) and GB300 (fbb7570cf:
    # PP 4, VP 12, MBS 2)
    rows.append(_qwen3_235b_mxfp8("gb200", 8, 3, 1, "0480586879", 17905.340))
    rows.append(_qwen3_235b_mxfp8("gb300", 4, 12, 2, "fbb7570cf", 14920.840))
    rows.append(_gpt_oss_120b_gb300_mxfp8())  # the GPT-OSS 120B card's pretrain_performance GB300
    # the DeepSeek-V3 card's pretrain_performance GB200 (PP 4, EP 64, mla_up_proj recomputed) and GB300 (PP 2,
    # EP 32, nothing recomputed, FP8 attention)
    rows.append(_deepseek_v3_mxfp8("gb200", 4, 64, ["mla_up_proj"], False, 13841.180))
    rows.append(_deepseek_v3_mxfp8("gb300", 2, 32, [], True, 10667.300))
    return rows


def _qwen3_235b_mxfp8(device: str, pp: int, vp: int, mbs: int, commit: str, ms: float) -> dict[str, Any]:
    """`qwen3_235b_a22b_pretrain_256gpu_{gb200,gb300}_fp8mx_config` (perf_recipes/qwen/{gb200,gb300}/qwen3_moe.py at
    *commit*) over recipes/qwen/h100/qwen3_moe.py `qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config` (the embedding
    and the loss each counted as a layer in the pipeline split: 94 + 2 = 96 over the virtual stages): MXFP8, no
    recompute, router and bias-activation fusion, forced balance, sequence 4096, TP 1, PP *pp*, VP *vp*, EP 32, no
    SP, GBS 8192, MBS *mbs*, HybridEP, then `_enable_hybridep_full_iteration_mxfp8`."""
    graphs = "paged stash full-iteration graphs"
    label = f"Qwen3 235B-A22B MXFP8 PP{pp} VP{vp} EP32 HybridEP {graphs} (256 {device.upper()})"
    stages = pp * vp
    parallel = {"pp": pp, "vp": vp, "ep": 32}
    layout = _split_layout(stages, 96 // stages)
    raw = _qwen3_run(
        label, QWEN3_235B_A22B, 256, 8192, mbs, parallel, device, a2a_overlap=True, layout=layout, fp8_recipe="mxfp8"
    )
    raw["parallel"]["devices_per_node"] = nvlink_domain(256)
    notes = (*_PAGED_STASH_NOTES, "the NVLink domain as NeMo's sbatch segments (Megatron-Bridge's launcher sets none)")
    return {
        "raw": _pinned(_paged_stash_mxfp8(raw), commit),
        "label": label,
        "card": "qwen3-235b-a22b",
        "gpu": device.upper(),
        "commit": commit,
        "ms": ms,
        "notes": notes,
    }


def _gpt_oss_120b_gb300_mxfp8() -> dict[str, Any]:
    """`gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config` (perf_recipes/gpt_oss/gb300/gpt_oss.py at 0480586879) over
    recipes/gpt_oss/h100/gpt_oss.py `gpt_oss_120b_pretrain_64gpu_h100_bf16_config` (per-token loss, no recompute):
    `_perf_precision("fp8_mx")` (MXFP8 GEMMs and parameter gathers, BF16 gradient reduction), router fusion,
    forced balance, TP 1, PP 1, EP 16 on 64 GB300 (DP 64), no SP, GBS 1280, MBS 4, `_benchmark_common` (TE's
    cross-entropy, rope fusion), then perf_recipes/gpt_oss/common.py `_apply_gpt_oss_120b_full_iter_fp8mx_configs`:
    `_enable_hybridep_full_iteration_mxfp8`'s settings (HybridEP on 32 SMs) and `fp8_output_proj` (the LM head as an
    MXFP8 TE linear)."""
    label = "GPT-OSS 120B MXFP8 EP16 HybridEP paged stash full-iteration graphs (64 GB300)"
    raw = _gpt_oss_run(label, "26.04", "gb300", 64, 1280, 4, 1, 16, hybridep=True, a2a_overlap=True, recompute=False)
    raw["timing"].update(matmul_dtype="fp8", fp8_recipe="mxfp8", fp8_param_gather=True, calculate_per_token_loss=True)
    raw["training"]["fp8_cache"] = "linear"
    raw = _pinned(_paged_stash_mxfp8(raw), "0480586879")
    raw["timing"]["ddp_average_in_collective"] = False  # per-token loss: the base recipe's average off
    return {
        "raw": raw,
        "label": label,
        "card": "gpt-oss-120b",
        "gpu": "GB300",
        "commit": "0480586879",
        "ms": 2481.140,
        "notes": (
            *_PAGED_STASH_NOTES,
            "the LM head's MXFP8 GEMM (fp8_output_proj) priced in 16 bits",
            _SINKS_NOTE,
        ),
    }


def _deepseek_v3_mxfp8(device: str, pp: int, ep: int, modules: list[str], fp8_attention: bool, ms: float) -> dict:
    """`deepseek_v3_pretrain_256gpu_{gb200,gb300}_fp8mx_config` (perf_recipes/deepseek/{gb200,gb300}/deepseek_v3.py
    at 79308d0d9, the card's verification_environment commit; its entries name none) over recipes/deepseek/
    deepseek_v3.py's config: `_perf_precision("fp8_mx")`, `_deepseek_v3_common` (selective recompute, router fusion,
    forced balance), TP 1, PP *pp* with 16 virtual stages of 4 layers ("Et*4|(t*4|)*14tmL": the GB200's
    `set_deepseek_v3_pipeline_model_parallel_layout` (4, 4), the GB300's stated), EP *ep*, no SP, GBS 4096, MBS 1,
    recompute of *modules*, gradient reduce-scatters overlapped, `_benchmark_common`, then
    perf_recipes/deepseek/common.py `_enable_deepseek_full_iteration_mxfp8` (HybridEP on 32 SMs, no shared-expert
    overlap, full-iteration graphs, rank capacity 1.5, the paged stash at 1.2 / 1.0, the op fuser at a 32-wide GLU
    interleave, `fp8_output_proj`, FP8 attention on the GB300 only, the combined 1F1B with delayed weight
    gradients)."""
    vp = 16 // pp
    label = f"DeepSeekV3 MXFP8 PP{pp} VP{vp} EP{ep} HybridEP paged stash full-iteration graphs (256 {device.upper()})"
    parallel = {"pp": pp, "ep": ep}
    raw = _deepseek_v3_run(label, 256, 4096, 1, parallel, _deepseek_layout(16, 4), device, modules, a2a_overlap=True)
    if not modules:
        del raw["training"]["recompute"]
    raw["parallel"]["devices_per_node"] = nvlink_domain(256)
    raw = _pinned(_paged_stash_mxfp8(raw), "79308d0d9")
    raw["timing"]["fp8_dot_product_attention"] = fp8_attention
    return {
        "raw": raw,
        "label": label,
        "card": "deepseek-v3",
        "gpu": device.upper(),
        "commit": "79308d0d9",
        "ms": ms,
        "notes": (
            *_PAGED_STASH_NOTES,
            "the first three layers' dense MLPs (TEFusedMLP under the op fuser) priced as TE's modules",
            "the LM head's MXFP8 GEMM (fp8_output_proj) priced in 16 bits",
            _BF16_MOMENTS,
            "the card's base container nemo:26.08.rc5 (no public release list): PyTorch from the commit's "
            "Dockerfile base",
            "the NVLink domain as NeMo's sbatch segments (Megatron-Bridge's launcher sets none)",
        ),
    }


# openai/gpt-oss-20b config.json: the 120B's layer (hidden 2880, 64 query and 8 key-value heads of 64, sinks, the
# window of 128 on every other layer from the first, quick-GEGLU experts of 2880 with biases and clamp 7, YaRN 32)
# at 24 layers and 32 experts, top 4; ppb's reading of configs/hf/gpt-oss-120b.json with those three changed
GPT_OSS_20B = {
    "family": "gpt_oss",
    "vocab_size": 201088,
    "hidden_size": 2880,
    "num_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "activation": "quick_geglu",
    "max_position_embeddings": 131072,
    "attention_bias": True,
    "attention_output_bias": True,
    "sliding_window": 128,
    "window_layers": tuple(range(0, 24, 2)),
    "attention_sinks": True,
    "rope_yarn_factor": 32.0,
    "num_experts": 32,
    "experts_per_token": 4,
    "moe_intermediate_size": 2880,
    "expert_bias": True,
    "activation_clamp": 7.0,
    "router_bias": True,
}
# configs/hf/gpt-oss-120b.json as ppb reads it (36 layers, 128 experts), spelled out so a card can change its vocabulary
GPT_OSS_120B = {**GPT_OSS_20B, "num_layers": 36, "window_layers": tuple(range(0, 36, 2)), "num_experts": 128}
# The GPT-OSS pretrain entries train with their tokenizer's vocabulary, not the model's 201,088. Their command names
# the RedPajama-v2 data's SentencePiece model (tokenizer.model: Llama's, 32,000 pieces, as the deepseek-v4-flash card's
# pretrain entry states of the same data, "token IDs 0-31999"), and from af17edf52 (2026-07-28, "derive pretraining
# vocab from tokenizer", #4996; both entries' commits hold it) recipes/common.py `_pretrain_common` sets
# use_tokenizer_vocab_size True, which neither the GPT-OSS recipes nor the commands clear: training/setup.py
# `_validate_and_set_vocab_size` then returns the tokenizer's vocab_size (megatron/core/tokenizers SentencePiece:
# `get_piece_size()`) with padding on, and gpt_provider.py pads it to make_vocab_size_divisible_by (128: the largest
# power of two up to 128 dividing 201,088, model_bridge.py) x TP: 32,000. The entries' initial losses (10.90, 10.91)
# sit below ln 201,088 = 12.21 and about as far above ln 32,000 = 10.37 as the GB200 mock entry's 12.79 above 12.21.
# The earlier rp2 pretrain entries (Qwen3, Moonlight: commits before af17edf52) keep their models' vocabularies.
RP2_LLAMA_VOCAB = 32000


def _gpt_oss_h100_functional(label: str, gpus: int, pp: int, ep: int, spec: dict[str, Any]) -> dict[str, Any]:
    """recipes/gpt_oss/h100/gpt_oss.py's pretrain configs (a8038f6d9 for the 120B, 6799f0997 for the 20B): TP 2 with
    SP, PP *pp*, EP *ep*, GBS 512, MBS 1; the alltoall dispatcher (the flex backend named but
    `apply_flex_dispatcher_backend` not called), no router fusion, permute fusion, no recompute, no CUDA graphs, no
    TP overlap (comm_overlap None); per-token loss with average_in_collective off; `_pretrain_common`'s bf16_mixed with
    FP32 gradient reduction (ddp.grad_reduce_in_fp32 True); the native cross-entropy the recipes name; rope fusion at
    Megatron-Core's default (off); *spec* the model with the tokenizer's vocabulary (`RP2_LLAMA_VOCAB`)."""
    dp = gpus // (2 * pp)
    raw = _gpt_oss_run(label, "26.04", "h100-80gb", gpus, 512, 1, pp, ep, recompute=False)
    vocab = {**spec, "vocab_size": RP2_LLAMA_VOCAB}
    raw["models"] = [{"name": "llm", "spec": vocab, "pad_vocab_multiple": 128}]
    raw["parallel"].update(tp=2, dp=dp, sequence_parallel=True)
    raw["training"].update(micro_batches=512 // dp, grad_bytes=4)
    raw["training"]["moe"]["router"].update(fusion=False, force_balance=False)
    raw["timing"].update(cross_entropy_fusion_impl="native", rope_fusion=False, calculate_per_token_loss=True)
    _functional(raw)
    raw["timing"]["ddp_average_in_collective"] = False
    return raw


_GPT_OSS_NOTES = (
    _NATURAL,
    *_FUNCTIONAL,
    _SINKS_NOTE,
    "no load-balancing loss (GPTOSSBridge: moe_router_load_balancing_type none) under natural routing",
)


def _gpt_oss_120b_h100_functional() -> dict[str, Any]:
    """`gpt_oss_120b_pretrain_64gpu_h100_bf16_config` at a8038f6d9 (the card's `gpt_oss_120b_pretrain_config` alias;
    the card's verification_environment commit, the entry names none): PP 4, EP 16 on 64 H100, so DP 8."""
    label = "GPT-OSS 120B BF16 TP2 PP4 EP16 natural routing (64 H100)"
    return {
        "raw": _pinned(_gpt_oss_h100_functional(label, 64, 4, 16, GPT_OSS_120B), "a8038f6d9"),
        "label": label,
        "card": "gpt-oss-120b",
        "item": "pretrain",
        "gpu": "H100",
        "commit": "a8038f6d9",
        "ms": 16664.930,
        "notes": _GPT_OSS_NOTES,
    }


def _gpt_oss_20b_h100_functional() -> dict[str, Any]:
    """`gpt_oss_20b_pretrain_16gpu_h100_bf16_config` at 6799f0997 (the card's verification_environment commit):
    PP 4, EP 4 on 16 H100, so DP 2."""
    label = "GPT-OSS 20B BF16 TP2 PP4 EP4 natural routing (16 H100)"
    raw = _gpt_oss_h100_functional(label, 16, 4, 4, GPT_OSS_20B)
    return {
        "raw": _pinned(raw, "6799f0997"),
        "label": label,
        "card": "gpt-oss-20b",
        "item": "pretrain",
        "gpu": "H100",
        "commit": "6799f0997",
        "ms": 22400.880,
        "notes": _GPT_OSS_NOTES,
    }


# moonshotai/Moonlight-16B-A3B (DeepseekV3ForCausalLM; Megatron-Bridge's DeepSeekV3Bridge): 27 layers of hidden 2048,
# the first dense (SwiGLU 11264), 26 of 64 routed experts of 1408 with 2 shared, top 6 by sigmoid scores with expert
# bias and top-k scaling 2.446 in one group, MLA with 16 heads, no query LoRA, KV rank 512, head dims 128 + 64 / 128,
# untied embeddings of 163,840, no MTP (tests/unit_tests/recipes/test_moonlight_recipes.py at 411c6b1dc: vocabulary,
# q_lora_rank None, 64 experts, top 6, group top-k 1, scaling 2.446; the card's 27 layers and [163842, 2048] output
# head (the SFT tokenizer's two added tokens); the other sizes the model's config.json)
MOONLIGHT_16B = {
    **{key: KIMI_K2[key] for key in ("family", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank")},
    "vocab_size": 163840,
    "hidden_size": 2048,
    "num_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 11264,
    "max_position_embeddings": 8192,
    "q_lora_rank": 0,
    "num_experts": 64,
    "experts_per_token": 6,
    "moe_intermediate_size": 1408,
    "shared_experts": 2,
    "first_dense_layers": 1,
    "expert_groups": 1,
    "expert_group_limit": 1,
}


def _moonlight_h100() -> dict[str, Any]:
    """recipes/moonlight/h100/moonlight_16b.py `moonlight_16b_pretrain_16gpu_h100_bf16_config` at 411c6b1dc over its
    8-GPU config: TP 1, PP 1, EP 8 on 16 H100 (DP 16), GBS 1024, MBS 2, no recompute, router fusion, permute fusion,
    HybridEP on 32 SMs (moe_flex_dispatcher_num_sms), the combined 1F1B with delay_wgrad_compute, BF16 gradients,
    main gradients and moments, average_in_collective; rope fusion off (DeepSeekV3Bridge), TE's cross-entropy."""
    label = "Moonlight 16B-A3B BF16 EP8 HybridEP EP-overlap natural routing (16 H100)"
    raw = _deepseek_v3_run(label, 16, 1024, 2, {"pp": 1, "ep": 8}, "", "h100-80gb", [], a2a_overlap=True)
    raw["models"] = [{"name": "llm", "spec": MOONLIGHT_16B, "pad_vocab_multiple": 1}]
    del raw["parallel"]["layout"], raw["training"]["recompute"]
    raw["training"]["moe"]["router"]["force_balance"] = False
    raw["timing"].update(_flex("hybridep"), rope_fusion=False)
    return {
        "raw": _pinned(_functional(raw), "411c6b1dc", _PYTORCH_2604),
        "label": label,
        "card": "moonlight-16b-a3b",
        "item": "pretrain",
        "gpu": "H100",
        "commit": "411c6b1dc",
        "ms": 11636.350,
        "notes": (_NATURAL, *_FUNCTIONAL, _BF16_MOMENTS),
    }


# The cards' timed entries not priced, and why (printed by bench/public_runs.py).
SKIPPED_CARDS: tuple[tuple[str, str], ...] = (
    (
        "Megatron-Bridge cards: every checkpoint_resume entry",
        "its pretrain entry's recipe resumed at step 50 (train.empty_unused_memory_level 2 added): priced once, as "
        "the pretrain entry",
    ),
    (
        "Megatron-Bridge cards: Nemotron 3 Nano / Super / 3.5 Lightning, Nemotron 3 Nano Omni",
        "hybrid Mamba models, which ppb does not describe (Super's GB300 entry is also NVFP4)",
    ),
    (
        "Megatron-Bridge cards: DeepSeek-V4 Flash, GLM-5.2, Qwen3.6 35B-A3B and Qwen3.8 27B",
        "attention ppb does not describe: DeepSeek-V4's compressed attention, GLM's DSA indexer, Qwen3.5's Gated "
        "DeltaNet layers (the last two cards also vision-language)",
    ),
    (
        "Megatron-Bridge cards: GLM-5, MiniMax M3, Step 3.5 Flash, K-EXAONE 2, Kimi K3",
        "no timed entry (every item unverified)",
    ),
    (
        "Megatron-Bridge cards: every sft, sft_long_context and peft entry; Gemma 3 / 4 (vision-language)",
        "packed variable-length sequences or LoRA adapters, which a run config cannot state",
    ),
)


def bridge_verification_rows() -> list[dict[str, Any]]:
    """The cards' priced entries' fields for bench/public_runs.py's PublicRun."""
    rows = []
    entries = (_deepseek_v3_h100(), _gpt_oss_120b_gb200(), _qwen3_30b_h100_tuned())
    functional = (
        _qwen3_8b_h100(),
        _qwen3_30b_h100_functional(),
        _gpt_oss_120b_h100_functional(),
        _moonlight_h100(),
        _gpt_oss_20b_h100_functional(),
        _qwen3_30b_gb200_functional(),
    )
    for entry in (*entries, *functional, *_mxfp8_blackwell_rows()):
        raw, ms, item = entry["raw"], entry["ms"], entry.get("item", "pretrain_performance")
        window = "91-100" if item == "pretrain" else "41-50"  # the last ten of 100 bounded steps, or of 50
        rows.append(
            {
                "name": f"Megatron-Bridge card {entry['label']}",
                "source": BRIDGE_VERIFICATION,
                "raw": raw,
                "published": f"{entry['card']} {item}.{entry['gpu']} at {entry['commit']}: {ms:,.3f} ms a step "
                f"(steps {window})",
                "seconds": ms / 1000.0,
                "assumptions": (*entry["notes"], *_CARD_NOTES),
            }
        )
    return rows
