"""NeMo's 24.07 performance summary (NeMo 1, the NeMo-Framework-Launcher era): FP8 pre-training on DGX H100, as run
configs for bench/public_runs.py (a group of its own).

Source: NVIDIA/NeMo docs/source/performance/performance_summary.md as 8e3d65dcfe ("24.07 perf numbers",
2024-09-09) left it (the same file at v2.1.0; removed by d31653f792 for the docs site), table "Pretraining",
"Container: NeMo24.07, System: DGX-H100", FP8: per row the GPUs, GBS, MBS, sequence, TP, PP, CP, VP and tokens/s per
GPU (seconds = GBS · sequence / (tokens/s per GPU · GPUs)). Each row's other settings are the 24.07 launcher's
(NVIDIA/NeMo-Framework-Launcher tag 24.07): launcher_scripts/conf/training/<model>.yaml and the FP8 example that
runs it (examples/training/<family>/h100/*_fp8*.sh: `fp8=true`, `fp8_hybrid=True`, `optim.grad_sync_dtype=bf16`,
the userbuffers config it names), NeMo's megatron_gpt_config.yaml defaults for what a yaml leaves out (NVIDIA/NeMo
r2.0.0rc1, 579983fbfc: layernorm with biases, GeLU, learned absolute positions, tied embeddings). The table's
sizes are taken where the examples differ (they are what ran). Releases: the user guide's software component
versions (docs.nvidia.com/nemo-framework/user-guide/24.09/softwarecomponentversions.html, "NeMo Framework 24.07"):
PyTorch 2.3.0a0, Megatron Core 0.8, Transformer Engine 1.8.0.dev0, NeMo 2.0.0rc1.
"""

from __future__ import annotations

from typing import Any

from _public import LLAMA31_8B, LLAMA31_70B, gpt_spec

NEMO_2407 = "NeMo 24.07 performance summary (NVIDIA/NeMo docs/source/performance/performance_summary.md, 8e3d65dcfe)"
RELEASES_2407 = {"megatron_core": "0.8", "transformer_engine": "1.8", "pytorch": "2.3.0a0"}


def _gpt3(hidden: int, heads: int, layers: int) -> dict[str, Any]:
    """NeMo's GPT-3 (gpt3/<size>.yaml over megatron_gpt_config.yaml): GPT-2 BPE's 50,257 tokens, positions of
    2048, dropout 0.1 on attention and hidden states."""
    return gpt_spec(hidden, heads, layers, vocab_size=50257)


def _llama2(hidden: int, heads: int, layers: int, ffn: int, kv_heads: int | None = None) -> dict[str, Any]:
    """Llama 2 (llama/llama2_<size>.yaml): 32,000 tokens, RMSNorm, SwiGLU, RoPE, no biases, untied, no dropout."""
    return {
        "vocab_size": 32000,
        "hidden_size": hidden,
        "num_layers": layers,
        "num_attention_heads": heads,
        **({"num_key_value_heads": kv_heads} if kv_heads else {}),
        "intermediate_size": ffn,
        "max_position_embeddings": 4096,
    }


# The launcher's userbuffers configs for the rows with ub_tp_comm_overlap true (conf/training/tp_overlap/
# ub_cfg_h100_h6144_tp2_mbs2_seqlen2048.yaml, ..._h8192_tp4_mbs1_seqlen4096, ..._fp8_h8192_tp4_mbs1_seqlen8192 at
# 24.07): TE's initialize_ub default methods (ring_exchange for qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad;
# pipeline for proj_fprop and fc2_fprop, set_sm_margin 1; bulk, set_sm_margin 0, for the rest): ppb's defaults,
# the margin as the pipeline GEMMs set it.
_UB = "ub"
_NO_UB = "no ub"

