"""HuggingFace `config.json` files read into a `ModelSpec`, the fields each architecture really uses.

A config.json is read as `transformers` reads it (transformers 5.24; gpt_oss 5.25, each model type's
`models/<type>/configuration_<type>.py`): a field the file lacks takes the config class's default
(`DEFAULTS`), and a field the file names by an alias of the class's `attribute_map` (`ALIASES`:
transformers 5 writes Qwen3-MoE's expert count as `num_local_experts`, older versions
`num_experts`) is read under its attribute's name. A config.json carries many fields ppb has no
use for (token ids, rope scaling, initializer ranges, ...): those are ignored. A field without a
default that the file lacks, a field given under two names, or a value that cannot be, is an
`InputError` naming the file and the field. `tests/test_hf_transformers.py` checks both tables
against the installed transformers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ppb_core import limits
from ppb_core.config.spec import ModelSpec
from ppb_core.errors import InputError, did_you_mean, misspelt, shown
from ppb_core.io import read_json

SUPPORTED = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v3",
    "gpt2",
    "gpt_oss",
)

_ACTIVATIONS = {
    "silu": "swiglu",  # HF's silu MLPs are all gated (gate_proj, up_proj, down_proj)
    "swiglu": "swiglu",
    "gelu": "gelu",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "gelu_fast": "gelu",
    "relu": "relu",
}


# The config classes' defaults of the fields ppb reads (transformers 5.24). A field absent here
# has no default ppb would use: `need` refuses a file that lacks it.
_LLAMA_LIKE = {"hidden_act": "silu", "tie_word_embeddings": False, "attention_dropout": 0.0}
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {  # LlamaConfig: num_key_value_heads None -> num_attention_heads, head_dim None -> hidden/heads
        **_LLAMA_LIKE,
        "vocab_size": 32000,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "max_position_embeddings": 2048,
        "attention_bias": False,
        "mlp_bias": False,
    },
    "mistral": {
        **_LLAMA_LIKE,
        "vocab_size": 32000,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "max_position_embeddings": 4096 * 32,
    },
    "qwen2": {
        **_LLAMA_LIKE,
        "vocab_size": 151936,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 22016,
        "max_position_embeddings": 32768,
    },
    "qwen3": {
        **_LLAMA_LIKE,
        "vocab_size": 151936,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 128,
        "intermediate_size": 22016,
        "max_position_embeddings": 32768,
        "attention_bias": False,
    },
    "mixtral": {
        **_LLAMA_LIKE,
        "vocab_size": 32000,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "max_position_embeddings": 4096 * 32,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    "qwen2_moe": {
        **_LLAMA_LIKE,
        "vocab_size": 151936,
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "max_position_embeddings": 32768,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "shared_expert_intermediate_size": 5632,
    },
    "qwen3_moe": {
        **_LLAMA_LIKE,
        "vocab_size": 151936,
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "intermediate_size": 6144,
        "max_position_embeddings": 32768,
        "attention_bias": False,
        "num_local_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    "deepseek_v3": {
        **_LLAMA_LIKE,
        "vocab_size": 129280,
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_nextn_predict_layers": 1,
    },
    "gpt2": {
        "vocab_size": 50257,
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_positions": 1024,
        "activation_function": "gelu_new",
        "attn_pdrop": 0.1,
        "resid_pdrop": 0.1,
        "tie_word_embeddings": True,
    },
    "gpt_oss": {  # GptOssConfig (transformers 5.25); layer_types None -> sliding on even indices, full on odd
        "vocab_size": 201088,
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "max_position_embeddings": 131072,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "sliding_window": 128,
        "tie_word_embeddings": False,
        "attention_bias": True,
        "attention_dropout": 0.0,
        "swiglu_limit": 7.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 4096,
            "rope_theta": 150000.0,
        },
    },
}
# attribute_map: a name a config.json may use -> the attribute it sets (transformers 5.24).
ALIASES: dict[str, dict[str, str]] = {
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    "gpt2": {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    },
}


class _Fields:
    """Reads one config.json's fields as transformers does, with errors that name the file and the field."""

    def __init__(self, raw: Mapping[str, Any], source: str, model_type: str = "") -> None:
        self.source = source
        self.defaults = DEFAULTS.get(model_type, {})
        resolved = dict(raw)
        for alias, attribute in ALIASES.get(model_type, {}).items():
            if resolved.get(alias) is None:
                continue
            if resolved.get(attribute) is not None and resolved[attribute] != resolved[alias]:
                raise InputError(
                    source,
                    alias,
                    f"{shown(resolved[alias])} and {attribute} {shown(resolved[attribute])} name the same field",
                )
            resolved[attribute] = resolved[alias]
        self.raw = resolved
        self.asked: dict[str, None] = {}  # the keys read, in order

    def need(self, name: str, kind: type = int) -> Any:
        """A field the architecture needs: the file's, else the class default; null is refused."""
        self.asked[name] = None
        value = self.raw[name] if name in self.raw else self.defaults.get(name)
        if value is None:
            said = "null" if name in self.raw else "missing"
            raise InputError(self.source, name, f"{said}, and this architecture needs it")
        return self._typed(name, value, kind)

    def get(self, name: str, default: Any, kind: type = int) -> Any:
        """A field the file may leave out (the class default) or set to null (*default*: what null means)."""
        self.asked[name] = None
        value = self.raw[name] if name in self.raw else self.defaults.get(name, default)
        return default if value is None else self._typed(name, value, kind)

    def _typed(self, name: str, value: Any, kind: type) -> Any:
        if kind is bool:
            if not isinstance(value, bool):
                raise InputError(self.source, name, f"expected true or false, got {shown(value)}")
            return value
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(self.source, name, f"expected an integer, got {shown(value)}")
            return value
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(self.source, name, f"expected a number, got {shown(value)}")
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                raise InputError(self.source, name, f"expected a string, got {shown(value)}")
            return value
        if kind is list:
            if not isinstance(value, list):
                raise InputError(self.source, name, f"expected a list, got {shown(value)}")
            return value
        if kind is dict:
            if not isinstance(value, dict):
                raise InputError(self.source, name, f"expected a mapping, got {shown(value)}")
            return value
        raise TypeError(kind)

    def activation(self, name: str) -> str:
        value = self.need(name, str)
        if value not in _ACTIVATIONS:
            raise InputError(self.source, name, f"unsupported activation {shown(value)}")
        return _ACTIVATIONS[value]

    def gated_activation(self, name: str) -> str:
        """The activation of a gated MLP: transformers' Llama, Mistral, Qwen2/3, Mixtral, Qwen-MoE and DeepSeek-V3
        MLPs (and experts) all gate whatever `hidden_act` names (modeling_llama.py `LlamaMLP.forward`:
        `down_proj(act_fn(gate_proj(x)) * up_proj(x))`), so only silu, SwiGLU, is the MLP ppb prices; `gelu`
        there was priced as an ungated GELU MLP, two matrices of the three (Qwen3-8B: 5 GB less a stage)."""
        if self.activation(name) != "swiglu":
            value = self.need(name, str)
            raise InputError(
                self.source,
                name,
                f"{shown(value)}: this model's MLP gates it (down(act(gate(x)) * up(x))), which ppb prices for silu "
                "(SwiGLU) only",
            )
        return "swiglu"


