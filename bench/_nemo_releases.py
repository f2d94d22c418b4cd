"""NeMo's performance summaries of the releases not in bench/_nemo.py: the archived 25.09, 26.02, 26.02.01 and 26.06
tables, each row with its own release's recipe, as run configs for bench/public_runs.py (a group of their own,
so the 25.11 and 26.04 groups keep their means).

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md at 067f987df, sections "26.06 NeMo
Container", "26.02.01 NeMo Container", "26.02 NeMo Container" and "25.09 NeMo Container" (its recipes: `_ROWS_2509`)
(pre-training tables by model: system, GPUs,
precision, GBS, MBS, sequence, FSDP, TP, PP, CP, VP, EP, tokens/s per GPU; seconds = GBS · sequence / (tokens/s
per GPU · GPUs)). The recipes are each container's Megatron-Bridge: 26.02 is v0.3.0 (21b02e0cf; its
docs/releases/software-versions.md "NeMo Framework 26.02": PyTorch 2.10.0a0, Megatron Core main:0.16.0 (the
3rdparty/Megatron-LM submodule b0cc2706dd, core_r0.16.0, 2026-02-23), Transformer Engine 2.12, cuDNN 9.18.0.50);
26.02.01 is taken as v0.3.1 (9c9dd8489, 2026-03-20, submodule 55ac708251 on core_r0.16.0; its software-versions
still lists 26.02's, taken as the patch container's); 26.06 is v0.5.0 (fcbb60311; the same file at v0.5.1,
"NeMo Framework 26.06": PyTorch 2.12.0a0, Megatron Core 0.18.0 (submodule d0b3b77549, core_r0.18.0), Transformer
Engine 2.16, cuDNN 9.21.1.3).

The dense Llama rows: scripts/performance/configs/llama/llama3_workload_base_configs.py and
llama31_workload_base_configs.py, whose V2 pre-training presets (GBS 256 for the 70B, GBS 1536 for the 405B) are
the same at v0.3.0, v0.3.1, v0.4.2 and v0.5.0 for every row taken here (`git diff` of the two files between the
tags touches only SFT, LoRA, NVFP4 and new systems' presets), and llama3_llm_pretrain.py / llama31_llm_pretrain.py
(userbuffers TP overlap, BF16 gradient reduction, Megatron FSDP's double buffer and no gradient accumulation
fusion), utils/overrides.py `set_post_overrides` (parameter gathers with the optimizer step where DP, PP and VP
exceed 1, not for fp8_mx: the same at the three tags). So each row is bench/_nemo.py's `_llama_run` of its 26.04
sibling, with its own container's releases. The 26.02 and 26.02.01 Qwen3, DeepSeek-V3 and GPT-OSS rows likewise
(`_QWEN3_ROWS`, `_DEEPSEEK_ROWS`, `_GPT_OSS_ROWS`).
"""

from __future__ import annotations

from typing import Any

from _nemo import (
    _405B_LAYOUT,
    _405B_ONE_A_STAGE,
    _BF16_MOMENTS,
    _DEEPSEEK_ASSUMPTIONS,
    _LLAMA3_8B,
    _ROUTER,
    _SINKS_NOTE,
    QWEN3_30B_A3B,
    QWEN3_235B_A22B,
    _deepseek_layout,
    _deepseek_v3_run,
    _flex,
    _gpt_oss_run,
    _llama_run,
    _qwen3_run,
    _row,
    _split_layout,
    _te_graphs,
)
from _public import LLAMA3_405B, LLAMA31_70B

ARCHIVE = "NeMo performance archive (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 067f987df)"

# Each container's releases (`framework_release`) and cuDNN (module docstring)
_RELEASES: dict[str, tuple[dict[str, str], str, str]] = {
    # 25.09: Megatron-Bridge v0.1.0rc3 (bf71eba07); the same file at v0.2.0, "NeMo Framework 25.09": PyTorch
    # 2.8.0a0, Megatron Core 0.14.0, Transformer Engine 2.7.0, cuDNN 9.11.0.98
    "25.09": (
        {"megatron_core": "0.14.0", "transformer_engine": "2.7.0", "pytorch": "2.8.0a0"},
        "9.11.0.98",
        "v0.1.0rc3",
    ),
    "26.02": ({"megatron_core": "0.16.0", "transformer_engine": "2.12", "pytorch": "2.10.0a0"}, "9.18.0.50", "v0.3.0"),
    "26.02.01": (
        {"megatron_core": "0.16.0", "transformer_engine": "2.12", "pytorch": "2.10.0a0"},
        "9.18.0.50",
        "v0.3.1",
    ),
    "26.06": ({"megatron_core": "0.18.0", "transformer_engine": "2.16", "pytorch": "2.12.0a0"}, "9.21.1.3", "v0.5.0"),
}

_70B_FSDP_GB200 = {"fsdp": True}
# LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 (v0.3.0, v0.3.1): MBS 2, Megatron FSDP, CPU offloading of 40 layers
# (overrides.py `_set_recompute_overrides`: cpu_offloading, not the weights); ..._GB300_FP8_CS_V2: of 20 layers
_OFFLOAD_GB200 = {"cpu_offloading_num_layers": 40}
_OFFLOAD_GB300 = {"cpu_offloading_num_layers": 20}
_TABLE_SIZES = "the table's parallel sizes and MBS (the release's preset differs); every other flag the preset's"

