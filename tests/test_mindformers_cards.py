"""MindFormers' model-card rows (bench/_mindformers.py): each row's seconds by hand, and every field
checked against its yaml and README in a MindFormers git repository at a4dfb8219 (`PPB_MINDFORMERS`,
skipped when unset)."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from bench_modules import load_bench

from ppb_core.config.run import parse_run_config

MIRROR = os.environ.get("PPB_MINDFORMERS")  # a clone of mindspore-lab/mindformers
COMMIT = "a4dfb8219"  # v1.4.0-beta2


@pytest.fixture(scope="module")
def cards():
    return load_bench("_mindformers")


def test_card_seconds_follow_the_trainers_global_batch(cards):
    rows = {row["name"]: row for row in cards.mindformers_card_rows()}
    # Llama 2 7B pretrain: one stage, so batch_size 1 · dp 8 · interleave 1 · accumulation 8 = 64
    # sequences of 4096 = 262,144 tokens over 8 devices at 4160 tokens/s each: 262,144 / 33,280 = 7.8769 s.
    row = rows["MindFormers Llama 2 7B pretrain (8 910B, DP8, Atlas 800T A2)"]
    assert row["seconds"] == pytest.approx(7.8769, rel=1e-4)
    assert (row["raw"]["training"]["micro_batch_size"], row["raw"]["training"]["micro_batches"]) == (1, 8)
    # Qwen1.5 72B: 8 stages, so batch_size 1 · dp 1 · micro_batch_num 64 · 1 = 64 sequences of 32768 =
    # 2,097,152 tokens over 64 devices at 183 tokens/s each: 2,097,152 / 11,712 = 179.06 s.
    row = rows["MindFormers Qwen1.5 72B pretrain (64 910B, DP1 TP8 PP8, Atlas 900 A2 PoDc)"]
    assert row["seconds"] == pytest.approx(179.06, rel=1e-4)
    # the yaml's `enable_parallel_optimizer: True` as stated (MindSpore's optimizer parallel; at dp 1 nothing
    # to shard over)
    assert row["raw"]["parallel"] == {
        "dp": 1,
        "tp": 8,
        "pp": 8,
        "sequence_parallel": True,
        "enable_parallel_optimizer": True,
    }
    # Qwen1.5 1.8B: one stage, micro_batch_num 2 is not read: 1 · 8 · 1 · 1 = 8 sequences of 8192,
    # 65,536 / (11,241 · 8) = 0.72876 s.
    row = rows["MindFormers Qwen1.5 1.8B finetune (8 910B, DP8, Atlas 900 A2 PoDc)"]
    assert row["seconds"] == pytest.approx(0.72876, rel=1e-4)


def test_a_per_stage_card_is_priced_as_its_plan(cards):
    (row,) = [row for row in cards.mindformers_card_rows() if row["name"].startswith("MindFormers GLM-4 9B")]
    # 4 stages: batch_size 1 · dp 2 · micro_batch_num 64 = 128 sequences of 8192 over 8 devices at
    # 2339 tokens/s each: 1,048,576 / 18,712 = 56.038 s
    assert row["seconds"] == pytest.approx(56.038, rel=1e-4)
    assert row["plan"] == {
        "offset": [-1, 0, 1, 0],
        "recompute": [6, 3, 2, 3],
        "select_recompute": False,
        "select_comm_recompute": False,
    }
    public = load_bench("public_runs")
    (run,) = [r for r in public.public_runs() if r.name == row["name"]]
    config = public.config(run)
    problem = public.run_problem(config, public.describe_run(config, withdrawing=False), runnable=False)
    plan = public.cells(public.from_mindformers(problem, run.plan, run.source, config))
    # 40 layers over 4 stages, 10 each moved by the offset: 9, 10, 11, 10; of them 6, 3, 2, 3 fully recomputed
    assert [cell["options"] for cell in plan[0]] == [
        {"NONE": 3, "FULL": 6},
        {"NONE": 7, "FULL": 3},
        {"NONE": 9, "FULL": 2},
        {"NONE": 7, "FULL": 3},
    ]


def _git_show(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(MIRROR), "show", f"{COMMIT}:{path}"], capture_output=True, text=True, check=True
    ).stdout


def _as_llama(model: dict) -> dict:
    """A ChatGLM2Config's fields under LlamaConfig's names (mindformers/models/glm2/glm2_config.py at
    a4dfb8219: `padded_vocab_size`, `ffn_hidden_size`, `num_attention_heads`, `multi_query_group_num`
    under `multi_query_attention`, `add_qkv_bias`); a LlamaConfig's as they are."""
    if model["type"] != "ChatGLM2Config":
        return model
    return {
        **model,
        "vocab_size": model["padded_vocab_size"],
        "intermediate_size": model["ffn_hidden_size"],
        "num_heads": model["num_attention_heads"],
        "n_kv_heads": model["multi_query_group_num"] if model["multi_query_attention"] else None,
        "qkv_has_bias": model["add_qkv_bias"],
        "tie_word_embeddings": False,  # ChatGLM's separate output_layer
    }


