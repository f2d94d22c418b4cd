"""The census of vision encoder blocks against the formulas (`memory.activations.encoder_terms`).

Each tower is built by transformers on the CPU at a small width, run on its images, and one block
recorded as the census records a decoder layer. Under every setting (nothing recomputed, each
switch alone, HyperParallel's policy, full recompute) what it keeps is within 2% of the formulas
for one sample at tp 1. RMSNorm towers (Qwen2.5-VL) agree to the byte; LayerNorm towers keep
4 bytes a token fewer per norm on the CPU, whose bf16 LayerNorm keeps its mean and 1/std in bf16
where CUDA's keeps them in fp32, as the formulas count.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from small_models import SMALL_QWEN25_VL

from ppb_core.estimate.vision_census import SETTINGS, census_block, main

pytestmark = pytest.mark.oracle

_TEXT = {"model_type": "llama", "hidden_size": 96, "vocab_size": 1000, "num_hidden_layers": 1}
TOWERS = {
    "qwen2.5-vl": SMALL_QWEN25_VL,
    "qwen2-vl": {
        "model_type": "qwen2_vl",
        "vision_config": {"depth": 1, "embed_dim": 128, "hidden_size": 96, "num_heads": 4, "mlp_ratio": 4},
    },
    "llava-clip": {
        "model_type": "llava",
        "text_config": dict(_TEXT, num_attention_heads=4, intermediate_size=256),
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": 128,
            "intermediate_size": 512,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "image_size": 112,
            "patch_size": 14,
        },
    },
    "siglip": {
        "model_type": "siglip_vision_model",
        "hidden_size": 128,
        "intermediate_size": 304,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "image_size": 112,
        "patch_size": 14,
    },
}
# (tower, block, images, height, width): Qwen2.5-VL's window block on images whose last windows are
# cut short (224×336 merged is 8×12 tokens, windows of 4×4), and its full block.
CASES = [
    ("qwen2.5-vl", 0, 2, 224, 336),
    ("qwen2.5-vl", 1, 2, 224, 336),
    ("qwen2-vl", 0, 2, 168, 224),
    ("llava-clip", 0, 2, 112, 112),
    ("siglip", 0, 3, 112, 112),
]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize(("tower", "layer", "images", "height", "width"), CASES)
def test_census_within_2_percent_of_the_formulas(tower, layer, images, height, width, attention) -> None:
    comparison = census_block(TOWERS[tower], images, height, width, layer=layer, attention=attention)
    for setting in SETTINGS:
        assert comparison.ratio(setting) == pytest.approx(1.0, abs=0.02), setting
    if tower.startswith("qwen2.5"):
        assert comparison.census == {k: int(v) for k, v in comparison.formulas.items()}


def test_window_and_full_blocks_differ_only_in_eager_scores() -> None:
    """With a flash kernel a window block keeps what a full one keeps; eager keeps each token's scores
    over its window (64 patches) or its image (128 here): 6 bytes a key per head, 4 heads."""
    window = census_block(TOWERS["qwen2.5-vl"], 1, 224, 224, layer=0, attention="eager")
    full = census_block(TOWERS["qwen2.5-vl"], 1, 224, 224, layer=1, attention="eager")
    tokens = 16 * 16  # 224/14 patches a side
    assert window.kind == "vit_window" and full.kind == "vit_full"
    # 224×224 is 8×8 merged tokens: 4 windows of 4×4 merged = 64 patches; the full block sees 256.
    assert full.census["NONE"] - window.census["NONE"] == tokens * 4 * 6 * (256 - 64)


@pytest.mark.parametrize(
    ("images", "problem"),
    [
        # -1 images reached torch: "RuntimeError: Trying to create tensor with negative dimension"
        (["-1", "448x448"], "images: N HxW must be positive, got -1 448x448"),
        (["1", "0x448"], "images: N HxW must be positive, got 1 0x448"),
        (["1", "448xfoo"], "--images: N HxW of integers, got '1' '448xfoo'"),
        (["100000", "448x448"], "is over ppb's limit of 16,777,216 tokens a sample"),
    ],
)
def test_bad_images_are_one_line(tmp_path, capsys, images, problem):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TOWERS["qwen2.5-vl"]))
    assert main([str(config), "--images", *images]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err, err
