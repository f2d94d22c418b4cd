"""HuggingFace `config.json` files read into a `ModelSpec`, the fields each architecture really uses.

A config.json is read as `transformers` reads it (transformers 5.24, each model type's
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

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ppb_core.config.spec import ModelSpec
from ppb_core.errors import InputError
from ppb_core.io import read_json

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt2")

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
}
# attribute_map: a name a config.json may use -> the attribute it sets (transformers 5.24).
ALIASES: dict[str, dict[str, str]] = {
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
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
                    source, alias, f"{resolved[alias]!r} and {attribute} {resolved[attribute]!r} name the same field"
                )
            resolved[attribute] = resolved[alias]
        self.raw = resolved

    def need(self, name: str, kind: type = int) -> Any:
        """A field the architecture needs: the file's, else the class default; null is refused."""
        value = self.raw[name] if name in self.raw else self.defaults.get(name)
        if value is None:
            said = "null" if name in self.raw else "missing"
            raise InputError(self.source, name, f"{said}, and this architecture needs it")
        return self._typed(name, value, kind)

    def get(self, name: str, default: Any, kind: type = int) -> Any:
        """A field the file may leave out (the class default) or set to null (*default*: what null means)."""
        value = self.raw[name] if name in self.raw else self.defaults.get(name, default)
        return default if value is None else self._typed(name, value, kind)

    def _typed(self, name: str, value: Any, kind: type) -> Any:
        if kind is bool:
            if not isinstance(value, bool):
                raise InputError(self.source, name, f"expected true or false, got {value!r}")
            return value
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(self.source, name, f"expected an integer, got {value!r}")
            return value
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(self.source, name, f"expected a number, got {value!r}")
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                raise InputError(self.source, name, f"expected a string, got {value!r}")
            return value
        if kind is list:
            if not isinstance(value, list):
                raise InputError(self.source, name, f"expected a list, got {value!r}")
            return value
        raise TypeError(kind)

    def activation(self, name: str) -> str:
        value = self.need(name, str)
        if value not in _ACTIVATIONS:
            raise InputError(self.source, name, f"unsupported activation {value!r}")
        return _ACTIVATIONS[value]


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
        "activation": f.activation("hidden_act"),
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
        "activation": f.activation("hidden_act"),
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
        "intermediate_size": inner or 4 * hidden,
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
}


def spec_from_hf(raw: Mapping[str, Any], source: str = "config.json") -> ModelSpec:
    """The `ModelSpec` of a parsed HuggingFace config.json."""
    if not isinstance(raw, Mapping):
        raise InputError(source, None, "expected a JSON object")
    model_type = raw.get("model_type")
    if model_type not in _READERS:
        supported = ", ".join(SUPPORTED)
        raise InputError(source, "model_type", f"{model_type!r} is not supported (supported: {supported})")
    fields = _READERS[model_type](_Fields(raw, source, model_type))
    try:
        return ModelSpec(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise InputError(source, where, first["msg"].removeprefix("Value error, ")) from None


def read_hf_config(path: str | Path) -> ModelSpec:
    """Read and map a HuggingFace config.json file."""
    return spec_from_hf(read_json(path), str(Path(path)))
