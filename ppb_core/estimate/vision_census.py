"""The census of a vision encoder block, set against the formulas (`ppb_core.memory.activations.encoder_terms`).

`python -m ppb_core.estimate.vision_census CONFIG.json --images N HxW [--attention sdpa|eager] [--layer L]`
builds the tower of a vision-language (or vision) config.json with transformers on the CPU, runs
it once on N images to catch what it hands block L (the hidden states, the images' or windows'
boundaries, the rotary tables), then records that block's forward as `ppb_core.census.measure`
records a decoder layer: the unique storages autograd keeps, the block's input counted once,
parameters and what the tower computes once for every block left out. Each switch setting's kept
bytes (the census attribution's switches) are printed next to what the formulas give the same
block at tp 1, one sample of the N images.

Everything that imports torch or transformers is imported when called.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppb_core import limits
from ppb_core.census.attribution import attribute, kept_storages
from ppb_core.census.measure import DTYPES, LayerInputs, record_inputs, require_torch
from ppb_core.config.hf_vision import VISION_LANGUAGE_TYPES, vision_spec_from_hf
from ppb_core.config.spec import VisionSpec
from ppb_core.config.vision import VisionSequence, vision_sequence
from ppb_core.errors import InputError, shown
from ppb_core.io import read_json
from ppb_core.memory.activations import encoder_setup, encoder_terms, full_recompute_terms, kept
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import EncoderBodyKind, vision_kinds
from ppb_core.model.switches import HYPER_SELECTIVE_REC_OP, normalized

# The settings compared: nothing recomputed, each switch acting on a vision block alone, HyperParallel's
# selective policy, and full recompute (None).
SETTINGS: dict[str, tuple[str, ...] | None] = {
    "NONE": (),
    "normOp": ("normOp",),
    "ffAct": ("ffAct",),
    "attBMM": ("attBMM",),
    "softmax": ("softmax",),
    "headCast": ("headCast",),
    "policy": tuple(name for name, state in HYPER_SELECTIVE_REC_OP.items() if not state),
    "FULL": None,
}

# transformers' tower class and config class of each family.
_TOWERS: dict[str, tuple[str, str, str]] = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VisionTransformerPretrainedModel", "Qwen2VLVisionConfig"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VisionTransformerPretrainedModel", "Qwen2_5_VLVisionConfig"),
    "clip": ("clip", "CLIPVisionModel", "CLIPVisionConfig"),
    "siglip": ("siglip", "SiglipVisionModel", "SiglipVisionConfig"),
}


@dataclass(frozen=True)
class BlockComparison:
    """Kept bytes of one encoder block for one sample, census and formulas, per setting."""

    kind: str
    tokens: int
    census: dict[str, int]
    formulas: dict[str, float]

    def ratio(self, setting: str) -> float:
        return self.census[setting] / self.formulas[setting]


def _vision_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The tower's own config dict (a vision-language config.json's `vision_config`, or the file)."""
    if raw.get("model_type") in (*VISION_LANGUAGE_TYPES, "clip", "siglip"):
        vision = dict(raw.get("vision_config") or {})
        if raw.get("model_type") in ("llava", "llava_next") and not vision:
            vision = {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096}
            vision.update(patch_size=14, image_size=336, num_hidden_layers=24, num_attention_heads=16)
        return vision
    return dict(raw)


def build_tower(raw: Mapping[str, Any], spec: VisionSpec, layer: int, attention: str, dtype: str) -> tuple[Any, Any]:
    """The tower, cut after block *layer*, in *dtype*, in training mode on the CPU; and its blocks."""
    torch = require_torch()
    package, model_class, config_class = _TOWERS[spec.family]
    modeling = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    configuration = importlib.import_module(f"transformers.models.{package}.configuration_{package}")
    fields = {k: v for k, v in _vision_config(raw).items() if k not in ("model_type", "architectures")}
    if spec.family in ("qwen2_vl", "qwen2_5_vl"):
        fields["depth"] = layer + 1
        if spec.family == "qwen2_5_vl":
            fields["fullatt_block_indexes"] = [i for i in spec.full_attention_layers if i <= layer]
    else:
        fields["num_hidden_layers"] = layer + 1
    config = getattr(configuration, config_class)(**fields)
    config._attn_implementation = attention
    before = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, DTYPES[dtype]))
    try:
        tower = getattr(modeling, model_class)(config)
    finally:
        torch.set_default_dtype(before)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in tower.parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype).mul_(0.02))
    tower.train()
    blocks = tower.blocks if hasattr(tower, "blocks") else tower.encoder.layers
    return tower, blocks


def _pixels(torch: Any, spec: VisionSpec, sequence: VisionSequence, dtype: Any) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(1)
    if spec.family in ("qwen2_vl", "qwen2_5_vl"):
        rows, columns = sequence.grid
        width = spec.in_channels * spec.temporal_patch_size * spec.patch_size**2
        pixels = torch.randn(sequence.tokens, width, generator=generator).to(dtype)
        grid = torch.tensor([[1, rows, columns]] * sequence.images)
        return {"hidden_states": pixels, "grid_thw": grid}
    side = spec.image_size or 0
    images = torch.randn(sequence.sequences, spec.in_channels, side, side, generator=generator).to(dtype)
    return {"pixel_values": images}


