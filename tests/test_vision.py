"""Vision sub-models: reading the towers, their sequence, their formulas, their run configs, their plans.

Expected values are derived by hand in the comments (the transformers cross-checks live in
test_vision_oracle.py and test_vision_census.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from small_models import SMALL_QWEN25_VL

from ppb_core import chain
from ppb_core.config.hf_vision import spec_of_part, text_part, vision_spec_from_hf
from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.config.vision import best_resolution, smart_resize, vision_sequence, window_sizes
from ppb_core.errors import InputError
from ppb_core.estimate.plan import plan_stages, stage_models
from ppb_core.memory.activations import encoder_setup, encoder_terms
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import EncoderBodyKind, PatchEmbedKind, ProjectorKind, vision_kinds
from ppb_core.model.placement import model_cell_options, place_plan
from ppb_core.model.walk import BODY, walk, walk_by_model
from ppb_core.report.render import summary_markdown
from ppb_core.tables.report import report_to_frame
from ppb_core.tables.run import run_from_frame, run_to_frame
from ppb_core.timing.flops import OpGeometry, layer_ops
from ppb_core.timing.model_flops import model_flops_per_iteration

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "configs" / "qwen2.5-vl-7b.yaml"
QWEN25_VL_7B = json.loads((ROOT / "configs" / "hf" / "qwen2.5-vl-7b.json").read_text())
LLAVA_15_7B = json.loads((ROOT / "configs" / "hf" / "llava-1.5-7b.json").read_text())

# --- reading ---------------------------------------------------------------------------------------


def test_qwen2_5_vl_7b_tower_and_decoder_as_transformers_reads_them() -> None:
    spec = vision_spec_from_hf(QWEN25_VL_7B)
    assert (spec.family, spec.hidden_size, spec.num_layers, spec.num_attention_heads) == ("qwen2_5_vl", 1280, 32, 16)
    assert (spec.intermediate_size, spec.activation, spec.norm) == (3420, "swiglu", "rmsnorm")
    assert spec.full_attention_layers == (7, 15, 23, 31) and spec.window_size == 112
    # The merger reads 2×2 patches of 1280 (5120) and projects to the decoder's 3584.
    assert (spec.projector, spec.projector_hidden_size, spec.out_hidden_size) == ("merger", 5120, 3584)
    text = spec_of_part(QWEN25_VL_7B, "text")
    assert (text.family, text.hidden_size, text.num_layers, text.kv_heads) == ("qwen2", 3584, 28, 4)
    assert text.attention_bias and not text.tied_embeddings


def test_llava_reads_its_clip_tower_projector_and_text_config() -> None:
    spec = vision_spec_from_hf(LLAVA_15_7B)
    assert (spec.family, spec.hidden_size, spec.num_layers, spec.image_size, spec.patch_size) == (
        "clip",
        1024,
        24,
        336,
        14,
    )
    assert spec.activation == "quick_gelu" and spec.class_token and spec.pre_norm and spec.post_norm
    assert (spec.projector, spec.projector_hidden_size, spec.feature_layers) == ("mlp", 4096, (-2,))
    assert text_part(LLAVA_15_7B)["model_type"] == "llama"
    # Without a vision_config, LlavaConfig builds CLIP-L/14 at 336 pixels.
    bare = {k: v for k, v in LLAVA_15_7B.items() if k != "vision_config"}
    assert vision_spec_from_hf(bare).hidden_size == 1024


def test_a_vision_language_config_needs_a_part() -> None:
    with pytest.raises(InputError, match="set part: vision or text"):
        spec_of_part(QWEN25_VL_7B, None, "x.json")
    with pytest.raises(InputError, match="no vision tower"):
        vision_spec_from_hf({"model_type": "llama"}, "x.json")


# --- the tower's sequence ---------------------------------------------------------------------------


def test_smart_resize_rounds_to_merged_patches_and_caps_the_pixels() -> None:
    # 896 = 32·28 stays; 1000×2000 rounds to 1008×1988 = 2,003,904 pixels > 1,003,520, so both sides
    # shrink by √(2e6/1,003,520) = 1.4117: floor(1000/1.4117/28)·28 = 700, floor(2000/1.4117/28)·28 = 1400.
    assert smart_resize(896, 896, 28, 56 * 56, 28 * 28 * 1280) == (896, 896)
    assert smart_resize(1000, 2000, 28, 56 * 56, 28 * 28 * 1280) == (700, 1400)
    # 20×20 is below 56·56: scaled up by √(3136/400) = 2.8 to 56×56.
    assert smart_resize(20, 20, 28, 56 * 56, 28 * 28 * 1280) == (56, 56)


def test_windows_are_cut_short_at_the_grid_edges() -> None:
    assert window_sizes(8, 12, 4) == [16] * 6
    # Rows 4, 4, 1 by columns 4, 4, 2.
    assert window_sizes(9, 10, 4) == [16, 16, 8, 16, 16, 8, 4, 4, 2]


def test_qwen2_5_vl_sequence_by_hand() -> None:
    spec = vision_spec_from_hf(QWEN25_VL_7B)
    seq = vision_sequence(spec, 2, 224, 336)
    # 224×336 is 16×24 patches = 384 an image, 8×12 merged tokens = 96; windows of 112/2/14 = 4 merged
    # tokens a side: 6 windows of 16 merged = 64 patches. Two images.
    assert (seq.grid, seq.tokens, seq.merged_tokens, seq.llm_tokens) == ((16, 24), 768, 192, 192)
    assert seq.full_pairs == 2 * 384**2 and seq.window_pairs == 2 * 6 * 64**2


def test_clip_and_llava_next_sequences_by_hand() -> None:
    spec = vision_spec_from_hf(LLAVA_15_7B)
    seq = vision_sequence(spec, 1, 336, 336)
    # 24² patches and the class token; the projector drops the class token ("default").
    assert (seq.tokens, seq.full_pairs, seq.merged_tokens, seq.llm_tokens) == (577, 577**2, 576, 576)
    with pytest.raises(ValueError, match="336×336"):
        vision_sequence(spec, 1, 448, 448)
    nxt = vision_spec_from_hf(dict(LLAVA_15_7B, model_type="llava_next"))
    assert best_resolution(672, 672, nxt.grid_pinpoints) == (672, 672)
    seq = vision_sequence(nxt, 1, 672, 672)
    # 2×2 crops and the whole image: 5 × 577 tokens; the decoder gets 576 base + 48·48 unpadded + 48 newlines.
    assert (seq.sequences, seq.tokens, seq.llm_tokens) == (5, 5 * 577, 576 + 48 * 48 + 48)


# --- kinds, formulas, FLOPs --------------------------------------------------------------------------


def _small_qwen() -> tuple:
    raw = SMALL_QWEN25_VL
    spec = vision_spec_from_hf(raw)
    return spec, vision_kinds(spec, vision_sequence(spec, 2, 224, 336))


def test_vision_kinds_carry_their_own_sequence() -> None:
    _, (head, bodies, tail) = _small_qwen()
    assert isinstance(head, PatchEmbedKind) and isinstance(tail, ProjectorKind)
    assert [b.name for b in bodies] == ["vit_window", "vit_full"]
    assert all(isinstance(b, EncoderBodyKind) and b.tokens == 768 for b in bodies)
    assert (bodies[0].pairs, bodies[1].pairs) == (2 * 6 * 64**2, 2 * 384**2)
    # Conv3d over 3 channels × 2 frames × 14² = 1176 pixels a patch; the merger 768 → 192 tokens.
    assert (head.patch_inputs, tail.tokens_in, tail.tokens_out) == (1176, 768, 192)


def test_encoder_block_terms_by_hand() -> None:
    """Qwen2.5-VL block, bf16, flash, per token (h 128, 4 heads, f 200), as HF's modules keep it:
    input 2h; RMSNorm 1: fp32 copy 4h, normalized 2h, 1/rms 4, output 2h; qkv 6h; rotated q, k 4h;
    attention output 2h and log-sum-exp 4·4; concatenated output 2h; the residual 2h and RMSNorm 2's
    excess 2h, normalized 2h, 1/rms 4, output 2h; gate, up, SiLU, product 4·2f.
    = 32h + 8 + 16 + 8f = 4096 + 24 + 1600 = 5720 bytes (the census measured 5720, to the byte)."""
    _, (_, bodies, _) = _small_qwen()
    kind = bodies[0]
    setup = encoder_setup(kind, MemorySetup(seq_length=99, micro_batch_size=1))
    assert setup.tokens == 768  # the tower's tokens, not the run's 99
    assert sum(t.bytes for t in encoder_terms(kind, setup)) == 768 * 5720
    # TP 2 + SP: the whole side (18h + 8 a token) splits by SP, the rest (14h + 16 + 8f) by TP: half.
    split = encoder_setup(kind, MemorySetup(seq_length=99, tp=2, sequence_parallel=True))
    assert sum(t.bytes for t in encoder_terms(kind, split)) == 768 * 5720 / 2
    # Recomputing the norms drops 2·(8h + 4) less the residual 2h they then need: 5720 − 2056 + 256.
    kept_normop = [t for t in encoder_terms(kind, setup) if t.switch != "normOp"]
    assert sum(t.bytes for t in kept_normop) == 768 * 3920


def test_encoder_attention_flops_count_each_images_and_windows_pairs() -> None:
    _, (_, bodies, _) = _small_qwen()
    geo = OpGeometry(seq_length=8192)  # the language model's; the block runs on its own tokens
    for kind in bodies:
        ops = {op.name: op for op in layer_ops(kind, geo)}
        # QKᵀ over every pair of each image (or window), all heads: 2·pairs·h.
        assert ops["flash_scores"].flops == 2 * kind.pairs * 128
        assert ops["qk_proj"].flops == 2 * 768 * 128 * 256  # q and k of 768 tokens, 2·128 wide


def test_model_flops_of_a_vision_tower_by_hand() -> None:
    """Per sample of the example (4 images of 896²: 16,384 patches, windows 64² pairs, full 4096²):
    patch embedding 6·16384·1176·1280; per block 6·16384·(4·1280² + 3·1280·3420) plus 12·1280 per pair;
    merger 6·4096·(5120² + 5120·3584). Times micro_batches·dp = 32·4 sequences, plus the decoder's."""
    run = load_run_config(EXAMPLE)
    seq = run.vision("vit")
    h, f = 1280, 3420
    windows = 4 * 64 * 64**2  # 64 windows of 64 patches an image, 4 images
    full = 4 * 4096**2
    per_sample = 6 * 16384 * 1176 * h + 32 * 6 * 16384 * (4 * h * h + 3 * h * f)
    per_sample += 12 * h * (28 * windows + 4 * full) + 6 * 4096 * (5120 * 5120 + 5120 * 3584)
    assert (seq.window_pairs, seq.full_pairs) == (windows, full)
    text_only = parse_run_config(
        {
            **yaml.safe_load(EXAMPLE.read_text()),
            "models": [{"name": "llm", "config": "hf/qwen2.5-vl-7b.json", "part": "text"}],
            "ppb": {},
        },
        EXAMPLE,
        EXAMPLE.parent,
    )
    assert model_flops_per_iteration(run) - model_flops_per_iteration(text_only) == pytest.approx(128 * per_sample)


