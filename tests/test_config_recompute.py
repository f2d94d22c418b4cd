"""`framework` and the forms of `training.recompute`: parsed, checked as the frameworks check them, resolved."""

from __future__ import annotations

import copy

import pytest
from test_config import BASE

from ppb_core.config.recompute import MegatronRecompute, TorchtitanRecompute
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.switches import SWITCHES
from ppb_core.tables.run import run_from_frame, run_to_frame


def _run(recompute=None, framework=None, **top):
    raw = copy.deepcopy(BASE)
    if recompute is not None:
        raw["training"]["recompute"] = recompute
    if framework is not None:
        raw["framework"] = framework
    raw.update(top)
    return parse_run_config(raw, "run.yaml")


def _error(recompute=None, framework=None) -> InputError:
    with pytest.raises(InputError) as caught:
        _run(recompute, framework)
    line = caught.value.line()
    assert "\n" not in line and line.startswith("run.yaml: "), line
    return caught.value


def _recomputed(switches: dict[str, int]) -> set[str]:
    return {name for name, state in switches.items() if state == 0}


def test_framework_defaults_to_megatron_and_names_three():
    assert _run().framework == "megatron"
    assert _run(framework="torchtitan").framework == "torchtitan"
    assert _run(framework="mindformers").framework == "mindformers"
    err = _error(framework="deepspeed")
    assert err.field == "framework" and "megatron" in err.problem


def test_switch_dicts_keep_their_meaning_in_every_framework():
    for framework in ("megatron", "torchtitan", "mindformers"):
        run = _run({"softmax": 0, "ffAct": 0}, framework)
        assert run.recompute.form == "switches" and run.recompute.full is None
        assert _recomputed(run.switches("llm")) == {"softmax", "ffAct"}
        assert run.recompute.chunk_options(3) == ["SLCT"] * 3
    assert _run().recompute.chunk_options(2) == ["NONE", "NONE"]  # nothing stated: nothing recomputed


def test_full_recomputes_every_body_layer_in_every_framework():
    for framework in ("megatron", "torchtitan", "mindformers"):
        run = _run("full", framework)
        assert run.recompute.form == "full" and run.recompute.full == "all"
        assert run.recompute.chunk_options(4) == ["FULL"] * 4
        assert _recomputed(run.switches("llm")) == set()


def test_megatron_selective_defaults_to_core_attn_as_megatron_does():
    # transformer_config.py __post_init__: recompute_modules None -> ["core_attn"]
    run = _run({"granularity": "selective"})
    assert run.recompute.modules == frozenset({"core_attn"})
    assert _recomputed(run.switches("llm")) == {"softmax", "dropout", "headCast"}
    assert run.recompute.chunk_options(2) == ["SLCT", "SLCT"]


MLA_MODELS = [
    {
        "name": "llm",
        "spec": {
            **BASE["models"][0]["spec"],
            "num_key_value_heads": 16,
            "kv_lora_rank": 256,
            "qk_nope_head_dim": 64,
            "qk_rope_head_dim": 32,
            "v_head_dim": 64,
        },
    }
]


def test_megatron_modules_map_to_their_switches():
    # mla_up_proj on a model with multi-latent attention, as Megatron-Core requires
    run = _run({"granularity": "selective", "modules": ["layernorm", "mla_up_proj", "moe_act"]}, models=MLA_MODELS)
    assert run.recompute.modules == frozenset({"layernorm", "mla_up_proj", "moe_act"})
    assert _recomputed(run.switches("llm")) == {"normOp", "attUp", "ffAct"}
    # an empty list recomputes nothing (Megatron skips every module check then)
    empty = _run({"granularity": "selective", "modules": []})
    assert empty.recompute.chunk_options(2) == ["NONE", "NONE"]