def _llama_like(f: _Fields, family: str) -> dict[str, Any]:
    """Llama, Mistral, Qwen2 and Qwen3: RMSNorm, rotary positions, gated MLP, GQA."""
    fields: dict[str, Any] = {
        "family": family,
        "vocab_size": f.need("vocab_size"),
        "hidden_size": f.need("hidden_size"),
        "num_layers": f.need("num_hidden_layers"),
        "num_attention_heads": f.need("num_attention_heads"),
        "num_key_value_heads": f.get("num_key_value_heads", None),
        "head_dim": f.get("head_dim", None),
        "intermediate_size": f.need("intermediate_size"),
        "activation": f.gated_activation("hidden_act"),
        "tied_embeddings": f.get("tie_word_embeddings", False, bool),
        "max_position_embeddings": f.need("max_position_embeddings"),
        "attention_dropout": f.get("attention_dropout", 0.0, float),
    }
    if family in ("llama", "qwen3", "qwen3_moe"):
        bias = f.get("attention_bias", False, bool)
        fields["attention_bias"] = fields["attention_output_bias"] = bias
    if family == "llama":
        fields["mlp_bias"] = f.get("mlp_bias", False, bool)
    if family in ("qwen2", "qwen2_moe"):
        # Qwen2 always has q/k/v biases and none on the output projection.
        fields["attention_bias"] = True
    if family in ("qwen3", "qwen3_moe"):
        fields["qk_norm"] = True
    return fields


