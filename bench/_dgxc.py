"""NVIDIA's DGX Cloud benchmarking recipes (NVIDIA/dgxc-benchmarking) of the NeMo 1 launcher era: Llama 3.1 8B / 70B
/ 405B and GPT-3 175B pre-training on DGX H100, BF16 and FP8, as run configs for bench/public_runs.py (a group of
its own, so the NeMo performance-summary groups keep their means).

Source: each release tag's README tables ("Expected Performance": training step time in seconds per step, the
last logged step's `train_step_timing`, with the tokens/s it implies: GBS · sequence / seconds), the recipe's
Hydra yaml and the configure.sh / launch.sh overrides that ran it:
- v24.11.1 (35a9aecc8d): llama3.1/README_{8b,70b,405b}.md "24.09" tables, llama3.1/llama3.1_<size>.yaml,
  configure.sh (FW_VERSION 24.09: nvcr.io/nvidia/nemo:24.09); nemo_megatron/README_175b.md, gpt3_175b_hydra.yaml,
  launch.sh (FW_VERSION 24.05: nemo:24.05). The same figures and recipes are in v25.01 / v25.01.1 (not repeated).
- v25.02.02 (5f23b67bd0): the same files with FW_VERSION 24.12 for both (nemo:24.12); v25.03 repeats them.
One point per table is priced: the GPU count the yaml's `trainer.num_nodes` states (configure.sh: "Upstream uses
GBS 128 for 8 GPUs", 64 for the 70B, "GBS 252 for 576 GPUs" for the 405B; the 175B yaml's 16 nodes, GBS 256) --
the recipe as written, chosen before pricing; the weak-scaling points beside it add DP size only.
Releases (`framework_release`): docs.nvidia.com/nemo-framework/user-guide/24.09/softwarecomponentversions.html:
24.09 = PyTorch 2.4.0a0, Megatron Core 0.9.0, Transformer Engine 1.10; 24.05 = PyTorch 2.3.0a0, Megatron Core
0.7.0, Transformer Engine 1.6.0.dev0. 24.12 is NeMo 2.1.0, whose Dockerfile.ci (NVIDIA/NeMo v2.1.0) pins
core_r0.10.0; its TE and PyTorch are unstated in anything reachable here, taken as 24.09's. One ppb release rule
moves between TE 1.10 and 1.13 (ppb_core/config/releases.py `te_fp8_scale_inv_with_data`, v1.11: the FP8 modules'
scale-inverse copy each forward); v2.1.0's Dockerfile.ci builds TE 7d576ed25 (2024-06-13), which still copies it;
none moves between PyTorch 2.4 and 2.5.

The NeMo 2 recipes (`nemo2_dgxc_rows`, a second group): v25.04.02 (0efdb235ac) llama3.1/README.md's H100 tables
(nemo:25.02.01; setup.sh checks out NVIDIA/NeMo d2b21556f2, 2025-03-20, and copies the tag's pretrain_llama31.py /
llama31_utils.py into its scripts/performance/llm/), each at `llama31_auto_configs`' default GPU count (8B 8, 70B
64, 405B 1024); v25.05.05 (c5c765f268) llama3.1/README.md's Llama 3.1 405B tables on GB200 and H100 (nemo:25.04.01;
NeMo 6f2c6fdaff, 2025-06-16, on its llmb-nemo-r2.3.0 branch: scripts/performance/llm/pretrain_llama31_405b.py), at
launch.sh's default GPU counts (GB200 128, H100 512), and its DeepSeek-V3 BF16 tables (`_DEEPSEEK_NEMO2`, its own
settings). Every other Llama setting is bench/_nemo2.py's reading of NeMo 2's performance recipes
(`set_primary_perf_configs`, `pretrain_performance_optimizations`), checked at those commits: grad_reduce_in_fp32
False, FP8 `bf16_with_fp8_mixed` (delayed scaling, FP8 parameters: the argument parser's default fp8_recipe "ds" at
6f2c6fdaff, the only one d2b21556f2's script sets), parameter gathers with the optimizer step where DP, PP and VP
exceed 1, TE's fused cross-entropy from 6f2c6fdaff on (not at d2b21556f2), no CUDA graphs (the recommended csvs'
cuda_graphs 0; llama31_auto_configs' default False), the BF16 userbuffers configs' (and at d2b21556f2 the H100 FP8
ones') pipelined proj/fc2 fprop with set_sm_margin True (ppb's default methods), and the ring-exchange ones of the
B200 FP8 config and, at 6f2c6fdaff, of the H100 FP8 one (NeMo 8f3e86df5a). Releases: each container's NeMo tag's
requirements/manifest.json pins (bench/_nemo2.py `_RELEASES`, 25.02 and 25.04; 25.02's TE the PyTorch 25.01 base's
1.14, as v2.2.0 builds none), taken for the .01 patch containers.
"""

