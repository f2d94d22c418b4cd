"""Vision-language parameter counts against transformers on the meta device (the oracle).

For Qwen2-VL, Qwen2.5-VL, LLaVA (CLIP and SigLIP towers), LLaVA-NeXT, and CLIP and SigLIP
vision configs alone, at several sizes: the vision tower's HEAD (patch embedding), each BODY
(encoder block, window and full attention), its TAIL (post-norm, pooling head, merger or
multi-modal projector), and the language model's HEAD, BODY layers and TAIL, as ppb counts them
at tp = 1, equal the parameters transformers instantiates; and nothing is left out. The configs
are built offline with transformers' own config classes (`AutoConfig.for_model`), no download.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ppb_core.config.hf_vision import spec_of_part  # noqa: E402
from ppb_core.config.vision import vision_sequence  # noqa: E402
from ppb_core.model.kinds import body_kind, head_kind, tail_kind, vision_kinds  # noqa: E402
from ppb_core.model.params import (  # noqa: E402
    body_params,
    head_params,
    patch_embed_params,
    projector_params,
    tail_params,
)

pytestmark = pytest.mark.oracle

HF_DIR = Path(__file__).resolve().parents[1] / "configs" / "hf"

_QWEN2_VL_SMALL = {
    "model_type": "qwen2_vl",
    "vocab_size": 1000,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "vision_config": {"depth": 2, "embed_dim": 128, "hidden_size": 256, "num_heads": 4, "mlp_ratio": 3},
}
# Qwen2-VL-2B-Instruct: the decoder of Qwen2-1.5B (tied), the 675M tower projecting to 1536.
_QWEN2_VL_2B = {
    "model_type": "qwen2_vl",
    "vocab_size": 151936,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "vision_config": {"depth": 32, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16, "mlp_ratio": 4},
}
_QWEN2_5_VL_SMALL = {
    "model_type": "qwen2_5_vl",
    "vocab_size": 1000,
    "hidden_size": 192,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vision_config": {
        "depth": 4,
        "hidden_size": 128,
        "intermediate_size": 200,
        "num_heads": 4,
        "out_hidden_size": 192,
        "fullatt_block_indexes": [1, 3],
    },
}
# Qwen2.5-VL-3B-Instruct: a 36-layer tied decoder of width 2048.
_QWEN2_5_VL_3B = {
    "model_type": "qwen2_5_vl",
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 2048,
        "fullatt_block_indexes": [7, 15, 23, 31],
    },
}
_CLIP_L_336 = {
    "model_type": "clip_vision_model",
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "image_size": 336,
    "patch_size": 14,
}
_LLAMA_SMALL = {
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
}
_SIGLIP_SO400M = {
    "model_type": "siglip_vision_model",
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 384,
    "patch_size": 14,
}


def _shipped(name: str) -> dict:
    return json.loads((HF_DIR / name).read_text())


def _llava(vision: dict | None, text: dict, **fields) -> dict:
    raw = {"model_type": "llava", "text_config": text, **fields}
    if vision is not None:
        raw["vision_config"] = vision
    return raw


VISION_LANGUAGE = {
    "qwen2-vl-small": _QWEN2_VL_SMALL,
    "qwen2-vl-2b": _QWEN2_VL_2B,
    "qwen2.5-vl-small": _QWEN2_5_VL_SMALL,
    "qwen2.5-vl-3b": _QWEN2_5_VL_3B,
    "qwen2.5-vl-7b": _shipped("qwen2.5-vl-7b.json"),
    "llava-1.5-7b": _shipped("llava-1.5-7b.json"),
    "llava-default-tower-small-text": _llava(None, _LLAMA_SMALL),
    "llava-clip-feature-layers": _llava(
        dict(_CLIP_L_336, num_hidden_layers=4, hidden_size=256, intermediate_size=512, num_attention_heads=4),
        _LLAMA_SMALL,
        vision_feature_layer=[-2, -3],
        multimodal_projector_bias=False,
    ),
    "llava-siglip-qwen2": _llava(
        dict(_SIGLIP_SO400M, num_hidden_layers=3, vision_use_head=False),
        dict(_LLAMA_SMALL, model_type="qwen2", tie_word_embeddings=True),
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
    ),
    "llava-next-small": dict(
        _llava(
            dict(_CLIP_L_336, num_hidden_layers=3, hidden_size=128, intermediate_size=256, num_attention_heads=4),
            dict(_LLAMA_SMALL, model_type="mistral", head_dim=32),
        ),
        model_type="llava_next",
    ),
}
TOWERS = {
    "clip-l-336": _CLIP_L_336,
    "clip-default": {"model_type": "clip_vision_model"},
    "siglip-so400m": _SIGLIP_SO400M,
    "siglip-no-head": dict(_SIGLIP_SO400M, num_hidden_layers=2, vision_use_head=False),
    "siglip-pair": {
        "model_type": "siglip",
        "vision_config": {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4},
    },
}


def _count(*modules) -> int:
    return sum(p.numel() for module in modules for p in module.parameters())


def _config(raw: dict):
    fields = {k: v for k, v in copy.deepcopy(raw).items() if k not in ("model_type", "architectures")}
    return transformers.AutoConfig.for_model(raw["model_type"], **fields)


def _tower_kinds(raw: dict):
    spec = spec_of_part(raw, "vision" if raw["model_type"] in VISION_LANGUAGE_TYPES else None)
    side = spec.image_size or 448
    return spec, vision_kinds(spec, vision_sequence(spec, 1, side, side))


VISION_LANGUAGE_TYPES = ("qwen2_vl", "qwen2_5_vl", "llava", "llava_next")


@pytest.fixture(scope="module", params=sorted(VISION_LANGUAGE), ids=sorted(VISION_LANGUAGE))
def vlm(request):
    raw = VISION_LANGUAGE[request.param]
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(_config(raw))
    return raw, model


def _vision_parts(raw: dict, model):
    """(HEAD modules, blocks, TAIL modules) of the tower and projector transformers built."""
    base = model.model
    if raw["model_type"] in ("qwen2_vl", "qwen2_5_vl"):
        visual = base.visual
        return [visual.patch_embed], list(visual.blocks), [visual.merger]
    tower = base.vision_tower
    head = [tower.embeddings] + ([tower.pre_layrnorm] if hasattr(tower, "pre_layrnorm") else [])
    tail = [tower.post_layernorm, base.multi_modal_projector]
    if getattr(tower, "head", None) is not None:
        tail.append(tower.head)
    if hasattr(base, "image_newline"):
        tail.append(torch.nn.ParameterList([base.image_newline]))
    return head, list(tower.encoder.layers), tail


def test_vision_tower_and_projector_equal_transformers(vlm) -> None:
    raw, model = vlm
    _, (head, bodies, tail) = _tower_kinds(raw)
    hf_head, hf_blocks, hf_tail = _vision_parts(raw, model)
    assert patch_embed_params(head).total == _count(*hf_head)
    assert len(bodies) == len(hf_blocks)
    for index, (kind, block) in enumerate(zip(bodies, hf_blocks, strict=True)):
        assert body_params(kind).total == _count(block), f"block {index} ({kind.name})"
    assert projector_params(tail).total == _count(*hf_tail)


def test_language_model_equal_transformers(vlm) -> None:
    raw, model = vlm
    spec = spec_of_part(raw, "text")
    language = model.model.language_model
    assert head_params(head_kind(spec, spec.vocab_size)).total == _count(language.embed_tokens)
    for index, layer in enumerate(language.layers):
        assert body_params(body_kind(spec, index)).total == _count(layer), f"layer {index}"
    tail = _count(language.norm) + (0 if spec.tied_embeddings else _count(model.lm_head))
    assert tail_params(tail_kind(spec, spec.vocab_size)).total == tail
    if spec.tied_embeddings:
        assert model.lm_head.weight is language.embed_tokens.weight


def test_nothing_is_left_out(vlm) -> None:
    """The whole model is the tower's HEAD, blocks and TAIL plus the language model's HEAD, layers and TAIL."""
    raw, model = vlm
    _, (head, bodies, tail) = _tower_kinds(raw)
    text = spec_of_part(raw, "text")
    counted = patch_embed_params(head).total + sum(body_params(k).total for k in bodies)
    counted += projector_params(tail).total
    counted += head_params(head_kind(text, text.vocab_size)).total
    counted += sum(body_params(body_kind(text, i)).total for i in range(text.num_layers))
    counted += tail_params(tail_kind(text, text.vocab_size)).total
    assert counted == _count(model)


def test_window_and_full_blocks_are_both_read() -> None:
    """Qwen2.5-VL's fullatt_block_indexes give full-attention kinds, every other block a window kind."""
    _, (_, bodies, _) = _tower_kinds(_QWEN2_5_VL_3B)
    assert [i for i, kind in enumerate(bodies) if kind.name == "vit_full"] == [7, 15, 23, 31]
    assert {kind.name for kind in bodies} == {"vit_window", "vit_full"}


@pytest.mark.parametrize("name", sorted(TOWERS))
def test_vision_config_alone_equals_transformers(name: str) -> None:
    raw = TOWERS[name]
    config = _config(raw)
    if raw["model_type"] == "siglip":
        config = config.vision_config
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    _, (head, bodies, tail) = _tower_kinds(raw)
    hf_head = [model.embeddings] + ([model.pre_layrnorm] if hasattr(model, "pre_layrnorm") else [])
    assert patch_embed_params(head).total == _count(*hf_head)
    for kind, block in zip(bodies, model.encoder.layers, strict=True):
        assert body_params(kind).total == _count(block)
    assert patch_embed_params(head).total + sum(body_params(k).total for k in bodies) + projector_params(
        tail
    ).total == _count(model)