def _mixtral(f: _Fields) -> dict[str, Any]:
    fields = _llama_like(f, "mixtral")
    fields.update(
        num_experts=f.need("num_local_experts"),  # attribute_map: num_experts
        experts_per_token=f.need("num_experts_per_tok"),
        moe_intermediate_size=fields["intermediate_size"],
    )
    return fields


def _qwen_moe(f: _Fields, family: str) -> dict[str, Any]:
    fields = _llama_like(f, family)
    fields.update(
        # Qwen3-MoE's attribute is num_local_experts (attribute_map: num_experts); Qwen2-MoE's num_experts
        num_experts=f.need("num_local_experts" if family == "qwen3_moe" else "num_experts"),
        experts_per_token=f.need("num_experts_per_tok"),
        moe_intermediate_size=f.need("moe_intermediate_size"),
        moe_layer_frequency=f.get("decoder_sparse_step", 1),
        dense_layers=tuple(f.get("mlp_only_layers", [], list)),
    )
    if family == "qwen2_moe":
        # Qwen2-MoE always builds the shared expert's sigmoid gate, even with a zero-width expert.
        fields["shared_expert_gate"] = True
        shared = f.get("shared_expert_intermediate_size", 0)
        if shared:
            fields.update(shared_experts=1, shared_expert_intermediate_size=shared)
    return fields


def _deepseek_v3(f: _Fields) -> dict[str, Any]:
    """transformers' DeepseekV3 builds an MoE block from layer first_k_dense_replace on (no moe_layer_freq)."""
    layers = f.need("num_hidden_layers")
    first_dense = f.get("first_k_dense_replace", 0)
    routed = f.get("n_routed_experts", 0)
    bias = f.get("attention_bias", False, bool)
    fields: dict[str, Any] = {
        "family": "deepseek_v3",
        "vocab_size": f.need("vocab_size"),
        "hidden_size": f.need("hidden_size"),
        "num_layers": layers,
        "num_attention_heads": f.need("num_attention_heads"),
        "num_key_value_heads": f.get("num_key_value_heads", None),
        "intermediate_size": f.need("intermediate_size"),
        "activation": f.gated_activation("hidden_act"),
        "tied_embeddings": f.get("tie_word_embeddings", False, bool),
        "max_position_embeddings": f.need("max_position_embeddings"),
        "attention_dropout": f.get("attention_dropout", 0.0, float),
        "attention_bias": bias,
        "attention_output_bias": bias,
        "q_lora_rank": f.get("q_lora_rank", 0),
        "kv_lora_rank": f.need("kv_lora_rank"),
        "qk_nope_head_dim": f.need("qk_nope_head_dim"),
        "qk_rope_head_dim": f.need("qk_rope_head_dim"),
        "v_head_dim": f.need("v_head_dim"),
        # Group-limited routing (DeepSeek-V3's node-limited routing): experts in n_group groups,
        # a token's top-k drawn from its topk_group best groups.
        "expert_groups": f.get("n_group", 0) or 0,
        "expert_group_limit": f.get("topk_group", 0) or 0,
        "mtp_layers": f.get("num_nextn_predict_layers", 0),
    }
    if routed:
        fields.update(
            num_experts=routed,
            experts_per_token=f.need("num_experts_per_tok"),
            moe_intermediate_size=f.need("moe_intermediate_size"),
            shared_experts=f.get("n_shared_experts", 0),
            first_dense_layers=first_dense,
        )
    return fields