from __future__ import annotations

from typing import Any

from _nemo import _405B_LAYOUT, _LLAMA3_8B, nvlink_domain
from _nemo2 import _CUDNN_BOUND
from _nemo2 import _RELEASES as _NEMO2_RELEASES
from _nemo2 import _run as _nemo2_run
from _nemo_2407 import _gpt3, _run
from _public import LLAMA3_405B, LLAMA31_8B, LLAMA31_70B

DGXC = "NVIDIA/dgxc-benchmarking"

_RELEASES: dict[str, dict[str, str]] = {
    "24.05": {"megatron_core": "0.7.0", "transformer_engine": "1.6", "pytorch": "2.3.0a0"},
    "24.09": {"megatron_core": "0.9.0", "transformer_engine": "1.10", "pytorch": "2.4.0a0"},
    "24.12": {"megatron_core": "0.10.0", "transformer_engine": "1.10", "pytorch": "2.4.0a0"},
}
_UNSTATED_2412 = "24.12's TE and PyTorch unstated: taken as 24.09's (TE 1.10, PyTorch 2.4)"
_TAG_COMMITS = {
    "v24.11.1": "35a9aecc8d",
    "v25.02.02": "5f23b67bd0",
    "v25.04.02": "0efdb235ac",
    "v25.05.05": "c5c765f268",
}

# llama3.1_<size>.yaml (the same at both tags): max_position_embeddings 8192, RMSNorm, fast-swiglu, RoPE with
# apply_rope_fusion, untied, cross_entropy_loss_fusion, megatron_amp_O2, distributed_fused_adam with overlapped
# grad and param sync, grad_sync_dtype bf16, no activation checkpointing
_L8 = {**LLAMA31_8B, "max_position_embeddings": 8192}
_L70 = {**LLAMA31_70B, "max_position_embeddings": 8192}
_L405 = {**LLAMA3_405B, "max_position_embeddings": 8192}
# gpt3_175b_hydra.yaml: 96 layers of 12288, 96 heads, FFN 49152, GPT-2 BPE (vocab.json), positions of 2048,
# dropout 0.1; what it leaves out is megatron_gpt_config.yaml's (LayerNorm with biases, GeLU, learned positions,
# tied embeddings: bench/_nemo_2407.py `_gpt3`)
_G175 = _gpt3(12288, 96, 96)
_LLAMA_EXTRAS = {"cross_entropy_fusion": True}
# llama3.1_70b.yaml / llama3.1_405b.yaml (both tags): defer_embedding_wgrad_compute true, wgrad_deferral_limit 22 / 50
# (the 8B's false; the 175B yaml sets neither): the output layer's weight gradients at the pipeline's flush
_DEFER = {"llama3.1/README_70b.md": 22, "llama3.1/README_405b.md": 50}

