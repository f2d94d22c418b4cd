"""torchtitan's model flavors as ppb model specs: `[model] name` and `flavor` of a job TOML.

Transcribed from torchtitan v0.2.2 (commit 73a0e697), the last release whose runs are configured
by TOML (9810191b moved them to Python registries):

* torchtitan/models/llama3/__init__.py `llama3_args`, with `TransformerModelArgs`'s defaults
  (llama3/model/args.py: vocab 128256, multiple_of 256, no ffn_dim_multiplier, n_kv_heads =
  n_heads) and llama3/model/model.py: `FeedForward` (SwiGLU, w1/w2/w3 without bias), RMSNorm,
  rope, an untied `output` projection;
* torchtitan/models/deepseek_v3/__init__.py `deepseekv3_args` (model/args.py `DeepSeekV3ModelArgs`,
  models/moe/moe.py `MoEArgs`): the first `n_dense_layers` dense at `inter_dim`, the rest MoE at
  `moe_inter_dim`; `MoE.__init__` builds the shared experts as one `FeedForward` of width
  `moe_inter_dim × num_shared_experts`;
* torchtitan/models/qwen3/__init__.py `qwen3_args` (model/args.py `Qwen3ModelArgs`): per-head q/k
  RMSNorm, `head_dim` 128, `enable_weight_tying` per flavor; with `moe_enabled` every block is MoE
  (qwen3/model/model.py `TransformerBlock`).

The sequence length is the job's: every `update_from_config` sets `max_seq_len = seq_len`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

LLAMA3_VOCAB = 128256  # TransformerModelArgs.vocab_size
QWEN3_VOCAB = 151936


def llama3_ffn(dim: int, multiple_of: int, multiplier: float | None) -> int:
    """torchtitan's `FeedForward` width (llama3/model/model.py): two thirds of 4·dim, scaled by
    `ffn_dim_multiplier`, rounded up to `multiple_of`."""
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class Llama3(NamedTuple):
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None
    ffn_dim_multiplier: float | None = None
    multiple_of: int = 256
    vocab_size: int = LLAMA3_VOCAB
    attn_type: str = "sdpa"


_DEBUG = {"dim": 256, "n_layers": 6, "n_heads": 16, "vocab_size": 2048}
_L8 = {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "ffn_dim_multiplier": 1.3, "multiple_of": 1024}
LLAMA3: dict[str, Llama3] = {
    "debugmodel": Llama3(**_DEBUG),
    "debugmodel_flex_attn": Llama3(**_DEBUG, attn_type="flex"),
    "debugmodel_varlen_attn": Llama3(**_DEBUG, attn_type="varlen"),
    "8B": Llama3(**_L8),
    "8B_flex": Llama3(**_L8, attn_type="flex"),
    "8B_varlen": Llama3(**_L8, attn_type="varlen"),
    "70B": Llama3(8192, 80, 64, 8, 1.3, 4096),
    "405B": Llama3(16384, 126, 128, 8, 1.2, 4096),
}


class DeepSeekV3(NamedTuple):
    vocab_size: int
    dim: int
    inter_dim: int
    moe_inter_dim: int
    n_layers: int
    n_dense_layers: int
    n_heads: int
    num_experts: int
    num_shared_experts: int
    top_k: int
    q_lora_rank: int
    num_expert_groups: int = 0  # MoEArgs: None, no grouping
    num_limited_groups: int = 0
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    attn_type: str = "sdpa"


DEEPSEEK_V3: dict[str, DeepSeekV3] = {
    "debugmodel": DeepSeekV3(2048, 256, 1024, 256, 6, 1, 16, 8, 2, 3, 0),
    "debugmodel_flex_attn": DeepSeekV3(2048, 256, 1024, 256, 6, 1, 16, 8, 2, 3, 0, attn_type="flex"),
    "16B": DeepSeekV3(102400, 2048, 10944, 1408, 27, 1, 16, 64, 2, 6, 0, attn_type="flex"),
    "236B": DeepSeekV3(102400, 5120, 12288, 1536, 60, 1, 128, 160, 2, 6, 1536, 8, 3, attn_type="flex"),
    "671B": DeepSeekV3(129280, 7168, 18432, 2048, 61, 3, 128, 256, 1, 8, 1536, 8, 4, attn_type="flex"),
}


class Qwen3(NamedTuple):
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int
    tied: bool = False
    vocab_size: int = QWEN3_VOCAB
    moe_inter_dim: int = 0  # 0: dense
    num_experts: int = 0
    top_k: int = 0


QWEN3: dict[str, Qwen3] = {
    "debugmodel": Qwen3(256, 8, 16, 8, 3072, True, 2048),
    "0.6B": Qwen3(1024, 28, 16, 8, 3072, True),
    "1.7B": Qwen3(2048, 28, 16, 8, 6144, True),
    "4B": Qwen3(2560, 36, 32, 8, 9728, True),
    "8B": Qwen3(4096, 36, 32, 8, 12288),
    "14B": Qwen3(5120, 40, 40, 8, 17408),
    "32B": Qwen3(5120, 64, 64, 8, 25600),
    "debugmodel_moe": Qwen3(256, 8, 16, 8, 3072, False, 2048, 768, 64, 8),
    "30B-A3B": Qwen3(2048, 48, 32, 4, 6144, False, QWEN3_VOCAB, 768, 128, 8),
    "235B-A22B": Qwen3(4096, 94, 64, 4, 12288, False, QWEN3_VOCAB, 1536, 128, 8),
}

MODELS: dict[str, dict[str, Any]] = {"llama3": LLAMA3, "deepseek_v3": DEEPSEEK_V3, "qwen3": QWEN3}


def model_spec(name: str, flavor: str, seq_len: int) -> tuple[dict[str, Any], str]:
    """The ppb spec of torchtitan's *name*/*flavor* model and its attention kernel (`attn_type`)."""
    args = MODELS[name][flavor]
    base: dict[str, Any] = {"max_position_embeddings": seq_len, "activation": "swiglu", "norm": "rmsnorm"}
    if isinstance(args, Llama3):
        spec = {
            **base,
            "vocab_size": args.vocab_size,
            "hidden_size": args.dim,
            "num_layers": args.n_layers,
            "num_attention_heads": args.n_heads,
            "num_key_value_heads": args.n_kv_heads or args.n_heads,
            "intermediate_size": llama3_ffn(args.dim, args.multiple_of, args.ffn_dim_multiplier),
        }
        return spec, args.attn_type
    if isinstance(args, DeepSeekV3):
        spec = {
            **base,
            "vocab_size": args.vocab_size,
            "hidden_size": args.dim,
            "num_layers": args.n_layers,
            "num_attention_heads": args.n_heads,
            "num_key_value_heads": args.n_heads,
            "intermediate_size": args.inter_dim,
            "num_experts": args.num_experts,
            "experts_per_token": args.top_k,
            "moe_intermediate_size": args.moe_inter_dim,
            "first_dense_layers": args.n_dense_layers,
            "q_lora_rank": args.q_lora_rank,
            "kv_lora_rank": args.kv_lora_rank,
            "qk_nope_head_dim": args.qk_nope_head_dim,
            "qk_rope_head_dim": args.qk_rope_head_dim,
            "v_head_dim": args.v_head_dim,
        }
        if args.num_shared_experts:
            spec["shared_experts"] = 1
            spec["shared_expert_intermediate_size"] = args.moe_inter_dim * args.num_shared_experts
        if args.num_expert_groups:
            spec["expert_groups"] = args.num_expert_groups
            spec["expert_group_limit"] = args.num_limited_groups
        return spec, args.attn_type
    spec = {
        **base,
        "vocab_size": args.vocab_size,
        "hidden_size": args.dim,
        "num_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.n_kv_heads,
        "head_dim": 128,
        "intermediate_size": args.hidden_dim,
        "qk_norm": True,
        "tied_embeddings": args.tied,
    }
    if args.num_experts:
        spec |= {"num_experts": args.num_experts, "experts_per_token": args.top_k}
        spec["moe_intermediate_size"] = args.moe_inter_dim
    return spec, "sdpa"