def _gpt2(f: _Fields) -> dict[str, Any]:
    """GPT2Config: dropouts 0.1 and gelu_new by default, embeddings tied unless the file says not."""
    hidden = f.need("n_embd")
    inner = f.get("n_inner", None)
    return {
        "family": "gpt2",
        "vocab_size": f.need("vocab_size"),
        "hidden_size": hidden,
        "num_layers": f.need("n_layer"),
        "num_attention_heads": f.need("n_head"),
        # transformers 5.25 GPT2Block: `config.n_inner if config.n_inner is not None else 4 * hidden_size`, so 0 is a
        # width (refused by ModelSpec), not "unset"
        "intermediate_size": 4 * hidden if inner is None else inner,
        "activation": f.activation("activation_function"),
        "norm": "layernorm",
        "norm_bias": True,
        "tied_embeddings": f.get("tie_word_embeddings", True, bool),
        "position_embedding": "learned",
        "max_position_embeddings": f.need("n_positions"),
        "attention_bias": True,
        "attention_output_bias": True,
        "mlp_bias": True,
        "attention_dropout": f.get("attn_pdrop", 0.1, float),
        "hidden_dropout": f.get("resid_pdrop", 0.1, float),
    }


# GPT-OSS's layer types (GptOssConfig `layer_types`; GptOssModel builds a mask of each): a sliding layer
# attends to its sliding_window last keys, a full one to every earlier key.
_GPT_OSS_LAYER_TYPES = ("sliding_attention", "full_attention")


def _gpt_oss_layer_types(f: _Fields) -> list[str]:
    """GptOssConfig.__post_init__: layer_types None -> "sliding_attention" where (i + 1) % 2, else "full_attention"."""
    layers = f.need("num_hidden_layers")
    types = f.get("layer_types", None, list)
    if types is None:
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    return types


def _gpt_oss(f: _Fields) -> dict[str, Any]:
    """GPT-OSS (transformers 5.25 models/gpt_oss/modeling_gpt_oss.py): RMSNorm, GQA with q/k/v/o biases
    (`attention_bias`) and a learnable sink logit per head (`GptOssAttention.sinks`), sliding-window
    attention on the `layer_types` "sliding_attention" layers, every layer MoE: a router with a bias
    (`GptOssTopKRouter`), experts of `intermediate_size` with interleaved gate/up and biases
    (`GptOssExperts`: gate_up_proj_bias, down_proj_bias), the clamped quick-GEGLU whatever `hidden_act`
    says (`_apply_gate` never reads it), untied output head by default."""
    ffn = f.need("intermediate_size")
    bias = f.get("attention_bias", True, bool)
    windowed = tuple(i for i, kind in enumerate(_gpt_oss_layer_types(f)) if kind == "sliding_attention")
    return {
        "family": "gpt_oss",
        "vocab_size": f.need("vocab_size"),
        "hidden_size": f.need("hidden_size"),
        "num_layers": f.need("num_hidden_layers"),
        "num_attention_heads": f.need("num_attention_heads"),
        "num_key_value_heads": f.need("num_key_value_heads"),
        "head_dim": f.need("head_dim"),
        "intermediate_size": ffn,
        "activation": "quick_geglu",
        "tied_embeddings": f.get("tie_word_embeddings", False, bool),
        "max_position_embeddings": f.need("max_position_embeddings"),
        "attention_dropout": f.get("attention_dropout", 0.0, float),
        "attention_bias": bias,
        "attention_output_bias": bias,
        "attention_sinks": True,
        "sliding_window": f.need("sliding_window") if windowed else 0,
        "window_layers": windowed,
        "num_experts": f.need("num_local_experts"),  # attribute_map: num_experts
        "experts_per_token": f.need("num_experts_per_tok"),
        "moe_intermediate_size": ffn,
        "expert_bias": True,
        "router_bias": True,
        "activation_clamp": f.get("swiglu_limit", 0.0, float),
        "rope_yarn_factor": _yarn_factor(f),
    }


