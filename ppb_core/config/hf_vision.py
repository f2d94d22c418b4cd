"""Vision-language `config.json` files: the vision tower as a `VisionSpec`, the language model as a config.json.

Each architecture is read as transformers 5 builds it (its configuration class's defaults and its
modeling file's modules), citing the class that decides each field:

* `qwen2_vl` (`Qwen2VLVisionConfig`, `Qwen2VisionTransformerPretrainedModel`): Conv3d patch
  embedding without bias, LayerNorm blocks with a fused qkv projection, 2D rotary positions and an
  fc1/fc2 MLP of width `embed_dim·mlp_ratio`, then `PatchMerger` (LayerNorm `ln_q`, then
  Linear(4·embed_dim → 4·embed_dim) – GELU – Linear(→ hidden_size) over 2×2 patches).
* `qwen2_5_vl` (`Qwen2_5_VLVisionConfig`, `Qwen2_5_VisionTransformerPretrainedModel`): RMSNorm
  blocks with a gated MLP with biases, window attention except in `fullatt_block_indexes`, and
  the merger with an RMSNorm `ln_q`, projecting to `out_hidden_size`.
* `clip_vision_model` (`CLIPVisionConfig`, `CLIPVisionModel`): class token and learned
  positions, `pre_layrnorm`, LayerNorm blocks with q/k/v/out projections, `post_layernorm`.
* `siglip_vision_model` (`SiglipVisionConfig`, `SiglipVisionModel`): Conv2d with bias, learned
  positions without class token, `post_layernorm`, and the attention-pooling head when
  `vision_use_head`.
* `llava` / `llava_next` (`LlavaConfig`, `LlavaNextConfig`): a CLIP or SigLIP tower
  (`vision_config`, CLIP-L/14-336 when absent), `LlavaMultiModalProjector` (Linear – act –
  Linear, from the tower's width times the feature layers read to the language model's),
  and for LLaVA-NeXT the learned `image_newline` and the any-resolution crops.

A `clip` or `siglip` config.json (both towers) is read for its `vision_config`. The language
model of a vision-language config.json is handed back as a config.json of its own
(`text_part`) for `ppb_core.config.hf`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ppb_core.config.hf import _Fields, spec_from_hf
from ppb_core.config.spec import ModelSpec, VisionSpec
from ppb_core.errors import InputError
from ppb_core.io import read_json

# Architectures holding a vision tower and a language model (a run names one part each).
VISION_LANGUAGE_TYPES: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "llava", "llava_next")
# Architectures holding a vision tower alone (or, for clip and siglip, beside a text tower ppb leaves out).
VISION_TYPES: tuple[str, ...] = ("clip_vision_model", "siglip_vision_model", "clip", "siglip")
PARTS: tuple[str, ...] = ("vision", "text")

# transformers' activation names (ACT2FN) as the vision formulas tell them apart.
_ACTIVATIONS = {
    "quick_gelu": "quick_gelu",  # x·sigmoid(1.702x), unfused: keeps the sigmoid and the product
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
}

# LlavaConfig / LlavaNextConfig: the tower built when the config.json gives no vision_config.
_LLAVA_DEFAULT_TOWER = {
    "model_type": "clip_vision_model",
    "intermediate_size": 4096,
    "hidden_size": 1024,
    "patch_size": 14,
    "image_size": 336,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
}
# LlavaNextConfig.__post_init__'s default crops, (height, width).
_LLAVA_NEXT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))


def _sub(f: _Fields, name: str) -> _Fields:
    value = f.raw.get(name)
    if value is None:
        return _Fields({}, f.source)
    if not isinstance(value, Mapping):
        raise InputError(f.source, name, f"expected an object, got {value!r}")
    return _Fields(value, f"{f.source}: {name}")


def _activation(f: _Fields, name: str, default: str) -> str:
    value = f.get(name, default, str)
    if value not in _ACTIVATIONS:
        raise InputError(
            f.source, name, f"unsupported vision activation {value!r} (supported: {', '.join(_ACTIVATIONS)})"
        )
    return _ACTIVATIONS[value]


def _square(f: _Fields, name: str, default: int) -> int:
    """A size transformers allows as an int or a pair; ppb reads square ones."""
    value = f.raw.get(name, default)
    if isinstance(value, list | tuple) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f.source, name, f"expected a positive integer (square), got {value!r}")
    return value


def _qwen2_vl(f: _Fields) -> dict[str, Any]:
    """Qwen2VLVisionConfig defaults: depth 32, embed_dim 1280, hidden_size 3584, quick_gelu, mlp_ratio 4, 16 heads."""
    v = _sub(f, "vision_config")
    width = v.get("embed_dim", 1280)
    ratio = v.get("mlp_ratio", 4, float)
    merge = v.get("spatial_merge_size", 2)
    return {
        "family": "qwen2_vl",
        "hidden_size": width,
        "num_layers": v.get("depth", 32),
        "num_attention_heads": v.get("num_heads", 16),
        "intermediate_size": int(width * ratio),  # Qwen2VLVisionBlock: int(embed_dim * mlp_ratio)
        "activation": _activation(v, "hidden_act", "quick_gelu"),
        "norm": "layernorm",
        "fused_qkv": True,
        "rope": True,
        "in_channels": v.get("in_channels", 3),
        "patch_size": _square(v, "patch_size", 14),
        "temporal_patch_size": v.get("temporal_patch_size", 2),
        "spatial_merge_size": merge,
        "projector": "merger",
        "projector_hidden_size": width * merge**2,
        "out_hidden_size": v.get("hidden_size", 3584),
    }


def _qwen2_5_vl(f: _Fields) -> dict[str, Any]:
    """Qwen2_5_VLVisionConfig defaults: depth 32, hidden_size 3584, intermediate 3420, 16 heads, windows of 112."""
    v = _sub(f, "vision_config")
    width = v.get("hidden_size", 3584)
    merge = v.get("spatial_merge_size", 2)
    full = v.raw.get("fullatt_block_indexes", [7, 15, 23, 31])
    if not isinstance(full, list | tuple) or not all(isinstance(i, int) and not isinstance(i, bool) for i in full):
        raise InputError(v.source, "fullatt_block_indexes", f"expected a list of layer indices, got {full!r}")
    return {
        "family": "qwen2_5_vl",
        "hidden_size": width,
        "num_layers": v.get("depth", 32),
        "num_attention_heads": v.get("num_heads", 16),
        "intermediate_size": v.get("intermediate_size", 3420),
        # Qwen2_5_VLMLP gates whatever hidden_act is: gate_proj, up_proj, down_proj, all with biases.
        "activation": "swiglu",
        "norm": "rmsnorm",
        "fused_qkv": True,
        "rope": True,
        "in_channels": v.get("in_channels", 3),
        "patch_size": _square(v, "patch_size", 14),
        "temporal_patch_size": v.get("temporal_patch_size", 2),
        "spatial_merge_size": merge,
        "window_size": v.get("window_size", 112),
        "full_attention_layers": tuple(full),
        "projector": "merger",
        "projector_hidden_size": width * merge**2,
        "out_hidden_size": v.get("out_hidden_size", 3584),
    }


def _clip(v: _Fields) -> dict[str, Any]:
    """CLIPVisionConfig defaults: 768 wide, 12 layers of 12 heads, 224-pixel images in 32-pixel patches, quick_gelu."""
    return {
        "family": "clip",
        "hidden_size": v.get("hidden_size", 768),
        "num_layers": v.get("num_hidden_layers", 12),
        "num_attention_heads": v.get("num_attention_heads", 12),
        "intermediate_size": v.get("intermediate_size", 3072),
        "activation": _activation(v, "hidden_act", "quick_gelu"),
        "norm": "layernorm",
        "attention_dropout": v.get("attention_dropout", 0.0, float),
        "in_channels": v.get("num_channels", 3),
        "patch_size": _square(v, "patch_size", 32),
        "image_size": _square(v, "image_size", 224),
        "class_token": True,
        "learned_positions": True,
        "pre_norm": True,
        "post_norm": True,
    }


def _siglip(v: _Fields) -> dict[str, Any]:
    """SiglipVisionConfig defaults: 768 wide, 12 layers of 12 heads, 224-pixel images in 16-pixel patches."""
    return {
        "family": "siglip",
        "hidden_size": v.get("hidden_size", 768),
        "num_layers": v.get("num_hidden_layers", 12),
        "num_attention_heads": v.get("num_attention_heads", 12),
        "intermediate_size": v.get("intermediate_size", 3072),
        "activation": _activation(v, "hidden_act", "gelu_pytorch_tanh"),
        "norm": "layernorm",
        "attention_dropout": v.get("attention_dropout", 0.0, float),
        "in_channels": v.get("num_channels", 3),
        "patch_size": _square(v, "patch_size", 16),
        "patch_bias": True,
        "image_size": _square(v, "image_size", 224),
        "learned_positions": True,
        "post_norm": True,
        "pooling_head": v.get("vision_use_head", True, bool),
    }


def _tower(v: _Fields) -> dict[str, Any]:
    """A CLIP or SigLIP vision config, by its own model_type."""
    model_type = v.get("model_type", "clip_vision_model", str)
    if model_type == "clip_vision_model":
        return _clip(v)
    if model_type == "siglip_vision_model":
        return _siglip(v)
    raise InputError(
        v.source, "model_type", f"{model_type!r}: ppb reads clip_vision_model and siglip_vision_model towers"
    )


def _llava(f: _Fields, next_: bool) -> dict[str, Any]:
    """LlavaConfig: the tower, then LlavaMultiModalProjector (and LLaVA-NeXT's newline and crops)."""
    v = _sub(f, "vision_config") if f.raw.get("vision_config") is not None else _Fields(_LLAVA_DEFAULT_TOWER, f.source)
    fields = _tower(v)
    layer = f.raw.get("vision_feature_layer", -2)
    layers = layer if isinstance(layer, list) else [layer]
    if not layers or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        raise InputError(f.source, "vision_feature_layer", f"expected a layer index or a list of them, got {layer!r}")
    depth = fields["num_layers"]
    # hidden_states holds the embedding output and each layer's: index -k is layer depth - k + 1's output.
    if any(not -(depth + 1) <= i <= depth for i in layers):
        raise InputError(f.source, "vision_feature_layer", f"{layer!r} is outside the tower's {depth} layers")
    strategy = f.get("vision_feature_select_strategy", "default", str)
    if strategy not in ("default", "full"):
        raise InputError(f.source, "vision_feature_select_strategy", f"expected default or full, got {strategy!r}")
    text = _sub(f, "text_config")
    fields.update(
        projector="mlp",
        projector_hidden_size=text.need("hidden_size"),
        out_hidden_size=text.need("hidden_size"),
        projector_bias=f.get("multimodal_projector_bias", True, bool),
        feature_layers=tuple(layers),
        keep_class_token=strategy == "full",
    )
    if f.get("projector_hidden_act", "gelu", str) not in ("gelu", "gelu_pytorch_tanh", "gelu_new"):
        raise InputError(f.source, "projector_hidden_act", "ppb reads GELU projectors")
    if next_:
        pinpoints = f.raw.get("image_grid_pinpoints") or [list(p) for p in _LLAVA_NEXT_PINPOINTS]
        if not isinstance(pinpoints, list) or not all(
            isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(x, int) and x > 0 for x in p)
            for p in pinpoints
        ):
            raise InputError(f.source, "image_grid_pinpoints", f"expected [[height, width], ...], got {pinpoints!r}")
        fields.update(image_newline=True, grid_pinpoints=tuple(tuple(p) for p in pinpoints))
    return fields