# (tag, container, label, file, spec, GPUs, GBS, sequence, parallel, sequence parallel, userbuffers, TE attention
#  backend, extras, {dtype: published step seconds}, notes)
_ROWS: tuple[tuple[Any, ...], ...] = (
    # llama3.1_8b.yaml: TP 1, PP 1, CP 2, MBS 1, GBS 128 on one node; configure.sh NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0
    ("v24.11.1", "24.09", "Llama 3.1 8B CP2", "llama3.1/README_8b.md", _L8, 8, 128, 8192, {"cp": 2}, False,
     False, "fused", _LLAMA_EXTRAS, {"bf16": 12.91, "fp8": 9.67}, ()),
    # llama3.1_70b.yaml: TP 4, PP 4, VP 5, CP 2, sequence parallel, ub_tp_comm_overlap (its ub cfg), overlap_p2p_comm
    ("v24.11.1", "24.09", "Llama 3.1 70B TP4 PP4 CP2 VP5", "llama3.1/README_70b.md", _L70, 64, 128, 8192,
     {"tp": 4, "pp": 4, "cp": 2, "vp": 5}, True, True, "fused", _LLAMA_EXTRAS, {"bf16": 14.72, "fp8": 11.01}, ()),
    # llama3.1_405b.yaml: TP 8, PP 9, VP 7, CP 2, 126 layers, GBS 252 on 72 nodes, ub overlap (configure.sh sets the
    # proj/fc2 fprop fp8_buf under FP8), mock data
    ("v24.11.1", "24.09", "Llama 3.1 405B TP8 PP9 CP2 VP7", "llama3.1/README_405b.md", _L405, 576, 252, 8192,
     {"tp": 8, "pp": 9, "cp": 2, "vp": 7}, True, True, "fused", _LLAMA_EXTRAS, {"bf16": 17.20, "fp8": 11.24},
     ("the userbuffers' FP8 buffers (fp8_buf) under FP8 priced as ppb's userbuffers",)),
    # gpt3_175b_hydra.yaml: TP 4, PP 8, VP 12, sequence parallel, ub_tp_comm_overlap, overlap_p2p_comm, GBS 16 a
    # node; launch.sh NVTE_FUSED_ATTN=0 (TE's flash-attn backend)
    ("v24.11.1", "24.05", "GPT3 175B TP4 PP8 VP12", "nemo_megatron/README_175b.md", _G175, 128, 256, 2048,
     {"tp": 4, "pp": 8, "vp": 12}, True, True, "flash", {}, {"bf16": 8.91, "fp8": 5.92}, ()),
    ("v25.02.02", "24.12", "Llama 3.1 8B CP2", "llama3.1/README_8b.md", _L8, 8, 128, 8192, {"cp": 2}, False,
     False, "fused", _LLAMA_EXTRAS, {"bf16": 12.78, "fp8": 9.44}, (_UNSTATED_2412,)),
    ("v25.02.02", "24.12", "Llama 3.1 70B TP4 PP4 CP2 VP5", "llama3.1/README_70b.md", _L70, 64, 128, 8192,
     {"tp": 4, "pp": 4, "cp": 2, "vp": 5}, True, True, "fused", _LLAMA_EXTRAS, {"bf16": 14.61, "fp8": 10.46},
     (_UNSTATED_2412,)),
    ("v25.02.02", "24.12", "Llama 3.1 405B TP8 PP9 CP2 VP7", "llama3.1/README_405b.md", _L405, 576, 252, 8192,
     {"tp": 8, "pp": 9, "cp": 2, "vp": 7}, True, True, "fused", _LLAMA_EXTRAS, {"bf16": 17.50, "fp8": 11.00},
     (_UNSTATED_2412, "the userbuffers' FP8 buffers (fp8_buf) under FP8 priced as ppb's userbuffers")),
    # v25.02.02's gpt3_175b_hydra.yaml: VP 6 (the README table's header still says VP=12); configure.sh
    # NVTE_FUSED_ATTN=1 (cuDNN)
    ("v25.02.02", "24.12", "GPT3 175B TP4 PP8 VP6", "nemo_megatron/README_175b.md", _G175, 128, 256, 2048,
     {"tp": 4, "pp": 8, "vp": 6}, True, True, "fused", {}, {"bf16": 8.309, "fp8": 5.626},
     (_UNSTATED_2412, "the yaml's VP 6 (the table's header: VP=12)")),
)  # fmt: skip

SKIPPED_DGXC: tuple[tuple[str, str], ...] = (
    ("dgxc v24.11.1-v25.03 Nemotron4 15B / 340B", "squared-ReLU MLPs, an activation ppb does not describe"),
    ("dgxc v24.11.1-v25.03 Grok 1 314B", "run on an unnamed nemo:dev image (a digest only): releases unknown"),
    ("dgxc v24.11.1-v25.03 MaxText 70B, PaxML 5B / 175B", "JAX frameworks ppb does not price"),
    ("dgxc v24.11.1-v25.05 weak-scaling points", "the same per-GPU work at larger DP; one point per table"),
    ("dgxc v25.01 / v25.03 / v25.04 repeated tables", "the same figures as v24.11.1 / v25.02.02 (175B at v25.04)"),
    ("dgxc v25.04.02 Llama 3.1 405B proxies (32-128 H100)", "8-62 layers of the 405B: not the model"),
    (
        "dgxc v25.04-v25.05 Grok 1 314B (GB200, H100)",
        "an MoE recipe of the tag's own not transcribed; v25.05.05's 512-GB200 tokens/s (572,679) disagree with its "
        "seconds (8192 · 1024 / 7.324 = 1,145,358)",
    ),
    ("dgxc v25.04-v25.05 Nemotron4 / Nemotron-H", "squared-ReLU MLPs and Mamba layers ppb does not describe"),
    (
        "dgxc v25.05 Llama 4 Maverick 400B (GB200, H100)",
        "its NeMo 2 recipe (chunked attention, MoE every other layer) not transcribed",
    ),
    ("dgxc v25.07-v26.06", "the READMEs state settings but no step times (figures moved to NVIDIA's site)"),
)