def _yarn_factor(f: _Fields) -> float:
    """YaRN's scaling factor from `rope_scaling` (transformers 5 also names it `rope_parameters`): its `factor`
    where `rope_type` (or `type`, the older key) is "yarn", else 0 (no YaRN)."""
    key = "rope_parameters" if "rope_parameters" in f.raw and "rope_scaling" not in f.raw else "rope_scaling"
    scaling = f.get(key, {}, dict)
    if scaling.get("rope_type", scaling.get("type")) != "yarn":
        return 0.0
    factor = scaling.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1e6:
        raise InputError(f.source, f"{key}.factor", f"expected a number above 0, got {shown(factor)}")
    return float(factor)


_READERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "llama": lambda f: _llama_like(f, "llama"),
    "mistral": lambda f: _llama_like(f, "mistral"),
    "qwen2": lambda f: _llama_like(f, "qwen2"),
    "qwen3": lambda f: _llama_like(f, "qwen3"),
    "mixtral": _mixtral,
    "qwen2_moe": lambda f: _qwen_moe(f, "qwen2_moe"),
    "qwen3_moe": lambda f: _qwen_moe(f, "qwen3_moe"),
    "deepseek_v3": _deepseek_v3,
    "gpt2": _gpt2,
    "gpt_oss": _gpt_oss,
}


# ModelSpec's fields under the config.json key each architecture writes them as, so an error names
# the key the user wrote (`num_hidden_layers`, not ppb's `num_layers`). Unlisted fields keep their name.
_HF_KEYS: dict[str, dict[str, str]] = {
    "llama": {"num_layers": "num_hidden_layers", "activation": "hidden_act", "tied_embeddings": "tie_word_embeddings"},
    "mixtral": {
        "num_experts": "num_local_experts",
        "experts_per_token": "num_experts_per_tok",
        "moe_intermediate_size": "intermediate_size",
    },
    "qwen3_moe": {"num_experts": "num_local_experts"},  # transformers 5's attribute (attribute_map: num_experts)
    "qwen_moe": {
        "experts_per_token": "num_experts_per_tok",
        "moe_layer_frequency": "decoder_sparse_step",
        "dense_layers": "mlp_only_layers",
    },
    "deepseek_v3": {
        "num_experts": "n_routed_experts",
        "experts_per_token": "num_experts_per_tok",
        "shared_experts": "n_shared_experts",
        "first_dense_layers": "first_k_dense_replace",
        "mtp_layers": "num_nextn_predict_layers",
        "expert_groups": "n_group",
        "expert_group_limit": "topk_group",
    },
    "gpt_oss": {
        "num_experts": "num_local_experts",
        "experts_per_token": "num_experts_per_tok",
        "moe_intermediate_size": "intermediate_size",
        "window_layers": "layer_types",
        "activation_clamp": "swiglu_limit",
        "rope_yarn_factor": "rope_scaling",
    },
    "gpt2": {
        "num_layers": "n_layer",
        "hidden_size": "n_embd",
        "num_attention_heads": "n_head",
        "intermediate_size": "n_inner",
        "max_position_embeddings": "n_positions",
        "attention_dropout": "attn_pdrop",
        "hidden_dropout": "resid_pdrop",
        "activation": "activation_function",
    },
}


