"""torchtitan from 9810191bb is configured by Python functions returning a `Trainer.Config`: ppb prints the
plan's split, batch and recompute as assignments on `config`, in each release's field names.

Read in pytorch/torchtitan (config/configs.py unless said):
* 9810191bb (2026-02-23, #2386): `ParallelismConfig` pipeline_parallel_degree, pipeline_parallel_schedule,
  pipeline_parallel_microbatch_size, module_fqns_per_model_part, pipeline_parallel_layers_per_stage;
  `TrainingConfig` local_batch_size, global_batch_size; `ActivationCheckpointConfig` mode, selective_ac_option.
* 114151ad4 (2026-03-23): selective_ac_option gone.
* 786e26f8e (2026-04-27, #2937): the output projection is `lm_head` (pipeline_parallel.py
  `_generate_llm_fqn_per_model_part` ends a model with "norm", "lm_head").
* c5d93d109 (2026-06-15, #3674): ActivationCheckpointConfig gone; distributed/activation_checkpoint.py
  `SelectiveAC.Config`, `FullAC.Config` or None is the field's value.
* 73aed7f6c (2026-08-20, #4121, its table "Before | After"): local_batch_size → num_tokens_per_microbatch_per_dp_rank,
  global_batch_size → num_tokens_per_train_step, pipeline_parallel_microbatch_size → num_pp_microbatches.

With PPB_TORCHTITAN naming a torchtitan git repository (a clone or bare mirror), the printed lines are run
against config/configs.py's own dataclasses at each commit (slots: a field a release lacks raises).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
import types
from typing import Any

import pytest
from small_models import SMALL_GQA

from ppb_core.balance.torchtitan_plan import torchtitan, torchtitan_lines
from ppb_core.chain.stages import torchtitan_headline
from ppb_core.config.recompute import TorchtitanRecompute
from ppb_core.config.run import FrameworkRelease, parse_run_config
from ppb_core.errors import InputError

OP = TorchtitanRecompute(mode="selective", option="op")
TORCHTITAN = os.environ.get("PPB_TORCHTITAN")
# (commit, its date as a run states the release)
COMMITS = [
    ("9810191bb", "2026-02-23"),
    ("114151ad4", "2026-03-23"),
    ("786e26f8e", "2026-04-27"),
    ("c5d93d109", "2026-06-15"),
    ("73aed7f6c", "2026-08-20"),
    ("b5bcd76c6", "2026-08-21"),
]
SETTINGS = {"op": "selective", "full": "full", "none": "none"}


def _result(setting: str, stages: int = 2) -> dict[str, Any]:
    """A PP *stages* plan of 4 layers (2 a stage at PP 2), 4 micro-batches, solved under *setting*."""
    option = {"selective": "SLCT", "full": "FULL", "none": "NONE"}[setting]
    grid = [[{option: 4 // stages} for _ in range(stages)]]
    given = {"stages": stages, "interleave": 1, "schedule": "1f1b", "framework": "torchtitan", "micro_batches": 4}
    cells = [[{"options": options} for options in row] for row in grid]
    return {"input": given, "cells": cells, "recompute_setting": {"name": setting, "num_layers": 0}}


def _said(release: str, setting: str = "selective", stages: int = 2) -> dict[str, Any]:
    # micro-batch 2, dp 4, 2048 tokens a sequence
    said = torchtitan(_result(setting, stages), OP, (2, 4), FrameworkRelease(torchtitan=release), 2048)
    assert said is not None
    return said


def test_before_9810191bb_the_toml_is_unchanged():
    for release in (None, "v0.2.2", "2026-02-22"):
        said = torchtitan(_result("selective"), OP, (2, 4), FrameworkRelease(torchtitan=release), 2048)
        assert said is not None and "format" not in said and said["lines"][0] == "[parallelism]"


def test_the_lines_of_each_release_by_hand():
    # 9810191bb: the TOML's keys as fields; b 2, m 4, dp 4: local 2·4 = 8, global 8·4 = 32
    first = _said("2026-02-23")
    assert first["format"] == "python" and first["recompute_expressible"]
    assert first["lines"][1:] == [
        "config.parallelism.pipeline_parallel_degree = 2",
        'config.parallelism.pipeline_parallel_schedule = "1F1B"',
        "config.parallelism.pipeline_parallel_microbatch_size = 2",
        'config.parallelism.module_fqns_per_model_part = [["tok_embeddings", "layers.0", "layers.1"], '
        '["layers.2", "layers.3", "norm", "output"]]',
        "config.parallelism.pipeline_parallel_layers_per_stage = None  # the parts above set the stages",
        'config.activation_checkpoint.mode = "selective"',
        'config.activation_checkpoint.selective_ac_option = "op"',
        "config.training.local_batch_size = 8",
        "config.training.global_batch_size = 32",
    ]
    # 114151ad4: no option; 786e26f8e: lm_head
    assert 'config.activation_checkpoint.selective_ac_option = "op"' not in _said("2026-03-23")["lines"]
    assert _said("2026-04-27")["module_fqns_per_model_part"][-1][-2:] == ["norm", "lm_head"]
    # c5d93d109: the policy object, its import first
    policy = _said("2026-06-15")["lines"]
    assert policy[0] == "from torchtitan.distributed.activation_checkpoint import SelectiveAC"
    assert "config.activation_checkpoint = SelectiveAC.Config()" in policy
    assert "config.activation_checkpoint = None" in _said("2026-06-15", "none")["lines"]
    assert "config.activation_checkpoint = FullAC.Config()" in _said("2026-06-15", "full")["lines"]
    # 73aed7f6c: tokens; a micro-batch 2 × 2048 = 4096 tokens, 4 of them, dp 4: 4096·4·4 = 65536 a step
    tokens = _said("2026-08-20")
    assert tokens["batch"] == {
        "num_pp_microbatches": 4,
        "max_context_length": 2048,
        "num_tokens_per_microbatch_per_dp_rank": 4096,
        "num_tokens_per_train_step": 65536,
    }
    assert "config.parallelism.num_pp_microbatches = 4" in tokens["lines"]
    assert "config.training.num_tokens_per_microbatch_per_dp_rank = 4096" in tokens["lines"]
    assert not any("local_batch_size" in line or "microbatch_size" in line for line in tokens["lines"])
    printed = torchtitan_lines(tokens)
    assert printed[0] == "torchtitan config (Python):" and printed[1].startswith("  from torchtitan.")


def test_pp1_says_the_recompute_alone():
    said = _said("2026-08-21", "full", stages=1)
    assert said["lines"][0] == "from torchtitan.distributed.activation_checkpoint import FullAC"
    assert said["lines"][-1] == "config.activation_checkpoint = FullAC.Config()" and "batch" not in said


def _git(path: str, commit: str) -> str:
    assert TORCHTITAN is not None
    run = subprocess.run(["git", "-C", TORCHTITAN, "show", f"{commit}:{path}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _configs(commit: str) -> types.ModuleType:
    """torchtitan's config/configs.py at *commit*, executed: its dataclasses (plain Python and torch)."""
    module = types.ModuleType(f"torchtitan_configs_{commit}")
    sys.modules[module.__name__] = module  # dataclasses looks its module up
    try:
        exec(compile(_git("torchtitan/config/configs.py", commit), module.__name__, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def _policies(commit: str, names: set[str]) -> dict[str, Any]:
    """Stand-ins for the policy classes the lines import, checked in the file they import from at *commit*:
    each a class there with a nested `Config` whose every field has a default (so `Config()` builds)."""
    tree = ast.parse(_git("torchtitan/distributed/activation_checkpoint.py", commit))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    found = {}
    for name in names:
        config = next(n for n in classes[name].body if isinstance(n, ast.ClassDef) and n.name == "Config")
        fields = [n for n in config.body if isinstance(n, ast.AnnAssign)]
        assert all(n.value is not None for n in fields), f"{name}.Config has a field without a default"
        found[name] = types.SimpleNamespace(Config=lambda name=name: f"{name}.Config()")
    return found


@pytest.mark.skipif(TORCHTITAN is None, reason="PPB_TORCHTITAN (a torchtitan git repository) is not set")
@pytest.mark.parametrize(("commit", "release"), COMMITS)
@pytest.mark.parametrize("setting", sorted(SETTINGS.values()))
def test_the_lines_run_on_torchtitan_s_own_config_classes(commit, release, setting):
    configs = _configs(commit)
    ac_class = getattr(configs, "ActivationCheckpointConfig", None)
    config = types.SimpleNamespace(
        parallelism=configs.ParallelismConfig(),
        training=configs.TrainingConfig(),
        activation_checkpoint=ac_class() if ac_class is not None else None,
    )
    lines = _said(release, setting)["lines"]
    imports = [line for line in lines if line.startswith("from ")]
    names = {name.strip() for line in imports for name in line.split(" import ")[1].split(",")}
    assert all(line.startswith("from torchtitan.distributed.activation_checkpoint import ") for line in imports)
    scope = {"config": config, **(_policies(commit, names) if names else {})}
    exec("\n".join(line for line in lines if not line.startswith("from ")), scope)  # slots: unknown fields raise
    # the classes' own checks (__post_init__) on the values set
    for part in (config.parallelism, config.training):
        type(part)(**{f.name: getattr(part, f.name) for f in dataclasses.fields(part)})
    # the module names are those pipeline_parallel.py generates at that commit
    source = _git("torchtitan/distributed/pipeline_parallel.py", commit)
    last = _said(release, setting)["module_fqns_per_model_part"][-1][-2:]
    assert f'["norm", "{last[1]}"]' in source.replace("'", '"')


@pytest.mark.skipif(TORCHTITAN is None, reason="PPB_TORCHTITAN (a torchtitan git repository) is not set")
def test_a_field_a_release_lacks_raises():
    # the control: v0.2.2's option key on 114151ad4's class, its batch key on 73aed7f6c's
    ac = _configs("114151ad4").ActivationCheckpointConfig()
    with pytest.raises(AttributeError):
        ac.selective_ac_option = "op"
    training = _configs("73aed7f6c").TrainingConfig()
    with pytest.raises(AttributeError):
        training.local_batch_size = 8


MOE = {
    **SMALL_GQA,
    "num_experts": 8,
    "experts_per_token": 2,
    "moe_intermediate_size": 512,
}


def _moe_run(release: str, etp: int | None) -> dict[str, Any]:
    parallel = {"dp": 4, "tp": 2, "ep": 4, "fsdp": True, "zero": 3, **({"etp": etp} if etp is not None else {})}
    return {
        "name": "moe",
        "framework": "torchtitan",
        "framework_release": {"torchtitan": release},
        "models": [{"name": "llm", "spec": MOE}],
        "parallel": parallel,
        "training": {"seq_length": 2048, "micro_batch_size": 1, "recompute": {"mode": "full"}},
        "device": {"name": "h100-80gb"},
    }


def test_expert_tensor_parallelism_is_refused_from_c4b409af2():
    # the day before c4b409af2 etp = tp 2 (ppb's default) runs; from it the field is gone
    assert parse_run_config(_moe_run("2026-04-29", None)).parallel.expert_tp == 2
    with pytest.raises(InputError) as caught:
        parse_run_config(_moe_run("2026-04-30", None), "run.yaml")
    assert str(caught.value).startswith("run.yaml: parallel.etp: 2 (unset: tp)") and "c4b409af2" in str(caught.value)
    assert parse_run_config(_moe_run("2026-04-30", 1)).parallel.expert_tp == 1


def test_the_chain_report_fences_python():
    (key, block), *_ = torchtitan_headline(_said("2026-08-21"))
    assert key == "torchtitan config (Python)" and "```python" in block and "SelectiveAC.Config()" in block
    (key, block), *_ = torchtitan_headline(torchtitan(_result("selective"), OP, (2, 4), FrameworkRelease(), 2048))
    assert key == "torchtitan job TOML" and "```toml" in block