def _ffn(model: dict) -> int:
    """mindformers/models/llama/llama_layer.py `LlamaFeedForward.__init__` (a4dfb8219) when intermediate_size
    is unset, from hidden_dim = 4h (llama_transformer.py): int((ffn_dim_multiplier + 0.01) · hidden_dim) if
    a multiplier is set, then int(2 · hidden_dim / 3), rounded up to a multiple of `multiple_of`."""
    if model.get("intermediate_size"):
        return model["intermediate_size"]
    width = 4 * model["hidden_size"]
    if model.get("ffn_dim_multiplier") is not None:
        width = int((model["ffn_dim_multiplier"] + 0.01) * width)
    width = int(2 * width / 3)
    step = model.get("multiple_of", 256)
    return step * ((width + step - 1) // step)


@pytest.mark.skipif(MIRROR is None, reason="PPB_MINDFORMERS (a MindFormers git repository) is not set")
def test_every_card_row_is_its_yaml_and_readme(cards):
    dtypes = {"bfloat16": "bf16", "float16": "fp16"}
    for card in cards.CARD_ROWS:
        config = yaml.safe_load(_git_show(card.yaml))
        model, par = config["model"]["model_config"], config["parallel_config"]
        runner, rec = config["runner_config"], config["recompute_config"]
        assert (par["data_parallel"], par["model_parallel"], par["pipeline_stage"]) == (card.dp, card.mp, card.pp)
        assert (runner["batch_size"], runner.get("gradient_accumulation_steps") or 1) == (
            card.batch_size,
            card.accumulation,
        )
        assert par["micro_batch_num"] == card.micro_batch_num
        if card.recompute_layers:  # a count of fully recomputed layers per stage
            assert rec["recompute"] == list(card.recompute_layers) and not card.full_recompute
        else:
            assert rec["recompute"] is card.full_recompute
        if rec.get("select_recompute") is True:  # every layer
            assert card.select_all and not card.select_layers
        else:
            assert (rec.get("select_recompute") or []) == list(card.select_layers) and not card.select_all
        assert (rec.get("select_comm_recompute") or []) == list(card.comm_layers)
        assert (config.get("micro_batch_interleave_num") or 1) == 1
        assert (model.get("fine_grain_interleave") or 1) == card.fine_grain_interleave
        assert model["use_flash_attention"] is card.flash_attention and dtypes[model["compute_dtype"]] == card.dtype
        param = {"float32": "fp32", **dtypes}[model["param_init_type"]]
        assert card.param_dtype == (None if param == card.dtype else param)
        if card.seq_parallel is None:
            assert par.get("use_seq_parallel", False) is True or card.mp == 1
        else:
            assert par.get("use_seq_parallel", False) is card.seq_parallel
        # MoE: expert_parallel and a padded capacity (MoEV2, `use_gmm` unset); a dense card (ChatGLM3's yaml
        # has a moe_config of expert_num 1) states neither
        moe = config.get("moe_config") or {}
        assert par.get("expert_parallel", 1) == card.expert_parallel and not moe.get("use_gmm")
        routed = (moe.get("expert_num") or 1) > 1
        assert (moe["capacity_factor"] if routed else None) == card.capacity_factor
        if routed:
            said = (
                moe["expert_num"],
                moe["num_experts_chosen"],
                moe["moe_intermediate_size"],
                moe["shared_expert_num"],
            )
            spec_moe = ("num_experts", "experts_per_token", "moe_intermediate_size", "shared_experts")
            assert said == tuple(card.spec[key] for key in spec_moe)
            assert (moe["n_group"], moe["topk_group"], moe["first_k_dense_replace"]) == (
                card.spec["expert_groups"],
                card.spec["expert_group_limit"],
                card.spec["first_dense_layers"],
            )
        assert config["parallel"]["enable_parallel_optimizer"] is card.parallel_optimizer
        # parallel_config.vocab_emb_dp (TransformerOpParallelConfig's default True): the tables whole on every mp rank;
        # at mp 1 it changes nothing and the card states none
        assert par.get("vocab_emb_dp", True) is card.vocab_emb_dp or card.mp == 1
        # context.jit_config.jit_level (mindspore.set_context's jit_config): graph-kernel fusion at O1
        assert (config["context"].get("jit_config") or {}).get("jit_level") == card.jit_level
        # LLaMA's RotaryEmbedding in model_config.rotary_dtype (LlamaConfig's default float32); ChatGLM2's own
        # rotary is not that cell: no rotary_dtype stated for it
        if config["model"]["arch"]["type"] == "LlamaForCausalLM":
            rotary = {"float32": "fp32", **dtypes}[model.get("rotary_dtype", "float32")]
            assert card.rotary_dtype == rotary
        else:
            assert card.rotary_dtype is None
        # model_config.softmax_compute_type (LlamaConfig's default float32) where `_attn` runs it: unfused under O1
        if not card.flash_attention and card.jit_level == "O1":
            softmax = {"float32": "fp32", **dtypes}[model.get("softmax_compute_type", "float32")]
            assert card.softmax_dtype == softmax
        else:
            assert card.softmax_dtype is None
        assert "pipeline_config" not in config["parallel"]
        assert (model.get("offset") or 0) == (list(card.offset) if card.offset else 0)
        spec = card.spec
        assert model["seq_length"] == card.seq_length
        model = _as_llama(model)
        assert (model["hidden_size"], model["num_layers"], model["num_heads"]) == (
            spec["hidden_size"],
            spec["num_layers"],
            spec["num_attention_heads"],
        )
        assert model.get("n_kv_heads") == spec.get("num_key_value_heads")
        assert (model["vocab_size"], _ffn(model)) == (spec["vocab_size"], spec["intermediate_size"])
        assert bool(model.get("qkv_has_bias")) == spec.get("attention_bias", False)
        assert bool(model.get("tie_word_embeddings")) == spec.get("tied_embeddings", False)
        # the README's row: the yaml linked under its hardware heading with this tokens/s/p
        readme = {"configs": "docs/model_cards/{}.md"}.get(card.yaml.split("/")[0])
        base = card.yaml.split("/")[1]
        path = (
            readme.format(base)
            if readme
            else next(
                f"research/{base}/{name}" for name in ("README.md", "readme.md") if _exists(f"research/{base}/{name}")
            )
        )
        text = _git_show(path)
        section = text.split(f"{card.hardware}硬件环境下测试得出")[1].split("硬件环境下测试得出")[0]
        link = card.yaml.rsplit("/", 1)[-1]
        figure = f"{card.tokens_per_s_per_device:.0f} tokens/s/p"
        assert any(link in line and figure in line for line in section.splitlines()), (card.name, card.hardware)


def _exists(path: str) -> bool:
    return (
        subprocess.run(["git", "-C", str(MIRROR), "cat-file", "-e", f"{COMMIT}:{path}"], capture_output=True).returncode
        == 0
    )


def test_the_mixtral_card_counts_its_pipelines_global_batch(cards):
    """base_trainer.py at bc419f8a5, full batch with stages: batch_size 1 · dp 8 · micro_batch_num 16 = 128 sequences of
    4096 = 524,288 tokens over 16 devices at 1678 tokens/s each: 524,288 / 26,848 = 19.528 s; a MoE at model_parallel 1
    with expert_parallel 8 and a capacity factor 1.1 (MoEV2's slots: ⌈2 · 4096 · 1.1 / 8⌉ = 1127 over 1024, 1.1006)."""
    (row,) = cards.mindformers_mixtral_rows()
    assert row["seconds"] == pytest.approx(19.528, rel=1e-4)
    raw = row["raw"]
    assert raw["parallel"] == {
        "dp": 8,
        "tp": 1,
        "pp": 2,
        "sequence_parallel": False,
        "ep": 8,
        "enable_parallel_optimizer": True,
    }
    assert raw["training"]["micro_batches"] == 16 and raw["training"]["moe"]["capacity_factor"] == 1.1
    assert parse_run_config(raw).routed_share == pytest.approx(1127 / 1024, rel=1e-12)


@pytest.mark.skipif(MIRROR is None, reason="PPB_MINDFORMERS (a MindFormers git repository) is not set")
def test_the_mixtral_row_is_its_yaml_and_card_at_bc419f8a5(cards):
    card, commit = cards.MIXTRAL_ROW, "bc419f8a5"
    show = ["git", "-C", str(MIRROR), "show"]
    card_md = f"{commit}:research/mixtral/mixtral.md"
    readme = subprocess.run([*show, card_md], capture_output=True, text=True, check=True)
    line = next(line for line in readme.stdout.splitlines() if "finetune_mixtral-8x7b.yaml" in line and "|" in line)
    assert "4096" in line and f"{card.tokens_per_s_per_device:.0f} tokens/s/p" in line
    assert "Atlas 900 A2 PoDc" in readme.stdout and card.hardware == "Atlas 900 A2 PoDc"
    text = subprocess.run([*show, f"{commit}:{card.yaml}"], capture_output=True, text=True, check=True).stdout
    config = yaml.safe_load(text)
    model, par, moe = config["model"]["model_config"], config["parallel_config"], config["moe_config"]
    assert (par["data_parallel"], par["model_parallel"], par["pipeline_stage"]) == (card.dp, card.mp, card.pp)
    assert (par["expert_parallel"], par["micro_batch_num"], par["use_seq_parallel"]) == (8, 16, False)
    assert config["runner_config"]["batch_size"] == card.batch_size
    assert config["recompute_config"]["recompute"] is True and card.full_recompute
    assert (model["compute_dtype"], model["param_init_type"], model["rotary_dtype"]) == ("float16",) * 3
    assert model["use_flash_attention"] is True and model["seq_length"] == card.seq_length
    assert config["context"]["jit_config"]["jit_level"] == card.jit_level == "O2"
    assert config["parallel"]["enable_parallel_optimizer"] is card.parallel_optimizer
    assert (moe["expert_num"], moe["num_experts_chosen"], moe["capacity_factor"]) == (8, 2, card.capacity_factor)
    sizes = ("hidden_size", "num_layers", "num_heads", "n_kv_heads", "intermediate_size", "vocab_size")
    spec = ("hidden_size", "num_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size")
    assert tuple(model[key] for key in sizes) == (*(card.spec[key] for key in spec), card.spec["vocab_size"])