def test_megatron_full_uniform_and_block():
    # megatron/core/recompute.py: uniform checkpoints every layer in groups of num_layers;
    # block checkpoints the first num_layers layers of each chunk and runs the rest plainly.
    uniform = _run({"granularity": "full", "method": "uniform", "num_layers": 2}).recompute
    assert (uniform.full, uniform.num_layers) == ("uniform", 2)
    assert uniform.chunk_options(5) == ["FULL"] * 5
    block = _run({"granularity": "full", "method": "block", "num_layers": 2}).recompute
    assert block.chunk_options(4) == ["FULL", "FULL", "NONE", "NONE"]
    assert block.chunk_options(4, first=4) == ["FULL", "FULL", "NONE", "NONE"]  # again in every chunk
    assert block.chunk_options(1) == ["FULL"]


def test_torchtitan_modes_and_options():
    assert _run({"mode": "none"}, "torchtitan").recompute.chunk_options(2) == ["NONE", "NONE"]
    assert _run({"mode": "full"}, "torchtitan").recompute.chunk_options(2) == ["FULL", "FULL"]
    # activation_checkpoint.py _apply_layer_sac (v0.2.2): a counter over the rank's blocks from 1,
    # checkpointed where count % N == 0: blocks 3 and 6 of 7 at N = 3, then 9 in a second chunk.
    every = _run({"mode": "selective", "option": 3}, "torchtitan").recompute
    assert (every.full, every.num_layers) == ("every", 3)
    assert every.chunk_options(7) == ["NONE", "NONE", "FULL", "NONE", "NONE", "FULL", "NONE"]
    assert every.chunk_options(3, first=7) == ["NONE", "FULL", "NONE"]
    # torchtitan writes the option as a string; its default is "2"
    assert _run({"mode": "selective", "option": "2"}, "torchtitan").recompute.num_layers == 2
    assert _run({"mode": "selective"}, "torchtitan").recompute.chunk_options(4) == ["NONE", "FULL"] * 2
    op = _run({"mode": "selective", "option": "op"}, "torchtitan").recompute
    assert op.modules == frozenset({"op"}) and op.full is None
    assert op.chunk_options(2) == ["SLCT", "SLCT"]
    assert _recomputed(op.switches) == {"normOp", "attBMM", "ffAct"}


@pytest.mark.parametrize(
    ("recompute", "framework", "words"),
    [
        ({"granularity": "selective"}, "torchtitan", "granularity, modules, method, num_layers are megatron's words"),
        ({"granularity": "selective"}, "mindformers", "this run's framework is mindformers"),
        ({"mode": "full"}, "megatron", "mode, option are torchtitan's words; this run's framework is megatron"),
        ({"mode": "full"}, None, "torchtitan's words"),
        # both frameworks' words at once: said so, whichever the run's framework (it read "mode: unknown field")
        (
            {"mode": "selective", "option": "op", "granularity": "full"},
            "torchtitan",
            "granularity (Megatron's words) beside mode, option (torchtitan's)",
        ),
        ({"granularity": "selective", "option": 2}, None, "granularity (Megatron's words) beside option"),
    ],
)
def test_words_of_another_framework_are_refused_in_one_line(recompute, framework, words):
    err = _error(recompute, framework)
    assert err.field == "training.recompute" and words in err.problem