# (label, spec, GPUs, GBS, MBS, sequence, parallel, sequence parallel, TP overlap, layer-extras, tokens/s, notes)
_ROWS: tuple[tuple[Any, ...], ...] = (
    # gpt3/5b.yaml, 5b_fp8_8node.sh: TP 1, MBS 4, GBS 2048 on 8 nodes
    ("GPT3 5B FP8 (64 H100)", _gpt3(4096, 32, 24), 64, 2048, 4, 2048, {}, False, _NO_UB, {}, 23406.0, ()),
    # gpt3/20b.yaml (TP 2, sequence parallel, ub_tp_comm_overlap), 20b_fp8_8node.sh; the table's GBS 256
    ("GPT3 20B FP8 TP2 GBS256 (64 H100)", _gpt3(6144, 48, 44), 64, 256, 2, 2048, {"tp": 2}, True, _UB, {}, 5851.0,
     ("the table's GBS 256 (20b_fp8_8node.sh: 2048)",)),
    # gpt3/175b.yaml (TP 4, PP 8, sequence parallel, overlap_p2p_comm, no batch_p2p_comm, ub_tp_comm_overlap
    # False, which 175b_fp8_16node.sh leaves); the table's VP 6 (the example's 12)
    ("GPT3 175B FP8 TP4 PP8 VP6 (128 H100)", _gpt3(12288, 96, 96), 128, 256, 1, 2048, {"tp": 4, "pp": 8, "vp": 6},
     True, _NO_UB, {}, 716.0, ("the table's VP 6 (175b_fp8_16node.sh: 12)",)),
    ("GPT3 175B FP8 TP4 PP8 VP6 MBS2 (512 H100)", _gpt3(12288, 96, 96), 512, 2048, 2, 2048,
     {"tp": 4, "pp": 8, "vp": 6}, True, _NO_UB, {}, 825.0, ("the table's VP 6 and MBS 2 (the example's 12 and 1)",)),
    # llama/llama2_7b.yaml, llama2_7b_fp8.sh: one node, GBS 128
    ("Llama 2 7B FP8 (8 H100)", _llama2(4096, 32, 32, 11008), 8, 128, 1, 4096, {}, False, _NO_UB, {}, 16934.0, ()),
    # llama2_13b.yaml: TP 1, PP 4, VP 10, overlap_p2p_comm; the table's 16 GPUs (llama2_13b_fp8.sh: one node)
    ("Llama 2 13B FP8 PP4 VP10 (16 H100)", _llama2(5120, 40, 40, 13824), 16, 128, 1, 4096, {"pp": 4, "vp": 10},
     False, _NO_UB, {}, 8715.0, ("the table's 16 GPUs (llama2_13b_fp8.sh: 8)",)),
    # llama2_70b.yaml: TP 4, PP 4, VP 20, sequence parallel, ub_tp_comm_overlap (ub_cfg_h100_h8192_tp4_mbs1_seqlen4096)
    ("Llama 2 70B FP8 TP4 PP4 VP20 (64 H100)", _llama2(8192, 64, 80, 28672, 8), 64, 128, 1, 4096,
     {"tp": 4, "pp": 4, "vp": 20}, True, _UB, {}, 1728.0, ()),
    # llama/llama3_8b.yaml: TP 1, CP 2, cross_entropy_loss_fusion; llama3_8b_fp8.sh: one node, GBS 128
    ("Llama 3 8B FP8 CP2 (8 H100)", {**LLAMA31_8B, "max_position_embeddings": 8192}, 8, 128, 1, 8192, {"cp": 2},
     False, _NO_UB, {"cross_entropy_fusion": True}, 12273.0, ()),
    # llama3_70b.yaml: TP 4, PP 4, CP 2, sequence parallel, cross_entropy_loss_fusion; llama3_70b_fp8.sh: 8 nodes, GBS
    # 128, ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192; the table's VP 5 (the yaml's 10)
    ("Llama 3 70B FP8 TP4 PP4 CP2 VP5 (64 H100)", {**LLAMA31_70B, "max_position_embeddings": 8192}, 64, 128, 1, 8192,
     {"tp": 4, "pp": 4, "cp": 2, "vp": 5}, True, _UB, {"cross_entropy_fusion": True}, 1524.0,
     ("the table's VP 5 (llama3_70b.yaml: 10)",)),
)  # fmt: skip

