"""Small HuggingFace config.json files that several tests build, measure or price: a two-layer
Llama with grouped-query attention, quick on a CPU and on the meta device."""

from __future__ import annotations

SMALL_LLAMA = {
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}

# A four-layer model in ppb's own spec (defaults for the rest), for run configs that only need a model to check
SMALL_GPT_SPEC = {
    "vocab_size": 4096,
    "hidden_size": 1024,
    "num_layers": 4,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "max_position_embeddings": 2048,
}

# A torchtitan run config of test_census_torchtitan's first block: h 128, 2 heads, 1 KV head, width 352,
# 64 tokens (bf16)
SMALL_TORCHTITAN_RUN = """\
name: tt-small
framework: torchtitan
models:
  - name: llm
    spec: {vocab_size: 1024, hidden_size: 128, num_layers: 2, num_attention_heads: 2,
           num_key_value_heads: 1, intermediate_size: 352}
parallel: {dp: 8, fsdp: true, world_size: 8}
training: {seq_length: 64, recompute: {mode: selective, option: op}}
device: {name: h100-80gb}
"""


def gpt_spec(
    h: int, heads: int, s: int, layers: int = 4, vocab: int = 51200, *, biases: bool = True, dropout=0.1, tied=False
) -> dict:
    """A GPT model in ppb's spec, as Megatron-LM builds one by its defaults: LayerNorm, GeLU MLP of
    4h, learned positions; with *biases* in every linear and norm, *dropout* unless None, the
    embeddings tied when *tied*."""
    spec: dict = {
        "vocab_size": vocab,
        "hidden_size": h,
        "num_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 4 * h,
        "activation": "gelu",
        "norm": "layernorm",
        "position_embedding": "learned",
        "max_position_embeddings": s,
    }
    if biases:
        spec.update(norm_bias=True, attention_bias=True, attention_output_bias=True, mlp_bias=True)
    if dropout is not None:
        spec.update(attention_dropout=dropout, hidden_dropout=dropout)
    if tied:
        spec["tied_embeddings"] = True
    return spec


# A two-block Qwen2.5-VL vision tower (one window-attention block, one full), small enough to build.
SMALL_QWEN25_VL = {
    "model_type": "qwen2_5_vl",
    "vision_config": {
        "depth": 2,
        "hidden_size": 128,
        "intermediate_size": 200,
        "num_heads": 4,
        "out_hidden_size": 96,
        "fullatt_block_indexes": [1],
    },
}

# A two-layer MLA model (DeepSeek-V2/V3's attention) in ppb's spec.
SMALL_MLA = {
    "vocab_size": 1024,
    "hidden_size": 64,
    "num_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "q_lora_rank": 16,
    "kv_lora_rank": 8,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "v_head_dim": 8,
}

# Four GQA layers (h 1024, 16 heads, 4 KV heads) in ppb's spec: the time tests' small model.
SMALL_GQA = {
    "vocab_size": 4096,
    "hidden_size": 1024,
    "num_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "intermediate_size": 2816,
    "max_position_embeddings": 2048,
}


def two_kind_bodies(heavy_layers: int) -> list[dict]:
    """SAPP bodies: 2 light layers then `heavy_layers` heavy ones (twice the forward); activations fall
    and the backward grows with recompute, so memory-tight stages must trade time for room."""
    return [
        {
            "name": f"BODY_{i}",
            "type": "BODY",
            "nb_layer": n,
            "time": forward,
            "memory_parameter": 10,
            "memory_activation": 30,
            "memory_select_rec": 20,
            "memory_select_comm": 25,
            "memory_both_comm_select": 15,
            "memory_recompute": 2,
            "backward_time": 2 * forward,
            "select_rec_time": 2 * forward + 0.2,
            "select_comm_time": 2 * forward + 0.3,
            "both_comm_select_time": 2 * forward + 0.4,
            "recompute_time": 3 * forward,
        }
        for i, (n, forward) in enumerate([(2, 1.0), (heavy_layers, 2.0)])
    ]


# A round device for hand-derived times: 100 TFLOPS, 1000 GB/s HBM at 50% (5e11 B/s), links 100 / 10 GB/s
# at 50%, no latency, no fixed kernel time, a 128×128 tile at full rate. 64 SMs: the test layers' GEMMs
# cut into whole waves of 128×128 tiles (e.g. 2048×4096: 512 tiles, 8 waves), so a GEMM takes exactly
# FLOPs / (peak · efficiency).
ROUND_DEVICE = {
    "sm_count": 64,
    "memory_mb": 80000,
    "peak_tflops": 100.0,
    "hbm_bandwidth_gbs": 1000.0,
    "intra_node_bandwidth_gbs": 100.0,
    "inter_node_bandwidth_gbs": 10.0,
    "matmul_efficiency": 0.5,
    "memory_efficiency": 0.5,
    "comm_efficiency": 0.5,
    "collective_latency_us": 0.0,
    "inter_node_latency_us": 0.0,
    "comm_sms": 0,
    "gemm_kernel_us": 0.0,
    "fp8_gemm_kernel_us": 0.0,
    "gemm_full_intensity": 64.0,
}


# One Llama-3-8B layer (h 4096, 32 heads, 8 KV heads, width 14336) over a small vocabulary: its layers'
# time terms at full size, cheap to build
LLAMA_8B_LAYER = {
    "vocab_size": 1024,
    "hidden_size": 4096,
    "num_layers": 2,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
}


# one GPT-OSS 120B layer's attention shape (its config.json), a 1000-word vocabulary
GPT_OSS_ATTENTION_LAYER = {
    "vocab_size": 1000,
    "hidden_size": 2880,
    "num_layers": 1,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
}

# A small DeepSeek-style MLA layer: h=1024, a=8, q latent 256, kv latent 128, nope 64, rope 32, v 64.
MLA_H1024 = {
    "vocab_size": 1000,
    "hidden_size": 1024,
    "num_layers": 1,
    "num_attention_heads": 8,
    "intermediate_size": 2048,
    "q_lora_rank": 256,
    "kv_lora_rank": 128,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
    "v_head_dim": 64,
}


def selective_raw(spec: dict, modules: list[str], parallel: dict | None = None) -> dict:
    """A run config (raw) of one model under Megatron's selective recompute of *modules*, 1024 tokens, one
    sequence a micro-batch, flash attention, on an H100: what the recompute tests of one layer price."""
    raw = {
        "name": "x",
        "models": [{"name": "llm", "spec": dict(spec)}],
        "training": {
            "seq_length": 1024,
            "micro_batch_size": 1,
            "flash_attention": True,
            "recompute": {"granularity": "selective", "modules": modules},
        },
        "device": {"name": "h100-80gb"},
    }
    if parallel is not None:
        raw["parallel"] = parallel
    return raw
