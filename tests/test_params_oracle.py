"""Parameter counts against HuggingFace `transformers` on the meta device (the oracle).

For every supported architecture and several configs each (the four shipped ones and small
variants exercising biases, tied embeddings, q/k norms, head_dim, GQA, shared experts, sparse
steps, dense-first layers, MLA with and without q compression), the HEAD, each BODY kind and the
TAIL counted by ppb at tp = pp = 1 equal the parameters transformers instantiates.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ppb_core.config.hf import spec_from_hf  # noqa: E402
from ppb_core.model.kinds import body_kind, head_kind, tail_kind  # noqa: E402
from ppb_core.model.params import body_params, head_params, mtp_module_params, tail_params  # noqa: E402

pytestmark = pytest.mark.oracle

HF_DIR = Path(__file__).resolve().parents[1] / "configs" / "hf"


def _shipped(name: str) -> dict:
    return json.loads((HF_DIR / name).read_text())


def _small(base: dict, **changes) -> dict:
    raw = copy.deepcopy(base)
    raw.update(changes)
    return raw


_LLAMA_SMALL = {
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
_MIXTRAL_SMALL = {
    "model_type": "mixtral",
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 320,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "hidden_act": "silu",
    "head_dim": 48,
}
_QWEN2_MOE_SMALL = {
    "model_type": "qwen2_moe",
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 384,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 256,
    "num_experts": 6,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "decoder_sparse_step": 2,
    "mlp_only_layers": [3],
    "hidden_act": "silu",
}
_QWEN3_MOE_SMALL = {
    "model_type": "qwen3_moe",
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 384,
    "moe_intermediate_size": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 40,
    "mlp_only_layers": [0],
    "decoder_sparse_step": 1,
    "hidden_act": "silu",
    "attention_bias": False,
}
_DEEPSEEK_SMALL = {
    "model_type": "deepseek_v3",
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 2,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 2,
    "q_lora_rank": 48,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 24,
    "n_group": 2,
    "topk_group": 1,
    "num_nextn_predict_layers": 1,
    "hidden_act": "silu",
}
_GPT_OSS_SMALL = {
    "model_type": "gpt_oss",
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 40,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "sliding_window": 16,
}
_GPT2 = {
    "model_type": "gpt2",
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "activation_function": "gelu_new",
    "n_inner": None,
}

CASES = {
    "llama3-8b": _shipped("llama3-8b.json"),
    "llama-small": _LLAMA_SMALL,
    "llama-bias-tied-headdim": _small(
        _LLAMA_SMALL, attention_bias=True, mlp_bias=True, tie_word_embeddings=True, head_dim=48
    ),
    "mistral-small": _small(_LLAMA_SMALL, model_type="mistral", head_dim=64, num_key_value_heads=4),
    "qwen2.5-7b": _shipped("qwen2.5-7b.json"),
    "qwen2-small-tied": _small(_LLAMA_SMALL, model_type="qwen2", tie_word_embeddings=True),
    "qwen3-small": _small(_LLAMA_SMALL, model_type="qwen3", head_dim=40, tie_word_embeddings=True),
    "qwen3-small-bias": _small(_LLAMA_SMALL, model_type="qwen3", head_dim=32, attention_bias=True),
    "mixtral-8x7b": _shipped("mixtral-8x7b.json"),
    "mixtral-small": _MIXTRAL_SMALL,
    "qwen2-moe-small": _QWEN2_MOE_SMALL,
    "qwen2-moe-no-shared": _small(_QWEN2_MOE_SMALL, shared_expert_intermediate_size=0, decoder_sparse_step=1),
    "qwen3-moe-small": _QWEN3_MOE_SMALL,
    "deepseek-v3": _shipped("deepseek-v3.json"),
    "deepseek-small": _DEEPSEEK_SMALL,
    "deepseek-small-no-q-lora-bias": _small(
        _DEEPSEEK_SMALL, q_lora_rank=None, attention_bias=True, first_k_dense_replace=0
    ),
    "gpt-oss-120b": _shipped("gpt-oss-120b.json"),
    "gpt-oss-small": _GPT_OSS_SMALL,
    "gpt-oss-small-no-bias-tied-full": _small(
        _GPT_OSS_SMALL, attention_bias=False, tie_word_embeddings=True, layer_types=["full_attention"] * 3
    ),
    "gpt2": _GPT2,
    "gpt2-inner": _small(_GPT2, n_embd=256, n_head=4, n_layer=2, n_inner=512, n_positions=256),
}


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _instantiate(raw: dict):
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "transformers_version")}
    config = transformers.AutoConfig.for_model(raw["model_type"], **fields)
    with torch.device("meta"):
        return config, transformers.AutoModelForCausalLM.from_config(config)


@pytest.fixture(scope="module", params=sorted(CASES), ids=sorted(CASES))
def case(request):
    raw = CASES[request.param]
    config, model = _instantiate(raw)
    return raw, config, model


def _parts(model, gpt2: bool):
    base = model.transformer if gpt2 else model.model
    head = [base.wte, base.wpe] if gpt2 else [base.embed_tokens]
    layers = list(base.h if gpt2 else base.layers)
    final_norm = base.ln_f if gpt2 else base.norm
    return head, layers, final_norm


def test_head_body_tail_equal_transformers(case):
    raw, _config, model = case
    spec = spec_from_hf(raw)
    gpt2 = raw["model_type"] == "gpt2"
    head, layers, final_norm = _parts(model, gpt2)

    assert head_params(head_kind(spec, spec.vocab_size)).total == sum(_count(m) for m in head)
    for index, layer in enumerate(layers):
        assert body_params(body_kind(spec, index)).total == _count(layer), f"layer {index}"
    tail_hf = _count(final_norm)
    if not spec.tied_embeddings:
        tail_hf += _count(model.lm_head)
    tail = tail_kind(spec, spec.vocab_size)
    mtp = sum(mtp_module_params(tail).total for _ in range(tail.mtp_layers)) if tail.mtp_layers else 0
    assert tail_params(tail).total - mtp == tail_hf
    # Nothing left out: the whole model is HEAD + BODY layers + TAIL (transformers has no MTP).
    assert _count(model) == sum(_count(m) for m in head) + sum(map(_count, layers)) + tail_hf


def test_tied_embeddings_are_one_table(case):
    raw, _config, model = case
    spec = spec_from_hf(raw)
    if spec.tied_embeddings:
        assert model.lm_head.weight is model.get_input_embeddings().weight


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-small"])
def test_mtp_module_is_a_decoder_layer_plus_its_norms_and_projection(name):
    """DeepSeek-V3's MTP module (checkpoint layer 61): enorm, hnorm, eh_proj (2h -> h, no bias), one
    MoE decoder layer, and shared_head.norm; the embedding and output head are the model's own.

    transformers does not build MTP modules, so the decoder layer is built alone and the rest is
    counted by hand: 3 RMSNorm weights of h and a 2h x h matrix = 3h + 2h².
    """
    raw = CASES[name]
    spec = spec_from_hf(raw)
    config = transformers.AutoConfig.for_model("deepseek_v3", **{k: v for k, v in raw.items() if k != "model_type"})
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer

    with torch.device("meta"):
        layer = DeepseekV3DecoderLayer(config, layer_idx=spec.num_layers - 1)
    h = spec.hidden_size
    tail = tail_kind(spec, spec.vocab_size)
    assert mtp_module_params(tail).total == _count(layer) + 3 * h + 2 * h * h
