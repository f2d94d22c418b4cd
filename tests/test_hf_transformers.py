"""The HuggingFace reader against the installed transformers: every config.json read as transformers reads it.

For each supported model type, the fields ppb reads must equal the attributes of transformers'
own config class built from the same JSON: with nothing but the model type (every default), with
fields named by the class's attribute_map aliases, and for every shipped config.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ppb_core.config.hf import ALIASES, DEFAULTS, SUPPORTED, spec_from_hf
from ppb_core.config.hf_vision import text_part
from ppb_core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
EXPERTS = {"mixtral": "num_local_experts", "qwen3_moe": "num_local_experts", "qwen2_moe": "num_experts"}
ACTIVATIONS = {"silu": "swiglu", "gelu_new": "gelu"}


def _transformers(raw: dict):
    fields = {k: v for k, v in raw.items() if k != "model_type"}
    return CONFIG_MAPPING[raw["model_type"]](**fields)


def _expected(raw: dict) -> dict:
    """What transformers' config says of the fields ppb reads, in ppb's names."""
    mt, c = raw["model_type"], _transformers(raw)
    found = {
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "tied_embeddings": c.tie_word_embeddings,
        "max_position_embeddings": c.max_position_embeddings,
    }
    if mt == "gpt2":
        found.update(
            intermediate_size=c.n_inner or 4 * c.n_embd,
            activation=ACTIVATIONS[c.activation_function],
            attention_dropout=c.attn_pdrop,
            hidden_dropout=c.resid_pdrop,
        )
        return found
    found.update(
        kv_heads=c.num_key_value_heads,
        intermediate_size=c.intermediate_size,
        # GptOssExperts._apply_gate: the clamped quick-GEGLU, whatever hidden_act says
        activation="quick_geglu" if mt == "gpt_oss" else ACTIVATIONS[c.hidden_act],
        attention_dropout=c.attention_dropout,
    )
    if mt == "gpt_oss":
        windowed = tuple(i for i, kind in enumerate(c.layer_types) if kind == "sliding_attention")
        found.update(
            num_experts=c.num_local_experts,
            experts_per_token=c.num_experts_per_tok,
            moe_intermediate_size=c.intermediate_size,
            window_layers=windowed,
            sliding_window=c.sliding_window if windowed else 0,
            attention_bias=c.attention_bias,
            attention_output_bias=c.attention_bias,
            # GptOssExperts._apply_gate clamps at swiglu_limit; the rotary's YaRN factor (rope_scaling)
            activation_clamp=c.swiglu_limit,
            rope_yarn_factor=c.rope_scaling["factor"] if c.rope_scaling.get("rope_type") == "yarn" else 0.0,
        )
    if mt != "deepseek_v3":
        # the attention modules' rule: getattr(config, "head_dim", None) or hidden_size // num_attention_heads
        found["attention_head_dim"] = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if mt in EXPERTS:
        found.update(num_experts=getattr(c, EXPERTS[mt]), experts_per_token=c.num_experts_per_tok)
        found["moe_intermediate_size"] = c.intermediate_size if mt == "mixtral" else c.moe_intermediate_size
    if mt == "qwen2_moe":
        found["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size or None
    if mt == "deepseek_v3":
        found.update(
            num_experts=c.n_routed_experts,
            experts_per_token=c.num_experts_per_tok,
            moe_intermediate_size=c.moe_intermediate_size,
            shared_experts=c.n_shared_experts,
            first_dense_layers=c.first_k_dense_replace,
            q_lora_rank=c.q_lora_rank or 0,
            kv_lora_rank=c.kv_lora_rank,
            qk_nope_head_dim=c.qk_nope_head_dim,
            qk_rope_head_dim=c.qk_rope_head_dim,
            v_head_dim=c.v_head_dim,
            mtp_layers=c.num_nextn_predict_layers,
        )
    return found


def _read(raw: dict) -> dict:
    spec = spec_from_hf(raw)
    return {name: getattr(spec, name) for name in _expected(raw)}


@pytest.mark.parametrize("model_type", SUPPORTED)
def test_every_default_is_transformers(model_type):
    raw = {"model_type": model_type}
    assert _read(raw) == _expected(raw)


def test_the_default_tables_name_only_fields_the_classes_have():
    for model_type, defaults in DEFAULTS.items():
        config = CONFIG_MAPPING[model_type]()
        for name, value in defaults.items():
            assert getattr(config, name) == value, (model_type, name)
    for model_type, aliases in ALIASES.items():
        assert CONFIG_MAPPING[model_type].attribute_map == aliases


@pytest.mark.parametrize(
    "raw",
    [
        {"model_type": "qwen3_moe", "num_local_experts": 64, "num_experts_per_tok": 4},  # as transformers 5 writes it
        {"model_type": "qwen3_moe", "num_experts": 64, "num_experts_per_tok": 4},  # as transformers 4 wrote it
        {"model_type": "mixtral", "num_experts": 4},
        {"model_type": "deepseek_v3", "num_local_experts": 32, "num_mtp_layers": 0},
        {"model_type": "gpt2", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3},
        {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "attn_pdrop": 0.0},
        {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8},
        {"model_type": "qwen3", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2},
        {"model_type": "qwen2_moe", "shared_expert_intermediate_size": 0},
        {"model_type": "deepseek_v3", "q_lora_rank": None},
        {"model_type": "gpt_oss", "num_experts": 32, "num_hidden_layers": 24},  # gpt-oss-20b's counts
        {"model_type": "gpt_oss", "layer_types": ["full_attention", "sliding_attention"], "num_hidden_layers": 2},
        {
            "model_type": "gpt_oss",
            "layer_types": ["full_attention"] * 2,
            "num_hidden_layers": 2,
            "sliding_window": None,
        },
        {"model_type": "gpt_oss", "swiglu_limit": 10.0, "rope_scaling": {"rope_type": "yarn", "factor": 8.0}},
        {"model_type": "gpt_oss", "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
    ],
    ids=lambda raw: "-".join(f"{k}={v}" for k, v in raw.items()),
)
def test_aliases_and_partial_files_read_as_transformers_reads_them(raw):
    assert _read(raw) == _expected(raw)


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "hf").glob("*.json")), ids=lambda p: p.stem)
def test_shipped_config_files(path):
    raw = json.loads(path.read_text())
    if raw["model_type"] not in SUPPORTED:  # a vision-language file: its language model's part
        raw = text_part(raw, path.name)
    assert _read(raw) == _expected(raw)


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        # GptOssConfig's validate_layer_type refuses both; GptOssModel masks only sliding and full layers
        ({"model_type": "gpt_oss", "layer_types": ["full_attention"] * 3}, "layer_types: 3 entries for"),
        ({"model_type": "gpt_oss", "num_hidden_layers": 1, "layer_types": ["linear_attention"]}, "'linear_attention'"),
        ({"model_type": "gpt_oss", "sliding_window": None}, "sliding_window: null, and layer_types has sliding"),
        ({"model_type": "gpt_oss", "sliding_window": 0}, "sliding_window: must be at least 1"),
        ({"model_type": "gpt_oss", "swiglu_limit": -1}, "swiglu_limit: Input should be greater than or equal to 0"),
        ({"model_type": "gpt_oss", "rope_scaling": "yarn"}, "rope_scaling: expected a mapping"),
        ({"model_type": "gpt_oss", "rope_scaling": {"rope_type": "yarn", "factor": 0}}, "rope_scaling.factor:"),
    ],
)
def test_gpt_oss_layer_types_are_checked(raw, line):
    with pytest.raises(InputError) as caught:
        spec_from_hf(raw, "config.json")
    assert line in caught.value.line()


def test_an_alias_and_its_attribute_must_agree():
    with pytest.raises(InputError) as caught:
        spec_from_hf({"model_type": "qwen3_moe", "num_experts": 64, "num_local_experts": 32}, "hf.json")
    assert caught.value.field == "num_experts" and "name the same field" in caught.value.problem
    # the same count under both names is one field
    assert spec_from_hf({"model_type": "qwen3_moe", "num_experts": 64, "num_local_experts": 64}).num_experts == 64


@pytest.mark.parametrize("model_type", SUPPORTED)
def test_no_attribute_of_the_config_class_is_taken_for_a_misspelt_field(model_type):
    """Every key transformers writes for the class (`to_dict`, `attribute_map`) is read as a file
    would carry it, every field ppb reads absent: none is refused as a misspelling of one."""
    config = CONFIG_MAPPING[model_type]()
    for key in sorted({*config.to_dict(), *type(config).attribute_map}):
        if key == "model_type":
            continue
        value = config.to_dict().get(key)
        raw = {"model_type": model_type, key: value}
        try:
            spec_from_hf(raw, "config.json")
        except InputError as err:
            assert "did you mean" not in err.problem, (key, err.line())


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        # LlamaConfig's default 32 layers were planned for a 48-layer file with one letter missing
        (
            {"model_type": "llama", "num_hidden_layer": 48},
            "config.json: num_hidden_layer: not a field ppb reads: did you mean num_hidden_layers? "
            "(without it, the class default 32)",
        ),
        (
            {"model_type": "mixtral", "num_local_expert": 16},
            "did you mean num_local_experts? (without it, the class default 8)",
        ),
        ({"model_type": "qwen2", "intermediate_sizes": 8192}, "did you mean intermediate_size?"),
        # Qwen3-MoE's file key is num_experts (Qwen3MoeConfig's attribute_map name for num_local_experts):
        # a letter off it, the class default 128 experts were planned without a word
        (
            {"model_type": "qwen3_moe", "num_expert": 64},
            "config.json: num_expert: not a field ppb reads: did you mean num_experts? (without it, the class "
            "default 128)",
        ),
    ],
)
def test_a_misspelt_field_is_one_line(raw, line):
    with pytest.raises(InputError) as caught:
        spec_from_hf(raw, "config.json")
    assert line in caught.value.line()