def hf_keys(model_type: str) -> dict[str, str]:
    """ModelSpec field -> the key of *model_type*'s config.json it is read from, where they differ."""
    family = "qwen_moe" if model_type in ("qwen2_moe", "qwen3_moe") else model_type
    own = (
        {**_HF_KEYS.get(family, {}), **_HF_KEYS.get(model_type, {})}
        if family != model_type
        else _HF_KEYS.get(family, {})
    )
    return own if family == "gpt2" else {**_HF_KEYS["llama"], **own}


def _at_least(f: _Fields, name: str, least: int, why: str) -> None:
    if name in f.raw and f.raw[name] is not None and f.get(name, least) < least:
        raise InputError(f.source, name, f"must be at least {least}, got {shown(f.raw[name])}: {why}")


def _check_values(f: _Fields, model_type: str) -> None:
    """What each architecture allows, checked on the config.json's own keys before ppb reads them.

    transformers (v5) builds, for these values: Mixtral's router and top-k over
    `num_local_experts` (`MixtralSparseMoeBlock`, a `torch.topk` that fails with no expert);
    DeepSeek-V3's attention always latent (`DeepseekV3Attention`: `kv_a_proj_with_mqa` of
    `kv_lora_rank + qk_rope_head_dim` outputs, `kv_a_layernorm(kv_lora_rank)`); `moe_layer_freq`,
    which transformers does not read, DeepSeek's own modeling_deepseek.py divides by
    (`layer_idx % moe_layer_freq`), so 0 or less is no frequency; Qwen-MoE takes
    `(layer_idx + 1) % decoder_sparse_step` when it has experts and keeps `mlp_only_layers` dense.
    """
    layers_key = "n_layer" if model_type == "gpt2" else "num_hidden_layers"
    layers = f.need(layers_key)
    if layers > limits.LAYERS:  # named as the file writes it
        raise InputError(f.source, layers_key, limits.over(layers, limits.LAYERS, "body layers"))
    if model_type == "mixtral":
        _at_least(f, "num_local_experts", 1, "Mixtral routes every layer's tokens to its experts")
    if model_type == "deepseek_v3":
        _at_least(f, "kv_lora_rank", 1, "DeepSeek-V3's attention is latent (MLA) in every layer")
        _at_least(f, "moe_layer_freq", 1, "every moe_layer_freq-th layer from first_k_dense_replace is MoE")
        _at_least(f, "first_k_dense_replace", 0, "the count of leading dense layers")
    if model_type == "gpt_oss":
        _check_gpt_oss(f, layers)
    if model_type in ("qwen2_moe", "qwen3_moe"):
        _at_least(f, "decoder_sparse_step", 1, "every decoder_sparse_step-th layer is MoE")
        dense = f.get("mlp_only_layers", [], list)
        if len(dense) > limits.LAYERS:
            raise InputError(f.source, "mlp_only_layers", limits.over(len(dense), limits.LAYERS, "entries"))
        for index in dense:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < layers:
                raise InputError(
                    f.source, "mlp_only_layers", f"{shown(index)} is not a layer index (0 to {layers - 1})"
                )


def _check_gpt_oss(f: _Fields, layers: int) -> None:
    """GptOssConfig's `validate_layer_type` (a type per layer, of the types transformers knows) narrowed to the
    two GptOssModel builds a mask for; a sliding layer's mask (masking_utils `create_sliding_window_causal_mask`)
    needs a window of at least one key; a top-k over no expert cannot route."""
    _at_least(f, "num_local_experts", 1, "GPT-OSS routes every layer's tokens to its experts")
    types = f.get("layer_types", None, list)
    if types is not None:
        if len(types) != layers:
            raise InputError(f.source, "layer_types", f"{len(types)} entries for num_hidden_layers {layers}")
        for kind in types:
            if kind not in _GPT_OSS_LAYER_TYPES:
                raise InputError(f.source, "layer_types", f"{shown(kind)} is not sliding_attention or full_attention")
    if "sliding_attention" in _gpt_oss_layer_types(f):
        window = f.raw.get("sliding_window", DEFAULTS["gpt_oss"]["sliding_window"])
        if window is None:
            raise InputError(f.source, "sliding_window", "null, and layer_types has sliding_attention layers")
        _at_least(f, "sliding_window", 1, "a sliding layer's query attends to its sliding_window last keys")