# --- run configs -----------------------------------------------------------------------------------


def _run(tmp_path: Path, edit) -> Path:
    shutil.copytree(ROOT / "configs" / "hf", tmp_path / "hf")
    raw = yaml.safe_load(EXAMPLE.read_text())
    edit(raw)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("edit", "field", "problem"),
    [
        (lambda r: r["models"][0].pop("part"), "models.0.part", "set part: vision or part: text"),
        (lambda r: r["models"][0].pop("images"), "models.0.images", "needs its images"),
        (lambda r: r["models"][1].update(images={"height": 8, "width": 8}), "models.1.images", "language model"),
        (lambda r: r["models"][0]["images"].update(per_sample=9), "models.0.images", "9 images make 9216 tokens"),
        (lambda r: r["models"][0].update(census="hf/llama3-8b.json"), "models.0.census", "not a vision tower"),
        (lambda r: r["models"][0].update(part="audio"), "models.0.part", "'vision' or 'text'"),
        (
            lambda r: r["models"][1].update(config="hf/llama3-8b.json", part=None),
            "models.0.out_hidden_size",
            "vit projects to width 3584 but llm's hidden_size is 4096",
        ),
    ],
)
def test_bad_vision_runs_name_the_field(tmp_path: Path, edit, field: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        load_run_config(_run(tmp_path, edit))
    assert caught.value.field == field and problem in caught.value.problem


def test_sequence_parallel_splits_the_towers_tokens(tmp_path: Path) -> None:
    """LLaVA's CLIP runs 577 tokens an image: not divisible by tp 2 under SP."""

    def llava(raw):
        raw["models"] = [
            {
                "name": "vit",
                "config": "hf/llava-1.5-7b.json",
                "part": "vision",
                "images": {"height": 336, "width": 336},
            },
            {"name": "llm", "config": "hf/llava-1.5-7b.json", "part": "text"},
        ]
        raw["ppb"] = {}

    with pytest.raises(InputError, match="577 tokens a micro-batch over tp 2"):
        load_run_config(_run(tmp_path, llava))


def test_a_vision_run_stands_alone_after_resolving() -> None:
    run = load_run_config(EXAMPLE)
    again = run_from_frame(run_to_frame(run))
    assert again.specs == run.specs and again.vision("vit") == run.vision("vit")
    assert [layer.kind for layer in walk(again)] == [layer.kind for layer in walk(run)]


# --- combined plans, placed sub-model by sub-model --------------------------------------------------

BODIES = [
    {"name": "COMBINED_BODY_0_BODY_2", "nb_layer": 28, "models": ["vit", "llm"]},
    {"name": "BODY_1", "nb_layer": 4, "models": ["vit"]},
]


def _cells(combined: list[int], full: list[int]) -> list[list[dict]]:
    return [
        [
            {"layers": {name: {"NONE": n} for name, n in (("COMBINED_BODY_0_BODY_2", c), ("BODY_1", f)) if n}}
            for c, f in zip(combined, full, strict=True)
        ]
    ]


def test_model_cell_options_split_combined_layers_into_their_sub_models() -> None:
    by_model = model_cell_options(_cells([7, 8, 8, 5], [0, 0, 0, 4]), BODIES)
    # Each combined layer is one vit and one llm layer; vit's full-attention body is vit's alone.
    assert [c["NONE"] for c in by_model["vit"][0]] == [7, 8, 8, 9]
    assert [c["NONE"] for c in by_model["llm"][0]] == [7, 8, 8, 5]
    assert model_cell_options(_cells([7, 8, 8, 5], [0, 0, 0, 4]), [{"name": "BODY_1", "nb_layer": 4}]) is None


def test_each_sub_model_fills_the_cells_on_its_own() -> None:
    run = load_run_config(EXAMPLE)
    placed = walk_by_model(run, {"vit": [[7, 8, 8, 9]], "llm": [[7, 8, 8, 5]]})
    assert placed.cell_counts == ((14, 16, 16, 14),)
    assert stage_models(placed) == [
        "vit HEAD + 7 · llm HEAD + 7",
        "vit 8 · llm 8",
        "vit 8 · llm 8",
        "vit 9 + TAIL · llm 5 + TAIL",
    ]
    # vit's layers keep their order (blocks 0-6, 7-14, 15-22, 23-31 on stages 0-3): its full-attention
    # blocks 7, 15, 23, 31 land where their index falls.
    vit = [layer for layer in placed if layer.model_name == "vit" and layer.node == BODY]
    assert [layer.stage for layer in vit if layer.kind.name == "vit_full"] == [1, 2, 3, 3]
    with pytest.raises(InputError, match="vit: counts must add up to its 32 layers"):
        walk_by_model(run, {"vit": [[7, 8, 8, 8]], "llm": [[7, 8, 8, 5]]})


def test_plan_stages_report_what_each_stage_holds_of_each_sub_model() -> None:
    run = load_run_config(EXAMPLE)
    cells = _cells([7, 8, 8, 5], [0, 0, 0, 4])
    by_model = model_cell_options(cells, BODIES)
    placed, chosen = place_plan(run, [[{"NONE": 0}] * 4], by_model)
    assert len(chosen) == 60 and set(chosen.values()) == {"NONE"}
    stages = report_to_frame(plan_stages(run, [[{"NONE": 0}] * 4], by_model=by_model))
    assert list(stages["models"]) == stage_models(placed)
    assert list(stages["layers"]) == [14, 16, 16, 14]
    text = summary_markdown(stages, "plan")
    assert "| stage | layers | models | options |" in text and "| vit 8 · llm 8 |" in text
    # A one-model plan's summary keeps its columns as they were.
    single = stages.assign(**{"models": ["llm 7"] * 4})
    assert "models" not in summary_markdown(single, "plan")


def test_the_example_balances_with_a_memory_model_that_agrees() -> None:
    """The shipped example end to end without Dagster: every stage fits as the memory model re-evaluates it."""
    tables = chain.run_chain(EXAMPLE)
    combined = tables["combined_descriptions"]
    # the tower in model order (7 window blocks, a full-attention one, four times): its window blocks
    # pair with the decoder's 28 layers (BODY_8), 7 to a combined description
    rows = combined[combined["model_name"] == "combined_vit_llm"]
    assert list(rows["name"]) == [f"COMBINED_BODY_{n}_BODY_8" for n in (0, 2, 4, 6)]
    assert list(rows["nb_layer"]) == [7] * 4
    assert [json.loads(text) for text in rows["combines"]] == [f"vit BODY_{n} + llm BODY_8" for n in (0, 2, 4, 6)]
    report = tables["plan_report"].frame
    assert (report["parameters_mb"] + report["activations_mb"] + report["buffers_mb"] <= report["device_mb"]).all()
    assert report["layers"].sum() == 60  # 32 tower blocks and 28 decoder layers
    held = " ".join(report["models"])
    assert held.count("HEAD") == 2 and held.count("TAIL") == 2
    # Every stage holds both sub-models: a combined layer is one of each.
    assert all("vit" in value and "llm" in value for value in report["models"])
