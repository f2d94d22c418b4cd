"""A vision tower's sequence: how many patches its encoder runs per sample, and how they attend.

The images a sample holds are resized as the model's image processor resizes them, cut into
patches, and run through the encoder. What attends to what decides the attention's cost and,
without a flash kernel, its memory: each image (Qwen: each frame) attends within itself, and
Qwen2.5-VL's window blocks within windows of `window_size` pixels. Sources, transformers 5:

* Qwen2-VL / Qwen2.5-VL: `smart_resize` (models/qwen2_vl/image_processing_qwen2_vl.py: sides
  rounded to multiples of patch·merge, pixels kept within [min_pixels, max_pixels]); one
  temporal patch per image (the image repeated `temporal_patch_size` times); attention over
  each frame (`get_vision_cu_seqlens`); windows of `window_size/merge/patch` merged tokens a side,
  the last ones cut short (`get_vision_window_index` in vision_utils.py).
* CLIP / SigLIP: a fixed `image_size`, (image/patch)² patches and CLIP's class token.
* LLaVA-NeXT: the crop grid `select_best_resolution` picks from `image_grid_pinpoints`, each crop
  and the whole image resized run as images of their own (`image_size_to_num_patches`); the
  language model receives the base image's features, the crops' unpadded and one newline per row
  (`LlavaNextProcessor._get_number_of_features`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppb_core.config.spec import VisionSpec

# Qwen2VLImageProcessor's defaults (min_pixels 56·56, max_pixels 28·28·1280).
QWEN_MIN_PIXELS = 56 * 56
QWEN_MAX_PIXELS = 28 * 28 * 1280


@dataclass(frozen=True)
class VisionSequence:
    """Per sample: the encoder's tokens, the attention pairs of its blocks, and what reaches the language model."""

    images: int
    grid: tuple[int, int]  # patches per image (Qwen) or per crop (CLIP/SigLIP): rows, columns
    sequences: int  # attention sequences per sample (images, frames or crops)
    tokens: int  # encoder tokens per sample
    full_pairs: int  # (query, key) pairs per head of a full-attention block
    window_pairs: int  # ... of a window block (full_pairs when the tower has no windows)
    merged_tokens: int  # tokens the merger or projector outputs
    llm_tokens: int  # image tokens the language model's sequence holds

    @property
    def tokens_per_image(self) -> int:
        return self.tokens // self.images


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's resize: sides rounded to multiples of *factor*, pixels kept in [min_pixels, max_pixels]."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.0f} is over 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def window_sizes(rows: int, columns: int, side: int) -> list[int]:
    """Merged tokens in each window of a rows × columns grid cut into side × side windows, the last ones short."""
    return [
        min(side, rows - top) * min(side, columns - left)
        for top in range(0, rows, side)
        for left in range(0, columns, side)
    ]


def best_resolution(height: int, width: int, pinpoints: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """LLaVA-NeXT's `select_best_resolution`: the most of the image kept, then the least padding."""
    best, kept_most, wasted_least = pinpoints[0], 0, math.inf
    for h, w in pinpoints:
        scale = min(w / width, h / height)
        kept = min(int(width * scale) * int(height * scale), width * height)
        wasted = w * h - kept
        if kept > kept_most or (kept == kept_most and wasted < wasted_least):
            best, kept_most, wasted_least = (h, w), kept, wasted
    return best


def _llava_next_features(height: int, width: int, best: tuple[int, int], side: int, patches: int) -> int:
    """The crops' features LLaVA-NeXT keeps after unpadding, plus one newline per row."""
    rows, columns = patches * (best[0] // side), patches * (best[1] // side)
    if width / height > columns / rows:
        kept = int(round(height * (columns / width), 7))
        rows -= (rows - kept) // 2 * 2
    else:
        kept = int(round(width * (rows / height), 7))
        columns -= (columns - kept) // 2 * 2
    return rows * columns + rows


def vision_sequence(
    spec: VisionSpec,
    images: int,
    height: int,
    width: int,
    min_pixels: int = QWEN_MIN_PIXELS,
    max_pixels: int = QWEN_MAX_PIXELS,
) -> VisionSequence:
    """The encoder's sequence for *images* images of height × width pixels per sample.

    Raises ValueError when the tower cannot take the images as given.
    """
    if spec.family in ("qwen2_vl", "qwen2_5_vl"):
        merge = spec.spatial_merge_size
        h, w = smart_resize(height, width, spec.patch_size * merge, min_pixels, max_pixels)
        rows, columns = h // spec.patch_size, w // spec.patch_size
        per_image = rows * columns
        full = per_image**2
        windowed = full
        if spec.window_size:
            side = spec.window_size // merge // spec.patch_size
            if side < 1:
                raise ValueError(f"window_size {spec.window_size} is smaller than one merged patch")
            unit = merge * merge
            windowed = sum((unit * n) ** 2 for n in window_sizes(rows // merge, columns // merge, side))
        merged = per_image // (merge * merge)
        return VisionSequence(
            images,
            (rows, columns),
            images,
            images * per_image,
            images * full,
            images * windowed,
            images * merged,
            images * merged,
        )
    assert spec.image_size is not None
    side = spec.image_size
    patches = side // spec.patch_size
    per_crop = patches * patches + (1 if spec.class_token else 0)
    # LLaVA's "default" strategy drops each crop's first token (the class token, where there is one).
    selected = per_crop - (0 if spec.keep_class_token else 1)
    crops, llm = 1, selected
    if spec.grid_pinpoints:
        best = best_resolution(height, width, spec.grid_pinpoints)
        crops = 1 + (best[0] // side) * (best[1] // side)
        llm += _llava_next_features(height, width, best, side, patches)
    elif (height, width) != (side, side):
        raise ValueError(
            f"{spec.family}'s learned positions are for {side}×{side} images; the processor resizes "
            f"to that (give height and width {side})"
        )
    projected = crops * selected if spec.projector == "mlp" else 0
    return VisionSequence(
        images,
        (patches, patches),
        images * crops,
        images * crops * per_crop,
        images * crops * per_crop**2,
        images * crops * per_crop**2,
        images * projected,
        images * llm if spec.projector != "none" else 0,
    )