@pytest.mark.parametrize(
    ("recompute", "framework", "field", "words"),
    [
        ({"granularity": "full"}, None, "training.recompute", "needs method (uniform or block) and num_layers"),
        ({"granularity": "full", "method": "block"}, None, "training.recompute", "needs method"),
        (
            {"granularity": "full", "method": "uniform", "num_layers": 1, "modules": ["mlp"]},
            None,
            "training.recompute",
            "modules apply to granularity selective",
        ),
        ({"granularity": "selective", "num_layers": 2}, None, "training.recompute", "apply to granularity full"),
        ({"granularity": "selective", "modules": ["mlp", "mlp"]}, None, "training.recompute", "listed twice"),
        ({"granularity": "partial"}, None, "training.recompute.granularity", "'full' or 'selective'"),
        ({"granularity": "selective", "modules": ["attn"]}, None, "training.recompute.modules.0", "core_attn"),
        ({"granularity": "full", "method": "block", "num_layers": 0}, None, "training.recompute.num_layers", "0"),
        ({"granularity": "selective", "extra": 1}, None, "training.recompute.extra", "unknown field"),
        ({"mode": "sometimes"}, "torchtitan", "training.recompute.mode", "'selective'"),
        ({"mode": "full", "option": "op"}, "torchtitan", "training.recompute", "option applies to mode selective"),
        ({"mode": "selective", "option": "ops"}, "torchtitan", "training.recompute.option", "'op' or a positive"),
        ({"mode": "selective", "option": 0}, "torchtitan", "training.recompute.option", "(got 0)"),
        ("fully", None, "training.recompute", "'full'"),
        ({"softmax": 2}, None, "training.recompute.softmax", "less than or equal to 1"),
        ({"softmx": 0}, None, "training.recompute", "unknown switch 'softmx'"),
        # MindFormers' recompute_config words (TransformerRecomputeConfig), as a MindFormers user writes them: said
        # as its words with ppb's for them, where they read "Input should be a valid dictionary (got true)" and
        # "training.recompute.recompute: Input should be a valid integer (got true)" (session 33)
        (
            True,
            "mindformers",
            "training.recompute",
            "true: MindFormers' recompute_config word; a run config says `full`",
        ),
        (
            False,
            "mindformers",
            "training.recompute",
            "false: MindFormers' recompute_config word; a run config says `{}`",
        ),
        (
            {"recompute": True, "select_recompute": False},
            "mindformers",
            "training.recompute",
            "recompute, select_recompute: MindFormers' recompute_config words; in a run config say `full`",
        ),
        ({"select_comm_recompute": True}, None, "training.recompute", "select_comm_recompute: MindFormers'"),
    ],
)
def test_bad_recompute_names_the_field(recompute, framework, field, words):
    err = _error(recompute, framework)
    assert err.field == field, err.line()
    assert words in err.problem, err.line()


def test_megatron_refuses_modules_its_config_does_not_support():
    """transformer_config.py `TransformerConfig.__post_init__` (d98e8a64): mla_up_proj only with
    multi-latent attention; moe_act and layernorm not under FP8's delayed scaling (Megatron's default recipe)."""
    with pytest.raises(InputError) as caught:
        _run({"granularity": "selective", "modules": ["mla_up_proj"]})  # BASE's llm is GQA, not MLA
    assert caught.value.field == "training.recompute"
    assert "mla_up_proj needs multi-latent attention, which llm has not" in caught.value.problem
    fp8 = {"matmul_dtype": "fp8"}  # fp8_recipe left at its default, delayed
    for module in ("layernorm", "moe_act"):
        with pytest.raises(InputError) as caught:
            _run({"granularity": "selective", "modules": [module]}, timing=fp8)
        assert f"{module} under FP8's delayed scaling" in caught.value.problem
    # the current-scaling recipe takes it, and BF16 training takes layernorm whatever the recipe
    assert _run({"granularity": "selective", "modules": ["layernorm"]}, timing={**fp8, "fp8_recipe": "tensorwise"})
    assert _run({"granularity": "selective", "modules": ["layernorm"]}, timing={"fp8_recipe": "delayed"})


def test_every_form_round_trips_through_the_run_config_table():
    for recompute, framework in (
        ({"softmax": 0}, None),
        ("full", "mindformers"),
        ({"granularity": "selective", "modules": ["core_attn", "mlp"]}, None),
        ({"granularity": "full", "method": "block", "num_layers": 3}, None),
        ({"mode": "selective", "option": "op"}, "torchtitan"),
        ({"mode": "selective", "option": 2}, "torchtitan"),
    ):
        run = _run(recompute, framework)
        again = run_from_frame(run_to_frame(run))
        assert again.framework == run.framework and again.training.recompute == run.training.recompute
        assert again.recompute == run.recompute
        assert isinstance(run.training.recompute, dict | str | MegatronRecompute | TorchtitanRecompute)
        assert set(run.recompute.switches) == set(SWITCHES)