def block_inputs(tower: Any, blocks: Any, layer: int, pixels: Mapping[str, Any]) -> LayerInputs:
    """What the tower hands block *layer*: caught by a hook while the tower runs without gradients."""
    torch = require_torch()
    caught: dict[str, Any] = {}

    def hook(module: Any, args: tuple, kwargs: dict) -> None:
        caught["args"], caught["kwargs"] = args, dict(kwargs)

    handle = blocks[layer].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            tower(**pixels)
    finally:
        handle.remove()
    args, kwargs = caught["args"], caught["kwargs"]
    hidden = args[0] if args else kwargs.pop("hidden_states")
    for name, value in zip(("attention_mask",), args[1:], strict=False):
        kwargs[name] = value
    return LayerInputs(hidden.detach().clone().requires_grad_(True), kwargs)


def census_block(
    raw: Mapping[str, Any],
    images: int,
    height: int,
    width: int,
    *,
    layer: int = 0,
    attention: str = "sdpa",
    dtype: str = "bf16",
    source: str = "config.json",
) -> BlockComparison:
    """Census and formulas of vision block *layer* for one sample of *images* images of height × width."""
    torch = require_torch()
    spec = vision_spec_from_hf(raw, source)
    if not 0 <= layer < spec.num_layers:
        raise InputError(source, "layer", f"{layer} is not a block of the tower's {spec.num_layers}")
    if min(images, height, width) < 1:
        raise InputError(source, "images", f"N HxW must be positive, got {images} {height}x{width}")
    try:
        sequence = vision_sequence(spec, images, height, width)
    except ValueError as err:
        raise InputError(source, "images", str(err)) from None
    if sequence.tokens > limits.SEQUENCE:
        raise InputError(source, "images", limits.over(sequence.tokens, limits.SEQUENCE, "tokens a sample"))
    tower, blocks = build_tower(raw, spec, layer, attention, dtype)
    inputs = block_inputs(tower, blocks, layer, _pixels(torch, spec, sequence, getattr(torch, DTYPES[dtype])))
    graph = record_inputs(blocks[layer], inputs)
    attribution = attribute(graph)
    census = {
        name: sum(graph.storages[sid].nbytes for sid in kept_storages(graph, attribution, setting))
        for name, setting in SETTINGS.items()
    }
    _, bodies, _ = vision_kinds(spec, sequence)
    return BlockComparison(bodies[layer].name, sequence.tokens, census, formula_bytes(bodies[layer], attention, dtype))


def formula_bytes(kind: EncoderBodyKind, attention: str, dtype: str) -> dict[str, float]:
    """What the formulas keep of *kind* for one sample at tp 1, per setting."""
    byte_width = {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]
    setup = encoder_setup(kind, MemorySetup(seq_length=1, dtype_bytes=byte_width, flash_attention=attention != "eager"))
    terms = encoder_terms(kind, setup)
    result = {}
    for name, setting in SETTINGS.items():
        chosen = (
            full_recompute_terms(kind, setup) if setting is None else kept(terms, normalized(dict.fromkeys(setting, 0)))
        )
        result[name] = sum(t.bytes for t in chosen)
    return result


def report(comparison: BlockComparison) -> str:
    lines = [
        f"{comparison.kind}: {comparison.tokens} tokens, bytes one sample keeps",
        "  setting      census    formulas  ratio",
    ]
    for name in SETTINGS:
        c, f = comparison.census[name], comparison.formulas[name]
        lines.append(f"  {name:<9} {c:>11,} {f:>11,.0f}  {c / f:.4f}")
    return "\n".join(lines)


def _images(value: Sequence[str]) -> tuple[int, int, int]:
    """`--images N HxW` (or `N S` for S×S): positive integers, else one line naming the option."""
    count, size = value
    height, _, width = size.partition("x")
    try:
        numbers = int(count), int(height), int(width or height)
    except ValueError:
        raise InputError(None, "--images", f"N HxW of integers, got {shown(count)} {shown(size)}") from None
    return numbers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppb_core.estimate.vision_census", description=__doc__)
    parser.add_argument("config", help="a vision-language or vision config.json")
    parser.add_argument("--images", nargs=2, metavar=("N", "HxW"), default=["1", "448x448"])
    parser.add_argument("--layer", type=int, default=0, help="the block to measure (default 0)")
    parser.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    args = parser.parse_args(argv)
    try:
        count, height, width = _images(args.images)
        raw = read_json(Path(args.config))
        comparison = census_block(
            raw, count, height, width, layer=args.layer, attention=args.attention, dtype=args.dtype, source=args.config
        )
    except (InputError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report(comparison))
    return 0


if __name__ == "__main__":
    sys.exit(main())
