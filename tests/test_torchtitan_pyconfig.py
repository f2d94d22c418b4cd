"""`ppb import torchtitan FILE.py`: a torchtitan config function (from 9810191bb) read without running it.

Expected run configs are derived by hand from torchtitan's own classes (config/configs.py at 9810191bb and
b5bcd76c6: ParallelismConfig, TrainingConfig, ActivationCheckpointConfig; distributed/activation_checkpoint.py
SelectiveAC / FullAC from c5d93d109; 73aed7f6c's batch table) and the model flavors ppb transcribes from v0.2.2
(`torchtitan_flavors`: llama3 debugmodel is dim 256, 6 layers, 16 heads, vocab 2048, FFN 768).

With PPB_TORCHTITAN naming a torchtitan git repository, `FIELDS` is checked against configs.py's dataclasses
at every commit that changed them, and torchtitan's own llama3 config registries are read.
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.balance.torchtitan_plan import torchtitan
from ppb_core.balance.torchtitan_pyconfig import FIELDS, fields_at, python_release, read_config
from ppb_core.cli.main import main
from ppb_core.config.recompute import TorchtitanRecompute
from ppb_core.config.releases import parse_release
from ppb_core.config.run import FrameworkRelease
from ppb_core.errors import InputError

TORCHTITAN = os.environ.get("PPB_TORCHTITAN")
FIRST, LATEST = "2026-02-23", "2026-08-21"

# 9810191bb's names: a PP 2 Interleaved1F1B job of llama3's debugmodel (6 layers), 4 stages of 2, 1, 1, 2
# layers (tok_embeddings with layers 0-1, ..., layers 4-5 with norm and output), micro-batch 2, 8 micro-batches
# (local 16), dp_shard 2, global 64 (two accumulation steps), the op policy, compiled, float8
FIRST_FILE = '''
from torchtitan.components.optimizer import OptimizersContainer
from torchtitan.components.quantization.float8 import Float8LinearConverter
from torchtitan.config import ActivationCheckpointConfig, CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.llama3 import model_registry
from torchtitan.protocols.model_converter import ModelConvertersContainer
from torchtitan.trainer import Trainer


def base() -> Trainer.Config:
    """A base the job derives from, as torchtitan's README does."""
    return Trainer.Config(
        model_spec=model_registry("debugmodel"),
        optimizer=OptimizersContainer.Config(lr=8e-4, implementation="foreach"),
        training=TrainingConfig(local_batch_size=16, global_batch_size=64, seq_len=1024, steps=10),
        dataloader=HuggingFaceTextDataLoader.Config(dataset=pick_dataset()),  # no bearing: never evaluated
        parallelism=ParallelismConfig(data_parallel_shard_degree=2, pipeline_parallel_degree=2),
        activation_checkpoint=ActivationCheckpointConfig(mode="selective", selective_ac_option="op"),
    )


def job() -> Trainer.Config:
    config = base()
    config.parallelism.pipeline_parallel_schedule = "Interleaved1F1B"
    config.parallelism.pipeline_parallel_microbatch_size = 2
    config.parallelism.module_fqns_per_model_part = [
        ["tok_embeddings", "layers.0", "layers.1"], ["layers.2"], ["layers.3"],
        ["layers.4", "layers.5", "norm", "output"],
    ]
    config.compile = CompileConfig(enable=True, components=["model", "loss"])
    config.model_converters = ModelConvertersContainer.Config(
        converters=[Float8LinearConverter.Config(enable_fsdp_float8_all_gather=True, filter_fqns=["output"])]
    )
    return config