def test_a_models_switches_refine_only_the_switch_form():
    raw = copy.deepcopy(BASE)
    raw["training"]["recompute"] = "full"
    raw["models"][0]["recompute"] = {"ffAct": 0}
    with pytest.raises(InputError) as caught:
        parse_run_config(raw, "run.yaml")
    assert caught.value.field == "models.0.recompute" and "run-wide" in caught.value.problem


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "mindformers"])
@pytest.mark.parametrize("zero", [0, 1, 2])
def test_a_zero_stage_beside_fsdp_is_refused_in_one_line(framework: str, zero: int):
    # FSDP is ZeRO-3 (parameters, gradients and optimizer states sharded): zero 0-2 beside it contradicts it
    with pytest.raises(InputError) as caught:
        _run(framework=framework, parallel={"dp": 2, "zero": zero, "fsdp": True})
    assert caught.value.source == "run.yaml" and caught.value.field == "parallel.zero"
    assert f"zero {zero} contradicts fsdp true" in caught.value.problem and "\n" not in str(caught.value)
    assert _run(framework=framework, parallel={"dp": 2, "zero": 3, "fsdp": True}).shard_level == 3


def test_torchtitan_shards_with_fsdp_or_replicates():
    # torchtitan's data parallelism is fully_shard (FSDP2) or replicate: no ZeRO-1/2.
    assert _run(framework="torchtitan").shard_level == 3  # zero left at its default: FSDP
    # replicate beside TP or PP: torchtitan v0.2.2 runs DDP, which raises "DDP has not supported > 1D parallelism"
    # (models/llama3/infra/parallelize.py); its composable replicate from e1847f439 (2026-03-09) runs it
    replicated = {"dp": 2, "tp": 2, "pp": 2, "zero": 0}
    later = {"framework_release": {"torchtitan": "2026-03-09"}}
    assert _run(framework="torchtitan", parallel=replicated, **later).shard_level == 0
    for parallel in (replicated, {**replicated, "tp": 1}, {**replicated, "pp": 1}):
        with pytest.raises(InputError) as caught:
            _run(framework="torchtitan", parallel=parallel)
        assert caught.value.field == "parallel.zero" and "\n" not in str(caught.value)
        assert "replicate (zero 0) over dp 2 beside " in caught.value.problem
        assert "torchtitan v0.2.2 replicates by DDP alone" in caught.value.problem
    with pytest.raises(InputError) as caught:
        _run(framework="torchtitan", parallel=replicated, framework_release={"torchtitan": "2026-03-08"})
    assert "beside tp 2, pp 2: torchtitan 2026-03-08 replicates by DDP alone" in caught.value.problem
    # nothing else beside it (dp 8: the replicate mesh is the world), or no replicate (dp 1): DDP runs, or none
    assert _run(framework="torchtitan", parallel={"dp": 8, "tp": 1, "pp": 1, "zero": 0}).shard_level == 0
    assert _run(framework="torchtitan", parallel={"dp": 1, "tp": 2, "pp": 2, "zero": 0}).shard_level == 0
    assert _run(framework="torchtitan", parallel={"dp": 2, "tp": 2, "pp": 2, "fsdp": True}).shard_level == 3
    assert _run(parallel={"dp": 2, "tp": 2, "pp": 2, "zero": 2}).shard_level == 2  # megatron keeps ZeRO levels
    with pytest.raises(InputError) as caught:
        _run(framework="torchtitan", parallel={"dp": 2, "tp": 2, "pp": 2, "zero": 1})
    assert caught.value.field == "parallel.zero" and "no ZeRO-1" in caught.value.problem
