"""`ppb check RUN.yaml --plan FLAGS`: Megatron-LM's recompute flags priced as the plan gives them,
in place of the run config's recompute (as its layout replaces the run config's split); refused
only where Megatron-LM refuses them.

The independent route is `ppb estimate` on the run config itself, the same recompute written as
its `training.recompute` in Megatron's words and the same split as its `parallel.layout`: the
same stage peaks and iteration seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from check_runs import CONFIGS, LAYOUT, SPLIT, check_json, estimated, figures, llama_run

from ppb_core.balance.megatron import parse_flags
from ppb_core.cli.main import main


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ("--recompute-granularity selective", {"granularity": "selective"}),
        # megatron/training/arguments.py validate_args: --recompute-activations sets granularity selective
        ("--recompute-activations", {"granularity": "selective"}),
        (
            "--recompute-granularity selective --recompute-modules core_attn mlp",
            {"granularity": "selective", "modules": ["core_attn", "mlp"]},
        ),
    ],
)
def test_selective_flags_are_priced_as_the_run_config_would_price_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: str, words: dict[str, Any]
) -> None:
    # the shipped config says ppb's switches, not Megatron's words: once refused, now priced
    code, given = check_json(capsys, CONFIGS / "llama3-8b.yaml", f"{LAYOUT} {flags}")
    assert code == 0 and given["plan_recompute"] == words
    assert [stage["options"] for stage in given["stages"]] == [{"SLCT": n} for n in (9, 8, 8, 7)]
    # the same recompute and split written in the run config, estimated
    assert figures(given) == estimated(capsys, llama_run(tmp_path, words, SPLIT))


def test_the_flags_modules_replace_the_run_configs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # the run config says core_attn; the flags say core_attn and mlp: the flags' modules are priced
    run = llama_run(tmp_path, {"granularity": "selective", "modules": ["core_attn"]})
    _, given = check_json(capsys, run, f"{LAYOUT} --recompute-granularity selective --recompute-modules core_attn mlp")
    _, own = check_json(capsys, run, f"{LAYOUT} --recompute-granularity selective")
    wider = llama_run(tmp_path, {"granularity": "selective", "modules": ["core_attn", "mlp"]}, SPLIT)
    assert figures(given) == estimated(capsys, wider)
    # recomputing the MLP's activation too keeps less on every stage
    assert all(a < b for a, b in zip(figures(given)[0], figures(own)[0], strict=True))


def test_no_recompute_flag_prices_no_recompute_whatever_the_run_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = llama_run(tmp_path, {"granularity": "selective"})
    _, out = check_json(capsys, run, LAYOUT)
    assert [stage["options"] for stage in out["stages"]] == [{"NONE": n} for n in (9, 8, 8, 7)]


@pytest.mark.parametrize(
    ("flags", "field", "problem"),
    [
        # megatron/training/arguments.py validate_args (d98e8a64): "recompute method is not yet
        # supported for selective recomputing granularity"
        ("--recompute-granularity selective --recompute-method uniform", "--recompute-granularity", "method"),
        # transformer_config.py TransformerConfig.__post_init__: recompute_num_layers must be None
        # with selective granularity
        (
            "--recompute-granularity selective --recompute-num-layers 2",
            "--recompute-granularity",
            "--recompute-num-layers",
        ),
        # __post_init__: "Invalid choices for recompute_modules"
        ("--recompute-granularity selective --recompute-modules attention", "--recompute-modules", "core_attn"),
        # __post_init__: "mla_up_proj in recompute_modules is only supported with multi_latent_attention"
        ("--recompute-granularity selective --recompute-modules mla_up_proj", "--recompute-modules", "multi-latent"),
    ],
)
def test_what_megatron_refuses_is_one_line(
    capsys: pytest.CaptureFixture[str], flags: str, field: str, problem: str
) -> None:
    code = main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", f"{LAYOUT} {flags}", "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and f"--plan: {field}: " in captured.err and problem in captured.err


@pytest.mark.parametrize(
    ("flags", "meant"),
    [
        # Megatron-LM's parser takes no abbreviation and no unknown flag (megatron/training/arguments.py
        # `parse_args`: ArgumentParser(allow_abbrev=False), d98e8a64): the launch stops there, so the plan
        # priced without the flag (the default modules) would not be the one that runs
        ("--recompute-granularity selective --recompute-modul mlp", "--recompute-modules"),
        ("--recompute-granularity full --recompute-metod uniform --recompute-num-layers 1", "--recompute-method"),
    ],
)
def test_a_flag_a_letter_off_one_ppb_reads_is_refused_as_a_typo(
    capsys: pytest.CaptureFixture[str], flags: str, meant: str
) -> None:
    code = main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", f"{LAYOUT} {flags}", "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and f"did you mean {meant}?" in captured.err


def test_megatrons_own_flags_near_one_ppb_reads_are_read_past(capsys: pytest.CaptureFixture[str]) -> None:
    # all three are Megatron-LM's at d98e8a64 (arguments.py `--fp4-param-gather` and
    # `--megatron-fsdp-main-params-dtype` beside `--megatron-fsdp-main-grads-dtype`; transformer_config.py's
    # `fp4` field named `--fp4-format` beside `--fp8-format`), each a letter or two off a flag ppb reads
    flags = "--fp4-param-gather --megatron-fsdp-main-params-dtype fp32"
    code = main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", f"{LAYOUT} {flags}", "--no-optimum", "-q"])
    assert code == 0, capsys.readouterr().err
    assert parse_flags(f"{LAYOUT} --fp4-format e2m1").layout is not None  # read past, not refused


def test_the_recompute_priced_is_said_in_the_run_configs_words(capsys: pytest.CaptureFixture[str]) -> None:
    # the text's line named the modules as Python's list, "modules ['core_attn', 'mlp']" (session 33)
    flags = f"{LAYOUT} --recompute-granularity selective --recompute-modules core_attn mlp"
    assert main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", flags, "--no-optimum"]) == 0
    out = capsys.readouterr().out
    assert "recompute priced as the plan says (granularity selective, modules [core_attn, mlp])" in out