def _dgxc_run(
    label: str,
    container: str,
    spec: dict[str, Any],
    gpus: int,
    gbs: int,
    sequence: int,
    parallel: dict[str, int],
    sequence_parallel: bool,
    userbuffers: bool,
    backend: str,
    extras: dict[str, Any],
    dtype: str,
    defer: int,
) -> dict[str, Any]:
    """bench/_nemo_2407.py's NeMo 1 MCore GPT run (megatron_amp_O2, distributed_fused_adam, BF16 gradient sync)
    at MBS 1 with this container's releases; FP8 as configure.sh / the 175B yaml set it: fp8, fp8_hybrid
    (delayed scaling) and fp8_params, whose FP8 weights NeMo's distributed optimizer gathers in FP8
    (nemo/core/optim/distributed_adam.py, NeMo v2.0.0, the FP8 parameter buckets of `init_param_buffer`)."""
    raw = _run(
        label, spec, gpus, gbs, 1, sequence, parallel, sequence_parallel, "ub" if userbuffers else "no ub", extras
    )
    raw["framework_release"] = dict(_RELEASES[container])
    raw["timing"]["te_attention_backend"] = backend
    if defer:
        raw["training"].update(defer_embedding_wgrad_compute=True, wgrad_deferral_limit=defer)
    if dtype == "fp8":
        raw["timing"]["fp8_param_gather"] = True
    else:  # model.fp8=false: BF16 GEMMs, no FP8 copies
        del raw["timing"]["matmul_dtype"], raw["timing"]["fp8_recipe"]
        raw["training"]["fp8_cache"] = "none"
    return raw