SKIPPED_2407: tuple[tuple[str, str], ...] = (
    ("24.07 Nemotron 8B / 22B / 340B (H100)", "squared-ReLU MLPs, an activation ppb does not describe"),
)


def _run(
    label: str,
    spec: dict[str, Any],
    gpus: int,
    gbs: int,
    mbs: int,
    sequence: int,
    parallel: dict[str, int],
    sequence_parallel: bool,
    tp_overlap: str,
    extras: dict[str, Any],
) -> dict[str, Any]:
    """A NeMo 1 MCore GPT run: megatron_amp_O2 (BF16 weights, FP32 main copies), TransformerEngine's FP8 with delayed
    scaling (fp8_hybrid: E4M3 forward, E5M2 backward), flash/fused attention, Apex's distributed fused Adam with
    overlapped gradient reduce-scatter and parameter all-gather in BF16 (grad_sync_dtype), gradient accumulation
    fusion."""
    tp, pp, cp, vp = (parallel.get(key, 1) for key in ("tp", "pp", "cp", "vp"))
    dp = gpus // (tp * pp * cp)
    schedule: dict[str, Any] = {"vpp": vp, "schedule": "interleaved"} if vp > 1 else {}
    return {
        "name": label,
        "framework": "megatron",
        # make_vocab_size_divisible_by 128 (Megatron pads to 128 · TP)
        "models": [{"name": "llm", "spec": spec, "pad_vocab_multiple": 128}],
        "parallel": {
            "dp": dp,
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "sequence_parallel": sequence_parallel,
            "zero": 1,
            **schedule,
        },
        "training": {
            "seq_length": sequence,
            "micro_batch_size": mbs,
            "micro_batches": gbs // (mbs * dp),
            "dtype": "bf16",
            "grad_bytes": 2,  # optim.grad_sync_dtype=bf16
            "flash_attention": True,
            "fp8_cache": "linear",
        },
        "device": {"name": "h100-80gb"},
        "framework_release": dict(RELEASES_2407),
        "timing": {
            "matmul_dtype": "fp8",
            "fp8_recipe": "delayed",
            "rope_fusion": spec.get("position_embedding", "rope") == "rope",
            "check_for_nan_in_grad": False,
            # NeMo 1's data step (megatron_gpt_model.py `get_batch`): every rank reads its own batch
            "batch_broadcast": False,
            "overlap": {"dp": 1.0, "param_gather": 1.0, "tp": 1.0 if tp_overlap == _UB else 0.0},
            **({"ub_sm_margin": True} if tp_overlap == _UB else {}),
            **extras,
        },
    }


def nemo_2407_rows() -> list[dict[str, Any]]:
    """The 24.07 rows' fields for bench/public_runs.py's PublicRun."""
    rows = []
    for label, spec, gpus, gbs, mbs, sequence, parallel, sp, ub, extras, tps, notes in _ROWS:
        raw = _run(label, spec, gpus, gbs, mbs, sequence, parallel, sp, ub, extras)
        rows.append(
            {
                "name": f"NeMo 24.07 {label}",
                "source": NEMO_2407,
                "raw": raw,
                "published": f"{tps:,.0f} tokens/s per GPU",
                "seconds": gbs * sequence / (tps * gpus),
                "assumptions": (
                    "Apex's distributed fused Adam priced as Megatron's distributed optimizer (ZeRO-1, overlapped)",
                    "FP8 delayed scaling (fp8_hybrid) as ppb's FP8 GEMMs with their casts; attention in BF16",
                    *notes,
                ),
            }
        )
    return rows
