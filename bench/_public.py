"""What the benchmarks against published runs share: the Llama 3 models as Meta's config.json
files state them, torchtitan's run config, the run configs of Megatron-LM's functional-test cases
(transcribed once from their model_config.yaml), and reading a row's run config.

Used by bench/public_runs.py (iteration times) and bench/public_memory.py (memory peaks).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import RunConfig, parse_run_config  # noqa: E402

_LLAMA3 = {"vocab_size": 128256, "num_key_value_heads": 8, "max_position_embeddings": 131072}
LLAMA31_8B = {**_LLAMA3, "hidden_size": 4096, "num_layers": 32, "num_attention_heads": 32, "intermediate_size": 14336}
LLAMA31_70B = {**_LLAMA3, "hidden_size": 8192, "num_layers": 80, "num_attention_heads": 64, "intermediate_size": 28672}
LLAMA3_405B = {
    **_LLAMA3,
    "hidden_size": 16384,
    "num_layers": 126,
    "num_attention_heads": 128,
    "intermediate_size": 53248,
}


# What torchtitan ran before v0.2.2 where ppb's defaults follow v0.2.2 (docs/frameworks.md, torchtitan versions)
# Every published torchtitan run priced here predates 83e694105 (2025-07-28): the root unit holds the
# embedding, final norm and output layer (`fsdp_units: root`).
BEFORE_V022: dict[str, Any] = {"norm_type": "rmsnorm", "repeat_kv": True, "sdpa_backend": "flash", "fsdp_units": "root"}
# Runs before 6e4988550 (2025-02-24: fused AdamW by default): foreach AdamW (1ea476e9f's train.py passes
# foreach=True; 3faaa1a0d and 9dec370's optimizer.py `foreach: not fused`, fused off unless asked)
FOREACH_ADAMW: dict[str, Any] = {"optimizer_implementation": "foreach"}
# The torchtitan commits the published runs ran and their dates (`git log -1 --date=short` on pytorch/torchtitan):
# each row states its commit as `framework_release.torchtitan`, so a rule of a later commit (its main's one wqkv
# linear from 3396a4b37, 2026-06-24) is priced only for a run of a commit that holds it
TORCHTITAN_COMMITS = {
    "1ea476e9f": "2024-04-24",  # docs/performance.md's A100 rows
    "3faaa1a0d": "2024-08-23",  # docs/performance.md's 405B rows
    "9dec370": "2024-12-26",  # benchmarks/llama3_h100_202412_torchtitan.md
    "e7c0cae": "2025-06-11",  # benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md
    "820504e": "2025-06-13",  # benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md
}


def torchtitan_run(
    name: str,
    spec: dict[str, Any],
    parallel: dict[str, Any],
    seq_length: int,
    micro_batch_size: int,
    micro_batches: int,
    recompute: str | dict[str, Any],
    device: dict[str, Any],
    commit: str | None = None,
) -> dict[str, Any]:
    """A torchtitan Llama run as its benchmarks run it: FSDP2 (ZeRO-3), bf16, flash attention; *commit*
    (`TORCHTITAN_COMMITS`) the torchtitan commit it ran, stated as its date (None: unstated, v0.2.2's code).

    Every published torchtitan run priced here ran before torchtitan passed its own `early_stop`
    (25413d224, 2025-08-29; 1ea476e9f to 820504e wrap blocks with `ptd_checkpoint_wrapper(module,
    preserve_rng_state=False)` and the per-op context alone), so torch.utils.checkpoint's default
    early stop applied to its checkpointed blocks. They also ran before torchtitan passed `enable_gqa`
    (ff0829c10, 2026-01-27: `repeat_kv` copies K and V), before cuDNN attention came first on an A100
    or H100 (6a3a9da95, 2025-10-09: FlashAttention-2) and with an eager RMSNorm (torchtitan's own
    norms.py before 3b39d7ab0; the later runs' nn.RMSNorm is compiled): `BEFORE_V022`, which a row's
    own timing settings extend."""
    if recompute == "full":
        recompute = {"mode": "full"}
    if isinstance(recompute, dict) and recompute.get("mode") != "none":
        recompute = {**recompute, "early_stop": True}
    release = {"framework_release": {"torchtitan": TORCHTITAN_COMMITS[commit]}} if commit else {}
    return {
        "name": name,
        "framework": "torchtitan",
        **release,
        "models": [{"name": "llm", "spec": spec}],
        "parallel": {"fsdp": True, "zero": 3, **parallel},
        "training": {
            "seq_length": seq_length,
            "micro_batch_size": micro_batch_size,
            "micro_batches": micro_batches,
            "dtype": "bf16",
            "optimizer": "adamw",  # [optimizer] name's default at every commit priced here
            "flash_attention": True,
            "recompute": recompute,
        },
        "device": device,
        "timing": dict(BEFORE_V022),
    }


def torchtitan_llama31_8b(gpus: int, device: dict[str, Any]) -> dict[str, Any]:
    """torchtitan's Llama 3.1 8B benchmark on *gpus* H100 (llama3_h100_202412_torchtitan.md, Tables 1
    and 3): FSDP over all of them, local batch 2 of 8192 tokens, per-op selective checkpointing."""
    recompute = {"mode": "selective", "option": "op"}
    name = f"torchtitan-llama3.1-8b-fsdp{gpus}"
    raw = torchtitan_run(name, LLAMA31_8B, {"dp": gpus}, 8192, 2, 1, recompute, device, commit="9dec370")
    raw["timing"] |= FOREACH_ADAMW  # 9dec370
    return raw


MEGATRON_TESTS = "NVIDIA/Megatron-LM d98e8a64 tests/functional_tests/test_cases"


def gpt_spec(
    hidden: int, heads: int, layers: int, *, vocab_size: int, positions: int = 2048, dropout: float = 0.1
) -> dict[str, Any]:
    """Megatron's GPT of the GPT-2 / GPT-3 papers, as Megatron-LM's and NeMo's defaults build it: LayerNorm with
    biases, a GeLU MLP of 4h, multi-head attention, biases on every linear, learned absolute positions, tied
    embeddings, dropout on attention and hidden states (none where `dropout` is 0)."""
    spec: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "activation": "gelu",
        "norm": "layernorm",
        "norm_bias": True,
        "tied_embeddings": True,
        "position_embedding": "learned",
        "max_position_embeddings": positions,
        "attention_bias": True,
        "attention_output_bias": True,
        "mlp_bias": True,
    }
    if dropout:
        spec |= {"attention_dropout": dropout, "hidden_dropout": dropout}
    return spec


# gpt/gpt3_7b_tp{1,4}_pp{4,1}_memory_speed/model_config.yaml: 32 layers, h 4096, 32 heads, 8 query
# groups, untied embeddings, sequence 8192, vocabulary 131073, no --swiglu/--normalization/
# --position-embedding-type/--disable-bias-linear/dropout flags (Megatron's defaults).
GPT_7B = {
    "vocab_size": 131073,
    "hidden_size": 4096,
    "num_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 16384,
    "activation": "gelu",
    "norm": "layernorm",
    "norm_bias": True,
    "position_embedding": "learned",
    "max_position_embeddings": 8192,
    "attention_bias": True,
    "attention_output_bias": True,
    "mlp_bias": True,
    "attention_dropout": 0.1,
    "hidden_dropout": 0.1,
}


def gpt3_7b_run(tp: int, pp: int, vpp: int, micro_batch_size: int, gpu: str) -> dict[str, Any]:
    """Megatron CI's gpt3_7b_tp{tp}_pp{pp}_memory_speed case on one node of 8 *gpu*s."""
    data_parallel = 8 // (tp * pp)
    return {
        "name": f"megatron-gpt3-7b-tp{tp}-pp{pp}-{gpu}",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": GPT_7B, "pad_vocab_multiple": 128}],
        "parallel": {
            "dp": data_parallel,
            "tp": tp,
            "pp": pp,
            "vpp": vpp,
            "zero": 1,  # --use-distributed-optimizer
            **({"schedule": "interleaved"} if vpp > 1 else {}),
        },
        "training": {
            "seq_length": 8192,
            "micro_batch_size": micro_batch_size,
            # --global-batch-size 8 over the data-parallel ranks
            "micro_batches": 8 // (micro_batch_size * data_parallel),
            "dtype": "bf16",
            "flash_attention": True,  # TE's fused attention (the default backend)
        },
        "device": {"name": f"{gpu}-80gb", "reserved_mb": 0},
        # --no-gradient-accumulation-fusion, --deterministic-mode (so no --cross-entropy-loss-fusion),
        # --log-params-norm, --log-num-zeros-in-grad (NaN checks on: Megatron's default)
        "timing": {
            "gradient_accumulation_fusion": False,
            "deterministic": True,
            "log_params_norm": True,
            "log_num_zeros_in_grad": True,
        },
        "memory": {"cublas_workspace_config": ":4096:8"},  # the case's ENV_VARS
    }


# moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed/model_config.yaml (tests/test_utils/recipes/
# h100/moe.yaml: one node of 8, scope "mr-broken"): 16 layers (the first dense), h 1024, 32 heads,
# MLA (q rank 1536, kv rank 512, heads 128 + 64 rotary, values 128), 32 experts of 1024, top 4 in
# 4 groups (2 chosen), one shared expert of 1024, one MTP layer, SwiGLU, RMSNorm, no biases, no
# dropout, untied, sequence 4096, micro-batch 4, global 32; TP 2 with SP, PP 2 with 4 virtual
# stages, EP 4, ETP 1, distributed optimizer, `--attention-backend unfused`; the GPT-2 vocabulary
# (50257) padded to a multiple of 3232·tp.
# gpt/gpt3_mcore_*: 12 layers, h 512, 8 heads, sequence 1024, micro-batch 4, global batch 32, the
# GPT-2 BPE vocabulary (50257 entries, tests/functional_tests/shared_data: gpt2 vocab.json), tied
# embeddings (no --untie-embeddings-and-output-weights), attention without flash kernels
# (`--attention-backend unfused`, or `--transformer-impl local`), Megatron's other defaults.
GPT_SMALL = gpt_spec(512, 8, 12, vocab_size=50257, positions=1024)


MOE_MLA = {
    "vocab_size": 50257,
    "hidden_size": 1024,
    "num_layers": 16,
    "num_attention_heads": 32,
    "intermediate_size": 4096,
    "activation": "swiglu",
    "norm": "rmsnorm",
    "position_embedding": "rope",
    "max_position_embeddings": 4096,
    "num_experts": 32,
    "experts_per_token": 4,
    "moe_intermediate_size": 1024,
    "shared_experts": 1,
    "shared_expert_intermediate_size": 1024,
    "expert_groups": 4,
    "expert_group_limit": 2,
    "first_dense_layers": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "mtp_layers": 1,
}


# Both cases' --no-rope-fusion, --moe-router-dtype fp32, --moe-permute-fusion and router: sigmoid scores,
# --moe-router-enable-expert-bias, --moe-router-pre-softmax, --moe-router-topk-scaling-factor 2.0,
# seq_aux_loss at --moe-aux-loss-coeff 1e-4 (the group limit is the spec's).
MOE_MLA_ROUTER = {
    "score_function": "sigmoid",
    "aux_losses": ["seq_aux_loss"],
    "expert_bias": True,
    "pre_softmax": True,
    "topk_scaling": True,
}
MOE_MLA_TRAINING = {
    "rope_fusion": False,
    "moe": {"router_dtype": "fp32", "permute_fusion": True, "router": MOE_MLA_ROUTER},
}
# Both MoE-MLA cases' flags that bear on time: --cross-entropy-loss-fusion,
# --no-check-for-nan-in-loss-and-grad, --no-rope-fusion, --log-params-norm, --log-num-zeros-in-grad,
# --exit-duration-in-mins 230.
MOE_MLA_TIMING = {
    "cross_entropy_fusion": True,
    "check_for_nan_in_grad": False,
    "rope_fusion": False,
    "log_params_norm": True,
    "log_num_zeros_in_grad": True,
    "exit_duration_in_mins": 230.0,
}

MOE_MLA_MEMORY_SPEED = "gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed"
MOE_MLA_LAYOUT = "gpt3_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental"


def moe_mla_memory_speed_run() -> dict[str, Any]:
    """Megatron CI's moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed case on one node of 8 H100."""
    case = MOE_MLA_MEMORY_SPEED
    return {
        "name": f"megatron-{case}",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": MOE_MLA, "pad_vocab_multiple": 3232}],
        "parallel": {
            "dp": 2,
            "tp": 2,
            "pp": 2,
            "vpp": 4,
            "ep": 4,
            "etp": 1,
            "sequence_parallel": True,
            "zero": 1,
            "schedule": "interleaved",
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": 4,
            "micro_batches": 4,
            "dtype": "bf16",
            "flash_attention": False,
            **MOE_MLA_TRAINING,
        },
        "device": {"name": "h100-80gb", "reserved_mb": 0},
        "timing": {**MOE_MLA_TIMING},
    }


def moe_mla_layout_run() -> dict[str, Any]:
    """The same MoE-MLA model under selective recompute and a Megatron pipeline layout
    (moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental), as its golden values ran."""
    # The case's model_config.yaml at c08d89bea0 (2025-08-17), the commit that recorded its golden values
    # (adc69dba2d only moved them): as the memory_speed case, but the first 3 layers dense (--moe-layer-freq
    # ([0]*3+[1]*13)), --pipeline-model-parallel-layout Et*3|(tt|)*6tL with --mtp-num-layers 1 (Megatron-Core
    # then built the MTP layer on the last stage: Et*3|(tt|)*6tmL, rank 1, measured, holds 7 MoE layers, the
    # MTP layer and the loss), --recompute-modules layernorm mla_up_proj mlp moe_act. Its
    # --overlap-moe-expert-parallel-comm (the combined 1F1B schedule) came after the values, with d7bf5aaaa8
    # (2025-08-26): not run. The case is commented out of tests/test_utils/recipes/h100/moe.yaml since.
    # Priced at the releases that ran it, as bench/megatron_ci.py prices the case: Megatron-Core at c08d89bea0's
    # date, TE as its uv.lock pins it (2.6.0.post1), PyTorch as its NGC image shipped it (2.8).
    case = MOE_MLA_LAYOUT
    return {
        "name": f"megatron-{case}",
        "framework": "megatron",
        "framework_release": {"megatron_core": "2025-08-17", "transformer_engine": "2.6.0.post1", "pytorch": "2.8"},
        "models": [{"name": "llm", "spec": {**MOE_MLA, "first_dense_layers": 3}, "pad_vocab_multiple": 3232}],
        "parallel": {
            "dp": 2,
            "tp": 2,
            "pp": 2,
            "ep": 4,
            "etp": 1,
            "sequence_parallel": True,
            "zero": 1,
            "layout": "Et*3|(tt|)*6tmL",
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": 4,
            "micro_batches": 4,
            "dtype": "bf16",
            "flash_attention": False,
            "recompute": {"granularity": "selective", "modules": ["layernorm", "mla_up_proj", "mlp", "moe_act"]},
            **MOE_MLA_TRAINING,
        },
        "device": {"name": "h100-80gb", "reserved_mb": 0},
        "timing": {**MOE_MLA_TIMING},
    }


def run_config(raw: dict[str, Any], name: str) -> RunConfig:
    """A row's run config, its model files named relative to configs/."""
    return parse_run_config(raw, name, ROOT / "configs")