def dgxc_rows() -> list[dict[str, Any]]:
    """The recipes' rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for tag, container, label, path, spec, gpus, gbs, seq, parallel, sp, ub, backend, extras, steps, notes in _ROWS:
        for dtype, seconds in steps.items():
            name = f"dgxc {tag} {container} {label} {dtype.upper()} ({gpus} H100)"
            rows.append(
                {
                    "name": name,
                    "source": f"{DGXC} {tag} ({_TAG_COMMITS[tag]}) {path}",
                    "raw": _dgxc_run(
                        name,
                        container,
                        spec,
                        gpus,
                        gbs,
                        seq,
                        parallel,
                        sp,
                        ub,
                        backend,
                        extras,
                        dtype,
                        _DEFER.get(path, 0),
                    ),
                    "published": f"{seconds:g} s per step",
                    "seconds": seconds,
                    "assumptions": (
                        "Apex's distributed fused Adam priced as Megatron's distributed optimizer (ZeRO-1, overlapped)",
                        "the last logged step's train_step_timing (README: 'the last training step timing')",
                        *(
                            ("FP8 delayed scaling (fp8_hybrid) as ppb's FP8 GEMMs; attention in BF16",)
                            if dtype == "fp8"
                            else ()
                        ),
                        *notes,
                    ),
                }
            )
    return rows


DGXC_NEMO2 = f"{DGXC} NeMo 2"
# (tag, container, bench/_nemo2.py release, label, spec, device, GPUs, GBS, parallel, options, {dtype: step seconds},
#  notes); options as bench/_nemo2.py's: "defer" (wgrad_deferral_limit), "ub" (TP overlap), "layout"
_ROWS_NEMO2: tuple[tuple[Any, ...], ...] = (
    # llama31_auto_configs (v25.04.02): 8B TP 1, CP 2, MBS 1, GBS 16 a GPU; llama3_8b performance mode: no TP overlap
    ("v25.04.02", "25.02.01", "25.02", "Llama 3.1 8B CP2", _LLAMA3_8B, "h100-80gb", 8, 128, {"cp": 2}, {},
     {"bf16": 12.27, "fp8": 9.33}, ()),
    # 70B: TP 4, PP 4, CP 2, VP 5 (FP8: PP 8, CP 1), GBS 2 a GPU; llama3_70b: ub (userbuffers_<dtype>_h100_h8192_tp4_
    # mbs1_seqlen8192), wgrad_deferral_limit 22
    ("v25.04.02", "25.02.01", "25.02", "Llama 3.1 70B TP4 PP4 CP2 VP5", LLAMA31_70B, "h100-80gb", 64, 128,
     {"tp": 4, "pp": 4, "cp": 2, "vp": 5}, {"defer": 22, "ub": True}, {"bf16": 14.66}, ()),
    ("v25.04.02", "25.02.01", "25.02", "Llama 3.1 70B TP4 PP8 VP5", LLAMA31_70B, "h100-80gb", 64, 128,
     {"tp": 4, "pp": 8, "vp": 5}, {"defer": 22, "ub": True}, {"fp8": 9.86}, ()),
    # 405B: TP 8, PP 8, CP 2, VP 8, GBS a GPU's half, 1024 GPUs by default; llama31_405b: ub
    # (userbuffers_<dtype>_h100_h16384_tp8_cp2_mbs1_seqlen8192), limit 50, the embedding and loss counted in the split
    ("v25.04.02", "25.02.01", "25.02", "Llama 3.1 405B TP8 PP8 CP2 VP8", LLAMA3_405B, "h100-80gb", 1024, 512,
     {"tp": 8, "pp": 8, "cp": 2, "vp": 8}, {"defer": 50, "ub": True, "layout": _405B_LAYOUT},
     {"bf16": 19.84, "fp8": 12.42}, ()),
    # launch.sh (v25.05.05): TP 4 on GB200 (8 on H100), PP 8, CP 2, VP 8, MBS 1, GBS half the GPUs
    ("v25.05.05", "25.04.01", "25.04", "Llama 3.1 405B TP4 PP8 CP2 VP8", LLAMA3_405B, "gb200", 128, 64,
     {"tp": 4, "pp": 8, "cp": 2, "vp": 8}, {"defer": 50, "ub": True, "layout": _405B_LAYOUT},
     {"bf16": 9.347, "fp8": 6.131},
     ("GB200's NVLink domain as bench/_nemo.py `nvlink_domain` reads Megatron-Bridge's segments",)),
    ("v25.05.05", "25.04.01", "25.04", "Llama 3.1 405B TP8 PP8 CP2 VP8", LLAMA3_405B, "h100-80gb", 512, 256,
     {"tp": 8, "pp": 8, "cp": 2, "vp": 8}, {"defer": 50, "ub": True, "layout": _405B_LAYOUT},
     {"bf16": 19.81, "fp8": 13.02}, ()),
)  # fmt: skip


def _dgxc_nemo2_run(
    label: str,
    release: str,
    spec: dict[str, Any],
    device: str,
    gpus: int,
    gbs: int,
    parallel: dict[str, int],
    options: dict[str, Any],
    dtype: str,
) -> dict[str, Any]:
    """bench/_nemo2.py's NeMo 2 performance run at MBS 1, sequence 8192, with FP8 delayed scaling (the scripts'
    "ds") and the userbuffers methods of the config the script names; BF16: the recipe's bf16_mixed."""
    raw = _nemo2_run(release, label, spec, gpus, gbs, 1, 8192, parallel, device, options)
    timing = raw["timing"]
    timing["fp8_recipe"] = "delayed"
    # the BF16 configs (H100 and B200) pipeline proj_fprop and fc2_fprop with set_sm_margin True at both commits, and
    # so do the H100 FP8 ones at d2b21556f2 (tp_overlap_configs/userbuffers.py): ppb's default methods and margin.
    # NeMo 8f3e86df5a ("ub fp8 h100 fixes", 2025-04-22, in 6f2c6fdaff: the 25.04.01 rows) made the H100 FP8 ones ring
    # exchanges, as the B200 FP8 one is: `_RING_FPROPS` with the bulk GEMMs' set_sm_margin False (bench/_nemo2.py)
    ring_configs = dtype == "fp8" and (device == "gb200" or release == "25.04")
    if options.get("ub") and not ring_configs:
        del timing["tp_comm_overlap_methods"], timing["ub_sm_margin"]
    if dtype == "bf16":
        del timing["matmul_dtype"], timing["fp8_recipe"]
        timing["fp8_param_gather"] = False
        raw["training"]["fp8_cache"] = "none"
    return raw