# (release, label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, options, training words, notes)
_LLAMA_ROWS: tuple[tuple[Any, ...], ...] = (
    # ---- 26.02 (v0.3.0)
    # LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V2: TP 4, PP 8, VP 5, GBS 256
    ("26.02", "Llama 3 70B FP8 TP4 PP8 GBS256 (64 H100)", LLAMA31_70B, 64, 256, 1, {"tp": 4, "pp": 8, "vp": 5},
     "h100-80gb", 1621.0, {}, {}, ()),
    # ..._GB200_FP8_MX_V2: TP 2, PP 4, VP 5
    ("26.02", "Llama 3 70B MXFP8 TP2 PP4 (64 GB200)", LLAMA31_70B, 64, 256, 1, {"tp": 2, "pp": 4, "vp": 5}, "gb200",
     3613.0, {"fp8_recipe": "mxfp8"}, {}, ()),
    ("26.02", "Llama 3 70B FP8 FSDP (64 GB200)", LLAMA31_70B, 64, 256, 2, {}, "gb200", 4040.0, _70B_FSDP_GB200,
     _OFFLOAD_GB200, ()),
    # ..._GB300_FP8_MX_V2: PP 4, VP 5, MBS 1
    ("26.02", "Llama 3 70B MXFP8 PP4 VP5 (64 GB300)", LLAMA31_70B, 64, 256, 1, {"pp": 4, "vp": 5}, "gb300", 4596.0,
     {"fp8_recipe": "mxfp8"}, {}, ()),
    ("26.02", "Llama 3 70B FP8 FSDP (64 GB300)", LLAMA31_70B, 64, 256, 2, {}, "gb300", 5003.0, {"fsdp": True},
     _OFFLOAD_GB300, ()),
    # LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V2: TP 4, PP 8, VP 4; the embedding and the loss counted as layers
    ("26.02", "Llama 3.1 405B FP8 TP4 PP8 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 8, "vp": 4},
     "gb300", 988.0, {"layout": _split_layout(32, 4)}, {}, ()),
    # ..._GB300_FP8_MX_V2: TP 2, PP 8, CP 2, VP 4
    ("26.02", "Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 2, "pp": 8, "cp": 2, "vp": 4}, "gb300", 931.0, {"layout": _split_layout(32, 4), "fp8_recipe": "mxfp8"},
     {}, ()),
    # ..._GB200_FP8_CS_V2: TP 4, PP 16, VP 4; ..._GB200_FP8_MX_V2: VP 8, one layer a virtual stage
    ("26.02", "Llama 3.1 405B FP8 TP4 PP16 (256 GB200)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 16, "vp": 4},
     "gb200", 793.0, {"layout": _405B_LAYOUT}, {}, ()),
    ("26.02", "Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 4, "pp": 16, "vp": 8}, "gb200", 786.0, {"layout": _405B_ONE_A_STAGE, "fp8_recipe": "mxfp8"}, {}, ()),
    # ..._H100_FP8_CS_V2: V1's TP 8, PP 8, CP 2, VP 8 on 1024 GPUs at GBS 1536
    ("26.02", "Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)", LLAMA3_405B, 1024, 1536, 1,
     {"tp": 8, "pp": 8, "cp": 2, "vp": 8}, "h100-80gb", 311.0, {"layout": _405B_LAYOUT}, {}, ()),
    # ---- 26.02.01 (v0.3.1: the same presets)
    ("26.02.01", "Llama 3 70B FP8 TP4 PP8 GBS256 (64 H100)", LLAMA31_70B, 64, 256, 1, {"tp": 4, "pp": 8, "vp": 5},
     "h100-80gb", 1639.0, {}, {}, ()),
    ("26.02.01", "Llama 3 70B MXFP8 TP2 PP4 (64 GB200)", LLAMA31_70B, 64, 256, 1, {"tp": 2, "pp": 4, "vp": 5},
     "gb200", 3837.0, {"fp8_recipe": "mxfp8"}, {}, ()),
    ("26.02.01", "Llama 3 70B FP8 FSDP (64 GB200)", LLAMA31_70B, 64, 256, 2, {}, "gb200", 4357.0, _70B_FSDP_GB200,
     _OFFLOAD_GB200, ()),
    ("26.02.01", "Llama 3 70B FP8 FSDP (64 GB300)", LLAMA31_70B, 64, 256, 2, {}, "gb300", 5243.0, {"fsdp": True},
     _OFFLOAD_GB300, ()),
    # the table's TP 2, PP 8, CP 2, VP 4 for FP8 (the v0.3.1 FP8_CS preset: TP 4, PP 8, VP 4; its FP8_MX's sizes)
    ("26.02.01", "Llama 3.1 405B FP8 TP2 PP8 CP2 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 2, "pp": 8, "cp": 2, "vp": 4}, "gb300", 1024.0, {"layout": _split_layout(32, 4)}, {}, (_TABLE_SIZES,)),
    ("26.02.01", "Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 2, "pp": 8, "cp": 2, "vp": 4}, "gb300", 949.0, {"layout": _split_layout(32, 4), "fp8_recipe": "mxfp8"},
     {}, ()),
    ("26.02.01", "Llama 3.1 405B FP8 TP4 PP16 (256 GB200)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 16, "vp": 4},
     "gb200", 818.0, {"layout": _405B_LAYOUT}, {}, ()),
    ("26.02.01", "Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 4, "pp": 16, "vp": 8}, "gb200", 775.0, {"layout": _405B_ONE_A_STAGE, "fp8_recipe": "mxfp8"}, {}, ()),
    # ---- 26.06 (v0.5.0: the same 405B presets)
    ("26.06", "Llama 3.1 405B FP8 TP4 PP8 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 8, "vp": 4},
     "gb300", 1048.0, {"layout": _split_layout(32, 4)}, {}, ()),
    ("26.06", "Llama 3.1 405B MXFP8 TP2 PP8 CP2 VP4 (256 GB300)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 2, "pp": 8, "cp": 2, "vp": 4}, "gb300", 952.0, {"layout": _split_layout(32, 4), "fp8_recipe": "mxfp8"},
     {}, ()),
    ("26.06", "Llama 3.1 405B FP8 TP4 PP16 (256 GB200)", LLAMA3_405B, 256, 1536, 1, {"tp": 4, "pp": 16, "vp": 4},
     "gb200", 843.0, {"layout": _405B_LAYOUT}, {}, ()),
    ("26.06", "Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)", LLAMA3_405B, 256, 1536, 1,
     {"tp": 4, "pp": 16, "vp": 8}, "gb200", 783.0, {"layout": _405B_ONE_A_STAGE, "fp8_recipe": "mxfp8"}, {}, ()),
    ("26.06", "Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)", LLAMA3_405B, 1024, 1536, 1,
     {"tp": 8, "pp": 8, "cp": 2, "vp": 8}, "h100-80gb", 326.0, {"layout": _405B_LAYOUT}, {}, ()),
)  # fmt: skip

# The 25.09 table ("25.09 NeMo Container", GBS, MBS and sizes per system; FP8 per-tensor current scaling, MXFP8 in
# parentheses): Megatron-Bridge v0.1.0rc3's scripts/performance/configs/llama3/llama3_{8b,70b}_llm_pretrain.yaml and
# llama31/llama31_405b_llm_pretrain.yaml (`perf_matrix` by system and precision, fp8_cs and fp8_mx; the ConfigContainer
# part: TE's fused cross-entropy, no NaN checks, BF16 gradient reduction), run_script.py (the userbuffers configs of
# utils/helpers.py `COMM_OVERLAP_CONFIG_MAP` where TP > 1, gradient accumulation fusion on, Megatron FSDP's double
# buffer for the 70B and 405B, rope fusion), utils/helpers.py `apply_perf_matrix_overrides` (`cuda_graphs`:
# MCore's enable_cuda_graph, the local graphs; Megatron FSDP `optim_grads_params`, no FP8 transpose cache; recompute
# and CPU offloading as the matrix names them), comm_overlap.py `_get_optimizer_overlap_cfgs` (the gathers with the
# optimizer step left False: its True is commented out at v0.1.0rc3).
# run_script.py builds the 70B and 405B from their recipes without a comm_overlap config, so the recipes' own stands
# (src/megatron/bridge/recipes/llama/llama3_70b.py and llama31_405b.py `pretrain_config`, `if cfg.comm_overlap is None`:
# defer_embedding_wgrad_compute with wgrad_deferral_limit 22 / 50; the 8B's sets neither), but under Megatron FSDP,
# which `set_megatron_fsdp_overrides` turns it off for. From v0.2.0 the presets pass their own CommOverlapConfig
# without it (recipes/llama/llama3.py `llama3_70b_pretrain_config`, `llama31_405b_pretrain_config`).
_DEFER_70B = {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 22}
_DEFER_405B = {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 50}
# (label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, options, training words)
_ROWS_2509: tuple[tuple[Any, ...], ...] = (
    # gb200 num_gpus_8: MBS 2, CUDA graphs (fp8_cs and fp8_mx alike)
    ("Llama 3 8B FP8 (8 GB200)", _LLAMA3_8B, 8, 128, 2, {}, "gb200", 31357.0, {"graphs": True}, {}),
    ("Llama 3 8B MXFP8 (8 GB200)", _LLAMA3_8B, 8, 128, 2, {}, "gb200", 29925.0, {"graphs": True, "fp8_recipe": "mxfp8"},
     {}),
    # gb200 num_gpus_64: fp8_cs MBS 2, Megatron FSDP, CPU offloading of 40 layers; fp8_mx MBS 1, TP 2, PP 4, VP 5
    ("Llama 3 70B FP8 FSDP (64 GB200)", LLAMA31_70B, 64, 128, 2, {}, "gb200", 3986.0, {"fsdp": True},
     {"cpu_offloading_num_layers": 40}),
    ("Llama 3 70B MXFP8 TP2 PP4 VP5 (64 GB200)", LLAMA31_70B, 64, 128, 1, {"tp": 2, "pp": 4, "vp": 5}, "gb200", 3546.0,
     {"fp8_recipe": "mxfp8"}, _DEFER_70B),
    # gb200 num_gpus_128: fp8_cs TP 2, Megatron FSDP, CPU offloading of 95 layers; fp8_mx TP 4, PP 8, CP 2, VP 8
    ("Llama 3.1 405B FP8 FSDP TP2 (128 GB200)", LLAMA3_405B, 128, 64, 1, {"tp": 2}, "gb200", 729.0, {"fsdp": True},
     {"cpu_offloading_num_layers": 95}),
    ("Llama 3.1 405B MXFP8 TP4 PP8 CP2 VP8 (128 GB200)", LLAMA3_405B, 128, 64, 1, {"tp": 4, "pp": 8, "cp": 2, "vp": 8},
     "gb200", 578.0, {"fp8_recipe": "mxfp8", "layout": _405B_LAYOUT}, _DEFER_405B),
    # b200 num_gpus_8: MBS 2, CUDA graphs; num_gpus_128: TP 4, PP 8, CP 2, VP 8 (fp8_cs and fp8_mx alike)
    ("Llama 3 8B FP8 (8 B200)", _LLAMA3_8B, 8, 128, 2, {}, "b200", 29994.0, {"graphs": True}, {}),
    ("Llama 3 8B MXFP8 (8 B200)", _LLAMA3_8B, 8, 128, 2, {}, "b200", 29388.0, {"graphs": True, "fp8_recipe": "mxfp8"},
     {}),
    ("Llama 3.1 405B FP8 TP4 PP8 CP2 (128 B200)", LLAMA3_405B, 128, 64, 1, {"tp": 4, "pp": 8, "cp": 2, "vp": 8},
     "b200", 664.0, {"layout": _405B_LAYOUT}, _DEFER_405B),
    ("Llama 3.1 405B MXFP8 TP4 PP8 CP2 (128 B200)", LLAMA3_405B, 128, 64, 1, {"tp": 4, "pp": 8, "cp": 2, "vp": 8},
     "b200", 622.0, {"fp8_recipe": "mxfp8", "layout": _405B_LAYOUT}, _DEFER_405B),
    # h100 num_gpus_8 fp8_cs: Megatron FSDP, CP 1, MBS 1; num_gpus_64: TP 4, PP 8, VP 5; num_gpus_1024: TP 8, PP 8,
    # CP 2, VP 8, GBS 512
    ("Llama 3 8B FP8 FSDP (8 H100)", _LLAMA3_8B, 8, 128, 1, {}, "h100-80gb", 14079.0, {"fsdp": True}, {}),
    ("Llama 3 70B FP8 TP4 PP8 (64 H100)", LLAMA31_70B, 64, 128, 1, {"tp": 4, "pp": 8, "vp": 5}, "h100-80gb", 1619.0,
     {}, _DEFER_70B),
    ("Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)", LLAMA3_405B, 1024, 512, 1, {"tp": 8, "pp": 8, "cp": 2, "vp": 8},
     "h100-80gb", 302.0, {"layout": _405B_LAYOUT}, _DEFER_405B),
)  # fmt: skip

# The Qwen3 rows (sequence 4096): configs/qwen/qwen3_workload_base_configs.py `QWEN3_30B_A3B_PRETRAIN_CONFIG_<GPU>_
# <PRECISION>_V1` (GBS 512 on 8 GPUs, 1024 on 16) and `QWEN3_235B_A22B_..._V2` (256 GPUs, GBS 8192) at the row's tag,
# qwen3_llm_pretrain.py (the preset's moe_flex_dispatcher_backend into the recipe: recipes/qwen/qwen3_moe.py ->
# flex_dispatcher_backend.py `apply_flex_dispatcher_backend`, which leaves the provider's alltoall where the preset
# names none; v0.3.1's BASE_QWEN3_*_CONFIG name deepep) and `set_qwen3_common_configs` (no recompute, router fusion,
# forced balance, BF16 gradient reduction); HybridEP on the 32 SMs utils/overrides.py `_set_common_perf_overrides`
# gives it (v0.3.0, v0.3.1); the 235B recipe counts the embedding and the loss as layers (96 over the virtual
# stages). bench/_nemo.py's `_qwen3_run`.
# (release, label, spec, GPUs, GBS, MBS, parallel, device, tokens/s per GPU, moe_a2a_overlap, layout, timing words)
_30B, _235B = QWEN3_30B_A3B, QWEN3_235B_A22B
_HYBRID_ROUTER = {**_flex("hybridep"), **_te_graphs(*_ROUTER)}
_HYBRID_ATTN_ROUTER = {**_flex("hybridep"), **_te_graphs("attn", *_ROUTER)}
# v0.5.0's MXFP8 presets with `cutedsl_fused_grouped_mlp` and full-iteration graphs: utils/overrides.py
# `set_workload_base_configs` (the op fuser, a 32-wide GLU interleave, with moe_a2a_overlap the high-priority
# all-to-all stream and HybridEP's preprocessing on 32 SMs), qwen3_llm_pretrain.py `set_full_iter_cg_configs` (rank
# capacity 1.5, the paged stash at 1.2 on the device and 1.0 on the host), the preset's fp8_dot_product_attention;
# perf_plugins.py sets NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (`ppb_core.timing.fused_experts`)
_PAGED_STASH = {
    **_flex("hybridep"),
    "cuda_graph_impl": "full_iteration",
    "use_transformer_engine_op_fuser": True,
    "moe_mlp_glu_interleave_size": 32,
    "moe_expert_rank_capacity_factor": 1.5,
    "moe_paged_stash": True,
    "moe_paged_stash_buffer_size_factor_cuda": 1.2,
    "moe_paged_stash_buffer_size_factor_cpu": 1.0,
    "fp8_dot_product_attention": True,
}
_QWEN3_ROWS: tuple[tuple[Any, ...], ...] = (
    # ---- 26.02 (v0.3.0)
    # 30B ..._GB200_FP8_MX_V1: MBS 4, hybridep, TE graphs of the router (its FP8_CS sibling's add attention)
    ("26.02", "Qwen3 30B-A3B MXFP8 EP8 (8 GB200)", _30B, 8, 512, 4, {"ep": 8}, "gb200", 26084.0, False, None,
     _HYBRID_ROUTER),
    # ..._GB300_FP8_MX_V1 = _FP8_CS_V1 (and B300's alike): MBS 8, hybridep, TE graphs of the router
    ("26.02", "Qwen3 30B-A3B MXFP8 EP8 (8 GB300)", _30B, 8, 512, 8, {"ep": 8}, "gb300", 30376.0, False, None,
     _HYBRID_ROUTER),
    ("26.02", "Qwen3 30B-A3B MXFP8 EP8 (8 B300)", _30B, 8, 512, 8, {"ep": 8}, "b300", 29521.0, False, None,
     _HYBRID_ROUTER),
    # ..._B200_FP8_MX_V1 = _B200_BF16_V1: MBS 1 (WorkloadBaseConfig's), no backend (alltoall), graphs of the router
    ("26.02", "Qwen3 30B-A3B MXFP8 EP8 MBS1 (8 B200)", _30B, 8, 512, 1, {"ep": 8}, "b200", 9691.0, False, None,
     _te_graphs(*_ROUTER)),
    # ..._H100_FP8_CS_V1: 16 GPUs, GBS 1024, PP 2, VP 12, EP 8, moe_a2a_overlap, deepep, no graphs
    ("26.02", "Qwen3 30B-A3B FP8 PP2 VP12 EP8 (16 H100)", _30B, 16, 1024, 1, {"pp": 2, "vp": 12, "ep": 8},
     "h100-80gb", 5113.0, True, None, _flex("deepep")),
    # 235B ..._GB300_FP8_MX_V2 (= _FP8_CS_V2): V1's MBS 2 and hybridep, PP 4 (no VP), EP 32, graphs of attention and
    # the router; ..._GB200_FP8_MX_V2: V1's PP 8, hybridep and graphs, EP 32
    ("26.02", "Qwen3 235B MXFP8 PP4 EP32 MBS2 (256 GB300)", _235B, 256, 8192, 2, {"pp": 4, "ep": 32}, "gb300",
     6583.0, False, _split_layout(4, 24), _HYBRID_ATTN_ROUTER),
    ("26.02", "Qwen3 235B MXFP8 PP8 EP32 (256 GB200)", _235B, 256, 8192, 1, {"pp": 8, "ep": 32}, "gb200", 5448.0,
     False, _split_layout(8, 12), _HYBRID_ATTN_ROUTER),
    # ..._B300_FP8_MX_V2: V1's PP 8, VP 4, EP 8, moe_a2a_overlap, no backend (alltoall), no graphs
    ("26.02", "Qwen3 235B MXFP8 PP8 VP4 EP8 (256 B300)", _235B, 256, 8192, 1, {"pp": 8, "vp": 4, "ep": 8}, "b300",
     2691.0, True, _split_layout(32, 3), {}),
    # ..._B200_FP8_MX_V2: V1's PP 8, EP 8, no moe_a2a_overlap, alltoall, no graphs
    ("26.02", "Qwen3 235B MXFP8 PP8 EP8 (256 B200)", _235B, 256, 8192, 1, {"pp": 8, "ep": 8}, "b200", 3805.0, False,
     _split_layout(8, 12), {}),
    # ..._H100_FP8_CS_V2: V1's TP 2, PP 8, VP 4, EP 32, moe_a2a_overlap (tp_comm_overlap off), alltoall, no graphs
    ("26.02", "Qwen3 235B FP8 TP2 PP8 VP4 EP32 (256 H100)", _235B, 256, 8192, 1, {"tp": 2, "pp": 8, "vp": 4, "ep": 32},
     "h100-80gb", 1633.0, True, _split_layout(32, 3), {}),
    # ---- 26.02.01 (v0.3.1): the 30B's GB200, GB300 and B300 presets and the 235B's GB300 and GB200 as v0.3.0
    ("26.02.01", "Qwen3 30B-A3B MXFP8 EP8 (8 GB200)", _30B, 8, 512, 4, {"ep": 8}, "gb200", 26373.0, False, None,
     _HYBRID_ROUTER),
    ("26.02.01", "Qwen3 30B-A3B MXFP8 EP8 (8 GB300)", _30B, 8, 512, 8, {"ep": 8}, "gb300", 30411.0, False, None,
     _HYBRID_ROUTER),
    ("26.02.01", "Qwen3 30B-A3B MXFP8 EP8 (8 B300)", _30B, 8, 512, 8, {"ep": 8}, "b300", 29454.0, False, None,
     _HYBRID_ROUTER),
    # v0.3.1's 30B _B200_BF16_V1 (its FP8_MX): MBS 4, hybridep, TE graphs of attention and the router
    ("26.02.01", "Qwen3 30B-A3B MXFP8 EP8 (8 B200)", _30B, 8, 512, 4, {"ep": 8}, "b200", 26695.0, False, None,
     _HYBRID_ATTN_ROUTER),
    ("26.02.01", "Qwen3 235B MXFP8 PP4 EP32 MBS2 (256 GB300)", _235B, 256, 8192, 2, {"pp": 4, "ep": 32}, "gb300",
     6583.0, False, _split_layout(4, 24), _HYBRID_ATTN_ROUTER),
    ("26.02.01", "Qwen3 235B MXFP8 PP8 EP32 (256 GB200)", _235B, 256, 8192, 1, {"pp": 8, "ep": 32}, "gb200", 5530.0,
     False, _split_layout(8, 12), _HYBRID_ATTN_ROUTER),
    # v0.3.1's 235B H100: V1's sizes with BASE_QWEN3_235B_A22B_CONFIG's deepep
    ("26.02.01", "Qwen3 235B FP8 TP2 PP8 VP4 EP32 (256 H100)", _235B, 256, 8192, 1,
     {"tp": 2, "pp": 8, "vp": 4, "ep": 32}, "h100-80gb", 1611.0, True, _split_layout(32, 3), _flex("deepep")),
    # ---- 26.06 (v0.5.0): 30B ..._GB300_FP8_MX_V1 and ..._B300_FP8_MX_V1 (MBS 8), ..._GB200_FP8_MX_V1 (MBS 4): EP 8,
    # moe_a2a_overlap, full-iteration graphs over the paged stash, the fused grouped MLP, FP8 attention; 235B
    # ..._GB300_FP8_MX_V2 (PP 4, VP 12, EP 32, MBS 2) and ..._GB200_FP8_MX_V2 (PP 8, VP 3, EP 32, MBS 1) likewise
    ("26.06", "Qwen3 30B-A3B MXFP8 EP8 paged stash (8 GB300)", _30B, 8, 512, 8, {"ep": 8}, "gb300", 45275.0, True,
     None, _PAGED_STASH),
    ("26.06", "Qwen3 30B-A3B MXFP8 EP8 paged stash (8 GB200)", _30B, 8, 512, 4, {"ep": 8}, "gb200", 40706.0, True,
     None, _PAGED_STASH),
    ("26.06", "Qwen3 30B-A3B MXFP8 EP8 paged stash (8 B300)", _30B, 8, 512, 8, {"ep": 8}, "b300", 40769.0, True,
     None, _PAGED_STASH),
    ("26.06", "Qwen3 235B MXFP8 PP4 VP12 EP32 paged stash (256 GB300)", _235B, 256, 8192, 2,
     {"pp": 4, "vp": 12, "ep": 32}, "gb300", 9015.0, True, _split_layout(48, 2), _PAGED_STASH),
    ("26.06", "Qwen3 235B MXFP8 PP8 VP3 EP32 paged stash (256 GB200)", _235B, 256, 8192, 1,
     {"pp": 8, "vp": 3, "ep": 32}, "gb200", 7376.0, True, _split_layout(24, 4), _PAGED_STASH),
)  # fmt: skip

# The DeepSeek-V3 rows (GBS 4096, sequence 4096, MXFP8): configs/deepseek/deepseek_workload_base_configs.py
# `DEEPSEEK_V3_PRETRAIN_CONFIG_<GPU>_V2` at v0.3.0, the same for these four systems at v0.3.1 (`git diff` touches the
# B300's BF16 and the H100's presets only): V1's settings at GBS 4096, each naming hybridep, none moe_a2a_overlap,
# recompute of mla_up_proj; deepseek_llm_pretrain.py (the preset's pp_layout, else `set_deepseek_v3_pipeline_model_
# parallel_layout` by PP and VP: (16, 1) for all four, the embedding with 4 layers, 14 virtual stages of 4, the last
# layer with the MTP layer and the loss). bench/_nemo.py's `_deepseek_v3_run`, as its 26.04 rows.
# (release, label, MBS, parallel, device, tokens/s per GPU, timing words)
_DS_LAYOUT = _deepseek_layout(16, 4)
_DEEPSEEK_ROWS: tuple[tuple[Any, ...], ...] = (
    # GB300_V1: MBS 2, PP 2, VP 8, EP 32, hybridep, no graphs (cuda_graph_scope []), pp_layout "Et*4|(t*4|)*14tmL"
    ("26.02", "DeepSeekV3 MXFP8 PP2 VP8 EP32 (256 GB300)", 2, {"pp": 2, "ep": 32}, "gb300", 4612.0, _flex("hybridep")),
    # GB200_V1: MBS 1, PP 4, VP 4, EP 64, hybridep, TE graphs of attention and the router
    ("26.02", "DeepSeekV3 MXFP8 PP4 VP4 EP64 (256 GB200)", 1, {"pp": 4, "ep": 64}, "gb200", 3955.0,
     _HYBRID_ATTN_ROUTER),
    # B300_V1 and B200_V1: MBS 1, PP 16, EP 8, hybridep, no graphs
    ("26.02", "DeepSeekV3 MXFP8 PP16 EP8 (256 B300)", 1, {"pp": 16, "ep": 8}, "b300", 2983.0, _flex("hybridep")),
    ("26.02", "DeepSeekV3 MXFP8 PP16 EP8 (256 B200)", 1, {"pp": 16, "ep": 8}, "b200", 2689.0, _flex("hybridep")),
    ("26.02.01", "DeepSeekV3 MXFP8 PP2 VP8 EP32 (256 GB300)", 2, {"pp": 2, "ep": 32}, "gb300", 4691.0,
     _flex("hybridep")),
    ("26.02.01", "DeepSeekV3 MXFP8 PP4 VP4 EP64 (256 GB200)", 1, {"pp": 4, "ep": 64}, "gb200", 4021.0,
     _HYBRID_ATTN_ROUTER),
    ("26.02.01", "DeepSeekV3 MXFP8 PP16 EP8 (256 B300)", 1, {"pp": 16, "ep": 8}, "b300", 3099.0, _flex("hybridep")),
    ("26.02.01", "DeepSeekV3 MXFP8 PP16 EP8 (256 B200)", 1, {"pp": 16, "ep": 8}, "b200", 2790.0, _flex("hybridep")),
)  # fmt: skip
# 26.06 (v0.5.0) DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2 (MBS 1, PP 2, VP 8, EP 32, nothing recomputed, FP8
# attention) and ..._GB200_FP8_MX_V2 (MBS 1, PP 4, VP 4, EP 64, mla_up_proj recomputed): moe_a2a_overlap,
# cutedsl_fused_grouped_mlp, full-iteration graphs; deepseek_llm_pretrain.py `set_full_iter_cg_configs` (the paged
# stash at rank capacity 1.5) and `fp8_output_proj` under MXFP8 (the LM head as an MXFP8 TE linear: not priced).
# (label, parallel, device, tokens/s per GPU, recompute modules, FP8 attention); GBS 4096
_DEEPSEEK_2606_ROWS: tuple[tuple[Any, ...], ...] = (
    ("DeepSeekV3 MXFP8 PP2 VP8 EP32 paged stash (256 GB300)", {"pp": 2, "ep": 32}, "gb300", 6338.0, [], True),
    ("DeepSeekV3 MXFP8 PP4 VP4 EP64 paged stash (256 GB200)", {"pp": 4, "ep": 64}, "gb200", 4969.0, ["mla_up_proj"],
     False),
)  # fmt: skip

# The GPT-OSS 120B rows (BF16, GBS 1280, sequence 4096): configs/gpt_oss/gpt_oss_workload_base_configs.py
# `GPT_OSS_120B_PRETRAIN_CONFIG_<GPU>_BF16_V2` at v0.3.0 (v0.3.1 changes none of them): V1's settings at GBS 1280, none
# naming a flex backend (GPTOSSProvider's alltoall), MBS 4 and EP 64 on the Blackwell parts (GB300 and B300 with TE
# graphs of attention and the router, no recompute; GB200 and B200 recompute layernorm and moe_act), H100 PP 4, EP 8,
# MBS 1 with that recompute; gpt_oss_llm_pretrain.py `set_gpt_oss_common_configs` (router fusion, forced balance, BF16
# gradient reduction); models/gpt_oss/gpt_oss_provider.py (bias_dropout_fusion False, window 128 on alternate
# layers, learnable sinks). bench/_nemo.py's `_gpt_oss_run`.
# (release, label, device, pp, ep, mbs, tokens/s per GPU, recompute, timing words)
_GPT_OSS_ROWS: tuple[tuple[Any, ...], ...] = (
    ("26.02", "GPT-OSS 120B BF16 EP64 GBS1280 (64 GB300)", "gb300", 1, 64, 4, 19412.0, False,
     _te_graphs("attn", *_ROUTER)),
    ("26.02", "GPT-OSS 120B BF16 EP64 GBS1280 (64 GB200)", "gb200", 1, 64, 4, 15784.0, True, {}),
    ("26.02", "GPT-OSS 120B BF16 EP64 GBS1280 (64 B300)", "b300", 1, 64, 4, 8359.0, False,
     _te_graphs("attn", *_ROUTER)),
    ("26.02", "GPT-OSS 120B BF16 EP64 GBS1280 (64 B200)", "b200", 1, 64, 4, 8047.0, True, {}),
    ("26.02", "GPT-OSS 120B BF16 PP4 EP8 GBS1280 (64 H100)", "h100-80gb", 4, 8, 1, 5993.0, True, {}),
    ("26.02.01", "GPT-OSS 120B BF16 EP64 GBS1280 (64 GB300)", "gb300", 1, 64, 4, 19366.0, False,
     _te_graphs("attn", *_ROUTER)),
    ("26.02.01", "GPT-OSS 120B BF16 EP64 GBS1280 (64 GB200)", "gb200", 1, 64, 4, 15754.0, True, {}),
    ("26.02.01", "GPT-OSS 120B BF16 PP4 EP8 GBS1280 (64 H100)", "h100-80gb", 4, 8, 1, 5984.0, True, {}),
)  # fmt: skip
# 26.06 (v0.5.0) GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 (EP 16) and ..._GB200_FP8_MX_V2 (EP 64, no
# recompute): MBS 4, GBS 1280, HybridEP, moe_a2a_overlap, cutedsl_fused_grouped_mlp, full-iteration graphs, FP8
# attention; gpt_oss_llm_pretrain.py `set_full_iter_cg_configs` (the paged stash at rank capacity 1.5, 1.2 / 1.0) and
# `fp8_output_proj` under MXFP8 (not priced). (label, device, EP, tokens/s per GPU)
_GPT_OSS_2606_ROWS: tuple[tuple[Any, ...], ...] = (
    ("GPT-OSS 120B MXFP8 EP16 paged stash (64 GB300)", "gb300", 16, 33166.0),
    ("GPT-OSS 120B MXFP8 EP64 paged stash (64 GB200)", "gb200", 64, 28947.0),
)
_GPT_OSS_NOTES = (
    "routing balanced (forced)",
    _SINKS_NOTE,
    "the window at cuDNN 9.22's measured GB200 window-128 rate (sm100), the causal rule on H100",
)

# The archived tables' rows of models ppb has that are not priced, and why (printed by bench/public_runs.py).
SKIPPED: tuple[tuple[str, str], ...] = (
    ("26.02 / 26.02.01 / 26.06 NVFP4 rows (Llama 3 70B, 3.1 405B)", "NVFP4: ppb prices no NVFP4 GEMMs or casts"),
    ("26.02 / 26.02.01 / 26.06 Nemotron 3 Nano / Super", "hybrid Mamba models, which ppb does not describe"),
    (
        "26.02.01 Qwen3 30B-A3B FP8 (16 H100)",
        "the table's PP 2, VP 12, EP 8 are not v0.3.1's preset (EP 16, HybridEP, no PP: 26.04's, which measured "
        "8,960), and its 9,058 tokens/s is 1.77 times 26.02's at those sizes: which ran is unknown",
    ),
    (
        "26.06 / 26.06.01 MoE rows but 26.06's Qwen3, DeepSeek-V3 and GPT-OSS GB300 / GB200 MXFP8 ones (Qwen3 H100, "
        "DeepSeek-V3 B300 and GBS 15360, GPT-OSS B300, Kimi K2, 26.06.01's)",
        "not transcribed; their v0.5.0 presets' fused grouped MLP and paged stash are priced "
        "(timing.use_transformer_engine_op_fuser, moe_paged_stash), as 26.06's Qwen3 MXFP8 rows",
    ),
    (
        "26.02.01 Qwen3 235B MXFP8 PP8 VP4 EP8 (256 B300)",
        "the table's VP 4 is not v0.3.1's preset (PP 8 without VP, no moe_a2a_overlap, deepep)",
    ),
    (
        "26.02.01 GPT-OSS 120B BF16 EP8 (64 B300, 64 B200)",
        "the table's EP 8 is not v0.3.1's preset (EP 64, as 26.02's rows of the same systems)",
    ),
    ("26.02 / 26.02.01 Kimi K2 (GB300)", "not transcribed"),
    (
        "25.09 DeepSeek-V3, Qwen3 30B-A3B / 235B-A22B (token-dropping and dropless rows)",
        "not transcribed",
    ),
    (
        "26.02.01 Llama 3 70B MXFP8 PP4 MBS2 (64 GB300)",
        "the table's PP 4 without VP at MBS 2 is not v0.3.1's preset (PP 4, VP 5, MBS 1); at those sizes with the "
        "preset's other flags (no recompute, no offloading) ppb's first stage peaks at 375,625 MiB of the GB300's "
        "284,208: the run's other settings unknown",
    ),
)


def _release_row(release: str, label: str, raw: dict[str, Any], gpus: int, gbs: int, tps: float, notes: tuple):
    """A row at its container's releases and cuDNN, named by its release, in the archive's group."""
    releases, cudnn, bridge = _RELEASES[release]
    raw["framework_release"] = dict(releases)
    raw["timing"]["cudnn_release"] = cudnn
    said = (f"the {release} container's recipes as Megatron-Bridge {bridge}", *notes)
    if "MXFP8" not in label:
        said = (*said, "the table's FP8 as the FP8_CS preset")
    row = _row(label, raw, gpus, gbs, tps, said)
    return {**row, "name": f"NeMo {release} {label}", "source": f"{ARCHIVE}, {release}"}


def nemo_release_rows() -> list[dict[str, Any]]:
    """The archived releases' rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for release, label, spec, gpus, gbs, mbs, parallel, device, tps, options, training, notes in _LLAMA_ROWS:
        raw = _llama_run(label, spec, gpus, gbs, mbs, parallel, device, mx_gathers_apart=True, **options)
        raw["training"].update(training)
        rows.append(_release_row(release, label, raw, gpus, gbs, tps, notes))
    for label, spec, gpus, gbs, mbs, parallel, device, tps, options, training in _ROWS_2509:
        graphs = options.get("graphs", False)
        options = {key: value for key, value in options.items() if key != "graphs"}
        raw = _llama_run(label, spec, gpus, gbs, mbs, parallel, device, **options)
        raw["training"].update(training)
        # v0.1.0rc3: no gathers with the optimizer step, gradient accumulation fusion on under FSDP too
        raw["timing"]["overlap_param_gather_with_optimizer_step"] = False
        raw["timing"].pop("gradient_accumulation_fusion", None)
        if graphs:
            raw["timing"]["cuda_graph_impl"] = "local"
        rows.append(_release_row("25.09", label, raw, gpus, gbs, tps, ()))
    for release, label, spec, gpus, gbs, mbs, parallel, device, tps, a2a, layout, timing in _QWEN3_ROWS:
        recipe = "mxfp8" if "MXFP8" in label else "tensorwise"
        raw = _qwen3_run(
            label, spec, gpus, gbs, mbs, parallel, device, a2a_overlap=a2a, layout=layout, fp8_recipe=recipe,
            mx_gathers_apart=True,
        )  # fmt: skip
        raw["timing"].update(timing)
        rows.append(_release_row(release, label, raw, gpus, gbs, tps, ("routing balanced (forced)",)))
    for release, label, mbs, parallel, device, tps, timing in _DEEPSEEK_ROWS:
        raw = _deepseek_v3_run(label, 256, 4096, mbs, parallel, _DS_LAYOUT, device, ["mla_up_proj"])
        raw["timing"].update(timing)
        row = _release_row(release, label, raw, 256, 4096, tps, ())
        bridge = f"the {release} container's recipes as Megatron-Bridge {_RELEASES[release][2]}"
        rows.append({**row, "assumptions": (bridge, *_DEEPSEEK_ASSUMPTIONS, _BF16_MOMENTS)})
    for label, parallel, device, tps, modules, fp8_attention in _DEEPSEEK_2606_ROWS:
        raw = _deepseek_v3_run(label, 256, 4096, 1, parallel, _DS_LAYOUT, device, modules, a2a_overlap=True)
        if not modules:
            del raw["training"]["recompute"]
        raw["timing"].update(_PAGED_STASH, fp8_dot_product_attention=fp8_attention)
        row = _release_row("26.06", label, raw, 256, 4096, tps, ())
        bridge = f"the 26.06 container's recipes as Megatron-Bridge {_RELEASES['26.06'][2]}"
        unpriced = ("the LM head's MXFP8 GEMM (fp8_output_proj) priced in 16 bits",)
        said = [note for note in _DEEPSEEK_ASSUMPTIONS if not (fp8_attention and note.startswith("attention in BF16"))]
        rows.append({**row, "assumptions": (bridge, *said, _BF16_MOMENTS, *unpriced)})
    for release, label, device, pp, ep, mbs, tps, recompute, timing in _GPT_OSS_ROWS:
        raw = _gpt_oss_run(label, "26.04", device, 64, 1280, mbs, pp, ep, recompute=recompute)
        raw["timing"].update(timing)
        row = _release_row(release, label, raw, 64, 1280, tps, ())
        bridge = f"the {release} container's recipes as Megatron-Bridge {_RELEASES[release][2]}"
        rows.append({**row, "assumptions": (bridge, *_GPT_OSS_NOTES)})  # BF16: none of `_row`'s FP8 notes
    for label, device, ep, tps in _GPT_OSS_2606_ROWS:
        raw = _gpt_oss_run(label, "26.04", device, 64, 1280, 4, 1, ep, hybridep=True, a2a_overlap=True, recompute=False)
        raw["timing"].update(_PAGED_STASH, matmul_dtype="fp8", fp8_recipe="mxfp8", fp8_param_gather=True)
        raw["training"]["fp8_cache"] = "linear"
        row = _release_row("26.06", label, raw, 64, 1280, tps, ())
        bridge = f"the 26.06 container's recipes as Megatron-Bridge {_RELEASES['26.06'][2]}"
        unpriced = "the LM head's MXFP8 GEMM (fp8_output_proj) priced in 16 bits"
        rows.append({**row, "assumptions": (bridge, *_GPT_OSS_NOTES, unpriced)})
    return rows