'''

# The same job in b5bcd76c6's names: tokens (a micro-batch 2 × 1024 = 2048 tokens, 8 of them; a step
# 64 × 1024 = 65536 tokens), lm_head, SelectiveAC.Config, float8 in model_registry (rowwise by default there,
# no FSDP float8 all-gather), default_adamw
LATEST_FILE = """
from torchtitan.components.optimizer import default_adamw
from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.models.llama3 import model_registry
from torchtitan.trainer import Trainer


def job() -> Trainer.Config:
    model_spec = model_registry(
        "debugmodel", attn_backend="sdpa", converters=[Float8LinearConverter.Config(filter_fqns=["lm_head"])]
    )
    return Trainer.Config(
        model_spec=model_spec,
        optimizer=default_adamw(lr=8e-4),
        training=TrainingConfig(
            num_tokens_per_microbatch_per_dp_rank=2 * 1024, num_tokens_per_train_step=64 * 1024,
            max_context_length=1024, disable_cuda_graphs=True,
        ),
        parallelism=ParallelismConfig(
            data_parallel_shard_degree=2, pipeline_parallel_degree=2, pipeline_parallel_schedule="Interleaved1F1B",
            num_pp_microbatches=8,
            module_fqns_per_model_part=[
                ["tok_embeddings", "layers.0", "layers.1"], ["layers.2"], ["layers.3"],
                ["layers.4", "layers.5", "norm", "lm_head"],
            ],
        ),
        activation_checkpoint=SelectiveAC.Config(),
        compile=CompileConfig(enable=True, components=["model", "loss"]),
    )
"""


def _read(text: str, release: str = FIRST, function: str | None = "job", gpus: int | None = 4) -> Any:
    where = "job.py"
    return read_config(text, where, function, parse_release("torchtitan", release), gpus, "h100-80gb")


def _refused(text: str, release: str = FIRST, function: str | None = "job") -> str:
    with pytest.raises(InputError) as caught:
        _read(text, release, function)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("job.py")
    return line


def test_a_config_function_becomes_the_run_config_derived_by_hand():
    imported = _read(FIRST_FILE)
    raw = imported.raw
    assert raw["models"][0]["spec"] == {
        "max_position_embeddings": 1024,  # seq_len
        "activation": "swiglu",
        "norm": "rmsnorm",
        "vocab_size": 2048,
        "hidden_size": 256,
        "num_layers": 6,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 768,
    }
    # 4 GPUs = dp_shard 2 × pp 2; FSDP2; 4 stages on 2 ranks: vpp 2, the parts as a layout
    assert raw["parallel"] == {
        "dp": 2,
        "tp": 1,
        "pp": 2,
        "cp": 1,
        "world_size": 4,
        "fsdp": True,
        "zero": 3,
        "vpp": 2,
        "schedule": "interleaved",
        "layout": "Ett|t|t|ttL",
    }
    # micro-batch 2; local 16 / 2 = 8 micro-batches a flush × 64 / (16 · 2) = 2 flushes = 16
    assert raw["training"] == {
        "seq_length": 1024,
        "micro_batch_size": 2,
        "micro_batches": 16,
        "dtype": "bf16",
        "optimizer": "adamw",
        "flash_attention": True,
        "recompute": {"mode": "selective", "option": "op"},
    }
    assert raw["timing"] == {
        "optimizer_implementation": "foreach",
        "torch_compile": True,
        "matmul_dtype": "fp8",
        "fp8_recipe": "tensorwise",
        "fp8_fsdp_all_gather": True,
    }
    assert raw["framework_release"] == {"torchtitan": FIRST}
    assert imported.notes == ["training.global_batch_size 64: 2 pipeline flushes a step, priced as one"]


def test_the_latest_names_say_the_same_job():
    first, latest = _read(FIRST_FILE).raw, _read(LATEST_FILE, LATEST).raw
    assert latest["framework_release"] == {"torchtitan": LATEST}
    for key in ("models", "parallel", "training"):
        assert latest[key] == first[key]
    # rowwise at b5bcd76c6 (Float8LinearConverter.Config's default), no FSDP float8 all-gather; AdamW fused
    assert latest["timing"] == {"torch_compile": True, "matmul_dtype": "fp8", "fp8_recipe": "tensorwise"}


def test_the_latest_names_are_the_lines_said():
    # The TOML reader's notes and refusals in the names LATEST_FILE writes: the step 64 × 1024 = 65536 tokens is
    # 64 sequences of 1024, a data-parallel rank's 16 (2 a micro-batch × 8) on dp 2 twice (2 flushes); the float8
    # converter the first of model_registry's converters, rowwise by default (6348d93d1), priced as tensorwise
    assert _read(LATEST_FILE, LATEST).notes == [
        "training.num_tokens_per_train_step 65536 tokens (64 sequences of 1024): 2 pipeline flushes a step, "
        "priced as one",
        "model_spec.converters[0].recipe_name rowwise: priced as tensorwise",
    ]
    # 48 × 1024 tokens: 48 sequences, a multiple of the rank's 16 but not of 16 × dp 2 (train.py asserts it)
    line = _refused(
        LATEST_FILE.replace("num_tokens_per_train_step=64 * 1024", "num_tokens_per_train_step=48 * 1024"), LATEST
    )
    assert line == (
        "job.py job(): training.num_tokens_per_train_step: 49152 tokens (48 sequences of 1024) is not a multiple "
        "of local 16 × dp 2"
    )


def test_the_printed_lines_read_back_to_the_plan():
    # ppb's lines for a PP 2 1F1B plan of the debugmodel's 6 layers as 2 | 4, full, micro-batch 2 of 4 a
    # step on dp 2, pasted into a base function: the import reads the same split, recompute and batch
    given = {"stages": 2, "interleave": 1, "schedule": "1f1b", "framework": "torchtitan", "micro_batches": 4}
    result = {"input": given, "cells": [[{"options": {"FULL": 2}}, {"options": {"FULL": 4}}]]}
    result["recompute_setting"] = {"name": "full", "num_layers": 0}
    op = TorchtitanRecompute(mode="selective", option="op")
    for release in (FIRST, "2026-06-15", LATEST):
        said = torchtitan(result, op, (2, 2), FrameworkRelease(torchtitan=release), 1024)
        assert said is not None
        body = "\n".join(f"    {line}" for line in said["lines"])
        text = (
            "from torchtitan.config import ParallelismConfig, TrainingConfig\n"
            "from torchtitan.models.llama3 import model_registry\n"
            "def job() -> Trainer.Config:\n"
            "    config = Trainer.Config(model_spec=model_registry('debugmodel'),\n"
            "        parallelism=ParallelismConfig(data_parallel_shard_degree=2))\n"
            f"{body}\n    return config\n"
        )
        raw = _read(text, release).raw
        assert raw["parallel"]["layout"] == "Ett|ttttL" and raw["parallel"]["pp"] == 2
        assert raw["training"]["micro_batch_size"] == 2 and raw["training"]["micro_batches"] == 4
        assert raw["training"]["recompute"] == {"mode": "full"}


@pytest.mark.parametrize(
    ("edit", "release", "field", "words"),
    [
        # a typo torchtitan's kw_only dataclass would refuse
        (("data_parallel_shard_degree=2,", "data_paralel_shard_degree=2,"), FIRST, "parallelism.data_paralel",
         "did you mean"),
        # not a literal on a field ppb reads
        (("seq_len=1024", "seq_len=length()"), FIRST, "training.seq_len", "not a literal"),
        # a field of another release
        (("seq_len=1024", "max_context_length=1024"), FIRST, "training.max_context_length", "another release"),
    ],
)  # fmt: skip
def test_what_cannot_be_read_is_refused_in_one_line(edit, release, field, words):
    line = _refused(FIRST_FILE.replace(*edit), release)
    assert field in line and words in line


MINIMAL = """
from torchtitan.models.llama3 import model_registry
def job() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("debugmodel"), activation_checkpoint=AC)
"""


def test_more_refusals():
    # ActivationCheckpointConfig is gone from c5d93d109, SelectiveAC.Config not there before
    old, new = "ActivationCheckpointConfig(mode='full')", "SelectiveAC.Config()"
    said = _refused(MINIMAL.replace("AC", old), "2026-06-15")
    assert "activation_checkpoint: ActivationCheckpointConfig is not in torchtitan 2026-06-15" in said
    assert "SelectiveAC.Config is not in torchtitan 2026-06-14" in _refused(MINIMAL.replace("AC", new), "2026-06-14")
    assert _read(MINIMAL.replace("AC", old), "2026-06-14").raw["training"]["recompute"] == {"mode": "full"}
    assert _read(MINIMAL.replace("AC", "None"), "2026-06-15").raw["training"]["recompute"] == {"mode": "none"}
    # the output projection is lm_head from 786e26f8e
    assert "lm_head" in _refused(LATEST_FILE.replace('"norm", "lm_head"', '"norm", "output"'), LATEST)
    # a token budget that is not whole sequences
    said = _refused(LATEST_FILE.replace("2 * 1024", "2 * 1000"), LATEST)
    assert "num_tokens_per_microbatch_per_dp_rank: 2000 is not a whole number of 1024-token" in said
    # a statement ppb does not read
    said = _refused(FIRST_FILE.replace("    return config", "    for i in range(2):\n        pass\n    return config"))
    assert "job.py job(): line" in said and "for i in range(2)" in said
    # several functions and no --config
    assert "holds 2 functions returning Trainer.Config (base, job)" in _refused(FIRST_FILE, FIRST, None)
    assert "not Python" in _refused("def job(:\n")
    with pytest.raises(InputError, match="--torchtitan-release: 2026-02-22: torchtitan configured by Python"):
        python_release("2026-02-22")


def test_the_cli_writes_the_run_config(tmp_path: Path, capsys):
    path = tmp_path / "job.py"
    path.write_text(FIRST_FILE)
    out = tmp_path / "run.yaml"
    args = [
        "import",
        "torchtitan",
        str(path),
        "--config",
        "job",
        "--gpus",
        "4",
        "--device",
        "h100-80gb",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    raw = yaml.safe_load(out.read_text())
    assert raw["name"] == "job" and raw["framework_release"] == {"torchtitan": FIRST}
    assert main(["estimate", str(out)]) == 0
    # the options are the .py reader's only
    toml = tmp_path / "job.toml"
    toml.write_text('[model]\nname = "llama3"\n')
    assert main(["import", "torchtitan", str(toml), "--config", "job", "--device", "h100-80gb"]) == 2
    assert "--config: reads a config function's .py file" in capsys.readouterr().err
    # a .py file that is not there is said as the config function's file, not a TOML
    missing = tmp_path / "gone.py"
    assert main(["import", "torchtitan", str(missing), "--device", "h100-80gb"]) == 2
    assert capsys.readouterr().err == f"ppb: error: {missing}: no such file (a torchtitan config function's .py file)\n"


def _git(path: str, commit: str) -> str:
    assert TORCHTITAN is not None
    run = subprocess.run(["git", "-C", TORCHTITAN, "show", f"{commit}:{path}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _commits(path: str) -> list[tuple[str, str]]:
    assert TORCHTITAN is not None
    args = ["git", "-C", TORCHTITAN, "log", "--reverse", "--format=%h %ad", "--date=short", "9810191bb^..b5bcd76c6"]
    out = subprocess.run([*args, "--", path], capture_output=True, text=True, check=True).stdout
    return [tuple(line.split()) for line in out.splitlines()]  # type: ignore[misc]


def _classes(text: str, names: set[str]) -> dict[str, set[str]]:
    found = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name in names:
            found[node.name] = {item.target.id for item in node.body if isinstance(item, ast.AnnAssign)}  # type: ignore[union-attr]
    return found


@pytest.mark.skipif(TORCHTITAN is None, reason="PPB_TORCHTITAN (a torchtitan git repository) is not set")
def test_the_fields_are_torchtitan_s_at_every_commit_that_changed_them():
    names = {"TrainingConfig", "ParallelismConfig", "ActivationCheckpointConfig", "CompileConfig", "DebugConfig"}
    commits = _commits("torchtitan/config/configs.py")
    checked = 0
    for index, (commit, date) in enumerate(commits):
        if any(later_date == date for _, later_date in commits[index + 1 :]):
            continue  # a later commit of the same day: a date holds both
        have = _classes(_git("torchtitan/config/configs.py", commit), names)
        release = parse_release("torchtitan", date)
        for name in names:
            assert fields_at(name, release) == have.get(name, set()), (commit, name)
        checked += 1
    assert checked >= 20
    # Trainer.Config's own fields
    trainer_commits = _commits("torchtitan/trainer.py")
    for index, (commit, date) in enumerate(trainer_commits):
        if any(later_date == date for _, later_date in trainer_commits[index + 1 :]):
            continue
        tree = ast.parse(_git("torchtitan/trainer.py", commit))
        trainer = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Trainer")
        config = next(n for n in trainer.body if isinstance(n, ast.ClassDef) and n.name == "Config")
        have = {item.target.id for item in config.body if isinstance(item, ast.AnnAssign)}  # type: ignore[union-attr]
        assert fields_at("Trainer.Config", parse_release("torchtitan", date)) == have, commit
    assert set(FIELDS) >= names


@pytest.mark.skipif(TORCHTITAN is None, reason="PPB_TORCHTITAN (a torchtitan git repository) is not set")
@pytest.mark.parametrize(("commit", "release"), [("9810191bb", FIRST), ("b5bcd76c6", LATEST)])
def test_torchtitan_s_own_llama3_8b_reads_as_its_v0_2_2_toml(commit, release):
    # v0.2.2's llama3_8b.toml: 8192 tokens, local batch 1, selective op (tests/test_torchtitan_import.py)
    text = _git("torchtitan/models/llama3/config_registry.py", commit)
    where = "torchtitan/models/llama3/config_registry.py"  # `from . import model_registry`: the folder names it
    raw = read_config(text, where, "llama3_8b", parse_release("torchtitan", release), 64, "h100-80gb")
    assert raw.raw["training"]["seq_length"] == 8192 and raw.raw["training"]["micro_batch_size"] == 1
    assert raw.raw["training"]["recompute"] == {"mode": "selective", "option": "op"}
    assert raw.raw["parallel"] == {"dp": 64, "tp": 1, "pp": 1, "cp": 1, "world_size": 64, "fsdp": True, "zero": 3}


def test_check_reads_the_python_lines_as_a_plan(tmp_path: Path, capsys):
    # a PP 2 run of SMALL_GQA's 4 layers (2 | 2) under full, micro-batch 1, 4 a step, dp 2, at b5bcd76c6:
    # the lines ppb prints for it are checked as its plan; 8 PP micro-batches are not the run's 4
    run = {
        "name": "r",
        "framework": "torchtitan",
        "framework_release": {"torchtitan": LATEST},
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, "pp": 2, "zero": 3, "fsdp": True},
        "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": 4, "recompute": {"mode": "full"}},
        "device": ROUND_DEVICE,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    given = {"stages": 2, "interleave": 1, "schedule": "1f1b", "framework": "torchtitan", "micro_batches": 4}
    result = {"input": given, "cells": [[{"options": {"FULL": 2}}, {"options": {"FULL": 2}}]]}
    result["recompute_setting"] = {"name": "full", "num_layers": 0}
    said = torchtitan(result, None, (1, 2), FrameworkRelease(torchtitan=LATEST), 2048)
    assert said is not None
    lines = tmp_path / "plan.torchtitan.py"
    lines.write_text("\n".join(said["lines"]) + "\n")
    assert main(["check", str(path), "--plan", str(lines), "--no-optimum"]) == 0
    wrong = tmp_path / "wrong.py"
    wrong.write_text(lines.read_text().replace("num_pp_microbatches = 4", "num_pp_microbatches = 8"))
    capsys.readouterr()
    assert main(["check", str(path), "--plan", str(wrong), "--no-optimum"]) == 2
    err = capsys.readouterr().err
    assert "wrong.py: parallelism.num_pp_microbatches: 8; the run config prices 4 micro-batches of 1" in err


def test_a_pp1_job_s_batch_is_accumulation_steps_of_local(tmp_path: Path, capsys):
    # without PP train.py takes global // (local · dp) accumulation steps of local_batch_size sequences: the
    # run's micro-batch 1, 2 a step on dp 2 is local 1, global 4 (`ppb search -o` writes that); local 2 would
    # run micro-batches of 2 (refused before session 32 was the other way round)
    run = {
        "name": "r",
        "framework": "torchtitan",
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, "zero": 3, "fsdp": True},
        "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": 2, "recompute": {"mode": "full"}},
        "device": ROUND_DEVICE,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    plan = tmp_path / "plan.toml"
    plan.write_text('[activation_checkpoint]\nmode = "full"\n[training]\nlocal_batch_size = 1\nglobal_batch_size = 4\n')
    assert main(["check", str(path), "--plan", str(plan), "--no-optimum"]) == 0
    plan.write_text(plan.read_text().replace("local_batch_size = 1", "local_batch_size = 2"))
    capsys.readouterr()
    assert main(["check", str(path), "--plan", str(plan), "--no-optimum"]) == 2
    assert "training.local_batch_size: 2; the run config prices 2 micro-batches of 1 on dp 2" in capsys.readouterr().err


def test_a_registry_copied_out_of_its_model_s_folder_is_told_where_to_keep_it():
    """torchtitan's own config_registry.py imports `from . import model_registry`: the model is the folder's
    (torchtitan/models/llama3/). A user's copy in cfg/ was refused as "torchtitan.models.cfg: ppb imports ...",
    naming a module that does not exist; now the line says the folder names the model. In llama3/ it reads."""
    text = LATEST_FILE.replace("from torchtitan.models.llama3 import model_registry", "from . import model_registry")
    release = parse_release("torchtitan", LATEST)
    with pytest.raises(InputError) as caught:
        read_config(text, "cfg/config_registry.py", "job", release, 4, "h100-80gb")
    line = str(caught.value)
    assert "\n" not in line and line.startswith("cfg/config_registry.py job(): model_spec: ")
    assert "`from . import model_registry` names the model by the file's folder, 'cfg'" in line
    assert "keep the file in its model's folder" in line and "torchtitan.models.cfg" not in line
    read = read_config(text, "llama3/config_registry.py", "job", release, 4, "h100-80gb")
    assert read.raw == _read(LATEST_FILE, LATEST).raw