def _spec_error(err: ValidationError, model_type: str, source: str) -> InputError:
    """ModelSpec's complaint in the config.json's words: its keys, never ppb's field names."""
    keys = hf_keys(model_type)
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"] if isinstance(p, str)]
    problem = first["msg"].removeprefix("Value error, ")
    named = re.match(r"(\w+): (.*)", problem)
    if not loc and named and named[1] in ModelSpec.model_fields:
        loc, problem = [named[1]], named[2]
    if not loc:  # a check across fields: the first field its message names
        found = [(m.start(), name) for name in ModelSpec.model_fields if (m := re.search(rf"\b{name}\b", problem))]
        loc = [min(found)[1]] if found else []
    for field, key in keys.items():
        problem = re.sub(rf"\b{field}\b", key, problem)
    where = ".".join(keys.get(part, part) for part in loc) or None
    if first["type"] not in ("value_error", "missing") and "input" in first:
        problem = f"{problem} (got {shown(first['input'])})"
    return InputError(source, where, problem)


# Attributes of the config classes within two edits of a field ppb reads (transformers 5.25's
# DeepseekV3Config: head_dim and qk_head_dim, derived from v_head_dim and qk_*_head_dim): no typos.
_NOT_MISSPELT: dict[str, tuple[str, ...]] = {"deepseek_v3": ("head_dim", "qk_head_dim")}


def _check_misspelt(fields: _Fields, raw: Mapping[str, Any], model_type: str) -> None:
    """A key the file has within two edits of a field ppb reads and the file lacks (`num_hidden_layer`):
    transformers keeps it as an attribute of its own and takes the class default for the field, so the
    model planned would silently be another. Refused, naming both and the default."""
    absent = [name for name in fields.asked if name not in fields.raw]
    if not absent:
        return
    aliases = ALIASES.get(model_type, {})
    # a file's key for an absent field may be its attribute_map name (Qwen3-MoE's num_experts)
    absent += [alias for alias, name in aliases.items() if name in absent and alias not in raw]
    for key in raw:
        if key in fields.asked or key in aliases or key in _NOT_MISSPELT.get(model_type, ()):
            continue
        meant = misspelt(key, absent)
        if meant is not None:
            default = fields.defaults.get(aliases.get(meant, meant))
            taken = f"the class default {shown(default)}" if default is not None else "no value"
            raise InputError(fields.source, key, f"not a field ppb reads: did you mean {meant}? (without it, {taken})")


def spec_from_hf(raw: Mapping[str, Any], source: str = "config.json") -> ModelSpec:
    """The `ModelSpec` of a parsed HuggingFace config.json."""
    if not isinstance(raw, Mapping):
        raise InputError(source, None, "expected a JSON object")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in _READERS:
        supported = ", ".join(SUPPORTED)
        # transformers' AutoConfig matches model_type exactly ("Unrecognized model" for `Qwen3`): said, not guessed
        hint = did_you_mean(model_type, SUPPORTED) if isinstance(model_type, str) else ""
        raise InputError(source, "model_type", f"{shown(model_type)} is not supported (supported: {supported}){hint}")
    fields = _Fields(raw, source, model_type)
    _check_values(fields, model_type)
    read = _READERS[model_type](fields)
    _check_misspelt(fields, raw, model_type)
    try:
        return ModelSpec(**{k: v for k, v in read.items() if v is not None})
    except ValidationError as err:
        raise _spec_error(err, model_type, source) from None


def read_hf_config(path: str | Path) -> ModelSpec:
    """Read and map a HuggingFace config.json file."""
    return spec_from_hf(read_json(path), str(Path(path)))