def nemo2_dgxc_rows() -> list[dict[str, Any]]:
    """The NeMo 2 recipes' rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for tag, container, release, label, spec, device, gpus, gbs, parallel, options, steps, notes in _ROWS_NEMO2:
        for dtype, seconds in steps.items():
            system = "H100" if device == "h100-80gb" else device.upper()
            name = f"dgxc {tag} {container} {label} {dtype.upper()} ({gpus} {system})"
            path = "llama3.1/README.md"
            rows.append(
                {
                    "name": name,
                    "source": f"{DGXC_NEMO2} {tag} ({_TAG_COMMITS[tag]}) {path}",
                    "raw": _dgxc_nemo2_run(name, release, spec, device, gpus, gbs, parallel, options, dtype),
                    "published": f"{seconds:g} s per step",
                    "seconds": seconds,
                    "assumptions": (
                        "the container's Megatron-LM and TransformerEngine as its NeMo tag's manifest pins"
                        + (" (TE: the PyTorch 25.01 base's 1.14)" if release == "25.02" else ""),
                        *(
                            ("FP8 delayed scaling (bf16_with_fp8_mixed) as ppb's FP8 GEMMs; attention in BF16",)
                            if dtype == "fp8"
                            # set_primary_perf_configs at 6f2c6fdaff: use_precision_aware_optimizer under BF16
                            else ("the precision-aware optimizer (FP32 moments) as Megatron's distributed one",)
                            if container == "25.04.01"
                            else ()
                        ),
                        *notes,
                    ),
                }
            )
    return rows


# DeepSeek-V3 (v25.05.05 deepseek_v3/pretraining/README.md, BF16 only: "FP8 recipe is not currently supported"):
# launch.sh's settings, nemo:25.04.01 with NVIDIA/NeMo 7a8f1cc7bc (2025-06-02, "Llmb nemo r2.3.0") checked out by
# setup.sh: TP 2, ETP 1, CP 1, VP 1, MBS 1, GBS 8 a GPU; H100: PP 8 (at 512 GPUs), EP 64, recompute_modules
# mla_up_proj; GB200: PP 4, EP 32 (at 128 GPUs), core_attn. scripts/performance/llm/pretrain_deepseek_v3.py
# `override_recipe_configs`: moe_permute_fusion, selective recompute, TE's fused cross-entropy, the router in
# fp32, 64 // PP layers a middle stage with one fewer in the first and two fewer in the last
# (num_layers_in_first/last_pipeline_stage), USE_TOKEN_DROP True: MegatronTokenDropCallback (capacity factor 1.0,
# inputs padded to the capacity), no TP overlap. recipes/deepseek_v3.py `pretrain_recipe`: use_mtp True (one MTP
# layer); recipes/deepseek.py `trainer`: sequence parallel, the distributed optimizer with overlapped gradient
# reduce and parameter gather, grad_reduce_in_fp32 True (bf16_mixed; set_primary_perf_configs clears it only for
# FP8), check_for_nan_in_grad True; gpt/model/deepseek.py DeepSeekV3Config: the alltoall dispatcher, grouped GEMM,
# pre-softmax sigmoid routing with expert bias, seq_aux_loss, top-k scaling 2.5, no rope fusion, vocabulary
# divisible by 1280, moe_shared_expert_overlap True. The published point at each system's smallest count.
_DEEPSEEK_NEMO2: tuple[tuple[Any, ...], ...] = (
    ("h100-80gb", 512, {"pp": 8, "ep": 64}, ["mla_up_proj"], 48.948),
    ("gb200", 128, {"pp": 4, "ep": 32}, ["core_attn"], 34.168),
)


def _deepseek_nemo2_layout(stages: int) -> str:
    """The embedding with 64 // PP − 1 layers, middle stages of 64 // PP, the last stage two fewer with the MTP
    layer and the loss (MCore puts both on the post-process stage): 7 + 6 · 8 + 6 = 61 at PP 8."""
    middle = 64 // stages
    return "E" + "t" * (middle - 1) + "|" + ("t" * middle + "|") * (stages - 2) + "t" * (middle - 2) + "mL"


def _deepseek_nemo2_run(name: str, device: str, gpus: int, parallel: dict[str, int], modules: list[str]) -> dict:
    """The v25.05.05 DeepSeek-V3 BF16 run (`_DEEPSEEK_NEMO2`'s comment)."""
    pp, ep = parallel["pp"], parallel["ep"]
    dp = gpus // (2 * pp)
    return {
        "name": name,
        "framework": "megatron",
        "models": [{"name": "llm", "config": "hf/deepseek-v3.json", "pad_vocab_multiple": 1280}],
        "parallel": {
            "dp": dp,
            "tp": 2,
            "pp": pp,
            "ep": ep,
            "etp": 1,
            "zero": 1,
            "sequence_parallel": True,
            "layout": _deepseek_nemo2_layout(pp),
            **({"devices_per_node": nvlink_domain(gpus)} if device == "gb200" else {}),
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": 1,
            "micro_batches": 8 * gpus // dp,
            "dtype": "bf16",
            "grad_bytes": 4,
            # TransformerEngine of the container (2025-03-18; v2.2 to v2.4 alike) has no attention kernel for MLA's
            # 192-wide query/key heads on Blackwell: fused_attn.cpp `nvte_get_fused_attn_backend` refuses cuDNN's
            # F16_arbitrary_seqlen at `sm_arch_ >= 100 && (head_dim_qk > 128 || head_dim_v > 128)` (eee710a341;
            # lifted by 71c76b6ba "Add support for head_dim > 128", 2025-06-14, v2.5) and dot_product_attention/
            # utils.py `get_attention_backend` drops FlashAttention at head_dim_qk != head_dim_v ("does not support
            # MLA"): UnfusedDotProductAttention runs on GB200 (hence core_attn recompute there); cuDNN on H100
            "flash_attention": device != "gb200",
            "recompute": {"granularity": "selective", "modules": list(modules)},
            "moe": {
                "capacity_factor": 1.0,
                "pad_to_capacity": True,
                "router_dtype": "fp32",
                "permute_fusion": True,
                "router": {
                    "score_function": "sigmoid",
                    "aux_losses": ["seq_aux_loss"],
                    "expert_bias": True,
                    "pre_softmax": True,
                    "topk_scaling": True,
                },
            },
        },
        "device": {"name": device},
        "framework_release": dict(_NEMO2_RELEASES["25.04"]),
        "timing": {
            "cross_entropy_fusion": True,
            "cross_entropy_fusion_impl": "te",
            "rope_fusion": False,
            "check_for_nan_in_grad": True,
            "overlap": {"dp": 1.0, "param_gather": 1.0},
            "batch_broadcast": False,
            "attention_mask_in_dataloader": False,
            "moe_shared_expert_overlap": True,  # DeepSeekV3Config (the comment above)
            **({"cudnn_release": _CUDNN_BOUND} if device == "gb200" else {}),
        },
    }


def deepseek_dgxc_rows() -> list[dict[str, Any]]:
    """The v25.05.05 DeepSeek-V3 rows' fields for bench/public_runs.py's PublicRun (the NeMo 2 group)."""
    rows = []
    for device, gpus, parallel, modules, seconds in _DEEPSEEK_NEMO2:
        system = "H100" if device == "h100-80gb" else device.upper()
        name = f"dgxc v25.05.05 25.04.01 DeepSeek-V3 TP2 PP{parallel['pp']} EP{parallel['ep']} BF16 ({gpus} {system})"
        rows.append(
            {
                "name": name,
                "source": f"{DGXC_NEMO2} v25.05.05 ({_TAG_COMMITS['v25.05.05']}) deepseek_v3/pretraining/README.md",
                "raw": _deepseek_nemo2_run(name, device, gpus, parallel, modules),
                "published": f"{seconds:g} s per step",
                "seconds": seconds,
                "assumptions": (
                    "the container's Megatron-LM and TransformerEngine as NeMo v2.3.0's manifest pins",
                    "GB200: TransformerEngine's unfused attention (no MLA kernel on sm100 before TE 2.5)"
                    if device == "gb200"
                    else "H100: cuDNN's fused attention",
                    "the precision-aware optimizer (FP32 moments) as Megatron's distributed one",
                ),
            }
        )
    return rows