def _model_type(raw: Mapping[str, Any], source: str) -> str:
    if not isinstance(raw, Mapping):
        raise InputError(source, None, "expected a JSON object")
    model_type = raw.get("model_type")
    if model_type not in (*VISION_LANGUAGE_TYPES, *VISION_TYPES):
        supported = ", ".join((*VISION_LANGUAGE_TYPES, *VISION_TYPES))
        raise InputError(source, "model_type", f"{model_type!r} has no vision tower ppb reads (supported: {supported})")
    return str(model_type)


def vision_spec_from_hf(raw: Mapping[str, Any], source: str = "config.json") -> VisionSpec:
    """The `VisionSpec` of a parsed config.json holding a vision tower."""
    model_type = _model_type(raw, source)
    f = _Fields(raw, source)
    if model_type == "qwen2_vl":
        fields = _qwen2_vl(f)
    elif model_type == "qwen2_5_vl":
        fields = _qwen2_5_vl(f)
    elif model_type in ("llava", "llava_next"):
        fields = _llava(f, model_type == "llava_next")
    elif model_type in ("clip", "siglip"):
        tower = _sub(f, "vision_config")
        fields = (_clip if model_type == "clip" else _siglip)(tower)
    else:
        fields = _tower(f)
    try:
        return VisionSpec(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise InputError(source, where, first["msg"].removeprefix("Value error, ")) from None


def text_part(raw: Mapping[str, Any], source: str = "config.json") -> dict[str, Any]:
    """The language model of a vision-language config.json, as a config.json of its own.

    Qwen2-VL and Qwen2.5-VL hub files keep the decoder's fields at the top level (transformers 5
    moves them into `text_config`); their decoder is Qwen2's (q/k/v biases, gated MLP). LLaVA's
    `text_config` names its own model_type (llama when absent). Tied embeddings follow the
    configs' `__post_init__`: the top-level flag, or the text config's where that one is set.
    """
    model_type = _model_type(raw, source)
    if model_type not in VISION_LANGUAGE_TYPES:
        raise InputError(source, "model_type", f"{model_type!r} has no language model: use part: vision")
    nested = raw.get("text_config")
    if nested is not None and not isinstance(nested, Mapping):
        raise InputError(source, "text_config", f"expected an object, got {nested!r}")
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        text = dict(nested) if nested else {k: v for k, v in raw.items() if k not in ("vision_config", "text_config")}
        text["model_type"] = "qwen2"
    else:
        text = dict(nested or {})
        text.setdefault("model_type", "llama")
    tied = bool(raw.get("tie_word_embeddings", False)) or bool(text.get("tie_word_embeddings", False))
    text["tie_word_embeddings"] = tied
    return text


def spec_of_part(raw: Mapping[str, Any], part: str | None, source: str = "config.json") -> ModelSpec | VisionSpec:
    """The spec a run's sub-model takes from a config.json: its vision tower, its language model, or the file whole."""
    model_type = raw.get("model_type") if isinstance(raw, Mapping) else None
    if part is None:
        if model_type in VISION_LANGUAGE_TYPES:
            raise InputError(source, "part", f"a {model_type} config.json holds two models: set part: vision or text")
        if model_type in VISION_TYPES:
            return vision_spec_from_hf(raw, source)
        return spec_from_hf(raw, source)
    if part not in PARTS:
        raise InputError(source, "part", f"expected vision or text, got {part!r}")
    if part == "vision":
        return vision_spec_from_hf(raw, source)
    return spec_from_hf(text_part(raw, source), f"{source}: text")


def read_part(path: str | Path, part: str | None = None) -> ModelSpec | VisionSpec:
    """Read a config.json and take the part a sub-model names (`spec_of_part`)."""
    return spec_of_part(read_json(path), part, str(Path(path)))
